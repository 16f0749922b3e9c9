"""Signatures already in an input: processing rewrites the file, so they can only be voided, never kept."""

from __future__ import annotations

from pathlib import Path

import pikepdf


def signature_count(path: Path) -> int:
    """How many filled signature fields the PDF has (any rewrite of the file invalidates them)."""
    with pikepdf.open(path) as pdf:
        acroform = pdf.Root.get("/AcroForm")
        pending = list(acroform.get("/Fields", [])) if acroform is not None else []
        count = 0
        while pending:
            field = pending.pop()
            pending.extend(field.get("/Kids", []))
            if field.get("/FT") == "/Sig" and field.get("/V") is not None:
                count += 1
        return count


def void_certification(path: Path) -> None:
    """Drop the catalog's DocMDP permissions: the certification they describe no longer holds once the
    file was rewritten, and it would forbid the new (release) signature."""
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        if "/Perms" in pdf.Root:
            del pdf.Root["/Perms"]
            pdf.save(path)
