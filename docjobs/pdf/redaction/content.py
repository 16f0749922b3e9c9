"""True redaction of one page: remove the glyphs and image pixels under regions from the content itself.

Drawing a box over text leaves the text in the file; here the content streams are rewritten instead.
The page's content (and every form XObject it draws, to any depth) is interpreted with the graphics
and text state a viewer keeps, so each glyph's box is known in default user space; a glyph whose box
overlaps a region is dropped and replaced by a TJ displacement of exactly its advance (character and
word spacing included), so every other glyph keeps its position and stays extractable. Image
XObjects under a region get their pixels overwritten (see images). Edited forms and images
become page-private copies, so other pages that draw them are untouched.

Where content under a region cannot be removed exactly, UnsafePage is raised with a short stable
reason and the page is left as it was; the caller rasterizes it instead. Reasons: type3_font,
unknown_widths, unsupported_encoding, vertical_text, zero_font_size (a glyph under a region, or
possibly under one, that cannot be removed exactly), inline_image, image_undecodable, pattern_content
(a tiling pattern that shows text or images), form_cycle, unparsable_content. Nothing is ever
silently left under a region.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from decimal import Decimal

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, OperatorBudget, too_complex
from docjobs.pdf.redaction.art import CONSTRUCTS, PAINTS, PathOutline
from docjobs.pdf.redaction.fonts import UNKNOWN_FONT, FontModel, Glyph, font_model
from docjobs.pdf.redaction.geometry import IDENTITY, corners, multiply, quad_hits, translate
from docjobs.pdf.redaction.glyph_placement import (
    GraphicsState,
    TextPosition,
    glyph_advance,
    glyph_under,
    placed_glyph,
    removed_displacement,
    with_text_parameter,
)
from docjobs.pdf.redaction.images import copy_stream, redact_image
from docjobs.pdf.redaction.layout import MaskLayout, reset_lines
from docjobs.pdf.redaction.line_records import LineRecorder, Move, PlacedGlyph, Show, SpacingSource
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.reset_check import ResetLine
from docjobs.pdf.redaction.resources import (
    Instruction,
    MarkedContent,
    ResourceScope,
    indirect_id,
    inherited_resources,
)
from docjobs.pdf.redaction.stream import make_instruction, matrix_of, matrix_operand, numbers, parse_instructions


@dataclass(frozen=True)
class ContentRemoval:
    glyphs_removed: int
    images_redacted: int  # image XObjects whose pixels were overwritten
    lines: tuple[ResetLine, ...] = ()  # lines re-set around masks (a `layout` was given)
    replaced: tuple[Rect, ...] = ()  # trigger regions now shown only by masks (they removed glyphs, no pixels)
    fonts_touched: frozenset[tuple[int, int]] = frozenset()  # fonts (object ids) that lost glyphs


def remove_content(
    pdf: pikepdf.Pdf,
    page_number: int,
    regions: list[Rect],
    *,
    aims: list[Rect] | None = None,
    budgets: Budgets = DEFAULT_BUDGETS,
    layout: MaskLayout | None = None,
) -> ContentRemoval:
    """Remove from page `page_number` (1-based) every glyph under `aims` (by default the regions; a pattern
    match's core, see locate) and every image pixel under `regions` (default user space), editing `pdf` in
    place; the caller saves. With a `layout`, the lines that lost a glyph under one
    of its trigger regions are re-set around masks (see layout); without, every other glyph keeps its place.
    Raises UnsafePage, leaving the page unchanged, and `input.too_complex` when the page's content (its forms
    included) exceeds `budgets`."""
    page = pdf.pages[page_number - 1]
    if not regions:
        return ContentRemoval(0, 0)
    saved = {key: page.obj.get(key) for key in (Name.Contents, Name.Resources)}
    walker = _walk(pdf, page, saved, regions, regions if aims is None else aims, budgets, layout)
    if layout is not None and (boxed := walker.boxed_explicit()):
        # A region drawn by hand over pixels or vector art keeps its box at the size drawn, which shows its
        # width anyway: its lines stay in place (re-set, the text after it would slide under the box).
        _restore(page, saved)
        layout = layout.without(boxed)
        walker = _walk(pdf, page, saved, regions, regions if aims is None else aims, budgets, layout)
    return ContentRemoval(
        walker.glyphs_removed,
        walker.images_redacted,
        tuple(walker.lines),
        tuple(rect for number, rect in enumerate(layout.triggers) if number in walker.replaced) if layout else (),
        frozenset(walker.fonts_touched),
    )


def _walk(
    pdf: pikepdf.Pdf,
    page: pikepdf.Page,
    saved: dict[Name, pikepdf.Object | None],
    regions: list[Rect],
    aims: list[Rect],
    budgets: Budgets,
    layout: MaskLayout | None,
) -> _Walker:
    """Rewrite the page's content; on UnsafePage, put back what `saved` holds and raise."""
    walker = _Walker(pdf, regions, aims, budgets, layout)
    try:
        scope = ResourceScope(page.obj, inherited_resources(page.obj))
        rewritten = walker.rewrite(
            parse_instructions(page, walker.operators), scope, GraphicsState(ctm=IDENTITY), base_depth=0
        )
        if rewritten is not None:
            page.obj[Name.Contents] = pdf.make_stream(pikepdf.unparse_content_stream(rewritten))
    except UnsafePage:
        _restore(page, saved)
        raise
    return walker


def _restore(page: pikepdf.Page, saved: dict[Name, pikepdf.Object | None]) -> None:
    for key, value in saved.items():
        if value is None:
            del page.obj[key]
        else:
            page.obj[key] = value


@dataclass
class _Stream:
    """One content stream as the walker rewrites it: what it wrote so far, and the state in effect."""

    state: GraphicsState
    recorder: LineRecorder | None  # with a layout: what the line re-set needs
    out: list[Instruction] = field(default_factory=list)
    saved: list[GraphicsState] = field(default_factory=list)  # by q, restored by Q
    text: TextPosition = field(default_factory=TextPosition)
    outline: PathOutline = field(default_factory=PathOutline)
    changed: bool = False


class _Walker:
    def __init__(
        self, pdf: pikepdf.Pdf, regions: list[Rect], aims: list[Rect], budgets: Budgets, layout: MaskLayout | None
    ) -> None:
        self.pdf = pdf
        self.regions = regions  # where images and their pixels are looked for
        self.aims = aims  # where glyphs are
        self.budgets = budgets
        self.layout = layout
        self.lines: list[ResetLine] = []
        self.replaced: set[int] = set()  # triggers that removed glyphs (lines re-set) and no image pixels
        self._boxed: set[int] = set()  # triggers over painted pixels or vector art: they keep their own box
        self._art_matters = layout is not None and layout.explicit > 0
        self.fonts_touched: set[tuple[int, int]] = set()
        self._streams = 0  # serial of the next content stream walked (pages and forms)
        self._kept_spacing: set[SpacingSource] = set()
        self.operators = OperatorBudget(budgets)  # the page's and every form walk's, together
        self.glyphs_removed = 0
        self.images_redacted = 0
        self._fonts: dict[tuple[int, int], FontModel] = {}
        self._marks: list[MarkedContent] = []  # open marked content, across form boundaries
        self._forms_open: set[tuple[int, int]] = set()
        self._patterns_checked: set[tuple[int, int]] = set()

    def rewrite(
        self, instructions: list[Instruction], scope: ResourceScope, state: GraphicsState, base_depth: int
    ) -> list[Instruction] | None:
        """The instructions with redacted content removed, or None when they needed no change."""
        stream = _Stream(state, LineRecorder(self._streams) if self.layout is not None else None)
        self._streams += 1
        for instruction in instructions:
            operator = str(instruction.operator)
            if stream.recorder is not None:
                stream.state = self._record_position(
                    stream.recorder, operator, instruction, stream.state, stream.text, len(stream.out)
                )
            if isinstance(instruction, pikepdf.ContentStreamInlineImage):
                if self._under_regions(corners(stream.state.ctm, 0, 0, 1, 1)):
                    raise UnsafePage("inline_image")
            elif operator in ("Tj", "TJ", "'", '"'):
                self._show_in(stream, instruction)
                continue
            elif operator == "Do":
                renamed = self._draw(list(instruction.operands), stream.state, scope)
                if renamed is not None:
                    stream.out.append(make_instruction("Do", renamed))
                    stream.changed = True
                    continue
            elif not self._apply_state(stream, operator, instruction, scope):
                self._follow_marks_and_art(stream, operator, instruction, scope, base_depth)
            stream.out.append(instruction)
        while len(self._marks) > base_depth:  # sequences left open at the end of this stream
            stream.changed |= self._marks.pop().close(self.pdf)
        if stream.recorder is not None and self.layout is not None:
            reset = reset_lines(stream.out, stream.recorder, self.layout, self._kept_spacing)
            if reset is not None:
                stream.out, stream.changed = reset.instructions, True
                self.lines += reset.lines
        return stream.out if stream.changed else None

    def _apply_state(
        self, stream: _Stream, operator: str, instruction: pikepdf.ContentStreamInstruction, scope: ResourceScope
    ) -> bool:
        """Apply a graphics or text state operator to the stream's state (False: `operator` is none of them)."""
        state, text = stream.state, stream.text
        if operator == "q":
            stream.saved.append(state)
        elif operator == "Q":
            stream.state = stream.saved.pop() if stream.saved else state
        elif operator == "cm":
            stream.state = dataclasses.replace(state, ctm=multiply(matrix_operand(instruction), state.ctm))
        elif operator == "Tf":
            stream.state = self._set_font(list(instruction.operands), state, scope)
        elif operator == "Tr":
            stream.state = dataclasses.replace(state, invisible=numbers(list(instruction.operands), 1)[0] == 3)
        elif operator in ("Tc", "Tw", "Tz", "TL", "Ts"):
            stream.state = with_text_parameter(state, operator, *numbers(list(instruction.operands), 1))
        elif operator == "gs":
            stream.state = self._set_extgstate(list(instruction.operands), state, scope)
        elif operator == "BT":
            stream.text = TextPosition()
        elif operator in ("Td", "TD"):
            tx, ty = numbers(list(instruction.operands), 2)
            if operator == "TD":
                stream.state = dataclasses.replace(state, leading=-ty)
            text.move_line(tx, ty)
        elif operator == "Tm":
            text.matrix = text.line = matrix_operand(instruction)
            text.lost = None
        elif operator == "T*":
            text.move_line(0, -state.leading)
        else:
            return False
        return True

    def _follow_marks_and_art(
        self,
        stream: _Stream,
        operator: str,
        instruction: pikepdf.ContentStreamInstruction,
        scope: ResourceScope,
        base_depth: int,
    ) -> None:
        """Follow the tiling patterns painted with, the marked-content sequences, and the paths painted (when an
        explicit region may keep its box, see `_note_art`)."""
        if operator in ("scn", "SCN") and instruction.operands and isinstance(instruction.operands[-1], Name):
            self._check_pattern(scope.get(Name.Pattern, instruction.operands[-1]))
        elif operator in ("BDC", "BMC"):
            self._marks.append(MarkedContent(stream.out, len(stream.out), scope))
        elif operator == "EMC" and len(self._marks) > base_depth:
            stream.changed |= self._marks.pop().close(self.pdf)
        elif self._art_matters and operator in CONSTRUCTS:
            self._outline(stream.outline, operator, list(instruction.operands), stream.state)
        elif self._art_matters and operator in (*PAINTS, "n", "sh"):
            if operator != "n":
                self._note_art(stream.outline if operator != "sh" else None)  # a shading fills the whole clip
            stream.outline = PathOutline()

    def _show_in(self, stream: _Stream, instruction: pikepdf.ContentStreamInstruction) -> None:
        """A text-showing operator, written out without the glyphs under regions (and recorded for the re-set)."""
        placed: list[PlacedGlyph] | None = [] if stream.recorder is not None else None
        start = len(stream.out)
        stream.state, replacement = self._show(instruction, stream.state, stream.text, placed)
        stream.out.extend(replacement if replacement is not None else [instruction])
        stream.changed |= replacement is not None
        if stream.recorder is not None and placed is not None:
            operator = str(instruction.operator)
            shown = self._shown(start, len(stream.out), placed, operator, stream.state, stream.text, stream.recorder)
            stream.recorder.events.append(shown)

    def _record_position(
        self,
        recorder: LineRecorder,
        operator: str,
        instruction: Instruction,
        state: GraphicsState,
        text: TextPosition,
        index: int,
    ) -> GraphicsState:
        """Note a text-positioning operator (before it is applied: the move's result is computed here) or
        which operator set the character and word spacing."""
        if operator in ("BT", "ET", "Tm"):
            recorder.events.append(Move(index, operator, None))
        elif operator in ("Td", "TD") and isinstance(instruction, pikepdf.ContentStreamInstruction):
            tx, ty = numbers(list(instruction.operands), 2)
            leading = -ty if operator == "TD" else None
            recorder.events.append(Move(index, operator, multiply(translate(tx, ty), text.line), leading))
        elif operator == "T*":
            recorder.events.append(Move(index, operator, multiply(translate(0, -state.leading), text.line)))
        elif operator == "Tc":
            return dataclasses.replace(state, spacing_sources=(recorder.source(index, "Tc"), state.spacing_sources[1]))
        elif operator == "Tw":
            return dataclasses.replace(state, spacing_sources=(state.spacing_sources[0], recorder.source(index, "Tw")))
        return state

    def _shown(
        self,
        start: int,
        end: int,
        placed: list[PlacedGlyph],
        operator: str,
        state: GraphicsState,
        text: TextPosition,
        recorder: LineRecorder,
    ) -> Show:
        sources = state.spacing_sources
        if operator == '"':  # it set both itself
            sources = ((recorder.serial, start), (recorder.serial, start))
        return Show(
            start,
            end,
            placed,
            text.matrix,
            state.ctm,
            (state.char_spacing, state.word_spacing),
            sources,
            text.line if operator in ("'", '"') else None,
        )

    # --- state ------------------------------------------------------------------------------

    def _set_font(self, operands: list[pikepdf.Object], state: GraphicsState, scope: ResourceScope) -> GraphicsState:
        if len(operands) != 2:
            raise UnsafePage("unparsable_content")
        resource = scope.get(Name.Font, operands[0])
        font = self._font(resource)
        return dataclasses.replace(state, font=font, font_ref=indirect_id(resource), size=numbers(operands[1:], 1)[0])

    def _set_extgstate(
        self, operands: list[pikepdf.Object], state: GraphicsState, scope: ResourceScope
    ) -> GraphicsState:
        extgstate = scope.get(Name.ExtGState, operands[0]) if len(operands) == 1 else None
        font = extgstate.get(Name.Font) if isinstance(extgstate, pikepdf.Dictionary) else None
        if not isinstance(font, pikepdf.Array):
            return state
        if len(font) != 2:
            raise UnsafePage("unparsable_content")
        return dataclasses.replace(
            state, font=self._font(font[0]), font_ref=indirect_id(font[0]), size=numbers([font[1]], 1)[0]
        )

    def _font(self, font: pikepdf.Object | None) -> FontModel:
        if font is None or not font.is_indirect:
            return font_model(font)
        key = font.objgen
        if key not in self._fonts:
            self._fonts[key] = font_model(font)
        return self._fonts[key]

    # --- text -------------------------------------------------------------------------------

    def _show(
        self,
        instruction: pikepdf.ContentStreamInstruction,
        state: GraphicsState,
        text: TextPosition,
        placed: list[PlacedGlyph] | None,
    ) -> tuple[GraphicsState, list[Instruction] | None]:
        """Walk a text-showing operator; returns the new state and, if glyphs went, its replacement."""
        operator, operands = str(instruction.operator), list(instruction.operands)
        prefix: list[Instruction] = []
        if operator == '"':
            if len(operands) != 3:
                raise UnsafePage("unparsable_content")
            word_spacing, char_spacing = numbers(operands[:2], 2)
            state = dataclasses.replace(state, word_spacing=word_spacing, char_spacing=char_spacing)
            prefix = [make_instruction("Tw", operands[0]), make_instruction("Tc", operands[1])]
            operands = operands[2:]
        if operator in ("'", '"'):
            text.move_line(0, -state.leading)
            prefix.append(make_instruction("T*"))
        if len(operands) != 1:
            raise UnsafePage("unparsable_content")
        items = list(operands[0]) if operator == "TJ" and isinstance(operands[0], pikepdf.Array) else [operands[0]]
        kept = self._show_items(items, state, text, placed)
        return state, None if kept is None else [*prefix, make_instruction("TJ", pikepdf.Array(kept))]

    def _show_items(
        self,
        items: list[pikepdf.Object],
        state: GraphicsState,
        text: TextPosition,
        placed: list[PlacedGlyph] | None,
    ) -> list[pikepdf.Object | float] | None:
        """Advance through strings and TJ numbers; the TJ array without the glyphs under regions (None
        if none were), removed glyphs replaced by numbers that move the same distance. Each glyph is
        added to `placed` (when given) for the line re-set."""
        font = state.font or UNKNOWN_FONT
        out: list[pikepdf.Object | float] = []
        pending = 0.0  # displacement (thousandths of text space units) not yet written
        removed = 0
        for item in items:
            if isinstance(item, pikepdf.String):
                kept = bytearray()
                for glyph in font.glyphs(bytes(item)):
                    under = glyph_under(font, glyph.width, state, text, self.aims)
                    if placed is not None:
                        placed.append(self._placed(font, glyph, under, state, text))
                    if under:
                        if kept:
                            out.append(pikepdf.String(bytes(kept)))
                            kept.clear()
                        pending -= removed_displacement(glyph.width, glyph.is_space, state)
                        removed += 1
                    else:
                        if pending:
                            out.append(pending)
                            pending = 0.0
                        kept += glyph.code
                    moved = glyph_advance(font, glyph, state)
                    if moved is not None:
                        text.matrix = multiply(translate(*moved), text.matrix)
                if kept:
                    out.append(pikepdf.String(bytes(kept)))
            elif isinstance(item, (int, float, Decimal)) and not isinstance(item, bool):
                number = float(item)
                shift = -number / 1000 * state.size
                text.matrix = multiply(
                    translate(0, shift) if font.vertical else translate(shift * state.scale, 0), text.matrix
                )
                pending += number
            else:
                raise UnsafePage("unparsable_content")
        if pending:
            out.append(pending)
        if not removed:
            return None
        self.glyphs_removed += removed
        if state.font_ref is not None:
            self.fonts_touched.add(state.font_ref)
        for mark in self._marks:
            mark.dirty = True
        return out

    def _placed(
        self, font: FontModel, glyph: Glyph, removed: bool, state: GraphicsState, text: TextPosition
    ) -> PlacedGlyph:
        """The glyph as the line re-set needs it; the trigger regions that removed it now show only their mask."""
        placed, hits = placed_glyph(
            font, glyph, removed, state, text, self.layout.triggers if self.layout is not None else None
        )
        self.replaced |= hits - self._boxed
        return placed

    # --- XObjects ---------------------------------------------------------------------------

    def _draw(self, operands: list[pikepdf.Object], state: GraphicsState, scope: ResourceScope) -> Name | None:
        """Handle `Do`: redact what this draw shows under the regions (in a page-private copy of the
        XObject); returns the resource name to draw instead when the original name cannot be used."""
        if len(operands) != 1 or not isinstance(operands[0], Name):
            raise UnsafePage("unparsable_content")
        name = operands[0]
        xobject = scope.original(Name.XObject, name)  # each draw starts from the unredacted object
        if not isinstance(xobject, pikepdf.Stream):
            return None
        subtype = xobject.get(Name.Subtype)
        redacted = None
        if subtype == Name.Image and self._under_regions(corners(state.ctm, 0, 0, 1, 1)):
            redacted = redact_image(self.pdf, xobject, state.ctm, self.regions, budgets=self.budgets)
            if redacted is not None:
                self.images_redacted += 1
                self._note_imaged(corners(state.ctm, 0, 0, 1, 1))
                for mark in self._marks:
                    mark.dirty = True
        elif subtype == Name.Form:
            redacted = self._form(xobject, state, scope)
        return scope.place(Name.XObject, name, redacted if redacted is not None else xobject)

    def _form(self, form: pikepdf.Stream, state: GraphicsState, parent: ResourceScope) -> pikepdf.Stream | None:
        """Walk a form XObject; a redacted page-private copy of it, or None if it needs no change."""
        key = form.objgen
        if key in self._forms_open:
            raise UnsafePage("form_cycle")
        if len(self._forms_open) >= self.budgets.max_depth:
            raise too_complex(f"forms are nested more than {self.budgets.max_depth} levels deep")
        matrix = form.get(Name.Matrix)
        form_matrix = matrix_of(list(matrix)) if isinstance(matrix, pikepdf.Array) else IDENTITY
        copy = copy_stream(self.pdf, form, b"")
        scope = ResourceScope(copy, form.get(Name.Resources, parent.resources))
        self._forms_open.add(key)
        try:
            inner = dataclasses.replace(state, ctm=multiply(form_matrix, state.ctm))
            rewritten = self.rewrite(
                parse_instructions(form, self.operators), scope, inner, base_depth=len(self._marks)
            )
        finally:
            self._forms_open.discard(key)
        if rewritten is None and not scope.changed:
            return None
        copy.write(pikepdf.unparse_content_stream(rewritten) if rewritten is not None else form.read_bytes())
        return copy

    def _check_pattern(self, pattern: pikepdf.Object | None) -> None:
        """A tiling pattern repeats its own content wherever it paints, which this walker does not
        follow: one that shows text or draws images makes the page unsafe (shadings and plain hatching
        patterns carry nothing to redact)."""
        if not isinstance(pattern, pikepdf.Stream) or pattern.get(Name.PatternType) != 1:
            return
        if pattern.objgen not in self._patterns_checked:
            self._patterns_checked.add(pattern.objgen)
            if any(
                str(instruction.operator) in _DRAWS_CONTENT
                for instruction in parse_instructions(pattern, self.operators)
            ):
                raise UnsafePage("pattern_content")

    def _note_imaged(self, quad: list[tuple[float, float]]) -> None:
        """Trigger regions whose pixels were painted keep their own box: the painted area shows it anyway."""
        if self.layout is not None:
            self._keep_boxes({number for number, rect in enumerate(self.layout.triggers) if quad_hits(quad, rect)})

    def _outline(
        self, outline: PathOutline, operator: str, operands: list[pikepdf.Object], state: GraphicsState
    ) -> None:
        try:
            outline.add(operator, numbers(operands, _PATH_OPERANDS[operator]), state.ctm)
        except UnsafePage:  # a path this walker cannot place: whatever it draws, the regions' boxes cover it
            self._note_art(None)

    def _note_art(self, outline: PathOutline | None) -> None:
        """Explicit regions that a painted path's outline reaches into (every one, for `None`) keep their box
        (see art). A pattern match's box covers the text it matched only, so it is shown by its mask."""
        if self.layout is not None:
            self._keep_boxes(
                {
                    n
                    for n in self.layout.explicit_triggers()
                    if outline is None or outline.reaches(self.layout.triggers[n])
                }
            )

    def _keep_boxes(self, triggers: set[int]) -> None:
        self._boxed |= triggers
        self.replaced -= triggers

    def boxed_explicit(self) -> frozenset[int]:
        """The explicit regions over pixels or vector art, whose lines a re-set would slide under their box."""
        if self.layout is None:
            return frozenset()
        return frozenset(self._boxed & set(self.layout.explicit_triggers()))

    def _under_regions(self, quad: list[tuple[float, float]]) -> bool:
        return any(quad_hits(quad, rect) for rect in self.regions)


_DRAWS_CONTENT = {"Tj", "TJ", "'", '"', "Do", "INLINE IMAGE"}
_PATH_OPERANDS = {"m": 2, "l": 2, "c": 6, "v": 4, "y": 4, "h": 0, "re": 4}
