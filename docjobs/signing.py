"""PAdES signatures on released PDFs, and their verification (pyHanko). Plain functions on files.

Signing
  `sign_pdf` appends one incremental update to the input: a PAdES signature (`/SubFilter
  /ETSI.CAdES.detached`, SHA-256, signed attributes with the signing certificate reference) in a new
  signature field, invisible unless `SignerConfig.visible`. Without a TSA the result is PAdES baseline
  B-B (the signing time is the signer's claim); with `tsa_url` an RFC 3161 signature timestamp from that
  TSA is embedded (B-T). No revocation data is embedded (no B-LT/B-LTA) and nothing is ever fetched.
  On an unsigned input the signature is a *certification* signature with DocMDP "no changes allowed":
  the artifact is final, so any later update (other than PAdES DSS/timestamp updates) voids it in
  pyHanko and Acrobat alike. On an input that already carries signatures (only with
  `allow_existing_signatures=True`) it is an approval signature, because a certification signature
  must be the first one in a document.

Verification
  `verify_pdf` validates the *last* regular signature of the file against the configured trust roots,
  offline (`allow_fetching=False`, revocation "soft-fail": certificates without revocation data are
  accepted, and no CRL/OCSP is ever requested), and reports pyHanko's separate verdicts. `failure_code`
  turns a report into a stable failure code; the overall verdict is pyHanko's `bottom_line` *and* a
  coverage of the entire file.

The functions are synchronous and run pyHanko's coroutines with `asyncio.run`: call them from a thread
(an activity's thread pool, `asyncio.to_thread`), not from inside a running event loop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from pyhanko.keys import load_certs_from_pemder_data, load_private_key_from_pemder_data
from pyhanko.pdf_utils.crypt.api import AuthResult, AuthStatus
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields, signers
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.fields import MDPPerm
from pyhanko.sign.timestamps import HTTPTimeStamper, TimestampRequestError
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.pdf_embedded import EmbeddedPdfSignature, read_certification_data
from pyhanko.sign.validation.settings import KeyUsageConstraints
from pyhanko.sign.validation.status import PdfSignatureStatus, SignatureCoverageLevel
from pyhanko_certvalidator import ValidationContext
from pyhanko_certvalidator.registry import SimpleCertificateStore

from docjobs.config import ConfigError
from docjobs.errors import DocJobError
from docjobs.models import Frozen

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

DEV_CA_CN = "docjobs DEVELOPMENT ONLY CA - not for production"
DEV_SIGNER_CN = "docjobs DEVELOPMENT ONLY signer"
DEV_CA_FILE = "ca.pem"
DEV_CERT_FILE = "signer.pem"
DEV_KEY_FILE = "signer.key.pem"

TSA_TIMEOUT_SECONDS = 10
DEFAULT_STAMP_BOX = (36, 36, 266, 96)  # (x0, y0, x1, y1) on page 1, PDF points

# A signer certificate must allow signatures: nonRepudiation (what pyHanko asks by default) or
# digitalSignature (common on organisational document-signing certificates).
_KEY_USAGE = KeyUsageConstraints(key_usage={"non_repudiation", "digital_signature"}, match_all_key_usages=False)

# What reading or validating an untrusted PDF can raise (pyHanko's errors derive from these).
_PDF_ERRORS = (PdfError, SignatureValidationError, ValueError, KeyError, TypeError, IndexError)


# ---------------------------------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class SignerConfig:
    """Where the signing key and the trust roots are. Exactly one of `p12_path` or `key_path` + `cert_path`.

    `trust_roots` are PEM files (each may hold several certificates); verification trusts nothing else.
    `chain_paths` are intermediate certificates, embedded in signatures and used to build paths.
    """

    trust_roots: tuple[Path, ...]
    p12_path: Path | None = None
    p12_passphrase: str | None = field(default=None, repr=False)
    key_path: Path | None = None
    cert_path: Path | None = None
    chain_paths: tuple[Path, ...] = ()
    tsa_url: str | None = None  # set: PAdES B-T (RFC 3161 timestamp); unset: B-B
    visible: bool = False  # a visible stamp on page 1 at `stamp_box`; the default is invisible
    stamp_box: tuple[int, int, int, int] = DEFAULT_STAMP_BOX

    def __post_init__(self) -> None:
        pem = self.key_path is not None or self.cert_path is not None
        if (self.p12_path is None) == (not pem):
            raise ConfigError("give either DOCJOBS_SIGNING_P12 or DOCJOBS_SIGNING_KEY + DOCJOBS_SIGNING_CERT")
        if pem and (self.key_path is None or self.cert_path is None):
            raise ConfigError("DOCJOBS_SIGNING_KEY and DOCJOBS_SIGNING_CERT must be set together")
        if not self.trust_roots:
            raise ConfigError("DOCJOBS_TRUST_ROOTS must name at least one trust root (PEM)")
        x0, y0, x1, y1 = self.stamp_box
        if x1 <= x0 or y1 <= y0:
            raise ConfigError("the signature stamp box must have a positive width and height")

    @classmethod
    def from_env(cls, data_dir: Path) -> SignerConfig:
        """From DOCJOBS_SIGNING_* / DOCJOBS_TRUST_ROOTS / DOCJOBS_TSA_URL; without a key, the development signer.

        With the development signer (`ensure_dev_signer(data_dir / "signing")`), DOCJOBS_TRUST_ROOTS adds
        roots to its CA and DOCJOBS_TSA_URL still applies.
        """
        env = {name: os.environ.get(name) or None for name in ENV_NAMES}
        roots = _paths(env["DOCJOBS_TRUST_ROOTS"])
        tsa_url = env["DOCJOBS_TSA_URL"]
        if tsa_url is not None and not tsa_url.startswith(("http://", "https://")):
            raise ConfigError("DOCJOBS_TSA_URL must be an http(s) URL")
        if not any(env[name] for name in ("DOCJOBS_SIGNING_P12", "DOCJOBS_SIGNING_KEY", "DOCJOBS_SIGNING_CERT")):
            dev = ensure_dev_signer(data_dir / "signing")
            _check_files("DOCJOBS_TRUST_ROOTS", roots)
            return cls(
                trust_roots=dev.trust_roots + roots,
                key_path=dev.key_path,
                cert_path=dev.cert_path,
                tsa_url=tsa_url,
            )
        p12 = Path(env["DOCJOBS_SIGNING_P12"]) if env["DOCJOBS_SIGNING_P12"] else None
        key = Path(env["DOCJOBS_SIGNING_KEY"]) if env["DOCJOBS_SIGNING_KEY"] else None
        cert = Path(env["DOCJOBS_SIGNING_CERT"]) if env["DOCJOBS_SIGNING_CERT"] else None
        chain = _paths(env["DOCJOBS_SIGNING_CHAIN"])
        for name, value in (("DOCJOBS_SIGNING_P12", p12), ("DOCJOBS_SIGNING_KEY", key), ("DOCJOBS_SIGNING_CERT", cert)):
            _check_files(name, () if value is None else (value,))
        _check_files("DOCJOBS_SIGNING_CHAIN", chain)
        _check_files("DOCJOBS_TRUST_ROOTS", roots)
        return cls(
            trust_roots=roots,
            p12_path=p12,
            p12_passphrase=env["DOCJOBS_SIGNING_P12_PASSPHRASE"],
            key_path=key,
            cert_path=cert,
            chain_paths=chain,
            tsa_url=tsa_url,
        )


ENV_NAMES = (
    "DOCJOBS_SIGNING_P12",
    "DOCJOBS_SIGNING_P12_PASSPHRASE",
    "DOCJOBS_SIGNING_KEY",
    "DOCJOBS_SIGNING_CERT",
    "DOCJOBS_SIGNING_CHAIN",
    "DOCJOBS_TRUST_ROOTS",
    "DOCJOBS_TSA_URL",
)


def _paths(raw: str | None) -> tuple[Path, ...]:
    return tuple(Path(part) for part in (raw or "").split(os.pathsep) if part)


def _check_files(setting: str, paths: Sequence[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{setting}: {path} is not a readable file")


@dataclass(frozen=True)
class SignerMaterial:
    """The loaded key, its certificate and the intermediates (cryptography objects)."""

    key: PrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()

    @property
    def fingerprint(self) -> str:
        return self.certificate.fingerprint(hashes.SHA256()).hex()


def load_signer(config: SignerConfig) -> SignerMaterial:
    """Load the signing key and certificate. Raises ConfigError naming the setting."""
    chain = tuple(cert for path in config.chain_paths for cert in _read_certs("DOCJOBS_SIGNING_CHAIN", path))
    if config.p12_path is not None:
        passphrase = config.p12_passphrase.encode() if config.p12_passphrase else None
        try:
            key, cert, extra = pkcs12.load_key_and_certificates(config.p12_path.read_bytes(), passphrase)
        except (OSError, ValueError):
            raise ConfigError("DOCJOBS_SIGNING_P12: unreadable, or wrong DOCJOBS_SIGNING_P12_PASSPHRASE") from None
        if cert is None or key is None:
            raise ConfigError("DOCJOBS_SIGNING_P12 must hold a private key and its certificate")
        chain = tuple(extra) + chain
    else:
        assert config.key_path is not None and config.cert_path is not None  # __post_init__
        try:
            key = serialization.load_pem_private_key(config.key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError):
            raise ConfigError("DOCJOBS_SIGNING_KEY: not a readable, unencrypted PEM private key") from None
        cert = _read_certs("DOCJOBS_SIGNING_CERT", config.cert_path)[0]
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ConfigError("the signing key must be an RSA or an EC key")
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise ConfigError("the signing key does not belong to the signing certificate")
    return SignerMaterial(key=key, certificate=cert, chain=chain)


def _spki(public_key: Any) -> bytes:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cast(bytes, der)


def load_trust_roots(config: SignerConfig) -> list[x509.Certificate]:
    return [cert for path in config.trust_roots for cert in _read_certs("DOCJOBS_TRUST_ROOTS", path)]


def _read_certs(setting: str, path: Path) -> list[x509.Certificate]:
    try:
        data = path.read_bytes()
        certs = (
            x509.load_pem_x509_certificates(data) if b"-----BEGIN" in data else [x509.load_der_x509_certificate(data)]
        )
    except (OSError, ValueError):
        raise ConfigError(f"{setting}: {path} is not a readable PEM/DER certificate file") from None
    return certs


def asn1_certs(certs: Sequence[x509.Certificate]) -> list[Any]:
    """cryptography certificates as pyHanko's (asn1crypto) certificates."""
    der = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)
    return list(load_certs_from_pemder_data(der)) if der else []


def validation_context(config: SignerConfig) -> ValidationContext:
    """Trust exactly the configured roots; offline, revocation soft-fail (nothing is fetched)."""
    return ValidationContext(
        trust_roots=asn1_certs(load_trust_roots(config)),
        other_certs=asn1_certs(load_signer_chain(config)),
        allow_fetching=False,
        revocation_mode="soft-fail",
    )


def load_signer_chain(config: SignerConfig) -> list[x509.Certificate]:
    """The configured intermediates (not the key: a verifier may not have it)."""
    return [cert for path in config.chain_paths for cert in _read_certs("DOCJOBS_SIGNING_CHAIN", path)]


# ---------------------------------------------------------------------------------------------------------------------
# the development signer


def ensure_dev_signer(directory: Path) -> SignerConfig:
    """The local development CA and signer in `directory`, created on first use; idempotent.

    Creation is race-free across threads and processes: everything is written into a private temporary
    directory next to `directory` and then renamed into place, which succeeds for exactly one creator;
    the others discard their copy and use the winner's. The CA's private key is never stored (nothing
    needs it after the signer certificate is issued); the signer key is PEM, mode 0600, in a 0700
    directory. Delete the directory to start over with a new CA.
    """
    config = _dev_config(directory)
    if not (directory / DEV_KEY_FILE).is_file():
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))  # mode 0700
        except OSError as exc:
            raise ConfigError(f"cannot create the development signer in {directory}: {exc.strerror}") from None
        try:
            _write_dev_material(staging)
            # Atomic. Fails when another creator won (`directory` is then not empty): use theirs.
            staging.rename(directory)
        except OSError as exc:
            if not (directory / DEV_KEY_FILE).is_file():
                raise ConfigError(f"cannot create the development signer in {directory}: {exc.strerror}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    for path in (directory / DEV_CA_FILE, directory / DEV_CERT_FILE):
        if not path.is_file():
            raise ConfigError(f"the development signer in {directory} is incomplete: delete that directory")
    return config


def _dev_config(directory: Path) -> SignerConfig:
    return SignerConfig(
        trust_roots=(directory / DEV_CA_FILE,),
        key_path=directory / DEV_KEY_FILE,
        cert_path=directory / DEV_CERT_FILE,
    )


def make_ca(common_name: str, *, days: int = 3650) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (EC P-256) that may issue end-entity certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_signer(
    ca_key: PrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    *,
    key: PrivateKey | None = None,
    days: int = 1825,
    extended_key_usage: Sequence[x509.ObjectIdentifier] = (),
) -> tuple[PrivateKey, x509.Certificate]:
    """An end-entity certificate for document signing (digitalSignature + nonRepudiation), EC P-256 by default."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(min(now + timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if extended_key_usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(extended_key_usage)), critical=True)
    return key, builder.sign(ca_key, hashes.SHA256())


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=not cert_sign,  # nonRepudiation
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_dev_material(directory: Path) -> None:
    ca_key, ca_cert = make_ca(DEV_CA_CN)
    key, cert = issue_signer(ca_key, ca_cert, DEV_SIGNER_CN)
    _write_private(directory / DEV_KEY_FILE, key_pem(key))
    (directory / DEV_CERT_FILE).write_bytes(cert_pem(cert))
    (directory / DEV_CA_FILE).write_bytes(cert_pem(ca_cert))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


# ---------------------------------------------------------------------------------------------------------------------
# signing


@dataclass(frozen=True)
class SignInfo:
    level: Literal["B-B", "B-T"]
    signer_subject: str
    certificate_sha256: str  # fingerprint of the signer certificate (DER)
    field_name: str
    certified: bool  # a certification signature (DocMDP: no changes) rather than an approval signature
    invalidated_signatures: int = 0  # signatures of the input that no longer cover the whole file


def sign_pdf(
    src: Path,
    dst: Path,
    config: SignerConfig,
    *,
    reason: str = "docjobs release",
    field_name: str = "docjobs",
    allow_existing_signatures: bool = False,
    certify: bool = True,
) -> SignInfo:
    """Sign `src` into `dst` (an incremental update of `src`; `dst` is written atomically).

    `certify` (default): on an unsigned input, a certification signature with DocMDP "no changes"
    rather than an approval signature. With `allow_existing_signatures`, the input's signatures are
    kept (they then cover a revision, not the file: reported as `invalidated_signatures`), unless the
    input is certified with "no changes", which no further signature may follow (input.signed).

    Raises DocJobError: input.signed (the input already has signatures and they are not allowed),
    input.malformed, input.encrypted, signature.tsa_unavailable (the TSA could not be reached; transient).
    Raises ConfigError when the key material cannot be loaded.
    """
    material = load_signer(config)
    signer = signers.SimpleSigner(
        signing_cert=asn1_certs([material.certificate])[0],
        signing_key=load_private_key_from_pemder_data(key_pem(material.key), passphrase=None),
        cert_registry=_cert_store(material.chain),
    )
    timestamper = HTTPTimeStamper(config.tsa_url, timeout=TSA_TIMEOUT_SECONDS) if config.tsa_url else None
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".signing", dir=dst.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with src.open("rb") as infile:
            writer = _open_for_update(infile)
            existing = _signature_names(writer.prev)
            if existing and not allow_existing_signatures:
                raise DocJobError("input.signed")
            if _forbids_changes(writer.prev):
                raise DocJobError("input.signed", "the input is certified and its certification forbids all changes")
            name = _free_name(field_name, existing, _field_names(writer.prev))
            certify = certify and not existing  # a certification signature must be the first one
            meta = signers.PdfSignatureMetadata(
                field_name=name,
                md_algorithm="sha256",
                subfilter=fields.SigSeedSubFilter.PADES,
                reason=reason,
                certify=certify,
                docmdp_permissions=MDPPerm.NO_CHANGES,
            )
            box = config.stamp_box if config.visible else None
            pdf_signer = signers.PdfSigner(
                meta,
                signer,
                timestamper=timestamper,
                new_field_spec=fields.SigFieldSpec(sig_field_name=name, on_page=0, box=box),
            )
            with tmp.open("wb") as outfile:
                pdf_signer.sign_pdf(writer, output=outfile)
        tmp.replace(dst)
    except TimestampRequestError:
        raise DocJobError("signature.tsa_unavailable") from None
    except _PDF_ERRORS:
        raise DocJobError("input.malformed", "the PDF could not be signed") from None
    finally:
        tmp.unlink(missing_ok=True)
    return SignInfo(
        level="B-T" if timestamper else "B-B",
        signer_subject=material.subject,
        certificate_sha256=material.fingerprint,
        field_name=name,
        certified=certify,
        invalidated_signatures=len(existing),
    )


def _cert_store(certs: Sequence[x509.Certificate]) -> SimpleCertificateStore:
    store = cast(SimpleCertificateStore, cast(Any, SimpleCertificateStore)())
    for cert in asn1_certs(certs):
        store.register(cert)
    return store


def _open_for_update(infile: Any) -> IncrementalPdfFileWriter:
    try:
        writer = IncrementalPdfFileWriter(infile, strict=False)
    except _PDF_ERRORS:
        raise DocJobError("input.malformed", "the PDF to sign is not readable") from None
    if writer.prev.encrypted:
        # Permissions-only encryption opens with the empty user password; the update is encrypted alike.
        try:
            opened = cast(AuthResult, cast(Any, writer).encrypt(b"")).status != AuthStatus.FAILED
        except _PDF_ERRORS:
            opened = False
        if not opened:
            raise DocJobError("input.encrypted")
    return writer


def _signature_names(reader: PdfFileReader) -> list[str]:
    try:
        return [str(sig.field_name) for sig in reader.embedded_signatures]
    except _PDF_ERRORS:
        raise DocJobError("input.malformed", "the signature fields of the PDF are unreadable") from None


def _forbids_changes(reader: PdfFileReader) -> bool:
    try:
        docmdp = read_certification_data(reader)
    except _PDF_ERRORS:
        return False
    return docmdp is not None and docmdp.permission == MDPPerm.NO_CHANGES


def _field_names(reader: PdfFileReader) -> set[str]:
    try:
        return {str(name) for name, _, _ in fields.enumerate_sig_fields(reader, filled_status=None)}
    except _PDF_ERRORS:
        return set()


def _free_name(wanted: str, *taken: Sequence[str] | set[str]) -> str:
    used = {name for names in taken for name in names}
    name, n = wanted, 1
    while name in used:
        n += 1
        name = f"{wanted}-{n}"
    return name


# ---------------------------------------------------------------------------------------------------------------------
# verification

Coverage = Literal["entire_file", "entire_revision", "partial", "none"]

_COVERAGE: dict[SignatureCoverageLevel, Coverage] = {
    SignatureCoverageLevel.ENTIRE_FILE: "entire_file",
    SignatureCoverageLevel.ENTIRE_REVISION: "entire_revision",
    SignatureCoverageLevel.CONTIGUOUS_BLOCK_FROM_START: "partial",
    SignatureCoverageLevel.UNCLEAR: "partial",
}


class SignatureReport(Frozen):
    """pyHanko's separate verdicts on the last regular signature of a PDF.

    intact: the digest over the signed byte ranges matches the signed one; valid: the cryptographic
    signature over the signed attributes verifies with the signer certificate; trusted: the certificate
    chains to a configured root and is usable for signing (key usage, validity); bottom_line: pyHanko's
    overall judgment (intact, valid, trusted, the timestamp token if any, DocMDP and seed values);
    coverage: how much of the file the signed byte ranges cover.
    """

    signature_count: int  # regular signatures in the file (document timestamps excluded)
    intact: bool = False
    valid: bool = False
    trusted: bool = False
    bottom_line: bool = False
    coverage: Coverage = "none"
    # after the signed revision: none, lta_updates, form_filling, annotations, other (None: not analysed)
    modification_level: str | None = None
    docmdp_ok: bool | None = None
    signer_subject: str | None = None
    certificate_sha256: str | None = None
    field_name: str | None = None
    level: str | None = None  # "B-B", "B-T" for PAdES (ETSI.CAdES.detached); "CMS" for other subfilters
    timestamp_trusted: bool | None = None  # the signature timestamp token (B-T), if present
    trust_problem: str | None = None  # AdES sub-indication when not trusted, e.g. NO_CERTIFICATE_CHAIN_FOUND
    problem: str | None = None  # why the signature could not be evaluated at all (safe, generic text)

    @property
    def failure_code(self) -> str | None:
        return failure_code(self)


def failure_code(report: SignatureReport) -> str | None:
    """None when the signature is acceptable, otherwise the failure code (all QUARANTINE).

    signature.invalid: no signature, or not intact / not valid (also any other `bottom_line` failure,
    e.g. an invalid timestamp token); signature.untrusted: cryptographically fine but the certificate (or
    the timestamp's) does not chain to a configured root; signature.coverage: the signature does not
    cover the entire file (something was appended after signing).
    """
    if report.signature_count == 0 or not (report.intact and report.valid):
        return "signature.invalid"
    if not report.trusted or report.timestamp_trusted is False:
        return "signature.untrusted"
    if report.coverage != "entire_file":
        return "signature.coverage"
    if not report.bottom_line:
        return "signature.invalid"
    return None


def verify_pdf(path: Path, config: SignerConfig) -> SignatureReport:
    """Validate the last regular signature of `path` against `config`'s trust roots (offline)."""
    context = validation_context(config)
    with path.open("rb") as file:
        try:
            reader = PdfFileReader(file, strict=False)
            if reader.encrypted and reader.decrypt(b"").status == AuthStatus.FAILED:
                return SignatureReport(signature_count=0, problem="the PDF is encrypted with a user password")
            signatures = cast(list[EmbeddedPdfSignature], reader.embedded_regular_signatures)
        except _PDF_ERRORS:
            return SignatureReport(signature_count=0, problem="the PDF or its signature fields are unreadable")
        if not signatures:
            return SignatureReport(signature_count=0, problem="the PDF has no signature")
        signature = signatures[-1]
        try:
            status = validate_pdf_signature(signature, context, key_usage_settings=_KEY_USAGE)
        except _PDF_ERRORS:
            return SignatureReport(
                signature_count=len(signatures),
                field_name=str(signature.field_name),
                problem="the signature could not be evaluated (malformed signature data)",
            )
    return _report(status, signature, len(signatures))


def _report(status: PdfSignatureStatus, signature: EmbeddedPdfSignature, count: int) -> SignatureReport:
    cert = x509.load_der_x509_certificate(cast(bytes, status.signing_cert.dump()))
    level: ModificationLevel | None = status.modification_level
    subfilter = str(signature.sig_object.get("/SubFilter", ""))
    timestamp = status.timestamp_validity
    pades_level = ("B-T" if timestamp is not None else "B-B") if subfilter == "/ETSI.CAdES.detached" else "CMS"
    timestamp_ok = None if timestamp is None else bool(timestamp.intact and timestamp.valid and timestamp.trusted)
    problem = status.trust_problem_indic
    return SignatureReport(
        signature_count=count,
        intact=status.intact,
        valid=status.valid,
        trusted=status.trusted,
        bottom_line=status.bottom_line,
        coverage=_COVERAGE.get(status.coverage, "none") if status.coverage is not None else "none",
        modification_level=level.name.lower() if level is not None else None,
        docmdp_ok=status.docmdp_ok,
        signer_subject=cert.subject.rfc4514_string(),
        certificate_sha256=cert.fingerprint(hashes.SHA256()).hex(),
        field_name=str(signature.field_name),
        level=pades_level,
        timestamp_trusted=timestamp_ok,
        trust_problem=None if problem is None else str(problem.standard_name),
    )


def file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
