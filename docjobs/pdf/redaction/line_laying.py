"""Laying out one re-set line (docjobs/pdf/redaction/layout.py): where each kept glyph and each mask goes along its
baseline, from the kept glyphs' own widths, the policy's mask width and the room ahead of the line alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from docjobs.pdf.redaction.line_records import Move, PlacedGlyph, Show, distance_across, distance_along, parallel
from docjobs.pdf.redaction.locate import CORE_SHARE
from docjobs.pdf.redaction.regions import Rect, UnsafePage

WORD_GAP_EM = 0.15  # a gap at least this wide between two kept glyphs (neither a space) separated words
SPACE_EM = 0.25  # the word space a re-set line uses for such a gap, and on either side of a mask
MIN_SQUEEZE = 0.5  # a line is not drawn narrower than this share of its natural length to fit before text ahead

GlyphKey = tuple[int, int]  # (id of the Show, index of the glyph in it)


@dataclass(frozen=True)
class LaidLine:
    """A re-set line: where each kept glyph goes along it (points from its start; a glyph without a place is not
    shown), the glyphs that begin a new run (after a mask or an inserted word space), the masks, and the share
    of its natural length it was squeezed to (1: not squeezed)."""

    positions: dict[GlyphKey, float]
    starts: set[GlyphKey]
    masks: list[Rect]
    squeeze: float
    end: float = 0.0  # where text drawn after the line's last glyph goes on (after its mask, when it was removed)


def lay_out(
    line: list[Show], width_em: float, room: float | None = None, apart: frozenset[int] = frozenset()
) -> LaidLine:
    """Lay `line` out from its first glyph, squeezed along its baseline to end within `room` points when it
    would not (see `_squeeze`); a run in `apart` (ids) is a word of its own. Only kept glyphs' own widths, their
    order, the em of each removed span's first glyph, the policy's width and the room enter: never what was
    removed."""
    first = line[0].glyphs[0]
    glyphs = [((id(show), number), glyph) for show in line for number, glyph in enumerate(show.glyphs)]
    gone = _removed_with_spaces([glyph for _, glyph in glyphs])
    positions: dict[GlyphKey, float] = {}
    starts: set[GlyphKey] = set()
    spans: list[tuple[PlacedGlyph, float, float]] = []  # each mask: the removed span's first glyph, its extent
    at = end = 0.0
    span: PlacedGlyph | None = None  # the first glyph of the removed span being passed
    inked = False  # whether that span removed more than spaces: a span of spaces alone gets no mask
    previous: PlacedGlyph | None = None  # the last kept glyph
    previous_show = 0  # the id of its Show
    for (key, glyph), removed in zip(glyphs, gone, strict=True):
        if glyph.natural is None or glyph.advance is None:
            raise UnsafePage("unknown_widths")
        if removed:
            span, inked = span or glyph, inked or not glyph.is_space
            continue
        if span is not None and inked:
            spans.append((span, *_mask_extent(span, at, width_em)))
            at = spans[-1][2] + SPACE_EM * span.em
            starts.add(key)
        elif previous is not None and previous.advance is not None and not (previous.is_space or glyph.is_space):
            gap = distance_along(first, glyph.origin) - distance_along(first, previous.origin) - previous.advance
            if gap >= WORD_GAP_EM * glyph.em or (key[0] in apart and key[0] != previous_show):
                at += SPACE_EM * glyph.em
                starts.add(key)
        span, inked = None, False
        positions[key] = at
        at += glyph.natural
        end = at
        previous, previous_show = glyph, key[0]
    if span is not None and inked:
        spans.append((span, *_mask_extent(span, at, width_em)))
        at = spans[-1][2] + SPACE_EM * span.em
    squeeze = _squeeze(max([end, *(right for _, _, right in spans)]), room)
    return LaidLine(
        {key: position * squeeze for key, position in positions.items()},
        starts,
        [_mask_box(first, span, left * squeeze, right * squeeze) for span, left, right in spans],
        squeeze,
        at * squeeze,
    )


def _squeeze(length: float, room: float | None) -> float:
    """The share of its natural `length` a line is drawn at: 1 when it fits in `room` (None: nothing ahead of it
    on its baseline), else what makes it fit, but never below MIN_SQUEEZE (then it is left at 1 and the checks
    decide). A line grows by its mask into what the form drew further along its baseline (an arrow, a brace, a
    checkbox letter); squeezed to end before it, its glyph positions still depend only on the kept glyphs, the
    mask width and where that text is, never on what was removed."""
    if room is None or length <= room:
        return 1.0
    squeeze = room / length
    return squeeze if squeeze >= MIN_SQUEEZE else 1.0


def room_ahead(line: list[Show], obstacles: list[PlacedGlyph], visible: Rect | None) -> float | None:
    """How far along its baseline `line` may reach (None: as far as it likes): to a word space before the
    nearest of `obstacles` that lies ahead of its start, parallel to it, with its core (as `_core`: what a mask
    must not cover) across the line's height; and to the edge of the `visible` box it starts in."""
    first = line[0].glyphs[0]
    low, high = _band(first, [glyph for show in line for glyph in show.glyphs], 1.0)
    limits = [
        along - SPACE_EM * first.em
        for glyph in obstacles
        if parallel(first, glyph)
        and (along := distance_along(first, glyph.origin)) > 0
        and (core := _band(first, [glyph], CORE_SHARE))[0] < high
        and low < core[1]
    ]
    if visible is not None and (edge := _to_edge(first, visible)) is not None:
        limits.append(edge)
    return min(limits) if limits else None


def _to_edge(first: PlacedGlyph, box: Rect) -> float | None:
    """How far along its baseline from `first` the edge of `box` is (None: `first` starts outside it)."""
    (x, y), (ux, uy) = first.origin, first.direction
    if not (box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1):
        return None
    axes = ((x, ux, box.x0, box.x1), (y, uy, box.y0, box.y1))
    reaches = [((high if step > 0 else low) - start) / step for start, step, low, high in axes if step]
    return min(reaches) if reaches else None


def _band(first: PlacedGlyph, glyphs: list[PlacedGlyph], share: float) -> tuple[float, float]:
    """The extent across `first`'s baseline of the middle `share` of the height of `glyphs` (parallel to it)."""
    extents = []
    for glyph in glyphs:
        height = distance_across(first, glyph.origin)
        up = first.direction[0] * glyph.up[1] - first.direction[1] * glyph.up[0]  # the em, signed, across
        middle, half = (glyph.descent + glyph.ascent) / 2, share * (glyph.ascent - glyph.descent) / 2
        extents += [height + (middle - half) * up, height + (middle + half) * up]
    return min(extents), max(extents)


def kept_apart(events: list[Show | Move], resetting: set[int]) -> list[PlacedGlyph]:
    """The kept glyphs drawn apart from every re-set line: what a re-set line must not grow into."""
    return [
        glyph
        for event in events
        if isinstance(event, Show) and id(event) not in resetting
        for glyph in event.glyphs
        if not (glyph.removed or glyph.is_space) and glyph.advance
    ]


def along_the_baseline(line: list[Show]) -> list[Show]:
    """The line's runs in the order they lie along its baseline: a form may draw a page header's right part
    ("Page 3") before its left one ("Form 1040NR"), and laid out in stream order, the left part would follow the
    right one off the page."""
    first = line[0].glyphs[0]
    return sorted(line, key=lambda show: distance_along(first, show.glyphs[0].origin))


def drawn_apart(line: list[Show], ordered: list[Show]) -> frozenset[int]:
    """The runs of `ordered` (ids) that do not follow, in `line`'s drawing order, the run before them along the
    baseline: a reader that found them glued to it took them for a word of their own, drawn at another time."""
    drawn = {id(show): number for number, show in enumerate(line)}
    return frozenset(id(show) for before, show in pairwise(ordered) if drawn[id(show)] != drawn[id(before)] + 1)


def _removed_with_spaces(glyphs: list[PlacedGlyph]) -> list[bool]:
    """Which glyphs the re-set line leaves out: the removed ones and the spaces next to them. Whether a
    region's margin took a neighbouring space depends on the spacing the removed text set (a justified
    line's), and a mask brings its own spaces."""
    gone = [glyph.removed for glyph in glyphs]
    for order in (range(1, len(glyphs)), range(len(glyphs) - 2, -1, -1)):
        for number in order:
            neighbour = number - 1 if order.step == 1 else number + 1
            if glyphs[number].is_space and gone[neighbour]:
                gone[number] = True
    return gone


def _mask_extent(span: PlacedGlyph, at: float, width_em: float) -> tuple[float, float]:
    """Where the mask for a removed span starting `at` lies along the line: a word space, then its width."""
    em = span.em
    if em <= 0:
        raise UnsafePage("zero_font_size")
    left = at + SPACE_EM * em
    return left, left + width_em * em


def _mask_box(first: PlacedGlyph, span: PlacedGlyph, left: float, right: float) -> Rect:
    """The mask's box in default user space: from `left` to `right` along the line, the span's font height across."""
    em = span.em
    (ux, uy), (vx, vy) = first.direction, (span.up[0] / em, span.up[1] / em)
    points = [
        (first.origin[0] + ux * along + vx * across * em, first.origin[1] + uy * along + vy * across * em)
        for along in (left, right)
        for across in (span.descent, span.ascent)
    ]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return Rect(min(xs), min(ys), max(xs), max(ys))
