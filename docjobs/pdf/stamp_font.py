"""The watermark's font, embedded: a stamped output then has no font a viewer must substitute (PDF/A asks it).

Docjobs Stamp Sans (fonts/README.md: Liberation Sans cut to WinAnsi, 17 KB, metric-compatible with the
standard-14 Helvetica the stamp drew unembedded before) is embedded whole, as a simple TrueType font with
WinAnsiEncoding: no subsetting per job, so stamping costs no font work, and one font object serves every page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pikepdf
from fontTools.ttLib import TTFont
from pikepdf import Name

FONT_FILE = Path(__file__).parent / "fonts" / "DocjobsStampSans-Regular.ttf"
BASE_FONT = "DJSTMP+DocjobsStampSans-Regular"  # a subset's name: a tag of six capitals, then the font's
FIRST_CODE, LAST_CODE = 32, 255
_NONSYMBOLIC = 1 << 5  # FontDescriptor /Flags: the standard Latin character set (glyphs found through Unicode)


@dataclass(frozen=True)
class StampFont:
    program: bytes
    widths: tuple[int, ...]  # advance of each code FIRST_CODE..LAST_CODE, 1/1000 em (0: no glyph)
    bbox: tuple[int, int, int, int]  # 1/1000 em
    ascent: int
    descent: int
    cap_height: int

    def width_em(self, encoded: bytes) -> float:
        """Width of WinAnsi-encoded text, in em."""
        return sum(self.widths[code - FIRST_CODE] for code in encoded if FIRST_CODE <= code <= LAST_CODE) / 1000

    def font_object(self, pdf: pikepdf.Pdf) -> pikepdf.Dictionary:
        """The font dictionary, its descriptor and its embedded program, made in `pdf`."""
        program = pdf.make_stream(self.program)
        program[Name.Length1] = len(self.program)
        descriptor = pikepdf.Dictionary(
            Type=Name.FontDescriptor,
            FontName=Name("/" + BASE_FONT),
            Flags=_NONSYMBOLIC,
            FontBBox=pikepdf.Array(self.bbox),
            ItalicAngle=0,
            Ascent=self.ascent,
            Descent=self.descent,
            CapHeight=self.cap_height,
            StemV=80,
            FontFile2=program,
        )
        return pikepdf.Dictionary(
            Type=Name.Font,
            Subtype=Name.TrueType,
            BaseFont=Name("/" + BASE_FONT),
            FirstChar=FIRST_CODE,
            LastChar=LAST_CODE,
            Widths=pikepdf.Array(self.widths),
            Encoding=Name.WinAnsiEncoding,
            FontDescriptor=pdf.make_indirect(descriptor),
        )


def _load(path: Path) -> StampFont:
    program = path.read_bytes()
    font = TTFont(path)
    scale = 1000 / font["head"].unitsPerEm
    cmap, metrics = font.getBestCmap(), font["hmtx"].metrics
    widths = []
    for code in range(FIRST_CODE, LAST_CODE + 1):
        try:
            glyph = cmap.get(ord(bytes([code]).decode("cp1252")))
        except UnicodeDecodeError:  # the five codes WinAnsi leaves undefined
            glyph = None
        widths.append(round(metrics[glyph][0] * scale) if glyph else 0)
    head, os2 = font["head"], font["OS/2"]
    bbox = tuple(round(value * scale) for value in (head.xMin, head.yMin, head.xMax, head.yMax))
    return StampFont(
        program=program,
        widths=tuple(widths),
        bbox=(bbox[0], bbox[1], bbox[2], bbox[3]),
        ascent=round(os2.sTypoAscender * scale),
        descent=round(os2.sTypoDescender * scale),
        cap_height=round(os2.sCapHeight * scale),
    )


STAMP_FONT = _load(FONT_FILE)  # read once per process: a document child's zygote has it before it forks
