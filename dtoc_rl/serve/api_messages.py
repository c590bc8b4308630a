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
    texts: list[str] = []  # the turn's text and reasoning, joined once it ends (not added to one by one)
    thoughts: list[str] = []

    def ended() -> None:
        if turn is not None:
            turn.text, turn.reasoning = _utf8("".join(texts)), _utf8("".join(thoughts))
        texts.clear()
        thoughts.clear()

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
                thoughts.append(message_text(summary if isinstance(summary, list) else [summary], "\n"))
            elif kind == "message":
                texts.append(message_text(it.get("content"), "\n"))
            else:
                args = it.get("arguments") if "arguments" in it else it.get("input", it.get("action"))
                turn.calls.append(
                    {"id": it.get("call_id"), "name": it.get("name") or kind, "arguments": _args(args)}
                )
            continue
        ended()
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
    ended()
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


#: The most of a streamed answer kept to be assembled, in characters of its text and of the events
#: kept whole (a model's answer is some kilobytes; 128k tokens are about half a megabyte): past it the
#: answer is left unread, its usage still counted.
MAX_ANSWER_CHARS = 4 * 2**20


class StreamAnswer:
    """A streamed answer read from its server-sent events as they pass: the usage it reports (a chat
    completion's last chunk, ``stream_options.include_usage``; Anthropic's ``message_start`` and
    ``message_delta``; a Responses ``response.completed``; each Gemini chunk's ``usageMetadata``;
    later figures over earlier ones) and, given the API, the answer itself, assembled as the API's
    whole answer would hold it (:meth:`answer`, for :func:`answer_event`)."""

    def __init__(self, api: str | None = None) -> None:
        self.usage: dict[str, Any] = {}
        self.done = False  # the answer's last event has passed ([DONE], message_stop, response.completed)
        self._rest = b""
        self.api = api
        self._size = 0  # characters assembled, against MAX_ANSWER_CHARS
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._slots: dict[Any, dict[str, Any]] = {}  # a call or block being streamed, by its index
        self._json: dict[Any, list[str]] = {}  # a call's arguments, as their pieces came
        self._calls: list[int] = []  # a chat completion's calls in the order they began (slot keys)
        self._by_index: dict[int, int] = {}  # a call's index in the stream -> its latest slot key
        self._response: dict[str, Any] | None = None  # a Responses stream's final response
        self._parts: list[dict[str, Any]] = []  # a Gemini stream's parts, chunk after chunk

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
            kind = ev.get("type")
            self.done = self.done or (isinstance(kind, str) and kind in _LAST_EVENTS) or _gemini_last(ev)
            inner = ev.get("message") or ev.get("response")
            inner_usage = inner.get("usage") if isinstance(inner, dict) else None
            for found in (ev.get("usage"), ev.get("usageMetadata"), inner_usage):
                if isinstance(found, dict):
                    self.usage.update({k: v for k, v in found.items() if v is not None})
            if self.api is not None and self._size <= MAX_ANSWER_CHARS:
                try:
                    self._take(ev, len(line))
                except (TypeError, AttributeError, ValueError):  # an event of a shape no API sends
                    self._size = MAX_ANSWER_CHARS + 1

    def _add(self, to: list[str], text: Any) -> None:
        if isinstance(text, str) and text:
            to.append(text)
            self._size += len(text)

    def _call_slot(self, index: Any, cid: str | None) -> int:
        """The chat completion call a tool-call delta goes on: the one its ``index`` names (a new one
        for an index not seen), else the latest; a new one all the same when the delta brings an id
        other than that call's (servers that leave ``index`` out, or number every call 0, start each
        call with its id)."""
        if isinstance(index, int):
            at = self._by_index.get(index)
        else:
            at = self._calls[-1] if self._calls else None
        if at is None or (cid and self._slots[at]["id"] not in (None, cid)):
            at = len(self._calls)
            self._slots[at] = {"id": None, "function": {"name": ""}}
            self._calls.append(at)
            if isinstance(index, int):
                self._by_index[index] = at
        return at

    def _take(self, ev: dict[str, Any], size: int) -> None:
        if self.api == "openai":
            for choice in ev.get("choices") or []:
                if choice.get("index", 0) != 0:  # the first choice is the one an agent goes on with
                    continue
                delta = choice.get("delta") or {}
                self._add(self._text, delta.get("content"))
                self._add(self._reasoning, delta.get("reasoning_content") or delta.get("reasoning"))
                calls = delta.get("tool_calls") or []
                self._size += size if calls else 0  # a call's slot is kept whatever its text
                for call in calls:
                    cid = call.get("id") if isinstance(call.get("id"), str) else None
                    at = self._call_slot(call.get("index"), cid)
                    slot = self._slots[at]
                    slot["id"] = cid or slot["id"]
                    fn = call.get("function") or {}
                    if isinstance(fn.get("name"), str) and fn["name"]:
                        slot["function"]["name"] = fn["name"]
                    self._add(self._json.setdefault(at, []), fn.get("arguments"))
        elif self.api == "anthropic":
            kind, at = ev.get("type"), ev.get("index")
            if not isinstance(at, int):
                return
            if kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
                self._slots[at] = dict(ev["content_block"])
                self._size += size
            elif kind == "content_block_delta" and at in self._slots:
                delta, block = ev.get("delta") or {}, self._slots[at]
                for field_name in ("text", "thinking"):
                    if isinstance(delta.get(field_name), str):
                        block[field_name] = (block.get(field_name) or "") + delta[field_name]
                        self._size += len(delta[field_name])
                self._add(self._json.setdefault(at, []), delta.get("partial_json"))
        elif self.api == "responses":
            if ev.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                self._response = ev.get("response") if isinstance(ev.get("response"), dict) else None
                self._size += size
            elif ev.get("type") == "response.output_item.done" and isinstance(ev.get("item"), dict):
                at = ev.get("output_index")
                self._slots[at if isinstance(at, int) else len(self._slots)] = ev["item"]
                self._size += size
        elif self.api == "gemini":
            parts = _gemini_parts(ev)
            self._parts.extend(parts)
            self._size += size if parts else 0

    def answer(self) -> dict[str, Any] | None:
        """The answer as the API's whole (unstreamed) answer holds it, with the usage read (what
        :func:`answer_event` and the proxy read); the usage alone without an API or past
        :data:`MAX_ANSWER_CHARS`; None when neither was read."""
        usage = {"usage": dict(self.usage)} if self.usage else {}
        if self.api is None or self._size > MAX_ANSWER_CHARS:
            return usage or None

        def inputs(at: int, block: dict[str, Any]) -> Any:
            raw = "".join(self._json.get(at, []))
            if not raw.strip():  # none streamed: what the block started with
                return block.get("input") or {}
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):  # cut short: the text as it came
                return raw

        if self.api == "openai":
            calls = [
                {
                    "id": self._slots[at]["id"],
                    "type": "function",
                    "function": {**self._slots[at]["function"], "arguments": "".join(self._json.get(at, []))},
                }
                for at in self._calls
            ]
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
            if self._reasoning:
                message["reasoning_content"] = "".join(self._reasoning)
            if calls:
                message["tool_calls"] = calls
            return {"choices": [{"index": 0, "message": message}], **usage}
        if self.api == "anthropic":
            blocks = []
            for at, block in sorted(self._slots.items()):
                blocks.append(
                    {**block, "input": inputs(at, block)} if block.get("type") == "tool_use" else block
                )
            return {"role": "assistant", "content": blocks, **usage}
        if self.api == "responses":
            output = (self._response or {}).get("output")
            # no final event, or one that lists no items (ChatGPT's Codex backend): the items that finished
            if not isinstance(output, list) or not output:
                output = [item for _, item in sorted(self._slots.items())]
            return {"output": output, **usage}
        if self.api == "gemini":
            return {"candidates": [{"content": {"role": "model", "parts": _joined(self._parts)}}], **usage}
        return None


def _joined(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Gemini stream's parts as one answer holds them: the text of consecutive text parts (split
    anywhere, mid-word too, by the stream) joined into one part, a thought's apart from an answer's."""
    out: list[dict[str, Any]] = []
    pieces: list[str] = []  # the text of out[-1] while it is a plain text part, joined at its end

    def plain(part: dict[str, Any]) -> bool:
        return set(part) <= {"text", "thought"} and isinstance(part.get("text"), str)

    for part in parts:
        if plain(part) and out and pieces and bool(out[-1].get("thought")) == bool(part.get("thought")):
            pieces.append(part["text"])
            continue
        if pieces:
            out[-1]["text"] = "".join(pieces)
        out.append(dict(part))
        pieces = [part["text"]] if plain(part) else []
    if pieces:
        out[-1]["text"] = "".join(pieces)
    return out


def _gemini_parts(chunk: Any) -> list[dict[str, Any]]:
    """The parts of a Gemini answer's (or stream chunk's) first candidate: the one an agent goes on with."""
    candidates = chunk.get("candidates") if isinstance(chunk, Mapping) else None
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    content = first.get("content") if isinstance(first, Mapping) else None
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _model_turn(api: str, answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """A whole answer of ``api`` as a request body holding it as its one model turn."""
    if api == "openai":
        choices = answer.get("choices")
        message = choices[0].get("message") if isinstance(choices, list) and choices else None
        return {"messages": [{**message, "role": "assistant"}]} if isinstance(message, Mapping) else None
    if api == "anthropic":
        content = answer.get("content")
        return (
            {"messages": [{"role": "assistant", "content": content}]} if isinstance(content, list) else None
        )
    if api == "responses":
        return {"input": answer["output"]} if isinstance(answer.get("output"), list) else None
    if api == "gemini":
        parts = _gemini_parts(answer)
        return {"contents": [{"role": "model", "parts": parts}]} if parts else None
    return None


def answer_event(api: str, answer: Any) -> Event | None:
    """The model turn an answer of ``api`` holds (decoded JSON, or :meth:`StreamAnswer.answer`), read
    as the agent's next request will hold it (by the same request parser): its text, reasoning and
    calls; None when it holds no model turn (an error, a shape no API answers with)."""
    if isinstance(answer, list):  # Gemini's stream without alt=sse: a JSON list of chunks
        parts = _joined([p for chunk in answer for p in _gemini_parts(chunk)])
        answer = {"candidates": [{"content": {"role": "model", "parts": parts}}]}
    try:
        body = _model_turn(api, answer) if isinstance(answer, Mapping) else None
        turns = [e for e in EVENTS[api](body) if e.kind == "assistant"] if body is not None else []
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
        return None
    return turns[0] if len(turns) == 1 and (turns[0].text or turns[0].calls or turns[0].reasoning) else None
