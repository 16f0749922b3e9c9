"""Archives (workflows/archive.py) at scale on the embedded server, and one renewal.

    .venv/bin/python bench/archive_bench.py [--archives 100000] [--renewals 20]

On a dev server of its own (sqlite, free ports) with an in-process worker, and certomancer's test PKI on loopback
(tests/fixtures/test_pki.py):

1. `--archives` archives sleeping on their timers (a year away, so none renews), started as their jobs start them:
   the seconds to start them and until each has run its first task (its timer set, `DocjobsNextRenewal` indexed),
   the history events of one, and the dev server's memory and database size with all of them asleep.
2. `--renewals` real B-LTA archives due at once: renewals a minute (each a fetch of the TSA chain's revocation data,
   a document child writing the update, a new document timestamp), and one renewal alone, signal to new version.

What it prints is the measure that chose one workflow per archive, sleeping on a durable timer, over a Schedule
sweeping an index (docs/release-gates.md, "Archives").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env, print_table
from temporalio.client import Client

from docjobs.domain.archive import ARCHIVE_WORKFLOW, RENEW_SIGNAL, STATUS_QUERY, ArchiveState, ArchiveStatus
from docjobs.domain.archive import ArchiveVersion as Version
from docjobs.signing import long_term
from docjobs.store.storage import archive_key
from docjobs.temporal.client import connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.test_pki import TestPki, serving_test_pki
from tests.test_long_term import signed_b_t, updated
from workflows import search_attributes as sa


def signing_env(pki: TestPki) -> dict[str, str]:
    signer = pki.signer
    return {
        "DOCJOBS_SIGNING_KEY": str(signer.key),
        "DOCJOBS_SIGNING_CERT": str(signer.cert),
        "DOCJOBS_SIGNING_CHAIN": str(signer.chain),
        "DOCJOBS_TRUST_ROOTS": str(signer.root),
        "DOCJOBS_TSA_URL": pki.tsa_url,
        "DOCJOBS_REVOCATION_URLS": ",".join(pki.revocation_urls),
    }


def rss_mib(pid: int | None) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines() if pid else ():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archives", type=int, default=100_000)
    parser.add_argument("--renewals", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64, help="workflow starts in flight at once")
    options = parser.parse_args()
    rows: list[list[object]] = []
    with (
        tempfile.TemporaryDirectory(prefix="docjobs-archive-bench-") as tmp,
        serving_test_pki(Path(tmp) / "pki") as pki,
    ):
        folder = Path(tmp)
        os.environ.update({**dev_server_env(folder, "docjobs-archive-bench"), **signing_env(pki)})
        settings = TemporalSettings.from_env()
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
                job_id=f"bench/{archive_id}",
                tenant="bench",
                versions=[version],
                renew_by=renew_by,
                renew_before_days=30,
            )

        try:
            async with serving(client, settings):
                asleep = version_one("archive/bench/asleep")  # their v1 is one blob: nothing here reads it
                later = datetime.now(UTC) + timedelta(days=365)
                started = time.perf_counter()
                gate = asyncio.Semaphore(options.concurrency)

                async def start(number: int) -> None:
                    async with gate:
                        archive_id = f"archive/bench/{number}"
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
                events = len((await client.get_workflow_handle("archive/bench/0").fetch_history()).events)
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
                lone = "archive/bench/renew-alone"
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
                ids = [f"archive/bench/due-{number}" for number in range(options.renewals)]
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
