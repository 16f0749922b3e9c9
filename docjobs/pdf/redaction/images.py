"""Overwrite the pixels of an image XObject that lie under redaction regions, in the image data itself.

Covering an image with a box leaves the pixels in the file; here they are replaced. The samples are
decoded to raw bytes (qpdf decodes Flate, LZW, RunLength and DCT, and JBIG2 through jbig2dec, bounded as
`docjobs.pdf.jbig2` says; Pillow, via pikepdf, what qpdf cannot), painted, and written back losslessly with
Flate, keeping /Width, /Height, /ColorSpace and /Decode, so every pixel outside the regions stays exactly as
it was. "Black" is worked out per colour space and /Decode; the soft mask (/SMask) and an explicit /Mask are
painted opaque under the regions too, since either can carry the shape of what was drawn. Regions map to
pixels through the inverse of the image's placement matrix, so flipped, rotated and scaled placements are
handled alike. An image none of these decodes (a broken or unknown filter, a JBIG2 page over the stream
budget) raises UnsafePage("image_undecodable"): its page is burned in from a rendering instead.
"""

from __future__ import annotations

import math
import warnings
import zlib

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, check_pixels, decoded_size
from docjobs.pdf.jbig2 import bound_jbig2_decoder
from docjobs.pdf.redaction.geometry import Matrix, Point, corners, invert, multiply
from docjobs.pdf.redaction.regions import Rect, UnsafePage

_ADDITIVE = {"/DeviceGray": 1, "/CalGray": 1, "/DeviceRGB": 3, "/CalRGB": 3, "/Lab": 3}
_SUBTRACTIVE = {"/DeviceCMYK": 4, "/Separation": 1}
_STALE_KEYS = (Name.Length, Name.Filter, Name.DecodeParms, Name.SMaskInData)
Spans = list[tuple[int, int, int]]  # (row, first column, end column)


def redact_image(
    pdf: pikepdf.Pdf, image: pikepdf.Stream, ctm: Matrix, regions: list[Rect], *, budgets: Budgets = DEFAULT_BUDGETS
) -> pikepdf.Stream | None:
    """A new image XObject with the pixels under `regions` painted black (None if none are).

    `ctm` places the image's unit square on the page. Raises UnsafePage("image_undecodable"), or
    `input.too_complex` for an image (or mask) with more pixels than `budgets` allow."""
    painted = _painted(pdf, image, ctm, regions, opaque=False, budgets=budgets)
    if painted is None:
        return None
    for key in (Name.SMask, Name.Mask):
        mask = image.get(key)
        painted_mask = (
            _painted(pdf, mask, ctm, regions, opaque=True, budgets=budgets)
            if isinstance(mask, pikepdf.Stream)
            else None
        )
        if painted_mask is not None:
            painted[key] = painted_mask
    return painted


def _painted(
    pdf: pikepdf.Pdf, image: pikepdf.Stream, ctm: Matrix, regions: list[Rect], *, opaque: bool, budgets: Budgets
) -> pikepdf.Stream | None:
    try:
        width, height = int(image[Name.Width]), int(image[Name.Height])
    except (KeyError, TypeError, ValueError):
        raise UnsafePage("image_undecodable") from None
    if width <= 0 or height <= 0:
        raise UnsafePage("image_undecodable")
    spans = _spans(ctm, width, height, regions)
    if not spans:
        return None
    check_pixels(width, height, "an image to redact", budgets=budgets)
    data, components, bits, decoded_by_pillow = _samples(image, width, height, budgets)
    copy = copy_stream(pdf, image, b"")
    if decoded_by_pillow:
        copy[Name.BitsPerComponent] = bits
        if not copy.get(Name.ImageMask, False) and _components(copy.get(Name.ColorSpace)) != components:
            copy[Name.ColorSpace] = Name.DeviceGray if components == 1 else Name.DeviceRGB
    space = copy.get(Name.ColorSpace)
    if isinstance(space, pikepdf.Array) and len(space) == 4 and space[0] == Name.Indexed:
        # A palette need not hold black: the copy stores the colours themselves instead.
        data, components = (
            _expand_palette(data, width, height, bits, space, copy.get(Name.Decode), budgets),
            _components(space[1]),
        )
        bits = 8
        copy[Name.ColorSpace], copy[Name.BitsPerComponent] = space[1], bits
        if Name.Decode in copy:
            del copy[Name.Decode]
    _paint(data, width, components, bits, _ink(copy, components, bits, opaque=opaque), spans)
    copy.write(zlib.compress(bytes(data)), filter=Name.FlateDecode)
    return copy


def copy_stream(pdf: pikepdf.Pdf, original: pikepdf.Stream, data: bytes, filter: Name | None = None) -> pikepdf.Stream:
    """A new stream with `original`'s dictionary (less what described the old encoding) and `data`.

    Copies, never edits: the original may be drawn by other pages, which must stay as they are."""
    copy = pdf.make_stream(b"")
    for key, value in original.items():
        if Name(key) not in _STALE_KEYS:
            copy[key] = value
    copy.write(data, filter=filter)
    return copy


def _samples(image: pikepdf.Stream, width: int, height: int, budgets: Budgets) -> tuple[bytearray, int, int, bool]:
    """(raw samples, components, bits per component, whether Pillow decoded them)."""
    decoded_size(image, limit=budgets.max_stream_bytes)  # its general filters; the pixels were counted
    if image.get(Name.ImageMask, False):
        components, bits = 1, 1
    else:
        components, bits = _components(image.get(Name.ColorSpace)), int(image.get(Name.BitsPerComponent, 0))
    row = (width * components * bits + 7) // 8
    bound_jbig2_decoder(budgets.max_stream_bytes)  # jbig2dec's output is as large as the JBIG2 page says
    try:
        data = image.read_bytes(decode_level=pikepdf.StreamDecodeLevel.all)
    except pikepdf.PdfError:
        return _pillow_samples(image)
    except Exception:  # noqa: BLE001 - a decoder pikepdf adds (or lacks) fails its own way: not redactable in place
        raise UnsafePage("image_undecodable") from None
    if not components or bits not in (1, 2, 4, 8, 16) or len(data) < row * height:
        raise UnsafePage("image_undecodable")
    return bytearray(data[: row * height]), components, bits, False


def _pillow_samples(image: pikepdf.Stream) -> tuple[bytearray, int, int, bool]:
    """Samples of an image qpdf cannot decode (JPX, CCITT), for the modes that map exactly."""
    if Name.Decode in image:
        raise UnsafePage("image_undecodable")
    try:
        with warnings.catch_warnings():  # pikepdf says so when it adds the /SMask as an alpha channel
            warnings.simplefilter("ignore", UserWarning)
            picture = pikepdf.PdfImage(image).as_pil_image()
    except Exception:  # noqa: BLE001 - any decoder failure means the page cannot be redacted in place
        raise UnsafePage("image_undecodable") from None
    if picture.mode in ("LA", "RGBA") and not image.get(Name.SMaskInData, 0):
        # The alpha is pikepdf's copy of the /SMask (painted on its own) or a JPX's own, which a reader
        # ignores unless /SMaskInData says otherwise: the samples are the colours alone.
        picture = picture.convert(picture.mode[:-1])
    layout = {"1": (1, 1), "L": (1, 8), "RGB": (3, 8)}.get(picture.mode)
    if layout is None:
        raise UnsafePage("image_undecodable")
    return bytearray(picture.tobytes()), *layout, True


def _components(space: pikepdf.Object | None) -> int:
    """Number of colour components of an image colour space (0 if it is not one)."""
    family = space[0] if isinstance(space, pikepdf.Array) and len(space) else space
    name = str(family) if isinstance(family, Name) else ""
    if name in ("/ICCBased",) and isinstance(space, pikepdf.Array) and isinstance(space[1], pikepdf.Stream):
        return int(space[1].get(Name.N, 0))
    if name == "/Indexed":
        return 1
    if name == "/DeviceN" and isinstance(space, pikepdf.Array) and isinstance(space[1], pikepdf.Array):
        return len(space[1])
    return _ADDITIVE.get(name) or _SUBTRACTIVE.get(name) or 0


def _ink(image: pikepdf.Stream, components: int, bits: int, *, opaque: bool) -> list[int]:
    """The sample values that paint black (or, for a mask, fully opaque), after /Decode."""
    top = (1 << bits) - 1
    space = image.get(Name.ColorSpace)
    family = str(space[0] if isinstance(space, pikepdf.Array) and len(space) else space)
    if image.get(Name.ImageMask, False):
        values = [0]  # a stencil or explicit mask: 0 paints
    elif opaque:
        values = [top]  # a soft mask: fully opaque
    elif family in _SUBTRACTIVE or family == "/DeviceN" or components == 4:
        values = [top] * components
    else:
        values = [0] * components
    decode = image.get(Name.Decode)
    if isinstance(decode, pikepdf.Array) and len(decode) >= 2 * len(values):
        values = [top - v if float(decode[2 * k]) > float(decode[2 * k + 1]) else v for k, v in enumerate(values)]
    return values


def _expand_palette(
    data: bytearray,
    width: int,
    height: int,
    bits: int,
    space: pikepdf.Array,
    decode: pikepdf.Object | None,
    budgets: Budgets,
) -> bytearray:
    """Indexed samples as 8-bit samples of the palette's base colour space."""
    try:
        base, high, lookup = space[1], int(space[2]), space[3]
        if isinstance(lookup, pikepdf.Stream):
            decoded_size(lookup, limit=budgets.max_stream_bytes)
        table = lookup.read_bytes() if isinstance(lookup, pikepdf.Stream) else bytes(lookup)
    except (TypeError, ValueError, pikepdf.PdfError):
        raise UnsafePage("image_undecodable") from None
    size = _components(base)
    if not size or len(table) < size * (high + 1):
        raise UnsafePage("image_undecodable")
    top = (1 << bits) - 1
    inverted = isinstance(decode, pikepdf.Array) and len(decode) == 2 and float(decode[0]) > float(decode[1])
    colours = [
        table[i * size : (i + 1) * size] for i in (min(top - n if inverted else n, high) for n in range(top + 1))
    ]
    row_bytes = (width * bits + 7) // 8
    per_byte = 8 // bits
    shifts = [8 - bits * (k + 1) for k in range(per_byte)]
    expanded = bytearray()
    for row in range(height):
        packed = data[row * row_bytes : (row + 1) * row_bytes]
        indices = packed if bits == 8 else bytes((byte >> shift) & top for byte in packed for shift in shifts)
        expanded += b"".join(map(colours.__getitem__, indices[:width]))
    return expanded


def _spans(ctm: Matrix, width: int, height: int, regions: list[Rect]) -> Spans:
    """The pixel runs (row, first, end) that overlap any region with a positive area."""
    pixels_to_page = multiply((1 / width, 0.0, 0.0, -1 / height, 0.0, 1.0), ctm)  # row 0 is the top of the square
    page_to_pixels = invert(pixels_to_page)
    if page_to_pixels is None:
        return []
    spans: Spans = []
    for rect in regions:
        polygon = corners(page_to_pixels, rect.x0, rect.y0, rect.x1, rect.y1)
        ys = [y for _, y in polygon]
        for row in range(max(0, math.floor(min(ys))), min(height, math.ceil(max(ys)))):
            band = _clip_band(polygon, row, row + 1)
            if band:
                xs = [x for x, _ in band]
                first, end = max(0, math.floor(min(xs))), min(width, math.ceil(max(xs)))
                if first < end:
                    spans.append((row, first, end))
    return spans


def _clip_band(polygon: list[Point], low: float, high: float) -> list[Point]:
    """The convex polygon cut to low <= y <= high (Sutherland-Hodgman against two edges)."""
    for bound, keep_below in ((low, False), (high, True)):
        clipped: list[Point] = []
        for index, (x0, y0) in enumerate(polygon):
            x1, y1 = polygon[(index + 1) % len(polygon)]
            inside0 = y0 <= bound if keep_below else y0 >= bound
            inside1 = y1 <= bound if keep_below else y1 >= bound
            if inside0:
                clipped.append((x0, y0))
            if inside0 != inside1:
                clipped.append((x0 + (x1 - x0) * (bound - y0) / (y1 - y0), bound))
        polygon = clipped
        if not polygon:
            return []
    return polygon


def _paint(data: bytearray, width: int, components: int, bits: int, values: list[int], spans: Spans) -> None:
    """Set every sample of the spanned pixels to `values` in packed, row-padded sample data."""
    row_bytes = (width * components * bits + 7) // 8
    if bits >= 8:
        pixel = b"".join(value.to_bytes(bits // 8, "big") for value in values)
        for row, first, end in spans:
            start = row * row_bytes + first * len(pixel)
            data[start : start + (end - first) * len(pixel)] = pixel * (end - first)
        return
    pixel_bits = components * bits
    if 8 % pixel_bits == 0:  # whole pixels per byte (1-bit scans): fill byte runs, not samples
        pattern = 0
        for _ in range(8 // pixel_bits):
            for value in values:
                pattern = (pattern << bits) | value
        for row, first, end in spans:
            _fill_bits(data, row * row_bytes * 8 + first * pixel_bits, row * row_bytes * 8 + end * pixel_bits, pattern)
        return
    for row, first, end in spans:
        for column in range(first, end):
            for component, value in enumerate(values):
                bit = (row * row_bytes * 8) + (column * components + component) * bits
                shift = 8 - bits - bit % 8
                mask = ((1 << bits) - 1) << shift
                data[bit // 8] = (data[bit // 8] & ~mask) | (value << shift)


def _fill_bits(data: bytearray, start: int, stop: int, pattern: int) -> None:
    """Set bits start..stop (offsets from the first byte's high bit) to those of a repeating byte."""

    def set_bit(offset: int) -> None:
        bit = 0x80 >> (offset % 8)
        data[offset // 8] = (data[offset // 8] & ~bit) | (pattern & bit)

    head = min(stop, (start + 7) // 8 * 8)
    tail = max(head, stop // 8 * 8)
    for offset in range(start, head):
        set_bit(offset)
    data[head // 8 : tail // 8] = bytes([pattern]) * ((tail - head) // 8)
    for offset in range(tail, stop):
        set_bit(offset)
