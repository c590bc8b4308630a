"""Continue sessions: ``~/.continue/sessions/<id>.json``, written by the Continue CLI (``cn``) and by
Continue's IDE extensions alike.

A session is ``{"sessionId", "title", "workspaceDirectory", "history", "usage"}``; ``history`` is a
list of items ``{"message": {"role", "content", "toolCalls", "usage"}, "contextItems",
"toolCallStates": [{"toolCallId", "toolCall", "status", "output": [{"content", "name"}]}],
"conversationSummary"}``.  ``sessions.json`` beside them is the index (not a session).

Mapping, as Continue sends a history to the model (``core/util/messageConversion.ts``
``convertFromUnifiedHistory``): a user message's context items go before its text, each as
``<context name="NAME">\\nCONTENT\\n</context>\\n\\n``; an assistant message's tool calls are steps,
each answered by its state's output contents joined by newlines (``Tool cancelled`` when it has
none; a state whose status is ``errored`` is a failed call).  The system message Continue sends is
not in the session: it is counted as the unlogged prompt.  A compaction's summary
(``conversationSummary``) is text the next call reads and a compaction of everything before it: the
CLI writes it as an item of its own and keeps only what follows; the IDE puts it on an existing
item, read as usual, and keeps the whole history.  A ``thinking`` item (reasoning Continue sends
back as an assistant message) is text the next call reads, no call of the run's.  Each assistant
message's ``usage`` (OpenAI's shape, with ``model``) is that call's (the prompt made whole where
Continue's Anthropic adapter kept only its uncached rest); the session's ``usage.totalCost`` is the
run's dollars, and its token totals are summed from the calls (the session's own ``promptTokens``
also counts a compaction's call, and Anthropic's uncached rest only).  Outcome: none (a session
records no verdict).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cache_usage, count, finalize, number, run_model
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text

__all__ = ["ContinueSessionIngester"]

_HEAD = re.compile(r'^\s*\{\s*"sessionId"\s*:\s*"[^"]*"\s*,')


class ContinueSessionIngester(Ingester):
    name = "continue"

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix == ".json" and _HEAD.match(head) is not None and '"history"' in head

    def parse(self, path: Path) -> Iterator[Trajectory]:
        root = read_json(path)
        if not isinstance(root, dict) or not isinstance(root.get("history"), list):
            raise IngestError("not a Continue session: no 'history' list", path)
        chat = _chat(root["history"])
        cp = chat_to_steps(chat, "history")
        if not cp.steps:
            raise IngestError("empty session: no model reply", path)
        totals = root.get("usage") if isinstance(root.get("usage"), dict) else {}
        usages = [m["usage"] for m in chat if m["role"] == "assistant" and isinstance(m.get("usage"), dict)]
        model = run_model(cp.steps, next((u["model"] for u in usages if isinstance(u.get("model"), str)), ""))
        session = str(root.get("sessionId") or path.stem)
        extra: dict[str, Any] = {"title": root.get("title"), "workspace": root.get("workspaceDirectory")}
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
                system_prompt=cp.system,
                source_path=str(path),
                extra=json.dumps({k: v for k, v in extra.items() if v is not None}),
                tokens_in=sum(count(u, "prompt_tokens") or 0 for u in usages) if usages else None,
                tokens_out=sum(count(u, "completion_tokens") or 0 for u in usages) if usages else None,
                cost_usd=number(totals, "totalCost"),
                api_calls=len(usages) or None,
                steps=cp.steps,
            )
        )


def _usage(raw: dict) -> dict:
    """A call's usage as Continue kept it, with ``prompt_tokens`` the whole prompt: Continue's
    Anthropic adapter (``packages/openai-adapters/src/apis/Anthropic.ts``) copies Anthropic's
    ``input_tokens``, the uncached rest, into ``prompt_tokens`` and the cache's reads and writes into
    ``prompt_tokens_details.cache_read_tokens`` / ``cache_write_tokens``; they are added back for a
    Claude model, or wherever the cache's parts alone outweigh ``prompt_tokens``."""
    details = raw.get("prompt_tokens_details") if isinstance(raw.get("prompt_tokens_details"), dict) else {}
    prompt = count(raw, "prompt_tokens")
    read, write = count(details, "cache_read_tokens"), count(details, "cache_write_tokens")
    if prompt is None or (read is None and write is None):
        return raw
    claude = normalize_family(str(raw.get("model") or "")).startswith("claude")
    whole = cache_usage(prompt, read, write, uncached=claude).input_tokens
    if whole == prompt:
        return raw
    parts = {**details, "cached_tokens": read or 0, "cache_write_tokens": write or 0}
    return {**raw, "prompt_tokens": whole, "prompt_tokens_details": parts}


def _chat(history: list) -> list[dict]:
    """The session's history as the chat messages Continue sends (see the module docstring)."""
    chat: list[dict] = []
    for i, item in enumerate(history):
        w = f"history[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("message"), dict):
            raise IngestError(f"{w} must be an object with a 'message' object")
        m = item["message"]
        role = m.get("role")
        text = content_text(m.get("content"), f"{w}.message.content")
        summary = item.get("conversationSummary")
        if isinstance(summary, str):
            # a compaction's summary: the CLI writes it as an item of its own (after which only what
            # follows is kept); the IDE puts it on an existing item and keeps the history, sending
            # the summary and what follows it
            own = role == "assistant" and text == summary and not m.get("toolCalls")
            if not own:
                chat.extend(_item(item, m, role, text, w))
            chat.append({"role": "user", "content": summary, "dtoc_compaction": True})
            continue
        chat.extend(_item(item, m, role, text, w))
    return chat


def _item(item: dict, m: dict, role: Any, text: str, w: str) -> list[dict]:
    """One history item as the chat messages Continue sends for it."""
    if role == "user":
        items = item.get("contextItems") if isinstance(item.get("contextItems"), list) else []
        context = "".join(
            f'<context name="{c.get("name")}">\n{c.get("content")}\n</context>\n\n'
            for c in items
            if isinstance(c, dict)
        )
        return [{"role": "user", "content": context + text}]
    if role == "system":
        return [{"role": "system", "content": text}]
    if role == "thinking":  # reasoning sent back with the history: text, no call
        return [{"role": "user", "content": text}]
    if role != "assistant":
        raise IngestError(f"{w}.message has role {role!r}, expected user, assistant, system or thinking")
    calls = m.get("toolCalls") or []
    if not isinstance(calls, list):
        raise IngestError(f"{w}.message.toolCalls is {type(calls).__name__}, expected a list")
    msg: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
    for k, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise IngestError(f"{w}.message.toolCalls[{k}] must have a 'function' with a 'name'")
        call = {"name": fn["name"], "arguments": fn.get("arguments")}
        msg["tool_calls"].append({"id": c.get("id"), "function": call})
    if isinstance(m.get("usage"), dict):
        msg["usage"] = _usage(m["usage"])
        msg["model"] = m["usage"].get("model")
    out = [msg]
    states = item.get("toolCallStates") if isinstance(item.get("toolCallStates"), list) else []
    for st in states:
        if not isinstance(st, dict):
            continue
        given = st.get("output") if isinstance(st.get("output"), list) else []
        parts = [str(o.get("content", "")) for o in given if isinstance(o, dict)]
        body = "\n".join(parts) if given else "Tool cancelled"
        failed = st.get("status") == "errored"
        out.append(
            {"role": "tool", "tool_call_id": st.get("toolCallId"), "content": body, "is_error": failed}
        )
    return out
