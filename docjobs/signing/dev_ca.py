"""The development signer: a local CA and a signer certificate, created once per directory. Never for production."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from docjobs.settings.config import ConfigError
from docjobs.signing.config import PrivateKey, SignerConfig, cert_pem, key_pem

DEV_CA_CN = "docjobs DEVELOPMENT ONLY CA - not for production"
DEV_SIGNER_CN = "docjobs DEVELOPMENT ONLY signer"
DEV_CA_FILE = "ca.pem"
DEV_CERT_FILE = "signer.pem"
DEV_KEY_FILE = "signer.key.pem"


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
