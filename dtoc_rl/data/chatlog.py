"""Trajectories as generic OpenAI chat logs: what ``dtoc-rl ingest`` reads back.

The live :class:`~dtoc_rl.serve.orchestrator.Orchestrator` (``save_log``) and the env
recorder (:class:`dtoc_rl.envs.recorder.RecordTrajectory`, ``format="chat"``)
both write sessions this way, so live runs become datasets:
:func:`trajectory_to_chat` gives the messages, :func:`visibility` the context
management (``masked_before`` and enable/disable events per step) that the
rows carry as the scalar ``dtoc_visibility``.
"""

from __future__ import annotations

from typing import Any

from dtoc_rl.data.schema import Trajectory, Usage

__all__ = ["VISIBILITY_FORMAT_KEY", "trajectory_to_chat", "usage_dict", "visibility"]


def usage_dict(u: Usage) -> dict[str, Any]:
    """A call's usage in OpenAI's chat-completions shape, which
    :func:`dtoc_rl.ingest.common.usage_from` reads back to the same :class:`Usage`
    (``prompt_tokens`` counts every prompt token; the cached and cache-written ones are parts of it)."""
    out: dict[str, Any] = {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens}
    details = {
        "cached_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cache_write_1h_tokens": u.cache_write_1h_tokens,
    }
    if any(v is not None for v in details.values()):
        out["prompt_tokens_details"] = {k: v for k, v in details.items() if v is not None}
    if u.cost_usd is not None:
        out["cost"] = u.cost_usd
    return out


def trajectory_to_chat(traj: Trajectory, *, reasoning: bool = False) -> list[dict[str, Any]]:
    """The trajectory as OpenAI chat-completions messages (raw tool outputs).

    Inverse of :func:`dtoc_rl.ingest.openai_chat.chat_to_steps` up to labels:
    steps sharing a ``turn`` become one assistant message with parallel calls, with the call's
    ``timestamp`` and ``usage`` (:func:`usage_dict`) when known.
    ``reasoning`` adds each turn's reasoning as the assistant's ``reasoning_content``.
    """
    msgs: list[dict[str, Any]] = []
    if traj.system_prompt:
        msgs.append({"role": "system", "content": traj.system_prompt})
    msgs.append({"role": "user", "content": traj.task_text or ""})
    i, steps = 0, traj.steps
    while i < len(steps):
        j = i + 1
        while j < len(steps) and steps[j].turn == steps[i].turn and steps[j].tool_name is not None:
            j += 1
        group = steps[i:j] if steps[i].tool_name is not None else steps[i : i + 1]
        first = group[0]
        if first.user_text:
            msgs.append({"role": "user", "content": first.user_text})
        asst: dict[str, Any] = {"role": "assistant", "content": first.assistant_text or ""}
        if reasoning and first.reasoning:
            asst["reasoning_content"] = first.reasoning
        if first.timestamp is not None:
            asst["timestamp"] = first.timestamp
        if first.usage is not None:
            asst["usage"] = usage_dict(first.usage)
        if first.model:
            asst["model"] = first.model
        calls = []
        for k, s in enumerate(group):
            if s.tool_name is None:
                continue
            cid = s.tool_call_id or f"call_{s.index:04d}_{k}"
            calls.append(
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": s.tool_name, "arguments": s.tool_args or "{}"},
                }
            )
        if calls:
            asst["tool_calls"] = calls
        msgs.append(asst)
        for s, c in zip([s for s in group if s.tool_name is not None], calls):
            if s.output is not None:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": s.output})
        i += len(group)
    return msgs


def visibility(traj: Trajectory) -> dict[str, dict[str, Any]]:
    """Per step index (as text), the steps hidden before it and its context events; only steps that
    have either or whose schedule is unknown (every other step had nothing hidden).

    The hidden steps are ``masked_before`` (a list; null: not known, e.g. steps from before a session
    was resumed), or, when it is shorter, what changed since the step before: ``hide`` (hidden now,
    not then) and ``show`` (the reverse).  A long session hides more outputs the longer it runs, and
    its log is rewritten after every call: every call's whole list would grow the log with the square
    of the session's length (17 of 45 MB at 4,000 calls, docs/benchmarks.md), its changes with it.
    A map with changes says ``"format": 2``; changes are sorted, whole lists kept as the step has them."""
    out: dict[str, dict[str, Any]] = {}
    prev: frozenset[int] | None = frozenset()  # a step the map does not list had nothing hidden
    for s in traj.steps:
        masked = s.masked_before
        now = None if masked is None else frozenset(masked)
        if now is None or now or s.events:
            entry: dict[str, Any] = {"masked_before": masked}
            if now and prev is not None:
                hide, show = now - prev, prev - now
                if len(hide) + len(show) < len(now):
                    entry = {"hide": sorted(hide), "show": sorted(show)}
            entry["events"] = [e.__dict__ for e in s.events]
            out[str(s.index)] = entry
        prev = now
    if any("hide" in e for e in out.values()):
        # a key no step has: a reader that knows only whole lists refuses the map instead of reading
        # every change as "nothing hidden"
        out[VISIBILITY_FORMAT_KEY] = 2  # type: ignore[assignment]
    return out


#: The key of a dtoc_visibility map that holds changes (``hide``/``show``), and its value, 2.
VISIBILITY_FORMAT_KEY = "format"
