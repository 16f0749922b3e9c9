"""Vector art under a hand-drawn region: what of the paths a page paints its redaction box must still cover.

With layout `mask`, a region drawn over text is shown by fixed-width masks once its glyphs are gone (its own
box would tell the name's width). Lines, curves and fills under it are not removed from the content, though:
where any reaches into the region, the region keeps its box at the size it was drawn. What a painted path shows
inside a region is its outline (a stroke, or the edge of a fill): a fill whose edges all lie outside the region,
such as a page or cell background, paints the region one colour and shows nothing. So the outline is what
counts, piece by piece (a segment, a curve by the hull of its control points, a rectangle's four edges), and a
piece counts when its extent reaches into the region's inside (conservative for a diagonal or a curve; a
stroke's own width is not added).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from docjobs.pdf.redaction.geometry import Matrix, Point, apply, corners
from docjobs.pdf.redaction.regions import Rect

CONSTRUCTS = frozenset({"m", "l", "c", "v", "y", "h", "re"})
PAINTS = frozenset({"S", "s", "f", "F", "f*", "B", "B*", "b", "b*"})  # `n` ends a path unpainted (a clip)


@dataclass
class PathOutline:
    """The outline of the path being built, in default user space (a path outlives q/Q, not a painting op)."""

    pieces: list[list[Point]] = field(default_factory=list)
    _current: Point | None = None
    _start: Point | None = None

    def add(self, operator: str, operands: list[float], ctm: Matrix) -> None:
        points = [apply(ctm, operands[index], operands[index + 1]) for index in range(0, len(operands) - 1, 2)]
        if operator == "re" and len(operands) == 4:
            x, y, width, height = operands
            box = corners(ctm, x, y, x + width, y + height)
            self.pieces += [[box[index], box[(index + 1) % 4]] for index in range(4)]
            self._current = self._start = box[0]
        elif operator == "m" and points:
            self._current = self._start = points[-1]
        elif operator == "h":
            if self._current is not None and self._start is not None:
                self.pieces.append([self._current, self._start])
            self._current = self._start
        elif points:
            if self._current is not None:
                self.pieces.append([self._current, *points])
            self._current = points[-1]

    def reaches(self, region: Rect) -> bool:
        """Whether any piece of the outline reaches into the region's inside."""
        for piece in self.pieces:
            xs, ys = [x for x, _ in piece], [y for _, y in piece]
            if max(xs) > region.x0 and min(xs) < region.x1 and max(ys) > region.y0 and min(ys) < region.y1:
                return True
        return False
