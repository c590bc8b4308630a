"""What each model API's requests and answers say, read alike: a request's messages as events (system,
user, a model turn with its calls, a tool result and where it sits), and an answer, whole or streamed,
as the model turn the agent's next request will hold, with the usage the API reported.

One reading for the proxy's two sides: a conversation is mirrored from its requests, and its last
answer, which no request follows, is recorded from the answer itself."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dtoc_rl.core.render import message_text
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.gemini import contents_to_chat, part_field


@dataclass
class Event:
    """One message of a request, read alike from every API: ``kind`` is system, user, assistant or
    tool; a tool event's ``where`` is its (message, block) position in the request."""

    kind: str
    text: str = ""
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    call_id: str | None = None
    is_error: bool = False
    where: tuple[int, int | None] | None = None
    by_text: bool = False  # a tool result whose call id the proxy made up: its text tells it apart

    def __post_init__(self) -> None:
        # the mirror's copy of a text no UTF-8 holds (a lone surrogate from an agent's JSON escape) has
        # U+FFFD in its place; the request goes upstream as the agent wrote it
        self.text, self.reasoning = _utf8(self.text), _utf8(self.reasoning)
        for c in self.calls:
            if isinstance(c.get("arguments"), str):
                c["arguments"] = _utf8(c["arguments"])

    def fingerprint(self) -> str:
        # a tool result by its call: a harness may mask or trim its own old outputs and still continue;
        # an answer without its reasoning, which harnesses drop from earlier turns (DeepSeek asks them to)
        if self.kind == "tool" and not self.by_text:
            return f"tool:{self.call_id}"
        raw = json.dumps([self.kind, self.text, self.calls], sort_keys=True, default=str)
        return hashlib.sha1(raw.encode("utf-8", "replace")).hexdigest()


def _utf8(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _args(value: Any) -> Any:
    return {} if value is None else value


def openai_events(body: Mapping[str, Any]) -> list[Event]:
    """A chat-completions request's messages as events."""
    events = []
    for i, m in enumerate(body.get("messages") or []):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}] is not an object")
        role = m.get("role")
        if role in ("system", "developer"):
            events.append(Event("system", message_text(m.get("content"), "\n")))
        elif role == "assistant":
            calls = []
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                calls.append(
                    {"id": c.get("id"), "name": fn.get("name") or "", "arguments": _args(fn.get("arguments"))}
                )
            reasoning = m.get("reasoning_content") or m.get("reasoning") or ""
            events.append(Event("assistant", message_text(m.get("content"), "\n"), str(reasoning), calls))
        elif role == "tool":
            events.append(
                Event(
                    "tool",
                    message_text(m.get("content"), "\n"),
                    call_id=m.get("tool_call_id"),
                    is_error=m.get("is_error") is True,  # none in chat completions; Gemini's say
                    where=(i, None),
                )
            )
        else:  # user, and a legacy function reply read as text
            events.append(Event("user", message_text(m.get("content"), "\n")))
    return events


def anthropic_events(body: Mapping[str, Any]) -> list[Event]:
    """An Anthropic Messages request's system prompt and messages as events."""
    events = []
    if body.get("system"):
        events.append(Event("system", message_text(body["system"], "\n")))
    for i, m in enumerate(body.get("messages") or []):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}] is not an object")
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if m.get("role") == "assistant":
            text, thinking, calls = [], [], []
            for b in blocks:
                kind = b.get("type") if isinstance(b, Mapping) else None
                if kind == "text":
                    text.append(b.get("text") or "")
                elif kind == "thinking":
                    thinking.append(b.get("thinking") or "")
                elif kind == "tool_use":
                    calls.append(
                        {"id": b.get("id"), "name": b.get("name") or "", "arguments": _args(b.get("input"))}
                    )
            events.append(Event("assistant", "\n".join(text), "\n".join(thinking), calls))
            continue
        texts, results = [], 0
        for j, b in enumerate(blocks):
            if isinstance(b, Mapping) and b.get("type") == "tool_result":
                results += 1
                events.append(
                    Event("tool", message_text(b.get("content"), "\n"), call_id=b.get("tool_use_id"),
                           is_error=bool(b.get("is_error")), where=(i, j))
                )  # fmt: skip
            elif isinstance(b, Mapping) and b.get("type") == "text":
                texts.append(b.get("text") or "")
        if texts or not results:
            events.append(Event("user", "\n".join(texts)))
    return events


_RESPONSE_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_RESPONSE_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def responses_events(body: Mapping[str, Any]) -> list[Event]:
    """An OpenAI Responses request's instructions and input items as events: a model turn is the
    assistant messages, reasoning and calls between two items of another kind."""
    events = []
    if body.get("instructions"):
        events.append(Event("system", message_text(body["instructions"], "\n")))
    items = body.get("input")
    if isinstance(items, str):
        return [*events, Event("user", items)]
    turn: Event | None = None
    for i, it in enumerate(items or []):
        if not isinstance(it, Mapping):
            raise ValueError(f"input[{i}] is not an object")
        kind = it.get("type") or ("message" if "role" in it else None)
        role = it.get("role")
        if kind in _RESPONSE_CALLS or kind == "reasoning" or (kind == "message" and role == "assistant"):
            if turn is None:
                turn = Event("assistant")
                events.append(turn)
            if kind == "reasoning":
                summary = it.get("summary") or []
                turn.reasoning += message_text(summary if isinstance(summary, list) else [summary], "\n")
            elif kind == "message":
                turn.text += message_text(it.get("content"), "\n")
            else:
                args = it.get("arguments") if "arguments" in it else it.get("input", it.get("action"))
                turn.calls.append(
                    {"id": it.get("call_id"), "name": it.get("name") or kind, "arguments": _args(args)}
                )
            continue
        turn = None
        if kind in _RESPONSE_OUTPUTS:
            events.append(
                Event(
                    "tool", message_text(it.get("output"), "\n"), call_id=it.get("call_id"), where=(i, None)
                )
            )
        elif kind == "message" and role in ("system", "developer"):
            events.append(Event("system", message_text(it.get("content"), "\n")))
        elif kind == "message":
            events.append(Event("user", message_text(it.get("content"), "\n")))
    return events


def gemini_events(body: Mapping[str, Any]) -> list[Event]:
    """A Gemini ``generateContent`` request's system instruction and contents as events, read as the
    Gemini ingester reads a saved conversation (:func:`~dtoc_rl.ingest.gemini.contents_to_chat`, which
    also pairs responses with calls); a tool event's ``where`` is its ``functionResponse`` part.  A
    call the request sent without an id is told from another conversation's by its output's text."""
    places: list[tuple[int, int]] = []
    try:
        msgs = contents_to_chat(body.get("contents"), part_field(body, "systemInstruction"), places)
    except IngestError as e:
        raise ValueError(e.reason) from None
    events = openai_events({"messages": msgs})
    answers = (m for m in msgs if m["role"] == "tool")
    for e, where, m in zip((e for e in events if e.kind == "tool"), places, answers, strict=True):
        e.where, e.by_text = where, m["made_id"]
    return events


EVENTS = {
    "openai": openai_events,
    "anthropic": anthropic_events,
    "responses": responses_events,
    "gemini": gemini_events,
}
#: Where each API's request lists its conversation.
LISTED = {"openai": "messages", "anthropic": "messages", "responses": "input", "gemini": "contents"}


# The events an answer's stream ends with: Anthropic's (a message's end, or an error), a Responses
# stream's (completed, cut short, failed); a chat completion's stream ends with "data: [DONE]".
_LAST_EVENTS = frozenset(
    {"message_stop", "error", "response.completed", "response.incomplete", "response.failed"}
)


def _gemini_last(ev: dict) -> bool:
    """A Gemini stream's last chunk: every candidate finished, and the answer's usage counted."""
    candidates = ev.get("candidates")
    return (
        isinstance(ev.get("usageMetadata"), dict)
        and isinstance(candidates, list)
        and bool(candidates)
        and all(isinstance(c, dict) and c.get("finishReason") for c in candidates)
    )


class StreamAnswer:
    """The usage a streamed answer reports, read from its server-sent events as they pass: a chat
    completion's last chunk (``stream_options.include_usage``), Anthropic's ``message_start`` and
    ``message_delta``, a Responses ``response.completed``, each Gemini chunk's ``usageMetadata``;
    later figures over earlier ones."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.done = False  # the answer's last event has passed ([DONE], message_stop, response.completed)
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            if line[5:].strip() == b"[DONE]":
                self.done = True
                continue
            try:
                ev = json.loads(line[5:])
            except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer of 4,300+ digits
                continue
            if not isinstance(ev, dict):
                continue
            self.done = self.done or ev.get("type") in _LAST_EVENTS or _gemini_last(ev)
            inner = ev.get("message") or ev.get("response")
            inner_usage = inner.get("usage") if isinstance(inner, dict) else None
            for found in (ev.get("usage"), ev.get("usageMetadata"), inner_usage):
                if isinstance(found, dict):
                    self.usage.update({k: v for k, v in found.items() if v is not None})
