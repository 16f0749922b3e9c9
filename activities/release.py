"""The release gates: `sign` (PAdES) and `verify` (pyHanko's verdict and the output contract)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from temporalio import activity

from activities.isolated import Attempt, IsolatedStages
from docjobs.models import SignInput, SignOutput, VerifyInput, VerifyOutput
from docjobs.sandbox import ChildPool, TenantPools
from docjobs.signing.config import SignerConfig
from docjobs.stage_work import SignDone, SignWork, VerifyDone, VerifyWork
from docjobs.storage import BlobStore


class ReleaseActivities(IsolatedStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools, data_dir: Path) -> None:
        super().__init__(store, workdir, pool)
        self._data_dir = data_dir

    def _signer(self, attempt: Attempt, *, key: bool) -> SignerConfig:
        """From config; on the embedded default a development CA and signer are created on first use.

        A confined child sees no signing folder: what this one task needs is copied into its attempt's folder
        (gone with it): the certificates, and only for `sign` (`key`) the key or P12 (verify's placeholder is
        never read). A stop-gap until the key never enters a child (interrupted signing, issue 23 item 3)."""
        config = SignerConfig.from_env(self._data_dir)
        if attempt.pool.confinement is None:
            return config
        folder = attempt.folder / "signer"
        folder.mkdir()
        copied: dict[Path, Path] = {}

        def copy(path: Path) -> Path:
            if path not in copied:
                copied[path] = shutil.copyfile(path, folder / f"{len(copied)}-{path.name}")
            return copied[path]

        def secret(path: Path | None) -> Path | None:
            return None if path is None else copy(path) if key else folder / "no-key"

        return dataclasses.replace(
            config,
            trust_roots=tuple(map(copy, config.trust_roots)),
            p12_path=secret(config.p12_path),
            p12_passphrase=config.p12_passphrase if key else None,
            key_path=secret(config.key_path),
            cert_path=copy(config.cert_path) if config.cert_path else None,
            chain_paths=tuple(map(copy, config.chain_paths)),
        )

    @activity.defn(name="sign")
    def sign(self, request: SignInput) -> SignOutput:
        with self._attempt("sign", request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                lambda paths: SignWork(
                    source=paths.source,
                    output=paths.output,
                    signer=self._signer(attempt, key=True),
                    visible=request.sign.visible,
                    allow_signed_input=request.sign.allow_signed_input,
                ),
                SignDone,
            )
            staged = self._put_staged("sign", attempt.number, paths.output)
        return SignOutput(
            staged=staged,
            level=done.level,
            signer_subject=done.signer_subject,
            certificate_sha256=done.certificate_sha256,
            invalidated_signatures=done.invalidated_signatures,
            attempt=attempt.number,
            cost=attempt.meter.total(),
        )

    @activity.defn(name="verify")
    def verify(self, request: VerifyInput) -> VerifyOutput:
        """Nothing is released unless the signature (if any) and every fidelity check pass: else quarantine."""
        with self._attempt("verify", request) as attempt:
            source, output = attempt.folder / "input", attempt.folder / "output.pdf"
            self._fetch_source(request.source, source)
            self._fetch_staged(request.staged, output)
            work = VerifyWork(
                source=source,
                output=output,
                workdir=attempt.folder,
                signer=self._signer(attempt, key=False) if request.signed else None,
                text_layer_kept=request.text_layer_kept,
                redact=request.redact,
                watermark_text=request.watermark_text,
                pages_may_turn=request.pages_may_turn,
                sanitize=request.sanitize,
            )
            done = self._isolated(attempt, work, VerifyDone, request.cpu)
        return VerifyOutput(
            signature=done.signature,
            fidelity_checks=done.fidelity_checks,
            attempt=attempt.number,
            cost=attempt.meter.total(),
        )
