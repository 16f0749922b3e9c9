"""Fixture PDFs for redaction: the same fake personal data hidden in every place a PDF can hold text.

Each fixture puts a fake US SSN and/or e-mail address (never real data) next to harmless neighbour words on
the same line, so a test can check both that the value is gone and that its neighbours survived. The page
text is written as raw content streams where the way it is drawn matters (kerned TJ arrays, one value split
over two text objects, a Form XObject, a ligature glyph), and the document-level places (Info, XMP,
outlines, named destinations, attachments, JavaScript, form fields, annotations, structure tree) are built
with pikepdf.
Output is deterministic: the same code writes the same bytes.

`python -m docjobs.redact_samples DIR` writes every fixture as DIR/<name>.pdf, plus the benchmark document.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pikepdf
import reportlab
from pikepdf import Array, Dictionary, Name, String
from reportlab.lib.pagesizes import LETTER
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas

from docjobs.scans import make_scan_pdf

SSN = "078-05-1120"
EMAIL = "jane.doe@example.org"
LIGATURE_EMAIL = "fiona.fields@example.org"  # drawn with the single-glyph "fi" ligature
PHONE = "(555) 123-4567"

FONT_SIZE = 12.0
LINE_X, SSN_Y, EMAIL_Y = 72.0, 700.0, 680.0  # baseline starts of the two lines, in the text's own space
SSN_PREFIX, SSN_SUFFIX = "Patient Alpha SSN ", " on file"
EMAIL_PREFIX, EMAIL_SUFFIX = "Contact ", " today"
NEIGHBOURS = ("Patient", "Alpha", "file", "Contact", "today")

OFFSET_MEDIABOX = (50.0, 50.0, 662.0, 842.0)
OFFSET_CROPBOX = (60.0, 60.0, 652.0, 832.0)  # a viewer shows less than the MediaBox
FORM_MATRIX = (1.0, 0.0, 0.0, 1.0, 100.0, -200.0)  # the Form XObject draws its lines moved by this
VERA_TTF = Path(reportlab.__file__ or "").parent / "fonts" / "Vera.ttf"
_FIXED_DATE = datetime(2024, 1, 1, tzinfo=UTC)
_LIGATURE_CODE = 1  # the byte that shows the "fi" glyph in the ligature fixture's font


@dataclass(frozen=True)
class FixtureSpec:
    """One fixture: how to write it and what it hides.

    `origin` is where the SSN line's baseline starts in the page's default user space (the e-mail line is
    20 pt below it), when the text is drawn plainly enough for a test to compute glyph positions from font
    widths; `where` says which kind of place holds the values: "text" (page content), "document"
    (document-level strings), "image" (pixels only, needs OCR) or "type3" (a Type3 font: raster fallback).
    """

    make: Callable[[Path], None]
    values: tuple[str, ...]
    neighbours: tuple[str, ...]
    where: str
    origin: tuple[float, float] | None = None


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """Width of `text` in Helvetica at `size`, the font the raw-content fixtures use."""
    return float(stringWidth(text, "Helvetica", size))


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def _lines_content(x: float, y: float) -> bytes:
    """The two value lines, each as one plain Tj."""
    return b"BT /F1 %g Tf %g %g Td (%s) Tj 0 %g Td (%s) Tj ET\n" % (
        FONT_SIZE,
        x,
        y,
        _escape(SSN_PREFIX + SSN + SSN_SUFFIX),
        EMAIL_Y - SSN_Y,
        _escape(EMAIL_PREFIX + EMAIL + EMAIL_SUFFIX),
    )


def _helvetica() -> Dictionary:
    return Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding)


def _new_pdf(
    content: bytes,
    *,
    mediabox: tuple[float, ...] = (0.0, 0.0, 612.0, 792.0),
    font: Callable[[pikepdf.Pdf], Dictionary] | None = None,
    xobjects: dict[str, pikepdf.Object] | None = None,
) -> pikepdf.Pdf:
    """A one-page PDF drawing `content` with /F1 (Helvetica unless `font` makes another in the new PDF)."""
    pdf = pikepdf.new()
    resources = Dictionary(Font=Dictionary(F1=pdf.make_indirect(font(pdf) if font is not None else _helvetica())))
    if xobjects:
        resources.XObject = Dictionary({f"/{name}": obj for name, obj in xobjects.items()})
    page = Dictionary(
        Type=Name.Page,
        MediaBox=Array(mediabox),
        Resources=resources,
        Contents=pdf.make_stream(content),
    )
    pdf.pages.append(pikepdf.Page(page))
    return pdf


def _save(pdf: pikepdf.Pdf, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if "/ID" in pdf.trailer:
        del pdf.trailer.ID  # a generator's random file ID would survive deterministic_id
    pdf.save(path, deterministic_id=True)


def make_plain(path: Path) -> None:
    _save(_new_pdf(_lines_content(LINE_X, SSN_Y)), path)


def make_rotate90(path: Path) -> None:
    """Same content, shown turned by /Rotate 90: positions stay those of the content stream."""
    pdf = _new_pdf(_lines_content(LINE_X, SSN_Y))
    pdf.pages[0].obj.Rotate = 90
    _save(pdf, path)


def make_offset_mediabox(path: Path) -> None:
    """A MediaBox that does not start at 0,0 and a smaller CropBox; the text is drawn inside both."""
    x0, y0 = OFFSET_MEDIABOX[:2]
    pdf = _new_pdf(_lines_content(LINE_X + x0, SSN_Y + y0), mediabox=OFFSET_MEDIABOX)
    pdf.pages[0].obj.CropBox = Array(OFFSET_CROPBOX)
    _save(pdf, path)


def make_kerned(path: Path) -> None:
    """The values written as TJ arrays with kerning inside them (one adjustment wide enough to look like a
    space to some extractors)."""
    content = (
        b"BT /F1 12 Tf 72 700 Td [(Patient Alpha SSN 07) -30 (8-0) 15 (5-11) -40 (20 on file)] TJ\n"
        b"0 -20 Td [(Contact jane.d) 20 (oe@) -250 (example.org today)] TJ ET\n"
    )
    _save(_new_pdf(content), path)


def make_split(path: Path) -> None:
    """Each value split over two text objects on the same baseline (as a word processor may write it)."""
    ssn_head, ssn_tail = SSN[:6], SSN[6:]
    email_head, email_tail = EMAIL[:9], EMAIL[9:]
    x_ssn = LINE_X + text_width(SSN_PREFIX + ssn_head)
    x_email = LINE_X + text_width(EMAIL_PREFIX + email_head)
    content = (
        b"BT /F1 12 Tf %g %g Td (%s) Tj ET\n" % (LINE_X, SSN_Y, _escape(SSN_PREFIX + ssn_head))
        + b"BT /F1 12 Tf %g %g Td (%s) Tj ET\n" % (LINE_X, EMAIL_Y, _escape(EMAIL_PREFIX + email_head))
        + b"BT /F1 12 Tf %g %g Td (%s) Tj ET\n" % (x_email, EMAIL_Y, _escape(email_tail + EMAIL_SUFFIX))
        + b"BT /F1 12 Tf %g %g Td (%s) Tj ET\n" % (x_ssn, SSN_Y, _escape(ssn_tail + SSN_SUFFIX))
    )
    _save(_new_pdf(content), path)


def make_form_xobject(path: Path) -> None:
    """The values inside a Form XObject with its own /Matrix, drawn by the page with `Do`."""
    pdf = pikepdf.new()
    form = pdf.make_stream(
        _lines_content(LINE_X, SSN_Y),
        Type=Name.XObject,
        Subtype=Name.Form,
        BBox=Array([0, 0, 612, 792]),
        Matrix=Array(FORM_MATRIX),
        Resources=Dictionary(Font=Dictionary(F1=pdf.make_indirect(_helvetica()))),
    )
    page = Dictionary(
        Type=Name.Page,
        MediaBox=Array([0, 0, 612, 792]),
        Resources=Dictionary(XObject=Dictionary(Fm1=form)),
        Contents=pdf.make_stream(b"q /Fm1 Do Q\n"),
    )
    pdf.pages.append(pikepdf.Page(page))
    _save(pdf, path)


def _ligature_font(pdf: pikepdf.Pdf) -> Dictionary:
    """Helvetica whose code 1 shows the "fi" glyph, with a ToUnicode map that gives it back as "fi"."""
    first, last = _LIGATURE_CODE, 126
    widths = [round(text_width(chr(code), 1000)) if code >= 32 else 0 for code in range(first, last + 1)]
    widths[_LIGATURE_CODE - first] = 500  # Helvetica's /fi
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        b"/CMapName /Adobe-Identity-UCS def /CMapType 2 def\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"2 beginbfrange <01> <01> <00660069> <20> <7E> <0020> endbfrange\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )
    return Dictionary(
        Type=Name.Font,
        Subtype=Name.Type1,
        BaseFont=Name.Helvetica,
        FirstChar=first,
        LastChar=last,
        Widths=Array(widths),
        Encoding=Dictionary(BaseEncoding=Name.WinAnsiEncoding, Differences=Array([_LIGATURE_CODE, Name.fi])),
        ToUnicode=pdf.make_stream(cmap),
    )


def make_ligature(path: Path) -> None:
    """An e-mail address drawn with the one-glyph "fi" ligature (one LTChar that reads as two letters)."""
    shown = (EMAIL_PREFIX + LIGATURE_EMAIL + EMAIL_SUFFIX).replace("fi", chr(_LIGATURE_CODE))
    _save(_new_pdf(b"BT /F1 12 Tf 72 680 Td (%s) Tj ET\n" % _escape(shown), font=_ligature_font), path)


def make_actual_text(path: Path) -> None:
    """The values exist only as /ActualText of marked content; the glyphs show asterisks. The SSN's
    property list is inline, the e-mail's is named in the page's /Properties resource."""
    ssn_mask, email_mask = _escape("*" * len(SSN)), _escape("*" * len(EMAIL))
    content = b"BT /F1 12 Tf 72 700 Td (%s) Tj /Span << /ActualText (%s) >> BDC (%s) Tj EMC (%s) Tj\n" % (
        _escape(SSN_PREFIX),
        _escape(SSN),
        ssn_mask,
        _escape(SSN_SUFFIX),
    ) + b"0 -20 Td (%s) Tj /Span /MC0 BDC (%s) Tj EMC (%s) Tj ET\n" % (
        _escape(EMAIL_PREFIX),
        email_mask,
        _escape(EMAIL_SUFFIX),
    )
    pdf = _new_pdf(content)
    pdf.pages[0].obj.Resources.Properties = Dictionary(MC0=Dictionary(ActualText=String(EMAIL)))
    _save(pdf, path)


def make_structure(path: Path) -> None:
    """A tagged page whose structure elements carry the values as /ActualText and /Alt (read aloud by
    screen readers, extracted by tools) while the page itself shows only the neighbour words."""
    pdf = _neighbour_page()
    page = pdf.pages[0].obj
    paragraph = pdf.make_indirect(Dictionary(Type=Name.StructElem, S=Name.P, Pg=page, ActualText=String(SSN)))
    figure = pdf.make_indirect(
        Dictionary(Type=Name.StructElem, S=Name.Figure, Pg=page, Alt=String(f"photo of {EMAIL}"), T=String("photo"))
    )
    document = pdf.make_indirect(Dictionary(Type=Name.StructElem, S=Name.Document, K=Array([paragraph, figure])))
    paragraph.P = document
    figure.P = document
    root = pdf.make_indirect(Dictionary(Type=Name.StructTreeRoot, K=document))
    document.P = root
    pdf.Root.StructTreeRoot = root
    pdf.Root.MarkInfo = Dictionary(Marked=True)
    _save(pdf, path)


def _neighbour_page() -> pikepdf.Pdf:
    """A page with the neighbour words only (the values live in document-level places)."""
    content = b"BT /F1 12 Tf 72 700 Td (Patient Alpha on file) Tj 0 -20 Td (Contact today) Tj ET\n"
    return _new_pdf(content)


def _appearance(pdf: pikepdf.Pdf, text: str, width: float) -> pikepdf.Stream:
    return pdf.make_stream(
        b"BT /F1 10 Tf 2 4 Td (%s) Tj ET\n" % _escape(text),
        Type=Name.XObject,
        Subtype=Name.Form,
        BBox=Array([0, 0, width, 18]),
        Resources=Dictionary(Font=Dictionary(F1=pdf.make_indirect(_helvetica()))),
    )


def make_annotation(path: Path) -> None:
    """A sticky note whose /Contents and /T hold the values, and a FreeText box that shows the e-mail."""
    pdf = _neighbour_page()
    note = Dictionary(
        Type=Name.Annot,
        Subtype=Name.Text,
        Rect=Array([400, 700, 420, 720]),
        Contents=String(f"SSN {SSN}"),
        T=String(f"reviewer {EMAIL}"),
    )
    free = Dictionary(
        Type=Name.Annot,
        Subtype=Name.FreeText,
        Rect=Array([72, 600, 272, 618]),
        Contents=String(f"mail {EMAIL}"),
        DA=String("/Helv 10 Tf 0 g"),
        AP=Dictionary(N=_appearance(pdf, f"mail {EMAIL}", 200)),
    )
    pdf.pages[0].obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(note), pdf.make_indirect(free)]))
    _save(pdf, path)


def make_metadata(path: Path) -> None:
    """The values in the Info dictionary and in the XMP metadata."""
    pdf = _neighbour_page()
    pdf.docinfo[Name.Title] = String("Intake form")
    pdf.docinfo[Name.Author] = String(f"Jane Doe {EMAIL}")
    pdf.docinfo[Name.Subject] = String(f"SSN {SSN}")
    with pdf.open_metadata(set_pikepdf_as_editor=False, update_docinfo=False) as meta:
        meta["dc:title"] = "Intake form"
        meta["dc:description"] = f"Patient record, SSN {SSN}"
        meta["dc:creator"] = [f"Jane Doe <{EMAIL}>"]
    _save(pdf, path)


def _link(rect: list[int], **target: pikepdf.Object) -> Dictionary:
    link = Dictionary(Type=Name.Annot, Subtype=Name.Link, Rect=Array(rect), Border=Array([0, 0, 0]))
    for key, value in target.items():
        link[f"/{key}"] = value
    return link


def make_outline(path: Path) -> None:
    """Bookmarks whose titles hold the values, a named destination named after the SSN, a link to it, a
    mailto: link with the e-mail and a harmless link."""
    pdf = _neighbour_page()
    with pdf.open_outline() as outline:
        outline.root.append(pikepdf.OutlineItem("Summary", 0))
        outline.root.append(pikepdf.OutlineItem(f"SSN {SSN}", 0))
        outline.root.append(pikepdf.OutlineItem(f"Mail {EMAIL}", 0))
    destinations = pikepdf.NameTree.new(pdf)
    destinations[f"patient-{SSN}"] = Array([pdf.pages[0].obj, Name.Fit])
    destinations["summary"] = Array([pdf.pages[0].obj, Name.Fit])
    pdf.Root.Names = Dictionary(Dests=destinations.obj)
    to_patient = _link([72, 560, 200, 580], Dest=String(f"patient-{SSN}"))
    mail = _link([72, 530, 200, 550], A=Dictionary(S=Name.URI, URI=String(f"mailto:{EMAIL}")))
    to_summary = _link([72, 500, 200, 520], Dest=String("summary"))
    pdf.pages[0].obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(a) for a in (to_patient, mail, to_summary)]))
    _save(pdf, path)


def _attached(pdf: pikepdf.Pdf, data: bytes, filename: str, *, description: str = "") -> pikepdf.AttachedFileSpec:
    return pikepdf.AttachedFileSpec(
        pdf, data, description=description, filename=filename, mime_type="text/plain", creation_date="", mod_date=""
    )


def make_attachment(path: Path) -> None:
    """Embedded files: one whose content holds the SSN (name harmless), one whose description holds the
    e-mail, one harmless; plus a FileAttachment annotation carrying a file with the SSN."""
    pdf = _neighbour_page()
    pdf.attachments["records.csv"] = _attached(pdf, f"name,ssn\nJane,{SSN}\n".encode(), "records.csv")
    pdf.attachments["note.txt"] = _attached(pdf, b"harmless body\n", "note.txt", description=f"sent by {EMAIL}")
    pdf.attachments["readme.txt"] = _attached(pdf, b"nothing to see\n", "readme.txt")
    annotated = _attached(pdf, f"SSN: {SSN}\n".encode(), "scan-notes.txt")
    pin = Dictionary(
        Type=Name.Annot,
        Subtype=Name.FileAttachment,
        Rect=Array([400, 650, 420, 670]),
        FS=annotated.obj,
        Contents=String("attached notes"),
    )
    pdf.pages[0].obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(pin)]))
    _save(pdf, path)


def _javascript(pdf: pikepdf.Pdf, code: str) -> pikepdf.Object:
    return pdf.make_indirect(Dictionary(S=Name.JavaScript, JS=String(code)))


def make_javascript(path: Path) -> None:
    """JavaScript holding the values: a document-level script, the /OpenAction and a link's /AA action."""
    pdf = _neighbour_page()
    scripts = pikepdf.NameTree.new(pdf)
    scripts["init"] = _javascript(pdf, f'var ssn = "{SSN}";')
    scripts["harmless"] = _javascript(pdf, "var ready = true;")
    pdf.Root.Names = Dictionary(JavaScript=scripts.obj)
    pdf.Root.OpenAction = _javascript(pdf, f'app.alert("{EMAIL}");')
    link = _link([72, 560, 200, 580], AA=Dictionary(E=_javascript(pdf, f'this.info = "{SSN}";')))
    pdf.pages[0].obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(link)]))
    _save(pdf, path)


def make_form(path: Path) -> None:
    """AcroForm text fields: one whose /V and appearance hold the SSN, one whose /DV holds the e-mail
    (a child widget of a parent field), one harmless."""
    pdf = _neighbour_page()
    page = pdf.pages[0].obj

    def widget(rect: list[int], text: str, **entries: pikepdf.Object) -> pikepdf.Object:
        annotation = Dictionary(Type=Name.Annot, Subtype=Name.Widget, Rect=Array(rect), P=page)
        annotation.AP = Dictionary(N=_appearance(pdf, text, rect[2] - rect[0]))
        for key, value in entries.items():
            annotation[f"/{key}"] = value
        return pdf.make_indirect(annotation)

    ssn_field = widget([72, 500, 272, 518], SSN, FT=Name.Tx, T=String("ssn"), V=String(SSN))
    email_kid = widget([72, 470, 272, 488], EMAIL)
    email_field = pdf.make_indirect(
        Dictionary(FT=Name.Tx, T=String("contact"), V=String(EMAIL), DV=String(EMAIL), Kids=Array([email_kid]))
    )
    email_kid.Parent = email_field
    plain_field = widget([72, 440, 272, 458], "Alpha", FT=Name.Tx, T=String("name"), V=String("Alpha"))
    page.Annots = pdf.make_indirect(Array([ssn_field, email_kid, plain_field]))
    pdf.Root.AcroForm = Dictionary(
        Fields=Array([ssn_field, email_field, plain_field]),
        DA=String("/Helv 10 Tf 0 g"),
        DR=Dictionary(Font=Dictionary(Helv=pdf.make_indirect(_helvetica()))),
    )
    _save(pdf, path)


def make_cid_font(path: Path) -> None:
    """The value lines in an embedded TrueType font (fpdf2 writes it as a CID font, Identity-H)."""
    from fpdf import FPDF  # imported here: only this fixture needs fpdf2

    document = FPDF(unit="pt", format="letter")
    document.set_creation_date(_FIXED_DATE)
    document.add_page()
    document.add_font("vera", fname=str(VERA_TTF))
    document.set_font("vera", size=FONT_SIZE)
    height = LETTER[1]
    document.text(LINE_X, height - SSN_Y, SSN_PREFIX + SSN + SSN_SUFFIX)
    document.text(LINE_X, height - EMAIL_Y, EMAIL_PREFIX + EMAIL + EMAIL_SUFFIX)
    with pikepdf.open(io.BytesIO(document.output())) as pdf:
        del pdf.trailer.Info
        _save(pdf, path)


def make_scanned(path: Path) -> None:
    """The value lines as pixels only (a 300 dpi scan, no text layer): only OCR can find them."""
    words = [*SSN_PREFIX.split(), SSN, *SSN_SUFFIX.split(), *EMAIL_PREFIX.split(), EMAIL, *EMAIL_SUFFIX.split()]
    make_scan_pdf(path, [words], dpi=300)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        _save(pdf, path)


_DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TYPE3_GLYPHS = {**{str(digit): name for digit, name in enumerate(_DIGIT_NAMES)}, "-": "hyphen", " ": "space"}


def _type3_font(pdf: pikepdf.Pdf) -> Dictionary:
    """A Type3 font for digits, hyphen, space and letters: each glyph is a filled block (its shape does not
    matter, its glyph name gives extractors the text)."""
    letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    names = {**_TYPE3_GLYPHS, **{letter: letter for letter in letters}}
    procs = Dictionary()
    for char, name in names.items():
        body = b"600 0 d0\n" if char == " " else b"600 0 50 0 550 700 d1 50 0 500 700 re f\n"
        procs[f"/{name}"] = pdf.make_stream(body)
    codes = sorted(ord(char) for char in names)
    return Dictionary(
        Type=Name.Font,
        Subtype=Name.Type3,
        FontBBox=Array([0, 0, 600, 700]),
        FontMatrix=Array([0.001, 0, 0, 0.001, 0, 0]),
        CharProcs=procs,
        Encoding=Dictionary(Differences=Array([c for code in codes for c in (code, Name(f"/{names[chr(code)]}"))])),
        FirstChar=codes[0],
        LastChar=codes[-1],
        Widths=Array([600] * (codes[-1] - codes[0] + 1)),
        Resources=Dictionary(),
    )


def make_type3(path: Path) -> None:
    """The SSN line in a Type3 font: glyphs are little programs, so the content engine cannot rewrite them
    safely and the page needs the raster fallback."""
    content = b"BT /F1 12 Tf 72 700 Td (%s) Tj ET\n" % _escape(SSN_PREFIX + SSN + SSN_SUFFIX)
    _save(_new_pdf(content, font=_type3_font), path)


_BOTH = (SSN, EMAIL)
FIXTURES: dict[str, FixtureSpec] = {
    "plain": FixtureSpec(make_plain, _BOTH, NEIGHBOURS, "text", (LINE_X, SSN_Y)),
    "rotate90": FixtureSpec(make_rotate90, _BOTH, NEIGHBOURS, "text", (LINE_X, SSN_Y)),
    "offset_mediabox": FixtureSpec(
        make_offset_mediabox, _BOTH, NEIGHBOURS, "text", (LINE_X + OFFSET_MEDIABOX[0], SSN_Y + OFFSET_MEDIABOX[1])
    ),
    "kerned": FixtureSpec(make_kerned, _BOTH, NEIGHBOURS, "text"),
    "split": FixtureSpec(make_split, _BOTH, NEIGHBOURS, "text", (LINE_X, SSN_Y)),
    "form_xobject": FixtureSpec(
        make_form_xobject, _BOTH, NEIGHBOURS, "text", (LINE_X + FORM_MATRIX[4], SSN_Y + FORM_MATRIX[5])
    ),
    "ligature": FixtureSpec(make_ligature, (LIGATURE_EMAIL,), ("Contact", "today"), "text"),
    "actual_text": FixtureSpec(make_actual_text, _BOTH, NEIGHBOURS, "text"),
    "cid_font": FixtureSpec(make_cid_font, _BOTH, NEIGHBOURS, "text", (LINE_X, SSN_Y)),
    "annotation": FixtureSpec(make_annotation, _BOTH, NEIGHBOURS, "document"),
    "metadata": FixtureSpec(make_metadata, _BOTH, NEIGHBOURS, "document"),
    "outline": FixtureSpec(make_outline, _BOTH, NEIGHBOURS, "document"),
    "attachment": FixtureSpec(make_attachment, _BOTH, NEIGHBOURS, "document"),
    "javascript": FixtureSpec(make_javascript, _BOTH, NEIGHBOURS, "document"),
    "form": FixtureSpec(make_form, _BOTH, NEIGHBOURS, "document"),
    "structure": FixtureSpec(make_structure, _BOTH, NEIGHBOURS, "document"),
    "scanned": FixtureSpec(make_scanned, _BOTH, NEIGHBOURS, "image"),
    "type3": FixtureSpec(make_type3, (SSN,), ("Patient", "Alpha", "file"), "type3"),
}


def bench_values(page: int) -> tuple[str, ...]:
    """The fake values printed on 1-based benchmark page `page` (distinct per page, all valid matches)."""
    return (f"{100 + page % 500:03d}-{10 + page % 80:02d}-{1000 + page:04d}", f"person{page}@example.org", PHONE)


def make_redaction_bench_pdf(path: Path, pages: int = 50) -> None:
    """A text PDF of `pages` letter pages, each with filler lines and an SSN, an e-mail and a phone number."""
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas = Canvas(str(path), pagesize=LETTER, invariant=True)
    for number in range(1, pages + 1):
        ssn, email, phone = bench_values(number)
        canvas.setFont("Helvetica", 11)
        y = 720.0
        for line in range(36):
            if line == 5:
                text = f"Patient number {number} has SSN {ssn} on file."
            elif line == 17:
                text = f"Write to {email} or call {phone} before noon."
            else:
                text = f"Page {number} line {line}: ordinary words that must survive the redaction untouched."
            canvas.drawString(72, y, text)
            y -= 18
        canvas.showPage()
    canvas.save()


def write_all(directory: Path) -> list[Path]:
    """Write every fixture as DIR/<name>.pdf and the benchmark as DIR/bench.pdf."""
    written = []
    for name, spec in FIXTURES.items():
        spec.make(directory / f"{name}.pdf")
        written.append(directory / f"{name}.pdf")
    make_redaction_bench_pdf(directory / "bench.pdf")
    return [*written, directory / "bench.pdf"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the redaction fixture PDFs.")
    parser.add_argument("out", type=Path, help="directory to write <fixture>.pdf files into")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(path)


if __name__ == "__main__":
    main()
