"""Parser budgets: a hostile document fails fast and cheap with `input.too_complex`, not at an rlimit.

A few kilobytes of PDF can describe gigabytes of decoded data (Flate inside Flate), millions of content
operators, billions of pixels, or graphs that loop. Every parse of tenant bytes is therefore preceded by a
check that costs little memory and stops at the budget: decoded stream sizes are measured by decoding in
chunks and discarding (`check_stream_sizes`), content operators are counted on the decoded bytes without
building an object per operator (`OperatorBudget`), pixels are computed from the declared size before
anything is rendered or decoded (`check_pixels`), and object graphs are walked with a visited set, a depth
cap and a visit cap (`walk`). Messages name the limit, never content.

qpdf itself refuses arrays and dictionaries nested more than 499 deep while parsing (it reads the object
as null with a `parser-max-nesting` warning); `check_stream_sizes` turns that warning into
`input.too_complex`, so deep nesting never reaches Python code.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import pikepdf
from pikepdf import Name

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.policy import LimitsPolicy

MIB = 1024 * 1024
QPDF_MAX_NESTING = 499  # qpdf's parser_max_nesting: deeper containers are read as null, with a warning


@dataclass(frozen=True)
class Budgets:
    """What one document may cost a parser. Raised per policy (`limits.*`) for trusted tenants."""

    # One stream decoded: a 600-dpi A4 RGB image stored losslessly is ~100 MiB; 256 MiB leaves room for
    # larger scans while a bomb stops after ~0.3 s of inflating, holding one chunk at a time.
    max_stream_bytes: int = 256 * MIB
    # All streams of a document decoded (time, not memory: each is discarded as it is decoded): ~80 colour
    # or ~250 grey 300-dpi pages stored losslessly; 2 GiB inflates in about 3 s on one core.
    max_document_bytes: int = 2048 * MIB
    # Operators in one page's content (forms included): dense maps and CAD drawings reach a few hundred
    # thousand; pikepdf holds ~270 bytes per parsed operator, so 1 M costs ~270 MiB at most.
    max_operators: int = 1_000_000
    # One rasterisation or decoded image: 100 megapixels is 300 MB of RGB (a letter page at ~1100 dpi).
    max_pixels: int = 100_000_000
    # Depth of a walked hierarchy (field kids, outline children, structure elements, nested forms): real
    # documents stay below 20; it also keeps every recursion far from Python's limit of 1000 frames.
    max_depth: int = 100
    # Objects visited by one walk of a graph (fields, outline items, structure elements, name-tree nodes).
    max_objects: int = 1_000_000
    # Pages in a page tree, counting a repeated reference each time as qpdf does, when the caller gives no
    # policy limit: qpdf builds ~2 KiB per page, so 50,000 pages cost ~110 MiB.
    max_pages: int = 50_000


DEFAULT_BUDGETS = Budgets()


def budgets_for(limits: LimitsPolicy, max_pages: int | None = None) -> Budgets:
    """A policy's `limits` as the parsers' budgets, with its page limit (None: the parsers' own ceiling, for a
    stage whose input render already counted)."""
    return Budgets(
        max_stream_bytes=limits.stream_decoded_mb * MIB,
        max_document_bytes=limits.document_decoded_mb * MIB,
        max_operators=limits.operators_per_page,
        max_pixels=limits.megapixels * 1_000_000,
        max_depth=limits.nesting_depth,
        max_objects=limits.objects_per_walk,
        max_pages=DEFAULT_BUDGETS.max_pages if max_pages is None else max_pages,
    )


def too_complex(limit: str) -> DocJobError:
    """The failure for an exhausted budget; `limit` names the limit (never content)."""
    return DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the input exceeds a parser budget: {limit}")


def _size(count: int) -> str:
    return f"{count // MIB} MiB" if count >= MIB else f"{count} bytes"


# --- object graphs --------------------------------------------------------------------------------------


def walk(
    roots: Iterable[pikepdf.Object],
    children: Callable[[pikepdf.Object], Iterable[pikepdf.Object]],
    *,
    what: str,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> Iterator[pikepdf.Object]:
    """Every object reachable from `roots` through `children`, depth first, each indirect object once.

    A cycle is cut where it closes (an object already visited is skipped). More than `max_depth` levels or
    `max_objects` visits raise `input.too_complex` naming `what` ("the form field tree"). Numbers and
    nulls among the children (pikepdf hands them over as Python values) are skipped."""
    seen: set[tuple[int, int]] = set()
    pending: list[tuple[pikepdf.Object, int]] = [(root, 0) for root in reversed(list(roots))]
    visits = 0
    while pending:
        node, depth = pending.pop()
        if not isinstance(node, pikepdf.Object):
            continue
        if node.is_indirect:
            if node.objgen in seen:
                continue
            seen.add(node.objgen)
        visits += 1
        if visits > budgets.max_objects:
            raise too_complex(f"{what} has more than {budgets.max_objects} objects")
        if depth > budgets.max_depth:
            raise too_complex(f"{what} is nested more than {budgets.max_depth} levels deep")
        yield node
        pending += [(child, depth + 1) for child in reversed(list(children(node)))]


def array_items(value: pikepdf.Object | None) -> list[pikepdf.Object]:
    """The items of an array; a single object as a one-item list; nothing for a missing value."""
    if isinstance(value, pikepdf.Array):
        return list(value)
    return [] if value is None else [value]


def page_tree_count(pdf: pikepdf.Pdf, cap: int, *, budgets: Budgets = DEFAULT_BUDGETS) -> int:
    """Pages in the page tree, counted from the tree itself before qpdf builds a single page object.

    A reference repeated in /Kids counts each time (qpdf copies such a page), so the count stops as soon
    as it passes `cap`: the result is then `cap + 1`. A /Pages node that is its own ancestor raises
    `input.malformed`; a node that is not a dictionary is skipped, as qpdf does."""
    root = pdf.Root.get(Name.Pages)
    if not isinstance(root, pikepdf.Dictionary):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the input PDF has no page tree")
    count = visits = 0
    ancestors: set[tuple[int, int]] = set()
    # Each entry: a node to enter, or None meaning "leave the node last entered" (pops `path`).
    pending: list[pikepdf.Object | None] = [root]
    path: list[tuple[int, int] | None] = []
    while pending:
        node = pending.pop()
        if node is None:
            key = path.pop()
            if key is not None:
                ancestors.discard(key)
            continue
        visits += 1
        if visits > budgets.max_objects:
            raise too_complex(f"the page tree has more than {budgets.max_objects} nodes")
        if not isinstance(node, pikepdf.Dictionary):
            continue
        kids = node.get(Name.Kids)
        if node.get(Name.Type) == Name.Page or not isinstance(kids, pikepdf.Array):
            count += 1
            if count > cap:
                return count
            continue
        key = node.objgen if node.is_indirect else None
        if key is not None and key in ancestors:
            raise DocJobError(FailureCode.INPUT_MALFORMED, "the page tree of the input PDF loops")
        if len(path) >= budgets.max_depth:
            raise too_complex(f"the page tree is nested more than {budgets.max_depth} levels deep")
        if key is not None:
            ancestors.add(key)
        path.append(key)
        pending.append(None)
        pending += reversed(list(kids))
    return count


# --- decoded stream sizes ----------------------------------------------------------------------------------

_CHUNK = 1 * MIB
_FILTERS = {
    "/FlateDecode": "flate",
    "/Fl": "flate",
    "/LZWDecode": "lzw",
    "/LZW": "lzw",
    "/ASCIIHexDecode": "hex",
    "/AHx": "hex",
    "/ASCII85Decode": "a85",
    "/A85": "a85",
    "/RunLengthDecode": "runlength",
    "/RL": "runlength",
}


def decoded_chunks(stream: pikepdf.Stream, *, limit: int) -> Iterator[bytes]:
    """The stream's data through its general-purpose filters (Flate, LZW, ASCIIHex, ASCII85, RunLength),
    in chunks, never holding more than one; raises `input.too_complex` once any stage passes `limit` bytes.

    Decoding stops at the first filter it does not know (an image codec: its pixels are budgeted by
    `check_pixels`) and at data a filter cannot decode (qpdf's own check judges validity). Predictors are
    not applied: they never make data larger."""
    raw = stream.read_raw_bytes()  # no larger than the file, which the upload limit bounds
    chunks: Iterator[bytes] = iter([raw])
    filters = stream.get(Name.Filter)
    params = stream.get(Name.DecodeParms)
    names = array_items(filters)
    parameters = array_items(params) if isinstance(params, pikepdf.Array) else [params] * len(names)
    for name, parameter in zip(names, parameters, strict=False):
        kind = _FILTERS.get(str(name)) if isinstance(name, Name) else None
        if kind is None:
            break
        if kind == "flate":
            chunks = _inflate(chunks)
        elif kind == "lzw":
            early = parameter.get(Name.EarlyChange, 1) if isinstance(parameter, pikepdf.Dictionary) else 1
            chunks = _lzw(chunks, early_change=int(early) != 0)
        elif kind == "hex":
            chunks = _ascii_hex(chunks)
        elif kind == "a85":
            chunks = _ascii85(chunks)
        else:
            chunks = _run_length(chunks)
        chunks = _capped(chunks, limit)
    return chunks if names else _capped(chunks, limit)


def decoded_size(stream: pikepdf.Stream, *, limit: int) -> int:
    """Bytes the stream decodes to (see `decoded_chunks`), at most `limit`."""
    return sum(len(chunk) for chunk in decoded_chunks(stream, limit=limit))


def check_stream_sizes(pdf: pikepdf.Pdf, *, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """Every stream object of the file, referenced or not, decodes within the budgets. Run before anything
    decodes all streams (qpdf's syntax check). It resolves every object: `check_nesting` can follow."""
    total = 0
    for obj in pdf.objects:
        if isinstance(obj, pikepdf.Stream):
            total += decoded_size(obj, limit=budgets.max_stream_bytes)
            if total > budgets.max_document_bytes:
                raise too_complex(f"the streams decode to more than {_size(budgets.max_document_bytes)} in total")


def check_nesting(warnings: Iterable[str]) -> None:
    """qpdf's warnings about objects parsed so far name no container nested deeper than qpdf parses."""
    if any("parser-max-nesting" in warning for warning in warnings):
        raise too_complex(f"an array or dictionary is nested more than {QPDF_MAX_NESTING} levels deep")


def _capped(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise too_complex(f"a stream decodes to more than {_size(limit)}")
        yield chunk


def _inflate(chunks: Iterator[bytes]) -> Iterator[bytes]:
    inflater = zlib.decompressobj()
    try:
        for chunk in chunks:
            data = chunk
            while True:
                out = inflater.decompress(data, _CHUNK)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof or (not data and len(out) < _CHUNK):
                    break
            if inflater.eof:
                return
    except zlib.error:
        return


def _ascii_hex(chunks: Iterator[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in chunks:
        data, end, _ = chunk.partition(b">")
        digits = carry + re.sub(rb"\s+", b"", data)
        even = len(digits) - len(digits) % 2
        try:
            yield binascii.unhexlify(digits[:even])
        except binascii.Error:
            return
        carry = digits[even:]
        if end:
            break
    if carry:
        yield binascii.unhexlify(carry + b"0")


def _ascii85(chunks: Iterator[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in chunks:
        data, end, _ = chunk.partition(b"~>")
        # `z` stands for a whole group of zeros; expanded, the groups can be cut anywhere.
        group = carry + re.sub(rb"\s+", b"", data).replace(b"z", b"!!!!!")
        whole = len(group) - len(group) % 5
        try:
            yield base64.a85decode(group[:whole])
        except ValueError:
            return
        carry = group[whole:]
        if end:
            break
    if carry:
        try:
            yield base64.a85decode(carry)
        except ValueError:
            return


def _run_length(chunks: Iterator[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in chunks:
        data, position, out = carry + chunk, 0, bytearray()
        while position < len(data):
            length = data[position]
            if length == 128:
                yield bytes(out)
                return
            size = length + 1 if length < 128 else 1
            if position + 1 + size > len(data):
                break
            run = data[position + 1 : position + 1 + size]
            out += run if length < 128 else run * (257 - length)
            position += 1 + size
            if len(out) >= _CHUNK:
                yield bytes(out)
                out.clear()
        carry = data[position:]
        yield bytes(out)


def _lzw(chunks: Iterator[bytes], *, early_change: bool) -> Iterator[bytes]:
    """LZW as PDF uses it (MSB first, 9 to 12 bit codes, 256 clears, 257 ends)."""
    table: list[bytes] = [bytes([n]) for n in range(256)] + [b"", b""]
    width, previous = 9, b""
    bits = count = 0
    out = bytearray()
    for chunk in chunks:
        for byte in chunk:
            bits, count = (bits << 8) | byte, count + 8
            while count >= width:
                count -= width
                code, bits = bits >> count, bits & ((1 << count) - 1)
                if code == 257:
                    yield bytes(out)
                    return
                if code == 256:
                    del table[258:]
                    width, previous = 9, b""
                    continue
                if code < len(table):
                    entry = table[code]
                elif code == len(table) and previous:
                    entry = previous + previous[:1]
                else:
                    yield bytes(out)
                    return
                if previous and len(table) < 4096:
                    table.append(previous + entry[:1])
                previous = entry
                out += entry
                if len(table) + early_change >= 1 << width and width < 12:
                    width += 1
            if len(out) >= _CHUNK:
                yield bytes(out)
                out.clear()
    yield bytes(out)


# --- content operators -------------------------------------------------------------------------------------

# Where an operator can start: a letter or quote after whitespace or a delimiter other than `/` (a name).
# Words inside strings and inline image data count too: an overestimate, on the safe side.
_OPERATOR_START = re.compile(rb"(?<![^\x00\t\n\x0c\r \[\]<>(){}%])[A-Za-z'\"]")


class OperatorBudget:
    """Operators parsed so far in one page's content (its forms included), capped at `max_operators`.

    Counted on the decoded bytes by a regular expression, before any parser builds an object per operator;
    each stream's decoded size is capped on the way."""

    def __init__(self, budgets: Budgets = DEFAULT_BUDGETS) -> None:
        self.budgets = budgets
        self.spent = 0

    def spend(self, owner: pikepdf.Page | pikepdf.Stream | pikepdf.Object) -> None:
        """Count the operators of a page's /Contents or of a content stream (a form, an appearance)."""
        cap = self.budgets.max_operators
        streams = array_items(owner.obj.get(Name.Contents)) if isinstance(owner, pikepdf.Page) else [owner]
        for stream in streams:
            if not isinstance(stream, pikepdf.Stream):
                continue
            self.spent += 1  # a form walked costs at least one step, even when empty
            for chunk in decoded_chunks(stream, limit=self.budgets.max_stream_bytes):
                self.spent += sum(1 for _ in islice(_OPERATOR_START.finditer(chunk), cap - self.spent + 1))
                if self.spent > cap:
                    raise too_complex(f"a page has more than {cap} content operators")


def check_page_content(page: pikepdf.Page, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """A page's content and every form XObject it can draw (each once), within one operator budget: run
    before a parser that follows forms and builds objects per operator or glyph (pdfminer)."""
    operators = OperatorBudget(budgets)
    operators.spend(page)
    for form in walk(_xobjects(page.obj), _xobjects, what="the forms of a page", budgets=budgets):
        if isinstance(form, pikepdf.Stream) and form.get(Name.Subtype) == Name.Form:
            operators.spend(form)


def _xobjects(holder: pikepdf.Object) -> list[pikepdf.Object]:
    resources = holder.get(Name.Resources) if isinstance(holder, pikepdf.Dictionary | pikepdf.Stream) else None
    xobjects = resources.get(Name.XObject) if isinstance(resources, pikepdf.Dictionary) else None
    return [value for _, value in xobjects.items()] if isinstance(xobjects, pikepdf.Dictionary) else []


def check_operators(owner: pikepdf.Page | pikepdf.Stream | pikepdf.Object, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """One content stream (or page) alone within the operator budget."""
    OperatorBudget(budgets).spend(owner)


# --- pixels ------------------------------------------------------------------------------------------------


def check_pixels(width: float, height: float, what: str, *, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """Refuse before rendering or decoding `what` ("a page at 200 dpi", "an image") if it has too many pixels."""
    if width * height > budgets.max_pixels:
        raise too_complex(f"{what} has more than {budgets.max_pixels // 1_000_000} megapixels")
