"""The code pages' check digits (tests/fixtures/codes.py) agree with published examples, and a flipped character
fails them; the token matching of the code-reading benchmark counts whole tokens only."""

from __future__ import annotations

import pytest

from tests.fixtures.codes import (
    CODE_KINDS,
    code_pages,
    found_tokens,
    is_iso6346,
    is_ups,
    iso6346_check_digit,
    ups_check_digit,
)

pytestmark = pytest.mark.unit

# ISO 6346's own example (the standard's Annex A, quoted by Wikipedia's "ISO 6346"): check digit 3.
CONTAINER = "CSQU3054383"
# UPS's widely published sample 1Z number, and the one in crcx/parable's examples/ups-tracking.p; the algorithm is
# that of jkeen/tracking_number (lib/ups.rb) and jbittel/drogher (drogher/shippers/ups.py).
UPS = ("1Z999AA10123456784", "1Z2203480342495730")


def flips(code: str, at: int) -> list[str]:
    """`code` with the character at `at` replaced by every other character of its class (digit or letter)."""
    pool = "0123456789" if code[at].isdigit() else "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [code[:at] + other + code[at + 1 :] for other in pool if other != code[at]]


def test_iso6346_check_digit_of_the_published_example() -> None:
    assert iso6346_check_digit(CONTAINER[:10]) == "3"
    assert is_iso6346(CONTAINER)


def test_iso6346_fails_a_flipped_digit() -> None:
    # a digit's weight 2^position is never 0 mod 11: every other digit in its place changes the sum mod 11
    for at in range(4, 11):
        for flipped in flips(CONTAINER, at):
            assert not is_iso6346(flipped), flipped
    assert not is_iso6346("CSQX3054383")  # no such category
    # letters whose values differ by 11 (C = 13, M = 24) are the check's known blind spot
    assert is_iso6346("MSQU3054383")


@pytest.mark.parametrize("code", UPS)
def test_ups_check_digit_of_published_examples(code: str) -> None:
    assert ups_check_digit(code[2:17]) == code[17]
    assert is_ups(code)


@pytest.mark.parametrize("code", UPS)
def test_ups_fails_a_flipped_digit(code: str) -> None:
    # weights 1 and 2 mod 10: every other digit in a position changes the sum mod 10 (weight 2: but one)
    digits = [at for at in range(2, 18) if code[at].isdigit()]
    for at in digits:
        failed = [flipped for flipped in flips(code, at) if not is_ups(flipped)]
        assert len(failed) >= (9 if at == 17 or (at - 2) % 2 == 0 else 8), (at, failed)
    assert not is_ups("1Z12345E0205271688")  # published as a sample, its check digit is wrong (6 is right)


def test_generated_codes_pass_their_checks() -> None:
    pages = code_pages(3, 42, seed=7)
    assert pages == code_pages(3, 42, seed=7)
    kinds = [entry.kind for page in pages for entry in page]
    assert {kind: kinds.count(kind) for kind in CODE_KINDS} == dict.fromkeys(CODE_KINDS, 18)
    assert kinds.count("word") == 126
    for entry in (entry for page in pages for entry in page):
        if entry.kind == "ups":
            assert is_ups(entry.token), entry
        if entry.kind == "iso6346":
            assert is_iso6346(entry.token), entry


def test_found_only_as_whole_exact_tokens() -> None:
    expected = [("iso6346", CONTAINER), ("date", "07.12.2026"), ("amount", "1,234.56"), ("mrn", "MRN-0012345678")]
    assert found_tokens(expected, f"Cntr:{CONTAINER} Due: 07.12.2026. USD: 1,234.56 MRN-0012345678") == [True] * 4
    assert found_tokens(expected, "CSQU 3054383 07.12.20266 1.234.56 xMRN-0012345678") == [False] * 4
    assert found_tokens([("word", "case"), ("word", "case")], "case Case") == [True, False]
