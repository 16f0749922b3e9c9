"""Runs a docjobs worker (the logic is docjobs/worker.py).

Usage: python worker.py [--task-queue NAME] [--queue general|ocr|batch]... [--metrics-port N]
       [--log-format text|json] [--deployment NAME [--build-id ID]]
"""

from docjobs.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
