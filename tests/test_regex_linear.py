"""Redaction regexes run in linear time: tenant regexes and built-in patterns on RE2, the squeeze linear too.

A regex that needs what RE2 lacks (backreferences, lookaround, ...) is refused when the policy is validated:
by the model, by `starter.py` before it contacts any server, and by the API as `422 policy.invalid`.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import re2
from pydantic import ValidationError

from docjobs.api.app import create_app
from docjobs.domain.linear_regex import LinearRegex, UnsupportedRegex
from docjobs.domain.policy import RedactPolicy
from docjobs.pdf.redaction.patterns import BUILTIN_PATTERNS, compile_patterns, find_matches, find_matches_loose
from docjobs.settings.tenants import TenantBook, add_tenant
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import REPO

BUILTINS = compile_patterns(RedactPolicy(patterns=("ssn", "phone", "email", "dob", "mrn")))
REDOS = [r"(a+)+$", r"(a|aa)*b", r"(.*a){20}b", r"(\w+\s?)*!x"]
LINEAR_GROWTH = 10  # the most 4x the input may cost 4x over: about 4 when linear, 16 when quadratic
UNSUPPORTED = [r"(\w)\1", r"(?P<x>a)(?P=x)", r"x(?=y)", r"(?<!x)y", r"(?<=x)y", r"(?!x)y", r"a*+", r"(?>a+)b"]


def growth(work: Callable[[int], object], size: int) -> float:
    """How much longer `work(4 * size)` takes than `work(size)`, best of five each: about 4 when the work is
    linear, 16 when quadratic (and a backtracking regex would not even finish the first run). The two sizes take
    turns, so that a machine busy with other work for a while slows both alike, not the one that ran then."""
    times: dict[int, list[float]] = {size: [], 4 * size: []}
    for _ in range(5):
        for n in times:
            started = time.perf_counter()
            work(n)
            times[n].append(time.perf_counter() - started)
    return min(times[4 * size]) / min(times[size])


# --- tenant regexes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("regex", REDOS)
def test_catastrophic_regexes_run_on_re2_in_linear_time(regex: str) -> None:
    (custom,) = compile_patterns(RedactPolicy(regexes=(regex,)))
    assert isinstance(custom.regex, LinearRegex) and isinstance(custom.regex.compiled, re2._Regexp)
    assert find_matches_loose("a" * 200_000 + "!", [custom]) == []  # `re` would not finish with 30 of them


@pytest.mark.parametrize("regex", UNSUPPORTED)
def test_a_regex_that_needs_backtracking_is_refused_by_the_policy(regex: str) -> None:
    for policy in ({"regexes": (regex,)}, {"mrn_format": regex}):
        with pytest.raises(ValidationError, match="linear-time regex engine") as refused:
            RedactPolicy.model_validate(policy)
        assert isinstance(refused.value.errors()[0]["ctx"]["error"], UnsupportedRegex)


def test_an_invalid_regex_is_still_called_invalid() -> None:
    with pytest.raises(ValidationError, match="not a valid regular expression") as refused:
        RedactPolicy(regexes=("[0-9",))
    assert not isinstance(refused.value.errors()[0]["ctx"]["error"], UnsupportedRegex)


def test_tenant_regexes_find_what_re_finditer_finds_in_character_offsets() -> None:
    text = "é€ id 12 and 345, 😀 6789; K-2024 K-77 ﬁle 12"
    for regex in [r"\d+", r"K-\d{2,4}", r"id (?P<redact>\d+)", r"\d*", r"[0-9]{2}|\d{3}"]:
        expected = [m.span("redact") if "redact" in m.re.groupindex else m.span() for m in re.finditer(regex, text)]
        assert [span for span in LinearRegex.compile(regex).spans(text) if span[1] > span[0]] == [
            span for span in expected if span[1] > span[0]
        ], regex


# --- built-in patterns ------------------------------------------------------------------------------------

# Their former `re` forms, with lookaround: the oracle the RE2 forms must agree with.
_MONTH = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"  # noqa: E501
_DATE = (
    rf"(?:\d{{1,2}}[/.-]\d{{1,2}}[/.-](?:\d{{4}}|\d{{2}})|\d{{4}}-\d{{1,2}}-\d{{1,2}}"
    rf"|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?\s+\d{{4}})"
)
BACKTRACKING_FORMS = {
    "ssn": re.compile(r"(?<!\d)(?<!\d-)(?!000|666|9)\d{3}(?:\s*-\s*|\s)(?!00)\d{2}(?:\s*-\s*|\s)(?!0000)\d{4}(?!-?\d)"),
    "phone": re.compile(
        r"(?<![\d+])(?<!\d-)(?:\+?1[\s.-]?)?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.-])\d{3}[\s.-]\d{4}(?!-?\d)"
    ),
    "email": re.compile(r"(?<![\w.%+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"),
    "dob": re.compile(
        rf"\b(?:DOB|D\.O\.B\.?|Date\s+of\s+birth|Birth\s*date|Born(?:\s+on)?)[^\d\n]{{0,20}}?(?P<redact>{_DATE})(?!\d)",
        re.IGNORECASE,
    ),
}


ARABIC_INDIC_3_0 = "\u0663\u0660"  # Unicode digits: \\d in `re`, \\p{Nd} in RE2
SEPARATORS = ["-", " ", " - ", "\u00a0", ".", "", "--", "/", "\n", "-\u2003", "\t", "-"]
LABELS = ["DOB", "dob", "D.O.B.", "Date of birth", "date  of\nbirth", "Birthdate", "born on", "xDOB", "\u00e9DOB"]
MONTHS = ["Mar", "March", "Sept.", "sep", "MAY", "Dec."]
FILLERS = ["", " ", "x", "-", "+", "1", "(", ")", ".", "\u00e9", "\n", "0", "-5", ARABIC_INDIC_3_0, "_"]


def near_misses(rng: random.Random) -> str:
    """Text dense with values and lookalikes: digits next to digits, hyphens, Unicode digits and spaces."""
    pick = rng.choice

    def digits(count: int) -> str:
        return "".join(pick("0123456789" * 4 + ARABIC_INDIC_3_0 + "96") for _ in range(count))

    def ssn() -> str:
        area, group, serial = pick([digits(3), "000", "666", "9" + digits(2)]), pick([digits(2), "00"]), digits(4)
        return area + pick(SEPARATORS) + group + pick(SEPARATORS) + pick([serial, "0000"])

    def phone() -> str:
        area = pick(["(" + digits(3) + ")" + pick(["", " "]), digits(3) + pick(SEPARATORS)])
        return pick(["", "+1", "1", "+1 ", "1-", "+"]) + area + digits(3) + pick(SEPARATORS) + digits(4)

    def dob() -> str:
        numeric = digits(pick([1, 2])) + pick("/.-") + digits(pick([1, 2])) + pick("/.-") + digits(pick([2, 3, 4]))
        named = pick(MONTHS) + pick([" ", ""]) + digits(2) + pick(["", "th"]) + pick(["", ","]) + " " + digits(4)
        date = pick([numeric, digits(4) + "-" + digits(1) + "-" + digits(2), named])
        return pick(LABELS) + pick([": ", " ", "", " (yyyy-mm-dd): ", "\n"]) + date

    def email() -> str:
        domain = pick(["example.org", "m.ex.co.uk", "b.c"])
        return pick(["jane.doe", "j_d+t", "x", "\u00e9"]) + pick(["@", "@ "]) + domain

    def number() -> str:
        return digits(pick([1, 2, 5]))

    makers = [ssn, phone, dob, email, number]
    return "".join(pick(FILLERS) + pick(makers)() for _ in range(rng.randint(1, 5))) + pick(FILLERS)


def test_builtin_patterns_find_exactly_what_their_lookaround_forms_found() -> None:
    rng = random.Random(11)
    found = dict.fromkeys(BACKTRACKING_FORMS, 0)
    for _ in range(10_000):
        text = near_misses(rng)
        for name, former in BACKTRACKING_FORMS.items():
            expected = [m.span("redact") if "redact" in former.groupindex else m.span() for m in former.finditer(text)]
            assert list(BUILTIN_PATTERNS[name].spans(text)) == expected, (name, text)
            found[name] += len(expected)
    assert min(found.values()) > 25, found  # the texts did exercise every pattern


def test_builtin_patterns_are_re2_and_report_character_offsets() -> None:
    assert all(isinstance(pattern.compiled, re2._Regexp) for pattern in BUILTIN_PATTERNS.values())
    text = "😀 ﬁle é SSN 078-05-1120; ☎ (555) 123-4567, mail: zoë.doe@example.org DOB: 14 März 1975 DOB 03/14/1975"
    assert [(m.pattern, text[m.start : m.end]) for m in find_matches(text, BUILTINS)] == [
        ("ssn", "078-05-1120"),
        ("phone", "(555) 123-4567"),
        ("email", "zoë.doe@example.org"),
        ("dob", "03/14/1975"),
    ]


def test_builtin_patterns_stay_linear_on_long_pages() -> None:
    page = "078-05-1120 555.123.4567 a.b@c.de DOB 1975-03-14 1" * 8000
    assert growth(lambda n: find_matches(page[: n * 50], BUILTINS), 2000) < LINEAR_GROWTH


# --- the whitespace squeeze -------------------------------------------------------------------------------


def test_the_whitespace_squeeze_is_linear_on_a_million_character_page() -> None:
    page = "ab 12 - 34 cd . ef\u00a0" * 55_556  # 1,000,008 characters, most of its gaps squeezable
    found = find_matches_loose(page[:1_000_000], BUILTINS)
    assert found == []
    assert growth(lambda n: find_matches_loose(page[:n], BUILTINS), 250_000) < LINEAR_GROWTH


# --- refused at acceptance: CLI and API -------------------------------------------------------------------


def test_the_cli_refuses_an_unsupported_regex_before_contacting_any_server(tmp_path: Path) -> None:
    document = tmp_path / "doc.pdf"
    document.write_bytes(b"%PDF-1.7\n%%EOF\n")
    with socket.socket() as cluster:  # a "cluster" that records whether anyone connected
        cluster.bind(("127.0.0.1", 0))
        cluster.listen()
        cluster.setblocking(False)
        env = {**os.environ, "DOCJOBS_DATA_DIR": str(tmp_path / "data")}
        env["DOCJOBS_TEMPORAL_ADDRESS"] = f"127.0.0.1:{cluster.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "starter.py", "--json", "submit", str(document), "--redact", r"(\w)\1"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        with pytest.raises(BlockingIOError):
            cluster.accept()
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    assert (done.returncode, payload["error"]) == (2, "config"), done
    assert "linear-time regex engine" in payload["message"]


async def test_the_api_refuses_an_unsupported_regex_as_policy_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app is not started (no lifespan, no Temporal client): the refusal comes before any job is made."""
    monkeypatch.setenv("DOCJOBS_DATA_DIR", str(tmp_path))
    tenants = tmp_path / "tenants.json"
    key = add_tenant(tenants, "acme")
    app = create_app(TemporalSettings.from_env(), tenants=TenantBook(tenants))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
        for regex, message in [(r"(\w)\1", "linear-time regex engine"), ("[0-9", "not valid")]:
            refused = await http.post(
                "/v1/jobs",
                files={"file": ("doc.pdf", b"%PDF-1.7\n%%EOF\n", "application/pdf")},
                data={"policy": json.dumps({"redact": ["ssn", regex]})},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert (refused.status_code, refused.json()["code"]) == (422, "policy.invalid"), refused.text
            assert message in refused.json()["message"] and regex not in refused.text
