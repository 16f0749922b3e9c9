"""Redaction layout `mask`: whichever name was removed, the released page is the same.

For the line "Patient: NAME was seen on Monday." with twelve fake names of different widths, drawn in a
standard font, in an embedded TrueType subset, justified by word spacing and kerned in TJ arrays, the
positions pdfminer reads back and the pixels poppler renders (glyphs and boxes) are identical whatever the
name, the lines without a name stay exactly where they were, and the subset font keeps no glyph, width or
ToUnicode entry that only a name used. The gate and the text-kept check run inside every `redact_pdf`.
"""

from __future__ import annotations

import functools
import io
import itertools
import string
import subprocess
from pathlib import Path

import pikepdf
import pytest
from fontTools.agl import toUnicode
from fontTools.ttLib import TTFont, newTable
from pdfminer.cmapdb import CMapParser, FileUnicodeMap
from pdfminer.high_level import extract_pages
from pdfminer.layout import LTChar, LTContainer
from pikepdf import Name
from PIL import Image
from pypdf import PdfReader

from docjobs.domain.models import RedactionSummary
from docjobs.domain.policy import RedactLayout, RedactPolicy, RedactRegion
from docjobs.pdf.redaction.redact import redact_pdf
from tests.ci_skips import needs_tools
from tests.fixtures.office_samples import converted_by_libreoffice, letter_html
from tests.fixtures.redact_layout import (
    CARRIED_NOTE,
    CJK,
    FONT_SIZE,
    LABEL,
    LABEL_MASK_EM,
    LABEL_X,
    LAYOUT_FIXTURES,
    LEADING,
    NAME_REGEX,
    NAMES,
    OTHER_LINES,
    PREFIX,
    SUFFIX,
    TOP,
    WINANSI_LINE,
    line,
    make_carried,
    make_cff,
    make_cid_cff,
    make_embedded,
    make_embedded_without_cmap,
    make_first_use_truetype,
    make_label_ahead,
    make_superscript,
    make_tight,
    make_truetype_winansi,
    make_type1,
    vera_cff,
)

POLICY = RedactPolicy(regexes=(NAME_REGEX,))  # layout `mask` by default
_SHOWS = ("Tj", "TJ", "'", '"')
LINE_GAP = 6  # pixel rows at 72 dpi: a blank band this tall or less may lie within a line (antialiased serifs)
Glyph = tuple[str, float, float, float, float]


def glyphs(pdf: Path) -> list[Glyph]:
    """Every glyph pdfminer reads: its text and box, to a thousandth of a point."""

    def walk(item: object) -> list[Glyph]:
        if isinstance(item, LTChar):
            x0, y0, x1, y1 = (round(value, 3) for value in (item.x0, item.y0, item.x1, item.y1))
            return [(item.get_text(), x0, y0, x1, y1)]
        return [glyph for child in item for glyph in walk(child)] if isinstance(item, LTContainer) else []

    return [glyph for page in extract_pages(str(pdf)) for glyph in walk(page)]


def pixel_rows(pdf: Path, tmp_path: Path) -> list[bytes]:
    """The rows of pixels poppler draws of `pdf`'s page (72 dpi, gray)."""
    subprocess.run(["pdftoppm", "-r", "72", "-gray", "-singlefile", str(pdf), str(tmp_path / "page")], check=True)
    with Image.open(tmp_path / "page.pgm") as page:
        data, width = page.tobytes(), page.width
    return [data[start : start + width] for start in range(0, len(data), width)]


def pixels(pdf: Path, tmp_path: Path) -> bytes:
    return b"".join(pixel_rows(pdf, tmp_path))


def redact(make: object, name: str, tmp_path: Path, policy: RedactPolicy = POLICY) -> tuple[Path, RedactionSummary]:
    assert callable(make)
    make(source := tmp_path / "source.pdf", name)
    summary = redact_pdf(source, out := tmp_path / f"{name}.pdf", policy, workdir=tmp_path)
    return out, summary


def text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("kind", sorted(LAYOUT_FIXTURES))
def test_the_released_page_is_the_same_whichever_name_was_removed(kind: str, tmp_path: Path) -> None:
    make = LAYOUT_FIXTURES[kind]
    released: dict[str, tuple[list[Glyph], bytes]] = {}
    for name in NAMES:
        out, summary = redact(make, name, tmp_path)
        assert (summary.lines_reset, summary.fallback_pages) == (1, []), name
        assert name not in text(out)
        released[name] = (glyphs(out), pixels(out, tmp_path))
        if name == NAMES[0]:  # the lines without a name did not move
            source = glyphs(tmp_path / "source.pdf")
            for other in OTHER_LINES:
                first = other.split()[0]
                assert _line_at(source, first) == _line_at(released[name][0], first), (kind, other)
    first_glyphs, first_pixels = released[NAMES[0]]
    for name, (positions, rendered) in released.items():
        assert positions == first_glyphs, (kind, name)
        assert rendered == first_pixels, (kind, name)


def test_a_line_squeezed_before_a_label_on_its_baseline_is_the_same_whichever_name(tmp_path: Path) -> None:
    """With a mask LABEL_MASK_EM wide, the re-set line would run past a line number the form drew apart on its
    baseline: it is squeezed along the baseline to end a word space before it. The label stays where it was, and
    the squeeze, like the rest of the line, depends on the kept text and the label, not on the name."""
    policy = POLICY.model_copy(update={"mask_width": LABEL_MASK_EM})
    released: dict[str, tuple[list[Glyph], bytes]] = {}
    for name in NAMES:
        out, summary = redact(make_label_ahead, name, tmp_path, policy)
        assert (summary.lines_reset, summary.fallback_pages) == (1, []), name
        released[name] = (glyphs(out), pixels(out, tmp_path))
    positions, rendered = released[NAMES[0]]
    assert all(other == (positions, rendered) for other in released.values())
    on_line = _line_at(positions, "Patient:")
    label = [glyph for glyph in on_line if glyph[1] >= LABEL_X - 0.01]
    assert "".join(glyph[0] for glyph in label) == LABEL and label[0][1] == pytest.approx(LABEL_X, abs=0.01)
    kept = [glyph for glyph in on_line if glyph not in label]
    assert "".join(glyph[0] for glyph in kept).replace(" ", "") == (PREFIX + SUFFIX).replace(" ", "")
    assert LABEL_X - max(glyph[3] for glyph in kept) == pytest.approx(0.25 * FONT_SIZE, abs=0.01)


def test_keep_layout_leaves_the_gap_as_wide_as_the_name(tmp_path: Path) -> None:
    keep = POLICY.model_copy(update={"layout": RedactLayout.KEEP})
    starts = set()
    for name in NAMES[:3]:
        out, summary = redact(LAYOUT_FIXTURES["standard"], name, tmp_path, keep)
        assert summary.lines_reset == 0
        starts.add(next(x0 for glyph, x0, y0, *_ in glyphs(out) if glyph == "w" and y0 < 700))
    assert len(starts) == 3  # "was" sits where each name ended: the gap tells the name's width


def test_the_mask_width_is_the_policys(tmp_path: Path) -> None:
    def was_start(policy: RedactPolicy) -> float:
        out, _ = redact(LAYOUT_FIXTURES["standard"], NAMES[3], tmp_path, policy)
        return next(x0 for glyph, x0, y0, *_ in glyphs(out) if glyph == "w" and y0 < 700)

    wider = POLICY.model_copy(update={"mask_width": 8.0})
    assert was_start(wider) - was_start(POLICY) == pytest.approx(3 * 12.0, abs=0.01)  # three more ems at 12 pt


@pytest.mark.parametrize("make", [make_embedded, make_embedded_without_cmap], ids=["embedded", "without-cmap"])
def test_the_subset_font_keeps_only_what_the_kept_text_draws(make: object, tmp_path: Path) -> None:
    kept = set(PREFIX.strip() + SUFFIX.strip() + "".join(OTHER_LINES)) - {" "}
    programs = set()
    for name in NAMES:
        out, summary = redact(make, name, tmp_path)
        assert summary.fonts_resubset == 1
        with pikepdf.open(out) as pdf:
            (font,) = [font for _, font in pdf.pages[0].Resources.Font.items()]
            descendant = font.DescendantFonts[0]
            program = descendant.FontDescriptor.FontFile2.read_bytes()
            mapped = _to_unicode(font.ToUnicode.read_bytes())
            widths = list(descendant.W)
        programs.add(program)
        assert set(mapped.values()) - {" "} == kept, name  # nothing only the name used
        assert len(TTFont(io.BytesIO(program)).getGlyphOrder()) == len(set(mapped.values())) + 1  # and .notdef
        assert {int(cid) for cid in widths[::2]} <= set(mapped)
    assert len(programs) == 1  # the same program bytes, whichever name was there


@pytest.mark.parametrize("make", [make_embedded, make_embedded_without_cmap], ids=["embedded", "without-cmap"])
def test_the_kept_codes_do_not_count_the_removed_letters(make: object, tmp_path: Path) -> None:
    """fpdf2 numbers codes in order of first use, so a longer name pushes up the codes of every letter first drawn
    after it: re-subset, the font's codes are re-numbered from what is still drawn, and a name of two letters and
    one of twenty-two leave the same shown strings, widths, ToUnicode, CID map and program."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        out, _ = redact(make, name, tmp_path)
        with pikepdf.open(out) as pdf:
            (font,) = [font for _, font in pdf.pages[0].Resources.Font.items()]
            descendant = font.DescendantFonts[0]
            program = descendant.FontDescriptor.FontFile2.read_bytes()
            released.add(
                (
                    tuple(_shown_strings(pdf.pages[0])),
                    repr(descendant.W),
                    font.ToUnicode.read_bytes(),
                    descendant.CIDToGIDMap.read_bytes(),
                    tuple(TTFont(io.BytesIO(program)).getGlyphOrder()),
                    program,
                )
            )
        assert sorted(text(out).split()) == sorted(
            word for word in text(tmp_path / "source.pdf").split() if word not in name.split()
        )
    assert len(released) == 1


def test_a_simple_font_numbered_by_first_use_gets_codes_that_count_nothing(tmp_path: Path) -> None:
    """A simple TrueType subset whose one-byte codes are 1, 2, 3... in order of first use (symbolic, no /Encoding,
    a (3,0) cmap): re-subset, its codes are re-numbered from what is still drawn, so a name of two
    letters and one of twenty-two leave the same shown strings, widths, ToUnicode and program, whose symbolic cmap
    reaches every kept glyph: poppler reads the same words and draws the kept lines as in the source."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        out, summary = redact(make_first_use_truetype, name, tmp_path)
        assert (summary.fonts_resubset, summary.fallback_pages) == (1, []), name
        with pikepdf.open(out) as pdf:
            (font,) = [font for _, font in pdf.pages[0].Resources.Font.items()]
            program = font.FontDescriptor.FontFile2.read_bytes()
            shown = tuple(_shown_strings(pdf.pages[0]))
            entries = (int(font.FirstChar), repr(font.Widths), font.ToUnicode.read_bytes(), str(font.BaseFont))
        released.add((shown, entries, program))
        codes = {code for string in shown for code in string}
        assert sorted(codes) == list(range(1, len(codes) + 1)), name  # dense from 1 (fewer than 32)
        assert {code - 0xF000 for code in TTFont(io.BytesIO(program))["cmap"].getcmap(3, 0).cmap} == codes
        source = tmp_path / "source.pdf"
        assert sorted(text(out).split()) == sorted(word for word in text(source).split() if word not in name.split())
        assert _but_line(1, out, source, tmp_path) == _but_line(1, source, source, tmp_path), name  # the name's
    assert len(released) == 1


def test_a_simple_font_drawing_code_32_under_word_spacing_keeps_its_codes(tmp_path: Path) -> None:
    """Word spacing applies to code 32 whatever glyph it draws: where the document sets one, a font numbered by
    first use that draws code 32 (a digit of the fourth line) keeps its codes, and its kept lines read and draw as
    in the source."""
    spaced_line = "Call 0123456789 today."
    out, summary = redact(functools.partial(make_first_use_truetype, spaced_line=spaced_line), NAMES[0], tmp_path)
    assert (summary.fonts_resubset, summary.fallback_pages) == (1, [])
    source = tmp_path / "source.pdf"
    with pikepdf.open(source) as before, pikepdf.open(out) as after:
        kept = _shown_strings(before.pages[0])[-1]
        assert 32 in kept
        assert _shown_strings(after.pages[0])[-1] == kept
    read = [[line for line in text(pdf).splitlines() if line.startswith("Call")] for pdf in (source, out)]
    assert read[0] == read[1] and len(read[0]) == 1  # "Call 01 23456789": the spacing after code 32 shows
    assert _but_line(1, out, source, tmp_path) == _but_line(1, source, source, tmp_path)


@needs_tools("soffice")
def test_a_libreoffice_letter_is_renumbered_and_still_drawn(tmp_path: Path) -> None:
    """LibreOffice writes its TrueType subsets as simple fonts numbered by first use (symbolic, no /Encoding, a
    (3,0) cmap, a ToUnicode): re-subset, two names of different lengths leave the same shown strings and fonts,
    and poppler draws everything below the name's line as in the source (with the cmap the subsetter dropped,
    it drew nothing of the re-subset font)."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        html = letter_html("the referral").replace("<h1>", f"<p>{line(name)}</p><h1>")
        source = converted_by_libreoffice(html, "pdf", tmp_path / str(len(name)))
        summary = redact_pdf(source, out := source.with_name("out.pdf"), POLICY, workdir=source.parent)
        assert (summary.fonts_resubset, summary.fallback_pages) == (1, []), name
        with pikepdf.open(out) as pdf:
            fonts = [font for _, font in sorted(pdf.pages[0].Resources.Font.items())]
            entries = [(repr(font.Widths), font.ToUnicode.read_bytes(), str(font.BaseFont)) for font in fonts]
            programs = [font.FontDescriptor.FontFile2.read_bytes() for font in fonts]
            released.add((tuple(_shown_strings(pdf.pages[0])), tuple(entries), tuple(programs)))
        assert _but_line(0, out, source, tmp_path) == _but_line(0, source, source, tmp_path), name  # the name's
    assert len(released) == 1


def make_embedded_with_form(path: Path, name: str) -> None:
    """`embedded` with its last line drawn by a Form XObject that is also a stamp annotation's appearance."""
    make_embedded(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        page = pdf.pages[0]
        content = page.Contents.read_bytes()
        last = content.rindex(b"BT ")
        resources = pikepdf.Dictionary(Font=page.Resources.Font)
        form = pdf.make_stream(
            b"/F1 12 Tf " + content[last:], Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 612, 792]
        )
        form.Resources = resources
        page.Resources.XObject = pikepdf.Dictionary(Fm0=form)
        page.Contents = pdf.make_stream(content[:last] + b"/Fm0 Do\n")
        stamp = pikepdf.Dictionary(Type=Name.Annot, Subtype=Name.Stamp, Rect=[72, 500, 400, 540])
        stamp.AP = pikepdf.Dictionary(N=form)
        page.Annots = pdf.make_indirect(pikepdf.Array([pdf.make_indirect(stamp)]))
        pdf.save(path, deterministic_id=True)


def test_a_form_drawn_by_the_page_and_an_annotation_is_renumbered_once(tmp_path: Path) -> None:
    """The kept line's strings sit in a Form XObject that the page draws and an annotation shows: rewritten once,
    they still read as that line through the new ToUnicode, and are the same bytes whichever name was removed."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        out, summary = redact(make_embedded_with_form, name, tmp_path)
        assert (summary.fonts_resubset, summary.fallback_pages) == (1, []), name
        with pikepdf.open(out) as pdf:
            page = pdf.pages[0]
            (font,) = [font for _, font in page.Resources.Font.items()]
            mapped = _to_unicode(font.ToUnicode.read_bytes())
            (form,) = [xobject for _, xobject in page.Resources.XObject.items() if isinstance(xobject, pikepdf.Stream)]
            assert page.Annots[0].AP.N.objgen == form.objgen
            shown = b"".join(_shown_strings(form))
        codes = [int.from_bytes(shown[i : i + 2], "big") for i in range(0, len(shown), 2)]
        assert "".join(mapped[code] for code in codes) == OTHER_LINES[1], name
        assert OTHER_LINES[1] in text(out)
        released.add(shown)
    assert len(released) == 1


def make_embedded_offered_by_form(path: Path, name: str, *, shared: bool) -> None:
    """`embedded`, whose font the form's default resources also offer for new field values; `shared`: as
    LibreOffice writes it, the form's /DR is the page's own /Resources dictionary."""
    make_embedded(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        resources = pdf.pages[0].Resources
        ((key, font),) = list(resources.Font.items())
        defaults = pdf.make_indirect(resources) if shared else pikepdf.Dictionary(Font={key: font})
        pdf.pages[0].Resources = defaults
        pdf.Root.AcroForm = pikepdf.Dictionary(
            Fields=pikepdf.Array(), DA=pikepdf.String(f"{key} 10 Tf 0 g"), DR=defaults
        )
        pdf.save(path, deterministic_id=True)


@pytest.mark.parametrize("shared", [False, True], ids=["own", "page-resources"])
def test_a_font_the_form_offers_is_resubset_and_the_form_offers_helvetica(shared: bool, tmp_path: Path) -> None:
    """A viewer may draw any glyph with a font the form offers for new values, so it could not be cut down and its
    pages were burned in: the form now offers Helvetica under the same name, and the font is re-subset with the
    page's text kept, also where the form's resources are the page's."""
    kept = set(PREFIX.strip() + SUFFIX.strip() + "".join(OTHER_LINES)) - {" "}
    make = functools.partial(make_embedded_offered_by_form, shared=shared)
    out, summary = redact(make, NAMES[3], tmp_path)
    assert (summary.fonts_resubset, summary.fallback_pages) == (1, [])
    with pikepdf.open(out) as pdf:
        ((key, font),) = list(pdf.pages[0].Resources.Font.items())
        offered = pdf.Root.AcroForm.DR.Font[key]
        assert (str(offered.Subtype), str(offered.BaseFont), Name.FontDescriptor in offered) == (
            "/Type1",
            "/Helvetica",
            False,
        )
        assert Name.FontFile2 in font.DescendantFonts[0].FontDescriptor  # the page draws with its own font still
        assert set(_to_unicode(font.ToUnicode.read_bytes()).values()) - {" "} == kept
    released = text(out)
    assert all(line in released for line in OTHER_LINES) and NAMES[3] not in released


def make_embedded_twice_over_one_cidfont(path: Path, name: str) -> None:
    """`embedded`, its last line drawn with a second Type0 font over the same CIDFont (a producer's font per page
    over one program): the second font loses no glyph."""
    make_embedded(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        page = pdf.pages[0]
        first = page.Resources.Font.F1
        page.Resources.Font.F2 = pdf.make_indirect(pikepdf.Dictionary({key: value for key, value in first.items()}))
        content = page.Contents.read_bytes().replace(b"BT 72.00 660.00 Td", b"BT /F2 12.00 Tf 72.00 660.00 Td")
        page.Contents = pdf.make_stream(content)
        pdf.save(path, deterministic_id=True)


def test_fonts_over_one_cidfont_are_cut_down_together(tmp_path: Path) -> None:
    """Cut down and re-numbered alone, the name's font rewrote the CIDFont the other font draws with too, whose
    strings kept their codes: that line was drawn with wrong glyphs and widths, and the page was burned in (the
    NCCN guidelines, pypdf's issue-604, lost 9 pages so). Now both are cut down to the codes either draws."""
    out, summary = redact(make_embedded_twice_over_one_cidfont, NAMES[3], tmp_path)
    assert summary.fallback_pages == [] and summary.fonts_resubset >= 1
    released = text(out)
    assert all(line in released for line in OTHER_LINES) and NAMES[3] not in released
    make_embedded_twice_over_one_cidfont(source := tmp_path / "again.pdf", NAMES[3])
    last_line = slice(792 - 668, 792 - 652)  # rows of the line the second font draws, untouched by the redaction
    assert pixel_rows(out, tmp_path)[last_line] == pixel_rows(source, tmp_path)[last_line]


def test_fonts_over_one_cidfont_numbered_by_first_use_get_one_set_of_codes_that_count_nothing(tmp_path: Path) -> None:
    """Two Type0 fonts over one CIDFont numbered by first use (a producer's font per page over one program): cut
    down together, they are re-numbered together too, so a name of two letters and one of twenty-two leave the
    same shown strings, ToUnicodes, widths, CID map and program, and the line the second font draws reads and
    draws as in the source."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        out, summary = redact(make_embedded_twice_over_one_cidfont, name, tmp_path)
        assert (summary.fonts_resubset, summary.fallback_pages) == (1, []), name  # one program, shared
        with pikepdf.open(out) as pdf:
            fonts = [font for _, font in sorted(pdf.pages[0].Resources.Font.items())]
            (shared,) = {font.DescendantFonts[0].objgen for font in fonts}
            descendant = pdf.get_object(shared)
            shown = tuple(_shown_strings(pdf.pages[0]))
            released.add(
                (
                    shown,
                    tuple(font.ToUnicode.read_bytes() for font in fonts),
                    tuple(str(font.BaseFont) for font in fonts),
                    repr(descendant.W),
                    descendant.CIDToGIDMap.read_bytes(),
                    descendant.FontDescriptor.FontFile2.read_bytes(),
                )
            )
        codes = {int.from_bytes(string[i : i + 2], "big") for string in shown for i in range(0, len(string), 2)}
        assert sorted(codes) == list(range(1, len(codes) + 1)), name  # dense from 1, for both fonts
        source = tmp_path / "source.pdf"
        assert sorted(text(out).split()) == sorted(word for word in text(source).split() if word not in name.split())
        last_line = slice(792 - 668, 792 - 652)  # rows of the line the second font draws
        assert pixel_rows(out, tmp_path)[last_line] == pixel_rows(source, tmp_path)[last_line], name
    assert len(released) == 1


def make_first_use_truetype_twice_over_one_descriptor(path: Path, name: str) -> None:
    """`first_use_truetype`, its last line drawn with a second font dictionary over the same descriptor."""
    make_first_use_truetype(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        page = pdf.pages[0]
        first = page.Resources.Font.F1
        page.Resources.Font.F2 = pdf.make_indirect(pikepdf.Dictionary({key: value for key, value in first.items()}))
        content = page.Contents.read_bytes()
        last = content.rindex(b" <")
        page.Contents = pdf.make_stream(content[:last] + b" /F2 %g Tf" % FONT_SIZE + content[last:])
        pdf.save(path, deterministic_id=True)


def test_simple_fonts_over_one_descriptor_numbered_by_first_use_get_one_set_of_codes(tmp_path: Path) -> None:
    """Two symbolic TrueType fonts over one descriptor, numbered by first use: re-numbered together, a name of two
    letters and one of twenty-two leave the same shown strings, widths, ToUnicodes and program, whose symbolic
    cmap reaches every kept code; the last line, the second font's, draws as in the source."""
    released = set()
    for name in (NAMES[0], NAMES[9]):
        out, summary = redact(make_first_use_truetype_twice_over_one_descriptor, name, tmp_path)
        assert (summary.fonts_resubset, summary.fallback_pages) == (1, []), name
        with pikepdf.open(out) as pdf:
            fonts = [font for _, font in sorted(pdf.pages[0].Resources.Font.items())]
            (descriptor,) = {font.FontDescriptor.objgen for font in fonts}
            program = pdf.get_object(descriptor).FontFile2.read_bytes()
            shown = tuple(_shown_strings(pdf.pages[0]))
            entries = tuple(
                (int(f.FirstChar), repr(f.Widths), f.ToUnicode.read_bytes(), str(f.BaseFont)) for f in fonts
            )
        released.add((shown, entries, program))
        codes = {code for string in shown for code in string}
        assert sorted(codes) == list(range(1, len(codes) + 1)), name
        assert {code - 0xF000 for code in TTFont(io.BytesIO(program))["cmap"].getcmap(3, 0).cmap} == codes
        source = tmp_path / "source.pdf"
        assert sorted(text(out).split()) == sorted(word for word in text(source).split() if word not in name.split())
        assert _but_line(1, out, source, tmp_path) == _but_line(1, source, source, tmp_path), name
    assert len(released) == 1


def make_truetype_twice_over_one_descriptor(path: Path, name: str) -> None:
    """`truetype_winansi`, its second line drawn with a second font dictionary over the same descriptor (and so the
    same program), which draws letters the name's line does not."""
    make_truetype_winansi(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        page = pdf.pages[0]
        first = page.Resources.Font.F1
        page.Resources.Font.F2 = pdf.make_indirect(pikepdf.Dictionary({key: value for key, value in first.items()}))
        content = page.Contents.read_bytes().replace(b") Tj (", b") Tj /F2 %g Tf (" % FONT_SIZE)
        page.Contents = pdf.make_stream(content)
        pdf.save(path, deterministic_id=True)


def test_simple_fonts_over_one_descriptor_are_cut_down_together(tmp_path: Path) -> None:
    """Cut down alone, the name's font gave the descriptor they share a program without the other font's letters:
    its line still read as text, but drew blanks. Now both are cut down to the codes either draws."""
    out, summary = redact(make_truetype_twice_over_one_descriptor, NAMES[3], tmp_path)
    assert summary.fallback_pages == [] and summary.fonts_resubset >= 1
    assert WINANSI_LINE in text(out) and NAMES[3] not in text(out)
    make_truetype_twice_over_one_descriptor(source := tmp_path / "again.pdf", NAMES[3])
    second_line = slice(round(792 - TOP + LEADING - FONT_SIZE), round(792 - TOP + LEADING + FONT_SIZE / 2))
    assert pixel_rows(out, tmp_path)[second_line] == pixel_rows(source, tmp_path)[second_line]


def test_a_nonsymbolic_truetype_font_keeps_the_glyphs_its_unicode_cmap_gives(tmp_path: Path) -> None:
    """WinAnsi codes reach glyphs through Unicode and the (3,1) cmap, as viewers draw them: the subset keeps the
    right quote and eth that the kept line draws (the (1,0) cmap gives iacute for one and nothing for the other)."""
    out, summary = redact(make_truetype_winansi, NAMES[3], tmp_path)
    assert (summary.fonts_resubset, summary.fallback_pages) == (1, [])
    with pikepdf.open(out) as pdf:
        (font,) = [font for _, font in pdf.pages[0].Resources.Font.items()]
        program = TTFont(io.BytesIO(font.FontDescriptor.FontFile2.read_bytes()))
    kept = set(PREFIX + SUFFIX + WINANSI_LINE) - {" "}
    assert {chr(code) for code in program["cmap"].getcmap(3, 1).cmap} - {" "} == kept
    released = text(out)
    assert WINANSI_LINE in released and NAMES[3] not in released


@pytest.mark.parametrize("make", [make_type1, make_cff, make_cid_cff], ids=["type1", "cff", "cid-cff"])
def test_a_type1_or_bare_cff_font_is_resubset_with_its_text_kept(make: object, tmp_path: Path) -> None:
    """The name's letters leave the program (glyph names and outlines), the widths, the encoding and the
    ToUnicode; every other word stays extractable and no page is burned in."""
    name = NAMES[3]  # "Zoë Quinby": Z, ë, Q, b are drawn by the name alone
    out, summary = redact(make, name, tmp_path)
    assert (summary.fallback_pages, summary.fonts_resubset) == ([], 1)
    before, after = text(tmp_path / "source.pdf"), text(out)
    assert sorted(after.split()) == sorted(word for word in before.split() if word not in name.split())
    extracted = "".join(page.extract_text() for page in PdfReader(out).pages)
    assert not any(word in released for word in name.split() for released in (after, extracted))
    kept = set(after) - set(string.whitespace) | {" "}  # the characters still drawn
    with pikepdf.open(out) as pdf:
        (font,) = [font for _, font in pdf.pages[0].Resources.Font.items() if font.BaseFont != Name.Helvetica]
        simple = font.Subtype == Name.Type1
        described = font if simple else font.DescendantFonts[0]
        program = described.FontDescriptor.FontFile3
        assert program.Subtype == (Name.Type1C if simple else Name.CIDFontType0C)
        charset = _cff_charset(program.read_bytes())
        if simple:
            assert {toUnicode(glyph) for glyph in charset} == kept | {""}  # .notdef reads as nothing
            differences = [str(item)[1:] for item in font.Encoding.Differences if isinstance(item, Name)]
            assert set(differences) == set(charset) - {".notdef"}
            drawn = [code for code, width in enumerate(font.Widths, start=int(font.FirstChar)) if width]
            assert {bytes([code]).decode("cp1252") for code in drawn} == kept
        else:
            by_character = vera_cff(cid_keyed=True)[1]
            assert charset == {".notdef", *(f"cid{by_character[character]:05d}" for character in kept)}
            assert set(_to_unicode(font.ToUnicode.read_bytes()).values()) == kept


def test_a_font_that_cannot_be_resubset_sends_its_pages_to_the_fallback(tmp_path: Path) -> None:
    """A Type1 program cut short (no charstrings): the pages that draw it are burned in, and the summary says
    which kind of font could not be re-subset."""

    def make_broken_type1(path: Path, name: str) -> None:
        make_type1(path, name)
        with pikepdf.open(path, allow_overwriting_input=True) as pdf:
            for descriptor in [obj for obj in pdf.objects if isinstance(obj, pikepdf.Dictionary)]:
                if Name.FontFile in descriptor:
                    program = descriptor.FontFile
                    descriptor.FontFile = pdf.make_stream(program.read_bytes()[: int(program.Length1)])
            pdf.save(path, deterministic_id=True)

    out, summary = redact(make_broken_type1, NAMES[3], tmp_path)
    assert summary.fallback_pages == [1, 2]  # page 2 draws the same font
    reasons = {page.page: (page.fallback, page.fallback_fonts) for page in summary.pages}
    assert reasons == {1: ("font_not_resubset", ["type1"]), 2: ("font_not_resubset", ["type1"])}
    with pikepdf.open(out) as pdf:
        assert not any(Name.Font in page.Resources for page in pdf.pages)
        assert not any(
            isinstance(obj, pikepdf.Dictionary) and Name.FontFile in obj for obj in pdf.objects
        )  # the Type1 program is gone with the pages that drew it


@pytest.mark.parametrize("layout", [RedactLayout.MASK, RedactLayout.KEEP])
def test_tightly_set_lines_keep_their_letters_above_and_below_a_removed_name(
    layout: RedactLayout, tmp_path: Path
) -> None:
    """The lines above and below are closer than a glyph box is tall: the removal aims at the middle of the
    name's glyphs, so theirs stay (none moves, none vanishes) and the page is not burned in."""
    policy = POLICY.model_copy(update={"layout": layout})
    for name in (NAMES[3], NAMES[9]):
        out, summary = redact(make_tight, name, tmp_path, policy)
        source = tmp_path / "source.pdf"
        assert (summary.fallback_pages, summary.lines_reset) == ([], int(layout is RedactLayout.MASK)), name
        assert name not in text(out) and all(name not in page.extract_text() for page in PdfReader(out).pages)
        name_line = next(y0 for glyph, _, y0, *_ in glyphs(source) if glyph == PREFIX[0])
        neighbours = [glyph for glyph in glyphs(source) if glyph[2] != name_line]
        assert len(neighbours) == 2 * len(line(name))
        assert sorted(glyph for glyph in glyphs(out) if glyph[2] != name_line) == sorted(neighbours), name


def test_a_line_with_a_superscript_is_reset_as_one(tmp_path: Path) -> None:
    """The name's line runs on after a raised sign: re-set alone, its first run's mask would cover the rest."""
    for name in (NAMES[0], NAMES[9]):
        out, summary = redact(make_superscript, name, tmp_path)
        assert (summary.fallback_pages, summary.lines_reset) == ([], 1), name
        released = text(out)
        assert name not in released and "seen® on Monday." in released, released
        assert all(other in released for other in OTHER_LINES)


def test_text_drawn_after_the_line_with_no_move_goes_on_from_its_new_end(tmp_path: Path) -> None:
    """Text drawn after the name's line with no move between starts where the line ended (pdfminer's `simple3`:
    vertical kana in a non-embedded Japanese font, with the predefined CMap `V`). Left in place, its place would
    tell how wide the name was; left to follow the re-set line, it landed on the mask, and the page was burned in.
    It is carried along with the line's end: its glyphs, the mask and the last line (after a relative Td, made
    absolute) are where they are whichever name was removed, and the carried text as far from the line's end as
    before. The walker now places vertical glyphs (1 em down each: no /W2) and those of a 2-byte predefined CMap."""
    released: dict[str, tuple[list[Glyph], bytes]] = {}
    for name in (NAMES[0], NAMES[1], NAMES[9]):
        out, summary = redact(make_carried, name, tmp_path)
        assert (summary.lines_reset, summary.fallback_pages) == (1, []), name
        read = text(out)
        assert name not in read and all(other in read for other in OTHER_LINES), read
        assert CJK in read.replace("\n", "") and CARRIED_NOTE in read, read
        released[name] = (glyphs(out), pixels(out, tmp_path))
    positions, rendered = released[NAMES[0]]
    assert all(other == (positions, rendered) for other in released.values())
    make_carried(source := tmp_path / "source.pdf", NAMES[0])
    before, after = glyphs(source), positions
    assert _from_line_end(after, CARRIED_NOTE) == pytest.approx(_from_line_end(before, CARRIED_NOTE), abs=0.01)
    last = OTHER_LINES[1].split()[0]
    assert _line_at(after, last) == _line_at(before, last)


def _from_line_end(shown: list[Glyph], word: str) -> float:
    """How far `word` starts after the end of "Monday." (the end of the name's line, re-set or not)."""
    spelled = "".join(glyph[0] for glyph in shown)
    return shown[spelled.index(word)][1] - shown[spelled.index("Monday.") + len("Monday.") - 1][3]


def name_region(source: Path, name: str) -> RedactRegion:
    """The box a reviewer draws over the name: its glyphs' boxes, a third of a point inside on either end so that
    it touches no neighbouring glyph (the space before, the space after)."""
    shown = [glyph for glyph in glyphs(source) if glyph[0].strip()]
    letters = name.replace(" ", "")
    first = "".join(glyph[0] for glyph in shown).index(PREFIX.strip() + letters) + len(PREFIX.strip())
    boxes = shown[first : first + len(letters)]
    x0, x1 = min(box[1] for box in boxes) + 0.3, max(box[3] for box in boxes) - 0.3
    return RedactRegion(page=1, x0=x0, y0=min(box[2] for box in boxes), x1=x1, y1=max(box[4] for box in boxes))


def redact_region(
    make: object, name: str, tmp_path: Path, layout: RedactLayout = RedactLayout.MASK, art: bytes = b""
) -> tuple[Path, RedactionSummary]:
    """Redact the name by the box drawn over it (no pattern); `art`: content drawn before the text."""
    assert callable(make)
    make(source := tmp_path / "source.pdf", name)
    if art:
        with pikepdf.open(source, allow_overwriting_input=True) as pdf:
            pdf.pages[0].contents_add(pdf.make_stream(art), prepend=True)
            pdf.save(source, deterministic_id=True)
    policy = RedactPolicy(regions=(name_region(source, name),), layout=layout)
    summary = redact_pdf(source, out := tmp_path / f"{name}.pdf", policy, workdir=tmp_path)
    return out, summary


@pytest.mark.parametrize("kind", ["standard", "embedded"])
def test_a_box_drawn_over_a_name_leaves_the_same_page_whichever_name(kind: str, tmp_path: Path) -> None:
    """A region over text is laid out as a pattern span: the glyphs under it go, the line is re-set and the box
    becomes the fixed-width mask. Positions, boxes and pixels are the same for twelve names of every width."""
    released: dict[str, tuple[list[Glyph], bytes]] = {}
    for name in NAMES:
        out, summary = redact_region(LAYOUT_FIXTURES[kind], name, tmp_path)
        assert (summary.lines_reset, summary.fallback_pages, summary.spans) == (1, [], 1), name
        assert summary.pages[0].regions == 1  # one box drawn: the mask, not the region
        assert name not in text(out) and all(other in text(out) for other in OTHER_LINES)
        released[name] = (glyphs(out), pixels(out, tmp_path))
    first_glyphs, first_pixels = released[NAMES[0]]
    for name, (positions, rendered) in released.items():
        assert positions == first_glyphs, (kind, name)
        assert rendered == first_pixels, (kind, name)


def test_a_box_drawn_with_layout_keep_stays_where_and_as_wide_as_it_was_drawn(tmp_path: Path) -> None:
    starts, rendered = set(), set()
    for name in NAMES[:3]:
        out, summary = redact_region(LAYOUT_FIXTURES["standard"], name, tmp_path, RedactLayout.KEEP)
        assert (summary.lines_reset, summary.fallback_pages) == (0, [])
        assert name not in text(out)
        starts.add(next(x0 for glyph, x0, y0, *_ in glyphs(out) if glyph == "w" and y0 < 700))
        rendered.add(pixels(out, tmp_path))
    assert len(starts) == len(rendered) == 3  # the gap and the box tell each name's width


def test_a_box_drawn_over_vector_art_keeps_its_size_and_its_line(tmp_path: Path) -> None:
    """A stroke under the name (a signature, an underline) is not removed from the content: the region keeps its
    box at the size drawn to cover it, and its line stays in place (re-set, the text after it would slide under
    the box). A background filled over the whole region shows nothing under it and does not count."""
    underline = b"q 0.5 w 60 679 m 560 679 l S Q\n"  # across the name, a point under its baseline (680)
    background = b"q 0.9 g 0 0 612 792 re f Q\n"
    out, summary = redact_region(LAYOUT_FIXTURES["standard"], NAMES[3], tmp_path, art=underline)
    assert (summary.lines_reset, summary.fallback_pages, summary.pages[0].regions) == (0, [], 1)
    assert NAMES[3] not in text(out)
    out, summary = redact_region(LAYOUT_FIXTURES["standard"], NAMES[3], tmp_path, art=background)
    assert (summary.lines_reset, summary.fallback_pages, summary.pages[0].regions) == (1, [], 1)


def test_a_box_drawn_over_no_text_changes_no_text(tmp_path: Path) -> None:
    make_standard_source = LAYOUT_FIXTURES["standard"]
    make_standard_source(source := tmp_path / "source.pdf", NAMES[3])
    policy = RedactPolicy(regions=(RedactRegion(page=1, x0=300, y0=100, x1=400, y1=200),))
    summary = redact_pdf(source, out := tmp_path / "out.pdf", policy, workdir=tmp_path)
    assert (summary.lines_reset, summary.fallback_pages, summary.pages[0].regions) == (0, [], 1)
    assert glyphs(out) == glyphs(source)


def _line_at(positions: list[Glyph], first_word: str) -> list[Glyph]:
    """The glyphs on the baseline of the line that starts with `first_word`."""
    starts = [index for index in range(len(positions)) if _spells(positions, index, first_word)]
    assert starts, first_word
    baseline = positions[starts[0]][2]
    return [glyph for glyph in positions if glyph[2] == baseline]


def _spells(positions: list[Glyph], index: int, word: str) -> bool:
    return "".join(glyph[0] for glyph in positions[index : index + len(word)]) == word


def _shown_strings(content: pikepdf.Page | pikepdf.Stream) -> list[bytes]:
    """Every string a page's or stream's text operators show, in order (TJ arrays without their offsets)."""
    shown = []
    for instruction in pikepdf.parse_content_stream(content):
        if isinstance(instruction, pikepdf.ContentStreamInstruction) and str(instruction.operator) in _SHOWS:
            operand = instruction.operands[-1]
            items = operand if isinstance(operand, pikepdf.Array) else [operand]
            shown += [bytes(item) for item in items if isinstance(item, pikepdf.String)]
    return shown


def _but_line(number: int, pdf: Path, ruler: Path, tmp_path: Path) -> bytes:
    """The pixels poppler draws of `pdf` (72 dpi, gray) but the band of `ruler`'s line of ink `number` (from 0, top
    down), which reaches halfway to the lines around it (a blank band taller than LINE_GAP rows parts two lines)."""
    rows = [pixel_rows(page, tmp_path) for page in (ruler, pdf)]
    inked = [row for row, pixels in enumerate(rows[0]) if min(pixels) < 128]
    parts = [(above + below) // 2 for above, below in itertools.pairwise(inked) if below - above > LINE_GAP]
    top, bottom = [0, *parts, len(rows[0])][number : number + 2]
    return b"".join(rows[1][:top] + rows[1][bottom:])


def _to_unicode(data: bytes) -> dict[int, str]:
    cmap = FileUnicodeMap()
    CMapParser(cmap, io.BytesIO(data)).run()
    return dict(cmap.cid2unichr)


def _cff_charset(data: bytes) -> set[str]:
    """The glyph names of a bare CFF program, parsed back with fontTools."""
    table = newTable("CFF ")
    table.decompile(data, TTFont())
    return set(table.cff[table.cff.fontNames[0]].charset)
