"""Redaction regions: rectangles on a page, in the page's default user space.

Default user space is the coordinate system of the page's own content stream and MediaBox (PDF points,
origin bottom-left, before /Rotate is applied). A viewer may show the page rotated or cropped; a region
is still given in these unrotated coordinates, so the same numbers work for every reader.
"""

from __future__ import annotations

from dataclasses import dataclass

IN_REGION_SHARE = 0.5  # a box with at least this share of its area inside a region is in that region


@dataclass(frozen=True)
class Rect:
    x0: float
    y0: float
    x1: float
    y1: float

    @classmethod
    def spanning(cls, x0: float, y0: float, x1: float, y1: float) -> Rect:
        """The rectangle with these corners, in any order."""
        return cls(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))

    def intersects(self, other: Rect) -> bool:
        """True when the two overlap with a positive area (touching edges do not count)."""
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def contains_point(self, x: float, y: float) -> bool:
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1

    def mostly_inside(self, region: Rect) -> bool:
        """True when at least IN_REGION_SHARE of this box lies in `region` (a box without area: any overlap)."""
        width = min(self.x1, region.x1) - max(self.x0, region.x0)
        height = min(self.y1, region.y1) - max(self.y0, region.y0)
        if width <= 0 or height <= 0:
            return False
        area = (self.x1 - self.x0) * (self.y1 - self.y0)
        return area <= 0 or width * height >= IN_REGION_SHARE * area

    def union(self, other: Rect) -> Rect:
        return Rect(min(self.x0, other.x0), min(self.y0, other.y0), max(self.x1, other.x1), max(self.y1, other.y1))

    def padded(self, by: float) -> Rect:
        return Rect(self.x0 - by, self.y0 - by, self.x1 + by, self.y1 + by)

    def shifted(self, dx: float, dy: float) -> Rect:
        return Rect(self.x0 + dx, self.y0 + dy, self.x1 + dx, self.y1 + dy)


PageRegions = dict[int, list[Rect]]  # 1-based page number -> regions on that page


class UnsafePage(Exception):
    """A page whose content cannot be rewritten safely (e.g. a Type3 font, an inline image under a region,
    an encoding without widths). `reason` is a short stable code recorded for that page, never content."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
