"""What counts as sensitive: the built-in patterns and a policy's own regexes, and finding them in text.

A pattern may mark the part to remove with a group named `redact` (the date after a "DOB" label, not the
label itself); otherwise the whole match is removed. Custom regexes are named `custom1`, `custom2`, ... in
policy order: their text could itself be content, so it never travels with a count or a leak report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from docjobs.models import RedactPolicy

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DATE = (
    r"(?:\d{1,2}[/.-]\d{1,2}[/.-](?:\d{4}|\d{2})"  # 03/14/1975, 14.03.75
    r"|\d{4}-\d{1,2}-\d{1,2}"  # 1975-03-14
    rf"|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"  # March 14, 1975
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?\s+\d{{4}})"  # 14 Mar 1975
)
_DOB_LABEL = r"\b(?:DOB|D\.O\.B\.?|Date\s+of\s+birth|Birth\s*date|Born(?:\s+on)?)"

BUILTIN_PATTERNS: dict[str, re.Pattern[str]] = {
    # Area 000, 666 and 9xx are never issued; group 00 and serial 0000 neither. Hyphens or spaces. Bounded
    # by digits, not words, so the number is still found in text whose spaces were squeezed out.
    "ssn": re.compile(r"(?<!\d)(?<!\d-)(?!000|666|9)\d{3}(?:\s*-\s*|\s)(?!00)\d{2}(?:\s*-\s*|\s)(?!0000)\d{4}(?!-?\d)"),
    # North American numbers: (555) 123-4567, 555-123-4567, 555.123.4567, +1 555 123 4567.
    "phone": re.compile(
        r"(?<![\d+])(?<!\d-)(?:\+?1[\s.-]?)?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.-])\d{3}[\s.-]\d{4}(?!-?\d)",
    ),
    "email": re.compile(r"(?<![\w.%+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"),
    # A date of birth is a date near its label; only the date is removed.
    "dob": re.compile(rf"{_DOB_LABEL}[^\d\n]{{0,20}}?(?P<redact>{_DATE})(?!\d)", re.IGNORECASE),
}  # "mrn" comes from the policy's mrn_format (each organization writes its record numbers its own way)


@dataclass(frozen=True)
class NamedPattern:
    name: str
    regex: re.Pattern[str]


@dataclass(frozen=True)
class Match:
    pattern: str
    start: int
    end: int


def compile_patterns(policy: RedactPolicy) -> list[NamedPattern]:
    """The policy's built-in patterns (in its order), then its custom regexes as custom1, custom2, ..."""
    named = [
        NamedPattern(name, re.compile(policy.mrn_format) if name == "mrn" else BUILTIN_PATTERNS[name])
        for name in policy.patterns
    ]
    named += [NamedPattern(f"custom{index}", re.compile(regex)) for index, regex in enumerate(policy.regexes, 1)]
    return named


def find_matches(text: str, patterns: Iterable[NamedPattern]) -> list[Match]:
    """Every match of every pattern, in text order; overlapping or touching matches become one match that
    covers them all and keeps the name of the one that starts first (the longest, on a tie)."""
    found: list[Match] = []
    for named in patterns:
        for hit in named.regex.finditer(text):
            start, end = hit.span("redact") if "redact" in named.regex.groupindex else hit.span()
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
    kept = [i for i, char in enumerate(text) if not (char.isspace() and _squeezable(text, i))]
    squeezed = "".join(text[i] for i in kept)
    covered = {i for match in found for i in range(match.start, match.end)}
    for match in find_matches(squeezed, patterns):
        start, end = kept[match.start], kept[match.end - 1] + 1
        if not covered.intersection(range(start, end)):
            found.append(Match(match.pattern, start, end))
    return sorted(found, key=lambda match: match.start)


def _squeezable(text: str, index: int) -> bool:
    before, after = text[:index].rstrip()[-1:], text[index:].lstrip()[:1]
    if not before or not after:
        return False
    if before.isdigit() and after.isdigit():
        return True
    return not before.isalnum() or not after.isalnum()


def value_pattern(values: Iterable[str]) -> NamedPattern:
    """A pattern named "value" that matches any of `values` wherever it appears, whitespace and case aside:
    to remove every occurrence of what the patterns found once (a birth date repeated without its label),
    which the gate would otherwise report as a leak. Matches nothing when `values` is empty."""
    variants = sorted({squeeze(value) for value in values} - {""}, key=len, reverse=True)
    alternatives = [r"\s*".join(re.escape(char) for char in variant) for variant in variants]
    return NamedPattern("value", re.compile("|".join(alternatives) or r"(?!)", re.IGNORECASE))


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
