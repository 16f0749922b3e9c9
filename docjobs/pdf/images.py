"""Scanned images (TIFF, PNG, JPEG) to an image-only PDF, one page per image frame, for OCR.

The kind is sniffed from the content, never the file name. Every frame is fully decoded with Pillow
first, so a truncated or corrupt image fails here (``input.malformed``) rather than in OCR; the PDF
itself is written by img2pdf, which embeds JPEG and most PNG/TIFF data as it is (no re-encoding).

Page size follows the image resolution: a frame without a usable resolution is taken to be 300 dpi
(a typical scan), so a 2550 x 3300 pixel image makes a letter-size page. An EXIF Orientation of a
JPEG is honoured: a turn becomes the page's /Rotate; a mirrored orientation, which /Rotate cannot
express, is applied to the pixels. Frames img2pdf cannot embed as they are (transparency with more
than 8 bits per channel, unusual colour modes) are converted losslessly with Pillow first.

A frame with more pixels than the budget (`Budgets.max_pixels`) fails `input.too_complex` before it is
decoded; so does one over Pillow's own ceiling (its DecompressionBombError), which Pillow checks on opening.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from struct import error as struct_error

import img2pdf  # type: ignore[import-untyped]
from PIL import Image, ImageOps, ImageSequence

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, check_pixels, too_complex
from docjobs.pdf.inspect import PdfInfo, inspect_pdf, sniff_kind

ASSUMED_DPI = 300.0
MIN_DPI, MAX_DPI = 50.0, 4800.0  # outside this a recorded resolution is taken as missing
_HEAD = 1024
_FORMATS = {"png": "PNG", "jpeg": "JPEG", "tiff": "TIFF"}
_EXIF_ORIENTATION = 0x0112
_MIRRORED = (2, 4, 5, 7)
# What Pillow (and img2pdf's own parsers) raise on undecodable data: a truncated file is an OSError
# (UnidentifiedImageError is one), a TIFF without its dimensions a TypeError, a broken IFD a KeyError.
_DECODE_ERRORS = (
    OSError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    SyntaxError,
    EOFError,
    ZeroDivisionError,
    struct_error,
)


@dataclass(frozen=True)
class _Frame:
    width: int
    height: int
    dpi: tuple[float, float]


def image_to_pdf(src: Path, dst: Path, *, max_pages: int | None = None, budgets: Budgets = DEFAULT_BUDGETS) -> PdfInfo:
    """Write the scan image `src` as an image-only PDF `dst`; returns the PDF's info.

    Raises DocJobError: input.unsupported (not a PNG, JPEG or TIFF), input.malformed (a corrupt or
    truncated image), input.too_large (more than `max_pages` frames), input.too_complex (a frame with
    more pixels than `budgets` allow).
    """
    with src.open("rb") as file:
        kind = sniff_kind(file.read(_HEAD))
    if kind not in _FORMATS:
        raise DocJobError(FailureCode.INPUT_UNSUPPORTED, "the input is not a PDF, PNG, JPEG or TIFF")
    data = src.read_bytes()
    with warnings.catch_warnings():
        # Pillow warns above its own threshold and refuses twice that on opening: the budget decides first.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            pdf = _convert(data, _FORMATS[kind], max_pages, budgets)
        except Image.DecompressionBombError:
            raise too_complex("an image frame has more pixels than the image library accepts") from None
    dst.write_bytes(pdf)
    return inspect_pdf(dst, budgets=budgets)


def _convert(data: bytes, expected_format: str, max_pages: int | None, budgets: Budgets) -> bytes:
    frames, needs_pillow = _scan_frames(data, expected_format, max_pages, budgets)
    pdf = None if needs_pillow else _img2pdf([data], frames)
    if pdf is None:
        pngs, frames = _normalized_pngs(data, frames)
        pdf = _img2pdf(pngs, frames)
        if pdf is None:
            raise DocJobError(FailureCode.INPUT_MALFORMED, "the image could not be converted to a PDF")
    return pdf


def _scan_frames(
    data: bytes, expected_format: str, max_pages: int | None, budgets: Budgets
) -> tuple[list[_Frame], bool]:
    """Decode every frame once (the validity check) and read its size and resolution.

    Returns the frames and whether img2pdf cannot take the file as it is (a mirrored EXIF orientation).
    """
    frames: list[_Frame] = []
    needs_pillow = False
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format not in (expected_format, "MPO" if expected_format == "JPEG" else expected_format):
                raise DocJobError(FailureCode.INPUT_MALFORMED, "the image content does not match its type")
            for frame in _frames(image):
                check_pixels(frame.width, frame.height, "an image frame", budgets=budgets)
                if max_pages is not None and len(frames) >= max_pages:
                    raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the input has more than {max_pages} pages")
                frame.load()
                frames.append(_Frame(frame.width, frame.height, _dpi(frame)))
                needs_pillow = needs_pillow or frame.getexif().get(_EXIF_ORIENTATION) in _MIRRORED
    except _DECODE_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the image is corrupt or truncated") from None
    if not frames:
        raise DocJobError(FailureCode.INPUT_EMPTY)
    return frames, needs_pillow


def _frames(image: Image.Image) -> Iterator[Image.Image]:
    """The frames that become pages: every TIFF page; the first frame of anything else (as img2pdf
    does for JPEG/MPO and PNG/APNG)."""
    if image.format == "TIFF":
        yield from ImageSequence.Iterator(image)
    else:
        yield image


def _dpi(frame: Image.Image) -> tuple[float, float]:
    """The frame's (x, y) resolution; ASSUMED_DPI for a missing or implausible one."""
    raw = frame.info.get("dpi")
    try:
        x, y = (float(value) for value in raw) if raw is not None else (0.0, 0.0)
    except (TypeError, ValueError):
        x = y = 0.0
    if not (MIN_DPI <= x <= MAX_DPI and MIN_DPI <= y <= MAX_DPI):
        return (ASSUMED_DPI, ASSUMED_DPI)
    return (float(round(x)), float(round(y)))  # as img2pdf does: PNG stores dots per metre (300 -> 299.9994)


def _img2pdf(images: list[bytes], frames: list[_Frame]) -> bytes | None:
    """img2pdf with our page sizes; None if img2pdf cannot embed an image as it is."""
    sizes = iter(frames)

    def layout(width_px: int, height_px: int, _ndpi: object) -> tuple[float, float, float, float]:
        frame = next(sizes, None)
        if frame is None or (frame.width, frame.height) != (width_px, height_px):
            raise _LayoutMismatch
        width, height = width_px * 72 / frame.dpi[0], height_px * 72 / frame.dpi[1]
        return width, height, width, height

    try:
        pdf = img2pdf.convert(images, layout_fun=layout, rotation=img2pdf.Rotation.auto, nodate=True)
    except (
        _LayoutMismatch,
        img2pdf.AlphaChannelError,
        img2pdf.UnsupportedColorspaceError,
        img2pdf.JpegColorspaceError,
        img2pdf.ExifOrientationError,
    ):
        return None
    except (img2pdf.ImageOpenError, img2pdf.PdfTooLargeError, img2pdf.NegativeDimensionError, *_DECODE_ERRORS):
        # img2pdf parses some formats itself (PNG chunks, JPEG markers) and raises plain errors on junk
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the image could not be converted to a PDF") from None
    if next(sizes, None) is not None:
        return None  # img2pdf made fewer pages than there are frames
    assert isinstance(pdf, bytes)
    return pdf


class _LayoutMismatch(Exception):
    """img2pdf's frames are not the ones Pillow saw: convert them ourselves instead."""


def _normalized_pngs(data: bytes, frames: list[_Frame]) -> tuple[list[bytes], list[_Frame]]:
    """Each frame as a lossless 8-bit PNG that img2pdf accepts, turned upright by its EXIF orientation."""
    pngs: list[bytes] = []
    upright_frames: list[_Frame] = []
    try:
        with Image.open(io.BytesIO(data)) as image:
            for frame, info in zip(_frames(image), frames, strict=True):
                upright = ImageOps.exif_transpose(frame)
                turned = upright.size != frame.size  # a quarter turn swaps the resolutions too
                dpi = (info.dpi[1], info.dpi[0]) if turned else info.dpi
                out = io.BytesIO()
                _flatten(upright).save(out, format="PNG", dpi=dpi)
                pngs.append(out.getvalue())
                upright_frames.append(_Frame(upright.width, upright.height, dpi))
    except _DECODE_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the image is corrupt or truncated") from None
    return pngs, upright_frames


def _flatten(image: Image.Image) -> Image.Image:
    """8-bit L, RGB or CMYK without transparency (composited on white)."""
    if image.mode in ("1", "L", "RGB", "CMYK") and "transparency" not in image.info:
        return image
    if image.mode.startswith("I;16"):
        return image.convert("I").point(lambda value: value * (1 / 257)).convert("L")
    if image.mode in ("I", "F"):
        return image.convert("L")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")
