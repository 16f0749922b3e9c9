"""The layers are enforced: `lint-imports` (the contracts in pyproject.toml, which `make lint` checks on the tree)
fails each contract on a copy with a deliberate bad import; every docjobs module is placed; the workflow loads
no I/O library."""

from __future__ import annotations

import json
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import docjobs

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
SETTINGS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in SETTINGS["contracts"]}
PURE = "docjobs.domain"  # the one docjobs package the workflow may import
IO_LIBRARIES = ("pikepdf", "PIL", "pdfminer", "pyhanko", "pyhanko_certvalidator", "boto3", "fastapi", "uvicorn")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


# One bad import per contract, all in one copy of the tree, checked by one run (`make lint` runs it on the tree).
BAD_IMPORTS = {
    "core": ("docjobs/store/storage.py", "import docjobs.worker", "docjobs.store.storage -> docjobs.worker"),
    "layers": ("docjobs/temporal/codec.py", "import docjobs.api.app", "docjobs.temporal.codec -> docjobs.api.app"),
    "workflow": ("docjobs/domain/states.py", "import pikepdf", "docjobs.domain.states -> pikepdf"),
    "gate": ("docjobs/pdf/active_kinds.py", "import pikepdf", "docjobs.pdf.active_kinds -> pikepdf"),
}


def test_a_bad_import_breaks_each_contract(tmp_path: Path) -> None:
    assert set(BAD_IMPORTS) == set(CONTRACTS)  # a new contract gets a bad import of its own here
    for package in ("docjobs", "workflows", "activities"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for module, bad_import, _ in BAD_IMPORTS.values():
        target = tmp_path / module
        target.write_text(f"{target.read_text()}\n{bad_import}  # deliberately against the layers\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    report = " ".join(result.stdout.split())
    for contract, (_, _, chain) in BAD_IMPORTS.items():
        assert f"{' '.join(CONTRACTS[contract]['name'].split())} BROKEN" in report
        assert chain in result.stdout
    assert f"0 kept, {len(CONTRACTS)} broken" in report


def test_every_docjobs_module_is_placed() -> None:
    """Each package or module at the top of docjobs is named in a contract: in the core (and then allowed to the
    workflow or not), or in a layer above it. A new flat module fails here until it joins a package."""
    children = {f"docjobs.{module.name}" for module in pkgutil.iter_modules(docjobs.__path__)}
    core = set(CONTRACTS["core"]["source_modules"])
    layered = {name for layer in CONTRACTS["layers"]["layers"] for name in layer.split(" | ")}
    upper = {name for name in layered if name.startswith("docjobs.")}
    assert children == core | upper
    assert not core & upper
    assert upper <= set(CONTRACTS["core"]["forbidden_modules"])
    forbidden_to_workflow = {name for name in CONTRACTS["workflow"]["forbidden_modules"] if name.startswith("docjobs.")}
    assert forbidden_to_workflow == children - {PURE}


def test_importing_the_workflow_loads_no_io_library() -> None:
    """What the workflow sandbox passes through: no PDF, crypto-signing, storage or HTTP library."""
    code = "import json, sys, workflows.document_job; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, check=True).stdout)
    assert "workflows" in loaded and "temporalio" in loaded
    assert not set(IO_LIBRARIES) & set(loaded)
