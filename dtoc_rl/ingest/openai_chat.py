"""Generic OpenAI chat-completions logs (tried last by ``detect_format``).

Format: a ``.jsonl`` file with one run per line, or a ``.json`` file holding one run (or a list of
runs).  A run is ``{"messages": [...], "id"?, "model"?, "task_id"?, "success"? / "pass"? /
"reward"?}`` or a bare list of messages; a ``system`` (an Anthropic Messages request's, text or
text blocks) or ``instructions`` (a Responses request's) beside them is the system prompt when the
messages open without one.  Messages are OpenAI chat-completions dicts:
``system``/``user`` text, ``assistant`` with optional ``tool_calls`` (``{"id", "type": "function",
"function": {"name", "arguments"}}``) and ``tool`` replies carrying ``tool_call_id``, or Anthropic
Messages content blocks (``tool_use`` in an assistant message, ``tool_result`` with its
``is_error`` flag in a user message, ``thinking`` as reasoning); a ``usage``
object on an assistant message (any provider's shape, :func:`~dtoc_rl.ingest.common.usage_from`) is
kept as that call's logged usage.  A run may instead hold OpenAI Responses API items under
``input`` (and ``output``) or ``items``, or be a bare item list: they are read as the equivalent
messages (:mod:`dtoc_rl.ingest.responses`).  A run with no tool calls whose replies write their
actions as text (a ```` ```bash ```` block, ``<function=...>``, ``<execute_bash>``) has them read
as tool calls, each next user message as the output (:mod:`dtoc_rl.ingest.text_actions`;
``extra.text_actions`` names the convention).  A run as trajectory datasets publish it (messages
under ``trajectory`` or ``conversations``, ShareGPT's ``from``/``value``, roles such as ``ai`` or
``observation``; Parquet shards through :mod:`dtoc_rl.ingest.chat_parquet`) is renamed to this
shape first (:mod:`dtoc_rl.ingest.chat_rows`).  AutoCodeRover's ``conversation_round_*.json`` (bare
message lists inside its task folders) are left to that ingester.

Mapping (shared with :mod:`dtoc_rl.ingest.tau_bench` via :func:`chat_to_steps`):
the first ``user`` message before any assistant turn is the task; later
user/system text goes into the next step's ``user_text``; each tool call is
one step (parallel calls share ``turn``, assistant text on the first); a tool
reply is matched to the oldest still-unanswered call with the same
``tool_call_id`` (ids may be reused once answered, as in tau-bench), or to the
oldest unanswered call when the reply has no id.  A reply that matches no call
is an error, never guessed.  Text after the last step is kept as
``extra.trailing_user_text``.  Rows written by a DTOC orchestrator or env recorder
carry ``dtoc_visibility`` (what was hidden before each step, and the enable/disable
events): it becomes the steps' ``masked_before`` and ``events``
(:func:`apply_visibility`), so a run with a policy plugged in can be replayed,
cloned (``--mode bc``) and calibrated like any masked log; their ``dtoc_source``, when set
(``dtoc-rl proxy`` names the agent: ``proxy:claude-cli``), is the run's ``source`` instead of
``openai-chat`` (:func:`check_log_source`).

Labels: ``success`` / ``pass`` / ``passed`` / ``resolved`` / ``target`` (bool; nebius' datasets call
the outcome ``target``) win, then ``resolved`` as an integer 0 / 1; else ``reward`` 1 → True, 0 →
False, other values → None (kept in ``extra``).  No label → None.

This module also holds small helpers the other chat/event ingesters share
(``iter_jsonl``, ``parse_rows``, ``iso_to_epoch``, ``norm_args``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dtoc_rl.data.chatlog import VISIBILITY_FORMAT_KEY
from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import EVENT_KINDS, ContextEvent, Step, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, json_error, one_json_value, read_json, read_text
from dtoc_rl.ingest.chat_rows import chat_run, message_column
from dtoc_rl.ingest.common import cap_output, finalize, message_model, message_usage, new_step, run_model
from dtoc_rl.ingest.responses import is_item_list, responses_to_messages
from dtoc_rl.ingest.text_actions import as_tool_calls

__all__ = [
    "ChatParse",
    "OpenAIChatIngester",
    "chat_to_steps",
    "content_text",
    "iso_to_epoch",
    "iter_jsonl",
    "norm_args",
    "parse_rows",
    "row_label",
    "written_lines",
]

#: A run's text fields longer than this (a dataset's patch or evaluation log) are not copied into
#: ``extra``, only named with their length in ``extra.long_fields``: they are not part of the context.
#: A DTOC orchestrator's own fields (``dtoc_keys``, ``dtoc_visibility``) are always kept: labels read them.
MAX_FIELD_CHARS = 4000

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_ROLE_RE = re.compile(r'"role"\s*:\s*"(?:system|developer|user|assistant|tool)"')
_ITEM_RE = re.compile(r'"type"\s*:\s*"(?:function_call|custom_tool_call|local_shell_call)"')
# Keys that mark formats other ingesters own; their presence vetoes detection, except a session's
# name on the lines of a log of chat messages written a message per line (RUN_FIELDS).
_OWNED_KEYS = "traj|history|trajectory_format|parentUuid|_RESPONSE|parts|kind"
_FOREIGN_KEYS = _OWNED_KEYS + "|session_id|sessionId"
_FOREIGN = re.compile(rf'"(?:trajectory|{_FOREIGN_KEYS})"\s*:')
_FOREIGN_BUT_RUN = re.compile(rf'"(?:trajectory|{_OWNED_KEYS})"\s*:')
# A published dataset's run (chat_rows): its messages under another column, roles possibly renamed.
_DATASET_RUN = re.compile(r'"(?:trajectory|conversations|conversation)"\s*:\s*\[')
# LangChain's dumped messages: the role is their "type"
_LANGCHAIN_RUN = re.compile(r'"messages"\s*:\s*\[')
_LANGCHAIN_ROLE = re.compile(r'"type"\s*:\s*"(?:human|ai)"')
_DATASET_ROLES = "system|user|assistant|tool|ai|human|gpt|model|function_call|observation"
_DATASET_ROLE = re.compile(rf'"(?:role|from)"\s*:\s*"(?:{_DATASET_ROLES})"')
# the same with the messages stored as JSON text (SWE-smith's rows): their quotes are escaped
_DATASET_TEXT_RUN = re.compile(r'"(?:messages|trajectory|conversations|conversation)"\s*:\s*"\[')
_DATASET_TEXT_ROLE = re.compile(rf'\\"(?:role|from)\\"\s*:\s*\\"(?:{_DATASET_ROLES})\\"')
# SWE-agent's trajectory steps (a .traj saved as .json) carry these keys; published chat runs do not
_DATASET_FOREIGN = re.compile(rf'"(?:{_FOREIGN_KEYS}|thought|action|observation|execution_time)"\s*:')


# ---------------------------------------------------------------- shared helpers


#: A number of epoch seconds above this is a later year than 5000: it counts milliseconds (JavaScript's
#: Date.now()), or micro- or nanoseconds.
_SECONDS_AT_MOST = 1e11


def iso_to_epoch(value: Any) -> float | None:
    """ISO-8601 text or an epoch number → epoch seconds; naive times are taken as UTC; an epoch in
    milliseconds (or finer) is scaled to seconds; junk (negative or before 1970, not finite, not a time) →
    None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if not math.isfinite(v) or v < 0:
            return None
        for _ in range(3):  # milliseconds, microseconds, nanoseconds; a larger number is no time
            if v > _SECONDS_AT_MOST:
                v /= 1000.0
        return v if v <= _SECONDS_AT_MOST else None
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Python 3.10's fromisoformat accepts at most 6 fractional digits.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        seconds = dt.timestamp()
    except (OverflowError, ValueError):  # year 1 shifted by its offset out of datetime's range
        return None
    return seconds if seconds >= 0 else None  # before 1970: a placeholder date, as a negative number is


def check_ids(row: dict) -> None:
    """A run's ``id`` and ``task_id`` name it: text or a number, else an IngestError (an object would
    become Python's text of it, an id no other tool reads the same way)."""
    for name in ("id", "task_id"):
        v = row.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, str | int | float)):
            raise IngestError(f"'{name}' is {type(v).__name__}, expected text or a number")


def run_key(seen: dict[str, int], key: str, number: int, steps: list[Step]) -> str:
    """The key run ``number`` of a file is known by: ``key`` (its id), or ``key#number`` when an earlier
    run of the file took it.  A run with the steps of that earlier one is a copy: an IngestError, as a
    copy in another file is skipped.  ``seen``: the keys used so far, with a print of their runs' steps
    as read (taken before labelling changes them)."""
    fields = ((s.turn, s.tool_name, s.tool_args, s.output, s.assistant_text, s.user_text) for s in steps)
    mark = hash(tuple(fields))
    if key in seen:
        if seen[key] == mark:
            raise IngestError(f"a copy of the file's run {key!r} (the same steps): read once")
        key = f"{key}#{number}"
    seen[key] = mark
    return key


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, error)`` for every non-blank line of a JSONL file.

    Lines are split on ``\\n`` only (JSON strings may hold raw U+2028).  A line holding several JSON
    objects back to back (a writer that lost a newline between two records: real Claude Code
    transcripts have them) yields each of them, under that line's number; a line that is anything else
    after its first value is bad, as before.
    """
    text = read_text(path)
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line), None
        except json.JSONDecodeError as e:
            joined = _joined_objects(line) if e.msg == "Extra data" else None
            if joined is not None:
                for rec in joined:
                    yield lineno, rec, None
                continue
            yield lineno, None, f"invalid JSON ({json_error(e, line=False)})"
        except ValueError as e:  # valid JSON no reader takes: an integer of 4,300+ digits
            yield lineno, None, f"JSON not readable ({str(e).split(';')[0]})"
        except RecursionError:  # one line too deep to read: the lines after it are still read
            yield lineno, None, "JSON nested too deeply to read"


_DECODER = json.JSONDecoder()


def _joined_objects(line: str) -> list[dict] | None:
    """The objects of a line that is two or more JSON objects written back to back (whitespace between
    them allowed), or None when it is not only that."""
    out: list[dict] = []
    at, end = 0, len(line.rstrip())
    while at < end:
        while line[at].isspace():
            at += 1
        try:
            value, at = _DECODER.raw_decode(line, at)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        out.append(value)
    return out if len(out) > 1 else None


def written_lines(path: Path) -> tuple[list[tuple[int, Any, str | None]], bool]:
    """:func:`iter_jsonl`'s lines, except a last line that cannot be read and that no newline ends: a log
    still being written (an agent's live session file) ends in a record cut off mid-write.  Returns the
    lines and whether such a torn last line was left out (its readers note it as
    ``extra.torn_last_line``); any other bad line, or a file of that one line, is the reader's to
    refuse."""
    lines = list(iter_jsonl(path))
    if len(lines) > 1 and lines[-1][2] is not None and not _ends_line(path):
        return lines[:-1], True
    return lines, False


def _ends_line(path: Path) -> bool:
    # whether the file's last byte ends a line: a record written whole, however it reads
    with open(path, "rb") as fh:
        if fh.seek(0, os.SEEK_END) == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def parse_rows(
    path: Path,
    rows: Iterable[tuple[int, Any, str | None]],
    one: Callable[[Any, Any], Trajectory | list[Trajectory]],
    unit: str = "line",
) -> Iterator[Trajectory]:
    """Yield ``one(row, number)`` for every row (a trajectory, or a list of them); collect failures and
    raise at the end.

    Good rows are yielded first, so one bad line never hides the others; the
    final :class:`IngestError` names every failed line and its reason.
    """
    bad: list[str] = []
    n = 0
    for number, row, err in rows:
        n += 1
        if err is not None:
            bad.append(f"{unit} {number}: {err}")
            continue
        try:
            got = one(row, number)
        except IngestError as e:
            bad.append(f"{unit} {number}: {e.reason}")
            continue
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            bad.append(f"{unit} {number}: unexpected structure ({type(e).__name__}: {e})")
            continue
        except RecursionError:
            bad.append(f"{unit} {number}: nested too deeply to read")
            continue
        yield from got if isinstance(got, list) else (got,)
    if n == 0:
        raise IngestError(f"empty file: no JSON {unit}s", path)
    if bad:
        shown = "; ".join(bad[:12]) + (f"; … {len(bad) - 12} more" if len(bad) > 12 else "")
        raise IngestError(f"{len(bad)} of {n} {unit}s failed: {shown}", path)


def content_text(content: Any, where: str) -> str:
    """Text of an OpenAI/Anthropic-style ``content``: a string, None, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                kind = part.get("type")
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif kind in ("image", "image_url", "input_image"):
                    out.append("[image]")
                elif kind is None:
                    raise IngestError(f"{where}[{j}] has no 'type' or 'text'")
            else:
                raise IngestError(f"{where}[{j}] is {type(part).__name__}, expected string or object")
        return "".join(out)
    raise IngestError(f"{where} has type {type(content).__name__}, expected string, list or null")


def norm_args(args: Any) -> str:
    """Tool-call arguments as JSON text: ``json.dumps`` of the parsed object.

    A string that is not valid JSON (a malformed call) is kept verbatim.
    """
    if args is None:
        return ""
    if isinstance(args, str):
        try:
            obj = json.loads(args)
            return json.dumps(obj) if isinstance(obj, (dict, list)) else args
        except (json.JSONDecodeError, RecursionError):  # a string nested too deeply is kept as sent
            return args
    return json.dumps(args)


# ---------------------------------------------------------------- chat → steps


@dataclass
class ChatParse:
    system: str = ""
    task: str = ""
    steps: list[Step] = field(default_factory=list)
    trailing_user: str = ""  # user/env text after the last step (no next step to carry it)
    n_tool_calls: int = 0
    n_tool_replies: int = 0


def chat_to_steps(
    msgs: list, where: str = "messages", is_error: Callable[[str], bool] | None = None
) -> ChatParse:
    """Turn an OpenAI chat message list into steps (see the module docstring)."""
    if not isinstance(msgs, list):
        raise IngestError(f"{where} is {type(msgs).__name__}, expected a list of messages")
    res = ChatParse()
    system_parts: list[str] = []
    pending: list[str] = []
    task_set = False
    turn = -1
    events: list[ContextEvent] = []  # found in the log, for the next step
    for i, m in enumerate(msgs):
        w = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise IngestError(f"{w} is {type(m).__name__}, expected object")
        role = m.get("role")
        if role not in ROLES:
            raise IngestError(f"{w} has role {role!r}, expected one of {', '.join(ROLES)}")
        content = m.get("content")
        results: list[tuple[int, dict]] = []
        blocks: list[dict] = []
        if isinstance(content, list):  # Anthropic Messages blocks: tool calls and results travel in content
            results = [
                (k, b)
                for k, b in enumerate(content)
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            blocks = [b for b in content if isinstance(b, dict) and b.get("type") in ("tool_use", "thinking")]
        text = content_text(content, f"{w}.content")  # skips blocks without text: calls, results, thinking
        if results and role == "user":
            for k, b in results:  # k: the block's place in the message, for errors
                bw = f"{w}.content[{k}]"
                body = content_text(b.get("content"), f"{bw}.content")
                _reply(res, b.get("tool_use_id"), body, bw, is_error, b.get("is_error") is True)
            if text:
                pending.append(text)
            continue
        if m.get("dtoc_compaction") is True:  # a summary replaced everything before it
            # but the latest model turns a harness kept after its summary (``dtoc_keeps_turns``)
            kept = m.get("dtoc_keeps_turns") or 0
            first = turn + 1 - kept if isinstance(kept, int) and kept > 0 else turn + 1
            kept_from = next((i for i, st in enumerate(res.steps) if st.turn >= first), len(res.steps))
            events.append(ContextEvent("compaction", list(range(kept_from)), "summary replaced the context"))
            pending.append(text)
            continue
        if role in ("system", "developer"):
            if not res.steps and not task_set:
                system_parts.append(text)
            else:
                pending.append(text)
        elif role == "user":
            if not task_set and not res.steps:
                res.task = text
                task_set = True
            else:
                pending.append(text)
        elif role == "assistant":
            turn += 1
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise IngestError(f"{w}.tool_calls is {type(calls).__name__}, expected list")
            if not calls and isinstance(m.get("function_call"), dict):  # legacy functions API
                calls = [{"id": None, "function": m["function_call"]}]
            calls = calls + [
                {"id": b.get("id"), "function": {"name": b.get("name"), "arguments": b.get("input") or {}}}
                for b in blocks
                if b["type"] == "tool_use"
            ]
            reasoning = m.get("reasoning_content") or m.get("reasoning") or ""
            if not isinstance(reasoning, str):
                reasoning = content_text(reasoning, f"{w}.reasoning_content")
            thinking = [b.get("thinking") for b in blocks if b["type"] == "thinking"]
            if not reasoning and thinking:
                reasoning = "\n\n".join(t for t in thinking if isinstance(t, str))
            user_text = "\n\n".join(p for p in pending if p)
            pending = []
            first_of_turn = len(res.steps)
            if not calls:
                res.steps.append(
                    new_step(turn=turn, user_text=user_text, assistant_text=text, reasoning=reasoning)
                )
            for k, call in enumerate(calls):
                cw = f"{w}.tool_calls[{k}]"
                if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                    raise IngestError(f"{cw} must be an object with a 'function' object")
                fn = call["function"]
                name = fn.get("name")
                if not isinstance(name, str) or not name:
                    raise IngestError(f"{cw}.function.name is missing or not a string")
                cid = call.get("id")
                res.steps.append(
                    new_step(
                        turn=turn,
                        user_text=user_text if k == 0 else "",
                        assistant_text=text if k == 0 else "",
                        reasoning=reasoning if k == 0 else "",
                        tool_name=name,
                        tool_args=norm_args(fn.get("arguments")),
                        tool_call_id=cid if isinstance(cid, str) else None,
                    )
                )
                res.n_tool_calls += 1
            when = iso_to_epoch(m.get("timestamp"))
            for st in res.steps[first_of_turn:] if when is not None else ():
                st.timestamp = when
            if len(res.steps) > first_of_turn:
                res.steps[first_of_turn].usage = message_usage(m)
                res.steps[first_of_turn].model = message_model(m)
                res.steps[first_of_turn].events.extend(events)
                events = []
        else:  # tool / function reply; "is_error": true marks a failed call (as Anthropic's blocks do)
            _reply(res, m.get("tool_call_id"), text, w, is_error, m.get("is_error") is True)
    res.system = "\n\n".join(p for p in system_parts if p)
    res.trailing_user = "\n\n".join(p for p in pending if p)
    return res


def _reply(
    res: ChatParse,
    cid: Any,
    text: str,
    where: str,
    is_error: Callable[[str], bool] | None,
    flagged: bool = False,
) -> None:
    # A tool reply goes to the oldest unanswered call with its id (ids may be reused once answered),
    # or to the oldest unanswered call when it names none; ``flagged``: the log marks it an error
    # (an Anthropic tool_result's is_error).
    target = next(
        (
            s
            for s in res.steps
            if s.tool_name is not None and s.output is None and (cid is None or s.tool_call_id == cid)
        ),
        None,
    )
    if target is None:
        raise IngestError(f"{where}: tool reply (tool_call_id={cid!r}) matches no unanswered tool call")
    target.output = cap_output(text)
    target.output_is_error = flagged or (bool(is_error(text)) if is_error else False)
    res.n_tool_replies += 1


# ---------------------------------------------------------------- ingester


_SOURCE_NAME = re.compile(r"[a-z0-9][a-z0-9._:-]{0,63}")


def check_log_source(name: Any) -> str:
    """``name`` as the source a log may give its run (an Orchestrator's ``log_source``, e.g.
    ``proxy:claude-cli``): a short plain name (lower-case letters, digits, ``._:-``) that is not an
    ingester's own (a log naming itself ``repolaunch`` would join that harness's splits and filters);
    else ValueError."""
    from dtoc_rl.ingest import INGESTERS  # the package imports this module first

    if not isinstance(name, str) or not _SOURCE_NAME.fullmatch(name):
        raise ValueError(f"a log's source must be a short plain name (a-z, 0-9, '._:-'), got {name!r}")
    if name in {i.name for i in INGESTERS}:
        raise ValueError(f"a log's source must not be an ingester's name, got {name!r}")
    return name


def _logged_source(row: dict) -> str | None:
    """The source a log names for its run (``dtoc_source``, :func:`check_log_source`); None leaves
    the ingester's."""
    try:
        return check_log_source(row["dtoc_source"]) if "dtoc_source" in row else None
    except ValueError:
        return None


def row_label(row: dict) -> tuple[bool | None, str]:
    """A run's outcome and the field it came from (see the module docstring's Labels)."""
    for key in ("success", "pass", "passed", "resolved", "target"):
        if isinstance(row.get(key), bool):
            return row[key], f"row:{key}"
    if row.get("resolved") in (0, 1):  # a number column (SWE-rebench's Parquet; a float one with gaps)
        return row["resolved"] == 1, "row:resolved"
    reward = row.get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        if reward == 1:
            return True, "row:reward==1"
        if reward == 0:
            return False, "row:reward==0"
    return None, ""


class OpenAIChatIngester(Ingester):
    name = "openai-chat"

    def detect(self, path: Path, head: str) -> bool:
        # A .json file is one saved run ({"messages": [...]} or a bare message list), except
        # AutoCodeRover's conversation_round_*.json, pieces of a task folder that ingester owns.
        if path.suffix not in (".jsonl", ".ndjson", ".json") or path.name.startswith("conversation_round_"):
            return False
        start = head.lstrip()[:1]
        if start not in ("{", "["):
            return False
        listed = (_DATASET_RUN.search(head) and _DATASET_ROLE.search(head)) or (
            _LANGCHAIN_RUN.search(head) and _LANGCHAIN_ROLE.search(head) and not _ROLE_RE.search(head)
        )
        as_text = _DATASET_TEXT_RUN.search(head) and _DATASET_TEXT_ROLE.search(head)
        if (listed or as_text) and not _DATASET_FOREIGN.search(head):
            return True
        if not _ROLE_RE.search(head):
            return False
        # an application's log of chat messages, a message per line, may name each one's run
        if (
            path.suffix != ".json"
            and not _FOREIGN_BUT_RUN.search(head)
            and _one_message_per_line(_head_lines(head))
        ):
            return True
        if _FOREIGN.search(head):
            return False
        if '"messages"' in head or re.match(r'\s*\[\s*\{\s*"role"', head) is not None:
            return True
        # Responses items: a list of them, or a run holding them under "input", "items" or "output"
        return _ITEM_RE.search(head) is not None and (
            start == "[" or re.search(r'"(?:input|items|output)"\s*:\s*\[', head) is not None
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        seen: dict[str, int] = {}
        if _json_lines(path):
            lines = iter_jsonl(path)
            head = []  # the lines up to the first that is a message or a run: they decide which file it is
            for line in lines:
                head.append(line)
                if line[2] is None and _line_kind(line[1]) != "header":
                    break
            rows = [row for _, row, err in head if err is None]
            if _one_message_per_line(rows):
                runs = _lines_runs(path, [*head, *lines])
                if len(runs) == 1:
                    yield self.run(path, runs[0], 1, seen, "file")
                    return
                named = [(run["id"], run, None) for run in runs]  # each session fails alone, by its name
                yield from parse_rows(path, named, lambda r, n: self.run(path, r, n, seen, "session"),
                                      unit="session")  # fmt: skip
                return
            lines = itertools.chain(head, lines)  # a run per line: read as they come
            yield from parse_rows(path, lines, lambda r, n: self.run(path, r, n, seen, "line"))
            return
        data = read_json(path)
        if isinstance(data, list) and data and all(isinstance(r, dict) and _is_run(r) for r in data):
            rows = [(i, r, None) for i, r in enumerate(data, 1)]  # a list of runs
            unit = "run"
        else:
            rows = [(1, data, None)]  # one run: an object with "messages", or a bare message list
            unit = "file"
        yield from parse_rows(path, rows, lambda r, n: self.run(path, r, n, seen, unit), unit=unit)

    def file_key(self, path: Path) -> str:
        """The part of a trajectory id that names the file it came from."""
        return path.stem

    def run(self, path: Path, row: Any, number: int, seen: dict[str, int], unit: str) -> Trajectory:
        """One run (row ``number`` of ``path``) as a trajectory; ``seen`` holds the keys used so far
        (:func:`run_key`)."""
        if isinstance(row, list):
            row = {"input": row} if is_item_list(row) else {"messages": row}
        if not isinstance(row, dict):
            raise IngestError(f"row is {type(row).__name__}, expected object or message list")
        row = chat_run(row)
        # a table's missing values (NaN in a float column) are None, not "nan" ids or invalid JSON in extra
        row = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        messages, skipped = _row_messages(row)
        messages, system_key = _with_run_system(row, messages)
        messages, text_actions = as_tool_calls(messages, content_text)
        cp = chat_to_steps(messages)
        if not cp.steps:
            raise IngestError("empty trajectory: no assistant turns")
        check_ids(row)
        rid = row.get("id")
        task_id = row.get("task_id", rid)
        model = row.get("model") or ""
        if not isinstance(model, str):
            raise IngestError(f"'model' is {type(model).__name__}, expected string")
        model = model or run_model(cp.steps, "")  # else the calls' own (a response's "model"), if logged
        key = run_key(seen, str(rid) if rid is not None else f"{unit}{number}", number, cp.steps)
        success, source = row_label(row)
        scalars: dict[str, Any] = {}
        long_fields: dict[str, int] = {}
        for k, v in row.items():
            if k in ("messages", system_key) or not (v is None or isinstance(v, (str, int, float, bool))):
                continue
            if isinstance(v, str) and len(v) > MAX_FIELD_CHARS and not k.startswith("dtoc_"):
                long_fields[k] = len(v)
            else:
                scalars[k] = v
        if long_fields:
            scalars["long_fields"] = json.dumps(long_fields)
        if cp.trailing_user:
            scalars["trailing_user_text"] = cp.trailing_user
        if text_actions:
            scalars["text_actions"] = text_actions
        if skipped:
            scalars["skipped_items"] = json.dumps(dict(sorted(skipped.items())))
        traj = finalize(
            Trajectory(
                traj_id=f"{self.name}/{self.file_key(path)}/{key}",
                source=_logged_source(row) or self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=str(task_id) if task_id is not None else f"{path.stem}:{number}",
                task_text=cp.task,
                system_prompt=cp.system,
                success=success,
                outcome_source=source,
                source_path=str(path),
                extra=json.dumps(scalars),
                steps=cp.steps,
            )
        )
        if row.get("dtoc_visibility") is not None:
            apply_visibility(traj, row["dtoc_visibility"])
        return traj


_ITEM_KEYS = ("input", "items", "output")
#: Where a run keeps its system prompt beside the messages: an Anthropic Messages request's ``system``
#: (text or text blocks), a Responses request's ``instructions``.  Every call is sent it.
_SYSTEM_KEYS = ("system", "instructions")


def _with_run_system(row: dict, messages: Any) -> tuple[Any, str | None]:
    # the run's own system prompt first, unless its messages already open with one; and its key, if used
    key = next((k for k in _SYSTEM_KEYS if row.get(k) not in (None, "", [])), None)
    if key is None or not isinstance(messages, list):
        return messages, None
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") in ("system", "developer"):
        return messages, None
    return [{"role": "system", "content": content_text(row[key], key)}, *messages], key


def _json_lines(path: Path) -> bool:
    """Whether ``path`` holds a JSON value per line: a ``.jsonl`` or ``.ndjson`` file, or one named
    otherwise (an application's ``.log``, given with ``--format``) whose first line is a whole JSON
    value; a ``.json`` file is one value, and so is a JSONL-named one written as one (``one_json_value``)."""
    if path.suffix in (".jsonl", ".ndjson"):
        return not one_json_value(path)
    if path.suffix == ".json":
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = next((line for line in fh if line.strip()), "")
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return True


def _head_lines(head: str) -> list[Any]:
    # the lines of a file's head that are whole JSON values (the last may be cut off; it is then left out)
    rows = []
    for line in head.split("\n"):
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError):  # not JSON, or an integer no reader takes
            continue
    return rows


def _line_kind(row: Any) -> str:
    """What one JSONL row is to :func:`_one_message_per_line`: ``message`` (an object with a chat role and
    no run of its own), ``header`` (an object of other fields, no role), else ``other`` (a run, a
    message list, an object with another role)."""
    if not isinstance(row, dict) or _is_run(row):
        return "other"
    if "role" not in row:
        return "header"
    return "message" if row["role"] in ROLES else "other"


def _one_message_per_line(rows: list[Any]) -> bool:
    """Whether JSONL ``rows`` are one run written a message per line (Goose's session files, a chat
    logged as it went) rather than a run per line: every row a message but for a header before the
    first (the session's fields: no run of its own)."""
    kinds = [_line_kind(r) for r in rows]
    first = next((i for i, k in enumerate(kinds) if k != "header"), len(kinds))
    return first < len(kinds) and all(k == "message" for k in kinds[first:])


#: Fields by which an application's log tells its runs apart when it writes the messages of several,
#: interleaved, a message per line.  (Not ``run_id``: LangChain's names one call, not a conversation.)
RUN_FIELDS = ("session_id", "sessionId", "conversation_id", "conversationId", "thread_id", "threadId")


def _run_name(m: dict, field: str) -> str | None:
    v = m.get(field)
    return str(v) if isinstance(v, str | int) and not isinstance(v, bool) and str(v).strip() else None


def _lines_runs(path: Path, lines: list[tuple[int, Any, str | None]]) -> list[dict]:
    # A message-per-line file as its runs: its header's fields, its messages in order, the file's name as
    # its id unless the header names one.  Messages naming two or more runs (RUN_FIELDS) are as many runs,
    # each with that name as its id and task, in the order they began, and every message must then name
    # its run; one name (a single session's log) changes nothing.  A line that cannot be read loses a
    # message: the file is not read at all rather than read with a hole in a run.
    bad = [f"line {n}: {err}" for n, _, err in lines if err is not None]
    header: dict[str, Any] = {}
    messages: list[tuple[int, dict]] = []
    for n, row, err in lines:
        if err is not None:
            continue
        kind = _line_kind(row)
        if kind == "message":
            messages.append((n, row))
        elif kind == "header" and not messages:
            header.update(row)  # the header: the session's own fields
        else:
            bad.append(f"line {n}: not a chat message")
    field = next(
        (f for f in RUN_FIELDS if len({_run_name(m, f) for _, m in messages} - {None}) > 1), None
    )  # fmt: skip
    if field is not None:
        unnamed = [n for n, m in messages if _run_name(m, field) is None]
        if unnamed:
            bad.append(f"line {unnamed[0]}: names no {field!r} where other messages do (whose run is it?)")
    if bad:
        raise IngestError(f"a run written a message per line, not read: {'; '.join(bad[:5])}", path)
    if field is None:
        return [{**header, "id": header.get("id", path.stem), "messages": [m for _, m in messages]}]
    runs: dict[str, list[dict]] = {}
    for _, m in messages:
        runs.setdefault(_run_name(m, field), []).append({k: v for k, v in m.items() if k != field})
    return [{**header, "id": name, "task_id": header.get("task_id", name), "messages": msgs}
            for name, msgs in runs.items()]  # fmt: skip


def _is_run(row: dict) -> bool:
    # a row with a message column is a run whatever its value (a bad one then fails alone, named)
    return message_column(row) is not None or any(is_item_list(row.get(k)) for k in _ITEM_KEYS)


def _row_messages(row: dict) -> tuple[list, Counter]:
    # A run's chat messages: its "messages", or its Responses items ("input" then "output", or "items";
    # an "input" that is text is the first user message) as messages.
    if "messages" in row:
        return row["messages"], Counter()
    items: list = []
    if isinstance(row.get("input"), str):
        items.append({"role": "user", "content": row["input"]})
    for key in _ITEM_KEYS:
        if is_item_list(row.get(key)):
            items.extend(row[key])
    if not items:
        raise IngestError("row has no 'messages' list and no Responses items ('input', 'items', 'output')")
    rp = responses_to_messages(items, "items")
    return rp.messages, rp.skipped


def apply_visibility(traj: Trajectory, raw: Any) -> None:
    """Set ``masked_before`` and the context events of every step from the ``dtoc_visibility``
    a DTOC orchestrator or env recorder saved with its log (:func:`dtoc_rl.data.chatlog.visibility`:
    step index -> ``{"masked_before": [...] or null, "events": [...]}``, or ``{"hide": [...], "show":
    [...], "events": [...]}`` for what changed since the step before; a step not listed had nothing
    hidden, ``null`` means not known).  A malformed map is an :class:`IngestError`."""
    try:
        vis = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        raise IngestError(f"dtoc_visibility is not JSON: {e}") from None
    if not isinstance(vis, dict):
        raise IngestError(f"dtoc_visibility is {type(vis).__name__}, expected an object")
    n = len(traj.steps)
    plan: dict[int, tuple[Any, list[ContextEvent]]] = {}  # a list, None, or (hide, show)
    version = vis.get(VISIBILITY_FORMAT_KEY, 1)
    if version not in (1, 2) or type(version) is not int:
        raise IngestError(f"dtoc_visibility: format {version!r} is not one this version reads (1 or 2)")
    for k, entry in vis.items():
        if k == VISIBILITY_FORMAT_KEY:
            continue
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and str(int(k)) == k and int(k) < n):
            raise IngestError(f"dtoc_visibility has a bad step index {k!r} (steps 0..{n - 1})")
        i = int(k)
        if not isinstance(entry, dict):
            raise IngestError(f"dtoc_visibility: step {i} is {type(entry).__name__}, expected an object")
        if "hide" in entry or "show" in entry:
            if "masked_before" in entry:
                raise IngestError(f"dtoc_visibility: step {i} has both masked_before and hide/show")
            masked = (
                _steps_before(i, entry.get("hide", []), "hide"),
                _steps_before(i, entry.get("show", []), "show"),
            )
        else:
            masked = entry.get("masked_before", [])
            if masked is not None:
                masked = _steps_before(i, masked, "masked_before")
        events = entry.get("events", [])
        if not isinstance(events, list):
            raise IngestError(f"dtoc_visibility: step {i} events must be a list")
        parsed = []
        for e in events:
            targets = e.get("targets", []) if isinstance(e, dict) else None
            if (
                not isinstance(e, dict)
                or e.get("kind") not in EVENT_KINDS
                or not isinstance(targets, list)
                or not all(type(j) is int and 0 <= j < n for j in targets)
            ):
                raise IngestError(
                    f"dtoc_visibility: step {i} has a bad event {e!r} "
                    f"(kind one of {', '.join(EVENT_KINDS)}; targets: step indices)"
                )
            detail = str(e.get("detail") or "")
            parsed.append(ContextEvent(kind=e["kind"], targets=list(targets), detail=detail))
        plan[i] = (masked, parsed)
    resolved: list[list[int] | None] = []
    prev: list[int] | None = []
    for step in traj.steps:  # a change is read against the step before it, in order
        masked, _ = plan.get(step.index, ([], []))
        if isinstance(masked, tuple):
            hide, show = masked
            if prev is None:
                raise IngestError(f"dtoc_visibility: step {step.index} lists changes to an unknown schedule")
            had = set(prev)
            if had & set(hide) or not set(show) <= had:
                raise IngestError(
                    f"dtoc_visibility: step {step.index} hides a step already hidden or shows one not hidden"
                )
            masked = sorted(had.difference(show).union(hide))
        resolved.append(masked)
        prev = masked
    for step, masked in zip(traj.steps, resolved):  # only once the whole map is known to be good
        step.masked_before = masked
        step.events.extend(plan.get(step.index, ([], []))[1])


def _steps_before(i: int, steps: Any, name: str) -> list[int]:
    """``steps`` of a dtoc_visibility entry of step ``i``: distinct earlier steps, else an error."""
    if not (
        isinstance(steps, list)
        and all(type(j) is int and 0 <= j < i for j in steps)
        and len(set(steps)) == len(steps)
    ):
        what = "null or a list" if name == "masked_before" else "a list"
        raise IngestError(
            f"dtoc_visibility: step {i} {name} must be {what} of distinct earlier steps "
            f"(0..{i - 1}), got {steps!r}"
        )
    return list(steps)


def drop_orphan_replies(msgs: list[dict]) -> int:
    """Drop the tool replies whose call is in no earlier assistant message (a log whose line with the
    call could not be read), in place; how many were dropped.  Only for logs known to have lost
    lines: elsewhere a reply without its call is an error, never guessed."""
    called: set[Any] = set()
    kept = []
    for m in msgs:
        if m.get("role") == "assistant":
            called.update(c.get("id") for c in m.get("tool_calls") or () if isinstance(c, dict))
        if m.get("role") == "tool" and m.get("tool_call_id") not in called:
            continue
        kept.append(m)
    dropped = len(msgs) - len(kept)
    msgs[:] = kept
    return dropped
