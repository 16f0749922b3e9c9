"""Runs a docjobs worker: the job workflow (async) and the stage activities (threads, bounded).

    python worker.py [--task-queue NAME]

Stops cleanly on SIGTERM or Ctrl-C: it stops polling, lets running stages finish for a short grace
period, then cancels them (their leases lapse and another worker takes over).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from activities.publish import PublishActivities
from activities.render import RenderActivities
from docjobs.client import connect
from docjobs.config import ConfigError, Settings
from docjobs.storage import FileBlobStore
from workflows.document_job import DocumentJobWorkflow

log = logging.getLogger("docjobs.worker")
HEARTBEAT_THROTTLE = timedelta(seconds=2)


def create_worker(client: Client, settings: Settings, executor: ThreadPoolExecutor) -> Worker:
    store = FileBlobStore(settings.blob_root)
    render = RenderActivities(store, settings.data_dir / "work")
    publish = PublishActivities(store)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[DocumentJobWorkflow],
        activities=[render.render, publish.publish, publish.cleanup],
        activity_executor=executor,
        max_concurrent_activities=settings.activity_threads,
        graceful_shutdown_timeout=timedelta(seconds=5),
        # Heartbeats carry page progress: send them often enough for a live progress bar.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )


async def serve(settings: Settings) -> None:
    client = await connect(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    with ThreadPoolExecutor(max_workers=settings.activity_threads, thread_name_prefix="stage") as executor:
        async with create_worker(client, settings, executor):
            log.info("worker ready: task queue %s at %s", settings.task_queue, settings.address)
            await stop.wait()
            log.info("stopping: draining running stages")
    log.info("worker stopped")


def main() -> int:
    parser = argparse.ArgumentParser(description="Run a docjobs worker.")
    parser.add_argument("--task-queue", help="task queue to serve (default: DOCJOBS_TASK_QUEUE or 'docjobs')")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
        if args.task_queue:
            settings = replace(settings, task_queue=args.task_queue)
        asyncio.run(serve(settings))
    except ConfigError as error:
        log.error("%s", error)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
