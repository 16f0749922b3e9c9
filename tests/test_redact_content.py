"""True redaction of page content, checked with independent readers.

Each fixture is a page written with raw content streams (or, for the composite-font case, by fpdf2 the
way Word, Chrome and LibreOffice write Type0/Identity-H fonts with /W). The region to redact is taken
from poppler's own word boxes, as a locator would give it. After `remove_content` and a save, neither
poppler's `pdftotext` nor pdfminer finds any piece of the value, the words around it are still
extracted at the same place (pdftotext -bbox, within 0.5 pt), page count and MediaBox are unchanged
and `qpdf --check` passes. Pages that cannot be rewritten safely raise UnsafePage and stay unchanged.
"""

from __future__ import annotations

import io
import re
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pikepdf
import pytest
import reportlab
from fpdf import FPDF
from pdfminer.high_level import extract_text
from pdfminer.layout import LAParams
from pikepdf import Name
from PIL import Image

from docjobs.pdf.redaction.content import ContentRemoval, remove_content
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from tests.fixtures.jbig2 import jbig2_image

SSN = "123-45-6789"
EMAIL = "jane.doe@example.com"
VERA = Path(reportlab.__file__).parent / "fonts" / "Vera.ttf"
PAGE_HEIGHT = 792.0
Word = tuple[str, float, float, float, float]  # text, xMin, yMin, xMax, yMax (poppler: top-left origin)

# --- fixtures -------------------------------------------------------------------------------


def _helvetica(pdf: pikepdf.Pdf, *, with_widths: bool = False) -> pikepdf.Object:
    """Helvetica, WinAnsi; with explicit /Widths (from the AFM) or as a bare standard-14 font."""
    font = pikepdf.Dictionary(
        Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding
    )
    if with_widths:
        from reportlab.pdfbase.pdfmetrics import stringWidth

        font.FirstChar, font.LastChar = 32, 126
        font.Widths = [round(stringWidth(chr(code), "Helvetica", 1000)) for code in range(32, 127)]
    return pdf.make_indirect(font)


def _pdf(*contents: bytes, resources: pikepdf.Dictionary | None = None) -> pikepdf.Pdf:
    """One page per content stream, all sharing one /Resources dictionary (as producers do)."""
    pdf = pikepdf.new()
    shared = resources if resources is not None else pikepdf.Dictionary()
    if Name.Font not in shared:
        shared.Font = pikepdf.Dictionary(F1=_helvetica(pdf), F2=_helvetica(pdf, with_widths=True))
    shared_ref = pdf.make_indirect(shared)
    for content in contents:
        page = pikepdf.Dictionary(
            Type=Name.Page, MediaBox=[0, 0, 612, PAGE_HEIGHT], Resources=shared_ref, Contents=pdf.make_stream(content)
        )
        pdf.pages.append(pikepdf.Page(page))
    return pdf


def _save(pdf: pikepdf.Pdf, path: Path) -> Path:
    pdf.save(path)
    return path


# --- readers --------------------------------------------------------------------------------


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, check=False)


def _words(path: Path, page: int = 1) -> list[Word]:
    result = _run("pdftotext", "-bbox", "-f", str(page), "-l", str(page), path, "-")
    assert result.returncode == 0, result.stderr
    pattern = r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>'
    return [
        (text, float(x0), float(y0), float(x1), float(y1))
        for x0, y0, x1, y1, text in re.findall(pattern, result.stdout)
    ]


def _texts(path: Path, page: int = 1) -> list[str]:
    """What pdftotext and pdfminer (all texts, figures included) extract from the page."""
    poppler = _run("pdftotext", "-f", str(page), "-l", str(page), path, "-")
    assert poppler.returncode == 0, poppler.stderr
    miner = extract_text(str(path), page_numbers=[page - 1], laparams=LAParams(all_texts=True))
    return [poppler.stdout, miner]


def _region(path: Path, *parts: str, page: int = 1) -> Rect:
    """The union of poppler's boxes of the words `parts`, in default user space."""
    boxes = [
        Rect(x0, PAGE_HEIGHT - y1, x1, PAGE_HEIGHT - y0) for text, x0, y0, x1, y1 in _words(path, page) if text in parts
    ]
    assert boxes, f"{parts} not on the page"
    region = boxes[0]
    for box in boxes[1:]:
        region = region.union(box)
    return region


def _counts(removal: ContentRemoval) -> tuple[int, int]:
    return removal.glyphs_removed, removal.images_redacted


def _pieces(secret: str) -> list[str]:
    return [piece for piece in re.split(r"[^0-9A-Za-z]+", secret) if len(piece) >= 2]


def _assert_redacted(before: Path, after: Path, secrets: list[str], page: int = 1) -> None:
    """No piece of any secret in either reader; exactly the secrets' characters are gone (whatever
    order a reader puts rotated text in), and every other word is still there, in the same place."""
    for old, new in zip(_texts(before, page), _texts(after, page), strict=True):
        compact = re.sub(r"\s+", "", new)
        for secret in secrets:
            for piece in _pieces(secret):
                assert piece not in compact, (piece, new)
        gone = Counter(re.sub(r"\s+", "", old)) - Counter(compact)
        assert gone == Counter(re.sub(r"\s+", "", "".join(secrets))), (old, new)
        assert not Counter(compact) - Counter(re.sub(r"\s+", "", old)), (old, new)
    kept = [word for word in _words(before, page) if not any(piece in word[0] for s in secrets for piece in _pieces(s))]
    assert kept, "the fixture has neighbouring words"
    after_words = _words(after, page)
    for text, *box in kept:
        matches = [other for other in after_words if other[0] == text]
        assert matches, f"{text!r} is no longer extracted"
        assert any(max(abs(a - b) for a, b in zip(box, other[1:], strict=True)) <= 0.5 for other in matches), text
    _assert_structure(before, after)


def _assert_structure(before: Path, after: Path) -> None:
    check = _run("qpdf", "--check", after)
    assert check.returncode == 0, check.stdout + check.stderr
    with pikepdf.open(before) as old, pikepdf.open(after) as new:
        assert len(new.pages) == len(old.pages)
        for old_page, new_page in zip(old.pages, new.pages, strict=True):
            assert [float(v) for v in new_page.mediabox] == [float(v) for v in old_page.mediabox]


def _raw_file(path: Path) -> bytes:
    """Every stream of the file decompressed, as one searchable blob."""
    result = subprocess.run(
        ["qpdf", "--qdf", "--object-streams=disable", str(path), "-"], capture_output=True, check=True
    )
    return result.stdout


def _redact(
    tmp_path: Path, pdf: pikepdf.Pdf, parts_by_page: dict[int, list[tuple[str, ...]]]
) -> tuple[Path, Path, list[ContentRemoval]]:
    before = _save(pdf, tmp_path / "before.pdf")
    removals = []
    for page, parts in parts_by_page.items():
        regions = [_region(before, *words, page=page) for words in parts]
        removals.append(remove_content(pdf, page, regions))
    return before, _save(pdf, tmp_path / "after.pdf"), removals


# --- text -----------------------------------------------------------------------------------


def test_plain_tj_with_a_standard_font(tmp_path: Path) -> None:
    pdf = _pdf(
        b"BT /F1 12 Tf 72 700 Td (Patient SSN 123-45-6789 on file) Tj 0 -20 Td "
        b"(Contact jane.doe@example.com today) Tj ET"
    )
    before, after, [removal] = _redact(tmp_path, pdf, {1: [(SSN,), (EMAIL,)]})
    assert (removal.glyphs_removed, removal.images_redacted) == (len(SSN) + len(EMAIL), 0)
    _assert_redacted(before, after, [SSN, EMAIL])
    assert SSN.encode() not in _raw_file(after) and b"jane" not in _raw_file(after)


def test_kerned_tj_array(tmp_path: Path) -> None:
    pdf = _pdf(b"BT /F2 11 Tf 72 650 Td [(Pa) 15 (tient ) -20 (1) 30 (23-4) -12 (5-67) 40 (89) -25 ( Record)] TJ ET")
    before, after, [removal] = _redact(tmp_path, pdf, {1: [(SSN,)]})
    assert removal.glyphs_removed == len(SSN)
    _assert_redacted(before, after, [SSN])


def test_value_split_across_two_operators(tmp_path: Path) -> None:
    pdf = _pdf(b"BT /F1 12 Tf 100 500 Td (SSN 123-45) Tj (-6789 on file) Tj ET")
    before, after, _ = _redact(tmp_path, pdf, {1: [(SSN,)]})
    _assert_redacted(before, after, [SSN])


def test_spacing_and_horizontal_scaling(tmp_path: Path) -> None:
    """Tc, Tw and Tz apply to removed glyphs too; their displacement must carry them."""
    spaced = "123 45 6789"
    pdf = _pdf(b"BT /F2 10 Tf 1.5 Tc 6 Tw 85 Tz 2 Ts 60 400 Td (Call 123 45 6789 before noon) Tj ET")
    before, after, [removal] = _redact(tmp_path, pdf, {1: [("123", "45", "6789")]})
    assert removal.glyphs_removed == len(spaced)
    _assert_redacted(before, after, [spaced])


def test_quote_operators_keep_their_state(tmp_path: Path) -> None:
    pdf = _pdf(b'BT /F1 10 Tf 14 TL 80 600 Td (Header line) Tj 2 0.5 (Member 123-45-6789 active) " ET')
    before, after, _ = _redact(tmp_path, pdf, {1: [(SSN,)]})
    _assert_redacted(before, after, [SSN])


def test_font_set_by_an_extgstate(tmp_path: Path) -> None:
    pdf = _pdf(b"/GS0 gs BT 72 700 Td (Member 123-45-6789 active) Tj ET")
    pdf.pages[0].Resources.ExtGState = pikepdf.Dictionary(
        GS0=pikepdf.Dictionary(Type=Name.ExtGState, Font=[pdf.pages[0].Resources.Font.F2, 14])
    )
    before = _save(pdf, tmp_path / "before.pdf")
    assert remove_content(pdf, 1, [_region(before, SSN)]).glyphs_removed == len(SSN)
    after = _save(pdf, tmp_path / "after.pdf")
    # pdfminer ignores a font set by `gs`; poppler shows and extracts it
    assert [word[0] for word in _words(after)] == ["Member", "active"]
    assert _words(after) == [word for word in _words(before) if word[0] != SSN]
    _assert_structure(before, after)


def test_a_region_over_nothing_leaves_the_page_as_it_was() -> None:
    pdf = _pdf(b"BT /F1 12 Tf 72 700 Td (Member 123-45-6789 active) Tj ET")
    contents, resources = pdf.pages[0].Contents, pdf.pages[0].Resources
    assert remove_content(pdf, 1, [Rect(300, 300, 400, 400)]) == ContentRemoval(0, 0)
    assert pdf.pages[0].Contents.objgen == contents.objgen and pdf.pages[0].Resources.objgen == resources.objgen


def test_rotated_text_matrix(tmp_path: Path) -> None:
    pdf = _pdf(b"BT /F1 12 Tf 0 1 -1 0 300 150 Tm (Patient 123-45-6789 Record) Tj ET")
    before, after, [removal] = _redact(tmp_path, pdf, {1: [(SSN,)]})
    assert removal.glyphs_removed == len(SSN)
    _assert_redacted(before, after, [SSN])


def test_composite_identity_h_font(tmp_path: Path) -> None:
    writer = FPDF(unit="pt", format=(612, PAGE_HEIGHT))
    writer.add_page()
    writer.add_font("Vera", fname=str(VERA))
    writer.set_font("Vera", size=12)
    writer.text(72, 100, f"Patient {SSN} Record")
    writer.text(72, 130, f"Write to {EMAIL} please")
    source = tmp_path / "fpdf.pdf"
    writer.output(str(source))
    with pikepdf.open(source) as pdf:
        font = next(iter(pdf.pages[0].Resources.Font.values()))
        assert font.Subtype == Name.Type0 and font.Encoding == Name("/Identity-H") and Name.W in font.DescendantFonts[0]
        before, after, [removal] = _redact(tmp_path, pdf, {1: [(SSN,), (EMAIL,)]})
    assert removal.glyphs_removed == len(SSN) + len(EMAIL)
    _assert_redacted(before, after, [SSN, EMAIL])


def test_form_shared_by_two_pages_is_copied_for_the_redacted_page(tmp_path: Path) -> None:
    pdf = _pdf(b"q 1 0 0 1 20 30 cm /Outer Do Q", b"q 1 0 0 1 20 30 cm /Outer Do Q")
    resources = pdf.pages[0].Resources
    inner = pdf.make_stream(
        b"BT /F1 12 Tf 0 0 Td (Member 123-45-6789 enrolled) Tj ET",
        Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 400, 50], Resources=resources,
    )  # fmt: skip
    outer = pdf.make_stream(
        b"/Inner Do",
        Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 500, 500], Matrix=[1, 0, 0, 1, 50, 600],
        Resources=pikepdf.Dictionary(XObject=pikepdf.Dictionary(Inner=inner)),
    )  # fmt: skip
    resources.XObject = pikepdf.Dictionary(Outer=outer)
    pdf.Root.Pages.Resources = pdf.pages[0].Resources  # inherited by both pages from the page tree
    for page in pdf.pages:
        del page.obj.Resources
    before, after, [removal] = _redact(tmp_path, pdf, {1: [(SSN,)]})
    assert removal.glyphs_removed == len(SSN)
    _assert_redacted(before, after, [SSN], page=1)
    assert all(SSN in text for text in _texts(after, page=2))
    assert _words(after, 2) == _words(before, 2)


def test_form_drawn_three_times_is_redacted_per_draw(tmp_path: Path) -> None:
    """A form drawn at three places, two of them under regions: the third still shows its text."""
    pdf = _pdf(b"q 1 0 0 1 72 700 cm /Fm Do Q q 1 0 0 1 72 500 cm /Fm Do Q q 1 0 0 1 72 300 cm /Fm Do Q")
    form = pdf.make_stream(
        b"BT /F1 12 Tf 0 0 Td (Member 123-45-6789 enrolled) Tj ET",
        Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 400, 50], Resources=pdf.pages[0].Resources,
    )  # fmt: skip
    pdf.pages[0].Resources.XObject = pikepdf.Dictionary(Fm=form)
    before = _save(pdf, tmp_path / "before.pdf")
    words = _words(before)
    top, _, bottom = (word for word in words if word[0] == SSN)
    regions = [Rect(x0, PAGE_HEIGHT - y1, x1, PAGE_HEIGHT - y0) for _, x0, y0, x1, y1 in (top, bottom)]
    assert remove_content(pdf, 1, regions).glyphs_removed == 2 * len(SSN)
    after = _save(pdf, tmp_path / "after.pdf")
    assert _words(after) == [word for word in words if word not in (top, bottom)]
    assert all(text.count(SSN) == 1 and text.count("Member") == 3 for text in _texts(after))
    _assert_structure(before, after)


def test_actual_text_of_redacted_content_is_dropped(tmp_path: Path) -> None:
    pdf = _pdf(
        b"BT /F1 12 Tf 72 700 Td (Name ) Tj /Span <</ActualText (123-45-6789)>> BDC (123-45-6789) Tj EMC "
        b"( Record) Tj ET BT /F1 12 Tf 72 650 Td /Span /MC0 BDC (jane.doe@example.com) Tj EMC ( Contact) Tj ET "
        b"BT /F1 12 Tf 72 600 Td /Span <</ActualText (Elsewhere)>> BDC (Elsewhere) Tj EMC ET"
    )
    pdf.pages[0].Resources.Properties = pikepdf.Dictionary(
        MC0=pdf.make_indirect(pikepdf.Dictionary(ActualText=pikepdf.String(EMAIL), Lang=pikepdf.String("en")))
    )
    before, after, _ = _redact(tmp_path, pdf, {1: [(SSN,), (EMAIL,)]})
    _assert_redacted(before, after, [SSN, EMAIL])
    raw = _raw_file(after)
    assert SSN.encode() not in raw and b"jane" not in raw
    assert raw.count(b"/ActualText") == 1  # marked content without redacted glyphs keeps its /ActualText


# --- images ---------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["upright", "flipped_and_rotated"])
def test_image_pixels_under_a_region_are_overwritten(tmp_path: Path, placement: str) -> None:
    width, height = 60, 40
    pixels = bytes(value for y in range(height) for x in range(width) for value in (x * 4, y * 6, 180))
    ctm = {"upright": (240, 0, 0, 160, 100, 300), "flipped_and_rotated": (0, -160, -240, 0, 340, 460)}[placement]
    pdf = _pdf(f"q {' '.join(map(str, ctm))} cm /Im0 Do Q BT /F1 12 Tf 72 200 Td (Below the picture) Tj ET".encode())
    image = pdf.make_stream(
        zlib.compress(pixels), Type=Name.XObject, Subtype=Name.Image, Width=width, Height=height,
        ColorSpace=Name.DeviceRGB, BitsPerComponent=8, Filter=Name.FlateDecode,
    )  # fmt: skip
    pdf.pages[0].Resources.XObject = pikepdf.Dictionary(Im0=image)
    before = _save(pdf, tmp_path / "before.pdf")
    region = Rect(150, 350, 250, 400)
    assert _counts(remove_content(pdf, 1, [region])) == (0, 1)
    after = _save(pdf, tmp_path / "after.pdf")
    _assert_structure(before, after)
    with pikepdf.open(after) as done:
        new_image = done.pages[0].Resources.XObject.Im0
        assert isinstance(new_image, pikepdf.Stream)
        assert Name.DecodeParms not in new_image and new_image.Width == width and new_image.Height == height
        painted = pikepdf.PdfImage(new_image).as_pil_image().convert("RGB")
    a, b, c, d, e, f = ctm
    black = changed = 0
    for y in range(height):
        for x in range(width):
            corners = [((x + i) / width, 1 - (y + j) / height) for i in (0, 1) for j in (0, 1)]
            points = [(u * a + v * c + e, u * b + v * d + f) for u, v in corners]
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            inside = region.x0 <= min(xs) and max(xs) <= region.x1 and region.y0 <= min(ys) and max(ys) <= region.y1
            outside = max(xs) <= region.x0 or min(xs) >= region.x1 or max(ys) <= region.y0 or min(ys) >= region.y1
            value = painted.getpixel((x, y))
            original = tuple(pixels[(y * width + x) * 3 : (y * width + x) * 3 + 3])
            if inside:
                assert value == (0, 0, 0), (x, y)
                black += 1
            elif outside:
                assert value == original, (x, y)
            changed += value != original
    assert black > 0 and changed < width * height / 2


def _image(pdf: pikepdf.Pdf, kind: str) -> pikepdf.Stream:
    """A 50 x 40 test image of one kind: each stores its samples differently, or masks them."""
    width, height = 50, 40
    gradient = Image.frombytes("RGB", (width, height), bytes(
        value for y in range(height) for x in range(width) for value in (x * 5, y * 6, 255 - x * 5)
    ))  # fmt: skip
    common = {"Type": Name.XObject, "Subtype": Name.Image, "Width": width, "Height": height}
    if kind in ("jpeg", "jpeg_cmyk"):
        jpeg = io.BytesIO()
        cmyk = kind == "jpeg_cmyk"
        (gradient.convert("CMYK") if cmyk else gradient).save(jpeg, "JPEG", quality=90)
        # Pillow writes Adobe (inverted) CMYK, which PDF producers declare with an inverting /Decode.
        extra = {"Decode": [1, 0] * 4} if cmyk else {}
        return pdf.make_stream(
            jpeg.getvalue(), **common, **extra, BitsPerComponent=8, Filter=Name.DCTDecode,
            ColorSpace=Name.DeviceCMYK if cmyk else Name.DeviceRGB,
        )  # fmt: skip
    if kind == "indexed_4bit":
        palette = bytes(channel for index in range(16) for channel in (255 - index * 8, index * 16, 128))
        samples = bytes(((x // 4 % 16) << 4) | (y // 3 % 16) for y in range(height) for x in range(0, width, 2))
        return pdf.make_stream(
            samples, **common, BitsPerComponent=4,
            ColorSpace=pikepdf.Array([Name.Indexed, Name.DeviceRGB, 15, pikepdf.String(palette)]),
        )  # fmt: skip
    if kind == "gray_1bit_inverted":
        bits = gradient.convert("L").point(lambda v: 255 if v > 100 else 0).convert("1")
        data = bytes(255 - byte for byte in bits.tobytes())  # stored inverted; /Decode [1 0] undoes it
        return pdf.make_stream(data, **common, ColorSpace=Name.DeviceGray, BitsPerComponent=1, Decode=[1, 0])
    if kind == "jbig2_globals":
        return jbig2_image(pdf, gradient.convert("L").point(lambda v: 255 if v > 100 else 0).convert("1"))
    if kind == "jpx_alpha_smask":  # Pillow writes the (opaque) alpha into the codestream: a PDF reader ignores it
        jpx = io.BytesIO()
        gradient.convert("RGBA").save(jpx, "JPEG2000", irreversible=False)
        image = pdf.make_stream(jpx.getvalue(), **common, Filter=Name.JPXDecode)
        image.SMask = _soft_mask(pdf, width, height)
        return image
    if kind == "stencil_mask":
        stripes = bytes((0x0F if (y // 4) % 2 else 0xF0) for y in range(height) for _ in range((width + 7) // 8))
        return pdf.make_stream(zlib.compress(stripes), **common, ImageMask=True, Filter=Name.FlateDecode)
    image = pdf.make_stream(
        zlib.compress(gradient.tobytes()), **common, ColorSpace=Name.DeviceRGB, BitsPerComponent=8,
        Filter=Name.FlateDecode,
    )  # fmt: skip
    if kind == "soft_mask":  # mostly transparent: the mask itself shows the shape under the region
        image.SMask = _soft_mask(pdf, width, height)
    return image


def _soft_mask(pdf: pikepdf.Pdf, width: int, height: int) -> pikepdf.Stream:
    """A soft mask transparent on its left half."""
    alpha = bytes(40 if x < width // 2 else 255 for y in range(height) for x in range(width))
    return pdf.make_stream(
        zlib.compress(alpha), Type=Name.XObject, Subtype=Name.Image, Width=width, Height=height,
        ColorSpace=Name.DeviceGray, BitsPerComponent=8, Filter=Name.FlateDecode,
    )  # fmt: skip


def _render(path: Path, page: int, tmp_path: Path) -> Image.Image:
    """The page as a viewer shows it, at 72 dpi: one pixel per point."""
    prefix = tmp_path / f"{path.stem}-{page}"
    result = _run("pdftoppm", "-r", "72", "-png", "-singlefile", "-f", str(page), "-l", str(page), path, prefix)
    assert result.returncode == 0, result.stderr
    with Image.open(f"{prefix}.png") as rendered:
        return rendered.convert("RGB")


@pytest.mark.parametrize(
    "kind",
    [
        "flate_rgb",
        "jpeg",
        "jpeg_cmyk",
        "indexed_4bit",
        "gray_1bit_inverted",
        "stencil_mask",
        "soft_mask",
        "jbig2_globals",
        "jpx_alpha_smask",
    ],
)
def test_rendered_image_is_black_under_the_region_only(tmp_path: Path, kind: str) -> None:
    """Rendered by poppler, the redacted page is black under the region and unchanged elsewhere; the
    other page drawing the same image is unchanged everywhere."""
    content = b"q 200 0 0 160 100 400 cm /Im0 Do Q"
    pdf = _pdf(content, content)
    pdf.pages[0].Resources.XObject = pikepdf.Dictionary(Im0=_image(pdf, kind))
    before = _save(pdf, tmp_path / "before.pdf")
    region = Rect(160, 450, 260, 500)
    assert _counts(remove_content(pdf, 1, [region])) == (0, 1)
    after = _save(pdf, tmp_path / "after.pdf")
    _assert_structure(before, after)
    old, new = _render(before, 1, tmp_path), _render(after, 1, tmp_path)
    inside, outside = region.padded(-1.5), region.padded(1.5)
    for py in range(300, 400, 2):
        for px in range(80, 320, 2):
            x, y = px + 0.5, PAGE_HEIGHT - py - 0.5
            if inside.contains_point(x, y):
                assert new.getpixel((px, py)) == (0, 0, 0), (px, py)
            elif not outside.contains_point(x, y):
                assert new.getpixel((px, py)) == old.getpixel((px, py)), (px, py)
    assert _render(after, 2, tmp_path).tobytes() == _render(before, 2, tmp_path).tobytes()


# --- unsafe pages ---------------------------------------------------------------------------


def _type3_font(pdf: pikepdf.Pdf) -> pikepdf.Object:
    box = pdf.make_stream(b"600 0 0 0 500 700 d1 0 0 500 700 re f")
    return pdf.make_indirect(
        pikepdf.Dictionary(
            Type=Name.Font, Subtype=Name.Type3, FontBBox=[0, 0, 500, 700], FontMatrix=[0.001, 0, 0, 0.001, 0, 0],
            CharProcs=pikepdf.Dictionary(box=box), FirstChar=32, LastChar=126, Widths=[600] * 95,
            Encoding=pikepdf.Dictionary(Type=Name.Encoding, Differences=[32, *[Name.box] * 95]),
        )
    )  # fmt: skip


def test_type3_glyphs_under_a_region_make_the_page_unsafe(tmp_path: Path) -> None:
    pdf = _pdf(b"BT /F1 12 Tf 72 700 Td (Top line stays) Tj ET BT /T3 12 Tf 72 500 Td (Code 123-45-6789) Tj ET")
    pdf.pages[0].Resources.Font.T3 = _type3_font(pdf)
    content = pdf.pages[0].Contents.read_bytes()
    with pytest.raises(UnsafePage) as caught:
        remove_content(pdf, 1, [Rect(100, 495, 200, 515)])
    assert caught.value.reason == "type3_font"
    assert pdf.pages[0].Contents.read_bytes() == content
    # The same font away from every region does not stop the Helvetica line from being redacted.
    assert remove_content(pdf, 1, [Rect(90, 695, 130, 712)]).glyphs_removed > 0


def test_inline_image_under_a_region_makes_the_page_unsafe(tmp_path: Path) -> None:
    pdf = _pdf(
        b"q 100 0 0 50 72 600 cm BI /W 2 /H 1 /BPC 8 /CS /G ID \x10\x20 EI Q BT /F1 12 Tf 72 500 Td (Text) Tj ET"
    )
    with pytest.raises(UnsafePage) as caught:
        remove_content(pdf, 1, [Rect(80, 610, 90, 620)])
    assert caught.value.reason == "inline_image"
    assert remove_content(pdf, 1, [Rect(72, 495, 100, 512)]).glyphs_removed == 4  # the image is elsewhere


@pytest.mark.parametrize(
    ("font", "reason", "over_it"),
    [
        (pikepdf.Dictionary(Type=Name.Font, Subtype=Name.TrueType, BaseFont=Name.SomeFont), "unknown_widths",
         Rect(400, 695, 450, 712)),
        (pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type0, Encoding=Name("/Identity-V"),
                            DescendantFonts=[pikepdf.Dictionary(Subtype=Name.CIDFontType2)]), "vertical_text",
         Rect(66, 640, 78, 660)),
        (pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type0, Encoding=Name("/UniJIS-UCS2-H"),
                            DescendantFonts=[pikepdf.Dictionary(Subtype=Name.CIDFontType0)]), "unsupported_encoding",
         Rect(100, 695, 150, 712)),
        (pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type0, Encoding=Name("/UniJIS-UCS2-H"),
                            DescendantFonts=[pikepdf.Dictionary(Subtype=Name.CIDFontType0, W=[1, [500]])]),
         "unsupported_encoding", Rect(400, 695, 450, 712)),
    ],
)  # fmt: skip
def test_fonts_without_exact_metrics_make_the_page_unsafe(font: pikepdf.Dictionary, reason: str, over_it: Rect) -> None:
    """Glyphs of such a font lie somewhere on their baseline: a region on that line is refused, a
    region on another line is not (and the Helvetica line after a new Td is judged exactly again). Vertical
    glyphs (1 em down each, no /W2) and a 2-byte predefined CMap's (all /DW wide: no /W) are placed exactly:
    only a region over them is refused, as they are neither removed nor re-set; with a /W (widths by CID, and
    the codes are not CIDs), the CMap's glyphs lie anywhere on their baseline again."""
    pdf = _pdf(b"BT /X 12 Tf 72 700 Td (Some words 123-45-6789) Tj /F1 12 Tf 0 -100 Td (Plain line) Tj ET")
    pdf.pages[0].Resources.Font.X = pdf.make_indirect(font)
    if reason != "vertical_text":  # the column runs down through "Plain"
        assert remove_content(pdf, 1, [Rect(70, 595, 96, 612)]).glyphs_removed == 5  # "Plain"
    with pytest.raises(UnsafePage) as caught:
        remove_content(pdf, 1, [over_it])
    assert caught.value.reason == reason
    if over_it.x0 < 400:  # placed: a region on the baseline past the glyphs is not refused
        assert remove_content(pdf, 1, [Rect(400, 695, 450, 712)]).glyphs_removed == 0


def test_tiling_pattern_showing_text_makes_the_page_unsafe() -> None:
    pdf = _pdf(b"/Pattern cs /P0 scn 0 0 612 792 re f BT /F1 12 Tf 72 700 Td (Text) Tj ET")
    cell = pdf.make_stream(
        b"BT /F1 8 Tf 0 2 Td (SSN 123-45-6789) Tj ET",
        Type=Name.Pattern, PatternType=1, PaintType=1, TilingType=1, BBox=[0, 0, 100, 10], XStep=100, YStep=10,
        Resources=pdf.pages[0].Resources,
    )  # fmt: skip
    pdf.pages[0].Resources.Pattern = pikepdf.Dictionary(P0=cell)
    with pytest.raises(UnsafePage) as caught:
        remove_content(pdf, 1, [Rect(72, 695, 100, 712)])
    assert caught.value.reason == "pattern_content"


def test_unparsable_content_makes_the_page_unsafe() -> None:
    pdf = _pdf(b"BT /F1 12 Tf 72 700 Td (never closed Tj ET")
    with pytest.raises(UnsafePage) as caught:
        remove_content(pdf, 1, [Rect(70, 690, 200, 720)])
    assert caught.value.reason == "unparsable_content"
