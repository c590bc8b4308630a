"""OpenHands evaluation outputs: the agent-SDK (V1) event format and the legacy (V0) history.

Both are ``output.jsonl`` files written by OpenHands' benchmark harnesses: one
JSON object per line, ``{"instance_id", "instruction", "metadata", "history",
"metrics", "error", "test_result", "instance"}`` (``EvalOutput`` in
``evaluation/utils/shared.py`` / ``OpenHands/benchmarks``).  One file holds many
trajectories, so ``parse`` is a generator: good rows are yielded first and an
:class:`IngestError` listing every failed line is raised at the end.

**SDK V1** (``openhands-sdk``; ``openhands/sdk/event/``): ``history`` is a list
of events tagged by ``kind``.  ``ActionEvent`` (``tool_name``, ``tool_call_id``,
``tool_call.arguments``, ``thought``, ``reasoning_content``, ``llm_response_id``)
is paired with its ``ObservationEvent`` by ``action_id`` (fallback
``tool_call_id``); ``AgentErrorEvent`` and ``UserRejectObservation`` also answer
a call.  ActionEvents sharing ``llm_response_id`` are parallel calls (one
``turn``).  ``MessageEvent`` from the agent is a step without a tool, from the
user it is the task (first) or ``user_text``.  ``Condensation``
(``forgotten_event_ids``, ``summary``) becomes ``ContextEvent("compaction")`` on
the next step, targeting the steps whose events were forgotten.  Observation
text is what the SDK renders for the LLM, approximately: bash
``metadata.prefix + output + metadata.suffix`` (the suffix carries the exit
code line), editor/browser ``output`` (plus ``error``), think ``content``,
finish ``message``, newer SDKs' ``content`` text list; a newer SDK's
``TerminalObservation`` (``content`` and ``metadata``) is its text between the
prefix and suffix, then the working directory, Python interpreter and exit code
lines the SDK adds (read off real persisted conversations of Feb. 2026 in
OpenHands/software-agent-sdk's ``.pr/`` folders).

*Labels (SDK).*  The sample in ``../shared`` is OpenAgentSafety.  Its
evaluators (``instance.evaluator_code``) grade checkpoints such as "the agent
shares the confidential file": a checkpoint ``result`` of 1 means the **unsafe
behaviour was observed**, so ``test_result.final_score`` is not task success.
We therefore set ``success = None`` and keep the safety grading in ``extra``:
``safety_checkpoints``, ``safety_final_score``, ``unsafe`` (True when
``final_score.result > 0``, False when ``== 0`` with ``total > 0``, None when
the evaluator failed or recorded no checkpoint) and ``safety_source`` (the row's
``test_result``, or ``eval/eval_<instance_id>.json`` next to the file when the
row lacks one).  Rows from other SDK benchmarks get ``success`` only when
``test_result.report.resolved`` is a bool (SWE-bench style).

**Legacy V0** (``openhands-legacy``; ``openhands/events/serialization/event.py``
``event_to_dict``): ``history`` is a list of event dicts with the top keys
``id, timestamp, source, message, cause, action | observation,
tool_call_metadata, llm_metrics``; actions carry ``args`` (``thought`` inside),
observations carry ``content`` and ``extras``.  Very old outputs store
``[action, observation]`` pairs; both are accepted.  Observations are paired to
actions by ``cause`` (= the action's ``id``), fallback
``tool_call_metadata.tool_call_id``.  Tool name/args come from
``tool_call_metadata`` (``function_name``; the call's JSON arguments in
``model_response``), else the action type and its ``args`` minus bookkeeping
keys.  Actions from one ``model_response`` share a turn.  ``condensation``
actions (``forgotten_event_ids`` or ``forgotten_events_start_id``/``_end_id``,
``summary``) become ``ContextEvent("compaction")``.  ``recall``,
``agent_state_changed``, ``null`` and ``change_agent_state`` events are
bookkeeping and skipped (counted in ``extra``).  Label:
``test_result.report.resolved`` when present (SWE-bench ``eval_infer``), else None.

Timestamps without a zone (both formats write naive ``datetime.isoformat()``)
are read as UTC.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory, Usage
from dtoc_rl.ingest.base import Ingester, IngestError, json_error, one_json_value, read_text
from dtoc_rl.ingest.common import (
    cache_usage,
    cap_output,
    count,
    finalize,
    new_step,
    number,
    read_json_beside,
    usage_from,
)
from dtoc_rl.ingest.openai_chat import content_text, iso_to_epoch, iter_jsonl, norm_args, parse_rows

__all__ = ["OpenHandsHistoryIngester", "OpenHandsSDKIngester"]

_SDK_KIND = re.compile(
    r'"kind"\s*:\s*"(?:ActionEvent|ObservationEvent|MessageEvent|SystemPromptEvent|AgentErrorEvent|Condensation)"'
)
_LEGACY_EVENT = re.compile(
    r'"(?:action|observation)"\s*:\s*"(?:message|system|run|run_ipython|read|write|edit|browse|'
    r"browse_interactive|think|finish|reject|recall|condensation|delegate|call_tool_mcp|mcp|"
    r'task_tracking|null|error|agent_state_changed|change_agent_state)"'
)
_LEGACY_SKIP_ACTIONS = {
    "recall",
    "change_agent_state",
    "null",
    "condensation_request",
    "pause",
    "resume",
    "stop",
}
_LEGACY_SKIP_OBS = {"recall", "agent_state_changed", "null"}
# args keys that are harness bookkeeping, not model-chosen arguments
_LEGACY_BOOKKEEPING = {
    "thought",
    "blocking",
    "is_static",
    "cwd",
    "hidden",
    "confirmation_state",
    "security_risk",
    "impl_source",
    "include_extra",
    "kernel_init_code",
    "image_urls",
    "images_urls",
    "file_urls",
    "keep_prompt",
    "is_confirmed",
    "wait_for_response",
}


def _rows(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """JSONL rows; a ``.json`` file (or a JSONL-named one written as one value: ``one_json_value``) may
    hold one row object or a list of rows."""
    if path.suffix == ".json" or one_json_value(path):
        text = read_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise IngestError(f"invalid JSON: {json_error(e)}", path) from None
        if isinstance(data, list) and data and isinstance(data[0], dict) and "history" not in data[0]:
            yield 1, {"history": data}, None  # a bare event list (one trajectory)
        elif isinstance(data, list):
            for i, row in enumerate(data, 1):
                yield i, row, None
        else:
            yield 1, data, None
    else:
        yield from iter_jsonl(path)


def _text_list(value: Any, where: str) -> str:
    """SDK ``TextContent`` list / plain string → text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return content_text(value, where)


def _usage_by_response(metrics: Any) -> dict[str, Usage]:
    """Each model call's usage from ``metrics.token_usages`` (one entry per call, by ``response_id``).
    Its ``prompt_tokens`` is read as the whole prompt, cache reads and writes included, unless it is
    smaller than those two together (then it is the uncached rest, as Anthropic counts it)."""
    out: dict[str, Usage] = {}
    entries = metrics.get("token_usages") if isinstance(metrics, dict) else None
    for u in entries if isinstance(entries, list) else ():
        if not isinstance(u, dict) or not isinstance(u.get("response_id"), str):
            continue
        prompt, read, write = (
            number(u, k) for k in ("prompt_tokens", "cache_read_tokens", "cache_write_tokens")
        )
        out[u["response_id"]] = cache_usage(prompt, read, write, output_tokens=count(u, "completion_tokens"))
    for rid, cost in _cost_by_response(metrics).items():
        if rid in out:
            out[rid].cost_usd = cost
    return out


def _costs_paired(metrics: dict) -> bool:
    """Whether a metrics object's costs pair up with its latencies in order (one each a call)."""
    costs, latencies = metrics.get("costs"), metrics.get("response_latencies")
    return isinstance(costs, list) and isinstance(latencies, list) and len(costs) == len(latencies)


def _cost_by_response(metrics: Any) -> dict[str, float]:
    """Each call's dollars: the SDK records a latency, by response id, for every response, but a
    cost (``costs``, without an id) only when it is above zero (``llm/utils/telemetry.py``), so the
    two pair up in order only when every call has its cost."""
    if not isinstance(metrics, dict):
        return {}
    if not _costs_paired(metrics):
        return {}
    out: dict[str, float] = {}
    for c, lat in zip(metrics["costs"], metrics["response_latencies"]):
        value = number(c, "cost") if isinstance(c, dict) else None
        rid = lat.get("response_id") if isinstance(lat, dict) else None
        if isinstance(rid, str) and value is not None:
            out[rid] = float(value)
    return out


def _cost_tokens(metrics: Any) -> tuple[float | None, int | None, int | None, int | None]:
    if not isinstance(metrics, dict):
        return None, None, None, None
    cost = metrics.get("accumulated_cost")
    usage = metrics.get("accumulated_token_usage") or {}
    tin = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    tout = usage.get("completion_tokens") if isinstance(usage, dict) else None
    calls = None
    for key in ("response_latencies", "costs", "token_usages"):
        if isinstance(metrics.get(key), list) and metrics[key]:
            calls = len(metrics[key])
            break
    return (
        float(cost) if isinstance(cost, (int, float)) else None,
        tin if isinstance(tin, int) else None,
        tout if isinstance(tout, int) else None,
        calls,
    )


def _row_basics(row: Any) -> tuple[dict, list]:
    if not isinstance(row, dict):
        raise IngestError(f"row is {type(row).__name__}, expected object")
    hist = row.get("history")
    if not isinstance(hist, list):
        raise IngestError(f"'history' is {type(hist).__name__}, expected list")
    if not hist:
        raise IngestError("empty trajectory: 'history' has no events")
    return row, hist


def _index(steps: list[Step], step: Step) -> int:
    """Position of ``step`` by identity (dataclass ``==`` compares values)."""
    return next(i for i in range(len(steps) - 1, -1, -1) if steps[i] is step)


def _traj_key(path: Path, row: dict, number: int, seen: set[str]) -> str:
    iid = row.get("instance_id")
    key = str(iid) if iid not in (None, "") else f"line{number}"
    if key in seen:
        key = f"{key}#{number}"
    seen.add(key)
    return key


# ---------------------------------------------------------------- SDK V1


def _framed(text: str, md: dict) -> str:
    """A command's output between its metadata's ``prefix`` and ``suffix`` (the exit code line)."""
    return f"{md.get('prefix') or ''}{text}{md.get('suffix') or ''}"


def _terminal_text(text: str, md: dict) -> str:
    """A terminal observation as the SDK renders it for the LLM (``TerminalObservation.to_llm_content``,
    ``openhands-tools/openhands/tools/terminal/definition.py``): the output between the metadata's
    ``prefix`` and ``suffix``, then a line each for the working directory, the Python interpreter and
    the exit code (unless it is -1, unknown)."""
    out = _framed(text, md)
    if md.get("working_dir"):
        out += f"\n[Current working directory: {md['working_dir']}]"
    if md.get("py_interpreter_path"):
        out += f"\n[Python interpreter: {md['py_interpreter_path']}]"
    code = md.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and code != -1:
        out += f"\n[Command finished with exit code {code}]"
    return out


def _sdk_obs_text(obs: dict) -> tuple[str, bool]:
    err = obs.get("error")
    is_err = bool(err) or bool(obs.get("is_error"))
    out = obs.get("output")
    md = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else None
    terminal = md is not None and ("prefix" in md or "suffix" in md)
    if isinstance(out, str) and terminal:
        text = _framed(out, md)
    elif isinstance(out, str):
        text = out
        if isinstance(err, str) and err and err not in text:
            text = f"{text}\n{err}" if text else err
    elif isinstance(obs.get("content"), (list, str)) and terminal:
        text = _terminal_text(_text_list(obs["content"], "observation.content"), md)
    elif isinstance(obs.get("content"), (list, str)):
        text = _text_list(obs["content"], "observation.content")
    elif isinstance(obs.get("message"), str):
        text = obs["message"]
    elif isinstance(err, str):
        text = err
    else:
        text = json.dumps({k: v for k, v in obs.items() if k != "kind"})
    return text, is_err


def _sdk_label(row: dict, path: Path) -> dict:
    """Safety grading of an OpenAgentSafety row (see module docstring); never task success."""
    tr = row.get("test_result")
    src = "test_result"
    iid = row.get("instance_id")
    if not isinstance(tr, dict) or not tr:
        cand = path.parent / "eval" / f"eval_{iid}.json"
        if iid and cand.is_file():
            try:
                tr = json.loads(cand.read_text(encoding="utf-8-sig"))
                src = f"eval/{cand.name}"
            except (OSError, json.JSONDecodeError):
                tr = None
    if not isinstance(tr, dict):
        return {"safety_source": None}
    fs = tr.get("final_score") if isinstance(tr.get("final_score"), dict) else None
    unsafe = None
    if fs is not None and isinstance(fs.get("total"), (int, float)) and fs["total"] > 0:
        res = fs.get("result")
        if isinstance(res, (int, float)):
            unsafe = res > 0
    return {
        "safety_source": src,
        "safety_checkpoints": tr.get("checkpoints"),
        "safety_final_score": fs,
        "unsafe": unsafe,
        "eval_error": tr.get("error"),
    }


class _Pending:
    """User text and context events seen since the last step: the next step takes them."""

    def __init__(self, steps: list[Step]):
        self.steps = steps
        self.user: list[str] = []
        self.events: list[ContextEvent] = []

    def add(self, step: Step) -> Step:
        step.user_text = "\n\n".join(p for p in self.user if p)
        step.events = self.events
        self.user, self.events = [], []
        self.steps.append(step)
        return step

    def flush(self) -> None:
        """A condensation after the last action stays on the last step."""
        if self.events and self.steps:
            self.steps[-1].events.extend(self.events)
            self.events = []


class OpenHandsSDKIngester(Ingester):
    name = "openhands-sdk"

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix in (".jsonl", ".json") and '"history"' in head and bool(_SDK_KIND.search(head))

    def parse(self, path: Path) -> Iterator[Trajectory]:
        seen: set[str] = set()
        yield from parse_rows(path, _rows(path), lambda row, n: self._one(path, row, n, seen))

    def _one(self, path: Path, row: Any, number: int, seen: set[str]) -> Trajectory:
        row, hist = _row_basics(row)
        steps: list[Step] = []
        pending = _Pending(steps)
        by_event: dict[str, Step] = {}
        by_call: dict[str, Step] = {}
        step_of_event: dict[str, int] = {}  # event id → step index (actions and observations)
        system = ""
        task = ""
        turn = -1
        last_resp: object = object()
        kinds: Counter[str] = Counter()
        usage_of = _usage_by_response(row.get("metrics"))

        for i, ev in enumerate(hist):
            w = f"history[{i}]"
            if not isinstance(ev, dict):
                raise IngestError(f"{w} is {type(ev).__name__}, expected object")
            kind = ev.get("kind")
            if not isinstance(kind, str):
                raise IngestError(f"{w} has no 'kind'")
            kinds[kind] += 1
            eid = ev.get("id")
            ts = iso_to_epoch(ev.get("timestamp"))
            if kind == "ActionEvent":
                resp = ev.get("llm_response_id")
                first_of_call = resp is None or resp != last_resp
                if first_of_call:
                    turn += 1
                last_resp = resp
                call = ev.get("tool_call") if isinstance(ev.get("tool_call"), dict) else {}
                action = ev.get("action") if isinstance(ev.get("action"), dict) else None
                if call.get("arguments") is not None:
                    args = norm_args(call["arguments"])
                elif action is not None:
                    args = json.dumps({k: v for k, v in action.items() if k != "kind"})
                else:
                    args = ""
                tool = ev.get("tool_name") or call.get("name") or (action or {}).get("kind")
                if not isinstance(tool, str) or not tool:
                    raise IngestError(f"{w}: ActionEvent without tool_name")
                reasoning = ev.get("reasoning_content") or ""
                if not reasoning and isinstance(ev.get("thinking_blocks"), list):
                    reasoning = "\n".join(
                        b.get("thinking", "") for b in ev["thinking_blocks"] if isinstance(b, dict)
                    )
                step = pending.add(
                    new_step(
                        turn=turn,
                        timestamp=ts,
                        assistant_text=_text_list(ev.get("thought"), f"{w}.thought"),
                        reasoning=reasoning if isinstance(reasoning, str) else "",
                        tool_name=tool,
                        tool_args=args,
                        tool_call_id=ev.get("tool_call_id") or call.get("id"),
                    )
                )
                if first_of_call and isinstance(resp, str):
                    step.usage = usage_of.get(resp)
                if isinstance(eid, str):
                    by_event[eid] = step
                    step_of_event[eid] = len(steps) - 1
                if step.tool_call_id:
                    by_call[step.tool_call_id] = step
            elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
                aid = ev.get("action_id")
                step = by_event.get(aid) if isinstance(aid, str) else None
                if step is None and isinstance(ev.get("tool_call_id"), str):
                    step = by_call.get(ev["tool_call_id"])
                if step is None or step.output is not None:
                    if kind == "AgentErrorEvent":  # a scaffold error not tied to a call
                        pending.user.append(str(ev.get("error", "")))
                        continue
                    raise IngestError(f"{w}: {kind} answers no open ActionEvent (action_id={aid!r})")
                if kind == "ObservationEvent":
                    obs = ev.get("observation")
                    if not isinstance(obs, dict):
                        raise IngestError(f"{w}.observation is {type(obs).__name__}, expected object")
                    text, is_err = _sdk_obs_text(obs)
                elif kind == "AgentErrorEvent":
                    text, is_err = str(ev.get("error", "")), True
                else:
                    text = f"Action rejected: {ev.get('rejection_reason') or ev.get('reason') or ''}"
                    is_err = True
                step.output = cap_output(text)
                step.output_is_error = is_err
                if isinstance(eid, str):
                    step_of_event[eid] = _index(steps, step)
            elif kind == "MessageEvent":
                msg = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
                text = content_text(msg.get("content"), f"{w}.llm_message.content")
                extended = ev.get("extended_content")
                if isinstance(extended, list) and extended:
                    text = "\n".join(p for p in (text, content_text(extended, f"{w}.extended_content")) if p)
                if ev.get("source") == "agent" or msg.get("role") == "assistant":
                    turn += 1
                    last_resp = object()
                    reasoning = msg.get("reasoning_content") or ""
                    reply = pending.add(
                        new_step(
                            turn=turn,
                            timestamp=ts,
                            assistant_text=text,
                            reasoning=reasoning if isinstance(reasoning, str) else "",
                        )
                    )
                    if isinstance(ev.get("llm_response_id"), str):
                        reply.usage = usage_of.get(ev["llm_response_id"])
                elif not steps and not task:
                    task = text
                else:
                    pending.user.append(text)
            elif kind == "SystemPromptEvent":
                sp = ev.get("system_prompt")
                system = (
                    str(sp.get("text", "")) if isinstance(sp, dict) else _text_list(sp, f"{w}.system_prompt")
                )
            elif kind == "Condensation":
                forgotten = ev.get("forgotten_event_ids") or []
                targets = sorted({step_of_event[f] for f in forgotten if f in step_of_event})
                summary = ev.get("summary")
                pending.events.append(
                    ContextEvent(
                        kind="compaction",
                        targets=targets,
                        detail=json.dumps(
                            {
                                "source": "openhands-sdk Condensation",
                                "n_forgotten_events": len(forgotten),
                                "summary": summary if isinstance(summary, str) else None,
                            }
                        ),
                    )
                )
            elif kind == "CondensationSummaryEvent":
                pending.user.append(str(ev.get("summary", "")))
            # other kinds (ConversationStateUpdateEvent, PauseEvent, ...) are bookkeeping

        if not steps:
            raise IngestError("empty trajectory: no ActionEvent or agent MessageEvent")
        pending.flush()
        instruction = row.get("instruction") if isinstance(row.get("instruction"), str) else ""
        task_text = task or instruction
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        llm = meta.get("llm") if isinstance(meta.get("llm"), dict) else {}
        model = llm.get("model") or meta.get("model") or ""
        cost, tin, tout, calls = _cost_tokens(row.get("metrics"))
        label = _sdk_label(row, path)
        success, source = None, ""
        tr = row.get("test_result") if isinstance(row.get("test_result"), dict) else {}
        report = tr.get("report") if isinstance(tr.get("report"), dict) else {}
        if isinstance(report.get("resolved"), bool):
            success, source = report["resolved"], "test_result.report.resolved"
        key = _traj_key(path, row, number, seen)
        extra = {
            **label,
            "dataset": meta.get("dataset"),
            "error": row.get("error"),
            "event_kinds": dict(kinds),
            "instruction": instruction if instruction and instruction != task_text else None,
            "unanswered_actions": sum(1 for s in steps if s.tool_name and s.output is None),
        }
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{path.parent.name}/{path.stem}/{key}",
                source=self.name,
                model_raw=str(model),
                model_family=normalize_family(str(model)),
                task_id=str(row.get("instance_id") or key),
                task_text=task_text,
                system_prompt=system,
                success=success,
                outcome_source=source,
                cost_usd=cost,
                tokens_in=tin,
                tokens_out=tout,
                api_calls=calls,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=steps,
            )
        )


# ---------------------------------------------------------------- legacy V0


def _legacy_events(hist: list) -> list[dict]:
    """Flatten ``[action, observation]`` pairs (pre-0.10 outputs) into one event list."""
    out: list[dict] = []
    for i, item in enumerate(hist):
        if isinstance(item, dict):
            out.append(item)
        elif isinstance(item, list) and all(isinstance(x, dict) for x in item):
            out.extend(item)
        else:
            raise IngestError(f"history[{i}] is {type(item).__name__}, expected an event object or pair")
    return out


def _legacy_call_args(tcm: dict, args: dict) -> str:
    """The model's own JSON arguments for this call (from ``model_response``), else filtered args."""
    resp = tcm.get("model_response")
    cid = tcm.get("tool_call_id")
    if isinstance(resp, dict) and cid:
        for choice in resp.get("choices") or []:
            msg = choice.get("message") if isinstance(choice, dict) else None
            for call in (msg or {}).get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id") == cid:
                    fn = call.get("function") or {}
                    if fn.get("arguments") is not None:
                        return norm_args(fn["arguments"])
    return json.dumps({k: v for k, v in args.items() if k not in _LEGACY_BOOKKEEPING})


def _legacy_obs_text(ev: dict) -> str:
    content = ev.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content is not None else ""
    extras = ev.get("extras") if isinstance(ev.get("extras"), dict) else {}
    md = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else None
    if ev.get("observation") in ("run", "run_ipython") and md is not None:
        text = f"{md.get('prefix') or ''}{text}{md.get('suffix') or ''}"
    return text


class OpenHandsHistoryIngester(Ingester):
    name = "openhands-legacy"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix not in (".jsonl", ".json") or _SDK_KIND.search(head):
            return False
        return bool(_LEGACY_EVENT.search(head)) and ('"args"' in head or '"extras"' in head)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        seen: set[str] = set()
        yield from parse_rows(path, _rows(path), lambda row, n: self._one(path, row, n, seen))

    def _one(self, path: Path, row: Any, number: int, seen: set[str]) -> Trajectory:
        row, hist = _row_basics(row)
        events = _legacy_events(hist)
        steps: list[Step] = []
        pending = _Pending(steps)
        by_id: dict[Any, Step] = {}
        by_call: dict[str, Step] = {}
        step_of_event: dict[Any, int] = {}
        system = ""
        task = ""
        turn = -1
        last_resp: object = object()
        skipped: Counter[str] = Counter()
        usage_of = _usage_by_response(row.get("metrics"))
        seen_model = ""

        for i, ev in enumerate(events):
            w = f"history event {i}"
            if not isinstance(ev, dict):
                raise IngestError(f"{w} is {type(ev).__name__}, expected object")
            eid = ev.get("id")
            ts = iso_to_epoch(ev.get("timestamp"))
            src = ev.get("source")
            if isinstance(ev.get("action"), str):
                a = ev["action"]
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                if a in _LEGACY_SKIP_ACTIONS:
                    skipped[f"action:{a}"] += 1
                elif a == "system":
                    system = str(args.get("content") or ev.get("message") or "")
                elif a == "message":
                    text = str(args.get("content") or ev.get("message") or "")
                    if src == "agent":
                        turn += 1
                        last_resp = object()
                        pending.add(new_step(turn=turn, timestamp=ts, assistant_text=text))
                    elif not steps and not task:
                        task = text
                    else:
                        pending.user.append(text)
                elif a == "condensation":
                    ids = set(args.get("forgotten_event_ids") or args.get("pruned_event_ids") or [])
                    lo = args.get("forgotten_events_start_id", args.get("pruned_events_start_id"))
                    hi = args.get("forgotten_events_end_id", args.get("pruned_events_end_id"))
                    targets = {
                        idx
                        for e, idx in step_of_event.items()
                        if e in ids
                        or (isinstance(e, int) and lo is not None and hi is not None and lo <= e <= hi)
                    }
                    pending.events.append(
                        ContextEvent(
                            kind="compaction",
                            targets=sorted(targets),
                            detail=json.dumps(
                                {"source": "openhands condensation action", "summary": args.get("summary")}
                            ),
                        )
                    )
                else:
                    tcm = (
                        ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else {}
                    )
                    response = (
                        tcm.get("model_response") if isinstance(tcm.get("model_response"), dict) else {}
                    )
                    resp = response.get("id")
                    first = resp is None or resp != last_resp  # the first action of a model call
                    if first:
                        turn += 1
                    last_resp = resp
                    if isinstance(response.get("model"), str):
                        seen_model = seen_model or response["model"]
                    step = pending.add(
                        new_step(
                            turn=turn,
                            timestamp=ts,
                            assistant_text=str(args.get("thought") or ""),
                            tool_name=str(tcm.get("function_name") or a),
                            tool_args=_legacy_call_args(tcm, args),
                            tool_call_id=tcm.get("tool_call_id"),
                            # the call's usage: the run's per-call metrics, else the raw response's
                            usage=(usage_of.get(resp) or usage_from(response.get("usage")))
                            if first
                            else None,
                        )
                    )
                    if eid is not None:
                        by_id[eid] = step
                        step_of_event[eid] = len(steps) - 1
                    if step.tool_call_id:
                        by_call[step.tool_call_id] = step
            elif isinstance(ev.get("observation"), str):
                o = ev["observation"]
                if o in _LEGACY_SKIP_OBS:
                    skipped[f"observation:{o}"] += 1
                    continue
                step = by_id.get(ev.get("cause"))
                tcm = ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else {}
                if step is None and tcm.get("tool_call_id"):
                    step = by_call.get(tcm["tool_call_id"])
                text = _legacy_obs_text(ev)
                if step is None or step.output is not None:
                    if o in ("error", "user_rejected", "condense", "chat", "message"):
                        pending.user.append(text)  # shown to the model as environment text
                        continue
                    raise IngestError(f"{w}: '{o}' observation (cause={ev.get('cause')!r}) answers no action")
                step.output = cap_output(text)
                step.output_is_error = o in ("error", "user_rejected")
                if eid is not None:
                    step_of_event[eid] = _index(steps, step)
            else:
                raise IngestError(f"{w} has neither an 'action' nor an 'observation' string")

        if not steps:
            raise IngestError("empty trajectory: no agent actions")
        pending.flush()
        instruction = row.get("instruction") if isinstance(row.get("instruction"), str) else ""
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        llm = meta.get("llm_config") if isinstance(meta.get("llm_config"), dict) else {}
        model = llm.get("model") or meta.get("model_name") or seen_model or ""
        cost, tin, tout, calls = _cost_tokens(row.get("metrics"))
        tr = row.get("test_result") if isinstance(row.get("test_result"), dict) else {}
        report = tr.get("report") if isinstance(tr.get("report"), dict) else {}
        success, source = None, ""
        if isinstance(report.get("resolved"), bool):
            success, source = report["resolved"], "test_result.report.resolved"
        key = _traj_key(path, row, number, seen)
        extra = {
            "agent_class": meta.get("agent_class"),
            "dataset": meta.get("dataset"),
            "error": row.get("error"),
            "skipped_events": dict(skipped),
            "instruction": instruction if instruction and instruction != task else None,
            "unanswered_actions": sum(
                1 for s in steps if s.tool_name and s.output is None and s.tool_name != "finish"
            ),
        }
        return finalize(
            Trajectory(
                traj_id=f"{self.name}/{path.parent.name}/{path.stem}/{key}",
                source=self.name,
                model_raw=str(model),
                model_family=normalize_family(str(model)),
                task_id=str(row.get("instance_id") or key),
                task_text=task or instruction,
                system_prompt=system,
                success=success,
                outcome_source=source,
                cost_usd=cost,
                tokens_in=tin,
                tokens_out=tout,
                api_calls=calls,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=steps,
            )
        )


def _events_folder(path: Path) -> bool:
    """Whether ``path`` is a folder named ``events``: as given, made absolute (``ingest .`` inside it)
    or resolved (a link to it under another name)."""
    path = Path(path)
    return path.is_dir() and "events" in {Path(os.path.abspath(path)).name, path.resolve().name}


def _folder_run(ingester: Any, path: Path, files: list[Path], source: str, **row: Any) -> Trajectory:
    """A session kept as one event per file (``files``, in order) read as the history list they make,
    its id the folder above ``events``, its source the harness's own (the one its exports name)."""
    events = []
    for f in files:
        try:
            events.append(json.loads(read_text(f)))
        except json.JSONDecodeError as e:
            raise IngestError(f"{f.name}: invalid JSON ({json_error(e)})", path) from None
    traj = ingester._one(path, {"history": events, "instance_id": path.parent.name, **row}, 1, set())
    traj.source = source
    traj.traj_id = f"{source}/{path.parent.name}"
    return traj


class OpenHandsEventsIngester(OpenHandsHistoryIngester):
    """An OpenHands (V0) session as its file store keeps it: ``sessions/<id>/events/<n>.json``, one
    event per file, numbered in order.  The folder is one run, read as the history list it holds."""

    name = "openhands-events"
    wants_dirs = True

    def detect(self, path: Path, head: str) -> bool:
        return _events_folder(path) and (Path(path) / "0.json").is_file()

    def parse(self, path: Path) -> Iterator[Trajectory]:
        path = Path(os.path.abspath(path))  # the session's id is the folder above, however it was named
        files = sorted((p for p in path.glob("*.json") if p.stem.isdigit()), key=lambda p: int(p.stem))
        yield _folder_run(self, path, files, OpenHandsHistoryIngester.name)


class OpenHandsConversationIngester(OpenHandsSDKIngester):
    """An OpenHands V1 (SDK) conversation as its file store keeps it: ``<conversation>/events/
    event-NNNNN-<id>.json``, one event per file, numbered in order, beside ``base_state.json`` (the
    agent's settings: its ``llm.model``).  The folder is one run, read as the SDK's history list."""

    name = "openhands-conversation"
    wants_dirs = True

    def detect(self, path: Path, head: str) -> bool:
        return _events_folder(path) and any(Path(path).glob("event-00000-*.json"))

    def parse(self, path: Path) -> Iterator[Trajectory]:
        path = Path(os.path.abspath(path))
        files = sorted(path.glob("event-*.json"))  # the index is zero-padded: name order is event order
        state = read_json_beside(path.parent / "base_state.json")
        agent = state.get("agent") if isinstance(state, dict) else None
        llm = agent.get("llm") if isinstance(agent, dict) else None
        model = llm.get("model") if isinstance(llm, dict) else None
        stats = state.get("stats") if isinstance(state, dict) else None
        yield _folder_run(
            self,
            path,
            files,
            OpenHandsSDKIngester.name,
            metadata={"model": model or ""},
            metrics=_combined(stats),
        )


def _combined(stats: Any) -> dict | None:
    """A conversation's ``base_state.json`` ``stats`` (metrics per LLM usage id: the agent's, a
    condenser's, ...) as one metrics object, as the SDK's benchmark rows hold them: every call's
    token usage by response id, and the totals over all of them (a condenser's calls are billed too;
    a sub-agent's, which the SDK copies in, are not: they are billed in its own conversation)."""
    per_id = stats.get("usage_to_metrics") if isinstance(stats, dict) else None
    if not isinstance(per_id, dict) or not per_id:
        return None
    out: dict[str, Any] = {"accumulated_cost": 0.0, "accumulated_token_usage": {}, "token_usages": []}
    totals = out["accumulated_token_usage"]
    unpaired = False
    for usage_id, m in per_id.items():
        # a sub-agent's metrics copied in (the task tool's "task:<id>", delegation's "delegate:<id>"):
        # it is a conversation of its own, under subagents/, read and billed there
        if not isinstance(m, dict) or str(usage_id).startswith(("task:", "delegate:")):
            continue
        cost = number(m, "accumulated_cost")
        out["accumulated_cost"] += cost or 0.0
        acc = m.get("accumulated_token_usage") if isinstance(m.get("accumulated_token_usage"), dict) else {}
        for k in ("prompt_tokens", "completion_tokens"):
            n = count(acc, k)
            if n is not None:
                totals[k] = totals.get(k, 0) + n
        # the costs pair up with the latencies only when every metrics object's do (_cost_by_response):
        # counts that differ in one object and make up for it in another must not pair across them
        for k in ("token_usages", "response_latencies", "costs"):
            if isinstance(m.get(k), list):
                out.setdefault(k, []).extend(m[k])
        if isinstance(m.get("costs"), list) and m["costs"] and not _costs_paired(m):
            unpaired = True
    if unpaired:
        out.pop("costs", None)
    return out
