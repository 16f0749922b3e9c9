"""Long-term signatures (issue 40): B-LT and B-LTA made by the worker's and the child's halves, against certomancer's
CA, OCSP responder, CRLs and TSA on loopback (tests/fixtures/test_pki.py), checked by pyHanko's AdES validation
(now, and simulated past the signer's expiry) and by poppler's pdfsig."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pikepdf
import pytest
from cryptography import x509

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import ADES_PASSED as PASSED
from docjobs.domain.policy import SignLevel, SignPolicy
from docjobs.settings.config import SHIPPED_POLICIES, ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.signing import long_term
from docjobs.signing.config import SignerConfig, TrustAnchors, load_signer, load_trust_roots
from docjobs.signing.environment import check_sign_levels
from docjobs.signing.long_term import RevocationData
from docjobs.signing.long_term_verify import long_term_verdict, validated_at
from docjobs.signing.sign import ReleaseSigner, prepare_signature, release_reason
from docjobs.signing.trust_services import BoundedTimeStamper, TrustServiceUnavailable, call
from docjobs.signing.verdict import verified_signature
from tests.fixtures.loopback import QuietHandler, serving_on_loopback
from tests.fixtures.test_pki import SHORT_TSA_DAYS, SIGNER_DAYS, TestPki, TestSigner, serving_test_pki

TENANT = "acme"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestPki]:
    with serving_test_pki(tmp_path_factory.mktemp("pki")) as served:
        yield served


def signer_config(pki: TestPki, signer: TestSigner, tsa_url: str | None = None) -> SignerConfig:
    return SignerConfig(
        trust_roots=(signer.root,),
        key_path=signer.key,
        cert_path=signer.cert,
        chain_paths=(signer.chain,),
        tsa_url=tsa_url or pki.tsa_url,
    )


def digest_of(path: Path) -> tuple[int, str]:
    return path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()


def signed_b_t(pki: TestPki, folder: Path, tsa_url: str | None = None) -> tuple[Path, bytes, RevocationData]:
    """A one-page PDF signed at B-T (by `tsa_url`'s TSA, else the PKI's long-lived one) by the worker's and the
    child's halves, after the signer's chain was checked: the signed file, its CMS and the signer chain's
    revocation data."""
    config = signer_config(pki, pki.signer, tsa_url)
    material = load_signer(config)
    revocation = long_term.signer_revocation(
        material.certificate, material.chain, load_trust_roots(config), pki.revocation_urls
    )
    source = folder / "input.pdf"
    with pikepdf.new() as pdf:
        pdf.add_blank_page()
        pdf.save(source)
    key = ReleaseSigner(config)
    reserved = key.bytes_reserved(TENANT)
    prepared = prepare_signature(
        source, folder / "prepared.pdf", key.certificate_pem, bytes_reserved=reserved, reason=release_reason(TENANT)
    )
    signed = folder / "signed.pdf"
    cms = key.finish(
        folder / "prepared.pdf",
        signed,
        prepared.byte_range,
        tenant=TENANT,
        bytes_reserved=reserved,
        begins_with=digest_of(source),
    )
    return signed, cms, revocation


def extended(pki: TestPki, folder: Path, *, archival: bool) -> tuple[Path, Path]:
    """The signed file and its B-LT (or, `archival`, B-LTA) version: the DSS (and document timestamp) update written by
    the child's half from the revocation data the worker fetched, finished by the worker's."""
    signed, cms, revocation = signed_b_t(pki, folder)
    token = long_term.signature_timestamp(cms)
    assert token is not None
    final = folder / ("b-lta.pdf" if archival else "b-lt.pdf")
    updated(pki, signed, final, token, revocation, pki.tsa_url if archival else None)
    return signed, final


def updated(
    pki: TestPki, src: Path, dst: Path, token: bytes, revocation: RevocationData, tsa_url: str | None
) -> bytes | None:
    """`src` with an incremental update in `dst`: `revocation` and the revocation data of `token`'s TSA chain,
    and with `tsa_url` a document timestamp by that TSA (whose token is returned)."""
    roots = load_trust_roots(signer_config(pki, pki.signer))
    revocation = revocation + long_term.timestamp_revocation(token, roots, pki.revocation_urls)
    stamper = BoundedTimeStamper(tsa_url) if tsa_url else None
    reserved = long_term.timestamp_reserved(stamper) if stamper else None
    child_file = dst.with_name(f"{dst.stem}.child.pdf")
    update = long_term.prepare_archival_update(
        src, child_file, RevocationData.decoded(revocation.encoded()), timestamp_reserved=reserved
    )
    return long_term.finish_archival_update(
        child_file, dst, update, signed=digest_of(src), timestamper=stamper, reserved=reserved
    )


def test_a_b_lta_archive_validates_now_and_past_the_signers_expiry(pki: TestPki, tmp_path: Path) -> None:
    signed, archive = extended(pki, tmp_path, archival=True)
    assert archive.read_bytes().startswith(signed.read_bytes())  # the signed bytes stay an exact prefix
    anchors = TrustAnchors.of(signer_config(pki, pki.signer))
    verdict = long_term_verdict(archive, anchors, archival=True)
    assert (verdict.level, verdict.ades, verdict.future_ades) == ("B-LTA", PASSED, PASSED)
    signer = x509.load_pem_x509_certificate(pki.signer.cert.read_bytes())
    assert verdict.future_at is not None and verdict.future_at > signer.not_valid_after_utc
    assert verdict.passed(archival=True)
    # The same simulation ten years past the signer's expiry, and a second reader.
    later = long_term_verdict(archive, anchors, archival=True, future=pki.now + timedelta(days=SIGNER_DAYS + 3650))
    assert later.future_ades == PASSED
    if shutil.which("pdfsig"):  # poppler validates the signature; it reads, not validates, RFC 3161 timestamps
        report = subprocess.run(
            ["pdfsig", "-nocert", str(archive)], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        signature, timestamp = report.split("Signature #2:")
        assert "Signature is Valid." in signature and "Not total document signed" in signature
        assert "Common Name: tsa" in timestamp and "Total document signed" in timestamp


def test_a_b_t_signature_fails_the_same_simulation(pki: TestPki, tmp_path: Path) -> None:
    signed, _, _ = signed_b_t(pki, tmp_path)
    verdict = long_term_verdict(signed, TrustAnchors.of(signer_config(pki, pki.signer)), archival=True)
    assert verdict.level == "B-T" and not verdict.passed(archival=True)
    assert verdict.ades != PASSED and verdict.future_ades != PASSED  # nothing embedded proves the chain


def test_a_b_lt_signature_validates_now_but_is_not_an_archive(pki: TestPki, tmp_path: Path) -> None:
    _, lt = extended(pki, tmp_path, archival=False)
    verdict = long_term_verdict(lt, TrustAnchors.of(signer_config(pki, pki.signer)), archival=False)
    assert (verdict.level, verdict.ades) == ("B-LT", PASSED) and verdict.passed(archival=False)
    assert not verdict.model_copy(update={"future_ades": None}).passed(archival=True)  # no document timestamp


def test_a_revoked_signer_is_refused_before_signing(pki: TestPki) -> None:
    config = signer_config(pki, pki.revoked)
    material = load_signer(config)
    with pytest.raises(DocJobError) as refused:
        long_term.signer_revocation(material.certificate, material.chain, load_trust_roots(config), pki.revocation_urls)
    assert refused.value.code is FailureCode.SIGNATURE_SIGNER_REVOKED


def test_revocation_data_only_from_configured_urls_that_answer(pki: TestPki, tmp_path: Path) -> None:
    config = signer_config(pki, pki.signer)
    material = load_signer(config)
    roots = load_trust_roots(config)
    for configured in ((), pki.crl_urls[1:]):  # the signer's OCSP responder and CRL are not among them
        with pytest.raises(DocJobError) as unavailable:
            long_term.signer_revocation(material.certificate, material.chain, roots, configured)
        assert unavailable.value.code is FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE
    with serving_test_pki(tmp_path / "gone") as gone:  # configured, and no longer answering
        config = signer_config(gone, gone.signer)
    material = load_signer(config)
    with pytest.raises(DocJobError) as unavailable:
        long_term.signer_revocation(
            material.certificate, material.chain, load_trust_roots(config), gone.revocation_urls
        )
    assert unavailable.value.code is FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE
    assert "connection_failed" in str(unavailable.value)


def test_the_worker_refuses_an_update_that_does_not_keep_the_signed_bytes(pki: TestPki, tmp_path: Path) -> None:
    signed, cms, revocation = signed_b_t(pki, tmp_path)
    stamper = BoundedTimeStamper(pki.tsa_url)
    reserved = long_term.timestamp_reserved(stamper)
    child_file = tmp_path / "extended.pdf"
    update = long_term.prepare_archival_update(signed, child_file, revocation, timestamp_reserved=reserved)
    tampered = bytearray(child_file.read_bytes())
    tampered[10] ^= 1  # a child that changed one signed byte
    (tmp_path / "tampered.pdf").write_bytes(bytes(tampered))
    cases = [
        (tmp_path / "tampered.pdf", update),
        (child_file, long_term.PreparedUpdate(byte_range=(0, 10, 20, 5), field_name=update.field_name)),
        (child_file, long_term.PreparedUpdate(byte_range=None, field_name=None)),
    ]
    for number, (prepared, claimed) in enumerate(cases):
        out = tmp_path / f"out-{number}.pdf"
        with pytest.raises(DocJobError) as refused:
            long_term.finish_archival_update(
                prepared, out, claimed, signed=digest_of(signed), timestamper=stamper, reserved=reserved
            )
        assert refused.value.code is FailureCode.SIGNATURE_BYTE_RANGE and not out.exists()
    link = tmp_path / "link.pdf"
    link.symlink_to(child_file)
    with pytest.raises(DocJobError):
        long_term.finish_archival_update(
            link, tmp_path / "out-link.pdf", update, signed=digest_of(signed), timestamper=stamper, reserved=reserved
        )
    assert cms  # the signature itself was made


class Redirecting(QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/crl")
            self.end_headers()
            return
        body = b"x" * (2048 if self.path == "/big" else 16)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_trust_service_calls_follow_webhook_rules() -> None:
    with serving_on_loopback(Redirecting) as base:
        urls = (f"{base}/moved", f"{base}/big", f"{base}/crl")
        assert call(f"{base}/crl", configured=urls) == b"x" * 16
        for url, reason, cap in ((f"{base}/moved", "redirect", 1024), (f"{base}/big", "too_large", 1024)):
            with pytest.raises(TrustServiceUnavailable) as refused:
                call(url, configured=urls, max_bytes=cap)
            assert refused.value.reason == reason
        with pytest.raises(TrustServiceUnavailable) as refused:
            call(f"{base}/other", configured=urls)  # not configured: not even asked
        assert refused.value.reason == "not_configured"


def test_a_policy_without_a_level_keeps_its_fingerprint_and_one_with_a_level_is_new() -> None:
    """`sign.level` counts in the fingerprint only when set: every pinned batch and recorded job keeps its digest."""
    plain = PolicyBook.load(SHIPPED_POLICIES).get("standard")
    assert plain.sign.level is None and plain.fingerprint == "standard@c6ebf2338fd1"  # its digest before levels
    leveled = {level: plain.model_copy(update={"sign": SignPolicy(level=level)}).fingerprint for level in SignLevel}
    assert len(set(leveled.values())) == len(SignLevel) and plain.fingerprint not in leveled.values()
    with pytest.raises(ValueError):
        SignPolicy.model_validate({"level": "b-lt-plus"})


def test_a_level_the_deployment_cannot_make_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DOCJOBS_TSA_URL", "DOCJOBS_REVOCATION_URLS"):
        monkeypatch.delenv(name, raising=False)
    standard = PolicyBook.load(SHIPPED_POLICIES).get("standard")
    asking = {
        level: standard.model_copy(update={"name": f"asks-{level.value}", "sign": SignPolicy(level=level)})
        for level in SignLevel
    }
    check_sign_levels([standard, asking[SignLevel.B_B]])  # nothing to fetch: nothing needed
    with pytest.raises(ConfigError, match=r"'asks-b-t' asks sign\.level b-t.*DOCJOBS_TSA_URL"):
        check_sign_levels([asking[SignLevel.B_T]])
    monkeypatch.setenv("DOCJOBS_TSA_URL", "http://127.0.0.1:9/tsa")
    check_sign_levels([asking[SignLevel.B_T]])
    with pytest.raises(ConfigError, match=r"'asks-b-lta' asks sign\.level b-lta.*DOCJOBS_REVOCATION_URLS"):
        check_sign_levels([asking[SignLevel.B_LTA]])
    monkeypatch.setenv("DOCJOBS_REVOCATION_URLS", "http://127.0.0.1:9/ocsp, http://127.0.0.1:9/crl")
    check_sign_levels(asking.values())
    monkeypatch.setenv("DOCJOBS_REVOCATION_URLS", "http://127.0.0.1:9/ocsp,ldap://directory/crl")
    with pytest.raises(ConfigError, match="DOCJOBS_REVOCATION_URLS must be http"):
        check_sign_levels([asking[SignLevel.B_LT]])


def test_a_signer_at_b_b_never_timestamps_and_above_it_needs_a_tsa(pki: TestPki) -> None:
    config = signer_config(pki, pki.signer)
    assert ReleaseSigner(config).level == "B-T"  # no level: as configured
    assert (
        ReleaseSigner(config, SignLevel.B_B).level == "B-B" and ReleaseSigner(config, SignLevel.B_B).timestamper is None
    )
    untimed = SignerConfig(trust_roots=config.trust_roots, key_path=config.key_path, cert_path=config.cert_path)
    assert ReleaseSigner(untimed).level == "B-B"
    with pytest.raises(ConfigError, match="DOCJOBS_TSA_URL"):
        ReleaseSigner(untimed, SignLevel.B_LTA)


def test_a_long_term_release_is_judged_at_its_level(pki: TestPki, tmp_path: Path) -> None:
    """The verify stage's judgment (docjobs/signing/verdict.py): an archive passes at B-LTA and its evidence records
    the verdicts flat; the same file is not accepted as B-LT (its level is B-LTA); the B-T file it came from is not
    accepted as B-LT; and without a level, the archive's coverage (its revision, then the DSS) is refused."""
    signed, archive = extended(pki, tmp_path, archival=True)
    anchors = TrustAnchors.of(signer_config(pki, pki.signer))
    verdict = verified_signature(archive, anchors, TENANT, SignLevel.B_LTA)
    assert verdict.level == "B-LTA" and verdict.coverage == "entire_revision" and verdict.long_term is not None
    flat = verdict.for_evidence()
    assert (flat["ades"], flat["future_ades"], flat["document_timestamps"], flat["tenant"]) == (
        PASSED,
        PASSED,
        1,
        TENANT,
    )
    assert "long_term" not in flat and all(not isinstance(value, dict) for value in flat.values())
    for path, level, code in (
        (archive, SignLevel.B_LT, FailureCode.SIGNATURE_LONG_TERM),
        (signed, SignLevel.B_LT, FailureCode.SIGNATURE_LONG_TERM),
        (archive, None, FailureCode.SIGNATURE_COVERAGE),
    ):
        with pytest.raises(DocJobError) as refused:
            verified_signature(path, anchors, TENANT, level)
        assert refused.value.code is code, (path.name, level)
    assert verified_signature(signed, anchors, TENANT, SignLevel.B_T).long_term is None


def test_a_renewal_carries_an_archive_past_its_first_timestamps_expiry(pki: TestPki, tmp_path: Path) -> None:
    """An archive timestamped by a TSA whose certificate expires in days is due for renewal at once; renewed (the
    newest timestamp's TSA chain's fresh revocation data and a document timestamp by a longer-lived TSA, appended),
    it still validates past that TSA's expiry, where the first version does not; the first version is the exact
    prefix of the second."""
    signed, cms, revocation = signed_b_t(pki, tmp_path, pki.short_tsa_url)
    token = long_term.signature_timestamp(cms)
    assert token is not None
    first = tmp_path / "v1.pdf"
    newest = updated(pki, signed, first, token, revocation, pki.short_tsa_url)
    assert newest is not None
    month = timedelta(days=30)
    assert long_term.renewal_due(newest, month) < pki.now  # due already: its TSA's certificate lives five days
    anchors = TrustAnchors.of(signer_config(pki, pki.signer))
    expired = pki.now + timedelta(days=SHORT_TSA_DAYS + 1)  # the first TSA's certificate has expired
    assert validated_at(first, anchors, pki.now) == PASSED and validated_at(first, anchors, expired) != PASSED
    renewed = tmp_path / "v2.pdf"
    newer = updated(pki, first, renewed, newest, RevocationData(), pki.tsa_url)
    assert newer is not None and renewed.read_bytes().startswith(first.read_bytes())
    assert validated_at(renewed, anchors, expired) == PASSED
    verdict = long_term_verdict(renewed, anchors, archival=True)
    assert (verdict.document_timestamps, verdict.ades, verdict.future_ades) == (2, PASSED, PASSED)
    assert long_term.renewal_due(newer, month) > pki.now + timedelta(days=365)  # the next, years away
