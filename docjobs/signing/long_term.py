"""Long-term signatures: PAdES B-LT (a DSS with the chains, OCSP responses and CRLs) and B-LTA (plus a document
timestamp over all of it), split as signing is (docjobs/signing/sign.py) so that no child reaches the network.

* The worker fetches what the DSS holds (`gather_revocation`: the signer's and the TSA's chains, their OCSP responses
  and CRLs), only from the configured URLs and with webhooks' rules (docjobs/signing/trust_services.py), and checks it
  (`check_chain`: a revoked or expired signer is refused before anything is signed with it).
* A document child writes the incremental update (`prepare_archival_update`): the DSS, and for B-LTA a document
  timestamp field whose `/Contents` is a hole of hex zeros. Writing it means parsing the signed PDF.
* The worker checks the child's file with byte and integer comparisons (`finish_archival_update`: it begins with
  the signed document, byte for byte, and for B-LTA its byte range is the whole file but one empty hole), hashes the
  range itself, asks the TSA for the document timestamp over that digest and writes the token into the hole.

What the update may contain beyond the DSS and the timestamp is judged later, by `verify` (pyHanko's difference
analysis: anything else is a modification the signature does not allow).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import importlib
import os
import tempfile
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, cast

from cryptography import exceptions, x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import ocsp as x509_ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign.fields import SigFieldSpec
from pyhanko.sign.signers.cms_embedder import PdfCMSEmbedder, SigIOSetup, SigObjSetup
from pyhanko.sign.signers.pdf_byterange import DocumentTimestamp
from pyhanko.sign.signers.pdf_signer import _ensure_esic_ext
from pyhanko.sign.validation.dss import DocumentSecurityStore
from pyhanko_certvalidator import CertificateValidator, ValidationContext
from pyhanko_certvalidator.errors import (
    ExpiredError,
    InsufficientRevinfoError,
    NotYetValidError,
    PathBuildingError,
    PathValidationError,
    RevokedError,
)

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.settings.config import ConfigError
from docjobs.signing.config import asn1_certs
from docjobs.signing.sign import (
    MD_ALGORITHM,
    ByteRange,
    check_byte_range,
    field_names,
    free_name,
    starts_with_document,
    worker_copy,
)
from docjobs.signing.trust_services import BoundedTimeStamper, TrustServiceUnavailable, call
from docjobs.signing.verify import PDF_ERRORS

DOC_TIMESTAMP_FIELD = "docjobs-archive"
_CHUNK = 1 << 20
# asn1crypto is untyped: what pyHanko and its validator take
cms: Any = importlib.import_module("asn1crypto.cms")
crl: Any = importlib.import_module("asn1crypto.crl")
ocsp: Any = importlib.import_module("asn1crypto.ocsp")
asn1_x509: Any = importlib.import_module("asn1crypto.x509")


@dataclass(frozen=True)
class RevocationData:
    """What a DSS holds for a signature (DER): certificates, OCSP responses and CRLs."""

    certs: tuple[bytes, ...] = ()
    ocsps: tuple[bytes, ...] = ()
    crls: tuple[bytes, ...] = ()

    def __add__(self, other: RevocationData) -> RevocationData:
        def merged(first: tuple[bytes, ...], second: tuple[bytes, ...]) -> tuple[bytes, ...]:
            return tuple(dict.fromkeys(first + second))

        return RevocationData(
            merged(self.certs, other.certs), merged(self.ocsps, other.ocsps), merged(self.crls, other.crls)
        )

    def encoded(self) -> dict[str, list[str]]:
        """As base64 text, for a child's work order."""
        return {
            name: [base64.b64encode(item).decode() for item in getattr(self, name)]
            for name in ("certs", "ocsps", "crls")
        }

    @classmethod
    def decoded(cls, encoded: dict[str, list[str]]) -> RevocationData:
        return cls(
            *(tuple(base64.b64decode(item) for item in encoded.get(name, ())) for name in ("certs", "ocsps", "crls"))
        )


def tsa_certificates(token_der: bytes) -> list[x509.Certificate]:
    """The certificates a timestamp token carries (the TSA's, and what of its chain it sent)."""
    token = cms.ContentInfo.load(token_der)
    return [x509.load_der_x509_certificate(choice.chosen.dump()) for choice in token["content"]["certificates"]]


def signature_timestamp(cms_der: bytes) -> bytes | None:
    """The timestamp token in a CMS signature's unsigned attributes (PAdES B-T), DER; None at B-B."""
    signer = cms.ContentInfo.load(cms_der)["content"]["signer_infos"][0]
    for attribute in signer["unsigned_attrs"] or ():
        if attribute["type"].native == "signature_time_stamp_token":
            return cast(bytes, attribute["values"][0].dump())
    return None


def _issuer(cert: x509.Certificate, pool: Iterable[x509.Certificate]) -> x509.Certificate | None:
    for candidate in pool:
        if candidate.subject == cert.issuer:
            try:
                cert.verify_directly_issued_by(candidate)
            except (ValueError, TypeError, exceptions.InvalidSignature):
                continue
            return candidate
    return None


def _locations(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """The certificate's OCSP responders and CRL locations (URIs)."""
    ocsp_urls: list[str] = []
    crl_urls: list[str] = []
    try:
        access = cert.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
        ocsp_urls = [
            str(entry.access_location.value)
            for entry in access
            if entry.access_method == AuthorityInformationAccessOID.OCSP
            and isinstance(entry.access_location, x509.UniformResourceIdentifier)
        ]
    except x509.ExtensionNotFound:
        pass
    try:
        points = cert.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
        crl_urls = [
            str(name.value)
            for point in points
            for name in point.full_name or ()
            if isinstance(name, x509.UniformResourceIdentifier)
        ]
    except x509.ExtensionNotFound:
        pass
    return ocsp_urls, crl_urls


def _ocsp(cert: x509.Certificate, issuer: x509.Certificate, url: str, configured: Collection[str]) -> bytes:
    request = x509_ocsp.OCSPRequestBuilder().add_certificate(cert, issuer, hashes.SHA1()).build()
    answer = call(
        url,
        configured=configured,
        body=request.public_bytes(serialization.Encoding.DER),
        content_type="application/ocsp-request",
    )
    try:  # asn1crypto, as the validator reads it: cryptography refuses fractional seconds, which some responders send
        status = ocsp.OCSPResponse.load(answer)["response_status"].native
    except ValueError:
        raise TrustServiceUnavailable("ocsp_malformed") from None
    if status != "successful":
        raise TrustServiceUnavailable(f"ocsp_{status}")
    return answer


def _crl(url: str, configured: Collection[str]) -> bytes:
    answer = call(url, configured=configured)
    try:
        x509.load_der_x509_crl(answer)
    except ValueError:
        raise TrustServiceUnavailable("crl_malformed") from None
    return answer


def gather_revocation(
    chain: Sequence[x509.Certificate], pool: Sequence[x509.Certificate], configured: Collection[str]
) -> RevocationData:
    """The certificates of `chain` (a leaf first; its issuers are found in `chain` and `pool`) up to a self-signed
    root, each one's OCSP response and CRL from its configured locations. Every certificate but the root needs at
    least one of the two; the root's own is not fetched.

    Raises DocJobError signature.revocation_unavailable (its `reason` the first failed call's) naming no URL."""
    certs: list[x509.Certificate] = []
    ocsps: list[bytes] = []
    crls: list[bytes] = []
    cert: x509.Certificate | None = chain[0] if chain else None
    while cert is not None and cert not in certs:
        certs.append(cert)
        if cert.subject == cert.issuer:
            break
        issuer = _issuer(cert, [*chain, *pool])
        if issuer is None:
            raise ConfigError("a signing or timestamp certificate's issuer is not among the configured certificates")
        ocsp_urls, crl_urls = _locations(cert)
        found, failure = 0, "not_configured"
        for url in ocsp_urls:
            try:
                ocsps.append(_ocsp(cert, issuer, url, configured))
                found += 1
            except TrustServiceUnavailable as error:
                failure = error.reason
        for url in crl_urls:
            try:
                crls.append(_crl(url, configured))
                found += 1
            except TrustServiceUnavailable as error:
                failure = error.reason
        if not found:
            raise DocJobError(
                FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE,
                f"no revocation data could be fetched for a certificate of the chain ({failure})",
            )
        cert = issuer
    der = tuple(dict.fromkeys(cert.public_bytes(serialization.Encoding.DER) for cert in certs))
    return RevocationData(certs=der, ocsps=tuple(dict.fromkeys(ocsps)), crls=tuple(dict.fromkeys(crls)))


def check_chain(
    cert: x509.Certificate,
    roots: Sequence[x509.Certificate],
    revocation: RevocationData,
    *,
    extended_usage: frozenset[str] = frozenset(),
    moment: datetime | None = None,
) -> None:
    """That `cert` chains to `roots` and neither it nor any CA on its path is revoked or out of its validity, by the
    `revocation` data alone (nothing is fetched). Raises DocJobError signature.signer_revoked, or
    signature.revocation_unavailable when the data do not cover the path; ConfigError when there is no path."""
    context = ValidationContext(
        trust_roots=asn1_certs(roots),
        other_certs=[asn1_x509.Certificate.load(der) for der in revocation.certs],
        ocsps=[ocsp.OCSPResponse.load(der) for der in revocation.ocsps],
        crls=[crl.CertificateList.load(der) for der in revocation.crls],
        allow_fetching=False,
        revocation_mode="require",
        moment=moment,
    )
    validator = CertificateValidator(asn1_certs([cert])[0], validation_context=context)
    try:
        asyncio.run(cast(Any, validator).async_validate_usage(set(), extended_key_usage=set(extended_usage) or None))
    except (RevokedError, ExpiredError, NotYetValidError):
        raise DocJobError(FailureCode.SIGNATURE_SIGNER_REVOKED) from None
    except InsufficientRevinfoError:
        raise DocJobError(
            FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE, "the revocation data fetched do not cover the chain"
        ) from None
    except PathBuildingError:
        raise ConfigError("the signing or timestamp certificate does not chain to DOCJOBS_TRUST_ROOTS") from None
    except PathValidationError:
        raise DocJobError(FailureCode.SIGNATURE_SIGNER_REVOKED, "a signing certificate is not valid now") from None


@dataclass(frozen=True)
class PreparedUpdate:
    """What the child reports about the archival update it wrote (the worker trusts none of it blindly)."""

    byte_range: ByteRange | None  # the document timestamp's /ByteRange (B-LTA); None: a DSS only (B-LT)
    field_name: str | None


def prepare_archival_update(
    src: Path, dst: Path, revocation: RevocationData, *, timestamp_reserved: int | None
) -> PreparedUpdate:
    """Append to the signed `src`, into `dst`, an incremental update with the DSS (`revocation`), and with
    `timestamp_reserved` a document timestamp field whose `/Contents` is a hole of that many hex zeros.

    Raises DocJobError input.malformed."""
    if timestamp_reserved is not None and (timestamp_reserved <= 0 or timestamp_reserved % 2):
        raise ValueError("timestamp_reserved must be a positive even number")
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".archival", dir=dst.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    byte_range: ByteRange | None = None
    field_name = None
    try:
        with src.open("rb") as infile, tmp.open("w+b") as outfile:
            writer = IncrementalPdfFileWriter(infile, strict=False)
            DocumentSecurityStore.supply_dss_in_writer(
                writer,
                None,  # no VRI: PAdES baseline signatures do not need it
                certs=[asn1_x509.Certificate.load(der) for der in revocation.certs],
                ocsps=[ocsp.OCSPResponse.load(der) for der in revocation.ocsps],
                crls=[crl.CertificateList.load(der) for der in revocation.crls],
            )
            if timestamp_reserved is None:
                cast(Any, writer).write(outfile)
            else:  # a renewal adds one more: `docjobs-archive-2`, `-3`, ...
                field_name = free_name(DOC_TIMESTAMP_FIELD, field_names(writer.prev))
                byte_range = _timestamp_hole(writer, outfile, timestamp_reserved, field_name)
        tmp.replace(dst)
    except PDF_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the signed PDF could not be extended") from None
    finally:
        tmp.unlink(missing_ok=True)
    return PreparedUpdate(byte_range=byte_range, field_name=field_name)


def _timestamp_hole(writer: IncrementalPdfFileWriter, outfile: IO[bytes], reserved: int, name: str) -> ByteRange:
    """Write `writer`'s update with a new document timestamp field `name` and an empty hole; its /ByteRange."""
    _ensure_esic_ext(writer)
    embedder = PdfCMSEmbedder(new_field_spec=SigFieldSpec(sig_field_name=name))
    steps = embedder.write_cms(field_name=name, writer=writer, existing_fields_only=False)
    next(steps)
    steps.send(SigObjSetup(sig_placeholder=cast(Any, DocumentTimestamp)(bytes_reserved=reserved)))
    prepared, _ = steps.send(SigIOSetup(md_algorithm=MD_ALGORITHM, in_place=False, output=outfile))
    size = outfile.seek(0, os.SEEK_END)
    start, end = prepared.reserved_region_start, prepared.reserved_region_end
    return (0, start, end, size - end)


def timestamp_reserved(timestamper: BoundedTimeStamper) -> int:
    """The hole for a document timestamp, in hex digits: a dry run's token doubled, plus half again (a TSA's answers
    vary in size). Raises DocJobError signature.tsa_unavailable."""
    length = len(timestamper.token(b"\0" * 32)) * 2
    return length + 2 * (length // 4)


def finish_archival_update(
    prepared: Path,
    dst: Path,
    update: PreparedUpdate,
    *,
    signed: tuple[int, str],
    timestamper: BoundedTimeStamper | None,
    reserved: int | None,
) -> bytes | None:
    """Copy the child's `prepared` file (a regular file, not through a link) to a new `dst`, check that it begins
    with the `signed` (size, sha256) document, and for a document timestamp (`timestamper`) that its byte range is
    the whole file but an empty hole of `reserved` hex digits; then write the TSA's token over that range's digest
    into the hole, and return it (the newest timestamp: what an archive's next renewal is due by).

    Raises DocJobError signature.byte_range, signature.tsa_unavailable."""
    with worker_copy(prepared, dst) as outfile:
        if not starts_with_document(outfile, *signed):
            raise DocJobError(
                FailureCode.SIGNATURE_BYTE_RANGE, "the extended document does not begin with the signed one"
            )
        if timestamper is None:
            return None
        if update.byte_range is None or reserved is None:
            raise DocJobError(FailureCode.SIGNATURE_BYTE_RANGE, "the document timestamp has no place")
        digest = check_byte_range(outfile, update.byte_range, bytes_reserved=reserved)
        token = timestamper.token(digest)
        contents = binascii.hexlify(token).upper()
        if len(contents) > reserved:
            raise RuntimeError("the document timestamp is larger than the space reserved for it")
        outfile.seek(update.byte_range[1] + 1)
        outfile.write(contents)
        return token


def renewal_due(token_der: bytes, renew_before: timedelta) -> datetime:
    """When an archive whose newest timestamp is `token_der` must be renewed: `renew_before` ahead of its TSA
    certificate's expiry (after it, nothing proves that timestamp, nor what it covers)."""
    return tsa_leaf(tsa_certificates(token_der)).not_valid_after_utc - renew_before


def signer_revocation(
    certificate: x509.Certificate,
    chain: Sequence[x509.Certificate],
    roots: Sequence[x509.Certificate],
    configured: Collection[str],
) -> RevocationData:
    """The signer chain's revocation data, checked: refused (signature.signer_revoked) before anything is signed."""
    data = gather_revocation([certificate, *chain], roots, configured)
    check_chain(certificate, roots, data)
    return data


def timestamp_revocation(
    token_der: bytes, roots: Sequence[x509.Certificate], configured: Collection[str]
) -> RevocationData:
    """The revocation data of the TSA's chain of a timestamp token, checked as of now."""
    carried = tsa_certificates(token_der)
    leaf = tsa_leaf(carried)
    data = gather_revocation([leaf], [*carried, *roots], configured)
    check_chain(leaf, roots, data, extended_usage=frozenset({"time_stamping"}))
    return data


def tsa_leaf(carried: Sequence[x509.Certificate]) -> x509.Certificate:
    """The TSA's own certificate among those a timestamp token carries (the first that is no CA)."""
    for cert in carried:
        if not _is_ca(cert):
            return cert
    raise ConfigError("the TSA's timestamp carries no TSA certificate")


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False
