"""What the gap left by a redacted name tells an attacker, layout `keep` against `mask`, by pattern and by region.

    .venv/bin/python bench/redact_width.py [--words 2000]

The twelve fake names of tests/fixtures/redact_layout.py are redacted from "Patient: NAME was seen on Monday."
in Helvetica and in an embedded subset (Vera through fpdf2). The attacker reads the released file with
pdfminer, measures the gap between the end of "Patient:" and the start of "was", and keeps the dictionary
words that would leave the same gap (within 0.05 pt) in that font at that size. The dictionary: capitalised
words of Tesseract's English word list (`combine_tessdata`, `dawg2wordlist`), a fixed sample, plus the twelve
names. Each name is redacted twice: by a pattern match, and by a region (the box a reviewer draws over the
name's glyphs, `tests/test_redact_layout.py: name_region`). Also counted ("letters", source / released with
mask, by pattern): letters that only the name used and that the subset font still maps (ToUnicode).
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pikepdf
from fontTools.ttLib import TTFont
from pdfminer.cmapdb import CMapParser, FileUnicodeMap
from reportlab.pdfbase.pdfmetrics import stringWidth

from docjobs.domain.policy import RedactLayout, RedactPolicy
from docjobs.pdf.redaction.redact import redact_pdf
from tests.fixtures.redact_layout import (
    FONT_SIZE,
    NAME_REGEX,
    NAMES,
    OTHER_LINES,
    PREFIX,
    SUFFIX,
    VERA_TTF,
    make_embedded,
    make_standard,
)
from tests.test_redact_layout import glyphs, name_region

TOLERANCE = 0.05  # points
HOWS = ("pattern", "region")


def dictionary(size: int, workdir: Path) -> list[str]:
    tessdata = next(Path("/usr/share/tesseract-ocr").glob("*/tessdata/eng.traineddata"))
    parts = [workdir / "eng.lstm-word-dawg", workdir / "eng.lstm-unicharset"]
    subprocess.run(["combine_tessdata", "-e", str(tessdata), *map(str, parts)], capture_output=True, check=True)
    listed = workdir / "words.txt"
    subprocess.run(["dawg2wordlist", str(parts[1]), str(parts[0]), str(listed)], capture_output=True, check=True)
    words = sorted({w for w in listed.read_text().split() if w.isalpha() and w[0].isupper() and len(w) > 1})
    return [*random.Random(15).sample(words, size), *NAMES]


def vera_width() -> Callable[[str], float]:
    font = TTFont(VERA_TTF)
    cmap, metrics, units = font.getBestCmap(), font["hmtx"].metrics, font["head"].unitsPerEm
    return lambda text: sum(metrics[cmap[ord(c)]][0] for c in text if ord(c) in cmap) * FONT_SIZE / units


def helvetica_width(text: str) -> float:
    return float(stringWidth(text, "Helvetica", FONT_SIZE))


def gap(pdf: Path) -> float:
    line = [glyph for glyph in glyphs(pdf) if glyph[0] != " "]
    start = next(index for index in range(len(line)) if "".join(g[0] for g in line[index : index + 8]) == "Patient:")
    colon = line[start + 7]
    return next(g[1] for g in line[start + 8 :] if g[0] == "w" and abs(g[2] - colon[2]) < 0.01) - colon[3]


def name_only_letters_mapped(pdf: Path) -> int:
    kept = set(PREFIX + SUFFIX + "".join(OTHER_LINES))
    with pikepdf.open(pdf) as document:
        fonts = [font for _, font in document.pages[0].Resources.Font.items() if "/ToUnicode" in font]
        mapped: set[str] = set()
        for font in fonts:
            cmap = FileUnicodeMap()
            CMapParser(cmap, io.BytesIO(font.ToUnicode.read_bytes())).run()
            mapped |= {text for text in cmap.cid2unichr.values() if isinstance(text, str)}
    return len(mapped - kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        words = dictionary(args.words, work)
        print(f"dictionary: {len(words)} words; tolerance {TOLERANCE} pt\n")
        for label, make, width in (
            ("Helvetica", make_standard, helvetica_width),
            ("embedded subset (Vera)", make_embedded, vera_width()),
        ):
            rows = []
            keep_counts: dict[str, list[int]] = {how: [] for how in HOWS}
            mask_gaps: dict[str, set[float]] = {how: set() for how in HOWS}
            for name in NAMES:
                make(source := work / "source.pdf", name)
                results = {}
                for how in HOWS:
                    for layout in RedactLayout:
                        if how == "pattern":
                            policy = RedactPolicy(regexes=(NAME_REGEX,), layout=layout)
                        else:
                            policy = RedactPolicy(regions=(name_region(source, name),), layout=layout)
                        redact_pdf(source, out := work / f"{how}-{layout}.pdf", policy, workdir=work)
                        results[how, layout] = gap(out)
                    shown = results[how, RedactLayout.KEEP]  # the name and the spaces either side
                    keep_counts[how].append(sum(abs(width(" " + word + " ") - shown) <= TOLERANCE for word in words))
                    mask_gaps[how].add(round(results[how, RedactLayout.MASK], 3))
                letters = f"{name_only_letters_mapped(source)} / {name_only_letters_mapped(work / 'pattern-mask.pdf')}"
                rows.append((name, results, keep_counts["pattern"][-1], keep_counts["region"][-1], letters))
            # One gap whatever the name: it tells nothing, every word stays a candidate.
            left = {how: len(words) if len(mask_gaps[how]) == 1 else "?" for how in HOWS}
            print(f"{label}\n| name | by | keep: gap | keep: candidates | mask: gap | mask: candidates | letters |")
            print("|---|---|---|---|---|---|---|")
            for name, results, by_pattern, by_region, letters in rows:
                for how, count in (("pattern", by_pattern), ("region", by_region)):
                    kept, masked = results[how, RedactLayout.KEEP], results[how, RedactLayout.MASK]
                    shown_letters = letters if how == "pattern" else ""
                    print(f"| {name} | {how} | {kept:.3f} | {count} | {masked:.3f} | {left[how]} | {shown_letters} |")
            for how in HOWS:
                median = statistics.median(keep_counts[how])
                print(f"{how}: keep: median {median} candidate(s); mask: {len(mask_gaps[how])} distinct gap(s)")
            print()


if __name__ == "__main__":
    main()
