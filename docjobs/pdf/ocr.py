"""OCR stage core: make a PDF searchable with OCRmyPDF (Tesseract), in a killable child process.

Each call runs OCRmyPDF's command line in a child of its own (docjobs/pdf/ocr_process.py: a fork of the caller when
it runs no other thread, else a new interpreter), killed as a whole when the caller's `should_stop` says so. Every
program a call runs (Tesseract, Ghostscript...) carries the environment variable ``DOCJOBS_OCR_TAG``, so the call's
session can be found in ``/proc``.

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

import io
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pikepdf
from PIL import Image, UnidentifiedImageError

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import DeskewedPage
from docjobs.domain.policy import OcrMode, OcrPolicy, OcrUnreadable
from docjobs.pdf.inspect import ProgressFn, open_checked
from docjobs.pdf.ocr_env import CHECKPOINTS_ENV, CONDITION_ENV, PARENT_PID_ENV, RESUME_ENV, SHARE_ENV, TAG_ENV
from docjobs.pdf.ocr_process import (
    ExitCode,
    OcrCanceled,
    OcrReport,
    ocrmypdf_command,
    run_ocrmypdf,
)

log = logging.getLogger(__name__)

ROTATE_PAGES_THRESHOLD = 2.0  # Tesseract OSD confidence; OCRmyPDF's default (14) leaves clear 90° scans unturned
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
        raise DocJobError(FailureCode.TOOL_MISSING, "OCRmyPDF is not installed")
    with tempfile.TemporaryDirectory(dir=workdir, prefix="ocr-") as tmp_name:
        tmp = Path(tmp_name)
        clean = tmp / "input.pdf"
        with open_checked(src, check_streams=not input_validated) as (pdf, info):
            pdf.save(clean, encryption=False)  # decrypted (permissions-only), as validated
        run = _Run(tmp, clean, info.page_count, args, pdftotext, pdftoppm, on_page, should_stop, page_offset)
        resumable = {CHECKPOINTS_ENV: str(checkpoints or ""), RESUME_ENV: str(resume or "")}
        return run.ocr(dst, policy, tag=tag, cpu_share=cpu_share, resumable=resumable)


@dataclass
class _Run:
    """One `run_ocr` call, in its temporary folder `tmp`: `clean` is its input as validated."""

    tmp: Path
    clean: Path
    total: int
    args: list[str]
    pdftotext: str
    pdftoppm: str
    on_page: ProgressFn | None
    should_stop: Callable[[], bool] | None
    page_offset: int

    @property
    def output(self) -> Path:
        return self.tmp / "output.pdf"

    def ocr(
        self, dst: Path, policy: OcrPolicy, *, tag: str | None, cpu_share: Path | None, resumable: dict[str, str]
    ) -> OcrResult:
        """OCR `clean` into `dst`: the first pass, then the retry of the pages that came out without text."""
        before = page_texts(self.pdftotext, self.clean, self.total, FailureCode.INPUT_MALFORMED)
        expected = [n for n, text in enumerate(before, 1) if policy.mode is not OcrMode.SKIP or not text.strip()]
        if not expected and not _wants_pdfa(policy):
            shutil.copyfile(self.clean, dst)
            if self.on_page is not None:
                self.on_page(self.total, self.total)
            return OcrResult(self.total, (), tuple(before), nothing_to_do=True)

        if self.should_stop is not None and self.should_stop():
            raise OcrCanceled("OCR was stopped before it started")
        env = self._environment(tag, cpu_share)
        report = self._first_pass(env | resumable)
        if report.returncode == ExitCode.already_done_ocr:
            log.info("OCR engine found nothing to do (status %d)", report.returncode)
            shutil.copyfile(self.clean, dst)
            return OcrResult(self.total, (), tuple(before), nothing_to_do=True)

        _check_output(self.output, self.total)
        after = page_texts(self.pdftotext, self.output, self.total, FailureCode.OCR_INVALID_OUTPUT)
        ocred = sorted(report.ocr_pages)
        if not ocred and expected:
            log.warning("OCR engine reported no OCR'd pages; assuming the %d pages that needed OCR", len(expected))
            ocred = expected
        blank, empty = self._without_text(ocred, after, report)
        deskewed = dict(report.deskewed)
        unreadable, after = self._read_again(empty, env, deskewed, after)
        if unreadable and policy.unreadable is OcrUnreadable.FAIL:
            pages = _pages_named(unreadable, self.page_offset)
            raise DocJobError(FailureCode.OCR_PAGE_UNREADABLE, f"no text could be read on {pages}")
        shutil.move(self.output, dst)
        if self.on_page is not None and report.pages_done < self.total:
            self.on_page(self.total, self.total)  # pages OCRmyPDF did not report (it has no per-page bar for them)
        return OcrResult(
            self.total,
            tuple(ocred),
            tuple(after),
            nothing_to_do=not ocred,
            pages_blank=tuple(blank),
            pages_deskewed=tuple(deskewed[number] for number in sorted(deskewed)),
            pages_unreadable=tuple(unreadable),
            pages_resumed=tuple(sorted(report.resumed)),
        )

    def _environment(self, tag: str | None, cpu_share: Path | None) -> dict[str, str]:
        """The OCR child's whole environment (the first pass's checkpoints are added by the caller)."""
        return {
            "OMP_THREAD_LIMIT": TESSERACT_THREADS,
            **os.environ,
            TAG_ENV: tag or f"docjobs-ocr-{uuid.uuid4().hex}",
            PARENT_PID_ENV: str(os.getpid()),
            "TMPDIR": str(self.tmp),  # OCRmyPDF's work folder lives (and dies) with ours
            SHARE_ENV: str(cpu_share or ""),
            CHECKPOINTS_ENV: "",  # the first pass's only: the retry below reads conditioned images
            RESUME_ENV: "",
        }

    def _first_pass(self, env: dict[str, str]) -> OcrReport:
        command = ocrmypdf_command(self.args, self.clean, self.output)
        report = run_ocrmypdf(
            command, env, self.tmp, total=self.total, on_page=self.on_page, should_stop=self.should_stop
        )
        if report.returncode != ExitCode.already_done_ocr:
            log.info(
                "OCR engine finished (status 0): %d of %d pages OCR'd, %d timed out",
                len(report.ocr_pages),
                self.total,
                len(report.timeouts) + report.unnamed_timeout,
            )
        return report

    def _without_text(self, ocred: list[int], after: list[str], report: OcrReport) -> tuple[list[int], list[int]]:
        """The OCR'd pages that came out without text: the blank ones, and those with ink. Raises
        `ocr.page_timeout` for the pages Tesseract ran out of time on."""
        blank: list[int] = []
        empty: list[int] = []
        for number in ocred:
            if after[number - 1].strip() or number in report.timeouts:
                continue
            if report.unnamed_timeout:
                report.timeouts.add(number)  # a timeout without its page: any page without text may be it
            elif _is_blank(self.pdftoppm, self.output, number):
                blank.append(number)
            else:
                empty.append(number)
        if report.timeouts:
            pages = _pages_named(sorted(report.timeouts), self.page_offset)
            raise DocJobError(FailureCode.OCR_PAGE_TIMEOUT, f"no text after OCR on {pages}")
        return blank, empty

    def _read_again(
        self, empty: list[int], env: dict[str, str], deskewed: dict[int, DeskewedPage], after: list[str]
    ) -> tuple[list[int], list[str]]:
        """Retry the pages with ink but no text (`empty`): the pages still unread, and the output's texts. The
        skew of the pages read is noted in `deskewed`."""
        if not empty:
            return [], after
        read, retry_deskewed = self._retry(empty, env)
        deskewed.update({number: page for number, page in retry_deskewed.items() if number in read})
        unreadable = [number for number in empty if number not in read]
        log.info("OCR retry read %d of %d pages without text", len(read), len(empty))
        if read:
            after = page_texts(self.pdftotext, self.output, self.total, FailureCode.OCR_INVALID_OUTPUT)
        return unreadable, after

    def _retry(self, pages: list[int], env: dict[str, str]) -> tuple[set[int], dict[int, DeskewedPage]]:
        """OCR `pages`, which came out without text, again on their own with a conditioned image: the pages now
        read (which replace their pages in the output), and the skew of the retried pages (by their page number in
        the document)."""
        folder = self.tmp / "retry"
        folder.mkdir()
        source, retried = folder / "input.pdf", folder / "output.pdf"
        with pikepdf.open(self.clean) as pdf, pikepdf.new() as alone:
            for number in pages:
                alone.pages.append(pdf.pages[number - 1])
            alone.save(source)

        def still_working(done: int, count: int) -> None:  # the pages were counted: keep the stall watch fed
            if self.on_page is not None:
                self.on_page(self.total, self.total)

        command = ocrmypdf_command(self.args, source, retried)
        conditioned = {**env, CONDITION_ENV: "1"}
        report = run_ocrmypdf(
            command, conditioned, folder, total=len(pages), on_page=still_working, should_stop=self.should_stop
        )
        if report.returncode != ExitCode.ok:
            return set(), {}
        _check_output(retried, len(pages))
        texts = page_texts(tool("pdftotext"), retried, len(pages), FailureCode.OCR_INVALID_OUTPUT)
        read = {number for number, text in zip(pages, texts, strict=True) if text.strip()}
        with pikepdf.open(self.output, allow_overwriting_input=True) as pdf, pikepdf.open(retried) as again:
            for index, number in enumerate(pages):
                if number in read:
                    pdf.pages[number - 1] = again.pages[index]
            pdf.save(self.output)
        deskewed = {
            pages[index - 1]: page.model_copy(update={"page": pages[index - 1]})
            for index, page in report.deskewed.items()
            if 1 <= index <= len(pages)
        }
        return read, deskewed


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
        raise DocJobError(FailureCode.TOOL_MISSING, f"{name} (poppler-utils) is not installed")
    return path


def text_json(texts: Sequence[str]) -> str:
    """The searchable-text blob stored beside an artifact: one string per page."""
    return json.dumps({"pages": list(texts)}, ensure_ascii=False)


def page_texts(pdftotext: str, pdf: Path, pages: int, code: FailureCode) -> list[str]:
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
        raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, "the OCR engine reported success but wrote no PDF")
    try:
        with open_checked(output, check_streams=False) as (_, info):
            count = info.page_count
    except DocJobError as error:
        raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR output is not a valid PDF ({error.code})") from None
    if count != pages:
        raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR output has {count} pages instead of {pages}")


def _pages_named(numbers: Sequence[int], offset: int = 0) -> str:
    """ "page 3" or "pages 3, 5 and 2 more", numbered in the whole document (`offset`: the pages before this one)."""
    shown = ", ".join(str(n + offset) for n in numbers[:_PAGE_LIST_MAX])
    more = len(numbers) - _PAGE_LIST_MAX
    listed = f"{shown} and {more} more" if more > 0 else shown
    return f"{'pages' if len(numbers) > 1 else 'page'} {listed}"
