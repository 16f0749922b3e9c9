"""Raster mode: flatten each page to an image, stamp the watermark into the pixels, rebuild a PDF.

Nothing of the original survives but the look of its visible area: no text layer, annotations,
metadata, or content hidden outside the CropBox. Each page is rendered by its own `pdftoppm`
process (killable, and a page that hangs is bounded by a timeout) from a copy that pikepdf has
already validated and decrypted, so poppler and pikepdf agree on which page is which.

Each new page keeps the input's boxes and /Rotate. Its image is un-rotated back into user space
and placed so that one image pixel covers exactly one pixel when rendered at the same dpi,
anchored at the corner a viewer shows top-left. Rendering the output with
`pdftoppm -cropbox` at that dpi reproduces the input's rendering except inside `watermark_box`.
Images are Flate-compressed (lossless), and grayscale pages are stored as one channel.

A long document's pages are rendered in page ranges at once, one fork of the document child per core
(`parallel_pages.map_pages`), each reporting its pages as it goes: rendering is most of raster mode's time, and of
the redaction fallback's, which burns pages in the same way (`render_pages`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pikepdf
from pikepdf import Name
from PIL import Image, ImageChops, ImageDraw, ImageFont

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.stamp_text import encode_text
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, check_pixels, too_complex
from docjobs.pdf.inspect import PdfInfo, ProgressFn, open_checked, rotation, visible_box
from docjobs.pdf.parallel_pages import map_pages, ranges_for
from docjobs.pdf.watermark import GRAY, OPACITY, STAMP_BAND

PAGE_TIMEOUT_S = 120
MIN_PAGES_PER_RANGE = 4  # a fork costs a few milliseconds, a page's rendering tens to hundreds
_INSET_PX = 0.01
_KEPT_PAGE_KEYS = (Name.MediaBox, Name.CropBox, Name.BleedBox, Name.TrimBox, Name.ArtBox, Name.UserUnit)
_UNROTATE = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}


def watermark_box(width_px: int, height_px: int) -> tuple[int, int, int, int]:
    """Pixel box (x0, y0, x1, y1) that raster mode may stamp in an upright page rendering."""
    x0, top, x1, bottom = STAMP_BAND
    return round(width_px * x0), round(height_px * top), round(width_px * x1), round(height_px * bottom)


def watermark_raster(
    src: Path,
    dst: Path,
    text: str,
    *,
    dpi: int,
    opacity: float = OPACITY,
    on_page: ProgressFn | None = None,
    workdir: Path | None = None,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> PdfInfo:
    """Rasterise `src` at `dpi`, stamp `text` on every page at `opacity`, write `dst`; returns the input's info.

    Temporary renderings go under `workdir` (default: the system temp dir), one page at a time. A page
    with more pixels at `dpi` than `budgets.max_pixels` fails `input.too_complex` before any is rendered.
    """
    encode_text(text)  # same rules as structure mode, so a job's text is valid in either mode
    if not 18 <= dpi <= 1200:
        raise ValueError("dpi must be between 18 and 1200")
    with open_checked(src, budgets=budgets) as (pdf, info), tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for page in pdf.pages:
            check_page_pixels(page, dpi, budgets)
        clean = Path(tmp) / "input.pdf"
        pdf.save(clean, encryption=False)
        turns = {number: rotation(page) for number, page in enumerate(pdf.pages, start=1)}
        rendered = render_pages(clean, turns, dpi, Path(tmp), text=text, opacity=opacity, on_page=on_page)
        out = pikepdf.new()
        for number, page in enumerate(pdf.pages, start=1):
            _add_page(out, page, rendered[number], dpi)
        out.save(dst, deterministic_id=True)
    return info


@dataclass(frozen=True)
class Rendering:
    """A page's rendering as its new content draws it: turned back into user space, Flate-compressed."""

    width: int
    height: int
    gray: bool  # stored as one channel
    data: bytes


def render_pages(
    pdf: Path,
    turns: dict[int, int],
    dpi: int,
    tmp: Path,
    *,
    text: str | None = None,
    opacity: float = OPACITY,
    on_page: ProgressFn | None = None,
) -> dict[int, Rendering]:
    """Pages `turns` (number from 1 -> its /Rotate) of `pdf` rendered at `dpi`, stamped with `text` at `opacity` if
    given, in page ranges at once (each a fork with its own folder under `tmp`, reporting its pages to `on_page`)."""
    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        raise DocJobError(FailureCode.TOOL_MISSING, "pdftoppm (poppler-utils) is not installed")
    numbers = sorted(turns)
    with tempfile.TemporaryDirectory(dir=tmp, prefix="pages-") as folder:

        def render_range(part: range, page_done: Callable[[], None]) -> dict[str, Any]:
            own = Path(tempfile.mkdtemp(dir=folder))  # pdftoppm's output name is fixed: one folder per range
            shapes = {}
            for index in part:
                number = numbers[index]
                image = render_page(pdftoppm, pdf, number, dpi, own)
                if text is not None:
                    _stamp(image, text, opacity)
                rendering = _encoded(image, turns[number])
                (Path(folder) / f"{number}.z").write_bytes(rendering.data)
                shapes[str(number)] = [rendering.width, rendering.height, rendering.gray]
                page_done()
            return shapes

        def report(done: int) -> None:
            if on_page is not None:
                on_page(done, len(numbers))

        answers = map_pages(render_range, ranges_for(len(numbers), MIN_PAGES_PER_RANGE), report)
        shapes = {number: shape for answer in answers for number, shape in answer.items()}
        return {number: _read_rendering(Path(folder), number, shapes.get(str(number))) for number in numbers}


def _encoded(image: Image.Image, rotate: int) -> Rendering:
    if rotate:
        image = image.transpose(_UNROTATE[rotate])
    gray = _is_gray(image)
    pixels = image.convert("L") if gray else image
    return Rendering(image.width, image.height, gray, zlib.compress(pixels.tobytes()))


def _read_rendering(folder: Path, number: int, shape: object) -> Rendering:
    """A range's page, checked: a fork is no more trusted than the child it was forked from."""
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(value, int) for value in shape)):
        raise RuntimeError(f"a page range renderer answered out of protocol for page {number}")
    width, height, gray = shape
    return Rendering(int(width), int(height), bool(gray), (folder / f"{number}.z").read_bytes())


def check_page_pixels(page: pikepdf.Page, dpi: int, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """Refuse, before rendering, a page whose visible area at `dpi` has more pixels than the budget."""
    x0, y0, x1, y1 = visible_box(page)
    check_pixels((x1 - x0) * dpi / 72, (y1 - y0) * dpi / 72, f"a page rendered at {dpi} dpi", budgets=budgets)


def render_page(pdftoppm: str, pdf: Path, number: int, dpi: int, tmp: Path) -> Image.Image:
    """Page `number` (from 1) of `pdf` as poppler shows it (CropBox, upright) at `dpi`, in its own process."""
    prefix = tmp / "page"
    command = [pdftoppm, "-r", str(dpi), "-f", str(number), "-l", str(number), "-cropbox", "-singlefile"]
    try:
        subprocess.run([*command, str(pdf), str(prefix)], capture_output=True, timeout=PAGE_TIMEOUT_S, check=True)
    except subprocess.TimeoutExpired:
        raise DocJobError(FailureCode.RENDER_FAILED, f"rendering page {number} timed out") from None
    except subprocess.CalledProcessError as error:
        raise DocJobError(FailureCode.RENDER_FAILED, f"pdftoppm exited with status {error.returncode}") from None
    rendered = prefix.with_suffix(".ppm")
    try:
        with Image.open(rendered) as image:
            return image.convert("RGB")
    except Image.DecompressionBombError:
        raise too_complex(f"page {number} renders to more pixels than the image library accepts") from None
    except (OSError, ValueError):
        raise DocJobError(FailureCode.RENDER_FAILED, f"pdftoppm produced no image for page {number}") from None
    finally:
        rendered.unlink(missing_ok=True)


def _stamp(image: Image.Image, text: str, opacity: float = OPACITY) -> None:
    """Draw `text` centred in `watermark_box` at `opacity`, on an overlay of the box's size so nothing spills."""
    x0, y0, x1, y1 = watermark_box(*image.size)
    width, height = x1 - x0, y1 - y0
    font = _fitting_font(text, width, height)
    left, top, right, bottom = font.getbbox(text)
    overlay = Image.new("RGBA", (width, height))
    shade = round(GRAY * 255)
    ImageDraw.Draw(overlay).text(
        ((width - (right - left)) / 2 - left, (height - (bottom - top)) / 2 - top),
        text,
        font=font,
        fill=(shade, shade, shade, round(opacity * 255)),
    )
    region = image.crop((x0, y0, x1, y1)).convert("RGBA")
    region.alpha_composite(overlay)
    image.paste(region.convert("RGB"), (x0, y0))


def _fitting_font(text: str, width: int, height: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    size = max(1, height)
    while True:
        font = ImageFont.load_default(size=size)
        left, top, right, bottom = font.getbbox(text)
        if size == 1 or (right - left <= width and bottom - top <= height):
            return font
        size = max(1, min(size - 1, int(size * min(width / max(1, right - left), height / max(1, bottom - top)))))


def _add_page(out: pikepdf.Pdf, source: pikepdf.Page, rendering: Rendering, dpi: int) -> None:
    resources, contents = image_content(out, source, rendering, dpi)
    page = pikepdf.Dictionary(Type=Name.Page, Resources=resources, Contents=contents)
    for key in _KEPT_PAGE_KEYS:
        if key in source.obj:
            value = source.obj[key]  # copied as direct objects: `source` belongs to another Pdf
            page[key] = pikepdf.Array(list(value)) if isinstance(value, pikepdf.Array) else value
    if rotation(source):
        page.Rotate = rotation(source)
    out.pages.append(pikepdf.Page(page))


def image_content(
    out: pikepdf.Pdf, source: pikepdf.Page, rendering: Rendering, dpi: int
) -> tuple[pikepdf.Dictionary, pikepdf.Stream]:
    """/Resources and /Contents (in `out`) that draw `rendering`, an upright rendering of `source` at `dpi`
    turned back into user space, exactly over the visible area of a page with `source`'s boxes and rotation."""
    rotate = rotation(source)
    x0, y0, x1, y1 = visible_box(source)
    pixel = 72 / dpi
    width, height = rendering.width * pixel, rendering.height * pixel
    # Anchor at the user-space corner that a viewer shows at the top-left, like pdftoppm does.
    left = x0 if rotate in (0, 90) else x1 - width
    bottom = y1 - height if rotate in (0, 270) else y0
    # Inset by a hair: poppler's Splash rounds an image's far edge down and adds one pixel, so an
    # exact fit would be stretched to N+1 pixels and interpolated (blurred).
    inset = _INSET_PX * pixel
    left, bottom, width, height = left + inset, bottom + inset, width - 2 * inset, height - 2 * inset
    xobject = pikepdf.Stream(
        out,
        rendering.data,
        Type=Name.XObject,
        Subtype=Name.Image,
        Width=rendering.width,
        Height=rendering.height,
        ColorSpace=Name.DeviceGray if rendering.gray else Name.DeviceRGB,
        BitsPerComponent=8,
        Filter=Name.FlateDecode,
    )
    content = f"q {width:.4f} 0 0 {height:.4f} {left:.4f} {bottom:.4f} cm /Im0 Do Q\n".encode()
    return pikepdf.Dictionary(XObject=pikepdf.Dictionary(Im0=xobject)), out.make_stream(content)


def _is_gray(image: Image.Image) -> bool:
    red, green, blue = image.split()
    return ImageChops.difference(red, green).getbbox() is None and ImageChops.difference(red, blue).getbbox() is None
