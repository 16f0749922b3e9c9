"""Office input without a worker: what acceptance sniffs (first bytes only), what the child decides the format is
from the package, what is refused before LibreOffice starts, and conversions that run no macro and fetch nothing."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Name

from docjobs.domain.errors import DocJobError
from docjobs.domain.models import InputKind
from docjobs.domain.policy import OfficePolicy, PdfVariant, Policy
from docjobs.generate.office import (
    OfficeFormat,
    check_office_input,
    convert_to_pdf,
    export_filter,
    office_format,
    substituted_fonts,
)
from docjobs.pdf import pdfa
from docjobs.pdf.inspect import input_kind, sniff_kind
from docjobs.settings.policies import PolicyBook
from tests.ci_skips import needs_tools
from tests.fixtures.office_samples import converted_by_libreoffice, letter_html, macro_enabled, odt, slides, workbook

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("soffice") is None:
        pytest.skip("needs soffice on PATH (make installs libreoffice-*-nogui)")
    return converted_by_libreoffice(letter_html("unit marker"), "docx", tmp_path_factory.mktemp("docx"))


def ole2(path: Path, stream: str) -> Path:
    """A minimal compound file (MS-CFB, 512-byte sectors): a FAT sector, a directory sector with the root and
    one stream named `stream`."""
    header = bytearray(512)
    header[:8] = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    struct.pack_into("<HHH", header, 0x1A, 0x3E, 3, 0xFFFE)
    struct.pack_into("<H", header, 0x1E, 9)  # 512-byte sectors
    struct.pack_into("<II", header, 0x2C, 1, 1)  # one FAT sector; the directory starts at sector 1
    struct.pack_into("<109I", header, 0x4C, 0, *([0xFFFFFFFF] * 108))
    fat = struct.pack("<128I", 0xFFFFFFFD, 0xFFFFFFFE, *([0xFFFFFFFF] * 126))
    directory = bytearray(512)
    for index, (name, kind) in enumerate((("Root Entry", 5), (stream, 2))):
        encoded = name.encode("utf-16-le") + b"\0\0"
        directory[index * 128 : index * 128 + len(encoded)] = encoded
        struct.pack_into("<HB", directory, index * 128 + 64, len(encoded), kind)
    path.write_bytes(bytes(header) + fat + bytes(directory))
    return path


def test_acceptance_reads_only_the_first_bytes(docx: Path, tmp_path: Path) -> None:
    """LibreOffice writes a .docx's relationships first, Word `[Content_Types].xml`; an OpenDocument starts with its
    stored `mimetype`; OLE2 and RTF have magic. An EPUB (a `mimetype` of its own) and a plain zip stay bundles."""
    word_order = tmp_path / "word.docx"
    with zipfile.ZipFile(docx) as source, zipfile.ZipFile(word_order, "w") as target:
        items = sorted(source.infolist(), key=lambda item: item.filename != "[Content_Types].xml")
        for item in items:
            target.writestr(item, source.read(item))
    epub = tmp_path / "book.epub"
    with zipfile.ZipFile(epub, "w") as book:
        book.writestr("mimetype", "application/epub+zip")
    bundle = tmp_path / "site.zip"
    with zipfile.ZipFile(bundle, "w") as site:
        site.writestr("index.html", "<p>hi</p>")
    office = [docx, word_order, odt(tmp_path / "a.odt", "text"), ole2(tmp_path / "a.doc", "WordDocument")]
    (tmp_path / "a.rtf").write_bytes(b"{\\rtf1\\ansi hello}")
    office.append(tmp_path / "a.rtf")
    for path in office:
        assert input_kind(path.read_bytes()[:1024], declared_html=False) is InputKind.OFFICE, path.name
    for path in (epub, bundle):
        assert input_kind(path.read_bytes()[:1024], declared_html=False) is InputKind.BUNDLE, path.name
    assert sniff_kind(b"%PDF-1.7\n") == "pdf"


def test_the_package_decides_the_format_never_the_name(docx: Path, tmp_path: Path) -> None:
    named_pdf = tmp_path / "letter.pdf"
    named_pdf.write_bytes(docx.read_bytes())
    assert office_format(named_pdf) is OfficeFormat.DOCX
    assert office_format(odt(tmp_path / "x.docx", "text")) is OfficeFormat.ODT
    assert office_format(ole2(tmp_path / "a.bin", "Workbook")) is OfficeFormat.XLS
    assert office_format(ole2(tmp_path / "b.bin", "PowerPoint Document")) is OfficeFormat.PPT
    with pytest.raises(DocJobError) as refused:
        office_format(ole2(tmp_path / "c.bin", "Contents"))
    assert refused.value.code == "input.unsupported"


def test_a_macro_enabled_package_is_refused_before_libreoffice_starts(
    docx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docm = macro_enabled(docx, tmp_path / "letter.docx")  # named .docx: the content type decides
    monkeypatch.setenv("PATH", str(tmp_path))  # no soffice: refused before any would run
    with pytest.raises(DocJobError) as refused:
        check_office_input(docm, OfficePolicy())
    assert refused.value.code == "input.active_content"
    assert check_office_input(docm, OfficePolicy(allow_macro_formats=True)) is OfficeFormat.DOCM
    with pytest.raises(DocJobError) as off:
        check_office_input(docx, OfficePolicy(enabled=False))
    assert off.value.code == "input.unsupported"


@needs_tools("soffice", "pdftotext")
def test_a_document_macro_bound_to_its_opening_does_not_run(tmp_path: Path) -> None:
    """Unconfined here (no sandbox would stop the write): only the profile's settings keep the macro from running."""
    marker = tmp_path / f"macro-ran-{uuid.uuid4().hex[:6]}"
    document = odt(tmp_path / "macro.odt", "a letter with a macro", macro_writes=marker)
    work = tmp_path / "work"
    work.mkdir()
    convert_to_pdf(document, office_format(document), tmp_path / "out.pdf", work, seconds=120, max_pages=10)
    assert (tmp_path / "out.pdf").stat().st_size > 0
    assert not marker.exists()


@needs_tools("soffice", "pdfinfo")
@pytest.mark.parametrize("deck", [False, True], ids=["workbook", "slides"])
def test_no_more_than_one_page_past_the_limit_is_exported(tmp_path: Path, deck: bool) -> None:
    """Five sheets or slides, a limit of two pages: three are exported, enough to show the document is over it."""
    texts = [f"page {number}" for number in range(5)]
    if deck:
        document = slides(tmp_path / "deck.odp", texts)
    else:
        document = workbook(tmp_path / "sheets.ods", {text: text for text in texts})
    work = tmp_path / "work"
    work.mkdir()
    convert_to_pdf(document, office_format(document), tmp_path / "out.pdf", work, seconds=120, max_pages=2)
    info = subprocess.run(["pdfinfo", str(tmp_path / "out.pdf")], capture_output=True, text=True, check=True).stdout
    assert "Pages:           3" in info


@needs_tools("soffice", "pdffonts")
def test_calibri_and_cambria_become_their_metric_compatible_substitutes_embedded(tmp_path: Path) -> None:
    """This machine has neither (no Microsoft fonts): LibreOffice lays the text out in Carlito and Caladea, which
    keep their widths, and embeds them."""
    html = "<html><body><p style='font-family: Calibri'>in Calibri</p><p style='font-family: Cambria'>in Cambria</p>"
    document = converted_by_libreoffice(html + "</body></html>", "docx", tmp_path / "made")
    work = tmp_path / "work"
    work.mkdir()
    convert_to_pdf(document, OfficeFormat.DOCX, tmp_path / "out.pdf", work, seconds=120, max_pages=10)
    fonts = subprocess.run(["pdffonts", str(tmp_path / "out.pdf")], capture_output=True, text=True, check=True)
    rows = [line.split() for line in fonts.stdout.splitlines()[2:]]
    names = {(row[0].partition("+")[2] or row[0]).partition("-")[0] for row in rows}  # no subset tag, no style
    assert {"Carlito", "Caladea"} <= names and not any("Calibri" in name or "Cambria" in name for name in names)
    assert all(row[-5] == "yes" for row in rows)  # emb
    assert substituted_fonts(document, OfficeFormat.DOCX, tmp_path / "out.pdf") == 2


@needs_tools("soffice")
def test_fonts_the_machine_has_are_not_counted_as_substituted(docx: Path, tmp_path: Path) -> None:
    """LibreOffice's letter asks for Liberation Serif, and declares Times New Roman and Arial, whose substitutes
    are Liberation fonts it asks for itself."""
    work = tmp_path / "work"
    work.mkdir()
    convert_to_pdf(docx, OfficeFormat.DOCX, tmp_path / "out.pdf", work, seconds=120, max_pages=10)
    assert substituted_fonts(docx, OfficeFormat.DOCX, tmp_path / "out.pdf") == 0


@pytest.fixture
def listener() -> Iterator[tuple[int, list[object]]]:
    """A loopback port that records every connection made to it."""
    connections: list[object] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    connection, peer = server.accept()
                except TimeoutError:
                    continue
                connections.append(peer)
                connection.close()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield server.getsockname()[1], connections
        stop.set()
        thread.join()


@needs_tools("soffice")
def test_a_linked_remote_image_is_not_fetched(tmp_path: Path, listener: tuple[int, list[object]]) -> None:
    """Unconfined here (the loopback is reachable): the profile's link settings alone keep LibreOffice from it (with a
    default profile LibreOffice 7.4 asks the port `OPTIONS /x.png` while converting)."""
    port, connections = listener
    document = odt(tmp_path / "linked.odt", "a letter with a linked image", image_url=f"http://127.0.0.1:{port}/x.png")
    work = tmp_path / "work"
    work.mkdir()
    convert_to_pdf(document, office_format(document), tmp_path / "out.pdf", work, seconds=120, max_pages=10)
    assert (tmp_path / "out.pdf").stat().st_size > 0
    assert connections == []


@needs_tools("soffice")
def test_the_time_limit_ends_the_conversion(docx: Path, tmp_path: Path) -> None:
    with pytest.raises(DocJobError) as slow:
        convert_to_pdf(docx, OfficeFormat.DOCX, tmp_path / "out.pdf", tmp_path, seconds=0.05, max_pages=10)
    assert slow.value.code == "input.too_complex"


def test_the_office_section_at_its_defaults_changes_no_policy_version() -> None:
    policy = PolicyBook.load(REPO / "docjobs" / "settings" / "policies.toml").get("standard")
    assert policy.version == "standard@c6ebf2338fd1"  # as before office input existed
    refusing = Policy.model_validate({**policy.model_dump(), "office": {"enabled": False}})
    assert refusing.version != policy.version
    # `pdf_variant`, added to the section later, changes no version either until a policy sets it.
    assert refusing.version == "standard@b284847433e7"  # as before `office.pdf_variant` existed
    archival = Policy.model_validate({**policy.model_dump(), "office": {"enabled": False, "pdf_variant": "pdf/a-2b"}})
    assert archival.version not in (refusing.version, policy.version)


def test_the_export_filter_asks_the_variant_the_policy_names() -> None:
    plain = export_filter(OfficeFormat.XLSX, 10)
    assert plain == 'pdf:calc_pdf_Export:{"PageRange":{"type":"string","value":"1-11"}}'
    options = json.loads(export_filter(OfficeFormat.DOCX, 10, PdfVariant.PDF_A_2B).split(":", 2)[2])
    assert options["SelectPdfVersion"] == {"type": "long", "value": "2"} and "PageRange" in options
    assert '"value":"3"' in export_filter(OfficeFormat.ODP, 10, PdfVariant.PDF_A_3B)
    assert '"PDFUACompliance"' in export_filter(OfficeFormat.ODT, 10, PdfVariant.PDF_UA_1)


@needs_tools("soffice")
def test_a_document_converted_as_pdf_a_2b_passes_the_check(docx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pdf"
    convert_to_pdf(docx, OfficeFormat.DOCX, out, tmp_path, seconds=120, max_pages=10, variant=PdfVariant.PDF_A_2B)
    with pikepdf.open(out) as pdf:
        assert pdfa.claim(pdf) == "2b"
    assert pdfa.problems(out) == []


@needs_tools("soffice")
def test_a_document_converted_as_pdf_ua_is_tagged(docx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pdf"
    convert_to_pdf(docx, OfficeFormat.DOCX, out, tmp_path, seconds=120, max_pages=10, variant=PdfVariant.PDF_UA_1)
    with pikepdf.open(out) as pdf:
        assert Name.StructTreeRoot in pdf.Root and pdf.Root.MarkInfo.Marked
        assert pdf.open_metadata().get("pdfuaid:part") == "1"
