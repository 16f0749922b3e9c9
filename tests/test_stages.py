"""The workflow calls activities by typed declarations (workflows/stages.py): each one has exactly one
implementation registered by the worker, under its name, with its parameter and return types."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from activities.batch import BatchActivities
from docjobs.domain import stage_specs as specs
from docjobs.domain.job_status import JobStatus, OcrSection, RenderSection
from docjobs.domain.models import DeskewedPage, OcrDone, RenderDone
from docjobs.domain.stage_specs import StageSpec, spec_of
from docjobs.domain.states import JobState, Stage
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.entries import Given, Reads
from docjobs.isolation.stage_work import ENTRIES, STAGE_ENTRIES
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import QUEUES, SERVED_BY, page_range_activities, served_by, stage_activities
from tests.fixtures.statuses import a_status
from workflows import batch_job, document_job, stages
from workflows.stages import DECLARATIONS, activity_name

# The activity names of recorded histories (tests/histories): a rename would break every job in flight.
RECORDED_NAMES = {
    "resolve",
    "generate",
    "render",
    "ocr",
    "redact",
    "sign",
    "verify",
    "publish",
    "evidence",
    "cleanup",
    "notify",
    "ocr_chunk",
    "ocr_merge",
}
# Declared since the histories were recorded: an archive's steps (workflows/archive.py), none recorded yet.
SINCE_RECORDED = {"open_archive", "renew_archive"}


def types_of(function: Callable[..., Any]) -> tuple[list[Any], Any]:
    """(parameter types, return type) of a function or bound method, its annotations resolved."""
    hints = typing.get_type_hints(function)
    parameters = [hints[name] for name in inspect.signature(function).parameters]
    return parameters, hints["return"]


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Callable[..., Any]]]:
    monkeypatch.setenv("DOCJOBS_DATA_DIR", str(tmp_path))
    settings = TemporalSettings.from_env()
    pools = {queue: ChildPool(ChildLimits(), home=tmp_path, warm=0, recycle_after=1) for queue in QUEUES}  # unstarted
    return stage_activities(settings, pools)


def test_every_declaration_has_exactly_one_implementation_of_its_types(
    registered: dict[str, list[Callable[..., Any]]],
) -> None:
    implementations = [function for functions in registered.values() for function in functions]
    for declaration in DECLARATIONS:
        name = activity_name(declaration)
        matching = [function for function in implementations if activity_name(function) == name]
        assert len(matching) == 1, f"{name}: {len(matching)} implementations registered"
        assert types_of(matching[0]) == types_of(declaration), name
    assert {activity_name(function) for function in implementations} == {activity_name(d) for d in DECLARATIONS}
    assert {activity_name(declaration) for declaration in DECLARATIONS} == RECORDED_NAMES | SINCE_RECORDED
    # OCR has its own queue, with the parts of a long document's OCR (workflows/ocr_page_ranges.py), which the chunk
    # queue serves too
    assert [activity_name(function) for function in registered["ocr"]] == ["ocr", "ocr_chunk", "ocr_merge"]
    assert [activity_name(function) for function in page_range_activities(registered["ocr"])] == [
        "ocr_chunk",
        "ocr_merge",
    ]


def test_every_stage_is_declared() -> None:
    for stage in Stage:
        assert activity_name(getattr(stages, stage.value)) == stage.value


def activity_calls(module_file: str) -> list[ast.Call]:
    """The workflow module's calls of `execute_activity` / `start_activity` (of the SDK's, or of any wrapper)."""
    return [
        node
        for node in ast.walk(ast.parse(Path(module_file).read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith(("execute_activity", "start_activity"))
    ]


def assert_called_by_declaration(calls: list[ast.Call]) -> None:
    for call in calls:
        assert not isinstance(call.args[0], ast.Constant), f"line {call.lineno}: an activity called by a string name"
        assert all(keyword.arg != "result_type" for keyword in call.keywords), "the declaration gives the type"


def test_the_workflow_calls_activities_only_by_declaration() -> None:
    calls = activity_calls(document_job.__file__)
    assert calls
    assert_called_by_declaration(calls)


# sha256 (first 16 hex digits) of each activity's input and output JSON Schema, as recorded before the stage specs
# (`wire_schema`: titles and descriptions left out, `required` sorted). A change here changes what running
# workflows, recorded histories and other-language clients send or read: add a field with a default, never
# rename or retype one. `resolve` is left out: its input and output are the workflow's own input (JobRequest).
WIRE = {
    # In every stage's input (generate, render, ocr, redact, sign, verify, publish), the last addition: the job
    # shape's `signs` (defaulted: False from an older workflow, whose signed job then opens its gate pool at `sign`).
    # Office input (docs/office.md), all additions: the `office` value of InputKind (in `generate`'s input), the
    # policy's defaulted `office` section (in `render`'s, `evidence`'s and the batch's inputs), and render's
    # defaulted `converted_from` and `converted` outputs.
    "generate": ("3cc7d5c8d834c8b8", "a9d31aa13fe73412"),
    # Then render's defaulted `fonts_substituted` output (an office input's font families drawn with a substitute).
    # Then the policy's `office.pdf_variant` (defaulted: None, a plain export), in render's, evidence's and the
    # batch's inputs.
    # Then the watermark's `opacity` (defaulted: 0.35, the stamp's opacity before it), in every input that carries a
    # watermark policy (render, ocr, redact) or a whole policy (evidence, the batch's).
    "render": ("b13dda702baccf34", "7a875a8530369afc"),
    # Additions since, each with a default (OCR in page ranges): the OCR policy's `chunk_pages` and `max_parallel`
    # (in `ocr`'s input and the batch's pinned policy) and the status's `ocr_chunks` (in `evidence`'s input).
    # Then the watermark's `opacity` (see render).
    "ocr": ("0db357a064faec8f", "8f2d9486220d9f6a"),
    # The redaction summary counts spans (`spans`, defaulted) and no longer the glyphs they removed: a removed
    # field is ignored by older code (Frozen: extra="ignore"), which reads its default, and old histories replay.
    # Then a page's `fallback_fonts` (defaulted: the kinds of the fonts behind `font_not_resubset`).
    # A region's page is at most 2**53 - 1 (JSON_SAFE_INTEGER: what canonical JSON writes exactly; beyond, hashing
    # the ask crashed), in every input that carries a redaction policy.
    # Then the watermark's `opacity` (see render).
    "redact": ("419841aa283fba67", "3386064094867ec2"),
    # An addition with a default (the release gate, docs/release-gates.md): sign's `gate` settings (None in an older
    # workflow's input: the gate then checks what needs no policy, and active content as the shipped policies strip it).
    # Then the region page bound (see redact) in the gate settings' redaction policy.
    # Then the policy's `sign.level` (defaulted: None, B-T when a TSA is configured, else B-B, as before levels), in the
    # input's `sign` section.
    # Then the output's `timestamp_token` (None: not B-LTA, or signed by older code), for the release's archive.
    "sign": ("f1b42f893dc2b1f9", "d072d0af6d13e697"),
    # An addition with a default (PDF/A outputs, docs/policies.md): verify's `pdfa` output (None in older results).
    # Then the region page bound (see redact). Then the output's `signature` typed (SignatureVerdict): the same keys,
    # the seven every verify since the first has written required, `tenant` and `docmdp` defaulted (None).
    # Then long-term signatures (issue 40), additions with defaults: the input's `sign_level` (None: no long-term
    # validation, as before) and the signature verdict's `long_term` (None in older results). Then the PDF/A outcome's
    # `validators` and `disagreement` (page-validation joins docjobs' check; {} and None in older results).
    "verify": ("515dd5741a5b9ded", "cf089e1d4607b2d2"),
    "publish": ("87595f58d5085b4c", "07d6f74d025457b0"),
    # Additions with defaults: `converted` (an office input's PDF, which the evidence binds; None in old jobs), then
    # the input's `redactions` (counts by kind: {} in old jobs) and the output's `commitment_salt` (None from older
    # workers); then the region page bound (see redact); then the watermark's `opacity` (see render).
    # Then the policy's `sign.level` (see sign) and its `archive` section (defaulted: renew 30 days ahead).
    "evidence": ("f9eb94ed5a0ce51c", "17244d701355a0b7"),
    "cleanup": ("e9154a74c8b44cea", "5212aa10f10c04f8"),
    # A widening: `input_sha256` may be None (a redaction job's event carries no plain digest of its input).
    "notify": ("799cebb4d6932edc", "e5d116e6b66fdc5a"),
    # An addition with a default: the batch request's `overrides` (what the batch was asked; None in an old
    # batch's request, whose documents keep starting with the pinned request).
    # Then the region page bound (see redact). Then the watermark's `opacity` (see render). Then the request's
    # `document_salt`, an addition with a default (None in an old batch's request: its documents keep their keys).
    # Then the batch pins its own policy: the request's `policy_name` (added, None in an old request), its `policy`
    # and `deadline_seconds` defaulted to None (an old request has both), and the step's `pin` (None from older code:
    # the request's policy is the pin). Then the timing's `notify_retry_seconds`, an addition with a default (1 s, the
    # backoff a request recorded before it was scheduled with).
    # Then the policy's `sign.level` (see sign) and its `archive` section (see evidence).
    "start_batch_documents": ("7284f8c7778c2d66", "5603494387f42eb6"),
    "pin_batch_policy": ("958aaca1aaa8ff4e", "93ae5b355214694c"),
    "await_batch_jobs": ("4179ed10ef347c9c", "a8b49c7302b8e2e1"),
    "cancel_batch_jobs": ("75fccd5938350432", "5212aa10f10c04f8"),
    "record_batch_outcomes": ("d8946a9129805d5d", "ea3cda3acd3fa04a"),
}


def wire_schema(node: Any) -> Any:
    """A JSON Schema without what is not wire (titles, descriptions) and with `required` in a fixed order."""
    if isinstance(node, dict):
        return {
            key: sorted(value) if key == "required" else wire_schema(value)
            for key, value in node.items()
            if key not in ("title", "description")
        }
    if isinstance(node, list):
        return [wire_schema(value) for value in node]
    return node


def wire_digest(declared: Any) -> str:
    adapter = TypeAdapter(declared)
    schemas = {mode: wire_schema(adapter.json_schema(mode=mode)) for mode in ("validation", "serialization")}
    return hashlib.sha256(json.dumps(schemas, sort_keys=True).encode()).hexdigest()[:16]


def test_every_activity_input_and_output_keeps_its_wire_shape() -> None:
    checked = {spec.name: spec for spec in (*specs.JOB_ACTIVITIES, *specs.BATCH_ACTIVITIES) if spec.name in WIRE}
    assert set(checked) == set(WIRE)
    for name, spec in checked.items():
        assert (wire_digest(spec.input), wire_digest(spec.output)) == WIRE[name], name


def test_each_declaration_is_its_spec() -> None:
    declared = (*DECLARATIONS, *stages.BATCH_DECLARATIONS)
    by_name = {spec.name: spec for spec in (*specs.JOB_ACTIVITIES, *specs.BATCH_ACTIVITIES)}
    assert sorted(activity_name(declaration) for declaration in declared) == sorted(by_name)
    for declaration in declared:
        spec = spec_of(declaration)
        assert spec is by_name[spec.name] and types_of(declaration) == ([spec.input], spec.output)


def test_the_status_keeps_each_stage_report_in_its_section_and_the_wire_flat() -> None:
    """A section is what its stage reports (so the workflow copies a report, not names); on the wire its fields sit
    at the top level as they always did, and a status read back from the wire is folded into its sections."""
    assert set(RenderSection.model_fields) <= set(RenderDone.model_fields)
    assert set(OcrSection.model_fields) <= set(OcrDone.model_fields)
    rendered = RenderDone(page_count=3, input_encryption="none", repair_warnings=2, sanitized={"javascript": 1})
    ocred = OcrDone(pages_ocred=[2], pages_deskewed=[DeskewedPage(page=2, angle=1.5, correction=-1.5)])
    status = a_status(
        state=JobState.SUCCEEDED, page_count=3, render=RenderSection.of(rendered), ocr=OcrSection.of(ocred)
    )
    wire = json.loads(status.model_dump_json())
    assert "render" not in wire and "ocr" not in wire
    assert (wire["repaired"], wire["repair_warnings"], wire["input_encryption"]) == (True, 2, "none")
    assert wire["sanitized"] == {"javascript": 1} and wire["pages_ocred"] == [2]
    assert wire["pages_deskewed"] == [{"page": 2, "angle": 1.5, "correction": -1.5}]
    assert set(wire) == set(JobStatus.model_json_schema(mode="serialization")["properties"])
    back = JobStatus.model_validate(wire)
    assert back == status and back.render.repaired and back.ocr.pages_ocred == [2]
    assert not JobStatus.model_validate(wire | {"repair_warnings": 0, "repaired": True}).repaired  # derived, not read


def test_each_stage_child_entry_runs_under_its_stage_name() -> None:
    served = {spec.name: spec for spec in (*specs.STAGES, *specs.STAGE_PARTS)}
    for name, entry in ENTRIES.items():
        assert entry.name == name
        if name == "archival_update":  # `sign`'s second child (B-LT, B-LTA), whose report stays in the worker
            continue
        assert name in served
        output = served[name].output
        # What the sign child reports stays in the worker, which signs (activities/release.py); the merge child's
        # page count is a claim the release gates check again on the whole document (fidelity: the page count).
        if name not in ("sign", "ocr_merge"):
            assert set(entry.done_type.model_fields) <= set(output.model_fields), name


# What each way of reading needs of a stage's input (activities/adapter.py, `_given`).
READS_FIELDS = {
    Reads.JOB_INPUT: {"job_id", "source"},
    Reads.TEMPLATE: {"job_id", "source", "input_kind"},
    Reads.STAGED: {"source", "staged"},
    Reads.RELEASE: {"source", "staged"},
}


def test_each_adapted_stage_is_one_declaration_of_its_spec_entry_and_work() -> None:
    """A `StageEntry` holds its spec itself (not its name), is the entry its child serves, and what it reads, orders
    and keeps fits its spec's input and output and its own work model (docjobs/isolation/stage_work.py)."""
    stage_specs = (*specs.STAGES, *specs.STAGE_PARTS)
    assert {entry.name for entry in STAGE_ENTRIES} <= {spec.name for spec in stage_specs}
    for entry in STAGE_ENTRIES:
        assert any(entry.spec is spec for spec in stage_specs) and entry.name == entry.spec.name
        assert ENTRIES[entry.name] is entry
        assert READS_FIELDS[entry.reads] <= set(entry.spec.input.model_fields), entry.name
        hints = typing.get_type_hints(entry.order)
        assert list(hints.values()) == [entry.spec.input, Given, entry.work_type], entry.name
        kept = [keep.into for keep in entry.keeps]
        assert len(kept) == len(set(kept)) and set(kept) <= set(entry.spec.output.model_fields), entry.name


def test_the_worker_registers_each_activity_on_the_queue_its_spec_names(
    registered: dict[str, list[Callable[..., Any]]],
) -> None:
    """The served queues and what each registers come from the specs: a stage on its spec's queue, the rest of the
    job's activities beside the workflow; nothing is listed by hand."""
    for queue, functions in registered.items():
        for function in functions:
            spec = spec_of(function)
            assert served_by(spec) == queue, spec.name
            if isinstance(spec, StageSpec):
                assert SERVED_BY[spec.queue] == queue
    assert sorted(spec_of(f).name for functions in registered.values() for f in functions) == sorted(
        spec.name for spec in specs.JOB_ACTIVITIES
    )


def test_the_batch_workflow_calls_activities_only_by_declaration() -> None:
    calls = activity_calls(batch_job.__file__)
    assert len(calls) == 5
    assert_called_by_declaration(calls)


def test_every_batch_declaration_has_exactly_one_implementation_of_its_types() -> None:
    implementations = [
        getattr(BatchActivities, name)
        for name in ("pin_policy", "start_documents", "await_jobs", "cancel_jobs", "record_outcomes")
    ]
    for declaration in stages.BATCH_DECLARATIONS:
        matching = [function for function in implementations if activity_name(function) == activity_name(declaration)]
        assert len(matching) == 1, activity_name(declaration)
        hints = typing.get_type_hints(matching[0])
        parameters = [hints[name] for name in inspect.signature(matching[0]).parameters if name != "self"]
        assert (parameters, hints["return"]) == types_of(declaration), activity_name(declaration)
