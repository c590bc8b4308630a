"""SQLite backend: the persistent external memory of DTOC.

Every output is committed before :meth:`add` returns (WAL journal,
``synchronous=FULL`` by default), so a process killed right after storing
loses nothing.  Changes grouped with :meth:`~dtoc_rl.core.store.Store.transaction`
(DTOCContext stores an output and its tool message that way) are one SQLite
transaction, so a kill leaves both or neither and a reopened session can always
continue.  A session is reopened with ``SQLiteStore(path, session_id=...)`` in
any later process; records are cached in memory for O(1) reads.

One writer per session: every write checks, in the same transaction, that the
session's version is still the one this store loaded; a second process that
changed the session in between makes the write fail with
:class:`~dtoc_rl.core.store.SessionConflictError` (reopen to see its changes).  Readers
may open a session any time.

A file that cannot be a session store is refused with
:class:`~dtoc_rl.core.store.StoreFileError` naming it: an empty (0-byte) file (SQLite
would silently treat it as a new database, hiding a truncated or mistyped file),
a file that is not SQLite, an SQLite database of another program, or damaged
content.  New files are written under a temporary name and linked into place
complete, so a kill while creating one never leaves an empty file behind.

Tool results are stored as UTF-8 bytes with ``surrogatepass``, so any Python
string, including lone surrogates from badly decoded logs, round-trips exactly.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from dtoc_rl.core.record import ToolOutput
from dtoc_rl.core.store import SessionConflictError, Store, StoreFileError
from dtoc_rl.core.tokens import TokenEstimator

__all__ = ["SQLiteStore", "list_sessions"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    estimator TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 0
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


# The columns each table needs; a database without them is another program's.
_NEEDED = {
    "sessions": {"session_id", "created", "estimator"},
    "outputs": {"session_id", "seq", "tool_key", "tool_result", "visible", "call_id"},
    "messages": {"session_id", "seq", "body"},
}
# What reading a damaged file raises: SQLite's own errors, and bad JSON / UTF-8 /
# types in rows it can still read.
_CORRUPT = (sqlite3.DatabaseError, ValueError, TypeError, KeyError)


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _create_file(path: Path) -> None:
    """Make a new, empty store at ``path`` atomically (never a 0-byte file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        finally:
            db.close()  # the last connection checkpoints the WAL into the file
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            p.unlink(missing_ok=True)


def _check_file(path: Path) -> None:
    """Refuse what SQLite would open without complaint but is no session store."""
    try:
        st = path.stat()
    except OSError as e:
        raise StoreFileError(f"{path}: cannot open the session store ({_reason(e)})") from None
    if path.is_dir():
        raise StoreFileError(f"{path}: is a folder, not a session store file")
    if st.st_size == 0:
        raise StoreFileError(
            f"{path}: the file is empty (0 bytes), not a session store; "
            "delete it or give a new path to start a new store"
        )


def _check_schema(db: sqlite3.Connection, path: Path) -> bool:
    """True when the database has the store's tables, False when it has no tables at all;
    another program's database is an error."""
    names = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not names:
        return False
    bad = [
        t
        for t, cols in _NEEDED.items()
        if t not in names or not cols <= {r[1] for r in db.execute(f"PRAGMA table_info('{t}')")}
    ]
    if bad:
        raise StoreFileError(
            f"{path}: an SQLite database but not a DTOC session store "
            f"(missing or different tables: {', '.join(bad)})"
        )
    return True


class SQLiteStore(Store):
    """Persistent store in one SQLite file; many sessions per file.

    Args:
        path: database file (created if missing; an existing file must be a store).
        session_id: reopen this session; a new id is made when None.
        estimator: token estimator for new outputs.  Reopening checks that it
            matches the one the session was created with, since stored costs
            would otherwise disagree with new ones.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` survives power
            loss, ``NORMAL`` only process crashes.
        create: make the session when ``session_id`` is not in the file (else KeyError).

    Raises:
        StoreFileError: the file is empty, not SQLite, another program's database,
            or damaged (the message names the file).
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
        self._db = None  # type: ignore[assignment]
        self._version = 0
        in_memory = str(path) == ":memory:"  # SQLite's name for a database that is no file
        if not in_memory and not self.path.exists() and not self.path.is_symlink():
            try:
                _create_file(self.path)
            except (OSError, sqlite3.Error) as e:
                raise StoreFileError(f"{self.path}: cannot create the session store ({_reason(e)})") from None
        if not in_memory:
            _check_file(self.path)
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
            _check_schema(self._db, self.path)  # before the journal pragma changes the file
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            err = self._open_session(session_id, create)
            if err is None:
                self._load()
        except StoreFileError:
            self.close()
            raise
        except _CORRUPT as e:
            self.close()
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise SessionConflictError(
                    f"{self.path}: the store is locked by another process (tried for 5 s)"
                ) from None
            raise StoreFileError(f"{self.path}: not a readable session store ({_reason(e)})") from None
        except BaseException:
            self.close()
            raise
        if err is not None:
            self.close()
            raise err

    def _open_session(self, session_id: str | None, create: bool) -> Exception | None:
        """Check the schema and find the session row; returns the error to raise for a session
        that cannot be opened as asked (kept apart from errors of a damaged file).  A plain
        read first, so opening an existing session never waits for a busy writer; the write
        lock only when tables, a column or the session row must be made, rechecking under it."""
        db = self._db
        for write in (False, True):
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                has_schema = _check_schema(db, self.path)
                cols = {r[1] for r in db.execute("PRAGMA table_info('sessions')")} if has_schema else set()
                row = None
                if has_schema:
                    row = db.execute(
                        "SELECT estimator FROM sessions WHERE session_id=?", (self.session_id,)
                    ).fetchone()
                if row is None and session_id is not None and not create:
                    db.execute("COMMIT")
                    return KeyError(f"no session {session_id!r} in {self.path}")
                if row is not None and row[0] != self.estimator.name:
                    db.execute("COMMIT")
                    return ValueError(
                        f"session {self.session_id!r} in {self.path} was created with estimator "
                        f"{row[0]!r}, reopened with {self.estimator.name!r}"
                    )
                if has_schema and "version" in cols and row is not None:
                    db.execute("COMMIT")
                    return None
                if not write:
                    db.execute("COMMIT")
                    continue
                if not has_schema:  # an SQLite file with no tables yet
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            db.execute(stmt)
                elif "version" not in cols:  # a store made before writes were versioned
                    db.execute("ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
                if row is None:
                    db.execute(
                        "INSERT INTO sessions (session_id, created, estimator, version) VALUES (?,?,?,0)",
                        (self.session_id, time.time(), self.estimator.name),
                    )
                db.execute("COMMIT")
                return None
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return None

    def _load(self) -> None:
        """Read the session in one read transaction: a consistent snapshot even while another
        process writes (its version, outputs and messages all from the same moment)."""
        self._db.execute("BEGIN")
        try:
            self._read_session()
        finally:
            self._db.execute("COMMIT")

    def _read_session(self) -> None:
        row = self._db.execute(
            "SELECT version FROM sessions WHERE session_id=?", (self.session_id,)
        ).fetchone()
        self._version = int(row[0])
        cur = self._db.execute(
            "SELECT tool_key, tool_result, estimated_tokens, visible_cost, hidden_cost, timestamp, visible,"
            " tool_name, tool_args, step, call_id FROM outputs WHERE session_id=? ORDER BY seq",
            (self.session_id,),
        )
        for key, blob, est, vc, hc, ts, vis, name, args, step, call_id in cur:
            if not isinstance(blob, bytes | str):
                raise TypeError(f"output {key!r} has a {type(blob).__name__} result")
            rec = ToolOutput(
                tool_key=key,
                tool_result=_dec(blob.encode() if isinstance(blob, str) else blob),
                estimated_tokens=int(est),
                timestamp=ts,
                visible=bool(vis),
                tool_name=name,
                tool_args=json.loads(args) if args is not None else None,
                step=int(step),
                call_id=call_id,
                visible_cost=int(vc),
                hidden_cost=int(hc),
            )
            self._records[key] = rec
            if call_id is not None:
                self._by_call[call_id] = key
            self._active += rec.cost
        cur = self._db.execute(
            "SELECT body FROM messages WHERE session_id=? ORDER BY seq", (self.session_id,)
        )
        self._messages = [json.loads(b) for (b,) in cur]
        for i, m in enumerate(self._messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"message {i} of session {self.session_id!r} has no role")

    @property
    def where(self) -> str:
        return f"session {self.session_id!r} in {self.path}"

    # -- transactions ---------------------------------------------------------------
    def _begin(self) -> None:
        """Take SQLite's write lock and check nobody else wrote this session since we loaded it."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise SessionConflictError(f"{self.where}: cannot write ({_reason(e)})") from None
        row = self._db.execute(
            "SELECT version FROM sessions WHERE session_id=?", (self.session_id,)
        ).fetchone()
        if row is None or int(row[0]) != self._version:
            self._db.execute("ROLLBACK")
            raise SessionConflictError(
                f"{self.where} was changed by another writer since this process opened it; "
                "one writer per session: reopen it to continue from its current state"
            )

    def _commit(self) -> None:
        self._db.execute("UPDATE sessions SET version=version+1 WHERE session_id=?", (self.session_id,))
        self._db.execute("COMMIT")
        self._version += 1

    def _rollback(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run one write inside the current transaction, or in its own."""
        with self.transaction():
            self._db.executemany(sql, rows)

    def _persist_add(self, rec: ToolOutput) -> None:
        self._write(
            "INSERT INTO outputs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
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
                )
            ],
        )

    def _persist_visibility(self, keys: list[str], visible: bool) -> None:
        self._write(
            "UPDATE outputs SET visible=? WHERE session_id=? AND tool_key=?",
            [(int(visible), self.session_id, k) for k in keys],
        )

    def _persist_message(self, message: dict[str, Any]) -> None:
        self._write(
            "INSERT INTO messages VALUES (?,?,?)",
            [(self.session_id, len(self._messages), json.dumps(message))],
        )

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, session_id={self.session_id!r}, outputs={len(self)})"


def list_sessions(path: str | Path) -> list[dict[str, Any]]:
    """Sessions in a store file, oldest first, with their output counts."""
    path = Path(path)
    _check_file(path)
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise StoreFileError(f"{path}: cannot open the session store ({_reason(e)})") from None
    try:
        if not _check_schema(db, path):
            return []
        rows = db.execute(
            "SELECT s.session_id, s.created, s.estimator, COUNT(o.tool_key) FROM sessions s"
            " LEFT JOIN outputs o ON o.session_id = s.session_id GROUP BY s.session_id ORDER BY s.created"
        ).fetchall()
    except sqlite3.DatabaseError as e:
        raise StoreFileError(f"{path}: not a readable session store ({_reason(e)})") from None
    finally:
        db.close()
    return [{"session_id": r[0], "created": r[1], "estimator": r[2], "outputs": r[3]} for r in rows]
