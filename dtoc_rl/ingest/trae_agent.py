"""Trae Agent trajectories: the JSON file ``trae-cli run --trajectory-file`` writes.

Trae Agent (bytedance/trae-agent; ``trae_agent/utils/trajectory_recorder.py``) records one run per
file: ``{"task", "start_time", "end_time", "provider", "model", "max_steps", "llm_interactions",
"agent_steps", "success", "final_result", "execution_time"}``.  Each of ``llm_interactions`` is one
model call: ``{"timestamp", "provider", "model", "input_messages", "response": {"content", "model",
"finish_reason", "usage", "tool_calls": [{"call_id", "name", "arguments", "id"}]}}``.  Its SWE-bench
script names the file ``<instance_id>.json``, beside ``<instance_id>.patch``.

Trae's clients keep the conversation themselves and send each call only the messages that are new
since the last one (``input_messages``: the system prompt and task first, then the tool results as
``{"role": "user", "tool_result": {"call_id", "success", "result", "error"}}`` and any text the agent
added): the conversation is each interaction's input followed by its response, in order.  An input
that brings a system message again after the first call started the model's history afresh
(``reuse_history=False``): read as a compaction of everything before it.  ``agent_steps`` repeats the
same calls; of it only the last turn's ``tool_results`` are read (no later call was sent them: the run
stopped at ``max_steps`` or on an error) and the last step's ``error`` (``extra.error``).  LakeView's
calls (its step summaries, when enabled) are billed but not logged.

A tool result reads as the provider's client sent it: for ``openai`` (the Responses API) the result
then ``Error: <error>`` on a line of its own; for ``google`` the function response's fields as JSON;
for the others (``anthropic`` and the chat-completions clients) the result then ``Tool call failed
with error:`` and the error.  ``usage``: ``openai`` (the Responses API) and ``google`` count the
cached part inside ``input_tokens``; ``anthropic`` counts it apart (``cache_read_input_tokens`` and
``cache_creation_input_tokens`` come on top); the chat-completions clients (openrouter, azure,
doubao, ollama) keep ``prompt_tokens`` and ``completion_tokens`` only, so their cached share is not
known; Trae's Gemini client leaves thinking tokens out of the output.  A call whose usage is all
zeros had none.

Outcome: Trae's ``success`` is the agent's own claim (``task_done`` was called), kept in
``extra.agent_success``, not taken as the outcome; a ``selected_labels.jsonl`` row for the instance
near the file (``resolved``) gives it.
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
from dtoc_rl.ingest.common import count, finalize, load_selected_labels, usage_from
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text

__all__ = ["TraeAgentIngester"]

# json.dump(indent=2) of the recorder's dict: its first keys in order; the task may be long
_HEAD = re.compile(r'^\{\s*"task"\s*:\s*"')
_KEYS = ('"provider"', '"max_steps"', '"llm_interactions"')
_FURTHER = 8_000_000  # how far into a file its keys are looked for after a long task


def _keys_further(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            text = fh.read(_FURTHER).decode("utf-8", errors="replace")
    except OSError:
        return False
    return all(re.search(r"\n  " + k + r"\s*:", text) for k in _KEYS)


class TraeAgentIngester(Ingester):
    name = "trae-agent"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix != ".json" or _HEAD.match(head) is None:
            return False
        if all(k in head for k in _KEYS):
            return True
        # a task longer than the head (a long issue, a --file task): the keys after it, further on
        return len(head) >= 65536 and _keys_further(path)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        root = read_json(path)
        if not isinstance(root, dict) or not isinstance(root.get("llm_interactions"), list):
            raise IngestError("not a Trae Agent trajectory: no 'llm_interactions' list", path)
        provider = str(root.get("provider") or "")
        steps_log = root.get("agent_steps") if isinstance(root.get("agent_steps"), list) else []
        chat = _conversation(root["llm_interactions"], provider, steps_log)
        cp = chat_to_steps(chat, "llm_interactions")
        if not cp.steps:
            raise IngestError("empty trajectory: no model call", path)
        model = str(root.get("model") or "")
        instance = path.stem
        label = next((r for r in load_selected_labels(path) if r.get("instance_id") == instance), None)
        extra: dict[str, Any] = {
            "provider": provider,
            "agent_success": root.get("success") if isinstance(root.get("success"), bool) else None,
            "max_steps": root.get("max_steps"),
            "execution_time": root.get("execution_time"),
            "final_result": root.get("final_result") if isinstance(root.get("final_result"), str) else None,
        }
        last = steps_log[-1] if steps_log and isinstance(steps_log[-1], dict) else {}
        if isinstance(last.get("error"), str) and last["error"].strip():  # what ended the run
            extra["error"] = last["error"].strip().splitlines()[0][:500]
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        usages = [m["usage"] for m in chat if m.get("role") == "assistant" and "usage" in m]
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{instance}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=instance,
                task_text=cp.task,
                system_prompt=cp.system,
                success=None if label is None else bool(label.get("resolved")),
                outcome_source="selected_labels.jsonl:resolved" if label is not None else "",
                source_path=str(path),
                extra=json.dumps({k: v for k, v in extra.items() if v is not None}),
                tokens_in=sum(usage_from(u).input_tokens or 0 for u in usages) if usages else None,
                tokens_out=sum(count(u, "output_tokens") or 0 for u in usages) if usages else None,
                api_calls=len(root["llm_interactions"]),
                steps=cp.steps,
            )
        )


def _conversation(interactions: list, provider: str, steps_log: list = ()) -> list[dict]:
    """The model's conversation as chat messages (see the module docstring); the results of the last
    turn's calls, which no later call was sent (the run stopped at ``max_steps`` or on an error), from
    ``agent_steps``."""
    chat: list[dict] = []
    for k, it in enumerate(interactions):
        w = f"llm_interactions[{k}]"
        if not isinstance(it, dict):
            raise IngestError(f"{w} is {type(it).__name__}, expected object")
        inputs = it.get("input_messages") or []
        if not isinstance(inputs, list):
            raise IngestError(f"{w}.input_messages is {type(inputs).__name__}, expected a list")
        for j, m in enumerate(inputs):
            mw = f"{w}.input_messages[{j}]"
            if not isinstance(m, dict):
                raise IngestError(f"{mw} is {type(m).__name__}, expected object")
            result = m.get("tool_result")
            if isinstance(result, dict):
                text, failed = _result_text(result, provider)
                chat.append(
                    {
                        "role": "tool",
                        "tool_call_id": result.get("call_id"),
                        "content": text,
                        "is_error": failed,
                    }
                )
                continue
            role = m.get("role")
            text = content_text(m.get("content"), f"{mw}.content")
            if role == "system":
                if k > 0:  # the client's history started afresh: nothing before is sent any more
                    chat.append({"role": "system", "content": text, "dtoc_compaction": True})
                else:
                    chat.append({"role": "system", "content": text})
            elif role in ("user", "assistant"):
                # an assistant message in the input is text the agent added (its reflection on a failed
                # call), not a model call: it is what the next call reads
                chat.append({"role": "user", "content": text})
            else:
                raise IngestError(f"{mw} has role {role!r}, expected system, user or assistant")
        response = it.get("response")
        if not isinstance(response, dict):
            raise IngestError(f"{w}.response is {type(response).__name__}, expected object")
        calls = response.get("tool_calls") or []
        if not isinstance(calls, list):
            raise IngestError(f"{w}.response.tool_calls is {type(calls).__name__}, expected a list")
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": content_text(response.get("content"), f"{w}.response.content"),
            "tool_calls": [_call(c, f"{w}.response.tool_calls[{n}]") for n, c in enumerate(calls)],
            "timestamp": it.get("timestamp"),
            "model": it.get("model") or response.get("model"),
        }
        usage = _usage(response.get("usage"), provider)
        if usage is not None:
            msg["usage"] = usage
        chat.append(msg)
    answered = {
        m.get("tool_call_id") for m in chat if m["role"] == "tool" and isinstance(m.get("tool_call_id"), str)
    }
    last = [c["id"] for c in chat[-1].get("tool_calls") or () if isinstance(c.get("id"), str)] if chat else []
    for st in steps_log:
        results = st.get("tool_results") if isinstance(st, dict) else None
        for r in results if isinstance(results, list) else ():
            cid = r.get("call_id") if isinstance(r, dict) else None
            if isinstance(cid, str) and cid in last and cid not in answered:
                text, failed = _result_text(r, provider)
                chat.append({"role": "tool", "tool_call_id": cid, "content": text, "is_error": failed})
                answered.add(cid)
    return chat


def _call(c: Any, where: str) -> dict:
    if not isinstance(c, dict) or not isinstance(c.get("name"), str):
        raise IngestError(f"{where} must be an object with a 'name'")
    cid = c.get("call_id") or c.get("id")
    return {
        "id": str(cid) if cid is not None else None,
        "function": {"name": c["name"], "arguments": c.get("arguments")},
    }


def _result_text(result: dict, provider: str) -> tuple[str, bool]:
    """A tool result as the provider's client sent it, and whether the tool failed."""
    value, error = result.get("result"), result.get("error")
    failed = result.get("success") is False
    if provider == "openai":
        text = (str(value) if value is not None else "") + (f"\nError: {error}" if error else "")
        return text.strip(), failed
    if provider == "google":
        fields: dict[str, Any] = {}
        if value is not None:
            fields["result"] = value
        if error:
            fields["error"] = error
        fields = fields or {"status": "Tool executed successfully but returned no output."}
        return json.dumps(fields, ensure_ascii=False), failed
    text = (f"{value}\n" if value else "") + (f"Tool call failed with error:\n{error}" if error else "")
    text = text.strip()
    if failed and not text and provider == "anthropic":
        text = "Tool execution failed without providing error details."
    return text, failed


def _usage(raw: Any, provider: str) -> dict | None:
    """The call's usage in the shape :func:`~dtoc_rl.ingest.common.usage_from` reads for the API."""
    if not isinstance(raw, dict):
        return None
    inp, out = count(raw, "input_tokens") or 0, count(raw, "output_tokens") or 0
    read, write = count(raw, "cache_read_input_tokens") or 0, count(raw, "cache_creation_input_tokens") or 0
    if not (inp or out or read or write):
        return None  # the recorder's zeros for a response without usage
    if provider == "anthropic":
        return {
            "input_tokens": inp,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": out,
        }
    if provider in ("openai", "google"):
        return {"input_tokens": inp, "input_tokens_details": {"cached_tokens": read}, "output_tokens": out}
    # the chat-completions clients (openrouter, azure, doubao, ollama) keep no cached share: not known
    return {"input_tokens": inp, "output_tokens": out}
