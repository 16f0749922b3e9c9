"""Sample and fixture PDFs for `make demo` and the tests.

The sample is deliberately awkward in the ways real documents are: a link annotation, a page with
/Rotate 90, and a page whose MediaBox does not start at 0,0 (with a smaller CropBox), so a
renderer that assumes upright, origin-based pages is caught by the tests. Output is byte-for-byte
reproducible, so fixtures never change between runs.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pikepdf
from reportlab.lib.pagesizes import LETTER
from reportlab.pdfgen.canvas import Canvas

LINK_URL = "https://example.com/docjobs"
OFFSET_MEDIABOX = (50, 50, 662, 842)  # page 3: non-zero origin, same size as Letter
OFFSET_CROPBOX = (60, 70, 652, 832)

_FILLER = (
    "Durable document jobs survive worker restarts and retries.",
    "Each stage records its progress so a job can resume where it stopped.",
    "Artifacts are staged, verified by digest, then published exactly once.",
    "This paragraph exists to give the renderer ordinary body text to draw.",
)


def page_word(number: int) -> str:
    """The distinctive word printed on 1-based page `number` (tests search for it)."""
    return f"PAGEWORD{number}"


def make_sample_pdf(path: Path, *, pages: int = 3, marker: str = "docjobs sample") -> None:
    """Write a small multi-page text PDF with a link on page 1, /Rotate 90 on page 2 and an
    offset MediaBox/CropBox on page 3."""
    if pages < 1:
        raise ValueError("pages must be >= 1")
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas = Canvas(str(path), pagesize=LETTER, invariant=True)
    canvas.setTitle(marker)
    for number in range(1, pages + 1):
        if number == 3:
            # Draw relative to the offset box that is set on this page below.
            canvas.translate(OFFSET_MEDIABOX[0], OFFSET_MEDIABOX[1])
        canvas.setFont("Helvetica-Bold", 18)
        canvas.drawString(72, 720, f"{marker} - page {number} of {pages}")
        canvas.setFont("Helvetica", 12)
        canvas.drawString(72, 690, f"Distinctive word: {page_word(number)}")
        for line, text in enumerate(_FILLER * 3):
            canvas.drawString(72, 660 - 16 * line, text)
        canvas.setFillColorRGB(0.2, 0.4, 0.8)
        canvas.rect(72, 300, 200, 60, fill=1, stroke=0)
        canvas.setFillColorRGB(0, 0, 0)
        if number == 1:
            canvas.drawString(72, 250, "Link: " + LINK_URL)
            canvas.linkURL(LINK_URL, (72, 245, 400, 262), relative=1)
        canvas.showPage()
    canvas.save()
    # Set afterwards: reportlab cannot place a box origin, and its page rotation also swaps the size.
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        if pages >= 2:
            pdf.pages[1].obj.Rotate = 90
        if pages >= 3:
            pdf.pages[2].obj.MediaBox = pikepdf.Array(OFFSET_MEDIABOX)
            pdf.pages[2].obj.CropBox = pikepdf.Array(OFFSET_CROPBOX)
        pdf.save(path, deterministic_id=True)


def make_encrypted_pdf(src: Path, dst: Path, *, user_password: str, owner_password: str) -> None:
    """Re-save `src` AES-256 encrypted; an empty `user_password` gives a permissions-only PDF."""
    with pikepdf.open(src) as pdf:
        encryption = pikepdf.Encryption(
            user=user_password,
            owner=owner_password,
            R=6,
            allow=pikepdf.Permissions(extract=False, modify_other=False),
        )
        pdf.save(dst, encryption=encryption)


def truncate_pdf(src: Path, dst: Path, fraction: float = 0.5) -> None:
    """Write the first `fraction` of `src`'s bytes, like an interrupted upload."""
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])


def make_garbage(dst: Path, size: int = 4096) -> None:
    """Write `size` seeded random bytes: not a PDF, nor any other known format."""
    dst.write_bytes(random.Random(20240601).randbytes(size))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a sample PDF for docjobs demos.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--pages", type=int, default=3)
    args = parser.parse_args(argv)
    make_sample_pdf(args.out, pages=args.pages)


if __name__ == "__main__":
    main()
