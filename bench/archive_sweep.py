"""The design not chosen for archives, built only to be measured (bench/archive_mechanism.py): a Temporal Schedule
that sweeps an index of archives kept in the blob store, instead of one workflow per archive on a durable timer.

The index holds one small JSON object per archive under the day its renewal is due
(`archive-index/{day}/{archive ID's hash}.json`). Once a day the Schedule starts `ArchiveSweep`, which lists the
entries due (a page at a time, an activity each) and renews them a page at a time (one activity a page, with a
heartbeat an archive). A renewal re-files its archive's entry under its next due day. The renewal itself is a
double here (what each design's renewal does to the document is the same activity, so it is no part of the
comparison): it only moves the entry.
"""

from __future__ import annotations

import hashlib
import tempfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from docjobs.store.storage import BlobStore

INDEX = "archive-index"
SWEEP_WORKFLOW = "ArchiveSweep"
PAGE = 500  # entries listed, then renewed, per activity
YEAR = timedelta(days=365)


class IndexEntry(BaseModel):
    archive_id: str
    renew_by: datetime
    version: int


class DuePage(BaseModel):
    day: date
    after: str = ""  # the last key of the page before


def index_key(entry: IndexEntry) -> str:
    digest = hashlib.sha256(entry.archive_id.encode()).hexdigest()[:24]
    return f"{INDEX}/{entry.renew_by.date().isoformat()}/{digest}.json"


def file_entry(store: BlobStore, entry: IndexEntry, folder: Path) -> None:
    """Write `entry` under the day it is due."""
    path = folder / "entry.json"
    path.write_text(entry.model_dump_json())
    store.put_file(index_key(entry), path)


class SweepActivities:
    def __init__(self, store: BlobStore) -> None:
        self._store = store

    @activity.defn(name="sweep_due_page")
    def due_page(self, page: DuePage) -> list[str]:
        """Up to PAGE keys of entries filed under `page.day`, in key order, after `page.after`."""
        keys = sorted(blob.key for blob in self._store.list_blobs(f"{INDEX}/{page.day.isoformat()}"))
        return [key for key in keys if key > page.after][:PAGE]

    @activity.defn(name="sweep_renew_page")
    def renew_page(self, keys: list[str]) -> int:
        """Renew (the double: move) each archive of `keys`: its entry re-filed a year on, the old one removed. An
        entry already gone was renewed by an earlier attempt."""
        renewed = 0
        with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
            for done, key in enumerate(keys):
                activity.heartbeat(done)
                if not self._store.exists(key):
                    continue
                with self._store.open(key) as stored:
                    entry = IndexEntry.model_validate_json(stored.read())
                following = IndexEntry(
                    archive_id=entry.archive_id, renew_by=entry.renew_by + YEAR, version=entry.version + 1
                )
                file_entry(self._store, following, Path(tmp))
                self._store.delete(key)
                renewed += 1
        return renewed


@workflow.defn(name=SWEEP_WORKFLOW)
class ArchiveSweep:
    @workflow.run
    async def run(self) -> int:
        """Renew every archive filed under today (the Schedule's day): a page listed, then renewed, until none is
        left; how many were renewed."""
        today = workflow.now().astimezone(UTC).date()
        renewed, after = 0, ""
        while True:
            keys: list[str] = await workflow.execute_activity(
                "sweep_due_page",
                DuePage(day=today, after=after),
                result_type=list[str],
                start_to_close_timeout=timedelta(minutes=5),
            )
            if not keys:
                return renewed
            renewed += await workflow.execute_activity(
                "sweep_renew_page",
                keys,
                result_type=int,
                start_to_close_timeout=timedelta(minutes=30),
                heartbeat_timeout=timedelta(minutes=1),
            )
            after = keys[-1]
