"""One session read from two of its harness's logs, kept once.

Claude Code writes each session to its transcript (``~/.claude/projects/...``), and ``claude -p
--output-format stream-json`` prints the same session as a stream that users often keep beside it.  Read
together they were two runs of one session, the bill and the run count doubled.  A stream is one run of
the CLI: a session resumed (``--resume ID``) keeps its id and goes on in the same transcript, and the
resumed run's stream holds only that run's calls (none of the earlier ones), so it is the transcript's
last calls, or calls in its middle once the session was resumed again.  Runs of two such log kinds are
therefore one session when they name the same session id and one's calls (tool, arguments, output) are
the other's or a run of them in a row, the last of which may lack its output (a log cut off while the
tool ran); the longer is kept, of equal ones the transcript (every call's time and output tokens, its
sub-agents as runs of their own).  Calls alone never make two logs one session: two sessions may well
make the same calls.  A sub-agent's transcript names its parent's session and is a run of its own, never
a copy.  A session forked on resume (``--fork-session``) is another id with a transcript of its own,
which copies the calls it was forked from, each copied reply naming the session its request was made
in (``requestSessionId``: ``extra.forked_from``); an original that ended at the fork is the fork's
beginning and is read once, in the fork, and one that went on after it stays a run of its own (the
calls both hold are counted in each, and ingest says so).

What only the dropped log says of the run goes to the kept one: the task's label (which a stream beside a
report has), and the outcome only from a log whose calls end where the kept one's do, since a stream's
outcome is that of its own run's end, not of the session resumed after it.  The stream's
``total_cost_usd`` does not: it is the whole session's so far (sub-agents, and the runs before a resume,
included), where the transcript's main run is not."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, NamedTuple

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.ingest.common import extra_of, set_extra

__all__ = [
    "FORKED_LOGS",
    "Dropped",
    "drop_second_logs",
    "forked_from",
    "may_share_session",
    "runs_sharing_calls",
    "session_key",
    "session_of",
    "sessions_to_read",
]

#: The log kinds (sources) of one harness that can hold the same session, the one that holds more first.
SAME_SESSION_LOGS: tuple[tuple[str, ...], ...] = (("claude-code-transcript", "claude-code-stream"),)
_RANK = {source: (n, k) for n, kinds in enumerate(SAME_SESSION_LOGS) for k, source in enumerate(kinds)}
#: The log kind whose sessions can be forked from others, copying their calls (one of the kinds above:
#: :func:`may_share_session` selects its runs too).
FORKED_LOGS = "claude-code-transcript"
assert FORKED_LOGS in _RANK


class Dropped(NamedTuple):
    """A run another log holds: ``dropped``, the ``kept`` run that holds it, and ``why`` (one line)."""

    dropped: Trajectory
    kept: Trajectory
    why: str


def session_of(t: Trajectory) -> str | None:
    """The session a main run's log names (a sub-agent's run names its parent's: None)."""
    extra = extra_of(t.extra)
    if extra.get("sidechain_file") or extra.get("agent_id"):
        return None
    sid = extra.get("session_id")
    return sid if isinstance(sid, str) and sid else None


def may_share_session(t: Trajectory) -> bool:
    """Whether another log may hold ``t``'s session or a fork of it: the only runs
    :func:`drop_second_logs` and :func:`runs_sharing_calls` look at."""
    return t.source in _RANK and session_of(t) is not None


def session_key(t: Trajectory) -> tuple[str, str, str | None] | None:
    """What :func:`sessions_to_read` needs of a run: its log kind, its session and the session it was
    forked from (None: a run the passes here never look at)."""
    if not may_share_session(t):
        return None
    return (t.source, session_of(t) or "", forked_from(t))


def sessions_to_read(keys: Mapping[int, tuple[str, str, str | None]]) -> set[int]:
    """Of runs given as ``{position: session_key}``, those :func:`drop_second_logs` and
    :func:`runs_sharing_calls` may drop, change or name: every run of a session that two log kinds
    hold, every fork, and every run of a session a fork names.  Given only those runs (in their
    order), the passes do what they do given all of them."""
    kinds: dict[tuple[int, str], set[str]] = defaultdict(set)
    for source, sid, _ in keys.values():
        kinds[(_RANK[source][0], sid)].add(source)
    origins = {origin for _, _, origin in keys.values() if origin is not None}
    return {
        i
        for i, (source, sid, origin) in keys.items()
        if len(kinds[(_RANK[source][0], sid)]) > 1
        or origin is not None
        or (source == FORKED_LOGS and sid in origins)
    }


def forked_from(t: Trajectory) -> str | None:
    """The session a main run was forked from (``extra.forked_from``), or None."""
    origin = extra_of(t.extra).get("forked_from") if t.source == FORKED_LOGS else None
    return origin if isinstance(origin, str) and origin and session_of(t) is not None else None


def _same_call(a: Step, b: Step, cut: bool = False) -> bool:
    """Whether two steps are one call (tool, arguments, message, output); ``cut``: ``b``'s output may
    be missing (a log cut off while the tool ran)."""
    if (a.tool_name, a.tool_args, a.assistant_text) != (b.tool_name, b.tool_args, b.assistant_text):
        return False
    return a.output == b.output or (cut and b.output is None)


def _places(t: Trajectory, part: Trajectory) -> list[int]:
    """Where ``part``'s calls are ``t``'s calls in a row: the steps of ``t`` they start at.  The last
    may lack its output (a log cut off while the tool ran)."""
    n = len(part.steps)
    if not n:
        return []

    def there(at: int) -> bool:
        pairs = zip(t.steps[at : at + n], part.steps)
        return all(_same_call(a, b, cut=k == n - 1) for k, (a, b) in enumerate(pairs))

    return [at for at in range(len(t.steps) - n + 1) if there(at)]


def _shared(a: Trajectory, b: Trajectory) -> int:
    """How many first calls two runs have alike."""
    n = 0
    while n < min(len(a.steps), len(b.steps)) and _same_call(a.steps[n], b.steps[n]):
        n += 1
    return n


def _take_what_only_it_says(kept: Trajectory, dropped: Trajectory, at_end: bool) -> None:
    """The run's outcome (only ``at_end``: the dropped log's calls end where the kept one's do) and its
    task's label, where only the dropped log has them."""
    if at_end and kept.success is None and dropped.success is not None:
        kept.success, kept.outcome_source = dropped.success, dropped.outcome_source
    sid = session_of(dropped)
    if dropped.task_id and dropped.task_id != sid and kept.task_id == session_of(kept):
        kept.task_id = dropped.task_id  # a label (the report's task), where the transcript has only the id
    if not kept.task_text and dropped.task_text:
        kept.task_text = dropped.task_text
    for key in ("prompt_file", "label"):
        value = extra_of(dropped.extra).get(key)
        if value is not None and extra_of(kept.extra).get(key) is None:
            set_extra(kept, key, value)


def drop_second_logs(trajs: list[Trajectory]) -> tuple[list[Trajectory], list[Dropped]]:
    """``trajs`` without the runs another log of the same session holds, and what was dropped, into
    what, and why.  Runs of other sources, or without a session id, are left as they are; the kept run
    lists the logs dropped into it (``extra.also_logged_in``)."""
    groups: dict[tuple[int, str], list[int]] = {}
    for i, t in enumerate(trajs):
        if may_share_session(t):
            groups.setdefault((_RANK[t.source][0], session_of(t)), []).append(i)
    gone: dict[int, tuple[int, bool, str]] = {}  # dropped -> (kept, whether its calls end the kept's, why)
    for members in groups.values():
        if len({trajs[i].source for i in members}) < 2:
            continue  # one log kind: twin runs of it are the driver's to tell apart
        # the longest first, of one length the log that holds more
        order = sorted(members, key=lambda i: (-len(trajs[i].steps), _RANK[trajs[i].source][1]))
        for pos, i in enumerate(order):
            if i in gone:
                continue
            for j in order[pos + 1 :]:
                if j in gone or trajs[j].source == trajs[i].source:
                    continue
                at = _places(trajs[i], trajs[j])
                if at:
                    why = f"the same session as {_where(trajs[i])}, kept once"
                    gone[j] = (i, len(trajs[i].steps) - len(trajs[j].steps) in at, why)
    # a session forked on resume copies the calls it was forked from into its own transcript: an
    # original that ended there is the fork's beginning, kept once, in the (first) fork
    for i, j in _forks(trajs, gone):
        if i not in gone and 0 in _places(trajs[j], trajs[i]):
            # the original's end is not the fork's: its outcome is not taken
            gone[i] = (j, False, f"its calls are the first of its fork {_where(trajs[j])}, kept once there")
    out = []
    for j, (i, at_end, why) in gone.items():
        kept, dropped = trajs[i], trajs[j]
        _take_what_only_it_says(kept, dropped, at_end)
        also = extra_of(kept.extra).get("also_logged_in") or []
        set_extra(kept, "also_logged_in", [*also, dropped.source_path or dropped.traj_id])
        out.append(Dropped(dropped, kept, why))
    return [t for i, t in enumerate(trajs) if i not in gone], out


def _forks(trajs: list[Trajectory], gone: Mapping[int, Any] | None = None) -> list[tuple[int, int]]:
    """``(original, fork)`` indices of the runs not ``gone`` whose fork names the original's session."""
    gone = gone or {}
    main: dict[str, int] = {}
    for i, t in enumerate(trajs):
        if i not in gone and t.source == FORKED_LOGS and (sid := session_of(t)) is not None:
            main.setdefault(sid, i)
    return [
        (main[origin], j)
        for j, t in enumerate(trajs)
        if j not in gone and (origin := forked_from(t)) in main and main[origin] != j
    ]


def runs_sharing_calls(trajs: list[Trajectory]) -> list[tuple[Trajectory, Trajectory, int]]:
    """Runs that both hold calls made once, as ``(earlier, later, calls)``: a forked session beside the
    session it was forked from, which went on after the fork, and two forks of one session (each
    holds the calls before its fork).  Their first ``calls`` calls are counted in each."""
    out = []
    for i, j in _forks(trajs):
        if n := _shared(trajs[i], trajs[j]):
            out.append((trajs[i], trajs[j], n))
    by_origin: dict[str, list[int]] = {}
    for j, t in enumerate(trajs):
        if (origin := forked_from(t)) is not None:
            by_origin.setdefault(origin, []).append(j)
    for siblings in by_origin.values():
        for a, b in itertools.combinations(siblings, 2):
            if n := _shared(trajs[a], trajs[b]):
                out.append((trajs[a], trajs[b], n))
    return out


def _where(t: Trajectory) -> str:
    return f"{t.source_path or t.traj_id} ({t.source})"
