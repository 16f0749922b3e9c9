"""The release gate and `sign` (PAdES, after the release gate). `verify` (pyHanko's verdict and the output contract)
is declared with the other document stages (docjobs/isolation/stage_work.py, `VERIFY`: activities/adapter.py).

The signing key stays in the worker: the document child prepares the signature's place (docjobs/signing/sign.py,
`prepare_signature`) and reports the byte range; this activity checks that range on the file with integer and
byte comparisons, in a folder of its own. Before it hashes and signs, the release gate (docjobs/pdf/release_gate.py)
reads a copy of those very bytes in a sandbox of its own (a fresh child of a zygote that loaded no C/C++ PDF reader:
docjobs/isolation/gate_work.py), and the worker judges its report: the signature dictionary must be the one the
worker expects for the job's tenant, the content what the job asked for. `verify` gets the trust anchors only
(certificates), never the key; its C/C++ readers can still refuse what the gate passed, never pass what it refused.

At B-LT and B-LTA (the policy's `sign.level`) the worker also fetches the chains' revocation data (refusing a revoked
signer before anything is signed), a second document child writes it into an incremental update, and the worker
checks that update and fills its document timestamp (docjobs/signing/long_term.py).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import CancelledError

from activities.declared import implements
from activities.isolated import Attempt, IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import BlobRef, ReleaseGateSettings, SignInput, SignOutput
from docjobs.domain.policy import SignLevel
from docjobs.isolation import gate_work, stage_work
from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.child_process import ChildStopped
from docjobs.isolation.gate_work import GateWork
from docjobs.isolation.stage_work import ArchivalUpdateWork, SignWork
from docjobs.isolation.tenant_pools import TenantPools, hand_over, sibling_pools
from docjobs.pdf.release_gate import Expected, ExpectedStamp, GateReport, judge
from docjobs.signing import long_term
from docjobs.signing.config import SignerConfig, load_trust_roots
from docjobs.signing.environment import signer_from_env
from docjobs.signing.long_term import PreparedUpdate, RevocationData
from docjobs.signing.sign import ReleaseSigner, release_reason
from docjobs.store.storage import BlobStore, sha256_file

log = logging.getLogger("docjobs.release")


def job_tenant(request: SignInput) -> str:
    """Who asked: the request's tenant, or (scheduled by older code) the job ID's `{tenant}/` prefix."""
    return request.tenant if request.tenant is not None else request.job_id.partition("/")[0]


class ReleaseActivities(IsolatedStages):
    def __init__(
        self,
        store: BlobStore,
        workdir: Path,
        pool: ChildPool | TenantPools,
        data_dir: Path,
        gate: ChildPool | TenantPools | None = None,
    ) -> None:
        """`gate`: the release gate's pools (`sibling_pools(pool, gate_work.ENTRIES_MODULE)`, which the worker opens
        and closes with its other pools); made here from `pool` when not given."""
        super().__init__(store, workdir, pool)
        self._data_dir = data_dir
        self._gate = gate if gate is not None else sibling_pools(pool, gate_work.ENTRIES_MODULE)

    def _signer(self) -> SignerConfig:
        """From config; on the embedded default a development CA and signer are created on first use."""
        return signer_from_env(self._data_dir)

    @implements(specs.SIGN)
    def sign(self, request: SignInput) -> SignOutput:
        with self._attempt(specs.SIGN.name, request) as attempt:
            config = self._signer()
            level = request.sign.level
            key = ReleaseSigner(config, level)  # the key is loaded here, in the worker, and goes nowhere else
            # B-LT, B-LTA: the signer's chain is checked against its CAs' revocation data before anything is signed
            revocation = (
                long_term.signer_revocation(
                    key.certificate, key.chain, load_trust_roots(config), config.revocation_urls
                )
                if level is not None and level.long_term
                else None
            )
            tenant = job_tenant(request)
            reserved = key.bytes_reserved(tenant)
            done, paths = self._restage(
                attempt,
                request,
                stage_work.SIGN,
                lambda paths: SignWork(
                    source=paths.source,
                    output=paths.output,
                    certificate_pem=key.certificate_pem.decode(),
                    bytes_reserved=reserved,
                    tenant=tenant,
                    visible=request.sign.visible,
                    allow_signed_input=request.sign.allow_signed_input,
                    stamp_box=config.stamp_box,
                ),
            )
            stamp = ExpectedStamp(key.certificate_pem, config.stamp_box) if request.sign.visible else None
            with self._folder("sign-key") as own:  # not the child's folder: it cannot change what is signed
                signed = own / "signed.pdf"
                cms = key.finish(
                    paths.output,
                    signed,
                    done.byte_range,
                    tenant=tenant,
                    bytes_reserved=reserved,
                    begins_with=(request.staged.size, request.staged.sha256),
                    gate=lambda checked: self._release_gate(attempt, request, checked, done.byte_range, tenant, stamp),
                )
                made: str = key.level
                token = None
                if level is not None and revocation is not None:
                    signed, token = self._extended(attempt, request, key, config, level, signed, cms, revocation)
                    made = level.value.upper()
                staged = self._put_staged("sign", attempt.number, signed)
        return SignOutput(
            staged=staged,
            level=made,
            signer_subject=key.subject,
            certificate_sha256=key.fingerprint,
            invalidated_signatures=done.invalidated_signatures,
            attempt=attempt.number,
            cost=attempt.meter.total(),
            tenant=tenant,
            timestamp_token=token,
        )

    def _extended(
        self,
        attempt: Attempt,
        request: SignInput,
        key: ReleaseSigner,
        config: SignerConfig,
        level: SignLevel,
        signed: Path,
        cms: bytes,
        revocation: RevocationData,
    ) -> tuple[Path, BlobRef | None]:
        """The signed file made B-LT (a DSS) or B-LTA (and a document timestamp): the worker fetches the TSA chain's
        revocation data too, a document child writes the update (it parses the signed PDF), and the worker checks
        that it begins with the signed bytes, hashes the timestamp's range and fills its hole. With the file, the
        document timestamp's token, staged (B-LTA: what its archive's renewal is due by)."""
        token = long_term.signature_timestamp(cms)
        if token is None:
            raise RuntimeError("a long-term signature was made without its signature timestamp")
        roots = load_trust_roots(config)
        revocation = revocation + long_term.timestamp_revocation(token, roots, config.revocation_urls)
        stamper = key.timestamper if level.archival else None
        reserved = long_term.timestamp_reserved(stamper) if stamper is not None else None
        handed, written = attempt.folder / "signed.pdf", attempt.folder / "extended.pdf"
        shutil.copyfile(signed, handed)
        work = ArchivalUpdateWork(
            source=handed, output=written, revocation=revocation.encoded(), timestamp_reserved=reserved
        )
        done = self._isolated(
            attempt, stage_work.ARCHIVAL_UPDATE, work, request.cpu, max_pages=request.shape.page_count or None
        )
        extended = signed.with_name("extended.pdf")
        token = long_term.finish_archival_update(
            written,
            extended,
            PreparedUpdate(byte_range=done.byte_range, field_name=done.field_name),
            signed=(signed.stat().st_size, sha256_file(signed)),
            timestamper=stamper,
            reserved=reserved,
        )
        if token is None:
            return extended, None
        token_file = signed.with_name("timestamp.token")
        token_file.write_bytes(token)
        return extended, self._put_staged("sign", attempt.number, token_file, suffix=".token")

    def _release_gate(
        self,
        attempt: Attempt,
        request: SignInput,
        checked: Path,
        byte_range: Sequence[int],
        tenant: str,
        stamp: ExpectedStamp | None,
    ) -> None:
        """Run the release gate on a copy of `checked` (the worker's own copy of the prepared file, about to be
        signed) in a fresh child of the tenant's gate sandbox, and judge its report here: raises DocJobError
        (quarantine) unless every check passes. The settings a job scheduled without them gets are the shipped
        policies' (nothing active may be signed); its watermark and patterns are then not checked."""
        settings = request.gate if request.gate is not None else ReleaseGateSettings()
        with self._gate.lease(request.job_id) as (pool, root), self._folder("release-gate", root) as folder:
            document = folder / "prepared.pdf"
            shutil.copyfile(checked, document)
            hand_over(folder, pool.confinement)
            try:
                report = pool.run(
                    gate_work.GATE_ENTRY,
                    GateWork(document=document, settings=settings),
                    GateReport,
                    cpu=request.cpu,
                    on_progress=attempt.lease.progress,
                    should_stop=activity.is_cancelled,
                    on_usage=attempt.meter.add_child,
                    max_pages=request.shape.page_count or None,
                    folder=folder,
                )
            except ChildStopped:
                raise CancelledError("the stage was canceled or lost its lease: its gate child was killed") from None
        expected = Expected(
            reason=release_reason(tenant),
            byte_range=(byte_range[0], byte_range[1], byte_range[2], byte_range[3]),
            allow_signed_input=request.sign.allow_signed_input,
            page_count=request.shape.page_count,
            sanitize=settings.sanitize,
            stamp=stamp,
        )
        checks = judge(report, expected)
        log.info("release gate passed for %s: %s", request.job_id, ", ".join(checks))
