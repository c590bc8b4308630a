"""OpenAI Codex CLI session rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One file is one session, one JSON object per line: ``{"timestamp", "type", "payload"}`` with
``type`` one of ``session_meta`` (the session id, working folder, CLI version), ``turn_context``
(the model, per user turn), ``response_item`` (a Responses API item: messages, reasoning, tool
calls and their outputs), ``event_msg`` (UI events; ``token_count`` ones carry the provider's usage
of the latest model call in ``info.last_token_usage``) and ``compacted`` (a summary that replaced the
history).  Rollouts written before the ``payload`` envelope (CLI versions of mid-2025) hold a
``{"id", "timestamp", "instructions"}`` first line and the items themselves on the other lines;
both are read.

Mapping: the items go through :func:`~dtoc_rl.ingest.responses.responses_to_messages` and
:func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`, so a tool call is a step exactly as in a
chat-completions log.  The user messages Codex injects before the task (``<environment_context>``,
``<user_instructions>``, ``AGENTS.md`` instructions) are harness text, read as system prompt, so the
task is the first message the user typed.  Each ``token_count`` event with a new running total gives
its ``last_token_usage`` (``input_tokens`` including ``cached_input_tokens``, ``output_tokens``
including reasoning, as the Responses API counts them) to the model call it follows; repeated events
with an unchanged total are the same call reported twice and are skipped.  A call's time is the
``timestamp`` of the line holding its first item (what the simulator's cache lifetime is measured
against).  Each call carries the model of the ``turn_context`` before it; the session's is the one
most calls went to (``extra.models`` names every one, in the order they came).

A ``web_search_call`` item (the Responses API's own search, run by the provider inside the model
call: codex-rs ``protocol/src/models.rs``, ``ResponseItem::WebSearchCall``, with ``status`` and an
``action``: ``search`` with ``query`` (and ``queries``), ``open_page`` or ``find_in_page`` with a
``url``) is read as a ``web_search`` call of that model call, its ``action`` the arguments.  Codex
writes no id on it (its ``id`` is never serialized) and no result (the search's results stay with
the provider): the id is that of the ``web_search_end`` event written just before it with the same
``action``, else one made up (``web_search_<n>``), and the output is empty (an error where ``status``
is ``failed``), given after the call's other items as a parallel call's is.

Tool outputs as Codex wrote them: older CLIs wrap a command's output as JSON text
(``{"output": "...", "metadata": {"exit_code": 1, ...}}``), newer ones put a header before it
(``Process exited with code 1`` or ``Exit code: 1``, then ``Output:``).  The wrapped text is
unwrapped (the output's own lines are what the labeller compares later calls with), the header is
kept (the model read it); a non-zero exit code marks the output an error.

``codex exec --json`` writes another stream: ``thread.started``, ``turn.started``, ``item.*`` events
and ``turn.completed`` with the turn's usage.  Its completed items are read as calls:
``command_execution`` (``command``, ``aggregated_output``, ``exit_code``) as a ``shell`` call,
``file_change`` as an ``apply_patch`` of the files it changed (with each change's ``diff`` when the
stream has one), ``mcp_tool_call`` as ``server.tool`` with its result or error, ``web_search`` as a call
with no output; ``agent_message`` and ``reasoning`` as the text before the next call.  The stream
has no prompt (the task is empty) and no usage per model call: ``turn.completed`` reports the
thread's running total (codex-rs fills it from ``ThreadTokenUsage.total``), so the last one gives
``tokens_in`` and ``tokens_out``, and each call is billed from the tokens the simulator estimates.

A last line cut short (a session still being written) is left out and marked
``extra.torn_last_line``; a bad line anywhere else fails the file, naming the line.

Rollouts carry no outcome: ``success`` is None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError
from dtoc_rl.ingest.common import count, finalize, run_model
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text, written_lines
from dtoc_rl.ingest.responses import ITEM_TYPES, responses_to_messages

__all__ = ["CodexRolloutIngester"]

_META = re.compile(r'^\s*\{[^\n]*"type"\s*:\s*"session_meta"[^\n]*"payload"\s*:')
_LEGACY_META = re.compile(r'^\s*\{\s*"id"\s*:\s*"[^"\n]*"\s*,\s*"timestamp"\s*:[^\n]*"instructions"\s*:')
_STREAM = re.compile(r'^\s*\{\s*"type"\s*:\s*"thread\.started"')
# the exit code a newer Codex writes before a command's output
_EXIT = re.compile(r"^(?:Process exited with code|Exit code:)\s*(-?\d+)\s*$", re.M)
# user messages Codex writes itself, before or between the user's own
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")


class CodexRolloutIngester(Ingester):
    name = "codex"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix != ".jsonl":
            return False
        if _META.match(head) or _STREAM.match(head):
            return True
        if _LEGACY_META.match(head):  # an older rollout: items follow the first line
            second = head.split("\n", 2)[1] if head.count("\n") >= 1 else ""
            return re.search(r'"(?:type|record_type)"\s*:', second) is not None
        return False

    def parse(self, path: Path) -> Iterator[Trajectory]:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            first = f.readline()
        if _STREAM.match(first):
            yield _parse_stream(self.name, path)
            return
        items: list[dict] = []
        meta: dict[str, Any] = {}
        models: list[str] = []
        current = ""  # the model of the latest turn_context: the one the next calls go to
        last_total: Any = None
        search_end: dict | None = None  # the latest web_search_end event: the id of the search after it
        lines = _Lines(path)
        for lineno, rec in lines:
            kind, payload = rec.get("type"), rec.get("payload")
            if "payload" not in rec:  # a rollout without the envelope
                if lineno == 1 and "instructions" in rec:
                    meta = rec
                elif isinstance(kind, str) and (kind in ITEM_TYPES or kind == "web_search_call"):
                    items.append(_codex_output(_harness_text(rec)))
                continue
            if not isinstance(payload, dict):
                lines.bad.append(f"line {lineno}: payload is {type(payload).__name__}, expected object")
                continue
            if kind == "session_meta":
                meta = payload
            elif kind == "turn_context":
                model = payload.get("model")
                if isinstance(model, str) and model:
                    current = model
                    if model not in models:
                        models.append(model)
            elif kind == "response_item":
                if payload.get("type") == "web_search_call" and search_end is not None:
                    if search_end.get("action") == payload.get("action") and "call_id" not in payload:
                        payload = {**payload, "call_id": search_end.get("call_id")}
                    search_end = None
                # the line's time and the turn's model: on the first item of a model call, the call's
                item = {**_codex_output(_harness_text(payload)), "dtoc_time": rec.get("timestamp")}
                items.append({**item, "dtoc_model": current} if current else item)
            elif kind == "compacted":
                items.append({"type": "dtoc_compaction", "text": payload.get("message")})
            elif kind == "event_msg" and payload.get("type") == "web_search_end":
                search_end = payload
            elif kind == "event_msg" and payload.get("type") == "token_count":
                info = payload.get("info")
                if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
                    continue  # rate limits only, no usage yet
                total = info.get("total_token_usage")
                if total is not None and total == last_total:
                    continue  # the same call reported again
                last_total = total
                items.append({"type": "dtoc_usage", "usage": info["last_token_usage"]})
        lines.check()
        if not items:
            raise IngestError("no response items: an empty session", path)
        rp = responses_to_messages(_web_searches(items), "response_items")
        cp = chat_to_steps(rp.messages, "response_items")
        if not cp.steps:
            raise IngestError("empty trajectory: no assistant turns", path)
        session = str(meta.get("id") or path.stem)
        model = run_model(cp.steps, models[0] if models else str(meta.get("model") or ""))
        extra = {
            k: meta[k]
            for k in ("cwd", "cli_version", "originator", "model_provider", "source")
            if isinstance(meta.get(k), (str, int, float, bool))
        }
        if len(models) > 1:
            extra["models"] = ",".join(models)
        if rp.skipped:
            extra["skipped_items"] = json.dumps(dict(sorted(rp.skipped.items())))
        if lines.torn:
            extra["torn_last_line"] = True
        if rp.unattached_usage:
            extra["unattached_usage_events"] = rp.unattached_usage
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=session,
                task_text=cp.task,
                system_prompt="\n\n".join(t for t in (str(meta.get("instructions") or ""), cp.system) if t),
                success=None,
                outcome_source="",
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )


class _Lines:
    """A Codex JSONL file's objects, ``(line number, object)``, for both layouts it writes.  A bad line
    goes to :attr:`bad` (the readers add their own: a payload or item of the wrong type) and fails the
    file at :meth:`check`; an unreadable last line (a session still being written) is forgiven and
    kept in :attr:`torn`."""

    def __init__(self, path: Path):
        self.path = path
        self.bad: list[str] = []
        self.torn = False

    def __iter__(self) -> Iterator[tuple[int, dict]]:
        lines, self.torn = written_lines(self.path)
        for lineno, rec, err in lines:
            if err is not None:
                self.bad.append(f"line {lineno}: {err}")
            elif not isinstance(rec, dict):
                self.bad.append(f"line {lineno}: not an object")
            else:
                yield lineno, rec

    def check(self) -> None:
        if self.bad:
            bad = self.bad
            shown = "; ".join(bad[:5]) + (f"; … {len(bad) - 5} more" if len(bad) > 5 else "")
            raise IngestError(f"{len(bad)} bad lines: {shown}", self.path)


def _harness_text(item: dict) -> dict:
    # Codex's own user messages become developer messages: chat_to_steps reads them as system prompt
    # (before the task) or as text sent with the next call, never as the task.
    if item.get("type") == "message" and item.get("role") == "user":
        text = content_text(item.get("content"), "message.content").lstrip()
        if text.startswith(_INJECTED):
            return {**item, "role": "developer"}
    return item


def _codex_output(item: dict) -> dict:
    # A command's output as Codex wrote it: JSON-wrapped text unwrapped, a non-zero exit code (in the
    # wrapper's metadata or the header of a newer CLI) marks it an error.
    if item.get("type") not in ("function_call_output", "custom_tool_call_output"):
        return item
    out = item.get("output")
    if not isinstance(out, str):
        return item
    code: Any = None
    if out.startswith("{"):
        try:
            wrapped = json.loads(out)
        except ValueError:
            wrapped = None
        meta = wrapped.get("metadata") if isinstance(wrapped, dict) else None
        if isinstance(meta, dict) and isinstance(wrapped.get("output"), str):  # Codex's own wrapper only
            code = meta.get("exit_code")
            item = {**item, "output": wrapped["output"]}
    else:  # the header lines before "Output:", never the output itself
        m = _EXIT.search(out.split("\nOutput:", 1)[0][:300])
        code = int(m.group(1)) if m else None
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        item = {**item, "dtoc_is_error": True}
    return item


# items after which the model call that made a web search has ended: its (empty) output goes before them
_CALL_ENDS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "dtoc_compaction")


def _web_searches(items: list[dict]) -> list[dict]:
    """``items`` with each ``web_search_call`` as a ``web_search`` function call of the model call that
    made it, its output (empty: Codex keeps no result) given where that call's other outputs begin,
    so the call stays one step's turn (see the module docstring)."""
    out: list[dict] = []
    pending: list[dict] = []
    made = 0
    for it in items:
        kind = it.get("type")
        if kind == "web_search_call":
            cid = it.get("call_id") or it.get("id")
            if not isinstance(cid, str) or not cid:
                made += 1
                cid = f"web_search_{made}"
            action = it.get("action")
            call = {k: v for k, v in it.items() if k.startswith("dtoc_")}
            call |= {"type": "function_call", "call_id": cid, "name": "web_search",
                     "arguments": json.dumps(action if isinstance(action, dict) else {})}  # fmt: skip
            out.append(call)
            pending.append({"type": "function_call_output", "call_id": cid, "output": "",
                            "dtoc_is_error": it.get("status") == "failed"})  # fmt: skip
            continue
        ends = kind in _CALL_ENDS or (kind in ("message", None) and it.get("role") != "assistant")
        if pending and ends:
            out += pending
            pending = []
        out.append(it)
    return out + pending


def _stream_item(item: dict, n: int) -> list[dict]:
    """One completed item of ``codex exec --json`` as Responses items (none for items without a call
    or text: todo lists, errors)."""
    kind = item.get("type")
    cid = str(item.get("id") or f"item_{n}")
    if kind == "agent_message":
        text = item.get("text")
        return [{"type": "message", "role": "assistant", "content": text if isinstance(text, str) else ""}]
    if kind == "reasoning":
        return [
            {"type": "reasoning", "summary": item.get("text") if isinstance(item.get("text"), str) else ""}
        ]
    if kind == "command_execution":
        code, status = item.get("exit_code"), item.get("status")
        failed = status in ("failed", "declined") or (
            isinstance(code, int) and not isinstance(code, bool) and code != 0
        )
        out = item.get("aggregated_output")
        return [
            {"type": "function_call", "call_id": cid, "name": "shell",
             "arguments": json.dumps({"command": item.get("command")})},
            {"type": "function_call_output", "call_id": cid, "output": out if isinstance(out, str) else "",
             "dtoc_is_error": failed},
        ]  # fmt: skip
    if kind == "file_change":
        verbs = {"add": "Add", "delete": "Delete", "update": "Update"}
        raw = item.get("changes")
        changes = (
            [c for c in raw if isinstance(c, dict) and isinstance(c.get("path"), str)]
            if isinstance(raw, list)
            else []
        )
        lines = ["*** Begin Patch"]
        for c in changes:  # the change's diff when the stream has it (newer CLIs), else its file alone
            kind = c.get("kind")
            lines.append(
                f"*** {verbs.get(kind, 'Update') if isinstance(kind, str) else 'Update'} File: {c['path']}"
            )
            if isinstance(c.get("diff"), str) and c["diff"]:
                lines.append(c["diff"].rstrip("\n"))
        patch = "\n".join([*lines, "*** End Patch"])
        return [
            {"type": "custom_tool_call", "call_id": cid, "name": "apply_patch", "input": patch},
            {"type": "custom_tool_call_output", "call_id": cid, "output": str(item.get("status") or ""),
             "dtoc_is_error": item.get("status") == "failed"},
        ]  # fmt: skip
    if kind == "mcp_tool_call":
        name = ".".join(str(x) for x in (item.get("server"), item.get("tool")) if x) or "mcp"
        error, result = item.get("error"), item.get("result")
        if error is not None:
            out = error.get("message") if isinstance(error, dict) else error
        else:
            out = result.get("content") if isinstance(result, dict) else result
        return [
            {"type": "function_call", "call_id": cid, "name": name,
             "arguments": json.dumps(item.get("arguments") or {})},
            {"type": "function_call_output", "call_id": cid, "output": out if out is not None else "",
             "dtoc_is_error": error is not None},
        ]  # fmt: skip
    if kind == "web_search":
        return [
            {"type": "function_call", "call_id": cid, "name": "web_search",
             "arguments": json.dumps({"query": item.get("query")})},
            {"type": "function_call_output", "call_id": cid, "output": ""},
        ]  # fmt: skip
    return []


def _parse_stream(source: str, path: Path) -> Trajectory:
    """A ``codex exec --json`` stream (see the module docstring)."""
    items: list[dict] = []
    skipped: dict[str, int] = {}
    thread = ""
    usage: dict = {}  # the last turn's: codex exec reports the thread's running total, not the turn's
    turns = 0
    lines = _Lines(path)
    for lineno, rec in lines:
        kind = rec.get("type")
        if kind == "thread.started":
            thread = str(rec.get("thread_id") or thread)
        elif kind == "item.completed":
            item = rec.get("item")
            if not isinstance(item, dict):
                lines.bad.append(f"line {lineno}: item is {type(item).__name__}, expected object")
                continue
            mapped = _stream_item(item, len(items))
            if not mapped:
                skipped[str(item.get("type"))] = skipped.get(str(item.get("type")), 0) + 1
            items.extend(mapped)
        elif kind == "turn.completed":
            usage = rec.get("usage") if isinstance(rec.get("usage"), dict) else {}
            turns += 1
    lines.check()
    rp = responses_to_messages(items, "items")
    cp = chat_to_steps(rp.messages, "items")
    if not cp.steps:
        raise IngestError("empty trajectory: no completed items", path)
    extra: dict[str, Any] = {"format": "codex exec --json", "turns": turns}
    if skipped:
        extra["skipped_items"] = json.dumps(dict(sorted(skipped.items())))
    if lines.torn:
        extra["torn_last_line"] = True
    session = thread or path.stem
    return finalize(
        Trajectory(
            traj_id=f"{source}/{session}",
            source=source,
            model_raw="",
            model_family=normalize_family(""),
            task_id=session,
            task_text=cp.task,
            system_prompt=cp.system,
            success=None,
            outcome_source="",
            source_path=str(path),
            extra=json.dumps(extra),
            tokens_in=count(usage, "input_tokens"),
            tokens_out=count(usage, "output_tokens"),
            steps=cp.steps,
        )
    )
