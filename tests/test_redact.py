"""The redaction orchestrator on its own (no Temporal): annotations and fields, boxes, burn-in, bad regions."""

from __future__ import annotations

import dataclasses
import html
import re
import subprocess
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from PIL import Image
from pypdf import PdfReader

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import RedactLayout, RedactPolicy, RedactRegion
from docjobs.pdf.redaction import redact
from docjobs.pdf.redaction.content import ContentRemoval, remove_content
from docjobs.pdf.redaction.gate import Word
from docjobs.pdf.redaction.line_laying import lay_out
from docjobs.pdf.redaction.line_records import PlacedGlyph, Show
from docjobs.pdf.redaction.locate import locate
from docjobs.pdf.redaction.patterns import compile_patterns
from docjobs.pdf.redaction.redact import redact_pdf
from docjobs.pdf.redaction.regions import Rect
from tests.fixtures import realworld
from tests.fixtures.redact_fallback import FALLBACK_FIXTURES, make_out_of_order, make_soft_mask_trace
from tests.fixtures.redact_samples import (
    FIXTURES,
    LINE_X,
    SSN,
    SSN_PREFIX,
    SSN_Y,
    _new_pdf,
    _save,
    make_plain,
    text_width,
)


def region(x0: float, y0: float, x1: float, y1: float, page: int = 1) -> RedactRegion:
    return RedactRegion(page=page, x0=x0, y0=y0, x1=x1, y1=y1)


def test_a_region_removes_the_widget_and_its_field(tmp_path: Path) -> None:
    FIXTURES["form"].make(source := tmp_path / "form.pdf")
    name_widget = region(70, 438, 274, 460)  # the harmless "name" field: no pattern would remove it
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regions=(name_widget,)), workdir=tmp_path)
    assert summary.pages[0].annotations_removed == 1
    fields = PdfReader(out).get_fields() or {}
    assert "name" not in fields and {"ssn", "contact"} <= set(fields)
    with pikepdf.open(out) as pdf:
        assert len(pdf.pages[0].obj.Annots) == 2


def test_the_box_is_drawn_where_the_value_was(tmp_path: Path) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(patterns=("ssn",)), workdir=tmp_path)
    subprocess.run(["pdftoppm", "-r", "72", "-png", "-singlefile", str(out), str(tmp_path / "page")], check=True)
    with Image.open(tmp_path / "page.png") as page:
        middle_of_ssn = (round(LINE_X + text_width(SSN_PREFIX) + text_width(SSN) / 2), round(792 - (SSN_Y + 4)))
        before_it = (round(LINE_X + 2), round(792 - (SSN_Y + 4)))
        assert page.convert("L").getpixel(middle_of_ssn) == 0  # opaque black
        assert page.convert("L").getpixel(before_it) != 0  # "Patient" is not boxed


@pytest.mark.parametrize(
    "tail, fallback",
    [(b"", []), (b"q 4 0 0 4 180 1196 cm BI /W 1 /H 1 /BPC 8 /CS /G ID \x01 EI Q", [1])],
    ids=["rewritten", "burned-in"],
)
def test_the_box_covers_the_word_after_a_stray_Q_and_a_cm(tail: bytes, fallback: list[int], tmp_path: Path) -> None:
    """The content pops a state it never pushed, then moves the origin: the box is still drawn in default user
    space. On a page burned in (a small inline image under the word), a box drawn elsewhere would leave the word
    in the pixels, where the gate does not look."""
    (source := tmp_path / "in.pdf").write_bytes(realworld.unbalanced_cm(tail))
    word = next(w for w in realworld.WORDS if len(w) == 7)  # "harbour": in the middle of the line
    policy = RedactPolicy(regexes=(word,), layout=RedactLayout.KEEP)  # the box drawn is the word's region
    summary = redact_pdf(source, out := tmp_path / "out.pdf", policy, workdir=tmp_path)
    assert summary.fallback_pages == fallback
    (found,) = locate(source, compile_patterns(policy)).regions[1]
    subprocess.run(["pdftoppm", "-r", "72", "-gray", "-singlefile", str(out), str(tmp_path / "page")], check=True)
    with Image.open(tmp_path / "page.pgm") as page:
        inside = page.crop(
            (round(found.x0) + 1, round(792 - found.y1) + 1, round(found.x1) - 1, round(792 - found.y0) - 1)
        )
        assert max(inside.tobytes()) < 64  # all dark: the box is where the word was
    assert word not in subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True).stdout


def test_a_page_that_cannot_be_rewritten_is_burned_in(tmp_path: Path) -> None:
    FIXTURES["type3"].make(source := tmp_path / "type3.pdf")
    summary = redact_pdf(
        source, out := tmp_path / "out.pdf", RedactPolicy(patterns=("ssn",), fallback_dpi=100), workdir=tmp_path
    )
    assert (summary.fallback_pages, summary.pages[0].fallback) == ([1], "type3_font")
    with pikepdf.open(source) as before, pikepdf.open(out) as after:
        page = after.pages[0]
        assert list(page.mediabox) == list(before.pages[0].mediabox)
        assert set(page.obj.Resources.keys()) == {"/XObject"} and list(page.obj.Resources.XObject.keys()) == ["/Im0"]
        drawn = page.obj.Resources.XObject.Im0
        assert isinstance(drawn, pikepdf.Stream)
        image = pikepdf.PdfImage(drawn)
        assert image.width == round(float(page.cropbox[2] - page.cropbox[0]) * 100 / 72)
    assert subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True).stdout.strip() == ""


def test_a_region_on_a_page_the_document_lacks_is_refused(tmp_path: Path) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    with pytest.raises(DocJobError) as refused:
        redact_pdf(source, tmp_path / "out.pdf", RedactPolicy(regions=(region(1, 1, 2, 2, page=2),)), workdir=tmp_path)
    assert refused.value.code == "redaction.region_outside"


@pytest.mark.parametrize("name", sorted(FALLBACK_FIXTURES))
def test_a_page_the_rewrite_cannot_finish_takes_the_raster_fallback(name: str, tmp_path: Path) -> None:
    make, reason, values, layout = FALLBACK_FIXTURES[name]
    make(source := tmp_path / f"{name}.pdf")
    policy = RedactPolicy(patterns=("ssn", "email"), layout=layout)
    summary = redact_pdf(source, out := tmp_path / "out.pdf", policy, workdir=tmp_path)
    assert (summary.fallback_pages, summary.pages[0].fallback) == ([1], reason)
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    pypdf = "".join(page.extract_text() for page in PdfReader(out).pages)
    assert not any(value in text for value in values for text in (poppler, pypdf))
    subprocess.run(["pdftoppm", "-r", "72", "-png", "-singlefile", str(out), str(tmp_path / "page")], check=True)
    with Image.open(tmp_path / "page.png") as page:  # the burned-in page still shows the box over the SSN
        middle_of_ssn = (round(LINE_X + text_width(SSN_PREFIX) + text_width(SSN) / 2), round(792 - (SSN_Y + 4)))
        if name == "out_of_order":
            middle_of_ssn = (round(LINE_X + 250 + text_width(SSN) / 2), middle_of_ssn[1])
        assert page.convert("L").getpixel(middle_of_ssn) == 0


def test_a_line_drawn_out_of_order_is_re_set_not_burned_in_with_layout_mask(tmp_path: Path) -> None:
    """The neighbours that glue once the SSN is gone in place (`text_moved` under `keep`) are re-set in their
    order along the baseline, the mask after them: the page stays text, its words kept, and "file", drawn apart
    from "Alpha" though a tenth of a point after it, stays a word of its own."""
    make_out_of_order(source := tmp_path / "out_of_order.pdf")
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(patterns=("ssn",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert poppler.split() == ["Patient", "Alpha", "file"]


def _helvetica_page(path: Path, content: str, extents: tuple[int, int] | None = None) -> None:
    """A page drawing `content` with /F0, Helvetica; with `extents`, a font of Helvetica's widths named otherwise
    (readers take its metrics from the file, not from Helvetica's) whose FontDescriptor has this ascent and
    descent."""
    pdf = pikepdf.new()
    font = pikepdf.Dictionary(
        Type=pikepdf.Name.Font,
        Subtype=pikepdf.Name.Type1,
        BaseFont=pikepdf.Name.Helvetica,
        Encoding=pikepdf.Name.WinAnsiEncoding,
    )
    if extents is not None:
        font.BaseFont = pikepdf.Name("/DejaVuSansCondensed")
        font.FirstChar, font.LastChar = 32, 126
        font.Widths = [round(text_width(chr(code), 1000)) for code in range(32, 127)]
        font.FontDescriptor = pikepdf.Dictionary(
            Type=pikepdf.Name.FontDescriptor,
            FontName=font.BaseFont,
            Flags=32,
            FontBBox=[-918, extents[1], 1614, extents[0]],
            ItalicAngle=0,
            Ascent=extents[0],
            Descent=extents[1],
            CapHeight=729,
            StemV=56,
        )
    resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F0=font))
    pdf.pages.append(
        pikepdf.Page(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Page,
                MediaBox=[0, 0, 612, 792],
                Resources=resources,
                Contents=pdf.make_stream(content.encode()),
            )
        )
    )
    pdf.save(path)


@pytest.mark.parametrize("layout", list(RedactLayout))
@pytest.mark.parametrize(
    "shown", ["(Attach Form\\(s\\) W-2)", "(Attach For) -3.6 (m\\(s\\) W-2)"], ids=["one", "split"]
)
def test_the_letters_touching_a_match_stay(layout: RedactLayout, shown: str, tmp_path: Path) -> None:
    """A match inside a word ("Form" of "Form(s)") takes its own letters only: the parenthesis after it touches
    its last letter, and was taken with it."""
    # A form's line, in Helvetica at 9 pt drawn at size 1 and scaled by the text matrix, as an IRS form draws it.
    _helvetica_page(source := tmp_path / "forms.pdf", f"BT /F0 1 Tf 9 0 0 9 50 700 Tm [{shown}] TJ ET")
    policy = RedactPolicy(regexes=("Form",), layout=layout)
    summary = redact_pdf(source, out := tmp_path / "out.pdf", policy, workdir=tmp_path)
    assert summary.fallback_pages == []
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert poppler.split() == ["Attach", "(s)", "W-2"]


def test_letters_spaced_apart_are_re_set_as_the_word_they_spell(tmp_path: Path) -> None:
    """pdfminer's sample `simple1`: "Hello World" four times, the last two spaced out letter by letter (character
    spacing, then kerning). Poppler reads those letters as words of their own; re-set without the spacing, they read
    as "World". That is the same text kept, not text moved (the page was burned in for it)."""
    lines = (
        "0 Tw 0 Tc [(Hello ) -4166 (World)] TJ",
        "100 Tw 0 Tc (Hello World) Tj",
        "100 Tw 10 Tc (Hello World) Tj",
        "0 Tw 0 Tc [(H) -416 (e) -416 (l) -416 (l) -416 (o) -416 ( ) -416 -4166 "
        "(W) -416 (o) -416 (r) -416 (l) -416 (d)] TJ",
    )
    _helvetica_page(source := tmp_path / "simple1.pdf", f"BT /F0 24 Tf 100 700 Td {' 0 -100 Td '.join(lines)} ET")
    before = subprocess.run(["pdftotext", str(source), "-"], capture_output=True, text=True, check=True).stdout
    assert before.split()[-5:] == list("World")
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Hello",)), workdir=tmp_path)
    assert summary.fallback_pages == []
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert poppler.split() == ["World"] * 4


@pytest.mark.parametrize(
    "spaced",
    [
        "10 Tc (Hello World) Tj",
        "[(H) -416 (e) -416 (l) -416 (l) -416 (o) -4582 (W) -416 (o) -416 (r) -416 (l) -416 (d)] TJ",
    ],
    ids=["character-spacing", "kerning"],
)
def test_a_value_spaced_out_letter_by_letter_is_found_and_removed(spaced: str, tmp_path: Path) -> None:
    """A heading spaced out letter by letter: the locator put a space at every gap, so "Hello" was not found, while
    pypdf reads it whole and the gate quarantined the job (`redaction.leak`). The row's letter spacing is now the
    gap its glyphs leave most; only wider gaps are spaces."""
    _helvetica_page(source := tmp_path / "spaced.pdf", f"BT /F0 24 Tf 100 500 Td {spaced} ET")
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Hello",)), workdir=tmp_path)
    assert summary.fallback_pages == [] and summary.pages[0].matches == {"custom1": 1}
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    pypdf = PdfReader(out).pages[0].extract_text()
    assert "World" in "".join(poppler.split()) and "World" in "".join(pypdf.split())
    assert not any(letters in "".join(read.split()) for read in (poppler, pypdf) for letters in ("Hello", "ello"))


def test_a_line_set_close_below_a_re_set_line_is_not_part_of_it(tmp_path: Path) -> None:
    """An OMB box: two lines 6 pt apart in 9-pt type, so the tops of the lower line's words reach over the upper
    line's baseline. They were taken for words of the re-set line, out of order once it grew by its mask, and the
    page was burned in (form_210966)."""
    content = (
        "BT /F0 9 Tf 486.7 767.7 Td (OMB Control No. 2900-0826) Tj ET "
        "BT /F0 9 Tf 486.7 761.7 Td (Respondent Burden: 5 minutes) Tj ET"
    )
    _helvetica_page(source := tmp_path / "omb.pdf", content)
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Control",)), workdir=tmp_path)
    assert summary.fallback_pages == []
    poppler = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert poppler.split() == ["OMB", "No.", "2900-0826", "Respondent", "Burden:", "5", "minutes"]


@pytest.mark.parametrize(("code", "masks"), [(b" ", 0), (b"F", 1)], ids=["space", "letter"])
def test_a_removed_span_of_spaces_alone_gets_no_mask(code: bytes, masks: int) -> None:
    """A form drew a lone space a little above a line, where "Form" was: removed with the match, its own one-glyph
    line got a mask too, drawn over the letters the match's line had re-set there (f1040nr: `redaction.leak`)."""
    glyph = PlacedGlyph(
        code=code,
        removed=True,
        triggered=True,
        origin=(80.0, 702.76),
        direction=(1.0, 0.0),
        up=(0.0, 9.0),
        natural=2.5,
        advance=2.5,
        is_space=code == b" ",
        ascent=0.7,
        descent=-0.2,
    )
    show = Show(
        0, 1, [glyph], (9.0, 0.0, 0.0, 9.0, 80.0, 702.76), (1.0, 0.0, 0.0, 1.0, 0.0, 0.0), (0.0, 0.0), (None, None)
    )
    assert len(lay_out([show], 5.0).masks) == masks


SPACE_GAP = 0.25 * 9 - 1  # points of white left before the letter: a word space, less a pixel of antialiasing


@pytest.mark.parametrize(
    ("at", "fallback"), [(75, [1]), (90, []), (200, [])], ids=["under-the-mask", "squeezed-before-it", "clear-of-it"]
)
def test_a_mask_over_text_drawn_apart_from_its_line_sends_the_page_to_the_fallback(
    at: int, fallback: list[int], tmp_path: Path
) -> None:
    """The fixed-width mask is wider than "Form": a checkbox letter drawn further along the baseline, but apart
    from the line (another line is drawn between), would be hidden under it. The line is squeezed along its
    baseline to end a word space before the letter, down to half its length; when that is not enough, the page
    is burned in (`mask_over_text`)."""
    _helvetica_page(
        source := tmp_path / "box.pdf",
        f"BT /F0 9 Tf 50 700 Td (Form) Tj ET BT /F0 9 Tf 50 600 Td (Other) Tj ET BT /F0 9 Tf {at} 700 Td (c) Tj ET",
    )
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Form",)), workdir=tmp_path)
    assert summary.fallback_pages == fallback
    assert [page.fallback for page in summary.pages] == (["mask_over_text"] if fallback else [None])
    if not fallback:
        assert [box[0] for text, box in _poppler_words(out) if text == "c"] == [pytest.approx(at)]
        with Image.open(_render_at_72(out, tmp_path)) as page:  # the mask ends before the letter
            row = [page.convert("L").getpixel((x, 792 - 702)) for x in range(50, at)]
        assert 0 in row and set(row[-round(SPACE_GAP) :]) == {255}


def test_a_line_drawn_right_part_first_is_re_set_in_its_order_along_the_baseline(tmp_path: Path) -> None:
    """A form drew a header's "Page 3" at the right margin first, then "Form 1040NR (2007)" at the left (f1040nr).
    Laid out in drawing order from "Page", the left part went after it, off the page (`text_moved`)."""
    _helvetica_page(
        source := tmp_path / "header.pdf",
        "BT /F0 7 Tf 1 0 0 1 502 714 Tm (Page) Tj ET BT /F0 10 Tf 1 0 0 1 522 714 Tm (3) Tj ET "
        r"BT /F0 7 Tf 1 0 0 1 36 714 Tm (Form 1040NR \(2007\)) Tj ET",
    )
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Form",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    words = _poppler_words(out)
    assert [text for text, _ in words] == ["1040NR", "(2007)", "Page", "3"]
    assert all(box[0] > 36 and box[2] < 612 for _, box in words)


def test_a_line_that_would_grow_past_the_page_edge_is_squeezed_to_end_at_it(tmp_path: Path) -> None:
    """A line set close to the right edge grows by its mask (5 em, wider than "Form"): it is squeezed along its
    baseline to end at the edge of the page, where its words stay readable (issue-604: `text_moved`)."""
    _helvetica_page(source := tmp_path / "edge.pdf", "BT /F0 9 Tf 1 0 0 1 490 700 Tm (Confidential: Form 1040NR) Tj ET")
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("Form",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    words = _poppler_words(out)
    assert [text for text, _ in words] == ["Confidential:", "1040NR"]
    assert words[0][1][0] == pytest.approx(490, abs=0.01) and words[-1][1][2] == pytest.approx(612, abs=0.01)


def test_a_space_removed_on_its_own_line_leaves_the_matched_line_its_room(tmp_path: Path) -> None:
    """A form drew a lone space a point above the match, apart from its line (f1040nr). Removed with the match,
    that space is a re-set line that shows nothing: the matched line, growing by its mask past where the space
    was, must not be squeezed to end before it."""
    _helvetica_page(
        source := tmp_path / "space.pdf",
        "BT /F0 9 Tf 1 0 0 1 50 700 Tm (Attach Form 6251 today) Tj ET BT /F0 9 Tf 1 0 0 1 115 701 Tm ( ) Tj ET "
        "BT /F0 9 Tf 1 0 0 1 50 600 Tm (Other) Tj ET",
    )
    policy = RedactPolicy(regexes=("Form 6251",))
    summary = redact_pdf(source, out := tmp_path / "out.pdf", policy, workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    words = dict(_poppler_words(out))
    assert sorted(words) == ["Attach", "Other", "today"]
    gap = words["today"][0] - words["Attach"][2]
    assert gap == pytest.approx((2 * 0.25 + 5) * 9, abs=0.5)  # a mask and its word spaces, not squeezed


def _poppler_words(pdf: Path) -> list[tuple[str, tuple[float, float, float, float]]]:
    """pdftotext's words of a one-page file, with their boxes in default user space (x0, y0, x1, y1)."""
    xhtml = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    words = []
    for found in re.finditer(
        r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>', xhtml
    ):
        x0, top, x1, bottom = map(float, found.groups()[:4])
        words.append((html.unescape(found.group(5)), (x0, 792 - bottom, x1, 792 - top)))
    return words


def _render_at_72(pdf: Path, tmp_path: Path) -> Path:
    subprocess.run(["pdftoppm", "-r", "72", "-png", "-singlefile", str(pdf), str(tmp_path / "page")], check=True)
    return tmp_path / "page.png"


def test_a_tall_ascent_does_not_take_the_letters_of_the_line_below(tmp_path: Path) -> None:
    """pypdf's encryption samples set DejaVu (ascent 1.232 em, descent 0.462) in lines 1.17 em apart. Tested with
    its whole ascent, the glyph box of the line below reached the middle of the match's line, where pdfminer's
    box (descent to one em above it) puts the match's core: "password: asdfzxcv" lost "sword: asd", the letters
    under "encryption", and the text check did not see it, as those words touch the region."""
    _helvetica_page(
        source := tmp_path / "tall.pdf",
        "BT /F0 10 Tf 1 0 0 1 90 700 Tm (pdf encryption test) Tj 1 0 0 1 90 688.3 Tm (password: asdfzxcv) Tj ET",
        extents=(1232, -462),
    )
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("encryption",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    assert [text for text, _ in _poppler_words(out)] == ["pdf", "test", "password:", "asdfzxcv"]


def test_letters_taken_from_the_line_below_a_match_are_seen_and_the_page_burned_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text check exempted every word touching a match's region, so the letters the removal took from the
    line below (as above, before the fix) went unseen. It now exempts a word only when the middle of its height
    is in the region: a removal aimed 8 pt too high and too low is caught, and the page burned in."""
    _helvetica_page(
        source := tmp_path / "tall.pdf",
        "BT /F0 10 Tf 1 0 0 1 90 700 Tm (pdf encryption test) Tj 1 0 0 1 90 688.3 Tm (password: asdfzxcv) Tj ET",
        extents=(1232, -462),
    )

    def too_tall(
        pdf: pikepdf.Pdf, number: int, rects: list[Rect], *, aims: list[Rect], **options: Any
    ) -> ContentRemoval:
        taller = [Rect(aim.x0, aim.y0 - 8, aim.x1, aim.y1 + 8) for aim in aims]
        return remove_content(pdf, number, rects, aims=taller, **options)

    monkeypatch.setattr(redact, "remove_content", too_tall)
    summary = redact_pdf(source, tmp_path / "out.pdf", RedactPolicy(regexes=("encryption",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.pages[0].fallback) == ([1], "text_moved")


def test_spaces_written_as_backslash_escapes_keep_their_width_when_matches_are_located(tmp_path: Path) -> None:
    """AutoCAD writes each space of a string as a backslash and a space. pdfminer, which locates the matches,
    dropped both, so every glyph after a space sat earlier for it than it is drawn: the region of "screen" fell
    short of its glyphs, the removal took "s" of "screens" and released "reens"."""
    _helvetica_page(
        source := tmp_path / "escaped.pdf", r"BT /F0 12 Tf 72 700 Td (\ \ Fold\ the\ cable\ screens\ back) Tj ET"
    )
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("screen",)), workdir=tmp_path)
    assert (summary.fallback_pages, summary.lines_reset) == ([], 1)
    assert [text for text, _ in _poppler_words(out)] == ["Fold", "the", "cable", "s", "back"]


def test_a_match_located_short_of_its_glyphs_is_a_leak_not_a_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net under the fix above: a reader that places a match short of its glyphs (here its boxes cut
    to their first third) makes the removal take only "sc" of "screens". The gate looks for the whole value and
    the text check for the other words, so "reens" was released; a new word holding a part of the value now
    fails the job (burning the page in would show it: it lies outside the box)."""
    _helvetica_page(source := tmp_path / "short.pdf", "BT /F0 12 Tf 72 700 Td (Fold the cable screens back) Tj ET")

    def short(boxes: list[Rect]) -> list[Rect]:
        return [Rect(box.x0, box.y0, box.x0 + (box.x1 - box.x0) / 3, box.y1) for box in boxes]

    def located_short(src: Path, patterns: list[Any]) -> Any:
        found = locate(src, patterns)
        regions = {page: short(boxes) for page, boxes in found.regions.items()}
        return dataclasses.replace(found, regions=regions, cores={p: short(b) for p, b in found.cores.items()})

    monkeypatch.setattr(redact, "locate", located_short)
    with pytest.raises(DocJobError) as failure:
        redact_pdf(source, tmp_path / "out.pdf", RedactPolicy(regexes=("screen",)), workdir=tmp_path)
    assert failure.value.code == "redaction.leak" and "page(s) 1" in str(failure.value)
    assert "reen" not in str(failure.value)


def test_words_a_redaction_newly_reads_are_a_leak_only_when_they_hold_a_part_of_a_value() -> None:
    """Letters spaced apart read as one word once their line is re-set, and a match inside a word leaves the rest
    of it ("s" of "screens"): neither is a part of the value. What a removal that took only some of the match's
    glyphs leaves is: its end ("eens"), its beginning ("scr"), spaced out or not, unless the page is burned in or
    the word lies under a box (the gate's: the fallback burns that page in)."""

    def words(*texts: str, at: float = 0.0) -> list[Word]:
        return [Word(text, Rect(at + 10 * n, 0, at + 10 * n + 8, 10)) for n, text in enumerate(texts)]

    def check(now: list[Word], *, burned: frozenset[int] = frozenset(), boxes: tuple[Rect, ...] = ()) -> None:
        redact._check_nothing_split([(1, before)], [(1, now)], frozenset({"screen"}), {1: list(boxes)}, set(burned))

    before = words("W", "o", "r", "l", "d", "the")
    check(words("World", "s", "the"))
    for left in (words("eens", at=50), words("reens", at=50), words("scr", at=50), words("r", "e", "e", "n", at=50)):
        with pytest.raises(DocJobError):
            check(left)
        check(left, burned=frozenset({1}))
        check(left, boxes=(Rect(45, -1, 95, 11),))


def test_a_removal_that_fails_on_what_its_own_reader_sees_stays_a_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback could hide the SSN under the burned-in box here too, but an engine that removed nothing
    has a bug, not an unusual page: the job must fail, not pass burned in."""
    make_soft_mask_trace(source := tmp_path / "trace.pdf")
    monkeypatch.setattr(redact, "remove_content", lambda *_, **__: ContentRemoval(glyphs_removed=0, images_redacted=0))
    with pytest.raises(DocJobError) as failure:
        redact_pdf(source, tmp_path / "out.pdf", RedactPolicy(patterns=("ssn",)), workdir=tmp_path)
    assert failure.value.code == "redaction.leak" and SSN not in str(failure.value)


def test_a_glyph_mapped_to_a_control_character_does_not_break_the_word_boxes(tmp_path: Path) -> None:
    """pdftotext writes such a character into its XHTML as it is (an NCCN guideline maps a glyph to U+0017)."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"2 beginbfrange <01> <01> <0017> <20> <7E> <0020> endbfrange\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )

    def font(pdf: pikepdf.Pdf) -> pikepdf.Dictionary:
        widths = [500] + [round(text_width(chr(code), 1000)) for code in range(2, 127)]
        return pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type1,
            BaseFont=pikepdf.Name.Helvetica,
            FirstChar=1,
            LastChar=126,
            Widths=pikepdf.Array(widths),
            ToUnicode=pdf.make_stream(cmap),
        )

    _save(_new_pdf(b"BT /F1 12 Tf 72 700 Td (\\001Repeat these words) Tj ET", font=font), source := tmp_path / "c.pdf")
    assert b"\x17" in subprocess.run(["pdftotext", "-bbox", str(source), "-"], capture_output=True).stdout
    summary = redact_pdf(source, out := tmp_path / "out.pdf", RedactPolicy(regexes=("these",)), workdir=tmp_path)
    assert summary.pages[0].matches == {"custom1": 1} and summary.fallback_pages == []
    assert "these" not in subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True).stdout
