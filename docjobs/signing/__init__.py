"""PAdES signatures on released PDFs, and their verification (pyHanko). Plain functions on files.

Modules: `config` (where the key and the trust roots are), `dev_ca` (the development signer), `environment`
(the signer the environment configures, else the development one), `sign`, `verify`, `evidence` (the signed
statement of what a job did).

Signing
  `sign_pdf` appends one incremental update to the input: a PAdES signature (`/SubFilter
  /ETSI.CAdES.detached`, SHA-256, signed attributes with the signing certificate reference) in a new
  signature field, invisible unless `SignerConfig.visible`. Without a TSA the result is PAdES baseline
  B-B (the signing time is the signer's claim); with `tsa_url` an RFC 3161 signature timestamp from that
  TSA is embedded (B-T). No revocation data is embedded (no B-LT/B-LTA) and nothing is ever fetched.
  On an unsigned input the signature is a *certification* signature with DocMDP "no changes allowed":
  the artifact is final, so any later update (other than PAdES DSS/timestamp updates) voids it in
  pyHanko and Acrobat alike. On an input that already carries signatures (only with
  `allow_existing_signatures=True`) it is an approval signature, because a certification signature
  must be the first one in a document; it then locks every field and the document through its field's
  FieldMDP /Lock with DocMDP /P 1. Either way nothing may change after the release signature.
  The signature names the tenant who asked: `/Reason` "docjobs release for tenant NAME", and a signed
  CAdES signer-attributes-v2 claimed attribute (`group`: "docjobs tenant NAME").
  The work is split so that the key never reaches a process that parses the document: `prepare_signature`
  (a document child: the field, the dictionary and an empty hole; the certificate only) and
  `ReleaseSigner` (the worker: checks the byte range with byte and integer comparisons, hashes, makes the
  CMS, fills the hole). `sign_pdf` runs both halves in one process.

Verification
  `verify_pdf` validates the *last* regular signature of the file against the configured trust roots (a
  `SignerConfig`, or `TrustAnchors`: the certificates alone, what a document child gets),
  offline (`allow_fetching=False`, revocation "soft-fail": certificates without revocation data are
  accepted, and no CRL/OCSP is ever requested), and reports pyHanko's separate verdicts. `failure_code`
  turns a report into a stable failure code; the overall verdict is pyHanko's `bottom_line` *and* a
  coverage of the entire file.

The functions are synchronous and run pyHanko's coroutines with `asyncio.run`: call them from a thread
(an activity's thread pool, `asyncio.to_thread`), not from inside a running event loop.
"""
