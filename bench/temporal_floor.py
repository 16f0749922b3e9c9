"""What Temporal alone costs on this machine: the floor under docjobs' throughput, beside the raw tool loop.

    .venv/bin/python bench/temporal_floor.py [--jobs 60] [--starts 600] [--activities 8 5]

Starts a throwaway embedded dev server with docjobs' settings (`ensure_dev_server`: WAL, eager activities, the
queue read limits) and measures, in one run:

* the raw loop of bench/throughput.py (pikepdf watermark, pyHanko sign and validate per document, one process);
* a bare `start_workflow` loop (8 concurrent callers, nothing polling the queue): starts/s and the server's CPU
  per start, what every accepted upload costs the server before any work;
* a workflow that does nothing but run `--activities` no-op activities in sequence (the shape of a job: one per
  stage and wrap-up step), in an in-process worker, 1, 4 and 8 at once: workflows/s, the server's CPU and this
  process's (worker and client) CPU per workflow, and the ratio to the raw loop.

A docjobs job is that workflow plus the document work, search attributes, payloads and isolation, so its
rate cannot exceed the floor's on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from floor import START_CALLERS, start_rate, workflow_rate
from throughput import RawLoop, environment

from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.temporal.client import connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.fixtures.samples import make_sample_pdf

CONCURRENCY = (1, 4, 8)


async def measure(args: argparse.Namespace, settings: TemporalSettings, server: int, raw: float) -> None:
    client = await connect(settings)
    starts, per_start = await start_rate(client, server, args.starts)
    print(f"raw loop (1-page): {raw:.2f} documents/s")
    print(f"bare starts ({START_CALLERS} callers): {starts:.1f}/s, server {per_start:.2f} CPU ms per start\n")
    print("| activities | at once | workflows/s | ratio to raw | server CPU s/wf | worker+client CPU s/wf |")
    print("|---:|---:|---:|---:|---:|---:|")
    for steps in args.activities:
        for at_once in CONCURRENCY:
            rate, server_cpu, own_cpu = await workflow_rate(client, server, steps, args.jobs, at_once)
            print(f"| {steps} | {at_once} | {rate:.1f} | {rate / raw:.2f} | {server_cpu:.3f} | {own_cpu:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=60, help="workflows per measurement")
    parser.add_argument("--starts", type=int, default=600, help="workflow starts in the bare start loop")
    parser.add_argument("--activities", type=int, nargs="+", default=[8, 5], help="no-op activities per workflow")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docjobs-floor-") as temporary:
        folder = Path(temporary)
        with environment(folder):
            settings = TemporalSettings.from_env()
            document = folder / "p1.pdf"
            make_sample_pdf(document, pages=1, marker="temporal floor")
            ensure_dev_signer(folder / "raw-signer")
            raw = RawLoop(folder / "raw-signer", folder).rate(document, 32)
            server = ensure_dev_server(settings).pid
            assert server is not None
            try:
                asyncio.run(measure(args, settings, server, raw))
            finally:
                stop_dev_server(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
