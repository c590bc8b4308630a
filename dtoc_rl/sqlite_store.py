"""SQLite backend: the persistent external memory of DTOC.

Every output is committed before :meth:`add` returns (WAL journal,
``synchronous=FULL`` by default), so a process killed right after storing
loses nothing.  A session is reopened with ``SQLiteStore(path, session_id=...)``
in any later process; records are cached in memory for O(1) reads.

Tool results are stored as UTF-8 bytes with ``surrogatepass``, so any Python
string, including lone surrogates from badly decoded logs, round-trips exactly.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from dtoc_rl.record import ToolOutput
from dtoc_rl.store import Store
from dtoc_rl.tokens import TokenEstimator

__all__ = ["SQLiteStore", "list_sessions"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    estimator TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outputs (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    tool_key TEXT NOT NULL,
    tool_result BLOB NOT NULL,
    estimated_tokens INTEGER NOT NULL,
    visible_cost INTEGER NOT NULL,
    hidden_cost INTEGER NOT NULL,
    timestamp REAL NOT NULL,
    visible INTEGER NOT NULL,
    tool_name TEXT NOT NULL,
    tool_args TEXT,
    step INTEGER NOT NULL,
    call_id TEXT,
    PRIMARY KEY (session_id, tool_key)
);
CREATE INDEX IF NOT EXISTS outputs_seq ON outputs (session_id, seq);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""


def _enc(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def _dec(blob: bytes) -> str:
    return bytes(blob).decode("utf-8", errors="surrogatepass")


class SQLiteStore(Store):
    """Persistent store in one SQLite file; many sessions per file.

    Args:
        path: database file (created if missing).
        session_id: reopen this session; a new id is made when None.
        estimator: token estimator for new outputs.  Reopening checks that it
            matches the one the session was created with, since stored costs
            would otherwise disagree with new ones.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` survives power
            loss, ``NORMAL`` only process crashes.
    """

    def __init__(
        self,
        path: str | Path,
        session_id: str | None = None,
        estimator: TokenEstimator | str | None = None,
        *,
        synchronous: str = "FULL",
        create: bool = True,
    ):
        super().__init__(estimator, session_id)
        self.path = Path(path)
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._db.executescript(_SCHEMA)
        row = self._db.execute(
            "SELECT estimator FROM sessions WHERE session_id=?", (self.session_id,)
        ).fetchone()
        if row is None:
            if session_id is not None and not create:
                raise KeyError(f"no session {session_id!r} in {self.path}")
            self._db.execute(
                "INSERT INTO sessions VALUES (?,?,?)", (self.session_id, time.time(), self.estimator.name)
            )
        else:
            if row[0] != self.estimator.name:
                raise ValueError(
                    f"session {self.session_id!r} was created with estimator {row[0]!r}, "
                    f"reopened with {self.estimator.name!r}"
                )
            self._load()

    def _load(self) -> None:
        cur = self._db.execute(
            "SELECT tool_key, tool_result, estimated_tokens, visible_cost, hidden_cost, timestamp, visible,"
            " tool_name, tool_args, step, call_id FROM outputs WHERE session_id=? ORDER BY seq",
            (self.session_id,),
        )
        for key, blob, est, vc, hc, ts, vis, name, args, step, call_id in cur:
            rec = ToolOutput(
                tool_key=key,
                tool_result=_dec(blob),
                estimated_tokens=est,
                timestamp=ts,
                visible=bool(vis),
                tool_name=name,
                tool_args=json.loads(args) if args is not None else None,
                step=step,
                call_id=call_id,
                visible_cost=vc,
                hidden_cost=hc,
            )
            self._records[key] = rec
            if call_id is not None:
                self._by_call[call_id] = key
            self._active += rec.cost
        cur = self._db.execute(
            "SELECT body FROM messages WHERE session_id=? ORDER BY seq", (self.session_id,)
        )
        self._messages = [json.loads(b) for (b,) in cur]

    def _persist_add(self, rec: ToolOutput) -> None:
        self._db.execute(
            "INSERT INTO outputs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.session_id,
                len(self._records),
                rec.tool_key,
                _enc(rec.tool_result),
                rec.estimated_tokens,
                rec.visible_cost,
                rec.hidden_cost,
                rec.timestamp,
                int(rec.visible),
                rec.tool_name,
                json.dumps(rec.tool_args) if rec.tool_args is not None else None,
                rec.step,
                rec.call_id,
            ),
        )

    def _persist_visibility(self, keys: list[str], visible: bool) -> None:
        with self._db:  # one transaction: all keys change or none
            self._db.execute("BEGIN")
            self._db.executemany(
                "UPDATE outputs SET visible=? WHERE session_id=? AND tool_key=?",
                [(int(visible), self.session_id, k) for k in keys],
            )

    def _persist_message(self, message: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO messages VALUES (?,?,?)",
            (self.session_id, len(self._messages), json.dumps(message)),
        )

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, session_id={self.session_id!r}, outputs={len(self)})"


def list_sessions(path: str | Path) -> list[dict[str, Any]]:
    """Sessions in a store file, oldest first, with their output counts."""
    db = sqlite3.connect(str(path))
    try:
        rows = db.execute(
            "SELECT s.session_id, s.created, s.estimator, COUNT(o.tool_key) FROM sessions s"
            " LEFT JOIN outputs o ON o.session_id = s.session_id GROUP BY s.session_id ORDER BY s.created"
        ).fetchall()
    finally:
        db.close()
    return [{"session_id": r[0], "created": r[1], "estimator": r[2], "outputs": r[3]} for r in rows]
