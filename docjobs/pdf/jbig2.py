"""JBIG2 images are decoded by an external program, jbig2dec, which pikepdf runs for qpdf's stream checks and
for reading an image's samples. Its input is the document's bytes and its output size is the JBIG2 page's, not
the image's /Width and /Height that `check_pixels` counted: each run gets the stream budget as jbig2dec's own
memory limit (`-M`) and a timeout, on top of the child's limits."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from pikepdf.jbig2 import JBIG2Decoder, set_decoder

DECODE_TIMEOUT_SECONDS = 60


def bound_jbig2_decoder(max_bytes: int) -> None:
    """Make pikepdf run jbig2dec with at most `max_bytes` of memory and DECODE_TIMEOUT_SECONDS, in this process.

    Over either, jbig2dec fails and the stream reads as undecodable."""

    def run(args: Sequence[str], **options: Any) -> subprocess.CompletedProcess[bytes]:
        program, *rest = args
        return subprocess.run([program, "-M", str(max_bytes), *rest], timeout=DECODE_TIMEOUT_SECONDS, **options)

    set_decoder(JBIG2Decoder(subprocess_run=run))  # type: ignore[no-untyped-call]  # pikepdf leaves __init__ untyped
