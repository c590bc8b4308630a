"""Goose's session database (``sessions.db``): every session one trajectory.

Goose (github.com/block/goose) keeps its sessions in SQLite, ``~/.local/share/goose/sessions/sessions.db``
(``$GOOSE_PATH_ROOT/data/sessions/`` when that is set), read here read-only with the standard library.
The per-session JSONL files older versions wrote (a header line, then a message per line) are read by
the generic chat reader, and so are its session exports.

Tables read (``crates/goose/src/session/session_manager.rs``; schema versions up to 17 checked, a column
a version lacks is read as absent):

* ``sessions``: ``id``, ``name`` / ``description``, ``session_type`` (user, scheduled, sub_agent, ...),
  ``working_dir``, ``created_at``, ``provider_name`` and ``model_config_json`` (the model under
  ``model_name``);
* ``messages``: ``session_id``, ``role`` (user or assistant: tool results are user messages),
  ``content_json`` (Goose's content blocks: ``text``, ``toolRequest``, ``toolResponse``, ``thinking``,
  ...), ``created_timestamp`` (epoch seconds) and ``metadata_json`` (``userVisible``,
  ``agentVisible``); a session's messages in ``(created_timestamp, id)`` order;
* ``usage_ledger`` (version 15 on): one row per provider call, ``input_tokens`` (the whole prompt,
  cached part included: Goose adds Anthropic's cache counts to it), ``cache_read_tokens``,
  ``cache_write_tokens``, ``output_tokens``, ``cost``; rows of a compaction's summary call and the
  ``carried_forward`` totals of sessions older than the ledger are not calls of the conversation.

Mapping: the messages, as a Goose export, through the chat reader (:mod:`dtoc_rl.ingest.chat_rows`:
``toolRequest`` / ``toolResponse`` as tool calls and results, ``created`` as each call's time).  A
result is ``{"status": "success", "value": {"content": [...], "isError", ...}}`` (Goose 1.48 adds
``"resultType": "complete"``) or, for a tool that failed, ``{"status": "error", "error": {"code",
"message", "data"?}}``, read as rmcp's rendering of that error, ``"-32603: message"``.  The
task is the first user text.  Compaction: Goose keeps what it compacted (marked ``agentVisible: false``,
still shown to the user) and adds an agent-only summary; the summary becomes the next step's user text
and a ``ContextEvent("compaction")`` there, targeting every earlier step, and a message shown to
neither (the user's last message, which Goose copies after the summary) is left out.  The ledger's
calls are each assistant message's usage, by order, only when the counts agree (``extra.usage_note``
says when they do not).  Goose's agent-only note after a summary is no model call and is left out.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.schema import ContextEvent, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError
from dtoc_rl.ingest.sqlite_logs import SQLITE_MAGIC, columns, has_tables, json_column, open_log_database

__all__ = ["GooseSessionsIngester", "is_goose_db"]


def is_goose_db(path: Path) -> bool:
    """Whether ``path`` is a SQLite file holding Goose's sessions and messages tables."""
    return has_tables(path, {"messages": {"session_id", "role", "content_json"}, "sessions": {"working_dir"}})


class GooseSessionsIngester(Ingester):
    name = "goose"

    def detect(self, path: Path, head: str) -> bool:
        return head.startswith(SQLITE_MAGIC) and is_goose_db(path)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        from dtoc_rl.ingest.openai_chat import OpenAIChatIngester, parse_rows

        con = open_log_database(path)
        try:
            cols = columns(con, "sessions")
            order = "created_at, id" if "created_at" in cols else "id"
            sessions = con.execute(f"select * from sessions order by {order}").fetchall()
            # the queries, from the columns this schema version has: built once, run per session
            msg_query = _messages_query(columns(con, "messages"))
            has_ledger = "usage_ledger" in {r[0] for r in con.execute("select name from sqlite_master")}
            ledger_query = _ledger_query(columns(con, "usage_ledger")) if has_ledger else None
            rows = []
            for k, s in enumerate(sessions, 1):
                try:
                    rows.append((k, self._row(con, dict(s), msg_query, ledger_query), None))
                except IngestError as e:
                    rows.append((k, None, f"session {s['id']}: {e.reason}"))
        except sqlite3.Error as e:
            raise IngestError(f"cannot read the database: {e}", path) from None
        finally:
            con.close()
        chat = OpenAIChatIngester()
        seen: dict[str, int] = {}

        def one(row: dict, number: int) -> Trajectory:
            summaries = row.pop("_summaries")
            traj = chat.run(path, row, number, seen, "session")
            traj.source = self.name
            traj.traj_id = f"{self.name}/{path.stem}/{row['id']}"
            _mark_compactions(traj, summaries)
            return traj

        yield from parse_rows(path, rows, one, unit="session")

    def _row(self, con: sqlite3.Connection, s: dict, msg_query: str, ledger_query: str | None) -> dict:
        """One session as a Goose export row for the chat reader (plus ``_summaries``: the texts that
        replaced what a compaction took away)."""
        messages, summaries = [], []
        for n, m in enumerate(con.execute(msg_query, (s["id"],))):
            meta = json_column(m["meta"], f"message {n} metadata_json") or {}
            user_sees, agent_sees = meta.get("userVisible", True), meta.get("agentVisible", True)
            if not user_sees and not agent_sees:
                continue  # a copy of a message kept for the record only
            content = json_column(m["content_json"], f"message {n} content_json")
            if not isinstance(content, list):
                raise IngestError(f"message {n}: content_json is {type(content).__name__}, expected a list")
            if not user_sees and m["role"] == "assistant":
                continue  # Goose's own note after a summary ("the conversation continues"): no model call
            when = m["created"]
            msg: dict[str, Any] = {"role": m["role"], "content": content}
            # epoch seconds (milliseconds in some versions): the call's time
            if isinstance(when, int | float):
                msg["timestamp"] = when / 1000 if when > 1e10 else when
            if not user_sees and m["role"] == "user":  # what a compaction put in place of the messages
                summaries.append("\n".join(b.get("text", "") for b in content if isinstance(b, dict)))
            messages.append(msg)
        config = json_column(s.get("model_config_json"), "model_config_json") or {}
        row: dict[str, Any] = {
            "id": s["id"],
            "model": str(config.get("model_name") or "") if isinstance(config, dict) else "",
            "task_id": s["id"],
            "messages": messages,
            "_summaries": summaries,
        }
        for k in ("name", "description", "session_type", "working_dir", "provider_name", "created_at"):
            if s.get(k) not in (None, ""):
                row[k] = s[k]
        usage, note = _ledger(con, ledger_query, s["id"], messages) if ledger_query else ([], None)
        if note:
            row["usage_note"] = note
        for msg, u in zip((m for m in messages if m["role"] == "assistant"), usage, strict=False):
            msg["usage"] = u
        return row


def _messages_query(cols: set[str]) -> str:
    """A session's messages, in order, with what this schema version has of their time and metadata."""
    order = "created_timestamp, id" if "created_timestamp" in cols else "id"
    meta = "metadata_json" if "metadata_json" in cols else "null"
    stamp = "created_timestamp" if "created_timestamp" in cols else "null"
    return (
        f"select role, content_json, {stamp} as created, {meta} as meta from messages "
        f"where session_id = ? order by {order}"
    )


def _ledger_query(cols: set[str]) -> str:
    """A session's calls in ``usage_ledger``, in order: not a compaction's summary call, nor the totals
    carried forward from before the ledger."""
    want = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost")
    picked = ", ".join(c if c in cols else f"null as {c}" for c in want)
    where = "session_id = ?"
    if "is_compaction" in cols:
        where += " and coalesce(is_compaction, 0) = 0"
    if "cost_source" in cols:
        where += " and coalesce(cost_source, '') != 'carried_forward'"
    return f"select {picked} from usage_ledger where {where} order by created_timestamp, id"


def _ledger(
    con: sqlite3.Connection, query: str, sid: str, messages: list[dict]
) -> tuple[list[dict], str | None]:
    """The session's calls' usage in the chat reader's shape, in order, and why none are kept."""
    calls = con.execute(query, (sid,)).fetchall()
    replies = sum(m["role"] == "assistant" for m in messages)
    if not calls:
        return [], None
    if len(calls) != replies:
        return [], f"{len(calls)} calls in usage_ledger against {replies} replies: left out"
    out = []
    for inp, outp, read, write, cost in calls:
        details = {k: v for k, v in (("cached_tokens", read), ("cache_write_tokens", write)) if v is not None}
        u: dict[str, Any] = {"prompt_tokens": inp, "completion_tokens": outp}
        u["prompt_tokens_details"] = details
        if cost is not None:
            u["cost"] = cost
        out.append(u)
    return out, None


def _mark_compactions(traj: Trajectory, summaries: list[str]) -> None:
    """A compaction event on the first step whose user text holds each summary."""
    start = 0
    for text in summaries:
        if not text:
            continue
        k = next((i for i in range(start, len(traj.steps)) if text in traj.steps[i].user_text), None)
        if k is None:
            continue
        traj.steps[k].events.append(
            ContextEvent(kind="compaction", targets=list(range(k)), detail=json.dumps({"source": "goose"}))
        )
        start = k + 1
