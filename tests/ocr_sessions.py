"""Finding one OCR call's processes in /proc.

Every program an OCR call runs (Tesseract, Ghostscript...) carries DOCJOBS_OCR_TAG in its environment. OCRmyPDF
itself and its page workers are forks (docjobs/pdf/ocr_process.py), whose /proc environment is their forebear's, so they
are found by their session instead: the call's own, which its tagged programs share.
"""

from __future__ import annotations

from pathlib import Path

_SESSIONS: dict[str, set[int]] = {}  # tag -> the sessions its tagged processes were seen in


def call_processes(tag: str) -> dict[int, str]:
    """pid -> command name of every running process of the OCR call tagged `tag`: those carrying the tag, and
    every process of a session one of them was seen in (by this or an earlier look)."""
    marker = f"DOCJOBS_OCR_TAG={tag}".encode()
    sessions = _SESSIONS.setdefault(tag, set())
    live: dict[int, tuple[int, str]] = {}  # pid -> (session, command name)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _, _, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]  # after the name
            if state != "Z":  # a zombie runs nothing: it waits to be reaped (by init, once orphaned)
                live[int(entry.name)] = (int(session), (entry / "comm").read_text().strip())
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                sessions.add(int(session))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return {pid: name for pid, (session, name) in live.items() if session in sessions}
