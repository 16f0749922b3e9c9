"""The inputs of `make demo`: a text PDF, a scan with no text layer, a letter with fake personal data, a Word
document and the invoice template's folder.

    python demo/make_samples.py DIR     writes DIR/sample.pdf, DIR/scan.pdf, DIR/letter.pdf, DIR/memo.docx and
                                        DIR/invoice/

The letter's personal data is fake (an SSN of the reserved 078-05 range, example.org addresses, a 555
number) and drawn in an embedded TrueType font, which fpdf2 writes as a CID font (Identity-H), as Word does:
the redaction stage must find it through the font's own character map. The memo is the smallest valid `.docx`
(three parts, written with zipfile, its `[Content_Types].xml` first as Word writes it) in Calibri, which LibreOffice
lays out in Carlito (docs/office.md). The test suite builds its fixtures elsewhere (tests/fixtures/); these are
only what the demo shows. The same code writes the same bytes.
"""

from __future__ import annotations

import argparse
import io
import shutil
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from xml.sax.saxutils import escape

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
MEMO_TITLE = "Memo: office documents in docjobs"
MEMO_PARAGRAPHS = (
    "This page was written as a Word document (.docx) and converted to PDF by LibreOffice, inside the render "
    "stage's sandbox, with a fresh profile in which no macro runs and no link is followed.",
    "The PDF then went through every stage a PDF does: sanitized, watermarked, signed and verified.",
    "It asks for Calibri: LibreOffice lays it out in Carlito, which has Calibri's metrics, so its lines break "
    "where Word breaks them.",
)
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_DOCX_PARTS = (  # [Content_Types].xml first: acceptance sniffs the first entry (docs/office.md)
    (
        "[Content_Types].xml",
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
    ),
    (
        "_rels/.rels",
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="word/document.xml" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/></Relationships>',
    ),
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


def _docx_paragraph(text: str, *, size: int, bold: bool = False) -> str:
    """One paragraph of one run in Calibri, `size` in half-points."""
    weight = "<w:b/>" if bold else ""
    fonts = '<w:rFonts w:ascii="Calibri" w:hAnsi="Calibri" w:cs="Calibri"/>'
    return (
        f'<w:p><w:pPr><w:spacing w:after="160"/></w:pPr><w:r><w:rPr>{fonts}{weight}<w:sz w:val="{size}"/></w:rPr>'
        f'<w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>'
    )


def make_memo(path: Path) -> None:
    """A one-page Word memo: the three parts a `.docx` needs, nothing else (no styles, no settings, no fonts)."""
    paragraphs = _docx_paragraph(MEMO_TITLE, size=32, bold=True) + "".join(
        _docx_paragraph(text, size=22) for text in MEMO_PARAGRAPHS
    )
    section = (  # US Letter, 1-inch margins (twentieths of a point)
        '<w:sectPr><w:pgSz w:w="12240" w:h="15840"/><w:pgMar w:top="1440" w:right="1440" w:bottom="1440" '
        'w:left="1440" w:header="720" w:footer="720" w:gutter="0"/></w:sectPr>'
    )
    document = f'<w:document xmlns:w="{_W}"><w:body>{paragraphs}{section}</w:body></w:document>'
    header = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    with zipfile.ZipFile(path, "w") as package:
        for name, xml in (*_DOCX_PARTS, ("word/document.xml", document)):
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # the same bytes every time
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            package.writestr(entry, header + xml)


def make_invoice_template(folder: Path) -> None:
    """The shipped invoice template (demo/templates/invoice) with its fonts, ready for `template add`."""
    shutil.copytree(INVOICE_TEMPLATE, folder, dirs_exist_ok=True)
    (folder / "fonts").mkdir(exist_ok=True)
    for name in INVOICE_FONTS:
        shutil.copyfile(REPORTLAB_FONTS / name, folder / "fonts" / name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the documents of `make demo`.")
    parser.add_argument(
        "out", type=Path, help="directory to write sample.pdf, scan.pdf, letter.pdf, memo.docx and invoice/ into"
    )
    folder = parser.parse_args(argv).out
    folder.mkdir(parents=True, exist_ok=True)
    make_sample(folder / "sample.pdf")
    make_scan(folder / "scan.pdf")
    make_letter(folder / "letter.pdf")
    make_memo(folder / "memo.docx")
    make_invoice_template(folder / "invoice")


if __name__ == "__main__":
    main()
