"""The watermark's font is embedded, maps every character a watermark may carry, and pdffonts agrees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pikepdf
from fontTools.ttLib import TTFont
from reportlab.pdfgen.canvas import Canvas

from docjobs.domain.stamp_text import encode_text
from docjobs.pdf.stamp_font import FONT_FILE, STAMP_FONT
from docjobs.pdf.watermark import watermark_structure

# Every character a watermark may carry: the printable characters of WinAnsiEncoding.
WINANSI = "".join(c for c in bytes(range(32, 256)).decode("cp1252", errors="ignore") if c.isprintable())


def test_the_font_maps_every_character_a_watermark_may_carry() -> None:
    cmap = TTFont(FONT_FILE).getBestCmap()
    assert [c for c in WINANSI if ord(c) not in cmap] == []
    assert all(STAMP_FONT.widths[encode_text(c)[0] - 32] > 0 for c in WINANSI if c != " ")
    assert STAMP_FONT.widths[0] > 0  # the space


def test_a_stamped_page_has_every_font_embedded(tmp_path: Path) -> None:
    canvas = Canvas(str(source := tmp_path / "source.pdf"), invariant=True)
    canvas.drawString(72, 700, "Helvetica, not embedded, in the source")
    canvas.save()
    text = "Ünïcødé déjà vu — CONFIDENTIAL"
    watermark_structure(source, out := tmp_path / "out.pdf", text)
    listed = subprocess.run(["pdffonts", str(out)], capture_output=True, text=True, check=True).stdout.splitlines()
    stamp = [line for line in listed if "DocjobsStampSans" in line]
    assert len(stamp) == 1 and " yes yes " in stamp[0], listed  # embedded, a subset (its name is tagged)
    assert text in subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    with pikepdf.open(out) as pdf:
        fonts = [f for f in pdf.objects if isinstance(f, pikepdf.Dictionary) and f.get("/Subtype") == "/TrueType"]
        (font,) = fonts
        assert font.FontDescriptor.FontFile2.read_bytes() == FONT_FILE.read_bytes()
