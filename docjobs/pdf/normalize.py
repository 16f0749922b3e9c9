"""The structure we write, so both readers (qpdf and poppler) read our output whenever the input was readable.

Every file docjobs writes from a tenant's document goes through `save_normalized`: qpdf writes a fresh
cross-reference section and its own object streams, the page tree is flat (one /Pages node whose kids are
the pages: poppler refuses a direct kid and trips over trees that qpdf walks), no encryption, and form
fields that a viewer would have to draw itself (`/NeedAppearances true`) get appearance streams first:
signing clears `NeedAppearances` (pyHanko, as PDF 2.0 asks), and poppler then shows, and extracts, only
what the appearances hold.

`repair_input` is the way in: an input that qpdf had to repair (inspect.py's repair policy), that is
encrypted with an empty user password, or whose form relies on `NeedAppearances`, is rewritten this way
before any stage works on it; a clean input is used as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets
from docjobs.pdf.inspect import Encryption, PdfInfo, open_checked
from docjobs.pdf.signatures import form_fields


def repair_input(
    src: Path,
    dst: Path,
    *,
    max_pages: int | None = None,
    check_streams: bool = True,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> PdfInfo:
    """Validate `src` (see `inspect_pdf`) and write what the stages work on to `dst`: qpdf's normalized
    rewrite when the input needed a repair, a password-free opening or form appearances, else a copy."""
    with open_checked(src, max_pages=max_pages, check_streams=check_streams, budgets=budgets) as (pdf, info):
        if info.repair_warnings or info.encryption is not Encryption.NONE or _needs_appearances(pdf):
            save_normalized(pdf, dst, budgets=budgets)
            return info
    shutil.copyfile(src, dst)
    return info


def save_normalized(pdf: pikepdf.Pdf, dst: Path, *, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """Write `pdf` to `dst` unencrypted, with form appearances, a flat page tree and qpdf's own xref."""
    if _needs_appearances(pdf):
        _generate_appearances(pdf, budgets)
    _flatten_page_tree(pdf)
    # deterministic_id: a retried job writes identical bytes, so its digest stays stable.
    pdf.save(dst, encryption=False, deterministic_id=True)


def ensure_appearances(pdf: pikepdf.Pdf, *, budgets: Budgets = DEFAULT_BUDGETS) -> None:
    """Draw the form's field values into their appearances when the form asks viewers to (NeedAppearances)."""
    if _needs_appearances(pdf):
        _generate_appearances(pdf, budgets)


def _needs_appearances(pdf: pikepdf.Pdf) -> bool:
    form = pdf.Root.get(Name.AcroForm)
    need: object = form.get(Name.NeedAppearances) if isinstance(form, pikepdf.Dictionary) else None
    return need is True  # pikepdf hands a PDF boolean over as a Python bool


def _generate_appearances(pdf: pikepdf.Pdf, budgets: Budgets) -> None:
    """qpdf draws the value of every text and choice field into its appearance (and clears `NeedAppearances`);
    an appearance stream without resources gets the form's default resources, where the /DA font lives. If a
    widget is still without an appearance (a kind qpdf does not draw), `NeedAppearances` stays for the
    viewers that honour it."""
    fields = form_fields(pdf, budgets=budgets)  # the field tree within budget before qpdf walks it
    pdf.generate_appearance_streams()
    form = pdf.Root.AcroForm
    undrawn = False
    for widget in fields:
        if widget.get(Name.Subtype) != Name.Widget:
            continue
        appearances = widget.get(Name.AP)
        normal = appearances.get(Name.N) if isinstance(appearances, pikepdf.Dictionary) else None
        undrawn = undrawn or normal is None
        if isinstance(normal, pikepdf.Stream) and Name.Resources not in normal and Name.DR in form:
            normal.Resources = form.DR
    if undrawn:
        form.NeedAppearances = True


def _flatten_page_tree(pdf: pikepdf.Pdf) -> None:
    """One /Pages node with every page as its direct, indirect kid. The pages were opened with their
    inherited attributes pushed down (pikepdf's default), so the intermediate nodes hold nothing a page needs."""
    root = pdf.Root.get(Name.Pages)
    if not isinstance(root, pikepdf.Dictionary) or any(page.obj.objgen == root.objgen for page in pdf.pages):
        return  # a tree qpdf reads its own way: left to it
    pages = [page.obj for page in pdf.pages]
    for page in pages:
        page.Parent = root
    root.Kids = pikepdf.Array(pages)
    root.Count = len(pages)
