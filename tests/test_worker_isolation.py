"""What a worker guarantees around its document children: each task queue has threads of its own, exactly
as many as it runs stages at once, and a worker that starts sweeps away what a crash left behind."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from docjobs.store.sweep import sweep_stale
from docjobs.temporal.client import connect
from docjobs.worker import NOTIFY_SLOTS, WRAP_UP_SLOTS, serving, sweep_leftovers
from tests.conftest import Env
from workflows.stages import activity_name

DAY = 24 * 3600


async def test_each_queue_has_threads_of_its_own_as_many_as_its_slots(env: Env) -> None:
    """An accepted stage never waits for a thread (its lease running out meanwhile), OCR cannot take the
    threads of render, sign or verify, and the wrap-up's local activities have threads of their own on the
    queue that runs the workflow."""
    settings = env.settings(
        DOCJOBS_TASK_QUEUE="docjobs-threads", DOCJOBS_ACTIVITY_THREADS="3", DOCJOBS_OCR_ACTIVITY_THREADS="1"
    )
    client = await connect(settings)
    async with serving(client, settings) as workers:
        configs = {worker.task_queue: worker.config() for worker in workers}
    general, ocr = configs["docjobs-threads"], configs["docjobs-threads-ocr"]
    for config, slots, local_slots in ((general, 3, WRAP_UP_SLOTS), (ocr, 1, 0)):
        executor = config["activity_executor"]
        assert isinstance(executor, ThreadPoolExecutor)
        assert config["max_concurrent_activities"] == slots
        assert (config.get("max_concurrent_local_activities") or 0) == local_slots
        assert executor._max_workers == slots + local_slots
    assert general["activity_executor"] is not ocr["activity_executor"]


async def test_long_documents_ocr_ranges_have_a_queue_and_slots_of_their_own(env: Env) -> None:
    """A long document's page ranges never take the slots (or threads) a short document's `ocr` needs."""
    settings = env.settings(
        DOCJOBS_TASK_QUEUE="docjobs-chunk-threads", DOCJOBS_OCR_ACTIVITY_THREADS="1", DOCJOBS_OCR_CHUNK_THREADS="3"
    )
    client = await connect(settings)
    async with serving(client, settings, queues=["ocr"]) as workers:
        found = {served.task_queue: served.config() for served in workers}
    assert set(found) == {"docjobs-chunk-threads-ocr", "docjobs-chunk-threads-ocr-chunks"}
    ocr, chunks = found["docjobs-chunk-threads-ocr"], found["docjobs-chunk-threads-ocr-chunks"]
    executor = chunks["activity_executor"]
    assert isinstance(executor, ThreadPoolExecutor) and executor is not ocr["activity_executor"]
    assert executor._max_workers == chunks["max_concurrent_activities"] == 3
    assert ocr["max_concurrent_activities"] == 1
    assert [activity_name(function) for function in chunks["activities"]] == ["ocr_chunk", "ocr_merge"]


async def test_notify_has_a_queue_and_threads_of_its_own(env: Env) -> None:
    settings = env.settings(DOCJOBS_TASK_QUEUE="docjobs-notify-threads")
    client = await connect(settings)
    async with serving(client, settings) as workers:
        found = {served.task_queue: served.config() for served in workers}
    general, notify = found["docjobs-notify-threads"], found["docjobs-notify-threads-notify"]
    executor = notify["activity_executor"]
    assert isinstance(executor, ThreadPoolExecutor) and executor is not general["activity_executor"]
    assert executor._thread_name_prefix == "notify" and executor._max_workers == NOTIFY_SLOTS
    assert notify["max_concurrent_activities"] == NOTIFY_SLOTS
    assert [activity_name(function) for function in notify["activities"]] == ["notify"]


def aged(path: Path, seconds: float) -> Path:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))
    return path


def test_sweep_removes_only_what_is_older_than_any_live_job(tmp_path: Path) -> None:
    old_folder = tmp_path / "render-crashed"
    (old_folder / "inner").mkdir(parents=True)
    (old_folder / "inner" / "input").write_bytes(b"%PDF- plaintext of a crashed attempt")
    aged(old_folder, 2 * DAY)
    (old_file := tmp_path / "upload-crashed").write_bytes(b"spooled upload")
    aged(old_file, 2 * DAY)
    live = tmp_path / "render-running"
    live.mkdir()
    assert sweep_stale(tmp_path, timedelta(days=1)) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["render-running"]
    assert sweep_stale(tmp_path / "missing", timedelta(days=1)) == 0


def test_a_starting_worker_sweeps_its_work_folder_and_the_upload_spool(env: Env, tmp_path: Path) -> None:
    settings = env.settings(DOCJOBS_DATA_DIR=str(tmp_path))
    for folder in (settings.work_dir, settings.spool_dir):
        folder.mkdir(parents=True)
        (stale := folder / "left-by-a-crash").write_bytes(b"plaintext")
        aged(stale, 2 * DAY)  # the shipped policies' longest deadline plus its grace is far less
        (folder / "in-use").write_bytes(b"plaintext of a live attempt")
    sweep_leftovers(settings)
    assert [path.name for path in settings.work_dir.iterdir()] == ["in-use"]
    assert [path.name for path in settings.spool_dir.iterdir()] == ["in-use"]
