"""Inspection and both watermark modes, checked on real files with independent readers.

Geometry is read back with pypdf, validity with `qpdf --check`, text with poppler's `pdftotext`, and
pixels with `pdftoppm -cropbox` (what a viewer shows). The "awkward" fixture adds what the sample
lacks: /Rotate 180, 270 and -90, negative box origins, Resources shared between pages of different
geometry, a content stream split over an array, a page with no content, and unbalanced `q`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pikepdf
import pypdf
import pytest
from pikepdf import Name
from PIL import Image, ImageChops, ImageStat

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import WATERMARK_OPACITY, Policy, WatermarkMode, WatermarkPolicy
from docjobs.domain.stamp_text import encode_text
from docjobs.pdf import raster
from docjobs.pdf.inspect import Encryption, PdfInfo, inspect_pdf, sniff_kind
from docjobs.pdf.parallel_pages import split_pages
from docjobs.pdf.raster import watermark_box, watermark_raster
from docjobs.pdf.stamp import stamp
from docjobs.pdf.watermark import OPACITY, text_width_em, watermark_structure
from tests.fixtures.samples import (
    LINK_URL,
    make_encrypted_pdf,
    make_garbage,
    make_sample_pdf,
    page_word,
    truncate_pdf,
)

TEXT = "CONFIDENTIAL COPY"
DPI = 100  # not a multiple of 72, so pixel alignment is really tested
SOURCES = ("sample", "awkward")


# --- helpers --------------------------------------------------------------------------------


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, check=False)


def _pdftotext(pdf: Path, page: int) -> str:
    result = _run("pdftotext", "-f", str(page), "-l", str(page), pdf, "-")
    assert result.returncode == 0, result.stderr
    return result.stdout


def _render(pdf: Path, page: int, dpi: int) -> Image.Image:
    result = subprocess.run(
        ["pdftoppm", "-r", str(dpi), "-f", str(page), "-l", str(page), "-cropbox", "-singlefile", str(pdf)],
        capture_output=True,
        check=True,
    )
    with Image.open(BytesIO(result.stdout)) as image:
        return image.convert("L")


def _stamp_mask(before: Image.Image, after: Image.Image) -> Image.Image:
    """Black where the watermark changed the rendering, white elsewhere (for bbox and OCR)."""
    return ImageChops.difference(before, after).point(lambda v: 0 if v > 8 else 255)


def _ocr_line(image: Image.Image, tmp: Path) -> str:
    png = tmp / "ocr.png"
    image.save(png)
    return _run("tesseract", png, "-", "--psm", "7").stdout


def _geometry(pdf: Path) -> list[tuple[list[float], list[float], int]]:
    reader = pypdf.PdfReader(pdf)
    return [
        ([float(v) for v in page.mediabox], [float(v) for v in page.cropbox], page.rotation % 360)
        for page in reader.pages
    ]


def _page_count(pdf: Path) -> int:
    return len(pypdf.PdfReader(pdf).pages)


def make_awkward_pdf(path: Path) -> None:
    pdf = pikepdf.new()
    font = pikepdf.Dictionary(
        Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding
    )
    shared = pdf.make_indirect(pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)))

    def add(box: list[int], rotate: int, *contents: bytes, crop: list[int] | None = None) -> None:
        page = pikepdf.Dictionary(Type=Name.Page, MediaBox=box, Rotate=rotate, Resources=shared)
        if crop is not None:
            page.CropBox = crop
        if contents:
            page.Contents = pikepdf.Array([pdf.make_stream(c) for c in contents])
        pdf.pages.append(pikepdf.Page(page))

    # The CTM is changed before a `q` that is never closed: only popping both restores it.
    add([0, 0, 400, 300], 180, b"0.5 0 0 0.5 100 100 cm q BT /F1 24 Tf 20 20 Td (AWKWARD1) Tj ET")
    add([-300, -400, 312, 392], 270, b"BT /F1 24 Tf -200 0 Td", b"(AWKWARD2) Tj ET", crop=[-250, -350, 262, 342])
    add([0, 0, 300, 500], -90)
    pdf.save(path)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("render")


@pytest.fixture(scope="module")
def sample(workdir: Path) -> Path:
    path = workdir / "sample.pdf"
    make_sample_pdf(path)
    return path


@pytest.fixture(scope="module", params=SOURCES)
def source(request: pytest.FixtureRequest, workdir: Path, sample: Path) -> Path:
    if request.param == "sample":
        return sample
    path = workdir / "awkward.pdf"
    make_awkward_pdf(path)
    return path


@pytest.fixture(scope="module")
def structured(source: Path) -> Path:
    out = source.with_name(source.stem + "-structure.pdf")
    watermark_structure(source, out, TEXT)
    return out


@pytest.fixture(scope="module")
def rastered(source: Path) -> Path:
    out = source.with_name(source.stem + "-raster.pdf")
    watermark_raster(source, out, TEXT, dpi=DPI)
    return out


@pytest.fixture(scope="module")
def sample_structured(sample: Path) -> Path:
    out = sample.with_name("sample-only-structure.pdf")
    watermark_structure(sample, out, TEXT)
    return out


@pytest.fixture(scope="module")
def sample_rastered(sample: Path) -> Path:
    out = sample.with_name("sample-only-raster.pdf")
    watermark_raster(sample, out, TEXT, dpi=72)
    return out


@pytest.fixture(scope="module")
def encrypted(workdir: Path, sample: Path) -> Path:
    path = workdir / "secret-name-locked.pdf"
    make_encrypted_pdf(sample, path, user_password="user-pw", owner_password="owner-pw")
    return path


@pytest.fixture(scope="module")
def permissions_only(workdir: Path, sample: Path) -> Path:
    path = workdir / "permissions-only.pdf"
    make_encrypted_pdf(sample, path, user_password="", owner_password="owner-pw")
    return path


# --- structure mode -------------------------------------------------------------------------


def test_structure_keeps_page_geometry(source: Path, structured: Path) -> None:
    assert _page_count(structured) == _page_count(source)
    assert _geometry(structured) == _geometry(source)


def test_structure_output_passes_qpdf_check(structured: Path) -> None:
    result = _run("qpdf", "--check", structured)
    assert result.returncode == 0, result.stdout + result.stderr


def test_structure_text_is_extractable_on_every_page(source: Path, structured: Path) -> None:
    for page in range(1, _page_count(source) + 1):
        before, after = _pdftotext(source, page), _pdftotext(structured, page)
        assert TEXT in after, f"page {page}"
        assert set(before.split()) <= set(after.split()), f"page {page}"


def test_structure_keeps_sample_words_and_links(sample_structured: Path) -> None:
    for page in (1, 2, 3):
        assert page_word(page) in _pdftotext(sample_structured, page)
    links = [
        annot.get_object()
        for annot in pypdf.PdfReader(sample_structured).pages[0].annotations or []
        if annot.get_object()["/Subtype"] == "/Link"
    ]
    assert [link["/A"]["/URI"] for link in links] == [LINK_URL]


def test_structure_leaves_original_content_streams_untouched(source: Path, structured: Path) -> None:
    with pikepdf.open(source) as before, pikepdf.open(structured) as after:
        for old, new in zip(before.pages, after.pages, strict=True):
            original = [s.read_raw_bytes() for s in _streams(old.obj.get(Name.Contents))]
            current = [s.read_raw_bytes() for s in _streams(new.obj.Contents)]
            assert any(current[i : i + len(original)] == original for i in range(len(current))) or not original
            added = [key for key in new.obj.Resources.XObject if str(key).startswith("/DocjobsWatermark")]
            assert len(added) == 1


def _streams(contents: pikepdf.Object | None) -> list[pikepdf.Object]:
    if contents is None:
        return []
    return list(contents) if isinstance(contents, pikepdf.Array) else [contents]


def test_structure_watermark_is_upright_and_inside_the_visible_area(
    source: Path, structured: Path, workdir: Path
) -> None:
    for page in range(1, _page_count(source) + 1):
        mask = _stamp_mask(_render(source, page, 50), _render(structured, page, 50))
        bbox = ImageChops.invert(mask).getbbox()
        assert bbox is not None, f"page {page}: no watermark drawn"
        x0, y0, x1, y1 = watermark_box(*mask.size)
        assert x0 - 1 <= bbox[0] and y0 - 1 <= bbox[1] and bbox[2] <= x1 + 1 and bbox[3] <= y1 + 1, page
        if shutil.which("tesseract"):
            assert "CONFIDENTIAL" in _ocr_line(mask.crop((x0, y0, x1, y1)), workdir), f"page {page} not upright"


def test_structure_is_deterministic_and_reports_progress(sample: Path, sample_structured: Path, workdir: Path) -> None:
    calls: list[tuple[int, int]] = []
    out = workdir / "again.pdf"
    info = watermark_structure(sample, out, TEXT, on_page=lambda done, total: calls.append((done, total)))
    assert info == PdfInfo(page_count=3, encryption=Encryption.NONE)
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert out.read_bytes() == sample_structured.read_bytes()


# --- raster mode ----------------------------------------------------------------------------


def test_raster_keeps_page_geometry(source: Path, rastered: Path) -> None:
    assert _geometry(rastered) == _geometry(source)


def test_raster_output_passes_qpdf_check(rastered: Path) -> None:
    result = _run("qpdf", "--check", rastered)
    assert result.returncode == 0, result.stdout + result.stderr


def test_raster_matches_input_outside_the_watermark_box(source: Path, rastered: Path, workdir: Path) -> None:
    for page in range(1, _page_count(source) + 1):
        before, after = _render(source, page, DPI), _render(rastered, page, DPI)
        assert before.size == after.size, page
        box = watermark_box(*before.size)
        diff = ImageChops.difference(before, after)
        outside = diff.copy()
        outside.paste(0, box)
        changed_outside = sum(outside.point(lambda v: 255 if v > 4 else 0).histogram()[255:])
        assert changed_outside <= 0.005 * before.width * before.height, f"page {page}"
        inside = diff.crop(box)
        changed_inside = sum(inside.point(lambda v: 255 if v > 16 else 0).histogram()[255:])
        assert changed_inside >= 0.02 * inside.width * inside.height, f"page {page}: no stamp"
        if shutil.which("tesseract"):
            mask = _stamp_mask(before, after).crop(box)
            assert "CONFIDENTIAL" in _ocr_line(mask, workdir), f"page {page} not upright"


def test_raster_output_has_no_text_layer(sample_rastered: Path) -> None:
    assert not any(_pdftotext(sample_rastered, page).strip() for page in (1, 2, 3))


def test_raster_is_deterministic_and_reports_progress(sample: Path, sample_rastered: Path, tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    out = tmp_path / "again.pdf"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    info = watermark_raster(
        sample, out, TEXT, dpi=72, workdir=scratch, on_page=lambda done, total: calls.append((done, total))
    )
    assert info.page_count == 3
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert out.read_bytes() == sample_rastered.read_bytes()
    assert list(scratch.iterdir()) == []  # renderings are cleaned up


def test_raster_in_page_ranges_writes_the_same_file(
    sample: Path, sample_rastered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three ranges rendered by three forks at once: the same bytes as one range, every page reported in order."""
    monkeypatch.setattr(raster, "ranges_for", lambda count, _min_pages: split_pages(count, 3))
    calls: list[tuple[int, int]] = []
    out = tmp_path / "ranges.pdf"
    watermark_raster(sample, out, TEXT, dpi=72, workdir=tmp_path, on_page=lambda *progress: calls.append(progress))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert out.read_bytes() == sample_rastered.read_bytes()


def test_raster_refuses_pages_too_large_to_rasterise(workdir: Path) -> None:
    huge = workdir / "huge.pdf"
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(14400, 14400))
    pdf.save(huge)
    with pytest.raises(DocJobError) as caught:
        watermark_raster(huge, workdir / "never.pdf", TEXT, dpi=100)
    assert caught.value.code == "input.too_complex"


def test_raster_without_pdftoppm_is_tool_missing(sample: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("docjobs.pdf.raster.shutil.which", lambda _name: None)
    with pytest.raises(DocJobError) as caught:
        watermark_raster(sample, workdir / "never.pdf", TEXT, dpi=72)
    assert caught.value.code == "tool.missing"


# --- inspection and bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"%PDF-1.7\n%\xe2\xe3", "pdf"),
        (b"\x00junk before the header\n%PDF-1.4\n", "pdf"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "jpeg"),
        (b"II*\x00\x08\x00\x00\x00", "tiff"),
        (b"MM\x00*\x00\x00\x00\x08", "tiff"),
        (b"hello.pdf", "unknown"),
        (b"", "unknown"),
    ],
)
def test_sniff_kind_uses_magic_bytes(head: bytes, kind: str) -> None:
    assert sniff_kind(head) == kind


def test_inspect_reports_pages_and_encryption(sample: Path, permissions_only: Path) -> None:
    assert inspect_pdf(sample) == PdfInfo(page_count=3, encryption=Encryption.NONE)
    assert inspect_pdf(sample, max_pages=3).page_count == 3
    assert inspect_pdf(permissions_only) == PdfInfo(page_count=3, encryption=Encryption.PERMISSIONS_ONLY)


def _garbage(sample: Path, dst: Path) -> None:
    make_garbage(dst)


def _png(sample: Path, dst: Path) -> None:
    Image.new("RGB", (8, 8), "white").save(dst, format="PNG")


def _empty(sample: Path, dst: Path) -> None:
    pikepdf.new().save(dst)


def _damaged_stream(sample: Path, dst: Path) -> None:
    """Flip bytes inside the first page's compressed content: the xref stays valid."""
    data = bytearray(sample.read_bytes())
    with pikepdf.open(sample) as pdf:
        raw = pdf.pages[0].Contents.read_raw_bytes()
    start = data.index(raw) + 20
    data[start : start + 30] = bytes(b ^ 0x5A for b in data[start : start + 30])
    dst.write_bytes(bytes(data))


def _bad_mediabox(sample: Path, dst: Path) -> None:
    with pikepdf.open(sample) as pdf:
        pdf.pages[1].obj.MediaBox = pikepdf.Array([0, 0, 0, 0])  # no area (qpdf repairs non-numeric boxes itself)
        pdf.save(dst)


def _truncated(fraction: float) -> Callable[[Path, Path], None]:
    return lambda sample, dst: truncate_pdf(sample, dst, fraction)


@pytest.mark.parametrize(
    ("make", "code", "max_pages"),
    [
        (_garbage, "input.unsupported", None),
        (_png, "input.unsupported", None),
        (_truncated(0.25), "input.malformed", None),
        (_truncated(0.5), "input.malformed", None),
        (_truncated(0.9), "input.malformed", None),
        (_damaged_stream, "input.malformed", None),
        (_bad_mediabox, "input.malformed", None),
        (_empty, "input.empty", None),
        (lambda sample, dst: shutil.copyfile(sample, dst), "input.too_large", 2),
    ],
    ids=[
        "garbage",
        "png",
        "truncated-25",
        "truncated-50",
        "truncated-90",
        "damaged-stream",
        "bad-mediabox",
        "empty",
        "too-many-pages",
    ],
)
def test_bad_input_is_rejected_with_a_safe_error(
    make: Callable[[Path, Path], None], code: str, max_pages: int | None, sample: Path, workdir: Path
) -> None:
    bad = workdir / "secret-name-bad.pdf"
    make(sample, bad)
    with pytest.raises(DocJobError) as caught:
        inspect_pdf(bad, max_pages=max_pages)
    assert caught.value.code == code
    assert "secret" not in str(caught.value)
    assert caught.value.__cause__ is None


def test_password_protected_input_is_rejected_by_every_entry_point(encrypted: Path, workdir: Path) -> None:
    entry_points: list[Callable[[], object]] = [
        lambda: inspect_pdf(encrypted),
        lambda: watermark_structure(encrypted, workdir / "never.pdf", TEXT),
        lambda: watermark_raster(encrypted, workdir / "never.pdf", TEXT, dpi=72),
    ]
    for call in entry_points:
        with pytest.raises(DocJobError) as caught:
            call()
        assert caught.value.code == "input.encrypted"
        assert "secret" not in str(caught.value) and caught.value.__cause__ is None
    assert not (workdir / "never.pdf").exists()


@pytest.mark.parametrize("mode", ["structure", "raster"])
def test_permissions_only_input_gives_unencrypted_output(permissions_only: Path, workdir: Path, mode: str) -> None:
    out = workdir / f"unlocked-{mode}.pdf"
    if mode == "structure":
        info = watermark_structure(permissions_only, out, TEXT)
    else:
        info = watermark_raster(permissions_only, out, TEXT, dpi=72)
    assert info.encryption is Encryption.PERMISSIONS_ONLY
    with pikepdf.open(out) as pdf:
        assert not pdf.is_encrypted
    assert TEXT in _pdftotext(out, 1) or mode == "raster"


@pytest.mark.parametrize("mode", list(WatermarkMode))
def test_the_policy_sets_how_much_the_stamp_hides(sample: Path, tmp_path: Path, mode: WatermarkMode) -> None:
    """`watermark.opacity`: the stamp hides more of the page where it is drawn, in either mode; by default as much
    as it always did."""
    darkness = {}
    for opacity in (0.2, WATERMARK_OPACITY, 0.9):
        out = tmp_path / f"{mode.value}-{opacity}.pdf"
        watermark = WatermarkPolicy(text=TEXT, mode=mode, dpi=72, opacity=opacity)
        stamp(sample, out, watermark, workdir=tmp_path)
        page = _render(out, 1, 72)
        box = page.crop(watermark_box(*page.size))
        darkness[opacity] = 255 - ImageStat.Stat(box).mean[0]
        if mode is WatermarkMode.STRUCTURE:  # the stamp's own graphics state, the page's content untouched
            with pikepdf.open(out) as pdf:
                (form,) = [x for name, x in pdf.pages[0].Resources.XObject.items() if "Watermark" in name]
                assert float(form.Resources.ExtGState.G0.ca) == pytest.approx(opacity)
    assert darkness[0.2] < darkness[WATERMARK_OPACITY] < darkness[0.9], darkness
    assert WatermarkPolicy(text=TEXT).opacity == OPACITY == WATERMARK_OPACITY
    for outside in (0.05, 1.5):
        with pytest.raises(ValueError):
            WatermarkPolicy(text=TEXT, opacity=outside)


def test_the_stamp_opacity_changes_no_policy_version_until_a_policy_sets_it() -> None:
    """A policy that leaves `watermark.opacity` at its default keeps the version it had before the setting existed
    (pinned batches, recorded jobs); one that sets it is another policy."""
    policy = Policy(name="standard", watermark=WatermarkPolicy(text="CONFIDENTIAL"))
    assert policy.version == "standard@44a881b4b711"  # as before `watermark.opacity` existed
    lighter = policy.model_copy(update={"watermark": policy.watermark.model_copy(update={"opacity": 0.2})})
    assert lighter.version != policy.version
    assert Policy.model_validate(policy.model_dump()).version == policy.version


@pytest.mark.parametrize("text", ["", "   ", "two\nlines", "機密", "x" * 201])
def test_unusable_watermark_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        encode_text(text)


def test_helvetica_widths_match_reportlab() -> None:
    from reportlab.pdfbase.pdfmetrics import stringWidth

    ascii_text = "".join(chr(c) for c in range(32, 127))
    assert text_width_em(encode_text(ascii_text)) == pytest.approx(stringWidth(ascii_text, "Helvetica", 1))
