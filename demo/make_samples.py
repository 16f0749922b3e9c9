"""The inputs of `make demo`: a text PDF, a scan with no text layer, a letter with fake personal data, and the
invoice template's folder.

    python demo/make_samples.py DIR     writes DIR/sample.pdf, DIR/scan.pdf, DIR/letter.pdf and DIR/invoice/

The letter's personal data is fake (an SSN of the reserved 078-05 range, example.org addresses, a 555
number) and drawn in an embedded TrueType font, which fpdf2 writes as a CID font (Identity-H), as Word does:
the redaction stage must find it through the font's own character map. The test suite builds its fixtures
elsewhere (tests/fixtures/); these are only what the demo shows. The same code writes the same bytes.
"""

from __future__ import annotations

import argparse
import io
import shutil
from datetime import UTC, datetime
from pathlib import Path

import img2pdf  # type: ignore[import-untyped]
import reportlab
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import LETTER
from reportlab.pdfgen.canvas import Canvas

REPORTLAB_FONTS = Path(reportlab.__file__ or "").parent / "fonts"
VERA_TTF = REPORTLAB_FONTS / "Vera.ttf"
INVOICE_TEMPLATE = Path(__file__).resolve().parent / "templates" / "invoice"
# The invoice's embedded font: Bitstream Vera (free; its license travels with it), as reportlab ships it.
INVOICE_FONTS = ("Vera.ttf", "VeraBd.ttf", "bitstream-vera-license.txt")
SCAN_DPI = 200
BODY = (
    "Durable document jobs survive worker restarts and retries.",
    "Each stage records its progress; artifacts are verified by digest.",
    "This paragraph gives the renderer ordinary body text to draw.",
)
LETTER_LINES = (
    "Dear Dr. Example,",
    "",
    "Patient Jane Doe, SSN 078-05-1120, born 01/02/1980,",
    "was seen today. Please reach her at jane.doe@example.org",
    "or (555) 123-4567 to arrange the follow-up visit.",
    "",
    "Kind regards, the front desk",
)


def make_sample(path: Path, pages: int = 4) -> None:
    """A text PDF with a link on page 1 (what the watermark modes stamp)."""
    canvas = Canvas(str(path), pagesize=LETTER, invariant=True)
    for number in range(1, pages + 1):
        canvas.setFont("Helvetica-Bold", 18)
        canvas.drawString(72, 720, f"docjobs sample - page {number} of {pages}")
        canvas.setFont("Helvetica", 12)
        for line, text in enumerate(BODY * 4):
            canvas.drawString(72, 690 - 16 * line, text)
        if number == 1:
            canvas.drawString(72, 250, "Link: https://example.com/docjobs")
            canvas.linkURL("https://example.com/docjobs", (72, 245, 400, 262), relative=1)
        canvas.showPage()
    canvas.save()


def _scan_page(text: str, turn: float) -> Image.Image:
    width, height = round(8.5 * SCAN_DPI), round(11 * SCAN_DPI)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(str(VERA_TTF), round(16 * SCAN_DPI / 72))
    for line, words in enumerate((text, *BODY)):
        draw.text((SCAN_DPI, SCAN_DPI + line * round(30 * SCAN_DPI / 72)), words, font=font, fill=0)
    return page.rotate(turn, expand=True, fillcolor=255) if turn else page


def make_scan(path: Path) -> None:
    """Three page images and no text: upright, turned a quarter (OCR rotates it) and fed a little askew."""
    pages = [_scan_page(f"Scanned page {number}", turn) for number, turn in ((1, 0), (2, 90), (3, 3))]
    images = []
    for page in pages:
        encoded = io.BytesIO()
        page.save(encoded, format="PNG", dpi=(SCAN_DPI, SCAN_DPI))
        images.append(encoded.getvalue())
    layout = img2pdf.get_fixed_dpi_layout_fun((SCAN_DPI, SCAN_DPI))
    path.write_bytes(img2pdf.convert(images, layout_fun=layout, nodate=True, engine=img2pdf.Engine.internal))


def make_letter(path: Path) -> None:
    """A one-page letter holding fake personal data, in a CID font."""
    document = FPDF(unit="pt", format="letter")
    document.set_creation_date(datetime(2024, 1, 1, tzinfo=UTC))
    document.add_page()
    document.add_font("vera", fname=str(VERA_TTF))
    document.set_font("vera", size=12)
    for line, text in enumerate(LETTER_LINES):
        document.text(72, 100 + 18 * line, text)
    path.write_bytes(document.output())


def make_invoice_template(folder: Path) -> None:
    """The shipped invoice template (demo/templates/invoice) with its fonts, ready for `template add`."""
    shutil.copytree(INVOICE_TEMPLATE, folder, dirs_exist_ok=True)
    (folder / "fonts").mkdir(exist_ok=True)
    for name in INVOICE_FONTS:
        shutil.copyfile(REPORTLAB_FONTS / name, folder / "fonts" / name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the documents of `make demo`.")
    parser.add_argument("out", type=Path, help="directory to write sample.pdf, scan.pdf, letter.pdf and invoice/ into")
    folder = parser.parse_args(argv).out
    folder.mkdir(parents=True, exist_ok=True)
    make_sample(folder / "sample.pdf")
    make_scan(folder / "scan.pdf")
    make_letter(folder / "letter.pdf")
    make_invoice_template(folder / "invoice")


if __name__ == "__main__":
    main()
