"""The codes each font that lost glyphs still draws, for font scrubbing (docjobs/pdf/redaction/subset.py), and,
once some fonts are given new codes (`fresh_codes`), the rewrite of every string those fonts show.

Drawn is what any content the document shows draws: page content, Form XObjects, tiling patterns and annotation
appearances, each stream walked with the font in effect where it is drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import Budgets, OperatorBudget
from docjobs.pdf.redaction.font_programs import nonsymbolic, program_kind
from docjobs.pdf.redaction.fonts import descendant_font, font_model
from docjobs.pdf.redaction.regions import UnsafePage
from docjobs.pdf.redaction.resources import Instruction, indirect_id, inherited_resources
from docjobs.pdf.redaction.stream import parse_instructions

_SHOWS = ("Tj", "TJ", "'", '"')
FontId = tuple[int, int]


@dataclass(frozen=True)
class _PageWalk:
    """What the streams a page draws are walked with: its number, the budget of its operators (the document's), and
    the streams already walked, each with the font it was drawn with."""

    pdf: pikepdf.Pdf
    page: int
    operators: OperatorBudget
    seen: set[tuple[FontId, FontId | None]] = field(default_factory=set)


@dataclass
class DrawnCodes:
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
            walk = _PageWalk(pdf, number, operators)
            self._walk(walk, page.obj, inherited_resources(page.obj), None, 0)
            for appearance in appearance_streams(page.obj):
                self._walk(walk, appearance, appearance.get(Name.Resources), None, 1)

    def renumber(self, pdf: pikepdf.Pdf, codes: dict[FontId, dict[int, int]]) -> None:
        """Rewrite every string the fonts of `codes` show with their new codes: each page's content into a new
        stream of its own, each Form XObject, pattern and appearance stream in place, once."""
        self.renumbered = codes
        self.collect(pdf)

    def _walk(
        self,
        walk: _PageWalk,
        owner: pikepdf.Object,
        resources: pikepdf.Object | None,
        font: pikepdf.Object | None,
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
            instructions, repaired = _parse(target, walk.operators)
        except (pikepdf.PdfError, TypeError, ValueError):
            self._doubt(resources)  # its codes are unknown: no font it may use is cut down
            return
        shows, changed = self._follow(walk, instructions, resources, font, depth)
        for pattern in _tiling_patterns(resources):
            self._walk_once(walk, pattern, pattern.get(Name.Resources), None, depth + 1)
        if changed:
            data = pikepdf.unparse_content_stream(instructions)
            if isinstance(owner, pikepdf.Stream):
                owner.write(data)
            else:  # a page's content may be an array of streams other pages share: a stream of its own
                owner.Contents = walk.pdf.make_stream(data)
        elif not self.renumbered:
            self._judge(owner if shared else None, shows, repaired)

    def _follow(
        self,
        walk: _PageWalk,
        instructions: list[Instruction],
        resources: pikepdf.Dictionary,
        font: pikepdf.Object | None,
        depth: int,
    ) -> tuple[list[FontId | None], bool]:
        """Follow the font in effect through a stream's instructions, noting (or, renumbering, rewriting in
        `instructions`) the codes each string shows: the fonts of its strings in order, and whether one changed."""
        shows: list[FontId | None] = []
        changed = False
        stack: list[pikepdf.Object | None] = []
        for index, instruction in enumerate(instructions):
            if isinstance(instruction, pikepdf.ContentStreamInlineImage):
                continue
            operator, operands = str(instruction.operator), list(instruction.operands)
            if operator in ("Tw", '"') and operands and operands[0] != 0:
                self.word_spaced = True
            if operator in _SHOWS and operands:
                shown = indirect_id(font)
                shows.append(shown)
                mapping = self.renumbered.get(shown) if shown is not None else None
                if mapping is not None:
                    composite = isinstance(font, pikepdf.Dictionary) and font.get(Name.Subtype) == Name.Type0
                    operands[-1] = _renumbered(operands[-1], mapping, 2 if composite else 1)
                    instructions[index] = pikepdf.ContentStreamInstruction(operands, instruction.operator)
                    changed = True
                elif not self.renumbered:
                    self._shown(font, operands[-1], walk.page)
            elif operator == "Do" and operands:
                xobject = _entry(resources, Name.XObject, operands[0])
                if isinstance(xobject, pikepdf.Stream) and xobject.get(Name.Subtype) == Name.Form:
                    self._walk_once(walk, xobject, xobject.get(Name.Resources, resources), font, depth + 1)
            else:
                font = _font_after(operator, operands, font, stack, resources)
        return shows, changed

    def _walk_once(
        self,
        walk: _PageWalk,
        stream: pikepdf.Stream,
        resources: pikepdf.Object | None,
        font: pikepdf.Object | None,
        depth: int,
    ) -> None:
        """Walk a Form XObject or a tiling pattern once per page and font it is drawn with (a direct one each
        time it is drawn)."""
        key = (stream.objgen, indirect_id(font))
        if not stream.is_indirect or key not in walk.seen:
            walk.seen.add(key)
            self._walk(walk, stream, resources, font, depth)

    def _judge(self, stream: pikepdf.Object | None, shows: list[FontId | None], repaired: bool) -> None:
        """Keep the codes of the wanted fonts a stream shows when rewriting it could change more than their
        strings: the parser repaired it (written back, what it skipped would be lost), or it is drawn elsewhere
        with other fonts (a Form XObject that inherits the caller's font), so one rewrite cannot suit both."""
        earlier = self.shown_by.setdefault(stream.objgen, shows) if stream is not None else shows
        if repaired or earlier != shows:
            self.fixed.update(key for key in (*earlier, *shows) if key in self.wanted)

    def _shown(self, font: pikepdf.Object | None, operand: pikepdf.Object, page: int) -> None:
        key = indirect_id(font)
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
            self.unsure.update(key for _, font in fonts.items() if (key := indirect_id(font)) in self.wanted)


def fresh_codes(font: pikepdf.Object, key: FontId, usage: DrawnCodes) -> list[int]:
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
        or program_kind(font) != "truetype"
    ):
        return []
    drawn = usage.codes.get(key, {})
    if font.get(Name.Subtype) == Name.TrueType:
        if Name.Encoding in font or nonsymbolic(font) or (32 in drawn and usage.word_spaced):
            return []
        fresh = [code for code in range(1, 256) if code != 32][: len(drawn)]
        return fresh if len(fresh) == len(drawn) else []
    descendant = descendant_font(font)
    if not isinstance(descendant, pikepdf.Dictionary) or descendant.get(Name.Subtype) != Name.CIDFontType2:
        return []
    return list(range(1, len(drawn) + 1))


def _font_after(
    operator: str,
    operands: list[pikepdf.Object],
    font: pikepdf.Object | None,
    stack: list[pikepdf.Object | None],
    resources: pikepdf.Dictionary,
) -> pikepdf.Object | None:
    """The font in effect after a state operator (q and Q save it on `stack` and restore it)."""
    if operator == "q":
        stack.append(font)
    elif operator == "Q" and stack:
        return stack.pop()
    elif operator == "Tf" and operands:
        return _entry(resources, Name.Font, operands[0])
    elif operator == "gs" and operands:
        state = _entry(resources, Name.ExtGState, operands[0])
        chosen = state.get(Name.Font) if isinstance(state, pikepdf.Dictionary) else None
        if isinstance(chosen, pikepdf.Array) and len(chosen):
            return chosen[0]
    return font


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


def appearance_streams(page: pikepdf.Dictionary) -> Iterator[pikepdf.Stream]:
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
