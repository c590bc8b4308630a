"""The need labeller: :func:`label_trajectory` on a whole log, :class:`NeedLabeller` turn by turn.

The rules (provenance, reaccess, edit, reference) are in :mod:`dtoc_rl.labels`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

from dtoc_rl.core.record import format_key
from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.labels.calls import _step_resources
from dtoc_rl.labels.resources import Resource, _args_text, _json_args, same_path
from dtoc_rl.labels.shell import _State
from dtoc_rl.labels.spans import _SpanIndex

DEFAULT_WINDOW = 6
DEFAULT_MIN_SPAN = 24
DEFAULT_MIN_ATOM = 10
EVIDENCE_CHARS = 200

_KEY = re.compile(r"\bt\d{4,5}\b")
_ENVELOPE_KEY = re.compile(r'"tool_key"\s*:\s*"(t\d{4,5})"')
_IDLIKE = re.compile(r"[\w-]{8,}")


def _edit_sources(
    res_by_base: dict[str, dict[Resource, int]],
    writes_by_base: dict[str, dict[str, int]],
    any_write: int,
    path: str,
    visible: set[int],
) -> set[int]:
    """The visible steps that read file ``path`` and whose text of it is still current (no write since).

    An in-place edit must match text somewhere in the file and the action rarely says where, so every
    current read is a source; when the agent has rewritten the file since every read, the latest read.
    """
    base = os.path.basename(path)
    written = max([any_write, *(w for p, w in writes_by_base.get(base, {}).items() if same_path(p, path))])
    reads = {src for r, src in res_by_base.get(base, {}).items() if src in visible and same_path(r.key, path)}
    current = {src for src in reads if src > written}
    return current or ({max(reads)} if reads else set())


def _turn_groups(steps: list[Step]) -> list[list[Step]]:
    if not steps:
        return []
    turns = [s.turn for s in steps]
    informative = len(set(turns)) > 1 or len(steps) == 1
    groups: list[list[Step]] = []
    for s in steps:
        if informative and groups and groups[-1][0].turn == s.turn:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _recorded_keys(traj: Trajectory) -> dict[str, int] | None:
    """The key -> step map a DTOC orchestrator saved with its log (``extra["dtoc_keys"]``)."""
    try:
        raw = traj.extra_dict().get("dtoc_keys")
        keys = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, AttributeError):
        return None
    if not isinstance(keys, dict):
        return None
    n = len(traj.steps)
    return {k: v for k, v in keys.items() if isinstance(k, str) and type(v) is int and 0 <= v < n}


def _key_map(traj: Trajectory, keys: dict[str, int] | None) -> dict[str, int]:
    if keys is not None:
        return dict(keys)
    recorded = _recorded_keys(traj)
    if recorded:
        return recorded
    found: dict[str, int] = {}
    for s in traj.steps:
        if s.output and '"tool_key"' in s.output:
            m = _ENVELOPE_KEY.search(s.output)
            if m:
                found.setdefault(m.group(1), s.index)
    if found:
        return found
    ordinal = {}
    n = 0
    for s in traj.steps:
        if s.output is not None:
            ordinal[format_key(n)] = s.index
            n += 1
    return ordinal


def _own_texts(s: Step, include_reasoning: bool) -> list[str]:
    """The texts of a step that become the agent's own words once its turn is over: its message, its
    call's arguments as logged and as plain text, and (``include_reasoning``) its reasoning.  A DTOC
    context keeps arguments that are not JSON (a raw command line) as ``{"input": text}``: that wrapping
    is the context's, not the agent's, so the text alone counts, as in the raw log."""
    args = _json_args(s.tool_args)
    if args is not None and len(args) == 1 and isinstance(args.get("input"), str):
        texts = [s.assistant_text, args["input"]]
    else:
        args_text = _args_text(s)
        texts = [s.assistant_text, s.tool_args, *([args_text] if args_text != s.tool_args else [])]
    return [*texts, s.reasoning] if include_reasoning else texts


class NeedLabeller:
    """:func:`label_trajectory` one turn at a time, for agents that are still running.

    Feed the turns in order with :meth:`label_turn` (the steps of one assistant message, numbered
    on from the previous turn's): it fills their ``read_resource``, ``write_resources`` and
    ``needs`` as :func:`label_trajectory` does on the whole trajectory, provided each step's
    ``output`` is set when its turn is fed.  (One exception: in a trajectory whose steps all
    share one turn number, :func:`label_trajectory` takes each step as a turn of its own, since
    some logs carry no turn numbers; so a session of one turn with several calls differs.)  The
    indexes persist, so a turn costs time linear in its own text, whatever the length of the
    session.  An output that arrives after its turn was fed can still be added
    (:meth:`add_output`): later turns may need it, its own step's labels stay as they were.

    ``keys`` maps DTOC tool keys to step indices (it may be a live mapping that grows with the
    session; a key is only ever resolved to a step already fed).  ``track_unique`` keeps, per
    output, what of it no newer output and none of the agent's own words hold (:meth:`unique`, a
    learned policy's input; :func:`unique_events` gives the same offline).  The other arguments are
    :func:`label_trajectory`'s.
    """

    def __init__(
        self,
        task_text: str = "",
        system_prompt: str = "",
        *,
        keys: Mapping[str, int] | None = None,
        min_span: int = DEFAULT_MIN_SPAN,
        window: int = DEFAULT_WINDOW,
        min_atom: int = DEFAULT_MIN_ATOM,
        include_reasoning: bool = False,
        exclude_agent_text: bool = True,
        track_unique: bool = False,
    ):
        self.min_span = min_span
        self.include_reasoning = include_reasoning
        self.exclude_agent_text = exclude_agent_text
        self.keys: Mapping[str, int] = keys if keys is not None else {}
        self.steps_fed = 0
        self._idx = _SpanIndex(window, min_atom, track_unique=track_unique)
        self._idx.add_own(task_text)
        self._idx.add_own(system_prompt)
        self._state = _State()
        self._call_ids: dict[str, int] = {}
        self._visible: set[int] = set()  # steps of earlier turns that have an output
        # resource string -> latest earlier step; files also by basename for path-suffix matching
        self._res_latest: dict[str, int] = {}
        self._res_by_base: dict[str, dict[Resource, int]] = defaultdict(dict)
        # file path -> latest step that wrote it (by basename), and the latest unknown write (``*``)
        self._writes_by_base: dict[str, dict[str, int]] = defaultdict(dict)
        self._any_write = -1
        self._reads_waiting: dict[int, list[Resource]] = {}  # steps fed without an output

    def label_turn(self, steps: Sequence[Step]) -> None:
        """Label the steps of one turn (in place); then their outputs become visible to later turns."""
        for i, s in enumerate(steps):
            if s.index != self.steps_fed + i:
                raise ValueError(
                    f"step {s.index} fed as step {self.steps_fed + i}: turns must be fed in order "
                    "and steps numbered 0..n-1"
                )
        idx, state, visible = self._idx, self._state, self._visible
        for s in steps:
            idx.add_own(s.user_text)
        labelled: list[tuple[Step, list[Resource]]] = []
        for s in steps:
            reads, writes = _step_resources(s, state)
            reads = list(dict.fromkeys(reads))
            s.read_resource = "\n".join(str(r) for r in reads) or None
            s.write_resources = list(dict.fromkeys(writes))
            needs: dict[tuple[int, str], str] = {}
            # provenance
            texts = [_args_text(s)]
            if s is steps[0] or s.assistant_text:
                texts.append(s.assistant_text)
            if self.include_reasoning:
                texts.append(s.reasoning)
            for text in texts:
                for src, span in idx.match(text, self.min_span).items():
                    if src in visible:
                        prev = needs.get((src, "provenance"), "")
                        if len(span) > len(prev):
                            needs[(src, "provenance")] = span
            # re-access
            for r in reads:
                if r.kind == "file":
                    for prev, src in self._res_by_base.get(os.path.basename(r.key), {}).items():
                        if src in visible and r.overlaps(prev):
                            needs.setdefault((src, "reaccess"), str(prev))
                else:
                    src = self._res_latest.get(str(r))
                    if src is not None and src in visible:
                        needs.setdefault((src, "reaccess"), str(r))
            # in-place edits must match text that the file's current reads showed
            for path in dict.fromkeys(state.edits):
                sources = _edit_sources(
                    self._res_by_base, self._writes_by_base, self._any_write, path, visible
                )
                # an edit whose text was copied from some of these reads came from them
                copied = {src for src in sources if (src, "provenance") in needs}
                for src in copied or sources:
                    needs.setdefault((src, "edit"), f"file:{path}")
            # references
            action = "\n".join(t for t in texts if t)
            for m in _KEY.finditer(action):
                src = self.keys.get(m.group(0))
                if src is not None and src in visible:
                    needs.setdefault((src, "reference"), m.group(0))
            if self._call_ids:
                for m in _IDLIKE.finditer(action):
                    src = self._call_ids.get(m.group(0))
                    if src is not None and src in visible:
                        needs.setdefault((src, "reference"), m.group(0))
            s.needs = [
                Need(step=st, kind=kind, evidence=ev[:EVIDENCE_CHARS])
                for (st, kind), ev in sorted(needs.items())
            ]
            labelled.append((s, reads))
        self.steps_fed += len(steps)
        # the turn is over: its words become "own words", its outputs become visible
        for s in steps if self.exclude_agent_text else ():
            for text in _own_texts(s, self.include_reasoning):
                idx.add_own(text)
        for s, reads in labelled:
            for w in s.write_resources:
                if w == "*":
                    self._any_write = s.index
                elif not w.startswith("state:"):
                    self._writes_by_base[os.path.basename(w)][w] = s.index
            if s.output is None:
                self._reads_waiting[s.index] = reads
            else:
                self._show(s, reads)

    def skip_turn(self, steps: Sequence[Step]) -> None:
        """Pass over a turn without labelling it (e.g. one that :meth:`label_turn` failed on):
        its steps keep no resources or needs, and their outputs become visible to later turns."""
        for s in steps:
            s.read_resource, s.write_resources, s.needs = None, [], []
        if steps:
            self.steps_fed = steps[-1].index + 1
        for s in steps:
            if s.output is None:
                self._reads_waiting[s.index] = []
            else:
                self._show(s, [])

    def add_output(self, step: Step) -> None:
        """A step fed without an output has one now: later turns may need it.  (Its own
        resources and needs stay as labelled: an abbreviated view or a refused edit is only
        seen in its output.)  A step not fed yet, or already shown, is ignored."""
        reads = self._reads_waiting.pop(step.index, None)
        if reads is not None and step.output is not None:
            self._show(step, reads)

    def unique(self, step: int) -> tuple[float, float]:
        """Output ``step``'s shares of token windows and of distinctive atoms that it alone holds, as
        fed so far (``track_unique``; (1, 1) before its output is fed)."""
        return self._idx.unique(step)

    def take_unique_changes(self) -> set[int]:
        """The steps whose :meth:`unique` moved since the last call (``track_unique``)."""
        changed, self._idx.changed = self._idx.changed, set()
        return changed

    def _show(self, s: Step, reads: list[Resource]) -> None:
        self._idx.add_output(s.output, s.index)
        self._visible.add(s.index)
        if s.tool_call_id:
            self._call_ids[s.tool_call_id] = s.index
        for r in reads:
            self._res_latest[str(r)] = s.index
            if r.kind == "file":
                self._res_by_base[os.path.basename(r.key)][r] = s.index


def label_trajectory(
    traj: Trajectory,
    *,
    min_span: int = DEFAULT_MIN_SPAN,
    window: int = DEFAULT_WINDOW,
    min_atom: int = DEFAULT_MIN_ATOM,
    include_reasoning: bool = False,
    keys: dict[str, int] | None = None,
    exclude_agent_text: bool = True,
) -> Trajectory:
    """Fill ``read_resource``, ``write_resources`` and ``needs`` of every step (in place).

    ``min_span``: fewest non-space characters of a copied token run;
    ``window``: tokens per hashed window (the shortest run); ``min_atom``: the
    shortest distinctive identifier/path; ``include_reasoning``: also treat
    ``step.reasoning`` as action text (and as own words); ``keys``: DTOC tool
    key → step index, when known; ``exclude_agent_text=False`` drops the
    agent's own earlier messages and actions from the exclusion (task, system
    prompt and user messages stay excluded) — for sensitivity analysis only,
    it counts re-quotes of the agent's own words as copies.  See the module
    docstring for the rules.  Existing labels are replaced.  Returns ``traj``.  At the default
    settings the outputs' own shares are kept too (``unique_events``, :func:`unique_events`' and
    ``unique_digest``); at others they are not (None).
    A running agent labels turn by turn with :class:`NeedLabeller` (the same labels).
    """
    for i, s in enumerate(traj.steps):
        if s.index != i:
            raise ValueError(f"step {i} has index {s.index}; steps must be numbered 0..n-1")
    # at the rule's settings the labeller's index is unique_events' (a test pins the two equal): its
    # shares are kept with the run, so that a replay need not index every output again
    plain = (window, min_atom, include_reasoning, exclude_agent_text) == (
        DEFAULT_WINDOW,
        DEFAULT_MIN_ATOM,
        False,
        True,
    )
    labeller = NeedLabeller(
        traj.task_text,
        traj.system_prompt,
        keys=_key_map(traj, keys),
        min_span=min_span,
        window=window,
        min_atom=min_atom,
        include_reasoning=include_reasoning,
        exclude_agent_text=exclude_agent_text,
        track_unique=plain,
    )
    events: list[list[float]] = []
    for group in _turn_groups(traj.steps):
        labeller.label_turn(group)
        if plain:
            at = group[-1].index
            events.extend([at, k, *labeller.unique(k)] for k in sorted(labeller.take_unique_changes()))
    traj.unique_events = events if plain else None
    traj.unique_digest = unique_digest(traj) if plain else None
    return traj


#: Names the rule :func:`unique_events` follows, in :func:`unique_digest`: events stored in a dataset
#: (``Trajectory.unique_events``) are used only while it is the same.  Change it with the rule (the
#: spans' tokens, atoms or release): a test holds the bundled sample's stored events to the rule.
UNIQUE_RULE = f"unique-1 window={DEFAULT_WINDOW} min_atom={DEFAULT_MIN_ATOM}"

_OWN, _OUTPUT, _TURN = 0, 1, 2


def _unique_feed(traj: Trajectory) -> Iterator[tuple[int, str | None, int]]:
    """What :func:`unique_events` feeds its index, in order: ``(_OWN, text, -1)`` for the agent's and
    the user's words, ``(_OUTPUT, text, step)`` for an output, ``(_TURN, None, last step)`` at the end
    of each turn.  :func:`unique_digest` reads the same feed, so it covers all the events depend on."""
    yield _OWN, traj.task_text, -1
    yield _OWN, traj.system_prompt, -1
    for group in _turn_groups(traj.steps):
        for s in group:
            yield _OWN, s.user_text, -1
        for s in group:
            for text in _own_texts(s, False):
                yield _OWN, text, -1
        for s in group:
            if s.output is not None:
                yield _OUTPUT, s.output, s.index
        yield _TURN, None, group[-1].index


def unique_events(
    traj: Trajectory, *, window: int = DEFAULT_WINDOW, min_atom: int = DEFAULT_MIN_ATOM
) -> list[tuple[int, int, float, float]]:
    """``(step fed, output step, window share, atom share)`` each time an output's :meth:`NeedLabeller.
    unique` shares move, in order, as a ``NeedLabeller(track_unique=True)`` fed the trajectory's turns
    would move them (the first event of an output is its own step's), without labelling anything: the
    index is fed the same texts in the same order (a test pins the two equal).  Offline, so that a
    replayed run shows a policy what a live one does."""
    idx = _SpanIndex(window, min_atom, track_unique=True)
    events: list[tuple[int, int, float, float]] = []
    for kind, text, k in _unique_feed(traj):
        if kind == _OWN:
            idx.add_own(text)
        elif kind == _OUTPUT:
            idx.add_output(text, k)
        else:
            events.extend((k, j, *idx.unique(j)) for j in sorted(idx.changed))
            idx.changed.clear()
    return events


def unique_digest(traj: Trajectory) -> int:
    """A signed 64-bit number for the texts and turns :func:`unique_events` reads and its rule
    (:data:`UNIQUE_RULE`), the same in every process: events stored with it are the run's own while
    the run reads the same (a run joined, cut or edited after labelling gets its events computed
    again)."""
    h = hashlib.blake2b(UNIQUE_RULE.encode(), digest_size=8)
    for kind, text, k in _unique_feed(traj):
        h.update(b"\x00%d %d\x00" % (kind, k))
        if text:
            h.update(text.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big", signed=True)
