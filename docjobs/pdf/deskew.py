"""Skew estimate of a scanned page from projection profiles, for the OCR child and the OCR retry.

Tesseract's own estimate (what OCRmyPDF's ``--deskew`` asks for) often reports 0 degrees for pages a few
degrees askew, and an empty page beyond about 6 degrees; Tesseract then misreads or drops the slanted
lines. Here the page is reduced to about 100 dpi, thresholded (Otsu, so light or low-contrast scans
work), and turned through a range of angles: the angle whose row profile is sharpest (the largest sum of
squared differences between neighbouring rows: text lines lying flat make tall peaks and empty gaps) is
the one that makes the lines horizontal. Speckle noise averages out in the reduction.

Only the row each pixel lands on counts, so a turn is computed as the vertical shear that puts every pixel on
the row the turn would (its column stays), on the page squeezed SQUEEZE times along its rows first: a row's
ink is the same, in a quarter of the pixels. It finds the same angles as turning the whole page, for a quarter
of the CPU or less (bench/deskew_bench.py): it runs on every page of a scan that is deskewed.

The estimate is trusted only when that peak stands out from the other angles (`SkewEstimate.confident`):
a photo or a blank page has no preferred angle. Pure PIL and the standard library: the OCR child loads
this file by path (it imports nothing from docjobs).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from PIL import Image

MAX_ANGLE = 10.0  # degrees either way; a page fed further askew than this is not a scan defect we correct
COARSE_STEP = 0.5
FINE_STEP = 0.05
WORK_WIDTH = 1000  # pixels across the reduced page (about 100 dpi for letter width)
SQUEEZE = 4  # columns averaged into one before turning: a row's ink stays, and a turn moves a column as one
MIN_SHARPNESS = 3.0  # best score / median score over the coarse angles (text: 40+, photos, blank: < 2)
MIN_CORRECTION = 0.1  # degrees: smaller turns are not worth resampling the page for


@dataclass(frozen=True)
class SkewEstimate:
    correction: float  # degrees to turn the page counter-clockwise (PIL's sense) to make its lines level
    sharpness: float  # how much the best angle stands out (1.0: not at all)

    @property
    def confident(self) -> bool:
        return self.sharpness >= MIN_SHARPNESS

    @property
    def skew(self) -> float:
        """The page's own skew: positive when it was turned counter-clockwise."""
        return -self.correction


def estimate_skew(image: Image.Image, *, max_angle: float = MAX_ANGLE) -> SkewEstimate:
    """The correction that levels the text lines of `image` (any mode), with how sure it is."""
    gray = image.convert("L")
    factor = max(1, round(gray.width / WORK_WIDTH))
    if factor > 1:
        gray = gray.reduce(factor)  # box average: specks fade, strokes stay
    threshold = _otsu(gray.histogram())
    ink = gray.point(lambda value: 255 if value < threshold else 0).reduce((SQUEEZE, 1)).convert("F")
    coarse = _angles(-max_angle, max_angle, COARSE_STEP)
    scores = {angle: _score(ink, angle) for angle in coarse}
    best = max(scores, key=lambda angle: scores[angle])
    fine = _angles(max(-max_angle, best - COARSE_STEP), min(max_angle, best + COARSE_STEP), FINE_STEP)
    fine_scores = {angle: _score(ink, angle) for angle in fine}
    best = max(fine_scores, key=lambda angle: fine_scores[angle])
    ordered = sorted(scores.values())
    median = ordered[len(ordered) // 2]
    sharpness = fine_scores[best] / median if median > 0 else 1.0
    return SkewEstimate(correction=round(best, 2), sharpness=round(sharpness, 2))


def _angles(low: float, high: float, step: float) -> list[float]:
    count = round((high - low) / step)
    return [round(low + step * index, 4) for index in range(count + 1)]


def _score(ink: Image.Image, angle: float) -> float:
    """How sharp the row profile of `ink` (squeezed SQUEEZE times along its rows) is once the page is turned by
    `angle` degrees counter-clockwise about its middle. Turned so (as `Image.rotate` does), a pixel at (x, y) of the
    page (x counted before the squeeze) lands on row cy + (y - cy) cos - (x - cx) sin: the shear below takes each
    output row's pixels from there, each column from itself."""
    radians = math.radians(angle)
    sin, cos = math.sin(radians), math.cos(radians)
    cx, cy = ink.width * SQUEEZE / 2, ink.height / 2
    shear = (1.0, 0.0, 0.0, SQUEEZE * sin / cos, 1 / cos, cy - (cy + cx * sin) / cos)  # output (x, y) <- input
    turned = ink.transform(ink.size, Image.Transform.AFFINE, shear, resample=Image.Resampling.NEAREST, fillcolor=0)
    profile = turned.resize((1, turned.height), Image.Resampling.BOX)  # each row's mean ink
    rows = [float(value) for value in profile.get_flattened_data()]  # type: ignore[arg-type]
    steps = list(map(operator.sub, rows[1:], rows[:-1]))
    return float(sum(map(operator.mul, steps, steps)))


def _otsu(histogram: list[int]) -> int:
    """The gray level that best splits the histogram into ink and paper (Otsu's method)."""
    total = sum(histogram)
    weighted_total = sum(level * count for level, count in enumerate(histogram))
    below = weighted_below = 0.0
    best_level, best_variance = 128, -1.0
    for level, count in enumerate(histogram):
        below += count
        weighted_below += level * count
        above = total - below
        if below == 0 or above == 0:
            continue
        mean_below = weighted_below / below
        mean_above = (weighted_total - weighted_below) / above
        variance = below * above * (mean_below - mean_above) ** 2
        if variance > best_variance:
            best_level, best_variance = level + 1, variance
    return best_level
