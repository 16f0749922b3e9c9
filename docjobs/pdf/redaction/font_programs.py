"""Embedded font programs, for font scrubbing (docjobs/pdf/redaction/subset.py): which kind a font embeds, a
TrueType or OpenType program read and cut down to some glyphs with fontTools, the code-to-glyph maps viewers read
it through, and the program written back under a subset tag derived from what it keeps.
"""

from __future__ import annotations

import hashlib
import io
import string
from dataclasses import dataclass
from struct import error as struct_error

import pikepdf
from fontTools import subset as ftsubset
from fontTools.ttLib import TTFont, TTLibError, newTable
from fontTools.ttLib.reorderGlyphs import reorderGlyphs
from fontTools.ttLib.tables._c_m_a_p import CmapSubtable
from pdfminer.encodingdb import EncodingDB
from pdfminer.psparser import LIT
from pikepdf import Name

from docjobs.pdf.budgets import Budgets, decoded_size
from docjobs.pdf.redaction.fonts import descendant_font


class NotSafe(Exception):
    """This font cannot be re-subset safely."""


@dataclass(frozen=True)
class Program:
    stream: pikepdf.Stream
    kind: str  # "truetype", "opentype", "cff" (bare CFF: Type1C, CIDFontType0C) or "type1"


FONT_FILE3_KINDS = {"/OpenType": "opentype", "/Type1C": "cff", "/CIDFontType0C": "cff"}


def embedded_program(descriptor: pikepdf.Object | None, budgets: Budgets) -> tuple[pikepdf.Dictionary, Program] | None:
    """The descriptor and its embedded program (None when there is none); a program of another kind is not
    safe."""
    if not isinstance(descriptor, pikepdf.Dictionary):
        return None
    if Name.FontFile in descriptor:
        program, kind = descriptor.FontFile, "type1"
    elif Name.FontFile2 in descriptor:
        program, kind = descriptor.FontFile2, "truetype"
    elif Name.FontFile3 in descriptor:
        program = descriptor.FontFile3
        subtype = str(program.get(Name.Subtype, "")) if isinstance(program, pikepdf.Stream) else ""
        if subtype not in FONT_FILE3_KINDS:
            raise NotSafe
        kind = FONT_FILE3_KINDS[subtype]
    else:
        return None
    if not isinstance(program, pikepdf.Stream):
        raise NotSafe
    decoded_size(program, limit=budgets.max_stream_bytes)
    return descriptor, Program(program, kind)


def program_kind(font: pikepdf.Object | None) -> str:
    """The kind of program a font dictionary embeds, as the summary names it: `truetype`, `opentype`, `cff`,
    `type1`, `type3`, `unembedded` or `unknown`."""
    if not isinstance(font, pikepdf.Dictionary):
        return "unknown"
    if font.get(Name.Subtype) == Name.Type3:
        return "type3"
    if font.get(Name.Subtype) == Name.Type0:
        font = descendant_font(font)
    descriptor = font.get(Name.FontDescriptor) if isinstance(font, pikepdf.Dictionary) else None
    if not isinstance(descriptor, pikepdf.Dictionary):
        return "unembedded"
    program = descriptor.get(Name.FontFile3)
    if Name.FontFile in descriptor:
        return "type1"
    if Name.FontFile2 in descriptor:
        return "truetype"
    if isinstance(program, pikepdf.Stream):
        return FONT_FILE3_KINDS.get(str(program.get(Name.Subtype, "")), "unknown")
    return "unknown" if program is not None else "unembedded"


def read_truetype(program: pikepdf.Stream) -> TTFont:
    try:
        ttf = TTFont(io.BytesIO(program.read_bytes()), recalcTimestamp=False, lazy=False)
        ttf.getGlyphOrder()
    except (TTLibError, pikepdf.PdfError, AssertionError, KeyError, ValueError, struct_error):
        raise NotSafe from None
    return ttf


def code_cmap(ttf: TTFont, font: pikepdf.Dictionary) -> tuple[dict[int, str], bool]:
    """Byte code -> glyph name as viewers read a simple TrueType (ISO 32000-2, 9.6.5.4), and whether read by code
    (not through Unicode): a font with a named encoding or the Nonsymbolic flag through its encoding's Unicode and the
    program's (3,1) cmap when it has one, else through the program's (3,0) or (1,0) cmap (keyed by code, or by
    0xF000 + code). Read through the (1,0) cmap instead, a WinAnsi code such as the right quote would keep another
    glyph (MacRoman's), and one MacRoman lacks no glyph at all."""
    if "cmap" not in ttf:
        raise NotSafe
    unicode_table = ttf["cmap"].getcmap(3, 1)
    if unicode_table is not None and nonsymbolic(font):
        glyphs: dict[int, str] = unicode_table.cmap
        return {code: glyphs[ord(text)] for code, text in _unicode_encoding(font).items() if ord(text) in glyphs}, False
    for platform, encoding in ((3, 0), (1, 0)):
        table = ttf["cmap"].getcmap(platform, encoding)
        if table is not None:
            return dict(table.cmap), True
    raise NotSafe  # a symbolic font without a (3,0) or (1,0) cmap


_NAMED_ENCODINGS = (Name.WinAnsiEncoding, Name.MacRomanEncoding)


_NONSYMBOLIC_FLAG = 1 << 5


def nonsymbolic(font: pikepdf.Dictionary) -> bool:
    encoding = font.get(Name.Encoding)
    base = encoding.get(Name.BaseEncoding) if isinstance(encoding, pikepdf.Dictionary) else encoding
    descriptor = font.get(Name.FontDescriptor)
    flags = descriptor.get(Name.Flags, 0) if isinstance(descriptor, pikepdf.Dictionary) else 0
    return base in _NAMED_ENCODINGS or bool(int(flags) & _NONSYMBOLIC_FLAG)


def _unicode_encoding(font: pikepdf.Dictionary) -> dict[int, str]:
    """Code -> the one character its glyph name stands for: the base encoding (Standard by default) with the
    /Differences applied (a name without a Unicode value maps nothing)."""
    encoding = font.get(Name.Encoding)
    base = encoding.get(Name.BaseEncoding) if isinstance(encoding, pikepdf.Dictionary) else encoding
    differences = encoding.get(Name.Differences) if isinstance(encoding, pikepdf.Dictionary) else None
    items = [
        int(item) if isinstance(item, int) else LIT(str(item)[1:])
        for item in (differences if isinstance(differences, pikepdf.Array) else ())
        if isinstance(item, (int, pikepdf.Name))
    ]
    name = str(base)[1:] if base in _NAMED_ENCODINGS else "StandardEncoding"
    return {code: text for code, text in EncodingDB.get_encoding(name, items).items() if len(text) == 1}


def subset_program(
    ttf: TTFont, glyphs: set[str], first: list[str] | None = None, codes: dict[int, str] | None = None
) -> bytes:
    """`ttf` cut down to `glyphs` (and .notdef) in place, as program bytes; with `first`, glyph 0 is followed
    by the glyphs of `first` in its order, then the components they are built of as they are first met, so the
    order tells nothing of the original program's. With `codes` (a simple font's code -> glyph), the cmap becomes
    the symbolic (3,0) and (1,0) subtables that reach them, which the subsetter would drop."""
    options = ftsubset.Options()
    options.notdef_outline = True
    options.recalc_timestamp = False
    options.layout_features = []
    options.layout_closure = False
    options.name_IDs = ["*"]
    options.drop_tables += ["GSUB", "GPOS", "GDEF", "kern", "JSTF", "MATH", "BASE"]
    subsetter = ftsubset.Subsetter(options)
    without_cmap = "cmap" not in ttf  # a CIDFontType2 program needs none (its CIDToGIDMap finds glyphs)
    if without_cmap:  # the subsetter does
        cmap = newTable("cmap")
        cmap.tableVersion, cmap.tables = 0, []
        ttf["cmap"] = cmap
    try:
        subsetter.populate(glyphs=sorted({".notdef"} & set(ttf.getGlyphOrder()) | glyphs))
        subsetter.subset(ttf)
        if first is not None:
            reorderGlyphs(ttf, _glyph_order(ttf, first))
        if without_cmap and "OS/2" in ttf:  # the producer's character range: no cmap for the subsetter to renew it
            ttf["OS/2"].usFirstCharIndex = ttf["OS/2"].usLastCharIndex = 0
        if codes is not None:
            by_byte = 0 if all(ttf.getGlyphID(glyph) < 256 for glyph in codes.values()) else 6  # 0: one-byte ids
            ttf["cmap"].tables = [
                _cmap_subtable(4, (3, 0), {0xF000 + code: glyph for code, glyph in codes.items()}),
                _cmap_subtable(by_byte, (1, 0), codes),
            ]
        data = io.BytesIO()
        ttf.save(data)
    except (TTLibError, AssertionError, KeyError, ValueError, struct_error):
        raise NotSafe from None
    return data.getvalue()


def _cmap_subtable(form: int, platform: tuple[int, int], glyphs: dict[int, str]) -> CmapSubtable:
    table = CmapSubtable.newSubtable(form)
    (table.platformID, table.platEncID), table.language, table.cmap = platform, 0, glyphs
    return table


def _glyph_order(ttf: TTFont, first: list[str]) -> list[str]:
    present = ttf.getGlyphOrder()
    order = list(dict.fromkeys([present[0], *first]))
    glyf = ttf.get("glyf")
    index = 0
    while glyf is not None and index < len(order):  # grows as it goes: components of components
        glyph = glyf[order[index]]
        if glyph.isComposite():
            order += [name for name in glyph.getComponentNames(glyf) if name not in order]
        index += 1
    return list(dict.fromkeys([*order, *present]))


def write_program(pdf: pikepdf.Pdf, descriptor: pikepdf.Dictionary, old: Program, data: bytes) -> None:
    program = pdf.make_stream(data)
    program.Length1 = len(data)
    if Name.Subtype in old.stream:
        program.Subtype = old.stream.Subtype
    key = Name.FontFile2 if Name.FontFile2 in descriptor else Name.FontFile3
    descriptor[key] = program


def cid_to_gid(mapping: pikepdf.Object | None, budgets: Budgets) -> CidToGid:
    if mapping is None or mapping == Name.Identity:
        return CidToGid(None)
    if not isinstance(mapping, pikepdf.Stream):
        raise NotSafe
    decoded_size(mapping, limit=budgets.max_stream_bytes)
    return CidToGid(mapping.read_bytes())


@dataclass(frozen=True)
class CidToGid:
    table: bytes | None  # None: Identity

    def __call__(self, cid: int) -> int:
        if self.table is None:
            return cid
        if 2 * cid + 2 > len(self.table):
            raise NotSafe
        return int.from_bytes(self.table[2 * cid : 2 * cid + 2], "big")


def retag(program: bytes, holders: tuple[pikepdf.Object | None, ...]) -> None:
    """A subset tag (`ABCDEF+`) some producers derive from the glyphs used: a new one from the program kept."""
    digest = hashlib.sha256(program).digest()
    tag = "".join(string.ascii_uppercase[byte % 26] for byte in digest[:6])
    for holder in holders:
        if not isinstance(holder, pikepdf.Dictionary):
            continue
        for key in (Name.BaseFont, Name.FontName):
            value = holder.get(key)
            name = str(value)[1:] if isinstance(value, Name) else ""
            if len(name) > 7 and name[6] == "+" and name[:6].isalpha() and name[:6].isupper():
                holder[key] = Name("/" + tag + name[6:])
