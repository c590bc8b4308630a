"""OpenTelemetry GenAI traces: the model calls an instrumented agent exported as OTLP JSON.

Format: what the OpenTelemetry Collector's ``file`` exporter writes (and OTLP/HTTP JSON bodies): one
JSON object per line (or one per file), an ``ExportTraceServiceRequest`` (``resourceSpans`` →
``scopeSpans`` → ``spans``, each with ``traceId``, ``spanId``, ``startTimeUnixNano``, ``attributes``
as ``[{"key", "value": AnyValue}]``) or an ``ExportLogsServiceRequest`` (``resourceLogs`` →
``scopeLogs`` → ``logRecords``).  A span is a model call when it carries a call's messages in one of
the conventions GenAI instrumentations write:

* the GenAI semantic conventions' ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON: each
  message a ``role`` and ``parts`` of type ``text``, ``tool_call`` (``id``, ``name``, ``arguments``),
  ``tool_call_response`` (``id``, ``response``), ``reasoning``; ``gen_ai.system_instructions`` beside
  them): the official ``opentelemetry-instrumentation-openai-v2`` 2.4 with
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``, OpenLLMetry from 0.55, and the
  frameworks that write the conventions themselves;
* OpenLLMetry's flat attributes before 0.55: ``gen_ai.prompt.N.role`` / ``.content`` /
  ``.tool_call_id`` / ``.tool_calls.J.{id,name,arguments}``, and ``gen_ai.completion.N.*``;
* OpenInference's (Arize Phoenix): ``llm.input_messages.N.message.role`` / ``.content`` /
  ``.tool_call_id`` / ``.tool_calls.J.tool_call.{id,function.name,function.arguments}`` (or
  ``.contents.K.message_content.text``), and ``llm.output_messages.N.message.*``;
* the earlier conventions' events (``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice``), as log records tied to
  the span by ``spanId`` (``opentelemetry-instrumentation-openai-v2`` 2.3 with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; read from the same file, or from a file
  of log records beside it) or as the span's own events.

Each instrumentation records a call's whole input, so a conversation is the latest call's input and
its answer; the calls of one trace whose inputs continue one another are one run (a call whose input
does not continue any earlier one starts another run of the trace: a sub-agent, or a history the
agent rewrote).  Each assistant turn is matched to the call that answered it (by its tool calls' ids,
else its text, else in order) and keeps that call's model (``gen_ai.response.model``, else
``llm.model_name``, else the requested one), time (the span's start) and usage:
``gen_ai.usage.input_tokens`` / ``output_tokens`` (``llm.token_count.prompt`` / ``completion``),
cache reads ``gen_ai.usage.cache_read.input_tokens`` (``cache_read_input_tokens``,
``llm.token_count.prompt_details.cache_read``) and writes ``gen_ai.usage.cache_creation.input_tokens``
(``cache_creation_input_tokens``, ``...prompt_details.cache_write``); a prompt count smaller than the
cache's share is the uncached rest, as Anthropic counts it, and the three are added
(:func:`~dtoc_rl.ingest.common.cache_usage`).  Tool executions are not needed: their results are in
the next call's input.  Traces record no outcome: ``success`` is None.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_text
from dtoc_rl.ingest.common import cache_usage, finalize, number, run_model
from dtoc_rl.ingest.openai_chat import chat_to_steps, norm_args

__all__ = ["OtelGenAIIngester"]

_OTLP = re.compile(r'^\s*\{\s*"resource(?:Spans|Logs)"\s*:')
_NOT_CALLS = ("invoke_agent", "create_agent", "execute_tool", "embeddings")
_RESPONSE_ID = re.compile(r'"id"\s*:\s*"((?:chatcmpl-|msg_|resp_|gen-)[\w-]+)"')
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value (an int written as text, as the JSON mapping writes
    64-bit integers, as an int)."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return None
    if "doubleValue" in v:
        return v["doubleValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        inner = v["arrayValue"] if isinstance(v["arrayValue"], dict) else {}
        items = inner.get("values")
        return [value(x) for x in items] if isinstance(items, list) else []
    if "kvlistValue" in v:
        inner = v["kvlistValue"] if isinstance(v["kvlistValue"], dict) else {}
        return attributes(inner.get("values"))
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    """OTLP ``[{"key", "value"}]`` as a dict."""
    out: dict[str, Any] = {}
    for kv in kvs if isinstance(kvs, list) else ():
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = value(kv.get("value"))
    return out


@dataclass
class _Call:
    trace: str
    start: float | None
    inputs: list[dict]
    output: dict | None
    model: str
    requested: str
    counts: dict
    scope: str
    response_id: str = ""
    has_parent: bool = False

    @cached_property
    def usage(self) -> Any:
        """The call's usage, made once its counts are final (two records of it merged, :func:`_unique`)."""
        return _usage(self.counts)


@dataclass
class _Export:
    spans: list[tuple[dict, str]] = field(default_factory=list)  # (span, its scope "name version")
    logs: list[dict] = field(default_factory=list)  # log records
    services: set[str] = field(default_factory=set)
    seen_spans: bool = False  # a trace export, though maybe of no span


def _read_export(path: Path, into: _Export, where: str) -> None:
    text = read_text(path)
    docs: list[Any] = []
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise IngestError(f"{where} line {n}: not JSON ({e.msg})", path) from None
    for doc in docs:
        into.seen_spans |= isinstance(doc, dict) and "resourceSpans" in doc
        for rs in _dicts(doc, "resourceSpans"):
            res = attributes(_dict(rs.get("resource")).get("attributes"))
            if isinstance(res.get("service.name"), str):
                into.services.add(res["service.name"])
            # OTLP before 0.15 called a scope an instrumentation library
            for ss in _dicts(rs, "scopeSpans") + _dicts(rs, "instrumentationLibrarySpans"):
                scope = _dict(ss.get("scope") or ss.get("instrumentationLibrary"))
                name = " ".join(str(scope[k]) for k in ("name", "version") if scope.get(k))
                into.spans += [(s, name) for s in _dicts(ss, "spans")]
        for rl in _dicts(doc, "resourceLogs"):
            for sl in _dicts(rl, "scopeLogs") + _dicts(rl, "instrumentationLibraryLogs"):
                into.logs += _dicts(sl, "logRecords")


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _dicts(d: Any, key: str) -> list[dict]:
    """The objects listed under ``key`` of ``d`` (nothing when it is not a list of them)."""
    items = d.get(key) if isinstance(d, dict) else None
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


# -------------------------------------------------------------- messages, per convention


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # parts or content blocks
        return "\n".join(t for t in (_text(c.get("text", c.get("content")) if isinstance(c, dict) else c)
                                     for c in content) if t)  # fmt: skip
    return json.dumps(content, ensure_ascii=False)


def _call(cid: Any, name: Any, args: Any) -> dict:
    fn = {"name": name if isinstance(name, str) else str(name or ""), "arguments": norm_args(args)}
    return {"id": _id(cid), "function": fn}


def _id(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def _from_parts(raw: Any, name: str) -> list[dict]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` (``name``): JSON text of messages with
    parts.  Text that is not JSON is a ValueError naming the attribute."""
    try:
        msgs = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not JSON ({e.msg} at character {e.pos} of {len(raw)})") from None
    out: list[dict] = []
    for m in msgs if isinstance(msgs, list) else []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        texts, reasoning, calls = [], [], []
        for p in m.get("parts") or []:
            if not isinstance(p, dict):
                continue
            kind = p.get("type")
            if kind == "tool_call":
                calls.append(_call(p.get("id"), p.get("name"), p.get("arguments")))
            elif kind == "tool_call_response":
                body = p.get("response", p.get("result"))
                out.append({"role": "tool", "tool_call_id": _id(p.get("id")), "content": _text(body)})
            elif kind == "reasoning":
                reasoning.append(_text(p.get("content")))
            elif kind in ("blob", "uri", "file"):  # media: named, not its bytes
                texts.append(f"[{p.get('modality') or kind}]")
            else:  # text, and any other part shown as the text it carries
                texts.append(_text(p.get("content")))
        if role in ("user", "system", "developer", "assistant") and (texts or calls or reasoning):
            msg: dict = {"role": role, "content": "\n".join(t for t in texts if t)}
            if calls:
                msg["tool_calls"] = calls
            if reasoning:
                msg["reasoning"] = "\n".join(reasoning)
            out.append(msg)
        elif role in ("user", "system", "developer", "assistant") and m.get("parts") == []:
            # its parts left out (an SDK's limit on recorded content): a placeholder, filled from the
            # run's earlier calls, which recorded it
            out.append({"role": role, "content": "", "dtoc_cut": True})
    return out


def _json_or_text(v: Any) -> Any:
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Attributes ``PREFIX.N.rest`` grouped by N (in order), each as {rest: value}."""
    rows: dict[int, dict[str, Any]] = {}
    for k, v in attrs.items():
        if k.startswith(prefix):
            head, _, rest = k[len(prefix) :].partition(".")
            if head.isdigit() and rest:
                rows.setdefault(int(head), {})[rest] = v
    return [rows[i] for i in sorted(rows)]


def _flat_message(row: dict[str, Any], pre: str = "", call_pre: str = "", fn: str = "") -> dict:
    """One message of the flat conventions: OpenLLMetry (``pre`` "", calls ``tool_calls.J.``) or
    OpenInference (``pre`` "message.", calls ``tool_calls.J.tool_call.``, names under ``function.``)."""
    role = row.get(pre + "role") or "user"
    content = row.get(pre + "content")
    if content is None:  # OpenInference's parts: contents.K.message_content.text
        parts = _indexed({k: v for k, v in row.items()}, pre + "contents.")
        content = "\n".join(str(p["message_content.text"]) for p in parts if p.get("message_content.text"))
    calls = [
        _call(c.get(call_pre + "id"), c.get(call_pre + fn + "name"), c.get(call_pre + fn + "arguments"))
        for c in _indexed(row, pre + "tool_calls.")
    ]
    msg: dict = {
        "role": "tool" if role in ("tool", "function", "ipython") else role,
        "content": _text(content),
    }
    if msg["role"] == "tool":
        msg["tool_call_id"] = _id(row.get(pre + "tool_call_id"))
    if calls:
        msg["tool_calls"] = calls
    return msg


def _from_events(events: list[tuple[str, Any]]) -> tuple[list[dict], dict | None]:
    """The earlier conventions' events of one call, in order: its input and its answer."""
    inputs, output = [], None
    for name, body in events:
        body = body if isinstance(body, dict) else {}
        if name == "gen_ai.choice":
            m = body.get("message") if isinstance(body.get("message"), dict) else {}
            output = _event_message("assistant", m)
        elif name in _EVENT_ROLES:
            inputs.append(_event_message(_EVENT_ROLES[name], body))
    return inputs, output


def _event_message(role: str, body: dict) -> dict:
    msg: dict = {"role": role, "content": _text(body.get("content"))}
    calls = [
        _call(c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
        for c in body.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    if calls:
        msg["tool_calls"] = calls
    if role == "tool":
        msg["tool_call_id"] = _id(body.get("id"))
    return msg


def _messages(attrs: dict[str, Any], events: list[tuple[str, Any]]) -> tuple[list[dict], dict | None] | None:
    """A call span's input messages and answer, in whichever convention it has them; None: no call."""
    if attrs.get("gen_ai.operation.name") in _NOT_CALLS:  # an agent's or a tool's span may hold messages
        return None
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        inputs = _from_parts(attrs.get("gen_ai.input.messages"), "gen_ai.input.messages")
        sys_text = _text(_json_or_text(attrs.get("gen_ai.system_instructions")))
        if sys_text and not any(m["role"] == "system" and m["content"] == sys_text for m in inputs):
            # sent as well as any system message the input holds (instructions beside a system prompt)
            at = sum(1 for m in inputs if m["role"] == "system")
            inputs.insert(at, {"role": "system", "content": sys_text})
        answer = _from_parts(attrs.get("gen_ai.output.messages"), "gen_ai.output.messages")
        out = [m for m in answer if m["role"] == "assistant"]
        return inputs, out[0] if out else None
    prompt = _indexed(attrs, "gen_ai.prompt.")
    if prompt:
        done = _indexed(attrs, "gen_ai.completion.")
        return [_flat_message(r) for r in prompt], _flat_message(done[0]) if done else None
    oi = _indexed(attrs, "llm.input_messages.")
    if oi and attrs.get("openinference.span.kind", "LLM") == "LLM":  # a chain's span repeats its input
        done = _indexed(attrs, "llm.output_messages.")
        conv = {"pre": "message.", "call_pre": "tool_call.", "fn": "function."}
        return [_flat_message(r, **conv) for r in oi], _flat_message(done[0], **conv) if done else None
    if any(n in _EVENT_ROLES or n == "gen_ai.choice" for n, _ in events):
        return _from_events(events)
    return None


def _counts(a: dict[str, Any]) -> dict[str, float | None]:
    """A call's token counts as its span gives them (a count no provider reports, negative, NaN or
    1e400, is none)."""

    def first(*keys: str) -> float | None:
        return number(a, *keys)

    prompt = first("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt",
                   "llm.usage.prompt_tokens")  # fmt: skip
    out = first("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion",
                "llm.usage.completion_tokens")  # fmt: skip
    read = first("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
                 "llm.token_count.prompt_details.cache_read")  # fmt: skip
    write = first("gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.cache_creation_input_tokens",
                  "gen_ai.usage.cache_write.input_tokens",
                  "llm.token_count.prompt_details.cache_write")  # fmt: skip
    return {"prompt": prompt, "read": read, "write": write, "out": out}


def _usage(n: dict[str, float | None]) -> Any:
    if n["prompt"] is None and n["out"] is None:
        return None
    return cache_usage(
        n["prompt"], n["read"], n["write"], output_tokens=None if n["out"] is None else int(n["out"])
    )


def _nanos(v: Any) -> float:
    return float(v) if isinstance(v, int | float) or (isinstance(v, str) and v.isdigit()) else 0.0


def _event(e: dict) -> tuple[Any, Any]:
    """A span event as (name, body): its attributes, or the JSON of ``gen_ai.event.content`` (as Azure's
    SDK writes the message events)."""
    a = attributes(e.get("attributes"))
    body = _json_or_text(a.get("gen_ai.event.content"))
    return e.get("name"), body if isinstance(body, dict) else a


def _calls(ex: _Export, unreadable: list[str]) -> list[_Call]:
    """The model calls of an export, in the order they began; a span whose messages cannot be read is
    named in ``unreadable`` (an attribute cut by the SDK's length limit, say) and left out."""
    by_span: dict[str, list[tuple[float, str, Any]]] = {}
    for r in ex.logs:
        name = r.get("eventName") or attributes(r.get("attributes")).get("event.name")
        if isinstance(name, str) and isinstance(r.get("spanId"), str):
            when = _nanos(r.get("timeUnixNano")) or _nanos(r.get("observedTimeUnixNano"))
            by_span.setdefault(r["spanId"], []).append((when, name, value(r.get("body"))))
    calls = []
    for s, scope in ex.spans:
        a = attributes(s.get("attributes"))
        events = [_event(e) for e in s.get("events") or [] if isinstance(e, dict)]
        events += [(n, b) for _, n, b in sorted(by_span.get(str(s.get("spanId")), []), key=lambda x: x[0])]
        try:
            got = _messages(a, events)
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            unreadable.append(f"span {s.get('spanId')} of trace {s.get('traceId')}: {type(e).__name__}: {e}")
            continue
        if got is None:
            continue
        asked = _dict(_json_or_text(a.get("llm.invocation_parameters"))).get("model")
        requested = str(a.get("gen_ai.request.model") or asked or "")
        start = s.get("startTimeUnixNano")
        rid = a.get("gen_ai.response.id")
        if not rid and isinstance(a.get("output.value"), str):  # OpenInference: the raw response's id
            found = _RESPONSE_ID.search(a["output.value"])
            rid = found.group(1) if found else ""
        calls.append(
            _Call(
                trace=str(s.get("traceId") or ""),
                start=int(start) / 1e9 if str(start or "").isdigit() else None,
                inputs=got[0],
                output=got[1],
                model=str(a.get("gen_ai.response.model") or a.get("llm.model_name") or requested),
                requested=requested,
                counts=_counts(a),
                scope=scope,
                response_id=str(rid or ""),
                has_parent=bool(s.get("parentSpanId")),
            )
        )
    return _in_order(calls)


def _in_order(calls: list[_Call]) -> list[_Call]:
    """Calls in the order they began; one whose span has no start goes after the last call of its
    trace with an input no longer than its own (inputs grow as a conversation goes on)."""
    out = sorted((c for c in calls if c.start is not None), key=lambda c: c.start)
    for c in (c for c in calls if c.start is None):
        at = max((i + 1 for i, o in enumerate(out) if o.trace == c.trace and len(o.inputs) <= len(c.inputs)),
                 default=len(out))  # fmt: skip
        out.insert(at, c)
    return out


def _mark(m: dict) -> tuple:
    """What identifies a message from one call's record to the next (arguments and whitespace may be
    written differently): its role, its text, its calls' ids and names, the call it answers.  A
    placeholder (content an SDK left out) is its role alone, and matches any message of that role."""
    if m.get("dtoc_cut"):
        return ("*", m["role"])
    calls = tuple((c.get("id"), c["function"].get("name")) for c in m.get("tool_calls") or [])
    return m["role"], " ".join(str(m.get("content") or "").split()), calls, m.get("tool_call_id")


def _same(a: tuple, b: tuple) -> bool:
    return a == b or (a[0] == "*" and a[1] == b[0]) or (b[0] == "*" and b[1] == a[0])


@dataclass
class _Run:
    """One conversation: its system messages, the rest as the calls were sent it (what a later call no
    longer holds, trimmed by the agent, stays), and for each call the part of it its input left out."""

    system: list[dict]
    chat: list[dict] = field(default_factory=list)
    marks: list[tuple] = field(default_factory=list)  # of ``chat``, kept as it grows
    calls: list[_Call] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # per call: chat[a:b] not in its input
    traces: list[str] = field(default_factory=list)
    asked: int = -1  # where the latest call's answer begins in ``chat`` (its input ends there)

    def take(self, c: _Call, rest: list[dict], marks: list[tuple], at: tuple[int, int], cut: bool) -> None:
        """Add call ``c`` whose input (``rest``, its system messages left out) holds ``chat[:head]``,
        then ``chat[start:]``, then what is new (see :meth:`continued_by`)."""
        head, start = at
        new = head + len(self.chat) - start
        self.chat += rest[new:]
        self.marks += marks[new:]
        self.asked = len(self.chat)
        if c.output is not None:
            self.chat.append(c.output)
            self.marks.append(_mark(c.output))
        self.calls.append(c)
        # a window an SDK's content limit made (``cut``) was sent whole: nothing left out
        self.gaps.append((head, start) if start > head and not cut else (0, 0))
        if c.trace not in self.traces:
            self.traces.append(c.trace)

    def retried_by(self, marks: list[tuple]) -> bool:
        """Whether an input is the latest call's again (the agent retried it): the later answer counts."""
        return bool(self.calls) and len(marks) == self.asked and self.marks[: self.asked] == marks

    def retry(self, c: _Call) -> None:
        del self.chat[self.asked :], self.marks[self.asked :]
        if c.output is not None:
            self.chat.append(c.output)
            self.marks.append(_mark(c.output))
        self.calls[-1] = c

    def continued_by(self, marks: list[tuple], *, whole: bool = False) -> tuple[int, int] | None:
        """How an input (``marks``) continues this conversation: ``(head, start)`` when it holds the
        conversation's first ``head`` messages (a task an agent keeps), then all from ``start`` on to
        the latest answer (an agent that trims the rest), then what came after; None when it does
        not.  ``whole``: only an input that holds all of it."""
        have = self.marks
        head = 0
        while head < min(len(have), len(marks)) and _same(have[head], marks[head]):
            head += 1
        if head == len(have):
            return head, head
        if whole or not have:
            return None
        # the newest messages it holds from the conversation must reach its end: start no earlier than
        # where a window of what it holds would begin
        first = max(head + 1, len(have) - (len(marks) - head))
        for start in range(first, len(have)):
            if _same(have[start], marks[head]) and all(
                _same(have[start + i], marks[head + i]) for i in range(1, len(have) - start)
            ):
                return head, start
        return None


def _runs(calls: list[_Call]) -> list[_Run]:
    """The calls of a file grouped into conversations: a call whose input continues one of its trace
    (all of it, or its newest part: an agent that trims its history, an SDK that cuts the oldest
    content) joins it; else one of another trace that it holds whole (a chat traced a turn at a time);
    else it starts another.  A call whose input is the latest call's again is a retry of it."""
    runs: list[_Run] = []
    of_trace: dict[str, list[_Run]] = {}
    by_first: dict[tuple, list[_Run]] = {}  # runs by their first message, for calls of other traces
    for c in calls:
        lead = 0
        while lead < len(c.inputs) and c.inputs[lead]["role"] in ("system", "developer"):
            lead += 1
        rest = c.inputs[lead:]
        cut = any(m.get("dtoc_cut") for m in rest)
        rest = [m for m in rest if not m.get("dtoc_cut")]
        marks = [_mark(m) for m in rest]
        home, at = None, None
        for run in reversed(of_trace.get(c.trace, [])):
            if run.retried_by(marks):
                home = run
                break
            if (at := run.continued_by(marks)) is not None:
                home = run
                break
        if home is None and marks:
            for run in reversed(by_first.get(marks[0], [])):
                if c.trace not in run.traces and (at := run.continued_by(marks, whole=True)) is not None:
                    home = run
                    break
        if home is not None and at is None:
            home.retry(c)
            continue
        if home is None:
            system = [m for m in c.inputs[:lead] if not m.get("dtoc_cut")]
            home, at = _Run(system=system), (0, 0)
            runs.append(home)
        home.take(c, rest, marks, at, cut)
        of_trace.setdefault(c.trace, [])
        if home not in of_trace[c.trace]:
            of_trace[c.trace].append(home)
        if home.marks and home not in by_first.setdefault(home.marks[0], []):
            by_first[home.marks[0]].append(home)
    return runs


def _unique(calls: list[_Call]) -> list[_Call]:
    """One call per response: two instrumentations (an SDK's own and another's) may each record it,
    in one trace or in two.  The record kept holds the call's messages and sits in the agent's trace
    (the one with most calls); the cache counts it lacks are taken from the other."""
    per_trace = Counter(c.trace for c in calls)

    def rank(c: _Call) -> tuple:
        return bool(c.inputs and c.output), per_trace[c.trace], c.has_parent

    groups: dict[tuple, list[list[_Call]]] = {}
    for c in calls:  # one response: its id, its answer, and its time (a scripted API reuses ids)
        if c.response_id:
            alike = groups.setdefault((c.response_id, _mark(c.output) if c.output is not None else None), [])
            group = next((g for g in alike if _near(g[0], c)), None)
            if group is None:
                alike.append([c])
            else:
                group.append(c)
    drop: set[int] = set()
    for group in (g for alike in groups.values() for g in alike):
        keep = max(group, key=rank)  # the first of equals: the earliest
        for c in group:
            if c is keep:
                continue
            drop.add(id(c))
            for name, v in c.counts.items():  # a count one record lacks, from the other
                if keep.counts[name] is None:
                    keep.counts[name] = v
    return [c for c in calls if id(c) not in drop]


class OtelGenAIIngester(Ingester):
    name = "otel-genai"

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix in (".json", ".jsonl") and _OTLP.match(head) is not None

    def parse(self, path: Path) -> Iterator[Trajectory]:
        ex = _Export()
        _read_export(path, ex, path.name)
        if not ex.spans and ex.logs and not ex.seen_spans:
            raise IngestError(
                "OTLP log records only: their model calls' spans are in another file, which reads them "
                "from here (ingest that one, beside this)", path
            )  # fmt: skip
        unreadable: list[str] = []
        calls = _calls(ex, unreadable)
        silent = [s for s, _ in ex.spans if _is_model_span(attributes(s.get("attributes")))]
        if not ex.logs and len(calls) < len(silent):
            _logs_beside(path, ex, {str(s.get("traceId")) for s in silent})
            unreadable = []
            calls = _calls(ex, unreadable)
        if not calls and unreadable:
            raise IngestError(
                f"no model call read: the messages of {len(unreadable)} model-call span"
                f"{'' if len(unreadable) == 1 else 's'} cannot be read, first {unreadable[0]}", path
            )  # fmt: skip
        if not calls:
            raise IngestError(
                "no model-call spans: none carries gen_ai.input.messages, gen_ai.prompt.N, "
                "llm.input_messages.N or the gen_ai message events (was message content capture on? "
                "openai-v2 logs the messages as log records: keep their file beside this one)",
                path,
            )  # fmt: skip
        failed = _failed_tools(ex)
        seen: Counter = Counter()
        lost: list[str] = []
        for run in _runs(_unique(calls)):
            trace = run.traces[0]
            try:
                t = self._trajectory(path, trace, seen[trace], run, ex, failed)
            except IngestError as e:  # one conversation not read: the others are
                lost.append(f"trace {trace}: {e.reason}")
                continue
            seen[trace] += 1
            if t is not None:
                yield t
        if lost or unreadable:  # after the runs read, so that they are kept: what was not, named
            parts = [f"{len(lost)} conversations not read ({lost[0]})"] if lost else []
            parts += [f"{len(unreadable)} model-call spans not read ({unreadable[0]})"] if unreadable else []
            raise IngestError("; ".join(parts), path)

    def _trajectory(
        self, path: Path, trace: str, k: int, run: _Run, ex: _Export, failed: set[str]
    ) -> Trajectory | None:
        chat = [dict(m) for m in run.system] + [dict(m) for m in run.chat]
        lead = len(run.system)
        turns = [i for i, m in enumerate(chat) if m["role"] == "assistant"]
        made = _match(chat, turns, run.calls)
        cp = chat_to_steps(chat, "messages")
        if not cp.steps:
            return None
        by_turn: dict[int, list] = {}  # a turn's steps, in order (steps come turn by turn)
        first: dict[int, int] = {}  # a turn's first step
        for j, st in enumerate(cp.steps):
            by_turn.setdefault(st.turn, []).append(st)
            first.setdefault(st.turn, j)
            if st.tool_call_id in failed:
                st.output_is_error = True
        gaps = dict(zip((id(c) for c in run.calls), run.gaps, strict=True))
        for turn, group in by_turn.items():
            c = made.get(turn)
            if c is None:
                continue
            group[0].usage, group[0].model = c.usage, c.model or None
            # the turns this call's input left out (an agent that trims its history): not sent; what
            # the call was sent is known, so a call that left nothing out says so ([])
            lo, hi = (bisect_left(turns, lead + x) for x in gaps[id(c)])
            dropped = list(range(first.get(lo, len(cp.steps)), first.get(hi, len(cp.steps))))
            for st in group:
                st.timestamp = c.start if c.start is not None else st.timestamp
                st.masked_before, st.dropped_before = list(dropped), list(dropped)
        model = run_model(cp.steps, run.calls[0].requested)
        usages = [c.usage for c in run.calls if c.usage is not None]
        extra: dict[str, Any] = {
            "trace_id": trace,
            "traces": run.traces if len(run.traces) > 1 else None,
            "instrumentation": sorted({c.scope for c in run.calls if c.scope}),
            "service": sorted(ex.services) or None,
            "calls_unmatched": len(run.calls) - len(made) or None,
            "trimmed_calls": sum(1 for a, b in run.gaps if b > a) or None,
        }
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{trace}" + (f"/{k}" if k else ""),
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=trace,
                task_text=cp.task,
                system_prompt=cp.system,
                success=None,
                outcome_source="",
                source_path=str(path),
                extra=json.dumps({key: v for key, v in extra.items() if v is not None}),
                tokens_in=sum(u.input_tokens or 0 for u in usages) if usages else None,
                tokens_out=sum(u.output_tokens or 0 for u in usages) if usages else None,
                api_calls=len(run.calls),
                steps=cp.steps,
            )
        )


def _match(chat: list[dict], turns: list[int], run: list[_Call]) -> dict[int, _Call]:
    """Each assistant turn (by its order) matched to the call that answered it: by its mark, else, when
    as many turns as calls are left, in order."""
    out: dict[int, _Call] = {}
    free = list(run)
    for n, i in enumerate(turns):
        mark = _mark(chat[i])
        c = next((c for c in free if c.output is not None and _mark(c.output) == mark), None)
        if c is not None:
            out[n] = c
            free.remove(c)
    rest = [n for n in range(len(turns)) if n not in out]
    if rest and len(rest) == len(free):
        out.update(zip(rest, free))
    return out


def _near(a: _Call, b: _Call) -> bool:
    """Two records that may be of one call: within seconds of each other, in one trace or one of them
    a trace of its own (a client instrumented apart from the agent's framework)."""
    close = a.start is None or b.start is None or abs(a.start - b.start) < 5.0
    return close and (a.trace == b.trace or not a.has_parent or not b.has_parent)


def _failed_tools(ex: _Export) -> set[str]:
    """The tool calls whose execution span ended in error (status code 2), by call id."""
    out = set()
    for s, _ in ex.spans:
        status = s.get("status") if isinstance(s.get("status"), dict) else {}
        if status.get("code") in (2, "STATUS_CODE_ERROR"):
            a = attributes(s.get("attributes"))
            cid = a.get("gen_ai.tool.call.id") or a.get("tool_call.id")
            if isinstance(cid, str):
                out.add(cid)
    return out


def _logs_beside(path: Path, ex: _Export, traces: set[str]) -> None:
    """The log records of ``traces`` from a file of log records beside ``path``: ``<stem>_logs`` (or
    ``-logs``) first, else any such file, of which only those traces' records are kept."""
    own = [path.with_name(f"{path.stem}{sep}logs{path.suffix}") for sep in ("_", "-")]
    found = [p for p in own if p.is_file()] or [
        p
        for p in sorted(path.parent.iterdir())
        if p != path and p.suffix in (".json", ".jsonl") and _holds_logs(p)
    ]
    for other in found:
        more = _Export()
        _read_export(other, more, other.name)
        ex.logs += [r for r in more.logs if str(r.get("traceId")) in traces]


def _is_model_span(a: dict[str, Any]) -> bool:
    """A span of a model call, whether or not it carries the call's messages."""
    return a.get("gen_ai.operation.name") in ("chat", "text_completion", "generate_content") or (
        a.get("openinference.span.kind") == "LLM"
    )


def _holds_logs(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return '"resourceLogs"' in fh.read(4096)
    except OSError:
        return False
