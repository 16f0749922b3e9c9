"""docjobs' own PDF/A check against page-validation's, on the PDF/A documents docjobs makes and keeps.

    .venv/bin/python bench/pdfa_validators.py

The corpus: WeasyPrint's PDF/A-1b, 2b and 3b (the tests' letter, and `generate`'s own export), LibreOffice's
PDF/A-2b and 3b exports of the office samples (docx, odt, xlsx, pptx, made as the tests make them), each as made and
after docjobs' structure-mode stamp and signature (the stages a PDF/A input goes through). For each file it prints
what each validator finds (docjobs' codes, page's rule IDs) and whether they agree, then a count of what each one
found that the other did not. Evaluates; asserts nothing (tests/test_pdfa.py checks both validators rule by rule).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import print_table

from docjobs.domain.policy import GeneratePolicy, PdfVariant, WatermarkPolicy
from docjobs.generate.office import convert_to_pdf, office_format
from docjobs.generate.weasy import html_to_pdf
from docjobs.pdf import pdfa
from docjobs.pdf.stamp import stamp
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import sign_pdf
from tests.fixtures.office_samples import converted_by_libreoffice, letter_html, slides, workbook
from tests.fixtures.pdfa_samples import make_pdfa


def made(folder: Path) -> Iterator[tuple[str, Path]]:
    """(name, file) of each PDF/A document as its producer made it."""
    for variant in ("pdf/a-1b", "pdf/a-2b", "pdf/a-3b"):
        yield f"weasyprint letter {variant}", make_pdfa(folder / f"letter-{variant[-2:]}.pdf", variant=variant)
    for variant in (PdfVariant.PDF_A_2B, PdfVariant.PDF_A_3B):
        site = folder / f"site-{variant.value[-2:]}"
        site.mkdir()
        (site / "index.html").write_text(letter_html("generated"))
        output = folder / f"generated-{variant.value[-2:]}.pdf"
        html_to_pdf(site, output, GeneratePolicy(pdf_variant=variant), max_pages=10, on_pages=lambda done, total: None)
        yield f"generate {variant.value}", output
    office = folder / "office"
    sources = {
        "docx": converted_by_libreoffice(letter_html("an office letter"), "docx", office / "docx"),
        "odt": converted_by_libreoffice(letter_html("an office letter"), "odt", office / "odt"),
        "xlsx": workbook(office / "book.xlsx", {"Results": "HbA1c,6.1"}),
        "pptx": slides(office / "deck.pptx", ["Quarterly results", "Second slide"]),
    }
    for kind, source in sources.items():
        for variant in (PdfVariant.PDF_A_2B, PdfVariant.PDF_A_3B):
            output = folder / f"{kind}-{variant.value[-2:]}.pdf"
            work = folder / f"work-{kind}-{variant.value[-2:]}"
            work.mkdir()
            convert_to_pdf(source, office_format(source), output, work, seconds=120, max_pages=50, variant=variant)
            yield f"libreoffice {kind} {variant.value}", output


def main() -> None:
    rows: list[list[str]] = []
    only: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        signer = ensure_dev_signer(folder / "signer")
        for name, document in made(folder):
            stamped = folder / f"{document.stem}.stamped.pdf"
            stamp(document, stamped, WatermarkPolicy(text="COPY"), workdir=folder)
            signed = folder / f"{document.stem}.signed.pdf"
            sign_pdf(stamped, signed, signer, tenant="bench")
            for stage, path in (("as made", document), ("stamped and signed", signed)):
                ours, theirs = pdfa.problems(path), pdfa.independent_problems(path)  # theirs None: no profile
                agree = bool(ours) == bool(theirs) if theirs is not None else None
                for code in ours:
                    if theirs == []:
                        only[f"docjobs only: {code}"] += 1
                for rule in theirs or ():
                    if not ours:
                        only[f"page only: {rule}"] += 1
                rows.append(
                    [
                        name,
                        stage,
                        ", ".join(ours) or "-",
                        "n/a" if theirs is None else ", ".join(theirs) or "-",
                        "n/a" if agree is None else "yes" if agree else "NO",
                    ]
                )
    print_table(["document", "state", "docjobs finds", "page finds", "agree"], rows)
    print()
    print_table(["found by one only", "files"], [[finding, str(count)] for finding, count in sorted(only.items())])


if __name__ == "__main__":
    main()
