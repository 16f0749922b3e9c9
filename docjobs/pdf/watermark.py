"""Structure mode: stamp a text watermark onto each page without rewriting the page.

The original content streams, fonts, annotations and boxes are kept exactly as they are. Each page's
content is wrapped in graphics states of its own: a stream of `q`s before it, one more than the
`Q`s the content issues beyond its own `q`s (so no stray `Q` can reach the page's initial state and
leave a `cm` after it in force), and after it what closes a string, array or dictionary, or ends an
inline image's data (`EI`), that the content left open (else our operators would be read as part of it), an
`ET` if it left a text object open, an `EMC` for each marked-content sequence it left open (an optional-content
one would put the stamp in a layer a viewer can hide), and the `Q`s that restore the initial state; then one
Form XObject draws the text. The form's own space is the page as a viewer shows it (upright, origin at the
bottom-left of the visible box) and its /Matrix maps that onto user space, which is how /Rotate and
offset boxes are honoured. The file is written by `save_normalized` (flat page tree, form appearances,
qpdf's xref), so poppler reads what qpdf read.

Nothing may lie above the stamp (`flatten_annotations`, before stamping): every annotation with an appearance
(form widgets, shapes, stamps, free text, ink...) is drawn into the page content by qpdf, so it lands *under* the
stamp, which the page draws last, and leaves the annotation list; a link keeps its place and its action but loses
its appearance (a link has nothing to show); whatever else is left (an annotation a viewer would draw from its
colours alone, a hidden one, a popup, a widget qpdf could not draw) is removed. A form's fields are then only
page content: the released copy is certified "no changes" anyway. Optional content cannot hide the stamp either:
the stamp belongs to no layer, and a layer's content is drawn before it; actions that switch layers or hide
annotations (SetOCGState, Hide) are active content, stripped before this (docjobs/pdf/sanitize.py).

The text is horizontal, not diagonal: poppler's text extraction only follows text at multiples of
90 degrees, and a watermark that extraction cannot find is not auditable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pikepdf
from pikepdf import Name

from docjobs.domain.policy import WATERMARK_OPACITY
from docjobs.domain.stamp_text import encode_text
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, array_items, check_operators
from docjobs.pdf.inspect import Box, PdfInfo, ProgressFn, open_checked, rotation, visible_box
from docjobs.pdf.normalize import ensure_appearances, save_normalized
from docjobs.pdf.stamp_font import STAMP_FONT

# Band of the upright visible page that receives the stamp, as fractions (x0, top, x1, bottom)
# measured from the top-left corner; shared with raster mode so both modes stamp the same area.
STAMP_BAND = (0.1, 0.42, 0.9, 0.58)
OPACITY = WATERMARK_OPACITY  # unless the policy's watermark says otherwise (`opacity`)
GRAY = 0.45

_ASCENT, _DESCENT = 0.718, 0.207  # the stamp face's glyph extents above and below the baseline, in em


def text_width_em(encoded: bytes) -> float:
    """Width of WinAnsi-encoded text in the stamp font (docjobs/pdf/stamp_font.py), in em."""
    return STAMP_FONT.width_em(encoded)


def watermark_structure(
    src: Path,
    dst: Path,
    text: str,
    *,
    opacity: float = OPACITY,
    on_page: ProgressFn | None = None,
    check_streams: bool = True,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> PdfInfo:
    """Stamp `text` on every page of `src` into an unencrypted `dst`, at `opacity`; returns the input's info.

    `check_streams=False` when `src` was already fully validated (see `open_checked`)."""
    encoded = encode_text(text)
    with open_checked(src, check_streams=check_streams, budgets=budgets) as (pdf, info):
        flatten_annotations(pdf, budgets=budgets)
        stamper = _Stamper(pdf, encoded, budgets, opacity)
        for number, page in enumerate(pdf.pages, start=1):
            stamper.stamp(page)
            if on_page is not None:
                on_page(number, info.page_count)
        save_normalized(pdf, dst, budgets=budgets)
    return info


def flatten_annotations(pdf: pikepdf.Pdf, *, budgets: Budgets = DEFAULT_BUDGETS) -> int:
    """Leave nothing that a viewer draws above the page content but links without an appearance (see the module
    docstring); returns how many annotations were drawn into the content or removed."""
    ensure_appearances(pdf, budgets=budgets)
    before = 0
    for page in pdf.pages:
        for annotation in array_items(page.obj.get(Name.Annots)):
            before += 1
            if isinstance(annotation, pikepdf.Dictionary) and annotation.get(Name.Subtype) == Name.Link:
                for key in (Name.AP, Name.AS):
                    if key in annotation:
                        del annotation[key]
    if not before:
        return 0
    pdf.flatten_annotations("all")
    kept = 0
    for page in pdf.pages:
        annotations = array_items(page.obj.get(Name.Annots))
        links = [a for a in annotations if isinstance(a, pikepdf.Dictionary) and a.get(Name.Subtype) == Name.Link]
        kept += len(links)
        if len(links) != len(annotations):
            if links:
                page.obj.Annots = pikepdf.Array(links)
            else:
                del page.obj[Name.Annots]
    return before - kept


class _Stamper:
    """Adds the watermark to pages of one Pdf, sharing objects between pages where possible."""

    def __init__(self, pdf: pikepdf.Pdf, encoded: bytes, budgets: Budgets, opacity: float = OPACITY) -> None:
        self._pdf = pdf
        self._budgets = budgets
        self._text = pikepdf.String(encoded).unparse()
        self._width_em = text_width_em(encoded)
        self._resources = pdf.make_indirect(
            pikepdf.Dictionary(
                Font=pikepdf.Dictionary(F0=pdf.make_indirect(STAMP_FONT.font_object(pdf))),
                ExtGState=pikepdf.Dictionary(G0=pikepdf.Dictionary(Type=Name.ExtGState, ca=opacity, CA=opacity)),
            )
        )
        self._pushes: dict[int, pikepdf.Stream] = {}  # the `q`s before a page's content, shared by count
        self._forms: dict[tuple[Box, int], pikepdf.Stream] = {}  # one form per page geometry

    def stamp(self, page: pikepdf.Page) -> None:
        form = self._form(visible_box(page), rotation(page))
        name = self._add_xobject(page, form)
        closing = wrap_content(self._pdf, page, self._budgets, self._pushes)
        mark = b"/Artifact <</Type /Pagination /Subtype /Watermark>> BDC\n"
        page.contents_add(self._pdf.make_stream(b"\n" + closing + mark + name.unparse() + b" Do\nEMC\n"))

    def _form(self, box: Box, rotate: int) -> pikepdf.Stream:
        if (box, rotate) not in self._forms:
            x0, y0, x1, y1 = box
            width, height = (x1 - x0, y1 - y0) if rotate in (0, 180) else (y1 - y0, x1 - x0)
            # Upright space -> user space: rotate counter-clockwise by /Rotate about the box corner
            # that a viewer shows at the bottom-left.
            cos, sin = {0: (1, 0), 90: (0, 1), 180: (-1, 0), 270: (0, -1)}[rotate]
            origin = {0: (x0, y0), 90: (x1, y0), 180: (x1, y1), 270: (x0, y1)}[rotate]
            band_x0, band_top, band_x1, band_bottom = STAMP_BAND
            size = min((band_x1 - band_x0) * width / self._width_em, (band_bottom - band_top) * height)
            left = (width - size * self._width_em) / 2
            middle = (1 - (band_top + band_bottom) / 2) * height
            baseline = middle - (_ASCENT - _DESCENT) / 2 * size
            content = (
                f"q /G0 gs {GRAY} g BT /F0 {size:.3f} Tf {left:.3f} {baseline:.3f} Td ".encode()
                + self._text
                + b" Tj ET Q\n"
            )
            self._forms[(box, rotate)] = self._pdf.make_stream(
                content,
                Type=Name.XObject,
                Subtype=Name.Form,
                BBox=[0, 0, width, height],
                Matrix=[cos, sin, -sin, cos, *origin],
                Resources=self._resources,
            )
        return self._forms[(box, rotate)]

    def _add_xobject(self, page: pikepdf.Page, form: pikepdf.Stream) -> Name:
        # Copy /Resources and its /XObject before adding: producers share them between pages, which
        # would otherwise collect every page's form. A fixed name (not Name.random) keeps output stable.
        resources = direct_copy(page.obj.get(Name.Resources))
        xobjects = direct_copy(resources.get(Name.XObject))
        name = Name.DocjobsWatermark
        suffix = 0
        while name in xobjects:
            suffix += 1
            name = Name(f"/DocjobsWatermark{suffix}")
        xobjects[name] = form
        resources[Name.XObject] = xobjects
        page.obj.Resources = resources
        return name


@dataclass(frozen=True)
class ContentBalance:
    """How a page's content leaves the graphics state stack, text object and tokens, relative to its start."""

    underflow: int  # `Q`s issued beyond the content's own `q`s (a viewer ignores them on an empty stack)
    depth: int  # states the content leaves pushed, after its stray `Q`s (from -underflow up)
    in_text: bool  # the content ends inside a BT … ET text object
    unclosed: bytes = b""  # what closes a string, array or dictionary left open at its end (else it swallows ours)
    marked: int = 0  # marked-content sequences (BMC/BDC) left open: an optional-content one would hide what follows


def content_balance(pdf: pikepdf.Pdf, page: pikepdf.Page, budgets: Budgets = DEFAULT_BUDGETS) -> ContentBalance:
    """The `q`/`Q` and `BT`/`ET` balance of a page's content (the parser builds an object per operator it
    keeps: the operators are counted within `budgets` first). Only content that qpdf warns about is
    tokenized again, for what it leaves open."""
    check_operators(page, budgets)
    pdf.get_warnings()
    depth = lowest = marked = 0
    in_text = False
    for instruction in pikepdf.parse_content_stream(page, "q Q BT ET BMC BDC EMC"):
        operator = str(instruction.operator)
        if operator in ("q", "Q"):
            depth += 1 if operator == "q" else -1
            lowest = min(lowest, depth)
        elif operator in ("BMC", "BDC"):
            marked += 1
        elif operator == "EMC":
            marked = max(0, marked - 1)  # a stray EMC closes nothing of ours: our sequences are balanced
        else:
            in_text = operator == "BT"
    unclosed = b""
    if pdf.get_warnings():
        tokens = _OpenTokens()
        page.get_filtered_contents(tokens)
        unclosed = tokens.closers()
    return ContentBalance(underflow=-lowest, depth=depth, in_text=in_text, unclosed=unclosed, marked=marked)


class _OpenTokens(pikepdf.TokenFilter):
    """Arrays, dictionaries, a literal string or an inline image's data still open where the content ends."""

    def __init__(self) -> None:
        super().__init__()
        # The closers of the open arrays and dictionaries, innermost last, with the objects each holds so far.
        self._open: list[tuple[bytes, int]] = []
        self._string = 0  # parentheses an unterminated literal string at the end leaves open
        self._image_data = False  # the last token is an inline image's data without its `EI`
        self._previous = b""  # the last token that is not space

    def handle_token(self, token: pikepdf.Token | None = None) -> None:
        if token is None or token.type_ in (pikepdf.TokenType.space, pikepdf.TokenType.comment, pikepdf.TokenType.eof):
            return
        kind = token.type_
        self._string = 0  # only the last token can be an unterminated string
        # PDFium reads an inline image's data up to the next `EI`, which would be in our stream.
        self._image_data = kind == pikepdf.TokenType.bad and self._previous == b"ID"
        self._previous = token.raw_value
        if kind in (pikepdf.TokenType.dict_close, pikepdf.TokenType.array_close):
            closer = b">>" if kind == pikepdf.TokenType.dict_close else b"]"
            if self._open and self._open[-1][0] == closer:
                self._open.pop()
            return
        if self._open:  # one more object in the innermost container (an array or dictionary opened in it too)
            closer, held = self._open[-1]
            self._open[-1] = (closer, held + 1)
        if kind in (pikepdf.TokenType.dict_open, pikepdf.TokenType.array_open):
            self._open.append((b">>" if kind == pikepdf.TokenType.dict_open else b"]", 0))
        elif kind == pikepdf.TokenType.bad and token.raw_value.startswith(b"("):
            raw = token.raw_value.replace(b"\\\\", b"").replace(b"\\(", b"").replace(b"\\)", b"")
            self._string = max(1, raw.count(b"(") - raw.count(b")"))

    def closers(self) -> bytes:
        """A dictionary left after a key gets a value (`null`): a key without one makes poppler drop what follows."""
        closing = [b"null >>" if closer == b">>" and held % 2 else closer for closer, held in reversed(self._open)]
        image = b"\nEI" if self._image_data else b""
        return image + b")" * self._string + b" " + b" ".join(closing)


def wrap_content(
    pdf: pikepdf.Pdf,
    page: pikepdf.Page,
    budgets: Budgets = DEFAULT_BUDGETS,
    pushes: dict[int, pikepdf.Stream] | None = None,
) -> bytes:
    """Put the page's content in graphics states of its own (prepends their `q`s) and return what, added after
    it, closes what it left open and restores the page's initial state: what is drawn next is in default user
    space. Sloppy producers leave states pushed, pop more than they push (a stray `Q` would pop a single `q`
    of ours and leave the `cm` after it in force), end inside BT, or leave a marked-content sequence open (an
    optional-content one, `/OC /layer BDC`, would put what follows in a layer a viewer may hide). `pushes` shares
    the streams of `q`s by count."""
    balance = content_balance(pdf, page, budgets)
    wrappers = 1 + balance.underflow
    push = pushes.get(wrappers) if pushes is not None else None
    if push is None:
        push = pdf.make_stream(b"q\n" * wrappers)
        if pushes is not None:
            pushes[wrappers] = push
    page.contents_add(push, prepend=True)
    text = b"ET\n" if balance.in_text else b""
    return balance.unclosed + b"\n" + text + b"EMC\n" * balance.marked + b"Q\n" * (wrappers + balance.depth)


def direct_copy(value: pikepdf.Object | None) -> pikepdf.Dictionary:
    """A shallow copy of a dictionary (empty if it is missing or not a dictionary)."""
    return pikepdf.Dictionary(dict(value.items())) if isinstance(value, pikepdf.Dictionary) else pikepdf.Dictionary()
