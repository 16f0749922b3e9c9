"""Signatures already in an input: processing rewrites the file, so they can only be voided, never kept."""

from __future__ import annotations

from pathlib import Path

import pikepdf
from pikepdf import Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, array_items, walk


def signature_count(path: Path, *, budgets: Budgets = DEFAULT_BUDGETS) -> int:
    """How many filled signature fields the PDF has (any rewrite of the file invalidates them).

    The field tree is walked once per field (a field listed among its own kids is not a loop)."""
    with pikepdf.open(path) as pdf:
        return sum(
            1
            for field in form_fields(pdf, budgets=budgets)
            if field.get(Name.FT) == Name.Sig and field.get(Name.V) is not None
        )


def form_fields(pdf: pikepdf.Pdf, *, budgets: Budgets = DEFAULT_BUDGETS) -> list[pikepdf.Dictionary]:
    """Every field and widget dictionary of the AcroForm tree, each once, within `budgets`."""
    acroform = pdf.Root.get(Name.AcroForm)
    roots = array_items(acroform.get(Name.Fields)) if isinstance(acroform, pikepdf.Dictionary) else []
    return [
        field
        for field in walk(roots, _kids, what="the form field tree", budgets=budgets)
        if isinstance(field, pikepdf.Dictionary)
    ]


def _kids(field: pikepdf.Object) -> list[pikepdf.Object]:
    return array_items(field.get(Name.Kids)) if isinstance(field, pikepdf.Dictionary) else []


def void_certification(path: Path) -> None:
    """Drop the catalog's DocMDP permissions: the certification they describe no longer holds once the
    file was rewritten, and it would forbid the new (release) signature."""
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        if "/Perms" in pdf.Root:
            del pdf.Root["/Perms"]
            pdf.save(path)
