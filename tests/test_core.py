"""The Temporal-free core: state machine, poller, job IDs, policies, blob store fencing."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.idempotency import batch_document_key, batch_document_prefix
from docjobs.domain.job_status import JobStatus, TransitionRecord
from docjobs.domain.models import JobOverrides
from docjobs.domain.policy import WatermarkMode
from docjobs.domain.states import TERMINAL_STATES, InvalidTransition, JobState, Stage, check_transition, parse_state
from docjobs.settings.config import SHIPPED_POLICIES, ConfigError, Settings
from docjobs.settings.policies import PolicyBook, check_overrides, job_overrides
from docjobs.store.storage import FileBlobStore, RunScope, artifact_key, staging_key
from docjobs.temporal.job_plan import asked_of, derive_job_id
from docjobs.temporal.poller import ProtocolError, WaitEnd, backoff_delays, validate_history, wait_for_job
from tests.fixtures.statuses import a_status

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_transition_table_is_closed() -> None:
    check_transition(JobState.QUEUED, JobState.PROCESSING, stage_to=Stage.RENDER)
    check_transition(JobState.PROCESSING, JobState.PROCESSING, stage_from=Stage.RENDER, stage_to=Stage.PUBLISH)
    check_transition(JobState.PROCESSING, JobState.QUARANTINED)
    check_transition(JobState.QUEUED, JobState.CANCELED)
    with pytest.raises(InvalidTransition):
        check_transition(JobState.QUEUED, JobState.SUCCEEDED)  # nothing succeeds without processing
    with pytest.raises(InvalidTransition):
        check_transition(JobState.QUEUED, JobState.PROCESSING)  # processing needs a stage
    with pytest.raises(InvalidTransition):
        check_transition(JobState.PROCESSING, JobState.PROCESSING, stage_from=Stage.PUBLISH, stage_to=Stage.RENDER)
    for terminal in TERMINAL_STATES:
        for target in JobState:
            with pytest.raises(InvalidTransition):
                check_transition(terminal, target, stage_to=Stage.RENDER)


def test_unknown_state_is_a_protocol_error() -> None:
    assert parse_state("succeeded") is JobState.SUCCEEDED
    with pytest.raises(InvalidTransition):
        parse_state("paused")


def status_with(*steps: tuple[JobState, Stage | None]) -> JobStatus:
    transitions = [TransitionRecord(state=state, stage=stage, at=NOW) for state, stage in steps]
    return a_status(at=NOW, state=steps[-1][0], stage=steps[-1][1], transitions=transitions)


QUEUED = (JobState.QUEUED, None)
RENDERING = (JobState.PROCESSING, Stage.RENDER)
PUBLISHING = (JobState.PROCESSING, Stage.PUBLISH)


def test_validate_history_checks_every_step_and_growth() -> None:
    validate_history(status_with(QUEUED, RENDERING, PUBLISHING, (JobState.SUCCEEDED, Stage.PUBLISH)), None)
    with pytest.raises(ProtocolError):
        validate_history(status_with(QUEUED, (JobState.SUCCEEDED, None)), None)
    before = status_with(QUEUED, RENDERING)
    with pytest.raises(ProtocolError):  # history rewritten between polls
        validate_history(status_with(QUEUED, PUBLISHING), before)


async def test_poller_budget_returns_without_a_verdict() -> None:
    polls = 0

    async def fetch() -> JobStatus:
        nonlocal polls
        polls += 1
        return status_with(QUEUED, RENDERING)

    result = await wait_for_job(fetch, timeout=30, max_polls=3, initial_delay=0.01, max_delay=0.02)
    assert (result.end, result.polls, polls) == (WaitEnd.BUDGET, 3, 3)
    assert result.status is not None and result.status.job_id == "t/k"


async def test_poller_deadline_is_absolute() -> None:
    async def fetch() -> JobStatus:
        return status_with(QUEUED, RENDERING)

    started = asyncio.get_running_loop().time()
    result = await wait_for_job(fetch, timeout=0.5, max_polls=10_000, initial_delay=0.05, max_delay=0.1)
    assert result.end is WaitEnd.TIMEOUT
    assert asyncio.get_running_loop().time() - started < 2


async def test_poller_stops_at_terminal_and_rejects_forbidden_moves() -> None:
    answers = iter([status_with(QUEUED, RENDERING), status_with(QUEUED, RENDERING, (JobState.FAILED, Stage.RENDER))])

    async def fetch() -> JobStatus:
        return next(answers)

    result = await wait_for_job(fetch, timeout=10, max_polls=10, initial_delay=0.01)
    assert result.end is WaitEnd.TERMINAL and result.status and result.status.state is JobState.FAILED

    async def forbidden() -> JobStatus:
        return status_with(QUEUED, (JobState.SUCCEEDED, None))

    with pytest.raises(ProtocolError):
        await wait_for_job(forbidden, timeout=10, max_polls=10)


def test_backoff_is_capped_and_jittered() -> None:
    delay = backoff_delays(0.25, 5.0, random.Random(7))
    delays = [delay(poll) for poll in range(12)]
    assert all(d <= 5.0 for d in delays)
    assert delays[-1] >= 2.5  # reached the cap (with jitter in [cap/2, cap])
    assert len(set(delays)) == len(delays)


ID_KEY = bytes(range(32))


def test_job_ids() -> None:
    assert derive_job_id("acme", "invoice-7", "a" * 64, "standard@1", ID_KEY) == "acme/invoice-7"
    derived = derive_job_id("acme", None, "a" * 64, "standard@1", ID_KEY)
    assert derived == derive_job_id("acme", None, "a" * 64, "standard@1", ID_KEY)
    assert derived != derive_job_id("acme", None, "a" * 64, "standard@2", ID_KEY)
    assert derived != derive_job_id("other", None, "a" * 64, "standard@1", ID_KEY)
    # Keyed: without the deployment's key, a guessed input put back into the ID reproduces nothing.
    assert derived != derive_job_id("acme", None, "a" * 64, "standard@1", bytes(32))
    unkeyed = hashlib.sha256(f"acme\0{'a' * 64}\0standard@1".encode()).hexdigest()[:32]
    assert derived == f"acme/auto-{derived.rpartition('auto-')[2]}" and unkeyed not in derived


def test_the_job_id_key_is_made_once_in_the_data_dir(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), data_dir=tmp_path / "data", job_id_key_file=None)
    key = settings.job_id_key()
    made = tmp_path / "data" / "job-ids.key"
    assert len(key) == 32 and made.stat().st_mode & 0o777 == 0o600
    assert settings.job_id_key() == key  # read again, never made anew
    made.write_text("abcd\n")
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        settings.job_id_key()


def test_a_batch_keys_its_documents_digests_unless_it_is_an_old_one() -> None:
    digest, salt = "b" * 64, "c" * 64
    keyed = batch_document_key("key", digest, salt)
    assert keyed.startswith(batch_document_prefix("key")) and len(keyed) == len("key.") + 16
    assert digest[:16] not in keyed and keyed != batch_document_key("key", digest, "d" * 64)
    assert batch_document_key("key", digest, None) == f"key.{digest[:16]}"  # a batch from an old history


def test_a_keyless_job_id_derives_from_what_is_asked_never_from_a_resolved_policy() -> None:
    asked = asked_of("standard", None)
    assert asked == asked_of("standard", JobOverrides())
    assert asked != asked_of("preview", None)
    assert asked != asked_of("standard", job_overrides(watermark="DRAFT"))
    assert asked_of("standard", job_overrides(redact=["ssn", "email"])) != asked_of(
        "standard", job_overrides(redact=["email", "ssn"])
    )  # the order of patterns is kept as asked: a different request, a different job
    derived = derive_job_id("acme", None, "a" * 64, asked, ID_KEY)
    assert derived.startswith("acme/auto-") and derived == derive_job_id("acme", None, "a" * 64, asked, ID_KEY)
    largest = job_overrides(redact_regions=[f"{2**53 - 1}:0,0,1,1"])  # what canonical JSON writes exactly
    assert asked_of("standard", largest) != asked
    with pytest.raises(ConfigError, match="a page >= 1"):
        job_overrides(redact_regions=[f"{2**53}:0,0,1,1"])
    with pytest.raises(ConfigError, match="a page >= 1"):
        job_overrides(redact_regions=["1:0,0,1e400,1"])  # an infinity, which canonical JSON cannot write either


def test_overrides_that_cannot_apply_are_refused_without_resolving_a_policy() -> None:
    with pytest.raises(ValidationError):
        job_overrides(redact=[r"(?<=MRN)\d+"])  # a look-behind: not on the linear-time engine
    with pytest.raises(ValidationError):
        check_overrides(JobOverrides(redact_patterns=("(unclosed",)))
    with pytest.raises(ValidationError):
        job_overrides(watermark="DRAFT \U0001f512")  # no glyph in the stamp's font
    assert check_overrides(JobOverrides(redact_patterns=("ssn", r"\bA\d{3}\b"))).redact_patterns[0] == "ssn"


def test_shipped_policies_and_versions(tmp_path: Path) -> None:
    book = PolicyBook.load(SHIPPED_POLICIES)
    assert book.get(None).watermark.mode is WatermarkMode.STRUCTURE
    preview = book.get("preview")
    assert preview.watermark.mode is WatermarkMode.RASTER
    assert preview.version != book.get("standard").version
    with pytest.raises(ConfigError, match="unknown policy"):
        book.get("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('[policies.x.watermark]\ntext = "X"\nmode = "sideways"\n')
    with pytest.raises(ConfigError):
        PolicyBook.load(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('[policies.x.watermark]\ntext = "X"\nmdoe = "raster"\n')
    with pytest.raises(ConfigError, match=r"watermark\.mdoe"):
        PolicyBook.load(typo)


def test_promotion_is_create_only(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    first, second = tmp_path / "a.pdf", tmp_path / "b.pdf"
    first.write_bytes(b"%PDF-first")
    second.write_bytes(b"%PDF-second")
    run = RunScope(namespace="default", workflow_id="t/k", run_id=str(uuid.uuid4()))
    winner = store.put_file(staging_key(run, "render", 1), first)
    same = store.put_file(staging_key(run, "render", 2), first)
    loser = store.put_file(staging_key(run, "render", 3), second)
    assert winner.key != same.key
    final, created = store.promote(winner, artifact_key(run))
    assert created and final.sha256 == winner.sha256
    assert store.promote(same, artifact_key(run)) == (final, False)  # same digest: a no-op
    with pytest.raises(DocJobError) as conflict:
        store.promote(loser, artifact_key(run))
    assert conflict.value.code == "publish.conflict"
    with store.open(artifact_key(run)) as handle:
        assert handle.read() == b"%PDF-first"


def test_tampered_blob_is_detected(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    source = tmp_path / "in.pdf"
    source.write_bytes(b"%PDF-original")
    ref = store.put_file("sources/x", source)
    (tmp_path / "blobs" / "sources" / "x").write_bytes(b"%PDF-changed!")
    with pytest.raises(DocJobError) as error:
        store.fetch(ref, tmp_path / "copy.pdf", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    assert error.value.code == "source.digest_mismatch"
    with pytest.raises(ValueError):
        store.put_file("../escape", source)


def test_policy_overrides_make_a_new_version() -> None:
    book = PolicyBook.load(SHIPPED_POLICIES)
    standard = book.get("standard")
    assert book.resolve("standard") == standard
    changed = book.resolve("standard", job_overrides(watermark="DRAFT", mode="raster", dpi=72, ocr="force", sign=False))
    assert (changed.watermark.text, changed.watermark.mode, changed.watermark.dpi) == ("DRAFT", "raster", 72)
    assert (changed.ocr.mode, changed.sign.enabled, changed.name) == ("force", False, "standard")
    assert changed.version != standard.version
    with pytest.raises(ValueError):
        book.resolve("standard", job_overrides(mode="sideways"))
