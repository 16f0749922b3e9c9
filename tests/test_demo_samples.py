"""The demo's Word memo (`demo/make_samples.py`, run as `make demo` runs it) is what acceptance and the render
stage's child take for a `.docx`, written the same every time (the same bytes make the same job, so a second
`make demo` reuses it)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from docjobs.generate.office import OfficeFormat, office_format
from docjobs.pdf.inspect import sniff_kind
from tests.conftest import REPO


def samples(folder: Path) -> Path:
    subprocess.run([sys.executable, str(REPO / "demo" / "make_samples.py"), str(folder)], check=True, timeout=120)
    return folder / "memo.docx"


def test_the_memo_is_a_docx_of_three_parts_written_the_same_every_time(tmp_path: Path) -> None:
    memo = samples(tmp_path / "first")
    assert memo.read_bytes() == samples(tmp_path / "second").read_bytes()
    assert sniff_kind(memo.read_bytes()[:1024]) == "office"
    assert office_format(memo) == OfficeFormat.DOCX
    with zipfile.ZipFile(memo) as package:
        assert package.namelist() == ["[Content_Types].xml", "_rels/.rels", "word/document.xml"]
        assert package.testzip() is None
