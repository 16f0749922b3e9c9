"""PDFs with active content for the sanitization tests: every kind docjobs strips, and what it must keep.

`make_active_pdf` starts from the two-page sample (text, a URI link on page 1) and adds, on purpose:
JavaScript as /OpenAction, as a catalog /AA and a page /AA event, in the /Names /JavaScript tree and as a
form field's keystroke action; a /Launch link; a push button that submits the form; a bookmark that
imports data; a /GoToR link; a /RichMedia annotation; an embedded executable (in the /EmbeddedFiles tree,
as a /FileAttachment annotation and as a catalog /AF); and an XFA form. Next to them, an internal /GoTo
link and a /GoTo bookmark, which must survive like the URI link.

`make_looping_pdf` loops everything that can be looped: a /Next chain, the names tree, the bookmarks, the
form fields, and an annotation listed twice.
"""

from __future__ import annotations

from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name, String

from tests.fixtures.samples import make_sample_pdf

# What `make_active_pdf` holds, by kind (the counts strip must report).
ACTIVE_COUNTS = {
    "javascript": 5,  # /OpenAction, catalog /AA, page /AA, names tree, field /AA
    "launch": 1,
    "submit_form": 1,
    "import_data": 1,
    "goto_remote": 1,
    "rich_media": 1,
    "embedded_file": 3,  # the /EmbeddedFiles entry, the /FileAttachment annotation, the catalog /AF
    "xfa": 1,
}
EXECUTABLE = b"MZ\x90\x00 not really a program, but named and typed like one"


def _script(pdf: pikepdf.Pdf, code: str) -> pikepdf.Object:
    return pdf.make_indirect(Dictionary(Type=Name.Action, S=Name.JavaScript, JS=String(code)))


def _link(pdf: pikepdf.Pdf, rect: list[float], action: Dictionary) -> pikepdf.Object:
    return pdf.make_indirect(
        Dictionary(Type=Name.Annot, Subtype=Name.Link, Rect=Array(rect), Border=[0, 0, 0], A=action)
    )


def make_active_pdf(path: Path) -> None:
    make_sample_pdf(path, pages=2, marker="docjobs active")
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        root = pdf.Root
        first, second = pdf.pages[0].obj, pdf.pages[1].obj
        root.OpenAction = _script(pdf, "app.alert('opened');")
        root.AA = Dictionary(WC=_script(pdf, "app.alert('closing');"))
        first.AA = Dictionary(O=_script(pdf, "app.alert('page');"))
        leaf = pdf.make_indirect(
            Dictionary(Names=Array([String("init"), _script(pdf, "app.alert('init');")]), Limits=["init", "init"])
        )
        executable = pdf.make_stream(EXECUTABLE, Type=Name.EmbeddedFile, Subtype=Name("/application#2Fx-msdownload"))
        filespec = pdf.make_indirect(
            Dictionary(Type=Name.Filespec, F=String("setup.exe"), UF=String("setup.exe"), EF=Dictionary(F=executable))
        )
        root.Names = Dictionary(
            JavaScript=Dictionary(Kids=Array([leaf])),
            EmbeddedFiles=Dictionary(Names=Array([String("setup.exe"), filespec])),
        )
        root.AF = Array([filespec])

        goto = Dictionary(S=Name.GoTo, D=Array([second, Name.Fit]))
        launch = Dictionary(S=Name.Launch, F=String("calc.exe"))
        remote = Dictionary(S=Name.GoToR, F=String("other.pdf"), D=Array([0, Name.Fit]))
        first.Annots = Array(
            [
                *first.get("/Annots", Array()),
                _link(pdf, [72, 100, 200, 120], launch),
                _link(pdf, [72, 130, 200, 150], goto),
            ]
        )
        attachment = pdf.make_indirect(
            Dictionary(Type=Name.Annot, Subtype=Name.FileAttachment, Rect=[300, 100, 320, 120], FS=filespec)
        )
        rich_media = pdf.make_indirect(
            Dictionary(
                Type=Name.Annot, Subtype=Name.RichMedia, Rect=[300, 200, 400, 300], RichMediaContent=Dictionary()
            )
        )
        second.Annots = Array([_link(pdf, [72, 100, 200, 120], remote), attachment, rich_media])

        keystroke = pdf.make_indirect(
            Dictionary(
                Type=Name.Annot, Subtype=Name.Widget, FT=Name.Tx, T=String("name"), Rect=[72, 40, 200, 60], P=first,
                AA=Dictionary(K=_script(pdf, "event.rc = true;")),
            )
        )  # fmt: skip
        submit = pdf.make_indirect(
            Dictionary(
                Type=Name.Annot, Subtype=Name.Widget, FT=Name.Btn, Ff=65536, T=String("send"), Rect=[220, 40, 300, 60],
                P=first, A=Dictionary(S=Name.SubmitForm, F=Dictionary(FS=Name.URL, F=String("https://example.com/x"))),
            )
        )  # fmt: skip
        first.Annots.extend([keystroke, submit])
        xfa = pdf.make_stream(b"<xdp:xdp><template><script>app.alert('xfa');</script></template></xdp:xdp>")
        root.AcroForm = Dictionary(Fields=Array([keystroke, submit]), XFA=xfa)
        root.NeedsRendering = True

        importing = pdf.make_indirect(
            Dictionary(Title=String("Import"), A=Dictionary(S=Name.ImportData, F=String("x.fdf")))
        )
        to_second = pdf.make_indirect(
            Dictionary(Title=String("Page 2"), A=Dictionary(S=Name.GoTo, D=Array([second, Name.Fit])))
        )
        outlines = pdf.make_indirect(Dictionary(Type=Name.Outlines, First=importing, Last=to_second, Count=2))
        importing.Parent = to_second.Parent = outlines
        importing.Next, to_second.Prev = to_second, importing
        root.Outlines = outlines
        pdf.save(path, deterministic_id=True)


def make_looping_pdf(path: Path) -> None:
    """One page whose active content loops back on itself everywhere a walk could go round forever."""
    make_sample_pdf(path, pages=1, marker="docjobs loops")
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        root, page = pdf.Root, pdf.pages[0].obj
        goto = pdf.make_indirect(Dictionary(S=Name.GoTo, D=Array([page, Name.Fit])))
        script = _script(pdf, "app.alert('again');")
        goto.Next, script.Next = script, goto  # GoTo -> JavaScript -> GoTo -> ...
        root.OpenAction = goto
        tree = pdf.make_indirect(Dictionary(Names=Array([String("loop"), _script(pdf, "app.alert('tree');")])))
        tree.Kids = Array([tree])
        root.Names = Dictionary(JavaScript=tree)
        bookmark = pdf.make_indirect(Dictionary(Title=String("Round"), A=Dictionary(S=Name.Launch, F=String("a.exe"))))
        bookmark.Next = bookmark
        root.Outlines = Dictionary(Type=Name.Outlines, First=bookmark, Last=bookmark)
        field = pdf.make_indirect(
            Dictionary(T=String("me"), FT=Name.Tx, AA=Dictionary(K=_script(pdf, "event.rc = true;")))
        )
        field.Kids = Array([field])
        root.AcroForm = Dictionary(Fields=Array([field]))
        launch = _link(pdf, [72, 100, 200, 120], Dictionary(S=Name.Launch, F=String("b.exe")))
        page.Annots = Array([launch, launch])
        pdf.save(path, deterministic_id=True)


# What `make_looping_pdf` holds, by kind.
LOOPING_COUNTS = {"javascript": 3, "launch": 2}  # chain, tree, field; bookmark, link (listed twice, counted once)
