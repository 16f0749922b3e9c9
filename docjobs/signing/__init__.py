"""PAdES signatures on released PDFs, and their verification (pyHanko). Plain functions on files.

Modules: `config` (where the key and the trust roots are), `dev_ca` (the development signer), `sign`, `verify`.

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
  must be the first one in a document.

Verification
  `verify_pdf` validates the *last* regular signature of the file against the configured trust roots,
  offline (`allow_fetching=False`, revocation "soft-fail": certificates without revocation data are
  accepted, and no CRL/OCSP is ever requested), and reports pyHanko's separate verdicts. `failure_code`
  turns a report into a stable failure code; the overall verdict is pyHanko's `bottom_line` *and* a
  coverage of the entire file.

The functions are synchronous and run pyHanko's coroutines with `asyncio.run`: call them from a thread
(an activity's thread pool, `asyncio.to_thread`), not from inside a running event loop.
"""
