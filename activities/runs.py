"""The run an activity works for, as Temporal names it: every key of a job's blobs derives from it.

Neither the caller's data nor the stage input chooses where a job's files go, and a job ID reused after its run
is gone gets a folder of its own (docjobs/store/storage.py).
"""

from __future__ import annotations

from temporalio import activity

from docjobs.store.storage import BlobStore, RunScope, mark_run


def current_run() -> RunScope:
    info = activity.info()
    if not (info.workflow_namespace and info.workflow_id and info.workflow_run_id):
        raise ValueError("a job's blobs belong to a workflow run: this activity was not started by one")
    return RunScope(namespace=info.workflow_namespace, workflow_id=info.workflow_id, run_id=info.workflow_run_id)


def marked_run(store: BlobStore) -> RunScope:
    """The current run, its marker written: call it before writing anything into the run's folder."""
    run = current_run()
    mark_run(store, run)
    return run
