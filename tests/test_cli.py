"""`starter.py` and `worker.py` as scripts: JSON contract, exit codes, the bounded poller, clean stops."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pikepdf

from docjobs.temporal.client import JobClient
from tests.conftest import REPO, Env, HeldQueue, StartWorker, WorkerProcess, free_port, run_starter
from tests.fixtures.samples import make_sample_pdf


def test_run_is_the_one_shot_main_job(env: Env, samples: Path, tmp_path: Path) -> None:
    """`run` brings its own worker: it works on a task queue no other worker serves."""
    out = tmp_path / "run.pdf"
    code, payload, _ = run_starter(
        env, "run", str(samples / "sample.pdf"), "--watermark", "RUN-CLI", "--out", str(out),
        DOCJOBS_TASK_QUEUE="docjobs-run-only",
    )  # fmt: skip
    assert code == 0, payload
    assert payload["state"] == "succeeded" and payload["wait_end"] == "terminal"
    assert {"job_id", "stage", "failure_code", "failure_message", "input_sha256", "output_sha256"} <= payload.keys()
    with pikepdf.open(out) as pdf:
        assert len(pdf.pages) == 4


def test_submit_status_fetch_audit(env: Env, main_worker: WorkerProcess, samples: Path, tmp_path: Path) -> None:
    sample = str(samples / "sample.pdf")
    code, first, _ = run_starter(env, "submit", sample, "--key", "cli-1", "--tenant", "acme")
    assert (code, first) == (0, {"job_id": "acme/cli-1", "created": True})
    code, again, _ = run_starter(env, "submit", sample, "--key", "cli-1", "--tenant", "acme")
    assert (code, again) == (0, {"job_id": "acme/cli-1", "created": False})
    other = tmp_path / "other.pdf"
    other.write_bytes((samples / "sample.pdf").read_bytes() + b"%another document\n")  # bytes no test stored
    code, refused, _ = run_starter(env, "submit", str(other), "--key", "cli-1", "--tenant", "acme")
    assert (code, refused["error"], refused["job_id"]) == (2, "idempotency.conflict", "acme/cli-1")
    stored = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / "sources" / hashlib.sha256(other.read_bytes()).hexdigest()
    assert not stored.exists()  # nothing of the other document was kept

    code, waited, _ = run_starter(env, "wait", "acme/cli-1", "--timeout", "120")
    assert (code, waited["state"]) == (0, "succeeded")
    code, status, _ = run_starter(env, "status", "acme/cli-1")
    assert (code, status["output_sha256"]) == (0, waited["output_sha256"])
    assert status["tenant"] == "acme"
    assert status["attempts"] == {"render": 1, "sign": 1, "verify": 1, "publish": 1}

    out = tmp_path / "fetched.pdf"
    code, fetched, _ = run_starter(env, "fetch", "acme/cli-1", "-o", str(out))
    assert code == 0 and out.is_file() and fetched["output_sha256"] == status["output_sha256"]

    audit = subprocess.run(
        [sys.executable, "starter.py", "--json", "audit", "acme/cli-1"],
        cwd=REPO, env=env.process_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    events = [json.loads(line) for line in audit.stdout.splitlines()]
    assert events[0]["event"] == "workflow_execution_started"
    scheduled = [e["stage"] for e in events if e["event"] == "activity_task_scheduled"]
    assert scheduled == ["resolve", "render", "sign", "verify", "publish", "notify"]
    local = [e["stage"] for e in events if e["event"] == "marker_recorded"]
    assert local == ["evidence", "cleanup"]  # local activities: one marker each
    assert events[-1]["event"] == "workflow_execution_completed"

    code, missing, _ = run_starter(env, "status", "acme/no-such-job")
    assert (code, missing["error"]) == (2, "job.not_found")


def test_wait_budget_returns_the_job_id_with_exit_3(env: Env, held: HeldQueue, samples: Path) -> None:
    """The job's render holds: it cannot end before the caller's budget does."""
    sample = str(samples / "sample.pdf")
    submitted = run_starter(env, "submit", sample, "--key", "held-wait", DOCJOBS_TASK_QUEUE=held.queue)[1]
    code, payload, _ = run_starter(env, "wait", str(submitted["job_id"]), "--max-polls", "2")
    assert code == 3
    assert payload["job_id"] == submitted["job_id"] and payload["wait_end"] == "budget"
    assert payload["state"] in ("queued", "processing")
    code, payload, _ = run_starter(env, "wait", str(submitted["job_id"]), "--timeout", "1")
    assert (code, payload["wait_end"]) == (3, "timeout")
    assert run_starter(env, "cancel", str(submitted["job_id"]))[0] == 0  # the job goes on until told otherwise


def test_ctrl_c_during_backoff_aborts_cleanly(env: Env, held: HeldQueue, samples: Path) -> None:
    sample = str(samples / "sample.pdf")
    submitted = run_starter(env, "submit", sample, "--key", "held-ctrl-c", DOCJOBS_TASK_QUEUE=held.queue)[1]
    held.hold(str(submitted["job_id"])).wait("held")  # and it stays held: the waiter cannot see it end
    waiter = subprocess.Popen(
        [sys.executable, "starter.py", "wait", str(submitted["job_id"]), "--timeout", "120"],
        cwd=REPO, env=env.process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert waiter.stderr is not None
    first_progress = waiter.stderr.readline()  # the first poll answered: the waiter is in its backoff loop
    assert first_progress.strip() == "processing render", first_progress
    waiter.send_signal(signal.SIGINT)
    stdout, stderr = waiter.communicate(timeout=20)
    assert waiter.returncode == 130, stderr
    last = stdout.strip().splitlines()[-1]
    assert last == f"error: interrupted: aborted by the caller; the job goes on (job {submitted['job_id']})"
    assert "Traceback" not in stderr
    assert run_starter(env, "status", str(submitted["job_id"]))[1]["state"] == "processing"  # it goes on
    assert run_starter(env, "cancel", str(submitted["job_id"]))[0] == 0


def test_worker_stops_cleanly_on_sigterm(start_worker: StartWorker) -> None:
    worker = start_worker("docjobs-sigterm")
    started = time.monotonic()
    assert worker.stop() == 0
    assert time.monotonic() - started < 15
    assert "worker stopped" in worker.log_path.read_text()


def test_operator_listing_and_timeline(env: Env, main_worker: WorkerProcess, samples: Path) -> None:
    assert run_starter(env, "submit", str(samples / "sample.pdf"), "--tenant", "ops", "--key", "listed")[0] == 0
    assert run_starter(env, "wait", "ops/listed", "--timeout", "120")[0] == 0
    deadline = time.monotonic() + 20  # visibility is eventually consistent
    while True:
        code, listing, _ = run_starter(env, "jobs", "--tenant", "ops", "--state", "succeeded")
        found = {job["job_id"]: job for job in listing["jobs"]}
        if "ops/listed" in found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert code == 0 and found["ops/listed"]["document_class"] == "standard"
    assert run_starter(env, "jobs", "--tenant", "ops", "--older-than", "1d")[1] == {"jobs": []}
    assert run_starter(env, "jobs", "--older-than", "soon")[1]["error"] == "config"

    code, story, _ = run_starter(env, "timeline", "ops/listed")
    lines = [entry["text"] for entry in story["timeline"]]
    assert code == 0 and lines[0].startswith("job accepted at")
    assert any(line.startswith("attempt 1 of render started") for line in lines)
    assert lines[-1].startswith("succeeded; artifact released")


async def test_timeline_tells_when_the_callers_wait_ended(env: Env, jobs: JobClient, samples: Path) -> None:
    unserved = "docjobs-nobody-serves"  # the job stays queued
    submit = ("submit", str(samples / "sample.pdf"), "--key", "waited-out")
    assert run_starter(env, *submit, DOCJOBS_TASK_QUEUE=unserved)[0] == 0
    code, payload, _ = run_starter(env, "wait", "default/waited-out", "--timeout", "1", DOCJOBS_TASK_QUEUE=unserved)
    assert (code, payload["wait_end"], payload["job_id"]) == (3, "timeout", "default/waited-out")
    code, story, _ = run_starter(env, "timeline", "default/waited-out")
    lines = [entry["text"] for entry in story["timeline"]]
    assert code == 0 and any(line.startswith("the caller's wait ended at") for line in lines), lines
    assert not any(line.startswith("cancel requested") for line in lines)
    assert lines[-1] == "still queued; no artifact released yet"
    await jobs.handle("default/waited-out").terminate("test clean-up: no worker serves its queue")


def test_the_cli_tenant_is_reserved_and_keys_follow_the_api_rule(tmp_path: Path) -> None:
    """No API key may hold `default` (the CLI's tenant), and `--key` is checked as `Idempotency-Key` is.

    Nothing listens at the Temporal address: the refusals come before any connection.
    """
    offline = Env({"DOCJOBS_DATA_DIR": str(tmp_path), "DOCJOBS_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"})
    code, refused, _ = run_starter(offline, "tenant", "add", "default")
    assert (code, refused["error"]) == (2, "config") and "reserved" in refused["message"]
    assert not (tmp_path / "tenants.json").exists()
    make_sample_pdf(sample := tmp_path / "sample.pdf", pages=1)
    for key in (".", "..", "a/b", "cancel", ""):
        code, bad, _ = run_starter(offline, "submit", str(sample), "--key", key)
        assert (code, bad["error"]) == (2, "idempotency.invalid"), key


def test_json_is_accepted_after_a_command_and_a_subcommand(tmp_path: Path) -> None:
    """`--json` may come last, after `deploy status` or `tenant add` as after `status`: the same one JSON line."""
    offline = Env({"DOCJOBS_DATA_DIR": str(tmp_path), "DOCJOBS_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"})
    for args, error in ((("deploy", "status"), "deploy.no_deployment"), (("tenant", "add", "default"), "config")):
        done = subprocess.run(
            [sys.executable, str(REPO / "starter.py"), *args, "--json"],
            cwd=REPO,
            env=offline.process_env(DOCJOBS_DEPLOYMENT=""),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert json.loads(done.stdout.strip().splitlines()[-1])["error"] == error, args
