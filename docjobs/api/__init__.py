"""HTTP ingress: upload a document, get an auditable job ID back at once; read, cancel, fetch, list.

`app.create_app` builds the API: `jobs` (the routes), `uploads` (spooling a bounded body), `deps` (the app's
context and the caller's tenant), `errors` (JSON `{"code", "message"}` for every error), `docs` (Swagger UI,
offline). `codec_server` is the separate endpoint that decrypts payloads for the Temporal Web UI and CLI.
"""
