"""HTML to PDF with WeasyPrint, fetching only what the job holds (docjobs/generate/fetcher.py).

The policy's page size and margins go in as a user style sheet: the document's own `@page` rules win over
them. Attachments (`<link rel=attachment>`, `<a rel=attachment>`) are never embedded: they could carry any
file WeasyPrint can read; each one is counted as a refused resource. The result must carry every font it
uses (`fidelity.fonts`, checked with poppler's `pdffonts`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pikepdf
from pikepdf import Name
from weasyprint import CSS, HTML
from weasyprint.urls import path2url

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import GeneratedSummary
from docjobs.domain.policy import GeneratePolicy, MissingResource, PdfVariant
from docjobs.generate.fetcher import BundleFetcher
from docjobs.pdf.fidelity import check_fonts_embedded

# WeasyPrint logs the URLs it could not load and quotes the document in its warnings: not in our logs.
logging.getLogger("weasyprint").disabled = True


def html_to_pdf(
    site: Path,
    output: Path,
    policy: GeneratePolicy,
    *,
    html: str | None = None,
    index: str = "index.html",
    max_pages: int,
    on_pages: Callable[[int, int], None],
) -> GeneratedSummary:
    """Lay out `html` (else the file `index` in `site`) with `site` as its base, and write the PDF to `output`.

    Raises DocJobError: input.too_large (more than `max_pages` pages), generate.resource_refused (a refused
    resource, when the policy's `missing` is `fail`), fidelity.fonts."""
    fetcher = BundleFetcher(site)
    base_url = path2url(site)
    source = (
        HTML(filename=site / index, base_url=base_url, url_fetcher=fetcher)
        if html is None
        else HTML(string=html, base_url=base_url, url_fetcher=fetcher)
    )
    defaults = CSS(string=f"@page {{ size: {policy.page_size}; margin: {policy.margin} }}", url_fetcher=fetcher)
    document = source.render(stylesheets=[defaults])
    refused = fetcher.refused
    refused["attachment"] += len(document.metadata.attachments)
    document.metadata.attachments = []
    for page in document.pages:
        kept = [link for link in page.links if link[0] != "attachment"]
        refused["attachment"] += len(page.links) - len(kept)
        page.links[:] = kept
    counts = {kind: count for kind, count in sorted(refused.items()) if count}
    if counts and policy.missing is MissingResource.FAIL:
        listed = ", ".join(f"{kind}: {count}" for kind, count in counts.items())
        raise DocJobError(FailureCode.GENERATE_RESOURCE_REFUSED, f"resources outside the job were refused ({listed})")
    pages = len(document.pages)
    if pages > max_pages:
        raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the document has more than {max_pages} pages")
    on_pages(0, pages)  # the page count is known: the child's CPU budget grows with it
    variant = policy.pdf_variant
    document.write_pdf(
        output,
        pdf_variant=variant.value if variant else None,
        pdf_tags=variant is PdfVariant.PDF_UA_1,
    )
    if variant in (PdfVariant.PDF_A_2B, PdfVariant.PDF_A_3B):
        unfilter_metadata(output)
    check_fonts_embedded(output)
    return GeneratedSummary(page_count=pages, refused=counts, pdf_variant=variant)


def unfilter_metadata(path: Path) -> None:
    """Store the XMP metadata stream uncompressed, as PDF/A-2 and 3 require of it (page-validation's
    PDFA2B-METADATA-FILTER-001): WeasyPrint compresses it. A reader of the XMP alone (an archive's indexer) can then
    read it without a PDF library, which is what the rule is for."""
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        metadata = pdf.Root.get(Name.Metadata)
        if not isinstance(metadata, pikepdf.Stream) or Name.Filter not in metadata:
            return
        metadata.write(metadata.read_bytes())
        pdf.save(path)
