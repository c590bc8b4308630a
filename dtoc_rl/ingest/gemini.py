"""Gemini logs: Gemini CLI sessions and Gemini API conversations (``contents``).

**Gemini CLI** records every session under ``~/.gemini/tmp/<project hash>/chats/``: one JSON object
per session (``session-*.json``: ``sessionId``, ``projectHash``, ``startTime``, ``lastUpdated``,
``messages``) in CLI versions before April 2026, and since then a JSONL file whose first line holds
that metadata and whose other lines are message records, ``{"$set": {...}}`` metadata updates and
``{"$rewindTo": id}`` records (the user rewound: that message and every later one are dropped; an
unknown id drops them all).  A message record written again under the same id replaces the first one
in its place, and a ``$set`` with a ``messages`` list replaces every message, as the CLI reads the
file back (google-gemini/gemini-cli, ``packages/core/src/services/chatRecordingService.ts``,
``loadConversationRecord``); an unreadable line is passed over, as there, and named in
``extra.bad_lines`` (a file none of whose lines is JSON is refused, saying so).  A session the CLI
resumed from a ``.json`` file goes on in a ``.jsonl`` copy beside it: the ``.json`` is then skipped, as
superseded.  A ``.jsonl`` file that holds one session object written over several lines (a ``.json``
session copied under a JSONL name, as checkpoint stores keep them: ``full.jsonl``) is read as the
``.json`` form (:func:`~dtoc_rl.ingest.base.one_json_value`).  The CLI's ``/chat save`` and restore
checkpoints (``checkpoint-*.json``, ``{"history": ...}``) copy a session's history and are not read.

A message is ``{"id", "timestamp", "type", "content", ...}``: ``user`` messages are the user's (the
first is the task), but for the one the CLI opens a session with, a ``<session_context>`` block of
its own (the date, the OS, the workspace's files), read as system text; ``gemini`` messages are
model calls, with ``toolCalls`` (``{"id", "name",
"args", "result", "status"}``; ``result`` is the list of parts sent back, whose ``functionResponse``
holds ``response.output`` or ``response.error``: a cancelled call has ``[Operation Cancelled] ...``
as its error), ``thoughts`` (``subject``, ``description``), the call's ``tokens`` (``input`` =
``promptTokenCount``, cached part included, ``cached``, ``output``, ``thoughts``, ``tool``; all
zeros on some calls of real sessions of Oct. 2025 that made output, so read as unlogged) and
``model``; ``info``, ``error`` and ``warning`` messages are the CLI's own notices, never sent to the
model, and are left out (counted in ``extra.skipped_messages``).  A call whose status is ``error``
or whose response holds ``error`` is an error output.

Four rewrites of the history reach the file, and each is undone where the file allows it:

* a resumed session (``--resume``) records its whole history again (``$set`` with ``messages``),
  each model turn as its parts alone, without the model, usage and time of its call: each keeps
  those of the call's own first record (a session's calls may go to several models: Gemini CLI's
  router picks one per prompt, and a resumed run's prompt may go to another);

* when the CLI re-records a turn from its history it gives each call of the turn all of the turn's
  responses: a call keeps only the response with its own id;
* its tool output masking (``packages/core/src/context/toolOutputMaskingService.ts``) replaces old
  outputs with a preview marked ``<tool_output_masked>`` and records the new history: each call's
  output is its first result recorded without that mark, and an output whose only record is the
  preview (a ``.json`` file rewritten since) is kept as it is and counted in
  ``extra.masked_outputs``;
* a compression replaces the history with a summary and the latest turns under new ids: a checkpoint
  that shares no message with the session so far is read as one, so the calls before it stay (they
  were made), a compaction marker follows with the summary, and the re-recorded turns are not read a
  second time.  Turns recorded that way (their calls as ``functionCall`` parts of the content, their
  responses as ``functionResponse`` parts of the next user message) are read from those parts; the
  copies of responses the CLI also records as user messages next to ``toolCalls`` are not read twice.

**Gemini API conversations**: what a program sends ``generateContent`` or keeps as a chat's history,
``{"contents": [...], "systemInstruction"?, "model"?}`` (one per ``.json`` file, a list of them, or
one per line of a ``.jsonl`` file) or a bare list of contents.  A content is ``{"role": "user" |
"model", "parts": [...]}``; ``functionCall`` parts (``name``, ``args``, ``id`` where the API set one)
are tool calls, ``functionResponse`` parts in the next user content their outputs (matched by ``id``,
else by the function's name, else in order), ``thought: true`` parts reasoning; the proto's own
spelling (``function_call``, ``function_response``, ``system_instruction``), which the API takes too,
is read as well.  A ``usageMetadata`` saved on a model content is
that call's usage.

Both map through :func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`, so a call is a step exactly as
in a chat-completions log.  Gemini bills thinking tokens as output (``thoughtsTokenCount`` apart from
``candidatesTokenCount``) and a built-in tool's prompt (``toolUsePromptTokenCount``) as input: both
are counted (:func:`~dtoc_rl.ingest.common.usage_from`).  Neither format records an outcome:
``success`` is None unless a conversation names one as a chat log's run does (``success``,
``resolved``, ``reward``, ...).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, one_json_value, read_json
from dtoc_rl.ingest.common import finalize, run_model
from dtoc_rl.ingest.openai_chat import (
    chat_to_steps,
    check_ids,
    iter_jsonl,
    parse_rows,
    row_label,
    run_key,
    written_lines,
)

__all__ = ["GeminiApiIngester", "GeminiCliIngester"]

#: The mark Gemini CLI's tool output masking puts around the preview it leaves of an output
#: (``packages/core/src/context/toolOutputMaskingService.ts``, ``MASKING_INDICATOR_TAG``).
MASK_TAG = "<tool_output_masked"
_SESSION = re.compile(r'"sessionId"\s*:')
_PROJECT = re.compile(r'"projectHash"\s*:')
_PARTS = re.compile(r'"parts"\s*:\s*\[')
_MODEL_ROLE = re.compile(r'"role"\s*:\s*"model"')
_CONTENTS = re.compile(r'"contents"\s*:\s*\[')
_CALL_PART = re.compile(r'"function(?:Call|Response)"\s*:')
_SETUP = re.compile(r"\s*<session_context>.*</session_context>\s*", re.DOTALL)


def _parts_text(content: Any, where: str) -> str:
    """The text of a Gemini ``content``: a string, or a list of parts (strings or ``{"text"}``); a
    part of another kind (a file, a function call, thoughts) adds nothing but a marker for data."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        raise IngestError(f"{where} is {type(content).__name__}, expected text or a list of parts")
    out = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
        elif not isinstance(part, dict):
            raise IngestError(f"{where}[{j}] is {type(part).__name__}, expected text or object")
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            out.append(part["text"])
        elif isinstance(part_field(part, "inlineData"), dict) or isinstance(
            part_field(part, "fileData"), dict
        ):
            data = part_field(part, "inlineData") or part_field(part, "fileData")
            out.append(f"[{part_field(data, 'mimeType') or 'file'}]")
    return "".join(out)


#: The protocol buffer's own spelling of a part's fields, which the API takes as well (JSON
#: clients write camelCase; some write the proto's snake_case).
_SNAKE = {
    "functionCall": "function_call",
    "functionResponse": "function_response",
    "inlineData": "inline_data",
    "fileData": "file_data",
    "mimeType": "mime_type",
    "systemInstruction": "system_instruction",
}


def _user_role(msgs: list[dict], text: str) -> str:
    """The role of a user message's text: Gemini CLI's own setup message (a ``<session_context>``
    block: the date, the OS, the workspace's files), sent before the user's first words, is system
    text; any other is the user's."""
    setup = _SETUP.fullmatch(text) is not None and all(m["role"] == "system" for m in msgs)
    return "system" if setup else "user"


def part_field(part: Any, key: str) -> Any:
    """A part's field, in either spelling the API takes (``functionCall`` or ``function_call``)."""
    if not isinstance(part, dict):
        return None
    return part[key] if key in part else part.get(_SNAKE.get(key, key))


def field_key(part: dict, key: str) -> str:
    """The spelling of ``key`` that ``part`` uses (for writing a field back as it came)."""
    return key if key in part or _SNAKE.get(key) not in part else _SNAKE[key]


def _response_text(response: Any) -> tuple[str, bool]:
    """A ``functionResponse.response`` as the text the model read, and whether it is an error."""
    if isinstance(response, str):
        return response, False
    if isinstance(response, dict):
        if "error" in response and response.get("error") not in (None, ""):
            err = response["error"]
            return (err if isinstance(err, str) else json.dumps(err)), True
        for key in ("output", "result", "content"):
            if isinstance(response.get(key), str):
                return response[key], False
    return ("" if response is None else json.dumps(response)), False


def _result(result: Any, where: str, call_id: str | None = None) -> tuple[str, bool]:
    """A Gemini CLI tool call's ``result`` (a list of parts) as output text and its error flag.  When the
    CLI re-syncs its record from the history it gives every call of a turn all of the turn's
    responses: only those with the call's own id are its output (all, when none carries it)."""
    parts = result if isinstance(result, list) else [result]
    own = [p for p in parts if _response_id(p) == call_id]
    if call_id is not None and own:
        parts = own
    texts, error = [], False
    for j, part in enumerate(parts):
        if isinstance(fr := part_field(part, "functionResponse"), dict):
            text, err = _response_text(fr.get("response"))
            texts.append(text)
            error = error or err
        else:
            texts.append(_parts_text([part], f"{where}[{j}]"))
    return "\n".join(t for t in texts if t), error


def _response_id(part: Any) -> Any:
    fr = part_field(part, "functionResponse")
    return fr.get("id") if isinstance(fr, dict) else None


def _unmasked(result: Any) -> bool:
    return result is not None and MASK_TAG not in json.dumps(result)


def _usage(tokens: Any) -> dict | None:
    # the CLI's per-call token summary in the API's own names (usage_from reads those)
    if not isinstance(tokens, dict):
        return None
    if not any(isinstance(v, (int, float)) and v for v in tokens.values()):
        return None  # all zeros: the CLI kept no usage for the call (no call is sent an empty prompt)
    names = {"input": "promptTokenCount", "cached": "cachedContentTokenCount",
             "output": "candidatesTokenCount", "thoughts": "thoughtsTokenCount",
             "tool": "toolUsePromptTokenCount"}  # fmt: skip
    return {api: tokens[k] for k, api in names.items() if k in tokens}


def _thoughts(thoughts: Any) -> str:
    if not isinstance(thoughts, list):
        return ""
    out = []
    for t in thoughts:
        if isinstance(t, dict):
            out.append(": ".join(str(t[k]) for k in ("subject", "description") if t.get(k)))
    return "\n\n".join(x for x in out if x)


@dataclass
class CliSession:
    """A Gemini CLI session file replayed as the CLI reads it back (see the module docstring)."""

    meta: dict = field(default_factory=dict)
    messages: list[dict] = field(default_factory=list)
    #: each call's result as first recorded without the masking's preview (the masking rewrites the
    #: history, and the CLI records the rewrite), by call id
    results: dict[str, Any] = field(default_factory=dict)
    torn: bool = False  # a last line cut short (a session still being written) was left out
    bad_lines: list[str] = field(default_factory=list)  # unreadable lines the CLI would pass over too


def _note_results(session: CliSession, rec: dict) -> None:
    for c in rec.get("toolCalls") or () if isinstance(rec.get("toolCalls"), list) else ():
        if isinstance(c, dict) and c.get("id") is not None and _unmasked(c.get("result")):
            session.results.setdefault(str(c["id"]), c["result"])


def cli_records(path: Path) -> CliSession:
    """A Gemini CLI session file (``.json``, or ``.jsonl`` replayed record by record) as a
    :class:`CliSession`.  A checkpoint (``$set`` with ``messages``) that shares no message with the
    session so far is the CLI's compression: the history it replaces was sent all the same, so it is
    kept, followed by a compaction marker with the checkpoint's first user text (the summary)."""
    whole = path.suffix == ".jsonl" and one_json_value(path)  # a .json session named .jsonl
    if path.suffix != ".jsonl" or whole:
        if not whole and path.with_suffix(".jsonl").exists():
            raise IngestError(
                f"superseded by {path.with_suffix('.jsonl').name}, which the CLI wrote when it resumed "
                "this session and kept writing (it reads that one)",
                path,
            )
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise IngestError("a Gemini CLI session must be an object with a 'messages' list", path)
        session = CliSession(meta=data, messages=[m for m in data["messages"] if isinstance(m, dict)])
        for m in session.messages:
            _note_results(session, m)
        return session
    session = CliSession()
    messages: dict[str, dict] = {}  # by id, in the order first written
    calls: dict[str, dict] = {}  # each model call's record as first written, by id
    compacted: dict[str, str] = {}  # ids of a compression's checkpoint -> its marker's id
    rows, session.torn = written_lines(path)
    if rows and all(err is not None for _, _, err in rows):  # no line read: no session, not an empty one
        raise IngestError(
            f"no line is valid JSON ({len(rows)} lines; {rows[0][2]} on line {rows[0][0]})", path
        )
    for n, rec, err in rows:
        if err is not None:
            session.bad_lines.append(f"line {n}: {err}")
            continue
        if not isinstance(rec, dict):
            session.bad_lines.append(f"line {n}: {type(rec).__name__}, expected an object")
            continue
        if isinstance(rec.get("$rewindTo"), str):
            target = compacted.get(rec["$rewindTo"], rec["$rewindTo"])
            ids = list(messages)
            cut = ids.index(target) + (target != rec["$rewindTo"]) if target in ids else 0
            for mid in ids[cut:]:
                del messages[mid]
        elif isinstance(rec.get("id"), str):  # the CLI's tests, in its order: a message record
            _note_results(session, rec)
            messages[rec["id"]] = rec
            if rec.get("type") == "gemini":
                calls.setdefault(rec["id"], rec)
        elif isinstance(rec.get("$set"), dict):
            update = rec["$set"]
            if isinstance(update.get("messages"), list):
                kept = [
                    _as_made(m, calls)
                    for m in update["messages"]
                    if isinstance(m, dict) and isinstance(m.get("id"), str)
                ]
                for m in kept:
                    _note_results(session, m)
                ids = [m["id"] for m in kept]
                if messages and not set(ids) & set(messages):
                    marker = f"$compaction{len(compacted)}"
                    summary = next((m.get("content") for m in kept if m.get("type") == "user"), "")
                    messages[marker] = {"id": marker, "type": "dtoc_compaction", "content": summary}
                    compacted.update(dict.fromkeys(ids, marker))
                else:
                    messages = dict(zip(ids, kept))
            session.meta.update({k: v for k, v in update.items() if k != "messages"})
        elif isinstance(rec.get("sessionId"), str) and isinstance(rec.get("projectHash"), str):
            session.meta.update({k: v for k, v in rec.items() if k != "messages"})
            listed = rec.get("messages")
            for m in listed if isinstance(listed, list) else ():
                if isinstance(m, dict) and isinstance(m.get("id"), str):
                    _note_results(session, m)
                    messages[m["id"]] = m
    session.messages = list(messages.values())
    return session


def _as_made(m: dict, calls: dict[str, dict]) -> dict:
    """A message of a history the CLI recorded again (a resumed session's ``$set``): a model call keeps
    the model, usage and time its own record gave it, which the re-recorded turn lacks (it holds the
    call's parts and the time of the resume)."""
    first = calls.get(m["id"]) if m.get("type") == "gemini" else None
    if first is None:
        return m
    return {**m, **{k: first[k] for k in ("model", "tokens", "timestamp") if k in first}}


@dataclass
class CliChat:
    """A Gemini CLI session read as chat messages."""

    messages: list[dict]
    model: str  # the first model named
    skipped: Counter  # records left out, by type (the CLI's own notices)
    masked: int  # outputs whose full text the session no longer holds (only the masking's preview)


def cli_to_chat(session: CliSession) -> CliChat:
    """A Gemini CLI session's messages as chat messages, with what could not be read."""
    msgs: list[dict] = []
    model = ""
    skipped: Counter = Counter()
    masked = 0
    open_calls: list[
        tuple[str, Any, bool]
    ] = []  # calls written as functionCall parts, whose responses a user message brings
    for i, rec in enumerate(session.messages):
        w = f"messages[{i}]"
        kind = rec.get("type")
        if kind == "user":
            content = rec.get("content")
            parts = content if isinstance(content, list) else [content]
            responses = [fr for p in parts if isinstance(fr := part_field(p, "functionResponse"), dict)]
            for fr in responses if open_calls else ():
                cid = _answered(open_calls, fr, in_order=True)[0]
                text, err = _response_text(fr.get("response"))
                msgs.append({"role": "tool", "tool_call_id": cid, "content": text, "is_error": err})
            # responses of calls recorded with their results are the CLI's copy of them: not read twice
            said = [p for p in parts if part_field(p, "functionResponse") is None]
            if said or not responses:
                text = _parts_text(said, f"{w}.content")
                msgs.append({"role": _user_role(msgs, text), "content": text})
        elif kind == "dtoc_compaction":
            summary = _parts_text(rec.get("content"), w)
            msgs.append({"role": "user", "content": summary, "dtoc_compaction": True})
        elif kind == "gemini":
            calls = rec.get("toolCalls") or []
            if not isinstance(calls, list):
                raise IngestError(f"{w}.toolCalls is {type(calls).__name__}, expected a list")
            content = rec.get("content")
            parts = content if isinstance(content, list) else [content]
            tool_calls, replies = [], []
            for k, c in enumerate(calls):
                if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                    raise IngestError(f"{w}.toolCalls[{k}] must be an object with a 'name'")
                cid = str(c.get("id") or f"{rec.get('id', i)}#{k}")
                fn = {"name": c["name"], "arguments": c.get("args") or {}}
                tool_calls.append({"id": cid, "function": fn})
                result = session.results.get(cid, c.get("result"))
                if result is not None:
                    text, err = _result(result, f"{w}.toolCalls[{k}].result", cid)
                    masked += MASK_TAG in text
                    replies.append({"role": "tool", "tool_call_id": cid, "content": text,
                                    "is_error": bool(err or c.get("status") == "error")})  # fmt: skip
            if not calls:  # a turn the CLI re-recorded from its history: the calls are parts of the content
                for k, p in enumerate(parts):
                    if isinstance(fc := part_field(p, "functionCall"), dict):
                        cid = str(fc.get("id") or f"{rec.get('id', i)}#{k}")
                        fn = {"name": fc.get("name"), "arguments": fc.get("args") or {}}
                        tool_calls.append({"id": cid, "function": fn})
                        open_calls.append((cid, fc.get("name"), False))
            said = [p for p in parts if part_field(p, "functionCall") is None]
            m = {"role": "assistant", "content": _parts_text(said, f"{w}.content"),
                 "reasoning": _thoughts(rec.get("thoughts")), "tool_calls": tool_calls,
                 "timestamp": rec.get("timestamp")}  # fmt: skip
            if (u := _usage(rec.get("tokens"))) is not None:
                m["usageMetadata"] = u
            if isinstance(rec.get("model"), str):  # the CLI's router picks a model per call
                m["model"] = rec["model"]
            msgs.append(m)
            msgs.extend(replies)
            if not model and isinstance(rec.get("model"), str):
                model = rec["model"]
        else:
            skipped[str(kind)] += 1
    return CliChat(msgs, model, skipped, masked)


def _answered(
    open_calls: list[tuple[str, Any, bool]], response: dict, *, in_order: bool = False
) -> tuple[str, Any, bool] | None:
    """The open call ``(id, name, id made up)`` a ``functionResponse`` answers, taken off the list: the
    one with its id, else the oldest of its function's name, else, when it names no id (or
    ``in_order``), the oldest; None for a stray id."""
    rid = response.get("id")
    answered = next((o for o in open_calls if o[0] == rid), None) or next(
        (o for o in open_calls if o[1] == response.get("name")), None
    )
    if answered is None and (rid is None or in_order) and open_calls:
        answered = open_calls[0]
    if answered is not None:
        open_calls.remove(answered)
    return answered


def contents_to_chat(contents: Any, system: Any = None, places: list | None = None) -> list[dict]:
    """Gemini API ``contents`` (and a ``systemInstruction``) as chat messages; ``places``, when given,
    gets the ``(content, part)`` position of each tool message's ``functionResponse``, in order.

    A response answers the open call with its id; one without an id, or with an id no open call has,
    answers the oldest open call of its function's name; one with neither, if it has no id, the
    oldest open call (a stray id stays, and the chat reader refuses it).  A call without an
    id (the API lets a client leave them out) gets ``gemini-call-N``, and its response's message says
    ``made_id``: such an id names no call outside this conversation."""
    if not isinstance(contents, list):
        raise IngestError(f"contents is {type(contents).__name__}, expected a list")
    msgs: list[dict] = []
    if system is not None:
        sys_parts = system.get("parts") if isinstance(system, dict) else system
        msgs.append({"role": "system", "content": _parts_text(sys_parts, "systemInstruction")})
    open_calls: list[tuple[str, Any, bool]] = []  # (id, function name, id made here), oldest first
    made = 0
    for i, c in enumerate(contents):
        w = f"contents[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("parts", []), list):
            raise IngestError(f"{w} must be an object with a 'parts' list")
        parts = c.get("parts") or []
        role = c.get("role") or "user"
        if role == "model":
            calls = []
            for fc in (fc for p in parts if isinstance(fc := part_field(p, "functionCall"), dict)):
                cid, own = fc.get("id"), True
                if not isinstance(cid, str) or not cid:
                    cid, own, made = f"gemini-call-{made}", False, made + 1
                open_calls.append((cid, fc.get("name"), not own))
                fn = {"name": fc.get("name"), "arguments": fc.get("args") or {}}
                calls.append({"id": cid, "function": fn, "made_id": not own})
            thought = [
                p["text"] for p in parts if part_field(p, "thought") and isinstance(p.get("text"), str)
            ]
            said = [p for p in parts if part_field(p, "functionCall") is None]
            m = {"role": "assistant", "content": _parts_text(said, w), "reasoning": "\n\n".join(thought),
                 "tool_calls": calls}  # fmt: skip
            for key in ("usageMetadata", "usage_metadata"):
                if isinstance(c.get(key), dict):
                    m["usageMetadata"] = c[key]
            if c.get("timestamp") is not None:  # a harness's record of the call (Qwen Code's)
                m["timestamp"] = c["timestamp"]
            if isinstance(c.get("model"), str):
                m["model"] = c["model"]
            msgs.append(m)
        elif role in ("user", "function", "tool"):
            responses = [
                (j, fr)
                for j, p in enumerate(parts)
                if isinstance(fr := part_field(p, "functionResponse"), dict)
            ]
            for j, fr in responses:
                text, err = _response_text(fr.get("response"))
                answered = _answered(open_calls, fr)
                cid = answered[0] if answered else fr.get("id")  # a stray id stays: the chat reader names it
                msgs.append({"role": "tool", "tool_call_id": cid, "content": text, "is_error": err,
                             "made_id": bool(answered and answered[2])})  # fmt: skip
                if places is not None:
                    places.append((i, j))
            text = _parts_text([p for p in parts if part_field(p, "functionResponse") is None], w)
            if text or not responses:
                msgs.append({"role": _user_role(msgs, text), "content": text})
                if c.get("dtoc_compaction") is True:  # a summary that replaced the history before it
                    msgs[-1]["dtoc_compaction"] = True
                    msgs[-1]["dtoc_keeps_turns"] = c.get("dtoc_keeps_turns") or 0
        else:
            raise IngestError(
                f"{w} has role {role!r}, expected 'user' or 'model' (or 'function' for replies)"
            )
    return msgs


class GeminiCliIngester(Ingester):
    name = "gemini-cli"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix not in (".json", ".jsonl") or not (_SESSION.search(head) and _PROJECT.search(head)):
            return False
        if path.suffix == ".json":
            return True
        # JSONL: the metadata is the first line's; or the file is one session object (a .json named .jsonl)
        first = head.split("\n", 1)[0]
        return bool(_SESSION.search(first) and _PROJECT.search(first)) or one_json_value(path)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        log = cli_records(path)
        meta = log.meta
        chat = cli_to_chat(log)
        cp = chat_to_steps(chat.messages, "messages")
        if not cp.steps:
            raise IngestError("empty session: no model calls", path)
        session = str(meta.get("sessionId") or path.stem)
        extra: dict[str, Any] = {
            k: meta[k] for k in ("projectHash", "startTime", "lastUpdated", "kind", "summary")
            if isinstance(meta.get(k), (str, int, float, bool))
        }  # fmt: skip
        if chat.masked:  # the masking's preview is all the session holds of these outputs
            extra["masked_outputs"] = chat.masked
        if chat.skipped:
            extra["skipped_messages"] = json.dumps(dict(sorted(chat.skipped.items())))
        if log.torn:
            extra["torn_last_line"] = True
        if log.bad_lines:
            extra["bad_lines"] = "; ".join(log.bad_lines[:10])
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        model = run_model(cp.steps, chat.model)
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=session,
                task_text=cp.task,
                system_prompt=cp.system,
                success=None,
                outcome_source="",
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )


class GeminiApiIngester(Ingester):
    name = "gemini-api"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix not in (".json", ".jsonl") or not (_PARTS.search(head) and _MODEL_ROLE.search(head)):
            return False
        if not _CALL_PART.search(head):
            return False
        # a conversation under "contents", or a chat's bare history; not the CLI's own /chat and restore
        # checkpoints ({"history": ...}, checkpoint-*.json), which copy a session's history
        bare = head.lstrip().startswith("[") and not path.name.startswith("checkpoint")
        return bool(_CONTENTS.search(head)) or bare

    def parse(self, path: Path) -> Iterator[Trajectory]:
        seen: dict[str, int] = {}  # run keys used so far (run_key): two runs of a file may carry one id
        if path.suffix == ".jsonl" and not one_json_value(path):
            yield from parse_rows(path, iter_jsonl(path), lambda r, n: self._run(path, r, n, seen, "line"))
            return
        data = read_json(path)
        if isinstance(data, list) and data and all(isinstance(r, dict) and "contents" in r for r in data):
            rows, unit = [(i, r, None) for i, r in enumerate(data, 1)], "run"
        else:
            rows, unit = [(1, data, None)], "file"
        yield from parse_rows(path, rows, lambda r, n: self._run(path, r, n, seen, unit), unit=unit)

    def _run(self, path: Path, row: Any, number: int, seen: dict[str, int], unit: str) -> Trajectory:
        if isinstance(row, list):
            row = {"contents": row}
        if not isinstance(row, dict) or "contents" not in row:
            raise IngestError("expected an object with 'contents' or a list of contents")
        msgs = contents_to_chat(row["contents"], part_field(row, "systemInstruction"))
        cp = chat_to_steps(msgs, "contents")
        made = {c["id"] for m in msgs for c in m.get("tool_calls") or () if c["made_id"]}
        for st in cp.steps:  # an id made up for pairing is no call id the log had
            if st.tool_call_id in made:
                st.tool_call_id = None
        if not cp.steps:
            raise IngestError("empty conversation: no model turns")
        model = row.get("model") or row.get("modelVersion") or ""
        if not isinstance(model, str):
            raise IngestError(f"'model' is {type(model).__name__}, expected string")
        model = model.removeprefix("models/")
        check_ids(row)
        rid = row.get("id")
        key = run_key(seen, str(rid) if rid is not None else f"{unit}{number}", number, cp.steps)
        success, outcome = row_label(row)
        extra = {"trailing_user_text": cp.trailing_user} if cp.trailing_user else {}
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{path.stem}/{key}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=str(row.get("task_id", rid if rid is not None else f"{path.stem}:{number}")),
                task_text=cp.task,
                system_prompt=cp.system,
                success=success,
                outcome_source=outcome,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )
