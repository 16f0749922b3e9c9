"""Issue 40's two designs for renewing archives, side by side on the embedded server, with the renewal doubled in
both (it is the same activity whichever design calls it, so only the mechanism is measured):

    .venv/bin/python bench/archive_mechanism.py [--index 100000] [--due 2000]

1. **A Schedule sweeping an index** (bench/archive_sweep.py, the design not chosen): `--index` entries filed in the
   blob store over the next 365 days: seconds to write them and their bytes on disk. Then `--due` more filed under
   today and the daily Schedule triggered: seconds until its sweep has renewed them, renewals a minute, and the
   history events of the sweep.
2. **One workflow per archive** (workflows/archive.py as shipped): `--due` archives due at once: seconds until every
   one has renewed and continued as new, renewals a minute, and the history events of one archive's renewal (the run
   that renewed and the run now asleep).
3. The dev server's memory and database after each part.

bench/archive_bench.py measures the shipped design at 100,000 archives, with real renewals.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from archive_sweep import INDEX, SWEEP_WORKFLOW, YEAR, ArchiveSweep, IndexEntry, SweepActivities, file_entry
from harness import dev_server_env, print_table, rss_mib
from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)
from temporalio.worker import Worker

from docjobs.domain.archive import ARCHIVE_WORKFLOW, ArchiveState, ArchiveStep, ArchiveVersion, RenewInput
from docjobs.domain.models import BlobRef
from docjobs.store.storage import FileBlobStore
from docjobs.temporal.client import connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from workflows.archive import ArchiveWorkflow

QUEUE = "docjobs-archive-mechanism"
THREADS = 16
ONE_BLOB = BlobRef(key="archives/bench/v1.pdf", sha256="0" * 64, size=1)  # nothing here reads it


@activity.defn(name="renew_archive")
def renew_double(request: RenewInput) -> ArchiveStep:
    """The shipped workflow's renewal, doubled: the next version at once, due again in a year."""
    current = request.current
    following = current.model_copy(update={"number": current.number + 1, "made_at": datetime.now(UTC)})
    return ArchiveStep(version=following, renew_by=datetime.now(UTC) + YEAR)


async def server_state(settings: TemporalSettings) -> list[object]:
    database = (settings.data_dir / "temporal.sqlite").stat().st_size / 2**20
    server = rss_mib(int((settings.data_dir / "temporal.pid").read_text()))
    return [f"{server:.0f}", f"{database:.0f}"]


def disk_mib(folder: Path) -> float:
    """What `folder` takes on disk (du), in MiB."""
    done = subprocess.run(["du", "-sk", str(folder)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) / 1024


async def sweep(client: Client, settings: TemporalSettings, options: argparse.Namespace) -> list[list[object]]:
    """The index filled, a day's entries swept by the Schedule's workflow."""
    store = settings.blob_store()
    assert isinstance(store, FileBlobStore)  # the embedded default, whose bytes on disk are measured
    now = datetime.now(UTC)
    folder = settings.data_dir / "bench-entries"
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for number in range(options.index):  # over the next year, none of it today
        due = now + timedelta(days=1 + number % 365, seconds=number % 86_400)
        file_entry(store, IndexEntry(archive_id=f"archive/bench/{number}/run", renew_by=due, version=1), folder)
    filed = time.perf_counter() - started
    index_mib = disk_mib(store.root / INDEX)
    for number in range(options.due):
        entry = IndexEntry(archive_id=f"archive/bench/due-{number}/run", renew_by=now, version=1)
        file_entry(store, entry, folder)
    schedule = await client.create_schedule(
        "archive-sweep",
        Schedule(
            action=ScheduleActionStartWorkflow(SWEEP_WORKFLOW, id="archive-sweep", task_queue=QUEUE),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=1))]),
        ),
    )
    started = time.perf_counter()
    await schedule.trigger()
    while not (runs := (await schedule.describe()).info.recent_actions):
        await asyncio.sleep(0.1)
    action = runs[0].action
    assert isinstance(action, ScheduleActionExecutionStartWorkflow)
    handle = client.get_workflow_handle(action.workflow_id, run_id=action.first_execution_run_id, result_type=int)
    renewed = await handle.result()
    swept = time.perf_counter() - started
    assert renewed == options.due, renewed
    history = len((await handle.fetch_history()).events)
    await schedule.delete()
    return [
        ["index: entries filed over a year", options.index],
        ["index: seconds to file them (entries/s)", f"{filed:.0f} ({options.index / filed:.0f})"],
        ["index: on disk, MiB (KiB an entry)", f"{index_mib:.0f} ({index_mib * 1024 / options.index:.1f})"],
        [f"sweep of {options.due} due: seconds (renewals a minute)", f"{swept:.1f} ({renewed / swept * 60:.0f})"],
        ["sweep: history events", history],
        ["after the sweep: dev server RSS, sqlite MiB", " / ".join(map(str, await server_state(settings)))],
    ]


async def timers(client: Client, settings: TemporalSettings, options: argparse.Namespace) -> list[list[object]]:
    """`--due` archives due at once, each its own workflow, renewed by the double."""
    now = datetime.now(UTC)
    gate = asyncio.Semaphore(64)
    ids = [f"archive/bench/timer-{number}/run" for number in range(options.due)]

    async def start(archive_id: str) -> None:
        state = ArchiveState(
            archive_id=archive_id,
            job_id=archive_id.removeprefix("archive/").rpartition("/")[0],
            tenant="bench",
            versions=[ArchiveVersion(number=1, document=ONE_BLOB, token=ONE_BLOB, made_at=now)],
            renew_by=now,
            renew_before_days=30,
        )
        async with gate:
            await client.start_workflow(ARCHIVE_WORKFLOW, state, id=archive_id, task_queue=QUEUE)

    started = time.perf_counter()
    await asyncio.gather(*(start(archive_id) for archive_id in ids))
    renewed = f"WorkflowType = '{ARCHIVE_WORKFLOW}' AND ExecutionStatus = 'ContinuedAsNew'"
    while (await client.count_workflows(renewed)).count < options.due:
        await asyncio.sleep(0.5)
    took = time.perf_counter() - started
    runs = [execution.run_id async for execution in client.list_workflows(f"WorkflowId = '{ids[0]}'")]
    rate = options.due / took * 60
    per_renewal = [len((await client.get_workflow_handle(ids[0], run_id=run).fetch_history()).events) for run in runs]
    return [
        [f"timers: {options.due} due at once, seconds (renewals a minute)", f"{took:.1f} ({rate:.0f})"],
        ["timers: history events of a renewal (renewed run + asleep run)", " + ".join(map(str, sorted(per_renewal)))],
        ["after the renewals: dev server RSS, sqlite MiB", " / ".join(map(str, await server_state(settings)))],
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=int, default=100_000, help="index entries filed over the next year")
    parser.add_argument("--due", type=int, default=2000, help="archives due at once, in each design")
    options = parser.parse_args()
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="docjobs-archive-mechanism-") as tmp:
        os.environ.update(dev_server_env(Path(tmp), QUEUE))
        settings = TemporalSettings.from_env()
        client = await connect(settings)
        rows.append(["empty: dev server RSS, sqlite MiB", " / ".join(map(str, await server_state(settings)))])
        sweeps = SweepActivities(settings.blob_store())
        try:
            with ThreadPoolExecutor(THREADS) as threads:
                async with Worker(
                    client,
                    task_queue=QUEUE,
                    workflows=[ArchiveWorkflow, ArchiveSweep],
                    activities=[renew_double, sweeps.due_page, sweeps.renew_page],
                    activity_executor=threads,
                    max_concurrent_activities=THREADS,
                ):
                    rows += await sweep(client, settings, options)
                    rows += await timers(client, settings, options)
        finally:
            stop_dev_server(settings)
    print(f"Archive renewal designs on the embedded dev server, renewals doubled, {os.cpu_count()} CPUs")
    print()
    print_table(["measure", "value"], rows)


if __name__ == "__main__":
    asyncio.run(main())
