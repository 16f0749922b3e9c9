"""Finding what to redact and proving it is gone: patterns, locate, document scrubbing and the gate.

Everything runs on the generated fixtures of `tests.fixtures.redact_samples` (real PDFs, read back with pdfminer,
pikepdf, pypdf and poppler's pdftotext). Positions are checked against the font metrics the fixtures were
drawn with, in default user space, including a page with an offset MediaBox and pages with /Rotate.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from pypdf import PdfReader
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, StreamObject, TextStringObject
from reportlab.pdfbase.pdfmetrics import registerFont, stringWidth
from reportlab.pdfbase.ttfonts import TTFont

from docjobs.domain.errors import FailureCode, Outcome
from docjobs.domain.policy import RedactPolicy
from docjobs.pdf.redaction.gate import GateReport, check_redaction
from docjobs.pdf.redaction.locate import PAD, Located, locate
from docjobs.pdf.redaction.patterns import (
    BUILTIN_PATTERNS,
    Match,
    NamedPattern,
    compile_patterns,
    find_matches,
    find_matches_loose,
    value_pattern,
)
from docjobs.pdf.redaction.regions import PageRegions, Rect
from docjobs.pdf.redaction.scrub import scrub_document
from docjobs.pdf.redaction.sites import SITE_KINDS
from tests.fixtures.redact_samples import (
    EMAIL,
    EMAIL_PREFIX,
    EMAIL_SUFFIX,
    EMAIL_Y,
    FIXTURES,
    FONT_SIZE,
    LIGATURE_EMAIL,
    SSN,
    SSN_PREFIX,
    SSN_SUFFIX,
    SSN_Y,
    VERA_TTF,
    bench_values,
    make_redaction_bench_pdf,
    text_width,
)

REPO = Path(__file__).resolve().parent.parent
PATTERNS = compile_patterns(RedactPolicy(patterns=("ssn", "phone", "email", "dob", "mrn")))
TEXT_FIXTURES = [name for name, spec in FIXTURES.items() if spec.where in ("text", "type3")]
DOCUMENT_FIXTURES = [name for name, spec in FIXTURES.items() if spec.where == "document"]
POSITIONED = [name for name, spec in FIXTURES.items() if spec.origin is not None]
NO_PATTERNS: list[NamedPattern] = []


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("redact-fixtures")
    for name, spec in FIXTURES.items():
        spec.make(directory / f"{name}.pdf")
    return directory


def names(matches: list[Match], text: str) -> list[tuple[str, str]]:
    return [(match.pattern, text[match.start : match.end]) for match in matches]


# --- patterns ---------------------------------------------------------------------------------------------

POSITIVE = [
    ("ssn", "SSN 078-05-1120 on file", "078-05-1120"),
    ("ssn", "ssn: 123 45 6789.", "123 45 6789"),
    ("ssn", "(SSN 219-09-9999)", "219-09-9999"),
    ("phone", "call (555) 123-4567 today", "(555) 123-4567"),
    ("phone", "call 555-123-4567 today", "555-123-4567"),
    ("phone", "call +1 555 123 4567 today", "+1 555 123 4567"),
    ("phone", "call 555.123.4567 today", "555.123.4567"),
    ("phone", "call 1-800-555-0199 today", "1-800-555-0199"),
    ("email", "write to jane.doe@example.org.", "jane.doe@example.org"),
    ("email", "<j_doe+tag@mail.example.co.uk>", "j_doe+tag@mail.example.co.uk"),
    ("dob", "DOB: 03/14/1975", "03/14/1975"),
    ("dob", "Date of birth 14.03.75", "14.03.75"),
    ("dob", "Born on March 14, 1975 in Ohio", "March 14, 1975"),
    ("dob", "D.O.B. 14 Mar 1975", "14 Mar 1975"),
    ("dob", "birth date (yyyy-mm-dd): 1975-03-14", "1975-03-14"),
]
NEGATIVE = [
    ("ssn", "000-12-3456"),
    ("ssn", "666-12-3456"),
    ("ssn", "912-34-5678"),
    ("ssn", "123-00-4567"),
    ("ssn", "123-45-0000"),
    ("ssn", "1234-56-7890"),
    ("ssn", "part 5-078-05-1120-9"),
    ("phone", "order 1234567890123"),
    ("phone", "call 055-123-4567"),
    ("email", "user at example dot org"),
    ("email", "@handle"),
    ("dob", "Invoice date 03/14/1975"),
    ("dob", "DOB: unknown"),
]


@pytest.mark.parametrize(("pattern", "text", "expected"), POSITIVE)
def test_builtin_patterns_find_their_values(pattern: str, text: str, expected: str) -> None:
    assert names(find_matches(text, PATTERNS), text) == [(pattern, expected)]


@pytest.mark.parametrize(("pattern", "text"), NEGATIVE)
def test_builtin_patterns_leave_lookalikes_alone(pattern: str, text: str) -> None:
    assert [match for match in find_matches(text, PATTERNS) if match.pattern == pattern] == []


def test_policy_patterns_mrn_format_and_custom_regexes_are_named_not_shown() -> None:
    policy = RedactPolicy(patterns=("email", "mrn"), regexes=(r"Project\s+Falcon", r"\bK-\d{4}\b"))
    compiled = compile_patterns(policy)
    assert [pattern.name for pattern in compiled] == ["email", "mrn", "custom1", "custom2"]
    assert compiled[0].regex is BUILTIN_PATTERNS["email"]
    text = "MRN: 00123456 for Project  Falcon, key K-2024"
    assert names(find_matches(text, compiled), text) == [
        ("mrn", "MRN: 00123456"),
        ("custom1", "Project  Falcon"),
        ("custom2", "K-2024"),
    ]
    custom_mrn = compile_patterns(RedactPolicy(patterns=("mrn",), mrn_format=r"\bMR\d{7}\b"))
    assert names(find_matches("chart MR1234567", custom_mrn), "chart MR1234567") == [("mrn", "MR1234567")]


def test_overlapping_matches_merge_into_one() -> None:
    both = [NamedPattern("a", BUILTIN_PATTERNS["ssn"]), NamedPattern("b", BUILTIN_PATTERNS["phone"])]
    text = "id 078-05-1120 x"
    wider = [*both, NamedPattern("custom1", compile_patterns(RedactPolicy(regexes=(r"id \d+",)))[0].regex)]
    assert names(find_matches(text, both), text) == [("a", "078-05-1120")]
    assert names(find_matches(text, wider), text) == [("custom1", "id 078-05-1120")]


def test_stray_whitespace_does_not_hide_a_value_nor_widen_a_match_to_neighbours() -> None:
    for text, value in [
        ("SSN 078-05- 1120 on", "078-05- 1120"),
        ("SSN 07 8-05-1120 on", "07 8-05-1120"),
        ("Contact jane.doe@ example.org today", "jane.doe@ example.org"),
    ]:
        assert [text[m.start : m.end] for m in find_matches_loose(text, PATTERNS)] == [value]


# --- locate -----------------------------------------------------------------------------------------------


def squeezed(values: frozenset[str]) -> set[str]:
    return {"".join(value.split()) for value in values}


@pytest.mark.parametrize("name", TEXT_FIXTURES)
def test_locate_counts_every_value_on_text_pages(fixtures: Path, name: str) -> None:
    spec = FIXTURES[name]
    located = locate(fixtures / f"{name}.pdf", PATTERNS)
    expected = {"ssn" if value == SSN else "email": 1 for value in spec.values}
    assert located.counts == {1: expected}
    assert squeezed(located.values) == set(spec.values)
    assert len(located.regions[1]) == len(spec.values)  # one rect per matched run per line


def test_locate_finds_nothing_in_pixels_or_outside_the_page_content(fixtures: Path) -> None:
    for name in ["scanned", *DOCUMENT_FIXTURES]:
        located = locate(fixtures / f"{name}.pdf", PATTERNS)
        assert located == Located(regions={}, cores={}, counts={}, values=frozenset()), name


def width_function(name: str) -> Any:
    if name != "cid_font":
        return text_width
    registerFont(TTFont("Vera", str(VERA_TTF)))
    return lambda text: stringWidth(text, "Vera", FONT_SIZE)


def assert_close(actual: Rect, expected: Rect, tolerance: float = 0.6) -> None:
    for side in ("x0", "y0", "x1", "y1"):
        assert abs(getattr(actual, side) - getattr(expected, side)) <= tolerance, (side, actual, expected)


@pytest.mark.parametrize("name", POSITIONED)
def test_locate_rects_sit_on_the_drawn_glyphs_in_default_user_space(fixtures: Path, name: str) -> None:
    """The rect of each value starts where its prefix ends and is as wide as the value, from the descender
    to above the cap height, measured from where the line was drawn in content-stream coordinates (offset
    MediaBox, Form XObject matrix and /Rotate included)."""
    spec = FIXTURES[name]
    assert spec.origin is not None
    x, y = spec.origin
    width = width_function(name)
    rects = sorted(locate(fixtures / f"{name}.pdf", PATTERNS).regions[1], key=lambda rect: -rect.y0)
    lines = [(SSN_PREFIX, SSN, y), (EMAIL_PREFIX, EMAIL, y + EMAIL_Y - SSN_Y)]
    for rect, (prefix, value, baseline) in zip(rects, lines, strict=True):
        left = x + width(prefix)
        assert_close(Rect(rect.x0, 0, rect.x1, 0), Rect(left - PAD, 0, left + width(value) + PAD, 0))
        assert rect.y0 < baseline - 1 and baseline + 0.6 * FONT_SIZE < rect.y1 < baseline + 1.3 * FONT_SIZE
        assert rect.x0 > x + width(prefix.rstrip())  # the neighbour word before it is not covered


def assert_same_regions(ours: PageRegions, theirs: PageRegions) -> None:
    assert ours.keys() == theirs.keys()
    for page, rects in ours.items():
        for mine, other in zip(rects, theirs[page], strict=True):
            assert_close(mine, other, 0.01)


def test_locate_rects_ignore_rotate(fixtures: Path) -> None:
    assert_same_regions(
        locate(fixtures / "rotate90.pdf", PATTERNS).regions, locate(fixtures / "plain.pdf", PATTERNS).regions
    )


def test_locate_joins_kerned_split_and_ligature_text(fixtures: Path) -> None:
    plain = locate(fixtures / "plain.pdf", PATTERNS).regions
    assert_same_regions(locate(fixtures / "split.pdf", PATTERNS).regions, plain)
    (ligature,) = locate(fixtures / "ligature.pdf", PATTERNS).regions[1]
    left = 72 + text_width(EMAIL_PREFIX)  # the "fi" glyph is exactly as wide as "f" and "i"
    assert_close(Rect(ligature.x0, 0, ligature.x1, 0), Rect(left - PAD, 0, left + text_width(LIGATURE_EMAIL) + PAD, 0))
    kerned = locate(fixtures / "kerned.pdf", PATTERNS)
    assert squeezed(kerned.values) == {SSN, EMAIL}


def test_locate_reports_actual_text_with_the_box_of_its_glyphs(fixtures: Path) -> None:
    """Inline and named (/Properties) property lists both count; the region is the masked glyphs."""
    located = locate(fixtures / "actual_text.pdf", PATTERNS)
    ssn_rect, email_rect = sorted(located.regions[1], key=lambda rect: -rect.y0)
    for rect, prefix, value in ((ssn_rect, SSN_PREFIX, SSN), (email_rect, EMAIL_PREFIX, EMAIL)):
        left = 72 + text_width(prefix)
        assert_close(Rect(rect.x0, 0, rect.x1, 0), Rect(left - PAD, 0, left + text_width("*" * len(value)) + PAD, 0))


def test_locate_custom_regex_spans_the_neighbours_it_asks_for(fixtures: Path) -> None:
    custom = compile_patterns(RedactPolicy(regexes=(r"Alpha SSN",)))
    located = locate(fixtures / "plain.pdf", custom)
    assert located.counts == {1: {"custom1": 1}}
    (rect,) = located.regions[1]
    left = 72 + text_width("Patient ")
    assert_close(Rect(rect.x0, 0, rect.x1, 0), Rect(left - PAD, 0, left + text_width("Alpha SSN") + PAD, 0))


def make_plain_at(directory: Path) -> Path:
    path = directory / "plain.pdf"
    FIXTURES["plain"].make(path)
    return path


def test_locate_finds_text_drawn_turned_inside_the_content(tmp_path: Path) -> None:
    """Text set upright by its text matrix (running bottom to top) is read along its own direction."""
    path = tmp_path / "turned.pdf"
    with pikepdf.open(make_plain_at(tmp_path)) as pdf:
        pdf.pages[0].obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 0 1 -1 0 300 100 Tm (SSN 078-05-1120 ok) Tj ET")
        pdf.save(path)
    located = locate(path, PATTERNS)
    assert located.counts == {1: {"ssn": 1}}
    (rect,) = located.regions[1]
    bottom = 100 + text_width("SSN ")
    assert_close(Rect(0, rect.y0, 0, rect.y1), Rect(0, bottom - PAD, 0, bottom + text_width(SSN) + PAD))
    assert 300 - FONT_SIZE - 2 < rect.x0 < rect.x1 < 300 + 5
    assert [leak.kind for leak in check_redaction(path, frozenset(), NO_PATTERNS, located.regions).leaks] == [
        "in_region"
    ]


def test_value_pattern_finds_every_occurrence_of_a_found_value() -> None:
    text = "DOB: 03/14/1975; seen 03/14/1975 and 03 / 14/1975, not 03/14/1976"
    dob = compile_patterns(RedactPolicy(patterns=("dob",)))
    found = {text[m.start : m.end] for m in find_matches(text, dob)}
    assert found == {"03/14/1975"}
    everywhere = find_matches(text, [value_pattern(found)])
    assert [text[m.start : m.end] for m in everywhere] == ["03/14/1975", "03/14/1975", "03 / 14/1975"]
    assert find_matches(text, [value_pattern(())]) == []


def test_bench_document_has_its_matches_on_every_page(tmp_path: Path) -> None:
    path = tmp_path / "bench.pdf"
    make_redaction_bench_pdf(path, pages=3)
    located = locate(path, PATTERNS)
    assert located.counts == {page: {"ssn": 1, "email": 1, "phone": 1} for page in (1, 2, 3)}
    assert squeezed(located.values) == {"".join(v.split()) for page in (1, 2, 3) for v in bench_values(page)}


# --- scrub ------------------------------------------------------------------------------------------------

EXPECTED_SCRUB = {
    "annotation": {"annotation": 3},  # note /Contents+/T, FreeText /Contents, FreeText appearance
    "metadata": {"metadata": 3},  # /Author, /Subject, XMP
    "outline": {"outline": 2, "destination": 1, "link": 2},
    "attachment": {"attachment": 5},  # 2 name-tree entries, their 2 /AF entries, the FileAttachment pin
    "javascript": {"javascript": 3},  # name tree, /OpenAction, link /AA
    "form": {"form": 3},  # ssn field, contact field, its widget
    "structure": {"structure": 2},  # the paragraph's /ActualText, the figure's /Alt
}
SURVIVORS = {
    "annotation": [],
    "metadata": ["Intake form"],
    "outline": ["Summary", "summary"],
    "attachment": ["readme.txt", "nothing to see"],
    "javascript": ["var ready = true;"],
    "form": ["Alpha"],
    "structure": ["/StructTreeRoot", "/Figure"],
}


def pypdf_strings(path: Path) -> Iterator[str]:
    """Every string and decoded stream pypdf can reach from the trailer: what any reader could show."""
    reader = PdfReader(path)
    pending: list[Any] = [reader.trailer]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if isinstance(item, IndirectObject):
            if item.idnum in seen:
                continue
            seen.add(item.idnum)
            item = item.get_object()
        if isinstance(item, StreamObject):
            yield item.get_data().decode("latin-1")
        if isinstance(item, DictionaryObject):
            yield from (str(key) for key in item)
            pending += [value for key, value in item.items() if key != "/Parent"]
        elif isinstance(item, ArrayObject):
            pending += list(item)
        elif isinstance(item, TextStringObject | str):
            yield str(item)
        elif isinstance(item, bytes):
            yield item.decode("latin-1")


def pikepdf_bytes(path: Path) -> bytes:
    """The whole file with every stream decompressed, as pikepdf/qpdf writes it."""
    out = path.with_suffix(".qdf")
    with pikepdf.open(path) as pdf:
        pdf.save(out, qdf=True, stream_decode_level=pikepdf.StreamDecodeLevel.all)
    return out.read_bytes()


def scrubbed(fixtures: Path, name: str, tmp_path: Path, values: frozenset[str] = frozenset()) -> tuple[Path, Any]:
    out = tmp_path / f"{name}.scrubbed.pdf"
    with pikepdf.open(fixtures / f"{name}.pdf") as pdf:
        report = scrub_document(pdf, PATTERNS, values)
        pdf.save(out)
    return out, report


@pytest.mark.parametrize("name", DOCUMENT_FIXTURES)
def test_scrub_removes_document_level_values_and_keeps_the_rest(fixtures: Path, name: str, tmp_path: Path) -> None:
    before = "\n".join(pypdf_strings(fixtures / f"{name}.pdf"))
    assert SSN in before or EMAIL in before
    out, report = scrubbed(fixtures, name, tmp_path)
    assert report.counts == EXPECTED_SCRUB[name]
    assert report.total == sum(EXPECTED_SCRUB[name].values())
    after = "\n".join(pypdf_strings(out))
    raw = pikepdf_bytes(out)
    for value in (SSN, EMAIL):
        assert value not in after
        assert value.encode() not in raw
    for survivor in SURVIVORS[name]:
        assert survivor in after
    for word in ("Patient", "Alpha", "Contact", "today"):
        assert word in subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True).stdout


def test_scrubbed_documents_read_back_with_pypdf_apis(fixtures: Path, tmp_path: Path) -> None:
    out, _ = scrubbed(fixtures, "metadata", tmp_path)
    reader = PdfReader(out)
    assert reader.metadata is not None
    assert {key: str(value) for key, value in reader.metadata.items()} == {"/Title": "Intake form"}
    assert reader.xmp_metadata is None
    out, _ = scrubbed(fixtures, "attachment", tmp_path)
    assert list(PdfReader(out).attachments) == ["readme.txt"]
    out, _ = scrubbed(fixtures, "form", tmp_path)
    fields = PdfReader(out).get_fields() or {}
    assert {name: field.get("/V") for name, field in fields.items()} == {"ssn": None, "contact": None, "name": "Alpha"}


def test_scrub_uses_values_found_on_the_pages(fixtures: Path, tmp_path: Path) -> None:
    """A value matched on a page is removed wherever it reappears, even where no pattern is enabled."""
    no_patterns = compile_patterns(RedactPolicy(regexes=(r"[^\s\S]",)))  # matches nothing
    with pikepdf.open(fixtures / "metadata.pdf") as pdf:
        assert scrub_document(pdf, no_patterns, frozenset()).total == 0
        report = scrub_document(pdf, no_patterns, frozenset({"078-05- 1120"}))  # whitespace differs: still found
        assert report.counts == {"metadata": 2}


# --- gate -------------------------------------------------------------------------------------------------

ALLOWED_KINDS = {"value", "in_region", "unreadable", *(f"pattern:{p.name}" for p in PATTERNS)}
ALLOWED_KINDS |= set(SITE_KINDS)


def gate(path: Path, located: Located) -> GateReport:
    report = check_redaction(path, located.values, PATTERNS, located.regions)
    assert report.extractors == ("pdftotext", "pypdf", "pikepdf")
    assert {leak.kind for leak in report.leaks} <= ALLOWED_KINDS  # kinds, never text
    return report


def kinds(report: GateReport, extractor: str) -> set[str]:
    return {leak.kind for leak in report.leaks if leak.extractor == extractor}


def test_gate_sees_everything_in_an_untouched_document(fixtures: Path) -> None:
    path = fixtures / "plain.pdf"
    report = gate(path, locate(path, PATTERNS))
    assert not report.clean
    assert kinds(report, "pdftotext") == {"value", "in_region", "pattern:ssn", "pattern:email"}
    assert kinds(report, "pypdf") == {"value", "pattern:ssn", "pattern:email"}
    assert {leak.page for leak in report.leaks} == {1}


def draw_boxes(pdf: pikepdf.Pdf, regions: PageRegions) -> None:
    for number, rects in regions.items():
        boxes = b"".join(b"%g %g %g %g re " % (r.x0, r.y0, r.x1 - r.x0, r.y1 - r.y0) for r in rects)
        pdf.pages[number - 1].contents_add(pdf.make_stream(b"q 0 0 0 rg " + boxes + b"f Q\n"))


def test_gate_rejects_a_box_drawn_over_text_that_is_still_there(fixtures: Path, tmp_path: Path) -> None:
    located = locate(fixtures / "plain.pdf", PATTERNS)
    boxed = tmp_path / "boxed.pdf"
    with pikepdf.open(fixtures / "plain.pdf") as pdf:
        draw_boxes(pdf, located.regions)
        pdf.save(boxed)
    report = gate(boxed, located)
    assert not report.clean
    assert {"in_region", "value"} <= kinds(report, "pdftotext")
    # Even with nothing to search for, the words under the boxes give it away.
    assert {leak.kind for leak in check_redaction(boxed, frozenset(), NO_PATTERNS, located.regions).leaks} == {
        "in_region"
    }


def test_gate_passes_a_page_rebuilt_without_the_values(fixtures: Path, tmp_path: Path) -> None:
    """The lines are written again with a kerning gap where each value was (neighbours stay in place) and
    black boxes on top: no extractor finds a value, a pattern or a word inside a region."""
    located = locate(fixtures / "plain.pdf", PATTERNS)
    cleaned = tmp_path / "cleaned.pdf"
    gap_ssn, gap_email = round(text_width(SSN, 1000)), round(text_width(EMAIL, 1000))
    content = b"BT /F1 12 Tf 72 700 Td [(%s) -%d (%s)] TJ 0 -20 Td [(%s) -%d (%s)] TJ ET\n" % (
        SSN_PREFIX.encode(),
        gap_ssn,
        SSN_SUFFIX.encode(),
        EMAIL_PREFIX.encode(),
        gap_email,
        EMAIL_SUFFIX.encode(),
    )
    with pikepdf.open(fixtures / "plain.pdf") as pdf:
        pdf.pages[0].obj.Contents = pdf.make_stream(content)
        draw_boxes(pdf, located.regions)
        pdf.save(cleaned)
    report = gate(cleaned, located)
    assert report.clean, report.leaks
    text = subprocess.run(["pdftotext", str(cleaned), "-"], capture_output=True, text=True, check=True).stdout
    assert all(word in text for word in FIXTURES["plain"].neighbours)


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_gate_maps_pdftotext_words_back_to_user_space(fixtures: Path, tmp_path: Path, rotation: int) -> None:
    """On the offset-MediaBox page turned every way, the value's word is inside its located region and
    no word is inside an empty part of the page."""
    path = tmp_path / f"rotated{rotation}.pdf"
    with pikepdf.open(fixtures / "offset_mediabox.pdf") as pdf:
        pdf.pages[0].obj.Rotate = rotation
        pdf.save(path)
    located = locate(path, PATTERNS)
    assert_same_regions(located.regions, locate(fixtures / "offset_mediabox.pdf", PATTERNS).regions)
    hit = check_redaction(path, frozenset(), NO_PATTERNS, located.regions)
    assert [leak.kind for leak in hit.leaks] == ["in_region"]
    (ssn_rect,) = [rect for rect in located.regions[1] if rect.y0 > 740]
    below = {1: [Rect(ssn_rect.x0, ssn_rect.y0 - 60, ssn_rect.x1, ssn_rect.y0 - 40)]}  # between/below lines
    beside = {1: [Rect(ssn_rect.x1 + 60, ssn_rect.y0, ssn_rect.x1 + 120, ssn_rect.y1)]}  # right of "file"
    assert check_redaction(path, frozenset(), NO_PATTERNS, below).clean
    assert check_redaction(path, frozenset(), NO_PATTERNS, beside).clean


@pytest.mark.parametrize("name", DOCUMENT_FIXTURES)
def test_gate_reports_document_level_places_until_scrubbed(fixtures: Path, name: str, tmp_path: Path) -> None:
    path = fixtures / f"{name}.pdf"
    empty = Located(regions={}, cores={}, counts={}, values=frozenset())
    before = gate(path, empty)
    assert set(EXPECTED_SCRUB[name]) <= kinds(before, "pikepdf")
    out, _ = scrubbed(fixtures, name, tmp_path)
    assert gate(out, empty).clean


def test_gate_reads_actual_text_and_searches_squeezed_values(fixtures: Path, tmp_path: Path) -> None:
    path = fixtures / "actual_text.pdf"
    report = check_redaction(path, frozenset({"078 - 05 - 1120"}), NO_PATTERNS, {})
    assert [(leak.extractor, leak.kind) for leak in report.leaks] == [("pdftotext", "value")]


def test_redaction_failure_codes_are_registered() -> None:
    assert FailureCode.REDACTION_LEAK.info.outcome is Outcome.QUARANTINE
    assert FailureCode.REDACTION_FAILED.info.outcome is Outcome.RETRY


# --- fixtures ---------------------------------------------------------------------------------------------


def test_fixtures_are_deterministic_and_written_by_the_cli(fixtures: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "tests.fixtures.redact_samples", str(tmp_path)], cwd=REPO, check=True)
    for name in FIXTURES:
        assert (tmp_path / f"{name}.pdf").read_bytes() == (fixtures / f"{name}.pdf").read_bytes(), name
    assert PdfReader(tmp_path / "bench.pdf").get_num_pages() == 50
    fonts = subprocess.run(["pdffonts", str(tmp_path / "cid_font.pdf")], capture_output=True, text=True).stdout
    assert "Identity-H" in fonts and "CID TrueType" in fonts
    assert "Type 3" in subprocess.run(["pdffonts", str(tmp_path / "type3.pdf")], capture_output=True, text=True).stdout
    images = subprocess.run(["pdfimages", "-list", str(tmp_path / "scanned.pdf")], capture_output=True, text=True)
    assert " 300   300 " in images.stdout
    assert subprocess.run(["pdftotext", str(tmp_path / "scanned.pdf"), "-"], capture_output=True).stdout.strip() == b""
