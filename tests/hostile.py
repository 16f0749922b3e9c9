"""Hostile documents, made at test time: small files that cost a naive parser gigabytes, hours or a hang.

Each generator returns the file's bytes (a PDF unless its name says otherwise). They are written as raw PDF
objects where pikepdf would refuse or repair the structure (cycles, repeated references, deep nesting), so the
file is exactly what an attacker would send. Shared by the core budget tests and the end-to-end tests.
"""

from __future__ import annotations

import struct
import zlib
from functools import cache

WORD = b"Budget"  # the one word of the pages that carry text
_HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
_MIB = 1024 * 1024


def build_pdf(objects: dict[int, bytes], *, root: int = 1) -> bytes:
    """A PDF of the numbered object bodies (`1: b"<< /Type /Catalog ... >>"`), with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Root %d 0 R /Size %d >>\nstartxref\n%d\n%%%%EOF\n" % (root, size, xref)
    return bytes(out)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    """A stream object body holding `data` as it is (its filters, if any, named in `extra`)."""
    return b"<< /Length %d %s >>\nstream\n%s\nendstream" % (len(data), extra, data)


@cache
def nested_flate(decoded_mib: int = 512) -> bytes:
    """`decoded_mib` MiB of spaces, Flate-compressed twice: a few KiB that inflate to ~1 MiB, then to all of it."""
    inner = zlib.compressobj(9)
    chunk = b" " * _MIB
    compressed = b"".join(inner.compress(chunk) for _ in range(decoded_mib)) + inner.flush()
    return zlib.compress(compressed, 9)


_DOUBLE_FLATE = b"/Filter [/FlateDecode /FlateDecode]"


def _one_page(content: bytes, *, extra_catalog: bytes = b"", extra_objects: dict[int, bytes] | None = None) -> bytes:
    """A letter page showing `content` (object 4) with Helvetica as /F1 (object 5); objects 6+ are free."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R %s >>" % extra_catalog,
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        4: content,
        5: _HELVETICA,
        **(extra_objects or {}),
    }
    return build_pdf(objects)


def _text(word: bytes = WORD) -> bytes:
    return stream(b"BT /F1 24 Tf 72 700 Td (%s) Tj ET" % word)


def flate_bomb_page_stream(decoded_mib: int = 512) -> bytes:
    """A page whose content stream is Flate inside Flate and decodes to `decoded_mib` MiB of whitespace."""
    return _one_page(stream(nested_flate(decoded_mib), _DOUBLE_FLATE))


def flate_bomb_metadata(decoded_mib: int = 512) -> bytes:
    """A normal page, and an XMP /Metadata stream that is Flate inside Flate, decoding to `decoded_mib` MiB."""
    xmp = stream(nested_flate(decoded_mib), b"/Type /Metadata /Subtype /XML " + _DOUBLE_FLATE)
    return _one_page(_text(), extra_catalog=b"/Metadata 6 0 R", extra_objects={6: xmp})


def flate_bomb_unreferenced(decoded_mib: int = 512) -> bytes:
    """A normal page, and a stream object nothing refers to that decodes to `decoded_mib` MiB (Flate in Flate)."""
    return _one_page(_text(), extra_objects={6: stream(nested_flate(decoded_mib), _DOUBLE_FLATE)})


def operator_bomb_page(pairs: int = 1_000_000) -> bytes:
    """A page whose content is `pairs` times `q Q` (Flate-compressed to a few KiB), then one word."""
    content = b"q Q\n" * pairs + b"BT /F1 24 Tf 72 700 Td (%s) Tj ET" % WORD
    return _one_page(stream(zlib.compress(content, 9), b"/Filter /FlateDecode"))


def duplicate_page_references(copies: int = 200_000) -> bytes:
    """A page tree whose /Kids repeats one page reference `copies` times (qpdf builds a page for each)."""
    return build_pdf(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b"3 0 R " * copies, copies),
            3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
            b" /Resources << /Font << /F1 5 0 R >> >> >>",
            4: _text(),
            5: _HELVETICA,
        }
    )


def page_tree_cycle() -> bytes:
    """A page tree whose second /Pages node lists the root /Pages node among its kids."""
    return build_pdf(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Kids [3 0 R 6 0 R] /Count 2 >>",
            3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
            b" /Resources << /Font << /F1 5 0 R >> >> >>",
            4: _text(),
            5: _HELVETICA,
            6: b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>",
        }
    )


def outline_cycle() -> bytes:
    """Bookmarks that loop: the second item's /Next is the first, and the first is its own child."""
    return _one_page(
        _text(),
        extra_catalog=b"/Outlines 6 0 R",
        extra_objects={
            6: b"<< /Type /Outlines /First 7 0 R /Last 8 0 R /Count 2 >>",
            7: b"<< /Title (one) /Parent 6 0 R /Next 8 0 R /First 7 0 R /Last 7 0 R /Dest [3 0 R /Fit] >>",
            8: b"<< /Title (two) /Parent 6 0 R /Prev 7 0 R /Next 7 0 R /Dest [3 0 R /Fit] >>",
        },
    )


def form_field_cycle() -> bytes:
    """An AcroForm whose field is its own kid, and whose kid lists its parent among its own kids."""
    return _one_page(
        _text(),
        extra_catalog=b"/AcroForm << /Fields [6 0 R] >>",
        extra_objects={
            6: b"<< /FT /Tx /T (outer) /V (value) /Kids [6 0 R 7 0 R] >>",
            7: b"<< /T (inner) /Parent 6 0 R /Kids [6 0 R] >>",
        },
    )


def deep_form_fields(depth: int = 5_000) -> bytes:
    """A chain of `depth` form fields, each the only kid of the one before (indirect, so no parser limit)."""
    fields = {
        6 + level: b"<< /T (f%d) /Kids [%d 0 R] >>" % (level, 7 + level) if level < depth - 1 else b"<< /T (leaf) >>"
        for level in range(depth)
    }
    return _one_page(_text(), extra_catalog=b"/AcroForm << /Fields [6 0 R] >>", extra_objects=fields)


def name_tree_cycle() -> bytes:
    """A /Dests name tree whose intermediate node lists the root node among its /Kids."""
    return _one_page(
        _text(),
        extra_catalog=b"/Names << /Dests 6 0 R >>",
        extra_objects={
            6: b"<< /Kids [7 0 R] >>",
            7: b"<< /Limits [(a) (z)] /Kids [6 0 R 8 0 R] >>",
            8: b"<< /Limits [(m) (m)] /Names [(m) [3 0 R /Fit]] >>",
        },
    )


def structure_tree_cycle() -> bytes:
    """A tagged-PDF structure tree whose element lists the tree root and itself among its kids (/K)."""
    return _one_page(
        _text(),
        extra_catalog=b"/StructTreeRoot 6 0 R /MarkInfo << /Marked true >>",
        extra_objects={
            6: b"<< /Type /StructTreeRoot /K 7 0 R >>",
            7: b"<< /Type /StructElem /S /P /P 6 0 R /Alt (alt) /K [6 0 R 7 0 R 8 0 R] >>",
            8: b"<< /Type /StructElem /S /Span /P 7 0 R /K [7 0 R] >>",
        },
    )


def deep_nested_array(depth: int = 50_000) -> bytes:
    """A catalog entry that is an array nested `depth` levels deep (`[[[...]]]`)."""
    return _one_page(_text(), extra_catalog=b"/Deep 6 0 R", extra_objects={6: b"[" * depth + b"]" * depth})


def giant_page(size: int = 14_400, *, inline_image: bool = False) -> bytes:
    """A `size` x `size` pt page (the PDF maximum: 200 inches) with one word near its top-left.

    `inline_image` puts a one-pixel inline image over the word: redaction cannot rewrite an inline image under
    a region, so it burns the page in (renders it) instead."""
    content = b"BT /F1 24 Tf 72 %d Td (%s) Tj ET" % (size - 100, WORD)
    if inline_image:
        content += b"\nq 200 0 0 40 72 %d cm BI /W 1 /H 1 /CS /G /BPC 8 ID \x80 EI Q" % (size - 110)
    return build_pdf(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R"
            b" /Resources << /Font << /F1 5 0 R >> >> >>" % (size, size),
            4: stream(content),
            5: _HELVETICA,
        }
    )


def huge_image_xobject(width: int = 100_000, height: int = 100_000) -> bytes:
    """A page that draws, over its whole area, an image XObject declaring `width` x `height` grey pixels
    whose data is a few bytes (a decoder would allocate for the declared size)."""
    image = stream(
        zlib.compress(b"\0" * 64),
        b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8"
        b" /Filter /FlateDecode" % (width, height),
    )
    return build_pdf(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
            b" /Resources << /Font << /F1 5 0 R >> /XObject << /Im0 6 0 R >> >> >>",
            4: stream(b"q 612 0 0 792 0 0 cm /Im0 Do Q BT /F1 24 Tf 72 700 Td (%s) Tj ET" % WORD),
            5: _HELVETICA,
            6: image,
        }
    )


def oversized_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A valid 1-bit greyscale PNG of `width` x `height` white pixels: tens of KiB for hundreds of megapixels."""
    row = b"\0" + b"\xff" * ((width + 7) // 8)  # filter type 0, then the packed row
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


REDOS_REGEX = "(a+)+$"  # exponential in a backtracking engine on a run of `a`s that does not end the text


def redos_trigger_page(run: int = 60) -> bytes:
    """A page with one line of `run` letters `a` followed by `!`: the trigger text of `REDOS_REGEX`."""
    return _one_page(stream(b"BT /F1 6 Tf 36 700 Td (%s!) Tj ET" % (b"a" * run)))
