"""Where the signing key and the trust roots are (`DOCJOBS_SIGNING_*`, `DOCJOBS_TRUST_ROOTS`), and loading them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from pyhanko.keys import load_certs_from_pemder_data
from pyhanko_certvalidator import ValidationContext

from docjobs.settings.config import ConfigError

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
DEFAULT_STAMP_BOX = (36, 36, 266, 96)  # (x0, y0, x1, y1) on page 1, PDF points


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
    # The OCSP responders and CRL locations the worker may fetch for B-LT and B-LTA (a certificate's own locations
    # that are not listed here are not fetched): DOCJOBS_REVOCATION_URLS.
    revocation_urls: tuple[str, ...] = ()
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


@dataclass(frozen=True)
class TrustAnchors:
    """What verifying a signature needs, and nothing secret: the trusted roots and the intermediates, as PEM text
    (handed to a document child, which cannot read the worker's files)."""

    roots_pem: str
    chain_pem: str = ""

    @classmethod
    def of(cls, config: SignerConfig) -> TrustAnchors:
        """The anchors of a signer's configuration (raises ConfigError naming an unreadable file)."""
        return cls(
            roots_pem="".join(cert_pem(cert).decode() for cert in load_trust_roots(config)),
            chain_pem="".join(cert_pem(cert).decode() for cert in load_signer_chain(config)),
        )

    def roots(self) -> list[x509.Certificate]:
        return _pem_certs(self.roots_pem)

    def chain(self) -> list[x509.Certificate]:
        return _pem_certs(self.chain_pem)


def _pem_certs(pem: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem.encode()) if pem.strip() else []
    except ValueError:
        raise ConfigError("the trust anchors are not PEM certificates") from None


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


def validation_context(config: SignerConfig | TrustAnchors) -> ValidationContext:
    """Trust exactly the configured roots; offline, revocation soft-fail (nothing is fetched)."""
    if isinstance(config, SignerConfig):
        roots, chain = load_trust_roots(config), load_signer_chain(config)
    else:
        roots, chain = config.roots(), config.chain()
    return ValidationContext(
        trust_roots=asn1_certs(roots),
        other_certs=asn1_certs(chain),
        allow_fetching=False,
        revocation_mode="soft-fail",
    )


def load_signer_chain(config: SignerConfig) -> list[x509.Certificate]:
    """The configured intermediates (not the key: a verifier may not have it)."""
    return [cert for path in config.chain_paths for cert in _read_certs("DOCJOBS_SIGNING_CHAIN", path)]


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)
