"""The docs' links are checked by something that can fail: MkDocs counts broken links and anchors between the
pages (`make lint`, with its warnings shown so that `--strict` has them to count), and this checks the README's
links into docs/, which MkDocs never builds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((docs/[^)#\s]+\.md)(?:#([^)\s]+))?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc slugs; fenced code has no headings)."""
    text = FENCE.sub("", page.read_text())
    return {slugify(re.sub(r"[`*_]", "", heading), "-") for heading in HEADING.findall(text)}


def test_every_readme_link_into_docs_names_a_page_and_an_anchor_it_has() -> None:
    links = LINK.findall((REPO / "README.md").read_text())
    assert links, "the README links into docs/"
    broken = []
    for target, anchor in links:
        page = REPO / target
        if not page.is_file() or (anchor and anchor not in anchors(page)):
            broken.append(f"{target}#{anchor}" if anchor else target)
    assert not broken, f"the README links to what docs/ does not have: {broken}"


def test_the_anchor_check_knows_the_anchors_mkdocs_makes() -> None:
    headings = anchors(REPO / "docs" / "release-gates.md")
    assert {"what-a-receiver-learns", "signing-keys", "canonical-json"} <= headings


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_broken_anchor_fails_the_docs_build(tmp_path: Path) -> None:
    """The docs step of `make lint`, run on a copy of the docs with one anchor broken, fails (and passes on the
    copy as it is): the check can fail."""
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    command = docs_step()

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=300, check=False)

    assert build().returncode == 0
    page = copy / "docs" / "batches.md"
    page.write_text(page.read_text().replace("policies.md#storage", "policies.md#no-such-heading"))
    failed = build()
    assert failed.returncode != 0 and "no-such-heading" in failed.stdout + failed.stderr


def docs_step() -> list[str]:
    """`make lint`'s MkDocs command, as the Makefile spells it (with this interpreter's mkdocs)."""
    makefile = (REPO / "Makefile").read_text()
    match = re.search(r"^\t\$\(VENV\)/bin/mkdocs (build[^\n]*)$", makefile, re.MULTILINE)
    assert match is not None, "make lint builds the docs with mkdocs"
    return [sys.executable, "-m", "mkdocs", *match.group(1).split(), "--site-dir", "site"]
