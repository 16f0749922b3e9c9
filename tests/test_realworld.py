"""Real-world documents (tests/fixtures/realworld.py) through the core's stage work, render → sign → verify,
as a job runs them: what qpdf repairs is processed and counted, our output is read by qpdf and poppler alike,
the stamp lands in its band, form text survives stamping and signing, a truncated upload is still refused."""

from __future__ import annotations

import re
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pikepdf
import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pytest

from docjobs.domain.errors import DocJobError
from docjobs.domain.models import RenderDone, RenderSettings, VerifyDone, VerifySettings
from docjobs.domain.policy import SanitizePolicy, WatermarkMode, WatermarkPolicy
from docjobs.isolation.stage_work import RenderWork, SignWork, VerifyWork, render, sign, verify
from docjobs.pdf.inspect import Encryption, inspect_pdf
from docjobs.pdf.watermark import STAMP_BAND, watermark_structure
from docjobs.signing.config import SignerConfig, TrustAnchors
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import ReleaseSigner
from tests.fixtures import realworld

STAMP = "RELEASED COPY"
CASES: dict[str, Callable[[], bytes]] = {**realworld.REPAIRED, **realworld.ACCEPTED}


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> SignerConfig:
    return ensure_dev_signer(tmp_path_factory.mktemp("signer") / "signing")


def _no_progress(done: int, total: int) -> None:
    return None


def _render(source: Path, output: Path, workdir: Path, *, refuse_encrypted: bool = False) -> RenderDone:
    work = RenderWork(
        source=source,
        output=output,
        workdir=workdir,
        settings=RenderSettings(
            watermark=WatermarkPolicy(text=STAMP, mode=WatermarkMode.STRUCTURE),
            max_pages=10,
            refuse_encrypted=refuse_encrypted,
        ),
    )
    return render(work, _no_progress)


def _release(source: Path, workdir: Path, signer: SignerConfig) -> tuple[RenderDone, VerifyDone, Path]:
    """render, sign and verify `source` as the standard policy does; returns the signed output."""
    rendered, prepared, signed = workdir / "rendered.pdf", workdir / "prepared.pdf", workdir / "signed.pdf"
    done = _render(source, rendered, workdir)
    key = ReleaseSigner(signer)  # the worker's half: the document child only prepares
    reserved = key.bytes_reserved("acme")
    work = SignWork(
        source=rendered,
        output=prepared,
        certificate_pem=key.certificate_pem.decode(),
        bytes_reserved=reserved,
        tenant="acme",
        visible=False,
        allow_signed_input=False,
    )
    key.finish(prepared, signed, sign(work, _no_progress).byte_range, tenant="acme", bytes_reserved=reserved)
    verified = verify(
        VerifyWork(
            source=source,
            output=signed,
            workdir=workdir,
            trust=TrustAnchors.of(signer),
            tenant="acme",
            settings=VerifySettings(
                text_layer_kept=True, redact=None, watermark_text=STAMP, sanitize=SanitizePolicy(), pages_may_turn=False
            ),
        ),
        _no_progress,
    )
    return done, verified, signed


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", CASES)
def test_readable_inputs_are_released_readable_by_both_readers(name: str, tmp_path: Path, signer: SignerConfig) -> None:
    source = tmp_path / "input.pdf"
    source.write_bytes(CASES[name]())
    done, verified, signed = _release(source, tmp_path, signer)

    assert (done.repair_warnings > 0) == (name in realworld.REPAIRED), done
    encrypted = name.startswith("AES")
    assert done.input_encryption == (Encryption.PERMISSIONS_ONLY if encrypted else Encryption.NONE).value
    assert {"qpdf_check", "second_reader", "text_kept", "watermark_every_page"} <= set(verified.fidelity_checks)

    check = _run("qpdf", "--check", signed)
    warnings = [line for line in check.stderr.splitlines() if line.startswith("WARNING")]
    if name == "content-stream syntax error":  # the page's own tokens are kept as they are: qpdf still warns
        assert check.returncode == 3 and warnings and all("(content, offset" in line for line in warnings), check
    else:
        assert check.returncode == 0, check.stderr
    info = _run("pdfinfo", signed)
    assert info.returncode == 0 and re.search(r"^Pages: +1$", info.stdout, re.M), info
    with pikepdf.open(signed) as pdf:
        assert not pdf.is_encrypted
        assert [kid.objgen for kid in pdf.Root.Pages.Kids] == [page.obj.objgen for page in pdf.pages]

    text = _run("pdftotext", "-raw", signed, "-").stdout.split()
    assert set(realworld.WORDS) <= set(text), text
    if name == "LibreOffice form":  # drawn by appearance streams now: signing cleared NeedAppearances
        assert {word for value in realworld.FIELD_VALUES for word in value.split()} <= set(text), text
    _assert_stamp_in_band(signed)


def _assert_stamp_in_band(pdf: Path) -> None:
    """Every stamp word lies inside the stamp band of the (upright, letter) page, as pdftotext places it."""
    bbox = _run("pdftotext", "-bbox", pdf, "-").stdout
    words = [line for line in bbox.splitlines() if any(f">{word}</word>" in line for word in STAMP.split())]
    assert len(words) == len(STAMP.split()), bbox
    width, height = 612, 792
    x0, top, x1, bottom = STAMP_BAND
    for line in words:
        values = dict(part.split("=") for part in line.strip().removeprefix("<word ").split(">")[0].split())
        box = {key: float(value.strip('"')) for key, value in values.items()}
        assert x0 * width - 1 <= box["xMin"] and box["xMax"] <= x1 * width + 1, line
        assert top * height - 1 <= box["yMin"] and box["yMax"] <= bottom * height + 1, line


@pytest.mark.parametrize(
    "tail",
    [
        b"(unterminated (nested",
        b"[1 2 <</A [3",
        b"[ /a << /key-without-value",
        b"BT /F1 9 Tf",
        b"Q Q 1 0 0 1 0 -900 cm",
        b"q q 0 0 0 0 0 0 cm",
        b"BI /W 1 /H 1 /BPC 8 /CS /G /F /Fl ID " + zlib.compress(b"\0"),
    ],
    ids=[
        "string",
        "array-dictionary",
        "key-without-value",
        "text-object",
        "stray-Q-then-cm",
        "degenerate-cm",
        "inline-image-without-EI",
    ],
)
def test_stamp_survives_content_left_open(tail: bytes, tmp_path: Path) -> None:
    source, stamped = tmp_path / "input.pdf", tmp_path / "stamped.pdf"
    source.write_bytes(realworld.content_left_open(tail))
    watermark_structure(source, stamped, STAMP)
    assert _run("qpdf", "--check", stamped).returncode in (0, 3)  # 3: the page's own broken tokens
    assert set(realworld.WORDS) <= set(_run("pdftotext", stamped, "-").stdout.split())
    _assert_stamp_in_band(stamped)
    document = pdfium.PdfDocument(stamped)  # the fidelity gate's reader
    try:
        assert set(STAMP.split()) <= set(document[0].get_textpage().get_text_range().split())
    finally:
        document.close()


def test_repairs_are_counted_and_clean_inputs_are_untouched(tmp_path: Path) -> None:
    clean, repaired = tmp_path / "clean.pdf", tmp_path / "repaired.pdf"
    clean.write_bytes(realworld.clean_page())
    repaired.write_bytes(realworld.off_by_one_startxref())
    assert inspect_pdf(clean).repair_warnings == 0
    assert inspect_pdf(repaired).repair_warnings > 0
    done = _render(clean, tmp_path / "out.pdf", tmp_path)
    assert done.repair_warnings == 0
    assert (tmp_path / "normalized.pdf").read_bytes() == clean.read_bytes()  # used as it is


@pytest.mark.parametrize("padded", [False, True], ids=["as-cut", "NUL-padded"])
def test_truncated_upload_is_still_malformed(padded: bool, tmp_path: Path) -> None:
    source = tmp_path / "secret-name.pdf"
    source.write_bytes(realworld.nul_padded(realworld.truncated()) if padded else realworld.truncated())
    with pytest.raises(DocJobError) as caught:
        _render(source, tmp_path / "never.pdf", tmp_path)
    assert caught.value.code == "input.malformed"
    assert "secret" not in str(caught.value) and caught.value.__cause__ is None
    assert not (tmp_path / "never.pdf").exists()


def test_policy_can_refuse_inputs_encrypted_with_an_empty_password(tmp_path: Path) -> None:
    source = tmp_path / "input.pdf"
    source.write_bytes(realworld.aes_empty_password_without_length())
    with pytest.raises(DocJobError) as caught:
        _render(source, tmp_path / "never.pdf", tmp_path, refuse_encrypted=True)
    assert caught.value.code == "input.encrypted"
    clean = tmp_path / "clean.pdf"
    clean.write_bytes(realworld.clean_page())
    assert _render(clean, tmp_path / "out.pdf", tmp_path, refuse_encrypted=True).input_encryption == "none"
