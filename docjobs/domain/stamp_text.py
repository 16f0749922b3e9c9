"""The text a watermark can carry: what the stamp font (embedded Docjobs Stamp Sans, WinAnsiEncoding) can show.

Pure, so the policy model checks a watermark when a job is accepted (and the workflow's sandbox loads no PDF
library for it); both stamp modes encode the text with the same rules.
"""

from __future__ import annotations

MAX_TEXT_CHARS = 200


def encode_text(text: str) -> bytes:
    """The watermark text in WinAnsiEncoding, whose every character the embedded stamp font maps.

    Raises ValueError for text no watermark can carry (empty, control characters, too long, or
    outside WinAnsi): that is a bad job parameter, best rejected when the job is submitted.
    """
    if not text.strip() or not text.isprintable() or len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"watermark text must be 1..{MAX_TEXT_CHARS} printable characters")
    try:
        return text.encode("cp1252")
    except UnicodeEncodeError:
        raise ValueError("watermark text must be representable in WinAnsiEncoding (Latin-1)") from None
