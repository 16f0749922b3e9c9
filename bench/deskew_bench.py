"""The skew estimate of every deskewed scan page: CPU per page, and the angles it finds.

    .venv/bin/python bench/deskew_bench.py [--pages 8] [--dpi 200,300]

On generated scan pages turned by known angles (tests/fixtures/scans.py), one after the other in this process:

1. docjobs' estimate (`docjobs.pdf.deskew.estimate_skew`: the page squeezed along its rows, each angle a shear);
2. the same search turning the whole page for each angle (`Image.rotate`, what the estimate did before);
3. Tesseract's own estimate, `tesseract --psm 2` (what plain OCRmyPDF's `--deskew` runs), on one thread, its CPU
   seconds as a child.

Prints a table: CPU milliseconds a page, the pages found within TOLERANCE degrees of the angle each was turned by
(what the tests hold docjobs' estimate to), and the largest error.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import TypeVar
from unittest.mock import patch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import children_cpu_seconds, print_table
from PIL import Image

from docjobs.pdf import deskew
from tests.fixtures.scans import make_scan_pages, scan_words

ANGLES = (-8.0, -3.5, -0.5, 0.0, 1.0, 2.2, 6.0, 9.5)
TOLERANCE = 0.15  # degrees
_TESSERACT_ANGLE = re.compile(rb"Deskew angle: ([-0-9.]+)")
Page = TypeVar("Page")


def turned_whole(image: Image.Image) -> float:
    """The skew the estimate found before: the same search, each angle scored by turning the whole reduced page
    (`Image.rotate`, nothing squeezed), so the two differ only in how a turn is computed."""

    def score(ink: Image.Image, angle: float) -> float:
        turned = ink.rotate(angle, resample=Image.Resampling.NEAREST, fillcolor=0)
        rows = list(turned.resize((1, turned.height), Image.Resampling.BOX).get_flattened_data())
        return float(sum((after - before) ** 2 for before, after in pairwise(rows)))  # type: ignore[operator]

    with patch.multiple(deskew, SQUEEZE=1, _score=score):
        return deskew.estimate_skew(image).skew


def tesseract_skew(page: Path) -> float:
    """Tesseract's skew of `page` (`--psm 2`, as OCRmyPDF asks it), in the same sense as `SkewEstimate.skew`: it
    prints the correction, in radians, on stderr. A page it finds no text on fails, which OCRmyPDF takes as no
    skew."""
    command = ["tesseract", "-l", "eng", "--psm", "2", str(page), "stdout"]
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    output = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, env=env)
    found = _TESSERACT_ANGLE.search(output.stdout)
    return -math.degrees(float(found.group(1))) if found else 0.0


def measured(
    pages: Sequence[Page], angles: Sequence[float], skew_of: Callable[[Page], float], clock: Callable[[], float]
) -> tuple[float, int, float]:
    """(CPU milliseconds a page by `clock`, the pages within TOLERANCE, the largest error in degrees) of `skew_of`
    over `pages`."""
    started = clock()
    errors = [abs(skew_of(page) - angle) for page, angle in zip(pages, angles, strict=True)]
    return (clock() - started) * 1000 / len(pages), sum(error <= TOLERANCE for error in errors), max(errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=len(ANGLES))
    parser.add_argument("--dpi", default="200,300", help="comma-separated resolutions (default: 200,300)")
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="docjobs-bench-") as tmp:
        for dpi in (int(value) for value in options.dpi.split(",")):
            angles = [ANGLES[index % len(ANGLES)] for index in range(options.pages)]
            images = make_scan_pages(
                scan_words(options.pages, 40, seed=dpi), dpi=dpi, transforms=[f"skew{angle:g}" for angle in angles]
            )
            files = []
            for number, image in enumerate(images):
                files.append(Path(tmp) / f"{dpi}-{number}.png")
                image.save(files[-1], dpi=(dpi, dpi))
            ours = measured(images, angles, lambda image: deskew.estimate_skew(image).skew, time.process_time)
            whole = measured(images, angles, turned_whole, time.process_time)
            tesseract = measured(files, angles, tesseract_skew, children_cpu_seconds)
            for name, (cpu_ms, within, error) in (
                ("docjobs estimate (shear, squeezed)", ours),
                ("the estimate before (whole page turned)", whole),
                ("tesseract --psm 2 (plain OCRmyPDF's --deskew)", tesseract),
            ):
                rows.append((f"{dpi} dpi, {options.pages} pages", name, f"{cpu_ms:.0f}", f"{within}", f"{error:.2f}"))
    header = ("pages", "estimate", "CPU ms a page", f"pages within {TOLERANCE} degrees", "largest error, degrees")
    print_table(header, rows)


if __name__ == "__main__":
    main()
