"""Logs a harness keeps in a SQLite database (Goose's ``sessions.db``, OpenCode's ``opencode.db``):
opened read-only, never written, whatever the harness left beside them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

__all__ = ["SQLITE_MAGIC", "columns", "connect_read_only", "has_tables", "json_column", "open_log_database"]

SQLITE_MAGIC = "SQLite format 3\x00"
_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection that reads the write-ahead log the harness keeps beside the file; a
    folder we may not write the log's index into (a copied, read-only dataset) is read as it stands
    on disk."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.execute("select 1 from sqlite_master limit 1").fetchall()
        return con
    except sqlite3.Error:
        return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"pragma table_info({table})")}


def has_tables(path: Path, needed: dict[str, set[str]]) -> bool:
    """Whether ``path`` is a SQLite file whose tables hold at least the ``needed`` columns."""
    if path.suffix.lower() not in _SUFFIXES:
        return False
    try:
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_MAGIC.encode():
                return False
        con = connect_read_only(path)
        try:
            return all(cols <= columns(con, table) for table, cols in needed.items())
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return False


def json_column(text: object, what: str) -> object:
    """A JSON text column's value (None when empty); an :class:`IngestError` names ``what`` is not
    JSON."""
    from dtoc_rl.ingest.base import IngestError

    if text is None or text == "":
        return None
    try:
        return json.loads(text)  # type: ignore[arg-type]
    except (json.JSONDecodeError, TypeError, RecursionError) as e:
        raise IngestError(f"{what}: not JSON ({e})") from None


def open_log_database(path: Path) -> sqlite3.Connection:
    """:func:`connect_read_only` with rows by column name, or an :class:`IngestError` saying why the
    database cannot be opened."""
    from dtoc_rl.ingest.base import IngestError

    try:
        con = connect_read_only(path)
    except sqlite3.Error as e:
        raise IngestError(f"cannot open the database: {e}", path) from None
    con.row_factory = sqlite3.Row
    return con
