"""A DTOC orchestrator's run logged in parts, joined again.

A proxy that restarts mid-run, or meets again a conversation it dropped from its memory, starts a new
log whose first request already holds the run so far; an Orchestrator reopened on its SQLite session
does the same.  The new log has the whole conversation, but what the earlier calls were shown is not
known there (``masked_before`` null: :meth:`~dtoc_rl.serve.orchestrator.Orchestrator.record_assistant`
with ``seen=False``) and their usage is not in it; the earlier log has both.  Read as two runs, the
earlier calls would be billed twice, once with a visibility that never was.  :func:`join_continued`
makes them one run: the later log's steps (their outputs and need labels over the whole run), with
the earlier log's facts about the calls it saw.

Only runs that say so are joined: both are orchestrator logs (``dtoc_session``) of one source, system
prompt and task; the later one opens with calls whose visibility is unknown, at least as many steps as
the earlier one has; and the earlier one's steps are the later one's first steps (the same calls, the
same outputs, a call it logged without a result aside).  Twin runs of one task are not: each is seen
from its first request."""

from __future__ import annotations

import json

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.ingest.common import set_extra

__all__ = ["join_continued"]

#: What a part's log knows of the calls it saw, and the later part's log does not.
_CALL_FACTS = ("timestamp", "masked_before", "dropped_before", "usage", "model", "events")


def _orchestrated(t: Trajectory) -> bool:
    try:
        extra = json.loads(t.extra or "{}")
    except ValueError:
        return False
    return isinstance(extra, dict) and "dtoc_session" in extra


def _unseen(t: Trajectory) -> int:
    """How many of the run's first steps were logged as history: their visibility is not known."""
    return next((k for k, s in enumerate(t.steps) if s.masked_before is not None), len(t.steps))


def _same_call(early: Step, late: Step) -> bool:
    return (
        early.tool_name == late.tool_name
        and early.tool_args == late.tool_args
        and early.assistant_text == late.assistant_text
        and (early.output is None or early.output == late.output)  # a call it logged without its result
    )


def _continues(late: Trajectory, early: Trajectory) -> bool:
    """Whether ``late`` goes on from ``early`` (runs of one source, system prompt and task)."""
    n = len(early.steps)
    return 0 < n <= _unseen(late) and all(_same_call(a, b) for a, b in zip(early.steps, late.steps))


def _changes_since(step: Step, before: list[int] | None) -> None:
    """The later part's first decision hid or showed outputs against a context it took as all shown;
    against what the earlier part's last call was shown, only what changed is a change."""
    if before is None:
        return
    hidden = set(before)
    kept = []
    for e in step.events:
        if e.kind in ("disable", "enable"):
            keys = e.detail.split(",") if e.detail else []
            changed = [(j in hidden) != (e.kind == "disable") for j in e.targets]
            if len(keys) == len(e.targets):
                e.detail = ",".join(k for k, c in zip(keys, changed) if c)
            e.targets = [j for j, c in zip(e.targets, changed) if c]
            if not e.targets:
                continue
        kept.append(e)
    step.events = kept


def join_continued(trajs: list[Trajectory]) -> tuple[list[Trajectory], list[str]]:
    """``trajs`` with each run logged in parts joined into its last part (under its first part's task
    id; ``extra.joined`` names the parts before it), and a line per part joined (``"EARLY -> LATE"``,
    their trajectory ids)."""
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(trajs):
        if _orchestrated(t):  # a run's parts share its source, system prompt and task
            groups.setdefault((t.source, t.system_prompt, t.task_text), []).append(i)
    gone: set[int] = set()
    joined: list[str] = []
    for members in groups.values():
        parts = sorted(members, key=lambda i: len(trajs[i].steps))
        for k, i in enumerate(parts):  # shortest first: a part joined into the next is then joined on
            late = trajs[i]
            early_i = max(
                (j for j in parts[:k] if j not in gone and _continues(late, trajs[j])),
                key=lambda j: len(trajs[j].steps),
                default=None,
            )
            if early_i is not None:
                joined.append(_join(trajs[early_i], late))
                gone.add(early_i)
    return [t for i, t in enumerate(trajs) if i not in gone], joined


def _join(early: Trajectory, late: Trajectory) -> str:
    """``early``'s facts about the calls it saw into ``late``, which goes on from them."""
    seam = _unseen(late)
    for a, b in zip(early.steps, late.steps):
        for name in _CALL_FACTS:
            setattr(b, name, getattr(a, name))
    if seam == len(early.steps) < len(late.steps):
        _changes_since(late.steps[seam], late.steps[seam - 1].masked_before)
    # the prompt the log lacks, counted at the first call, which only the first part has the usage of
    late.unlogged_prompt_tokens = early.unlogged_prompt_tokens
    before = json.loads(early.extra or "{}").get("joined") or []
    set_extra(late, "joined", [*before, early.traj_id])
    late.task_id = early.task_id
    return f"{early.traj_id} -> {late.traj_id}"
