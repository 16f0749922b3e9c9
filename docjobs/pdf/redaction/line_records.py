"""What the content walker (docjobs/pdf/redaction/content.py) records of one content stream for re-setting its
lines (docjobs/pdf/redaction/layout.py): each glyph as placed, each showing and positioning operator, and which
operator set the spacing; and how those glyphs group into lines, measured along and across a glyph's baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from docjobs.pdf.redaction.geometry import Matrix, Point

SAME_BASELINE = 0.05  # points across the line direction
SCRIPT_EM = 0.5  # a run raised or lowered by at most this many ems of its line's font size is a super- or subscript
_SAME_DIRECTION = 1e-3

SpacingSource = tuple[int, int]  # (stream serial, index in that stream's rewritten instructions) of a Tc/Tw


@dataclass(frozen=True)
class PlacedGlyph:
    """One shown glyph as the walker met it, in the page's default user space."""

    code: bytes
    removed: bool
    triggered: bool  # removed by a region that re-sets its line
    origin: Point  # on the baseline (text rise not included)
    direction: Point  # unit vector along the baseline
    up: Point  # one em across the baseline (the font size)
    natural: float | None  # the glyph's own advance, points; None when unknown
    advance: float | None  # the advance as drawn (character and word spacing included)
    is_space: bool
    ascent: float  # em
    descent: float

    @property
    def em(self) -> float:
        return math.hypot(*self.up)


@dataclass(eq=False)
class Show:
    """A text-showing operator: where its instructions are in the rewritten stream, and its glyphs."""

    start: int
    end: int
    glyphs: list[PlacedGlyph]
    text_matrix: Matrix  # Tm (its linear part is what a re-set run keeps)
    ctm: Matrix
    spacing: tuple[float, float]  # Tc, Tw in effect
    sources: tuple[SpacingSource | None, SpacingSource | None]
    line_after: Matrix | None = None  # ' and ": the line matrix their implicit T* moved to


@dataclass(frozen=True)
class Move:
    """A text-positioning operator: a relative one (Td, TD, T*) with the line matrix it gave, or an
    absolute one (BT, ET, Tm: `line_after` None) after which nothing earlier matters."""

    index: int
    operator: str
    line_after: Matrix | None
    leading: float | None = None  # TD sets the leading as well


@dataclass
class LineRecorder:
    """What one content stream showed and how it moved, for `reset_lines` once the stream is walked."""

    serial: int
    events: list[Show | Move] = field(default_factory=list)
    spacing_ops: dict[int, str] = field(default_factory=dict)  # index -> "Tc" / "Tw"

    def source(self, index: int, operator: str) -> SpacingSource:
        self.spacing_ops[index] = operator
        return (self.serial, index)


def lines_of(events: list[Show | Move]) -> list[list[Show]]:
    """Consecutive showing operators with glyphs on one baseline, in stream order, each with the scripts
    between its runs. Re-set without them, the part before a script would be laid out over the part after."""
    lines: list[list[Show]] = []
    for event in events:
        if not isinstance(event, Show) or not event.glyphs:
            continue
        if lines and _same_line(lines[-1][0].glyphs[0], event.glyphs[0]):
            lines[-1].append(event)
        elif len(lines) > 1 and _same_line(lines[-2][0].glyphs[0], event.glyphs[0]) and _script(lines[-2], lines[-1]):
            script = lines.pop()
            lines[-1] += [*script, event]
        else:
            lines.append([event])
    return lines


def _same_line(first: PlacedGlyph, glyph: PlacedGlyph) -> bool:
    return parallel(first, glyph) and abs(distance_across(first, glyph.origin)) <= SAME_BASELINE


def _script(line: list[Show], run: list[Show]) -> bool:
    """Whether `run` is a super- or subscript of `line`: parallel to it and raised or lowered by at most
    SCRIPT_EM of its first glyph's em."""
    first = line[0].glyphs[0]
    reach = SCRIPT_EM * first.em
    return all(
        parallel(first, show.glyphs[0]) and abs(distance_across(first, show.glyphs[0].origin)) <= reach for show in run
    )


def parallel(first: PlacedGlyph, glyph: PlacedGlyph) -> bool:
    (ux, uy), (vx, vy) = first.direction, glyph.direction
    return abs(ux - vx) <= _SAME_DIRECTION and abs(uy - vy) <= _SAME_DIRECTION


def distance_across(first: PlacedGlyph, point: Point) -> float:
    """How far `point` lies from the baseline of `first`, across it (positive: above)."""
    (ux, uy), (dx, dy) = first.direction, (point[0] - first.origin[0], point[1] - first.origin[1])
    return ux * dy - uy * dx


def distance_along(first: PlacedGlyph, point: Point) -> float:
    return (point[0] - first.origin[0]) * first.direction[0] + (point[1] - first.origin[1]) * first.direction[1]
