"""Chat runs under the names published trajectory datasets give them.

Agent trajectories shared on the Hugging Face Hub are chat runs with other column and role names
than a saved OpenAI request.  The generic chat reader (:mod:`dtoc_rl.ingest.openai_chat`, and its
Parquet reader :mod:`dtoc_rl.ingest.chat_parquet`) reads them through :func:`chat_run`, which only
renames; what it reads is then an ordinary chat run.  Conventions seen in such datasets:

* the messages under ``messages``, ``trajectory`` (nebius/SWE-agent-trajectories,
  nebius/SWE-rebench-openhands-trajectories, nvidia/SWE-Zero-openhands-trajectories) or
  ``conversations`` / ``conversation`` (ShareGPT), as a list or as the JSON text of one (Parquet
  exports often store them as a string);
* a message's role under ``role`` or ``from`` and its text under ``content``, ``text`` (nebius'
  SWE-agent runs) or ``value`` (ShareGPT);
* role names ``ai``, ``gpt``, ``model``, ``bot`` (the assistant), ``human`` (the user),
  ``observation``, ``function_response``, ``tool_response``, ``ipython`` (a tool's reply); ShareGPT's
  ``function_call`` turn holds the call as JSON ``{"name", "arguments"}`` (LLaMA-Factory's tool
  format);
* the run's model under ``model`` or ``model_name``, its task under ``task_id`` or ``instance_id``,
  its id under ``id``, ``traj_id`` or ``trajectory_id``;
* Goose session exports: ``toolRequest`` / ``toolResponse`` content blocks (read as Anthropic's
  ``tool_use`` / ``tool_result``);
* LangChain / LangGraph message dumps (``messages_to_dict`` or a graph state's ``messages``): the
  role under ``type`` (``human``, ``ai``, ``tool``, ``system``), an ``ai`` message's calls as
  ``tool_calls: [{name, args, id}]``, its tokens as ``usage_metadata`` (``input_tokens`` with
  ``input_token_details.cache_read``) and its model in ``response_metadata.model_name``.

Outcome columns are read by the chat reader's label rule (``resolved`` as 0/1 included).
"""

from __future__ import annotations

import json
from typing import Any

from dtoc_rl.ingest.base import IngestError, json_error

__all__ = ["MESSAGE_COLUMNS", "chat_run", "message_column"]

#: Where a run keeps its messages, in the order they are looked for.
MESSAGE_COLUMNS = ("messages", "trajectory", "conversations", "conversation")
_ROLES = {
    "ai": "assistant", "gpt": "assistant", "model": "assistant", "bot": "assistant", "chatbot": "assistant",
    "human": "user",
    "observation": "tool", "function_response": "tool", "tool_response": "tool", "ipython": "tool",
}  # fmt: skip
_TEXT_KEYS = ("content", "text", "value")
_ALIASES = {"model": ("model_name",), "task_id": ("instance_id",), "id": ("traj_id", "trajectory_id")}


def message_column(row: dict) -> str | None:
    """The column of ``row`` holding its messages: the first of :data:`MESSAGE_COLUMNS` it has, or None."""
    return next((k for k in MESSAGE_COLUMNS if k in row), None)


def chat_run(row: dict) -> dict:
    """``row`` as a chat run: ``messages`` a list of OpenAI-named messages and ``model``, ``task_id`` and
    ``id`` filled from their aliases.  A run already in that shape comes back equal."""
    key = message_column(row)
    if key is None:
        return row
    msgs = row[key]
    if isinstance(msgs, str) and msgs.lstrip()[:1] in ("[", "{"):
        try:
            msgs = json.loads(msgs)
        except json.JSONDecodeError as e:
            raise IngestError(f"'{key}' is text but not JSON ({json_error(e, line=False)})") from None
        except RecursionError:
            raise IngestError(f"'{key}' is JSON text nested too deeply to read") from None
        if not isinstance(msgs, list):
            raise IngestError(f"'{key}' holds JSON {type(msgs).__name__}, expected a list of messages")
    if not isinstance(msgs, list):
        raise IngestError(
            f"'{key}' is {type(msgs).__name__}, expected a list of messages (or JSON text of one)"
        )
    out = {k: v for k, v in row.items() if k != key}
    out["messages"] = [_message(m, f"{key}[{i}]") for i, m in enumerate(msgs)]
    for name, aliases in _ALIASES.items():
        if out.get(name) is None:
            found = next((out[a] for a in aliases if out.get(a) is not None), None)
            if found is not None:
                out[name] = found
    if out.get("model") is None:  # LangChain keeps the model on each reply, not on the run
        meta = (m.get("response_metadata") for m in msgs if isinstance(m, dict))
        out["model"] = next(
            (d["model_name"] for d in meta if isinstance(d, dict) and d.get("model_name")), None
        )
        if out["model"] is None:
            del out["model"]
    return out


_LANGCHAIN_TYPES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def _langchain(m: dict) -> dict:
    """A LangChain message (``type`` for its role) in OpenAI's names: its ``tool_calls`` as function
    calls and its ``usage_metadata`` as ``usage``."""
    out = {k: v for k, v in m.items() if k not in ("type", "tool_calls")}
    out["role"] = _LANGCHAIN_TYPES[m["type"]]
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls:
        if isinstance(m.get("content"), list):
            # ChatAnthropic keeps the same calls as tool_use blocks in the content: read them once
            out["content"] = [
                b for b in m["content"] if not (isinstance(b, dict) and b.get("type") == "tool_use")
            ]
        out["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c.get("name"), "arguments": json.dumps(c.get("args") or {})}}
            if isinstance(c, dict) and "function" not in c else c
            for c in calls
        ]  # fmt: skip
    if m["type"] == "tool" and m.get("status") == "error":  # a ToolMessage of a failed call
        out["is_error"] = True
    meta = m.get("usage_metadata")
    if isinstance(meta, dict) and "usage" not in m and "input_tokens" in meta:
        details = meta.get("input_token_details") if isinstance(meta.get("input_token_details"), dict) else {}
        out["usage"] = {  # LangChain's input_tokens holds the cached part, as OpenAI's prompt_tokens does
            "prompt_tokens": meta.get("input_tokens"),
            "completion_tokens": meta.get("output_tokens"),
            "prompt_tokens_details": {"cached_tokens": details.get("cache_read"),
                                      "cache_write_tokens": details.get("cache_creation")},
        }  # fmt: skip
    return out


def _goose_block(b: Any) -> Any:
    """Goose's tool blocks as Anthropic's: ``toolRequest`` (``toolCall`` {status, value: {name,
    arguments}} or {status: "error", error}) as ``tool_use``, ``toolResponse`` (``toolResult``
    {status, value}: content blocks, or {content, isError}; or {status: "error", error}) as
    ``tool_result``."""
    if not isinstance(b, dict):
        return b
    if b.get("type") == "toolRequest":
        req = b.get("toolCall") if isinstance(b.get("toolCall"), dict) else {}
        call = req.get("value") if isinstance(req.get("value"), dict) else {}
        # a request the model wrote badly is still a call it made (its reply says what failed)
        name = call.get("name") or "invalid_tool_call"
        return {"type": "tool_use", "id": b.get("id"), "name": name, "input": call.get("arguments") or {}}
    if b.get("type") == "toolResponse":
        res = b.get("toolResult") if isinstance(b.get("toolResult"), dict) else {}
        value = res.get("value")
        error = res.get("status") == "error"
        if isinstance(value, dict):  # newer Goose: {content: [...], isError}
            error = error or value.get("isError") is True
            value = value.get("content")
        if isinstance(value, list):  # a block meant for the user only is never shown to the model
            value = [
                c for c in value
                if not (isinstance(c, dict) and isinstance((c.get("annotations") or {}).get("audience"), list)
                        and "assistant" not in c["annotations"]["audience"])
            ]  # fmt: skip
        if value is None:
            value = _goose_error(res.get("error"))
        return {"type": "tool_result", "tool_use_id": b.get("id"), "content": value, "is_error": error}
    return b


def _goose_error(err: Any) -> str:
    """A failed tool's error as the text the model is sent: older Goose keeps a string; newer keeps MCP's
    ``ErrorData`` (``code``, ``message``, ``data``), which rmcp renders ``"{code}: {message}"`` then
    ``"({data})"`` when there is data (a provider may put a prefix before it: Anthropic's format writes
    ``"Error: "``)."""
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return str(err or "")
    text = f"{err['code']}: {err['message']}" if err.get("code") is not None else err["message"]
    if err.get("data") is not None:
        text += f"({json.dumps(err['data'], separators=(',', ':'), ensure_ascii=False)})"  # serde's JSON
    return text


def _message(m: Any, where: str) -> Any:
    if not isinstance(m, dict):
        return m  # the chat reader names what is wrong with it
    c = m.get("content")
    if isinstance(c, list) and any(
        isinstance(b, dict) and b.get("type") in ("toolRequest", "toolResponse") for b in c
    ):
        m = {**m, "content": [_goose_block(b) for b in c]}  # a Goose session's export
        if "timestamp" not in m and isinstance(m.get("created"), int | float):
            m["timestamp"] = m["created"]  # its epoch seconds: when the call was answered
    if m.get("role") is None and m.get("from") is None and m.get("type") in _LANGCHAIN_TYPES:
        if isinstance(m.get("data"), dict) and "content" not in m:  # messages_to_dict: {type, data}
            return _langchain({**m["data"], "type": m["type"]})
        return _langchain(m)
    role = m.get("role") if m.get("role") is not None else m.get("from")
    if role == "function_call":  # ShareGPT tool format: the assistant's call as JSON
        value = m.get("value") if m.get("value") is not None else m.get("content")
        return {"role": "assistant", "content": None, "tool_calls": [_sharegpt_call(value, where)]}
    text = next((m[k] for k in _TEXT_KEYS if m.get(k) is not None), None)
    role = _ROLES.get(role, role) if isinstance(role, str) else role
    if role == m.get("role") and text is m.get("content"):
        return m
    return {**m, "role": role, "content": text}


def _sharegpt_call(value: Any, where: str) -> dict:
    try:
        call = json.loads(value) if isinstance(value, str) else value
    except (json.JSONDecodeError, RecursionError):
        call = None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        got = str(value)[:60]
        raise IngestError(f"{where}: a function_call turn must hold JSON with a 'name', got {got!r}")
    fn = {"name": call["name"], "arguments": call.get("arguments")}
    return {"id": None, "type": "function", "function": fn}
