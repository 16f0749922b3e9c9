"""Archives (workflows/archive.py) at scale on the embedded server, and one renewal.

    .venv/bin/python bench/archive_bench.py [--archives 100000] [--renewals 20]

On a dev server of its own (sqlite, free ports) with an in-process worker, and certomancer's test PKI on loopback
(tests/fixtures/test_pki.py):

1. `--archives` archives sleeping on their timers (a year away, so none renews), started as their jobs start them:
   the seconds to start them and until each has run its first task (its timer set, `DocjobsNextRenewal` indexed),
   the history events of one, and the dev server's memory and database size with all of them asleep.
2. `--renewals` real B-LTA archives due at once: renewals a minute (each a fetch of the TSA chain's revocation data,
   a document child writing the update, a new document timestamp), and one renewal alone, signal to new version.
3. Signing by level (`--runs`, median): docjobs' halves (the worker's and the child's, in one process, without the
   release gate, the signer's revocation checked first at every level as tests/test_long_term.py does; B-B is not
   timed that way) against pyHanko's own `sign_pdf` at the same level, fetching from the same services.

With bench/archive_mechanism.py (both designs, the renewal doubled), what it prints chose one workflow per archive,
sleeping on a durable timer, over a Schedule sweeping an index (docs/release-gates.md, "Archives").
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pikepdf
from harness import dev_server_env, median_ms, print_table, rss_mib
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign import signers
from pyhanko.sign.fields import SigSeedSubFilter
from pyhanko.sign.signers import PdfSignatureMetadata
from pyhanko.sign.timestamps import HTTPTimeStamper
from pyhanko_certvalidator import ValidationContext
from temporalio.client import Client

from docjobs.domain.archive import ARCHIVE_WORKFLOW, RENEW_SIGNAL, STATUS_QUERY, ArchiveState, ArchiveStatus
from docjobs.domain.archive import ArchiveVersion as Version
from docjobs.signing import long_term
from docjobs.signing.config import asn1_certs, load_trust_roots
from docjobs.store.storage import archive_key
from docjobs.temporal.client import connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.test_pki import TestPki, serving_test_pki
from tests.test_long_term import signed_b_t, signer_config, updated
from workflows import search_attributes as sa


def sign_by_level(pki: TestPki, folder: Path, runs: int) -> list[list[object]]:
    """Median ms to sign a one-page PDF at each level: docjobs' halves, and pyHanko alone."""
    config = signer_config(pki, pki.signer)
    load: Any = signers.SimpleSigner.load  # untyped
    key = load(str(pki.signer.key), str(pki.signer.cert), ca_chain_files=(str(pki.signer.chain),))
    assert key is not None
    roots = asn1_certs(load_trust_roots(config))
    source = folder / "unsigned.pdf"
    with pikepdf.new() as pdf:
        pdf.add_blank_page()
        pdf.save(source)

    def docjobs(level: str) -> None:
        run = Path(tempfile.mkdtemp(dir=folder))  # the worker's files are create-only: a folder a run
        signed, cms, revocation = signed_b_t(pki, run)  # the signer's revocation checked first, at every level
        if level in ("B-LT", "B-LTA"):
            token = long_term.signature_timestamp(cms)
            assert token is not None
            updated(pki, signed, run / "extended.pdf", token, revocation, pki.tsa_url if level == "B-LTA" else None)

    def alone(level: str) -> None:
        context = ValidationContext(trust_roots=roots, allow_fetching=True, revocation_mode="require")
        meta = PdfSignatureMetadata(
            field_name="pyhanko",
            subfilter=SigSeedSubFilter.PADES,
            embed_validation_info=level in ("B-LT", "B-LTA"),
            use_pades_lta=level == "B-LTA",
            validation_context=context,
        )
        stamper = HTTPTimeStamper(pki.tsa_url) if level != "B-B" else None
        with source.open("rb") as infile, (folder / "alone.pdf").open("wb") as outfile:
            signers.sign_pdf(IncrementalPdfFileWriter(infile), meta, key, timestamper=stamper, output=outfile)

    rows: list[list[object]] = []
    for level in ("B-B", "B-T", "B-LT", "B-LTA"):
        ours = median_ms(runs, functools.partial(docjobs, level)) if level != "B-B" else None
        theirs = median_ms(runs, functools.partial(alone, level))
        rows.append(
            [
                f"sign at {level}, ms: docjobs / pyHanko alone",
                f"{ours:.0f} / {theirs:.0f}" if ours else f"- / {theirs:.0f}",
            ]
        )
    return rows


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archives", type=int, default=100_000)
    parser.add_argument("--renewals", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64, help="workflow starts in flight at once")
    parser.add_argument("--runs", type=int, default=5, help="signings at each level (median)")
    options = parser.parse_args()
    rows: list[list[object]] = []
    with (
        tempfile.TemporaryDirectory(prefix="docjobs-archive-bench-") as tmp,
        serving_test_pki(Path(tmp) / "pki") as pki,
    ):
        folder = Path(tmp)
        os.environ.update({**dev_server_env(folder, "docjobs-archive-bench"), **pki.worker_env()})
        settings = TemporalSettings.from_env()
        (folder / "signing").mkdir()
        rows += await asyncio.to_thread(sign_by_level, pki, folder / "signing", options.runs)
        client = await connect(settings)
        store = settings.blob_store()
        # One real B-LTA archive (timestamped by the short-lived TSA: due at once), stored as each archive's v1.
        signed, cms, revocation = await asyncio.to_thread(signed_b_t, pki, folder, pki.short_tsa_url)
        token_der = long_term.signature_timestamp(cms)
        assert token_der is not None
        first = folder / "v1.pdf"
        newest = await asyncio.to_thread(updated, pki, signed, first, token_der, revocation, pki.short_tsa_url)
        assert newest is not None
        (folder / "v1.token").write_bytes(newest)

        def version_one(archive_id: str) -> Version:
            document = store.put_file(archive_key(archive_id, 1, ".pdf"), first)
            token = store.put_file(archive_key(archive_id, 1, ".token"), folder / "v1.token")
            return Version(number=1, document=document, token=token, made_at=datetime.now(UTC))

        def state(archive_id: str, renew_by: datetime, version: Version) -> ArchiveState:
            return ArchiveState(
                archive_id=archive_id,
                job_id=archive_id.removeprefix("archive/").rpartition("/")[0],  # archive/{job ID}/{run}
                tenant="bench",
                versions=[version],
                renew_by=renew_by,
                renew_before_days=30,
            )

        try:
            async with serving(client, settings):
                asleep = version_one("archive/bench/asleep/run")  # their v1 is one blob: nothing here reads it
                later = datetime.now(UTC) + timedelta(days=365)
                started = time.perf_counter()
                gate = asyncio.Semaphore(options.concurrency)

                async def start(number: int) -> None:
                    async with gate:
                        archive_id = f"archive/bench/{number}/run"
                        await client.start_workflow(
                            ARCHIVE_WORKFLOW,
                            state(archive_id, later, asleep),
                            id=archive_id,
                            task_queue=settings.task_queue,
                        )

                await asyncio.gather(*(start(number) for number in range(options.archives)))
                start_seconds = time.perf_counter() - started
                indexed = f"WorkflowType = '{ARCHIVE_WORKFLOW}' AND {sa.NEXT_RENEWAL.name} IS NOT NULL"
                while await count(client, indexed) < options.archives:
                    await asyncio.sleep(1)
                settled_seconds = time.perf_counter() - started
                events = len((await client.get_workflow_handle("archive/bench/0/run").fetch_history()).events)
                database = (settings.data_dir / "temporal.sqlite").stat().st_size / 2**20
                server = rss_mib(int((settings.data_dir / "temporal.pid").read_text()))
                rows += [
                    ["archives started", options.archives],
                    ["start, s (archives/s)", f"{start_seconds:.0f} ({options.archives / start_seconds:.0f})"],
                    ["until every timer is set, s", f"{settled_seconds:.0f}"],
                    ["history events of an asleep archive", events],
                    ["dev server RSS, MiB", f"{server:.0f}"],
                    ["sqlite database, MiB", f"{database:.0f}"],
                ]

                due = datetime.now(UTC)
                lone = "archive/bench/renew-alone/run"
                await client.start_workflow(
                    ARCHIVE_WORKFLOW, state(lone, later, version_one(lone)), id=lone, task_queue=settings.task_queue
                )
                handle = client.get_workflow_handle(lone)
                started = time.perf_counter()
                await handle.signal(RENEW_SIGNAL)
                while len((await handle.query(STATUS_QUERY, result_type=ArchiveStatus)).versions) < 2:
                    await asyncio.sleep(0.1)
                rows.append(["one renewal, signal to version 2, s", f"{time.perf_counter() - started:.1f}"])

                started = time.perf_counter()
                ids = [f"archive/bench/due-{number}/run" for number in range(options.renewals)]
                for archive_id in ids:
                    await client.start_workflow(
                        ARCHIVE_WORKFLOW,
                        state(archive_id, due, version_one(archive_id)),
                        id=archive_id,
                        task_queue=settings.task_queue,
                    )
                for archive_id in ids:
                    handle = client.get_workflow_handle(archive_id)
                    while len((await handle.query(STATUS_QUERY, result_type=ArchiveStatus)).versions) < 2:
                        await asyncio.sleep(0.2)
                renewed = time.perf_counter() - started
                per_minute = options.renewals / renewed * 60
                rows.append([f"{options.renewals} archives due at once: renewals a minute", f"{per_minute:.0f}"])
        finally:
            stop_dev_server(settings)
    print(f"Archives on the embedded dev server, {os.cpu_count()} CPUs")
    print()
    print_table(["measure", "value"], rows)


if __name__ == "__main__":
    asyncio.run(main())
