"""The release gates: `sign` (PAdES) and `verify` (pyHanko's verdict and the output contract).

The signing key stays in the worker: the document child prepares the signature's place (docjobs/signing/sign.py,
`prepare_signature`) and reports the byte range; this activity checks that range on the file with integer and
byte comparisons, hashes it, signs and writes the signature in a folder of its own. `verify` gets the trust
anchors only (certificates), never the key.
"""

from __future__ import annotations

from pathlib import Path

from activities.declared import implements
from activities.isolated import IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import SignInput, SignOutput, VerifyInput, VerifyOutput
from docjobs.isolation import stage_work
from docjobs.isolation.sandbox import ChildPool, TenantPools
from docjobs.isolation.stage_work import SignWork, VerifyWork
from docjobs.signing.config import SignerConfig, TrustAnchors
from docjobs.signing.environment import signer_from_env
from docjobs.signing.sign import ReleaseSigner
from docjobs.store.storage import BlobStore


def job_tenant(request: SignInput) -> str:
    """Who asked: the request's tenant, or (scheduled by older code) the job ID's `{tenant}/` prefix."""
    return request.tenant if request.tenant is not None else request.job_id.partition("/")[0]


class ReleaseActivities(IsolatedStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools, data_dir: Path) -> None:
        super().__init__(store, workdir, pool)
        self._data_dir = data_dir

    def _signer(self) -> SignerConfig:
        """From config; on the embedded default a development CA and signer are created on first use."""
        return signer_from_env(self._data_dir)

    @implements(specs.SIGN)
    def sign(self, request: SignInput) -> SignOutput:
        with self._attempt(specs.SIGN.name, request) as attempt:
            config = self._signer()
            key = ReleaseSigner(config)  # the key is loaded here, in the worker, and goes nowhere else
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
            with self._folder("sign-key") as own:  # not the child's folder: it cannot change what is signed
                signed = own / "signed.pdf"
                key.finish(
                    paths.output,
                    signed,
                    done.byte_range,
                    tenant=tenant,
                    bytes_reserved=reserved,
                    begins_with=(request.staged.size, request.staged.sha256),
                )
                staged = self._put_staged("sign", attempt.number, signed)
        return SignOutput(
            staged=staged,
            level=key.level,
            signer_subject=key.subject,
            certificate_sha256=key.fingerprint,
            invalidated_signatures=done.invalidated_signatures,
            attempt=attempt.number,
            cost=attempt.meter.total(),
            tenant=tenant,
        )

    @implements(specs.VERIFY)
    def verify(self, request: VerifyInput) -> VerifyOutput:
        """Nothing is released unless the signature (if any) and every fidelity check pass: else quarantine."""
        with self._attempt(specs.VERIFY.name, request) as attempt:
            source, output = attempt.folder / "input", attempt.folder / "output.pdf"
            self._fetch_source(request.source, source)
            self._fetch_staged(request.staged, output)
            work = VerifyWork(
                source=source,
                output=output,
                workdir=attempt.folder,
                trust=TrustAnchors.of(self._signer()) if request.signed else None,
                settings=request,  # sent as VerifySettings: only the settings reach the child
                tenant=request.tenant if request.signed else None,
            )
            done = self._isolated(attempt, stage_work.VERIFY, work, request.cpu)
        return self._output(specs.VERIFY, done, attempt)
