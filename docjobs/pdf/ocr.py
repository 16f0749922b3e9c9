"""OCR stage core: make a PDF searchable with OCRmyPDF (Tesseract), in a killable child process.

OCRmyPDF is not thread-safe and runs Tesseract and Ghostscript as subprocesses, so each call runs
OCRmyPDF's command line in a child: a fork of the caller, in a session of its own. The child and everything it
starts form one process group, which is killed as a whole (SIGTERM, then SIGKILL after a grace period) when the
caller's `should_stop` says so, when anything goes wrong in the caller (try/finally), or, via a watchdog in the
child, when the caller's process dies. A fork, not a new interpreter: OCRmyPDF's imports are the caller's, which
the document zygote makes once for all its children (`stage_work.PRELOAD`); a call then costs about 0.6 CPU seconds
less (a quarter of a 1-page call's, bench/README.md). Only a caller that runs no other thread is forked (a document
child): a fork keeps the locks other threads held, and OCRmyPDF could wait on one forever (a test process's
logging stream); any other caller's OCRmyPDF is a new interpreter (`page_ranges.may_fork`, the rule page ranges
follow too). Every program a call runs (Tesseract, Ghostscript...) carries the environment variable
``DOCJOBS_OCR_TAG``, so the call's session can be found in ``/proc``.

The child loads `_ocr_child.py` as an OCRmyPDF plugin, which reports progress, the pages handed to
OCR and Tesseract timeouts as JSON lines on a private pipe (see that module). Nothing the child
prints is logged: its stderr can quote document content and file names. Only its exit status is.

Skew: with ``--deskew`` the child measures each page's skew itself (projection profiles, see
`deskew.py`) and falls back to Tesseract's estimate only when that measure is not confident; every
page turned is reported (`OcrResult.pages_deskewed`).

Pages are numbered from 1. After OCR, every page that went through OCR must have text
(`pdftotext -raw`, non-whitespace) unless it is blank. A page that Tesseract ran out of time on fails
the job with ``ocr.page_timeout`` naming the pages. A page with ink that came out without text is
OCR'd once more on its own with a conditioned OCR image (speckles removed, contrast stretched, scaled
up to 400 dpi; skew measured again); what it reads replaces the page. (Tesseract's single-block
segmentation, ``--psm 6``, was tried for this retry and left out: it reads symbols into pictures.)
A page still without text fails the job with ``ocr.page_unreadable``, or with the policy's
``unreadable = image_only`` is released without text and reported (`pages_unreadable`).
"""

from __future__ import annotations

import contextlib
import fcntl
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
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from importlib.util import find_spec
from pathlib import Path

import pikepdf
from PIL import Image, UnidentifiedImageError

from docjobs.domain.errors import DocJobError
from docjobs.domain.models import DeskewedPage, OcrMode, OcrPolicy, OcrUnreadable
from docjobs.pdf.inspect import ProgressFn, open_checked
from docjobs.pdf.page_ranges import may_fork

log = logging.getLogger(__name__)

TAG_ENV = "DOCJOBS_OCR_TAG"
EVENT_FD_ENV = "DOCJOBS_OCR_EVENT_FD"  # read by _ocr_child
PARENT_PID_ENV = "DOCJOBS_OCR_PARENT_PID"  # read by _ocr_child
CONDITION_ENV = "DOCJOBS_OCR_CONDITION"  # read by _ocr_child: condition the OCR image (the retry)
CHECKPOINTS_ENV = "DOCJOBS_OCR_CHECKPOINTS"  # read by _ocr_child: where each page's words are left as read
RESUME_ENV = "DOCJOBS_OCR_RESUME"  # read by _ocr_child: an earlier attempt's checkpoints
SHARE_ENV = "DOCJOBS_OCR_SHARE"  # read by _ocr_child: how many Tesseract calls may run at once
CHILD_PLUGIN = Path(__file__).resolve().with_name("_ocr_child.py")  # loaded by file name, in the child only
ROTATE_PAGES_THRESHOLD = 2.0  # Tesseract OSD confidence; OCRmyPDF's default (14) leaves clear 90° scans unturned
POLL_SECONDS = 0.2  # how often `should_stop` is asked (and the child polled)
TERM_GRACE_SECONDS = 2.0  # SIGTERM to SIGKILL
TEXT_TIMEOUT_SECONDS = 60.0  # pdftotext/pdftoppm, plus a second per page
BLANK_DPI = 50
BLANK_LEVEL = 160  # a pixel darker than this is ink
BLANK_INK_FRACTION = 0.0005  # a page with less ink than this is blank: no text expected
# Tesseract's OpenMP threads per page. Left to OCRmyPDF, a short document's Tesseract gets up to 3 (its jobs over its
# pages: 2 for a 1-page scan on 2 jobs) and its other calls none, so OpenMP's default of one a core (seen through a
# wrapper, tests/test_ocr_core.py); OpenMP's threads spin while they wait for each other: beside other OCR
# (a long scan's page ranges) a 1-page scan then burned 3 to 9 times its CPU and took 10 to 27 s instead of 2.5
# (bench/long_scan.py, fairness). One thread a page, and pages in parallel (`--jobs`), is as fast on an idle machine
# and fair on a busy one. An operator's OMP_THREAD_LIMIT (passed to the children) wins.
TESSERACT_THREADS = "1"
_LANGUAGE = re.compile(r"^[A-Za-z0-9_]{2,32}$")
_PAGE_LIST_MAX = 20


class OcrCanceled(Exception):
    """`should_stop` asked to stop: the OCR process group was killed and no output was written."""


@dataclass(frozen=True)
class OcrResult:
    page_count: int
    pages_ocred: tuple[int, ...]  # 1-based pages OCRmyPDF rasterized and OCR'd
    page_texts: tuple[str, ...]  # searchable text of each output page (pdftotext -raw)
    nothing_to_do: bool  # skip mode and no page lacked text: success without OCR
    pages_blank: tuple[int, ...] = ()  # OCR'd pages without text that are blank (accepted)
    pages_deskewed: tuple[DeskewedPage, ...] = ()  # skew found and turn applied, per page turned
    pages_unreadable: tuple[int, ...] = ()  # pages with ink but no text, released image-only (policy)
    pages_resumed: tuple[int, ...] = ()  # pages whose words came from an earlier attempt's checkpoint


class ExitCode(IntEnum):
    """OCRmyPDF's documented exit statuses (ocrmypdf.ExitCode; the worker need not import OCRmyPDF)."""

    ok = 0
    bad_args = 1
    input_file = 2
    missing_dependency = 3
    invalid_output_pdf = 4
    file_access_error = 5
    already_done_ocr = 6
    child_process_error = 7
    encrypted_pdf = 8
    invalid_config = 9
    pdfa_conversion_failed = 10
    other_error = 15
    ctrl_c = 130


# OCRmyPDF exit status -> failure code and safe message. ok, already_done_ocr and ctrl_c are handled
# before this table is consulted; anything not listed is `ocr.failed`.
EXIT_CODES: dict[int, tuple[str, str]] = {
    ExitCode.bad_args: ("ocr.failed", "the OCR engine rejected its options"),
    ExitCode.input_file: ("input.malformed", "the OCR engine could not read the input PDF"),
    ExitCode.missing_dependency: ("tool.missing", "the OCR engine is missing a dependency (tesseract, language data)"),
    ExitCode.invalid_output_pdf: ("ocr.invalid_output", "the OCR engine produced an invalid PDF"),
    ExitCode.file_access_error: ("ocr.failed", "the OCR engine could not access its files"),
    ExitCode.child_process_error: ("ocr.failed", "a subprocess of the OCR engine failed"),
    ExitCode.encrypted_pdf: ("input.encrypted", "the input PDF is encrypted"),
    ExitCode.invalid_config: ("ocr.failed", "the OCR engine configuration is invalid"),
    ExitCode.pdfa_conversion_failed: ("ocr.invalid_output", "the OCR output could not be made PDF/A"),
    ExitCode.other_error: ("ocr.failed", "the OCR engine failed"),
}


def exit_failure(returncode: int) -> DocJobError:
    """The failure for an OCRmyPDF exit status other than ok/already_done_ocr/ctrl_c."""
    if returncode < 0:
        return DocJobError("ocr.failed", f"the OCR engine was killed by signal {-returncode}")
    code, message = EXIT_CODES.get(returncode, ("ocr.failed", f"the OCR engine exited with status {returncode}"))
    return DocJobError(code, message)


def _wants_pdfa(policy: OcrPolicy) -> bool:
    # By value, so this module does not depend on the name of the output-type enum.
    return getattr(policy.output_type, "value", policy.output_type) == "pdfa"


def ocrmypdf_args(policy: OcrPolicy, *, jobs: int | None = None) -> list[str]:
    """The OCRmyPDF command-line options for `policy` (without plugin, input and output)."""
    if policy.mode is OcrMode.OFF:
        raise ValueError("OCR is off in this policy")
    for language in policy.languages:
        if not _LANGUAGE.match(language):
            raise ValueError(f"invalid OCR language code {language!r}")
    args = ["--quiet", "--jobs", str(jobs or cpus())]
    args.append({OcrMode.SKIP: "--skip-text", OcrMode.REDO: "--redo-ocr", OcrMode.FORCE: "--force-ocr"}[policy.mode])
    args += ["--language", "+".join(policy.languages or ("eng",))]
    if policy.rotate_pages:
        args += ["--rotate-pages", "--rotate-pages-threshold", str(ROTATE_PAGES_THRESHOLD)]
    if policy.deskew and policy.mode is not OcrMode.REDO:  # OCRmyPDF rejects --deskew with --redo-ocr (status 1)
        args.append("--deskew")
    if _wants_pdfa(policy):
        # OCRmyPDF refuses Ghostscript 10.0-10.02 (Debian 12) for PDFs that keep existing text; its own
        # pikepdf-based PDF/A backend keeps images as they are. When rasterizing everything (force),
        # Ghostscript may still be used for files the internal validator does not approve.
        backend = "auto" if policy.mode is OcrMode.FORCE else "internal"
        args += ["--output-type", "pdfa", "--pdfa-backend", backend]
    else:
        args += ["--output-type", "pdf"]
    args += ["--tesseract-timeout", f"{policy.tesseract_timeout:g}"]
    return args


def run_ocr(
    src: Path,
    dst: Path,
    policy: OcrPolicy,
    *,
    workdir: Path,
    on_page: ProgressFn | None = None,
    should_stop: Callable[[], bool] | None = None,
    jobs: int | None = None,
    tag: str | None = None,
    input_validated: bool = False,
    page_offset: int = 0,
    checkpoints: Path | None = None,
    resume: Path | None = None,
    cpu_share: Path | None = None,
) -> OcrResult:
    """OCR the PDF `src` into `dst` as `policy` says. `dst` is written only on success.

    `on_page(pages_done, total)` is called as pages finish. `should_stop()` is called about every
    POLL_SECONDS for the whole run (also while OCRmyPDF post-processes, when no page finishes), so
    the caller can heartbeat there; when it returns True the OCR processes are killed and
    OcrCanceled is raised. `jobs` is OCRmyPDF's page parallelism (default: the CPU count). `tag` is
    put in the OCR processes' environment as DOCJOBS_OCR_TAG (default: a random value).
    `input_validated`: `src` already passed the full stream check (see `open_checked`) earlier in the job.
    `page_offset`: `src` is a chunk of a longer document starting after this many pages; failure messages name
    the pages by their number in that document (the result numbers them in `src`).
    `checkpoints`: a folder where each page's words are left as soon as Tesseract read them, so that the next
    attempt after a lost one can resume; `resume`: such a folder from an earlier attempt, whose pages are not read
    again when their OCR image is the same (see `_ocr_child`). `cpu_share`: a file holding how many of this run's
    Tesseract calls may run at once, which the caller may rewrite while it runs (see `_ocr_child`).
    The output gets a structural check here (it opens, same page count); its streams are decoded by the
    release gate that re-reads the final document anyway.

    Raises DocJobError: input.* for an input that cannot be OCR'd, tool.missing, ocr.failed,
    ocr.invalid_output, ocr.page_timeout, ocr.page_unreadable; OcrCanceled; ValueError if the policy's mode is off.
    """
    args = ocrmypdf_args(policy, jobs=jobs)
    pdftotext, pdftoppm = tool("pdftotext"), tool("pdftoppm")
    if find_spec("ocrmypdf") is None:
        log.error("OCRmyPDF is not installed in this worker's Python environment")
        raise DocJobError("tool.missing", "OCRmyPDF is not installed")
    with tempfile.TemporaryDirectory(dir=workdir, prefix="ocr-") as tmp_name:
        tmp = Path(tmp_name)
        clean = tmp / "input.pdf"
        with open_checked(src, check_streams=not input_validated) as (pdf, info):
            pdf.save(clean, encryption=False)  # decrypted (permissions-only), as validated
        total = info.page_count
        before = page_texts(pdftotext, clean, total, "input.malformed")
        expected = [n for n, text in enumerate(before, 1) if policy.mode is not OcrMode.SKIP or not text.strip()]
        if not expected and not _wants_pdfa(policy):
            shutil.copyfile(clean, dst)
            if on_page is not None:
                on_page(total, total)
            return OcrResult(total, (), tuple(before), nothing_to_do=True)

        if should_stop is not None and should_stop():
            raise OcrCanceled("OCR was stopped before it started")
        output = tmp / "output.pdf"
        env = {
            "OMP_THREAD_LIMIT": TESSERACT_THREADS,
            **os.environ,
            TAG_ENV: tag or f"docjobs-ocr-{uuid.uuid4().hex}",
            PARENT_PID_ENV: str(os.getpid()),
            "TMPDIR": str(tmp),  # OCRmyPDF's work folder lives (and dies) with ours
            SHARE_ENV: str(cpu_share or ""),
            CHECKPOINTS_ENV: "",  # the first pass's only: the retry below reads conditioned images
            RESUME_ENV: "",
        }
        resumable = {CHECKPOINTS_ENV: str(checkpoints or ""), RESUME_ENV: str(resume or "")}
        command = _ocrmypdf_command(args, clean, output)
        report = _run_child(command, env | resumable, tmp, total=total, on_page=on_page, should_stop=should_stop)
        if report.returncode == ExitCode.already_done_ocr:
            log.info("OCR engine found nothing to do (status %d)", report.returncode)
            shutil.copyfile(clean, dst)
            return OcrResult(total, (), tuple(before), nothing_to_do=True)
        log.info(
            "OCR engine finished (status 0): %d of %d pages OCR'd, %d timed out",
            len(report.ocr_pages),
            total,
            len(report.timeouts) + report.unnamed_timeout,
        )

        _check_output(output, total)
        after = page_texts(pdftotext, output, total, "ocr.invalid_output")
        ocred = sorted(report.ocr_pages)
        if not ocred and expected:
            log.warning("OCR engine reported no OCR'd pages; assuming the %d pages that needed OCR", len(expected))
            ocred = expected
        blank: list[int] = []
        empty: list[int] = []
        for number in ocred:
            if after[number - 1].strip() or number in report.timeouts:
                continue
            if report.unnamed_timeout:
                report.timeouts.add(number)  # a timeout without its page: any page without text may be it
            elif _is_blank(pdftoppm, output, number):
                blank.append(number)
            else:
                empty.append(number)
        if report.timeouts:
            pages = "pages" if len(report.timeouts) > 1 else "page"
            numbers = _page_list(sorted(report.timeouts), page_offset)
            raise DocJobError("ocr.page_timeout", f"no text after OCR on {pages} {numbers}")
        deskewed = dict(report.deskewed)
        unreadable: list[int] = []
        if empty:
            retry = _Retry(clean, output, empty, args, env, tmp)
            read, retry_deskewed = retry.run(total=total, on_page=on_page, should_stop=should_stop)
            deskewed.update({number: page for number, page in retry_deskewed.items() if number in read})
            unreadable = [number for number in empty if number not in read]
            log.info("OCR retry read %d of %d pages without text", len(read), len(empty))
            if read:
                after = page_texts(pdftotext, output, total, "ocr.invalid_output")
        if unreadable and policy.unreadable is OcrUnreadable.FAIL:
            pages = "pages" if len(unreadable) > 1 else "page"
            numbers = _page_list(unreadable, page_offset)
            raise DocJobError("ocr.page_unreadable", f"no text could be read on {pages} {numbers}")
        shutil.move(output, dst)
        if on_page is not None and report.pages_done < total:
            on_page(total, total)  # pages OCRmyPDF did not report (it has no per-page bar for them)
        return OcrResult(
            total,
            tuple(ocred),
            tuple(after),
            nothing_to_do=not ocred,
            pages_blank=tuple(blank),
            pages_deskewed=tuple(deskewed[number] for number in sorted(deskewed)),
            pages_unreadable=tuple(unreadable),
            pages_resumed=tuple(sorted(report.resumed)),
        )


def _ocrmypdf_command(args: Sequence[str], source: Path, output: Path) -> list[str]:
    """OCRmyPDF's command line (without the program name)."""
    return ["--plugin", str(CHILD_PLUGIN), *args, str(source), str(output)]


def _run_child(
    command: Sequence[str],
    env: dict[str, str],
    tmp: Path,
    *,
    total: int,
    on_page: ProgressFn | None,
    should_stop: Callable[[], bool] | None,
) -> _Report:
    """One OCRmyPDF run in its child; raises OcrCanceled or the failure of a non-zero exit status."""
    child = _Child(command, env=env, cwd=tmp, log_path=tmp / "ocrmypdf.log")
    report = child.run(total=total, on_page=on_page, should_stop=should_stop)
    if report.stopped or report.returncode == ExitCode.ctrl_c:
        raise OcrCanceled("OCR was stopped")
    if report.returncode not in (ExitCode.ok, ExitCode.already_done_ocr):
        failure = exit_failure(report.returncode)
        if failure.code == "tool.missing":
            log.error("OCR ENGINE DEPENDENCY MISSING on this worker (status %d): %s", report.returncode, failure)
        else:
            log.warning("OCR engine failed with status %d: %s", report.returncode, failure.code)
        raise failure
    return report


@dataclass
class _Retry:
    """The pages that came out of OCR without text, OCR'd again on their own with a conditioned image."""

    clean: Path  # the input, as validated
    output: Path  # the first pass's output: pages read by the retry replace their pages in it
    pages: list[int]
    args: list[str]
    env: dict[str, str]
    tmp: Path

    def run(
        self, *, total: int, on_page: ProgressFn | None, should_stop: Callable[[], bool] | None
    ) -> tuple[set[int], dict[int, DeskewedPage]]:
        """The pages now read, and the skew of the retried pages (by their page number in the document)."""
        folder = self.tmp / "retry"
        folder.mkdir()
        source, retried = folder / "input.pdf", folder / "output.pdf"
        with pikepdf.open(self.clean) as pdf, pikepdf.new() as alone:
            for number in self.pages:
                alone.pages.append(pdf.pages[number - 1])
            alone.save(source)
        env = {**self.env, CONDITION_ENV: "1"}

        def still_working(done: int, count: int) -> None:  # the pages were counted: keep the stall watch fed
            if on_page is not None:
                on_page(total, total)

        command = _ocrmypdf_command(self.args, source, retried)
        report = _run_child(command, env, folder, total=len(self.pages), on_page=still_working, should_stop=should_stop)
        if report.returncode != ExitCode.ok:
            return set(), {}
        _check_output(retried, len(self.pages))
        texts = page_texts(tool("pdftotext"), retried, len(self.pages), "ocr.invalid_output")
        read = {number for number, text in zip(self.pages, texts, strict=True) if text.strip()}
        with pikepdf.open(self.output, allow_overwriting_input=True) as pdf, pikepdf.open(retried) as again:
            for index, number in enumerate(self.pages):
                if number in read:
                    pdf.pages[number - 1] = again.pages[index]
            pdf.save(self.output)
        deskewed = {
            self.pages[index - 1]: page.model_copy(update={"page": self.pages[index - 1]})
            for index, page in report.deskewed.items()
            if 1 <= index <= len(self.pages)
        }
        return read, deskewed


@dataclass
class _Report:
    returncode: int = 0
    stopped: bool = False
    ocr_pages: set[int] = field(default_factory=set)
    timeouts: set[int] = field(default_factory=set)
    unnamed_timeout: bool = False
    pages_done: int = 0
    deskewed: dict[int, DeskewedPage] = field(default_factory=dict)
    resumed: set[int] = field(default_factory=set)


class _Child:
    """One OCRmyPDF child process in its own process group, with its event pipe."""

    def __init__(self, command: Sequence[str], *, env: dict[str, str], cwd: Path, log_path: Path) -> None:
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.log_path = log_path
        self.report = _Report()
        self._buffer = b""

    def run(self, *, total: int, on_page: ProgressFn | None, should_stop: Callable[[], bool] | None) -> _Report:
        read_fd, write_fd = os.pipe()
        try:
            try:
                with self.log_path.open("wb") as stderr:
                    process = _start_ocrmypdf(self.command, self.env, self.cwd, stderr.fileno(), write_fd)
            except OSError:
                raise DocJobError("ocr.failed", "the OCR engine could not be started") from None
            finally:
                os.close(write_fd)
            try:
                self._supervise(process, read_fd, total, on_page, should_stop)
            finally:
                _kill_group(process)  # no-op after a clean exit, unless it left processes behind
        finally:
            os.close(read_fd)
        self.report.returncode = process.wait()  # reaped by _kill_group
        return self.report

    def _supervise(
        self,
        process: _Process,
        read_fd: int,
        total: int,
        on_page: ProgressFn | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        os.set_blocking(read_fd, False)
        poller = select.poll()  # not select(): a busy worker's descriptors can exceed FD_SETSIZE
        poller.register(read_fd, select.POLLIN)
        eof = False
        while True:
            if eof:
                time.sleep(POLL_SECONDS)
            elif poller.poll(POLL_SECONDS * 1000):
                eof = self._read(read_fd)
            self._dispatch(total, on_page)
            if _has_exited(process):
                while not eof and poller.poll(0):
                    eof = self._read(read_fd)  # events written just before exiting
                self._dispatch(total, on_page)
                return
            if should_stop is not None and should_stop():
                self.report.stopped = True
                _terminate_group(process)
                return

    def _read(self, read_fd: int) -> bool:
        try:
            chunk = os.read(read_fd, 65536)
        except BlockingIOError:
            return False
        self._buffer += chunk
        return not chunk

    def _dispatch(self, total: int, on_page: ProgressFn | None) -> None:
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            kind, page = event.get("event"), event.get("page")
            if kind == "progress" and isinstance(event.get("done"), int | float):
                done = min(total, int(event["done"] + 1e-6))
                if done > self.report.pages_done:
                    self.report.pages_done = done
                    if on_page is not None:
                        on_page(done, total)
            elif kind == "ocr_page" and isinstance(page, int) and 1 <= page <= total:
                self.report.ocr_pages.add(page)
            elif kind == "resumed" and isinstance(page, int) and 1 <= page <= total:
                self.report.resumed.add(page)
            elif kind == "deskew" and isinstance(page, int) and 1 <= page <= total:
                angle, correction = event.get("angle"), event.get("correction")
                if isinstance(angle, int | float) and isinstance(correction, int | float):
                    self.report.deskewed[page] = DeskewedPage(page=page, angle=angle, correction=correction)
            elif kind == "page_timeout":
                if isinstance(page, int) and 1 <= page <= total:
                    self.report.timeouts.add(page)
                else:
                    self.report.unnamed_timeout = True


class _Forked:
    """A forked child, waited for as `subprocess.Popen` waits (`returncode`: -signal when a signal ended it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


_Process = _Forked | subprocess.Popen[bytes]


def _start_ocrmypdf(argv: list[str], env: dict[str, str], cwd: Path, log_fd: int, event_fd: int) -> _Process:
    """OCRmyPDF's command line `argv` in a fork of this process when it runs no other thread, else as a new
    interpreter (see the module's docstring); either way in a session of its own, in `cwd`, with `env` as its
    whole environment, stdin from /dev/null, stdout and stderr to `log_fd`, and `event_fd` named in its
    environment."""
    if may_fork():
        return _fork_ocrmypdf(argv, env, cwd, log_fd, event_fd)
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "ocrmypdf", *argv],
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=log_fd,
        cwd=cwd,
        env={**env, EVENT_FD_ENV: str(event_fd)},
        pass_fds=(event_fd,),
        start_new_session=True,  # its own process group: killable as a whole
    )


def _fork_ocrmypdf(argv: list[str], env: dict[str, str], cwd: Path, log_fd: int, event_fd: int) -> _Forked:
    """Run OCRmyPDF's command line `argv` in a fork of this process, as a new interpreter would run it: in a
    session of its own, in `cwd`, with `env` as its whole environment, stdin from /dev/null, stdout and stderr to
    `log_fd`, and no other descriptor open but `event_fd` (named in its environment)."""
    # OCRmyPDF imported once per process (the document zygote did), pdfminer left as the child's readers need it
    from docjobs.pdf.ocrmypdf_import import use_ocrmypdf_patches

    for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
        if stream is not None:
            stream.flush()
    pid = os.fork()
    if pid:
        return _Forked(pid)
    status: object = ExitCode.other_error
    try:
        os.setsid()  # its own process group: killable as a whole
        null = os.open(os.devnull, os.O_RDONLY)
        log_fd, event_fd, null = (fcntl.fcntl(fd, fcntl.F_DUPFD, 3) for fd in (log_fd, event_fd, null))
        for target, fd in ((0, null), (1, log_fd), (2, log_fd)):
            os.dup2(fd, target)
        os.closerange(3, event_fd)
        os.closerange(event_fd + 1, os.sysconf("SC_OPEN_MAX"))
        for signum in signal.valid_signals():  # the caller's handlers are not OCRmyPDF's
            with contextlib.suppress(OSError, ValueError):
                if callable(signal.getsignal(signum)):
                    signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update({**env, EVENT_FD_ENV: str(event_fd)})
        tempfile.tempdir = None  # found again from TMPDIR, which `env` sets
        sys.argv = ["ocrmypdf", *argv]
        use_ocrmypdf_patches()
        from ocrmypdf.__main__ import run

        status = run(argv)  # type: ignore[no-untyped-call]
    except SystemExit as exit_request:  # as a new interpreter would end: None is success, other non-codes failure
        status = 0 if exit_request.code is None else exit_request.code
    except BaseException:  # noqa: BLE001 - reported as OCRmyPDF's own failure status, never to the caller's code
        status = ExitCode.other_error
    finally:
        os._exit(status if isinstance(status, int) else ExitCode.other_error)


def _has_exited(process: _Process) -> bool:
    """Whether the child has exited, without reaping it: while it is unreaped its pid (= the process
    group id) cannot be reused, so signalling the group stays safe."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(process: _Process, signum: int) -> None:
    if process.returncode is not None:
        return  # reaped: its pid may belong to someone else now
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _terminate_group(process: _Process) -> None:
    """SIGTERM the group; SIGKILL it after TERM_GRACE_SECONDS (or at once once the leader is gone)."""
    _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_SECONDS
    while not _has_exited(process) and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill_group(process)


def _kill_group(process: _Process) -> None:
    """SIGKILL whatever is left of the group, then reap the leader."""
    _signal_group(process, signal.SIGKILL)
    process.wait()


def cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))  # what this process may use (containers, taskset)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        log.error("%s (poppler-utils) is not installed on this worker", name)
        raise DocJobError("tool.missing", f"{name} (poppler-utils) is not installed")
    return path


def text_json(texts: Sequence[str]) -> str:
    """The searchable-text blob stored beside an artifact: one string per page."""
    return json.dumps({"pages": list(texts)}, ensure_ascii=False)


def page_texts(pdftotext: str, pdf: Path, pages: int, code: str) -> list[str]:
    """`pdftotext -raw` of every page (poppler ends each page with a form feed)."""
    try:
        result = subprocess.run(
            [pdftotext, "-raw", "-enc", "UTF-8", "-q", str(pdf), "-"],
            capture_output=True,
            timeout=TEXT_TIMEOUT_SECONDS + pages,
            check=True,
        )
    except subprocess.TimeoutExpired:
        raise DocJobError(code, "extracting the text of the PDF timed out") from None
    except subprocess.CalledProcessError as error:
        raise DocJobError(code, f"pdftotext exited with status {error.returncode}") from None
    texts = result.stdout.decode("utf-8", "replace").split("\f")
    if len(texts) != pages + 1 or texts[-1].strip():
        raise DocJobError(code, "the text of the PDF does not split into its pages")
    return texts[:-1]


def _is_blank(pdftoppm: str, pdf: Path, number: int) -> bool:
    command = [pdftoppm, "-gray", "-r", str(BLANK_DPI), "-f", str(number), "-l", str(number), "-singlefile"]
    try:
        result = subprocess.run([*command, str(pdf)], capture_output=True, timeout=TEXT_TIMEOUT_SECONDS, check=True)
        with Image.open(io.BytesIO(result.stdout)) as image:
            histogram = image.convert("L").histogram()
    except (subprocess.SubprocessError, OSError, UnidentifiedImageError):
        return False  # cannot tell: not blank, so the page is reported
    return sum(histogram[:BLANK_LEVEL]) < BLANK_INK_FRACTION * sum(histogram)


def _check_output(output: Path, pages: int) -> None:
    if not output.is_file():
        raise DocJobError("ocr.invalid_output", "the OCR engine reported success but wrote no PDF")
    try:
        with open_checked(output, check_streams=False) as (_, info):
            count = info.page_count
    except DocJobError as error:
        raise DocJobError("ocr.invalid_output", f"the OCR output is not a valid PDF ({error.code})") from None
    if count != pages:
        raise DocJobError("ocr.invalid_output", f"the OCR output has {count} pages instead of {pages}")


def _page_list(numbers: Sequence[int], offset: int = 0) -> str:
    shown = ", ".join(str(n + offset) for n in numbers[:_PAGE_LIST_MAX])
    more = len(numbers) - _PAGE_LIST_MAX
    return f"{shown} and {more} more" if more > 0 else shown
