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

from dataclasses import dataclass, field
from decimal import Decimal

import pikepdf

from docjobs.pdf.redaction.geometry import Matrix, Point, apply, invert
from docjobs.pdf.redaction.line_laying import (
    LaidLine,
    along_the_baseline,
    drawn_apart,
    kept_apart,
    lay_out,
    room_ahead,
)
from docjobs.pdf.redaction.line_records import (
    LineRecorder,
    Move,
    PlacedGlyph,
    Show,
    SpacingSource,
    distance_across,
    distance_along,
    lines_of,
)
from docjobs.pdf.redaction.locate import CORE_INSET, CORE_SHARE
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.reset_check import ResetLine
from docjobs.pdf.redaction.resources import Instruction
from docjobs.pdf.redaction.stream import make_instruction

AVERAGE_GLYPH_EM = 0.5  # a fixed figure: the metrics of a subset font would carry the removed letters


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
class Reset:
    instructions: list[Instruction]
    lines: list[ResetLine]


def reset_lines(
    out: list[Instruction], recorder: LineRecorder, layout: MaskLayout, kept_spacing: set[SpacingSource]
) -> Reset | None:
    """`out` with every line that holds a triggered removal re-set (None when there is none).

    `kept_spacing` gathers, across streams, the Tc/Tw settings that text left in place still uses (their
    values stay); a setting only re-set lines used is zeroed here."""
    lines = lines_of(recorder.events)
    reset = [line for line in lines if any(glyph.triggered for show in line for glyph in show.glyphs)]
    resetting = {id(show) for line in reset for show in line}
    for event in recorder.events:
        if isinstance(event, Show) and event.glyphs:
            for source in event.sources:
                if source is not None and (id(event) not in resetting or source[0] != recorder.serial):
                    kept_spacing.add(source)
    if not reset:
        return None
    rewrite = _Rewrite(out, recorder, kept_spacing)
    reset_lines: list[ResetLine] = []
    in_order = [along_the_baseline(line) for line in reset]
    showing = [line for line in in_order if any(not glyph.is_space for show in line for glyph in show.glyphs)]
    carried = [
        _carried(recorder.events, line, ordered, resetting) for line, ordered in zip(reset, in_order, strict=True)
    ]
    moving = {id(show) for shows in carried for show in shows}
    apart = kept_apart(recorder.events, resetting | moving)
    shifts: dict[int, Point] = {}  # id of a carried Show -> its shift
    for line, ordered, after in zip(reset, in_order, carried, strict=True):
        first = ordered[0].glyphs[0]
        # Ahead of a line: the text drawn apart, and where each other re-set line starts again (the rest moves).
        heads = [other[0].glyphs[0] for other in showing if other is not ordered]
        room = room_ahead(ordered, [*apart, *heads], layout.visible)
        laid = lay_out(ordered, layout.width_em, room, drawn_apart(line, ordered))
        carry = _carry(after, line[-1], first, laid.end, rewrite.replacements, out) if after else (0.0, 0.0)
        shifts.update(dict.fromkeys(map(id, after), carry))
        reset_line = rewrite.reshow(line, ordered, laid, carry)
        if any(ordered is other for other in showing):  # a line of spaces alone shows nothing to check
            reset_lines.append(reset_line)
    _clear_of_other_text(recorder.events, resetting, [mask for line in reset_lines for mask in line.masks], shifts)
    rewrite.zero_spacing(reset)
    return Reset(rewrite.instructions(), reset_lines)


@dataclass
class _Rewrite:
    """What replaces the instructions of one content stream (by index) as its lines are re-set."""

    out: list[Instruction]
    recorder: LineRecorder
    kept_spacing: set[SpacingSource]
    replacements: dict[int, list[Instruction]] = field(default_factory=dict)

    def reshow(self, line: list[Show], ordered: list[Show], laid: LaidLine, carry: Point) -> ResetLine:
        """Show the runs of `line` (`ordered` along its baseline) where `laid` puts them, each on its own baseline,
        and drop the moves that carried the old positions; the line as the text-kept check needs it."""
        first = ordered[0].glyphs[0]
        origin, direction = first.origin, first.direction
        heights = [distance_across(first, show.glyphs[0].origin) for show in ordered]
        for show, height in zip(ordered, heights, strict=True):
            start = (origin[0] - direction[1] * height, origin[1] + direction[0] * height)  # on its own baseline
            self.replacements[show.start] = _reshown(show, laid, start, direction, self.recorder, self.kept_spacing)
            self.replacements.update({index: [] for index in range(show.start + 1, show.end)})
        _drop_moves_within(self.recorder.events, line, self.replacements)
        _absolute_after(self.recorder.events, line, self.out, self.replacements)
        return ResetLine(origin, direction, tuple(laid.masks), (min(heights), max(heights)), carry)

    def zero_spacing(self, reset: list[list[Show]]) -> None:
        """Zero each Tc/Tw of this stream that only the `reset` lines used."""
        used_by_reset = {source for line in reset for show in line for source in show.sources if source is not None}
        for index, operator in self.recorder.spacing_ops.items():
            source = (self.recorder.serial, index)
            if source in used_by_reset and source not in self.kept_spacing:
                self.replacements.setdefault(index, [make_instruction(operator, 0)])

    def instructions(self) -> list[Instruction]:
        rewritten: list[Instruction] = []
        for index, instruction in enumerate(self.out):
            rewritten.extend(self.replacements.get(index, [instruction]))
        return rewritten


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
    goes_on_mid_line = ordered[-1] is not line[-1] or any(id(show) in resetting for show in after)
    if goes_on_mid_line or any(show.ctm != line[-1].ctm for show in after):
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
    by = end - distance_along(first, old)
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


def _reshown(
    show: Show,
    laid: LaidLine,
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
