"""Where a shown glyph lies, for content redaction (docjobs/pdf/redaction/content.py): the graphics and text
state that place it (as a viewer keeps them), whether its box is under a region, how far it moves the text
position, and the glyph as placed in default user space for the line re-set (docjobs/pdf/redaction/layout.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from docjobs.pdf.redaction.fonts import FontModel, Glyph
from docjobs.pdf.redaction.geometry import IDENTITY, Matrix, corners, multiply, quad_hits, strip_hits, translate
from docjobs.pdf.redaction.line_records import PlacedGlyph, SpacingSource
from docjobs.pdf.redaction.regions import Rect, UnsafePage

ZERO_WIDTH_BOX = 0.01  # em: a glyph without advance still gets a box, so it cannot hide under a region


@dataclass(frozen=True)
class GraphicsState:
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
class TextPosition:
    matrix: Matrix = IDENTITY  # Tm
    line: Matrix = IDENTITY  # Tlm
    lost: str | None = None  # set when an unknown advance made Tm unknowable: the reason to raise

    def move_line(self, tx: float, ty: float) -> None:
        self.line = self.matrix = multiply(translate(tx, ty), self.line)
        self.lost = None


def with_text_parameter(state: GraphicsState, operator: str, value: float) -> GraphicsState:
    if operator == "Tc":
        return dataclasses.replace(state, char_spacing=value)
    if operator == "Tw":
        return dataclasses.replace(state, word_spacing=value)
    if operator == "Tz":
        return dataclasses.replace(state, scale=value / 100)
    if operator == "TL":
        return dataclasses.replace(state, leading=value)
    return dataclasses.replace(state, rise=value)


def glyph_under(
    font: FontModel, width: float | None, state: GraphicsState, text: TextPosition, aims: list[Rect]
) -> bool:
    """Whether the glyph at the current position lies under a region (raises when that cannot be
    told, or when it is under one but cannot be removed)."""
    size = state.size
    glyph_space = multiply((size * state.scale, 0.0, 0.0, size, 0.0, state.rise), multiply(text.matrix, state.ctm))
    if font.vertical:
        return _vertical_glyph_under(font, width, glyph_space, text, aims)
    # The box pdfminer gave the matched glyphs (and their cores) runs from the descent to one em above it. A
    # font's ascent can reach further (DejaVu's: 1.232 em, the descent 0.462), into the middle of a line set
    # 1.17 em above: the whole ascent would take that line's letters.
    top = min(font.ascent, font.descent + 1.0)
    if width is None or text.lost is not None:
        reason = text.lost or font.unknown_reason
        if width is None:
            text.lost = reason
        if any(strip_hits(glyph_space, font.descent, top, rect) for rect in aims):
            raise UnsafePage(reason)
        return False
    left, right = (0.0, width) if width else (-ZERO_WIDTH_BOX / 2, ZERO_WIDTH_BOX / 2)
    quad = corners(glyph_space, left, font.descent, right, top)
    if not any(quad_hits(quad, rect) for rect in aims):
        return False
    if font.type3:
        raise UnsafePage("type3_font")
    if not font.removable:
        raise UnsafePage("unsupported_encoding")
    return True


def _vertical_glyph_under(
    font: FontModel, width: float | None, glyph_space: Matrix, text: TextPosition, aims: list[Rect]
) -> bool:
    """A glyph of vertical writing hangs from its origin (its /DW2: `vertical_metrics`), centred on it across
    the column. It is never removed: one under a region, or possibly under one, makes the page unsafe."""
    half = (width if width is not None else 1.0) / 2
    if width is None or font.vertical_metrics is None or text.lost is not None:
        text.lost = text.lost or "vertical_text"
        down_the_column = multiply((0.0, -1.0, 1.0, 0.0, 0.0, 0.0), glyph_space)
        if any(strip_hits(down_the_column, -half, half, rect) for rect in aims):
            raise UnsafePage("vertical_text")
        return False
    hang = font.vertical_metrics[0]
    quad = corners(glyph_space, -half, font.descent - hang, half, font.ascent - hang)
    if any(quad_hits(quad, rect) for rect in aims):
        raise UnsafePage("vertical_text")
    return False


def placed_glyph(
    font: FontModel,
    glyph: Glyph,
    removed: bool,
    state: GraphicsState,
    text: TextPosition,
    triggers: tuple[Rect, ...] | None,
) -> tuple[PlacedGlyph, set[int]]:
    """The glyph at the current position, in default user space, as the line re-set needs it, and the `triggers`
    (their numbers) that removed it (None: no line is re-set)."""
    if font.vertical:
        return placed_vertical(font, glyph, state, text), set()
    line_space = multiply(text.matrix, state.ctm)
    glyph_space = multiply((state.size * state.scale, 0.0, 0.0, state.size, 0.0, state.rise), line_space)
    unit = math.hypot(line_space[0], line_space[1])
    natural = advance = None
    if glyph.width is not None and text.lost is None:
        spacing = state.char_spacing + (state.word_spacing if glyph.is_space else 0.0)
        natural = glyph.width * state.size * state.scale * unit
        advance = (glyph.width * state.size + spacing) * state.scale * unit
    length = math.hypot(glyph_space[0], glyph_space[1]) or 1.0
    hits: set[int] = set()
    # An OCR layer stays aligned with its scan: the painted pixels show the region there anyway.
    if removed and triggers is not None and glyph.width is not None and not state.invisible:
        left, right = (0.0, glyph.width) if glyph.width else (-ZERO_WIDTH_BOX / 2, ZERO_WIDTH_BOX / 2)
        quad = corners(glyph_space, left, font.descent, right, font.ascent)
        hits = {number for number, rect in enumerate(triggers) if quad_hits(quad, rect)}
    placed = PlacedGlyph(
        code=glyph.code,
        removed=removed,
        triggered=bool(hits),
        origin=(line_space[4], line_space[5]),
        direction=(glyph_space[0] / length, glyph_space[1] / length),
        up=(glyph_space[2], glyph_space[3]),
        natural=natural,
        advance=advance,
        is_space=glyph.is_space,
        ascent=font.ascent,
        descent=font.descent,
    )
    return placed, hits


def glyph_advance(font: FontModel, glyph: Glyph, state: GraphicsState) -> tuple[float, float] | None:
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


def placed_vertical(font: FontModel, glyph: Glyph, state: GraphicsState, text: TextPosition) -> PlacedGlyph:
    """A glyph of vertical writing, never removed, as what a re-set line must not cover: along its column
    (downwards) from its origin by its advance, and half its width either side (its `ascent` and `descent`)."""
    line_space = multiply(text.matrix, state.ctm)
    glyph_space = multiply((state.size * state.scale, 0.0, 0.0, state.size, 0.0, state.rise), line_space)
    moved = None if text.lost is not None else glyph_advance(font, glyph, state)
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


def removed_displacement(width: float | None, is_space: bool, state: GraphicsState) -> float:
    """The TJ number (thousandths of an em) that moves as far as the removed glyph did."""
    if width is None:
        raise UnsafePage("unknown_widths")
    spacing = state.char_spacing + (state.word_spacing if is_space else 0.0)
    if state.size == 0:
        if spacing:  # the advance is pure spacing, which no TJ number can reproduce at size 0
            raise UnsafePage("zero_font_size")
        return 0.0
    return (width + spacing / state.size) * 1000
