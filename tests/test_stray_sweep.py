"""The confined zygote's stray sweep (docjobs/isolation/sandbox_child.py): what descends from a live task stays,
even in a session of its own (OCRmyPDF's), and what was left behind by an ended one does not."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from docjobs.isolation.sandbox_child import _descends_from, _parent_pid


def test_a_tool_in_its_own_session_under_a_live_fork_descends_from_it() -> None:
    # 1 init, 10 zygote, 20 and 30 forks, 21 OCRmyPDF (setsid) under 20, 22 tesseract under 21, 40 a daemon
    # reparented to init when its fork ended.
    parents = {10: 1, 20: 10, 30: 10, 21: 20, 22: 21, 40: 1}
    assert _descends_from(21, {20, 30}, parents) and _descends_from(22, {20, 30}, parents)
    assert not _descends_from(22, {30}, parents)  # fork 20 ended: its OCR is a stray now
    assert not _descends_from(40, {20, 30}, parents)
    assert not _descends_from(10, {20, 30}, parents)
    assert not _descends_from(5, {20}, {5: 6, 6: 5})  # a loop (pids reused while reading /proc) ends


def test_the_parent_is_read_from_proc_even_with_parentheses_in_the_name(tmp_path: Path) -> None:
    assert _parent_pid(os.getpid()) == os.getppid()
    odd = tmp_path / "a) 9 (b"  # /proc/<pid>/stat shows it as `(a) 9 (b)`
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    sleeper = subprocess.Popen([str(odd), "30"])
    try:
        assert _parent_pid(sleeper.pid) == os.getpid()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _parent_pid(2**22 + 1) == 0  # no such process
