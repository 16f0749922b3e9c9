"""The published JSON Schemas (`schemas/`) are the models': `starter.py schema --write` makes exactly the
committed files, so a model change that is not published (or a hand edit) fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from docjobs.domain.contract import SCHEMAS, published_schemas

REPO = Path(__file__).resolve().parent.parent
PUBLISHED = REPO / "schemas"
# Written by hand, not from a model: the evidence predicate's schema (tests/test_signing.py checks a released
# job's evidence against it).
HAND_WRITTEN = ("evidence-v1.schema.json", "evidence-v2.schema.json")


def test_the_committed_schemas_are_generated_from_the_models(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "--json", "schema", "--write", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(done.stdout.splitlines()[-1])["schemas"]
    assert printed == published_schemas()
    assert sorted(path.name for path in PUBLISHED.iterdir()) == sorted([*SCHEMAS, *HAND_WRITTEN])
    for name in SCHEMAS:
        committed = (PUBLISHED / name).read_text()
        assert committed == (tmp_path / name).read_text(), f"{name}: run `python starter.py schema --write schemas`"
        jsonschema.Draft202012Validator.check_schema(json.loads(committed))
