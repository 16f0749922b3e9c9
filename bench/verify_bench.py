"""The verify stage against the render stage on a long text PDF, and what each of verify's checks costs.

    .venv/bin/python bench/verify_bench.py [--pages 1000] [--runs 5] [--before PATH]

A generated text PDF (tests/fixtures/samples.py, `--pages` pages) goes through the stages' own work as plain
functions (docjobs/isolation/stage_work.py, no sandbox and no Temporal): render with the `standard` policy
(watermark in structure mode, active content stripped), signing by the development signer, then verify with
what that policy asks (signature naming the tenant, fidelity with the text kept and the stamp on every page, no
active content). Each run is a fresh process; wall and CPU seconds (the process and the tools it waited for)
are printed as medians. With `--before`, a checkout of another version (e.g. `git archive BASE | tar -x -C DIR`)
runs in turns with this one, so both see the same load on a shared machine (a checkout with the same work
orders: the stage settings models, from the merge of the stage specs on; the table in bench/README.md was
measured before them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _seconds(action: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of `action` (this process and the children it reaped)."""

    def cpu() -> float:
        own, tools = os.times()[:2], os.times()[2:4]
        return sum(own) + sum(tools)

    wall, used = time.perf_counter(), cpu()
    action()
    return time.perf_counter() - wall, cpu() - used


def one_run(pages: int, folder: Path, *, redaction_gate: bool) -> dict[str, float]:
    """Render, sign and verify once, in this process, with the code on `sys.path`."""
    from docjobs.domain.models import RenderSettings, VerifySettings
    from docjobs.domain.policy import SanitizePolicy, WatermarkPolicy
    from docjobs.isolation.stage_work import RenderWork, VerifyWork, render, verify
    from docjobs.pdf.fidelity import check_fidelity
    from docjobs.pdf.sanitize import check_no_active_content
    from docjobs.signing.config import TrustAnchors
    from docjobs.signing.dev_ca import ensure_dev_signer
    from docjobs.signing.sign import sign_pdf
    from docjobs.signing.verify import verify_pdf
    from tests.fixtures.samples import make_sample_pdf

    source, rendered, signed = folder / "source.pdf", folder / "rendered.pdf", folder / "signed.pdf"
    make_sample_pdf(source, pages=pages)
    (folder / "render").mkdir()
    (folder / "verify").mkdir()
    render_work = RenderWork(
        source=source,
        output=rendered,
        workdir=folder / "render",
        settings=RenderSettings(watermark=WatermarkPolicy(text="CONFIDENTIAL"), max_pages=pages),
    )
    times: dict[str, float] = {}
    times["render"], times["render_cpu"] = _seconds(lambda: render(render_work, lambda done, total: None))
    signer = ensure_dev_signer(folder / "signing")
    sign_pdf(rendered, signed, signer, tenant="bench")
    verify_work = VerifyWork(
        source=source,
        output=signed,
        workdir=folder / "verify",
        trust=TrustAnchors.of(signer),
        tenant="bench",
        settings=VerifySettings(
            text_layer_kept=True, watermark_text="CONFIDENTIAL", pages_may_turn=False, sanitize=SanitizePolicy()
        ),
    )
    times["verify"], times["verify_cpu"] = _seconds(lambda: verify(verify_work, lambda done, total: None))
    times["signature"], _ = _seconds(lambda: verify_pdf(signed, TrustAnchors.of(signer)))
    times["fidelity"], _ = _seconds(
        lambda: check_fidelity(
            source, signed, text_layer_kept=True, watermark_text="CONFIDENTIAL", workdir=folder / "verify"
        )
    )
    times["active_content"], _ = _seconds(lambda: check_no_active_content(signed, SanitizePolicy()))
    if redaction_gate:  # what verify adds for a policy that redacts (`external`'s patterns)
        from docjobs.domain.policy import RedactPolicy
        from docjobs.pdf.redaction.gate import check_redaction
        from docjobs.pdf.redaction.patterns import compile_patterns

        patterns = compile_patterns(RedactPolicy(patterns=("ssn", "phone", "email", "dob", "mrn")))
        times["redaction_gate"], _ = _seconds(lambda: check_redaction(signed, frozenset(), patterns, {}))
    return times


def _run_version(code: Path, pages: int, redaction_gate: bool) -> dict[str, float]:
    """One run in a fresh process importing docjobs from `code`."""
    answer = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one-run",
            "--pages",
            str(pages),
            *(["--redaction-gate"] if redaction_gate else []),
        ],
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(answer.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="a checkout of the version to compare with (run in turns)")
    parser.add_argument("--redaction-gate", action="store_true", help="time the redaction gate too (slow before)")
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_run:
        sys.path.insert(0, os.getcwd())
        with tempfile.TemporaryDirectory(prefix="docjobs-verify-bench-") as tmp:
            print(json.dumps(one_run(args.pages, Path(tmp), redaction_gate=args.redaction_gate)))
        return
    versions = {"after": HERE} if args.before is None else {"before": args.before.resolve(), "after": HERE}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, code in versions.items():
            samples[name].append(_run_version(code, args.pages, args.redaction_gate))

    def median(name: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[name])

    print(f"{args.pages}-page text PDF, `standard` policy, median of {args.runs} runs, {os.cpu_count()} CPUs")
    print()
    print(
        "| version | render s | render ms/page | verify s | verify ms/page | verify / render "
        "| render CPU s | verify CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in versions:
        render, verify = median(name, "render"), median(name, "verify")
        print(
            f"| {name} | {render:.2f} | {1000 * render / args.pages:.2f} | {verify:.2f} | "
            f"{1000 * verify / args.pages:.2f} | {verify / render:.2f} | {median(name, 'render_cpu'):.2f} | "
            f"{median(name, 'verify_cpu'):.2f} |"
        )
    print()
    keys = ("signature", "fidelity", "active_content", *(("redaction_gate",) if args.redaction_gate else ()))
    print("| version | " + " | ".join(f"{key.replace('_', ' ')} s" for key in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name in versions:
        shares = (median(name, key) for key in keys)
        print(f"| {name} | " + " | ".join(f"{value:.2f}" for value in shares) + " |")


if __name__ == "__main__":
    main()
