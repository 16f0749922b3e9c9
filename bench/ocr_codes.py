"""OCR of codes: how many tracking, container, record and invoice numbers plain `ocrmypdf` and docjobs read exactly.

    .venv/bin/python bench/ocr_codes.py [--sets 300-clean,200-clean,300-degraded,200-degraded] [--pages 2]
        [--codes 40] [--seed 0] [--jobs 2] [--misses]

Each set is one image-only PDF of generated pages full of codes (`tests.fixtures.codes`: manifest-like
entries, a label and a code each followed by a plain word; UPS 1Z and FedEx tracking numbers, ISO 6346
container numbers with their check digits, MRNs, invoice and order IDs, dates, amounts; 11 pt sans-serif).
`--pages` pages of each condition: a clean set is that many upright pages, a degraded set that many pages of
each of speckle noise, blur, a 2 degree skew and a fax-like 1-bit page (`tests.fixtures.scans` transforms).
Page n of every set has the same codes, whatever its condition and resolution.

Both sides get the same OCRmyPDF options (docjobs' `ocrmypdf_args` for the `scan` policy) and run as in
`bench/ocr_quality.py`: plain is `python -m ocrmypdf` with them, docjobs is `run_ocr`. Their output's text is
`pdftotext -raw`. A token is found only as a whole token of its page's text, exactly
(`tests.fixtures.codes.found_tokens`). Printed per set: recall by kind of token, the exact-match rate of whole
codes (every kind but `word`), by condition for a degraded set, and wall seconds a page; then one summary table.
`--misses` lists each code missed with the text's closest token.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import print_table
from ocr_quality import ours, plain

from docjobs.pdf.ocr import ocrmypdf_args
from docjobs.settings.config import Settings
from docjobs.settings.policies import PolicyBook
from tests.fixtures.codes import (
    CODE_KINDS,
    KINDS,
    code_pages,
    expected_tokens,
    found_tokens,
    make_code_pdf,
    text_tokens,
)

DEGRADATIONS = ("noise", "blur", "skew2", "fax")
# set name -> (dpi, the conditions of its pages)
SETS: dict[str, tuple[int, tuple[str, ...]]] = {
    "300-clean": (300, ("upright",)),
    "200-clean": (200, ("upright",)),
    "300-degraded": (300, DEGRADATIONS),
    "200-degraded": (200, DEGRADATIONS),
}
SIDES = ("plain ocrmypdf", "docjobs")


@dataclass
class Tally:
    """Found and expected tokens, by kind and by page condition (codes only), of one side on one set."""

    kinds: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    conditions: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    misses: list[tuple[int, str, str, str]] = field(default_factory=list)  # page, kind, code, closest token

    def add(self, page: int, condition: str, expected: list[tuple[str, str]], text: str) -> None:
        tokens = list(text_tokens(text))
        for (kind, token), found in zip(expected, found_tokens(expected, text), strict=True):
            self.kinds[kind][0] += found
            self.kinds[kind][1] += 1
            if kind != "word":
                self.conditions[condition][0] += found
                self.conditions[condition][1] += 1
                if not found:
                    closest = difflib.get_close_matches(token, tokens, n=1, cutoff=0.5)
                    self.misses.append((page, kind, token, closest[0] if closest else "-"))

    def codes(self) -> tuple[int, int]:
        found = sum(self.kinds[kind][0] for kind in CODE_KINDS)
        return found, sum(self.kinds[kind][1] for kind in CODE_KINDS)


def rate(found: int, total: int) -> str:
    return f"{found / total:.3f}" if total else "-"


def set_rows(
    tallies: dict[str, Tally | str], conditions: tuple[str, ...], per_page: dict[str, float]
) -> list[list[object]]:
    """One set's table: a row a kind, whole codes, codes by condition (when there are several), seconds a page;
    a column a side (a side whose run failed shows its failure code)."""
    counted = next((tally for tally in tallies.values() if isinstance(tally, Tally)), None)

    def row(label: str, pick: str, key: str) -> list[object]:
        table = "kinds" if pick == "kind" else "conditions"
        total: object = getattr(counted, table)[key][1] if counted else "-"
        cells = [tally if isinstance(tally, str) else rate(*getattr(tally, table)[key]) for tally in tallies.values()]
        return [label, total, *cells]

    rows = [row(kind, "kind", kind) for kind in KINDS]
    codes = [tally if isinstance(tally, str) else rate(*tally.codes()) for tally in tallies.values()]
    rows.append(["**whole codes, exact**", counted.codes()[1] if counted else "-", *codes])
    if len(conditions) > 1:
        rows += [row(f"codes on {how} pages", "condition", how) for how in conditions]
    rows.append(["seconds a page", "", *(f"{per_page[side]:.1f}" for side in tallies)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--pages", type=int, default=2, help="pages of each condition in a set")
    parser.add_argument("--codes", type=int, default=40, help="codes a page (each with a plain word)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--misses", action="store_true", help="list the codes missed, with the closest token read")
    options = parser.parse_args()
    policy = PolicyBook.load(Settings.from_env().policy_file).get("scan").ocr
    args = ocrmypdf_args(policy, jobs=options.jobs)
    print(f"ocrmypdf options: {' '.join(args)}")
    summary: list[list[object]] = []
    for name in options.sets.split(","):
        dpi, conditions = SETS[name]
        transforms = [how for how in conditions for _ in range(options.pages)]
        pages = code_pages(len(transforms), options.codes, seed=options.seed)
        with tempfile.TemporaryDirectory(prefix="docjobs-ocrcodes-") as tmp:
            folder = Path(tmp)
            make_code_pdf(folder / "scan.pdf", pages, transforms, dpi)
            results = {
                "plain ocrmypdf": plain(folder / "scan.pdf", folder / "plain.pdf", args),
                "docjobs": ours(folder / "scan.pdf", folder / "docjobs.pdf", folder, policy, options.jobs),
            }
        tallies: dict[str, Tally | str] = {}
        for side, (texts, _) in results.items():
            if isinstance(texts, str):
                tallies[side] = texts  # the failure
                continue
            tally = Tally()
            for number, (entries, how, text) in enumerate(zip(pages, transforms, texts, strict=True)):
                tally.add(number + 1, how, expected_tokens(entries), text)
            tallies[side] = tally
        per_page = {side: seconds / len(transforms) for side, (_, seconds) in results.items()}
        heading = f"{len(transforms)} pages at {dpi} dpi: {', '.join(conditions)}; {options.codes} codes each"
        print(f"\n### {name} ({heading})\n")
        print_table(["kind", "tokens", *SIDES], set_rows(tallies, conditions, per_page))
        whole = [rate(*tally.codes()) if isinstance(tally, Tally) else tally for tally in tallies.values()]
        words = [rate(*tally.kinds["word"]) if isinstance(tally, Tally) else tally for tally in tallies.values()]
        summary.append([name, len(transforms), *whole, *words, *(f"{per_page[side]:.1f}" for side in SIDES)])
        if options.misses:
            for side, missed in tallies.items():
                if isinstance(missed, Tally) and missed.misses:
                    print(f"\n{side} missed:\n")
                    print_table(["page", "kind", "code", "closest token read"], missed.misses)
    print("\n### summary\n")
    print_table(
        [
            "set",
            "pages",
            "codes exact: plain",
            "codes exact: docjobs",
            "words: plain",
            "words: docjobs",
            "s/page: plain",
            "s/page: docjobs",
        ],
        summary,
    )


if __name__ == "__main__":
    main()
