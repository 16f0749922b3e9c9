"""PDF/A: what a document claims, and a partial check that the claim still holds.

No full PDF/A validator (veraPDF) can be installed from the package registries this project builds from, so
this is our own check of the rules a processing step can break: the ones our stages touch. It checks

- the claim: XMP metadata with `pdfaid:part` and `pdfaid:conformance` (`claim`);
- an output intent of subtype GTS_PDFA1 with an embedded ICC profile (`DestOutputProfile`);
- no encryption, and a trailer /ID;
- every font used by a page, a form XObject or an annotation's appearance embedded (FontFile, FontFile2,
  FontFile3; a Type 3 font draws itself);
- no JavaScript and no Launch action anywhere; for part 2 and 3, no embedded file that is not itself a PDF
  (by its declared /Subtype; its own conformance is not checked);
- for part 1, no transparency: no soft mask, no constant alpha below 1, no transparency group;
- every annotation but a Popup printable and not hidden, and one with an area has an appearance;
- the Info dictionary's dates match the XMP's (xmp:ModifyDate, xmp:CreateDate) when both are there.

It is joined by page-validation (`independent_problems`, PyPI, MIT, a PDF/A and PDF/UA checker written in Rust that
nobody here wrote): a claim is kept only if both pass it, and the status says where they disagree.

This check does not check (see docs/policies.md, "PDF/A outputs"): that a font program is valid and holds every glyph
used with the widths the font dictionary states, the ICC profile's content, that device colour spaces match the
output intent, XMP schema validity (extension schemas), the file structure rules (header, xref, stream
lengths), the content-stream operators and limits of ISO 19005, or anything of level a/u (tags, Unicode).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import page as page_validation
import pikepdf
from pikepdf import Name

from docjobs.domain.models import PdfaOutcome
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, walk

_XMP_PART = re.compile(rb"pdfaid:part(?:>|\s*=\s*[\"'])\s*(\d)")
_XMP_CONFORMANCE = re.compile(rb"pdfaid:conformance(?:>|\s*=\s*[\"'])\s*([ABUabu])")
_XMP_DATE = {
    Name.ModDate: re.compile(rb"xmp:ModifyDate(?:>|\s*=\s*[\"'])\s*([^<\"']+)"),
    Name.CreationDate: re.compile(rb"xmp:CreateDate(?:>|\s*=\s*[\"'])\s*([^<\"']+)"),
}
_PRINT, _HIDDEN, _INVISIBLE, _NO_VIEW = 1 << 2, 1 << 1, 1 << 0, 1 << 5
_CONTAINERS = (pikepdf.Dictionary, pikepdf.Stream, pikepdf.Array)
OWN_VALIDATOR = "docjobs"  # this module's partial check
INDEPENDENT_VALIDATOR = "page"  # page-validation's, which nobody here wrote


def claim(pdf: pikepdf.Pdf) -> str | None:
    """The PDF/A part and conformance the document's XMP metadata claims ("2b"), or None."""
    xmp = _xmp(pdf)
    part, conformance = _XMP_PART.search(xmp), _XMP_CONFORMANCE.search(xmp)
    if part is None or conformance is None:
        return None
    return part.group(1).decode() + conformance.group(1).decode().lower()


def outcome(document: Path, output: Path, budgets: Budgets = DEFAULT_BUDGETS) -> PdfaOutcome | None:
    """Whether `output` keeps the PDF/A claim of `document` (the job's document, as the stages got it); None
    when neither claims PDF/A. An output that claims PDF/A on its own (OCR's `pdfa` output type) is checked too.

    Kept only if every validator that can check the claim passes the output: this module's check (`docjobs`) and
    page-validation's (`page`, `independent_problems`). When they disagree, `disagreement` says what the one that
    failed found: this check's code, or page's rule IDs (its own fixed names, never the document's content)."""
    with pikepdf.open(document) as pdf:
        claimed = claim(pdf)
    with pikepdf.open(output) as pdf:
        released = claim(pdf)
    if claimed is None and released is None:
        return None
    found = problems(output, budgets)
    if released is None:
        reason: str | None = "claim_dropped"
    elif claimed is not None and released != claimed:
        reason = "claim_changed"
    else:
        reason = found[0] if found else None
    validators = {OWN_VALIDATOR: reason is None}
    independent = independent_problems(output, budgets) if released is not None else None
    if independent is not None:
        validators[INDEPENDENT_VALIDATOR] = not independent
    disagreement = None
    if len(set(validators.values())) > 1:
        disagreement = (
            f"{OWN_VALIDATOR}: {reason}" if reason else f"{INDEPENDENT_VALIDATOR}: {', '.join(independent or ())}"
        )
    if reason is None and independent:
        reason = "independent_check"
    return PdfaOutcome(
        claimed=claimed or str(released),
        kept=all(validators.values()),
        reason=reason,
        validators=validators,
        disagreement=disagreement,
    )


def independent_problems(path: Path, budgets: Budgets = DEFAULT_BUDGETS) -> list[str] | None:
    """The rules of the file's PDF/A claim that page-validation (an independent validator, in Rust, from PyPI) finds
    broken, as its rule IDs (empty: compliant; `unreadable`: it could not read the file within its limits); None
    when the file claims no PDF/A or page has no profile for its claim."""
    with pikepdf.open(path) as pdf:
        claimed = claim(pdf)
    try:
        profile = page_validation.ValidationProfile(claimed)
    except ValueError:
        return None
    limits = page_validation.SafetyLimits(
        max_decoded_stream_size=budgets.max_stream_bytes,
        max_total_decoded_content_size=budgets.max_document_bytes,
        max_reference_depth=budgets.max_depth,
        max_object_count=budgets.max_objects,
    )
    try:
        report = page_validation.validate_pdf(path, profile=profile, limits=limits)
    except page_validation.PageError:
        return ["unreadable"]
    return sorted({failure.rule_id for failure in report.failures})


def problems(path: Path, budgets: Budgets = DEFAULT_BUDGETS) -> list[str]:
    """What breaks the PDF/A claim of the file at `path`, as stable codes (empty: nothing this check knows of).

    `not_claimed` alone when the file claims no PDF/A."""
    with pikepdf.open(path) as pdf:
        claimed = claim(pdf)
        if claimed is None:
            return ["not_claimed"]
        found: list[str] = []
        if pdf.is_encrypted:
            found.append("encrypted")
        if Name.ID not in pdf.trailer:
            found.append("no_file_id")
        if not _has_pdfa_intent(pdf):
            found.append("no_output_intent")
        if not _dates_match(pdf):
            found.append("xmp_dates")
        fonts = list(_used_fonts(pdf, budgets))
        if any(not _embedded(font) for font in fonts):
            found.append("font_not_embedded")
        objects = list(_dictionaries(pdf, budgets))
        if any(_is_active(obj) for obj in objects):
            found.append("active_content")
        if claimed[0] == "1" and any(_is_transparent(obj) for obj in objects):
            found.append("transparency")
        if claimed[0] in "23" and any(_non_pdf_attachment(obj) for obj in objects):
            found.append("attachment")
        if any(not _annotation_ok(annotation) for page in pdf.pages for annotation in _annotations(page)):
            found.append("annotation")
        return found


def _dictionaries(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[pikepdf.Dictionary | pikepdf.Stream]:
    """Every dictionary and stream of the file, the direct ones nested in others included (within `budgets`)."""

    def nested(obj: pikepdf.Object) -> list[pikepdf.Object]:
        children = obj.values() if isinstance(obj, pikepdf.Dictionary | pikepdf.Stream) else obj
        return [child for child in children if isinstance(child, _CONTAINERS) and not child.is_indirect]

    indirect = (obj for obj in pdf.objects if isinstance(obj, pikepdf.Dictionary | pikepdf.Stream))
    for obj in walk(indirect, nested, what="the file's dictionaries", budgets=budgets):
        if isinstance(obj, pikepdf.Dictionary | pikepdf.Stream):
            yield obj


def _xmp(pdf: pikepdf.Pdf) -> bytes:
    metadata = pdf.Root.get(Name.Metadata)
    return metadata.read_bytes() if isinstance(metadata, pikepdf.Stream) else b""


def _has_pdfa_intent(pdf: pikepdf.Pdf) -> bool:
    intents = pdf.Root.get(Name.OutputIntents)
    if not isinstance(intents, pikepdf.Array):
        return False
    return any(
        isinstance(intent, pikepdf.Dictionary)
        and intent.get(Name.S) == Name.GTS_PDFA1
        and isinstance(intent.get(Name.DestOutputProfile), pikepdf.Stream)
        for intent in intents
    )


def _dates_match(pdf: pikepdf.Pdf) -> bool:
    """Each Info date equals its XMP twin (to the second, same offset), when the Info dictionary has it."""
    info, xmp = pdf.trailer.get(Name.Info), _xmp(pdf)
    if not isinstance(info, pikepdf.Dictionary):
        return True
    for key, pattern in _XMP_DATE.items():
        value = info.get(key)
        if value is None:
            continue
        found = pattern.search(xmp)
        if found is None or _normal_date(str(value)) != _normal_date(found.group(1).decode()):
            return False
    return True


_DATE = re.compile(
    r"(?:D:)?(\d{4})-?(\d{2})?-?(\d{2})?T?(\d{2})?:?(\d{2})?:?(\d{2})?(?:\.\d+)?\s*(Z|[+\-]\d{2}'?:?\d{2}'?)?"
)


def _normal_date(value: str) -> str:
    """`D:20261201162000+00'00'` and `2026-12-01T16:20:00+00:00` both as `20261201162000+0000` (Z as +0000)."""
    found = _DATE.match(value.strip())
    if found is None:
        return value
    year, month, day, hour, minute, second, zone = found.groups()
    stamp = year + (month or "01") + (day or "01") + (hour or "00") + (minute or "00") + (second or "00")
    zone = "" if zone is None else "+0000" if zone == "Z" else zone.replace("'", "").replace(":", "")
    return stamp + ("+0000" if zone == "-0000" else zone)


def _used_fonts(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[pikepdf.Dictionary]:
    """The fonts of every page, annotation appearance, and form and pattern these draw (each form once)."""
    holders: list[pikepdf.Object] = []
    for page in pdf.pages:
        holders.append(page.obj)
        for annotation in _annotations(page):
            appearances = annotation.get(Name.AP)
            if not isinstance(appearances, pikepdf.Dictionary):
                continue
            for state in appearances.values():
                is_group = isinstance(state, pikepdf.Dictionary) and not isinstance(state, pikepdf.Stream)
                holders += [
                    stream for stream in (state.values() if is_group else [state]) if isinstance(stream, pikepdf.Stream)
                ]
    for holder in walk(holders, _drawn, what="the forms and patterns of the pages", budgets=budgets):
        resources = holder.get(Name.Resources) if isinstance(holder, pikepdf.Dictionary | pikepdf.Stream) else None
        fonts = resources.get(Name.Font) if isinstance(resources, pikepdf.Dictionary) else None
        if isinstance(fonts, pikepdf.Dictionary):
            yield from (font for font in fonts.values() if isinstance(font, pikepdf.Dictionary))


def _drawn(holder: pikepdf.Object) -> list[pikepdf.Object]:
    """The forms and patterns a page or form names in its resources."""
    resources = holder.get(Name.Resources) if isinstance(holder, pikepdf.Dictionary | pikepdf.Stream) else None
    if not isinstance(resources, pikepdf.Dictionary):
        return []
    found: list[pikepdf.Object] = []
    for kind in (Name.XObject, Name.Pattern):
        named = resources.get(kind)
        if isinstance(named, pikepdf.Dictionary):
            found += [child for child in named.values() if isinstance(child, pikepdf.Dictionary | pikepdf.Stream)]
    return found


def _embedded(font: pikepdf.Dictionary) -> bool:
    subtype = font.get(Name.Subtype)
    if subtype == Name.Type3:
        return True
    if subtype == Name.Type0:
        descendants = font.get(Name.DescendantFonts)
        return isinstance(descendants, pikepdf.Array) and all(
            isinstance(d, pikepdf.Dictionary) and _embedded(d) for d in descendants
        )
    descriptor = font.get(Name.FontDescriptor)
    return isinstance(descriptor, pikepdf.Dictionary) and any(
        isinstance(descriptor.get(key), pikepdf.Stream) for key in (Name.FontFile, Name.FontFile2, Name.FontFile3)
    )


def _is_active(obj: object) -> bool:
    if not isinstance(obj, pikepdf.Dictionary | pikepdf.Stream):
        return False
    if obj.get(Name.S) in (Name.JavaScript, Name.Launch):
        return True
    names = obj.get(Name.Names) if Name.Dests in obj or Name.EmbeddedFiles in obj or Name.JavaScript in obj else None
    return isinstance(names, pikepdf.Dictionary) and Name.JavaScript in names


def _is_transparent(obj: object) -> bool:
    if not isinstance(obj, pikepdf.Dictionary | pikepdf.Stream):
        return False
    if obj.get(Name.Type) == Name.ExtGState:
        soft = obj.get(Name.SMask)
        if soft is not None and soft != Name("/None"):
            return True
        return any(float(obj.get(key, 1)) < 1 for key in (Name.ca, Name.CA))
    group = obj.get(Name.Group)
    if isinstance(group, pikepdf.Dictionary) and group.get(Name.S) == Name.Transparency:
        return True
    return isinstance(obj, pikepdf.Stream) and obj.get(Name.Subtype) == Name.Image and Name.SMask in obj


def _non_pdf_attachment(obj: object) -> bool:
    if not isinstance(obj, pikepdf.Stream) or obj.get(Name.Type) != Name.EmbeddedFile:
        return False
    return obj.get(Name.Subtype) != Name("/application#2Fpdf")


def _annotations(page: pikepdf.Page) -> Iterator[pikepdf.Dictionary]:
    annotations = page.obj.get(Name.Annots)
    if isinstance(annotations, pikepdf.Array):
        yield from (a for a in annotations if isinstance(a, pikepdf.Dictionary))


def _annotation_ok(annotation: pikepdf.Dictionary) -> bool:
    if annotation.get(Name.Subtype) == Name.Popup:
        return True
    flags = int(annotation.get(Name.F, 0))
    if not flags & _PRINT or flags & (_HIDDEN | _INVISIBLE | _NO_VIEW):
        return False
    rect = annotation.get(Name.Rect)
    has_area = (
        isinstance(rect, pikepdf.Array)
        and len(rect) == 4
        and (float(rect[2]) != float(rect[0]) and float(rect[3]) != float(rect[1]))
    )
    return not has_area or isinstance(annotation.get(Name.AP), pikepdf.Dictionary)
