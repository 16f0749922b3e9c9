"""The text-kept contract of re-set lines (docjobs/pdf/redaction/layout.py): the words read on each line before
are read after, in order, on their baseline, and no mask covers one."""

from __future__ import annotations

from dataclasses import dataclass

from docjobs.pdf.redaction.geometry import Point
from docjobs.pdf.redaction.regions import Rect

BASELINE_SHARE = 0.6  # a word's baseline lies within this share of its box's height from the bottom


@dataclass(frozen=True)
class ResetLine:
    """A re-set line as the text-kept check needs it: its start, direction and masks (default user space)."""

    origin: Point
    direction: Point
    masks: tuple[Rect, ...]
    baselines: tuple[float, float] = (0.0, 0.0)  # the lowest and highest baseline of its runs (scripts), across
    carry: Point = (0.0, 0.0)  # how far the text drawn after it with no move between was shifted (see `_carried`)

    def holds(self, box: Rect, tolerance: float = 0.5) -> bool:
        """Whether a word box lies on this line: one of its baselines runs through the lower part of the box (a
        baseline lies a descent above a word's bottom, far below its middle; the top of a word of the line below,
        set close, may reach just over this line's baseline), and it is not before the start."""
        (ux, uy), (x, y) = self.direction, self.origin
        corners = [(cx - x, cy - y) for cx in (box.x0, box.x1) for cy in (box.y0, box.y1)]
        across = [ux * dy - uy * dx for dx, dy in corners]
        along = [ux * dx + uy * dy for dx, dy in corners]
        bottom, top = min(across), max(across)
        low, high = self.baselines
        return bottom <= high and low <= bottom + BASELINE_SHARE * (top - bottom) and min(along) >= -tolerance


def reset_words_kept(
    was: list[tuple[str, Rect]], now: list[tuple[str, Rect]], lines: tuple[ResetLine, ...], tolerance: float = 0.5
) -> bool:
    """The text-kept contract of re-set lines: on each, the words read before (outside the regions) are read
    after in the same order, on the same baseline (their boxes' extent across the line within `tolerance`),
    none before the line's start, and none of the words after overlaps a mask. Letters a reader took for words
    of their own before, spaced apart by character spacing or kerning that the re-set line drops, may be read
    after as the one word they spell."""
    for line in lines:
        before = sorted((word for word in was if line.holds(word[1])), key=lambda word: _word_along(line, word[1]))
        after = sorted((word for word in now if line.holds(word[1])), key=lambda word: _word_along(line, word[1]))
        if any(box.intersects(mask.padded(-tolerance)) for _, box in after for mask in line.masks):
            return False
        found = 0  # how many of `before` were read after, in order
        for text, box in after:
            found += _words_read_as(text, box, before[found:], line, tolerance)
        if found < len(before):
            return False
    return True


def _words_read_as(text: str, box: Rect, before: list[tuple[str, Rect]], line: ResetLine, tolerance: float) -> int:
    """How many of the next words read before the word `text` read after is, on their baseline: the first one
    itself, or a run of single letters that spell it (0: none)."""
    if before and before[0][0] == text and _same_across(line, before[0][1], box, tolerance):
        return 1
    spelled = ""
    for count, (letter, letter_box) in enumerate(before, start=1):
        if len(letter) != 1 or not _same_across(line, letter_box, box, tolerance):
            return 0
        spelled += letter
        if spelled == text:
            return count if count > 1 else 0
        if not text.startswith(spelled):
            return 0
    return 0


def _word_along(line: ResetLine, box: Rect) -> float:
    (ux, uy), (x, y) = line.direction, line.origin
    return min(ux * (cx - x) + uy * (cy - y) for cx in (box.x0, box.x1) for cy in (box.y0, box.y1))


def _same_across(line: ResetLine, a: Rect, b: Rect, tolerance: float) -> bool:
    (ux, uy), (x, y) = line.direction, line.origin

    def extent(box: Rect) -> tuple[float, float]:
        across = [ux * (cy - y) - uy * (cx - x) for cx in (box.x0, box.x1) for cy in (box.y0, box.y1)]
        return min(across), max(across)

    return all(abs(p - q) <= tolerance for p, q in zip(extent(a), extent(b), strict=True))
