"""OpenCode session exports (``opencode export <sessionID>``).

Format (sst/opencode, now anomalyco/opencode: ``packages/opencode/src/cli/cmd/
export.ts`` writes ``{"info": Session.Info, "messages": [{"info", "parts"}],
"todos"?}``; message and part shapes from ``packages/opencode/src/session/
message-v2.ts``):

* ``info``: ``id`` (``ses_…``), ``projectID``, ``directory``, ``title``,
  ``version``, ``time.created/updated`` (ms), optional ``parentID``.
* user message ``info``: ``role: "user"``, ``time.created``, ``agent``,
  ``model {providerID, modelID}``, optional ``system``; parts ``text``
  (``synthetic``/``ignored`` flags), ``file``, ``agent``, ``subtask``,
  ``compaction`` (``auto``, optional ``tail_start_id``).
* assistant message ``info``: ``role: "assistant"``, ``parentID``,
  ``modelID``, ``providerID``, ``cost``, ``tokens {input, output, reasoning,
  cache {read, write}}``, ``time.created/completed``, optional ``summary: true``
  (a compaction summary), ``error``, ``finish``; older versions also a
  ``system`` list.  Parts: ``step-start`` … ``step-finish`` bracket one LLM
  call; ``text``, ``reasoning``, ``tool`` (``callID``, ``tool``, ``state
  {status: pending|running|completed|error, input, output | error, title,
  metadata, time {start, end, compacted?}}``), ``patch``, ``snapshot``,
  ``retry``.

Mapping: each ``step-start`` opens a ``turn`` (a message without step parts is
one turn); each ``tool`` part is a step (same-turn parts are parallel calls;
assistant text on the first, reasoning too); a turn with text but no tool part
is a tool-less step.  ``tool_args`` = ``json.dumps(state.input)``; output is
``state.output`` (completed) or ``state.error`` (error, ``output_is_error``);
pending/running parts keep ``output = None``.  Times are ms → s.  The first
user text is the task; later user text → next step's ``user_text``.

Context management recorded by OpenCode itself:

* **prune** (``SessionCompaction.prune``) sets ``state.time.compacted`` on old
  tool parts; from then on the model sees ``"[Old tool result content
  cleared]"``.  Each distinct ``compacted`` time becomes one
  ``ContextEvent("mask")`` on the first step that starts at/after it (the last
  step if none), targeting the pruned steps.  The original output is kept.
* **compaction**: a user message with a ``compaction`` part, answered by an
  assistant message with ``summary: true``.  Earlier messages (those before
  ``tail_start_id`` when it is set) leave the context: ``ContextEvent(
  "compaction")`` on the summary step (or the next step), targeting them.

Because both are timestamped, ``masked_before`` is filled for steps with a
timestamp: the steps pruned (``compacted <= step start``) or compacted away
before that step.

Each model call's usage is its ``step-finish`` part's ``tokens`` and ``cost`` (``input`` plus the cache
reads and writes as the call's input), kept on the call's first step.
Accounting: ``cost_usd`` and tokens are summed over assistant ``info``
(``tokens_in`` = input + cache read + cache write, ``tokens_out`` = output +
reasoning); ``api_calls`` = number of ``step-start`` parts.

OpenCode has no outcome field: ``success`` is None.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory, Usage
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cap_output, finalize, new_step
from dtoc_rl.ingest.sqlite_logs import SQLITE_MAGIC, has_tables, json_column, open_log_database

__all__ = ["OpenCodeDatabaseIngester", "OpenCodeIngester", "is_opencode_db"]


def _without_undone(msgs: list, revert: Any) -> tuple[list, int]:
    """The messages still in the model's context after an ``/undo``: a session's ``revert`` names the
    first message (and part) undone, which stay in the store until the next prompt clears them; and
    how many messages were left out."""
    if not isinstance(revert, dict) or not revert.get("messageID"):
        return msgs, 0
    ids = [m.get("info", {}).get("id") if isinstance(m, dict) else None for m in msgs]
    if revert["messageID"] not in ids:
        return msgs, 0
    cut = ids.index(revert["messageID"])
    part = revert.get("partID")
    if part and isinstance(msgs[cut].get("parts"), list):  # the message kept up to the undone part
        pids = [p.get("id") if isinstance(p, dict) else None for p in msgs[cut]["parts"]]
        # a part the message does not hold: the message is kept whole, as OpenCode's cleanup keeps it
        kept = {**msgs[cut], "parts": msgs[cut]["parts"][: pids.index(part)]} if part in pids else msgs[cut]
        return [*msgs[:cut], kept], len(msgs) - cut - 1
    return msgs[:cut], len(msgs) - cut


def _call_usage(part: dict) -> Usage | None:
    """One model call's usage from its ``step-finish`` part: ``tokens.input`` is the uncached rest
    (OpenCode takes the cache reads out), reasoning is billed as output; a cost of 0, what OpenCode
    logs for a model it has no prices for, is no figure."""
    tok = part.get("tokens")
    if not isinstance(tok, dict):
        return None
    cache = tok.get("cache") if isinstance(tok.get("cache"), dict) else {}
    read, write = int(cache.get("read") or 0), int(cache.get("write") or 0)
    cost = part.get("cost")
    return Usage(
        input_tokens=int(tok.get("input") or 0) + read + write,
        cached_tokens=read,
        cache_write_tokens=write,
        output_tokens=int(tok.get("output") or 0) + int(tok.get("reasoning") or 0),
        cost_usd=float(cost) if isinstance(cost, (int, float)) and cost > 0 else None,
    )


def _ms(value: Any) -> float | None:
    return float(value) / 1000.0 if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _part_time(part: dict) -> float | None:
    t = part.get("time")
    if isinstance(t, dict):
        return _ms(t.get("start"))
    st = part.get("state")
    if isinstance(st, dict) and isinstance(st.get("time"), dict):
        return _ms(st["time"].get("start"))
    return None


class OpenCodeIngester(Ingester):
    name = "opencode"
    source = "opencode"  # both readers' trajectories: one harness

    def detect(self, path: Path, head: str) -> bool:
        return (
            path.suffix == ".json"
            and '"info"' in head
            and '"messages"' in head
            and ('"parts"' in head or '"sessionID"' in head)
            and ('"ses_' in head or '"projectID"' in head)
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        data = read_json(path)
        if not isinstance(data, dict):
            raise IngestError(f"expected an OpenCode export object, got {type(data).__name__}", path)
        info = data.get("info")
        msgs = data.get("messages")
        if not isinstance(info, dict):
            raise IngestError(f"'info' is {type(info).__name__}, expected the session object", path)
        if not isinstance(msgs, list):
            raise IngestError(f"'messages' is {type(msgs).__name__}, expected a list", path)
        try:
            yield self._build(path, info, msgs, data)
        except IngestError as e:
            raise IngestError(e.reason, path) from None

    def _build(self, path: Path, info: dict, msgs: list, data: dict) -> Trajectory:
        msgs, undone = _without_undone(msgs, info.get("revert"))
        steps: list[Step] = []
        step_msg: list[int] = []  # message index of each step
        pending_user: list[str] = []
        pending_events: list[ContextEvent] = []
        task: str | None = None
        system = ""
        turn = -1
        models: dict[str, int] = defaultdict(int)
        providers: set[str] = set()
        cost = 0.0
        tin = tout = 0
        llm_calls = 0
        errors: list[str] = []
        compacted: dict[int, float] = {}  # step index → prune time (s)
        # (compaction message index, its id, steps it removes from later prompts)
        hidden_after: list[tuple[int, Any, list[int]]] = []
        msg_ids: list[Any] = []
        # per assistant turn: its first step, text/reasoning seen before any tool part, start time
        first: Step | None = None
        buf_text: list[str] = []
        buf_reason: list[str] = []
        turn_ts: float | None = None
        call_start = 0  # the first step of the model call a step-finish part closes

        def add(msg_index: int, **kw: Any) -> Step:
            nonlocal pending_user, pending_events
            step = new_step(turn=turn, user_text="\n\n".join(p for p in pending_user if p), **kw)
            step.events = pending_events
            pending_user, pending_events = [], []
            steps.append(step)
            step_msg.append(msg_index)
            return step

        def close(msg_index: int) -> None:
            """End a turn; text/reasoning without a tool part becomes a tool-less step."""
            nonlocal first, buf_text, buf_reason
            if first is None and (buf_text or buf_reason):
                add(
                    msg_index,
                    timestamp=turn_ts,
                    assistant_text="\n".join(buf_text),
                    reasoning="\n".join(buf_reason),
                )
            first, buf_text, buf_reason = None, [], []

        for mi, msg in enumerate(msgs):
            w = f"messages[{mi}]"
            if not isinstance(msg, dict) or not isinstance(msg.get("info"), dict):
                raise IngestError(f"{w} must be an object with an 'info' object")
            parts = msg.get("parts")
            if not isinstance(parts, list):
                raise IngestError(f"{w}.parts is {type(parts).__name__}, expected list")
            mi_info = msg["info"]
            msg_ids.append(mi_info.get("id"))
            role = mi_info.get("role")
            if role == "user":
                texts = []
                cpart: dict | None = None
                for pi, part in enumerate(parts):
                    if not isinstance(part, dict):
                        raise IngestError(f"{w}.parts[{pi}] is {type(part).__name__}, expected object")
                    kind = part.get("type")
                    if kind == "text" and not part.get("ignored"):
                        texts.append(str(part.get("text", "")))
                    elif kind == "file" and part.get("mime") not in ("text/plain", "application/x-directory"):
                        texts.append(f"[Attached {part.get('mime')}: {part.get('filename') or 'file'}]")
                    elif kind == "subtask":
                        texts.append(str(part.get("prompt", "")))
                    elif kind == "compaction":
                        cpart = part
                if isinstance(mi_info.get("system"), str) and not system:
                    system = mi_info["system"]
                if cpart is not None:
                    # the compaction request: earlier messages (before tail_start_id) leave the context
                    tail = cpart.get("tail_start_id")
                    cut = msg_ids.index(tail) if tail in msg_ids else mi
                    targets = [i for i, m in enumerate(step_msg) if m < cut]
                    hidden_after.append((mi, mi_info.get("id"), targets))
                    pending_events.append(
                        ContextEvent(
                            kind="compaction",
                            targets=targets,
                            detail=json.dumps(
                                {
                                    "source": "opencode compaction part",
                                    "auto": cpart.get("auto"),
                                    "overflow": cpart.get("overflow"),
                                    "tail_start_id": tail,
                                }
                            ),
                        )
                    )
                    continue
                text = "\n".join(t for t in texts if t)
                if task is None and not steps:
                    task = text
                elif text:
                    pending_user.append(text)
            elif role == "assistant":
                model = mi_info.get("modelID")
                if isinstance(model, str) and model:
                    models[model] += 1
                if isinstance(mi_info.get("providerID"), str):
                    providers.add(mi_info["providerID"])
                if isinstance(mi_info.get("system"), list) and not system:
                    system = "\n".join(str(s) for s in mi_info["system"])
                if isinstance(mi_info.get("cost"), (int, float)):
                    cost += mi_info["cost"]
                tok = mi_info.get("tokens") if isinstance(mi_info.get("tokens"), dict) else {}
                cache = tok.get("cache") if isinstance(tok.get("cache"), dict) else {}
                tin += int(tok.get("input") or 0) + int(cache.get("read") or 0) + int(cache.get("write") or 0)
                tout += int(tok.get("output") or 0) + int(tok.get("reasoning") or 0)
                if mi_info.get("error"):
                    err = mi_info["error"]
                    errors.append(err.get("name", "error") if isinstance(err, dict) else str(err))
                has_steps = any(isinstance(p, dict) and p.get("type") == "step-start" for p in parts)
                turn_ts = _ms((mi_info.get("time") or {}).get("created"))
                if not has_steps:
                    turn += 1
                for pi, part in enumerate(parts):
                    pw = f"{w}.parts[{pi}]"
                    if not isinstance(part, dict):
                        raise IngestError(f"{pw} is {type(part).__name__}, expected object")
                    kind = part.get("type")
                    if kind == "step-start":
                        close(mi)
                        turn += 1
                        llm_calls += 1
                        turn_ts = None
                        call_start = len(steps)
                    elif kind == "step-finish":
                        close(mi)
                        if len(steps) > call_start and steps[call_start].usage is None:
                            steps[call_start].usage = _call_usage(part)
                            steps[call_start].model = model if isinstance(model, str) and model else None
                    elif kind in ("text", "reasoning"):
                        text = str(part.get("text", ""))
                        if turn_ts is None:
                            turn_ts = _part_time(part)
                        if first is not None:
                            attr = "assistant_text" if kind == "text" else "reasoning"
                            cur = getattr(first, attr)
                            setattr(first, attr, f"{cur}\n{text}" if cur else text)
                        else:
                            (buf_text if kind == "text" else buf_reason).append(text)
                    elif kind == "tool":
                        st = part.get("state")
                        if not isinstance(st, dict):
                            raise IngestError(f"{pw}.state is {type(st).__name__}, expected object")
                        name = part.get("tool")
                        if not isinstance(name, str) or not name:
                            raise IngestError(f"{pw}: tool part without a 'tool' name")
                        status = st.get("status")
                        if status not in ("pending", "running", "completed", "error"):
                            raise IngestError(f"{pw}.state.status is {status!r}")
                        if status == "completed":
                            out, is_err = st.get("output"), False
                            if not isinstance(out, str):
                                raise IngestError(
                                    f"{pw}.state.output is {type(out).__name__}, expected string"
                                )
                        elif status == "error":
                            out, is_err = str(st.get("error", "")), True
                        else:
                            out, is_err = None, False
                        ts = _part_time(part)
                        is_first = first is None
                        step = add(
                            mi,
                            timestamp=ts,
                            assistant_text="\n".join(buf_text) if is_first else "",
                            reasoning="\n".join(buf_reason) if is_first else "",
                            tool_name=name,
                            tool_args=json.dumps(st.get("input") if st.get("input") is not None else {}),
                            tool_call_id=part.get("callID"),
                            output=cap_output(out),
                            output_is_error=is_err,
                        )
                        if is_first:
                            first, buf_text, buf_reason = step, [], []
                        ct = (
                            (st.get("time") or {}).get("compacted")
                            if isinstance(st.get("time"), dict)
                            else None
                        )
                        if _ms(ct) is not None:
                            compacted[len(steps) - 1] = _ms(ct)
                    # patch / snapshot / retry / agent parts carry no model-visible text
                close(mi)
            else:
                raise IngestError(f"{w}.info.role is {role!r}, expected 'user' or 'assistant'")

        if pending_events and steps:
            steps[-1].events.extend(pending_events)
        if not steps:
            raise IngestError("empty trajectory: no assistant parts")

        # prune events: one mask event per distinct prune time
        by_time: dict[float, list[int]] = defaultdict(list)
        for idx, t in compacted.items():
            by_time[t].append(idx)
        for t, targets in sorted(by_time.items()):
            carrier = next((s for s in steps if s.timestamp is not None and s.timestamp >= t), steps[-1])
            carrier.events.append(
                ContextEvent(
                    kind="mask",
                    targets=sorted(targets),
                    detail=json.dumps(
                        {"source": "opencode prune state.time.compacted", "compacted_ms": t * 1000}
                    ),
                )
            )
        for i, s in enumerate(steps):
            if s.timestamp is None:
                continue
            hidden = {j for j, t in compacted.items() if t <= s.timestamp}
            m = msgs[step_msg[i]]["info"]
            for comp_mi, comp_id, targets in hidden_after:
                # the summary message itself is written from the full history
                if step_msg[i] > comp_mi and m.get("parentID") != comp_id:
                    hidden.update(targets)
            s.masked_before = sorted(hidden)

        model_raw = max(models, key=models.get) if models else ""
        sid = str(info.get("id") or path.stem)
        extra = {
            "title": info.get("title"),
            "directory": info.get("directory"),
            "project_id": info.get("projectID"),
            "parent_session": info.get("parentID"),
            "opencode_version": info.get("version"),
            "providers": sorted(providers),
            "models": dict(models),
            "assistant_errors": errors,
            "pruned_steps": len(compacted),
            "trailing_user_text": "\n\n".join(pending_user) or None,
            "todos": len(data.get("todos") or []),
            "undone_messages": undone,  # an /undo's, still stored but out of the model's context
        }
        return finalize(
            Trajectory(
                traj_id=f"{self.source}/{sid}",
                source=self.source,
                model_raw=model_raw,
                model_family=normalize_family(model_raw),
                task_id=sid,
                task_text=task or "",
                system_prompt=system,
                success=None,
                outcome_source="",
                cost_usd=cost,
                tokens_in=tin,
                tokens_out=tout,
                api_calls=llm_calls or None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=steps,
            )
        )


class OpenCodeDatabaseIngester(OpenCodeIngester):
    """OpenCode's own store since 1.x: ``~/.local/share/opencode/opencode.db``, one SQLite database
    for every session (tables ``session``, ``message`` and ``part``: each message's and part's JSON
    in ``data``, its id and session in columns).  Read-only; each session is rebuilt as its export
    (``{"info", "messages": [{"info", "parts"}]}``, messages and parts in the order they were made)
    and read as one, so a session reads the same from the database as from ``opencode export``."""

    name = "opencode-db"
    source = "opencode"

    def detect(self, path: Path, head: str) -> bool:
        return head.startswith(SQLITE_MAGIC) and is_opencode_db(path)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        from dtoc_rl.ingest.openai_chat import parse_rows

        con = open_log_database(path)
        try:
            sessions = con.execute("select * from session order by time_created, id").fetchall()
            if not sessions:  # a database OpenCode made before its first session
                return
            rows = [(s["id"], s, None) for s in sessions]
            one = lambda s, _: self._build(path, _session_info(s), _session_messages(con, s["id"]), {})  # noqa: E731
            yield from parse_rows(path, rows, one, unit="session")
        except sqlite3.Error as e:
            raise IngestError(f"cannot read the database: {e}", path) from None
        finally:
            con.close()


_DB_TABLES = {
    "session": {"id", "directory", "title", "time_created"},
    "message": {"id", "session_id", "time_created", "data"},
    "part": {"id", "message_id", "session_id", "data"},
}


def is_opencode_db(path: Path) -> bool:
    """Whether ``path`` is a SQLite file holding OpenCode's session, message and part tables."""
    return has_tables(path, _DB_TABLES)


def _session_info(row: sqlite3.Row) -> dict:
    keys = row.keys()
    info = {k: row[k] for k in ("id", "slug", "directory", "title", "version") if k in keys}
    info["projectID"] = row["project_id"] if "project_id" in keys else None
    if "parent_id" in keys and row["parent_id"]:
        info["parentID"] = row["parent_id"]
    info["time"] = {k: row[f"time_{k}"] for k in ("created", "updated") if f"time_{k}" in keys}
    if "revert" in keys and row["revert"]:
        info["revert"] = json_column(row["revert"], f"session {row['id']} revert")
    return info


def _session_messages(con: sqlite3.Connection, sid: str) -> list[dict]:
    """A session's messages as its export lists them: each message's ``data`` with its id, and its
    parts' ``data`` with theirs, each in the order made."""
    parts: dict[str, list[dict]] = defaultdict(list)
    # parts in OpenCode's own order, by id (time_created is only a part's first write)
    for row in con.execute("select id, message_id, data from part where session_id = ? order by id", (sid,)):
        parts[row["message_id"]].append({**_data(row["data"], f"part {row['id']}"), "id": row["id"]})
    out = []
    for row in con.execute(
        "select id, data from message where session_id = ? order by time_created, id", (sid,)
    ):
        info = {**_data(row["data"], f"message {row['id']}"), "id": row["id"], "sessionID": sid}
        out.append({"info": info, "parts": parts.get(row["id"], [])})
    return out


def _data(text: Any, what: str) -> dict:
    value = json_column(text, what)
    if not isinstance(value, dict):
        raise IngestError(f"{what}: its data is {type(value).__name__}, expected an object")
    return value
