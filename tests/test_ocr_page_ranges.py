"""OCR in page ranges, the parts without a server: the chunk plan, and the merge of OCR'd chunks back into the
document (page order, boxes, rotation, text layer; the document's outline and links kept)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name, OutlineItem

from activities.ocr_page_ranges import CHECKPOINT_MAX_BYTES, CoreShare, PageCheckpoints
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import BlobRef
from docjobs.domain.ocr_page_ranges import PageRange, page_range_plan
from docjobs.domain.policy import OcrOutputType, OcrPolicy
from docjobs.pdf.ocr_page_ranges import OcrdRange, cut_page_range, merge_page_ranges
from docjobs.store.storage import RunScope, ocr_checkpoints_prefix
from workflows.ocr_page_ranges import page_ranges


def ranges(plan: list[PageRange]) -> list[tuple[int, int]]:
    return [(chunk.first, chunk.last) for chunk in plan]


def test_the_plan_covers_the_document_in_order_with_a_short_last_chunk() -> None:
    assert ranges(page_range_plan(10, 4)) == [(1, 4), (5, 8), (9, 10)]
    assert ranges(page_range_plan(8, 4)) == [(1, 4), (5, 8)]
    assert ranges(page_range_plan(500, 16))[-1] == (497, 500)
    assert sum(chunk.pages for chunk in page_range_plan(500, 16)) == 500
    assert ranges(page_range_plan(3, 1)) == [(1, 1), (2, 2), (3, 3)]


def test_a_workers_ranges_share_its_cores_and_the_last_one_left_gets_them_all(tmp_path: Path) -> None:
    def share(path: Path) -> int:
        return int(path.read_text())

    cores = CoreShare(2)
    with cores.joined(tmp_path / "a") as first:
        assert share(first) == 2
        with cores.joined(tmp_path / "b") as second, cores.joined(tmp_path / "c") as third:
            assert (share(first), share(second), share(third)) == (1, 1, 1)  # never less than a core
        assert share(first) == 2  # the others ended
    eight = CoreShare(8)
    with eight.joined(tmp_path / "d") as one, eight.joined(tmp_path / "e") as two, eight.joined(tmp_path / "f"):
        assert (share(one), share(two)) == (2, 2)
    (tmp_path / "planted").symlink_to(tmp_path / "elsewhere")  # a child's link: never written through
    with pytest.raises(FileExistsError), cores.joined(tmp_path / "planted"):
        pass
    assert not (tmp_path / "elsewhere").exists()


def test_a_document_of_one_chunk_keeps_the_single_ocr_activity() -> None:
    assert ranges(page_range_plan(16, 16)) == [(1, 16)]
    assert ranges(page_range_plan(1, 16)) == [(1, 1)]
    policy = OcrPolicy(chunk_pages=16)
    assert page_ranges(policy, 16) is None
    assert page_ranges(policy, 17) is not None
    assert page_ranges(policy.model_copy(update={"output_type": OcrOutputType.PDFA}), 100) is None
    with pytest.raises(ValueError):
        page_range_plan(10, 0)
    with pytest.raises(ValueError):
        PageRange(first=3, last=2)


def text_of(pdf: Path) -> list[str]:
    out = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return [" ".join(page.split()) for page in out.split("\f")[:-1]]


def write_text(pdf: pikepdf.Pdf, page: pikepdf.Page, text: str) -> None:
    """A page's content replaced by one line of text: what OCR's text layer stands in for here."""
    font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
    page.obj.Resources = Dictionary(Font=Dictionary(F1=font))
    page.obj.Contents = pdf.make_stream(f"BT /F1 12 Tf 72 100 Td ({text}) Tj ET".encode())


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    """Six image-like pages without text, an outline naming pages 2 and 5, a link on page 1 to page 6, a
    crop box on page 3 and page 4 turned 90 degrees."""
    path = tmp_path / "rendered.pdf"
    with pikepdf.new() as pdf:
        for _ in range(6):
            pdf.add_blank_page(page_size=(300, 400))
        pdf.pages[2].obj.CropBox = Array([10, 10, 290, 390])
        pdf.pages[3].obj.Rotate = 90
        link = Dictionary(
            Type=Name.Annot, Subtype=Name.Link, Rect=Array([0, 0, 50, 50]), Dest=Array([pdf.pages[5].obj, Name.Fit])
        )
        pdf.pages[0].obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(link)]))
        with pdf.open_outline() as outline:
            outline.root.append(OutlineItem("Two", 1))
            outline.root.append(OutlineItem("Five", 4))
        pdf.save(path)
    return path


def ocr_stand_in(rendered: Path, pages: PageRange, folder: Path) -> OcrdRange:
    """A chunk cut as `ocr_chunk` cuts it, then "OCR'd": text on every page, page 2 turned over, page 4 turned
    back upright and page 5's media box changed (as OCRmyPDF's page rotation and deskew may)."""
    cut, ocrd = folder / f"cut-{pages.name}.pdf", folder / f"ocrd-{pages.name}.pdf"
    cut_page_range(rendered, cut, pages)
    with pikepdf.open(cut) as pdf:
        assert len(pdf.pages) == pages.pages
        assert all("/Annots" not in page.obj for page in pdf.pages)  # links would drag other pages along
        for index, page in enumerate(pdf.pages):
            number = pages.first + index
            write_text(pdf, page, f"page{number} words")
            if number == 2:
                page.obj.Rotate = 180
            if number == 4:
                page.obj.Rotate = 0
            if number == 5:
                page.obj.MediaBox = Array([0, 0, 310, 410])
        pdf.save(ocrd)
    return OcrdRange(pages, ocrd)


def test_the_merge_puts_every_ocrd_page_in_place_and_keeps_outline_and_links(rendered: Path, tmp_path: Path) -> None:
    plan = page_range_plan(6, 2)
    chunks = [ocr_stand_in(rendered, pages, tmp_path) for pages in plan]
    merged = tmp_path / "merged.pdf"
    assert merge_page_ranges(rendered, list(reversed(chunks)), merged) == 6  # in any order: placed by their ranges

    assert text_of(merged) == [f"page{number} words" for number in range(1, 7)]  # text layer, in page order
    with pikepdf.open(merged) as pdf:
        pages = pdf.pages
        assert [int(page.obj.get("/Rotate", 0)) for page in pages] == [0, 180, 0, 0, 0, 0]  # OCR's turn wins
        assert [float(v) for v in pages[4].mediabox] == [0, 0, 310, 410]
        assert [float(v) for v in pages[2].cropbox] == [10, 10, 290, 390]  # what OCR kept stays
        (link,) = pages[0].obj.Annots
        assert link.Dest[0].objgen == pages[5].obj.objgen  # the link still points at page 6
        with pdf.open_outline() as outline:
            destinations = [item.destination for item in outline.root]
            targets = [where[0].objgen for where in destinations if isinstance(where, Array)]
        assert [item.title for item in outline.root] == ["Two", "Five"]
        assert targets == [pages[1].obj.objgen, pages[4].obj.objgen]


def test_the_merge_refuses_chunks_that_do_not_cover_the_document(rendered: Path, tmp_path: Path) -> None:
    first, _, last = (ocr_stand_in(rendered, pages, tmp_path) for pages in page_range_plan(6, 2))
    with pytest.raises(DocJobError) as gap:
        merge_page_ranges(rendered, [first, last], tmp_path / "gap.pdf")
    assert gap.value.code == "ocr.invalid_output"
    middle = ocr_stand_in(rendered, PageRange(first=3, last=4), tmp_path)
    with pytest.raises(DocJobError) as longer:  # a chunk with fewer pages than its range says
        merge_page_ranges(
            rendered, [first, middle, OcrdRange(PageRange(first=5, last=7), last.path)], tmp_path / "x.pdf"
        )
    assert longer.value.code == "ocr.invalid_output"


class Heartbeats:
    def __init__(self) -> None:
        self.details: dict[str, Any] = {}

    def note(self, **details: Any) -> None:
        self.details.update(details)


def _checkpoints(tmp_path: Path) -> tuple[PageCheckpoints, Heartbeats]:
    run = RunScope(namespace="default", workflow_id="acme/scan", run_id=str(uuid.uuid4()))
    (folder := tmp_path / "checkpoints").mkdir()
    heartbeats = Heartbeats()
    return PageCheckpoints(run, PageRange(first=17, last=18), 1, folder, heartbeats), heartbeats


def test_the_worker_takes_only_well_formed_checkpoints_of_its_range_from_the_child(tmp_path: Path) -> None:
    checkpoints, heartbeats = _checkpoints(tmp_path)
    digest = "ab" * 32
    good = f"000002-{digest}.json"
    (checkpoints.folder / good).write_text("{}")
    (checkpoints.folder / f"000003-{digest}.json").write_text("{}")  # the range has 2 pages
    (checkpoints.folder / f".000001-{digest}.json.partial").write_text("{")  # not yet renamed into place
    (checkpoints.folder / f"000001-{digest}.json").symlink_to("/etc/passwd")
    (checkpoints.folder / f"000001-{'cd' * 32}.json").write_bytes(b"x" * (CHECKPOINT_MAX_BYTES + 1))
    assert checkpoints.new() == [good]
    ref = BlobRef(key=f"{ocr_checkpoints_prefix(checkpoints.run, 17, 18)}/a1-0-{good}", sha256=digest, size=2)
    checkpoints.kept(good, ref)
    assert checkpoints.new() == []  # stored once
    assert heartbeats.details == {"checkpoints": [{"name": good, "blob": ref.model_dump(mode="json")}]}


def test_the_next_attempt_takes_from_the_heartbeat_only_checkpoints_of_its_range(tmp_path: Path) -> None:
    checkpoints, _ = _checkpoints(tmp_path)
    digest = "ab" * 32
    name = f"000001-{digest}.json"
    ours = BlobRef(key=f"{ocr_checkpoints_prefix(checkpoints.run, 17, 18)}/a1-0-{name}", sha256=digest, size=2)
    other_range = ours.model_copy(update={"key": f"{ocr_checkpoints_prefix(checkpoints.run, 1, 16)}/a1-0-{name}"})
    details = {
        "checkpoints": [
            {"name": name, "blob": ours.model_dump(mode="json")},
            {"name": f"000002-{digest}.json", "blob": other_range.model_dump(mode="json")},
            {"name": "../../escape.json", "blob": ours.model_dump(mode="json")},
            {"name": f"000002-{digest}.json", "blob": {"key": "x"}},
            "not an entry",
        ]
    }
    assert checkpoints.named_in(details) == {name: ours}
    assert checkpoints.named_in({"checkpoints": "nothing"}) == {}
    assert checkpoints.named_in({}) == {}
