"""Synthetic "scans" for the OCR tests and benchmarks: known words rendered onto page images.

Every page is a letter-size (8.5 x 11 in) white grayscale image at `dpi` with its words drawn in
lines from the top-left margin in a large, clear sans-serif font, so OCR should recognise nearly
all of them and a test can count how many it found. The text block fills only the upper part of
the page: an upright rendering has its ink near the top-left, which lets a test check orientation
from pixels alone.

Per-page transforms model how scans arrive:

* ``upright``: as drawn.
* ``rot90``: the image turned 90 degrees counter-clockwise (landscape pixels, text running
  bottom-to-top); a viewer must turn it 90 degrees clockwise (``/Rotate 90``) to read it.
* ``rot180``: upside down.
* ``skew3``: turned 3 degrees counter-clockwise, canvas expanded, corners filled white, like a
  page fed slightly askew. Any angle can be given: ``skew-7`` (clockwise), ``skew1.5``.
* ``noise``: light speckle noise: scattered dark specks on the paper and light specks in the ink.
* ``lowcontrast``: dark-gray ink on light-gray paper.

Transforms combine with ``+`` (``skew5+noise``, ``rot90+skew-2``); they are applied in a fixed
order whatever the order written: skew, then the quarter turn, then noise, then contrast.

Output is deterministic: the same arguments give the same pixels (and the same file bytes for the
lossless formats).
"""

from __future__ import annotations

import argparse
import io
import random
import re
from collections import Counter
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import img2pdf  # type: ignore[import-untyped]
from PIL import Image, ImageDraw, ImageFont

TRANSFORMS = ("upright", "rot90", "rot180", "skew3", "skew<degrees>", "noise", "lowcontrast")
LETTER_INCHES = (8.5, 11.0)
FONT_PT = 15  # large print: OCR is reliable and the words are few enough to fit the upper page
MARGIN_INCHES = 0.75
SPECKLE_DENSITY = 0.0005  # specks (of each colour) per pixel
LOW_CONTRAST = (110, 200)  # ink and paper gray levels of a low-contrast page
_SKEW = re.compile(r"skew-?\d+(\.\d+)?")
_DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

# Common dictionary words of 4-11 letters, all distinct and unambiguous to OCR (no digits, no
# proper nouns, no words that differ only by easily confused letters like rn/m).
KNOWN_WORDS: tuple[str, ...] = (
    "about", "above", "accept", "across", "action", "active", "actual", "advice", "afford", "agency",
    "agree", "ahead", "allow", "almost", "alone", "along", "already", "always", "amount", "animal",
    "answer", "appear", "apply", "area", "argue", "around", "arrive", "article", "artist", "assume",
    "attack", "author", "avoid", "away", "baby", "back", "balance", "bank", "base", "beat",
    "beautiful", "become", "before", "begin", "behind", "believe", "benefit", "better", "between",
    "beyond", "billion", "black", "blood", "blue", "board", "body", "book", "both", "break",
    "bring", "brother", "budget", "build", "business", "camera", "campaign", "cancer", "capital",
    "career", "carry", "case", "catch", "cause", "center", "central", "century", "certain", "chair",
    "challenge", "chance", "change", "charge", "check", "child", "choice", "choose", "church",
    "citizen", "city", "civil", "claim", "class", "clear", "close", "coach", "cold", "collect",
    "college", "color", "common", "company", "compare", "concern", "control", "cost", "country",
    "couple", "course", "court", "cover", "create", "crime", "cultural", "culture", "current",
    "customer", "dark", "data", "daughter", "dead", "deal", "death", "debate", "decade", "decide",
    "deep", "defense", "degree", "describe", "design", "despite", "detail", "develop", "differ",
    "dinner", "direction", "discover", "discuss", "disease", "doctor", "door", "down", "draw",
    "dream", "drive", "drop", "during", "early", "east", "easy", "economy", "edge", "effect",
    "effort", "eight", "either", "election", "else", "employee", "energy", "enjoy", "enough",
    "enter", "entire", "evening", "event", "every", "evidence", "exactly", "example", "expect",
    "expert", "explain", "face", "fact", "factor", "fail", "fall", "family", "father", "fear",
    "federal", "feel", "field", "fight", "figure", "fill", "final", "finally", "financial", "find",
    "fine", "finger", "finish", "fire", "firm", "first", "fish", "five", "floor", "focus", "follow",
    "food", "foot", "force", "foreign", "forget", "form", "former", "forward", "free", "friend",
    "front", "full", "future", "garden", "general", "glass", "goal", "good", "great", "green",
    "ground", "group", "grow", "growth", "guess", "hair", "half", "hand", "hang", "happen", "happy",
    "hard", "have", "head", "health", "hear", "heart", "heat", "heavy", "help", "here", "herself",
    "high", "history", "hold", "home", "hope", "hospital", "hotel", "hour", "house", "however",
    "huge", "human", "hundred", "husband", "idea", "identify", "image", "imagine", "impact",
    "improve", "include", "increase", "indeed", "industry", "inside", "instead", "interest",
    "into", "issue", "itself", "join", "just", "keep", "kitchen", "knowledge", "land", "language",
    "large", "later", "laugh", "lawyer", "leader", "learn", "least", "leave", "legal", "less",
    "letter", "level", "life", "light", "likely", "line", "list", "listen", "little", "local",
    "long", "look", "lose", "love", "machine", "magazine", "maintain", "major", "manage", "market",
    "material", "matter", "maybe", "measure", "media", "medical", "meeting", "member", "memory",
    "mention", "message", "method", "middle", "might", "military", "million", "mind", "minute",
    "miss", "mission", "model", "moment", "money", "month", "more", "morning", "most", "mother",
    "mouth", "move", "movie", "much", "music", "myself", "name", "nation", "natural", "nature",
    "near", "nearly", "need", "network", "never", "news", "newspaper", "next", "nice", "night",
    "none", "north", "note", "nothing", "notice", "number", "office", "officer", "official",
    "often", "once", "only", "onto", "open", "option", "order", "other", "others", "outside",
    "over", "owner", "page", "paper", "parent", "part", "party", "pass", "past", "patient",
    "pattern", "peace", "people", "perform", "perhaps", "period", "person", "phone", "picture",
    "piece", "place", "plan", "plant", "play", "player", "point", "police", "policy", "political",
    "poor", "popular", "position", "positive", "possible", "power", "practice", "prepare",
    "present", "pressure", "pretty", "prevent", "price", "private", "probably", "problem",
    "process", "produce", "product", "program", "project", "property", "protect", "prove",
    "provide", "public", "purpose", "push", "quality", "question", "quickly", "quite", "race",
    "radio", "raise", "range", "rate", "rather", "reach", "read", "ready", "real", "reality",
    "realize", "really", "reason", "receive", "recent", "recently", "record", "reduce", "reflect",
    "region", "relate", "remain", "remember", "remove", "report", "represent", "require",
    "research", "resource", "respond", "response", "rest", "result", "return", "reveal", "rich",
    "right", "rise", "risk", "road", "rock", "role", "room", "rule", "safe", "same", "save",
    "scene", "school", "science", "score", "season", "seat", "second", "section", "security",
    "seek", "seem", "sell", "send", "senior", "sense", "series", "serious", "serve", "service",
    "seven", "several", "shake", "share", "shoot", "short", "shot", "should", "shoulder", "show",
    "side", "sign", "similar", "simple", "simply", "since", "sing", "single", "sister", "site",
    "situation", "size", "skill", "skin", "small", "smile", "social", "society", "soldier",
    "some", "somebody", "someone", "something", "sometimes", "song", "soon", "sort", "sound",
    "source", "south", "southern", "space", "speak", "special", "specific", "speech", "spend",
    "sport", "spring", "staff", "stage", "stand", "standard", "star", "start", "state",
    "statement", "station", "stay", "step", "still", "stock", "stop", "store", "story",
    "strategy", "street", "strong", "structure", "student", "study", "stuff", "style", "subject",
    "success", "suddenly", "suffer", "suggest", "summer", "support", "sure", "surface", "system",
    "table", "take", "talk", "task", "teach", "teacher", "team", "technology", "television",
    "tell", "tend", "term", "test", "than", "thank", "that", "their", "them", "themselves",
    "then", "theory", "there", "these", "they", "thing", "think", "third", "this", "those",
    "though", "thought", "thousand", "threat", "three", "through", "throughout", "throw", "thus",
    "time", "today", "together", "tonight", "total", "tough", "toward", "town", "trade",
    "traditional", "training", "travel", "treat", "treatment", "tree", "trial", "trip", "trouble",
    "true", "truth", "turn", "type", "under", "understand", "unit", "until", "upon", "usually",
    "value", "various", "very", "victim", "view", "violence", "visit", "voice", "vote", "wait",
    "walk", "wall", "want", "watch", "water", "weapon", "wear", "week", "weight", "well", "west",
    "western", "what", "whatever", "when", "where", "whether", "which", "while", "white", "whole",
    "whom", "whose", "wide", "wife", "will", "window", "wish", "with", "within", "without",
    "woman", "wonder", "word", "work", "worker", "world", "worry", "would", "write", "writer",
    "wrong", "yard", "yeah", "year", "young", "yourself",
)  # fmt: skip


def scan_words(pages: int, per_page: int = 40, *, seed: int = 0) -> list[list[str]]:
    """Deterministic pages of distinct known words (seeded), for `make_scan_*`."""
    rng = random.Random(seed)
    return [rng.sample(KNOWN_WORDS, per_page) for _ in range(pages)]


def make_scan_pages(
    words_per_page: Sequence[Sequence[str]],
    *,
    dpi: int | Sequence[int] = 300,
    transforms: Sequence[str] | None = None,
) -> list[Image.Image]:
    """One grayscale ("L") page image per entry of `words_per_page`, transformed as asked.

    `transforms` has one entry per page (see the module docstring); None means all upright. `dpi` is
    one resolution for all pages or one per page.
    """
    if transforms is None:
        transforms = ["upright"] * len(words_per_page)
    dpis = _per_page_dpi(dpi, len(words_per_page))
    if len(transforms) != len(words_per_page):
        raise ValueError("give one transform per page")
    return [
        _transform(_draw_page(words, page_dpi), how, seed=number)
        for number, (words, how, page_dpi) in enumerate(zip(words_per_page, transforms, dpis, strict=True))
    ]


def make_scan_pdf(
    path: Path,
    words_per_page: Sequence[Sequence[str]],
    transforms: Sequence[str] | None = None,
    dpi: int | Sequence[int] = 300,
) -> None:
    """An image-only PDF (no text layer), one losslessly stored page image per page (img2pdf), each
    page sized by its own resolution."""
    images = make_scan_pages(words_per_page, dpi=dpi, transforms=transforms)
    dpis = _per_page_dpi(dpi, len(images))
    path.write_bytes(img2pdf.convert([_png(image, d) for image, d in zip(images, dpis, strict=True)], nodate=True))


def word_recall(expected: Sequence[str], text: str) -> float:
    """The share of `expected` words found in `text` (lower-case letter runs, each found word counted once)."""
    found = Counter(re.findall(r"[a-z]+", text.lower())) & Counter(expected)
    return sum(found.values()) / len(expected)


def _per_page_dpi(dpi: int | Sequence[int], pages: int) -> list[int]:
    dpis = [dpi] * pages if isinstance(dpi, int) else list(dpi)
    if len(dpis) != pages:
        raise ValueError("give one resolution per page")
    return dpis


def make_scan_tiff(
    path: Path,
    words_per_page: Sequence[Sequence[str]],
    transforms: Sequence[str] | None = None,
    dpi: int = 300,
) -> None:
    """A multi-page TIFF (LZW), its resolution recorded in the file."""
    images = make_scan_pages(words_per_page, dpi=dpi, transforms=transforms)
    first, *rest = images
    first.save(path, format="TIFF", save_all=True, append_images=rest, compression="tiff_lzw", dpi=(dpi, dpi))


def make_scan_jpeg(
    path: Path,
    words_per_page: Sequence[Sequence[str]],
    transforms: Sequence[str] | None = None,
    dpi: int = 300,
    *,
    exif_orientation: int | None = None,
) -> None:
    """A one-page JPEG scan (`words_per_page` has one entry). `exif_orientation` (1-8) is written as
    the EXIF Orientation tag, which tells a viewer how to turn the stored pixels (6: turn them 90
    degrees clockwise, which makes a "rot90" page upright)."""
    image = _single_page(words_per_page, transforms, dpi)
    exif = Image.Exif()
    if exif_orientation is not None:
        exif[0x0112] = exif_orientation
    image.save(path, format="JPEG", quality=90, dpi=(dpi, dpi), exif=exif.tobytes())


def make_scan_png(
    path: Path,
    words_per_page: Sequence[Sequence[str]],
    transforms: Sequence[str] | None = None,
    dpi: int = 300,
    *,
    record_dpi: bool = True,
) -> None:
    """A one-page PNG scan; with `record_dpi=False` the file carries no resolution at all."""
    path.write_bytes(_png(_single_page(words_per_page, transforms, dpi), dpi if record_dpi else None))


def _single_page(words_per_page: Sequence[Sequence[str]], transforms: Sequence[str] | None, dpi: int) -> Image.Image:
    if len(words_per_page) != 1:
        raise ValueError("a JPEG or PNG scan has exactly one page")
    (image,) = make_scan_pages(words_per_page, dpi=dpi, transforms=transforms)
    return image


def _png(image: Image.Image, dpi: int | None) -> bytes:
    out = io.BytesIO()
    if dpi is None:
        image.save(out, format="PNG")
    else:
        image.save(out, format="PNG", dpi=(dpi, dpi))
    return out.getvalue()


@cache
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    if _DEJAVU.is_file():
        return ImageFont.truetype(str(_DEJAVU), size)
    return ImageFont.load_default(size=size)


def _draw_page(words: Sequence[str], dpi: int) -> Image.Image:
    width, height = round(LETTER_INCHES[0] * dpi), round(LETTER_INCHES[1] * dpi)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    font = _font(round(FONT_PT * dpi / 72))
    margin = round(MARGIN_INCHES * dpi)
    line_height = round(FONT_PT * dpi / 72 * 1.7)
    space = draw.textlength("  ", font=font)
    x, y = float(margin), float(margin)
    for word in words:
        length = draw.textlength(word, font=font)
        if x > margin and x + length > width - margin:
            x, y = float(margin), y + line_height
        if y + line_height > height * 0.6:
            raise ValueError("too many words for one page")
        draw.text((x, y), word, font=font, fill=0)
        x += length + space
    return image


def _transform(image: Image.Image, how: str, *, seed: int = 0) -> Image.Image:
    parts = set(how.split("+"))
    skews = {part for part in parts if _SKEW.fullmatch(part)}
    unknown = parts - skews - {"upright", "rot90", "rot180", "noise", "lowcontrast"}
    if unknown or len(skews) > 1 or {"rot90", "rot180"} <= parts:
        raise ValueError(f"unknown transform {how!r}; expected a combination of {', '.join(TRANSFORMS)}")
    for skew in skews:
        angle = float(skew.removeprefix("skew"))
        image = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    if "rot90" in parts:
        image = image.transpose(Image.Transpose.ROTATE_90)
    if "rot180" in parts:
        image = image.transpose(Image.Transpose.ROTATE_180)
    if "noise" in parts:
        image = _speckle(image, seed)
    if "lowcontrast" in parts:
        image = image.point(lambda value: LOW_CONTRAST[0] + value * (LOW_CONTRAST[1] - LOW_CONTRAST[0]) // 255)
    return image


def _speckle(image: Image.Image, seed: int) -> Image.Image:
    """Dark specks of 1-2 pixels scattered over the page and as many light ones (they show in the ink)."""
    image = image.copy()
    draw = ImageDraw.Draw(image)
    rng = random.Random(seed)
    count = round(SPECKLE_DENSITY * image.width * image.height)
    for fill in (0, 255):
        for _ in range(count):
            x, y, size = rng.randrange(image.width), rng.randrange(image.height), rng.choice((0, 1))
            draw.rectangle((x, y, x + size, y + size), fill=fill)
    return image


def main(argv: list[str] | None = None) -> None:
    """`python -m docjobs.scans OUT.pdf [--pages N]`: a demo scan, pages upright, turned and askew."""
    parser = argparse.ArgumentParser(description="Write a synthetic image-only scan PDF.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--pages", type=int, default=3)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    transforms = [("upright", "rot90", "skew3", "rot180")[page % 4] for page in range(args.pages)]
    make_scan_pdf(args.out, scan_words(args.pages), transforms)


if __name__ == "__main__":
    main()
