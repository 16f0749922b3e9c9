"""One OCRmyPDF run in a killable child process: its command line, its process group, its events, its exit status.

OCRmyPDF is not thread-safe and runs Tesseract and Ghostscript as subprocesses, so each run is OCRmyPDF's command
line in a child: a fork of the caller, in a session of its own. The child and everything it starts form one process
group, which is killed as a whole (SIGTERM, then SIGKILL after a grace period) when the caller's `should_stop` says
so, when anything goes wrong in the caller (try/finally), or, via a watchdog in the child, when the caller's process
dies. A fork, not a new interpreter: OCRmyPDF's imports are the caller's, which the document zygote of the OCR
queue makes once for all its children (`stage_work.PRELOAD_FOR`); a call then costs about 0.6 CPU seconds less (a
quarter of a 1-page call's, bench/README.md). Only a caller that runs no other thread is forked (a document
child): a fork keeps the locks other threads held, and OCRmyPDF could wait on one forever (a test process's logging
stream); any other caller's OCRmyPDF is a new interpreter (`parallel_pages.may_fork`, the rule page ranges follow
too).

The child loads `_ocr_child.py` as an OCRmyPDF plugin, which reports progress, the pages handed to OCR and
Tesseract timeouts as JSON lines on a private pipe (see that module); they are gathered in an `OcrReport`. Nothing
the child prints is logged: its stderr can quote document content and file names. Only its exit status is, mapped
to a failure code (`exit_failure`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import DeskewedPage
from docjobs.pdf.inspect import ProgressFn
from docjobs.pdf.ocr_env import EVENT_FD_ENV
from docjobs.pdf.parallel_pages import may_fork

log = logging.getLogger("docjobs.pdf.ocr")  # the name operators filter on: kept across the move

CHILD_PLUGIN = Path(__file__).resolve().with_name("_ocr_child.py")  # loaded by file name, in the child only
POLL_SECONDS = 0.2  # how often `should_stop` is asked (and the child polled)
TERM_GRACE_SECONDS = 2.0  # SIGTERM to SIGKILL


class OcrCanceled(Exception):
    """`should_stop` asked to stop: the OCR process group was killed and no output was written."""


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
EXIT_CODES: dict[int, tuple[FailureCode, str]] = {
    ExitCode.bad_args: (FailureCode.OCR_FAILED, "the OCR engine rejected its options"),
    ExitCode.input_file: (FailureCode.INPUT_MALFORMED, "the OCR engine could not read the input PDF"),
    ExitCode.missing_dependency: (
        FailureCode.TOOL_MISSING,
        "the OCR engine is missing a dependency (tesseract, language data)",
    ),
    ExitCode.invalid_output_pdf: (FailureCode.OCR_INVALID_OUTPUT, "the OCR engine produced an invalid PDF"),
    ExitCode.file_access_error: (FailureCode.OCR_FAILED, "the OCR engine could not access its files"),
    ExitCode.child_process_error: (FailureCode.OCR_FAILED, "a subprocess of the OCR engine failed"),
    ExitCode.encrypted_pdf: (FailureCode.INPUT_ENCRYPTED, "the input PDF is encrypted"),
    ExitCode.invalid_config: (FailureCode.OCR_FAILED, "the OCR engine configuration is invalid"),
    ExitCode.pdfa_conversion_failed: (FailureCode.OCR_INVALID_OUTPUT, "the OCR output could not be made PDF/A"),
    ExitCode.other_error: (FailureCode.OCR_FAILED, "the OCR engine failed"),
}


def exit_failure(returncode: int) -> DocJobError:
    """The failure for an OCRmyPDF exit status other than ok/already_done_ocr/ctrl_c."""
    if returncode < 0:
        return DocJobError(FailureCode.OCR_FAILED, f"the OCR engine was killed by signal {-returncode}")
    code, message = EXIT_CODES.get(
        returncode, (FailureCode.OCR_FAILED, f"the OCR engine exited with status {returncode}")
    )
    return DocJobError(code, message)


def ocrmypdf_command(args: Sequence[str], source: Path, output: Path) -> list[str]:
    """OCRmyPDF's command line (without the program name)."""
    return ["--plugin", str(CHILD_PLUGIN), *args, str(source), str(output)]


def run_ocrmypdf(
    command: Sequence[str],
    env: dict[str, str],
    tmp: Path,
    *,
    total: int,
    on_page: ProgressFn | None,
    should_stop: Callable[[], bool] | None,
) -> OcrReport:
    """One OCRmyPDF run in its child; raises OcrCanceled or the failure of a non-zero exit status."""
    child = _OcrmypdfChild(command, env=env, cwd=tmp, log_path=tmp / "ocrmypdf.log")
    report = child.run(total=total, on_page=on_page, should_stop=should_stop)
    if report.stopped or report.returncode == ExitCode.ctrl_c:
        raise OcrCanceled("OCR was stopped")
    if report.returncode not in (ExitCode.ok, ExitCode.already_done_ocr):
        failure = exit_failure(report.returncode)
        if failure.code == FailureCode.TOOL_MISSING:
            log.error("OCR ENGINE DEPENDENCY MISSING on this worker (status %d): %s", report.returncode, failure)
        else:
            log.warning("OCR engine failed with status %d: %s", report.returncode, failure.code)
        raise failure
    return report


@dataclass
class OcrReport:
    """What one OCRmyPDF run told: its exit status, and what its plugin's events named (pages numbered from 1)."""

    returncode: int = 0
    stopped: bool = False
    ocr_pages: set[int] = field(default_factory=set)
    timeouts: set[int] = field(default_factory=set)
    unnamed_timeout: bool = False
    pages_done: int = 0
    deskewed: dict[int, DeskewedPage] = field(default_factory=dict)
    resumed: set[int] = field(default_factory=set)


class _OcrmypdfChild:
    """One OCRmyPDF child process in its own process group, with its event pipe."""

    def __init__(self, command: Sequence[str], *, env: dict[str, str], cwd: Path, log_path: Path) -> None:
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.log_path = log_path
        self.report = OcrReport()
        self._buffer = b""

    def run(self, *, total: int, on_page: ProgressFn | None, should_stop: Callable[[], bool] | None) -> OcrReport:
        read_fd, write_fd = os.pipe()
        try:
            try:
                with self.log_path.open("wb") as stderr:
                    process = _start_ocrmypdf(self.command, self.env, self.cwd, stderr.fileno(), write_fd)
            except OSError:
                raise DocJobError(FailureCode.OCR_FAILED, "the OCR engine could not be started") from None
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
