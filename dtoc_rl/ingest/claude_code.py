"""Claude Code logs: headless ``--output-format stream-json`` streams and ``~/.claude`` transcripts.

Both carry Anthropic Messages content blocks.  Claude Code writes **one event
per content block**: an assistant message with text + two ``tool_use`` blocks
appears as three ``assistant`` events sharing ``message.id``; results come back
as ``user`` events holding ``tool_result`` blocks (``tool_use_id``,
``content`` string or block list, ``is_error``).  Blocks of one ``message.id``
form one ``turn``; every ``tool_use`` is a step (text on the first, or on a
tool-less step when the turn has no tool call); ``thinking`` → ``reasoning``;
user text between steps → the next step's ``user_text``.  Events of subagents
(stream: ``parent_tool_use_id`` set; transcript: ``isSidechain``) never enter
the main context and are skipped (counted in ``extra``).

**Stream** (``claude-code-stream``): ``system``/``init`` (``model``,
``session_id``, ``tools``, ``claude_code_version``), ``assistant``, ``user``,
and a final ``result`` (``subtype``, ``is_error``, ``num_turns``,
``total_cost_usd``, ``usage``).  Accepted as a plain ``.jsonl`` (one event per
line) or inside the ``*_RESPONSE.md`` reports of the freeideas/vecsum loop,
whose fenced ```` ```json ```` block holds ``{"_START-TIME", "_END-TIME",
"_ELAPSED-SECS", "_RESPONSE": [events]}`` after ``// FULL JSON FROM AI`` lines
(stripped).  The stream has no prompt; for a report the prompt is the text
under ``## Prompt`` of the sibling ``*_PROMPT.md`` with the same label whose
timestamp is closest to ``_START-TIME`` (else the latest one before).

*Labels (stream, weak — MANIFEST §8).*  ``result.subtype == "success"`` only
means the CLI finished, so it is **not** used as ``success`` (kept in
``extra.result_subtype``).  For ``{REQ}_FIX_ATTEMPT<n>`` sessions (the only
ones with a test oracle) ``success`` is the status of the first
``{REQ}_TEST_PASS.md`` / ``{REQ}_TEST_FAIL.md`` report timestamped at or after
the session's RESPONSE and before the next ``{REQ}_FIX_ATTEMPT`` prompt
(``TEST_EXTERNAL_DEPENDENCY_FAILURE`` reports are skipped; the report's
``**Status:**`` line must agree with its name).  ``outcome_source`` names that
report.  All other sessions (requirement rewrites, VERIFY, ...) get None.

**Transcript** (``claude-code-transcript``): ``~/.claude/projects/<project>/
<session>.jsonl``, one record per line: ``user`` / ``assistant`` / ``system``
records with ``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``,
``isSidechain``, ``message`` (and ``toolUseResult`` on tool results), plus
``summary`` (``summary``, ``leafUuid``), ``file-history-snapshot``,
``queue-operation`` and similar bookkeeping lines.  The conversation is the
``parentUuid`` chain that ends at the last main-chain record (so abandoned
branches from rewinds are dropped and counted); a ``compact_boundary`` system
record (``parentUuid: null``) is crossed through its ``logicalParentUuid``.  A
parallel tool call is written as one assistant record per ``tool_use`` block, each
result hanging off the record it answers, so the chain passes through one of them:
the others and their results are put back in file order (``_parallel_siblings``).  A transcript
copied from the middle of a session (its first record's ``parentUuid`` is not in the file) may open
with results of calls made before the copy began: those before its first assistant record are
dropped and counted (``extra.orphan_results_at_start``); a result that answers no call anywhere else
is an error, as a sign of a damaged file.  Two records written on one line without the newline
between them (seen in real transcripts) are both read (``extra.joined_records``); any other bad line
fails the file, naming it.

Compaction: the ``system``/``compact_boundary`` record (``compactMetadata``
``trigger``/``preTokens``) and the following ``isCompactSummary`` user message
become ``ContextEvent("compaction")`` on the next step, targeting every earlier
step; the summary text is that step's ``user_text``.  The ``<system-reminder>`` messages the CLI
sent but did not write in the session's file (hooks' additional context; 2.1.39) are read from the
compacting agent's file and go to the user text of the first call after them
(``extra.reminders_from_compaction``); after the last compaction they are not known.
``"type": "summary"`` lines are **not** compaction: they are session titles for ``/resume`` (often
copied from other sessions), so they go to ``extra.titles``.

Accounting: ``tokens_in`` = input + cache-creation + cache-read tokens,
``tokens_out`` = output tokens (stream: the ``result.usage`` totals; transcript:
summed over distinct ``message.id``); ``api_calls`` = distinct non-synthetic
assistant ``message.id`` values; ``cost_usd`` = what the stream's result events add
(``model_usage_since_last_result``'s ``costUSD``), else ``result.total_cost_usd``, which is the
session's since it began (a resumed run's stream would carry the runs before it), or the sum of
per-record ``costUSD`` when old transcripts have it, else the last ``cost-state`` record's
``totalCostUSD`` (transcript; the session's, so not a sub-agent's file).

Transcripts carry no outcome: ``success`` is None.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, json_error, read_text
from dtoc_rl.ingest.common import cap_output, count, finalize, new_step, number, usage_from
from dtoc_rl.ingest.openai_chat import content_text, iso_to_epoch, written_lines

__all__ = ["ClaudeCodeStreamIngester", "ClaudeCodeTranscriptIngester"]

_FENCE = re.compile(r"```json[^\n]*\n(.*?)\n```", re.DOTALL)
# a fenced JSON block that opens with the loop's marker line or its envelope
_REPORT_BLOCK = re.compile(
    r'^```json[^\n]*\n(?:// FULL JSON FROM AI[^\n]*\n)?\s*\{\s*"(?:_START-TIME|_RESPONSE|type)"', re.M
)
_REPORT = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{3})_(?P<label>.+?)_"
    r"(?P<kind>PROMPT|RESPONSE|TEST_PASS|TEST_FAIL|TEST_EXTERNAL_DEPENDENCY_FAILURE)\.md$"
)
_FIX = re.compile(r"^\{(?P<req>[^}]+)\}_FIX_ATTEMPT\d+$")
_TOOL_USE = ("tool_use", "server_tool_use", "mcp_tool_use")


class _Assembler:
    """Turns Anthropic content blocks, in log order, into steps."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.task: str | None = None
        self.turn = -1
        self.msg_id: object = object()
        self.turn_first: Step | None = None
        self.buf_text: list[str] = []
        self.buf_reason: list[str] = []
        self.turn_ts: float | None = None
        self.pending_user: list[str] = []
        self.pending_events: list[ContextEvent] = []
        self.by_call: dict[str, Step] = {}
        self.turn_ids: dict[int, object] = {}  # turn -> the API message id that made it
        #: a transcript copied from the middle of a session: results before its first call answer calls
        #: made before the copy began; they are dropped (counted here, the first one's error kept)
        self.drop_leading_orphans = False
        self.leading_orphans = 0
        self.first_orphan: str | None = None

    def attach_usage(self, usages: dict[str, dict], models: dict[str, str]) -> None:
        """Each API message's usage and model on the first step of the turn it made."""
        seen: set[int] = set()
        for step in self.steps:
            if step.turn not in seen:
                seen.add(step.turn)
                mid = self.turn_ids.get(step.turn)
                step.usage = usage_from(usages.get(mid)) if isinstance(mid, str) else None
                step.model = models.get(mid) if isinstance(mid, str) else None

    def _add(self, **kw: Any) -> Step:
        step = new_step(
            turn=self.turn,
            timestamp=self.turn_ts,
            user_text="\n\n".join(p for p in self.pending_user if p),
            **kw,
        )
        step.events = self.pending_events
        self.pending_user, self.pending_events = [], []
        self.steps.append(step)
        return step

    def flush(self) -> None:
        """End the current assistant turn; a turn with text but no tool call becomes a step."""
        if self.turn_first is None and (self.buf_text or self.buf_reason):
            self._add(assistant_text="".join(self.buf_text), reasoning="\n".join(self.buf_reason))
        self.buf_text, self.buf_reason = [], []
        self.turn_first = None
        self.msg_id = object()

    def user_text(self, text: str) -> None:
        self.flush()
        if self.task is None and not self.steps:
            self.task = text
        elif text:
            self.pending_user.append(text)

    def assistant_block(self, msg_id: Any, block: Any, ts: float | None, where: str) -> None:
        if msg_id is None or msg_id != self.msg_id:
            self.flush()
            self.msg_id = msg_id if msg_id is not None else object()
            self.turn += 1
            self.turn_ids[self.turn] = self.msg_id
            self.turn_ts = ts
        if not isinstance(block, dict):
            raise IngestError(f"{where} is {type(block).__name__}, expected a content block")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text", "")
            if self.turn_first is not None:
                sep = "\n" if self.turn_first.assistant_text else ""
                self.turn_first.assistant_text += sep + text
            else:
                self.buf_text.append(text)
        elif kind in ("thinking", "redacted_thinking"):
            text = block.get("thinking") or ""
            if self.turn_first is not None:
                self.turn_first.reasoning += ("\n" if self.turn_first.reasoning else "") + text
            else:
                self.buf_reason.append(text)
        elif kind in _TOOL_USE:
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise IngestError(f"{where}: tool_use block without a name")
            first = self.turn_first is None
            step = self._add(
                assistant_text="".join(self.buf_text) if first else "",
                reasoning="\n".join(self.buf_reason) if first else "",
                tool_name=name,
                tool_args=json.dumps(block.get("input") if block.get("input") is not None else {}),
                tool_call_id=block.get("id"),
            )
            if first:
                self.turn_first = step
                self.buf_text, self.buf_reason = [], []
            if isinstance(step.tool_call_id, str):
                self.by_call[step.tool_call_id] = step

    def tool_result(self, block: dict, where: str) -> None:
        tid = block.get("tool_use_id")
        step = self.by_call.get(tid) if isinstance(tid, str) else None
        if step is None and self.drop_leading_orphans and self.turn < 0:  # before the file's first call
            self.leading_orphans += 1
            self.first_orphan = (
                self.first_orphan or f"{where}: tool_result for {tid!r} answers no open tool_use"
            )
            return
        if step is None or step.output is not None:
            raise IngestError(f"{where}: tool_result for {tid!r} answers no open tool_use")
        step.output = cap_output(content_text(block.get("content"), f"{where}.content"))
        step.output_is_error = bool(block.get("is_error"))

    def user_content(self, content: Any, where: str) -> None:
        if isinstance(content, str):
            self.user_text(content)
            return
        if not isinstance(content, list):
            raise IngestError(f"{where} is {type(content).__name__}, expected string or list")
        texts = []
        for j, block in enumerate(content):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self.tool_result(block, f"{where}[{j}]")
            else:
                texts.append(content_text([block], f"{where}[{j}]"))
        if texts:
            self.user_text("".join(texts))


def _cost_since_last_result(result: dict) -> float | None:
    """The dollars a result event adds to the session's (``model_usage_since_last_result``: each
    model's ``costUSD`` since the result before, as Claude Code 2.1.332 writes it), or None."""
    since = result.get("model_usage_since_last_result")
    if not isinstance(since, dict):
        return None
    # {} (no model called since the result before) sums to nothing
    costs = [m.get("costUSD") if isinstance(m, dict) else None for m in since.values()]
    ok = all(isinstance(c, int | float) and not isinstance(c, bool) and c >= 0 for c in costs)
    return float(sum(costs)) if ok else None


def _usage_totals(usages: dict[str, dict]) -> tuple[int | None, int | None]:
    if not usages:
        return None, None

    def total(*keys: str) -> int | None:  # None when a count the log holds is no figure ("12x", 1e999)
        counts = [number(u, k) if u.get(k) is not None else 0 for u in usages.values() for k in keys]
        return None if any(c is None for c in counts) else int(sum(counts))

    return total("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"), total(
        "output_tokens"
    )


def _main_model(models: Counter[str]) -> str:
    real = [(n, m) for m, n in models.items() if m and m != "<synthetic>"]
    return max(real)[1] if real else ""


# ---------------------------------------------------------------- stream-json


def _load_report(path: Path) -> tuple[list, dict]:
    """Events and envelope of a ``*_RESPONSE.md`` report."""
    text = read_text(path)
    m = _FENCE.search(text)
    if m is None:
        raise IngestError("no ```json block in the report", path)
    body = "\n".join(line for line in m.group(1).split("\n") if not line.startswith("// FULL JSON FROM AI"))
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise IngestError(f"invalid JSON in the ```json block: {json_error(e)}", path) from None
    if isinstance(data, list):
        return data, {}
    if not isinstance(data, dict):
        raise IngestError(f"```json block holds {type(data).__name__}, expected object or list", path)
    events = data.get("_RESPONSE")
    if events is None:
        if data.get("type") == "result":  # the session died before streaming anything
            errs = "; ".join(map(str, data.get("errors") or [])) or data.get("subtype", "")
            raise IngestError(f"empty trajectory: no stream events, only a result ({errs})", path)
        raise IngestError("```json block has no '_RESPONSE' event list", path)
    if not isinstance(events, list):
        raise IngestError(f"'_RESPONSE' is {type(events).__name__}, expected a list of events", path)
    return events, {k: v for k, v in data.items() if k != "_RESPONSE"}


def _iso_to_report_ts(value: Any) -> str | None:
    """ISO time → the reports' sortable ``YYYY-MM-DD-HH-MM-SS-mmm`` (UTC)."""
    t = iso_to_epoch(value)
    if t is None:
        return None
    dt = datetime.fromtimestamp(round(t, 3), tz=timezone.utc)
    return dt.strftime("%Y-%m-%d-%H-%M-%S-") + f"{dt.microsecond // 1000:03d}"


def _find_prompt(path: Path, label: str, resp_ts: str, start: str | None) -> tuple[str, str | None]:
    cands = []
    for p in path.parent.glob("*_PROMPT.md"):
        m = _REPORT.match(p.name)
        if m and m.group("label") == label and m.group("ts") <= resp_ts:
            cands.append((m.group("ts"), p))
    if not cands:
        return "", None
    if start is not None:
        ts, p = min(cands, key=lambda c: abs(_ts_seconds(c[0]) - _ts_seconds(start)))
        if abs(_ts_seconds(ts) - _ts_seconds(start)) > 5:
            ts, p = max(cands)
    else:
        ts, p = max(cands)
    text = read_text(p)
    idx = text.find("## Prompt")
    body = text[idx + len("## Prompt") :].lstrip("\n") if idx >= 0 else text
    return body.rstrip("\n"), p.name


def _ts_seconds(ts: str) -> float:
    y, mo, d, h, mi, s, ms = (int(x) for x in ts.split("-"))
    return datetime(y, mo, d, h, mi, s, ms * 1000, tzinfo=timezone.utc).timestamp()


def _fix_label(path: Path, req: str, resp_ts: str) -> tuple[bool | None, str]:
    """First TEST_PASS/TEST_FAIL for ``req`` after the session, before its next fix prompt."""
    reports = []
    next_fix = None
    fix_label = re.compile(r"^\{" + re.escape(req) + r"\}_FIX_ATTEMPT\d+$")
    for p in path.parent.glob("*.md"):
        m = _REPORT.match(p.name)
        if not m or m.group("ts") <= resp_ts:
            continue
        if m.group("kind") == "PROMPT" and fix_label.match(m.group("label")):
            next_fix = min(next_fix or m.group("ts"), m.group("ts"))
        elif m.group("kind").startswith("TEST_") and m.group("label") == "{" + req + "}":
            reports.append((m.group("ts"), m.group("kind"), p))
    for ts, kind, p in sorted(reports):
        if next_fix is not None and ts >= next_fix:
            break
        if kind not in ("TEST_PASS", "TEST_FAIL"):
            continue
        status = re.search(r"\*\*Status:\*\*\s*(PASS|FAIL)", read_text(p))
        if status is None or status.group(1) != kind[5:]:
            continue
        return kind == "TEST_PASS", f"{p.name}: first TEST_PASS/TEST_FAIL for {req} after the session (weak)"
    return None, ""


class ClaudeCodeStreamIngester(Ingester):
    name = "claude-code-stream"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix == ".md":
            return _REPORT_BLOCK.search(head) is not None and (
                "// FULL JSON FROM AI" in head or '"_RESPONSE"' in head
            )
        if path.suffix != ".jsonl":
            return False
        first = head.lstrip().split("\n", 1)[0]
        return (
            '"session_id"' in first
            and re.search(r'"type"\s*:\s*"(?:system|assistant|user|result)"', first) is not None
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        envelope: dict = {}
        torn = False
        if path.suffix == ".md":
            events, envelope = _load_report(path)
        else:
            events = []
            lines, torn = written_lines(path)
            for lineno, ev, err in lines:
                if err is not None:
                    raise IngestError(f"line {lineno}: {err}", path)
                events.append(ev)
        if not events:
            raise IngestError("empty trajectory: the stream has no events", path)
        asm = _Assembler()
        init: dict = {}
        result: dict = {}
        run_costs: list[float | None] = []  # per result event, what it cost since the one before
        models: Counter[str] = Counter()
        call_models: dict[str, str] = {}  # API message id -> the model that wrote it
        usages: dict[str, dict] = {}
        calls: set[str] = set()
        sidechain = 0
        synthetic = 0
        for i, ev in enumerate(events):
            w = f"event {i}"
            if not isinstance(ev, dict):
                raise IngestError(f"{w} is {type(ev).__name__}, expected object", path)
            kind = ev.get("type")
            if ev.get("parent_tool_use_id") is not None:
                sidechain += 1
                continue
            if kind == "system":
                if ev.get("subtype") == "init":
                    init = ev
                elif ev.get("subtype") == "compact_boundary":
                    md = ev.get("compact_metadata") or ev.get("compactMetadata") or {}
                    asm.flush()
                    asm.pending_events.append(
                        ContextEvent(
                            kind="compaction",
                            targets=list(range(len(asm.steps))),
                            detail=json.dumps({"source": "claude-code compact_boundary", **md}),
                        )
                    )
            elif kind == "assistant":
                msg = ev.get("message")
                if not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
                    raise IngestError(f"{w}: assistant event without a message.content list", path)
                model = msg.get("model") or ""
                models[model] += 1
                if model == "<synthetic>":
                    synthetic += 1
                elif msg.get("id"):
                    calls.add(str(msg["id"]))
                    if isinstance(model, str) and model:
                        call_models[str(msg["id"])] = model
                if isinstance(msg.get("usage"), dict) and msg.get("id"):
                    usages[msg["id"]] = msg["usage"]
                for j, block in enumerate(msg["content"]):
                    try:
                        asm.assistant_block(msg.get("id"), block, None, f"{w}.message.content[{j}]")
                    except IngestError as e:
                        raise IngestError(e.reason, path) from None
            elif kind == "user":
                msg = ev.get("message")
                if not isinstance(msg, dict):
                    raise IngestError(f"{w}: user event without a message object", path)
                try:
                    asm.user_content(msg.get("content"), f"{w}.message.content")
                except IngestError as e:
                    raise IngestError(e.reason, path) from None
            elif kind == "result":
                result = ev
                run_costs.append(_cost_since_last_result(ev))
            elif kind is None:
                raise IngestError(f"{w} has no 'type'", path)
        asm.flush()
        if asm.pending_events and asm.steps:
            asm.steps[-1].events.extend(asm.pending_events)
        if not asm.steps:
            raise IngestError("empty trajectory: no assistant content in the stream", path)

        model_raw = init.get("model") or _main_model(models)
        session = init.get("session_id") or result.get("session_id") or path.stem
        task = asm.task or ""
        prompt_file = None
        success, source = None, ""
        m = _REPORT.match(path.name) if path.suffix == ".md" else None
        label = m.group("label") if m else None
        if m:
            start = _iso_to_report_ts(envelope.get("_START-TIME"))
            prompt, prompt_file = _find_prompt(path, label, m.group("ts"), start)
            task = prompt or task
            fix = _FIX.match(label)
            if fix:
                success, source = _fix_label(path, fix.group("req"), m.group("ts"))
        asm.attach_usage(usages, call_models)
        tin, tout = _usage_totals(usages)
        res_usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
        _drop_opening_counts(asm.steps, res_usage)
        if res_usage:
            tin, tout = _usage_totals({"result": res_usage})
        # total_cost_usd is the session's since it began: a resumed run's stream would carry the runs
        # before it; what each result adds since the one before is this stream's own, where told
        cost = result.get("total_cost_usd")
        if run_costs and all(c is not None for c in run_costs):
            cost = sum(run_costs)
        extra = {
            "session_id": session,
            "label": label,
            "prompt_file": prompt_file,
            "result_subtype": result.get("subtype"),
            "result_is_error": result.get("is_error"),
            "num_turns": result.get("num_turns"),
            "duration_ms": result.get("duration_ms"),
            "models": dict(models),
            "synthetic_messages": synthetic,
            "sidechain_events_skipped": sidechain,
            "claude_code_version": init.get("claude_code_version"),
            "start_time": envelope.get("_START-TIME"),
            "end_time": envelope.get("_END-TIME"),
            "trailing_user_text": "\n\n".join(asm.pending_user) or None,
        }
        if torn:  # a session still being written: its last line, cut off, left out
            extra["torn_last_line"] = True
        tid = f"{label}@{m.group('ts')}" if m else str(session)
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{path.parent.parent.name if m else path.parent.name}/{tid}",
                source=self.name,
                model_raw=str(model_raw),
                model_family=normalize_family(str(model_raw)),
                task_id=label or str(session),
                task_text=task,
                system_prompt="",
                success=success,
                outcome_source=source,
                cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
                tokens_in=tin,
                tokens_out=tout,
                api_calls=len(calls) or None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=asm.steps,
            )
        )


# ---------------------------------------------------------------- transcripts


def _drop_opening_counts(steps: list[Step], total: dict | None) -> None:
    """Claude Code 2.1 streams each message's usage as the API opened it (``output_tokens`` 1, before
    a token was written; the transcript has the final counts): when every call says at most 1 and the
    run's result counts more, the calls' output counts are not known (None), not 1."""
    logged = [st.usage for st in steps if st.usage is not None and st.usage.output_tokens is not None]
    whole = count(total or {}, "output_tokens")
    if logged and whole and all(u.output_tokens <= 1 for u in logged) and whole > len(logged):
        for u in logged:
            u.output_tokens = None


def _agent_meta(path: Path) -> dict:
    """A sub-agent transcript's ``agent-<id>.meta.json`` (its type, the tool call that spawned it), or
    {} when there is none or it cannot be read."""
    meta = path.with_name(path.stem + ".meta.json")
    try:
        data = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _chain(records: list[dict]) -> tuple[list[dict], int]:
    """The active conversation: the parentUuid chain ending at the last main-chain record."""
    by_uuid = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
    convo = [
        r
        for r in records
        if r.get("type") in ("user", "assistant", "system") and isinstance(r.get("uuid"), str)
    ]
    if not convo:
        return [], 0
    main = [r for r in convo if not r.get("isSidechain")]
    leaf = (main or convo)[-1]
    chain = []
    seen: set[str] = set()
    cur: dict | None = leaf
    while cur is not None and cur["uuid"] not in seen:
        seen.add(cur["uuid"])
        chain.append(cur)
        parent = cur.get("parentUuid")
        if parent is None and cur.get("subtype") == "compact_boundary":
            parent = cur.get("logicalParentUuid")
            if parent not in by_uuid:
                # a boundary whose logical parent was never written (Claude Code 2.1.39): the conversation
                # before it goes on from the last main-chain record written before it, not ends there
                parent = _written_before(main or convo, cur)
        cur = by_uuid.get(parent) if isinstance(parent, str) else None
    chain.reverse()
    recovered = _parallel_siblings(convo, chain, seen, bool(leaf.get("isSidechain")))
    if recovered:  # back in file order: a record is always written after its parent
        order = {id(r): i for i, r in enumerate(records)}
        chain = sorted(chain + recovered, key=lambda r: order[id(r)])
        seen.update(r["uuid"] for r in recovered)
    dropped = sum(1 for r in (main or convo) if r["uuid"] not in seen)
    return chain, dropped


def _compaction_reminders(path: Path, chain: list[dict]) -> list[tuple[float, str]]:
    """The ``<system-reminder>`` messages (a hook's additional context, its blocking errors) that the
    session's model was sent but its transcript does not hold, by the time they were written.  Claude
    Code 2.1.39 writes none of them in the session's file; the file of the agent that compacted it
    (``<session>/subagents/agent-acompact-*.jsonl``) was sent the conversation it summarised and writes
    them as user records of its own (beside its instructions to summarise, which are no reminder)."""
    folder = path.with_suffix("") / "subagents"
    if not folder.is_dir():
        return []
    held = {_held_text(r) for r in chain if r.get("type") == "user"}
    # the agent's records carry the session's id (2.1.39): a file copied in from another session is not read
    sid = next((r["sessionId"] for r in chain if isinstance(r.get("sessionId"), str)), None)
    found: set[tuple[float, str]] = set()
    for f in sorted(folder.glob("agent-acompact-*.jsonl")):
        try:
            lines, _ = written_lines(f)
        except (OSError, IngestError):
            continue  # a compaction agent's file is read for what it adds; the session's stands without it
        for _, rec, err in lines:
            if (
                err is not None
                or not isinstance(rec, dict)
                or (sid and rec.get("sessionId") not in (None, sid))
            ):
                continue
            msg = rec.get("message")
            text = msg.get("content") if isinstance(msg, dict) and rec.get("type") == "user" else None
            ts = iso_to_epoch(rec.get("timestamp")) if isinstance(text, str) else None
            if ts is not None and text.lstrip().startswith("<system-reminder>") and text.strip() not in held:
                found.add((ts, text))
    return sorted(found)


def _held_text(rec: dict) -> str:
    # a user record's text however its content is shaped (a string, or text blocks), to compare with
    try:
        return content_text(rec["message"].get("content"), "held").strip()
    except (IngestError, AttributeError):
        return ""


def _written_before(convo: list[dict], boundary: dict) -> str | None:
    """The uuid of the last record of ``convo`` (file order) before ``boundary``, None when it is first."""
    before = None
    for r in convo:
        if r is boundary:
            return before
        before = r["uuid"]
    return None


def _blocks(r: dict) -> list:
    msg = r.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _parallel_siblings(
    convo: list[dict], chain: list[dict], on_chain: set[str], sidechain: bool
) -> list[dict]:
    """Records of one parallel tool call that the parentUuid chain skips.  Claude Code writes each
    ``tool_use`` block of a reply as an assistant record of its own (one ``message.id``) and hangs each
    result off the record it answers, so walking back from the leaf passes through the last call's
    branch only: the other calls' results (and a sibling record after the one the chain took) are off
    it, though the model saw them.  Kept: an off-chain assistant record with the ``message.id`` of a
    chain record (one reply is one API response, whatever record a sibling was hung off: a sub-agent
    writes its records while its tools run), and an off-chain user record whose ``tool_result`` answers
    a ``tool_use`` of the chain that nothing on the chain answers, hanging off a record of the chain or
    kept here.  Only records on the chain's side: a sub-agent's transcript is all ``isSidechain``
    records, the main session's none."""
    msg_ids = {
        r["message"].get("id")
        for r in chain
        if r.get("type") == "assistant" and isinstance(r.get("message"), dict)
    }
    msg_ids.discard(None)
    kept: list[dict] = []
    near = set(on_chain)
    calls = {
        b.get("id")
        for r in chain
        if r.get("type") == "assistant"
        for b in _blocks(r)
        if b.get("type") == "tool_use"
    }
    for r in convo:  # one reply's records: a call of its own wherever it hangs (a sub-agent writes while
        # its tools run), anything else (a copy of a call, text) only off a record of the chain or kept
        if r["uuid"] in near or bool(r.get("isSidechain")) != sidechain:
            continue
        if r.get("type") != "assistant" or not isinstance(r.get("message"), dict):
            continue
        if r["message"].get("id") not in msg_ids:
            continue
        own = {b.get("id") for b in _blocks(r) if b.get("type") == "tool_use"} - {None}
        if (own and not own & calls) or r.get("parentUuid") in near:
            kept.append(r)
            near.add(r["uuid"])
            calls |= own
    asked = calls  # the chain's calls and those kept above
    answered = {
        b.get("tool_use_id")
        for r in chain
        if r.get("type") == "user"
        for b in _blocks(r)
        if b.get("type") == "tool_result"
    }
    open_ = asked - answered - {None}
    for r in convo:
        if (
            r["uuid"] in near
            or r.get("parentUuid") not in near
            or r.get("type") != "user"
            or bool(r.get("isSidechain")) != sidechain
        ):
            continue
        ids = {b.get("tool_use_id") for b in _blocks(r) if b.get("type") == "tool_result"}
        if ids and ids <= open_:
            kept.append(r)
            near.add(r["uuid"])
            open_ -= ids
    return kept


class ClaudeCodeTranscriptIngester(Ingester):
    name = "claude-code-transcript"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix != ".jsonl":
            return False
        has_ids = '"parentUuid"' in head and '"sessionId"' in head
        summary_only = re.match(r'\s*\{\s*"type"\s*:\s*"summary"', head) is not None and '"leafUuid"' in head
        return has_ids or summary_only

    def parse(self, path: Path) -> Iterator[Trajectory]:
        records: list[dict] = []
        lines, torn = written_lines(path)
        for lineno, rec, err in lines:
            if err is not None:
                raise IngestError(f"line {lineno}: {err}", path)
            if not isinstance(rec, dict):
                raise IngestError(f"line {lineno} is {type(rec).__name__}, expected object", path)
            if rec.get("type") in ("user", "assistant") and not isinstance(rec.get("message"), dict):
                raise IngestError(f"line {lineno}: {rec['type']} record without a 'message' object", path)
            rec["_line"] = lineno
            records.append(rec)
        if not records:
            raise IngestError("empty file: no JSON lines", path)
        chain, dropped = _chain(records)
        uuids = {r.get("uuid") for r in records}
        # a transcript copied from the middle of a session: its first record's parent is not in it
        cut_in = (
            bool(chain)
            and isinstance(chain[0].get("parentUuid"), str)
            and chain[0]["parentUuid"] not in uuids
        )
        titles = [
            r.get("summary") for r in records if r.get("type") == "summary" and r.get("leafUuid") in uuids
        ]
        asm = _Assembler()
        asm.drop_leading_orphans = cut_in
        models: Counter[str] = Counter()
        call_models: dict[str, str] = {}  # API message id -> the model that wrote it
        usages: dict[str, dict] = {}
        cost = 0.0
        has_cost = False
        session = next((r.get("sessionId") for r in chain if r.get("sessionId")), None)
        agent_id = next((r.get("agentId") for r in chain if r.get("agentId")), None)
        sidechain_file = bool(chain) and all(r.get("isSidechain") for r in chain)
        compact_md: dict | None = None
        n_compactions = 0
        synthetic_ids: set[str] = set()
        reminders = [] if sidechain_file else _compaction_reminders(path, chain)
        n_reminders = 0
        last_msg: object = None
        for rec in chain:
            w = f"line {rec['_line']}"
            kind = rec.get("type")
            ts = iso_to_epoch(rec.get("timestamp"))
            if reminders and kind == "assistant" and rec["message"].get("id") != last_msg and ts is not None:
                # a reminder goes with the first call made after it was written, never inside a reply
                while reminders and reminders[0][0] < ts:
                    if asm.steps:  # one before the first call would be taken for the task
                        asm.flush()
                        asm.pending_user.append(reminders[0][1])
                        n_reminders += 1
                    reminders.pop(0)
            if kind == "assistant":
                last_msg = rec["message"].get("id")
            try:
                if kind == "system":
                    if rec.get("subtype") == "compact_boundary":
                        compact_md = rec.get("compactMetadata") or {}
                        # reminders written since the last call went to the compacting agent only
                        while reminders and ts is not None and reminders[0][0] < ts:
                            reminders.pop(0)
                elif kind == "user":
                    msg = rec["message"]
                    if rec.get("isCompactSummary"):
                        asm.flush()
                        n_compactions += 1
                        asm.pending_events.append(
                            ContextEvent(
                                kind="compaction",
                                targets=list(range(len(asm.steps))),
                                detail=json.dumps(
                                    {"source": "claude-code compact_boundary", **(compact_md or {})}
                                ),
                            )
                        )
                        compact_md = None
                        asm.pending_user.append(content_text(msg.get("content"), f"{w}.message.content"))
                    else:
                        asm.user_content(msg.get("content"), f"{w}.message.content")
                elif kind == "assistant":
                    msg = rec["message"]
                    content = msg.get("content")
                    if not isinstance(content, list):
                        raise IngestError(
                            f"{w}: assistant message.content is {type(content).__name__}, expected list"
                        )
                    model = msg.get("model") or ""
                    models[model] += 1
                    if model == "<synthetic>" and msg.get("id"):
                        synthetic_ids.add(msg["id"])
                    elif isinstance(model, str) and model and isinstance(msg.get("id"), str):
                        call_models[msg["id"]] = model
                    if isinstance(msg.get("usage"), dict) and msg.get("id"):
                        usages[msg["id"]] = msg["usage"]
                    if isinstance(rec.get("costUSD"), (int, float)):
                        cost += rec["costUSD"]
                        has_cost = True
                    for j, block in enumerate(content):
                        asm.assistant_block(msg.get("id"), block, ts, f"{w}.message.content[{j}]")
            except IngestError as e:
                raise IngestError(e.reason, path) from None
        asm.flush()
        if asm.pending_events and asm.steps:
            asm.steps[-1].events.extend(asm.pending_events)
        if not has_cost and not sidechain_file:
            # newer CLIs keep the session's running total in ``cost-state`` records (the CLI's own figure;
            # a model it has no price for leaves it short, so then none)
            state = [r for r in records if r.get("type") == "cost-state" and r.get("sessionId") == session]
            if state and not state[-1].get("hasUnknownModelCost"):
                total = number(state[-1], "totalCostUSD")
                if total is not None:
                    cost, has_cost = total, True
        if not asm.steps:
            if asm.first_orphan:  # nothing but results of calls not in the file: that is what is wrong
                raise IngestError(asm.first_orphan, path)
            raise IngestError("empty trajectory: no assistant messages on the conversation chain", path)
        model_raw = _main_model(models)
        asm.attach_usage(usages, call_models)
        tin, tout = _usage_totals(usages)
        sid = str(session or path.stem)
        extra = {
            "session_id": session,
            "agent_id": agent_id,
            "sidechain_file": sidechain_file,
            "cwd": next((r.get("cwd") for r in chain if r.get("cwd")), None),
            "version": next((r.get("version") for r in chain if r.get("version")), None),
            "git_branch": next((r.get("gitBranch") for r in chain if r.get("gitBranch")), None),
            "titles": titles,
            "models": dict(models),
            "records": len(records),
            "off_chain_records": dropped,
            "compactions": n_compactions,
            "reminders_from_compaction": n_reminders,
            "trailing_user_text": "\n\n".join(asm.pending_user) or None,
        }
        if torn:  # a session still being written: its last line, cut off, left out
            extra["torn_last_line"] = True
        if asm.leading_orphans:  # copied from the middle of a session: results of calls made before it
            extra["orphan_results_at_start"] = asm.leading_orphans
        joined = len(records) - len({r["_line"] for r in records})
        if joined:  # records written on one line, back to back, each read
            extra["joined_records"] = joined
        # a session forked on resume (--fork-session) copies the calls before the fork, each naming
        # the session its request was made in: the newest such is the one it was forked from
        made_in = [
            r["requestSessionId"]
            for r in chain
            if r.get("type") == "assistant"
            and isinstance(r.get("requestSessionId"), str)
            and r["requestSessionId"] not in ("", session)
        ]
        if made_in:
            extra["forked_from"] = made_in[-1]
        meta = _agent_meta(path) if sidechain_file else {}
        if meta:  # the call of the main agent that spawned it (Claude Code 2.1 writes it beside)
            extra["agent_type"] = meta.get("agentType")
            extra["parent_tool_use_id"] = meta.get("toolUseId")
        tid = f"{sid}/{agent_id}" if sidechain_file and agent_id else sid
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{tid}",
                source=self.name,
                model_raw=model_raw,
                model_family=normalize_family(model_raw),
                task_id=sid,
                task_text=asm.task or "",
                system_prompt="",
                success=None,
                outcome_source="",
                cost_usd=cost if has_cost else None,
                tokens_in=tin,
                tokens_out=tout,
                api_calls=len(set(usages) - synthetic_ids) or None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=asm.steps,
            )
        )
