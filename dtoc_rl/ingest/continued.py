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
prompt, task and policy; the later one opens with calls whose visibility is unknown, at least as many
steps as the earlier one has (answers after its last call that called no tool aside: a side question
the harness left out); and the earlier one's steps are the later one's first steps (the same calls,
the same outputs, a call it logged without a result aside).  Twin runs of one task are not: each is
seen from its first request.  Of several earlier parts, the longest is taken, and of one length the
part that saw its calls comes before one that did not (a proxy stopped before its first answer).

The call a proxy was killed in (sent, its answer never logged) takes what its row says it was sent
hidden (``dtoc_sent_masked``); its usage stays unknown.  A joined run's ``extra.dtoc_totals`` are the
later session's counters."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from dtoc_rl.data.chatlog import visibility
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory
from dtoc_rl.ingest.common import extra_of, set_extra

__all__ = ["join_continued", "may_continue", "part_key", "parts_to_read"]

#: What a part's log knows of the calls it saw, and the later part's log does not.
_CALL_FACTS = ("timestamp", "masked_before", "dropped_before", "usage", "model", "events")


def _policy(t: Trajectory) -> str | None:
    """The policy an orchestrator's log names (its ``dtoc_policy``), or None for another log."""
    extra = extra_of(t.extra)
    return str(extra.get("dtoc_policy")) if "dtoc_session" in extra else None


def may_continue(t: Trajectory) -> bool:
    """Whether ``t`` may be a part of a run logged in parts: the only runs :func:`join_continued`
    looks at (an orchestrator's log with steps)."""
    return _policy(t) is not None and bool(t.steps)


def _group(t: Trajectory) -> tuple:
    """The runs :func:`join_continued` may join are of one group: one source, system prompt, task
    and policy."""
    return (t.source, t.system_prompt, t.task_text, _policy(t))


def part_key(t: Trajectory) -> int | None:
    """A number for a run's group (None: a run :func:`join_continued` never looks at); two runs of
    one group have the same."""
    return hash(_group(t)) if may_continue(t) else None


def parts_to_read(keys: Mapping[int, int]) -> set[int]:
    """Of runs given as ``{position: part_key}``, those :func:`join_continued` may join: the runs of a
    group of two or more (a number two groups share only adds runs it leaves as they are)."""
    count = Counter(keys.values())
    return {i for i, key in keys.items() if count[key] > 1}


def _unseen(t: Trajectory) -> int:
    """How many of the run's first steps were logged as history: their visibility is not known."""
    return next((k for k, s in enumerate(t.steps) if s.masked_before is not None), len(t.steps))


def _call(s: Step) -> tuple:
    return (s.tool_name, s.tool_args, s.assistant_text)


def _same_call(early: Step, late: Step) -> bool:
    # the same call, with the same output unless the earlier log has none (a call it logged without its
    # result: its closing answer's)
    return _call(early) == _call(late) and (early.output is None or early.output == late.output)


def _prefixes(t: Trajectory, upto: int) -> list[tuple[int, int]]:
    """``(n, digest of the first n calls)`` for n = 1..``upto``: where the parts it may go on from are."""
    out, h = [], 0
    for n, s in enumerate(t.steps[:upto], 1):
        h = hash((h, _call(s)))
        out.append((n, h))
    return out


def _ends(t: Trajectory) -> list[tuple[int, int]]:
    """The keys a later part finds ``t`` under: its calls up to its end, or up to an answer before
    its trailing answers that called no tool (:func:`_goes_on`)."""
    prefixes = _prefixes(t, len(t.steps))
    n = len(t.steps)
    out = [prefixes[n - 1]]
    while n > 1 and t.steps[n - 1].tool_name is None:
        n -= 1
        out.append(prefixes[n - 1])
    return out


def _goes_on(late: Trajectory, unseen: int, early: Trajectory) -> int:
    """How many of ``early``'s steps ``late`` goes on from (0: not ``early``'s continuation): its steps
    are ``late``'s first steps, within what ``late`` did not see, but for answers after them that
    called no tool (a side question the harness asked and left out, as Gemini CLI's check of who speaks
    next)."""
    n = len(early.steps)
    while (
        n
        and early.steps[n - 1].tool_name is None
        and (n > unseen or not _same_call(early.steps[n - 1], late.steps[n - 1]))
    ):
        n -= 1
    if not 0 < n <= unseen:
        return 0
    return n if all(_same_call(a, b) for a, b in zip(early.steps[:n], late.steps)) else 0


def _sent(early: Trajectory, late: Trajectory, n: int) -> int:
    """``late``'s steps from ``n`` on of the call ``early``'s log was cut off in (its answer never
    recorded: a proxy killed) take what that call was sent hidden (``dtoc_sent_masked``); returns
    the step after them."""
    try:
        sent = json.loads(extra_of(early.extra).get("dtoc_sent_masked") or "null")
    except (ValueError, TypeError):
        return n
    if not (isinstance(sent, list) and all(type(j) is int and 0 <= j < n for j in sent)):
        return n
    turn, end = late.steps[n].turn, n
    while end < len(late.steps) and late.steps[end].turn == turn:
        late.steps[end].masked_before = list(sent)
        end += 1
    # the decision before that call, as events on its first step (the output keys it named are not known)
    before, now = set(early.steps[n - 1].masked_before or ()) if n else set(), set(sent)
    late.steps[n].events = [
        ContextEvent(kind=kind, targets=sorted(which))
        for kind, which in (("disable", now - before), ("enable", before - now))
        if which
    ]
    return end


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
        if may_continue(t):
            groups.setdefault(_group(t), []).append(i)
    unseen = {i: _unseen(trajs[i]) for members in groups.values() for i in members}
    gone: set[int] = set()
    joined: list[str] = []
    for members in groups.values():
        # shorter first, and of one length the one that saw more: a part joined into the next is then
        # joined on, and a part that saw its calls is the earlier one of a part that saw none of them
        parts = sorted(members, key=lambda i: (len(trajs[i].steps), unseen[i]))
        index: dict[tuple[int, int], list[int]] = {}  # the parts so far, by (n, their first n calls)
        for i in parts:
            late = trajs[i]
            fits = [
                (n, j)
                for key in _prefixes(late, unseen[i])
                for j in index.get(key, ())
                if j not in gone and (n := _goes_on(late, unseen[i], trajs[j]))
            ]
            if fits:  # the longest part it goes on from
                n, j = max(fits)
                joined.append(_join(trajs[j], late, n, unseen[i]))
                gone.add(j)
                unseen[i] = _unseen(late)
            for key in _ends(late):
                index.setdefault(key, []).append(i)
    return [t for i, t in enumerate(trajs) if i not in gone], joined


def _join(early: Trajectory, late: Trajectory, n: int, seam: int) -> str:
    """The facts ``early`` knows of its first ``n`` calls into ``late``, which goes on from them after
    ``seam`` steps it did not see."""
    for a, b in zip(early.steps[:n], late.steps):
        for name in _CALL_FACTS:
            setattr(b, name, getattr(a, name))
    if seam > n == len(early.steps):  # the call the earlier part was cut off in: as it was sent
        n = _sent(early, late, n)
    if seam == n < len(late.steps):
        _changes_since(late.steps[seam], late.steps[seam - 1].masked_before)
    # the prompt the log lacks, counted at the first call, which only the first part has the usage of
    late.unlogged_prompt_tokens = early.unlogged_prompt_tokens
    before = extra_of(early.extra).get("joined") or []
    set_extra(late, "joined", [*before, early.traj_id])
    # the row's own copies, as the joined steps have them (the session's counters stay the later part's)
    set_extra(late, "dtoc_visibility", json.dumps(visibility(late)), only_if_present=True)
    for key, field in (("tokens_in", "input_tokens"), ("tokens_out", "output_tokens")):
        total = sum(getattr(s.usage, field) or 0 for s in late.steps if s.usage is not None)
        set_extra(late, key, total or None, only_if_present=True)
    late.task_id = early.task_id
    return f"{early.traj_id} -> {late.traj_id}"
