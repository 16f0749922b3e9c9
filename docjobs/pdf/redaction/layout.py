"""Re-setting the lines that hold a redaction (policy `redact.layout = mask`): nothing on them depends on what
was removed.

Glyph positions leak removed text (Bland, Iyer, Levchenko, PoPETs 2023): when every following glyph keeps its
place, the gap is exactly as wide as the removed word, and a justified line's spacing and the kerning at the
edges of the span depend on it too. A line that holds a redaction is therefore drawn again from its original
start: its kept glyphs with their natural advances (character spacing, word spacing, TJ kerning and
justification dropped), one word space (`SPACE_EM`) wherever a wide gap separated two kept glyphs, and each
removed span replaced by one mask of a fixed width with a word space either side. Each run of kept glyphs gets
an absolute `Tm` computed from these alone, the line's own moves are dropped, the first relative move after
the line is made absolute, and a `Tc`/`Tw` value only the re-set lines used is zeroed: no operand on the line,
nor after it, carries the old positions.

A line is a run of consecutive text-showing operators of one content stream (BT/ET boundaries do not end it)
whose glyphs share a baseline, with the super- and subscripts drawn between two of its runs (a trademark sign
after a name, a footnote mark: each keeps its height over the baseline). So cells of a table row drawn one after
the other on one baseline are one line: they close up around the mask. Its runs are laid out in the order
they lie along the baseline (a form may draw a header's right part first), a run drawn apart from the one
before it starting a word of its own. A line that would grow by its mask into text drawn apart from it further
along its baseline (an arrow, a brace, a line number), or past the page's edge, is squeezed along the
baseline to end a word space before that text, or at the edge, down to MIN_SQUEEZE of its natural length: by
a factor of the kept glyphs, the mask width and where that text or edge is, never of what was removed. What
a line's start itself tells (a centred or right-aligned line starts where the removed text put it) is not
hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise

import pikepdf

from docjobs.pdf.redaction.geometry import Matrix, Point, apply, invert
from docjobs.pdf.redaction.locate import CORE_INSET, CORE_SHARE
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.resources import Instruction
from docjobs.pdf.redaction.stream import make_instruction

AVERAGE_GLYPH_EM = 0.5  # a fixed figure: the metrics of a subset font would carry the removed letters
WORD_GAP_EM = 0.15  # a gap at least this wide between two kept glyphs (neither a space) separated words
SPACE_EM = 0.25  # the word space a re-set line uses for such a gap, and on either side of a mask
SAME_BASELINE = 0.05  # points across the line direction
BASELINE_SHARE = 0.6  # a word's baseline lies within this share of its box's height from the bottom
MIN_SQUEEZE = 0.5  # a line is not drawn narrower than this share of its natural length to fit before text ahead
SCRIPT_EM = 0.5  # a run raised or lowered by at most this many ems of its line's font size is a super- or subscript
_SAME_DIRECTION = 1e-3

SpacingSource = tuple[int, int]  # (stream serial, index in that stream's rewritten instructions) of a Tc/Tw


@dataclass(frozen=True)
class MaskLayout:
    """How removed spans are laid out: masks `width_em` wide, on the lines a glyph under one of the `triggers`
    was removed from: the page's pattern matches, then its `explicit` regions (the last ones), drawn by hand.
    A re-set line is squeezed to end within the page's `visible` box, when known and it starts there."""

    width_em: float
    triggers: tuple[Rect, ...]
    explicit: int = 0
    visible: Rect | None = None

    def explicit_triggers(self) -> range:
        return range(len(self.triggers) - self.explicit, len(self.triggers))

    def without(self, dropped: frozenset[int]) -> MaskLayout:
        """This layout with the triggers `dropped` (explicit ones) no longer re-setting their lines."""
        kept = [rect for number, rect in enumerate(self.triggers) if number not in dropped]
        return MaskLayout(self.width_em, tuple(kept), self.explicit - len(dropped), self.visible)


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


@dataclass(frozen=True)
class Reset:
    instructions: list[Instruction]
    lines: list[ResetLine]


def reset_lines(
    out: list[Instruction], recorder: LineRecorder, layout: MaskLayout, kept_spacing: set[SpacingSource]
) -> Reset | None:
    """`out` with every line that holds a triggered removal re-set (None when there is none).

    `kept_spacing` gathers, across streams, the Tc/Tw settings that text left in place still uses (their
    values stay); a setting only re-set lines used is zeroed here."""
    lines = _lines(recorder.events)
    reset = [line for line in lines if any(glyph.triggered for show in line for glyph in show.glyphs)]
    resetting = {id(show) for line in reset for show in line}
    for event in recorder.events:
        if isinstance(event, Show) and event.glyphs:
            for source in event.sources:
                if source is not None and (id(event) not in resetting or source[0] != recorder.serial):
                    kept_spacing.add(source)
    if not reset:
        return None
    replacements: dict[int, list[Instruction]] = {}
    reset_lines: list[ResetLine] = []
    in_order = [_along_the_baseline(line) for line in reset]
    showing = [line for line in in_order if any(not glyph.is_space for show in line for glyph in show.glyphs)]
    carried = [
        _carried(recorder.events, line, ordered, resetting) for line, ordered in zip(reset, in_order, strict=True)
    ]
    moving = {id(show) for shows in carried for show in shows}
    apart = _kept_apart(recorder.events, resetting | moving)
    shifts: dict[int, Point] = {}  # id of a carried Show -> its shift
    for line, ordered, after in zip(reset, in_order, carried, strict=True):
        first = ordered[0].glyphs[0]
        # Ahead of a line: the text drawn apart, and where each other re-set line starts again (the rest moves).
        heads = [other[0].glyphs[0] for other in showing if other is not ordered]
        room = _room(ordered, [*apart, *heads], layout.visible)
        laid = _layout(ordered, layout.width_em, room, _drawn_apart(line, ordered))
        origin, direction = first.origin, first.direction
        heights = [_across(first, show.glyphs[0].origin) for show in ordered]
        carry = _carry(after, line[-1], first, laid.end, replacements, out) if after else (0.0, 0.0)
        shifts.update(dict.fromkeys(map(id, after), carry))
        if any(ordered is other for other in showing):  # a line of spaces alone shows nothing to check
            bounds = (min(heights), max(heights))
            reset_lines.append(ResetLine(origin, direction, tuple(laid.masks), bounds, carry))
        for show, height in zip(ordered, heights, strict=True):
            start = (origin[0] - direction[1] * height, origin[1] + direction[0] * height)  # on its own baseline
            replacements[show.start] = _reshown(show, laid, start, direction, recorder, kept_spacing)
            replacements.update({index: [] for index in range(show.start + 1, show.end)})
        _drop_moves_within(recorder.events, line, replacements)
        _absolute_after(recorder.events, line, out, replacements)
    _clear_of_other_text(recorder.events, resetting, [mask for line in reset_lines for mask in line.masks], shifts)
    used_by_reset = {source for line in reset for show in line for source in show.sources if source is not None}
    for index, operator in recorder.spacing_ops.items():
        if (recorder.serial, index) in used_by_reset and (recorder.serial, index) not in kept_spacing:
            replacements.setdefault(index, [make_instruction(operator, 0)])
    rewritten: list[Instruction] = []
    for index, instruction in enumerate(out):
        rewritten.extend(replacements.get(index, [instruction]))
    return Reset(rewritten, reset_lines)


def _carried(events: list[Show | Move], line: list[Show], ordered: list[Show], resetting: set[int]) -> list[Show]:
    """The showing operators drawn after `line` with no move between (up to the next move or quote) and not on
    it: they go on from where the line ended (vertical writing, and what follows it). They are carried along with
    the line's end (`_carry`): left in place, their place would tell where the line ended, hence how wide what was
    removed was; left to follow the re-set line's own operators, they would land anywhere. None when the line's
    last run in drawing order is not its last along the baseline (text after it goes on mid-line), or one of them
    is re-set itself or drawn under another CTM."""
    after: list[Show] = []
    for event in events[_index(events, line[-1]) + 1 :]:
        if isinstance(event, Move) or event.line_after is not None:
            break
        after.append(event)
    drawn_apart = ordered[-1] is not line[-1] or any(id(show) in resetting for show in after)
    if drawn_apart or any(show.ctm != line[-1].ctm for show in after):
        return []
    return after


def _carry(
    after: list[Show],
    last: Show,
    first: PlacedGlyph,
    end: float,
    replacements: dict[int, list[Instruction]],
    out: list[Instruction],
) -> Point:
    """Start the text `after` the line (`_carried`) where the re-set line ends (`end`, along it from `first`),
    as far from that end as it was from the old one: an absolute Tm before its first operator. Returns the shift,
    in default user space."""
    to_space = invert(last.ctm)
    if to_space is None:
        raise UnsafePage("unparsable_content")
    a, b, c, d, e, f = last.text_matrix  # where the last run left the text position: where `after` starts
    old = apply(last.ctm, e, f)
    by = end - _along(first, old)
    shift = (first.direction[0] * by, first.direction[1] * by)
    x, y = apply(to_space, old[0] + shift[0], old[1] + shift[1])
    start = after[0].start
    replacements[start] = [_tm((a, b, c, d, x, y)), *replacements.get(start, [out[start]])]
    return shift


def _clear_of_other_text(
    events: list[Show | Move], resetting: set[int], masks: list[Rect], shifts: dict[int, Point]
) -> None:
    """A mask is as wide as the policy says, wider than most removed words: where it would cover a kept glyph
    drawn apart from its line (a checkbox letter further along the baseline, in a text object of its own; text
    carried after a line, where it is carried to), the page is not rewritten (`mask_over_text`)."""
    for event in events:
        if not isinstance(event, Show) or id(event) in resetting:
            continue
        dx, dy = shifts.get(id(event), (0.0, 0.0))
        for glyph in event.glyphs:
            if glyph.removed or glyph.is_space or not glyph.advance:
                continue
            if any(map(_core(glyph).shifted(dx, dy).intersects, masks)):
                raise UnsafePage("mask_over_text")


def _core(glyph: PlacedGlyph) -> Rect:
    """The middle of the glyph in default user space, as the removal looks for glyphs (locate.CORE_SHARE of its
    height, its advance but locate.CORE_INSET at each end): the lines above and below a mask are not under it."""
    (ux, uy), (vx, vy) = glyph.direction, glyph.up
    advance, middle = glyph.advance or 0.0, (glyph.descent + glyph.ascent) / 2
    half = CORE_SHARE * (glyph.ascent - glyph.descent) / 2
    points = [
        (glyph.origin[0] + ux * along + vx * across, glyph.origin[1] + uy * along + vy * across)
        for along in (CORE_INSET * advance, (1 - CORE_INSET) * advance)
        for across in (middle - half, middle + half)
    ]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return Rect(min(xs), min(ys), max(xs), max(ys))


def _lines(events: list[Show | Move]) -> list[list[Show]]:
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
    return _parallel(first, glyph) and abs(_across(first, glyph.origin)) <= SAME_BASELINE


def _script(line: list[Show], run: list[Show]) -> bool:
    """Whether `run` is a super- or subscript of `line`: parallel to it and raised or lowered by at most
    SCRIPT_EM of its first glyph's em."""
    first = line[0].glyphs[0]
    reach = SCRIPT_EM * first.em
    return all(_parallel(first, show.glyphs[0]) and abs(_across(first, show.glyphs[0].origin)) <= reach for show in run)


def _parallel(first: PlacedGlyph, glyph: PlacedGlyph) -> bool:
    (ux, uy), (vx, vy) = first.direction, glyph.direction
    return abs(ux - vx) <= _SAME_DIRECTION and abs(uy - vy) <= _SAME_DIRECTION


def _across(first: PlacedGlyph, point: Point) -> float:
    """How far `point` lies from the baseline of `first`, across it (positive: above)."""
    (ux, uy), (dx, dy) = first.direction, (point[0] - first.origin[0], point[1] - first.origin[1])
    return ux * dy - uy * dx


GlyphKey = tuple[int, int]  # (id of the Show, index of the glyph in it)


@dataclass(frozen=True)
class _Laid:
    """A re-set line: where each kept glyph goes along it (points from its start; a glyph without a place is not
    shown), the glyphs that begin a new run (after a mask or an inserted word space), the masks, and the share
    of its natural length it was squeezed to (1: not squeezed)."""

    positions: dict[GlyphKey, float]
    starts: set[GlyphKey]
    masks: list[Rect]
    squeeze: float
    end: float = 0.0  # where text drawn after the line's last glyph goes on (after its mask, when it was removed)


def _layout(line: list[Show], width_em: float, room: float | None = None, apart: frozenset[int] = frozenset()) -> _Laid:
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
            gap = _along(first, glyph.origin) - _along(first, previous.origin) - previous.advance
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
    return _Laid(
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


def _room(line: list[Show], obstacles: list[PlacedGlyph], visible: Rect | None) -> float | None:
    """How far along its baseline `line` may reach (None: as far as it likes): to a word space before the
    nearest of `obstacles` that lies ahead of its start, parallel to it, with its core (as `_core`: what a mask
    must not cover) across the line's height; and to the edge of the `visible` box it starts in."""
    first = line[0].glyphs[0]
    low, high = _band(first, [glyph for show in line for glyph in show.glyphs], 1.0)
    limits = [
        along - SPACE_EM * first.em
        for glyph in obstacles
        if _parallel(first, glyph)
        and (along := _along(first, glyph.origin)) > 0
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
        height = _across(first, glyph.origin)
        up = first.direction[0] * glyph.up[1] - first.direction[1] * glyph.up[0]  # the em, signed, across
        middle, half = (glyph.descent + glyph.ascent) / 2, share * (glyph.ascent - glyph.descent) / 2
        extents += [height + (middle - half) * up, height + (middle + half) * up]
    return min(extents), max(extents)


def _kept_apart(events: list[Show | Move], resetting: set[int]) -> list[PlacedGlyph]:
    """The kept glyphs drawn apart from every re-set line: what a re-set line must not grow into."""
    return [
        glyph
        for event in events
        if isinstance(event, Show) and id(event) not in resetting
        for glyph in event.glyphs
        if not (glyph.removed or glyph.is_space) and glyph.advance
    ]


def _along_the_baseline(line: list[Show]) -> list[Show]:
    """The line's runs in the order they lie along its baseline: a form may draw a page header's right part
    ("Page 3") before its left one ("Form 1040NR"), and laid out in stream order, the left part would follow the
    right one off the page."""
    first = line[0].glyphs[0]
    return sorted(line, key=lambda show: _along(first, show.glyphs[0].origin))


def _drawn_apart(line: list[Show], ordered: list[Show]) -> frozenset[int]:
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


def _along(first: PlacedGlyph, point: Point) -> float:
    return (point[0] - first.origin[0]) * first.direction[0] + (point[1] - first.origin[1]) * first.direction[1]


def _reshown(
    show: Show,
    laid: _Laid,
    origin: Point,
    direction: Point,
    recorder: LineRecorder,
    kept_spacing: set[SpacingSource],
) -> list[Instruction]:
    """The kept glyphs of `show`, run by run, each run at its absolute place (its glyphs squeezed as the line),
    with no Tc/Tw in effect."""
    to_space = invert(show.ctm)
    if to_space is None:
        raise UnsafePage("unparsable_content")
    runs: list[tuple[float, bytearray]] = []
    follows = False  # the previous glyph of this operator was kept and the run goes on
    for number, glyph in enumerate(show.glyphs):
        key = (id(show), number)
        if key not in laid.positions:
            follows = False
            continue
        if not follows or key in laid.starts:
            runs.append((laid.positions[key], bytearray()))
        runs[-1][1].extend(glyph.code)
        follows = True
    spacing = list(zip(("Tc", "Tw"), show.spacing, show.sources, strict=True))
    shown: list[Instruction] = []
    shown += [make_instruction(operator, 0) for operator, value, _ in spacing if value]
    a, b, c, d, _, _ = show.text_matrix
    a, b = a * laid.squeeze, b * laid.squeeze  # text space's x runs along the baseline
    for at, codes in runs:
        x, y = apply(to_space, origin[0] + direction[0] * at, origin[1] + direction[1] * at)
        shown.append(make_instruction("Tm", *(_number(value) for value in (a, b, c, d, x, y))))
        shown.append(make_instruction("Tj", pikepdf.String(bytes(codes))))
    for operator, value, source in spacing:
        if value and (source is None or source[0] != recorder.serial or source in kept_spacing):
            shown.append(make_instruction(operator, _number(value)))  # text left in place still uses it
    return shown


def _drop_moves_within(events: list[Show | Move], line: list[Show], replacements: dict[int, list[Instruction]]) -> None:
    """The line's own moves and glyph-less showing operators carry the old positions: dropped (TD keeps its
    leading)."""
    for event in events[_index(events, line[0]) + 1 : _index(events, line[-1])]:
        if isinstance(event, Move):
            if event.operator not in ("BT", "ET"):  # the text object stays
                replacements[event.index] = _leading(event)
        elif not event.glyphs:
            replacements.update({index: [] for index in range(event.start, event.end)})


def _absolute_after(
    events: list[Show | Move], line: list[Show], out: list[Instruction], replacements: dict[int, list[Instruction]]
) -> None:
    """The first relative move after the line (past the text drawn after it with no move between) goes where it
    went, by an absolute Tm: the line's own Tm operators replaced the line matrix it was relative to, and relative
    to the line's old place, its operands would tell where the line ended."""
    for event in events[_index(events, line[-1]) + 1 :]:
        if isinstance(event, Move):
            if event.line_after is not None and event.index not in replacements:
                replacements[event.index] = [*_leading(event), _tm(event.line_after)]
            return
        if event.line_after is not None:
            if event.start not in replacements:
                replacements.update(_absolute_quote(event, out))
            return


def _absolute_quote(show: Show, out: list[Instruction]) -> dict[int, list[Instruction]]:
    """A ' or " operator (or the T* of its rewritten form) with its implicit move made absolute."""
    assert show.line_after is not None
    for index in range(show.start, show.end):
        instruction = out[index]
        operator = str(instruction.operator)
        if operator == "T*":
            return {index: [_tm(show.line_after)]}
        if operator in ("'", '"') and isinstance(instruction, pikepdf.ContentStreamInstruction):
            operands = list(instruction.operands)
            spacing = (
                [make_instruction("Tw", operands[0]), make_instruction("Tc", operands[1])] if operator == '"' else []
            )
            return {index: [*spacing, _tm(show.line_after), make_instruction("Tj", operands[-1])]}
    return {}


def _leading(move: Move) -> list[Instruction]:
    """What a dropped TD still has to do: set the leading."""
    return [make_instruction("TL", _number(move.leading))] if move.leading is not None else []


def _index(events: list[Show | Move], show: Show) -> int:
    return next(number for number, event in enumerate(events) if event is show)


def _tm(matrix: Matrix) -> Instruction:
    return make_instruction("Tm", *(_number(value) for value in matrix))


def _number(value: float | None) -> Decimal:
    """A content-stream number: four decimals, and never a negative zero."""
    rounded = Decimal(f"{value or 0.0:.4f}").normalize()
    return rounded if rounded != 0 else Decimal(0)


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
