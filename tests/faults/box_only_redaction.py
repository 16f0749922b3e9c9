"""DOCJOBS_FAULT=box-only-redaction: a redaction engine that only draws its boxes and removes nothing (the
redaction gate must catch it)."""

from __future__ import annotations

import pikepdf

from docjobs.isolation.stage_work import ENTRIES
from docjobs.pdf.budgets import Budgets
from docjobs.pdf.redaction import redact
from docjobs.pdf.redaction.content import ContentRemoval
from docjobs.pdf.redaction.regions import Rect


def remove_nothing(*_: object, **__: object) -> ContentRemoval:
    """Whatever page and regions it is asked for: nothing removed."""
    return ContentRemoval(glyphs_removed=0, images_redacted=0)


def keep_annotations(pdf: pikepdf.Pdf, page: pikepdf.Page, rects: list[Rect], budgets: Budgets) -> int:
    return 0


setattr(redact, "remove_content", remove_nothing)  # noqa: B010
setattr(redact, "_remove_annotations", keep_annotations)  # noqa: B010

__all__ = ["ENTRIES"]
