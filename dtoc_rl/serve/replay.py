"""Drive a DTOCContext over a logged trajectory, model call by model call.

This is the orchestrator-level replay used by ``dtoc-rl replay``: each logged
model call (the steps of one turn: its parallel tool calls; each step when the log
records no turns, as :func:`~dtoc_rl.sim.episode.compile_episode` reads it) becomes an
assistant turn with its tool calls, the tools' outputs are stored under fresh keys,
and an optional rule decides visibility before the next call (applied by
``manage_context``, so its keys are judged as every action's are:
:mod:`dtoc_rl.core.actions`).  It records the active tokens of the context each model call saw.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from dtoc_rl.core.context import DTOCContext
from dtoc_rl.core.tokens import TokenEstimator
from dtoc_rl.data.schema import Trajectory

__all__ = ["ReplayResult", "hide_older_than", "replay_trajectory"]

# (context, the last step of the model call just made) -> (keys to enable, keys to disable)
Rule = Callable[[DTOCContext, int], tuple[list[str], list[str]]]


@dataclass
class ReplayResult:
    traj_id: str
    tokens_per_call: list[int] = field(default_factory=list)  # active tokens each call saw
    hidden_per_call: list[int] = field(default_factory=list)
    # keys the rule named that no output has, plus keys in both its lists (core.actions' count)
    invalid_actions: int = 0

    @property
    def total_input_tokens(self) -> int:
        return sum(self.tokens_per_call)

    @property
    def peak(self) -> int:
        return max(self.tokens_per_call, default=0)


def hide_older_than(n: int) -> Rule:
    """Keep the ``n`` most recent outputs visible, hide the rest."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")

    def rule(ctx: DTOCContext, step: int) -> tuple[list[str], list[str]]:
        keys = ctx.store.keys()
        old = keys[: max(0, len(keys) - n)]
        return [], [k for k in old if ctx.store.get(k).visible]

    return rule


def replay_trajectory(
    traj: Trajectory, rule: Rule | None = None, estimator: TokenEstimator | str | None = None
) -> ReplayResult:
    """Replay ``traj`` through a fresh in-memory DTOCContext."""
    ctx = DTOCContext(query=traj.task_text, system=traj.system_prompt or None, estimator=estimator)
    res = ReplayResult(traj.traj_id)
    seen_ids: set[str] = set()
    turns = [s.turn for s in traj.steps]
    if any(turns):
        model_calls = [list(g) for _, g in itertools.groupby(traj.steps, key=lambda s: s.turn)]
    else:  # no turns recorded (all Step's default 0): every step is a model call
        model_calls = [[s] for s in traj.steps]
    for steps in model_calls:
        user = "\n\n".join(s.user_text for s in steps if s.user_text)
        if user:
            ctx.add_user(user)
        res.tokens_per_call.append(ctx.active_tokens)
        res.hidden_per_call.append(len(ctx.store.hidden_keys()))
        calls = []
        for step in steps:
            if step.tool_name is not None:
                # Some logs reuse provider ids; pairing needs them unique, so fresh ones stand in.
                call_id = step.tool_call_id if step.tool_call_id not in seen_ids else None
                if call_id:
                    seen_ids.add(call_id)
                calls.append({"name": step.tool_name, "arguments": step.tool_args, "id": call_id})
        text = "\n\n".join(s.assistant_text for s in steps if s.assistant_text)
        reasoning = "\n\n".join(s.reasoning for s in steps if s.reasoning) or None
        ctx.add_assistant(text, reasoning=reasoning, tool_calls=calls)
        for step in steps:  # answered in call order: each result pairs with the oldest pending call
            if step.tool_name is not None:
                ctx.add_tool_result(step.output or "", tool_name=step.tool_name, timestamp=step.timestamp)
        if rule is not None:
            enable, disable = rule(ctx, steps[-1].index)
            if enable or disable:
                res.invalid_actions += ctx.manage_context(enable, disable).invalid
    return res
