"""The release gate (docjobs/pdf/release_gate.py): facts read by pure-Python readers from the file prepared for
signing, and the worker's verdict on them. Real PDF files, made here (pikepdf may build fixtures: the gate itself
never imports it); the last tests run the gate in its own confined sandbox."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name, String
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pypdf import PdfReader

from docjobs.domain.errors import DocJobError
from docjobs.domain.models import ReleaseGateSettings
from docjobs.domain.policy import RedactPolicy, SanitizeMode, SanitizePolicy, WatermarkPolicy
from docjobs.domain.stage_cost import CpuBudget
from docjobs.isolation import gate_work
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.confine import Confinement
from docjobs.isolation.gate_work import GateWork
from docjobs.isolation.tenant_pools import hand_over, sibling_pools
from docjobs.pdf import active_walk
from docjobs.pdf.release_gate import Expected, ExpectedStamp, GateReport, judge, read_gate
from docjobs.pdf.sanitize import find_active_content as pikepdf_active_content
from docjobs.pdf.stamp import stamp
from docjobs.signing.config import DEFAULT_STAMP_BOX, SignerConfig
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import ReleaseSigner, prepare_signature, release_reason, sign_pdf
from tests.fixtures.samples import make_sample_pdf

WATERMARK = "CONFIDENTIAL Gate"
TENANT = "acme"
STRUCTURE = ReleaseGateSettings(watermark_text=WATERMARK, redact=RedactPolicy(patterns=("ssn",)))


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> SignerConfig:
    return ensure_dev_signer(tmp_path_factory.mktemp("signing"))


def watermarked(folder: Path, *, pages: int = 2, marker: str = "docjobs sample", text: str | None = WATERMARK) -> Path:
    plain = folder / "plain.pdf"
    make_sample_pdf(plain, pages=pages, marker=marker)
    if text is None:
        return plain
    stamped = folder / "stamped.pdf"
    stamp(plain, stamped, WatermarkPolicy(text=text), workdir=folder)
    return stamped


def prepared(
    signer: SignerConfig,
    src: Path,
    dst: Path,
    *,
    reason: str = release_reason(TENANT),
    certify: bool = True,
    lock: bool = True,
    visible: bool = False,
    stamp_box: tuple[int, int, int, int] = DEFAULT_STAMP_BOX,
    allow_existing_signatures: bool = False,
) -> tuple[Path, tuple[int, int, int, int]]:
    """`src` prepared for signing into `dst`, as the sign child does it."""
    key = ReleaseSigner(signer)
    done = prepare_signature(
        src,
        dst,
        key.certificate_pem,
        bytes_reserved=key.bytes_reserved(TENANT),
        reason=reason,
        certify=certify,
        lock=lock,
        visible=visible,
        stamp_box=stamp_box,
        allow_existing_signatures=allow_existing_signatures,
    )
    return dst, done.byte_range


def expected(byte_range: tuple[int, int, int, int], **changes: object) -> Expected:
    values: dict[str, object] = {
        "reason": release_reason(TENANT),
        "byte_range": byte_range,
        "allow_signed_input": False,
        "page_count": 2,
        "sanitize": SanitizePolicy(),
    }
    return Expected(**{**values, **changes})  # type: ignore[arg-type]


def in_process(path: Path, settings: ReleaseGateSettings) -> GateReport:
    """The gate's report read in this test's process, which has the C/C++ readers loaded (the fixtures use them):
    what the gate's child reports, but for that."""
    return read_gate(path, settings).model_copy(update={"loaded_forbidden": []})


def refused(report: GateReport, expectation: Expected) -> str:
    with pytest.raises(DocJobError) as failure:
        judge(report, expectation)
    return failure.value.code


def test_an_honest_prepared_document_passes_every_check(signer: SignerConfig, tmp_path: Path) -> None:
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    assert report.readers == ["pypdf", "pyhanko"]
    assert (report.page_count, report.active, report.watermark_missing, report.redaction_leaks) == (2, {}, [], [])
    [placeholder] = report.placeholders
    assert placeholder.certifies and placeholder.byte_range == list(byte_range)
    assert placeholder.entries["/Reason"] == {"string": "docjobs release for tenant acme"}
    assert judge(report, expected(byte_range)) == [
        "gate_signature_dictionary",
        "gate_page_count",
        "gate_no_active_content",
        "gate_watermark_every_page",
    ]


def visible_stamp(signer: SignerConfig) -> ExpectedStamp:
    return ExpectedStamp(ReleaseSigner(signer).certificate_pem, DEFAULT_STAMP_BOX)


def test_a_visible_signature_has_the_same_dictionary_and_the_workers_stamp(
    signer: SignerConfig, tmp_path: Path
) -> None:
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf", visible=True)
    report = in_process(path, STRUCTURE)
    assert "gate_signature_dictionary" in judge(report, expected(byte_range, stamp=visible_stamp(signer)))
    widget = report.placeholders[0].widget
    assert widget is not None and widget.on_first_page and widget.rect == [float(n) for n in DEFAULT_STAMP_BOX]
    # The policy asks for an invisible signature: a stamp is refused, and an invisible one where a stamp is asked.
    assert refused(report, expected(byte_range)) == "signature.dictionary"
    hidden, hidden_range = prepared(signer, watermarked(tmp_path / "hidden"), tmp_path / "hidden.pdf")
    assert refused(in_process(hidden, STRUCTURE), expected(hidden_range, stamp=visible_stamp(signer))) == (
        "signature.dictionary"
    )


def test_a_stamp_the_worker_does_not_draw_is_refused(signer: SignerConfig, tmp_path: Path) -> None:
    """The sign child draws the stamp: one that names someone else, or that covers the page, is not signed."""
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf", visible=True)
    forged = tmp_path / "forged.pdf"
    with path.open("rb") as original:
        writer = IncrementalPdfFileWriter(original)
        field = writer.root["/AcroForm"]["/Fields"][0].get_object()
        appearance = field["/AP"].raw_get("/N")
        drawn = appearance.get_object()
        drawn._data = drawn.data.replace(b"docjobs DEVELOPMENT ONLY signer", b"Dr Mallory, Chief Physician")
        drawn._encoded_data = None
        writer.mark_update(appearance)
        with forged.open("wb") as out:
            writer.write(out)  # type: ignore[no-untyped-call]  # pyHanko leaves it untyped
    report = in_process(forged, STRUCTURE)
    assert report.placeholders[0].byte_range == list(byte_range)  # the dictionary is the worker's: only the stamp
    with pytest.raises(DocJobError, match="stamp is not the one the worker draws") as failure:
        judge(report, expected(byte_range, stamp=visible_stamp(signer)))
    assert failure.value.code == "signature.dictionary"

    whole_page = (0, 0, 612, 792)
    covering, covering_range = prepared(
        signer, watermarked(tmp_path / "cover"), tmp_path / "covering.pdf", visible=True, stamp_box=whole_page
    )
    with pytest.raises(DocJobError, match="stamp box"):
        judge(in_process(covering, STRUCTURE), expected(covering_range, stamp=visible_stamp(signer)))


def test_after_earlier_signatures_the_worker_expects_a_field_lock(signer: SignerConfig, tmp_path: Path) -> None:
    """An input signed already (allowed by the policy) cannot be certified: the signature then locks every field
    with FieldMDP and DocMDP /P 1, and the field carries the /Lock; a policy that refuses signed inputs expects a
    certification, so the same file is refused there."""
    signed = tmp_path / "signed.pdf"
    sign_pdf(watermarked(tmp_path), signed, signer, tenant=TENANT, certify=False, lock=False)
    path, byte_range = prepared(signer, signed, tmp_path / "prepared.pdf", allow_existing_signatures=True)
    report = in_process(path, STRUCTURE)
    assert report.earlier_signatures == 1 and not report.placeholders[0].certifies
    assert report.placeholders[0].lock == {"/Type": "/SigFieldLock", "/Action": "/All", "/P": 1}
    assert "gate_signature_dictionary" in judge(report, expected(byte_range, allow_signed_input=True))
    assert refused(report, expected(byte_range)) == "signature.dictionary"


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({}, release_reason("other-tenant")),  # a /Reason naming another tenant
        ({}, "docjobs release"),  # naming none
        ({"certify": False, "lock": False}, release_reason(TENANT)),  # no DocMDP: later edits would look allowed
        ({"certify": False}, release_reason(TENANT)),  # a FieldMDP lock where a certification was due
    ],
)
def test_a_signature_dictionary_other_than_the_workers_is_refused(
    signer: SignerConfig, tmp_path: Path, options: dict[str, bool], reason: str
) -> None:
    certify, lock = options.get("certify", True), options.get("lock", True)
    path, byte_range = prepared(
        signer, watermarked(tmp_path), tmp_path / "prepared.pdf", reason=reason, certify=certify, lock=lock
    )
    assert refused(in_process(path, STRUCTURE), expected(byte_range)) == "signature.dictionary"


def test_the_signature_must_be_the_range_checked_and_made_now(signer: SignerConfig, tmp_path: Path) -> None:
    path, (first, start, end, rest) = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    assert refused(report, expected((first, start - 2, end - 2, rest))) == "signature.dictionary"
    later = datetime.now(UTC) + timedelta(days=2)
    assert refused(report, expected((first, start, end, rest), now=lambda: later)) == "signature.dictionary"
    unsigned = report.model_copy(update={"placeholders": []})
    assert refused(unsigned, expected((first, start, end, rest))) == "signature.dictionary"
    twice = report.model_copy(update={"placeholders": report.placeholders * 2})
    assert refused(twice, expected((first, start, end, rest))) == "signature.dictionary"


def test_a_string_cannot_pass_for_a_name(signer: SignerConfig, tmp_path: Path) -> None:
    """The dictionary is compared as typed values: a /SubFilter written as the string "/ETSI.CAdES.detached"
    (added by an incremental update after the child's) is not the name the worker expects."""
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    [found] = report.placeholders
    forged = found.model_copy(update={"entries": {**found.entries, "/SubFilter": {"string": "/ETSI.CAdES.detached"}}})
    assert refused(report.model_copy(update={"placeholders": [forged]}), expected(byte_range)) == "signature.dictionary"


def test_no_watermark_is_refused_in_structure_mode_only(signer: SignerConfig, tmp_path: Path) -> None:
    path, byte_range = prepared(signer, watermarked(tmp_path, text=None), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    assert report.watermark_missing == [1, 2]
    assert refused(report, expected(byte_range)) == "fidelity.watermark"
    raster = in_process(path, ReleaseGateSettings())  # the stamp is pixels: page count and active content only
    assert raster.watermark_missing is None
    assert judge(raster, expected(byte_range)) == [
        "gate_signature_dictionary",
        "gate_page_count",
        "gate_no_active_content",
    ]


def test_a_redaction_pattern_in_the_text_is_a_leak(signer: SignerConfig, tmp_path: Path) -> None:
    source = watermarked(tmp_path, marker="SSN 078-05-1120")
    path, byte_range = prepared(signer, source, tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    assert report.redaction_leaks == ["page 1: pattern:ssn", "page 2: pattern:ssn"]
    assert "078" not in " ".join(report.redaction_leaks)  # kinds, never the text
    assert refused(report, expected(byte_range)) == "redaction.leak"


def test_another_page_count_than_renders_is_refused(signer: SignerConfig, tmp_path: Path) -> None:
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE)
    assert refused(report, expected(byte_range, page_count=3)) == "fidelity.page_count"
    assert "gate_page_count" in judge(report, expected(byte_range, page_count=0))  # not known: not compared


def test_an_unreadable_file_is_not_known_to_be_clean(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pdf"
    garbage.write_bytes(b"%PDF-1.7\n" + os.urandom(4096))
    with pytest.raises(DocJobError) as failure:
        read_gate(garbage, STRUCTURE)
    assert failure.value.code == "fidelity.reader"


def test_a_gate_that_loaded_a_c_reader_never_passes(signer: SignerConfig, tmp_path: Path) -> None:
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    report = in_process(path, STRUCTURE).model_copy(update={"loaded_forbidden": ["pikepdf"]})
    assert refused(report, expected(byte_range)) == "internal.error"


# --- Active content: the same kinds and counts as docjobs/pdf/sanitize.py, by pypdf ---------------------------------


def active_document(path: Path, *, field_loop: bool = True) -> Path:
    """One page with every kind of active content sanitize.py knows, in every place it looks, and loops (a form
    field that is its own kid stops pyHanko's reader: `field_loop=False` for a file to prepare for signing)."""
    make_sample_pdf(path, pages=1)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        js = pdf.make_indirect(Dictionary(S=Name.JavaScript, JS=String("app.alert(1)")))
        looping = pdf.make_indirect(Dictionary(S=Name.GoTo, D=Array([pdf.pages[0].obj, Name.Fit])))
        looping.Next = Array([looping, js])  # a /Next cycle, and an action reachable twice (counted once)
        pdf.Root.OpenAction = looping
        pdf.Root.AA = Dictionary(WC=Dictionary(S=Name.Launch, F=String("calc.exe")))
        tree = pdf.make_indirect(Dictionary(Names=Array([String("a"), Dictionary(S=Name.JavaScript, JS=String("1"))])))
        tree.Kids = Array([tree])  # a name tree that loops
        spec = pdf.make_indirect(Dictionary(Type=Name.Filespec, F=String("x.txt")))
        pdf.Root.Names = Dictionary(JavaScript=tree, EmbeddedFiles=Dictionary(Names=Array([String("x"), spec])))
        field = pdf.make_indirect(Dictionary(FT=Name.Tx, T=String("f"), A=Dictionary(S=Name.SubmitForm)))
        if field_loop:
            field.Kids = Array([field])
        pdf.Root.AcroForm = Dictionary(Fields=Array([field]), XFA=String("<xdp/>"))
        outline = pdf.make_indirect(Dictionary(Title=String("o"), A=Dictionary(S=Name.ImportData)))
        outline.Next = outline
        pdf.Root.Outlines = Dictionary(First=outline)
        page = pdf.pages[0].obj
        page.AA = Dictionary(O=Dictionary(S=Name.SetOCGState))
        page.AF = Array([spec])
        box = Array([0, 0, 9, 9])
        annotations = [
            Dictionary(Subtype=Name.Link, Rect=box, A=Dictionary(S=Name.URI, URI=String("java\tscript:x"))),
            Dictionary(Subtype=Name.Link, Rect=box, A=Dictionary(S=Name.URI, URI=String("file:///x"))),
            Dictionary(Subtype=Name.Link, Rect=box, A=Dictionary(S=Name.GoToR, F=String("o.pdf"))),
            Dictionary(Subtype=Name.RichMedia, Rect=box),
            Dictionary(Subtype=Name.Screen, Rect=box),
            Dictionary(Subtype=Name.FileAttachment, Rect=box, FS=spec),
            Dictionary(Subtype=Name.Widget, Rect=box, A=Dictionary(S=Name.Hide)),
            Dictionary(Subtype=Name.Link, Rect=box, A=Dictionary(S=Name("/Unknown"))),
        ]
        page.Annots = Array([*annotations, *page.get("/Annots", Array())])
        pdf.save(path)
    return path


def test_active_content_is_counted_as_sanitize_counts_it(tmp_path: Path) -> None:
    path = active_document(tmp_path / "active.pdf")
    for keep_attachments in (False, True):
        found = active_walk.find_active_content(PdfReader(path), keep_attachments=keep_attachments)
        assert found == pikepdf_active_content(path, keep_attachments=keep_attachments), keep_attachments
    assert set(active_walk.find_active_content(PdfReader(path))) == {
        "embedded_file",
        "goto_remote",
        "import_data",
        "javascript",
        "launch",
        "media",
        "other_action",
        "rich_media",
        "submit_form",
        "visibility",
        "xfa",
    }


def test_active_content_is_refused_unless_the_policy_keeps_it(signer: SignerConfig, tmp_path: Path) -> None:
    active = active_document(tmp_path / "active.pdf", field_loop=False)
    path, byte_range = prepared(signer, active, tmp_path / "prepared.pdf")
    report = in_process(path, ReleaseGateSettings())
    assert refused(report, expected(byte_range, page_count=1)) == "sanitize.residue"
    trusted = SanitizePolicy(mode=SanitizeMode.KEEP)
    assert "gate_no_active_content" not in judge(report, expected(byte_range, page_count=1, sanitize=trusted))


def test_the_walk_has_a_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = active_document(tmp_path / "active.pdf")
    monkeypatch.setattr(active_walk, "MAX_NODES", 10)
    with pytest.raises(DocJobError) as failure:
        active_walk.find_active_content(PdfReader(path))
    assert failure.value.code == "input.too_complex"


# --- In its own sandbox ----------------------------------------------------------------------------------------------


@pytest.fixture
def gate_pool(confined_root: Path) -> Iterator[ChildPool]:
    """The release gate's pool beside a stage pool, as the worker makes it (`sibling_pools`), confined."""
    stages = ChildPool(ChildLimits(), home=confined_root, warm=1, confinement=Confinement(confined_root))
    pool = sibling_pools(stages, gate_work.ENTRIES_MODULE)
    assert isinstance(pool, ChildPool)
    pool.start()
    yield pool
    pool.close()


@pytest.mark.e2e
def test_the_gate_child_is_confined_and_never_loads_a_c_pdf_reader(
    signer: SignerConfig, tmp_path: Path, gate_pool: ChildPool
) -> None:
    """The gate's zygote imports docjobs/isolation/gate_work.py only (not the stage work, which loads pikepdf and
    PDFium): its child reports no C/C++ PDF reader among its modules, and finds what the worker's own read finds."""
    assert gate_pool.recycle_after == 1 and gate_pool.confinement is not None
    assert gate_pool.entries == "docjobs.isolation.gate_work"
    path, byte_range = prepared(signer, watermarked(tmp_path), tmp_path / "prepared.pdf")
    with gate_pool.lease("tenant/job") as (_, root):  # the gate sandbox's own root, as the worker reaches it
        assert root is not None
        folder = root / "release-gate-test"
        folder.mkdir()
        (folder / "prepared.pdf").write_bytes(path.read_bytes())
        hand_over(folder, gate_pool.confinement)
        work = GateWork(document=folder / "prepared.pdf", settings=STRUCTURE)
        report = gate_pool.run(
            gate_work.GATE_ENTRY, work, GateReport, cpu=CpuBudget(base_seconds=30), max_pages=2, folder=folder
        )
    assert report.loaded_forbidden == []
    assert report == in_process(path, STRUCTURE)
    assert judge(report, expected(byte_range))
