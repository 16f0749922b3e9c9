"""Blobs at rest: `storage` (the blob store on disk, addressed by key and bound by sha256), `s3store` (the same on
S3), `batch_store` (a batch's manifest and outcomes), `templates` (stored templates per tenant) and `sweep` (what
a crash left behind)."""
