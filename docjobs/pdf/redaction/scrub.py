"""Document-level scrubbing: sensitive text outside the page content is removed, not hidden.

Info entries and the XMP packet, bookmarks, named destinations, attachments (names, descriptions and
bytes), JavaScript, form values and annotation texts can all carry a value that the page redaction never
sees (see docjobs/pdf/redaction/sites.py for the list). A place is sensitive when a pattern matches its text
or a value found on the pages appears in it; it is then deleted or cleared. The report counts places per
kind and never holds their text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pikepdf

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets
from docjobs.pdf.redaction.patterns import NamedPattern, sensitive_kinds
from docjobs.pdf.redaction.sites import document_sites


@dataclass(frozen=True)
class ScrubReport:
    counts: dict[str, int]  # site kind ("metadata", "attachment", ...) -> places removed or cleared

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def scrub_document(
    pdf: pikepdf.Pdf,
    patterns: Sequence[NamedPattern],
    values: frozenset[str],
    *,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> ScrubReport:
    """Remove every document-level place whose text is sensitive, in place; the caller saves `pdf`."""
    removed: Counter[str] = Counter()
    for site in document_sites(pdf, budgets=budgets):
        if any(sensitive_kinds(text, patterns, values) for text in site.texts):
            site.remove()
            removed[site.kind] += 1
    return ScrubReport(dict(removed))
