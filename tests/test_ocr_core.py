"""The OCR core on real files: OCRmyPDF in its child process, real Tesseract, poppler to read back.

Recognition is measured by counting the known words of `tests.fixtures.scans` in `pdftotext -raw` output.
Orientation is checked on pixels, independently of how OCRmyPDF corrected it (a /Rotate on the
page, or a re-rasterized upright page when deskewing): each output page is rendered with
`pdftoppm` (which applies /Rotate, as a viewer does) and must be portrait with its ink starting at
the top-left margin, where the scan generator puts the text block of an upright page. A page left
at 90 degrees renders landscape; a page left upside down has its ink at the bottom right.

Process-group checks find the OCR processes by their DOCJOBS_OCR_TAG and their session (tests/ocr_sessions.py).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import ocrmypdf
import pikepdf
import pytest
from PIL import Image
from reportlab.lib.pagesizes import LETTER
from reportlab.pdfgen.canvas import Canvas

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import OcrMode, OcrPolicy
from docjobs.pdf.images import image_to_pdf
from docjobs.pdf.inspect import inspect_pdf
from docjobs.pdf.ocr import OcrResult, ocrmypdf_args, run_ocr
from docjobs.pdf.ocr_process import CHILD_PLUGIN, ExitCode, OcrCanceled, exit_failure
from tests.fixtures.redact_samples import SSN, make_standard_font_as_is
from tests.fixtures.samples import make_encrypted_pdf, make_garbage, truncate_pdf
from tests.fixtures.scans import KNOWN_WORDS, make_scan_jpeg, make_scan_pdf, make_scan_png, make_scan_tiff, scan_words
from tests.ocr_sessions import call_processes

REPO = Path(__file__).resolve().parent.parent
JOBS = 2
SKIP = OcrPolicy(mode=OcrMode.SKIP)
FAST = OcrPolicy(mode=OcrMode.SKIP, rotate_pages=False, deskew=False)  # no orientation/deskew passes
HIDDEN_WORD = "zebraquartz"  # drawn invisibly (text render mode 3) in the born-digital fixture

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("tesseract", "gs", "pdftotext", "pdftoppm")),
    reason="needs tesseract, ghostscript and poppler-utils",
)


# --- helpers --------------------------------------------------------------------------------


def _policy(base: OcrPolicy, **changes: object) -> OcrPolicy:
    return OcrPolicy.model_validate({**base.model_dump(), **changes})


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _recall(expected: Sequence[str], text: str) -> float:
    found = Counter(_words(text)) & Counter(expected)
    return sum(found.values()) / len(expected)


def _pdftotext(pdf: Path) -> list[str]:
    result = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True)
    return result.stdout.split("\f")[:-1]


def _render(pdf: Path, page: int, dpi: int = 40) -> Image.Image:
    command = ["pdftoppm", "-gray", "-r", str(dpi), "-f", str(page), "-l", str(page), "-singlefile", str(pdf)]
    result = subprocess.run(command, capture_output=True, check=True)
    return Image.open(io.BytesIO(result.stdout)).convert("L")


def _upright(pdf: Path, page: int) -> bool:
    """Portrait, and the ink (the text block) starts at the top-left margin and ends above 60%."""
    image = _render(pdf, page)
    box = image.point(lambda value: 255 if value < 200 else 0).getbbox()
    assert box is not None, "the page renders blank"
    left, top, _, bottom = box
    return (
        image.height > image.width
        and left < 0.15 * image.width
        and top < 0.15 * image.height < bottom < (0.6 * image.height)
    )


def _wait_until_gone(tag: str, timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (left := call_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _text_pdf(path: Path, words: Sequence[str], *, hidden: str = HIDDEN_WORD) -> None:
    """A born-digital page: `words` in large Helvetica, plus `hidden` in invisible text (mode 3)."""
    canvas = Canvas(str(path), pagesize=LETTER, invariant=True)
    text = canvas.beginText(54, 720)
    text.setFont("Helvetica", 20)
    text.setLeading(30)
    for start in range(0, len(words), 6):
        text.textLine(" ".join(words[start : start + 6]))
    text.setTextRenderMode(3)
    text.textLine(hidden)
    canvas.drawText(text)
    canvas.showPage()
    canvas.save()


@dataclass
class Progress:
    calls: list[tuple[int, int]]

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


# --- the four-page scan: recognition, orientation, progress ----------------------------------


TRANSFORMS = ("upright", "rot90", "rot180", "skew3")


@dataclass
class ScanRun:
    words: list[list[str]]
    output: Path
    result: OcrResult
    progress: list[tuple[int, int]]
    seconds: float


@pytest.fixture(scope="module")
def scan_run(tmp_path_factory: pytest.TempPathFactory) -> ScanRun:
    tmp = tmp_path_factory.mktemp("scan4")
    words = scan_words(len(TRANSFORMS), 40, seed=11)
    make_scan_pdf(tmp / "scan.pdf", words, TRANSFORMS)
    progress = Progress([])
    started = time.monotonic()
    result = run_ocr(tmp / "scan.pdf", tmp / "out.pdf", SKIP, workdir=tmp, on_page=progress, jobs=JOBS)
    return ScanRun(words, tmp / "out.pdf", result, progress.calls, time.monotonic() - started)


def test_scan_words_are_found(scan_run: ScanRun) -> None:
    texts = _pdftotext(scan_run.output)
    assert len(texts) == 4
    per_page = [_recall(words, text) for words, text in zip(scan_run.words, texts, strict=True)]
    overall = sum(len(words) * recall for words, recall in zip(scan_run.words, per_page, strict=True)) / sum(
        map(len, scan_run.words)
    )
    assert overall >= 0.95, per_page
    assert min(per_page) >= 0.90, per_page
    assert scan_run.result.page_texts == tuple(texts)  # what the caller stores as the text blob
    assert scan_run.result.pages_ocred == (1, 2, 3, 4)
    assert not scan_run.result.nothing_to_do
    assert inspect_pdf(scan_run.output).page_count == 4


def test_rotated_scans_come_out_upright(scan_run: ScanRun, tmp_path: Path) -> None:
    source = tmp_path / "source.pdf"
    make_scan_pdf(source, scan_run.words, TRANSFORMS)
    # The check itself tells the transforms apart on the input...
    assert [_upright(source, page) for page in (1, 2, 3)] == [True, False, False]
    # ...and every page of the output is upright.
    assert [_upright(scan_run.output, page) for page in (1, 2, 3, 4)] == [True] * 4


def test_progress_is_reported_per_page(scan_run: ScanRun) -> None:
    done = [done for done, _ in scan_run.progress]
    assert done == sorted(set(done)), "pages_done only grows"
    assert {total for _, total in scan_run.progress} == {4}
    assert scan_run.progress[-1] == (4, 4)
    assert len(scan_run.progress) >= 2, "reported as pages finish, not only at the end"
    print(f"4-page scan: {scan_run.seconds:.1f} s with {JOBS} jobs")


# --- images -----------------------------------------------------------------------------------


def test_tiff_and_jpeg_scans_become_searchable(tmp_path: Path) -> None:
    words = scan_words(3, 30, seed=21)
    make_scan_tiff(tmp_path / "scan.tif", words[:2])
    info = image_to_pdf(tmp_path / "scan.tif", tmp_path / "tif.pdf")
    assert info.page_count == 2
    # PDF/A output keeps working with Debian's Ghostscript 10.0 (which OCRmyPDF refuses in skip mode).
    pdfa = _policy(FAST, output_type="pdfa")
    result = run_ocr(tmp_path / "tif.pdf", tmp_path / "tif.ocr.pdf", pdfa, workdir=tmp_path, jobs=JOBS)
    assert result.pages_ocred == (1, 2)
    for expected, text in zip(words[:2], _pdftotext(tmp_path / "tif.ocr.pdf"), strict=True):
        assert _recall(expected, text) >= 0.9
    with pikepdf.open(tmp_path / "tif.ocr.pdf") as pdf:
        assert pdf.open_metadata().pdfa_status.startswith("2")

    # Redo replaces that OCR layer rather than adding a second one (and drops --deskew, which
    # OCRmyPDF refuses with --redo-ocr).
    redo = OcrPolicy(mode=OcrMode.REDO, rotate_pages=False)
    result = run_ocr(tmp_path / "tif.ocr.pdf", tmp_path / "redo.pdf", redo, workdir=tmp_path, jobs=JOBS)
    assert result.pages_ocred == (1, 2)
    for expected, text in zip(words[:2], _pdftotext(tmp_path / "redo.pdf"), strict=True):
        assert _recall(expected, text) >= 0.9
        assert max(Counter(_words(text))[word] for word in expected) == 1, "each word once: one text layer"

    # Pixels stored turned 90 degrees counter-clockwise, with EXIF "turn 90 clockwise to view":
    # OCR without its own orientation detection reads it only if the orientation was honoured.
    make_scan_jpeg(tmp_path / "scan.jpg", words[2:], ["rot90"], exif_orientation=6)
    assert image_to_pdf(tmp_path / "scan.jpg", tmp_path / "jpg.pdf").page_count == 1
    run_ocr(tmp_path / "jpg.pdf", tmp_path / "jpg.ocr.pdf", FAST, workdir=tmp_path, jobs=JOBS)
    (text,) = _pdftotext(tmp_path / "jpg.ocr.pdf")
    assert _recall(words[2], text) >= 0.9
    assert _upright(tmp_path / "jpg.ocr.pdf", 1)


def test_image_page_size_follows_dpi(tmp_path: Path) -> None:
    words = scan_words(1, 10, seed=3)[0]
    make_scan_png(tmp_path / "nodpi.png", [words], record_dpi=False)  # assumed 300 dpi: letter
    make_scan_png(tmp_path / "150.png", [words], dpi=150)  # 1275 x 1650 px at 150 dpi: letter
    make_scan_tiff(tmp_path / "two.tif", [words, words], ["upright", "rot90"])
    for name, boxes in (
        ("nodpi.png", [[0, 0, 612, 792]]),
        ("150.png", [[0, 0, 612, 792]]),
        ("two.tif", [[0, 0, 612, 792], [0, 0, 792, 612]]),
    ):
        image_to_pdf(tmp_path / name, tmp_path / f"{name}.pdf")
        with pikepdf.open(tmp_path / f"{name}.pdf") as pdf:
            assert [[round(float(v)) for v in page.mediabox] for page in pdf.pages] == boxes, name
    with pytest.raises(DocJobError) as caught:
        image_to_pdf(tmp_path / "two.tif", tmp_path / "out.pdf", max_pages=1)
    assert caught.value.code == "input.too_large"


def test_bad_images_are_rejected(tmp_path: Path) -> None:
    make_scan_jpeg(tmp_path / "good.jpg", [["word"]])
    data = (tmp_path / "good.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    make_garbage(tmp_path / "garbage.bin")
    cases = {"cut.jpg": "input.malformed", "junk.png": "input.malformed", "garbage.bin": "input.unsupported"}
    make_scan_pdf(tmp_path / "doc.pdf", [["word"]])
    cases["doc.pdf"] = "input.unsupported"  # a PDF is not an image
    for name, code in cases.items():
        with pytest.raises(DocJobError) as caught:
            image_to_pdf(tmp_path / name, tmp_path / "out.pdf")
        assert caught.value.code == code, name
        assert name not in str(caught.value)


# --- existing text: skip keeps it, force replaces it ---------------------------------------


def test_skip_keeps_existing_text_and_does_nothing(tmp_path: Path) -> None:
    words = list(KNOWN_WORDS[:24])
    _text_pdf(tmp_path / "text.pdf", words)
    make_encrypted_pdf(tmp_path / "text.pdf", tmp_path / "locked.pdf", user_password="", owner_password="owner")
    for name in ("text.pdf", "locked.pdf"):  # the permissions-only one opens without a password
        started = time.monotonic()
        progress = Progress([])
        result = run_ocr(tmp_path / name, tmp_path / "out.pdf", SKIP, workdir=tmp_path, on_page=progress)
        assert result.nothing_to_do and result.pages_ocred == ()
        assert time.monotonic() - started < 10, "no OCR is run"
        (text,) = _pdftotext(tmp_path / "out.pdf")
        assert _recall(words, text) == 1.0 and HIDDEN_WORD in text
        assert result.page_texts == (text,)
        assert progress.calls == [(1, 1)]
        with pikepdf.open(tmp_path / "out.pdf") as pdf:
            assert not pdf.is_encrypted


def test_force_replaces_the_text_layer(tmp_path: Path) -> None:
    words = list(KNOWN_WORDS[100:124])
    _text_pdf(tmp_path / "text.pdf", words)
    (before,) = _pdftotext(tmp_path / "text.pdf")
    assert HIDDEN_WORD in before
    force = OcrPolicy(mode=OcrMode.FORCE, rotate_pages=False, deskew=False)
    result = run_ocr(tmp_path / "text.pdf", tmp_path / "out.pdf", force, workdir=tmp_path, jobs=JOBS)
    (after,) = _pdftotext(tmp_path / "out.pdf")
    assert HIDDEN_WORD not in after, "the invisible text is gone: the page was rasterized and re-OCR'd"
    assert _recall(words, after) >= 0.9, "the visible words were recognised again"
    assert result.pages_ocred == (1,) and not result.nothing_to_do


# --- failures -----------------------------------------------------------------------------


def test_tesseract_timeout_names_the_pages(tmp_path: Path) -> None:
    make_scan_pdf(tmp_path / "scan.pdf", scan_words(2, 20, seed=5))
    policy = _policy(FAST, tesseract_timeout=0.001)
    with pytest.raises(DocJobError) as caught:
        run_ocr(tmp_path / "scan.pdf", tmp_path / "out.pdf", policy, workdir=tmp_path, jobs=JOBS)
    assert caught.value.code == "ocr.page_timeout"
    assert caught.value.message == "no text after OCR on pages 1, 2"
    assert not (tmp_path / "out.pdf").exists()


def test_blank_page_is_not_a_timeout(tmp_path: Path) -> None:
    Image.new("L", (2550, 3300), 255).save(tmp_path / "blank.png", dpi=(300, 300))
    image_to_pdf(tmp_path / "blank.png", tmp_path / "blank.pdf")
    result = run_ocr(tmp_path / "blank.pdf", tmp_path / "out.pdf", FAST, workdir=tmp_path, jobs=JOBS)
    assert result.pages_ocred == (1,) and result.pages_blank == (1,)
    assert result.page_texts == ("",)


def test_bad_inputs_fail_with_stable_codes(tmp_path: Path) -> None:
    _text_pdf(tmp_path / "text.pdf", ["alpha"])
    make_encrypted_pdf(tmp_path / "text.pdf", tmp_path / "secret.pdf", user_password="pw", owner_password="owner")
    make_garbage(tmp_path / "garbage.pdf")
    truncate_pdf(tmp_path / "text.pdf", tmp_path / "cut.pdf")
    cases = {"secret.pdf": "input.encrypted", "garbage.pdf": "input.unsupported", "cut.pdf": "input.malformed"}
    for name, code in cases.items():
        with pytest.raises(DocJobError) as caught:
            run_ocr(tmp_path / name, tmp_path / "out.pdf", SKIP, workdir=tmp_path)
        assert caught.value.code == code, name
    with pytest.raises(ValueError):
        run_ocr(tmp_path / "text.pdf", tmp_path / "out.pdf", OcrPolicy(), workdir=tmp_path)  # mode off
    assert not (tmp_path / "out.pdf").exists()


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (ExitCode.encrypted_pdf, "input.encrypted"),
        (ExitCode.input_file, "input.malformed"),
        (ExitCode.missing_dependency, "tool.missing"),
        (ExitCode.invalid_output_pdf, "ocr.invalid_output"),
        (ExitCode.pdfa_conversion_failed, "ocr.invalid_output"),
        (ExitCode.child_process_error, "ocr.failed"),
        (ExitCode.other_error, "ocr.failed"),
        (ExitCode.bad_args, "ocr.failed"),
        (99, "ocr.failed"),
        (-signal.SIGKILL, "ocr.failed"),
    ],
)
def test_exit_status_mapping(status: int, code: str) -> None:
    assert exit_failure(status).code == code


def test_exit_codes_match_ocrmypdf() -> None:
    assert {member.name: int(member) for member in ExitCode} == {
        member.name: int(member) for member in ocrmypdf.ExitCode
    }


def test_policy_to_options() -> None:
    args = ocrmypdf_args(OcrPolicy(mode=OcrMode.REDO, languages=("eng", "deu")), jobs=3)
    assert "--redo-ocr" in args and "--deskew" not in args  # OCRmyPDF rejects deskew with redo
    assert args[args.index("--language") + 1] == "eng+deu" and args[args.index("--jobs") + 1] == "3"
    args = ocrmypdf_args(OcrPolicy.model_validate({"mode": "force", "output_type": "pdfa", "tesseract_timeout": 7.5}))
    assert "--force-ocr" in args and "--deskew" in args and "--rotate-pages" in args
    assert args[args.index("--pdfa-backend") + 1] == "auto"
    assert args[args.index("--tesseract-timeout") + 1] == "7.5"
    policy = {"mode": "skip", "output_type": "pdfa", "rotate_pages": False, "deskew": False}
    args = ocrmypdf_args(OcrPolicy.model_validate(policy))
    assert "--skip-text" in args and args[args.index("--pdfa-backend") + 1] == "internal"
    assert "--rotate-pages" not in args and "--deskew" not in args
    with pytest.raises(ValueError):
        ocrmypdf_args(OcrPolicy(mode=OcrMode.SKIP, languages=("--output-type",)))


# --- cancellation and orphans ------------------------------------------------------------


THREE_PAGES = (scan_words(3, 40, seed=7), ["rot90", "rot180", "skew3"])  # turned and askew


@pytest.fixture
def three_page_scan(tmp_path: Path) -> Iterator[Path]:
    """At 300 dpi: each page keeps Tesseract busy long enough to be caught running."""
    make_scan_pdf(tmp_path / "scan.pdf", *THREE_PAGES)
    yield tmp_path / "scan.pdf"


@pytest.fixture
def small_three_page_scan(tmp_path: Path) -> Iterator[Path]:
    """The same pages at 150 dpi, a quarter of the pixels: for the tests that read them whole and check how, not
    what (the text is checked at 300 dpi above)."""
    make_scan_pdf(tmp_path / "scan.pdf", *THREE_PAGES, dpi=150)
    yield tmp_path / "scan.pdf"


def _stop_when_tesseract_runs(tag: str, seen: dict[int, str], limit: float = 30.0) -> Callable[[], bool]:
    """A should_stop that fires once a Tesseract of this job is running (so grandchildren exist)."""
    started = time.monotonic()

    def should_stop() -> bool:
        processes = call_processes(tag)
        seen.update(processes)
        return "tesseract" in processes.values() or time.monotonic() - started > limit

    return should_stop


def test_should_stop_kills_the_whole_process_group(three_page_scan: Path, tmp_path: Path) -> None:
    tag = f"test-stop-{os.getpid()}-{time.monotonic_ns()}"
    seen: dict[int, str] = {}
    stop = _stop_when_tesseract_runs(tag, seen)
    fired: list[float] = []

    def should_stop() -> bool:
        if stop():
            fired.append(time.monotonic())
            return True
        return False

    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(OcrCanceled):
        run_ocr(three_page_scan, tmp_path / "out.pdf", SKIP, workdir=workdir, should_stop=should_stop, tag=tag)
    assert fired, "stopped by should_stop"
    assert "tesseract" in seen.values(), f"a Tesseract grandchild was running when stopped: {seen}"
    assert set(seen.values()) - {"tesseract", "gs"}, f"OCRmyPDF itself (found by its session): {seen}"
    left = _wait_until_gone(tag, timeout=max(0.0, 5 - (time.monotonic() - fired[0])))
    assert not left, f"still running 5 s after the stop: {left}"
    assert not (tmp_path / "out.pdf").exists()
    assert list(workdir.iterdir()) == [], "the temporary files are gone"


def test_ocrmypdf_works_in_the_calls_folder_whatever_temp_folder_the_caller_found(
    small_three_page_scan: Path, tmp_path: Path
) -> None:
    """OCRmyPDF runs in a fork of a caller that runs no other thread (a document child; here a fresh interpreter,
    as a test process has threads): its work folder is the call's (TMPDIR), not the temporary folder the caller's
    `tempfile` had settled on, which a fork would otherwise keep (and a confined child may not write)."""
    elsewhere, workdir = tmp_path / "elsewhere", tmp_path / "work"
    elsewhere.mkdir()
    workdir.mkdir()
    script = (
        "import json, sys, tempfile, threading\n"
        "from pathlib import Path\n"
        "from docjobs.domain.models import OcrMode, OcrPolicy\n"
        "from docjobs.pdf.ocr import run_ocr\n"
        "scan, out, workdir, elsewhere = map(Path, sys.argv[1:5])\n"
        "tempfile.tempdir = str(elsewhere)\n"
        "seen_inside, seen_elsewhere = [], []\n"
        "def look(done, total):\n"
        "    seen_elsewhere.extend(map(str, elsewhere.iterdir()))\n"
        "    seen_inside.extend(map(str, workdir.glob('ocr-*/ocrmypdf.io.*')))\n"
        "alone = threading.active_count() == 1\n"
        "run_ocr(scan, out, OcrPolicy(mode=OcrMode.SKIP), workdir=workdir, on_page=look)\n"
        "print(json.dumps([alone, seen_inside, seen_elsewhere]))\n"
    )
    args = [str(small_three_page_scan), str(tmp_path / "out.pdf"), str(workdir), str(elsewhere)]
    read = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    alone, seen_inside, seen_elsewhere = json.loads(read.stdout.splitlines()[-1])
    assert alone, "the caller ran no other thread: OCRmyPDF was a fork"
    assert seen_inside, "OCRmyPDF's work folder was in the call's own while pages finished"
    assert seen_elsewhere == []


def test_a_caller_with_other_threads_gets_ocrmypdf_as_a_new_interpreter(tmp_path: Path) -> None:
    """A fork keeps the locks the caller's other threads held. Here one is blocked writing to the stream of a root
    logging handler (a pipe nobody reads) and holds that stream's lock; OCRmyPDF logs through the root logger, and
    in a fork it waited for that lock forever (a test process hung so in CI, whatever it held). A caller with other
    threads gets OCRmyPDF as a new interpreter, which knows nothing of them."""
    make_scan_pdf(scan := tmp_path / "scan.pdf", scan_words(1, 20, seed=3))
    read_end, write_end = os.pipe()
    stream = open(write_end, "w", encoding="ascii")  # noqa: SIM115 - closed below, once the writer is unblocked
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    writer = threading.Thread(target=stream.write, args=("x" * (1 << 22),), daemon=True)
    writer.start()
    try:
        while select.select([], [write_end], [], 0)[1]:  # until the pipe is full: the writer holds the lock
            time.sleep(0.01)
        result = run_ocr(scan, tmp_path / "out.pdf", SKIP, workdir=tmp_path, jobs=1)
    finally:
        root.removeHandler(handler)
        while writer.is_alive():  # drained until the writer is done (a blocking read could outwait its last byte)
            if select.select([read_end], [], [], 0.1)[0]:
                os.read(read_end, 1 << 20)
        stream.close()
        os.close(read_end)
    assert result.pages_ocred == (1,)


def test_the_document_zygote_has_imported_what_an_ocrmypdf_call_imports(tmp_path: Path) -> None:
    """OCRmyPDF runs in a fork of the document child: every OCRmyPDF module a call imports, the zygote imported
    already (the OCR queue's: `stage_work.PRELOAD` and `PRELOAD_FOR["ocr"]`), so no call pays for it. A new OCRmyPDF
    that moves its modules fails here."""
    make_scan_pdf(scan := tmp_path / "scan.pdf", scan_words(1, 20, seed=3))
    argv = ["--plugin", str(CHILD_PLUGIN), *ocrmypdf_args(SKIP, jobs=1), str(scan), str(tmp_path / "out.pdf")]
    script = (
        "import importlib, json, sys\n"
        "from docjobs.isolation import stage_work\n"
        "for name in (*stage_work.PRELOAD, *stage_work.PRELOAD_FOR['ocr']): importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        "from ocrmypdf.__main__ import run\n"
        "status = run(json.loads(sys.argv[1]))\n"
        "new = sorted(m for m in set(sys.modules) - before if m.startswith('ocrmypdf'))\n"
        "open(sys.argv[2], 'w').write(json.dumps([status, new]))\n"  # OCRmyPDF keeps stdout for a PDF
    )
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-c", script, json.dumps(argv), str(report)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path), "DOCJOBS_OCR_EVENT_FD": ""},
        capture_output=True,
        check=True,
    )
    status, imported = json.loads(report.read_text())
    assert (status, imported) == (0, [])


def test_ocrmypdf_changes_pdfminer_only_in_the_fork_that_runs_it(tmp_path: Path) -> None:
    """Importing OCRmyPDF makes pdfminer read no text in a standard-14 font used as is (no /Encoding): the document
    zygote of the OCR queue imports OCRmyPDF, and its children read text with pdfminer, as redaction locates matches
    with it (the general queue's zygote never imports OCRmyPDF). In a process that imported what the OCR queue's
    zygote imports, pdfminer reads that text; in OCRmyPDF's fork, once its changes are back, it reads none, as OCRmyPDF
    expects. The first half failed in every document child since the zygote imported OCRmyPDF: such a redaction
    was quarantined (tests/test_redact_jobs.py, fixture `standard_font_as_is`)."""
    make_standard_font_as_is(pdf := tmp_path / "as-is.pdf")
    script = (
        "import importlib, json, sys\n"
        "from pdfminer.high_level import extract_text\n"
        "from docjobs.isolation import stage_work\n"
        "for name in (*stage_work.PRELOAD, *stage_work.PRELOAD_FOR['ocr']): importlib.import_module(name)\n"
        "in_the_child = extract_text(sys.argv[1])\n"
        "from docjobs.pdf.ocrmypdf_import import use_ocrmypdf_patches\n"
        "use_ocrmypdf_patches()\n"
        "print(json.dumps([in_the_child, extract_text(sys.argv[1])]))\n"
    )
    read = subprocess.run(
        [sys.executable, "-c", script, str(pdf)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    in_the_child, in_the_fork = json.loads(read.stdout)
    assert SSN in in_the_child and SSN not in in_the_fork


def _tesseract_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, after: str | None = None) -> Path:
    """A wrapper first on PATH that appends `line` (shell words) to the returned file at every Tesseract call, then
    runs the real Tesseract (and appends `after` once it ended)."""
    real = shutil.which("tesseract")
    assert real is not None
    record, wrappers = tmp_path / "tesseract-calls.txt", tmp_path / "bin"
    wrappers.mkdir()
    wrapper = wrappers / "tesseract"
    run = f'exec {real} "$@"' if after is None else f'{real} "$@"; status=$?\necho {after} >> {record}\nexit $status'
    wrapper.write_text(f"#!/bin/sh\necho {line} >> {record}\n{run}\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    return record


def test_tesseract_runs_one_thread_a_page_even_on_a_one_page_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left to OCRmyPDF, a 1-page scan's Tesseract gets 2 OpenMP threads on 2 jobs and its other calls OpenMP's
    default of one a core; spinning, they starve beside other OCR (docjobs/pdf/ocr.py, TESSERACT_THREADS). Every
    Tesseract call is seen through a wrapper first on PATH that records the limit it was given, then runs the real
    one (without docjobs' limit the record holds `2` and an empty one)."""
    record = _tesseract_seen(tmp_path, monkeypatch, '"OMP_THREAD_LIMIT=$OMP_THREAD_LIMIT"')
    monkeypatch.delenv("OMP_THREAD_LIMIT", raising=False)
    make_scan_pdf(tmp_path / "one.pdf", scan_words(1, 40, seed=3))
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = run_ocr(tmp_path / "one.pdf", tmp_path / "out.pdf", SKIP, workdir=workdir, jobs=2)
    assert result.pages_ocred == (1,)
    assert set(record.read_text().splitlines()) == {"OMP_THREAD_LIMIT=1"}


def test_checkpoints_let_the_next_attempt_skip_the_pages_already_read(
    small_three_page_scan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page's words are left as a checkpoint as soon as Tesseract read them; a later run given them reads only
    the pages without one (the wrapper counts Tesseract's hOCR calls: one a page read), with the same text, and a
    checkpoint made for another image of the page is not used. The pages are turned and askew: the images
    Tesseract reads come out of the same rotation and deskew each time."""
    record = _tesseract_seen(tmp_path, monkeypatch, '"$@"')
    checkpoints, workdir = tmp_path / "checkpoints", tmp_path / "work"
    checkpoints.mkdir()
    workdir.mkdir()
    first = run_ocr(
        small_three_page_scan, tmp_path / "first.pdf", SKIP, workdir=workdir, jobs=JOBS, checkpoints=checkpoints
    )
    saved = sorted(path.name for path in checkpoints.iterdir())
    assert [name[:7] for name in saved] == ["000001-", "000002-", "000003-"], saved  # renamed into place whole
    assert first.pages_resumed == ()
    assert _hocr_calls(record) == 3

    resume = tmp_path / "resume"
    resume.mkdir()
    for name in saved[:2]:  # pages 1 and 2 were read before the attempt was lost
        shutil.copy(checkpoints / name, resume / name)
    stale = saved[2].replace(saved[2][7:71], "0" * 64)  # page 3 read from another image
    shutil.copy(checkpoints / saved[2], resume / stale)
    second = run_ocr(small_three_page_scan, tmp_path / "second.pdf", SKIP, workdir=workdir, jobs=JOBS, resume=resume)
    assert second.pages_resumed == (1, 2)
    assert second.pages_ocred == (1, 2, 3)
    assert _hocr_calls(record) == 3 + 1  # only page 3 was read again
    assert second.page_texts == first.page_texts


def test_a_cpu_share_of_one_runs_one_tesseract_at_a_time(
    small_three_page_scan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three pages on two jobs, with a share file saying 1: the wrapper's start and end marks never show two
    Tesseract calls at once (without the share, the two jobs read two pages at once)."""
    record = _tesseract_seen(tmp_path, monkeypatch, "start", after="end")
    share = tmp_path / "cpu-share"
    share.write_text("1\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = run_ocr(small_three_page_scan, tmp_path / "out.pdf", SKIP, workdir=workdir, jobs=2, cpu_share=share)
    assert result.pages_ocred == (1, 2, 3)
    running, most = 0, 0
    for mark in record.read_text().split():
        running += 1 if mark == "start" else -1
        most = max(most, running)
    assert most == 1 and running == 0


def _hocr_calls(record: Path) -> int:
    return sum(" hocr" in line for line in record.read_text().splitlines())


def test_dead_parent_leaves_no_ocr_behind(three_page_scan: Path, tmp_path: Path) -> None:
    """A worker SIGKILLed mid-OCR (no finally runs): the child's watchdog kills its own group."""
    tag = f"test-orphan-{os.getpid()}-{time.monotonic_ns()}"
    script = (
        "import sys; from pathlib import Path;"
        "from docjobs.domain.models import OcrPolicy, OcrMode; from docjobs.pdf.ocr import run_ocr;"
        "run_ocr(Path(sys.argv[1]), Path(sys.argv[2]), OcrPolicy(mode=OcrMode.SKIP), workdir=Path(sys.argv[3]),"
        " tag=sys.argv[4])"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(three_page_scan), str(tmp_path / "out.pdf"), str(tmp_path), tag],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        seen: dict[int, str] = {}
        wait = _stop_when_tesseract_runs(tag, seen)
        while not wait():
            assert parent.poll() is None, "the OCR finished before it could be interrupted"
            time.sleep(0.1)
        assert "tesseract" in seen.values(), seen
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    left = _wait_until_gone(tag, timeout=5)
    assert not left, f"orphaned OCR processes: {left}"
