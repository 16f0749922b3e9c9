"""Regular expressions that run in time linear in the text: RE2 (google-re2), never Python's backtracking `re`.

Redaction runs regexes on text from documents nobody vetted, and some of them come from tenants. In `re`,
`(a+)+$` on a line of `a`s runs for hours holding the GIL, so the worker's lease thread cannot heartbeat.
RE2 matches in linear time and refuses what it cannot match that way (backreferences, lookaround, ...):
a tenant's regex is compiled here when its policy is validated, so such a regex never gets past acceptance.

Positions are character offsets in the `str` searched (RE2 works on its UTF-8 bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import re2

# RE2's errors for what it cannot do in linear time: backreferences (`\1`), lookaround, atomic groups and
# conditionals (`(?=`, `(?<!`, `(?>`, `(?(`), possessive quantifiers (`a*+`).
_UNSUPPORTED_ERRORS = ("invalid escape sequence", "invalid perl operator", "bad repetition operator")
UNSUPPORTED_FEATURES = "backreferences, lookahead, lookbehind, atomic groups, possessive quantifiers, conditionals"
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # UTF-8 bytes that do not start a character


class UnsupportedRegex(ValueError):
    """A regex that needs a feature the linear-time engine does not have."""


def _compile(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would write the pattern itself to stderr
    return re2.compile(pattern.encode("utf-8"), options)


@dataclass(frozen=True)
class LinearRegex:
    """A regex compiled by RE2 for UTF-8 text.

    The part a match reports is its `redact` group if it has one (a tenant may mark the part to remove so), else
    the whole match. A built-in pattern stands in for `re`'s lookaround with groups that consume the context
    instead: `before` (what a lookbehind would check: the search for the next match starts `reach_back`
    characters early so that it can be read again) and `after` (a lookahead: the next search resumes at its
    start). Neither is part of what the match reports or of what later matches may not overlap.
    """

    compiled: Any  # an re2 pattern over UTF-8 bytes (google-re2 ships no type information)
    redact: int = 0  # group numbers; 0: none
    before: int = 0
    after: int = 0
    reach_back: int = 0

    @classmethod
    def compile(cls, regex: str) -> LinearRegex:
        """A regex without context groups: a tenant's, for one. Raises UnsupportedRegex for a feature RE2
        lacks, ValueError for a regex that is not valid at all (or too large for RE2's memory budget)."""
        try:
            compiled = _compile(regex)
        except re2.error as error:
            reason = error.args[0].decode("utf-8", "replace") if error.args else "rejected"
            if reason.startswith(_UNSUPPORTED_ERRORS):
                raise UnsupportedRegex(
                    f"uses a feature the linear-time regex engine (RE2) does not support ({reason}); "
                    f"refused: {UNSUPPORTED_FEATURES}"
                ) from None
            raise ValueError(f"not a valid regular expression for the linear-time engine (RE2): {reason}") from None
        return cls(compiled, redact=compiled.groupindex.get(b"redact", 0))

    @classmethod
    def builtin(cls, pattern: str, *, reach_back: int) -> LinearRegex:
        """A shipped pattern with `before`, `redact` and `after` groups; `reach_back` is the longest `before`."""
        compiled = _compile(pattern)
        groups = compiled.groupindex
        return cls(compiled, groups[b"redact"], groups[b"before"], groups[b"after"], reach_back)

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """The (start, end) of what each match reports, in text order, as `re.finditer` would find them: the
        next search starts where the previous match ended, and no match overlaps the one before it."""
        data = text.encode("utf-8", "surrogatepass")
        chars = _CharOffsets(data)
        resume = search_from = 0
        while search_from <= len(data) and (hit := self.compiled.search(data, search_from)) is not None:
            start = hit.end(self.before) if self.before else hit.start()
            end = hit.start(self.after) if self.after else hit.end()
            if start < resume:  # only its context may reach back into the previous match: look further on
                search_from = _next_char(data, hit.start())
                continue
            reported = hit.span(self.redact)
            if reported[0] >= 0:
                yield chars(reported[0]), chars(reported[1])
            resume = end if end > start else _next_char(data, end)
            search_from = _back(data, resume, self.reach_back)


class _CharOffsets:
    """Byte offsets in `data` as character offsets, counted incrementally (the offsets asked for mostly grow)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.ascii = data.isascii()
        self.byte = self.char = 0

    def __call__(self, offset: int) -> int:
        if self.ascii:
            return offset
        if offset >= self.byte:
            self.char += len(self.data[self.byte : offset].translate(None, _CONTINUATION_BYTES))
        else:
            self.char -= len(self.data[offset : self.byte].translate(None, _CONTINUATION_BYTES))
        self.byte = offset
        return self.char


def _next_char(data: bytes, offset: int) -> int:
    offset += 1
    while offset < len(data) and data[offset] in _CONTINUATION_BYTES:
        offset += 1
    return offset


def _back(data: bytes, offset: int, chars: int) -> int:
    for _ in range(chars):
        if offset == 0:
            break
        offset -= 1
        while offset > 0 and data[offset] in _CONTINUATION_BYTES:
            offset -= 1
    return offset
