"""Redaction cost per page, beside the raw text extraction it builds on, and the raster-fallback share.

    .venv/bin/python bench/redact_bench.py [--runs 3] [--pages 50]

`redact_pdf` (locate with pdfminer, rewrite content, scrub, save, the two-extractor gate, then the check
that every word outside the regions is still in place) runs on a generated text PDF with an SSN, an e-mail
and a phone number on every page; its main steps are also timed alone. Beside it, the raw tools on the same
file: `pdftotext` (poppler) and pdfminer's text extraction, the floor any locate-and-verify redactor pays.
The fallback share is over the redaction fixtures (tests/fixtures/redact_samples.py, the scan excluded: it needs OCR
first): pages burned in at the fallback DPI / pages redacted. Prints medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pikepdf
from pdfminer.high_level import extract_text
from pdfminer.layout import LAParams

from docjobs.domain.policy import RedactPolicy
from docjobs.pdf.redaction.content import remove_content
from docjobs.pdf.redaction.gate import check_redaction
from docjobs.pdf.redaction.locate import locate
from docjobs.pdf.redaction.patterns import compile_patterns
from docjobs.pdf.redaction.redact import redact_pdf
from tests.fixtures.redact_samples import FIXTURES, make_redaction_bench_pdf

POLICY = RedactPolicy(patterns=("ssn", "email", "phone"))


def median_s(runs: int, action: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docjobs-redact-bench-") as tmp:
        folder = Path(tmp)
        document = folder / "bench.pdf"
        make_redaction_bench_pdf(document, pages=args.pages)

        def redact() -> None:
            redact_pdf(document, folder / "out.pdf", POLICY, workdir=folder)

        patterns = compile_patterns(POLICY)
        located = locate(document, patterns)

        def remove() -> None:
            with pikepdf.open(document) as pdf:
                for number, rects in located.regions.items():
                    remove_content(pdf, number, rects)
                pdf.save(folder / "removed.pdf")

        timings = {
            "docjobs redact_pdf (everything)": median_s(args.runs, redact),
            "  of which: locate (pdfminer)": median_s(args.runs, lambda: locate(document, patterns)),
            "  of which: remove glyphs (content rewrite + save)": median_s(args.runs, remove),
            "  of which: gate (pdftotext + pypdf + pikepdf)": median_s(
                args.runs, lambda: check_redaction(folder / "removed.pdf", located.values, patterns, located.regions)
            ),
            "pdftotext (poppler), whole file": median_s(
                args.runs, lambda: subprocess.run(["pdftotext", "-q", str(document), "-"], capture_output=True)
            ),
            "pdfminer extract_text (all_texts)": median_s(
                args.runs, lambda: extract_text(str(document), laparams=LAParams(all_texts=True))
            ),
        }
        redacted = redact_pdf(document, folder / "out.pdf", POLICY, workdir=folder)
        matches = sum(sum(page.matches.values()) for page in redacted.pages)

        fallback_pages = redacted_pages = 0
        fixtures = [name for name, spec in FIXTURES.items() if spec.where != "image"]
        for name in fixtures:
            FIXTURES[name].make(source := folder / f"{name}.pdf")
            summary = redact_pdf(
                source, folder / f"{name}.out.pdf", RedactPolicy(patterns=("ssn", "email")), workdir=folder
            )
            redacted_pages += len(summary.pages)
            fallback_pages += len(summary.fallback_pages)

    base = timings["pdftotext (poppler), whole file"]
    print(f"{args.pages}-page text PDF, {matches} matches, median of {args.runs}\n")
    print(f"| {'step':<52} | {'total s':>8} | {'ms/page':>8} | {'x pdftotext':>11} |")
    print(f"|{'-' * 54}|{'-' * 10}|{'-' * 10}|{'-' * 13}|")
    for step, seconds in timings.items():
        per_page = 1000 * seconds / args.pages
        print(f"| {step:<52} | {seconds:>8.2f} | {per_page:>8.1f} | {seconds / base:>11.1f} |")
    share = fallback_pages / redacted_pages if redacted_pages else 0.0
    print(
        f"\nraster fallback: {fallback_pages} of {redacted_pages} redacted fixture pages ({share:.0%}), "
        f"over {len(fixtures)} fixtures"
    )


if __name__ == "__main__":
    main()
