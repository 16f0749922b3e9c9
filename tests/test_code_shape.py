"""The house's size limits (docs/architecture.md, "Size limits"), kept by a check that fails: no production module
over 600 lines, no production function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PRODUCTION = ("docjobs", "activities", "workflows", "worker.py", "starter.py")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def production_modules() -> list[Path]:
    modules: list[Path] = []
    for name in PRODUCTION:
        path = REPO / name
        modules += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return modules


def long_functions(module: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(module.read_text(), filename=str(module))
    return [
        f"{module.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    ]


def test_no_production_module_or_function_is_over_its_limit() -> None:
    modules = production_modules()
    assert len(modules) > 100  # the walk found the code
    too_long = [
        f"{module.relative_to(REPO)} ({lines} lines)"
        for module in modules
        if (lines := len(module.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"
    functions = [found for module in modules for found in long_functions(module)]
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines: {functions}"


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES))
    module = tmp_path / "probe.py"
    module.write_text(f"def short() -> None:\n    pass\n\n\nasync def long() -> None:\n{body}\n")
    assert long_functions(module, tmp_path) == [f"probe.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"]
