"""PAdES signing and verification, the development signer, and the signed evidence envelope.

Temporal-free: plain functions on files. poppler's `pdfsig` is the independent second opinion on every
signature verdict (it exits 0 even on a digest mismatch, so its output is parsed).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pyhanko.keys import load_certs_from_pemder_data, load_private_key_from_pemder_data
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign.timestamps import DummyTimeStamper

from docjobs.domain.canonical import canonical_json
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import VerifyDone, VerifySettings
from docjobs.isolation.stage_work import VerifyWork
from docjobs.isolation.stage_work import verify as verify_stage
from docjobs.settings.config import ConfigError
from docjobs.signing import dev_ca
from docjobs.signing.config import (
    PrivateKey,
    SignerConfig,
    TrustAnchors,
    cert_pem,
    key_pem,
    load_signer,
)
from docjobs.signing.dev_ca import DEV_CA_CN, DEV_SIGNER_CN, ensure_dev_signer, issue_signer, make_ca
from docjobs.signing.environment import ENV_NAMES, signer_from_env
from docjobs.signing.evidence import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE_V1,
    Evidence,
    EvidenceCheck,
    commitment,
    envelope_evidence,
    pae,
    sign_evidence,
    tool_versions,
    verify_evidence,
)
from docjobs.signing.sign import Prepared, ReleaseSigner, SignInfo, prepare_signature, release_reason, sign_pdf
from docjobs.signing.verify import SignatureReport, failure_code, verify_pdf
from tests.fixtures.loopback import QuietHandler, serving_on_loopback
from tests.fixtures.samples import make_encrypted_pdf, make_sample_pdf

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------------------------------
# helpers and fixtures


def pdfsig(path: Path) -> list[dict[str, str]]:
    """poppler's view of every signature: `  - Key: value` lines, and bare lines (e.g. "Total document
    signed") as keys with an empty value. -nocert: our test CAs are not in NSS's database (and no OCSP)."""
    done = subprocess.run(["pdfsig", "-nocert", str(path)], capture_output=True, text=True, timeout=60, check=False)
    signatures: list[dict[str, str]] = []
    for line in done.stdout.splitlines():
        if line.startswith("Signature #"):
            signatures.append({})
        elif line.startswith("  - ") and signatures:
            key, _, value = line[4:].partition(": ")
            signatures[-1][key.strip()] = value.strip()
    return signatures


def poppler_says_valid(sig: dict[str, str]) -> bool:
    return sig.get("Signature Validation") == "Signature is Valid."


def write_signer(directory: Path, ca_name: str, signer_name: str, *, key: PrivateKey | None = None) -> SignerConfig:
    """A CA and a signer issued by it, as PEM files; the config trusts that CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = make_ca(ca_name)
    signer_key, signer_cert = issue_signer(ca_key, ca_cert, signer_name, key=key)
    (directory / "ca.pem").write_bytes(cert_pem(ca_cert))
    (directory / "signer.pem").write_bytes(cert_pem(signer_cert))
    (directory / "signer.key.pem").write_bytes(key_pem(signer_key))
    return SignerConfig(
        trust_roots=(directory / "ca.pem",),
        key_path=directory / "signer.key.pem",
        cert_path=directory / "signer.pem",
    )


def flip_byte(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0x01
    return bytes(changed)


def first_stream_offset(data: bytes) -> int:
    """An offset inside the first stream's data: inside the first signed byte range, structure intact."""
    return data.index(b"stream\n") + len(b"stream\n") + 8


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("signing")


@pytest.fixture(scope="module")
def dev(work: Path) -> SignerConfig:
    return ensure_dev_signer(work / "data" / "signing")


@pytest.fixture(scope="module")
def untrusted(work: Path) -> SignerConfig:
    """A second, unrelated CA (RSA signer key, so RSA-PSS evidence is exercised too)."""
    return write_signer(
        work / "untrusted", "untrusted test CA", "untrusted signer", key=rsa.generate_private_key(65537, 2048)
    )


@pytest.fixture(scope="module")
def sample(work: Path) -> Path:
    path = work / "sample.pdf"
    make_sample_pdf(path, pages=3)
    return path


@pytest.fixture(scope="module")
def signed(work: Path, sample: Path, dev: SignerConfig) -> tuple[Path, SignInfo]:
    out = work / "signed.pdf"
    info = sign_pdf(sample, out, dev)
    return out, info


# ---------------------------------------------------------------------------------------------------------------------
# the development signer


def test_dev_signer_is_created_once_and_reused(tmp_path: Path) -> None:
    directory = tmp_path / "signing"
    first = ensure_dev_signer(directory)
    cert = (directory / "signer.pem").read_bytes()
    second = ensure_dev_signer(directory)
    assert second == first
    assert (directory / "signer.pem").read_bytes() == cert  # not re-issued

    assert stat.S_IMODE((directory / "signer.key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not any(directory.glob("*ca*key*"))  # the CA key is never stored

    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    leaf = x509.load_pem_x509_certificate(cert)
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == DEV_CA_CN
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == DEV_SIGNER_CN
    assert leaf.issuer == ca.subject
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.content_commitment and not usage.key_cert_sign
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert first.trust_roots == (directory / "ca.pem",)


def test_dev_signer_race_between_threads_creates_one_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every thread generates its own material (the barrier holds them until all have), then they race to
    rename it into place: one wins, all end up with the winner's certificate, nothing is left behind."""
    directory = tmp_path / "signing"
    threads = 4
    barrier = threading.Barrier(threads, timeout=30)
    generate = dev_ca._write_dev_material

    def slow_generate(target: Path) -> None:
        generate(target)
        barrier.wait()

    monkeypatch.setattr(dev_ca, "_write_dev_material", slow_generate)

    def run() -> bytes:
        config = ensure_dev_signer(directory)
        assert config.cert_path is not None
        return config.cert_path.read_bytes() + (directory / "ca.pem").read_bytes()

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run) for _ in range(threads)]
        results = [future.result(timeout=60) for future in futures]  # re-raises a thread's failure
    assert len(set(results)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["signing"]  # no staging directories left


def test_dev_signer_race_between_processes(tmp_path: Path) -> None:
    """As between threads: each process generates its own material, then waits (on a folder it shares with the
    other) until both have, so the two renames really race, however the machine schedules them."""
    directory, gate, parties = tmp_path / "signing", tmp_path / "gate", 2
    gate.mkdir()
    script = (
        "import sys, time; from pathlib import Path; from docjobs.signing import dev_ca\n"
        "directory, gate, parties = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])\n"
        "generate = dev_ca._write_dev_material\n"
        "def generate_then_wait(target):\n"
        "    generate(target); (gate / target.name).touch(); limit = time.monotonic() + 60\n"
        "    while len(list(gate.iterdir())) < parties and time.monotonic() < limit: time.sleep(0.01)\n"
        "dev_ca._write_dev_material = generate_then_wait\n"
        "c = dev_ca.ensure_dev_signer(directory); print(c.cert_path.read_bytes().hex())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(directory), str(gate), str(parties)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(parties)
    ]
    outputs = [proc.communicate(timeout=90)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert len(list(gate.iterdir())) == parties  # both generated their own material: the race happened
    assert outputs[0] == outputs[1] == (directory / "signer.pem").read_bytes().hex()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate", "signing"]  # the loser's copy is gone


# ---------------------------------------------------------------------------------------------------------------------
# configuration


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_from_env_defaults_to_the_dev_signer(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = signer_from_env(tmp_path)
    assert config == ensure_dev_signer(tmp_path / "signing")
    assert config.tsa_url is None and not config.visible


def test_from_env_pkcs12(tmp_path: Path, clean_env: pytest.MonkeyPatch, sample: Path) -> None:
    ca_key, ca_cert = make_ca("p12 test CA")
    key, cert = issue_signer(ca_key, ca_cert, "p12 signer")
    p12 = tmp_path / "signer.p12"
    p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"signer", key, cert, None, serialization.BestAvailableEncryption(b"s3cret")
        )
    )
    (tmp_path / "ca.pem").write_bytes(cert_pem(ca_cert))
    clean_env.setenv("DOCJOBS_SIGNING_P12", str(p12))
    clean_env.setenv("DOCJOBS_SIGNING_P12_PASSPHRASE", "s3cret")
    clean_env.setenv("DOCJOBS_TRUST_ROOTS", str(tmp_path / "ca.pem"))
    config = signer_from_env(tmp_path)
    assert "s3cret" not in repr(config)
    assert not (tmp_path / "signing").exists()  # no dev signer when a key is configured

    info = sign_pdf(sample, tmp_path / "out.pdf", config)
    assert info.signer_subject == "CN=p12 signer"
    assert failure_code(verify_pdf(tmp_path / "out.pdf", config)) is None

    clean_env.setenv("DOCJOBS_SIGNING_P12_PASSPHRASE", "wrong")
    with pytest.raises(ConfigError, match="DOCJOBS_SIGNING_P12"):
        sign_pdf(sample, tmp_path / "out2.pdf", signer_from_env(tmp_path))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"DOCJOBS_SIGNING_KEY": "key"}, "DOCJOBS_SIGNING_CERT"),
        ({"DOCJOBS_SIGNING_KEY": "key", "DOCJOBS_SIGNING_CERT": "cert"}, "DOCJOBS_TRUST_ROOTS"),
        ({"DOCJOBS_SIGNING_P12": "p12", "DOCJOBS_SIGNING_KEY": "key", "DOCJOBS_SIGNING_CERT": "cert"}, "either"),
        ({"DOCJOBS_SIGNING_KEY": "missing", "DOCJOBS_SIGNING_CERT": "cert", "DOCJOBS_TRUST_ROOTS": "ca"}, "KEY"),
        ({"DOCJOBS_TSA_URL": "ftp://tsa"}, "DOCJOBS_TSA_URL"),
    ],
)
def test_from_env_rejects_incomplete_settings(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, settings: dict[str, str], message: str
) -> None:
    for name in ("key", "cert", "ca", "p12"):
        (tmp_path / name).write_text("x")
    for name, value in settings.items():
        clean_env.setenv(name, value if "://" in value else str(tmp_path / value))
    with pytest.raises(ConfigError, match=message):
        signer_from_env(tmp_path)


# ---------------------------------------------------------------------------------------------------------------------
# signing and verifying PDFs


def test_signed_pdf_verifies(signed: tuple[Path, SignInfo], sample: Path, dev: SignerConfig) -> None:
    out, info = signed
    assert info.level == "B-B" and info.certified and info.invalidated_signatures == 0
    assert info.signer_subject == f"CN={DEV_SIGNER_CN}"
    assert out.read_bytes().startswith(sample.read_bytes())  # an incremental update of the input

    report = verify_pdf(out, dev)
    assert (report.intact, report.valid, report.trusted, report.bottom_line) == (True, True, True, True)
    assert report.coverage == "entire_file"
    assert report.modification_level == "none" and report.docmdp_ok
    assert report.signature_count == 1 and report.level == "B-B" and report.field_name == "docjobs"
    assert report.signer_subject == info.signer_subject
    assert report.certificate_sha256 == info.certificate_sha256
    assert failure_code(report) is None and report.failure_code is None


def test_pdfsig_agrees_the_signature_is_valid(signed: tuple[Path, SignInfo]) -> None:
    out, _ = signed
    (sig,) = pdfsig(out)
    assert poppler_says_valid(sig)
    assert "Total document signed" in sig
    assert sig["Signature Type"] == "ETSI.CAdES.detached"
    assert sig["Signing Hash Algorithm"] == "SHA-256"
    assert sig["Signer Certificate Common Name"] == DEV_SIGNER_CN


def test_flipped_byte_breaks_the_signature(work: Path, signed: tuple[Path, SignInfo], dev: SignerConfig) -> None:
    out, _ = signed
    data = out.read_bytes()
    tampered = work / "flipped.pdf"
    tampered.write_bytes(flip_byte(data, first_stream_offset(data)))

    report = verify_pdf(tampered, dev)
    assert not report.intact and not report.bottom_line
    assert failure_code(report) == "signature.invalid"
    (sig,) = pdfsig(tampered)
    assert not poppler_says_valid(sig)
    assert sig["Signature Validation"] == "Digest Mismatch."


def test_untrusted_signer(work: Path, sample: Path, untrusted: SignerConfig, dev: SignerConfig) -> None:
    out = work / "untrusted.pdf"
    sign_pdf(sample, out, untrusted)
    report = verify_pdf(out, dev)
    assert report.intact and report.valid and not report.trusted and not report.bottom_line
    assert report.trust_problem is not None
    assert failure_code(report) == "signature.untrusted"
    assert failure_code(verify_pdf(out, untrusted)) is None  # the same file, trusting that CA
    (sig,) = pdfsig(out)
    assert poppler_says_valid(sig)  # cryptographically fine: only trust differs


def test_update_appended_after_signing_is_caught(work: Path, signed: tuple[Path, SignInfo], dev: SignerConfig) -> None:
    out, _ = signed
    appended = work / "appended.pdf"
    with out.open("rb") as infile:
        writer: Any = IncrementalPdfFileWriter(infile)  # untyped methods below
        writer.root["/Lang"] = generic.TextStringObject("en")
        writer.update_root()
        with appended.open("wb") as outfile:
            writer.write(outfile)
    assert appended.read_bytes().startswith(out.read_bytes())

    report = verify_pdf(appended, dev)
    assert report.intact and report.valid and report.trusted  # the signed revision itself is untouched
    assert report.coverage == "entire_revision" and not report.bottom_line
    assert report.modification_level == "other" and report.docmdp_ok is False
    assert failure_code(report) == "signature.coverage"
    (sig,) = pdfsig(appended)
    assert poppler_says_valid(sig) and "Not total document signed" in sig


def test_no_signature(sample: Path, dev: SignerConfig, work: Path) -> None:
    report = verify_pdf(sample, dev)
    assert report.signature_count == 0 and report.coverage == "none"
    assert failure_code(report) == "signature.invalid"
    garbage = work / "garbage.pdf"
    garbage.write_bytes(b"%PDF-1.7\nnot really\n%%EOF\n")
    assert failure_code(verify_pdf(garbage, dev)) == "signature.invalid"


def test_signed_input_is_refused_unless_allowed(
    work: Path, sample: Path, signed: tuple[Path, SignInfo], untrusted: SignerConfig, dev: SignerConfig
) -> None:
    out, _ = signed
    with pytest.raises(DocJobError) as refused:
        sign_pdf(out, work / "twice.pdf", dev)
    assert refused.value.code == "input.signed"
    # Our own certification forbids any change: refused even when signatures are allowed.
    with pytest.raises(DocJobError) as certified:
        sign_pdf(out, work / "twice.pdf", dev, allow_existing_signatures=True)
    assert certified.value.code == "input.signed"
    assert not (work / "twice.pdf").exists()

    approved = work / "approved.pdf"  # an input with someone else's approval signature
    sign_pdf(sample, approved, untrusted, certify=False)
    with pytest.raises(DocJobError) as again:
        sign_pdf(approved, work / "resigned.pdf", dev)
    assert again.value.code == "input.signed"

    info = sign_pdf(approved, work / "resigned.pdf", dev, allow_existing_signatures=True)
    assert info.invalidated_signatures == 1 and not info.certified and info.field_name == "docjobs-2"
    report = verify_pdf(work / "resigned.pdf", dev)  # the last signature: ours
    assert report.signature_count == 2 and report.field_name == "docjobs-2"
    assert failure_code(report) is None
    first, second = pdfsig(work / "resigned.pdf")
    assert "Not total document signed" in first and "Total document signed" in second
    assert poppler_says_valid(first) and poppler_says_valid(second)


def test_encrypted_and_unreadable_inputs(work: Path, sample: Path, dev: SignerConfig) -> None:
    permissions_only = work / "permissions-only.pdf"
    make_encrypted_pdf(sample, permissions_only, user_password="", owner_password="owner")
    out = work / "permissions-only.signed.pdf"
    sign_pdf(permissions_only, out, dev)  # the update is encrypted like the input
    assert failure_code(verify_pdf(out, dev)) is None
    (sig,) = pdfsig(out)
    assert poppler_says_valid(sig) and "Total document signed" in sig

    locked = work / "locked.pdf"
    make_encrypted_pdf(sample, locked, user_password="user", owner_password="owner")
    with pytest.raises(DocJobError) as encrypted:
        sign_pdf(locked, work / "locked.signed.pdf", dev)
    assert encrypted.value.code == "input.encrypted"

    junk = work / "junk.pdf"
    junk.write_bytes(b"not a PDF at all")
    with pytest.raises(DocJobError) as malformed:
        sign_pdf(junk, work / "junk.signed.pdf", dev)
    assert malformed.value.code == "input.malformed"
    assert not list(work.glob("*.signing"))  # no temporary files left behind


def test_visible_stamp_on_page_one(work: Path, sample: Path, dev: SignerConfig) -> None:
    out = work / "visible.pdf"
    sign_pdf(sample, out, dataclasses.replace(dev, visible=True, stamp_box=(40, 40, 300, 100)))
    assert failure_code(verify_pdf(out, dev)) is None
    with pikepdf.open(out) as pdf:
        widgets = [a for a in pdf.pages[0].obj.get("/Annots", []) if a.get("/FT") == "/Sig"]
        assert len(widgets) == 1
        assert [float(v) for v in widgets[0].Rect] == [40, 40, 300, 100]
        assert "/AP" in widgets[0]
    (sig,) = pdfsig(out)
    assert poppler_says_valid(sig) and "Total document signed" in sig


def test_invisible_by_default(signed: tuple[Path, SignInfo]) -> None:
    out, _ = signed
    with pikepdf.open(out) as pdf:
        (field,) = [f for f in pdf.Root.AcroForm.Fields if f.get("/FT") == "/Sig"]
        assert [float(v) for v in field.get("/Rect", [0, 0, 0, 0])] == [0, 0, 0, 0]


# ---------------------------------------------------------------------------------------------------------------------
# PAdES B-T against a local RFC 3161 TSA (no network)


@pytest.fixture(scope="module")
def local_tsa(work: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP TSA on 127.0.0.1 (pyHanko's DummyTimeStamper behind http.server), with its own CA."""
    ca_key, ca_cert = make_ca("test TSA CA")
    tsa_key, tsa_cert = issue_signer(  # RSA: pyHanko's DummyTimeStamper signs with RSA only
        ca_key,
        ca_cert,
        "test TSA",
        key=rsa.generate_private_key(65537, 2048),
        extended_key_usage=[ExtendedKeyUsageOID.TIME_STAMPING],
    )
    ca_path = work / "tsa-ca.pem"
    ca_path.write_bytes(cert_pem(ca_cert))
    stamper = DummyTimeStamper(
        tsa_cert=next(iter(load_certs_from_pemder_data(cert_pem(tsa_cert)))),
        tsa_key=load_private_key_from_pemder_data(key_pem(tsa_key), passphrase=None),
    )
    tsp: Any = importlib.import_module("asn1crypto.tsp")

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            request = tsp.TimeStampReq.load(self.rfile.read(int(self.headers["Content-Length"])))
            body = stamper.request_tsa_response(request).dump()
            self.send_response(200)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving_on_loopback(Handler) as base:
        yield f"{base}/", ca_path


def test_pades_b_t_with_a_timestamp(work: Path, sample: Path, dev: SignerConfig, local_tsa: tuple[str, Path]) -> None:
    url, tsa_root = local_tsa
    config = dataclasses.replace(dev, tsa_url=url, trust_roots=(*dev.trust_roots, tsa_root))
    out = work / "b-t.pdf"
    info = sign_pdf(sample, out, config)
    assert info.level == "B-T"
    report = verify_pdf(out, config)
    assert report.level == "B-T" and report.timestamp_trusted and report.bottom_line
    assert failure_code(report) is None
    # The TSA's root not trusted: the signature itself is fine, the timestamp is not.
    assert failure_code(verify_pdf(out, dev)) == "signature.untrusted"
    (sig,) = pdfsig(out)
    assert poppler_says_valid(sig) and "Total document signed" in sig


def test_unreachable_tsa(work: Path, sample: Path, dev: SignerConfig) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DocJobError) as raised:
        sign_pdf(sample, work / "no-tsa.pdf", dataclasses.replace(dev, tsa_url=f"http://127.0.0.1:{port}/"))
    assert raised.value.code == "signature.tsa_unavailable"
    assert not (work / "no-tsa.pdf").exists()


# ---------------------------------------------------------------------------------------------------------------------
# the evidence envelope


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


SALT = bytes(range(32))  # a job's commitment salt (its status holds one drawn at random)


@pytest.fixture(scope="module")
def evidence(sample: Path, signed: tuple[Path, SignInfo]) -> Evidence:
    out, _ = signed
    return Evidence(
        run_id="run-1",
        tenant="acme",
        document_class="standard",
        policy={"name": "standard", "watermark": {"text": "CONFIDENTIAL — ü", "dpi": 150}},
        policy_version="standard@0123456789ab",
        output_sha256=sha256(out),
        commitments={
            "job": commitment(SALT, "job", "acme/job-1"),
            "source": commitment(SALT, "source", sha256(sample)),
            "policy": commitment(SALT, "policy", "0" * 64),
        },
        redactions={"ssn": 1, "custom": 2},
        stage_attempts={"render": 1, "publish": 2},
        tool_versions=tool_versions(),
        terminal_state="succeeded",
        completed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
    )


def v1_envelope(evidence: Evidence, config: SignerConfig, **fields: Any) -> bytes:
    """A DSSE envelope of a v1 statement, exactly as docjobs wrote them before the commitments: the job's ID and
    the policy in the predicate, the source and an office input's PDF as plain subjects."""
    predicate = evidence.model_dump(mode="json", exclude={"commitments", "redactions", "output_sha256"})
    predicate.update(job_id="acme/job-1", input_sha256=None, converted_sha256=None)
    predicate.update(fields)
    names = {"output_sha256": "artifact.pdf", "input_sha256": "source", "converted_sha256": "converted.pdf"}
    values = {"output_sha256": evidence.output_sha256, **fields}
    subjects = [{"name": names[field], "digest": {"sha256": value}} for field, value in values.items() if value]
    for field in (*names, "ocr_text_sha256"):  # every subject's field: a v1 predicate held none of them
        predicate.pop(field, None)
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subjects,
        "predicateType": PREDICATE_TYPE_V1,
        "predicate": predicate,
    }
    body = canonical_json(statement)
    material = load_signer(config)
    assert isinstance(material.key, ec.EllipticCurvePrivateKey)
    signature = material.key.sign(pae(PAYLOAD_TYPE, body), ec.ECDSA(hashes.SHA256()))
    return canonical_json(
        {
            "payload": base64.b64encode(body).decode(),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [
                {
                    "keyid": "k",
                    "sig": base64.b64encode(signature).decode(),
                    "cert": cert_pem(material.certificate).decode(),
                }
            ],
        }
    )


def opened(envelope: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The DSSE envelope and the in-toto statement it carries, parsed with the standard library only."""
    parsed = json.loads(envelope)
    return parsed, json.loads(base64.b64decode(parsed["payload"]))


def resealed(parsed: dict[str, Any], statement: dict[str, Any]) -> bytes:
    """The envelope with another statement in it and the old signature: what a forger can make."""
    return json.dumps({**parsed, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}).encode()


def test_evidence_envelope_round_trip(
    evidence: Evidence, dev: SignerConfig, sample: Path, signed: tuple[Path, SignInfo]
) -> None:
    out, _ = signed
    envelope = sign_evidence(evidence, dev)
    parsed, statement = opened(envelope)
    assert sorted(parsed) == ["payload", "payloadType", "signatures"] and parsed["payloadType"] == PAYLOAD_TYPE
    [signature] = parsed["signatures"]
    assert sorted(signature) == ["cert", "keyid", "sig"]
    certificate = x509.load_pem_x509_certificate(signature["cert"].encode())
    assert signature["keyid"] == hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest()
    assert envelope == canonical_json(parsed)  # the envelope itself is canonical: no whitespace, sorted keys
    assert (statement["_type"], statement["predicateType"]) == (
        "https://in-toto.io/Statement/v1",
        "https://docjobs.dev/evidence/v2",
    )
    assert statement["subject"] == [{"name": "artifact.pdf", "digest": {"sha256": sha256(out)}}]  # the release only
    predicate = statement["predicate"]
    assert not {"input_sha256", "output_sha256", "ocr_text_sha256", "job_id"} & set(predicate)
    assert sha256(sample) not in base64.b64decode(parsed["payload"]).decode()  # the source by its commitment only
    assert predicate["commitments"]["source"] == commitment(SALT, "source", sha256(sample))
    assert predicate["completed_at"] == "2026-01-02T01:04:05Z"  # normalised to UTC
    assert "CONFIDENTIAL — ü".encode() in base64.b64decode(parsed["payload"])  # UTF-8, not \u-escaped

    check = verify_evidence(envelope, dev, artifact=out, source=sample, job_id="acme/job-1", salt=SALT)
    assert check == EvidenceCheck(broken=[], evidence=evidence, signer_subject=f"CN={DEV_SIGNER_CN}")
    assert check.ok and envelope_evidence(envelope) == evidence


def test_commitments_check_only_with_the_jobs_salt(evidence: Evidence, dev: SignerConfig, sample: Path) -> None:
    """Without the salt (a receiver) the source and the job cannot be tied to the envelope; with another salt, or
    another file or job, the binding breaks."""
    envelope = sign_evidence(evidence, dev)
    assert verify_evidence(envelope, dev, source=sample).broken == ["input_sha256"]
    assert verify_evidence(envelope, dev, source=sample, salt=bytes(32)).broken == ["input_sha256"]
    assert verify_evidence(envelope, dev, job_id="acme/job-1").broken == ["run"]
    assert verify_evidence(envelope, dev, job_id="acme/job-2", salt=SALT).broken == ["run"]
    assert verify_evidence(envelope, dev, job_id="acme/job-1", run_id="run-1", salt=SALT).ok
    assert verify_evidence(envelope, dev, job_id="acme/job-1", run_id="run-2", salt=SALT).broken == ["run"]


def test_a_v1_statement_still_verifies(evidence: Evidence, dev: SignerConfig, sample: Path) -> None:
    """Jobs that ended before the commitments keep their v1 statement: its plain bindings are checked as before."""
    envelope = v1_envelope(evidence, dev, input_sha256=sha256(sample))
    check = verify_evidence(envelope, dev, source=sample, job_id="acme/job-1", run_id="run-1")
    assert check.ok and check.evidence is not None and check.evidence.job_id == "acme/job-1"
    assert verify_evidence(envelope, dev, source=sample, job_id="acme/job-2").broken == ["run"]
    other = v1_envelope(evidence, dev, input_sha256="0" * 64)
    assert verify_evidence(other, dev, source=sample).broken == ["input_sha256"]


def test_only_committed_evidence_is_written(evidence: Evidence, dev: SignerConfig) -> None:
    with pytest.raises(ValueError, match="committed"):
        sign_evidence(evidence.model_copy(update={"job_id": "acme/job-1"}), dev)
    with pytest.raises(ValueError, match="committed"):
        sign_evidence(evidence.model_copy(update={"commitments": None}), dev)


def test_evidence_predicate_matches_its_schema(evidence: Evidence, dev: SignerConfig) -> None:
    import jsonschema

    schema = json.loads((REPO / "schemas" / "evidence-v2.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    signature = {"bottom_line": True, "coverage": "entire_file", "tenant": "acme", "docmdp": 1}
    update = {"sanitized": {"javascript": 1}, "signature": signature}
    _, statement = opened(sign_evidence(evidence.model_copy(update=update), dev))
    assert statement["predicate"]["signature"] == signature
    jsonschema.validate(statement["predicate"], schema, cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**statement["predicate"], "terminal_state": 3}, schema)


def openssl_in(folder: Path) -> Callable[..., str]:
    def openssl(*args: str) -> str:
        return subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True, check=True).stdout

    return openssl


def test_evidence_verifies_with_openssl_alone(
    work: Path, evidence: Evidence, dev: SignerConfig, signed: tuple[Path, SignInfo]
) -> None:
    """No docjobs code: the standard library takes the envelope apart, OpenSSL checks the certificate and the
    signature over the PAE bytes (the receiver's recipe in docs/release-gates.md)."""
    out, _ = signed
    folder = work / "openssl"
    folder.mkdir()
    parsed, statement = opened(sign_evidence(evidence, dev))
    body = base64.b64decode(parsed["payload"])
    kind = parsed["payloadType"].encode()
    (folder / "pae.bin").write_bytes(b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body))
    (folder / "sig.bin").write_bytes(base64.b64decode(parsed["signatures"][0]["sig"]))
    (folder / "cert.pem").write_text(parsed["signatures"][0]["cert"])
    assert dev.trust_roots
    openssl = openssl_in(folder)
    openssl("verify", "-CAfile", str(dev.trust_roots[0]), "cert.pem")
    openssl("x509", "-in", "cert.pem", "-pubkey", "-noout", "-out", "pubkey.pem")
    assert "Verified OK" in openssl("dgst", "-sha256", "-verify", "pubkey.pem", "-signature", "sig.bin", "pae.bin")
    artifact = next(s for s in statement["subject"] if s["name"] == "artifact.pdf")
    assert artifact["digest"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()

    (folder / "pae.bin").write_bytes((folder / "pae.bin").read_bytes().replace(b"succeeded", b"quarantined"))
    with pytest.raises(subprocess.CalledProcessError):
        openssl("dgst", "-sha256", "-verify", "pubkey.pem", "-signature", "sig.bin", "pae.bin")


def test_evidence_flipped_artifact_byte(
    work: Path, evidence: Evidence, dev: SignerConfig, sample: Path, signed: tuple[Path, SignInfo]
) -> None:
    out, _ = signed
    tampered = work / "artifact-flipped.pdf"
    tampered.write_bytes(flip_byte(out.read_bytes(), 100))
    check = verify_evidence(sign_evidence(evidence, dev), dev, artifact=tampered, source=sample, salt=SALT)
    assert check.broken == ["output_sha256"] and not check.ok


def test_evidence_digest_not_recorded(work: Path, evidence: Evidence, dev: SignerConfig, sample: Path) -> None:
    check = verify_evidence(sign_evidence(evidence, dev), dev, ocr_text=sample)
    assert check.broken == ["ocr_text_sha256"]  # a file given for a binding the evidence does not make


def test_evidence_binds_an_office_inputs_converted_pdf(
    work: Path, evidence: Evidence, dev: SignerConfig, sample: Path, signed: tuple[Path, SignInfo]
) -> None:
    """The accepted office file is `source`; the PDF it was converted to, which every later stage worked on, has a
    commitment of its own, and a changed byte in it breaks its binding alone."""
    out, _ = signed
    commitments = {**(evidence.commitments or {}), "converted.pdf": commitment(SALT, "converted.pdf", sha256(out))}
    envelope = sign_evidence(evidence.model_copy(update={"commitments": commitments}), dev)
    _, statement = opened(envelope)
    assert [subject["name"] for subject in statement["subject"]] == ["artifact.pdf"]
    assert "converted_sha256" not in statement["predicate"]
    assert verify_evidence(envelope, dev, artifact=out, source=sample, converted=out, salt=SALT).ok
    tampered = work / "converted-flipped.pdf"
    tampered.write_bytes(flip_byte(out.read_bytes(), 100))
    check = verify_evidence(envelope, dev, source=sample, converted=tampered, salt=SALT)
    assert check.broken == ["converted_sha256"]
    assert verify_evidence(sign_evidence(evidence, dev), dev, converted=out, salt=SALT).broken == ["converted_sha256"]
    v1 = v1_envelope(evidence, dev, input_sha256=sha256(sample), converted_sha256=sha256(out))
    assert verify_evidence(v1, dev, source=sample, converted=out).ok
    assert verify_evidence(v1, dev, converted=tampered).broken == ["converted_sha256"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda statement: statement["predicate"].update(terminal_state="failed"),
        lambda statement: statement["predicate"]["stage_attempts"].update(render=3),
        lambda statement: statement["predicate"].update(sanitized={}),  # claiming nothing was removed
        lambda statement: statement["subject"][0]["digest"].update(sha256="0" * 64),
        lambda statement: statement.update(extra="ignored by the model, but signed"),
    ],
)
def test_evidence_tampered_statement(
    evidence: Evidence, dev: SignerConfig, tamper: Callable[[dict[str, Any]], None]
) -> None:
    parsed, statement = opened(sign_evidence(evidence.model_copy(update={"sanitized": {"javascript": 2}}), dev))
    tamper(statement)
    check = verify_evidence(resealed(parsed, statement), dev)
    assert "signature" in check.broken and not check.ok


def test_evidence_envelope_whitespace_does_not_matter(evidence: Evidence, dev: SignerConfig) -> None:
    """The signature is over the payload's bytes: re-indenting or reordering the envelope keeps it valid."""
    parsed = json.loads(sign_evidence(evidence, dev))
    assert verify_evidence(json.dumps(parsed, indent=2, ensure_ascii=True).encode(), dev).ok
    urlsafe = parsed | {"payload": base64.urlsafe_b64encode(base64.b64decode(parsed["payload"])).decode()}
    assert verify_evidence(json.dumps(urlsafe).encode(), dev).ok  # DSSE allows either base64 alphabet


def test_evidence_from_an_untrusted_key(evidence: Evidence, untrusted: SignerConfig, dev: SignerConfig) -> None:
    envelope = sign_evidence(evidence, untrusted)  # an RSA key: RSASSA-PSS
    assert verify_evidence(envelope, untrusted).ok  # genuine, for whoever trusts that CA
    check = verify_evidence(envelope, dev)
    assert check.broken == ["signature"]
    assert check.problem == "the certificate does not chain to a configured trust root"


def test_evidence_certificate_swapped(evidence: Evidence, untrusted: SignerConfig, dev: SignerConfig) -> None:
    """A trusted certificate pasted next to a signature made by another key does not verify."""
    parsed = json.loads(sign_evidence(evidence, untrusted))
    assert dev.cert_path is not None
    parsed["signatures"][0]["cert"] = dev.cert_path.read_text()
    assert verify_evidence(canonical_json(parsed), dev).broken == ["signature"]


@pytest.mark.parametrize(
    "envelope",
    [
        b"not json",
        b"{}",
        b'{"payload": {}, "payload": {}, "signature": "", "algorithm": "", "certificate": ""}',
        b'{"payload": {"x": NaN}, "signature": "", "algorithm": "", "certificate": ""}',
        b'{"payload": "e30=", "payloadType": "application/json", "signatures": [{"sig": "", "cert": ""}]}',
        b'{"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": []}',
        b'{"payload": "not base64!", "payloadType": "application/vnd.in-toto+json", "signatures": [{"sig": ""}]}',
    ],
)
def test_evidence_malformed_envelope(envelope: bytes, dev: SignerConfig) -> None:
    assert verify_evidence(envelope, dev).broken == ["envelope"]


def test_evidence_statement_of_something_else(evidence: Evidence, dev: SignerConfig) -> None:
    """A genuinely signed statement that is not docjobs evidence breaks the payload, not the signature."""
    parsed, statement = opened(sign_evidence(evidence, dev))
    statement["subject"].append({"name": "other.bin", "digest": {"sha256": "0" * 64}})
    material = load_signer(dev)
    assert isinstance(material.key, ec.EllipticCurvePrivateKey)
    body = json.dumps(statement).encode()
    kind = PAYLOAD_TYPE.encode()
    signature = material.key.sign(b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body), ec.ECDSA(hashes.SHA256()))
    parsed["signatures"][0]["sig"] = base64.b64encode(signature).decode()
    assert verify_evidence(resealed(parsed, statement), dev).broken == ["payload"]


def rfc8785_envelope(payload: dict[str, Any], config: SignerConfig) -> bytes:
    """An envelope exactly as docjobs wrote it before the attestation: the payload itself, with its
    `canonicalization`, signed over its RFC 8785 canonical JSON."""
    material = load_signer(config)
    assert isinstance(material.key, ec.EllipticCurvePrivateKey)
    signature = material.key.sign(canonical_json(payload), ec.ECDSA(hashes.SHA256()))
    return canonical_json(
        {
            "algorithm": "ecdsa-p256-sha256",
            "canonicalization": "RFC8785",
            "certificate": cert_pem(material.certificate).decode(),
            "payload": payload,
            "signature": base64.b64encode(signature).decode(),
        }
    )


def test_evidence_written_before_the_attestation_still_verifies(
    evidence: Evidence, dev: SignerConfig, sample: Path, signed: tuple[Path, SignInfo]
) -> None:
    out, _ = signed
    written = {"job_id": "acme/job-1", "input_sha256": sha256(sample), "commitments": None, "redactions": None}
    evidence = evidence.model_copy(update=written)  # what evidence was then: the job and its input in plain
    old = rfc8785_envelope(evidence.model_dump(mode="json"), dev)
    check = verify_evidence(old, dev, artifact=out, source=sample, job_id="acme/job-1")
    assert check == EvidenceCheck(broken=[], evidence=evidence, signer_subject=f"CN={DEV_SIGNER_CN}")
    assert envelope_evidence(old) == evidence
    parsed = json.loads(old)
    assert verify_evidence(json.dumps(parsed, indent=2).encode(), dev).ok  # the payload is re-canonicalized
    parsed["payload"]["terminal_state"] = "failed"
    assert verify_evidence(canonical_json(parsed), dev).broken == ["signature"]


def test_evidence_from_before_sanitization_still_verifies(evidence: Evidence, dev: SignerConfig) -> None:
    """An envelope written before `sanitized` existed has no such key in its signed payload."""
    payload = evidence.model_dump(mode="json")
    del payload["sanitized"]
    check = verify_evidence(rfc8785_envelope(payload, dev), dev)
    assert check.ok and check.evidence is not None and check.evidence.sanitized is None


def test_canonical_json_is_rfc8785() -> None:
    """RFC 8785's own example (section 3.2.3): numbers as ECMAScript prints them, UTF-8, minimal escapes."""
    value = json.loads(
        r"""{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],"""
        r""""string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}"""
    )
    expected = (
        r"""{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"""
        r""""string":"€$\u000f\nA'B\"\\\\\"/"}"""
    )
    assert canonical_json(value) == expected.encode()


def legacy_envelope(payload: dict[str, Any], config: SignerConfig) -> bytes:
    """An envelope exactly as docjobs wrote it before RFC 8785: no `canonicalization`, and signed over
    Python's sorted, compact JSON (floats as Python prints them)."""
    material = load_signer(config)
    assert isinstance(material.key, ec.EllipticCurvePrivateKey)

    def legacy(value: object) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

    signature = material.key.sign(legacy(payload), ec.ECDSA(hashes.SHA256()))
    return legacy(
        {
            "algorithm": "ecdsa-p256-sha256",
            "certificate": cert_pem(material.certificate).decode(),
            "payload": payload,
            "signature": base64.b64encode(signature).decode(),
        }
    )


def test_evidence_from_before_rfc8785_still_verifies(evidence: Evidence, dev: SignerConfig) -> None:
    payload = evidence.model_dump(mode="json", exclude={"commitments", "redactions"}) | {
        "job_id": "acme/job-1",
        "input_sha256": "0" * 64,
        "policy": {"name": "standard", "ocr": {"tesseract_timeout": 180.0}},
    }
    old = legacy_envelope(payload, dev)
    assert b'"tesseract_timeout":180.0' in old and b"180.0" not in canonical_json(payload)  # the forms differ
    check = verify_evidence(old, dev)
    assert check.ok and check.evidence is not None and check.evidence.policy["ocr"]["tesseract_timeout"] == 180.0
    parsed = json.loads(old)
    assert verify_evidence(canonical_json(parsed | {"canonicalization": "RFC8785"}), dev).broken == ["signature"]
    assert verify_evidence(canonical_json(parsed | {"canonicalization": "other"}), dev).broken == ["envelope"]
    parsed["payload"]["terminal_state"] = "failed"
    assert verify_evidence(canonical_json(parsed), dev).broken == ["signature"]


def test_evidence_rejects_naive_time() -> None:
    with pytest.raises(ValueError, match="timezone"):
        Evidence(
            job_id="j",
            tenant="t",
            document_class="c",
            policy={},
            policy_version="c@0",
            input_sha256="0" * 64,
            terminal_state="failed",
            completed_at=datetime(2026, 1, 1),  # naive: the point of the test
        )


def test_tool_versions() -> None:
    versions = tool_versions()
    assert set(versions) >= {"python", "pikepdf", "pyhanko", "temporalio", "qpdf", "pdftoppm", "tesseract"}
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert all(versions.values())
    versions["python"] = "changed"
    assert tool_versions()["python"] != "changed"  # a copy of the cached value


def test_ec_key_on_another_curve_is_refused_for_evidence(tmp_path: Path, evidence: Evidence) -> None:
    config = write_signer(tmp_path, "p384 CA", "p384 signer", key=ec.generate_private_key(ec.SECP384R1()))
    with pytest.raises(ValueError, match="P-256"):
        sign_evidence(evidence, config)


def test_report_is_frozen() -> None:
    report = SignatureReport(signature_count=0)
    with pytest.raises(ValueError):
        report.intact = True


# ---------------------------------------------------------------------------------------------------------------------
# the two halves: a child prepares without the key, the worker checks the byte range and signs


@pytest.fixture(scope="module")
def prepared(work: Path, sample: Path, dev: SignerConfig) -> tuple[Path, Prepared, ReleaseSigner, int]:
    """`sample` prepared for signing, as a document child does it (the certificate, never the key)."""
    key = ReleaseSigner(dev)
    reserved = key.bytes_reserved("acme")
    out = work / "prepared.pdf"
    ready = prepare_signature(sample, out, key.certificate_pem, bytes_reserved=reserved, reason=release_reason("acme"))
    return out, ready, key, reserved


def test_the_worker_signs_what_the_child_prepared(
    work: Path, sample: Path, prepared: tuple[Path, Prepared, ReleaseSigner, int], dev: SignerConfig
) -> None:
    path, ready, key, reserved = prepared
    first, hole_start, hole_end, last = ready.byte_range
    data = path.read_bytes()
    assert first == 0 and hole_end + last == len(data) and hole_end - hole_start == reserved + 2
    assert data[hole_start:hole_end] == b"<" + b"0" * reserved + b">"  # the child had nothing to sign with
    assert data.startswith(sample.read_bytes())
    signed = work / "worker-signed.pdf"
    key.finish(
        path, signed, ready.byte_range, tenant="acme", bytes_reserved=reserved,
        begins_with=(sample.stat().st_size, sha256(sample)),
    )  # fmt: skip
    report = verify_pdf(signed, TrustAnchors.of(dev))  # the anchors alone: verification needs no secret
    assert failure_code(report) is None and report.coverage == "entire_file"
    assert (report.tenant, report.reason, report.docmdp) == ("acme", "docjobs release for tenant acme", 1)
    (sig,) = pdfsig(signed)
    assert poppler_says_valid(sig) and "Total document signed" in sig


def forged_copy(work: Path, source: Path, name: str, change: Callable[[bytearray], None]) -> Path:
    data = bytearray(source.read_bytes())
    change(data)
    out = work / name
    out.write_bytes(bytes(data))
    return out


def test_the_worker_refuses_a_forged_byte_range(
    work: Path, sample: Path, prepared: tuple[Path, Prepared, ReleaseSigner, int]
) -> None:
    """Each lie a compromised child could tell about the file it prepared: refused before anything is signed."""
    path, ready, key, reserved = prepared
    _, hole_start, hole_end, last = ready.byte_range
    size = path.stat().st_size

    def nonzero_hole(data: bytearray) -> None:
        data[hole_start + 10] = ord("A")  # a signature of its own choosing already in the hole

    def changed_content(data: bytearray) -> None:
        data[first_stream_offset(bytes(data))] ^= 0x01  # the rendered document, altered before signing

    lies: list[tuple[Path, Sequence[int], str]] = [
        (path, (0, hole_start, hole_end, last - 16), "part of the file unsigned"),  # trailing bytes uncovered
        (path, (0, hole_start - 8, hole_end, last), "not the size"),  # a hole that swallows signed bytes
        (path, (4, hole_start, hole_end, last), "part of the file unsigned"),  # the first bytes uncovered
        (path, (0, hole_start, hole_end + 2, last - 2), "not the size"),
        (path, (0, hole_start, hole_end, last, 0), "four non-negative integers"),
        (path, (0, -hole_start, hole_end, last), "four non-negative integers"),
        (path, (0, 0, size, 0), "part of the file unsigned"),  # nothing signed at all
        (forged_copy(work, path, "nonzero-hole.pdf", nonzero_hole), ready.byte_range, "not an empty placeholder"),
        (forged_copy(work, path, "changed.pdf", changed_content), ready.byte_range, "does not begin with"),
    ]
    for n, (prepared_file, byte_range, why) in enumerate(lies):
        signed = work / f"refused-{n}.pdf"
        with pytest.raises(DocJobError) as refused:
            key.finish(
                prepared_file, signed, byte_range, tenant="acme", bytes_reserved=reserved,
                begins_with=(sample.stat().st_size, sha256(sample)),
            )  # fmt: skip
        assert refused.value.code == "signature.byte_range", n
        assert why in str(refused.value.message), (n, refused.value.message)
        assert not signed.exists()  # nothing signed is left behind

    link = work / "prepared-link.pdf"
    link.symlink_to(path)
    with pytest.raises(DocJobError) as followed:
        key.finish(link, work / "via-link.pdf", ready.byte_range, tenant="acme", bytes_reserved=reserved)
    assert followed.value.code == "signature.byte_range"


def test_a_signed_input_gets_a_locking_approval_signature(work: Path, sample: Path, dev: SignerConfig) -> None:
    """With `allow_signed_input`, the release signature cannot certify (it is not the first): it locks every
    field and the document (FieldMDP /Lock with DocMDP /P 1), so nothing may be added after it."""
    earlier = work / "earlier-approval.pdf"
    sign_pdf(sample, earlier, dev, certify=False, lock=False)  # someone else's approval signature
    released = work / "locked-approval.pdf"
    info = sign_pdf(earlier, released, dev, tenant="acme", allow_existing_signatures=True)
    assert not info.certified and info.locked and info.invalidated_signatures == 1
    report = verify_pdf(released, dev)
    assert failure_code(report) is None and report.docmdp == 1 and report.tenant == "acme"
    with pikepdf.open(released) as pdf:
        (ours,) = [f for f in pdf.Root.AcroForm.Fields if str(f.get("/T")) == info.field_name]
        assert ours.Lock.Action == "/All" and int(ours.Lock.P) == 1

    appended = work / "locked-appended.pdf"
    with released.open("rb") as infile:
        writer: Any = IncrementalPdfFileWriter(infile)
        writer.root["/Lang"] = generic.TextStringObject("en")
        writer.update_root()
        with appended.open("wb") as outfile:
            writer.write(outfile)
    after = verify_pdf(appended, dev)
    assert after.docmdp_ok is False and failure_code(after) is not None  # the lock holds


def test_the_tenant_is_in_the_signed_attributes(
    signed: tuple[Path, SignInfo], work: Path, sample: Path, dev: SignerConfig
) -> None:
    out, _ = signed
    assert verify_pdf(out, dev).tenant is None  # signed without a tenant: none claimed
    named = work / "named.pdf"
    sign_pdf(sample, named, dev, tenant="north-clinic")
    report = verify_pdf(named, dev)
    assert (report.tenant, report.reason) == ("north-clinic", "docjobs release for tenant north-clinic")
    # The claim is inside the CMS the worker signed: the /Reason (the child's) cannot stand in for it.
    data = named.read_bytes()
    start = data.index(b"/Contents <") + len(b"/Contents <")
    der = bytes.fromhex(data[start : data.index(b">", start)].decode())
    assert b"docjobs tenant north-clinic" in der


def test_verify_refuses_a_signature_for_another_tenant_or_unlocked(work: Path, sample: Path, dev: SignerConfig) -> None:
    """The verify stage's own check: the signature must name the job's tenant and lock the document."""
    named, unlocked = work / "for-acme.pdf", work / "unlocked.pdf"
    sign_pdf(sample, named, dev, tenant="acme")
    sign_pdf(sample, unlocked, dev, tenant="acme", certify=False, lock=False)

    def verified(output: Path, tenant: str) -> VerifyDone:
        order = VerifyWork(
            source=sample, output=output, workdir=work, trust=TrustAnchors.of(dev), tenant=tenant,
            settings=VerifySettings(text_layer_kept=True, watermark_text=None, pages_may_turn=False),
        )  # fmt: skip
        return verify_stage(order, lambda done, total: None)

    done = verified(named, "acme")
    assert done.signature is not None and (done.signature.tenant, done.signature.docmdp) == ("acme", 1)
    for output, tenant in ((named, "globex"), (unlocked, "acme")):
        with pytest.raises(DocJobError) as refused:
            verified(output, tenant)
        assert refused.value.code == "signature.invalid"
