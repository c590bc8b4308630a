"""pi coding agent sessions (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``).

Format (badlogic/pi-mono, ``packages/coding-agent/docs/session-format.md``; read off real sessions of
pi 0.73): a header line ``{"type": "session", "version", "id", "timestamp", "cwd"}``, then entries
forming a tree by ``id`` / ``parentId`` (version 1, before the tree, wrote them one after another:
read in file order).  ``message`` entries hold the
agent's messages: ``user`` (text or content blocks), ``assistant`` (``text``, ``thinking`` and
``toolCall`` blocks ``{"id", "name", "arguments"}``; ``model``, ``provider`` and ``usage``: ``input``
without the cache, ``cacheRead``, ``cacheWrite``, ``output``, ``cost.total``), ``toolResult``
(``toolCallId``, ``toolName``, content blocks, ``isError``), ``bashExecution`` (a command the user
ran with ``!``; its output goes to the model unless ``excludeFromContext``) and ``custom`` (an
extension's message; extensions also write ``custom_message`` entries, sent to the model too) and,
since pi 0.87, ``system`` (the prompt as a transcript message: ``content``, named ``sections`` of text,
``toolsAdded`` definitions and ``toolsRemoved`` names; the first is the system prompt, later ones
change it from there on).
An assistant message that failed or was aborted (``stopReason``) stays in the file but is never sent
again: it and its calls' results are left out (``extra.failed_calls``).  A ``compaction`` entry's
``summary`` replaced the history before
``firstKeptEntryId``; a ``branch_summary`` carries what an abandoned branch found.  Other entries
(model and thinking-level changes, labels, session names) send the model nothing.

Mapping (through :func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`): the session is the branch that
ends at the file's last entry, root first; each tool call a step, its ``toolResult`` the output; the
user's own commands and extensions' messages are user text.  A ``system`` message's text is its
content then its sections, as pi renders it: the system prompt when it comes before the first call,
else the next call's user text, with the definitions of the tools it adds.  The tools the first call
is offered are sent with every call but held in no text field: ``unlogged_prompt_tokens`` is at
least their definitions' tokens (more when the first call's logged input leaves more unaccounted
for).  A compaction is a compaction event whose summary is the next call's user text, and the steps
before ``firstKeptEntryId`` its targets.
Usage: ``input + cacheRead + cacheWrite`` the call's input, the cache
counts and ``cost.total`` as logged (a total of 0, what pi logs for a model it has no prices for, is
no figure).  Each call's model is its assistant message's, the run's the one most calls went to
(``common.run_model``); the task the first user
text; sessions record no outcome (``success`` None).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.core.tokens import estimator_for_model
from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError
from dtoc_rl.ingest.common import finalize, lost_lines, read_records, run_model, tree_branch
from dtoc_rl.ingest.openai_chat import chat_to_steps, drop_orphan_replies

__all__ = ["PiAgentIngester"]


class PiAgentIngester(Ingester):
    name = "pi"

    def detect(self, path: Path, head: str) -> bool:
        first = head.lstrip().split("\n", 1)[0]
        # version 2 and 3 link entries by parentId; version 1 wrote them one after another
        linked = '"parentId"' in head or '"type":"message"' in head.replace(" ", "")
        return path.suffix == ".jsonl" and '"type":"session"' in first.replace(" ", "") and linked

    def parse(self, path: Path) -> Iterator[Trajectory]:
        numbered, bad = read_records(path)
        entries = [rec for _, rec in numbered]
        header = next((e for e in entries if e.get("type") == "session"), None)
        if header is None:
            raise IngestError("no session header line: not a pi session", path)
        body = [(n, e) for n, e in numbered if e is not header]
        if any("id" in e for _, e in body):
            branch, bridged = tree_branch(body, "id", "parentId", bridge=bool(bad))
        else:  # version 1: a linear session, as pi migrates it
            branch, bridged = [e for _, e in body], 0
        msgs: list[dict] = []
        model, provider = "", ""
        failed: list[str] = []
        tools: dict[str, dict] = {}  # the tools offered to the first call, by name
        called = False
        for e in branch:
            kind = e.get("type")
            if kind == "message" and isinstance(e.get("message"), dict):
                m = e["message"]
                if m.get("role") == "assistant" and m.get("stopReason") in ("error", "aborted"):
                    # kept in the file for its history, never sent again (nor its calls' results)
                    failed.append(str(m.get("errorMessage") or m["stopReason"])[:200])
                    continue
                if m.get("role") == "system":
                    msgs.append(_system(m, None if called else tools))
                    continue
                msgs += _chat(m, e)
                called = called or m.get("role") == "assistant"
                if m.get("role") == "assistant" and isinstance(m.get("model"), str):
                    model, provider = model or m["model"], provider or str(m.get("provider") or "")
            elif kind == "custom_message":  # an extension's message, sent to the model
                msgs.append({"role": "user", "content": _text(e.get("content"))})
            elif kind in ("compaction", "branch_summary") and isinstance(e.get("summary"), str):
                kept = _kept_turns(branch, e.get("firstKeptEntryId"), e)
                msgs.append({"role": "user", "content": e["summary"], "dtoc_compaction": kind == "compaction",
                             "dtoc_keeps_turns": kept})  # fmt: skip
        # the results of calls no message kept (a failed call's, a line lost) never reach the model
        orphans = drop_orphan_replies(msgs) if bad or failed else 0
        cp = chat_to_steps(msgs, "entries")
        if not cp.steps:
            raise IngestError("empty session: no model call", path)
        extra: dict[str, Any] = {
            "cwd": header.get("cwd"),
            "version": header.get("version"),
            "provider": provider,
        }
        if isinstance(header.get("parentSession"), str):  # a session forked or started from another
            extra["parent_session"] = header["parentSession"]
        if len(branch) < len(entries) - 1:
            extra["entries_off_branch"] = len(entries) - 1 - len(branch)
        extra.update(lost_lines(bad, bridged, orphans))
        if failed:
            extra["failed_calls"] = failed
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        if tools:
            extra["tools"] = list(tools)
        session = str(header.get("id") or path.stem)
        model = run_model(cp.steps, model)
        traj = finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=session,
                task_text=cp.task,
                system_prompt=cp.system,
                success=None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )
        # the definitions go with every call, in no text field: at least their tokens are unlogged, more
        # when the first call's logged input leaves more unaccounted for (finalize measures that)
        if tools:
            est = estimator_for_model(model)
            defined = sum(est.count(_definition(t)) for t in tools.values())
            traj.unlogged_prompt_tokens = max(traj.unlogged_prompt_tokens, defined)
        yield traj


def _system(m: dict, tools: dict[str, dict] | None) -> dict:
    """A pi ``system`` message as a chat one: its content, then its sections' texts (a section set to
    null is removed, no text), as pi renders a system message.  ``tools``: the tools offered so far,
    which its removals and additions change; None after the first call, when the definitions it adds
    are text of that call's prompt."""
    sections = m.get("sections") if isinstance(m.get("sections"), dict) else {}
    parts = [_text(m.get("content")), *(v for v in sections.values() if isinstance(v, str))]
    added = [t for t in _list(m.get("toolsAdded")) if isinstance(t, dict) and isinstance(t.get("name"), str)]
    if tools is None:
        parts += [_definition(t) for t in added]
    else:
        for gone in _list(m.get("toolsRemoved")):  # pi removes before it adds: a redefinition replaces
            name = gone.get("name") if isinstance(gone, dict) else gone
            if isinstance(name, str):
                tools.pop(name, None)
        tools.update((t["name"], t) for t in added)
    return {"role": "system", "content": "\n\n".join(p for p in parts if p)}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _definition(tool: dict) -> str:
    """A tool's definition as the model is sent it: its name, description and parameters' schema."""
    return json.dumps({k: tool[k] for k in ("name", "description", "parameters") if k in tool})


def _kept_turns(branch: list[dict], first_kept: Any, compaction: dict) -> int:
    """How many model turns a compaction kept after its summary: those from ``firstKeptEntryId`` on
    (a failed call, never sent again, is no turn)."""
    ids = [e.get("id") for e in branch]
    if first_kept not in ids or compaction not in branch:
        return 0
    return sum(
        isinstance(m := e.get("message"), dict)
        and m.get("role") == "assistant"
        and m.get("stopReason") not in ("error", "aborted")
        for e in branch[ids.index(first_kept) : branch.index(compaction)]
    )


def _text(content: Any) -> str:
    """Content blocks' text (an image a marker), or a string as it is."""
    if isinstance(content, str):
        return content
    out = []
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif isinstance(b, dict) and b.get("type") == "image":
            out.append(f"[{b.get('mimeType') or 'image'}]")
    return "".join(out)


def _chat(m: dict, entry: dict) -> list[dict]:
    """One pi message as chat-completions messages."""
    role = m.get("role")
    if role == "assistant":
        blocks = [b for b in m.get("content") or [] if isinstance(b, dict)]
        calls = [
            {"id": b.get("id"), "function": {"name": b.get("name"), "arguments": b.get("arguments") or {}}}
            for b in blocks
            if b.get("type") == "toolCall"
        ]
        thinking = "\n\n".join(b.get("thinking") or "" for b in blocks if b.get("type") == "thinking")
        out = {"role": "assistant", "content": _text(blocks), "tool_calls": calls, "reasoning": thinking,
               "timestamp": m.get("timestamp") or entry.get("timestamp"),
               "model": m.get("model")}  # fmt: skip
        u = m.get("usage")
        if isinstance(u, dict):  # input is the uncached rest, as Anthropic counts it
            cost = (u.get("cost") if isinstance(u.get("cost"), dict) else {}).get("total")
            out["usage"] = {
                "input_tokens": u.get("input"),
                "cache_read_input_tokens": u.get("cacheRead"),
                "cache_creation_input_tokens": u.get("cacheWrite"),
                "output_tokens": u.get("output"),
                # pi prices a model it has no prices for at 0: no figure, not a free call
                "cost": cost if isinstance(cost, (int, float)) and cost > 0 else None,
            }
        return [out]
    if role == "toolResult":
        return [{"role": "tool", "tool_call_id": m.get("toolCallId"), "content": _text(m.get("content")),
                 "is_error": m.get("isError") is True}]  # fmt: skip
    if role == "bashExecution":  # the user's own command: its output is user text, unless kept out
        if m.get("excludeFromContext"):
            return []
        return [{"role": "user", "content": f"$ {m.get('command') or ''}\n{m.get('output') or ''}"}]
    return [{"role": "user", "content": _text(m.get("content"))}]  # user, custom
