"""Skew estimate of a scanned page from projection profiles, for the OCR child and the OCR retry.

Tesseract's own estimate (what OCRmyPDF's ``--deskew`` asks for) often reports 0 degrees for pages a few
degrees askew, and an empty page beyond about 6 degrees; Tesseract then misreads or drops the slanted
lines. Here the page is reduced to about 100 dpi, thresholded (Otsu, so light or low-contrast scans
work), and turned through a range of angles: the angle whose row profile is sharpest (the largest sum of
squared differences between neighbouring rows: text lines lying flat make tall peaks and empty gaps) is
the one that makes the lines horizontal. Speckle noise averages out in the reduction.

The estimate is trusted only when that peak stands out from the other angles (`SkewEstimate.confident`):
a photo or a blank page has no preferred angle. Pure PIL and the standard library: the OCR child loads
this file by path (it imports nothing from docjobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from PIL import Image

MAX_ANGLE = 10.0  # degrees either way; a page fed further askew than this is not a scan defect we correct
COARSE_STEP = 0.5
FINE_STEP = 0.05
WORK_WIDTH = 1000  # pixels across the reduced page (about 100 dpi for letter width)
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
    ink = gray.point(lambda value: 255 if value < threshold else 0).convert("F")
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
    turned = ink.rotate(angle, resample=Image.Resampling.NEAREST, fillcolor=0)
    profile = turned.resize((1, turned.height), Image.Resampling.BOX)  # each row's mean ink
    rows = [float(value) for value in profile.get_flattened_data()]  # type: ignore[arg-type]
    return float(sum((after - before) ** 2 for before, after in pairwise(rows)))


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
