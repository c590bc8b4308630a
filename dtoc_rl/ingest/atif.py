"""Agent Trajectory Interchange Format (ATIF) files: Harbor's ``trajectory.json``.

Harbor (the Terminal-Bench 2 harness) writes one ATIF file per trial for every agent it runs
(Terminus 2, Claude Code, Codex, OpenHands, mini-swe-agent, ...), usually at
``<job>/<trial>/agent/trajectory.json`` beside the trial's ``result.json``.  The format (RFC 0001 of
the Harbor project, versions ATIF-v1.0 to v1.7): a root ``{"schema_version": "ATIF-v1.x",
"session_id", "agent": {"name", "version", "model_name"}, "steps": [...], "final_metrics"}`` whose
steps are ``{"step_id", "source": "system" | "user" | "agent", "message", "reasoning_content",
"tool_calls": [{"tool_call_id", "function_name", "arguments"}], "observation": {"results":
[{"source_call_id", "content"}]}, "metrics": {"prompt_tokens", "cached_tokens",
"completion_tokens", "cost_usd", "extra"}}``.

Mapping (through :func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`, as every chat-shaped log): a
system step is system text, a user step a user message (the first is the task), an agent step an
assistant turn whose tool calls are steps and whose results are their outputs.  A result that names
no call (Terminus 2 answers all of a turn's keystrokes with one terminal screen) goes to the turn's
last unanswered call that acts (not ``mark_task_complete`` or another call of the vocabulary's
``none`` kind); a result naming a call the step does not hold is an error.  An agent turn with
results but no calls is a call only when its message holds exactly one ``bash`` block (a
mini-swe-agent turn); otherwise its results are text the next call reads (nothing is invented to
hide).  Steps marked ``is_copied_context`` (context a continuation file repeats) are skipped.
``metrics`` is the call's usage: ``prompt_tokens`` holds every input token (``cached_tokens`` and,
for Anthropic models, ``metrics.extra.cache_creation_input_tokens`` are parts of it), ``cost_usd``
the harness's figure; ``final_metrics`` gives the trajectory's totals.

Outcome: the trial's ``result.json`` next to the ``agent/`` folder, when it has
``verifier_result.rewards.reward``: ``success`` is True at 1, False at 0 and None between; its
``task_name`` names the task.  Only the trial's own ``trajectory.json`` takes them: Harbor's
continuation (``trajectory.cont-N.json``) and summarisation files (``trajectory.summarization-*``)
are trajectories of their own with no outcome.  The session id falls back to the trial's folder.
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
from dtoc_rl.ingest.common import count, finalize, number
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text
from dtoc_rl.ingest.text_actions import bash_block
from dtoc_rl.labels.vocabulary import tool_kind

__all__ = ["AtifIngester"]

_HEAD = re.compile(r'"schema_version"\s*:\s*"ATIF-v\d')


class AtifIngester(Ingester):
    name = "atif"

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix == ".json" and head.lstrip().startswith("{") and _HEAD.search(head) is not None

    def parse(self, path: Path) -> Iterator[Trajectory]:
        root = read_json(path)
        if not isinstance(root, dict) or not isinstance(root.get("steps"), list):
            raise IngestError("not an ATIF trajectory: no 'steps' list", path)
        agent = root.get("agent") if isinstance(root.get("agent"), dict) else {}
        messages, model = atif_messages(root["steps"])
        model = str(agent.get("model_name") or model or "")
        cp = chat_to_steps(messages, "steps")
        if not cp.steps:
            raise IngestError("empty trajectory: no agent steps", path)
        trial = path.parent.parent if path.parent.name == "agent" else path.parent
        result = _trial_result(trial) if path.name == "trajectory.json" else {}
        reward = _reward(result)
        session = str(root.get("session_id") or trial.name)
        if path.name != "trajectory.json":  # a continuation or a summarisation file of the trial
            session = f"{session}/{path.stem}"
        task = result.get("task_name") if isinstance(result.get("task_name"), str) else None
        totals = root.get("final_metrics") if isinstance(root.get("final_metrics"), dict) else {}
        extra: dict[str, Any] = {
            k: v
            for k, v in (
                ("schema_version", root.get("schema_version")),
                ("agent", agent.get("name")),
                ("agent_version", agent.get("version")),
                ("reward", reward),
            )
            if isinstance(v, (str, int, float)) and not isinstance(v, bool)
        }
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=task or session,
                task_text=cp.task,
                system_prompt=cp.system,
                success={1.0: True, 0.0: False}.get(reward) if reward is not None else None,
                outcome_source="" if reward is None else "reward",
                source_path=str(path),
                extra=json.dumps(extra),
                tokens_in=count(totals, "total_prompt_tokens"),
                tokens_out=count(totals, "total_completion_tokens"),
                cost_usd=number(totals, "total_cost_usd"),
                steps=cp.steps,
            )
        )


def atif_messages(steps: list) -> tuple[list[dict], str]:
    """ATIF steps as chat messages (see the module docstring), and the first agent step's model."""
    messages: list[dict] = []
    model = ""
    for i, st in enumerate(steps):
        w = f"steps[{i}]"
        if not isinstance(st, dict):
            raise IngestError(f"{w} is {type(st).__name__}, expected object")
        source = st.get("source")
        text = content_text(st.get("message"), f"{w}.message")
        if source in ("system", "user"):
            messages.append({"role": source, "content": text})
            results = _results(st, w)
            if results:  # a system event's results (context management, a subagent): text it sent on
                messages.append({"role": "user", "content": "\n".join(r[1] for r in results)})
            continue
        if source != "agent":
            raise IngestError(f"{w} has source {source!r}, expected system, user or agent")
        if st.get("is_copied_context") is True:  # context a continuation file repeats
            continue
        model = model or str(st.get("model_name") or "")
        calls = []
        raw_calls = st.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise IngestError(f"{w}.tool_calls is {type(raw_calls).__name__}, expected a list")
        for k, c in enumerate(raw_calls):
            if not isinstance(c, dict) or not isinstance(c.get("function_name"), str):
                raise IngestError(f"{w}.tool_calls[{k}] must be an object with a 'function_name'")
            cid = c.get("tool_call_id")
            calls.append(
                {
                    "id": str(cid) if cid is not None else f"{w}.{k}",
                    "function": {"name": c["function_name"], "arguments": c.get("arguments") or {}},
                }
            )
        results = _results(st, w)
        if results and not calls:
            command, _ = bash_block(text)
            if command is not None:  # a mini-swe-agent turn: its one bash block is the call
                calls = [{"id": f"{w}.0", "function": {"name": "bash", "arguments": {"command": command}}}]
        msg: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": calls}
        msg["timestamp"] = st.get("timestamp")  # the cache expires between calls further apart than its life
        if isinstance(st.get("reasoning_content"), str):
            msg["reasoning_content"] = st["reasoning_content"]
        usage = _usage(st.get("metrics"))
        if usage:
            msg["usage"] = usage
        messages.append(msg)
        if results and not calls:  # feedback to a turn without calls: text the next call reads
            messages.append({"role": "user", "content": "\n".join(r[1] for r in results)})
            continue
        ids = [c["id"] for c in calls]
        answered: dict[str, tuple[str, bool]] = {}
        for k, (cid, out, err) in enumerate(results):
            if cid is not None and cid not in ids:
                raise IngestError(
                    f"{w}.observation.results[{k}] names call {cid!r}, which the step does not make"
                )
            if cid is None or cid in answered:
                # Terminus 2 answers all of a turn's keystrokes with one screen: the last open call that
                # acts (a completion marker reads nothing)
                open_ = [c for c in calls if c["id"] not in answered]
                acting = [c for c in open_ if tool_kind(c["function"]["name"]) != "none"] or open_
                if not acting:
                    raise IngestError(f"{w}.observation has more results than the step has calls")
                cid = acting[-1]["id"]
            answered[cid] = (out, err)
        for cid in ids:  # in call order; a call the log gave no result gets an empty output
            out, err = answered.get(cid, ("", False))
            messages.append({"role": "tool", "tool_call_id": cid, "content": out, "is_error": err})
    return messages, model


def _results(step: dict, where: str) -> list[tuple[str | None, str, bool]]:
    obs = step.get("observation")
    if obs is None:
        return []
    if not isinstance(obs, dict) or not isinstance(obs.get("results", []), list):
        raise IngestError(f"{where}.observation must be an object with a 'results' list")
    out = []
    for k, r in enumerate(obs.get("results") or ()):
        if not isinstance(r, dict):
            raise IngestError(f"{where}.observation.results[{k}] is {type(r).__name__}, expected object")
        cid = r.get("source_call_id")
        text = content_text(r.get("content"), f"{where}.observation.results[{k}].content")
        out.append((str(cid) if cid is not None else None, text, r.get("is_error") is True))
    return out


def _usage(metrics: Any) -> dict | None:
    # ATIF's metrics in the OpenAI chat shape usage_from reads: prompt_tokens holds the cached and
    # cache-creation parts
    if not isinstance(metrics, dict) or not ({"prompt_tokens", "completion_tokens"} & metrics.keys()):
        return None
    extra = metrics.get("extra") if isinstance(metrics.get("extra"), dict) else {}
    details = {"cached_tokens": metrics.get("cached_tokens")}
    if extra.get("cache_creation_input_tokens") is not None:
        details["cache_write_tokens"] = extra["cache_creation_input_tokens"]
    usage = {k: metrics.get(k) for k in ("prompt_tokens", "completion_tokens", "cost_usd") if k in metrics}
    return {**usage, "prompt_tokens_details": details}


def _trial_result(trial: Path) -> dict:
    # Harbor: <trial>/agent/trajectory.json and <trial>/result.json
    f = trial / "result.json"
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _reward(result: dict) -> float | None:
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    r = rewards.get("reward") if isinstance(rewards, dict) else None
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else None
