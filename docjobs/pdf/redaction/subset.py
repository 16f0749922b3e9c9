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
program alike (see `fresh_codes` for which, and when its codes cannot be rewritten safely and stay as they
were). A simple TrueType program read by code through its (3,0) or (1,0) cmap gets that cmap written
anew: the subsetter drops it.

Programs re-subset: TrueType (/FontFile2) and OpenType (/FontFile3 /OpenType) of simple TrueType fonts (codes
to glyphs as viewers map them: see `code_cmap`) and of Type0 fonts with Identity-H over a
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

from dataclasses import dataclass, field

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets
from docjobs.pdf.redaction.drawn_codes import DrawnCodes, FontId, fresh_codes
from docjobs.pdf.redaction.font_entries import scrub_simple_entries, trim_to_unicode
from docjobs.pdf.redaction.font_programs import (
    NotSafe,
    Program,
    cid_to_gid,
    code_cmap,
    embedded_program,
    program_kind,
    read_truetype,
    retag,
    subset_program,
    write_program,
)
from docjobs.pdf.redaction.font_sharing import FontSharing
from docjobs.pdf.redaction.fonts import descendant_font, font_model, glyph_names
from docjobs.pdf.redaction.named_glyphs import NamedGlyphProgram, ProgramError
from docjobs.pdf.redaction.resources import indirect_id

FALLBACK_REASON = "font_not_resubset"


@dataclass(frozen=True)
class FontScrub:
    resubset: int  # embedded programs re-subset
    fallback: dict[int, str]  # page -> reason, for the pages whose fonts could not be
    kinds: dict[int, list[str]] = field(default_factory=dict)  # those pages -> their fonts' kinds (program_kind)


def scrub_fonts(pdf: pikepdf.Pdf, touched: set[FontId], *, budgets: Budgets = DEFAULT_BUDGETS) -> FontScrub:
    """Cut every font in `touched` (object ids of font dictionaries that lost glyphs) down to the codes the
    document still draws, in place; the caller saves."""
    if not touched:
        return FontScrub(0, {})
    sharing = FontSharing.of(pdf, touched)
    cut = touched | sharing.fellows
    usage = DrawnCodes(cut, budgets)
    usage.collect(pdf)
    sharing.pool(usage)
    _offer_standard_fonts(pdf, cut)
    unsafe = set(usage.unsure) | sharing.unsafe
    fresh = sharing.agree({key: fresh_codes(pdf.get_object(key), key, usage) for key in sorted(cut - unsafe)})
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
        except NotSafe:
            unsafe.add(key)
            continue
        if codes:
            renumbered[key] = codes
    if renumbered:
        usage.renumber(pdf, renumbered)
    kinds: dict[int, set[str]] = {}
    for key in unsafe:
        for page in usage.pages.get(key, set()):
            kinds.setdefault(page, set()).add(program_kind(pdf.get_object(key)))
    return FontScrub(
        resubset,
        dict.fromkeys(sorted(kinds), FALLBACK_REASON),
        {page: sorted(kinds[page]) for page in sorted(kinds)},
    )


def _scrub(pdf: pikepdf.Pdf, font: pikepdf.Object, codes: dict[int, int], budgets: Budgets) -> int:
    """Scrub one font down to the drawn `codes` (old code -> new code, in order of first use: see `fresh_codes`);
    1 when an embedded program was re-subset, 0 when only the entries were trimmed."""
    if not isinstance(font, pikepdf.Dictionary):
        raise NotSafe
    if font.get(Name.Subtype) == Name.Type0:
        return _scrub_composite(pdf, font, codes, budgets)
    if font.get(Name.Subtype) in (Name.TrueType, Name.Type1, Name.MMType1):
        return _scrub_simple(pdf, font, codes, budgets)
    raise NotSafe  # Type3 glyphs are never removed (their pages are burned in), so one here is unexpected


def _scrub_renumbered(
    pdf: pikepdf.Pdf, font: pikepdf.Object, codes: dict[int, int], budgets: Budgets, written: dict[FontId, bytes]
) -> int:
    """Scrub a font whose codes become `codes`' new ones. Fonts re-numbered together (`FontSharing.agree`) share a
    CIDFont or a descriptor: what they share (the program; a CIDFont's /W, /CIDToGIDMap and /CIDSet) is rewritten
    for the first of them only (`written`: shared holder -> its new program), each one's own entries for each."""
    if not isinstance(font, pikepdf.Dictionary):
        raise NotSafe
    composite = font.get(Name.Subtype) == Name.Type0
    holder = descendant_font(font) if composite else font
    descriptor = holder.get(Name.FontDescriptor) if isinstance(holder, pikepdf.Dictionary) else None
    shared = indirect_id(holder) if composite else indirect_id(descriptor)
    if shared is None or shared not in written:
        resubset = _scrub(pdf, font, codes, budgets)
        program = descriptor.get(Name.FontFile2) if isinstance(descriptor, pikepdf.Dictionary) else None
        if shared is not None and isinstance(program, pikepdf.Stream):
            written[shared] = program.read_bytes()
        return resubset
    retag(written[shared], (font,))
    if composite:
        trim_to_unicode(pdf, font, codes, 2, budgets)
    else:
        scrub_simple_entries(pdf, font, codes, budgets)
    return 0


def _scrub_simple(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets) -> int:
    """Scrub a simple font; its codes become `renumber`'s new ones (only a symbolic TrueType font's change: see
    `fresh_codes`), and when they do, so does its program's glyph order: .notdef, then the glyphs by new code."""
    descriptor = font.get(Name.FontDescriptor)
    embedded = embedded_program(descriptor, budgets)
    resubset = 0
    if embedded is not None:
        descriptor, program = embedded
        if program.kind in ("type1", "cff"):
            subset = _scrub_named_glyphs(pdf, font, program, set(renumber))
        else:
            ttf = read_truetype(program.stream)
            cmap, by_code = code_cmap(ttf, font)
            try:
                glyphs = {renumber[code]: cmap[code] if code in cmap else cmap[0xF000 + code] for code in renumber}
            except KeyError:
                raise NotSafe from None
            by_new_code = [glyphs[code] for code in sorted(glyphs)]
            renumbered = any(old != new for old, new in renumber.items())
            subset = subset_program(
                ttf, set(by_new_code), by_new_code if renumbered else None, glyphs if by_code else None
            )
            write_program(pdf, descriptor, program, subset)
        retag(subset, (font, descriptor))
        resubset = 1
    scrub_simple_entries(pdf, font, renumber, budgets)
    return resubset


def _scrub_composite(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets) -> int:
    """Scrub a Type0 font with Identity-H; its CIDs become `renumber`'s new ones, and when they change, so does
    the glyph order of its CIDFontType2 program: .notdef, then the glyphs by their new CIDs."""
    codes = set(renumber)
    renumbered = any(old != new for old, new in renumber.items())
    descendant = descendant_font(font)
    if font.get(Name.Encoding) != Name("/Identity-H") or not isinstance(descendant, pikepdf.Dictionary):
        raise NotSafe
    embedded = embedded_program(descendant.get(Name.FontDescriptor), budgets)
    model = font_model(font)
    if embedded is not None and embedded[1].kind == "cff":
        descriptor, program = embedded
        if descendant.get(Name.Subtype) != Name.CIDFontType0:
            raise NotSafe
        subset = _scrub_cid_cff(pdf, descriptor, program, codes)
        retag(subset, (font, descendant, descriptor))
    elif embedded is not None:
        descriptor, program = embedded
        if descendant.get(Name.Subtype) != Name.CIDFontType2:
            raise NotSafe
        to_gid = cid_to_gid(descendant.get(Name.CIDToGIDMap), budgets)
        ttf = read_truetype(program.stream)
        order = ttf.getGlyphOrder()
        gids = {cid: to_gid(cid) for cid in codes}
        if any(gid >= len(order) for gid in gids.values()):
            raise NotSafe
        by_new_cid = [order[gids[cid]] for cid in sorted(codes, key=renumber.__getitem__)]
        subset = subset_program(ttf, set(by_new_cid), by_new_cid if renumbered else None)
        write_program(pdf, descriptor, program, subset)
        new_gids = {name: gid for gid, name in enumerate(ttf.getGlyphOrder())}
        table = bytearray(2 * (max(renumber.values(), default=0) + 1))
        for cid, gid in gids.items():
            table[2 * renumber[cid] : 2 * renumber[cid] + 2] = new_gids[order[gid]].to_bytes(2, "big")
        descendant.CIDToGIDMap = pdf.make_stream(bytes(table))
        retag(subset, (font, descendant, descriptor))
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
    trim_to_unicode(pdf, font, renumber, 2, budgets)
    return 1 if embedded is not None else 0


def _scrub_named_glyphs(pdf: pikepdf.Pdf, font: pikepdf.Dictionary, program: Program, codes: set[int]) -> bytes:
    """Re-subset a simple font's Type1 or bare CFF program to the glyphs of `codes` (embedded as `/Type1C`)
    and spell those codes out in its /Differences, so no viewer needs the built-in encoding that listed the
    others. A code whose glyph the program lacks draws .notdef, before and after."""
    try:
        source = NamedGlyphProgram.read(program.stream.read_bytes(), program.kind)
        if source.cid_keyed:
            raise NotSafe  # a CID-keyed program under a simple font: codes do not name its glyphs
        names = glyph_names(font, source.builtin_encoding)
        drawn = {code: name for code in sorted(codes) if code < len(names) and (name := names[code]) is not None}
        data = source.subset(set(drawn.values()), drawn)
    except ProgramError:
        raise NotSafe from None
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


def _scrub_cid_cff(pdf: pikepdf.Pdf, descriptor: pikepdf.Dictionary, program: Program, cids: set[int]) -> bytes:
    """Re-subset a CIDFontType0's CID-keyed CFF program to the glyphs of `cids`: its charset keeps their CIDs,
    so the codes still reach them. A name-keyed program there is drawn by glyph index (CID = GID), which
    renumbering would break: not safe."""
    try:
        source = NamedGlyphProgram.read(program.stream.read_bytes(), program.kind)
        if not source.cid_keyed:
            raise NotSafe
        data = source.subset({f"cid{cid:05d}" for cid in cids}, {})
    except ProgramError:
        raise NotSafe from None
    descriptor.FontFile3 = pdf.make_stream(data, Subtype=program.stream.get(Name.Subtype, Name.CIDFontType0C))
    return data


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
    if not isinstance(fonts, pikepdf.Dictionary) or not any(indirect_id(font) in touched for _, font in fonts.items()):
        return
    helvetica = pdf.make_indirect(
        pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding)
    )
    offered = {name: helvetica if indirect_id(font) in touched else font for name, font in fonts.items()}
    form[Name.DR] = pikepdf.Dictionary({**dict(defaults.items()), "/Font": pikepdf.Dictionary(offered)})
