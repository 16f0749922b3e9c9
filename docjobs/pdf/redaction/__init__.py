"""Redaction for real: matches and regions removed from the content, fonts, images and document-level places, then
proven gone by an independent reader (the gate) before release.

`redact.redact_pdf` is the entry point; `patterns` finds values, `locate` places them on the page, `content`,
`images` and `scrub` remove them (`layout` re-sets the lines that held them, `subset` cuts the fonts that drew
them down), `gate` checks the result.
"""
