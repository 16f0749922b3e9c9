"""What counts as sensitive: the built-in patterns and a policy's own regexes, and finding them in text.

A pattern may mark the part to remove with a group named `redact` (the date after a "DOB" label, not the
label itself); otherwise the whole match is removed. Custom regexes are named `custom1`, `custom2`, ... in
policy order: their text could itself be content, so it never travels with a count or a leak report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from docjobs.domain.linear_regex import LinearRegex
from docjobs.domain.policy import RedactPolicy

# The built-in patterns run on RE2 (linear time, see docjobs.domain.linear_regex), which has no lookaround and whose
# \d, \s, \w are ASCII-only. So they are spelled with Python's Unicode classes, and each lookaround of their
# former `re` form (kept in the comments) is a `before` or `after` group that consumes the context instead.
_D = r"\p{Nd}"  # \d
_SPACES = r"\t-\r\x1c-\x20\x85\p{Z}"  # \s (what str.isspace accepts), inside a class
_SPACE = f"[{_SPACES}]"
_NO_DIGIT_BEFORE = r"(?P<before>^|^-|[^\p{Nd}-]|\P{Nd}-)"  # (?<!\d)(?<!\d-)
_NO_DIGIT_AFTER = r"(?P<after>$|[^\p{Nd}-]|-$|-\P{Nd})"  # (?!-?\d)


def _digits_not_all(digit: str, count: int) -> str:
    """`count` digits, not all of them `digit`: `(?!00)\\d{2}` without the lookahead."""
    choices = [f"{digit * same}[^\\P{{Nd}}{digit}]{_D}{{{count - same - 1}}}" for same in range(count)]
    return f"(?:{'|'.join(choices)})"


_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DATE = (
    rf"(?:{_D}{{1,2}}[/.-]{_D}{{1,2}}[/.-](?:{_D}{{4}}|{_D}{{2}})"  # 03/14/1975, 14.03.75
    rf"|{_D}{{4}}-{_D}{{1,2}}-{_D}{{1,2}}"  # 1975-03-14
    rf"|{_MONTH}{_SPACE}+{_D}{{1,2}}(?:st|nd|rd|th)?,?{_SPACE}+{_D}{{4}}"  # March 14, 1975
    rf"|{_D}{{1,2}}(?:st|nd|rd|th)?{_SPACE}+{_MONTH},?{_SPACE}+{_D}{{4}})"  # 14 Mar 1975
)
_DOB_LABEL = (  # \b(?:DOB|D\.O\.B\.?|Date\s+of\s+birth|Birth\s*date|Born(?:\s+on)?): every label starts with a letter
    rf"(?P<before>^|[^\p{{L}}\p{{N}}_])(?:DOB|D\.O\.B\.?|Date{_SPACE}+of{_SPACE}+birth|Birth{_SPACE}*date"
    rf"|Born(?:{_SPACE}+on)?)"
)
_SEPARATOR = rf"(?:{_SPACE}*-{_SPACE}*|{_SPACE})"  # (?:\s*-\s*|\s)
# (?!000|666|9)\d{3}
_SSN_AREA = rf"(?:[^\P{{Nd}}069]{_D}{{2}}|0{_digits_not_all('0', 2)}|6{_digits_not_all('6', 2)})"

BUILTIN_PATTERNS: dict[str, LinearRegex] = {
    # Area 000, 666 and 9xx are never issued; group 00 and serial 0000 neither. Hyphens or spaces. Bounded
    # by digits, not words, so the number is still found in text whose spaces were squeezed out.
    # (?<!\d)(?<!\d-)(?!000|666|9)\d{3}(?:\s*-\s*|\s)(?!00)\d{2}(?:\s*-\s*|\s)(?!0000)\d{4}(?!-?\d)
    "ssn": LinearRegex.builtin(
        rf"{_NO_DIGIT_BEFORE}(?P<redact>{_SSN_AREA}{_SEPARATOR}{_digits_not_all('0', 2)}{_SEPARATOR}"
        rf"{_digits_not_all('0', 4)}){_NO_DIGIT_AFTER}",
        reach_back=2,
    ),
    # North American numbers: (555) 123-4567, 555-123-4567, 555.123.4567, +1 555 123 4567.
    # (?<![\d+])(?<!\d-)(?:\+?1[\s.-]?)?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.-])\d{3}[\s.-]\d{4}(?!-?\d)
    "phone": LinearRegex.builtin(
        rf"(?P<before>^|^-|[^\p{{Nd}}+-]|\P{{Nd}}-)(?P<redact>(?:\+?1[{_SPACES}.-]?)?"
        rf"(?:\([2-9]{_D}{{2}}\){_SPACE}?|[2-9]{_D}{{2}}[{_SPACES}.-]){_D}{{3}}[{_SPACES}.-]{_D}{{4}}){_NO_DIGIT_AFTER}",
        reach_back=2,
    ),
    # (?<![\w.%+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])
    "email": LinearRegex.builtin(
        r"(?P<before>^|[^\p{L}\p{N}_.%+-])(?P<redact>[\p{L}\p{N}_.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
        r"\.[A-Za-z]{2,})(?P<after>$|[^\p{L}\p{N}_-])",
        reach_back=1,
    ),
    # A date of birth is a date near its label; only the date is removed.
    # (?i)\bLABEL[^\d\n]{0,20}?(?P<redact>DATE)(?!\d)
    "dob": LinearRegex.builtin(
        rf"(?i){_DOB_LABEL}[^\p{{Nd}}\n]{{0,20}}?(?P<redact>{_DATE})(?P<after>$|\P{{Nd}})", reach_back=1
    ),
}  # "mrn" comes from the policy's mrn_format (each organization writes its record numbers its own way)


class Finder(Protocol):
    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """Where it matches in `text`, in order, without overlaps (character offsets)."""
        ...


@dataclass(frozen=True)
class NamedPattern:
    name: str
    regex: Finder  # a LinearRegex, or the literal values of `value_pattern`


@dataclass(frozen=True)
class Match:
    pattern: str
    start: int
    end: int


def compile_patterns(policy: RedactPolicy) -> list[NamedPattern]:
    """The policy's built-in patterns (in its order), then its custom regexes as custom1, custom2, ..."""
    named = [
        NamedPattern(name, LinearRegex.compile(policy.mrn_format) if name == "mrn" else BUILTIN_PATTERNS[name])
        for name in policy.patterns
    ]
    named += [
        NamedPattern(f"custom{index}", LinearRegex.compile(regex)) for index, regex in enumerate(policy.regexes, 1)
    ]
    return named


def find_matches(text: str, patterns: Iterable[NamedPattern]) -> list[Match]:
    """Every match of every pattern, in text order; overlapping or touching matches become one match that
    covers them all and keeps the name of the one that starts first (the longest, on a tie)."""
    found: list[Match] = []
    for named in patterns:
        for start, end in named.regex.spans(text):
            if end > start:
                found.append(Match(named.name, start, end))
    found.sort(key=lambda match: (match.start, -match.end))
    merged: list[Match] = []
    for match in found:
        if merged and match.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Match(last.pattern, last.start, max(last.end, match.end))
        else:
            merged.append(match)
    return merged


def find_matches_loose(text: str, patterns: Sequence[NamedPattern]) -> list[Match]:
    """`find_matches`, plus the matches that stray whitespace hides ("078-05- 1120", "jane.doe@ example.org",
    "07 8-05-1120": extractors disagree about kerning gaps). Whitespace is squeezed out where it touches
    punctuation or sits between digits, never between two words, so a match cannot swallow its neighbours;
    positions of the extra matches are mapped back into `text`."""
    found = find_matches(text, patterns)
    squeezed, kept = _squeeze_gaps(text)
    covered = {i for match in found for i in range(match.start, match.end)}
    for match in find_matches(squeezed, patterns):
        start, end = kept[match.start], kept[match.end - 1] + 1
        if not covered.intersection(range(start, end)):
            found.append(Match(match.pattern, start, end))
    return sorted(found, key=lambda match: match.start)


def _squeeze_gaps(text: str) -> tuple[str, list[int]]:
    """`text` without its squeezable runs of whitespace, and where each of its characters is in `text`. Each
    run is judged once, by the characters on either side of it (linear, whatever the text)."""
    kept: list[int] = []
    start = 0
    for gap in _WHITESPACE_RUN.finditer(text):
        kept += range(start, gap.start())
        if not _squeezable(text[gap.start() - 1 : gap.start()], text[gap.end() : gap.end() + 1]):
            kept += range(gap.start(), gap.end())
        start = gap.end()
    kept += range(start, len(text))
    return "".join(map(text.__getitem__, kept)), kept


_WHITESPACE_RUN = re.compile(r"\s+")  # a fixed pattern: linear in `re` too (\s is what str.isspace accepts)


def _squeezable(before: str, after: str) -> bool:
    if not before or not after:
        return False
    if before.isdigit() and after.isdigit():
        return True
    return not before.isalnum() or not after.isalnum()


def value_pattern(values: Iterable[str]) -> NamedPattern:
    """A pattern named "value" that matches any of `values` wherever it appears, whitespace and case aside:
    to remove every occurrence of what the patterns found once (a birth date repeated without its label),
    which the gate would otherwise report as a leak. Matches nothing when `values` is empty."""
    variants = {"".join(map(_fold, value)) for value in values}
    return NamedPattern("value", _Values(tuple(sorted(variants - {""}, key=len, reverse=True))))


@dataclass(frozen=True)
class _Values:
    """Finds literal values with plain string search: thousands of values (a long document's) would make a
    regex alternation too large for RE2's memory budget, and slow in any engine."""

    variants: tuple[str, ...]  # folded, without whitespace, longest first

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """As a regex `v\\s*a\\s*l|...` of the variants (longest first) would, ignoring case."""
        kept = [index for index, char in enumerate(text) if not char.isspace()]
        folded = "".join(_fold(text[index]) for index in kept)
        longest: dict[int, int] = {}  # start in `folded` -> length of the longest variant found there
        for variant in self.variants:
            at = folded.find(variant)
            while at >= 0:
                longest.setdefault(at, len(variant))
                at = folded.find(variant, at + 1)
        resume = 0
        for start in sorted(longest):
            if start >= resume:
                resume = start + longest[start]
                yield kept[start], kept[resume - 1] + 1


def _fold(char: str) -> str:
    """`char` case-folded, without whitespace; one character stays one (so that positions still map)."""
    if char.isspace():
        return ""
    folded = char.casefold()
    return folded if len(folded) == 1 else char


def squeeze(text: str) -> str:
    """`text` without any whitespace, case-folded: how a value is compared with extracted text."""
    return "".join(text.split()).casefold()


def sensitive_kinds(text: str, patterns: Sequence[NamedPattern], values: frozenset[str]) -> set[str]:
    """What in `text` is sensitive: "pattern:<name>" for each pattern that matches, "value" when a known
    value appears in it (whitespace and case ignored). Empty when nothing does."""
    kinds = {f"pattern:{match.pattern}" for match in find_matches_loose(text, patterns)}
    squeezed = squeeze(text)
    if any(value and value in squeezed for value in map(squeeze, values)):
        kinds.add("value")
    return kinds
