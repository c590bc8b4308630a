"""Inspect AI evaluation logs: ``.eval`` archives and ``.json`` logs.

Inspect (the UK AI Security Institute's evaluation framework, ``inspect_ai``; inspect_evals' agent
benchmarks run on it) writes one log per task run.  A ``.eval`` file is a zip archive: ``header.json``
(the run: ``eval`` with ``task``, ``task_id``, ``model``; ``status``; ``results``) and one
``samples/<id>_epoch_<n>.json`` per sample run (``_journal/start.json`` stands in for the header
while a run is still going; a sample written again under its name replaces the first).  Its members
are zstd-compressed since Inspect 0.3.1xx (deflate before); reading zstd on Python < 3.14 uses the
``zstandard`` package.  A ``.json`` log is the same objects in one document: the header's fields with
the samples under ``samples``.  A sample that cannot be read (one whose first model call failed has
no answer at all) is named in the error the log ends with; the others are read.

A sample (``{"id", "epoch", "messages", "events", "scores", "model_usage", "attachments",
"events_data", "error"}``) is one trajectory.  ``messages`` is the conversation Inspect kept:
``system`` / ``user`` text, ``assistant`` turns with ``tool_calls`` (``{"id", "function": name,
"arguments": {...}}``) and ``tool`` messages with ``tool_call_id`` and, when the tool failed,
``error: {"type", "message"}`` (the output is then ``Error: <message>``, as Inspect sends it to
OpenAI models).  Content is text or a list of parts, read as Inspect's ``ChatMessage.text`` joins
them; ``reasoning`` parts are the turn's reasoning (a redacted one's readable ``summary``: its
``reasoning`` holds a signature or an encrypted blob).  Long strings are stored once under
``attachments`` and referenced as ``attachment://<hash>``; they are resolved here.

Each model call is a ``model`` event whose ``output`` is the assistant message it produced: matched
by the message ``id``, else by the ids of the calls it makes (an agent run through ``agent_bridge``,
as inspect_swe runs Claude Code and Codex, re-sends its history under new message ids), else in
order when as many calls as messages are left.  The message takes the call's ``usage`` and
``timestamp``; a call Inspect's own cache answered (``cache: "read"``) cost nothing and has none.
Inspect's usage counts ``input_tokens`` without the cached parts (``input_tokens_cache_read`` /
``_write``) and ``total_tokens`` with everything, so a call's prompt is ``total_tokens -
output_tokens`` (which also holds for logs of OpenAI models from before Inspect left the cached part
out of ``input_tokens``).

An output is what the tool gave: its ``tool`` event's ``result`` (Inspect's own truncation
applied), else what the first call sent it saw; the final messages may hold less (an agent that
clears old results in its own history leaves its placeholders there).  The event's ``input`` (or,
since 0.3.2xx, ``input_refs``: ranges of ``events_data.messages``) is exactly what the model was
sent: an earlier output it does not hold as the tool gave it (Inspect's ``CompactionEdit`` replaced
it with ``(Tool result removed)``, ``CompactionTrim`` or a summary left it out, the agent put a
placeholder there) was hidden from that call, so the steps get ``masked_before`` and
``mask``/``unmask`` events, with ``dropped_before`` when the call itself was left out too.  Media a
provider cannot take in a tool result, which Inspect moves into a user message after it (a text
placeholder in its place), counts as shown.  A model event whose output is no message of the
conversation (a model-graded scorer) is not this trajectory's call.

Outcome: the first scorer's value: ``C`` (correct) or a number 1 → True, ``I`` or 0 → False,
anything else (``P``, ``N``, a partial number, a dict of values) → None; every scorer's scalar value
is kept in ``extra.scores``.  A sample marked invalid after the run (``invalidation``) has no
outcome (``extra.invalidated``).  A sample that failed (``error``) keeps its message in
``extra.error``; one stopped by a limit names it in ``extra.limit``.

When ``truncation="auto"`` replaced the messages with a trimmed copy after the context overflowed,
they lost the agent's first turns: the conversation is then rebuilt from the agent's calls (each
call's input, then its answer; ``extra.rebuilt_from_calls``).

Agents: the sample's run is the agent whose calls the messages hold (the calls of its span).  Another
agent's calls (a ``handoff()`` sub-agent, sent the parent's history; an agent run as a tool) are a
run of their own, ``<run id>/agent/<name>-<k>``, rebuilt from its calls, with ``extra.parent`` (the
parent's token totals, the sample's, leave its calls out); the
turns one agent was shown of another's (Inspect gives a sub-agent's turns back to the parent as
text, and examples in a prompt look like turns) are text its next call reads, not calls of its own.

The provider's own tools run inside a turn (``tool_use`` parts: a web search, code execution) are
calls of that turn whose results it carries; ``CompactionEdit`` clears those results too.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import MAX_FILE_BYTES, Ingester, IngestError, json_error, read_json
from dtoc_rl.ingest.common import count, finalize, number, run_model, set_extra, set_masking
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text, parse_rows

__all__ = ["InspectIngester", "inspect_usage"]

# a .json log opens with its header's first fields: {"version": 2, "status": "success", "eval": {
_JSON_HEAD = re.compile(r'^\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:\s*"\w+"\s*,\s*"eval"\s*:\s*\{')
_ATTACHMENT = "attachment://"
_ZIP_ZSTD = 93  # the zip compression method number of zstd
_ZIP_LOCAL = struct.Struct("<4s22xHH")  # a local file header: signature ... name length, extra length


class InspectIngester(Ingester):
    name = "inspect"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix == ".eval":
            return head.startswith("PK\x03\x04")
        return path.suffix == ".json" and _JSON_HEAD.match(head) is not None

    def parse(self, path: Path) -> Iterator[Trajectory]:
        if path.suffix == ".eval":
            header, samples = _read_eval(path)
        else:
            root = read_json(path)
            if not isinstance(root, dict) or not isinstance(root.get("eval"), dict):
                raise IngestError("not an Inspect log: no 'eval' object", path)
            header = root
            listed = root.get("samples") or []
            if not isinstance(listed, list):
                raise IngestError(f"samples is {type(listed).__name__}, expected a list", path)
            samples = [(str(k), s, None) for k, s in enumerate(listed)]
        if not samples:
            raise IngestError(_no_samples(header), path)
        spec = header["eval"] if isinstance(header.get("eval"), dict) else {}

        def one(sample: Any, _where: str) -> list[Trajectory]:
            if not isinstance(sample, dict):
                raise IngestError(f"{type(sample).__name__}, expected object")
            return self._trajectories(spec, header, sample, path)

        # one sample that cannot be read (a run that failed before its first answer) spares the rest
        yield from parse_rows(path, samples, one, unit="sample")

    def _trajectories(self, spec: dict, header: dict, sample: dict, path: Path) -> list[Trajectory]:
        store = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else {}
        messages = sample.get("messages")
        if not isinstance(messages, list):
            raise IngestError("no 'messages' list")
        events = sample.get("events") if isinstance(sample.get("events"), list) else []
        data = sample.get("events_data") if isinstance(sample.get("events_data"), dict) else {}
        pool = data.get("messages") if isinstance(data.get("messages"), list) else []
        mine, others, names, lost = _agents(messages, events)
        # the messages lost the agent's first turns (truncation="auto" after an overflow): its calls
        rebuilt = _from_calls(mine, pool, messages) if mine and lost else None
        results = _tool_results(events, store)
        cp, chat, cached = _read(
            rebuilt or messages, mine or events, pool, store, results, events, bool(mine)
        )
        sample_id = str(sample.get("id"))
        epoch = sample.get("epoch") if isinstance(sample.get("epoch"), int) else 1
        task = str(spec.get("task") or "task")
        run = str(spec.get("task_id") or spec.get("run_id") or path.stem)
        scores = _scores(sample.get("scores"))
        first = next(iter(scores.values()), None) if scores else None
        success = _success(first)
        ident = {"task": task, "run": run, "sample_id": sample.get("id"), "epoch": epoch}
        extra: dict[str, Any] = {
            **ident,
            "status": header.get("status"),
            "log_version": header.get("version"),
        }
        if scores:
            extra["scores"] = scores
        if sample.get("invalidation"):  # a sample marked invalid after the run: its score is not taken
            extra["invalidated"] = True
            success = None
        if cached:
            extra["cache_answered_calls"] = cached
        if rebuilt is not None:  # the messages had lost turns (truncation="auto"): read from the calls
            extra["rebuilt_from_calls"] = True
        if isinstance(sample.get("limit"), dict):
            extra["limit"] = sample["limit"].get("type")
        error = sample.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            extra["error"] = error["message"].splitlines()[0][:500] if error["message"] else ""
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        totals = _totals(sample.get("model_usage"))
        model = run_model(cp.steps, str(spec.get("model") or ""))
        traj_id = f"{self.name}/{task}/{run}/{sample_id}/{epoch}"
        out = [
            Trajectory(
                traj_id=traj_id,
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=f"{task}/{sample_id}",
                task_text=cp.task,
                system_prompt=cp.system,
                success=success,
                outcome_source="" if success is None else "scores",
                source_path=str(path),
                extra=json.dumps({k: v for k, v in extra.items() if v is not None}),
                tokens_in=totals[0],
                tokens_out=totals[1],
                cost_usd=totals[2],
                api_calls=sum(1 for m in chat if m.get("role") == "assistant" and "usage" in m) or None,
                steps=cp.steps,
            )
        ]
        for k, (span, calls) in enumerate(others.items()):
            # another agent's own context (a handoff sub-agent, an agent run as a tool): a run of its own
            conv = _from_calls(calls, pool)
            if conv is None:
                continue
            try:
                sub, sub_chat, _ = _read(conv, calls, pool, store, results, events, True)
            except (IngestError, KeyError, TypeError, ValueError, AttributeError, IndexError):
                continue  # an agent that made no call of its own, or one its log lost: not its parent
            if not any(st.tool_name for st in sub.steps):
                continue
            name = names.get(span, "agent")
            usages = [m["usage"] for m in sub_chat if m.get("role") == "assistant" and "usage" in m]
            own_model = run_model(sub.steps, model)
            out.append(
                replace(  # the parent's run's source; its own model, conversation and calls
                    out[0],
                    model_raw=own_model,
                    model_family=normalize_family(own_model),
                    traj_id=f"{traj_id}/agent/{name}-{k}",
                    task_id=f"{task}/{sample_id}/{name}",
                    task_text=sub.task,
                    system_prompt=sub.system,
                    success=None,
                    outcome_source="",
                    extra=json.dumps({**ident, "agent": name, "parent": traj_id}),
                    tokens_in=sum(u["prompt_tokens"] for u in usages) if usages else None,
                    tokens_out=sum(u["completion_tokens"] for u in usages) if usages else None,
                    cost_usd=None,
                    api_calls=len(usages) or None,
                    steps=sub.steps,
                )
            )
        graded = [
            u
            for e in _scorer_calls(events)
            if (
                u := inspect_usage(
                    (e.get("output") if isinstance(e.get("output"), dict) else {}).get("usage")
                )
            )
        ]
        if graded:  # the sample's totals hold its scorers' calls too: not the agent's
            set_extra(out[0], "scorer_calls", len(graded))
            if out[0].tokens_in is not None:
                out[0].tokens_in = max(0, out[0].tokens_in - sum(u["prompt_tokens"] for u in graded))
            if out[0].tokens_out is not None:
                out[0].tokens_out = max(0, out[0].tokens_out - sum(u["completion_tokens"] for u in graded))
            if out[0].cost_usd is not None:
                costs = [u.get("cost") for u in graded]
                out[0].cost_usd = None if None in costs else max(0.0, out[0].cost_usd - sum(costs))
        for sub in out[1:]:  # the sample's totals hold its sub-agents' calls: billed in their runs
            if out[0].tokens_in is not None and sub.tokens_in is not None:
                out[0].tokens_in = max(0, out[0].tokens_in - sub.tokens_in)
            if out[0].tokens_out is not None and sub.tokens_out is not None:
                out[0].tokens_out = max(0, out[0].tokens_out - sub.tokens_out)
        return [finalize(t) for t in out]


def _read(
    messages: list, calls: list, pool: list, store: dict, results: dict[str, _Parts], events: list, own: bool
) -> tuple[Any, list[dict], int]:
    """One conversation read: its steps (:func:`chat_to_steps`) with each call's usage, outputs as
    the tools gave them and what each call was sent hidden; the chat messages; the calls Inspect's
    cache answered.  ``own``: ``calls`` are all of the agent's (see :func:`_match_calls`)."""
    chat, outputs = _chat(_resolve(messages, store))
    by_turn, cached = _match_calls(chat, calls, own)
    reader = _Sent(pool, store)
    _original_outputs(chat, outputs, reader, by_turn, results)
    cp = chat_to_steps(chat, "messages")
    if not cp.steps:
        raise IngestError("no model turn in its messages (the run stopped before the first answer?)")
    _mark_hidden(cp.steps, outputs, reader, by_turn, _compaction_label(events))
    return cp, chat, cached


# --------------------------------------------------------------------------- the archive


def _read_eval(path: Path) -> tuple[dict, Iterator[tuple[str, Any, str | None]] | list]:
    """The header of a ``.eval`` archive and its samples, one member at a time, in archive order
    (``(name, sample, None)``, or ``(name, None, why)`` for a member that cannot be read)."""
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise IngestError(f"not a readable .eval archive: {e}", path) from None
    # Inspect writes a sample again under the same name to replace it: the last entry is the sample
    last = {info.filename: info for info in z.infolist()}
    head = next((n for n in ("header.json", "_journal/start.json") if n in last), None)
    if head is None:
        z.close()
        raise IngestError("not an Inspect .eval archive: no header.json or _journal/start.json", path)
    header = _member_json(z, path, last[head])
    if not isinstance(header, dict):
        z.close()
        raise IngestError(f"{head} is {type(header).__name__}, expected object", path)
    if head != "header.json":  # a run still going (or killed): the journal's start holds no status
        header = {**header, "status": header.get("status") or "started"}
    members = [i for n, i in last.items() if n.startswith("samples/") and n.endswith(".json")]
    if not members:
        z.close()
        return header, []

    def samples() -> Iterator[tuple[str, Any, str | None]]:
        with z:
            for info in members:
                name = info.filename.removeprefix("samples/").removesuffix(".json")
                try:
                    yield name, _member_json(z, path, info), None
                except IngestError as e:
                    yield name, None, e.reason

    return header, samples()


def _no_samples(header: dict) -> str:
    if header.get("status") == "started":
        return "the log holds no samples (a run that has not finished one yet)"
    return "the log holds no samples (the run was logged without them)"


def _member_json(z: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> Any:
    name = info.filename
    if info.file_size > MAX_FILE_BYTES:
        size, limit = info.file_size / 1e6, MAX_FILE_BYTES / 1e6
        raise IngestError(f"{name} is {size:.0f} MB, over the {limit:.0f} MB limit", path)
    try:
        raw = _zstd_member(z, path, info) if info.compress_type == _ZIP_ZSTD else z.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, struct.error) as e:
        raise IngestError(f"{name}: cannot decompress: {e}", path) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise IngestError(f"{name}: invalid UTF-8 at byte {e.start}", path) from None
    except json.JSONDecodeError as e:
        raise IngestError(f"{name}: invalid JSON: {json_error(e)}", path) from None


def _zstd_member(z: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> bytes:
    if sys.version_info >= (3, 14):  # the standard library reads zstd members itself
        return z.read(info)
    try:
        import zstandard
    except ImportError:
        raise IngestError(
            "this .eval archive is zstd-compressed (Inspect's default): pip install zstandard", path
        ) from None
    fh = z.fp
    if fh is None:
        raise IngestError("the archive is closed", path)
    fh.seek(info.header_offset)
    sig, name_len, extra_len = _ZIP_LOCAL.unpack(fh.read(_ZIP_LOCAL.size))
    if sig != b"PK\x03\x04":
        raise IngestError(f"{info.filename}: bad local header in the archive", path)
    fh.seek(info.header_offset + _ZIP_LOCAL.size + name_len + extra_len)
    data = fh.read(info.compress_size)
    try:  # Inspect writes large members as several frames
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as r:
            out = r.read(info.file_size + 1) if info.file_size else r.read()
    except zstandard.ZstdError as e:
        raise IngestError(f"{info.filename}: cannot decompress: {e}", path) from None
    if info.file_size and len(out) != info.file_size:
        said = info.file_size
        raise IngestError(f"{info.filename}: {len(out)} bytes decompressed, the archive says {said}", path)
    return out


# --------------------------------------------------------------------------- the conversation


def _resolve(obj: Any, store: dict) -> Any:
    """``obj`` with every ``attachment://<hash>`` string replaced by the text stored under it."""
    if isinstance(obj, str):
        if obj.startswith(_ATTACHMENT):
            text = store.get(obj[len(_ATTACHMENT) :])
            return text if isinstance(text, str) else obj
        return obj
    if isinstance(obj, list):
        return [_resolve(v, store) for v in obj]
    if isinstance(obj, dict):
        return {k: _resolve(v, store) for k, v in obj.items()}
    return obj


_MEDIA = ("image", "audio", "video", "document")
_Parts = tuple[tuple[str, str], ...]  # a message's content as ("text", text) and ("media", kind) parts


def _parts(content: Any, where: str) -> _Parts:
    """A message's content as parts: text (Inspect's ``text`` parts, or a string), media (image,
    audio, video, document), and any other part as the text it holds; reasoning and the provider's
    own tool uses are no part of it."""
    if content is None:
        return ()
    if isinstance(content, str):
        return (("text", content),)
    if not isinstance(content, list):
        raise IngestError(f"{where} has type {type(content).__name__}, expected string, list or null")
    out = []
    for j, p in enumerate(content):
        if isinstance(p, str):
            out.append(("text", p))
        elif not isinstance(p, dict):
            raise IngestError(f"{where}[{j}] is {type(p).__name__}, expected string or object")
        elif p.get("type") in _MEDIA:
            out.append(("media", str(p["type"])))
        elif p.get("type") not in ("reasoning", "tool_use"):  # a tool_use is a call: _server_uses
            out.append(("text", content_text([p], f"{where}[{j}]")))
    return tuple(out)


def _text(parts: _Parts) -> str:
    # Inspect joins a message's text parts with newlines (ChatMessage.text)
    return "\n".join(t if kind == "text" else f"[{t}]" for kind, t in parts)


def _tool_parts(m: dict, where: str) -> tuple[_Parts, bool]:
    """What the model read of a tool message, and whether the tool failed."""
    error = m.get("error")
    if isinstance(error, dict) and error:
        return (("text", f"Error: {error.get('message') or error.get('type') or ''}"),), True
    return _parts(m.get("content"), f"{where}.content"), False


def _same(logged: _Parts, shown: _Parts) -> bool:
    """Whether a call was shown an output as logged: part for part, media a provider cannot take in
    a tool result moved out by Inspect (a text placeholder in its place, the media in a user message
    after it) counting as shown."""
    return len(logged) == len(shown) and all(
        a == b or (a[0] == "media" and b[0] == "text") for a, b in zip(logged, shown)
    )


def _reasoning(content: Any) -> str:
    """A turn's reasoning: its reasoning parts' text (the readable summary of a redacted one, whose
    ``reasoning`` holds a signature or an encrypted blob)."""
    if not isinstance(content, list):
        return ""
    out = []
    for p in content:
        if isinstance(p, dict) and p.get("type") == "reasoning":
            text = p.get("summary") if p.get("redacted") else p.get("reasoning")
            if isinstance(text, str) and text:
                out.append(text)
    return "\n".join(out)


def _chat(messages: list) -> tuple[list[dict], dict[str, _Parts]]:
    """Inspect's messages as the chat messages :func:`chat_to_steps` reads, and every tool call's
    output as logged (call id -> its parts)."""
    chat: list[dict] = []
    outputs: dict[str, _Parts] = {}
    for i, m in enumerate(messages):
        w = f"messages[{i}]"
        if not isinstance(m, dict):
            raise IngestError(f"{w} is {type(m).__name__}, expected object")
        role = m.get("role")
        if role == "tool":
            parts, failed = _tool_parts(m, w)
            cid = _text_or_none(m.get("tool_call_id"))
            chat.append({"role": "tool", "tool_call_id": cid, "content": _text(parts), "is_error": failed})
            if isinstance(cid, str):
                outputs[cid] = parts
            continue
        if role not in ("system", "user", "assistant"):
            raise IngestError(f"{w} has role {role!r}, expected system, user, assistant or tool")
        msg: dict[str, Any] = {"role": role, "content": _text(_parts(m.get("content"), f"{w}.content"))}
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise IngestError(f"{w}.tool_calls is {type(calls).__name__}, expected a list")
            msg["tool_calls"] = []
            for k, c in enumerate(calls):
                if not isinstance(c, dict) or not isinstance(c.get("function"), str):
                    raise IngestError(f"{w}.tool_calls[{k}] must be an object with a 'function' name")
                fn = {"name": c["function"], "arguments": c.get("arguments")}
                msg["tool_calls"].append({"id": str(c.get("id") or f"{w}.{k}"), "function": fn})
            reasoning = _reasoning(m.get("content"))
            if reasoning:
                msg["reasoning_content"] = reasoning
            msg["inspect_id"] = m.get("id")
            # the provider's own tools run inside the turn: calls whose results the turn carries
            served = _server_uses(m.get("content"))
            uses = []
            for u in served:
                name = str(u.get("name") or u.get("tool_type") or "server_tool")
                uses.append({"id": u["id"], "function": {"name": name, "arguments": u.get("arguments")}})
            # the agent's own calls are what its model event's answer names (for matching)
            msg["agent_calls"] = tuple(c["id"] for c in msg["tool_calls"])
            msg["tool_calls"] = uses + msg["tool_calls"]  # in the turn before the calls the agent runs
            chat.append(msg)
            for use in served:
                parts, failed = _server_result(use)
                outputs[use["id"]] = parts
                chat.append(
                    {"role": "tool", "tool_call_id": use["id"], "content": _text(parts), "is_error": failed}
                )
            continue
        chat.append(msg)
    return chat, outputs


# --------------------------------------------------------------------------- the model calls


def inspect_usage(raw: Any) -> dict | None:
    """An Inspect ``ModelUsage`` in the OpenAI chat shape :func:`~dtoc_rl.ingest.common.usage_from`
    reads (the module docstring says why the prompt is the total less the output)."""
    if not isinstance(raw, dict):
        return None
    out = count(raw, "output_tokens")
    read = count(raw, "input_tokens_cache_read") or 0
    write = count(raw, "input_tokens_cache_write") or 0
    parts = (count(raw, "input_tokens") or 0) + read + write
    total = count(raw, "total_tokens")
    # the total, unless it is missing or too small to hold the cached parts (a provider that left it 0)
    rest = None if total is None else total - (out or 0)
    prompt = rest if rest is not None and rest > 0 and rest >= read + write else parts
    if out is None and not prompt:
        return None
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": out or 0,
        "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
    }
    cost = number(raw, "total_cost")
    if cost is not None:
        usage["cost"] = cost
    return usage


_View = tuple[dict[str, _Parts], set[str]]  # what one call was sent: tool outputs by call id, call ids


_Seen = tuple[tuple[tuple[str, _Parts], ...], tuple[str, ...]]  # outputs shown by call id, call ids


def _message_view(m: Any, store: dict) -> _Seen:
    """Of one message a call was sent: the outputs it showed (a tool message's, or the results of
    the provider's own tools inside a turn) by call id, and the ids of the calls it makes."""
    if not isinstance(m, dict):
        return (), ()
    if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
        resolved = {"content": _resolve(m.get("content"), store), "error": m.get("error")}
        try:
            return ((m["tool_call_id"], _tool_parts(resolved, "input")[0]),), ()
        except IngestError:
            return (), ()
    if m.get("role") != "assistant":
        return (), ()
    calls = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else ()
    ids = [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
    shown = []
    for use in _server_uses(m.get("content")):
        ids.append(use["id"])
        shown.append((use["id"], _server_result(_resolve(use, store))[0]))
    return tuple(shown), tuple(ids)


def _server_uses(content: Any) -> list[dict]:
    """The provider's own tool uses inside a turn (Inspect's ``tool_use`` parts: web search, code
    execution run by the provider), with the ids their results are known by."""
    if not isinstance(content, list):
        return []
    return [
        p
        for p in content
        if isinstance(p, dict) and p.get("type") == "tool_use" and isinstance(p.get("id"), str)
    ]


def _content(result: Any) -> Any:
    """A tool's result as message content: one content part (a ToolResult may be a bare
    ContentText) as a list of it, a number or a bool as its text."""
    if isinstance(result, dict):
        return [result]
    if result is not None and not isinstance(result, (str, list)):
        return str(result)
    return result


def _server_result(use: dict) -> tuple[_Parts, bool]:
    result = _content(use.get("result"))
    failed = bool(use.get("error"))
    try:
        parts = _parts(result, "tool_use.result")
    except IngestError:
        parts = (("text", str(result)),)
    return (parts or (("text", str(use.get("error") or "")),)) if failed else parts, failed


class _Sent:
    """What each model event was sent, as :data:`_View`\\ s: its ``input``, or its ``input_refs``
    (ranges of the sample's message pool, each pooled message read once however many calls share
    it)."""

    def __init__(self, pool: list, store: dict):
        self.pool, self.store = pool, store
        self._seen: dict[int, _Seen] = {}

    def _pooled(self, i: int) -> _Seen:
        if i not in self._seen:
            self._seen[i] = _message_view(self.pool[i], self.store)
        return self._seen[i]

    def _flat(self, event: dict) -> list[int] | None:
        refs = event.get("input_refs")
        if not (isinstance(refs, list) and refs):
            return None
        if not all(
            isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r) and 0 <= r[0] <= r[1]
            for r in refs
        ) or any(r[1] > len(self.pool) for r in refs):
            return None
        return [i for a, b in refs for i in range(a, b)]

    def views(self, calls: dict[int, dict]) -> Iterator[tuple[int, _View | None, bool, set[str]]]:
        """``(turn, view, fresh, added)`` for each turn's call, in turn order.  The view is kept and
        updated in place from one call to the next (consume it before the next): a call sent the
        previous call's input and more (a conversation that only grew) adds the new messages to it
        (``added``: the outputs they show); any other is read whole (``fresh``).  None: the log does
        not hold what that call was sent."""
        prev: list[int] | None = None
        shown: dict[str, _Parts] = {}
        called: set[str] = set()
        for turn in sorted(calls):
            event = calls[turn]
            flat = self._flat(event)
            if flat is not None and prev is not None and flat[: len(prev)] == prev:
                added: set[str] = set()
                for i in flat[len(prev) :]:
                    outputs, ids = self._pooled(i)
                    shown.update(outputs)
                    added.update(cid for cid, _ in outputs)
                    called.update(ids)
                prev = flat
                yield turn, (shown, called), False, added
                continue
            if flat is not None:
                parts: Iterable[_Seen] = (self._pooled(i) for i in flat)
            elif isinstance(event.get("input"), list) and event["input"]:
                parts = (_message_view(m, self.store) for m in event["input"])
            else:
                prev = None
                yield turn, None, True, set()
                continue
            shown, called = {}, set()
            for outputs, ids in parts:
                shown.update(outputs)
                called.update(ids)
            prev = flat
            yield turn, (shown, called), True, set(shown)


def _output_message(event: dict) -> dict:
    out = event.get("output") if isinstance(event.get("output"), dict) else {}
    choices = out.get("choices") if isinstance(out.get("choices"), list) else []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    return first.get("message") if isinstance(first.get("message"), dict) else {}


def _call_ids(message: dict) -> tuple[str, ...]:
    calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else ()
    return tuple(str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None)


def _match_calls(chat: list[dict], events: list, own: bool = False) -> tuple[dict[int, dict], int]:
    """Give each assistant message its model call's usage and time; return each turn's call (the
    turn as :func:`chat_to_steps` numbers assistant messages) and how many of the calls Inspect's
    cache answered.

    A call is the model event whose output is the message: by the message's id, else by the ids of
    the calls it makes (an agent bridged to Inspect re-sends its history with new message ids), else
    in order when the calls left and the messages left are as many.  ``own``: ``events`` are all the
    calls this agent made (told apart by their span), so a turn none of them answered with is text it
    was shown, not a call of its own."""
    model_events = [e for e in events if isinstance(e, dict) and e.get("event") == "model"]
    by_id: dict[str, dict] = {}
    by_calls: dict[tuple[str, ...], dict] = {}
    for e in model_events:
        message = _output_message(e)
        if isinstance(message.get("id"), str):
            by_id.setdefault(message["id"], e)
        if _call_ids(message):
            by_calls.setdefault(_call_ids(message), e)
    turns = [k for k, m in enumerate(chat) if m["role"] == "assistant"]
    pairs: dict[int, dict] = {}
    used: set[int] = set()
    no_id: set[int] = set()
    for k in turns:
        mid = chat[k].pop("inspect_id", None)
        if not isinstance(mid, str):
            no_id.add(k)
        e = by_id.get(mid) if isinstance(mid, str) else None
        made = chat[k].pop("agent_calls", None)
        made = tuple(c["id"] for c in chat[k]["tool_calls"]) if made is None else made
        if e is None:
            e = by_calls.get(made) if made else None
        if e is not None and id(e) not in used:
            pairs[k] = e
            used.add(id(e))
    # in order, when the calls left and the messages left are as many (of an agent's own calls, only
    # messages without an id: those of older logs)
    rest = [k for k in turns if k not in pairs and (not own or k in no_id)]
    left = [e for e in model_events if id(e) not in used]
    if rest and len(rest) == len(left):
        pairs.update(zip(rest, left))
    foreign = {k for k in turns if k not in pairs}
    if own and foreign:
        # turns no call of this agent answered with: another agent's (a handoff sub-agent's, shown to
        # the parent as text; the parent's history, shown to a sub-agent) or examples in the prompt
        _as_text(chat, foreign)
        turns = [k for k, m in enumerate(chat) if m["role"] == "assistant"]
    by_turn: dict[int, dict] = {}
    cached = 0
    for turn, k in enumerate(turns):
        e = pairs.get(k)
        if e is None:
            continue
        chat[k]["timestamp"] = e.get("timestamp")
        if isinstance(e.get("model"), str):  # a sample may call several models (a sub-agent's own)
            chat[k]["model"] = e["model"]
        if e.get("cache") == "read":  # answered from Inspect's own cache: no provider call, no tokens
            cached += 1
        else:
            out = e.get("output") if isinstance(e.get("output"), dict) else {}
            usage = inspect_usage(out.get("usage"))
            if usage:
                chat[k]["usage"] = usage
        by_turn[turn] = e
    return by_turn, cached


def _as_text(chat: list[dict], turns: set[int]) -> None:
    """The assistant messages at ``turns`` (and the replies to their calls) made user text in place: what
    the next call reads, no call of the agent's own."""
    calls: set[str] = set()
    for k in sorted(turns):
        m = chat[k]
        shown = [m["content"]] + [
            f"{c['function']['name']}({json.dumps(c['function']['arguments'])})" for c in m["tool_calls"]
        ]
        calls.update(c["id"] for c in m["tool_calls"])
        chat[k] = {"role": "user", "content": "\n".join(t for t in shown if t)}
    for k, m in enumerate(chat):
        if m["role"] == "tool" and m.get("tool_call_id") in calls:
            chat[k] = {"role": "user", "content": m["content"]}


def _spans(events: list) -> dict[str, tuple[Any, Any, Any]]:
    """The sample's spans by id: (type, parent id, name)."""
    spans: dict[str, tuple[Any, Any, Any]] = {}
    for e in events:
        if isinstance(e, dict) and e.get("event") == "span_begin" and isinstance(e.get("id"), str):
            spans[e["id"]] = (_text_or_none(e.get("type")), e.get("parent_id"), e.get("name"))
    return spans


def _span_kinds(e: dict, spans: dict[str, tuple[Any, Any, Any]]) -> set:
    """The types of the spans an event ran in (its span's and its ancestors')."""
    cur, kinds = e.get("span_id"), set()
    for _ in range(100):  # bounded: a malformed log may loop
        if not isinstance(cur, str) or cur not in spans:
            break
        kind, cur, _name = spans[cur]
        kinds.add(kind)
    return kinds


def _model_events(events: list) -> list[dict]:
    return [e for e in events if isinstance(e, dict) and e.get("event") == "model"]


def _solver_calls(events: list) -> tuple[list[dict], dict[Any, str]] | None:
    """The model events of the sample's solvers (its scorers' left out), by the spans they ran in, and
    the spans' names; None when the log has no spans to tell them apart."""
    spans = _spans(events)
    if not spans:
        return None
    out = []
    for e in _model_events(events):
        kinds = _span_kinds(e, spans)
        if "solvers" in kinds and "scorers" not in kinds:
            out.append(e)
    return out, {k: str(v[2] or "agent") for k, v in spans.items()}


def _scorer_calls(events: list) -> list[dict]:
    """The model events of the sample's scorers (a model-graded score's calls): billed, but not the
    agent's."""
    spans = _spans(events)
    return [e for e in _model_events(events) if "scorers" in _span_kinds(e, spans)] if spans else []


def _text_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _key(m: dict) -> Any:
    # a message of the conversation, however often calls were sent it: a tool result by its call,
    # a turn by its id or its calls, anything else by its id
    if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
        return ("tool", m["tool_call_id"])
    if isinstance(m.get("id"), str):
        return ("id", m["id"])
    if m.get("role") == "assistant" and m.get("tool_calls"):
        return ("calls", json.dumps(m["tool_calls"], sort_keys=True, default=str))
    return ("text", m.get("role"), json.dumps(m.get("content"), default=str))


_NO_SPAN = object()


def _agents(
    messages: list, events: list
) -> tuple[list[dict] | None, dict[Any, list[dict]], dict[Any, str], bool]:
    """The solver's model calls: the agent's (those in the span of the calls whose answers the
    messages hold), every other agent's by span (a ``handoff()`` sub-agent, an agent run as a tool),
    the spans' names, and whether the messages lost the agent's first call.  ``(None, {}, {},
    False)`` when the log cannot tell."""
    found = _solver_calls(events)
    if not found or not found[0]:
        return None, {}, {}, False
    calls, names = found
    turns = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    held_ids = {m["id"] for m in turns if isinstance(m.get("id"), str)}
    held_calls = {_call_ids(m) for m in turns} - {()}

    def held(answer: dict) -> bool:  # by the message's id, or the calls it makes (a bridged agent's)
        mid = answer.get("id")
        return (isinstance(mid, str) and mid in held_ids) or (
            bool(_call_ids(answer)) and _call_ids(answer) in held_calls
        )

    # the agent's span: that of its first call the messages hold (a sub-agent it hands off to, whose
    # turns come back under the same ids, only ever calls after it)
    main = next((e.get("span_id") for e in calls if held(_output_message(e))), _NO_SPAN)
    if main is _NO_SPAN:
        return None, {}, {}, False
    others: dict[Any, list[dict]] = {}
    for e in calls:
        if e.get("span_id") != main:
            others.setdefault(e.get("span_id"), []).append(e)
    mine = [e for e in calls if e.get("span_id") == main]
    first = _output_message(mine[0])
    return mine, others, names, bool(first) and not held(first)


def _from_calls(calls: list[dict], pool: list, tail: list = ()) -> list | None:
    """A conversation rebuilt from its model calls: each call's input, then its answer (a message
    once, however many calls were sent it), then what of ``tail`` none of them held; None when a
    call's input is not in the log."""
    conv: list = []
    seen: set = set()
    for e in calls:
        refs = e.get("input_refs")
        if isinstance(refs, list) and refs:
            try:
                sent = [pool[i] for a, b in refs for i in range(a, b)]
            except (TypeError, IndexError, ValueError):
                return None
        elif isinstance(e.get("input"), list):
            sent = e["input"]
        else:
            return None
        for m in [*sent, _output_message(e)]:
            if isinstance(m, dict) and m and _key(m) not in seen:
                seen.add(_key(m))
                conv.append(m)
    conv.extend(m for m in tail if isinstance(m, dict) and _key(m) not in seen)
    return conv


def _tool_results(events: list, store: dict) -> dict[str, _Parts]:
    """Each tool call's result as its ``tool`` event recorded it: the content the tool message was
    made with (after Inspect's own truncation), whatever was done to the message later."""
    out: dict[str, _Parts] = {}
    for e in events:
        if not (isinstance(e, dict) and e.get("event") == "tool" and isinstance(e.get("id"), str)):
            continue
        result = _content(_resolve(e.get("result"), store))
        try:
            out.setdefault(
                e["id"], _tool_parts({"content": result, "error": e.get("error")}, "tool event")[0]
            )
        except IngestError:
            continue
    return out


def _original_outputs(
    chat: list[dict],
    outputs: dict[str, _Parts],
    reader: _Sent,
    calls: dict[int, dict],
    results: dict[str, _Parts],
) -> None:
    """Each output as the tool gave it, where the messages the log kept were edited afterwards (a
    scaffold that clears old results in its own history, an agent bridged to Inspect that does): its
    ``tool`` event's result, else what the first call sent it saw.  They are the steps' outputs and
    what later calls are compared with."""
    first: dict[str, _Parts] = {}
    for _turn, view, _fresh, added in reader.views(calls):
        for cid in added if view is not None else ():
            if cid in outputs and cid not in first:
                first[cid] = view[0][cid]
    for m in chat:
        cid = m.get("tool_call_id") if m["role"] == "tool" else None
        if cid not in outputs:
            continue
        given = results.get(cid, first.get(cid))
        if given is not None and not _same(outputs[cid], given) and not _same(given, outputs[cid]):
            outputs[cid] = given
            m["content"] = _text(given)


def _mark_hidden(
    steps: list, outputs: dict[str, _Parts], reader: _Sent, calls: dict[int, dict], label: str
) -> None:
    """``masked_before`` (and ``dropped_before``) of each step whose call's input the log holds: the
    earlier outputs that input did not hold as the tool gave them.  Kept from call to call: a call
    sent its predecessor's input and more looks again only at what changed."""
    if not calls:
        return
    at = {st.tool_call_id: j for j, st in enumerate(steps) if st.tool_call_id in outputs}
    views = {}  # each turn's hidden steps, dropped steps and placeholders, worked out in turn order
    earlier: list[int] = []  # steps of the turns before the current one with an output
    seen = 0
    hidden: set[int] = set()
    whole = True  # the hidden set must be worked out over every earlier step
    starts = [j for j, st in enumerate(steps) if j == 0 or st.turn != steps[j - 1].turn]
    turn_start = {steps[j].turn: j for j in starts}

    def off(j: int, shown: dict[str, _Parts]) -> bool:
        cid = steps[j].tool_call_id
        return cid not in shown or not _same(outputs[cid], shown[cid])

    for turn, view, fresh, added in reader.views(calls):
        start = turn_start.get(turn)
        if start is None:
            continue
        new = [j for j in range(seen, start) if steps[j].tool_call_id in outputs]
        earlier.extend(new)
        seen = start
        if view is None:
            whole = True
            continue
        shown, called = view
        if fresh or whole:
            hidden = {j for j in earlier if off(j, shown)}
            whole = False
        else:
            for j in new + [at[c] for c in added if c in at and at[c] < start]:
                (hidden.add if off(j, shown) else hidden.discard)(j)
        hid = sorted(hidden)
        views[turn] = (
            hid,
            [j for j in hid if steps[j].tool_call_id not in called],
            {j: _text(shown[cid])[:200] for j in hid if (cid := steps[j].tool_call_id) in shown},
        )
    masked = [views[st.turn][0] if st.turn in views else None for st in steps]
    dropped = [views[st.turn][1] if st.turn in views else None for st in steps]
    placeholders = [views[st.turn][2] if st.turn in views else {} for st in steps]
    set_masking(steps, masked, label, dropped, placeholders)


def _compaction_label(events: list) -> str:
    names = []
    for e in events:
        if isinstance(e, dict) and e.get("event") == "compaction":
            meta = e.get("metadata") if isinstance(e.get("metadata"), dict) else {}
            name = str(meta.get("strategy") or f"compaction ({e.get('type')})")
            if name not in names:
                names.append(name)
    return ", ".join(names) or "not sent as the tool gave it"


# --------------------------------------------------------------------------- outcome and totals


def _scores(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, s in raw.items():
        value = s.get("value") if isinstance(s, dict) else None
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[str(name)] = value
        else:
            out[str(name)] = None  # a dict or list of values: no single outcome
    return out


def _success(value: Any) -> bool | None:
    if isinstance(value, str):
        return {"C": True, "I": False}.get(value.upper())
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return {1: True, 0: False}.get(value) if value in (0, 1) else None
    return None


def _totals(raw: Any) -> tuple[int | None, int | None, float | None]:
    """The sample's prompt and output tokens and cost over every model it used."""
    if not isinstance(raw, dict) or not raw:
        return None, None, None
    tin = tout = 0
    cost: float | None = None
    for u in raw.values():
        usage = inspect_usage(u)
        if usage is None:
            continue
        tin += usage["prompt_tokens"]
        tout += usage["completion_tokens"]
        if "cost" in usage:
            cost = (cost or 0.0) + usage["cost"]
    return tin, tout, cost
