"""Parser budgets at the core: each hostile document of tests/hostile.py fails with its stable code (or, being
valid within the budgets, succeeds), and fails cheaply: a bomb is measured in a fresh interpreter whose peak
memory must stay far below what the unbounded parsers used (1 GiB for a 2 KiB Flate bomb, 535 MiB for an
operator bomb, 446 MiB for repeated page references)."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Name
from PIL import Image
from pydantic import ValidationError

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import LimitsPolicy, Policy, RedactPolicy, RedactRegion, WatermarkPolicy
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, budgets_for, decoded_size
from docjobs.pdf.images import image_to_pdf
from docjobs.pdf.inspect import inspect_pdf
from docjobs.pdf.raster import watermark_raster
from docjobs.pdf.redaction.content import remove_content
from docjobs.pdf.redaction.redact import redact_pdf
from docjobs.pdf.redaction.regions import Rect, UnsafePage
from docjobs.pdf.redaction.sites import document_sites
from docjobs.pdf.signatures import signature_count
from docjobs.pdf.watermark import watermark_structure
from tests import hostile
from tests.fixtures.jbig2 import jbig2_image
from tests.fixtures.samples import make_sample_pdf

ROOT = Path(__file__).resolve().parent.parent
PEAK_MIB = 200  # a fresh interpreter with pikepdf is ~40 MiB; the unbounded parsers needed 446 MiB to 1 GiB
BOMB_MIB = 300  # decoded size of the Flate bombs: above the 256 MiB stream budget

_ISOLATED = """
import json, sys
from pathlib import Path
from docjobs.domain.errors import DocJobError
from docjobs.pdf.inspect import inspect_pdf
from docjobs.pdf.watermark import watermark_structure
path = Path(sys.argv[1])
try:
    {call}
    outcome = "ok"
except DocJobError as error:
    outcome = error.code
# VmHWM, not ru_maxrss: the latter counts the memory of the (large) test process that forked this one.
status = Path("/proc/self/status").read_text().splitlines()
peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"outcome": outcome, "peak_mib": peak // 1024}}))
"""


def isolated(call: str, path: Path) -> tuple[str, int]:
    """Run `call` (on `path`) in a fresh interpreter: its outcome (a failure code or "ok") and peak RSS."""
    result = subprocess.run(
        [sys.executable, "-c", _ISOLATED.format(call=call), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(result.stdout)
    return report["outcome"], report["peak_mib"]


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def code_of(call: object) -> str:
    assert callable(call)
    with pytest.raises(DocJobError) as caught:
        call()
    return caught.value.code


# --- decoded bytes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make", [hostile.flate_bomb_page_stream, hostile.flate_bomb_metadata, hostile.flate_bomb_unreferenced]
)
def test_a_flate_bomb_anywhere_in_the_file_fails_before_qpdf_decodes_it(make: object, tmp_path: Path) -> None:
    assert callable(make)
    bomb = written(tmp_path / "bomb.pdf", make(BOMB_MIB))
    assert bomb.stat().st_size < 4096
    outcome, peak = isolated("inspect_pdf(path)", bomb)
    assert outcome == "input.too_complex"
    assert peak < PEAK_MIB


def test_the_document_budget_adds_up_every_stream(tmp_path: Path) -> None:
    source = written(tmp_path / "metadata.pdf", hostile.flate_bomb_metadata(8))
    assert inspect_pdf(source).page_count == 1  # 8 MiB is within every default budget
    small = Budgets(max_stream_bytes=16 * 1024 * 1024, max_document_bytes=4 * 1024 * 1024)
    assert code_of(lambda: inspect_pdf(source, budgets=small)) == "input.too_complex"


def _lzw(data: bytes) -> bytes:
    """PDF LZW (early change), only to make test streams: the codes, MSB first, between a clear and an end."""
    table = {bytes([n]): n for n in range(256)}
    width, bits, count, out = 9, 0, 0, bytearray()

    def emit(code: int) -> None:
        nonlocal bits, count
        bits, count = (bits << width) | code, count + width
        while count >= 8:
            count -= 8
            out.append((bits >> count) & 0xFF)
        bits &= (1 << count) - 1

    emit(256)
    word = b""
    for value in data:
        extended = word + bytes([value])
        if extended in table:
            word = extended
            continue
        emit(table[word])
        table[extended] = len(table) + 2
        if len(table) + 2 >= 1 << width and width < 12:  # the decoder, one entry behind, switches early
            width += 1
        if len(table) + 2 >= 4094:
            emit(256)
            table, width = {bytes([n]): n for n in range(256)}, 9
        word = bytes([value])
    emit(table[word])
    emit(257)
    if count:
        out.append((bits << (8 - count)) & 0xFF)
    return bytes(out)


def _run_length(data: bytes) -> bytes:
    """RunLength with literal runs of up to 128 bytes and one repeated run (1 byte made 128)."""
    literal = b"".join(bytes([len(run) - 1]) + run for run in (data[i : i + 128] for i in range(0, len(data), 128)))
    return literal + b"\x81x\x80"


@pytest.mark.parametrize(
    ("encode", "filters"),
    [
        (lambda data: zlib.compress(data), ["/FlateDecode"]),
        (lambda data: data.hex().encode() + b">", ["/ASCIIHexDecode"]),
        (lambda data: __import__("base64").a85encode(data) + b"~>", ["/ASCII85Decode"]),
        (_lzw, ["/LZWDecode"]),
        (_run_length, ["/RL"]),
        (lambda data: zlib.compress(zlib.compress(data)), ["/FlateDecode", "/FlateDecode"]),
        (lambda data: zlib.compress(data.hex().encode()), ["/FlateDecode", "/ASCIIHexDecode"]),
    ],
    ids=["flate", "hex", "a85", "lzw", "runlength", "flate-flate", "flate-hex"],
)
def test_the_size_check_decodes_as_qpdf_does(encode: object, filters: list[str]) -> None:
    assert callable(encode)
    data = bytes(range(256)) * 200 + b"\0\0\0\0" * 5000 + b"repeat " * 3000
    encoded = encode(data)
    data += b"x" * 128 if encode is _run_length else b""
    pdf = pikepdf.new()
    stream = pikepdf.Stream(pdf, encoded)
    stream.Filter = pikepdf.Array([Name(name) for name in filters])
    assert stream.read_bytes(decode_level=pikepdf.StreamDecodeLevel.specialized) == data
    # Every stage is capped: a hex stage before the last is twice the size of the data.
    assert decoded_size(stream, limit=2 * len(data)) == len(data)
    with pytest.raises(DocJobError) as caught:
        decoded_size(stream, limit=len(data) - 1)
    assert caught.value.code == "input.too_complex"


# --- operators -----------------------------------------------------------------------------------------------


def test_an_operator_bomb_fails_before_any_parser_builds_its_operators(tmp_path: Path) -> None:
    bomb = written(tmp_path / "operators.pdf", hostile.operator_bomb_page())
    assert bomb.stat().st_size < 8192
    for call in ("inspect_pdf(path)", "watermark_structure(path, path.with_suffix('.out'), 'W', check_streams=False)"):
        outcome, peak = isolated(call, bomb)
        assert (outcome, call) == ("input.too_complex", call)
        assert peak < PEAK_MIB
    region = RedactPolicy(regions=(RedactRegion(page=1, x0=60, y0=680, x1=300, y1=740),))
    redacting = lambda: redact_pdf(bomb, tmp_path / "redacted.pdf", region, workdir=tmp_path)  # noqa: E731
    assert code_of(redacting) == "input.too_complex"


# --- pages ---------------------------------------------------------------------------------------------------


def test_repeated_page_references_fail_on_the_page_limit_before_qpdf_builds_the_pages(tmp_path: Path) -> None:
    repeated = written(tmp_path / "repeated.pdf", hostile.duplicate_page_references())
    outcome, peak = isolated("inspect_pdf(path, max_pages=2000)", repeated)
    assert (outcome, peak < PEAK_MIB) == ("input.too_large", True)
    outcome, peak = isolated("inspect_pdf(path)", repeated)  # no policy: the budget's page ceiling
    assert (outcome, peak < PEAK_MIB) == ("input.too_large", True)


def test_a_page_tree_that_loops_is_malformed(tmp_path: Path) -> None:
    looping = written(tmp_path / "loop.pdf", hostile.page_tree_cycle())
    assert code_of(lambda: inspect_pdf(looping)) == "input.malformed"


# --- cycles and depth -----------------------------------------------------------------------------------------


def test_cycles_in_outlines_fields_name_and_structure_trees_end_each_walk(tmp_path: Path) -> None:
    expected = {
        hostile.outline_cycle: ["outline", "outline"],  # each bookmark once
        hostile.form_field_cycle: ["form", "form"],  # each field once
        hostile.structure_tree_cycle: ["structure"],  # the one element with text (/Alt)
        hostile.name_tree_cycle: [],  # qpdf stops at the loop
    }
    for make, kinds in expected.items():
        path = written(tmp_path / f"{make.__name__}.pdf", make())
        assert inspect_pdf(path).page_count == 1
        assert signature_count(path) == 0
        with pikepdf.open(path) as pdf:
            assert [site.kind for site in document_sites(pdf)] == kinds, make.__name__


def test_a_field_tree_deeper_than_the_budget_is_too_complex(tmp_path: Path) -> None:
    deep = written(tmp_path / "deep-fields.pdf", hostile.deep_form_fields())
    assert code_of(lambda: signature_count(deep)) == "input.too_complex"
    with pikepdf.open(deep) as pdf:
        assert code_of(lambda: document_sites(pdf)) == "input.too_complex"
    assert signature_count(deep, budgets=Budgets(max_depth=10_000)) == 0  # a raised budget follows it


def test_an_array_nested_50000_deep_is_too_complex(tmp_path: Path) -> None:
    nested = written(tmp_path / "nested.pdf", hostile.deep_nested_array())
    outcome, peak = isolated("inspect_pdf(path)", nested)
    assert (outcome, peak < PEAK_MIB) == ("input.too_complex", True)


# --- pixels --------------------------------------------------------------------------------------------------


def test_a_giant_page_with_one_word_is_valid_in_structure_mode_and_too_complex_to_rasterise(tmp_path: Path) -> None:
    giant = written(tmp_path / "giant.pdf", hostile.giant_page())
    assert watermark_structure(giant, tmp_path / "stamped.pdf", "CONFIDENTIAL").page_count == 1
    with pikepdf.open(tmp_path / "stamped.pdf") as stamped:
        assert "/DocjobsWatermark" in stamped.pages[0].Resources.XObject
    assert code_of(lambda: watermark_raster(giant, tmp_path / "raster.pdf", "W", dpi=110)) == "input.too_complex"


def test_redaction_does_not_burn_in_a_page_over_the_pixel_budget(tmp_path: Path) -> None:
    letter = written(tmp_path / "letter.pdf", hostile.giant_page(size=792, inline_image=True))
    region = RedactPolicy(regions=(RedactRegion(page=1, x0=60, y0=592, x1=300, y1=792),))
    summary = redact_pdf(letter, tmp_path / "letter-out.pdf", region, workdir=tmp_path)
    assert summary.fallback_pages == [1]  # the same page at a sane size is burned in
    giant = written(tmp_path / "giant.pdf", hostile.giant_page(inline_image=True))
    region = RedactPolicy(regions=(RedactRegion(page=1, x0=60, y0=14_200, x1=300, y1=14_400),))
    assert code_of(lambda: redact_pdf(giant, tmp_path / "out.pdf", region, workdir=tmp_path)) == "input.too_complex"


def test_an_image_declaring_huge_dimensions_is_not_decoded_for_redaction(tmp_path: Path) -> None:
    with pikepdf.open(written(tmp_path / "image.pdf", hostile.huge_image_xobject())) as pdf:
        assert code_of(lambda: remove_content(pdf, 1, [Rect(100, 100, 200, 200)])) == "input.too_complex"


def test_a_jbig2_page_larger_than_its_image_is_decoded_within_the_stream_budget(tmp_path: Path) -> None:
    """jbig2dec allocates the JBIG2 page, not the /Width x /Height that the pixel budget counted: it runs with the
    stream budget as its memory limit, so a 240 x 30 image on a 6,000 x 6,000 JBIG2 page (4.5 MB) fails under a
    1 MiB budget, in qpdf's checks and when redaction reads the image, and passes under the default one."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    picture = Image.new("1", (240, 30), 255)
    pdf.pages[0].Resources = pikepdf.Dictionary(
        XObject=pikepdf.Dictionary(Im0=jbig2_image(pdf, picture, page_size=(6_000, 6_000)))
    )
    pdf.pages[0].Contents = pdf.make_stream(b"q 240 0 0 30 60 692 cm /Im0 Do Q")
    pdf.save(source := tmp_path / "jbig2.pdf")
    small = Budgets(**{**DEFAULT_BUDGETS.__dict__, "max_stream_bytes": 1024 * 1024})
    assert code_of(lambda: inspect_pdf(source, budgets=small)) == "input.malformed"
    assert inspect_pdf(source).page_count == 1
    with pikepdf.open(source) as opened, pytest.raises(UnsafePage) as caught:
        remove_content(opened, 1, [Rect(100, 700, 200, 710)], budgets=small)
    assert caught.value.reason == "image_undecodable"


@pytest.mark.parametrize(("width", "height"), [(11_000, 11_000), (20_000, 20_000)], ids=["budget", "pillow-bomb"])
def test_an_oversized_image_input_is_too_complex(width: int, height: int, tmp_path: Path) -> None:
    png = written(tmp_path / "big.png", hostile.oversized_png(width, height))
    assert png.stat().st_size < 200_000
    assert code_of(lambda: image_to_pdf(png, tmp_path / "out.pdf")) == "input.too_complex"


# --- per-policy budgets ----------------------------------------------------------------------------------------


def test_a_policy_sets_the_budgets(tmp_path: Path) -> None:
    policy = Policy(name="t", watermark=WatermarkPolicy(text="W"), max_pages=7)
    assert budgets_for(policy.limits, policy.max_pages) == Budgets(**{**DEFAULT_BUDGETS.__dict__, "max_pages": 7})
    sample = tmp_path / "sample.pdf"
    make_sample_pdf(sample)
    strict = budgets_for(LimitsPolicy(operators_per_page=5), policy.max_pages)
    assert code_of(lambda: inspect_pdf(sample, budgets=strict)) == "input.too_complex"
    with pytest.raises(ValidationError):
        LimitsPolicy(megapixels=0)
