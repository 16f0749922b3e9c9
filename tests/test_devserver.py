"""The embedded dev server's database settings (docs/configuration.md: the durability trade-off)."""

from __future__ import annotations

import sqlite3

from tests.conftest import Env


def test_the_embedded_server_keeps_its_database_in_write_ahead_log_mode(env: Env) -> None:
    """The session's dev server was started by `ensure_dev_server`: its SQLite file is in WAL mode (a
    journal-mode setting is stored in the file itself) and the write-ahead log sits beside it."""
    database = env.settings().data_dir / "temporal.sqlite"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"
    assert database.with_name("temporal.sqlite-wal").exists()
