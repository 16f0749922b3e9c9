"""Encrypted history: the codec itself, its configuration, and a real job whose history the server only
ever saw as ciphertext, readable again through the codec endpoint (over HTTP, as the Web UI and CLI use it).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext

from docjobs.api.app import create_app
from docjobs.api.codec_server import MAX_BODY_BYTES, create_codec_app
from docjobs.domain.models import JobOverrides
from docjobs.domain.sealing import UNBOUND_FIELD, UNSEALED_ENCODING, CodecKey
from docjobs.domain.states import JobState
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import TenantBook, add_tenant
from docjobs.store.storage import source_key
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.codec import ENCODING, NAMESPACE_FIELD, WORKFLOW_ID_FIELD, EncryptionCodec, PayloadDecryptionError
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import (
    REPO,
    Env,
    StartWorker,
    free_port,
    run_starter,
    sealable_payloads,
    unsealed_payloads,
    wait_terminal,
)

OLD = CodecKey("2025-a", bytes(range(32)))
NEW = CodecKey("2026-b", bytes(range(32, 64)))
UNKNOWN = CodecKey("2027-c", bytes(range(64, 96)))
UI_ORIGIN = "http://localhost:8233"
TOKEN = "codec-test-token"


def entry(key: CodecKey) -> str:
    return f"{key.key_id}:{base64.b64encode(key.secret).decode()}"


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_round_trip_seals_the_whole_payload() -> None:
    codec = EncryptionCodec([NEW, OLD])
    original = plain("confidential words")
    first, second = await codec.encode([original, original])
    assert first.metadata["encoding"] == ENCODING and first.metadata["encryption-key-id"] == b"2026-b"
    assert b"confidential" not in first.SerializeToString() and b"json/plain" not in first.data
    assert first.data[:12] != second.data[:12]  # a fresh nonce each time
    assert await codec.decode([first, second]) == [original, original]


async def test_a_sealed_process_marks_plaintext_and_a_viewer_passes_it() -> None:
    original = plain("forged request")
    [marked] = await EncryptionCodec([NEW]).decode([original])  # never raises: the workflow refuses the marker
    assert marked.metadata["encoding"] == UNSEALED_ENCODING and Payload.FromString(marked.data) == original
    assert await EncryptionCodec([NEW], pass_plaintext=True).decode([original]) == [original]


def bound_to(codec: EncryptionCodec, workflow_id: str, namespace: str = "default") -> EncryptionCodec:
    return codec.with_context(WorkflowSerializationContext(namespace=namespace, workflow_id=workflow_id))


async def test_ciphertexts_are_bound_to_their_namespace_and_workflow() -> None:
    codec = EncryptionCodec([NEW])
    [sealed] = await bound_to(codec, "acme/a").encode([plain("job a")])
    assert (sealed.metadata[NAMESPACE_FIELD], sealed.metadata[WORKFLOW_ID_FIELD]) == (b"default", b"acme/a")
    activity_side = codec.with_context(
        ActivitySerializationContext(
            namespace="default",
            activity_id="1",
            activity_type="render",
            activity_task_queue="q",
            workflow_id="acme/a",
            workflow_type="DocumentJob",
            is_local=False,
        )
    )
    assert await activity_side.decode([sealed]) == [plain("job a")]
    assert await codec.decode([sealed]) == [plain("job a")]  # no context (the codec endpoint): the named binding
    for elsewhere in (bound_to(codec, "acme/b"), bound_to(codec, "acme/a", namespace="other")):
        [moved] = await elsewhere.decode([sealed])  # copied into another workflow: refused like plaintext
        assert moved.metadata["encoding"] == UNSEALED_ENCODING
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[WORKFLOW_ID_FIELD] = b"acme/b"  # the binding is authenticated, not just a label
    with pytest.raises(PayloadDecryptionError, match="failed authentication"):
        await bound_to(codec, "acme/b").decode([relabelled])
    unbound = await codec.encode([plain("sealed before bindings")])  # as every ciphertext before this change
    assert WORKFLOW_ID_FIELD not in unbound[0].metadata
    assert await codec.decode(unbound) == [plain("sealed before bindings")]  # a viewer opens it as it was
    [opened] = await bound_to(codec, "acme/b").decode(unbound)  # a worker opens it (headers), but marks it
    assert opened.metadata[UNBOUND_FIELD] == b"1" and opened.data == plain("sealed before bindings").data
    assert UNBOUND_FIELD not in (await activity_side.decode([sealed]))[0].metadata


async def test_rotation_keeps_old_histories_readable() -> None:
    sealed_before = (await EncryptionCodec([OLD]).encode([plain("before rotation")]))[0]
    rotated = EncryptionCodec([NEW, OLD])
    assert await rotated.decode([sealed_before]) == [plain("before rotation")]
    assert (await rotated.encode([plain("after")]))[0].metadata["encryption-key-id"] == b"2026-b"


async def test_undecryptable_payloads_name_the_key_not_the_content() -> None:
    sealed = (await EncryptionCodec([OLD]).encode([plain("secret words")]))[0]
    with pytest.raises(PayloadDecryptionError, match="unknown key ID '2025-a'") as unknown:
        await EncryptionCodec([NEW]).decode([sealed])
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(PayloadDecryptionError, match="failed authentication with key ID '2025-a'") as forged:
        await EncryptionCodec([OLD]).decode([tampered])
    tampered.data = sealed.data[:5]
    with pytest.raises(PayloadDecryptionError, match="failed authentication with key ID '2025-a'") as truncated:
        await EncryptionCodec([OLD]).decode([tampered])
    assert "secret" not in str(unknown.value) + str(forged.value) + str(truncated.value)


def settings_with(monkeypatch: pytest.MonkeyPatch, **variables: str) -> TemporalSettings:
    for name in ("DOCJOBS_CODEC_KEYS", "DOCJOBS_CODEC_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return TemporalSettings.from_env()


def test_keys_from_the_environment_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert settings_with(monkeypatch).payload_codec() is None  # no keys: plain JSON payloads
    assert settings_with(monkeypatch, DOCJOBS_CODEC_KEYS=f"{entry(NEW)}, {entry(OLD)}").codec_keys == (NEW, OLD)
    key_file = tmp_path / "codec.keys"
    key_file.write_text(f"{entry(NEW)}\n{entry(OLD)}\n")
    assert settings_with(monkeypatch, DOCJOBS_CODEC_KEYS_FILE=str(key_file)).codec_keys == (NEW, OLD)
    assert base64.b64encode(NEW.secret).decode() not in repr(settings_with(monkeypatch, DOCJOBS_CODEC_KEYS=entry(NEW)))


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"DOCJOBS_CODEC_KEYS": "no-colon-here"}, "DOCJOBS_CODEC_KEYS: entry 1 is not KEY_ID:BASE64KEY"),
        ({"DOCJOBS_CODEC_KEYS": "k1:not*base64!"}, "DOCJOBS_CODEC_KEYS: the key of 'k1' is not standard base64"),
        ({"DOCJOBS_CODEC_KEYS": "k1:c2hvcnQ="}, "DOCJOBS_CODEC_KEYS: the key of 'k1' must be 32 bytes, not 5"),
        ({"DOCJOBS_CODEC_KEYS": f"{entry(OLD)},{entry(OLD)}"}, "key ID '2025-a' is configured twice"),
        ({"DOCJOBS_CODEC_KEYS": " , "}, "DOCJOBS_CODEC_KEYS is set but holds no key"),
        ({"DOCJOBS_CODEC_KEYS_FILE": "/nonexistent/codec.keys"}, "DOCJOBS_CODEC_KEYS_FILE: cannot read the key file"),
        ({"DOCJOBS_CODEC_KEYS": entry(OLD), "DOCJOBS_CODEC_KEYS_FILE": "x"}, "not both"),
    ],
)
def test_malformed_keys_are_config_errors(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        settings_with(monkeypatch, **variables)
    assert expected in str(error.value)
    assert "c2hvcnQ" not in str(error.value) and base64.b64encode(OLD.secret).decode() not in str(error.value)


async def test_the_codec_endpoint_caps_bodies_shows_plaintext_and_needs_a_token_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_with(monkeypatch, DOCJOBS_CODEC_KEYS=entry(NEW))
    for host in ("0.0.0.0", "192.0.2.7", "codec.internal"):
        with pytest.raises(ConfigError, match="DOCJOBS_CODEC_TOKEN"):
            create_codec_app(settings, host=host)
    app = create_codec_app(settings, host="127.0.0.1")  # loopback only: the token is advised, not required
    over = b" " * (MAX_BODY_BYTES + 1)

    async def streamed() -> AsyncIterator[bytes]:  # no Content-Length: the cap holds while reading
        for start in range(0, len(over), 65536):
            yield over[start : start + 65536]

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://codec") as http:
        for body in (over, streamed()):
            refused = await http.post("/decode", content=body)
            assert (refused.status_code, refused.json()["code"]) == (413, "codec.too_large")
        shown = await http.post("/decode", content=json_format.MessageToJson(Payloads(payloads=[plain("marker")])))
        assert json_format.Parse(shown.text, Payloads()).payloads[0] == plain("marker")  # a viewer shows plaintext


@pytest.fixture
def codec_endpoint(env: Env) -> Iterator[str]:
    """`starter.py codec-server` as a real process on a free loopback port, with a bearer token."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(REPO / "starter.py"), "codec-server", "--port", str(port), "--cors-origin", UI_ORIGIN],
        cwd=REPO,
        env=env.process_env(DOCJOBS_CODEC_KEYS=f"{entry(NEW)},{entry(OLD)}", DOCJOBS_CODEC_TOKEN=TOKEN),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.options(endpoint)
            break
        except httpx.TransportError:
            assert server.poll() is None and time.monotonic() < deadline, "the codec endpoint did not start"
            time.sleep(0.1)
    yield endpoint
    server.send_signal(signal.SIGINT)
    assert server.wait(timeout=30) == 130


async def test_history_holds_only_ciphertext_and_the_codec_endpoint_opens_it(
    env: Env, start_worker: StartWorker, policies: PolicyBook, samples: Path, codec_endpoint: str, tmp_path: Path
) -> None:
    queue = "codec-test"
    keys = {"DOCJOBS_CODEC_KEYS": f"{entry(NEW)},{entry(OLD)}", "DOCJOBS_TASK_QUEUE": queue}
    start_worker(queue, **keys)
    settings = env.settings(**keys)
    jobs = JobClient(await connect(settings), settings)
    sentinel = f"CODEC-SENTINEL-{os.getpid()}"
    overrides = JobOverrides(watermark_text=sentinel)
    policy = policies.resolve("standard", overrides)
    submitted = await jobs.submit(
        samples / "sample.pdf", "standard", overrides=overrides, tenant="codec-tenant", key="codec-secret"
    )
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status.failure_code
    await jobs.handle(submitted.job_id).result()  # the state is final before the workflow's wrap-up ends

    plain_client = await Client.connect(settings.address, namespace=settings.namespace)  # no codec
    history = await plain_client.get_workflow_handle(submitted.job_id).fetch_history()
    raw = History(events=history.events)
    sealable = sealable_payloads(raw)
    assert any(".memo.fields[input]" in where for where, _ in sealable)  # the start memo: the public input
    assert any("upserted_memo.fields[request]" in where for where, _ in sealable)  # the request `resolve` made
    assert any(".user_metadata.summary" in where for where, _ in sealable)  # the Web UI's summaries too
    assert any(".details[result]." in where for where, _ in sealable)  # local activities' results (evidence)
    kinds = {where.split(".")[2] for where, _ in sealable}  # .events[i].<kind>_attributes.…
    assert {"workflow_execution_started_event_attributes", "activity_task_scheduled_event_attributes"} <= kinds
    assert {"activity_task_completed_event_attributes", "workflow_execution_completed_event_attributes"} <= kinds
    unsealed = unsealed_payloads(raw)
    assert unsealed == [], unsealed
    secrets = [status.input_sha256, source_key(status.input_sha256), policy.version, sentinel]
    raw_bytes = raw.SerializeToString()
    assert [secret for secret in secrets if secret.encode() in raw_bytes] == []

    body = json_format.MessageToJson(Payloads(payloads=[payload for _, payload in sealable]))
    auth = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": settings.namespace, "Origin": UI_ORIGIN}
    async with httpx.AsyncClient(base_url=codec_endpoint) as http:
        decoded = await http.post("/decode", content=body, headers={**auth, "Content-Type": "application/json"})
        assert decoded.status_code == 200, decoded.text
        assert decoded.headers["access-control-allow-origin"] == UI_ORIGIN
        opened = json_format.Parse(decoded.text, Payloads()).payloads
        clear = b"".join(payload.data for payload in opened)
        assert all(secret.encode() in clear for secret in secrets)
        assert {payload.metadata["encoding"] for payload in opened} <= {b"json/plain", b"binary/null"}

        preflight = await http.options(
            "/decode",
            headers={
                "Origin": UI_ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == UI_ORIGIN
        assert preflight.headers["access-control-allow-credentials"] == "true"
        allowed = {name.strip().lower() for name in preflight.headers["access-control-allow-headers"].split(",")}
        assert {"content-type", "x-namespace", "authorization"} <= allowed

        wrong_tokens: list[dict[bytes, bytes]] = [
            {},
            {b"Authorization": b"Bearer not-the-token"},
            {b"Authorization": "Bearer caf\u00e9".encode()},  # not ASCII: still a plain 403
        ]
        for wrong in wrong_tokens:
            refused = await http.post("/decode", content=body, headers={b"Content-Type": b"application/json", **wrong})
            assert refused.status_code == 403 and refused.json()["code"] == "codec.forbidden"
        other = await http.post("/decode", content=body, headers={**auth, "X-Namespace": "elsewhere"})
        assert other.status_code == 403

        # Decode only: nobody seals a request through the endpoint (it could not bind one to its workflow).
        sealed = await http.post(
            "/encode", content=json_format.MessageToJson(Payloads(payloads=[plain("x")])), headers=auth
        )
        assert sealed.status_code in (404, 405) and ENCODING.decode() not in sealed.text

    code, shown_status, _ = run_starter(env, "status", submitted.job_id, DOCJOBS_CODEC_KEYS=keys["DOCJOBS_CODEC_KEYS"])
    assert (code, shown_status["input_sha256"]) == (0, status.input_sha256)
    code, refused_status, _ = run_starter(env, "status", submitted.job_id, DOCJOBS_CODEC_KEYS=entry(UNKNOWN))
    assert (code, refused_status["error"]) == (2, "codec.undecryptable") and "'2026-b'" in refused_status["message"]
    keyless = env.settings(DOCJOBS_CODEC_KEYS=entry(UNKNOWN), DOCJOBS_TASK_QUEUE=queue)
    tenant_key = add_tenant(tmp_path / "tenants.json", status.tenant)
    app = create_app(keyless, JobClient(await connect(keyless), keyless), tenants=TenantBook(tmp_path / "tenants.json"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        answer = await api.get(f"/v1/jobs/{submitted.job_id}", headers={"Authorization": f"Bearer {tenant_key}"})
    assert (answer.status_code, answer.json()["code"]) == (500, "codec.undecryptable")

    shown = subprocess.run(
        [
            settings.find_temporal_bin(),
            "workflow",
            "show",
            "--workflow-id",
            submitted.job_id,
            "--address",
            settings.address,
            "--codec-endpoint",
            codec_endpoint,
            "--codec-auth",
            f"Bearer {TOKEN}",
            "--detailed",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert status.input_sha256 in shown.stdout and sentinel in shown.stdout
