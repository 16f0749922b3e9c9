"""The fidelity gate (docjobs/pdf/fidelity.py) fails on what it is there to catch, whichever page range the
page is in, and its second reader's words are those of PDFium's characters taken one at a time."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]
import pytest

from docjobs.domain.errors import DocJobError
from docjobs.pdf import fidelity
from docjobs.pdf.parallel_pages import split_pages
from docjobs.pdf.watermark import watermark_structure
from tests.fixtures.samples import make_sample_pdf, page_word

pytestmark = pytest.mark.unit

PAGES = 10
STAMP = "CONFIDENTIAL"


@pytest.fixture(autouse=True)
def three_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check below reads its pages in three ranges, each in a fork, whatever the machine's cores."""
    monkeypatch.setattr(fidelity, "ranges_for", lambda count: split_pages(count, 3))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.pdf"
    make_sample_pdf(path, pages=PAGES)
    return path


def _stamped(source: Path, output: Path) -> Path:
    watermark_structure(source, output, STAMP)
    return output


def _check(source: Path, output: Path, **options: object) -> list[str]:
    arguments: dict[str, object] = {"text_layer_kept": True, "watermark_text": STAMP} | options
    return fidelity.check_fidelity(source, output, **arguments)  # type: ignore[arg-type]


def _without_word(source: Path, output: Path, number: int) -> Path:
    """`source` with page `number`'s distinctive word rewritten in its content stream."""
    with pikepdf.open(source) as pdf:
        page = pdf.pages[number - 1]
        content = page.Contents.read_bytes()
        assert page_word(number).encode() in content
        page.Contents.write(content.replace(page_word(number).encode(), b"REWRITTEN"))
        pdf.save(output)
    return output


def test_a_faithful_output_passes_every_check(source: Path, tmp_path: Path) -> None:
    checks = _check(source, _stamped(source, tmp_path / "out.pdf"))
    assert checks == [
        *("page_count", "geometry", "links", "qpdf_check"),
        *("second_reader", "text_kept", "watermark_every_page"),
    ]


@pytest.mark.parametrize("number", [1, 5, PAGES], ids=["first", "middle", "last"])
def test_text_missing_from_any_page_is_caught(number: int, source: Path, tmp_path: Path) -> None:
    output = _stamped(_without_word(source, tmp_path / "changed.pdf", number), tmp_path / "out.pdf")
    with pytest.raises(DocJobError) as caught:
        _check(source, output)
    assert caught.value.code == "fidelity.text"
    assert caught.value.message.endswith(f"output page {number}")


@pytest.mark.parametrize("numbers", [[PAGES], [4, 7]], ids=["last", "two-ranges"])
def test_a_page_without_the_stamp_is_caught(numbers: list[int], source: Path, tmp_path: Path) -> None:
    output = _stamped(source, tmp_path / "out.pdf")
    with pikepdf.open(output, allow_overwriting_input=True) as pdf, pikepdf.open(source) as original:
        for number in numbers:
            pdf.pages[number - 1] = original.pages[number - 1]
        pdf.save(output)
    with pytest.raises(DocJobError) as caught:
        _check(source, output)
    assert (caught.value.code, caught.value.message) == (
        "fidelity.watermark",
        f"the watermark is missing on {len(numbers)} page(s)",
    )


def test_qpdf_still_rejects_an_undecodable_page_before_the_reader_reads(source: Path, tmp_path: Path) -> None:
    output = _stamped(source, tmp_path / "out.pdf")
    with pikepdf.open(output, allow_overwriting_input=True) as pdf:
        broken = pdf.make_stream(b"not flate data")
        broken.Filter = pikepdf.Name.FlateDecode
        pdf.pages[PAGES - 1].Contents = broken
        pdf.save(output, compress_streams=False, stream_decode_level=pikepdf.StreamDecodeLevel.none)
    with pytest.raises(DocJobError) as caught:
        _check(source, output)
    assert caught.value.code == "fidelity.qpdf"


def test_changed_geometry_fails_first(source: Path, tmp_path: Path) -> None:
    output = _stamped(source, tmp_path / "out.pdf")
    with pikepdf.open(output, allow_overwriting_input=True) as pdf:
        pdf.pages[PAGES - 1].obj.Rotate = 90
        pdf.save(output)
    with pytest.raises(DocJobError) as caught:
        _check(source, output)
    assert caught.value.code == "fidelity.geometry"


def test_a_stamp_drawn_right_after_a_word_stays_a_word_of_its_own(tmp_path: Path) -> None:
    """Two text objects with no space between them: one run of characters, two rectangles, two words."""
    path = tmp_path / "joined.pdf"
    with pikepdf.new() as pdf:
        font = pdf.make_indirect(
            pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica)
        )
        page = pdf.add_blank_page(page_size=(300, 100))
        page.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
        drawn = b"BT /F1 12 Tf 10 50 Td (lastword) Tj ET BT /F1 12 Tf 54.676 50 Td (STAMP) Tj ET"
        page.Contents = pdf.make_stream(drawn)
        pdf.save(path)
    document = pdfium.PdfDocument(path)
    try:
        assert fidelity._words(document, 0) == {"lastword", "STAMP"} == _one_by_one(document, 0)
    finally:
        document.close()


def test_words_are_those_of_the_characters_one_by_one(source: Path, tmp_path: Path) -> None:
    output = _stamped(source, tmp_path / "out.pdf")
    for path in (source, output):
        document = pdfium.PdfDocument(path)
        try:
            for index in range(len(document)):
                assert fidelity._words(document, index) == _one_by_one(document, index)
        finally:
            document.close()


def _one_by_one(document: pdfium.PdfDocument, index: int) -> set[str]:
    page = document[index]
    text_page = page.get_textpage()
    try:
        return fidelity._split_by_owner(text_page.raw, range(pdfium_c.FPDFText_CountChars(text_page.raw)))
    finally:
        text_page.close()
        page.close()
