"""Inspect AI evaluation logs: ``.eval`` archives and ``.json`` logs.

Inspect (the UK AI Security Institute's evaluation framework, ``inspect_ai``; inspect_evals' agent
benchmarks run on it) writes one log per task run.  A ``.eval`` file is a zip archive: ``header.json``
(the run: ``eval`` with ``task``, ``task_id``, ``model``; ``status``; ``results``) and one
``samples/<id>_epoch_<n>.json`` per sample run (``_journal/start.json`` stands in for the header
while a run is still going).  Its members are zstd-compressed since Inspect 0.3.1xx (deflate
before); reading zstd on Python < 3.14 uses the ``zstandard`` package.  A ``.json`` log is the same
objects in one document: the header's fields with the samples under ``samples``.

A sample (``{"id", "epoch", "messages", "events", "scores", "model_usage", "attachments",
"events_data", "error"}``) is one trajectory.  ``messages`` is the whole conversation Inspect kept:
``system`` / ``user`` text, ``assistant`` turns with ``tool_calls`` (``{"id", "function": name,
"arguments": {...}}``) and ``tool`` messages with ``tool_call_id`` and, when the tool failed,
``error: {"type", "message"}`` (the output is then ``Error: <message>``, as Inspect sends it to
OpenAI models).  Content is text or a list of parts (``text``; ``reasoning`` parts are the turn's
reasoning).  Long strings are stored once under ``attachments`` and referenced as
``attachment://<hash>``; they are resolved here.

Each model call is a ``model`` event: its ``output`` names the assistant message it produced (by the
message ``id``; by order when the log has no ids), so that message takes the call's ``usage`` and
``timestamp``.  Inspect's usage counts ``input_tokens`` without the cached parts
(``input_tokens_cache_read`` / ``_write``) and ``total_tokens`` with everything, so a call's prompt is
``total_tokens - output_tokens`` (which also holds for logs of OpenAI models from before Inspect left
the cached part out of ``input_tokens``).  The event's ``input`` (or, since 0.3.2xx, ``input_refs``:
ranges of ``events_data.messages``) is exactly what the model was sent: a tool output it does not
hold as logged (Inspect's ``CompactionEdit`` replaced it with ``(Tool result removed)``,
``CompactionTrim`` or a summary left it out) was hidden from that call, so the steps get
``masked_before`` and ``mask``/``unmask`` events, with ``dropped_before`` when the call itself was left
out too.  A model event whose output is no message of the conversation (a model-graded scorer, a
sub-agent's own calls) is not this trajectory's call.

Outcome: the first scorer's value: ``C`` (correct) or a number 1 → True, ``I`` or 0 → False,
anything else (``P``, ``N``, a partial number, a dict of values) → None; every scorer's scalar value
is kept in ``extra.scores``.  A sample that failed (``error``) keeps its message in ``extra.error``.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import MAX_FILE_BYTES, Ingester, IngestError, json_error, read_json
from dtoc_rl.ingest.common import count, finalize, number, set_masking
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text

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
            listed = root.get("samples")
            if listed is None:
                raise IngestError("the log holds no samples (the run was logged without them)", path)
            if not isinstance(listed, list):
                raise IngestError(f"samples is {type(listed).__name__}, expected a list", path)
            samples = ((f"samples[{k}]", s) for k, s in enumerate(listed))
        spec = header["eval"] if isinstance(header.get("eval"), dict) else {}
        found = False
        for where, sample in samples:
            if not isinstance(sample, dict):
                raise IngestError(f"{where} is {type(sample).__name__}, expected object", path)
            found = True
            try:
                yield self._trajectory(spec, header, sample, path)
            except IngestError as e:
                raise IngestError(f"{where}: {e.reason}", path) from None
        if not found:
            raise IngestError("the log holds no samples (a run that has not finished one yet?)", path)

    def _trajectory(self, spec: dict, header: dict, sample: dict, path: Path) -> Trajectory:
        store = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else {}
        messages = _resolve(sample.get("messages"), store)
        if not isinstance(messages, list):
            raise IngestError("no 'messages' list")
        chat, calls = _chat(messages)
        events = sample.get("events") if isinstance(sample.get("events"), list) else []
        data = sample.get("events_data") if isinstance(sample.get("events_data"), dict) else {}
        pool = data.get("messages") if isinstance(data.get("messages"), list) else []
        inputs = _match_calls(chat, events, pool, store)
        cp = chat_to_steps(chat, "messages")
        if not cp.steps:
            raise IngestError("no tool call in the sample's messages")
        _mark_hidden(cp.steps, calls, inputs, _compaction_label(events))
        sample_id = str(sample.get("id"))
        epoch = sample.get("epoch") if isinstance(sample.get("epoch"), int) else 1
        task = str(spec.get("task") or "task")
        run = str(spec.get("task_id") or spec.get("run_id") or path.stem)
        scores = _scores(sample.get("scores"))
        first = next(iter(scores.values()), None) if scores else None
        success = _success(first)
        extra: dict[str, Any] = {
            "task": task,
            "run": run,
            "sample_id": sample.get("id"),
            "epoch": epoch,
            "status": header.get("status"),
            "log_version": header.get("version"),
        }
        if scores:
            extra["scores"] = scores
        error = sample.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            extra["error"] = error["message"].splitlines()[0][:500] if error["message"] else ""
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        totals = _totals(sample.get("model_usage"))
        model = str(spec.get("model") or "")
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{task}/{run}/{sample_id}/{epoch}",
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
        )


# --------------------------------------------------------------------------- the archive


def _read_eval(path: Path) -> tuple[dict, Iterator[tuple[str, Any]]]:
    """The header of a ``.eval`` archive and its samples, one member at a time, in archive order."""
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise IngestError(f"not a readable .eval archive: {e}", path) from None
    names = z.namelist()
    head = next((n for n in ("header.json", "_journal/start.json") if n in names), None)
    if head is None:
        z.close()
        raise IngestError("not an Inspect .eval archive: no header.json or _journal/start.json", path)
    header = _member_json(z, path, head)
    if not isinstance(header, dict):
        z.close()
        raise IngestError(f"{head} is {type(header).__name__}, expected object", path)

    def samples() -> Iterator[tuple[str, Any]]:
        with z:
            for n in names:
                if n.startswith("samples/") and n.endswith(".json"):
                    yield n, _member_json(z, path, n)

    return header, samples()


def _member_json(z: zipfile.ZipFile, path: Path, name: str) -> Any:
    info = z.getinfo(name)
    if info.file_size > MAX_FILE_BYTES:
        size, limit = info.file_size / 1e6, MAX_FILE_BYTES / 1e6
        raise IngestError(f"{name} is {size:.0f} MB, over the {limit:.0f} MB limit", path)
    try:
        raw = _zstd_member(z, path, info) if info.compress_type == _ZIP_ZSTD else z.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as e:
        raise IngestError(f"{name}: cannot decompress: {e}", path) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise IngestError(f"{name}: invalid UTF-8 at byte {e.start}", path) from None
    except json.JSONDecodeError as e:
        raise IngestError(f"{name}: invalid JSON: {json_error(e)}", path) from None


def _zstd_member(z: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> bytes:
    if sys.version_info >= (3, 14):  # the standard library reads zstd members itself
        return z.read(info.filename)
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


def _tool_text(m: dict, where: str) -> tuple[str, bool]:
    """What the model read of a tool message, and whether the tool failed."""
    error = m.get("error")
    if isinstance(error, dict) and error:
        return f"Error: {error.get('message') or error.get('type') or ''}", True
    return content_text(_text_parts(m.get("content")), f"{where}.content"), False


def _text_parts(content: Any) -> Any:
    # Inspect's parts: text, reasoning, image, tool_use, ...; only text parts are the message's text
    if isinstance(content, list):
        return [p for p in content if not isinstance(p, dict) or p.get("type") not in ("reasoning",)]
    return content


def _reasoning(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(
        p["reasoning"]
        for p in content
        if isinstance(p, dict) and p.get("type") == "reasoning" and isinstance(p.get("reasoning"), str)
    )


def _chat(messages: list) -> tuple[list[dict], dict[str, str]]:
    """Inspect's messages as the chat messages :func:`chat_to_steps` reads, and every tool call's
    output as logged (call id -> the reply's text and error flag, as JSON text to compare with what a
    call was sent)."""
    chat: list[dict] = []
    outputs: dict[str, str] = {}
    for i, m in enumerate(messages):
        w = f"messages[{i}]"
        if not isinstance(m, dict):
            raise IngestError(f"{w} is {type(m).__name__}, expected object")
        role = m.get("role")
        if role == "tool":
            text, failed = _tool_text(m, w)
            cid = m.get("tool_call_id")
            chat.append({"role": "tool", "tool_call_id": cid, "content": text, "is_error": failed})
            if isinstance(cid, str):
                outputs[cid] = text
            continue
        if role not in ("system", "user", "assistant"):
            raise IngestError(f"{w} has role {role!r}, expected system, user, assistant or tool")
        text = content_text(_text_parts(m.get("content")), f"{w}.content")
        msg: dict[str, Any] = {"role": role, "content": text}
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


_View = tuple[dict[str, str], set[str]]  # what one call was sent: tool outputs by call id, call ids


def _message_view(m: Any, store: dict) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Of one message a call was sent: the tool call it answers and the text it showed, or the ids of
    the calls it makes."""
    if not isinstance(m, dict):
        return None, None, ()
    if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
        resolved = {"content": _resolve(m.get("content"), store), "error": m.get("error")}
        return m["tool_call_id"], _tool_text(resolved, "input")[0], ()
    calls = m.get("tool_calls") if m.get("role") == "assistant" else None
    ids = tuple(c["id"] for c in calls or () if isinstance(c, dict) and isinstance(c.get("id"), str))
    return None, None, ids


class _Sent:
    """What each model event was sent, as :data:`_View`\\ s: its ``input``, or its ``input_refs``
    (ranges of the sample's message pool, each pooled message read once however many calls share
    it)."""

    def __init__(self, pool: list, store: dict):
        self.pool, self.store = pool, store
        self._seen: dict[int, tuple[str | None, str | None, tuple[str, ...]]] = {}

    def _pooled(self, i: int) -> tuple[str | None, str | None, tuple[str, ...]]:
        if i not in self._seen:
            self._seen[i] = _message_view(self.pool[i], self.store)
        return self._seen[i]

    def view(self, event: dict) -> _View | None:
        refs = event.get("input_refs")
        if isinstance(refs, list) and refs:
            if not all(
                isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r) and 0 <= r[0] <= r[1]
                for r in refs
            ) or any(r[1] > len(self.pool) for r in refs):
                return None
            parts = (self._pooled(i) for a, b in refs for i in range(a, b))
        else:
            inp = event.get("input")
            if not isinstance(inp, list) or not inp:
                return None
            parts = (_message_view(m, self.store) for m in inp)
        shown: dict[str, str] = {}
        called: set[str] = set()
        for cid, text, ids in parts:
            if cid is not None and text is not None:
                shown[cid] = text
            called.update(ids)
        return shown, called


def _match_calls(chat: list[dict], events: list, pool: list, store: dict) -> dict[int, _View]:
    """Give each assistant message its model call's usage and time; return what each call was sent
    (the turn, as :func:`chat_to_steps` numbers assistant messages, -> its view), where the log
    holds it."""
    model_events = [e for e in events if isinstance(e, dict) and e.get("event") == "model"]
    by_id: dict[str, dict] = {}
    for e in model_events:
        out = e.get("output") if isinstance(e.get("output"), dict) else {}
        choices = out.get("choices") if isinstance(out.get("choices"), list) else []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        if isinstance(message.get("id"), str):
            by_id.setdefault(message["id"], e)
    turns = [k for k, m in enumerate(chat) if m["role"] == "assistant"]
    ids = [chat[k].pop("inspect_id", None) for k in turns]
    if any(isinstance(i, str) and i in by_id for i in ids):
        pairs = [(k, by_id.get(i)) for k, i in zip(turns, ids) if isinstance(i, str)]
    elif len(model_events) == len(turns):  # a log without message ids: the calls in order
        pairs = list(zip(turns, model_events))
    else:
        pairs = []
    sent: dict[int, _View] = {}
    reader = _Sent(pool, store)
    ordinal = {k: t for t, k in enumerate(turns)}
    for k, e in pairs:
        if e is None:
            continue
        out = e.get("output") if isinstance(e.get("output"), dict) else {}
        usage = inspect_usage(out.get("usage"))
        if usage:
            chat[k]["usage"] = usage
        chat[k]["timestamp"] = e.get("timestamp")
        view = reader.view(e)
        if view is not None:
            sent[ordinal[k]] = view
    return sent


def _mark_hidden(steps: list, outputs: dict[str, str], inputs: dict[int, _View], label: str) -> None:
    """``masked_before`` (and ``dropped_before``) of each step whose call's input the log holds: the
    earlier outputs that input did not hold as logged."""
    if not inputs:
        return
    masked: list[list[int] | None] = []
    dropped: list[list[int] | None] = []
    placeholders: list[dict[int, str]] = []
    earlier: list[int] = []  # steps of the turns before this one with a logged output
    seen = 0  # steps looked at for it so far
    for i, st in enumerate(steps):
        if i and st.turn != steps[i - 1].turn:  # a new turn: the steps before it are earlier
            earlier.extend(j for j in range(seen, i) if steps[j].tool_call_id in outputs)
            seen = i
        view = inputs.get(st.turn)
        if view is None:
            masked.append(None)
            dropped.append(None)
            placeholders.append({})
            continue
        shown, called = view
        hid = [j for j in earlier if shown.get(steps[j].tool_call_id) != outputs[steps[j].tool_call_id]]
        masked.append(hid)
        dropped.append([j for j in hid if steps[j].tool_call_id not in called])
        placeholders.append({j: shown[cid][:200] for j in hid if (cid := steps[j].tool_call_id) in shown})
    set_masking(steps, masked, label, dropped, placeholders)


def _compaction_label(events: list) -> str:
    names = []
    for e in events:
        if isinstance(e, dict) and e.get("event") == "compaction":
            meta = e.get("metadata") if isinstance(e.get("metadata"), dict) else {}
            name = str(meta.get("strategy") or f"compaction ({e.get('type')})")
            if name not in names:
                names.append(name)
    return ", ".join(names) or "left out of the call's input"


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
