"""Renderers from provider-neutral messages to provider request formats.

* :func:`to_openai`: a chat-completions ``messages`` list (``tool_calls`` on
  assistant messages, ``role: "tool"`` replies).
* :func:`to_anthropic`: ``{"system": ..., "messages": [...]}`` for the
  messages API, tool outputs as ``tool_result`` blocks in user turns.
* :func:`message_text`: the text of a message ``content`` in either format.

A hidden output is still a tool reply to its call (with the placeholder as its
content), so every call stays answered and ids stay paired.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["anthropic_id", "message_text", "openai_message", "to_anthropic", "to_openai"]

_ANTHROPIC_ID = re.compile(r"[^a-zA-Z0-9_-]")


def message_text(content: Any, sep: str = "") -> str:
    """The text of a message ``content``: a string, None, or a list of parts (strings, ``{"text": ...}``
    dicts, or SDK objects with a ``text`` attribute) joined by ``sep``; parts without text (images,
    tool calls) are skipped, anything else is ``str()``-ed.  Lenient on purpose: it reads what a live
    agent or an API returned, where the ingesters' strict parsers reject malformed logs."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for p in content:
            if isinstance(p, str):
                t = p
            else:
                t = p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None)
            if isinstance(t, str):
                out.append(t)
        return sep.join(out)
    return str(content)


def anthropic_id(call_id: str) -> str:
    """Anthropic tool-use ids must match ``^[a-zA-Z0-9_-]+$``; map others alike on both sides."""
    return _ANTHROPIC_ID.sub("_", call_id) or "_"


def openai_message(m: Mapping[str, Any], *, include_reasoning: bool = False) -> dict[str, Any]:
    """One provider-neutral message as a chat-completions message (see :func:`to_openai`)."""
    role = m["role"]
    if role in ("system", "user"):
        return {"role": role, "content": m.get("content") or ""}
    if role == "assistant":
        text = m.get("content") or ""
        if include_reasoning and m.get("reasoning"):
            text = f"{m['reasoning']}\n\n{text}".strip()
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": json.dumps(c["arguments"], ensure_ascii=False),
                    },
                }
                for c in m["tool_calls"]
            ]
        elif msg["content"] is None:
            msg["content"] = ""
        return msg
    if role == "tool":
        return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
    raise ValueError(f"unknown message role {role!r}")


def to_openai(messages: list[dict[str, Any]], *, include_reasoning: bool = False) -> list[dict[str, Any]]:
    """Chat-completions messages.  Reasoning has no field there; with
    ``include_reasoning`` it is prefixed to the assistant text."""
    return [openai_message(m, include_reasoning=include_reasoning) for m in messages]


def to_anthropic(messages: list[dict[str, Any]], *, include_reasoning: bool = False) -> dict[str, Any]:
    """Messages-API request parts: ``{"system": str, "messages": [...]}``.

    Consecutive turns of one role are merged (the API wants alternation), and
    the conversation starts with a user turn.
    """
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": role, "content": [block]})

    for m in messages:
        role = m["role"]
        if role == "system":
            system_parts.append(m.get("content") or "")
        elif role == "user":
            if m.get("content"):
                push("user", {"type": "text", "text": m["content"]})
        elif role == "assistant":
            text = m.get("content") or ""
            if include_reasoning and m.get("reasoning"):
                text = f"{m['reasoning']}\n\n{text}".strip()
            if text:
                push("assistant", {"type": "text", "text": text})
            for c in m.get("tool_calls") or []:
                args = c["arguments"] if isinstance(c["arguments"], dict) else {"input": c["arguments"]}
                push(
                    "assistant",
                    {"type": "tool_use", "id": anthropic_id(c["id"]), "name": c["name"], "input": args},
                )
        elif role == "tool":
            push(
                "user",
                {
                    "type": "tool_result",
                    "tool_use_id": anthropic_id(m["tool_call_id"]),
                    "content": m["content"],
                },
            )
        else:
            raise ValueError(f"unknown message role {role!r}")
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(session start)"}]})
    return {"system": "\n\n".join(p for p in system_parts if p), "messages": turns}
