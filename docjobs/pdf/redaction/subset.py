"""Font scrubbing after redaction: a font that lost glyphs keeps only what the document still draws.

An embedded subset font carries the outlines of every glyph its producer used, and its /Widths (or /W),
/ToUnicode, /Encoding /Differences and /CIDSet list them by code: after a name is removed they still tell
which letters it had. For every font a redaction removed glyphs from, the codes still drawn anywhere in the
document (page content, Form XObjects, tiling patterns, annotation appearances) are collected; the font
program is re-subset with fontTools to the glyphs of those codes (glyph ids renumbered, so not even the count
of the removed ones remains; layout tables dropped), the width, ToUnicode, Differences and CIDSet entries of
every other code are dropped, and the subset tag is derived from what is kept.

Producers that number codes in order of first use would still tell, through the kept codes, how many distinct
new letters the removed text brought. So a font with a TrueType program whose codes mean no letter (a Type0 font
over a CIDFontType2; a symbolic simple TrueType font without an encoding, as LibreOffice writes its subsets) gets
new codes, dense in order of first use in the released document, in every string it shows and in its entries and
program alike (see `_fresh_codes` for which, and when its codes cannot be rewritten safely and stay as they
were). A simple TrueType program read by code through its (3,0) or (1,0) cmap gets that cmap written
anew: the subsetter drops it.

Programs re-subset: TrueType (/FontFile2) and OpenType (/FontFile3 /OpenType) of simple TrueType fonts (codes
to glyphs as viewers map them: see `_code_cmap`) and of Type0 fonts with Identity-H over a
CIDFontType2 (CIDToGIDMap Identity or a stream; its program may lack a cmap); Type1 (/FontFile) and bare CFF
(/FontFile3 /Type1C) of simple fonts, written back as a bare CFF program with the drawn codes spelled out in
/Differences, and CID-keyed bare CFF (/CIDFontType0C) of Type0 fonts over a CIDFontType0 (see `named_glyphs`).
Any other embedded program that lost glyphs, one fontTools cannot read or write, and one whose drawn codes cannot
all be read or mapped to glyphs cannot be re-subset safely: the pages that draw it are returned for the raster
fallback (reason `font_not_resubset`, with the kinds of the fonts), after which nothing references it. A font
without an embedded program only loses the entries. A font the form's default resources (/AcroForm /DR) offer for
new field values, with which a viewer may draw any glyph, is offered as Helvetica instead
(`_offer_standard_fonts`) and re-subset like the others.
"""

from __future__ import annotations

import hashlib
import io
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from struct import error as struct_error

import pikepdf
from fontTools import subset as ftsubset
from fontTools.ttLib import TTFont, TTLibError, newTable
from fontTools.ttLib.reorderGlyphs import reorderGlyphs
from fontTools.ttLib.tables._c_m_a_p import CmapSubtable
from pdfminer.cmapdb import CMapParser, FileUnicodeMap
from pdfminer.encodingdb import EncodingDB
from pdfminer.psparser import LIT
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, OperatorBudget, decoded_size
from docjobs.pdf.redaction.fonts import descendant_font, font_model, glyph_names
from docjobs.pdf.redaction.named_glyphs import NamedGlyphProgram, ProgramError
from docjobs.pdf.redaction.regions import UnsafePage
from docjobs.pdf.redaction.resources import Instruction, inherited_resources
from docjobs.pdf.redaction.stream import parse_instructions

FALLBACK_REASON = "font_not_resubset"
_SHOWS = ("Tj", "TJ", "'", '"')
FontId = tuple[int, int]


class _NotSafe(Exception):
    """This font cannot be re-subset safely."""


@dataclass(frozen=True)
class FontScrub:
    resubset: int  # embedded programs re-subset
    fallback: dict[int, str]  # page -> reason, for the pages whose fonts could not be
    kinds: dict[int, list[str]] = field(default_factory=dict)  # those pages -> their fonts' kinds (_program_kind)


def scrub_fonts(pdf: pikepdf.Pdf, touched: set[FontId], *, budgets: Budgets = DEFAULT_BUDGETS) -> FontScrub:
    """Cut every font in `touched` (object ids of font dictionaries that lost glyphs) down to the codes the
    document still draws, in place; the caller saves."""
    if not touched:
        return FontScrub(0, {})
    sharing = _Sharing.of(pdf, touched)
    cut = touched | sharing.fellows
    usage = _Usage(cut, budgets)
    usage.collect(pdf)
    sharing.pool(usage)
    _offer_standard_fonts(pdf, cut)
    unsafe = set(usage.unsure) | sharing.unsafe
    fresh = sharing.agree({key: _fresh_codes(pdf.get_object(key), key, usage) for key in sorted(cut - unsafe)})
    resubset = 0
    renumbered: dict[FontId, dict[int, int]] = {}
    written: dict[FontId, bytes] = {}  # a renumbered group's shared CIDFont or descriptor -> its program, once
    for key in sorted(cut - unsafe):
        font = pdf.get_object(key)
        drawn = list(usage.codes.get(key, {}))
        codes = dict(zip(drawn, fresh[key], strict=False))
        try:
            if codes:
                resubset += _scrub_renumbered(pdf, font, codes, budgets, written)
            else:
                resubset += _scrub(pdf, font, {code: code for code in drawn}, budgets)
        except _NotSafe:
            unsafe.add(key)
            continue
        if codes:
            renumbered[key] = codes
    if renumbered:
        usage.renumber(pdf, renumbered)
    kinds: dict[int, set[str]] = {}
    for key in unsafe:
        for page in usage.pages.get(key, set()):
            kinds.setdefault(page, set()).add(_program_kind(pdf.get_object(key)))
    return FontScrub(
        resubset,
        dict.fromkeys(sorted(kinds), FALLBACK_REASON),
        {page: sorted(kinds[page]) for page in sorted(kinds)},
    )


@dataclass
class _Sharing:
    """Fonts whose cutting down writes to what another font dictionary draws with: a Type0 font's CIDFont, a
    font's descriptor (where its program is kept). A producer may write a Type0 font per page over one CIDFont, or
    a simple font per page over one descriptor. Fonts that read the same codes as the same glyphs there (Type0
    fonts over one CIDFont; simple fonts of one kind with the same encoding) are cut down together, each to the
    codes any of them draws (`pool`), and re-numbered together or not at all (`agree`): one mapping for the
    program they share and the strings of each; a touched font sharing with one that reads its codes otherwise
    cannot be cut down for both: unsafe."""

    groups: list[set[FontId]] = field(default_factory=list)  # fonts cut down together, a touched one among them
    unsafe: set[FontId] = field(default_factory=set)

    @property
    def fellows(self) -> set[FontId]:
        return {key for group in self.groups for key in group}

    @classmethod
    def of(cls, pdf: pikepdf.Pdf, touched: set[FontId]) -> _Sharing:
        by_descriptor: dict[FontId, list[tuple[FontId, str]]] = {}  # descriptor -> (font, how it reads its codes)
        for obj in pdf.objects:
            if not (isinstance(obj, pikepdf.Dictionary) and obj.get(Name.Type) == Name.Font and obj.is_indirect):
                continue
            if obj.get(Name.Subtype) in (Name.CIDFontType0, Name.CIDFontType2):
                continue  # a CIDFont: read through the Type0 fonts over it
            descendant = descendant_font(obj)
            holder = descendant if isinstance(descendant, pikepdf.Dictionary) else obj
            descriptor = _id(holder.get(Name.FontDescriptor))
            if descriptor is not None:
                reading = (
                    f"cidfont {_id(descendant)}"
                    if descendant is not None
                    else f"{obj.get(Name.Subtype)!r} {obj.get(Name.Encoding)!r}"
                )
                by_descriptor.setdefault(descriptor, []).append((obj.objgen, reading))
        sharing = cls()
        for fonts in by_descriptor.values():
            keys = {key for key, _ in fonts}
            if len(keys) < 2 or not keys & touched:
                continue
            if len({reading for _, reading in fonts}) > 1:
                sharing.unsafe.update(keys & touched)
            elif keys not in sharing.groups:
                sharing.groups.append(keys)
        return sharing

    def pool(self, usage: _Usage) -> None:
        """Each font of a group draws, as far as cutting down goes, what any of them draws (in order of first use,
        font by font: the same order for each). A group one of whose fonts draws codes that cannot be told is
        unsafe as a whole."""
        for group in self.groups:
            if group & usage.unsure:
                self.unsafe.update(group)
                continue
            pooled: dict[int, None] = {}
            for key in sorted(group):
                pooled.update(usage.codes.get(key, {}))
            for key in group:
                usage.codes[key] = dict(pooled)

    def agree(self, fresh: dict[FontId, list[int]]) -> dict[FontId, list[int]]:
        """`fresh` (each font's new codes, see `_fresh_codes`) with a group's fonts re-numbered only when every one
        of them is, the same way (their pooled codes are the same): else none of them is."""
        for group in self.groups:
            if len({tuple(fresh.get(key, ())) for key in group}) > 1 or not group <= fresh.keys():
                fresh.update({key: [] for key in group if key in fresh})
        return fresh


def _fresh_codes(font: pikepdf.Object, key: FontId, usage: _Usage) -> list[int]:
    """The codes the font's drawn codes get, in order of first use (none when they stay as they were). Re-numbered
    are the fonts with an embedded TrueType program (an OpenType one may hold CFF outlines, whose FDSelect is by
    glyph index) and a ToUnicode (extraction follows the new codes), every string of which is read in full from
    a stream that shows the same fonts wherever it is drawn (so each is rewritten once, the same way):

    * a Type0 font over a CIDFontType2 (its glyphs are reordered and its CIDToGIDMap rewritten with them): 1, 2,
      3...; without a ToUnicode a reader may take a CID for a character of its ordering;
    * a simple TrueType font whose codes mean no letter (no /Encoding, not Nonsymbolic: viewers reach its glyphs
      through the program's symbolic cmap, which is rewritten with them): 1, 2, 3... skipping 32, the one code word
      spacing applies to. One that draws code 32 in a document that sets a word spacing anywhere keeps its codes:
      moved, that glyph would lose the spacing, and kept in place, it would still tell how many came before it."""
    if (
        key in usage.fixed
        or not isinstance(font, pikepdf.Dictionary)
        or not isinstance(font.get(Name.ToUnicode), pikepdf.Stream)
        or _program_kind(font) != "truetype"
    ):
        return []
    drawn = usage.codes.get(key, {})
    if font.get(Name.Subtype) == Name.TrueType:
        if Name.Encoding in font or _nonsymbolic(font) or (32 in drawn and usage.word_spaced):
            return []
        fresh = [code for code in range(1, 256) if code != 32][: len(drawn)]
        return fresh if len(fresh) == len(drawn) else []
    descendant = descendant_font(font)
    if not isinstance(descendant, pikepdf.Dictionary) or descendant.get(Name.Subtype) != Name.CIDFontType2:
        return []
    return list(range(1, len(drawn) + 1))


@dataclass
class _Usage:
    """The codes each wanted font draws (in order of first use), and the pages it draws them on; then, once
    `renumber` is given the new codes, the walk that rewrites every string those fonts show."""

    wanted: set[FontId]
    budgets: Budgets
    codes: dict[FontId, dict[int, None]] = field(default_factory=dict)  # ordered: first use first
    pages: dict[FontId, set[int]] = field(default_factory=dict)
    unsure: set[FontId] = field(default_factory=set)
    fixed: set[FontId] = field(default_factory=set)  # cut down, but their codes cannot be re-numbered
    shown_by: dict[FontId, list[FontId | None]] = field(default_factory=dict)  # stream -> its strings' fonts
    word_spaced: bool = False  # a word spacing (Tw, ") other than 0 is set somewhere
    renumbered: dict[FontId, dict[int, int]] = field(default_factory=dict)  # font -> old code -> new code
    rewritten: set[FontId] = field(default_factory=set)  # streams the renumbering walk has been through

    def collect(self, pdf: pikepdf.Pdf) -> None:
        operators = OperatorBudget(self.budgets)
        for number, page in enumerate(pdf.pages, start=1):
            seen: set[tuple[FontId, FontId | None]] = set()
            self._walk(pdf, page.obj, inherited_resources(page.obj), None, number, operators, seen, 0)
            for appearance in _appearances(page.obj):
                self._walk(pdf, appearance, appearance.get(Name.Resources), None, number, operators, seen, 1)

    def renumber(self, pdf: pikepdf.Pdf, codes: dict[FontId, dict[int, int]]) -> None:
        """Rewrite every string the fonts of `codes` show with their new codes: each page's content into a new
        stream of its own, each Form XObject, pattern and appearance stream in place, once."""
        self.renumbered = codes
        self.collect(pdf)

    def _walk(
        self,
        pdf: pikepdf.Pdf,
        owner: pikepdf.Object,
        resources: pikepdf.Object | None,
        font: pikepdf.Object | None,
        page: int,
        operators: OperatorBudget,
        seen: set[tuple[FontId, FontId | None]],
        depth: int,
    ) -> None:
        if depth > self.budgets.max_depth:
            self._doubt(resources)
            return
        shared = isinstance(owner, pikepdf.Stream) and owner.is_indirect
        if self.renumbered and shared:
            if owner.objgen in self.rewritten:
                return
            self.rewritten.add(owner.objgen)
        resources = resources if isinstance(resources, pikepdf.Dictionary) else pikepdf.Dictionary()
        try:
            target = owner if isinstance(owner, pikepdf.Stream) else pikepdf.Page(owner)
            instructions, repaired = _parse(target, operators)
        except (pikepdf.PdfError, TypeError, ValueError):
            self._doubt(resources)  # its codes are unknown: no font it may use is cut down
            return
        shows: list[FontId | None] = []
        changed = False
        stack: list[pikepdf.Object | None] = []
        for index, instruction in enumerate(instructions):
            if isinstance(instruction, pikepdf.ContentStreamInlineImage):
                continue
            operator, operands = str(instruction.operator), list(instruction.operands)
            if operator in ("Tw", '"') and operands and operands[0] != 0:
                self.word_spaced = True
            if operator == "q":
                stack.append(font)
            elif operator == "Q" and stack:
                font = stack.pop()
            elif operator == "Tf" and operands:
                font = _entry(resources, Name.Font, operands[0])
            elif operator == "gs" and operands:
                state = _entry(resources, Name.ExtGState, operands[0])
                chosen = state.get(Name.Font) if isinstance(state, pikepdf.Dictionary) else None
                if isinstance(chosen, pikepdf.Array) and len(chosen):
                    font = chosen[0]
            elif operator in _SHOWS and operands:
                shown = _id(font)
                shows.append(shown)
                mapping = self.renumbered.get(shown) if shown is not None else None
                if mapping is not None:
                    composite = isinstance(font, pikepdf.Dictionary) and font.get(Name.Subtype) == Name.Type0
                    operands[-1] = _renumbered(operands[-1], mapping, 2 if composite else 1)
                    instructions[index] = pikepdf.ContentStreamInstruction(operands, instruction.operator)
                    changed = True
                elif not self.renumbered:
                    self._shown(font, operands[-1], page)
            elif operator == "Do" and operands:
                xobject = _entry(resources, Name.XObject, operands[0])
                if isinstance(xobject, pikepdf.Stream) and xobject.get(Name.Subtype) == Name.Form:
                    key = (xobject.objgen, _id(font))
                    if not xobject.is_indirect or key not in seen:
                        seen.add(key)
                        inner = xobject.get(Name.Resources, resources)
                        self._walk(pdf, xobject, inner, font, page, operators, seen, depth + 1)
        for pattern in _tiling_patterns(resources):
            key = (pattern.objgen, None)
            if not pattern.is_indirect or key not in seen:
                seen.add(key)
                self._walk(pdf, pattern, pattern.get(Name.Resources), None, page, operators, seen, depth + 1)
        if changed:
            data = pikepdf.unparse_content_stream(instructions)
            if isinstance(owner, pikepdf.Stream):
                owner.write(data)
            else:  # a page's content may be an array of streams other pages share: a stream of its own
                owner.Contents = pdf.make_stream(data)
        elif not self.renumbered:
            self._judge(owner if shared else None, shows, repaired)

    def _judge(self, stream: pikepdf.Object | None, shows: list[FontId | None], repaired: bool) -> None:
        """Keep the codes of the wanted fonts a stream shows when rewriting it could change more than their
        strings: the parser repaired it (written back, what it skipped would be lost), or it is drawn elsewhere
        with other fonts (a Form XObject that inherits the caller's font), so one rewrite cannot suit both."""
        earlier = self.shown_by.setdefault(stream.objgen, shows) if stream is not None else shows
        if repaired or earlier != shows:
            self.fixed.update(key for key in (*earlier, *shows) if key in self.wanted)

    def _shown(self, font: pikepdf.Object | None, operand: pikepdf.Object, page: int) -> None:
        key = _id(font)
        if key is None or key not in self.wanted:
            return
        self.pages.setdefault(key, set()).add(page)
        model = font_model(font)
        if model.unknown_codes:
            self.unsure.add(key)
            return
        items = list(operand) if isinstance(operand, pikepdf.Array) else [operand]
        codes = self.codes.setdefault(key, {})
        for item in items:
            if isinstance(item, pikepdf.String):
                data = bytes(item)
                if model.two_byte and len(data) % 2:
                    self.fixed.add(key)  # a byte left over: the string cannot be rewritten code by code
                codes.update(dict.fromkeys(int.from_bytes(glyph.code, "big") for glyph in model.glyphs(data)))

    def _doubt(self, resources: pikepdf.Object | None) -> None:
        fonts = resources.get(Name.Font) if isinstance(resources, pikepdf.Dictionary) else None
        if isinstance(fonts, pikepdf.Dictionary):
            self.unsure.update(key for _, font in fonts.items() if (key := _id(font)) in self.wanted)


def _parse(target: pikepdf.Page | pikepdf.Stream, operators: OperatorBudget) -> tuple[list[Instruction], bool]:
    """The stream's instructions, and whether the parser had to repair it (see `parse_instructions`)."""
    try:
        return parse_instructions(target, operators), False
    except UnsafePage:
        return list(pikepdf.parse_content_stream(target)), True


def _renumbered(operand: pikepdf.Object, mapping: dict[int, int], width: int) -> pikepdf.Object:
    """A shown string (or TJ array) of `width`-byte codes with each code replaced by its new one."""

    def recoded(item: pikepdf.Object) -> pikepdf.Object:
        if not isinstance(item, pikepdf.String):
            return item
        data = bytes(item)
        return pikepdf.String(
            b"".join(
                mapping[int.from_bytes(data[i : i + width], "big")].to_bytes(width, "big")
                for i in range(0, len(data), width)
            )
        )

    if isinstance(operand, pikepdf.Array):
        return pikepdf.Array([recoded(item) for item in operand])
    return recoded(operand)


def _scrub(pdf: pikepdf.Pdf, font: pikepdf.Object, codes: dict[int, int], budgets: Budgets) -> int:
    """Scrub one font down to the drawn `codes` (old code -> new code, in order of first use: see `_fresh_codes`);
    1 when an embedded program was re-subset, 0 when only the entries were trimmed."""
    if not isinstance(font, pikepdf.Dictionary):
        raise _NotSafe
    if font.get(Name.Subtype) == Name.Type0:
        return _scrub_composite(pdf, font, codes, budgets)
    if font.get(Name.Subtype) in (Name.TrueType, Name.Type1, Name.MMType1):
        return _scrub_simple(pdf, font, codes, budgets)
    raise _NotSafe  # Type3 glyphs are never removed (their pages are burned in), so one here is unexpected


def _scrub_renumbered(
    pdf: pikepdf.Pdf, font: pikepdf.Object, codes: dict[int, int], budgets: Budgets, written: dict[FontId, bytes]
) -> int:
    """Scrub a font whose codes become `codes`' new ones. Fonts re-numbered together (`_Sharing.agree`) share a
    CIDFont or a descriptor: what they share (the program; a CIDFont's /W, /CIDToGIDMap and /CIDSet) is rewritten
    for the first of them only (`written`: shared holder -> its new program), each one's own entries for each."""
    if not isinstance(font, pikepdf.Dictionary):
        raise _NotSafe
    composite = font.get(Name.Subtype) == Name.Type0
    holder = descendant_font(font) if composite else font
    descriptor = holder.get(Name.FontDescriptor) if isinstance(holder, pikepdf.Dictionary) else None
    shared = _id(holder) if composite else _id(descriptor)
    if shared is None or shared not in written:
        resubset = _scrub(pdf, font, codes, budgets)
        program = descriptor.get(Name.FontFile2) if isinstance(descriptor, pikepdf.Dictionary) else None
        if shared is not None and isinstance(program, pikepdf.Stream):
            written[shared] = program.read_bytes()
        return resubset
    _retag(written[shared], (font,))
    if composite:
        _trim_to_unicode(pdf, font, codes, 2, budgets)
    else:
        _scrub_simple_entries(pdf, font, codes, budgets)
    return 0


def _scrub_simple(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets) -> int:
    """Scrub a simple font; its codes become `renumber`'s new ones (only a symbolic TrueType font's change: see
    `_fresh_codes`), and when they do, so does its program's glyph order: .notdef, then the glyphs by new code."""
    descriptor = font.get(Name.FontDescriptor)
    embedded = _program(descriptor, budgets)
    resubset = 0
    if embedded is not None:
        descriptor, program = embedded
        if program.kind in ("type1", "cff"):
            subset = _scrub_named_glyphs(pdf, font, program, set(renumber))
        else:
            ttf = _truetype(program.stream)
            cmap, by_code = _code_cmap(ttf, font)
            try:
                glyphs = {renumber[code]: cmap[code] if code in cmap else cmap[0xF000 + code] for code in renumber}
            except KeyError:
                raise _NotSafe from None
            by_new_code = [glyphs[code] for code in sorted(glyphs)]
            renumbered = any(old != new for old, new in renumber.items())
            subset = _subset(ttf, set(by_new_code), by_new_code if renumbered else None, glyphs if by_code else None)
            _write_program(pdf, descriptor, program, subset)
        _retag(subset, (font, descriptor))
        resubset = 1
    _scrub_simple_entries(pdf, font, renumber, budgets)
    return resubset


def _scrub_simple_entries(
    pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets
) -> None:
    """A simple font's own entries down to the drawn codes, by their new ones: /Widths, /Differences, /ToUnicode
    (and its descriptor's /CharSet)."""
    descriptor = font.get(Name.FontDescriptor)
    widths = font.get(Name.Widths)
    if isinstance(widths, pikepdf.Array) and renumber:
        first = int(font.get(Name.FirstChar, 0))
        missing = descriptor.get(Name.MissingWidth, 0) if isinstance(descriptor, pikepdf.Dictionary) else 0
        old = {new: code for code, new in renumber.items()}
        low, high = min(old), max(old)
        font.Widths = pikepdf.Array(
            [
                (widths[old[new] - first] if 0 <= old[new] - first < len(widths) else missing) if new in old else 0
                for new in range(low, high + 1)
            ]
        )
        font.FirstChar, font.LastChar = low, high
    encoding = font.get(Name.Encoding)
    differences = encoding.get(Name.Differences) if isinstance(encoding, pikepdf.Dictionary) else None
    if isinstance(encoding, pikepdf.Dictionary) and isinstance(differences, pikepdf.Array):
        encoding.Differences = _differences(differences, set(renumber))
    if isinstance(descriptor, pikepdf.Dictionary) and Name.CharSet in descriptor:
        del descriptor[Name.CharSet]  # glyph names, the removed ones among them
    _trim_to_unicode(pdf, font, renumber, 1, budgets)


def _scrub_composite(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets) -> int:
    """Scrub a Type0 font with Identity-H; its CIDs become `renumber`'s new ones, and when they change, so does
    the glyph order of its CIDFontType2 program: .notdef, then the glyphs by their new CIDs."""
    codes = set(renumber)
    renumbered = any(old != new for old, new in renumber.items())
    descendant = descendant_font(font)
    if font.get(Name.Encoding) != Name("/Identity-H") or not isinstance(descendant, pikepdf.Dictionary):
        raise _NotSafe
    embedded = _program(descendant.get(Name.FontDescriptor), budgets)
    model = font_model(font)
    if embedded is not None and embedded[1].kind == "cff":
        descriptor, program = embedded
        if descendant.get(Name.Subtype) != Name.CIDFontType0:
            raise _NotSafe
        subset = _scrub_cid_cff(pdf, descriptor, program, codes)
        _retag(subset, (font, descendant, descriptor))
    elif embedded is not None:
        descriptor, program = embedded
        if descendant.get(Name.Subtype) != Name.CIDFontType2:
            raise _NotSafe
        to_gid = _cid_to_gid(descendant.get(Name.CIDToGIDMap), budgets)
        ttf = _truetype(program.stream)
        order = ttf.getGlyphOrder()
        gids = {cid: to_gid(cid) for cid in codes}
        if any(gid >= len(order) for gid in gids.values()):
            raise _NotSafe
        by_new_cid = [order[gids[cid]] for cid in sorted(codes, key=renumber.__getitem__)]
        subset = _subset(ttf, set(by_new_cid), by_new_cid if renumbered else None)
        _write_program(pdf, descriptor, program, subset)
        new_gids = {name: gid for gid, name in enumerate(ttf.getGlyphOrder())}
        table = bytearray(2 * (max(renumber.values(), default=0) + 1))
        for cid, gid in gids.items():
            table[2 * renumber[cid] : 2 * renumber[cid] + 2] = new_gids[order[gid]].to_bytes(2, "big")
        descendant.CIDToGIDMap = pdf.make_stream(bytes(table))
        _retag(subset, (font, descendant, descriptor))
    if embedded is not None and Name.CIDSet in embedded[0]:
        bits = bytearray((max(renumber.values(), default=0) + 8) // 8)
        for cid in {0, *renumber.values()}:
            bits[cid // 8] |= 0x80 >> (cid % 8)
        embedded[0].CIDSet = pdf.make_stream(bytes(bits))
    default = model.default_width if model.default_width is not None else 1.0
    listed = sorted((new, old) for old, new in renumber.items() if model.widths.get(old, default) != default)
    descendant.W = pikepdf.Array(
        [item for new, old in listed for item in (new, pikepdf.Array([round(model.widths[old] * 1000, 3)]))]
    )
    _trim_to_unicode(pdf, font, renumber, 2, budgets)
    return 1 if embedded is not None else 0


def _scrub_named_glyphs(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, program: _Program, codes: set[int]) -> bytes:
    """Re-subset a simple font's Type1 or bare CFF program to the glyphs of `codes` (embedded as `/Type1C`)
    and spell those codes out in its /Differences, so no viewer needs the built-in encoding that listed the
    others. A code whose glyph the program lacks draws .notdef, before and after."""
    try:
        source = NamedGlyphProgram.read(program.stream.read_bytes(), program.kind)
        if source.cid_keyed:
            raise _NotSafe  # a CID-keyed program under a simple font: codes do not name its glyphs
        names = glyph_names(font, source.builtin_encoding)
        drawn = {code: name for code in sorted(codes) if code < len(names) and (name := names[code]) is not None}
        data = source.subset(set(drawn.values()), drawn)
    except ProgramError:
        raise _NotSafe from None
    differences: list[pikepdf.Object | int] = []
    for code, name in drawn.items():
        differences += [code, Name("/" + name)]
    font.Encoding = pikepdf.Dictionary(Type=Name.Encoding, Differences=pikepdf.Array(differences))
    descriptor = font.FontDescriptor
    for key in (Name.FontFile, Name.FontFile2):
        if key in descriptor:
            del descriptor[key]
    descriptor.FontFile3 = pdf.make_stream(data, Subtype=Name.Type1C)
    return data


def _scrub_cid_cff(pdf: pikepdf.Pdf, descriptor: pikepdf.Dictionary, program: _Program, cids: set[int]) -> bytes:
    """Re-subset a CIDFontType0's CID-keyed CFF program to the glyphs of `cids`: its charset keeps their CIDs,
    so the codes still reach them. A name-keyed program there is drawn by glyph index (CID = GID), which
    renumbering would break: not safe."""
    try:
        source = NamedGlyphProgram.read(program.stream.read_bytes(), program.kind)
        if not source.cid_keyed:
            raise _NotSafe
        data = source.subset({f"cid{cid:05d}" for cid in cids}, {})
    except ProgramError:
        raise _NotSafe from None
    descriptor.FontFile3 = pdf.make_stream(data, Subtype=program.stream.get(Name.Subtype, Name.CIDFontType0C))
    return data


@dataclass(frozen=True)
class _Program:
    stream: pikepdf.Stream
    kind: str  # "truetype", "opentype", "cff" (bare CFF: Type1C, CIDFontType0C) or "type1"


_FONT_FILE3_KINDS = {"/OpenType": "opentype", "/Type1C": "cff", "/CIDFontType0C": "cff"}


def _program(descriptor: pikepdf.Object | None, budgets: Budgets) -> tuple[pikepdf.Dictionary, _Program] | None:
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
        if subtype not in _FONT_FILE3_KINDS:
            raise _NotSafe
        kind = _FONT_FILE3_KINDS[subtype]
    else:
        return None
    if not isinstance(program, pikepdf.Stream):
        raise _NotSafe
    decoded_size(program, limit=budgets.max_stream_bytes)
    return descriptor, _Program(program, kind)


def _program_kind(font: pikepdf.Object | None) -> str:
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
        return _FONT_FILE3_KINDS.get(str(program.get(Name.Subtype, "")), "unknown")
    return "unknown" if program is not None else "unembedded"


def _truetype(program: pikepdf.Stream) -> TTFont:
    try:
        ttf = TTFont(io.BytesIO(program.read_bytes()), recalcTimestamp=False, lazy=False)
        ttf.getGlyphOrder()
    except (TTLibError, pikepdf.PdfError, AssertionError, KeyError, ValueError, struct_error):
        raise _NotSafe from None
    return ttf


def _code_cmap(ttf: TTFont, font: pikepdf.Dictionary) -> tuple[dict[int, str], bool]:
    """Byte code -> glyph name as viewers read a simple TrueType (ISO 32000-2, 9.6.5.4), and whether read by code
    (not through Unicode): a font with a named encoding or the Nonsymbolic flag through its encoding's Unicode and the
    program's (3,1) cmap when it has one, else through the program's (3,0) or (1,0) cmap (keyed by code, or by
    0xF000 + code). Read through the (1,0) cmap instead, a WinAnsi code such as the right quote would keep another
    glyph (MacRoman's), and one MacRoman lacks no glyph at all."""
    if "cmap" not in ttf:
        raise _NotSafe
    unicode_table = ttf["cmap"].getcmap(3, 1)
    if unicode_table is not None and _nonsymbolic(font):
        glyphs: dict[int, str] = unicode_table.cmap
        return {code: glyphs[ord(text)] for code, text in _unicode_encoding(font).items() if ord(text) in glyphs}, False
    for platform, encoding in ((3, 0), (1, 0)):
        table = ttf["cmap"].getcmap(platform, encoding)
        if table is not None:
            return dict(table.cmap), True
    raise _NotSafe  # a symbolic font without a (3,0) or (1,0) cmap


_NAMED_ENCODINGS = (Name.WinAnsiEncoding, Name.MacRomanEncoding)
_NONSYMBOLIC_FLAG = 1 << 5


def _nonsymbolic(font: pikepdf.Dictionary) -> bool:
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


def _subset(
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
        raise _NotSafe from None
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


def _write_program(pdf: pikepdf.Pdf, descriptor: pikepdf.Dictionary, old: _Program, data: bytes) -> None:
    program = pdf.make_stream(data)
    program.Length1 = len(data)
    if Name.Subtype in old.stream:
        program.Subtype = old.stream.Subtype
    key = Name.FontFile2 if Name.FontFile2 in descriptor else Name.FontFile3
    descriptor[key] = program


def _cid_to_gid(mapping: pikepdf.Object | None, budgets: Budgets) -> _CidToGid:
    if mapping is None or mapping == Name.Identity:
        return _CidToGid(None)
    if not isinstance(mapping, pikepdf.Stream):
        raise _NotSafe
    decoded_size(mapping, limit=budgets.max_stream_bytes)
    return _CidToGid(mapping.read_bytes())


@dataclass(frozen=True)
class _CidToGid:
    table: bytes | None  # None: Identity

    def __call__(self, cid: int) -> int:
        if self.table is None:
            return cid
        if 2 * cid + 2 > len(self.table):
            raise _NotSafe
        return int.from_bytes(self.table[2 * cid : 2 * cid + 2], "big")


def _retag(program: bytes, holders: tuple[pikepdf.Object | None, ...]) -> None:
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


def _differences(differences: pikepdf.Array, codes: set[int]) -> pikepdf.Array:
    """/Differences with only the drawn codes' glyph names."""
    names: dict[int, pikepdf.Object] = {}
    code = 0
    for item in differences:
        if isinstance(item, Name):
            names[code] = item
            code += 1
        else:
            code = int(item)
    kept: list[pikepdf.Object | int] = []
    for code in sorted(set(names) & codes):
        kept += [code, names[code]]
    return pikepdf.Array(kept)


def _trim_to_unicode(
    pdf: pikepdf.Pdf, font: pikepdf.Dictionary, codes: dict[int, int], width: int, budgets: Budgets
) -> None:
    """Rewrite /ToUnicode with the drawn codes' entries only (`codes`: old code -> new code)."""
    stream = font.get(Name.ToUnicode)
    if not isinstance(stream, pikepdf.Stream):
        if Name.ToUnicode in font:
            del font[Name.ToUnicode]
        return
    decoded_size(stream, limit=budgets.max_stream_bytes)
    cmap = FileUnicodeMap()
    try:
        CMapParser(cmap, io.BytesIO(stream.read_bytes())).run()
    except Exception:  # noqa: BLE001 - pdfminer raises many kinds on a broken CMap: the entries are dropped
        cmap = FileUnicodeMap()
    entries = {codes[code]: text for code, text in cmap.cid2unichr.items() if code in codes and isinstance(text, str)}
    font.ToUnicode = pdf.make_stream(_to_unicode_cmap(entries, width))


def _to_unicode_cmap(entries: dict[int, str], width: int) -> bytes:
    lines = [
        "/CIDInit /ProcSet findresource begin",
        "12 dict begin",
        "begincmap",
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        "/CMapName /Adobe-Identity-UCS def",
        "/CMapType 2 def",
        "1 begincodespacerange",
        f"<{'00' * width}> <{'FF' * width}>",
        "endcodespacerange",
    ]
    items = sorted(entries.items())
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        lines.append(f"{len(chunk)} beginbfchar")
        lines += [f"<{code:0{2 * width}X}> <{text.encode('utf-16-be').hex().upper()}>" for code, text in chunk]
        lines.append("endbfchar")
    lines += ["endcmap", "CMapName currentdict /CMap defineresource pop", "end", "end"]
    return "\n".join(lines).encode()


def _offer_standard_fonts(pdf: pikepdf.Pdf, touched: set[FontId]) -> None:
    """The form's default resources (/AcroForm /DR) offer fonts for new field values, with which a viewer may draw
    any glyph: each one in `touched` is offered as Helvetica instead (under the same name, so the fields' /DA
    strings still find it), and is then re-subset like any font the document draws. Values typed later are drawn
    in Helvetica; the appearances already there keep their own font. The form gets /DR and /Font dictionaries of
    its own: LibreOffice's form shares its page's /Resources, whose fonts stay."""
    form = pdf.Root.get(Name.AcroForm)
    if not isinstance(form, pikepdf.Dictionary) or not isinstance(defaults := form.get(Name.DR), pikepdf.Dictionary):
        return
    fonts = defaults.get(Name.Font)
    if not isinstance(fonts, pikepdf.Dictionary) or not any(_id(font) in touched for _, font in fonts.items()):
        return
    helvetica = pdf.make_indirect(
        pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding)
    )
    offered = {name: helvetica if _id(font) in touched else font for name, font in fonts.items()}
    form[Name.DR] = pikepdf.Dictionary({**dict(defaults.items()), "/Font": pikepdf.Dictionary(offered)})


def _appearances(page: pikepdf.Dictionary) -> Iterator[pikepdf.Stream]:
    annotations = page.get(Name.Annots)
    for annotation in annotations if isinstance(annotations, pikepdf.Array) else []:
        appearances = annotation.get(Name.AP) if isinstance(annotation, pikepdf.Dictionary) else None
        if not isinstance(appearances, pikepdf.Dictionary):
            continue
        for _, entry in appearances.items():
            if isinstance(entry, pikepdf.Stream):
                yield entry
            elif isinstance(entry, pikepdf.Dictionary):
                yield from (state for _, state in entry.items() if isinstance(state, pikepdf.Stream))


def _tiling_patterns(resources: pikepdf.Dictionary) -> list[pikepdf.Stream]:
    patterns = resources.get(Name.Pattern)
    if not isinstance(patterns, pikepdf.Dictionary):
        return []
    return [p for _, p in patterns.items() if isinstance(p, pikepdf.Stream) and p.get(Name.PatternType) == 1]


def _entry(resources: pikepdf.Dictionary, category: Name, name: pikepdf.Object) -> pikepdf.Object | None:
    entries = resources.get(category)
    return entries.get(name) if isinstance(entries, pikepdf.Dictionary) and isinstance(name, Name) else None


def _id(font: pikepdf.Object | None) -> FontId | None:
    return font.objgen if isinstance(font, pikepdf.Dictionary) and font.is_indirect else None
