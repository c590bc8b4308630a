"""One session read from two of its harness's logs, kept once.

Claude Code writes each session to its transcript (``~/.claude/projects/...``), and ``claude -p
--output-format stream-json`` prints the same session as a stream that users often keep beside it.  Read
together they were two runs of one session, the bill and the run count doubled.  Runs of two such log
kinds are one session when they name the same session id and one's calls (tool, arguments, output) are
the other's or their beginning; the longer is kept, of equal ones the transcript (every call's time and
output tokens, its sub-agents as runs of their own).  A sub-agent's transcript names its parent's
session and is a run of its own, never a copy.  What only the dropped log says of the run (an outcome
and the task's label, which a stream beside a report has) goes to the kept one; the stream's
``total_cost_usd`` does not: it is the whole session's, sub-agents included, where the transcript's
main run is not."""

from __future__ import annotations

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.common import extra_of, set_extra

__all__ = ["drop_second_logs"]

#: The log kinds (sources) of one harness that can hold the same session, the one that holds more first.
SAME_SESSION_LOGS: tuple[tuple[str, ...], ...] = (("claude-code-transcript", "claude-code-stream"),)
_RANK = {source: (n, k) for n, kinds in enumerate(SAME_SESSION_LOGS) for k, source in enumerate(kinds)}


def _session(t: Trajectory) -> str | None:
    """The session a main run's log names (a sub-agent's run names its parent's: None)."""
    extra = extra_of(t.extra)
    if extra.get("sidechain_file") or extra.get("agent_id"):
        return None
    sid = extra.get("session_id")
    return sid if isinstance(sid, str) and sid else None


def _begins(t: Trajectory, part: Trajectory) -> bool:
    """Whether ``part``'s calls (tool, arguments, output) are ``t``'s first ones; the last may lack its
    output (a log cut off while the tool ran)."""
    n = len(part.steps)
    if not n or n > len(t.steps):
        return False
    for k, (a, b) in enumerate(zip(t.steps, part.steps)):
        if (a.tool_name, a.tool_args, a.assistant_text) != (b.tool_name, b.tool_args, b.assistant_text):
            return False
        if a.output != b.output and not (k == n - 1 and b.output is None):
            return False
    return True


def _take_what_only_it_says(kept: Trajectory, dropped: Trajectory) -> None:
    """The run's outcome and its task's label, where only the dropped log has them."""
    if kept.success is None and dropped.success is not None:
        kept.success, kept.outcome_source = dropped.success, dropped.outcome_source
    sid = _session(dropped)
    if dropped.task_id and dropped.task_id != sid and kept.task_id == _session(kept):
        kept.task_id = dropped.task_id  # a label (the report's task), where the transcript has only the id
    if not kept.task_text and dropped.task_text:
        kept.task_text = dropped.task_text
    for key in ("prompt_file", "label"):
        value = extra_of(dropped.extra).get(key)
        if value is not None and extra_of(kept.extra).get(key) is None:
            set_extra(kept, key, value)


def drop_second_logs(trajs: list[Trajectory]) -> tuple[list[Trajectory], list[tuple[Trajectory, Trajectory]]]:
    """``trajs`` without the runs another log of the same session holds, and the ``(dropped, kept)``
    pairs.  Runs of other sources, or without a session id, are left as they are."""
    groups: dict[tuple[int, str], list[int]] = {}
    for i, t in enumerate(trajs):
        sid = _session(t) if t.source in _RANK else None
        if sid is not None:
            groups.setdefault((_RANK[t.source][0], sid), []).append(i)
    gone: dict[int, int] = {}
    for members in groups.values():
        if len({trajs[i].source for i in members}) < 2:
            continue  # one log kind: twin runs of it are the driver's to tell apart
        # the longest first, of one length the log that holds more
        order = sorted(members, key=lambda i: (-len(trajs[i].steps), _RANK[trajs[i].source][1]))
        for pos, i in enumerate(order):
            if i in gone:
                continue
            for j in order[pos + 1 :]:
                if j not in gone and trajs[j].source != trajs[i].source and _begins(trajs[i], trajs[j]):
                    gone[j] = i
    pairs = []
    for j, i in gone.items():
        kept, dropped = trajs[i], trajs[j]
        _take_what_only_it_says(kept, dropped)
        set_extra(kept, "also_logged_in", dropped.source_path or dropped.traj_id)
        pairs.append((dropped, kept))
    return [t for i, t in enumerate(trajs) if i not in gone], pairs
