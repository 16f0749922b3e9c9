"""The pure core: typed models, rules and names, with no I/O and no clock. The workflows import only this package
(the `workflow` import contract), so the workflow sandbox passes it through.

`models` (policies, the job request, activity inputs and outputs, the job status), `states` (the job state
machine), `errors` (failure codes), `contract` (the `DocumentJob` workflow as an API), `batching` (batch models
and rules), `canonical` (canonical JSON), `idempotency` (client keys), `sealing` (payload keys), `linear_regex`
(RE2), `stamp_text` (what a watermark can show), `metric_names`, `timeline` (a job's story in words) and `costs`
(what released documents cost).
"""
