"""Fair shares: per-tenant limits answered `429 tenant.quota_exceeded` with `Retry-After` (and no job started), a
body-read timeout on uploads, and `notify` on threads of its own.

Through a real uvicorn socket on loopback, against the session's dev server. The API submits to the held queue
(tests/fault_worker.py `hold-render`): every job it starts stays running until the test lets it go, so "running"
does not depend on how fast a machine is; every job a test starts is canceled when the module ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from docjobs.api.app import create_app
from docjobs.settings.quotas import DailyBytes, TenantLimits, seconds_to_next_day
from docjobs.settings.tenants import TenantBook, add_tenant, set_limits
from docjobs.store.storage import source_key
from docjobs.temporal.client import JobClient, connect
from tests.conftest import Env, HeldQueue, run_starter, serving_app, wait_terminal
from tests.test_api import exists, pdf_bytes

LIMIT = 512 * 1024  # the server's upload limit per document here
BODY_TIMEOUT = 1.0  # seconds a body may stall on this server
BATCH_CAP = 300 * 1024  # the `batcher` tenant's bytes per batch
KIB = 1024


@dataclass
class QuotaApi:
    base: str
    port: int
    keys: dict[str, str]  # by short name
    names: dict[str, str]  # short name -> the tenant's name
    tenants: Path
    jobs: JobClient
    started: list[str] = field(default_factory=list)  # job IDs to cancel when the module ends

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}


@pytest.fixture(scope="module")
async def quota(held: HeldQueue, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[QuotaApi]:
    tenants = tmp_path_factory.mktemp("quotas") / "tenants.json"
    suffix = uuid.uuid4().hex[:6]  # the day's byte counts live in the session's data dir
    names = {name: f"{name}-{suffix}" for name in ("single", "other", "daily", "batcher")}
    keys = {name: add_tenant(tenants, full) for name, full in names.items()}
    set_limits(tenants, names["single"], {"max_running_jobs": 1})
    set_limits(tenants, names["batcher"], {"max_batch_bytes": BATCH_CAP})
    settings = held.settings()
    app = create_app(settings, tenants=TenantBook(tenants), upload_limit=LIMIT, body_read_timeout=BODY_TIMEOUT)
    with serving_app(app, "quota-api") as port:
        jobs = JobClient(await connect(settings), settings)
        api = QuotaApi(f"http://127.0.0.1:{port}", port, keys, names, tenants, jobs)
        yield api
        for job_id in api.started:  # nothing held outlives the module
            await api.jobs.cancel_running(job_id)


def tenant(api: QuotaApi, name: str) -> str:
    return api.names[name]


@pytest.fixture
async def client(quota: QuotaApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=quota.base, timeout=60) as http:
        yield http


async def running_count(api: QuotaApi, name: str, want: int, timeout: float = 30) -> None:
    """Wait until visibility counts `want` running jobs of the tenant (it is eventually consistent)."""
    deadline = time.monotonic() + timeout
    while (count := await api.jobs.count_running(name)) != want:
        assert time.monotonic() < deadline, f"visibility counts {count} running jobs of {name}, not {want}"
        await asyncio.sleep(0.1)


def assert_quota(response: httpx.Response, limit: str) -> int:
    """A 429 naming the limit (and nothing of the request), with a Retry-After; returns its seconds."""
    assert response.status_code == 429, response.text
    assert response.json() == {
        "code": "tenant.quota_exceeded",
        "message": response.json()["message"],
        "limit": limit,
    }
    retry_after = response.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    return int(retry_after)


async def test_running_jobs_limit_is_per_tenant_and_frees_up(
    quota: QuotaApi, client: httpx.AsyncClient, held: HeldQueue, tmp_path: Path
) -> None:
    single, other = tenant(quota, "single"), tenant(quota, "other")
    first_body = pdf_bytes(tmp_path, "one")
    first = await client.post("/v1/jobs", content=first_body, headers=quota.auth("single"))
    assert first.status_code == 202, first.text
    quota.started.append(first_id := first.json()["job_id"])
    await asyncio.to_thread(held.hold(first_id).wait, "held")  # running: its render holds
    await running_count(quota, single, 1)

    refused_key = uuid.uuid4().hex
    keyed = {**quota.auth("single"), "Idempotency-Key": refused_key}
    second = await client.post("/v1/jobs", content=pdf_bytes(tmp_path, "two"), headers=keyed)
    assert assert_quota(second, "running_jobs") <= 60
    assert not await exists(quota.jobs, f"{single}/{refused_key}")  # no job started
    batch = await client.post(
        "/v1/batches", files=[("file", ("a", pdf_bytes(tmp_path, "b")))], headers={**keyed, "Idempotency-Key": "b1"}
    )
    assert_quota(batch, "running_jobs")
    assert not await exists(quota.jobs, f"{single}/batch-b1")
    repeat = await client.post("/v1/jobs", content=first_body, headers=quota.auth("single"))
    assert (repeat.status_code, repeat.json()["job_id"]) == (200, first_id)  # a repeat is no new job: answered

    elsewhere = await client.post("/v1/jobs", content=pdf_bytes(tmp_path, "two"), headers=quota.auth("other"))
    assert elsewhere.status_code == 202, elsewhere.text  # another tenant's share is its own
    quota.started.append(elsewhere.json()["job_id"])
    assert (await quota.jobs.count_running(other)) <= 1

    await quota.jobs.cancel_running(first_id)  # the share frees up once a job has ended
    await wait_terminal(quota.jobs, first_id, timeout=60)
    await running_count(quota, single, 0)
    again = await client.post("/v1/jobs", content=pdf_bytes(tmp_path, "two"), headers=keyed)
    assert again.status_code == 202, again.text
    quota.started.append(again.json()["job_id"])


async def test_bytes_per_day_limit_refuses_after_reading_and_before_reading(
    quota: QuotaApi, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    daily = tenant(quota, "daily")
    body = pdf_bytes(tmp_path, "daily one")
    set_limits(quota.tenants, daily, {"max_bytes_per_day": len(body) + len(body) // 2})
    ledger = DailyBytes(quota.jobs.settings.usage_dir)

    keyed = {**quota.auth("daily"), "Idempotency-Key": "first"}
    first = await client.post("/v1/jobs", content=body, headers=keyed)
    assert first.status_code == 202, first.text
    quota.started.append(first.json()["job_id"])
    assert ledger.used(daily) == len(body)
    repeat = await client.post("/v1/jobs", content=body, headers=keyed)  # the same job: no more bytes counted
    assert repeat.status_code == 200 and ledger.used(daily) == len(body)

    second_body = pdf_bytes(tmp_path, "daily two")
    second = await client.post("/v1/jobs", content=second_body, headers={**quota.auth("daily"), "Idempotency-Key": "2"})
    retry_after = assert_quota(second, "bytes_per_day")
    assert abs(retry_after - seconds_to_next_day(datetime.now(UTC))) <= 5  # next UTC midnight
    assert not await exists(quota.jobs, f"{daily}/2")
    assert ledger.used(daily) == len(body)  # refused bytes are not counted
    assert not quota.jobs.store.exists(source_key(sha256(second_body)))  # nothing of it was stored

    bundle = await client.put("/v1/templates/t", content=b"PK\x03\x04" + b"0" * len(body), headers=quota.auth("daily"))
    assert_quota(bundle, "bytes_per_day")  # a template bundle is bytes accepted too

    ledger.charge(daily, len(body) // 2, TenantLimits(max_bytes_per_day=10**12))  # the day's allowance used up
    stalled = await asyncio.to_thread(post_and_stall, quota, "daily", b"%PDF-1.7\n")  # refused before reading
    assert stalled[0] == 429 and json.loads(stalled[1])["limit"] == "bytes_per_day"

    other = await client.post("/v1/jobs", content=second_body, headers=quota.auth("other"))
    assert other.status_code == 202, other.text
    quota.started.append(other.json()["job_id"])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def multipart(boundary: str, files: list[bytes]) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{n}"\r\n'
        f"Content-Type: application/pdf\r\n\r\n".encode()
        + data
        + b"\r\n"
        for n, data in enumerate(files)
    ]
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def post_and_stall(
    api: QuotaApi,
    name: str,
    sent: bytes,
    *,
    path: str = "/v1/jobs",
    content_type: str = "application/pdf",
    length: int = 10 * KIB,
) -> tuple[int, bytes, float, bytes]:
    """POST with a Content-Length of `length`, send only `sent`, then send nothing more. Returns the status, body,
    the seconds until the answer came, and what the socket gave after the answer (b"" once the server closed it)."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=30) as connection:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.keys[name]}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
        )
        began = time.monotonic()
        connection.sendall(head.encode() + sent)
        response = http.client.HTTPResponse(connection)
        response.begin()
        body = response.read()
        took = time.monotonic() - began
        try:
            after = connection.recv(1)
        except OSError:
            after = b""
        return response.status, body, took, after


async def test_a_stalled_body_is_cut_off_after_the_timeout(quota: QuotaApi, tmp_path: Path) -> None:
    status, body, took, after = await asyncio.to_thread(post_and_stall, quota, "other", b"%PDF-1.7\n")
    assert (status, json.loads(body)["code"]) == (408, "request.timeout")
    assert BODY_TIMEOUT <= took < BODY_TIMEOUT + 10  # cut off after the timeout, not whenever the client likes
    assert after == b""  # and the connection closed
    assert not any(quota.jobs.settings.spool_dir.glob("upload-*"))  # nothing left in the spool

    document = pdf_bytes(tmp_path, "slow but steady")

    async def steady() -> AsyncIterator[bytes]:  # each piece within the timeout: the whole takes longer than it
        pieces = [document[i : i + len(document) // 4 + 1] for i in range(0, len(document), len(document) // 4 + 1)]
        for piece in pieces:
            yield piece
            await asyncio.sleep(BODY_TIMEOUT / 2)

    async with httpx.AsyncClient(base_url=quota.base, timeout=60) as http_client:
        began = time.monotonic()
        accepted = await http_client.post("/v1/jobs", content=steady(), headers=quota.auth("other"))
        assert accepted.status_code == 202, accepted.text
        assert time.monotonic() - began > BODY_TIMEOUT
        quota.started.append(accepted.json()["job_id"])


async def test_batch_bytes_are_capped_while_the_body_streams_in(
    quota: QuotaApi, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    batcher = tenant(quota, "batcher")
    files = [b"%PDF-1.7\n" + uuid.uuid4().hex.encode() * (200 * KIB // 32) for _ in range(3)]
    body, boundary = multipart("cap", files), "cap"
    # Declared too large: refused before a byte of the body is read.
    status, answer, _, _ = await asyncio.to_thread(
        post_and_stall,
        quota,
        "batcher",
        b"",
        path="/v1/batches",
        content_type=f"multipart/form-data; boundary={boundary}",
        length=len(body),
    )
    assert status == 429 and json.loads(answer)["limit"] == "batch_bytes"

    # Chunked, with no length: refused once the stream passes the cap, while the client is still sending.
    with socket.create_connection(("127.0.0.1", quota.port), timeout=30) as connection:
        connection.sendall(
            f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {quota.keys['batcher']}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nTransfer-Encoding: chunked\r\n"
            f"Idempotency-Key: over\r\n\r\n".encode()
        )
        cut = BATCH_CAP + 64 * KIB + 16 * KIB  # past the cap and its slack for boundaries, not the whole body
        for start in range(0, cut, 16 * KIB):
            piece = body[start : start + 16 * KIB]
            connection.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        response = http.client.HTTPResponse(connection)  # the body is not finished: the answer comes anyway
        response.begin()
        assert response.status == 429
        assert json.loads(response.read())["limit"] == "batch_bytes"
        assert response.getheader("Retry-After", "").isdigit()
    assert not await exists(quota.jobs, f"{batcher}/batch-over")
    assert not any(quota.jobs.store.exists(source_key(sha256(data))) for data in files)  # nothing of it was stored
    assert not any(quota.jobs.settings.spool_dir.glob("batch-*"))

    # JSON naming stored sources: their recorded sizes count.
    owned = [write(tmp_path / f"{n}.pdf", data) for n, data in enumerate(files)]  # stored by the tenant itself
    stored = [await quota.jobs.accept(path, tenant=batcher) for path in owned]
    over = await client.post("/v1/batches", json={"sources": [s.sha256 for s in stored]}, headers=quota.auth("batcher"))
    assert_quota(over, "batch_bytes")
    within = await client.post(
        "/v1/batches",
        files=[("file", ("a", files[0]))],
        headers={**quota.auth("batcher"), "Idempotency-Key": "within"},
    )
    assert within.status_code == 202, within.text
    elsewhere = await client.post(
        "/v1/batches", files=[("file", (str(n), data)) for n, data in enumerate(files)], headers=quota.auth("other")
    )
    assert elsewhere.status_code == 202, elsewhere.text  # the default cap is the deployment's, far larger
    for accepted, owner in ((within, "batcher"), (elsewhere, "other")):
        await client.post(f"/v1/batches/{accepted.json()['batch_id']}/cancel", headers=quota.auth(owner))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_the_command_line_sets_a_tenants_own_limits(env: Env, tmp_path: Path) -> None:
    tenants = str(tmp_path / "tenants.json")
    code, answer, _ = run_starter(
        env, "tenant", "add", "capped", "--max-running-jobs", "3", DOCJOBS_TENANTS_FILE=tenants
    )
    assert code == 0 and answer["limits"] == {"max_running_jobs": 3}
    code, answer, _ = run_starter(
        env,
        "tenant",
        "limits",
        "capped",
        "--max-batch-bytes",
        "1000",
        DOCJOBS_TENANTS_FILE=tenants,
        DOCJOBS_TENANT_MAX_BYTES_PER_DAY="5000",  # the default of a limit the tenant has not got of its own
    )
    assert code == 0
    assert answer["limits"] == {"max_running_jobs": 3, "max_bytes_per_day": 5000, "max_batch_bytes": 1000}
    assert answer["own_limits"] == {"max_running_jobs": 3, "max_batch_bytes": 1000}
    entry = json.loads(Path(tenants).read_text())["tenants"]["capped"]
    assert "key_sha256" in entry and entry["limits"] == answer["own_limits"]  # the entry keeps what it had
    code, answer, _ = run_starter(
        env, "tenant", "limits", "nobody", "--max-running-jobs", "1", DOCJOBS_TENANTS_FILE=tenants
    )
    assert code == 2 and answer["error"] == "tenant.invalid"
    code, _, _ = run_starter(env, "tenant", "limits", "capped", "--max-running-jobs", "0", DOCJOBS_TENANTS_FILE=tenants)
    assert code == 2
