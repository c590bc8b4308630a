"""OpenAI Responses API items as chat messages, so one reader (:func:`chat_to_steps`) maps both.

A Responses-API log is a flat list of items instead of messages: ``message`` items (``role``,
``content`` parts ``input_text`` / ``output_text``), ``reasoning`` items (``summary`` parts), tool
calls (``function_call``: ``call_id``, ``name``, ``arguments``; ``custom_tool_call``: ``input`` text;
``local_shell_call`` and ``computer_call``: an ``action``; ``mcp_call``: its ``output`` inline; a call
without ``call_id`` goes by its item ``id``) and their outputs (``function_call_output``,
``custom_tool_call_output``, ``local_shell_call_output``, ``computer_call_output``: ``call_id``,
``output``).  Everything one model call produced (reasoning, text, parallel calls) arrives as
consecutive items; :func:`responses_to_messages` folds such a run into one assistant message with
``tool_calls`` and turns each output into a ``tool`` message, which is what chat-completions logs
hold.  An item without ``type`` but with ``role`` is an input message (the API's short form).

Two item types a reader of a log that keeps usage or compaction beside the items inserts itself:
``{"type": "dtoc_usage", "usage": {...}}`` gives the latest assistant message without one its
provider usage, and ``{"type": "dtoc_compaction", "text": ...}`` becomes a user message marked
``dtoc_compaction`` (the summary that replaced the context: :func:`chat_to_steps` records a
``compaction`` event on the next step).  An output item with ``"dtoc_is_error": true`` (a reader
that knows the run's exit codes) becomes a ``tool`` message with ``"is_error": true``, and a
``"dtoc_time"`` on the first item of a model call (a reader whose log times its items) becomes that
assistant message's ``timestamp``, and a ``"dtoc_model"`` there its ``model`` (the model that call went
to, for a log whose model changes between calls).

Item types that carry no output a context could hide (``web_search_call``, ``image_generation_call``,
``file_search_call`` and any type this module does not know) are skipped and
counted, never guessed at: :attr:`ResponsesParse.skipped`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dtoc_rl.ingest.base import IngestError

__all__ = ["ITEM_TYPES", "ResponsesParse", "is_item_list", "responses_to_messages"]

# a call's name when its item has none, and where its arguments are
_CALLS = {
    "function_call": ("", "arguments"),
    "custom_tool_call": ("", "input"),
    "mcp_call": ("", "arguments"),
    "local_shell_call": ("local_shell", "action"),
    "computer_call": ("computer", "action"),
}
_OUTPUTS = (
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
    "computer_call_output",
)
#: Item types whose presence marks a list as Responses items (detection reads these).
ITEM_TYPES = frozenset(("message", "reasoning", *_CALLS, *_OUTPUTS))


@dataclass
class ResponsesParse:
    messages: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # item type -> items skipped
    unattached_usage: int = 0  # dtoc_usage items with no assistant message left to take them


def is_item_list(value: Any) -> bool:
    """Whether ``value`` is a list of Responses items: objects, one at least with a known ``type`` and
    the rest typed or short-form messages (a ``role``)."""
    if not isinstance(value, list) or not value or not all(isinstance(x, dict) for x in value):
        return False
    types = [x.get("type") for x in value]
    return any(isinstance(t, str) and t in ITEM_TYPES for t in types) and all(
        isinstance(t, str) or (t is None and "role" in x) for t, x in zip(types, value)
    )


def _text(parts: Any) -> str:
    # output / summary parts: a string, or a list of {"type": ..., "text": ...}
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    if isinstance(parts, dict):  # an output object: {"content": ...} or {"output": ...}
        for key in ("content", "output", "text"):
            if key in parts:
                return _text(parts[key])
        return json.dumps(parts)
    return json.dumps(parts)


def responses_to_messages(items: Any, where: str = "items") -> ResponsesParse:
    """Chat-completions messages equivalent to a list of Responses items (see the module docstring).
    A call without a ``call_id`` or a name, or an item that is no object, is an :class:`IngestError`."""
    if not isinstance(items, list):
        raise IngestError(f"{where} is {type(items).__name__}, expected a list of items")
    res = ResponsesParse()
    turn: dict | None = None  # the assistant message the current model call is building

    def assistant(item: dict) -> dict:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": "", "tool_calls": [], "reasoning_content": ""}
            if item.get("dtoc_time") is not None:
                turn["timestamp"] = item["dtoc_time"]
            if isinstance(item.get("dtoc_model"), str):
                turn["model"] = item["dtoc_model"]
            res.messages.append(turn)
        return turn

    def call(item: dict, cid: Any, name: Any, args: Any, w: str) -> None:
        if not isinstance(cid, str) or not cid:
            raise IngestError(f"{w} has no call_id")
        if not isinstance(name, str) or not name:
            raise IngestError(f"{w} has no name")
        fn = {"name": name, "arguments": args}
        assistant(item)["tool_calls"].append({"id": cid, "type": "function", "function": fn})

    for i, it in enumerate(items):
        w = f"{where}[{i}]"
        if not isinstance(it, dict):
            raise IngestError(f"{w} is {type(it).__name__}, expected object")
        kind = it.get("type", "message" if "role" in it else None)
        if not isinstance(kind, str):
            raise IngestError(f"{w} has type {kind!r}, expected a string")
        if kind == "message":
            role = it.get("role")
            if role == "assistant":
                a = assistant(it)
                a["content"] = "\n".join(t for t in (a["content"], _text(it.get("content"))) if t)
            else:
                turn = None
                res.messages.append({"role": role, "content": it.get("content")})
        elif kind == "reasoning":
            text = _text(it.get("summary")) or _text(it.get("content"))
            a = assistant(it)
            a["reasoning_content"] = "\n".join(t for t in (a["reasoning_content"], text) if t)
        elif kind in _CALLS:
            default_name, args_key = _CALLS[kind]
            cid = it.get("call_id") or it.get("id")  # a call may carry only its item id
            call(it, cid, it.get("name") or default_name, it.get(args_key), w)
            if kind == "mcp_call":  # its output comes with it
                turn = None
                out = it.get("output") if it.get("error") is None else it.get("error")
                res.messages.append({"role": "tool", "tool_call_id": cid, "content": _text(out)})
        elif kind in _OUTPUTS:
            cid = it.get("call_id") or it.get("id")
            if not isinstance(cid, str) or not cid:
                raise IngestError(f"{w} ({kind}) has no call_id")
            turn = None
            msg = {"role": "tool", "tool_call_id": cid, "content": _text(it.get("output"))}
            if it.get("dtoc_is_error") is True:
                msg["is_error"] = True
            res.messages.append(msg)
        elif kind == "dtoc_usage":
            last = next((m for m in reversed(res.messages) if m["role"] == "assistant"), None)
            if last is not None and "usage" not in last:
                last["usage"] = it.get("usage")
            else:
                res.unattached_usage += 1
        elif kind == "dtoc_compaction":
            turn = None
            res.messages.append({"role": "user", "content": _text(it.get("text")), "dtoc_compaction": True})
        else:
            res.skipped[str(kind)] += 1
    return res
