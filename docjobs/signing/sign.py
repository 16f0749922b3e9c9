"""Signing: one incremental update with a PAdES signature (see the package's docstring)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from cryptography import x509
from pyhanko.keys import load_private_key_from_pemder_data
from pyhanko.pdf_utils.crypt.api import AuthResult, AuthStatus
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields, signers
from pyhanko.sign.fields import MDPPerm
from pyhanko.sign.timestamps import HTTPTimeStamper, TimestampRequestError
from pyhanko.sign.validation.pdf_embedded import read_certification_data
from pyhanko_certvalidator.registry import SimpleCertificateStore

from docjobs.errors import DocJobError
from docjobs.signing.config import SignerConfig, asn1_certs, key_pem, load_signer
from docjobs.signing.verify import PDF_ERRORS

TSA_TIMEOUT_SECONDS = 10


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
    except PDF_ERRORS:
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
    except PDF_ERRORS:
        raise DocJobError("input.malformed", "the PDF to sign is not readable") from None
    if writer.prev.encrypted:
        # Permissions-only encryption opens with the empty user password; the update is encrypted alike.
        try:
            opened = cast(AuthResult, cast(Any, writer).encrypt(b"")).status != AuthStatus.FAILED
        except PDF_ERRORS:
            opened = False
        if not opened:
            raise DocJobError("input.encrypted")
    return writer


def _signature_names(reader: PdfFileReader) -> list[str]:
    try:
        return [str(sig.field_name) for sig in reader.embedded_signatures]
    except PDF_ERRORS:
        raise DocJobError("input.malformed", "the signature fields of the PDF are unreadable") from None


def _forbids_changes(reader: PdfFileReader) -> bool:
    try:
        docmdp = read_certification_data(reader)
    except PDF_ERRORS:
        return False
    return docmdp is not None and docmdp.permission == MDPPerm.NO_CHANGES


def _field_names(reader: PdfFileReader) -> set[str]:
    try:
        return {str(name) for name, _, _ in fields.enumerate_sig_fields(reader, filled_status=None)}
    except PDF_ERRORS:
        return set()


def _free_name(wanted: str, *taken: Sequence[str] | set[str]) -> str:
    used = {name for names in taken for name in names}
    name, n = wanted, 1
    while name in used:
        n += 1
        name = f"{wanted}-{n}"
    return name
