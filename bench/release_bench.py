"""Release-gate costs: sign + verify per document, and the storage round trips of one job per backend.

    .venv/bin/python bench/release_bench.py [--runs 10]

Sign and verify use the development signer on a generated 10-page PDF (pyHanko, as the stages call it).
The storage figure replays the blob operations one signed job makes — put the source; fetch it (render);
put the rendered file; fetch it (sign); put the signed file; fetch source and output (verify); promote;
put and promote the evidence; delete the staging area — on the file store and on S3 (moto's server on
loopback, so it measures docjobs' own overhead plus HTTP, not a real network). Prints medians.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # type: ignore[import-untyped]
from harness import median_ms
from moto.server import ThreadedMotoServer

from docjobs.domain.errors import FailureCode
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import sign_pdf
from docjobs.signing.verify import verify_pdf
from docjobs.store.s3store import open_blob_store
from docjobs.store.storage import (
    BlobStore,
    RunScope,
    artifact_key,
    evidence_key,
    mark_run,
    source_key,
    staging_key,
    staging_prefix,
)
from tests.fixtures.samples import make_sample_pdf


def job_round_trips(store: BlobStore, document: Path, workdir: Path) -> None:
    run = RunScope(namespace="bench", workflow_id=f"bench/{uuid.uuid4().hex}", run_id=str(uuid.uuid4()))
    mark_run(store, run)
    source = store.put_file(source_key(uuid.uuid4().hex), document)
    store.fetch(source, workdir / "a.pdf", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    rendered = store.put_file(staging_key(run, "render", 1), workdir / "a.pdf")
    store.fetch(rendered, workdir / "b.pdf", mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
    signed = store.put_file(staging_key(run, "sign", 1), workdir / "b.pdf")
    store.fetch(source, workdir / "c.pdf", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    store.fetch(signed, workdir / "d.pdf", mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
    store.verify(source, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    store.promote(signed, artifact_key(run))
    store.promote(store.put_file(staging_key(run, "evidence", 1, ".json"), workdir / "d.pdf"), evidence_key(run))
    store.delete_prefix(staging_prefix(run))


def job_of(store: BlobStore, document: Path, workdir: Path) -> Callable[[], None]:
    return lambda: job_round_trips(store, document, workdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="docjobs-release-bench-") as tmp:
        folder = Path(tmp)
        document = folder / "doc.pdf"
        make_sample_pdf(document, pages=10)
        size_kb = document.stat().st_size / 1024
        signer = ensure_dev_signer(folder / "signing")
        sign_ms = median_ms(runs, lambda: sign_pdf(document, folder / "signed.pdf", signer))
        verify_ms = median_ms(runs, lambda: verify_pdf(folder / "signed.pdf", signer))

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            os.environ.update(
                {
                    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                    "AWS_REGION": "us-east-1",
                    "AWS_ACCESS_KEY_ID": "bench",
                    "AWS_SECRET_ACCESS_KEY": "bench",
                    "AWS_CONFIG_FILE": os.devnull,
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                }
            )
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bench")
            work = folder / "work"
            work.mkdir()
            stores = {
                "file": open_blob_store((folder / "blobs").as_uri()),
                "s3 (moto, loopback)": open_blob_store("s3://bench/docjobs"),
            }
            storage_ms = {name: median_ms(runs, job_of(store, document, work)) for name, store in stores.items()}
        finally:
            server.stop()

    print(f"Release benchmark: 10-page PDF ({size_kb:.0f} KiB), median of {runs} runs, {os.cpu_count()} CPUs")
    print()
    print("| step | median ms |")
    print("|---|---|")
    print(f"| sign (PAdES B-B, dev signer) | {sign_ms:.1f} |")
    print(f"| verify (pyHanko, offline) | {verify_ms:.1f} |")
    print(f"| sign + verify | {sign_ms + verify_ms:.1f} |")
    for name, value in storage_ms.items():
        print(f"| storage round trips of one job, {name} | {value:.1f} |")


if __name__ == "__main__":
    main()
