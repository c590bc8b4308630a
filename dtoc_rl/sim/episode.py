"""Compiled episodes: a labelled trajectory as flat numpy arrays.

Replaying thousands of episodes per second needs every per-step quantity
precomputed once: token costs of each segment of the context, the need
schedule (CSR arrays), when each output's resource is next modified, and so
on.  :func:`compile_episode` does this; the cost simulator and the envs only
read these arrays.

Context layout assumed everywhere (it is what :class:`~dtoc_rl.DTOCContext`
assembles): ``base`` (system prompt + task), then for each step k in order
``U_k`` (user/environment text that arrived before call k), ``A_k`` (the
assistant message of call k: text, reasoning, tool call) and ``O_k`` (the
tool output, as envelope or placeholder).  Token costs use the same estimator
and the same envelope/placeholder texts as the store.

A step is one tool call; a *model call* is one assistant turn, which may make
several tool calls at once (consecutive steps sharing ``Step.turn``).  Billing
is per model call: ``call_ptr`` groups the steps into calls (call ``c`` is
steps ``call_ptr[c]`` to ``call_ptr[c + 1] - 1``); its prompt ends with the
user text of its steps, its output tokens are the assistant tokens of all its
steps, and every output of the turn joins the context after it.
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

import numpy as np

from dtoc_rl.core.record import ToolOutput, format_key
from dtoc_rl.core.tokens import TokenEstimator, get_estimator
from dtoc_rl.data.models import family_id, model_index
from dtoc_rl.data.schema import NEED_KINDS, Trajectory
from dtoc_rl.labels import unique_digest, unique_events
from dtoc_rl.labels.vocabulary import tool_category_id
from dtoc_rl.labels.words import WORDS_PER_OUTPUT, output_words, words_array
from dtoc_rl.sim.pricing import logged_ttl

__all__ = ["Episode", "compile_episode", "compile_episodes", "drop_unseen_needs", "harness_dropped"]

NEVER = np.iinfo(np.int32).max


@dataclass
class Episode:
    traj_id: str
    task_id: str
    source: str
    model_family: str
    family_id: int
    success: bool | None
    n: int  # steps (tool calls); model calls are n_calls
    base_tokens: int
    user_tok: np.ndarray  # (n,) int64: user text tokens, a model call's all on its first step
    asst_tok: np.ndarray  # (n,) output tokens of each call
    has_out: np.ndarray  # (n,) bool
    est_tok: np.ndarray  # (n,) estimated tokens of the raw output
    vis_cost: np.ndarray  # (n,) tokens of the envelope
    hid_cost: np.ndarray  # (n,) tokens of the placeholder
    tool_id: np.ndarray  # (n,) tool category ids
    is_error: np.ndarray  # (n,) bool
    need_ptr: np.ndarray  # (n+1,) CSR offsets into need_idx for each step
    need_idx: np.ndarray  # earlier steps needed
    need_kind: np.ndarray  # index into NEED_KINDS
    modified_at: np.ndarray  # (n,) first later step that modifies what k read (NEVER if none)
    superseded_at: np.ndarray  # (n,) first later step that re-accesses the same resource
    user_turn: np.ndarray  # (n,) user turns begun up to and including step k (the task is turn 1)
    logged_masked: list[list[int] | None] = field(default_factory=list)  # per step, from the log
    # per step: whole pairs dropped (a harness's window, a compaction's replaced steps: harness_dropped)
    logged_dropped: list[list[int] | None] = field(default_factory=list)
    harness_tok: np.ndarray | None = None  # (n,) tokens of text the harness sent with call k only
    # The provider's usage per call, NaN where the log has none (see schema.Usage); on a turn's first step.
    logged_in: np.ndarray | None = None
    logged_cached: np.ndarray | None = None
    logged_cache_write: np.ndarray | None = None
    logged_out: np.ndarray | None = None
    logged_cost: np.ndarray | None = None
    unlogged_tokens: int = 0  # prompt tokens the log lacks (part of base_tokens)
    keys: list[str] = field(default_factory=list)  # DTOC key of each step's output ('' if none)
    previews: list[str] = field(default_factory=list)  # short output previews, for text views
    thoughts: list[str] = field(default_factory=list)  # assistant text / reasoning, cut, for text views
    tool_names: list[str] = field(default_factory=list)
    model_raw: str = ""  # the log's model name (prices are per model version)
    # (n, WORDS_PER_OUTPUT) int64: each output's hashed call words (labels.words), zeros without one
    words: np.ndarray | None = None
    timestamps: np.ndarray | None = None  # (n,) seconds since the epoch of each call, NaN unknown
    # (n_calls + 1,) steps at which each model call starts, then n; None: every step is its own call
    call_ptr: np.ndarray | None = None
    # (E, 4) float64, by step fed: (step fed, output step, unique_text, unique_names) each time what an
    # output alone holds shrinks (dtoc_rl.labels.unique_events); None: never computed (every output 1, 1)
    unique: np.ndarray | None = None
    # (n_calls,) int64: the model each call went to, an index into ``models`` (0: the run's model_raw);
    # None: every call went to the run's model.  ``models`` lists the names the log gives them.
    call_model: np.ndarray | None = None
    models: list[str] = field(default_factory=list)
    # seconds the provider keeps this run's prompt cache when its log says (pricing.logged_ttl: an hour
    # when most of its logged writes were Anthropic's 1-hour ones); None: the provider's documented one
    cache_ttl: float | None = None

    @property
    def gap(self) -> np.ndarray:
        """Tokens saved by hiding each output (envelope - placeholder; 0 without output)."""
        if self._gap is None:
            self._gap = np.where(self.has_out, self.vis_cost - self.hid_cost, 0)
        return self._gap

    @property
    def out_steps(self) -> np.ndarray:
        """Step indices that have an output, in order (cached)."""
        if self._out_steps is None:
            self._out_steps = np.flatnonzero(self.has_out)
        return self._out_steps

    @property
    def starts(self) -> np.ndarray:
        """(n_calls + 1,) the first step of each model call, then ``n`` (cached)."""
        if self._starts is None:
            ptr = self.call_ptr
            self._starts = np.arange(self.n + 1, dtype=np.int64) if ptr is None else np.asarray(ptr, np.int64)
        return self._starts

    @property
    def n_calls(self) -> int:
        """Model calls (assistant turns); at most ``n``."""
        return len(self.starts) - 1

    @property
    def call_of_step(self) -> np.ndarray:
        """(n,) the model call each step belongs to (cached)."""
        if self._call_of is None:
            st = self.starts
            self._call_of = np.repeat(np.arange(len(st) - 1, dtype=np.int64), np.diff(st))
        return self._call_of

    @property
    def prev_call(self) -> np.ndarray:
        """(n_calls,) the last call before each one that went to the same model (-1: none), i.e. the
        call whose prompt a provider's cache holds for it: a cache is per model (cached)."""
        if self._prev_call is None or self._prev_call[0] is not self.call_model:  # kept per call_model
            nc = self.n_calls
            if self.call_model is None:
                prev = np.arange(nc, dtype=np.int64) - 1
            else:
                last: dict[int, int] = {}
                prev = np.full(nc, -1, np.int64)
                for c, m in enumerate(self.call_model.tolist()):
                    prev[c] = last.get(m, -1)
                    last[m] = c
            self._prev_call = (self.call_model, prev)
        return self._prev_call[1]

    def per_call(self, a: np.ndarray) -> np.ndarray:
        """Per-step integer quantities ``a`` summed over each model call's steps."""
        st = self.starts
        if len(st) - 1 == self.n:
            return np.asarray(a)
        return np.add.reduceat(np.asarray(a), st[:-1]) if self.n else np.zeros(0, np.asarray(a).dtype)

    def call_needs(self, c: int, kinds: np.ndarray | None = None) -> np.ndarray:
        """Sorted distinct earlier outputs needed by model call ``c``: the union of its steps' needs
        (optionally only kinds in the boolean mask ``kinds``) on steps stored before the call."""
        st = self.starts
        a, b = int(st[c]), int(st[c + 1])
        if b == a + 1:
            return np.unique(self.needs_at(a, kinds))
        idx = np.concatenate([self.needs_at(t, kinds) for t in range(a, b)])
        return np.unique(idx[idx < a])

    def call_reads(self, c: int, kinds: np.ndarray | None = None) -> np.ndarray:
        """Sorted distinct outputs model call ``c`` must see: the ones it needs (:meth:`call_needs`) and
        the outputs of call ``c - 1``, which no call has read yet.  Those are the agent's results of its
        own tool calls: hidden before the call that reads them first, the agent gets a placeholder for
        an answer it never saw, a miss like any other (the masked logs never hide them: SWE-agent's
        ``LastNObservations`` keeps the newest five).  They are not need labels, so ``times_needed``
        and the hide-big rule's "needed again" still count only the agent's later uses.  One the log
        says call ``c`` was sent without (a compaction right after it) is not among them: that call did
        not read it, and the log holds what the agent did instead (:func:`drop_unseen_needs`)."""
        needs = self.call_needs(c, kinds)
        if c < 1:
            return needs
        st = self.starts
        a, b = int(st[c - 1]), int(st[c])
        fresh = a + np.flatnonzero(self.has_out[a:b])
        unseen = self.logged_hidden(c, masked=False) if len(fresh) else None
        if unseen:
            fresh = fresh[[int(k) not in unseen for k in fresh]]  # a lookup per output, not per hidden one
        return np.union1d(needs, fresh) if len(needs) else fresh

    def logged_hidden(self, c: int, masked: bool = True) -> set[int] | None:
        """The outputs (their steps) the log says model call ``c`` was sent without: dropped with their
        pair (a harness's window, a compaction) and, with ``masked``, masked (a placeholder in their
        place: SWE-agent's ``LastNObservations``, a policy plugged in live); None where the log says
        nothing of them."""
        first = int(self.starts[c])
        m = self.logged_masked[first] if masked and first < len(self.logged_masked) else None
        d = self.logged_dropped[first] if first < len(self.logged_dropped) else None
        if m is None and d is None:
            return None
        if d is not None:
            # one set per list: after a compaction every call shares its list, so a long run's calls
            # cost a lookup each rather than a set of everything compacted so far (callers only read)
            sets = self._dropped_sets
            if sets is None:
                sets = self._dropped_sets = {}
            d = sets.get(id(d)) or sets.setdefault(id(d), frozenset(d))
        if not m:
            return frozenset() if d is None else d
        return set(m) | (d or frozenset())

    def harness_hidden(self, masked: bool = True) -> list[AbstractSet[int]]:
        """What the run's harness hid at each of its model calls (their steps): what the log says the
        call was sent without (:meth:`logged_hidden`), and where the log says nothing of a call, what it
        last said (nothing before it): a window, a compaction or a live policy keeps hidden what it hid
        until its log says otherwise.  A call the log describes only by what was masked at it dropped
        nothing."""
        out: list[AbstractSet[int]] = []
        last: AbstractSet[int] = frozenset()
        for c in range(self.n_calls):
            said = self.logged_hidden(c, masked)
            if said is None and not masked and self.logged_hidden(c) is not None:  # by its masking alone:
                said = frozenset()  # nothing dropped (OpenCode's summary call is sent everything)
            last = last if said is None else said
            out.append(last)
        return out

    _out_steps: np.ndarray | None = field(default=None, repr=False, compare=False)
    _gap: np.ndarray | None = field(default=None, repr=False, compare=False)
    _starts: np.ndarray | None = field(default=None, repr=False, compare=False)
    _call_of: np.ndarray | None = field(default=None, repr=False, compare=False)
    _prev_call: tuple[np.ndarray | None, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _dropped_sets: dict[int, frozenset[int]] | None = field(default=None, repr=False, compare=False)
    # the trajectory ``unique`` is computed from, until it is: most of compiling an episode is that
    # labelling pass, and a worker of evaluate()'s pool replays only its own chunks' episodes
    _unique_of: Trajectory | None = field(default=None, repr=False, compare=False)

    def unique_shares(self) -> np.ndarray:
        """``unique``, computed from the trajectory at first use; no events (every output holding all
        of its text and names) for an episode that has none to compute from, e.g. one built by hand."""
        traj = self._unique_of  # read once: another thread may finish it meanwhile
        if self.unique is None and traj is not None:
            self.unique = np.asarray(unique_events(traj), np.float64).reshape(-1, 4)
            self._unique_of = None
        return self.unique if self.unique is not None else np.zeros((0, 4))

    def needs_at(self, t: int, kinds: np.ndarray | None = None) -> np.ndarray:
        """Earlier steps needed by call t (optionally only kinds in the boolean mask ``kinds``)."""
        a, b = self.need_ptr[t], self.need_ptr[t + 1]
        idx = self.need_idx[a:b]
        if kinds is not None:
            idx = idx[kinds[self.need_kind[a:b]]]
        return idx


def _call_tokens(est: TokenEstimator, name: str | None, args: str) -> int:
    if name is None:
        return 0
    try:
        parsed = json.loads(args) if args.strip() else {}
    except json.JSONDecodeError:
        parsed = {"input": args}
    return est.count(name + json.dumps(parsed, ensure_ascii=False))


def compile_episode(
    traj: Trajectory, estimator: TokenEstimator | str | None = None, keep_unseen_needs: bool = False
) -> Episode:
    """Flatten one (labelled) trajectory; see the module docstring for the layout.  A need of a call on
    an output its log says that call was sent without, its pair dropped, is dropped
    (:func:`drop_unseen_needs`) unless ``keep_unseen_needs``: what a run's replay predicts against what
    its agent did needs them.  (An output the log took away before any call read it is never a miss
    of its first read, either way: :meth:`Episode.call_reads`.)"""
    est = get_estimator(estimator)
    n = len(traj.steps)
    user_tok = np.zeros(n, np.int64)
    asst_tok = np.zeros(n, np.int64)
    has_out = np.zeros(n, bool)
    est_tok = np.zeros(n, np.int64)
    vis_cost = np.zeros(n, np.int64)
    hid_cost = np.zeros(n, np.int64)
    tool_id = np.zeros(n, np.int64)
    words = np.zeros((n, WORDS_PER_OUTPUT), np.int64)
    is_error = np.zeros(n, bool)
    need_ptr = np.zeros(n + 1, np.int64)
    need_idx: list[int] = []
    need_kind: list[int] = []
    superseded_at = np.full(n, NEVER, np.int64)
    keys, previews, thoughts = [], [], []
    harness_tok = np.zeros(n, np.int64)
    usage = np.full((5, n), np.nan)
    n_out = 0
    for k, s in enumerate(traj.steps):
        user_tok[k] = est.count(s.user_text) if s.user_text else 0
        harness_tok[k] = est.count(s.harness_text) if s.harness_text else 0
        if s.usage is not None:
            u = s.usage
            for row, v in enumerate(
                (u.input_tokens, u.cached_tokens, u.cache_write_tokens, u.output_tokens, u.cost_usd)
            ):
                if v is not None:
                    usage[row, k] = v
        asst_tok[k] = (
            est.count(s.assistant_text) + est.count(s.reasoning) + _call_tokens(est, s.tool_name, s.tool_args)
        )
        tool_id[k] = tool_category_id(s.tool_name, s.tool_args)
        is_error[k] = s.output_is_error
        if s.tool_name is not None and s.output is not None:
            key = format_key(n_out)
            n_out += 1
            rec = ToolOutput.create(key, s.output, est, timestamp=s.timestamp or 0.0)
            has_out[k] = True
            est_tok[k] = rec.estimated_tokens
            vis_cost[k] = rec.visible_cost
            hid_cost[k] = rec.hidden_cost
            keys.append(key)
            previews.append(rec.preview(100))
            words_array(output_words(s.tool_name, s.tool_args, s.output), words[k])
        else:
            keys.append("")
            previews.append("")
        thoughts.append(((s.reasoning + "\n" if s.reasoning else "") + s.assistant_text)[:400])
        seen = set()
        for need in s.needs:
            j = need.step
            if 0 <= j < k and (j, need.kind) not in seen and need.kind in NEED_KINDS:
                seen.add((j, need.kind))
                need_idx.append(j)
                need_kind.append(NEED_KINDS.index(need.kind))
                if need.kind == "reaccess":
                    superseded_at[j] = min(superseded_at[j], k)
        need_ptr[k + 1] = len(need_idx)
    call_ptr = _call_ptr(traj)
    if call_ptr is not None:
        # A call's prompt ends with all of its user text, which precedes its assistant message in the
        # context: kept on its first step, every cost path (Simulator, oracle, baseline) lays it out alike.
        for a, b in zip(call_ptr[:-1].tolist(), call_ptr[1:].tolist()):
            if b > a + 1:
                user_tok[a] = user_tok[a:b].sum()
                user_tok[a + 1 : b] = 0
    need_idx_a = np.asarray(need_idx, np.int64)
    # Needs on steps without an output cannot be missed; drop them here once.
    keep = has_out[need_idx_a] if len(need_idx_a) else np.zeros(0, bool)
    if not keep.all():
        counts = np.add.reduceat(keep.astype(np.int64), need_ptr[:-1]) if len(keep) else np.zeros(n, np.int64)
        counts[need_ptr[:-1] == need_ptr[1:]] = 0
        need_ptr = np.concatenate([[0], np.cumsum(counts)])
        need_idx_a = need_idx_a[keep]
        need_kind = list(np.asarray(need_kind)[keep])
    ep = Episode(
        traj_id=traj.traj_id,
        task_id=traj.task_id,
        source=traj.source,
        model_family=traj.model_family,
        family_id=family_id(traj.model_family),
        success=traj.success,
        n=n,
        base_tokens=est.count(traj.system_prompt or "")
        + est.count(traj.task_text or "")
        + int(traj.unlogged_prompt_tokens or 0),
        user_tok=user_tok,
        asst_tok=asst_tok,
        has_out=has_out,
        est_tok=est_tok,
        vis_cost=vis_cost,
        hid_cost=hid_cost,
        tool_id=tool_id,
        words=words,
        is_error=is_error,
        need_ptr=need_ptr.astype(np.int64),
        need_idx=need_idx_a,
        need_kind=np.asarray(need_kind, np.int64),
        modified_at=_modified_at(traj, has_out),
        superseded_at=superseded_at,
        user_turn=1 + np.cumsum([bool(s.user_text) for s in traj.steps]).astype(np.int64)
        if n
        else np.zeros(0, np.int64),
        logged_masked=[s.masked_before for s in traj.steps],
        logged_dropped=_shared_lists(harness_dropped(traj)),
        harness_tok=harness_tok,
        logged_in=usage[0],
        logged_cached=usage[1],
        logged_cache_write=usage[2],
        logged_out=usage[3],
        logged_cost=usage[4],
        cache_ttl=logged_ttl(s.usage for s in traj.steps),
        unlogged_tokens=int(traj.unlogged_prompt_tokens or 0),
        keys=keys,
        previews=previews,
        thoughts=thoughts,
        tool_names=[s.tool_name or "" for s in traj.steps],
        model_raw=traj.model_raw or "",
        timestamps=np.array([np.nan if s.timestamp is None else s.timestamp for s in traj.steps], float),
        call_ptr=call_ptr,
        **_stored_unique(traj),
        **_call_models(traj, call_ptr),
    )
    return ep if keep_unseen_needs else drop_unseen_needs(ep)


def _stored_unique(traj: Trajectory) -> dict:
    """``unique`` as the labeller kept it with the run, while the run reads as it did then (its digest);
    else the run, for :meth:`Episode.unique_shares` to compute them from at first use."""
    if traj.unique_events is not None and traj.unique_digest == unique_digest(traj):
        return {"unique": np.asarray(traj.unique_events, np.float64).reshape(-1, 4)}
    return {"_unique_of": traj}


def _call_models(traj: Trajectory, call_ptr: np.ndarray | None) -> dict:
    """``call_model`` and ``models`` of an episode: each call's model as its first step names it (a
    step naming none went to the run's ``model_raw``).  Names of one model (``same_model``: dated and
    undated, a provider prefix) are one model."""
    firsts = range(len(traj.steps)) if call_ptr is None else call_ptr[:-1].tolist()
    names = [traj.steps[a].model for a in firsts]
    if not any(names):
        return {}
    models = [traj.model_raw or ""]
    which = [model_index(name, models) for name in names]
    if len(models) == 1:
        return {}
    return {"call_model": np.asarray(which, np.int64), "models": models}


def _call_ptr(traj: Trajectory) -> np.ndarray | None:
    """Where each model call starts: a step whose ``turn`` differs from the step before it (None when
    every step is its own call).  Steps that all carry turn 0, ``Step``'s default, are taken as turns
    not recorded (one call per step), not as one turn of parallel calls: a trajectory built without
    turns must not be billed as a single call."""
    turns = [s.turn for s in traj.steps]
    if not any(turns):
        return None
    starts = [k for k in range(len(turns)) if k == 0 or turns[k] != turns[k - 1]]
    if len(starts) == len(turns):
        return None
    return np.array([*starts, len(turns)], np.int64)


def _modified_at(traj: Trajectory, has_out: np.ndarray) -> np.ndarray:
    """First step after k that may have changed what k read (NEVER if none), for each output k."""
    from dtoc_rl.labels import first_modified, writing_steps

    out = np.full(len(traj.steps), NEVER, np.int64)
    writers = writing_steps(traj)
    for k in np.flatnonzero(has_out).tolist():
        t = first_modified(traj, k, writers)
        if t is not None:
            out[k] = t
    return out


def harness_dropped(traj: Trajectory) -> list[frozenset[int] | None]:
    """Per step, the earlier steps its call was sent without, their messages too: its
    ``dropped_before`` (a harness's window) and the steps a compaction replaced with its summary; None
    where the log says neither.  A compaction event on step ``k`` counts from ``k``'s call on when
    ``k`` is not among its targets (the event marks the first call after it; one a log ends with sits
    on a step it replaced, whose call came before it), and not for a call the log describes itself
    (``masked_before``: OpenCode writes what each call was sent, its summary call the whole history).
    Steps with nothing new share one set, so a long compacted run takes memory linear in its length."""
    out: list[frozenset[int] | None] = []
    compacted: frozenset[int] = frozenset()
    for k, s in enumerate(traj.steps):
        for e in s.events:
            if e.kind == "compaction" and k not in e.targets:
                compacted = compacted | frozenset(e.targets)
        d = s.dropped_before
        if not compacted or s.masked_before is not None:
            out.append(None if d is None else frozenset(d))
        else:
            out.append(compacted if d is None else compacted | frozenset(d))
    return out


def drop_unseen_needs(ep: Episode, masked: bool = False) -> Episode:
    """``ep`` without the needs of a model call on an output the log says that call was sent without,
    dropped with its pair (a harness's window, a compaction: nothing of it in the prompt) or, with
    ``masked``, masked too (:meth:`Episode.harness_hidden`: at a call the log says nothing of, what it
    last said), except re-accesses.  The model did not see
    that output, and the log already holds what its agent did without it (a failed edit, a re-read:
    later steps of their own, which every replay of the log bills), so a miss charged on such a need
    would bill that reaction twice, to every policy (docs/results.md).  A re-access stays: it is the
    agent's own read.  Masked outputs keep their needs unless asked: their placeholder was in the
    prompt (a live policy's shows the key, which the agent names to restore it: a live session counts
    that as the policy's miss, and a replay of its log must count what the session counted), and
    ``dtoc-rl calibrate`` compares what a masked run's replay charges with what its agent did.
    ``ep`` itself when nothing changes."""
    if not any(ep.logged_dropped) and not (masked and any(ep.logged_masked)):
        return ep
    reaccess = NEED_KINDS.index("reaccess")
    keep = np.ones(len(ep.need_idx), bool)
    sent_without = ep.harness_hidden(masked)  # a call the log says nothing of: what it last said
    for c in range(ep.n_calls):
        if ep.need_ptr[ep.starts[c]] == ep.need_ptr[ep.starts[c + 1]]:
            continue  # no need to drop (most calls)
        hidden = sent_without[c]
        if not hidden:
            continue
        a, b = int(ep.need_ptr[ep.starts[c]]), int(ep.need_ptr[ep.starts[c + 1]])
        for i in range(a, b):
            keep[i] = int(ep.need_idx[i]) not in hidden or int(ep.need_kind[i]) == reaccess
    if keep.all():
        return ep
    ptr = np.concatenate([[0], np.cumsum(keep)])[ep.need_ptr]
    return replace(
        ep, need_ptr=ptr.astype(np.int64), need_idx=ep.need_idx[keep], need_kind=ep.need_kind[keep]
    )


def _shared_lists(sets: list[frozenset[int] | None]) -> list[list[int] | None]:
    # one sorted list per distinct set object: the steps after a compaction share theirs
    lists: dict[int, list[int]] = {}
    out: list[list[int] | None] = []
    for d in sets:
        if d is not None and id(d) not in lists:
            lists[id(d)] = sorted(d)
        out.append(None if d is None else lists[id(d)])
    return out


def compile_episodes(
    trajs: list[Trajectory], estimator: TokenEstimator | str | None = None, progress: bool = False
) -> list[Episode]:
    from tqdm.auto import tqdm

    est = get_estimator(estimator)
    return [compile_episode(t, est) for t in tqdm(trajs, desc="compile", disable=not progress)]
