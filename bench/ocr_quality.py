"""OCR quality: word recall per page of plain `ocrmypdf` versus docjobs' OCR core, on generated scans.

    .venv/bin/python bench/ocr_quality.py [--sets skew,turned,conditions,hard] [--jobs 2] [--words 60]

Each scan set is an image-only PDF made by `tests.fixtures.scans` (known words; skews, quarter turns, speckle
noise, 200 dpi, low contrast). Both sides get the same OCRmyPDF options (docjobs' `ocrmypdf_args` for the
`scan` policy): plain is `python -m ocrmypdf` with them; docjobs is `run_ocr` (its own child, plugin,
skew estimate and retries). Recall is the share of a page's words found in its `pdftotext -raw` text.
A docjobs run that fails prints its failure code instead of recalls. Prints one markdown table per set.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import OcrPolicy
from docjobs.pdf.ocr import ocrmypdf_args, run_ocr
from docjobs.settings.config import Settings
from docjobs.settings.policies import PolicyBook
from tests.fixtures.scans import make_scan_pdf, scan_words, word_recall

# set name -> one (transform, dpi) per page
SETS: dict[str, list[tuple[str, int]]] = {
    "skew": [(f"skew{angle:g}", 300) for angle in (-8, -6, -3, -1, -0.5, 0.5, 1, 3, 6, 8)],
    "turned": [("upright", 300), ("rot90", 300), ("rot180", 300), ("skew3", 300)],  # the 4 pages
    "conditions": [
        ("noise", 300),
        ("skew2+noise", 300),
        ("upright", 200),
        ("skew-4", 200),
        ("lowcontrast", 300),
        ("skew3+lowcontrast", 300),
    ],
    "hard": [  # the 6 pages
        ("skew-1.5", 300),
        ("skew5", 300),
        ("skew-7", 300),
        ("skew2+noise", 300),
        ("skew-3", 200),
        ("skew4+lowcontrast", 300),
    ],
}


def pdftotext_pages(pdf: Path) -> list[str]:
    result = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True)
    return result.stdout.split("\f")[:-1]


def plain(scan: Path, out: Path, args: list[str]) -> tuple[list[str] | str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ocrmypdf", *args, str(scan), str(out)], capture_output=True)
    seconds = time.perf_counter() - started
    return (pdftotext_pages(out) if done.returncode == 0 else f"exit {done.returncode}"), seconds


def ours(scan: Path, out: Path, folder: Path, policy: OcrPolicy, jobs: int) -> tuple[list[str] | str, float]:
    started = time.perf_counter()
    try:
        run_ocr(scan, out, policy, workdir=folder, jobs=jobs)
    except DocJobError as error:
        return error.code, time.perf_counter() - started
    return pdftotext_pages(out), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--words", type=int, default=60)
    options = parser.parse_args()
    policy = PolicyBook.load(Settings.from_env().policy_file).get("scan").ocr
    args = ocrmypdf_args(policy, jobs=options.jobs)
    print(f"ocrmypdf options: {' '.join(args)}")
    for name in options.sets.split(","):
        pages = SETS[name]
        words = scan_words(len(pages), options.words, seed=len(name))
        with tempfile.TemporaryDirectory(prefix="docjobs-ocrq-") as tmp:
            folder = Path(tmp)
            make_scan_pdf(folder / "scan.pdf", words, [how for how, _ in pages], dpi=[dpi for _, dpi in pages])
            results = {
                "plain ocrmypdf": plain(folder / "scan.pdf", folder / "plain.pdf", args),
                "docjobs": ours(folder / "scan.pdf", folder / "docjobs.pdf", folder, policy, options.jobs),
            }
        print(f"\n### {name} ({len(pages)} pages, {options.words} words each)\n")
        print("| page | " + " | ".join(results) + " |")
        print("|---|" + "---|" * len(results))
        recalls: dict[str, list[float]] = {}
        for number, ((how, dpi), expected) in enumerate(zip(pages, words, strict=True)):
            cells = []
            for runner, (texts, _) in results.items():
                if isinstance(texts, str):
                    cells.append(texts if number == 0 else "")
                    continue
                recall = word_recall(expected, texts[number])
                recalls.setdefault(runner, []).append(recall)
                cells.append(f"{recall:.2f}")
            print(f"| {number + 1}: {how} @{dpi} dpi | " + " | ".join(cells) + " |")
        overall = [
            f"{sum(recalls[runner]) / len(recalls[runner]):.2f}" if runner in recalls else "-" for runner in results
        ]
        print("| **overall** | " + " | ".join(overall) + " |")
        print("| seconds | " + " | ".join(f"{seconds:.1f}" for _, seconds in results.values()) + " |")


if __name__ == "__main__":
    main()
