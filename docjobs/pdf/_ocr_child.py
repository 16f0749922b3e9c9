"""OCRmyPDF plugin loaded (by file path) into the OCR child process started by `docjobs.pdf.ocr_process`.

It reports to the parent as JSON lines on a private pipe whose descriptor is in the environment
variable DOCJOBS_OCR_EVENT_FD (OCRmyPDF points file descriptor 1 at stderr, so stdout cannot be
used). Events carry page numbers and counts only, never text or file names:

* ``{"event": "progress", "desc": "OCR", "done": 2.5, "total": 4}``: a progress bar update
  (OCRmyPDF's ``get_progressbar_class`` hook). The per-page bar advances by 0.5 after a page's OCR
  and by 0.5 after its text layer is grafted; skipped pages advance it too.
* ``{"event": "ocr_page", "page": 3}``: 1-based page 3 is rasterized and handed to OCR
  (``filter_ocr_image`` hook, called only for pages that OCRmyPDF decided to OCR).
* ``{"event": "page_timeout", "page": 3}``: Tesseract ran out of time on page 3, so OCRmyPDF
  kept the page without text (seen as OCRmyPDF's log warning for it).
* ``{"event": "deskew", "page": 3, "angle": -7.0, "correction": 7.0}``: page 3 was found askew by
  `angle` degrees (positive: turned counter-clockwise) and turned by `correction` degrees before OCR.
* ``{"event": "resumed", "page": 3}``: page 3's words were taken from an earlier attempt's checkpoint, not read
  again (see below).

Checkpoints: with DOCJOBS_OCR_CHECKPOINTS set to a folder, every page Tesseract read leaves its words there, as
``<page>-<sha256 of the OCR image>.json`` (``{"hocr": ..., "text": ...}``, renamed into place whole); with
DOCJOBS_OCR_RESUME set to a folder of such files from an earlier attempt, a page whose OCR image has the digest
named there takes its words from the file instead of running Tesseract. The digest ties the words to the exact
image they were read from: a page rasterized, turned or cleaned differently is read again.

CPU share: with DOCJOBS_OCR_SHARE set to a file holding a number n (the worker rewrites it as the page ranges it
runs start and end), at most n of this run's Tesseract calls run at once (each holds a lock on one of n slot files
beside it while it runs). OCRmyPDF then runs as many pages at once as the worker has cores: while other ranges run
beside this one, they share the cores; once it runs alone, it has them all.

The image handed to Tesseract (never the visible page) is despeckled with a 3x3 median when it is
scanned at DESPECKLE_MIN_DPI or more: specks in the gaps otherwise make Tesseract run words together.
When DOCJOBS_OCR_CONDITION is set (the retry of pages that came out without text), it is scaled up to
CONDITION_DPI first (its DPI scaled along, so the text layer stays in place) and its contrast stretched.

With ``--deskew``, the skew is our own projection-profile estimate (`deskew.py`, loaded by path) when
it is confident, else Tesseract's (OCRmyPDF's default, which often finds none on a page a few
degrees askew): the OCR engine is Tesseract with that one method replaced.

A watchdog thread kills the whole process group (OCRmyPDF and its Tesseract/Ghostscript children)
if the parent process disappears, so a worker that is SIGKILLed leaves no OCR running behind it.

This module is loaded standalone by OCRmyPDF, so it imports nothing from docjobs (`deskew.py` and `ocr_env.py`, the
names of the environment variables above, are loaded from beside it by file path).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from ocrmypdf import OcrEngine, OcrOptions, hookimpl
from ocrmypdf.builtin_plugins.tesseract_ocr import TesseractOcrEngine
from PIL import Image, ImageFilter, ImageOps

SHARE_POLL_SECONDS = 0.05
CONDITION_DPI = 400.0
DESPECKLE_MIN_DPI = 250.0  # below this a 3x3 median can eat thin strokes
CONDITION_MAX_SIDE = 12000  # pixels: far inside Tesseract's 32767
_PAGE_PROGRESS_DESCS = ("OCR", "Image processing")
_TIMEOUT_MESSAGE = "took too long to OCR"  # OCRmyPDF's warning when Tesseract times out on a page

_DESKEW_MODULE = "docjobs_ocr_deskew"
_ENV_MODULE = "docjobs_ocr_env"


def _load_beside(name: str, file_name: str) -> ModuleType:
    """A module of docjobs/pdf loaded by its file path (this plugin imports nothing from docjobs)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file_name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


_env = _load_beside(_ENV_MODULE, "ocr_env.py")  # the names the worker's side sets (docjobs/pdf/ocr_process.py)
EVENT_FD_ENV: str = _env.EVENT_FD_ENV
PARENT_PID_ENV: str = _env.PARENT_PID_ENV
CONDITION_ENV: str = _env.CONDITION_ENV
CHECKPOINTS_ENV: str = _env.CHECKPOINTS_ENV
RESUME_ENV: str = _env.RESUME_ENV
SHARE_ENV: str = _env.SHARE_ENV

_lock = threading.Lock()
_event_fd: int | None = int(os.environ[EVENT_FD_ENV]) if os.environ.get(EVENT_FD_ENV) else None


def _emit(**event: object) -> None:
    if _event_fd is None:
        return
    line = json.dumps(event, separators=(",", ":")).encode() + b"\n"  # far below PIPE_BUF: one write
    with _lock:
        try:
            os.write(_event_fd, line)
        except OSError:
            _kill_own_group()  # the parent closed its end: it is gone or has given up on us


def _kill_own_group() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:  # re-parented: the process that started us has died
            _kill_own_group()
        time.sleep(0.5)


if os.environ.get(PARENT_PID_ENV):
    threading.Thread(
        target=_watch_parent, args=(int(os.environ[PARENT_PID_ENV]),), name="docjobs-parent-watch", daemon=True
    ).start()


class JsonProgressBar:
    """OCRmyPDF's ProgressBar protocol, reporting to the parent (never to the terminal)."""

    def __init__(
        self,
        *,
        total: float | None = None,
        desc: str | None = None,
        unit: str | None = None,
        disable: bool = False,  # OCRmyPDF disables bars when quiet; this one reports regardless
        **kwargs: Any,
    ) -> None:
        self.total = total
        self.desc = desc
        self.done = 0.0

    def __enter__(self) -> JsonProgressBar:
        self._report()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        return None  # exceptions propagate

    def update(self, n: float = 1, *, completed: float | None = None) -> None:
        self.done = completed if completed is not None else self.done + (1 if n is None else n)
        self._report()

    def _report(self) -> None:
        if self.desc in _PAGE_PROGRESS_DESCS:
            _emit(event="progress", desc=self.desc, done=self.done, total=self.total)


class _TimeoutWatch(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            if _TIMEOUT_MESSAGE in str(record.msg):
                page = getattr(record, "pageno", None)
                number = int(page) if isinstance(page, int | str) and str(page).strip().isdigit() else None
                _emit(event="page_timeout", page=number)
        except Exception:  # noqa: BLE001 - a log handler must never break the pipeline
            pass


_timeout_watch = _TimeoutWatch(level=logging.WARNING)


@hookimpl
def get_progressbar_class() -> type[JsonProgressBar]:
    return JsonProgressBar


@hookimpl
def check_options(options: Any) -> None:
    # Called after OCRmyPDF configured logging; attach to its own logger so the handler sees records
    # before the root console handler's filter rewrites `pageno` into a string.
    logger = logging.getLogger("ocrmypdf")
    if _timeout_watch not in logger.handlers:
        logger.addHandler(_timeout_watch)


@hookimpl
def filter_ocr_image(page: Any, image: Image.Image) -> Image.Image | None:
    _emit(event="ocr_page", page=int(page.pageno) + 1)
    dpi_x, dpi_y = (float(value) for value in image.info.get("dpi", (0.0, 0.0)))
    if os.environ.get(CONDITION_ENV) and min(dpi_x, dpi_y) > 0:
        return _condition(image, dpi_x, dpi_y)
    if min(dpi_x, dpi_y) >= DESPECKLE_MIN_DPI:
        return _despeckle(image)
    return None  # leave the image alone and let the other plugins (Tesseract's downsampling) run


def _despeckle(image: Image.Image) -> Image.Image:
    cleaned = image.convert("L").filter(ImageFilter.MedianFilter(3))
    cleaned.info["dpi"] = image.info["dpi"]
    return cleaned


def _condition(image: Image.Image, dpi_x: float, dpi_y: float) -> Image.Image:
    gray = image.convert("L")
    scale = min(max(1.0, CONDITION_DPI / min(dpi_x, dpi_y)), CONDITION_MAX_SIDE / max(gray.size))
    if scale > 1.0:
        gray = gray.resize((round(gray.width * scale), round(gray.height * scale)), Image.Resampling.LANCZOS)
    gray = ImageOps.autocontrast(gray.filter(ImageFilter.MedianFilter(3)), cutoff=1)
    gray.info["dpi"] = (dpi_x * gray.width / image.width, dpi_y * gray.height / image.height)
    return gray


_deskew = _load_beside(_DESKEW_MODULE, "deskew.py")


def _page_of(image_file: Path) -> int | None:
    """The 1-based page of an OCRmyPDF page work file (named ``000003_...``)."""
    prefix = image_file.name[:6]
    return int(prefix) if prefix.isdigit() else None


def _checkpoint_name(page: int, image: Path) -> str:
    return f"{page:06d}-{hashlib.sha256(image.read_bytes()).hexdigest()}.json"


def _resumed(name: str, output_hocr: Path, output_text: Path) -> bool:
    """Whether an earlier attempt's checkpoint `name` gave the page's words (written to the outputs)."""
    folder = os.environ.get(RESUME_ENV)
    if not folder:
        return False
    try:
        saved = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        hocr, text = saved["hocr"], saved["text"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # none, or unreadable: read the page again
    if not isinstance(hocr, str) or not isinstance(text, str):
        return False
    output_hocr.write_text(hocr, encoding="utf-8")
    output_text.write_text(text, encoding="utf-8")
    return True


def _save_checkpoint(name: str, output_hocr: Path, output_text: Path) -> None:
    folder = os.environ.get(CHECKPOINTS_ENV)
    if not folder:
        return
    try:
        words = {"hocr": output_hocr.read_text(encoding="utf-8"), "text": output_text.read_text(encoding="utf-8")}
        partial = Path(folder) / f".{name}.partial"
        partial.write_text(json.dumps(words), encoding="utf-8")
        partial.replace(Path(folder) / name)  # whole or absent: the worker may take it at any moment
    except (OSError, ValueError):
        pass  # a checkpoint is a saving, never a condition of the page's OCR


def _shared_cores() -> int:
    try:
        return max(1, int(Path(os.environ[SHARE_ENV]).read_text().strip()))
    except (KeyError, OSError, ValueError):
        return 1  # unreadable while rewritten, or gone: one at a time until it reads again


@contextlib.contextmanager
def _cpu_slot() -> Iterator[None]:
    """Hold one of the shared cores for a Tesseract call (see the module's docstring); without a share, run."""
    if not os.environ.get(SHARE_ENV):
        yield
        return
    slots = Path(f"{os.environ[SHARE_ENV]}.slots")
    slots.mkdir(exist_ok=True)
    while True:
        for index in range(_shared_cores()):
            fd = os.open(slots / str(index), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield
            finally:
                os.close(fd)  # releases the lock (so does this process's death)
            return
        time.sleep(SHARE_POLL_SECONDS)


class LevelingTesseract(TesseractOcrEngine):
    """Tesseract, with the skew measured by projection profiles when that measure is confident, and the words of
    a page kept as a checkpoint (or taken from one)."""

    @staticmethod
    def generate_hocr(input_file: Path, output_hocr: Path, output_text: Path, options: OcrOptions) -> None:
        page = _page_of(Path(input_file))
        resumable = os.environ.get(CHECKPOINTS_ENV) or os.environ.get(RESUME_ENV)
        name = _checkpoint_name(page, Path(input_file)) if page is not None and resumable else None
        if name is not None and _resumed(name, Path(output_hocr), Path(output_text)):
            _emit(event="resumed", page=page)
            return
        with _cpu_slot():
            TesseractOcrEngine.generate_hocr(input_file, output_hocr, output_text, options)  # type: ignore[no-untyped-call]
        if name is not None:
            _save_checkpoint(name, Path(output_hocr), Path(output_text))

    @staticmethod
    def get_orientation(input_file: Path, options: OcrOptions) -> Any:
        with _cpu_slot():
            return TesseractOcrEngine.get_orientation(input_file, options)  # type: ignore[no-untyped-call]

    @staticmethod
    def get_deskew(input_file: Path, options: OcrOptions) -> float:
        with Image.open(input_file) as image:
            estimate = _deskew.estimate_skew(image)
        if estimate.confident:
            angle = estimate.skew
            correction = estimate.correction if abs(estimate.correction) >= _deskew.MIN_CORRECTION else 0.0
        else:
            with _cpu_slot():
                correction = float(TesseractOcrEngine.get_deskew(input_file, options))
            angle = -correction
        if correction:
            _emit(event="deskew", page=_page_of(Path(input_file)), angle=round(angle, 2), correction=correction)
        return correction


@hookimpl
def get_ocr_engine(options: OcrOptions | None) -> OcrEngine | None:
    if options is not None and getattr(options, "ocr_engine", "auto") not in ("auto", "tesseract"):
        return None
    return LevelingTesseract()
