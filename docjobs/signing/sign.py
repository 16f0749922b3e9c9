"""Signing: one incremental update with a PAdES signature (see the package's docstring).

Signing is split in two, so that the signing key never reaches a process that parses a document:

* `prepare_signature` (a document child): opens the PDF, appends the signature field and dictionary with an
  empty hole for the signature (`/Contents <00…>`) and reports the `/ByteRange`: everything but the hole.
  It gets the signer's certificate (public: for the visible stamp) and never the key or its passphrase.
* `ReleaseSigner` (the worker): loads the key, checks the prepared file with integer and byte comparisons
  only (`check_byte_range`: the ranges cover the whole file but the hole, the hole holds hex zeros of the
  size it asked for, the file begins with the document it handed over), has the release gate read a copy of
  its checked file (`finish`'s `gate`: docjobs/pdf/release_gate.py, in a sandbox of its own, which also shows the
  signature dictionary to be the one the worker expects), hashes those bytes itself, makes the CMS (with the
  TSA's timestamp when configured) and writes it into the hole. Hashing is not parsing: a child that lied
  about the ranges gets `signature.byte_range`, one that wrote another dictionary `signature.dictionary`, never
  a signature.

The tenant who asked is named twice: in the signature dictionary's `/Reason` ("docjobs release for tenant
NAME", what viewers show; written by the child, compared by the worker through the gate) and in a CAdES
`signer-attributes-v2` claimed attribute of type `group` with the value "docjobs tenant NAME" (signed by the
worker, so a child cannot change it).
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import importlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, cast

from cryptography import x509
from pyhanko.keys import load_private_key_from_pemder_data
from pyhanko.pdf_utils.crypt.api import AuthResult, AuthStatus
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields, signers
from pyhanko.sign.ades.api import CAdESSignedAttrSpec, SignerAttrSpec
from pyhanko.sign.fields import FieldMDPAction, FieldMDPSpec, MDPPerm
from pyhanko.sign.signers.pdf_cms import PdfCMSSignedAttributes
from pyhanko.sign.timestamps import TimestampRequestError
from pyhanko.sign.validation.pdf_embedded import read_certification_data
from pyhanko_certvalidator.registry import SimpleCertificateStore

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.policy import SignLevel
from docjobs.settings.config import ConfigError
from docjobs.signing.config import DEFAULT_STAMP_BOX, SignerConfig, asn1_certs, cert_pem, key_pem, load_signer
from docjobs.signing.trust_services import BoundedTimeStamper
from docjobs.signing.verify import PDF_ERRORS, TENANT_CLAIM

RELEASE_REASON = "docjobs release"
MD_ALGORITHM = "sha256"
_CHUNK = 1 << 20
cms: Any = importlib.import_module("asn1crypto.cms")  # untyped

ByteRange = tuple[int, int, int, int]


def release_reason(tenant: str | None) -> str:
    """The signature's /Reason: who asked for the release."""
    return RELEASE_REASON if tenant is None else f"{RELEASE_REASON} for tenant {tenant}"


@dataclass(frozen=True)
class SignInfo:
    level: Literal["B-B", "B-T"]
    signer_subject: str
    certificate_sha256: str  # fingerprint of the signer certificate (DER)
    field_name: str
    certified: bool  # a certification signature (DocMDP: no changes) rather than an approval signature
    invalidated_signatures: int = 0  # signatures of the input that no longer cover the whole file
    locked: bool = True  # DocMDP P1 (certified), or a FieldMDP /Lock with /P 1 (an approval signature)


@dataclass(frozen=True)
class Prepared:
    """What the child reports about the document it prepared (the worker trusts none of it blindly)."""

    byte_range: ByteRange  # [0, hole start, hole end, bytes after the hole]: the /ByteRange it wrote
    field_name: str
    certified: bool
    locked: bool
    invalidated_signatures: int


def prepare_signature(
    src: Path,
    dst: Path,
    certificate_pem: bytes,
    *,
    bytes_reserved: int,
    reason: str = RELEASE_REASON,
    field_name: str = "docjobs",
    allow_existing_signatures: bool = False,
    certify: bool = True,
    lock: bool = True,
    visible: bool = False,
    stamp_box: tuple[int, int, int, int] = DEFAULT_STAMP_BOX,
) -> Prepared:
    """Append to `src`, into `dst`, a signature field and dictionary whose `/Contents` is a hole of
    `bytes_reserved` hex zeros; no key is needed (`certificate_pem` is the signer's certificate, public).

    `certify` (default): on an unsigned input, a certification signature with DocMDP "no changes"
    rather than an approval signature. With `allow_existing_signatures`, the input's signatures are
    kept (they then cover a revision, not the file: reported as `invalidated_signatures`), unless the
    input is certified with "no changes", which no further signature may follow (input.signed); the new
    signature is then an approval signature, locked (`lock`) by a FieldMDP /Lock of every field with
    DocMDP /P 1: nothing may change after it either.

    Raises DocJobError: input.signed, input.malformed, input.encrypted.
    """
    if bytes_reserved <= 0 or bytes_reserved % 2:
        raise ValueError("bytes_reserved must be a positive even number")
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".signing", dir=dst.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with src.open("rb") as infile:
            writer = _open_for_update(infile)
            existing = _existing_signatures(writer, allowed=allow_existing_signatures)
            name = free_name(field_name, existing, field_names(writer.prev))
            certify = certify and not existing  # a certification signature must be the first one
            locked = certify or lock
            box = stamp_box if visible else None
            pdf_signer = _pdf_signer(certificate_pem, name, reason=reason, certify=certify, lock=lock, box=box)
            with tmp.open("w+b") as outfile:
                prepared, _, _ = asyncio.run(
                    pdf_signer.async_digest_doc_for_signing(writer, bytes_reserved=bytes_reserved, output=outfile)
                )
                size = outfile.seek(0, os.SEEK_END)
        tmp.replace(dst)
    except PDF_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the PDF could not be prepared for signing") from None
    finally:
        tmp.unlink(missing_ok=True)
    start, end = prepared.reserved_region_start, prepared.reserved_region_end
    return Prepared(
        byte_range=(0, start, end, size - end),
        field_name=name,
        certified=certify,
        locked=locked,
        invalidated_signatures=len(existing),
    )


def _existing_signatures(writer: IncrementalPdfFileWriter, *, allowed: bool) -> list[str]:
    """The input's signature fields, if it may keep them: refused when it has any and they are not `allowed`, and
    always when it is certified with "no changes" (input.signed)."""
    existing = _signature_names(writer.prev)
    if existing and not allowed:
        raise DocJobError(FailureCode.INPUT_SIGNED)
    if _forbids_changes(writer.prev):
        raise DocJobError(FailureCode.INPUT_SIGNED, "the input is certified and its certification forbids all changes")
    return existing


def _pdf_signer(
    certificate_pem: bytes,
    name: str,
    *,
    reason: str,
    certify: bool,
    lock: bool,
    box: tuple[int, int, int, int] | None,
) -> signers.PdfSigner:
    """pyHanko's signer for the new field `name` on the first page (invisible unless `box`): a certification
    signature with DocMDP "no changes", or an approval signature whose FieldMDP /Lock (`lock`) sets DocMDP /P 1.
    It signs nothing: its signature value is empty, the hole the worker fills in."""
    placeholder = signers.ExternalSigner(
        signing_cert=asn1_certs(x509.load_pem_x509_certificates(certificate_pem))[0],
        cert_registry=None,
        signature_value=b"",
    )
    meta = signers.PdfSignatureMetadata(
        field_name=name,
        md_algorithm=MD_ALGORITHM,
        subfilter=fields.SigSeedSubFilter.PADES,
        reason=reason,
        certify=certify,
        docmdp_permissions=MDPPerm.NO_CHANGES,
    )
    field_lock = not certify and lock
    spec = fields.SigFieldSpec(
        sig_field_name=name,
        on_page=0,
        box=box,
        field_mdp_spec=FieldMDPSpec(FieldMDPAction.ALL) if field_lock else None,
        doc_mdp_update_value=MDPPerm.NO_CHANGES if field_lock else None,
    )
    return signers.PdfSigner(meta, placeholder, new_field_spec=spec)


def check_byte_range(file: IO[bytes], byte_range: Sequence[int], *, bytes_reserved: int) -> bytes:
    """The SHA-256 of the bytes `byte_range` signs, once they are checked to be the whole file but one hole of
    `bytes_reserved` hex zeros between `<` and `>`. Integer and byte comparisons only: nothing is parsed.

    Raises DocJobError signature.byte_range."""
    size = os.fstat(file.fileno()).st_size
    if len(byte_range) != 4 or not all(type(n) is int and n >= 0 for n in byte_range):
        raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the byte range is not four non-negative integers")
    first, hole_start, hole_end, last = byte_range
    if first != 0 or hole_start <= 0 or hole_end + last != size:
        raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the byte range leaves part of the file unsigned")
    if hole_end - hole_start != bytes_reserved + 2:
        raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the signature hole is not the size the worker reserved")
    file.seek(hole_start)
    hole = file.read(bytes_reserved + 2)
    if hole[:1] != b"<" or hole[-1:] != b">" or hole[1:-1].strip(b"0"):
        raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the signature hole is not an empty placeholder")
    digest = hashlib.sha256()
    for offset, length in ((0, hole_start), (hole_end, last)):
        file.seek(offset)
        left = length
        while left:
            chunk = file.read(min(left, _CHUNK))
            if not chunk:
                raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the file ended inside the byte range")
            digest.update(chunk)
            left -= len(chunk)
    return digest.digest()


def starts_with_document(file: IO[bytes], size: int, sha256: str) -> bool:
    """Whether the file's first `size` bytes have the SHA-256 `sha256` (hex): the document it was handed."""
    file.seek(0)
    digest, left = hashlib.sha256(), size
    while left:
        chunk = file.read(min(left, _CHUNK))
        if not chunk:
            return False
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest() == sha256


@contextmanager
def worker_copy(prepared: Path, dst: Path) -> Iterator[IO[bytes]]:
    """Copy a child's `prepared` file (a regular file, not through a link) to a new `dst`, the worker's own copy that
    no child can reach, and yield it open for reading and writing; `dst` is removed if the block raises.

    Raises DocJobError signature.byte_range (not a regular file)."""
    try:
        source = os.open(prepared, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the prepared document is not a regular file") from None
    with os.fdopen(source, "rb") as infile:
        if not stat.S_ISREG(os.fstat(infile.fileno()).st_mode):
            raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the prepared document is not a regular file")
        target = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(target, "r+b") as outfile:
                while chunk := infile.read(_CHUNK):
                    outfile.write(chunk)
                outfile.flush()
                yield outfile
        except BaseException:
            dst.unlink(missing_ok=True)
            raise


def tenant_attribute(tenant: str) -> Any:
    """The signed claim naming the tenant: a `group` attribute (RFC 5755's IetfAttrSyntax) in CAdES'
    signer-attributes-v2."""
    value = cms.IetfAttrValue(name="string", value=TENANT_CLAIM + tenant)
    return cms.AttCertAttribute({"type": "group", "values": [{"values": [value]}]})


class ReleaseSigner:
    """The key's side of signing: only ever in the worker. Loads the key (raises ConfigError) and the TSA."""

    def __init__(self, config: SignerConfig, level: SignLevel | None = None) -> None:
        """`level`: the policy's `sign.level`; B-T and above timestamp the signature (with none configured:
        ConfigError), B-B never does, None does when a TSA is configured."""
        material = load_signer(config)
        self.subject = material.subject
        self.fingerprint = material.fingerprint
        self.certificate_pem = cert_pem(material.certificate)
        self.certificate, self.chain = material.certificate, material.chain  # public: for the revocation checks
        self._signer = signers.SimpleSigner(
            signing_cert=asn1_certs([material.certificate])[0],
            signing_key=load_private_key_from_pemder_data(key_pem(material.key), passphrase=None),
            cert_registry=_cert_store(material.chain),
        )
        if level is not None and level.timestamped and not config.tsa_url:
            raise ConfigError(f"sign.level {level.value} needs a timestamp authority: set DOCJOBS_TSA_URL")
        stamped = config.tsa_url if level is None or level.timestamped else None
        self.timestamper = BoundedTimeStamper(stamped) if stamped else None

    @property
    def level(self) -> Literal["B-B", "B-T"]:
        """The signature's own level (B-LT and B-LTA extend a B-T signature: docjobs/signing/long_term.py)."""
        return "B-T" if self.timestamper else "B-B"

    def bytes_reserved(self, tenant: str | None) -> int:
        """The hole to ask the child for, in hex digits: a dry run of the CMS (with a TSA token, which may hit
        the TSA), doubled for hex, plus half again (a TSA's answers vary in size). Raises DocJobError
        signature.tsa_unavailable."""
        length = len(self._cms(hashlib.sha256().digest(), tenant, dry_run=True)) * 2
        return length + 2 * (length // 4)

    def finish(
        self,
        prepared: Path,
        dst: Path,
        byte_range: Sequence[int],
        *,
        tenant: str | None,
        bytes_reserved: int,
        begins_with: tuple[int, str] | None = None,
        gate: Callable[[Path], None] | None = None,
    ) -> bytes:
        """Copy the child's `prepared` file (not following a link, a regular file only) to a new `dst`, check it
        (`check_byte_range`; and that it begins with the `begins_with` (size, sha256) document it was given),
        hand `dst` to `gate` (the release gate: docjobs/pdf/release_gate.py; it raises to refuse), then sign the
        digest of its byte range and write the CMS into its hole; returns the CMS (DER). The gate reads the very
        bytes that are signed: `dst` is the worker's own copy, which no child can reach.

        Raises DocJobError signature.byte_range, signature.tsa_unavailable, and whatever `gate` raises."""
        with worker_copy(prepared, dst) as outfile:  # nothing half-signed is left behind
            digest = check_byte_range(outfile, byte_range, bytes_reserved=bytes_reserved)
            if begins_with is not None and not starts_with_document(outfile, *begins_with):
                raise DocJobError(
                    FailureCode.SIGNATURE_BYTE_RANGE,
                    "the prepared document does not begin with the document it was given",
                )
            if gate is not None:
                gate(dst)  # nothing is signed unless the gate passes
            return self._sign_copy(outfile, digest, byte_range, tenant, bytes_reserved)

    def _sign_copy(
        self, outfile: IO[bytes], digest: bytes, byte_range: Sequence[int], tenant: str | None, bytes_reserved: int
    ) -> bytes:
        der = self._cms(digest, tenant, dry_run=False)
        contents = binascii.hexlify(der).upper()
        if len(contents) > bytes_reserved:
            raise RuntimeError("the signature is larger than the space reserved for it")
        outfile.seek(byte_range[1] + 1)
        outfile.write(contents)
        return der

    def _cms(self, digest: bytes, tenant: str | None, *, dry_run: bool) -> bytes:
        claims = [tenant_attribute(tenant)] if tenant is not None else []
        attributes = PdfCMSSignedAttributes(
            signing_time=datetime.now(UTC),  # not embedded in PAdES (the /M of the signature dictionary is)
            cades_signed_attrs=CAdESSignedAttrSpec(
                signer_attributes=SignerAttrSpec(claimed_attrs=claims, certified_attrs=[]) if claims else None
            ),
        )
        try:
            signed = asyncio.run(
                self._signer.async_sign(
                    digest,
                    MD_ALGORITHM,
                    dry_run=dry_run,
                    use_pades=True,
                    timestamper=self.timestamper,
                    signed_attr_settings=attributes,
                )
            )
        except TimestampRequestError:
            raise DocJobError(FailureCode.SIGNATURE_TSA_UNAVAILABLE) from None
        return cast(bytes, signed.dump())


def sign_pdf(
    src: Path,
    dst: Path,
    config: SignerConfig,
    *,
    tenant: str | None = None,
    field_name: str = "docjobs",
    allow_existing_signatures: bool = False,
    certify: bool = True,
    lock: bool = True,
) -> SignInfo:
    """Sign `src` into `dst` (an incremental update of `src`; `dst` is written atomically) in one process: the
    two halves (`prepare_signature`, `ReleaseSigner.finish`) one after the other. A worker runs the first
    half in a document child instead.

    Raises DocJobError: input.signed (the input already has signatures and they are not allowed),
    input.malformed, input.encrypted, signature.tsa_unavailable (the TSA could not be reached; transient).
    Raises ConfigError when the key material cannot be loaded.
    """
    key = ReleaseSigner(config)
    reserved = key.bytes_reserved(tenant)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dst.name}.", suffix=".signing", dir=dst.parent) as folder:
        prepared_path, signed = Path(folder) / "prepared.pdf", Path(folder) / "signed.pdf"
        prepared = prepare_signature(
            src,
            prepared_path,
            key.certificate_pem,
            bytes_reserved=reserved,
            reason=release_reason(tenant),
            field_name=field_name,
            allow_existing_signatures=allow_existing_signatures,
            certify=certify,
            lock=lock,
            visible=config.visible,
            stamp_box=config.stamp_box,
        )
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        key.finish(
            prepared_path,
            signed,
            prepared.byte_range,
            tenant=tenant,
            bytes_reserved=reserved,
            begins_with=(src.stat().st_size, digest),
        )
        signed.replace(dst)
    return SignInfo(
        level=key.level,
        signer_subject=key.subject,
        certificate_sha256=key.fingerprint,
        field_name=prepared.field_name,
        certified=prepared.certified,
        invalidated_signatures=prepared.invalidated_signatures,
        locked=prepared.locked,
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
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the PDF to sign is not readable") from None
    if writer.prev.encrypted:
        # Permissions-only encryption opens with the empty user password; the update is encrypted alike.
        try:
            opened = cast(AuthResult, cast(Any, writer).encrypt(b"")).status != AuthStatus.FAILED
        except PDF_ERRORS:
            opened = False
        if not opened:
            raise DocJobError(FailureCode.INPUT_ENCRYPTED)
    return writer


def _signature_names(reader: PdfFileReader) -> list[str]:
    try:
        return [str(sig.field_name) for sig in reader.embedded_signatures]
    except PDF_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the signature fields of the PDF are unreadable") from None


def _forbids_changes(reader: PdfFileReader) -> bool:
    try:
        docmdp = read_certification_data(reader)
    except PDF_ERRORS:
        return False
    return docmdp is not None and docmdp.permission == MDPPerm.NO_CHANGES


def field_names(reader: PdfFileReader) -> set[str]:
    """The names of the signature fields of `reader`'s document (none, when they cannot be read)."""
    try:
        return {str(name) for name, _, _ in fields.enumerate_sig_fields(reader, filled_status=None)}
    except PDF_ERRORS:
        return set()


def free_name(wanted: str, *taken: Sequence[str] | set[str]) -> str:
    """`wanted`, or `wanted-2`, `wanted-3`, ... the first that none of `taken` holds."""
    used = {name for names in taken for name in names}
    name, n = wanted, 1
    while name in used:
        n += 1
        name = f"{wanted}-{n}"
    return name
