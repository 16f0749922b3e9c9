"""True redaction: what matches a pattern or lies in a region is removed from the file, then proven gone.

The steps, each its own module: locate the matches to character boxes (`locate`), remove the glyphs
and image pixels under every region from the content (`content`), remove the annotations and form
fields there, draw an opaque box, scrub the document-level copies (metadata, bookmarks, attachments,
scripts, form values: `scrub`), burn in the pages that could not be rewritten safely, and finally
re-read the result with two independent extractors (`gate`). A leak found by the gate is a
`redaction.leak` (the job is quarantined); the summary carries counts and codes, never the matched values.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pikepdf
from pikepdf import Name

from docjobs.errors import DocJobError
from docjobs.models import PageRedaction, RedactionSummary, RedactLayout, RedactPolicy, RedactRegion
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, check_page_content, too_complex
from docjobs.pdf.inspect import ProgressFn, open_checked
from docjobs.pdf.raster import check_page_pixels, image_content, render_page
from docjobs.pdf.redaction.content import remove_content
from docjobs.pdf.redaction.gate import Word, check_redaction, poppler_words
from docjobs.pdf.redaction.layout import MaskLayout, ResetLine, reset_words_kept
from docjobs.pdf.redaction.locate import locate
from docjobs.pdf.redaction.patterns import NamedPattern, compile_patterns, value_pattern
from docjobs.pdf.redaction.regions import PageRegions, Rect, UnsafePage
from docjobs.pdf.redaction.scrub import scrub_document
from docjobs.pdf.redaction.subset import scrub_fonts
from docjobs.pdf.watermark import open_states

BOX_COLOR = "0 g"  # opaque black


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
    with open_checked(src, check_streams=False, budgets=budgets) as (pdf, _):
        for page in pdf.pages:  # before pdfminer builds an object per glyph and operator
            check_page_content(page, budgets)
    if patterns and not ocr_done:
        _check_searchable(src)
    located = locate(src, patterns)
    if _contextual_matches(located.counts, patterns):
        # A date of birth is found next to its label; the same date elsewhere is the same secret. The counts
        # stay those of the named patterns.
        located = dataclasses.replace(
            locate(src, [*patterns, value_pattern(located.values)]), counts=located.counts, values=located.values
        )
    with tempfile.TemporaryDirectory(dir=workdir, prefix="redact-") as tmp:
        boxed = Path(tmp) / "boxed.pdf"
        with open_checked(src, check_streams=False, budgets=budgets) as (pdf, info):
            regions = _merge_regions(located.regions, policy.regions, info.page_count)
            pages: list[PageRedaction] = []
            unsafe: dict[int, str] = {}
            rewrite = _Rewrite()
            for number, page in enumerate(pdf.pages, start=1):
                rects = regions.get(number, [])
                if rects:
                    layout = _mask_layout(policy, located.regions.get(number, []))
                    pages.append(_redact_page(pdf, number, page, rects, unsafe, budgets, layout, rewrite))
                if on_page is not None:
                    on_page(number, info.page_count)
            fonts = scrub_fonts(pdf, rewrite.fonts_touched, budgets=budgets)
            for number, reason in fonts.fallback.items():
                unsafe.setdefault(number, reason)
            scrub = scrub_document(pdf, patterns, located.values, budgets=budgets)
            pdf.save(boxed, encryption=False, deterministic_id=True)
        if unsafe:
            _burn_in(boxed, dst, sorted(unsafe), policy.fallback_dpi, Path(tmp), budgets)
        else:
            shutil.copyfile(boxed, dst)
    listed = {page.page for page in pages}
    pages += [PageRedaction(page=number) for number in sorted(set(unsafe) - listed)]  # burned for a font
    pages = [
        page.model_copy(update={"matches": located.counts.get(page.page, {}), "fallback": unsafe.get(page.page)})
        for page in sorted(pages, key=lambda page: page.page)
    ]
    gate = check_redaction(dst, located.values, patterns, rewrite.drawn)
    if not gate.clean:
        kinds = ", ".join(sorted({leak.kind for leak in gate.leaks}))
        raise DocJobError("redaction.leak", f"{len(gate.leaks)} trace(s) of redacted content remain ({kinds})")
    _check_text_kept(src, dst, regions, set(unsafe), rewrite.reset)
    return RedactionSummary(
        pages=pages,
        document={kind: count for kind, count in scrub.counts.items() if count},
        fallback_pages=sorted(unsafe),
        lines_reset=sum(page.lines_reset for page in pages),
        fonts_resubset=fonts.resubset,
        gate=list(gate.extractors),
    )


def _contextual_matches(counts: dict[int, dict[str, int]], patterns: list[NamedPattern]) -> bool:
    """Whether a pattern that may match a value only in some contexts (a label before it: `dob`, and any
    custom regex) matched anything."""
    contextual = {pattern.name for pattern in patterns if pattern.name == "dob" or pattern.name.startswith("custom")}
    return any(contextual & set(page) for page in counts.values())


def _check_text_kept(
    src: Path, dst: Path, regions: PageRegions, burned: set[int], reset: dict[int, tuple[ResetLine, ...]]
) -> None:
    """Every word poppler reads outside the regions is still there, at the same place (within half a point),
    except on burned-in pages (recorded as such) and on re-set lines, which keep their words in order, on
    their baseline, from their start, masks between them. Removal must never move or lose the neighbours."""
    with pikepdf.open(src) as before:
        # Annotation appearances are read as page text too; the annotations themselves are judged elsewhere.
        annotated = {
            number: [box for annotation in page.obj.get(Name.Annots, []) if (box := _annotation_rect(annotation))]
            for number, page in enumerate(before.pages, start=1)
        }
    for (number, was), (_, now) in zip(_words(src), _words(dst), strict=True):
        if number in burned:
            continue
        kept: dict[str, list[Rect]] = {}
        for word in now:
            kept.setdefault(word.text, []).append(word.box)
        exempt = [*regions.get(number, ()), *annotated[number]]
        was = [word for word in was if not any(word.box.intersects(region) for region in exempt)]
        lines = reset.get(number, ())
        if not reset_words_kept([(w.text, w.box) for w in was], [(w.text, w.box) for w in now], lines):
            raise DocJobError("fidelity.text", f"a re-set line lost or reordered its words on page {number}")
        for word in was:
            if any(line.holds(word.box) for line in lines):
                continue
            if not any(_same_place(word.box, box) for box in kept.get(word.text, ())):
                raise DocJobError(
                    "fidelity.text", f"text outside the redaction regions moved or vanished on page {number}"
                )


def _words(path: Path) -> list[tuple[int, list[Word]]]:
    words = poppler_words(path)
    if words is None:
        raise DocJobError("fidelity.reader", "a second PDF reader could not read the document")
    return words


def _check_searchable(src: Path) -> None:
    with pikepdf.open(src) as pdf:
        pictured = [number for number, page in enumerate(pdf.pages, start=1) if page.get_images()]
    blind = [number for number, found in _words(src) if not found and number in pictured]
    if blind:
        listed = ", ".join(map(str, blind[:20])) + (", …" if len(blind) > 20 else "")
        message = f"page(s) {listed} have no text to search, only images: OCR them first (--ocr or the scan policy)"
        raise DocJobError("redaction.needs_ocr", message)


def _same_place(a: Rect, b: Rect, tolerance: float = 0.5) -> bool:
    return all(abs(p - q) <= tolerance for p, q in ((a.x0, b.x0), (a.y0, b.y0), (a.x1, b.x1), (a.y1, b.y1)))


def _merge_regions(found: PageRegions, explicit: tuple[RedactRegion, ...], page_count: int) -> PageRegions:
    regions: PageRegions = {page: list(rects) for page, rects in found.items()}
    for region in explicit:
        if region.page > page_count:
            raise DocJobError(
                "redaction.region_outside", f"a redaction region names page {region.page} of {page_count}"
            )
        regions.setdefault(region.page, []).append(Rect(region.x0, region.y0, region.x1, region.y1))
    return regions


@dataclasses.dataclass
class _Rewrite:
    """What the page rewrites leave for the steps after them."""

    drawn: PageRegions = dataclasses.field(
        default_factory=dict
    )  # the boxes drawn, where the gate looks for text left inside
    reset: dict[int, tuple[ResetLine, ...]] = dataclasses.field(default_factory=dict)
    fonts_touched: set[tuple[int, int]] = dataclasses.field(default_factory=set)  # fonts that lost glyphs, to scrub


def _mask_layout(policy: RedactPolicy, located: list[Rect]) -> MaskLayout | None:
    """Lines that lose a pattern match are re-set (layout `mask`); explicit regions are drawn as given."""
    return MaskLayout(policy.mask_width, tuple(located)) if policy.layout == RedactLayout.MASK and located else None


def _redact_page(
    pdf: pikepdf.Pdf,
    number: int,
    page: pikepdf.Page,
    rects: list[Rect],
    unsafe: dict[int, str],
    budgets: Budgets,
    layout: MaskLayout | None,
    rewrite: _Rewrite,
) -> PageRedaction:
    glyphs = images = 0
    boxes = rects
    lines: tuple[ResetLine, ...] = ()
    try:
        removal = remove_content(pdf, number, rects, budgets=budgets, layout=layout)
        glyphs, images, lines = removal.glyphs_removed, removal.images_redacted, removal.lines
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
        glyphs_removed=glyphs,
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
    """Opaque boxes over the regions, drawn last and in default user space (every state the page left
    pushed is popped first), so they show where content was removed."""
    pops = b"Q\n" * open_states(page, budgets)
    boxes = " ".join(f"{r.x0:.3f} {r.y0:.3f} {r.x1 - r.x0:.3f} {r.y1 - r.y0:.3f} re" for r in rects)
    page.contents_add(pdf.make_stream(b"q\n"), prepend=True)
    page.contents_add(pdf.make_stream(b"\n" + pops + f"q {BOX_COLOR} {boxes} f Q\n".encode()))


def _burn_in(boxed: Path, dst: Path, numbers: list[int], dpi: int, tmp: Path, budgets: Budgets) -> None:
    """Replace each page in `numbers` by its rendering at `dpi` (boxes included): nothing of its content
    survives but pixels. The page object stays, so links and bookmarks to it still resolve. Every page's
    pixels are checked against the budget before the first is rendered."""
    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        raise DocJobError("tool.missing", "pdftoppm (poppler-utils) is not installed")
    with pikepdf.open(boxed) as pdf:
        for number in numbers:
            check_page_pixels(pdf.pages[number - 1], dpi, budgets)
        for number in numbers:
            page = pdf.pages[number - 1]
            image = render_page(pdftoppm, boxed, number, dpi, tmp)
            page.obj.Resources, page.obj.Contents = image_content(pdf, page, image, dpi)
            for key in (Name.Annots, Name.Group, Name.StructParents):
                if key in page.obj:
                    del page.obj[key]
        pdf.save(dst, encryption=False, deterministic_id=True)
