"""True redaction: what matches a pattern or lies in a region is removed from the file, then proven gone.

The steps, each its own module: locate the matches to character boxes (`locate`), remove the glyphs
and image pixels under every region from the content (`content`; a line that loses a match is re-set
around a fixed-width mask: `layout`), remove the annotations and form fields there, draw an opaque box,
cut the fonts that lost glyphs down to what is still drawn (`subset`), scrub the document-level copies
(metadata, bookmarks, attachments, scripts, form values: `scrub`), burn in the pages that could not be
rewritten safely, and finally re-read the result with two independent extractors (`gate`); pages the
gate or the text-kept check still faults are burned in on a second pass, and the whole is checked again.
A leak found then is a `redaction.leak` (the job is quarantined); the summary carries counts and codes,
never the matched values.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pikepdf
from pikepdf import Name

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import PageRedaction, RedactionSummary
from docjobs.domain.policy import RedactLayout, RedactPolicy, RedactRegion
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, check_page_content, too_complex
from docjobs.pdf.inspect import ProgressFn, open_checked, rotation, visible_box
from docjobs.pdf.raster import check_page_pixels, image_content, render_pages
from docjobs.pdf.redaction.content import remove_content
from docjobs.pdf.redaction.gate import GateReport, Word, check_redaction, poppler_words
from docjobs.pdf.redaction.layout import MaskLayout
from docjobs.pdf.redaction.locate import CORE_SHARE, Located, locate, pages_with_glyphs_in
from docjobs.pdf.redaction.patterns import NamedPattern, compile_patterns, sensitive_kinds, value_pattern
from docjobs.pdf.redaction.regions import PageRegions, Rect, UnsafePage
from docjobs.pdf.redaction.reset_check import ResetLine, reset_words_kept
from docjobs.pdf.redaction.scrub import scrub_document
from docjobs.pdf.redaction.subset import FALLBACK_REASON, scrub_fonts
from docjobs.pdf.watermark import wrap_content

BOX_COLOR = "0 g"  # opaque black
PART_MIN, PART_INNER = 3, 4  # letters: see `_holds_part`


def redact_pdf(
    src: Path,
    dst: Path,
    policy: RedactPolicy,
    *,
    workdir: Path,
    on_page: ProgressFn | None = None,
    ocr_done: bool = False,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> RedactionSummary:
    """Redact `src` into `dst` as `policy` says; raises `redaction.leak` when the gate finds anything left.

    Unless `ocr_done`, a page that shows images but has no text to search fails `redaction.needs_ocr` when
    there are patterns: what is only pixels cannot be matched, so it would be released unredacted."""
    patterns = compile_patterns(policy)
    with open_checked(src, check_streams=False, budgets=budgets) as (pdf, info):
        page_count = info.page_count
        for page in pdf.pages:  # before pdfminer builds an object per glyph and operator
            check_page_content(page, budgets)
    if patterns and not ocr_done:
        _check_searchable(src)
    located = _locate_all(src, patterns)
    regions = _merge_regions(located.regions, policy.regions, page_count)
    aims = _merge_regions(located.cores, policy.regions, page_count)  # where glyphs are removed: see locate
    drawn = _merge_regions({}, policy.regions, page_count)
    layouts = {
        page: layout
        for page in sorted({*located.regions, *drawn})
        if (layout := _mask_layout(policy, located.regions.get(page, []), drawn.get(page, [])))
    }
    with tempfile.TemporaryDirectory(dir=workdir, prefix="redact-") as tmp:
        boxed = Path(tmp) / "boxed.pdf"
        targets = _Targets(regions, aims, layouts)
        removal = _remove(src, boxed, targets, patterns, located.values, {}, on_page, budgets)
        _render(boxed, dst, removal.fallback, policy.fallback_dpi, Path(tmp), budgets)
        gate = check_redaction(dst, located.values, patterns, removal.drawn)
        was = _words(src)
        now = _words(dst)
        _check_nothing_split(was, now, located.values, removal.drawn, set(removal.fallback))
        moved = _moved_pages(src, was, now, regions, drawn, set(removal.fallback), removal.reset)
        if not gate.clean or moved:
            # Pages the rewrite could not finish are burned in (their original content, boxes drawn), and
            # the whole result is checked again.
            retry = _burnable_residue(gate, dst, boxed, removal.drawn, patterns, located.values, set(removal.fallback))
            retry.update((page, "text_moved") for page in moved if page not in retry)
            removal = _remove(src, boxed, targets, patterns, located.values, retry, on_page, budgets)
            _render(boxed, dst, removal.fallback, policy.fallback_dpi, Path(tmp), budgets)
            gate = check_redaction(dst, located.values, patterns, removal.drawn)
            if not gate.clean:
                raise _leak(gate, "after the raster fallback")
            now = _words(dst)
            _check_nothing_split(was, now, located.values, removal.drawn, set(removal.fallback))
            if _moved_pages(src, was, now, regions, drawn, set(removal.fallback), removal.reset):
                raise DocJobError(FailureCode.FIDELITY_TEXT, "text outside the redaction regions moved or vanished")
    return _summary(removal, located, policy.regions, gate)


def _locate_all(src: Path, patterns: list[NamedPattern]) -> Located:
    """Where the patterns match, and every other place a contextual match's value shows: a date of birth is found
    next to its label; the same date elsewhere is the same secret. The counts stay those of the named patterns."""
    located = locate(src, patterns)
    if not _contextual_matches(located.counts, patterns):
        return located
    everywhere = locate(src, [*patterns, value_pattern(located.values)])
    return dataclasses.replace(everywhere, counts=located.counts, values=located.values)


def _summary(
    removal: _Removal, located: Located, regions: Sequence[RedactRegion], gate: GateReport
) -> RedactionSummary:
    """What was removed, page by page (counts and kinds, never a value): a page burned in for a font only is
    listed too."""
    listed = {page.page for page in removal.pages}
    burned_for_a_font = [PageRedaction(page=number) for number in sorted(set(removal.fallback) - listed)]
    explicit = Counter(region.page for region in regions)
    pages = []
    for redacted in sorted([*removal.pages, *burned_for_a_font], key=lambda page: page.page):
        matches = located.counts.get(redacted.page, {})
        pages.append(
            redacted.model_copy(
                update={
                    "matches": matches,
                    "spans": sum(matches.values()) + explicit[redacted.page],
                    "fallback": removal.fallback.get(redacted.page),
                    "fallback_fonts": removal.fallback_fonts.get(redacted.page, []),
                }
            )
        )
    return RedactionSummary(
        pages=pages,
        spans=sum(page.spans for page in pages),
        document={kind: count for kind, count in removal.document.items() if count},
        fallback_pages=sorted(removal.fallback),
        lines_reset=sum(page.lines_reset for page in pages),
        fonts_resubset=removal.fonts_resubset,
        gate=list(gate.extractors),
    )


@dataclass(frozen=True)
class _Removal:
    pages: list[PageRedaction]
    fallback: dict[int, str]  # page -> why it is burned in instead of rewritten
    document: dict[str, int]  # document-level scrub counts
    drawn: PageRegions  # the boxes drawn, where the gate looks for text left inside
    reset: dict[int, tuple[ResetLine, ...]]  # the lines re-set around their masks, per page
    fonts_resubset: int
    fallback_fonts: dict[int, list[str]]  # page burned in for `font_not_resubset` -> its fonts' kinds


@dataclass(frozen=True)
class _Targets:
    """Per page: the regions (drawn, their annotations and image pixels removed), where glyphs are removed in
    each (same order: a match's core, an explicit region itself) and the lines to re-set."""

    regions: PageRegions
    aims: PageRegions
    layouts: dict[int, MaskLayout]


@dataclass
class _Rewrite:
    """What the page rewrites of one pass leave for the steps after them."""

    drawn: PageRegions = dataclasses.field(default_factory=dict)
    reset: dict[int, tuple[ResetLine, ...]] = dataclasses.field(default_factory=dict)
    fonts_touched: set[tuple[int, int]] = dataclasses.field(default_factory=set)  # fonts that lost glyphs, to scrub


def _remove(
    src: Path,
    boxed: Path,
    targets: _Targets,
    patterns: list[NamedPattern],
    values: frozenset[str],
    burn: dict[int, str],
    on_page: ProgressFn | None,
    budgets: Budgets,
) -> _Removal:
    """Rewrite every page with regions (the pages in `burn` only get their boxes: they are burned in), cut
    the fonts that lost glyphs down to what is still drawn (the pages of a font that cannot be join the
    fallback) and scrub the document into `boxed`."""
    with open_checked(src, check_streams=False, budgets=budgets) as (pdf, info):
        pages: list[PageRedaction] = []
        fallback = dict(burn)
        rewrite = _Rewrite()
        for number, page in enumerate(pdf.pages, start=1):
            if number in targets.regions:
                pages.append(_redact_page(pdf, number, page, targets, fallback, budgets, rewrite))
            if on_page is not None:
                on_page(number, info.page_count)
        fonts = scrub_fonts(pdf, rewrite.fonts_touched, budgets=budgets)
        for number, reason in fonts.fallback.items():
            fallback.setdefault(number, reason)
        fallback_fonts = {number: kinds for number, kinds in fonts.kinds.items() if fallback[number] == FALLBACK_REASON}
        scrub = scrub_document(pdf, patterns, values, budgets=budgets)
        pdf.save(boxed, encryption=False, deterministic_id=True)
    return _Removal(
        pages=pages,
        fallback=fallback,
        document=scrub.counts,
        drawn=rewrite.drawn,
        reset=rewrite.reset,
        fonts_resubset=fonts.resubset,
        fallback_fonts=fallback_fonts,
    )


def _render(boxed: Path, dst: Path, fallback: dict[int, str], dpi: int, tmp: Path, budgets: Budgets) -> None:
    if fallback:
        _burn_in(boxed, dst, sorted(fallback), dpi, tmp, budgets)
    else:
        shutil.copyfile(boxed, dst)


def _leak(gate: GateReport, where: str) -> DocJobError:
    kinds = ", ".join(sorted({leak.kind for leak in gate.leaks}))
    return DocJobError(
        FailureCode.REDACTION_LEAK, f"{len(gate.leaks)} trace(s) of redacted content remain {where} ({kinds})"
    )


def _burnable_residue(
    gate: GateReport,
    dst: Path,
    boxed: Path,
    drawn: PageRegions,
    patterns: list[NamedPattern],
    values: frozenset[str],
    burned: set[int],
) -> dict[int, str]:
    """The pages whose residue burning in removes, as {page: "gate_residue"}; raises `redaction.leak` when
    any residue is out of the fallback's reach. `drawn` are the boxes the rewrite drew (on a re-set line,
    its masks: the matched boxes may hold the glyphs that moved up).

    Burning a page in keeps what it shows and hides only what lies under its boxes, and the gate reads no
    pixels: so every trace must be on a page of its own (not document-level), not already burned in, and
    inside the boxes as poppler places it (a pypdf-only trace has no place: it stays a leak). And the
    engine's own reader (pdfminer, which located the matches) must no longer see a glyph in those boxes in
    the rewritten file: a trace only other readers find is a construct outside the engine's model (text in a
    soft mask, say), while one its own reader still sees is a removal that failed, which must never pass
    as a burned-in page."""
    if gate.clean:
        return {}
    pages = {leak.page for leak in gate.leaks if leak.page is not None}
    if any(leak.page is None for leak in gate.leaks) or pages & burned:
        raise _leak(gate, "where the raster fallback cannot reach")
    words = dict(poppler_words(dst) or ())
    for number in pages:
        page_words = words.get(number, [])
        outside = [word for word in page_words if not any(map(word.box.mostly_inside, drawn.get(number, [])))]
        seen = sensitive_kinds(" ".join(word.text for word in page_words), patterns, values)
        unplaced = {leak.kind for leak in gate.leaks if leak.page == number and leak.extractor == "pypdf"} - seen
        if unplaced or sensitive_kinds(" ".join(word.text for word in outside), patterns, values):
            raise _leak(gate, "outside the redaction regions")
    residue = {number: drawn[number] for number in pages if number in drawn}
    if pages_with_glyphs_in(boxed, residue):
        raise _leak(gate, "that the removal should have taken")
    return {number: "gate_residue" for number in residue}


def _contextual_matches(counts: dict[int, dict[str, int]], patterns: list[NamedPattern]) -> bool:
    """Whether a pattern that may match a value only in some contexts (a label before it: `dob`, and any
    custom regex) matched anything."""
    contextual = {pattern.name for pattern in patterns if pattern.name == "dob" or pattern.name.startswith("custom")}
    return any(contextual & set(page) for page in counts.values())


def _moved_pages(
    src: Path,
    was_read: list[tuple[int, list[Word]]],
    now_read: list[tuple[int, list[Word]]],
    regions: PageRegions,
    drawn: PageRegions,
    burned: set[int],
    reset: dict[int, tuple[ResetLine, ...]],
) -> list[int]:
    """The pages (burned-in ones aside) on which a word poppler read in `src` (`was_read`) outside the regions is
    no longer in the output (`now_read`) at the same place (within half a point; or shifted as a re-set line
    carried the text drawn after it, `ResetLine.carry`), or, on a re-set line, is not kept in order, on its
    baseline, from the line's start, clear of the masks. Removal must never move or lose the neighbours.

    A word is in a pattern match's region when the middle of its height is: a glyph box (ascent to descent) is
    taller than the line pitch of tightly set text, so the whole boxes of the lines above and below reach into
    the region, and a letter the removal took from them would go unseen. A region drawn by hand takes whatever
    it touches."""
    with pikepdf.open(src) as before:
        # Annotation appearances are read as page text too; the annotations themselves are judged elsewhere.
        annotated = {
            number: [box for annotation in page.obj.get(Name.Annots, []) if (box := _annotation_rect(annotation))]
            for number, page in enumerate(before.pages, start=1)
        }
    moved = []
    for (number, was), (_, now) in zip(was_read, now_read, strict=True):
        if number in burned:
            continue
        kept: dict[str, list[Rect]] = {}
        for word in now:
            kept.setdefault(word.text, []).append(word.box)
        exempt = [*drawn.get(number, ()), *annotated[number]]
        matched = regions.get(number, [])
        was = [
            word
            for word in was
            if not any(word.box.intersects(region) for region in exempt)
            and not any(_middle(word.box).intersects(region) for region in matched)
        ]
        lines = reset.get(number, ())
        if not reset_words_kept([(w.text, w.box) for w in was], [(w.text, w.box) for w in now], lines):
            moved.append(number)
            continue
        shifts = [(0.0, 0.0), *(line.carry for line in lines if line.carry != (0.0, 0.0))]
        for word in was:
            if any(line.holds(word.box) for line in lines):
                continue
            places = [word.box.shifted(dx, dy) for dx, dy in shifts]
            if not any(_same_place(place, box) for place in places for box in kept.get(word.text, ())):
                moved.append(number)
                break
    return moved


def _check_nothing_split(
    was_read: list[tuple[int, list[Word]]],
    now_read: list[tuple[int, list[Word]]],
    values: frozenset[str],
    drawn: PageRegions,
    burned: set[int],
) -> None:
    """Raise `redaction.leak` when poppler reads, outside the boxes drawn and on a page not burned in, a word the
    page did not hold before that holds a part of a matched value (see `_holds_part`): the removal took only some
    of a match's glyphs and left the rest beside its box ("reens" of "Screen", when a reader placed the match
    short of its glyphs). The gate looks for whole values, and for any word under a box (a page the fallback then
    burns in); burning a page in would not hide this part, which lies outside the box it draws."""
    split = []
    for (number, was), (_, now) in zip(was_read, now_read, strict=True):
        if number in burned:
            continue
        before = {word.text.lower() for word in _with_spaced_letters_joined(was)}
        boxes = drawn.get(number, [])
        for word in _with_spaced_letters_joined(now):
            text = word.text.lower()
            if text in before or any(map(word.box.mostly_inside, boxes)):
                continue
            if any(_holds_part(text, value) for value in values):
                split.append(number)
                break
    if split:
        listed = ", ".join(map(str, split[:20])) + (", …" if len(split) > 20 else "")
        raise DocJobError(FailureCode.REDACTION_LEAK, f"part of a redacted value is still readable on page(s) {listed}")


def _holds_part(word: str, value: str) -> bool:
    """Whether `word` (lower case), read where it was not before, betrays a part of `value`: for each of its words,
    `word` begins with one of its ends or ends with one of its beginnings (what a removal that took only some of
    the match's glyphs leaves beside them: "eens" of "screens"), PART_MIN letters at least and shorter than the
    whole, or holds a run of half its letters, PART_INNER at least. Shorter parts ("ith" of "Smith" inside
    "with") are found in too many words a re-set line may newly read as one ("w i t h")."""
    for part in value.lower().split():
        if len(part) < PART_MIN:
            continue
        ends = range(PART_MIN, len(part))
        if any(word.startswith(part[-n:]) or word.endswith(part[:n]) for n in ends):
            return True
        length = max(PART_INNER, math.ceil(len(part) / 2))
        if any(part[start : start + length] in word for start in range(len(part) - length + 1)):
            return True
    return False


def _with_spaced_letters_joined(words: list[Word]) -> list[Word]:
    """`words`, and each run of two or more one-letter words of them read as the one word it spells: letters
    spaced apart (character spacing) read as one word once their line is re-set without that spacing."""
    joined = list(words)
    run: list[Word] = []
    for word in [*words, None]:
        if word is not None and len(word.text) == 1:
            run.append(word)
            continue
        if len(run) > 1:
            box = run[0].box
            for letter in run[1:]:
                box = box.union(letter.box)
            joined.append(Word("".join(letter.text for letter in run), box))
        run = []
    return joined


def _middle(box: Rect) -> Rect:
    """The middle CORE_SHARE of a word box's height, as the removal looks for glyphs (see locate)."""
    middle, half = (box.y0 + box.y1) / 2, CORE_SHARE * (box.y1 - box.y0) / 2
    return Rect(box.x0, middle - half, box.x1, middle + half)


def _words(path: Path) -> list[tuple[int, list[Word]]]:
    words = poppler_words(path)
    if words is None:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the document")
    return words


def _check_searchable(src: Path) -> None:
    with pikepdf.open(src) as pdf:
        pictured = [number for number, page in enumerate(pdf.pages, start=1) if page.get_images()]
    blind = [number for number, found in _words(src) if not found and number in pictured]
    if blind:
        listed = ", ".join(map(str, blind[:20])) + (", …" if len(blind) > 20 else "")
        message = f"page(s) {listed} have no text to search, only images: OCR them first (--ocr or the scan policy)"
        raise DocJobError(FailureCode.REDACTION_NEEDS_OCR, message)


def _same_place(a: Rect, b: Rect, tolerance: float = 0.5) -> bool:
    return all(abs(p - q) <= tolerance for p, q in ((a.x0, b.x0), (a.y0, b.y0), (a.x1, b.x1), (a.y1, b.y1)))


def _merge_regions(found: PageRegions, explicit: tuple[RedactRegion, ...], page_count: int) -> PageRegions:
    regions: PageRegions = {page: list(rects) for page, rects in found.items()}
    for region in explicit:
        if region.page > page_count:
            raise DocJobError(
                FailureCode.REDACTION_REGION_OUTSIDE, f"a redaction region names page {region.page} of {page_count}"
            )
        regions.setdefault(region.page, []).append(Rect(region.x0, region.y0, region.x1, region.y1))
    return regions


def _mask_layout(policy: RedactPolicy, located: list[Rect], drawn: list[Rect]) -> MaskLayout | None:
    """Lines that lose text under a pattern match or an explicit region are re-set (layout `mask`), in the
    order `_merge_regions` lists a page's regions: the matches, then the regions drawn by hand."""
    if policy.layout != RedactLayout.MASK or not (located or drawn):
        return None
    return MaskLayout(policy.mask_width, (*located, *drawn), explicit=len(drawn))


def _redact_page(
    pdf: pikepdf.Pdf,
    number: int,
    page: pikepdf.Page,
    targets: _Targets,
    unsafe: dict[int, str],
    budgets: Budgets,
    rewrite: _Rewrite,
) -> PageRedaction:
    """Remove what lies under the page's targets from it, unless it is in `unsafe` (to be burned in: its
    content stays as it was, its lines are not re-set), where a page that cannot be rewritten safely is added
    with its reason."""
    images = 0
    rects, aims = targets.regions[number], targets.aims[number]
    boxes = rects
    lines: tuple[ResetLine, ...] = ()
    if number not in unsafe:
        try:
            layout = targets.layouts.get(number)
            if layout is not None:
                layout = dataclasses.replace(layout, visible=Rect(*visible_box(page)))
            removal = remove_content(pdf, number, rects, aims=aims, budgets=budgets, layout=layout)
            images, lines = removal.images_redacted, removal.lines
            rewrite.fonts_touched |= removal.fonts_touched
            # A matched span's own box is as wide as what it hid: on a re-set line its mask replaces it.
            boxes = [rect for rect in rects if rect not in removal.replaced] + [m for line in lines for m in line.masks]
        except UnsafePage as verdict:  # burned in after the save; the box drawn below is part of the pixels
            unsafe[number] = verdict.reason
    annotations = _remove_annotations(pdf, page, rects, budgets)
    _draw_boxes(pdf, page, boxes, budgets)
    rewrite.drawn[number], rewrite.reset[number] = boxes, lines
    return PageRedaction(
        page=number,
        regions=len(boxes),
        images_redacted=images,
        annotations_removed=annotations,
        lines_reset=len(lines),
    )


def _annotation_rect(annotation: pikepdf.Object) -> Rect | None:
    try:
        x0, y0, x1, y1 = (float(value) for value in annotation.Rect)
    except (AttributeError, TypeError, ValueError):
        return None
    return Rect.spanning(x0, y0, x1, y1)


def _remove_annotations(pdf: pikepdf.Pdf, page: pikepdf.Page, rects: list[Rect], budgets: Budgets) -> int:
    """Drop annotations and form-field widgets that touch a region (their text and appearance are content)."""
    annotations = page.obj.get(Name.Annots)
    if not isinstance(annotations, pikepdf.Array):
        return 0
    kept, gone, removed = [], set(), 0
    for annotation in annotations:
        box = _annotation_rect(annotation)
        if box is not None and any(box.intersects(rect) for rect in rects):
            removed += 1
            if annotation.is_indirect:
                gone.add(annotation.objgen)
        else:
            kept.append(annotation)
    if not removed:
        return 0
    # A popup shows its parent's text: it goes with its parent.
    page.obj.Annots = pikepdf.Array(
        [a for a in kept if not (isinstance(a.get(Name.Parent), pikepdf.Dictionary) and a.Parent.objgen in gone)]
    )
    acroform = pdf.Root.get(Name.AcroForm)
    fields = acroform.get(Name.Fields) if isinstance(acroform, pikepdf.Dictionary) else None
    if isinstance(acroform, pikepdf.Dictionary) and isinstance(fields, pikepdf.Array):
        acroform.Fields = _prune_fields(fields, gone, budgets, set())
    return removed


def _prune_fields(
    fields: pikepdf.Array, gone: set[tuple[int, int]], budgets: Budgets, pruned: set[tuple[int, int]], depth: int = 0
) -> pikepdf.Array:
    """The form's field tree without the removed widgets (and without fields left with no widget).

    Each field's kids are pruned once (`pruned`), so a field listed among its own kids ends the descent."""
    if depth > budgets.max_depth:
        raise too_complex(f"the form field tree is nested more than {budgets.max_depth} levels deep")
    kept = []
    for field in fields:
        if not isinstance(field, pikepdf.Dictionary) or field.objgen in gone:
            continue
        kids = field.get(Name.Kids)
        if isinstance(kids, pikepdf.Array) and not (field.is_indirect and field.objgen in pruned):
            if field.is_indirect:
                pruned.add(field.objgen)
            field.Kids = _prune_fields(kids, gone, budgets, pruned, depth + 1)
            if len(field.Kids) == 0:
                continue
        kept.append(field)
    return pikepdf.Array(kept)


def _draw_boxes(pdf: pikepdf.Pdf, page: pikepdf.Page, rects: list[Rect], budgets: Budgets) -> None:
    """Opaque boxes over the regions, drawn last and in default user space (the page's content wrapped in
    states of its own, see `wrap_content`), so they show where content was removed, and cover it on a page
    burned in."""
    closing = wrap_content(pdf, page, budgets)
    boxes = " ".join(f"{r.x0:.3f} {r.y0:.3f} {r.x1 - r.x0:.3f} {r.y1 - r.y0:.3f} re" for r in rects)
    page.contents_add(pdf.make_stream(closing + f"q {BOX_COLOR} {boxes} f Q\n".encode()))


def _burn_in(boxed: Path, dst: Path, numbers: list[int], dpi: int, tmp: Path, budgets: Budgets) -> None:
    """Replace each page in `numbers` by its rendering at `dpi` (boxes included): nothing of its content
    survives but pixels. The page object stays, so links and bookmarks to it still resolve. Every page's
    pixels are checked against the budget before the first is rendered."""
    with pikepdf.open(boxed) as pdf:
        for number in numbers:
            check_page_pixels(pdf.pages[number - 1], dpi, budgets)
        rendered = render_pages(boxed, {number: rotation(pdf.pages[number - 1]) for number in numbers}, dpi, tmp)
        for number in numbers:
            page = pdf.pages[number - 1]
            page.obj.Resources, page.obj.Contents = image_content(pdf, page, rendered[number], dpi)
            for key in (Name.Annots, Name.Group, Name.StructParents):
                if key in page.obj:
                    del page.obj[key]
        pdf.save(dst, encryption=False, deterministic_id=True)
