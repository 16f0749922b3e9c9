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
from dataclasses import dataclass
from decimal import Decimal

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, OperatorBudget, too_complex
from docjobs.pdf.redaction.fonts import UNKNOWN_FONT, FontModel, font_model
from docjobs.pdf.redaction.geometry import IDENTITY, Matrix, corners, multiply, quad_hits, strip_hits, translate
from docjobs.pdf.redaction.images import copy_stream, redact_image
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.resources import Instruction, MarkedContent, ResourceScope
from docjobs.pdf.redaction.stream import make_instruction, matrix_of, matrix_operand, numbers, parse_instructions

_ZERO_WIDTH_BOX = 0.01  # em: a glyph without advance still gets a box, so it cannot hide under a region


@dataclass(frozen=True)
class ContentRemoval:
    glyphs_removed: int
    images_redacted: int  # image XObjects whose pixels were overwritten


def remove_content(
    pdf: pikepdf.Pdf, page_number: int, regions: list[Rect], *, budgets: Budgets = DEFAULT_BUDGETS
) -> ContentRemoval:
    """Remove from page `page_number` (1-based) every glyph and image pixel under `regions` (default user
    space), editing `pdf` in place; the caller saves. Raises UnsafePage, leaving the page unchanged, and
    `input.too_complex` when the page's content (its forms included) exceeds `budgets`."""
    page = pdf.pages[page_number - 1]
    if not regions:
        return ContentRemoval(0, 0)
    saved = {key: page.obj.get(key) for key in (Name.Contents, Name.Resources)}
    walker = _Walker(pdf, regions, budgets)
    try:
        scope = ResourceScope(page.obj, _inherited_resources(page.obj))
        rewritten = walker.rewrite(
            parse_instructions(page, walker.operators), scope, _GraphicsState(ctm=IDENTITY), base_depth=0
        )
        if rewritten is not None:
            page.obj[Name.Contents] = pdf.make_stream(pikepdf.unparse_content_stream(rewritten))
    except UnsafePage:
        for key, value in saved.items():
            if value is None:
                del page.obj[key]
            else:
                page.obj[key] = value
        raise
    return ContentRemoval(walker.glyphs_removed, walker.images_redacted)


@dataclass(frozen=True)
class _GraphicsState:
    """The part of the graphics state that places glyphs and images (saved by q, restored by Q)."""

    ctm: Matrix
    font: FontModel | None = None
    size: float = 0.0
    char_spacing: float = 0.0
    word_spacing: float = 0.0
    scale: float = 1.0  # Tz / 100
    leading: float = 0.0
    rise: float = 0.0


@dataclass
class _TextPosition:
    matrix: Matrix = IDENTITY  # Tm
    line: Matrix = IDENTITY  # Tlm
    lost: str | None = None  # set when an unknown advance made Tm unknowable: the reason to raise

    def move_line(self, tx: float, ty: float) -> None:
        self.line = self.matrix = multiply(translate(tx, ty), self.line)
        self.lost = None


class _Walker:
    def __init__(self, pdf: pikepdf.Pdf, regions: list[Rect], budgets: Budgets) -> None:
        self.pdf = pdf
        self.regions = regions
        self.budgets = budgets
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
        for instruction in instructions:
            operator = str(instruction.operator)
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
                state, replacement = self._show(instruction, state, text)
                if replacement is not None:
                    out.extend(replacement)
                    changed = True
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
            out.append(instruction)
        while len(self._marks) > base_depth:  # sequences left open at the end of this stream
            changed |= self._marks.pop().close(self.pdf)
        return out if changed else None

    # --- state ------------------------------------------------------------------------------

    def _set_font(self, operands: list[pikepdf.Object], state: _GraphicsState, scope: ResourceScope) -> _GraphicsState:
        if len(operands) != 2:
            raise UnsafePage("unparsable_content")
        font = self._font(scope.get(Name.Font, operands[0]))
        return dataclasses.replace(state, font=font, size=numbers(operands[1:], 1)[0])

    def _set_extgstate(
        self, operands: list[pikepdf.Object], state: _GraphicsState, scope: ResourceScope
    ) -> _GraphicsState:
        extgstate = scope.get(Name.ExtGState, operands[0]) if len(operands) == 1 else None
        font = extgstate.get(Name.Font) if isinstance(extgstate, pikepdf.Dictionary) else None
        if not isinstance(font, pikepdf.Array):
            return state
        if len(font) != 2:
            raise UnsafePage("unparsable_content")
        return dataclasses.replace(state, font=self._font(font[0]), size=numbers([font[1]], 1)[0])

    def _font(self, font: pikepdf.Object | None) -> FontModel:
        if font is None or not font.is_indirect:
            return font_model(font)
        key = font.objgen
        if key not in self._fonts:
            self._fonts[key] = font_model(font)
        return self._fonts[key]

    # --- text -------------------------------------------------------------------------------

    def _show(
        self, instruction: pikepdf.ContentStreamInstruction, state: _GraphicsState, text: _TextPosition
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
        kept = self._show_items(items, state, text)
        return state, None if kept is None else [*prefix, make_instruction("TJ", pikepdf.Array(kept))]

    def _show_items(
        self, items: list[pikepdf.Object], state: _GraphicsState, text: _TextPosition
    ) -> list[pikepdf.Object | float] | None:
        """Advance through strings and TJ numbers; the TJ array without the glyphs under regions (None
        if none were), removed glyphs replaced by numbers that move the same distance."""
        font = state.font or UNKNOWN_FONT
        out: list[pikepdf.Object | float] = []
        pending = 0.0  # displacement (thousandths of text space units) not yet written
        removed = 0
        for item in items:
            if isinstance(item, pikepdf.String):
                kept = bytearray()
                for glyph in font.glyphs(bytes(item)):
                    if self._glyph_under_regions(font, glyph.width, state, text):
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
                    if glyph.width is not None:
                        spacing = state.char_spacing + (state.word_spacing if glyph.is_space else 0.0)
                        advance = (glyph.width * state.size + spacing) * state.scale
                        text.matrix = multiply(translate(advance, 0), text.matrix)
                if kept:
                    out.append(pikepdf.String(bytes(kept)))
            elif isinstance(item, (int, float, Decimal)) and not isinstance(item, bool):
                number = float(item)
                text.matrix = multiply(translate(-number / 1000 * state.size * state.scale, 0), text.matrix)
                pending += number
            else:
                raise UnsafePage("unparsable_content")
        if pending:
            out.append(pending)
        if not removed:
            return None
        self.glyphs_removed += removed
        for mark in self._marks:
            mark.dirty = True
        return out

    def _glyph_under_regions(
        self, font: FontModel, width: float | None, state: _GraphicsState, text: _TextPosition
    ) -> bool:
        """Whether the glyph at the current position lies under a region (raises when that cannot be
        told, or when it is under one but cannot be removed)."""
        if font.vertical:
            raise UnsafePage("vertical_text")
        size = state.size
        glyph_space = multiply((size * state.scale, 0.0, 0.0, size, 0.0, state.rise), multiply(text.matrix, state.ctm))
        if width is None or text.lost is not None:
            reason = text.lost or font.unknown_reason
            if width is None:
                text.lost = reason
            if any(strip_hits(glyph_space, font.descent, font.ascent, rect) for rect in self.regions):
                raise UnsafePage(reason)
            return False
        left, right = (0.0, width) if width else (-_ZERO_WIDTH_BOX / 2, _ZERO_WIDTH_BOX / 2)
        if not self._under_regions(corners(glyph_space, left, font.descent, right, font.ascent)):
            return False
        if font.type3:
            raise UnsafePage("type3_font")
        return True

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

    def _under_regions(self, quad: list[tuple[float, float]]) -> bool:
        return any(quad_hits(quad, rect) for rect in self.regions)


_DRAWS_CONTENT = {"Tj", "TJ", "'", '"', "Do", "INLINE IMAGE"}


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


def _inherited_resources(page: pikepdf.Dictionary) -> pikepdf.Object | None:
    """/Resources of the page, or of the nearest /Pages ancestor that carries it."""
    node: pikepdf.Object | None = page
    for _ in range(64):  # a bounded walk: a /Parent loop must not hang
        if not isinstance(node, pikepdf.Dictionary):
            return None
        if Name.Resources in node:
            return node[Name.Resources]
        node = node.get(Name.Parent)
    return None
