"""Where the sensitive text is: pattern matches on each page and the boxes of the glyphs that show them.

pdfminer interprets the page and gives one LTChar per glyph, also inside Form XObjects (collected from
its figures), in its own device space: the MediaBox origin moved to 0,0 and /Rotate applied. Every box is
mapped back through the inverse of that page matrix into default user space, where the content engine and
the regions of a policy live. pdfminer's own layout analysis (LAParams, `all_texts`) is skipped: it would
only group the glyphs this module groups itself, and costs a third of the time.

The page text is rebuilt here rather than taken from pdfminer's layout: glyphs are grouped into lines by
direction and baseline, sorted along the line and joined with a space only where the gap is wide. So a
value written as two text objects, or as a kerned TJ array, reads as one word; a ligature glyph reads as
its letters. Patterns are also run on the line with its whitespace squeezed out, so a gap that looks like
a space to this reader cannot hide a number. Text given only as /ActualText of marked content is matched
as well; its region is the box of the glyphs it stands for.

Each region comes with its core, where the removal looks for glyphs: the middle CORE_SHARE of every matched
glyph's height (across its line), padded along the line only. A glyph box (a font's whole ascent to descent)
is taller than the line pitch of tightly set text, so the full region reaches into the lines above and below;
aimed at it, the removal would take their glyphs too. The core still lies within every matched glyph's box, so
each is removed; the full region is what is drawn, what image pixels are painted in (a scan shows the word
there) and what the gate checks.
"""

from __future__ import annotations

import itertools
import math
import statistics
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdfminer import pdfinterp
from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import LTChar, LTContainer, LTPage
from pdfminer.pdffont import PDFFont, PDFType1Font
from pdfminer.pdfinterp import PDFContentParser, PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.pdftypes import dict_value, int_value, list_value, resolve1
from pdfminer.psparser import ESC_STRING, OCT_STRING, PSLiteral
from pdfminer.utils import decode_text

from docjobs.pdf.redaction.patterns import NamedPattern, find_matches_loose
from docjobs.pdf.redaction.regions import PageRegions, Rect

PAD = 1.0  # points added around a matched run: anti-aliasing and rounding must not leave a sliver
SPACE_GAP = 0.15  # a gap wider than this many ems between glyphs on a line reads as a space
LETTER_SPACED_GAPS = 4  # a row with fewer gaps between glyphs has no letter spacing to tell
SAME_LINE = 0.5  # baselines closer than this many ems are one line
CORE_SHARE = 0.2  # the middle share of a glyph's height (across its line) where the removal looks for it
# Along its line, the removal looks for a glyph in its middle: this share of its advance is left out at each end.
# A matched run's first and last glyphs are still found wherever the two readers' positions differ by less than
# that; its neighbours, which touch it, are not (padded outwards, as the boxes are, the run took the letter right
# after it: "Form(s)" lost its parenthesis).
CORE_INSET = 0.2

Matrix = tuple[float, float, float, float, float, float]


@dataclass(frozen=True)
class Located:
    regions: PageRegions
    cores: PageRegions  # for each region (same order), where the removal looks for glyphs
    counts: dict[int, dict[str, int]]  # page -> pattern name -> matches
    values: frozenset[str]  # the matched strings: kept in memory for the gate, never recorded


@dataclass
class _Glyph:
    text: str
    box: Rect  # default user space
    core: Rect  # the middle of the box across the line, padded along it
    along: float  # position along the line direction
    across: float  # baseline position across it
    em: float
    direction: tuple[float, float]  # unit vector of the line, rounded so a line's glyphs share it


@dataclass
class _Marked:
    """A marked-content span with /ActualText, and the glyphs drawn inside it."""

    actual_text: str
    glyphs: list[LTChar] = field(default_factory=list)


def locate(pdf_path: Path, patterns: list[NamedPattern]) -> Located:
    """Find every match of `patterns` in the page text and /ActualText of the PDF at `pdf_path`."""
    regions: PageRegions = {}
    cores: PageRegions = {}
    counts: dict[int, dict[str, int]] = {}
    values: set[str] = set()
    with pdf_path.open("rb") as stream:
        manager = _Fonts()
        device = _Collector(manager, laparams=None)
        interpreter = _Interpreter(manager, device)
        for number, page in enumerate(PDFPage.get_pages(stream), 1):
            interpreter.process_page(page)
            layout: LTPage = device.get_result()
            to_user = _inverse(device.page_ctm)
            page_counts: dict[str, int] = defaultdict(int)
            page_glyphs: list[list[_Glyph]] = []
            for line in _lines(_glyphs(layout, to_user)):
                for match in find_matches_loose(line.text, patterns):
                    page_counts[match.pattern] += 1
                    values.add(line.text[match.start : match.end])
                    page_glyphs.append(line.glyphs[match.start : match.end])
            for marked in device.marked:
                found = find_matches_loose(marked.actual_text, patterns)
                for match in found:
                    page_counts[match.pattern] += 1
                    values.add(marked.actual_text[match.start : match.end])
                if found and marked.glyphs:
                    page_glyphs.append(_glyphs_of(marked.glyphs, to_user))
            if page_counts:
                counts[number] = dict(page_counts)
            if page_glyphs:
                regions[number] = [_union(glyph.box for glyph in glyphs).padded(PAD) for glyphs in page_glyphs]
                cores[number] = [_union(glyph.core for glyph in glyphs) for glyphs in page_glyphs]
    return Located(regions=regions, cores=cores, counts=counts, values=frozenset(values))


def pages_with_glyphs_in(pdf_path: Path, regions: PageRegions) -> list[int]:
    """The pages of `regions` on which this module's reader still sees a glyph mostly inside a region.

    Run on the redaction's own output, it tells a removal that failed on content its own reader sees (a
    removal bug: the job must fail) from a trace only other readers find (a construct outside the engine's
    model: the page can be burned in)."""
    found = []
    with pdf_path.open("rb") as stream:
        manager = _Fonts()
        device = _Collector(manager, laparams=None)
        interpreter = _Interpreter(manager, device)
        for number, page in enumerate(PDFPage.get_pages(stream), 1):
            if number not in regions:
                continue
            interpreter.process_page(page)
            to_user = _inverse(device.page_ctm)
            boxes = (_box(char, to_user) for char in _chars(device.get_result()))
            if any(box.mostly_inside(region) for box in boxes for region in regions[number]):
                found.append(number)
    return found


@dataclass
class _Line:
    text: str
    glyphs: list[_Glyph]  # the glyph of each character of `text` (a space gets the glyph after the gap)


def _glyphs(layout: LTPage, to_user: Matrix) -> list[_Glyph]:
    return _glyphs_of(_chars(layout), to_user)


def _glyphs_of(chars: Iterable[LTChar], to_user: Matrix) -> list[_Glyph]:
    glyphs = []
    for char in chars:
        text = unicodedata.normalize("NFKC", char.get_text())
        if text.startswith("(cid:"):
            text = "\ufffd"  # a glyph without a known character still takes one place in the line
        a, b, _, _, e, f = char.matrix
        dx, dy = _apply_linear(to_user, a, b)
        ox, oy = _apply(to_user, e, f)
        norm = math.hypot(dx, dy) or 1.0
        dx, dy = dx / norm, dy / norm
        box = _box(char, to_user)
        along = min(x * dx + y * dy for x in (box.x0, box.x1) for y in (box.y0, box.y1))
        direction = (round(dx, 2), round(dy, 2))
        glyphs.append(
            _Glyph(
                text=text,
                box=box,
                core=_core(box, direction),
                along=along,
                across=oy * dx - ox * dy,
                em=_extent(box, (-dy, dx)) or 1.0,
                direction=direction,
            )
        )
    return glyphs


def _core(box: Rect, direction: tuple[float, float]) -> Rect:
    """The middle CORE_SHARE of a glyph box across its line, and its advance but CORE_INSET at each end along it
    (a glyph without advance: padded by PAD along it; a line at an angle other than a quarter turn, or a box
    without height: the padded box)."""
    if direction in ((1.0, 0.0), (-1.0, 0.0)):
        middle, half = (box.y0 + box.y1) / 2, CORE_SHARE * (box.y1 - box.y0) / 2 or PAD
        inset = CORE_INSET * (box.x1 - box.x0) or -PAD
        return Rect(box.x0 + inset, middle - half, box.x1 - inset, middle + half)
    if direction in ((0.0, 1.0), (0.0, -1.0)):
        middle, half = (box.x0 + box.x1) / 2, CORE_SHARE * (box.x1 - box.x0) / 2 or PAD
        inset = CORE_INSET * (box.y1 - box.y0) or -PAD
        return Rect(middle - half, box.y0 + inset, middle + half, box.y1 - inset)
    return box.padded(PAD)


def _lines(glyphs: list[_Glyph]) -> list[_Line]:
    """Glyphs grouped by direction and baseline, ordered along the line, with spaces at the wide gaps."""
    by_direction: dict[tuple[float, float], list[_Glyph]] = defaultdict(list)
    for glyph in glyphs:
        by_direction[glyph.direction].append(glyph)
    lines: list[_Line] = []
    for group in by_direction.values():
        group.sort(key=lambda glyph: glyph.across)
        rows: list[list[_Glyph]] = []
        for glyph in group:
            if rows and abs(glyph.across - rows[-1][0].across) < SAME_LINE * max(glyph.em, rows[-1][0].em):
                rows[-1].append(glyph)
            else:
                rows.append([glyph])
        lines += [_joined(sorted(row, key=lambda glyph: glyph.along)) for row in rows]
    return lines


def _joined(row: list[_Glyph]) -> _Line:
    """The row's text, with a space at each gap wider than SPACE_GAP ems beyond the row's letter spacing: the
    gap most of its glyphs leave (0 in most text; character spacing or kerning that spaces the letters out, as
    headings do, otherwise), so a value spaced out letter by letter reads as the word it is, as pypdf reads it."""
    ends = itertools.accumulate((glyph.along + _extent(glyph.box, glyph.direction) for glyph in row), max)
    gaps = [-math.inf, *(glyph.along - end for glyph, end in zip(row[1:], ends, strict=False))]  # before each glyph
    letters = [gap for gap, glyph in zip(gaps[1:], row[1:], strict=True) if not glyph.text.isspace()]
    spacing = max(0.0, statistics.median(letters)) if len(letters) >= LETTER_SPACED_GAPS else 0.0
    text: list[str] = []
    owners: list[_Glyph] = []
    for glyph, gap in zip(row, gaps, strict=True):
        if text and gap > SPACE_GAP * glyph.em + spacing and not text[-1].isspace():
            text.append(" ")
            owners.append(glyph)
        text.append(glyph.text)
        owners += [glyph] * len(glyph.text)
    return _Line("".join(text), owners)


def _extent(box: Rect, direction: tuple[float, float]) -> float:
    """Length of an upright box along `direction` (its width for horizontal text)."""
    width, height = box.x1 - box.x0, box.y1 - box.y0
    return abs(direction[0]) * width + abs(direction[1]) * height


def _chars(item: Any) -> Iterable[LTChar]:
    if isinstance(item, LTChar):
        yield item
    elif isinstance(item, LTContainer):
        for child in item:
            yield from _chars(child)


def _box(char: LTChar, to_user: Matrix) -> Rect:
    """The glyph's box in user space. The page matrix only moves and turns by quarter turns, so two
    opposite corners map to two opposite corners."""
    return Rect.spanning(*_apply(to_user, char.x0, char.y0), *_apply(to_user, char.x1, char.y1))


def _union(rects: Iterable[Rect]) -> Rect:
    first, *rest = rects
    for rect in rest:
        first = first.union(rect)
    return first


def _apply(m: Matrix, x: float, y: float) -> tuple[float, float]:
    return m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]


def _apply_linear(m: Matrix, x: float, y: float) -> tuple[float, float]:
    return m[0] * x + m[2] * y, m[1] * x + m[3] * y


def _inverse(m: Matrix) -> Matrix:
    a, b, c, d, e, f = m
    det = a * d - b * c
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    return ia, ib, ic, id_, -(e * ia + f * ic), -(e * ib + f * id_)


class _Collector(PDFPageAggregator):
    """pdfminer's layout aggregator that also remembers the page matrix and the /ActualText spans."""

    page_ctm: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
    marked: list[_Marked]

    def begin_page(self, page: PDFPage, ctm: Matrix) -> None:
        self.page_ctm = ctm
        self.marked = []
        self._open: list[_Marked | None] = []
        super().begin_page(page, ctm)

    def begin_tag(self, tag: PSLiteral, props: Any = None) -> None:
        actual = resolve1(props.get("ActualText")) if isinstance(props, dict) else None
        self._open.append(_Marked(decode_text(actual)) if isinstance(actual, bytes) else None)
        super().begin_tag(tag, props)

    def end_tag(self) -> None:
        if self._open:
            span = self._open.pop()
            if span is not None:
                self.marked.append(span)
        super().end_tag()

    def render_char(self, *args: Any, **kwargs: Any) -> float:
        advance: float = super().render_char(*args, **kwargs)
        glyph = self.cur_item._objs[-1]
        assert isinstance(glyph, LTChar)
        for span in self._open:
            if span is not None:
                span.glyphs.append(glyph)
        return advance


class _Fonts(PDFResourceManager):
    """pdfminer takes the widths of the 14 standard fonts from its own metrics even when the font gives
    /Widths (as it must for a custom encoding, e.g. a ligature glyph); a wrong width moves every later
    glyph of the line. The PDF's own /Widths win here, as they do in a viewer."""

    def get_font(self, objid: object, spec: Any) -> PDFFont:
        font = super().get_font(objid, spec)
        if isinstance(font, PDFType1Font) and isinstance(spec, dict) and "Widths" in spec:
            first = int_value(spec.get("FirstChar", 0))
            font.widths = {first + i: resolve1(width) for i, width in enumerate(list_value(spec["Widths"]))}
        return font


class _ContentParser(PDFContentParser):
    """pdfminer drops the character after a backslash that starts no escape: `(\\ Fold)` reads "Fold". The
    backslash alone is to be ignored (ISO 32000-1, 7.3.4.2), as qpdf, poppler and pypdf do. AutoCAD writes
    every space of a string so: pdfminer's line lost its spaces, every glyph after them sat earlier than it is
    drawn, and a match's region fell short of its glyphs ("screens" lost its "s" and kept "reens")."""

    def _parse_string_1(self, s: bytes, i: int) -> int:
        character = s[i : i + 1]
        if self.oct or OCT_STRING.match(character) or character in ESC_STRING or character in (b"\r", b"\n"):
            return int(super()._parse_string_1(s, i))
        self._curtoken += character
        self._parse1 = self._parse_string
        return i + 1


# pdfminer's interpreter builds its content parser by this name: every page and form locate reads goes through it.
pdfinterp.PDFContentParser = _ContentParser  # type: ignore[misc]


class _Interpreter(PDFPageInterpreter):
    """Resolves a marked-content property list given by name (/Properties resource) before the device
    sees it, in whichever resources (page or Form XObject) are current."""

    def do_BDC(self, tag: Any, props: Any) -> None:
        if isinstance(props, PSLiteral):
            properties = dict_value(self.resources.get("Properties")) if self.resources else {}
            props = resolve1(properties.get(props.name))
        super().do_BDC(tag, props)
