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
import math
from dataclasses import dataclass
from decimal import Decimal

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, OperatorBudget, too_complex
from docjobs.pdf.redaction.art import CONSTRUCTS, PAINTS, PathOutline
from docjobs.pdf.redaction.fonts import UNKNOWN_FONT, FontModel, Glyph, font_model
from docjobs.pdf.redaction.geometry import IDENTITY, Matrix, corners, multiply, quad_hits, strip_hits, translate
from docjobs.pdf.redaction.images import copy_stream, redact_image
from docjobs.pdf.redaction.layout import (
    LineRecorder,
    MaskLayout,
    Move,
    PlacedGlyph,
    ResetLine,
    Show,
    SpacingSource,
    reset_lines,
)
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.resources import Instruction, MarkedContent, ResourceScope, inherited_resources
from docjobs.pdf.redaction.stream import make_instruction, matrix_of, matrix_operand, numbers, parse_instructions

_ZERO_WIDTH_BOX = 0.01  # em: a glyph without advance still gets a box, so it cannot hide under a region


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
            parse_instructions(page, walker.operators), scope, _GraphicsState(ctm=IDENTITY), base_depth=0
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


@dataclass(frozen=True)
class _GraphicsState:
    """The part of the graphics state that places glyphs and images (saved by q, restored by Q)."""

    ctm: Matrix
    font: FontModel | None = None
    font_ref: tuple[int, int] | None = None  # the font dictionary's object id (None: a direct object)
    size: float = 0.0
    char_spacing: float = 0.0
    word_spacing: float = 0.0
    scale: float = 1.0  # Tz / 100
    leading: float = 0.0
    rise: float = 0.0
    invisible: bool = False  # text rendering mode 3: an OCR layer over its scan
    spacing_sources: tuple[SpacingSource | None, SpacingSource | None] = (None, None)  # what set Tc, Tw


@dataclass
class _TextPosition:
    matrix: Matrix = IDENTITY  # Tm
    line: Matrix = IDENTITY  # Tlm
    lost: str | None = None  # set when an unknown advance made Tm unknowable: the reason to raise

    def move_line(self, tx: float, ty: float) -> None:
        self.line = self.matrix = multiply(translate(tx, ty), self.line)
        self.lost = None


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
        self, instructions: list[Instruction], scope: ResourceScope, state: _GraphicsState, base_depth: int
    ) -> list[Instruction] | None:
        """The instructions with redacted content removed, or None when they needed no change."""
        out: list[Instruction] = []
        saved: list[_GraphicsState] = []
        text = _TextPosition()
        changed = False
        outline = PathOutline()
        recorder = LineRecorder(self._streams) if self.layout is not None else None
        self._streams += 1
        for instruction in instructions:
            operator = str(instruction.operator)
            if recorder is not None:
                state = self._record_position(recorder, operator, instruction, state, text, len(out))
            if isinstance(instruction, pikepdf.ContentStreamInlineImage):
                if self._under_regions(corners(state.ctm, 0, 0, 1, 1)):
                    raise UnsafePage("inline_image")
            elif operator == "q":
                saved.append(state)
            elif operator == "Q":
                state = saved.pop() if saved else state
            elif operator == "cm":
                state = dataclasses.replace(state, ctm=multiply(matrix_operand(instruction), state.ctm))
            elif operator == "Tf":
                state = self._set_font(list(instruction.operands), state, scope)
            elif operator == "Tr":
                state = dataclasses.replace(state, invisible=numbers(list(instruction.operands), 1)[0] == 3)
            elif operator in ("Tc", "Tw", "Tz", "TL", "Ts"):
                state = _with_text_parameter(state, operator, *numbers(list(instruction.operands), 1))
            elif operator == "gs":
                state = self._set_extgstate(list(instruction.operands), state, scope)
            elif operator == "BT":
                text = _TextPosition()
            elif operator in ("Td", "TD"):
                tx, ty = numbers(list(instruction.operands), 2)
                if operator == "TD":
                    state = dataclasses.replace(state, leading=-ty)
                text.move_line(tx, ty)
            elif operator == "Tm":
                text.matrix = text.line = matrix_operand(instruction)
                text.lost = None
            elif operator == "T*":
                text.move_line(0, -state.leading)
            elif operator in ("Tj", "TJ", "'", '"'):
                placed: list[PlacedGlyph] | None = [] if recorder is not None else None
                start = len(out)
                state, replacement = self._show(instruction, state, text, placed)
                out.extend(replacement if replacement is not None else [instruction])
                changed |= replacement is not None
                if recorder is not None and placed is not None:
                    recorder.events.append(self._shown(start, len(out), placed, operator, state, text, recorder))
                continue
            elif operator == "Do":
                renamed = self._draw(list(instruction.operands), state, scope)
                if renamed is not None:
                    out.append(make_instruction("Do", renamed))
                    changed = True
                    continue
            elif operator in ("scn", "SCN") and instruction.operands and isinstance(instruction.operands[-1], Name):
                self._check_pattern(scope.get(Name.Pattern, instruction.operands[-1]))
            elif operator in ("BDC", "BMC"):
                self._marks.append(MarkedContent(out, len(out), scope))
            elif operator == "EMC" and len(self._marks) > base_depth:
                changed |= self._marks.pop().close(self.pdf)
            elif self._art_matters and operator in CONSTRUCTS:
                self._outline(outline, operator, list(instruction.operands), state)
            elif self._art_matters and operator in (*PAINTS, "n", "sh"):
                if operator != "n":
                    self._note_art(outline if operator != "sh" else None)  # a shading fills the whole clip
                outline = PathOutline()
            out.append(instruction)
        while len(self._marks) > base_depth:  # sequences left open at the end of this stream
            changed |= self._marks.pop().close(self.pdf)
        if recorder is not None and self.layout is not None:
            reset = reset_lines(out, recorder, self.layout, self._kept_spacing)
            if reset is not None:
                out, changed = reset.instructions, True
                self.lines += reset.lines
        return out if changed else None

    def _record_position(
        self,
        recorder: LineRecorder,
        operator: str,
        instruction: Instruction,
        state: _GraphicsState,
        text: _TextPosition,
        index: int,
    ) -> _GraphicsState:
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
        state: _GraphicsState,
        text: _TextPosition,
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

    def _set_font(self, operands: list[pikepdf.Object], state: _GraphicsState, scope: ResourceScope) -> _GraphicsState:
        if len(operands) != 2:
            raise UnsafePage("unparsable_content")
        resource = scope.get(Name.Font, operands[0])
        font = self._font(resource)
        return dataclasses.replace(state, font=font, font_ref=_object_id(resource), size=numbers(operands[1:], 1)[0])

    def _set_extgstate(
        self, operands: list[pikepdf.Object], state: _GraphicsState, scope: ResourceScope
    ) -> _GraphicsState:
        extgstate = scope.get(Name.ExtGState, operands[0]) if len(operands) == 1 else None
        font = extgstate.get(Name.Font) if isinstance(extgstate, pikepdf.Dictionary) else None
        if not isinstance(font, pikepdf.Array):
            return state
        if len(font) != 2:
            raise UnsafePage("unparsable_content")
        return dataclasses.replace(
            state, font=self._font(font[0]), font_ref=_object_id(font[0]), size=numbers([font[1]], 1)[0]
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
        state: _GraphicsState,
        text: _TextPosition,
        placed: list[PlacedGlyph] | None,
    ) -> tuple[_GraphicsState, list[Instruction] | None]:
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
        state: _GraphicsState,
        text: _TextPosition,
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
                    under = self._glyph_under_regions(font, glyph.width, state, text)
                    if placed is not None:
                        placed.append(self._placed(font, glyph, under, state, text))
                    if under:
                        if kept:
                            out.append(pikepdf.String(bytes(kept)))
                            kept.clear()
                        pending -= _removed_displacement(glyph.width, glyph.is_space, state)
                        removed += 1
                    else:
                        if pending:
                            out.append(pending)
                            pending = 0.0
                        kept += glyph.code
                    moved = _advance(font, glyph, state)
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

    def _glyph_under_regions(
        self, font: FontModel, width: float | None, state: _GraphicsState, text: _TextPosition
    ) -> bool:
        """Whether the glyph at the current position lies under a region (raises when that cannot be
        told, or when it is under one but cannot be removed)."""
        size = state.size
        glyph_space = multiply((size * state.scale, 0.0, 0.0, size, 0.0, state.rise), multiply(text.matrix, state.ctm))
        if font.vertical:
            return self._vertical_glyph_under_regions(font, width, glyph_space, text)
        # The box pdfminer gave the matched glyphs (and their cores) runs from the descent to one em above it. A
        # font's ascent can reach further (DejaVu's: 1.232 em, the descent 0.462), into the middle of a line set
        # 1.17 em above: the whole ascent would take that line's letters.
        top = min(font.ascent, font.descent + 1.0)
        if width is None or text.lost is not None:
            reason = text.lost or font.unknown_reason
            if width is None:
                text.lost = reason
            if any(strip_hits(glyph_space, font.descent, top, rect) for rect in self.aims):
                raise UnsafePage(reason)
            return False
        left, right = (0.0, width) if width else (-_ZERO_WIDTH_BOX / 2, _ZERO_WIDTH_BOX / 2)
        quad = corners(glyph_space, left, font.descent, right, top)
        if not any(quad_hits(quad, rect) for rect in self.aims):
            return False
        if font.type3:
            raise UnsafePage("type3_font")
        if not font.removable:
            raise UnsafePage("unsupported_encoding")
        return True

    def _vertical_glyph_under_regions(
        self, font: FontModel, width: float | None, glyph_space: Matrix, text: _TextPosition
    ) -> bool:
        """A glyph of vertical writing hangs from its origin (its /DW2: `vertical_metrics`), centred on it across
        the column. It is never removed: one under a region, or possibly under one, makes the page unsafe."""
        half = (width if width is not None else 1.0) / 2
        if width is None or font.vertical_metrics is None or text.lost is not None:
            text.lost = text.lost or "vertical_text"
            down_the_column = multiply((0.0, -1.0, 1.0, 0.0, 0.0, 0.0), glyph_space)
            if any(strip_hits(down_the_column, -half, half, rect) for rect in self.aims):
                raise UnsafePage("vertical_text")
            return False
        hang = font.vertical_metrics[0]
        quad = corners(glyph_space, -half, font.descent - hang, half, font.ascent - hang)
        if any(quad_hits(quad, rect) for rect in self.aims):
            raise UnsafePage("vertical_text")
        return False

    def _placed(
        self, font: FontModel, glyph: Glyph, removed: bool, state: _GraphicsState, text: _TextPosition
    ) -> PlacedGlyph:
        """The glyph at the current position, in default user space, as the line re-set needs it."""
        if font.vertical:
            return _placed_vertical(font, glyph, state, text)
        line_space = multiply(text.matrix, state.ctm)
        glyph_space = multiply((state.size * state.scale, 0.0, 0.0, state.size, 0.0, state.rise), line_space)
        unit = math.hypot(line_space[0], line_space[1])
        natural = advance = None
        if glyph.width is not None and text.lost is None:
            spacing = state.char_spacing + (state.word_spacing if glyph.is_space else 0.0)
            natural = glyph.width * state.size * state.scale * unit
            advance = (glyph.width * state.size + spacing) * state.scale * unit
        length = math.hypot(glyph_space[0], glyph_space[1]) or 1.0
        triggered = False
        # An OCR layer stays aligned with its scan: the painted pixels show the region there anyway.
        if removed and self.layout is not None and glyph.width is not None and not state.invisible:
            left, right = (0.0, glyph.width) if glyph.width else (-_ZERO_WIDTH_BOX / 2, _ZERO_WIDTH_BOX / 2)
            quad = corners(glyph_space, left, font.descent, right, font.ascent)
            hits = {number for number, rect in enumerate(self.layout.triggers) if quad_hits(quad, rect)}
            self.replaced |= hits - self._boxed
            triggered = bool(hits)
        return PlacedGlyph(
            code=glyph.code,
            removed=removed,
            triggered=triggered,
            origin=(line_space[4], line_space[5]),
            direction=(glyph_space[0] / length, glyph_space[1] / length),
            up=(glyph_space[2], glyph_space[3]),
            natural=natural,
            advance=advance,
            is_space=glyph.is_space,
            ascent=font.ascent,
            descent=font.descent,
        )

    # --- XObjects ---------------------------------------------------------------------------

    def _draw(self, operands: list[pikepdf.Object], state: _GraphicsState, scope: ResourceScope) -> Name | None:
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

    def _form(self, form: pikepdf.Stream, state: _GraphicsState, parent: ResourceScope) -> pikepdf.Stream | None:
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
        self, outline: PathOutline, operator: str, operands: list[pikepdf.Object], state: _GraphicsState
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


def _with_text_parameter(state: _GraphicsState, operator: str, value: float) -> _GraphicsState:
    if operator == "Tc":
        return dataclasses.replace(state, char_spacing=value)
    if operator == "Tw":
        return dataclasses.replace(state, word_spacing=value)
    if operator == "Tz":
        return dataclasses.replace(state, scale=value / 100)
    if operator == "TL":
        return dataclasses.replace(state, leading=value)
    return dataclasses.replace(state, rise=value)


def _advance(font: FontModel, glyph: Glyph, state: _GraphicsState) -> tuple[float, float] | None:
    """How far the glyph moves the text position, in text space (None: unknown). In vertical writing it moves
    down the column by the /DW2 advance; character spacing applies along it, horizontal scaling does not."""
    if glyph.width is None:
        return None
    spacing = state.char_spacing + (state.word_spacing if glyph.is_space else 0.0)
    if not font.vertical:
        return (glyph.width * state.size + spacing) * state.scale, 0.0
    if font.vertical_metrics is None:
        return None
    return 0.0, font.vertical_metrics[1] * state.size + spacing


def _placed_vertical(font: FontModel, glyph: Glyph, state: _GraphicsState, text: _TextPosition) -> PlacedGlyph:
    """A glyph of vertical writing, never removed, as what a re-set line must not cover: along its column
    (downwards) from its origin by its advance, and half its width either side (its `ascent` and `descent`)."""
    line_space = multiply(text.matrix, state.ctm)
    glyph_space = multiply((state.size * state.scale, 0.0, 0.0, state.size, 0.0, state.rise), line_space)
    moved = None if text.lost is not None else _advance(font, glyph, state)
    unit = math.hypot(line_space[2], line_space[3])
    natural = advance = None
    if moved is not None and font.vertical_metrics is not None:
        natural = -font.vertical_metrics[1] * state.size * unit
        advance = -moved[1] * unit
    length = math.hypot(glyph_space[2], glyph_space[3]) or 1.0
    half = (glyph.width if glyph.width is not None else 1.0) / 2
    return PlacedGlyph(
        code=glyph.code,
        removed=False,
        triggered=False,
        origin=(line_space[4], line_space[5]),
        direction=(-glyph_space[2] / length, -glyph_space[3] / length),
        up=(glyph_space[0], glyph_space[1]),
        natural=natural,
        advance=advance,
        is_space=glyph.is_space,
        ascent=half,
        descent=-half,
    )


def _removed_displacement(width: float | None, is_space: bool, state: _GraphicsState) -> float:
    """The TJ number (thousandths of an em) that moves as far as the removed glyph did."""
    if width is None:
        raise UnsafePage("unknown_widths")
    spacing = state.char_spacing + (state.word_spacing if is_space else 0.0)
    if state.size == 0:
        if spacing:  # the advance is pure spacing, which no TJ number can reproduce at size 0
            raise UnsafePage("zero_font_size")
        return 0.0
    return (width + spacing / state.size) * 1000


def _object_id(font: pikepdf.Object | None) -> tuple[int, int] | None:
    return font.objgen if isinstance(font, pikepdf.Dictionary) and font.is_indirect else None
