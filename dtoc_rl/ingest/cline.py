"""Cline and Roo Code task folders (VS Code extensions; ``<globalStorage>/<extension>/tasks/<task id>/``).

A task folder holds ``api_conversation_history.json``, the messages sent to the model (Anthropic
``MessageParam`` list), ``ui_messages.json``, what the chat panel showed, and
``task_metadata.json``.  What is read (the format as ``cline/cline`` ``src/core/task`` writes it):

* the model writes its tool call as XML in its reply, one per message:
  ``<read_file>\\n<path>foo.py</path>\\n</read_file>`` (a tool name, then one element per parameter);
  models on native tool calling write ``tool_use`` blocks instead, answered by ``tool_result``
  blocks or (Cline 3.51) by text blocks as below, one answer for each call in the calls' order, a call
  not run answered ``Tool [name] was not executed ...`` or ``Skipping tool [name ...] ...`` (an error);
* the next user message answers it: a text block ``[read_file for 'foo.py'] Result:``, the result's
  blocks, then an ``<environment_details>`` block the extension adds to every user message (kept as
  the next call's user text, not as the tool's output);
* ``ui_messages.json``: each model call's ``api_req_started`` message, whose text is JSON
  ``{tokensIn, tokensOut, cacheWrites, cacheReads, cost}``, in the order of the calls, with its
  time (``ts``, milliseconds);
* ``task_metadata.json``: ``model_usage`` (``model_id``, ``model_provider_id``) names the model.

How ``tokensIn`` counts depends on who wrote it.  Cline's Anthropic, OpenRouter, OpenAI (native),
Gemini and DeepSeek handlers, and its own gateway, report it without the cache's reads and writes, so
with ``task_metadata.json`` naming one of those providers the prompt is the three together; its
OpenAI-compatible, LiteLLM and LM Studio handlers report the whole prompt, as Roo Code does; with no
provider named, a ``tokensIn`` smaller than the cache's share is taken as the rest, else as the whole.
The Cline SDK's sessions (``~/.cline/data/sessions/<id>/<id>.messages.json``, beside ``<id>.json``)
hold the same blocks, each reply with its ``metrics`` (``inputTokens`` with the cached part,
``cacheReadTokens``, ``cacheWriteTokens``, ``outputTokens``, ``cost``), ``modelInfo`` and ``ts``; a
tool result's content may be a list of ``{query, result}`` entries.  Their usage is kept only when
every reply has metrics (one reply's alone may be the run's total), and a compaction rewrites the
file, so a compacted session is only its tail (``extra.compacted`` says how many messages went).
Replies that all carry the SDK's ``metrics`` are billed from them (the extension's own
``metrics.tokens`` leave the cache's reads and writes apart unseen, so ``ui_messages.json`` is read).
A call is matched to a reply by order only when ``ui_messages.json`` holds as many calls as the
conversation has replies (else the usage is left out and ``extra.usage`` says why).
Roo Code's condensing writes a summary message (``isSummary``, as an assistant message or, lately, a
user one): no model reply, its text is read as the next call's user text; which earlier messages it
replaced is not modelled (no compaction event), so nothing is lost but the prompts after it are
counted as if the condensed messages were still sent.  A tool this reader does not list still counts
when the next user message answers it by name (``[name ...] Result:``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Step, Trajectory, Usage
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cache_usage, cap_output, finalize, new_step, number, read_json_beside
from dtoc_rl.ingest.openai_chat import iso_to_epoch

__all__ = ["TOOLS", "ClineIngester"]

#: The tools Cline and Roo Code describe to the model (their XML elements).
TOOLS = (
    "execute_command", "read_file", "write_to_file", "replace_in_file", "search_files", "list_files",
    "list_code_definition_names", "browser_action", "use_mcp_tool", "access_mcp_resource",
    "ask_followup_question", "attempt_completion", "new_task", "plan_mode_respond",
    "load_mcp_documentation", "web_fetch", "new_rule", "condense", "summarize_task", "report_bug",
    # Roo Code's own
    "apply_diff", "insert_content", "search_and_replace", "switch_mode", "codebase_search",
    "fetch_instructions", "update_todo_list",
)  # fmt: skip
_CALL = re.compile(r"<(" + "|".join(TOOLS) + r")>(.*?)</\1>", re.DOTALL)
_ANY_CALL = re.compile(r"<([a-z][a-z0-9_]*)>(.*?)</\1>", re.DOTALL)
_PARAM = re.compile(r"<([a-z_]+)>(.*?)</\1>", re.DOTALL)
_RESULT = re.compile(r"^\[([a-z][a-z0-9_]*)(?: for .*)?\] Result:", re.DOTALL)
# the extension's answer for a call it did not run (another call came first, or the user rejected one)
_NOT_RUN = re.compile(r"^(?:Skipping tool|Tool) \[([a-z][a-z0-9_]*)(?: for [^\n]*?)?\] (?:due to|was )")
_ENV = "<environment_details>"


def _blocks(msg: dict, where: str) -> list[dict]:
    c = msg.get("content")
    if isinstance(c, str):
        return [{"type": "text", "text": c}]
    if not isinstance(c, list):
        raise IngestError(f"{where}.content is {type(c).__name__}, expected text or a list of blocks")
    return [b for b in c if isinstance(b, dict)]


def _text(blocks: list[dict]) -> str:
    out = []
    for b in blocks:
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif b.get("type") == "file" and isinstance(b.get("content"), str):  # a file the user attached
            out.append(f"{b.get('path', '')}\n{b['content']}")
        elif b.get("type") == "tool_result":
            inner = b.get("content")
            if isinstance(inner, list):  # text blocks, or the SDK's {query, result} entries
                inner = "\n".join(
                    _text([x]) if "type" in x else f"{x.get('query', '')}\n{x.get('result', '')}"
                    for x in inner
                    if isinstance(x, dict)
                )
            out.append(inner if isinstance(inner, str) else "")
    return "\n".join(out)


def _xml_call(text: str, answered: str | None) -> tuple[str, str, str] | None:
    """``(tool name, JSON arguments, the reply without the call)`` of a reply's XML tool call: one of
    :data:`TOOLS`, else the element named ``answered`` (the tool the next user message answers)."""
    m = _CALL.search(text)
    if m is None and answered:
        m = next((x for x in _ANY_CALL.finditer(text) if x.group(1) == answered), None)
    if m is None:
        return None
    params: dict[str, Any] = {k: v.strip("\n") for k, v in _PARAM.findall(m.group(2))}
    if "<path>" in str(params.get("args", "")):  # Roo Code's read_file of several files: <args><file><path>
        paths = [x.strip() for x in re.findall(r"<path>(.*?)</path>", params["args"], re.DOTALL)]
        if paths:  # (a file element left unclosed keeps its args as they were written)
            del params["args"]
            params.update(path=paths[0], paths=paths)
    return m.group(1), json.dumps(params), (text[: m.start()] + text[m.end() :]).strip()


def _answered(msg: Any) -> str | None:
    """The tool a user message answers (its first text ``[name ...] Result:``), or None."""
    c = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(c, list):
        c = next((b.get("text") for b in c if isinstance(b, dict) and b.get("type") == "text"), None)
    m = _RESULT.match(c) if isinstance(c, str) else None
    return m.group(1) if m else None


def _text_results(waiting: list[Step], texts: list[str]) -> list[str]:
    """Give the calls in ``waiting`` their answers written as text (``[name for ...] Result:`` and the
    blocks after it, up to the next answer or the environment details), in order and by the tool the
    answer names; returns the texts that answer no call (the user's own words, the environment)."""
    env = next((k for k, t in enumerate(texts) if t.lstrip().startswith(_ENV)), len(texts))
    starts = [k for k in range(env) if _RESULT.match(texts[k]) or _NOT_RUN.match(texts[k])]
    if not waiting or not starts:
        return texts
    answers: dict[int, list[int]] = {}  # a call (its index in waiting) -> where its answers start
    left = list(range(len(waiting)))
    for a in starts:
        name = (_RESULT.match(texts[a]) or _NOT_RUN.match(texts[a])).group(1)
        if left:  # the first call left of the tool it names, else the first left
            k = next((j for j in left if waiting[j].tool_name == name), left[0])
            left.remove(k)
        # else an answer past the last call (to the model's second XML call, not run) stays with the last
        answers.setdefault(k, []).append(a)
    ends = dict(zip(starts, [*starts[1:], env]))
    for k, at in answers.items():
        waiting[k].output = cap_output("\n".join(t for a in at for t in texts[a : ends[a]]))
        waiting[k].output_is_error = all(_NOT_RUN.match(texts[a]) for a in at)
    return texts[: starts[0]] + texts[env:]


#: Cline's API handlers whose tokensIn leaves the cache's reads and writes out.
_UNCACHED_PROVIDERS = frozenset({
    "anthropic", "openrouter", "openai-native", "gemini", "deepseek", "cline", "bedrock", "vertex",
    "claude-code", "minimax", "moonshot", "groq", "vercel-ai-gateway",
})  # fmt: skip


def _call(
    tin: float | None,
    reads: float | None,
    writes: float | None,
    out: float | None,
    cost: float | None,
    ts: Any,
    *,
    uncached: bool = False,
) -> tuple[Usage, float | None]:
    """One model call's usage and its time in seconds (``ts`` in milliseconds, as Cline writes it)."""
    usage = cache_usage(
        tin, reads, writes, uncached=uncached, output_tokens=None if out is None else int(out), cost_usd=cost
    )
    return usage, iso_to_epoch(ts)


def _calls_usage(ui: Any, uncached: bool | None) -> list[tuple[Usage | None, float | None]]:
    """Each model call's usage and time (seconds), from ``ui_messages.json``'s ``api_req_started``."""
    out: list[tuple[Usage | None, float | None]] = []
    for m in ui if isinstance(ui, list) else ():
        if not isinstance(m, dict) or m.get("say") != "api_req_started":
            continue
        try:
            info = json.loads(m.get("text") or "{}")
        except (json.JSONDecodeError, TypeError):
            info = {}
        info = info if isinstance(info, dict) else {}
        tin, reads, writes, out_tok, cost = (
            number(info, k) for k in ("tokensIn", "cacheReads", "cacheWrites", "tokensOut", "cost")
        )
        usage, when = _call(tin, reads, writes, out_tok, cost, m.get("ts"), uncached=bool(uncached))
        out.append((usage if tin is not None or out_tok is not None else None, when))
    return out


class ClineIngester(Ingester):
    name = "cline"

    def detect(self, path: Path, head: str) -> bool:
        if path.name == "api_conversation_history.json":
            return head.lstrip().startswith("[")
        # the Cline SDK's sessions (~/.cline/data/sessions/<id>/<id>.messages.json)
        return path.name.endswith(".messages.json") and '"sessionId"' in head and '"messages"' in head

    def parse(self, path: Path) -> Iterator[Trajectory]:
        if path.name == "api_conversation_history.json":
            yield self._task_folder(path)
        else:
            yield self._sdk_session(path)

    def _task_folder(self, path: Path) -> Trajectory:
        msgs = read_json(path)
        if not isinstance(msgs, list):
            raise IngestError(f"expected a list of messages, got {type(msgs).__name__}", path)
        folder = path.parent
        meta = read_json_beside(folder / "task_metadata.json")
        usage = (meta.get("model_usage") if isinstance(meta, dict) else None) or []
        last = next((u for u in reversed(usage) if isinstance(u, dict) and u.get("model_id")), {})
        # what only Roo Code writes: its summaries and their links, its extension's folder
        roo = "roo-cline" in str(folder).lower() or any(
            isinstance(m, dict) and ({"isSummary", "condenseId", "condenseParent"} & m.keys()) for m in msgs
        )
        provider = str(last.get("model_provider_id") or "")
        uncached = None if roo or not provider else provider in _UNCACHED_PROVIDERS
        replies = [
            m for m in msgs if isinstance(m, dict) and m.get("role") == "assistant" and not m.get("isSummary")
        ]
        if replies and all(
            isinstance(m.get("metrics"), dict) and isinstance(m["metrics"].get("inputTokens"), (int, float))
            for m in replies
        ):
            calls = _reply_metrics(msgs)  # every reply carries the SDK's metrics
        else:
            calls = _calls_usage(read_json_beside(folder / "ui_messages.json"), uncached)
        usage_note = None
        if calls and len(calls) != len(replies):  # matched by order only when the counts agree
            usage_note = (
                f"{len(calls)} model calls in ui_messages.json against {len(replies)} replies: left out"
            )
            calls = []
        extra = {"harness": "roo-code" if roo else "cline", "usage": usage_note}
        return self._run(path, msgs, calls, str(last.get("model_id") or ""), folder.name, extra)

    def _sdk_session(self, path: Path) -> Trajectory:
        data = read_json(path)
        msgs = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(msgs, list):
            raise IngestError("expected an object with a 'messages' list (a Cline SDK session)", path)
        replies = [m for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
        extra: dict[str, Any] = {"harness": "cline-sdk"}
        if all(isinstance(m.get("metrics"), dict) for m in replies):
            calls = _reply_metrics(msgs)
        else:  # with some replies bare, the SDK may have put the run's total on one: not a call's usage
            calls, extra["usage"] = [], "metrics on some replies only: left out"
        # the SDK compacts by rewriting the file: what it removed is gone, so the run is only its tail
        removed = [
            (m.get("metadata") or {}).get("messagesRemoved")
            for m in msgs
            if isinstance(m, dict)
            and isinstance(m.get("metadata"), dict)
            and m["metadata"].get("kind") == "compaction"
        ]
        if removed:
            extra["compacted"] = removed
        info = next(
            (m["modelInfo"] for m in msgs if isinstance(m, dict) and isinstance(m.get("modelInfo"), dict)), {}
        )
        meta = read_json_beside(path.with_name(path.name.removesuffix(".messages.json") + ".json"))
        model = str(info.get("id") or (meta.get("model") if isinstance(meta, dict) else "") or "")
        sid = str(data.get("sessionId") or path.name.removesuffix(".messages.json"))
        return self._run(path, msgs, calls, model, sid, extra, system=data.get("system_prompt"))

    def _run(
        self, path: Path, msgs: list, calls: list, model: str, task_id: str, extra: dict, system: Any = None
    ) -> Trajectory:
        """The steps of a conversation (see the module docstring), the calls' usage matched by order."""
        steps: list[Step] = []
        open_calls: dict[str, Step] = {}  # native tool_use id -> its step
        task, pending = "", ""
        waiting: list[Step] = []  # the calls the next user message answers
        turn = -1
        for i, msg in enumerate(msgs):
            where = f"messages[{i}]"
            if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
                raise IngestError(f"{where} is not a user or assistant message", path)
            blocks = _blocks(msg, where)
            if msg.get("isSummary"):  # Roo Code's condensing: read as user text (see the docstring)
                pending += ("\n" if pending else "") + _text(blocks)
                continue
            if msg["role"] == "assistant":
                turn += 1
                use, when = calls[turn] if turn < len(calls) else (None, None)
                text = _text(blocks)
                native = [b for b in blocks if b.get("type") == "tool_use"]
                first = len(steps)
                if native:
                    for b in native:
                        step = new_step(turn=turn, tool_name=str(b.get("name") or ""),
                                        tool_args=json.dumps(b.get("input") or {}),
                                        tool_call_id=b.get("id"))  # fmt: skip
                        steps.append(step)
                        if isinstance(b.get("id"), str):
                            open_calls[b["id"]] = step
                    steps[first].assistant_text = text
                    waiting = steps[first:]
                else:
                    after = next(
                        (m for m in msgs[i + 1 :] if not (isinstance(m, dict) and m.get("isSummary"))), None
                    )
                    xml = _xml_call(text, _answered(after))
                    name, args, thought = xml if xml else (None, "", text)
                    steps.append(new_step(turn=turn, tool_name=name, tool_args=args, assistant_text=thought))
                    waiting = steps[-1:] if name else []
                steps[first].user_text, pending = pending, ""
                steps[first].usage = use
                # extended thinking blocks (native tool calling): the reply's reasoning
                steps[first].reasoning = "\n".join(
                    str(b.get("thinking") or b.get("text") or "")
                    for b in blocks
                    if b.get("type") in ("thinking", "reasoning")
                )
                for s in steps[first:]:
                    s.timestamp = when
                continue
            # a user message: the task, a tool's answer and the extension's environment details
            if not steps:
                task = _text(blocks)
                continue
            for b in blocks:
                if b.get("type") == "tool_result" and b.get("tool_use_id") in open_calls:
                    step = open_calls.pop(b["tool_use_id"])
                    step.output = cap_output(_text([b]))
                    step.output_is_error = bool(b.get("is_error"))
            texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
            # the calls no tool_result answered (Cline on native tool calling answers in text too)
            texts = _text_results([s for s in waiting if s.output is None], texts)
            waiting = []
            pending += "\n".join(texts)
        if not steps:
            raise IngestError("empty trajectory: no assistant messages", path)
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{task_id}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=task_id,
                task_text=task,
                system_prompt=system if isinstance(system, str) else "",
                success=None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=steps,
            )
        )


def _reply_metrics(msgs: list) -> list[tuple[Usage | None, float | None]]:
    """Each reply's usage and time from its own ``metrics`` and ``ts`` (the Cline SDK, newer Cline):
    ``inputTokens`` holds the cached part (it grows with the context while ``cacheReadTokens`` trails
    it by a call)."""
    out: list[tuple[Usage | None, float | None]] = []
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") != "assistant" or m.get("isSummary"):
            continue
        x = m.get("metrics") if isinstance(m.get("metrics"), dict) else {}
        tin, reads, writes, out_tok, cost = (
            number(x, k)
            for k in ("inputTokens", "cacheReadTokens", "cacheWriteTokens", "outputTokens", "cost")
        )
        usage, when = _call(tin, reads, writes, out_tok, cost, m.get("ts"))
        out.append((usage if tin is not None else None, when))
    return out
