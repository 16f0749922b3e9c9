"""OCRmyPDF plugin loaded (by file path) into the OCR child process started by `docjobs.pdf.ocr`.

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

A watchdog thread kills the whole process group (OCRmyPDF and its Tesseract/Ghostscript children)
if the parent process disappears, so a worker that is SIGKILLed leaves no OCR running behind it.

This module is loaded standalone by OCRmyPDF, so it imports nothing from docjobs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from types import TracebackType
from typing import Any

from ocrmypdf import hookimpl

EVENT_FD_ENV = "DOCJOBS_OCR_EVENT_FD"
PARENT_PID_ENV = "DOCJOBS_OCR_PARENT_PID"
_PAGE_PROGRESS_DESCS = ("OCR", "Image processing")
_TIMEOUT_MESSAGE = "took too long to OCR"  # OCRmyPDF's warning when Tesseract times out on a page

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
def filter_ocr_image(page: Any, image: Any) -> None:
    _emit(event="ocr_page", page=int(page.pageno) + 1)
    return None  # leave the image alone and let the other plugins (Tesseract's downsampling) run
