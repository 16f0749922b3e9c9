"""Font programs that name their glyphs (bare CFF, Type 1) cut down to the glyphs a document still draws.

Both come out as a bare CFF program (for `/FontFile3`, `/Type1C` or `/CIDFontType0C`) holding .notdef and the
kept glyphs only: the removed glyphs' outlines and names (the CFF charset, the Type 1 CharStrings) are gone.

* A bare CFF program goes through fontTools' subsetter (the CFF table of an otherwise empty font), which drops
  the other charstrings, renumbers the glyphs and prunes the subroutines; a CID-keyed program keeps its CIDs in
  the charset, so the PDF's codes still reach the same glyphs.
* fontTools reads Type 1 (`t1Lib`) but writes none, so a Type 1 program is converted: each kept glyph is drawn
  from its Type 1 charstring (subroutines, flex and accented `seac` composites resolved by the drawing) into a
  Type 2 charstring, with the program's advance width, font matrix, font info and alignment zones. The stem
  hints are not carried over (fontTools' pen writes none): at small sizes a rasterizer may place a stem a
  pixel apart.

The built-in encoding of the program written maps the kept codes only; the caller also spells them out in the
font's /Differences, so a viewer draws the same glyphs whichever encoding it reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fontTools import subset as ftsubset
from fontTools.cffLib import TopDict
from fontTools.encodings.StandardEncoding import StandardEncoding
from fontTools.fontBuilder import FontBuilder
from fontTools.misc.psCharStrings import T2CharString
from fontTools.pens.recordingPen import RecordingPen
from fontTools.pens.t2CharStringPen import T2CharStringPen
from fontTools.t1Lib import T1Font
from fontTools.ttLib import TTFont, newTable

NOTDEF = ".notdef"
# Type 1 font info and private entries a CFF top / private dict holds alike (ISO 32000's Type1C is CFF 1.0).
_FONT_INFO = (
    "version",
    "Notice",
    "Copyright",
    "FullName",
    "FamilyName",
    "Weight",
    "ItalicAngle",
    "isFixedPitch",
    "UnderlinePosition",
    "UnderlineThickness",
)
_ZONES = ("BlueValues", "OtherBlues", "FamilyBlues", "FamilyOtherBlues", "BlueScale", "BlueShift", "BlueFuzz")


class ProgramError(Exception):
    """The program cannot be read or written back."""


@dataclass(frozen=True)
class NamedGlyphProgram:
    """A parsed bare CFF or Type 1 program."""

    kind: str  # "cff" or "type1"
    font: TTFont | T1Font
    glyphs: frozenset[str]  # glyph names (cidNNNNN for a CID-keyed CFF)
    builtin_encoding: Sequence[str | None]  # code -> glyph name, the program's own encoding (simple fonts)
    cid_keyed: bool = False

    @classmethod
    def read(cls, data: bytes, kind: str) -> NamedGlyphProgram:
        try:
            return _read_cff(data) if kind == "cff" else _read_type1(data)
        except Exception as error:  # noqa: BLE001 - fontTools raises many kinds on a malformed program
            raise ProgramError(str(error)) from None

    def subset(self, keep: set[str], encoding: Mapping[int, str]) -> bytes:
        """A bare CFF program with .notdef and the glyphs of `keep` it has, built-in `encoding` (code -> name)
        restricted to them (a CID-keyed program has none)."""
        try:
            kept = {NOTDEF, *(keep & self.glyphs)}
            if isinstance(self.font, T1Font):
                return _type1_as_cff(self.font, kept, encoding)
            return _subset_cff(self.font, kept, None if self.cid_keyed else encoding)
        except Exception as error:  # noqa: BLE001 - as in `read`
            raise ProgramError(str(error)) from None


def _read_cff(data: bytes) -> NamedGlyphProgram:
    font = TTFont()
    table = newTable("CFF ")
    table.decompile(data, font)
    if len(table.cff.fontNames) != 1:
        raise ProgramError("a CFF font set of other than one font")
    top = table.cff[table.cff.fontNames[0]]
    font["CFF "] = table
    font.setGlyphOrder(top.getGlyphOrder())
    cid_keyed = hasattr(top, "ROS")
    return NamedGlyphProgram("cff", font, frozenset(top.charset), _builtin(getattr(top, "Encoding", None)), cid_keyed)


def _read_type1(data: bytes) -> NamedGlyphProgram:
    font = T1Font.__new__(T1Font)  # from bytes: the constructor only reads files
    font.data, font.encoding = data, "ascii"
    glyphs = font.getGlyphSet()
    return NamedGlyphProgram("type1", font, frozenset(glyphs.keys()), _builtin(font["Encoding"]))


def _builtin(encoding: object) -> Sequence[str | None]:
    if isinstance(encoding, list):
        return [name if isinstance(name, str) and name != NOTDEF else None for name in encoding]
    standard: list[str] = StandardEncoding
    return standard  # the default of both (a CFF ExpertEncoding draws nothing a PDF's codes name)


def _subset_cff(font: TTFont, keep: set[str], encoding: Mapping[int, str] | None) -> bytes:
    options = ftsubset.Options()
    options.notdef_outline = True
    options.recalc_timestamp = False
    options.layout_features = []
    options.name_IDs = []
    subsetter = ftsubset.Subsetter(options)
    subsetter.populate(glyphs=sorted(keep))
    subsetter.subset(font)
    table = font["CFF "]
    top = table.cff[table.cff.fontNames[0]]
    if encoding is not None:
        top.Encoding = _encoding_list(encoding, set(top.charset))
    data: bytes = table.compile(font)
    return data


def _type1_as_cff(font: T1Font, keep: set[str], encoding: Mapping[int, str]) -> bytes:
    glyphs = font.getGlyphSet()
    order = [NOTDEF, *sorted(keep - {NOTDEF})]
    charstrings: dict[str, T2CharString] = {}
    for name in order:
        if name not in glyphs:  # a Type 1 program without .notdef: an empty one
            charstrings[name] = T2CharStringPen(0, None).getCharString()
            continue
        recording = RecordingPen()
        glyphs[name].draw(recording)  # sets the glyph's width (its hsbw)
        pen = T2CharStringPen(glyphs[name].width, glyphs)
        recording.replay(pen)
        charstrings[name] = pen.getCharString()
    info = font.font.get("FontInfo", {})
    top = {key: info[key] for key in _FONT_INFO if key in info}
    top["FontMatrix"] = list(font["FontMatrix"])
    private = {key: value for key, value in font["Private"].items() if key in _ZONES}
    builder = FontBuilder(1000, isTTF=False)
    builder.setupGlyphOrder(order)
    builder.setupCFF(str(font["FontName"]), top, charstrings, private)
    table = builder.font["CFF "]
    cff_top: TopDict = table.cff[table.cff.fontNames[0]]
    cff_top.Encoding = _encoding_list(encoding, set(order))
    data: bytes = table.compile(builder.font)
    return data


def _encoding_list(encoding: Mapping[int, str], names: set[str]) -> list[str]:
    """A CFF custom encoding: the codes of `encoding` whose glyphs the program has, .notdef elsewhere."""
    return [name if (name := encoding.get(code)) in names and name != NOTDEF else NOTDEF for code in range(256)]
