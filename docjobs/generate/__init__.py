"""Documents made from HTML, a zip bundle or a stored template with JSON data (the `generate` stage).

Everything here runs in a document child (docjobs/isolation/child_pool.py): it unpacks the tenant's bundle with limits
(`bundle`), renders a template in Jinja's sandbox (`templating`) and lays the HTML out with WeasyPrint, whose
every fetch goes through a fetcher that serves only the job's own files (`fetcher`, `weasy`).
"""
