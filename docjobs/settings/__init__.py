"""What a deployment is set up with: `config` (every `DOCJOBS_*` variable), `policies` (the policy file, with the
shipped `policies.toml`), `tenants` (the tenants file and API keys), `quotas` (each tenant's limits and the bytes
it had accepted today) and `webhooks` (a tenant's callback URL, and delivery to it)."""
