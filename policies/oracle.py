"""The hindsight oracle: the cheapest visibility schedule with zero misses.

It knows the trace's future (its need labels) and plans the whole episode at
``reset``.  A schedule is a boolean matrix ``V[t, k]``: is output ``k`` (a step)
visible at model call ``t`` (one row per call: parallel tool calls of one turn
are one call, :attr:`~dtoc_rl.sim.episode.Episode.starts`).  Zero misses means
``V[t, j]`` for every need of call ``t`` on ``j``.  Costs are those of :mod:`dtoc_rl.sim.simulator` with
``overhead="orchestrator"``; :func:`schedule_cost` evaluates any schedule
exactly (vectorised, O(n²)).

* **Without a cache discount at any call** (``cache_read >= cache_write`` for
  every call's model) the cost separates per output and per call: the optimum
  shows each output exactly at the calls that need it.  :func:`plan` finds it
  directly.
* **With prompt caching** it does not separate: hiding output j re-writes
  everything after j once, and changes made at the same call share that
  re-write.  :func:`plan` then starts from the schedule that hides every gap
  between needs whose own saving beats its own re-write cost, and improves it
  by coordinate descent over (output, gap) flips under the exact cost,
  trying each gap's natural variants (hidden, visible) until no flip helps
  (each flip billed on the calls it touches: a run of 1,280 calls is planned
  in under a second).
  This is an approximation; :func:`exact_plan` solves small episodes exactly
  by dynamic programming over visibility states (O(n·4^K) for K outputs).
  :class:`HindsightOracle` uses it for episodes of up to 8 outputs, where the
  approximation's gap is largest under the providers' cache rules (up to 8.6%
  on the bundled episodes; ``tests/policies/test_oracle.py`` and
  ``docs/billcheck.md``).

On top of a harness (``dtoc-rl evaluate --on-harness``: :class:`~dtoc_rl.policies.baselines.OnHarness`
passes what the run's harness hid at each call), the plan is made around it: those cells stay hidden,
a need there is no miss (the harness took the output away; every policy pays alike for a re-access),
an output smaller than its placeholder may be hidden up to where the harness hides it (its re-write
made at a call whose cache breaks anyway), and the descent also starts from the plan that ignores the
harness, the cheaper kept.  Exact on runs of up to eight outputs, a local optimum beyond.

Costs include the configured cache model (``CostConfig.cache``: the provider's
rules apply to :func:`schedule_cost` and :func:`exact_plan` exactly as in the
simulator).  An output whose placeholder is no smaller than the output itself is
never hidden.

The oracle is the upper bound learned policies are measured against.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from dtoc_rl.policies.base import Policy
from dtoc_rl.policies.baselines import to_action
from dtoc_rl.sim.episode import Episode
from dtoc_rl.sim.pricing import Prices
from dtoc_rl.sim.simulator import CostConfig, idle_seconds

__all__ = [
    "HindsightOracle",
    "exact_plan",
    "forced_hidden",
    "need_schedule",
    "plan",
    "schedule_cost",
    "without_restores",
]


def _prices(ep: Episode, cfg: CostConfig | None) -> Prices:
    return (cfg or CostConfig()).prices_of(ep)


def _need_matrix(ep: Episode, cfg: CostConfig | None) -> np.ndarray:
    """R[t, k]: model call t must see output k (``Episode.call_reads``: it needs it under the configured
    need kinds, or reads it first), as the simulator charges misses."""
    cfg = cfg or CostConfig()
    kinds = cfg.kind_mask()
    R = np.zeros((ep.n_calls, ep.n), bool)
    for t in range(ep.n_calls):
        idx = ep.call_reads(t, kinds)
        if len(idx):
            R[t, idx[ep.has_out[idx]]] = True
    return R


def _call_tokens(ep: Episode) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per model call: its first step, the user and assistant tokens of its steps, and the U+A tokens of
    every step before it."""
    first = ep.starts[:-1]
    ua = ep.user_tok + ep.asst_tok
    ua_cum = np.concatenate([[0], np.cumsum(ua)])
    return first, ep.per_call(ep.user_tok), ep.per_call(ep.asst_tok), ua_cum[first]


def schedule_cost(ep: Episode, V: np.ndarray, cfg: CostConfig | None = None) -> float:
    """Dollars of running ``ep`` under schedule ``V`` (orchestrator overhead).

    ``V`` has one row per model call.  Returns ``inf`` if the schedule misses a need.  Only
    ``V[t, k]`` with ``k`` stored before call ``t`` and an output at ``k`` matter; the rest is
    ignored.
    """
    n, nc = ep.n, ep.n_calls
    if not nc:  # no model call, no bill (and no rows for the arrays below)
        return 0.0
    p = (cfg or CostConfig()).call_prices(ep)
    first, user_c, asst_c, ua_before_c = _call_tokens(ep)
    stored = (np.arange(n)[None, :] < first[:, None]) & ep.has_out[None, :]  # stored[t, k]: k before call t
    V = V.astype(bool) | ~stored
    if (_need_matrix(ep, cfg) & ~V).any():
        return float("inf")
    out_cost = np.where(V, ep.vis_cost[None, :], ep.hid_cost[None, :]) * stored
    ua = ep.user_tok + ep.asst_tok
    ua_before = np.concatenate([[0], np.cumsum(ua)[:-1]])  # Σ_{k<j} U_k + A_k, per step j
    prompts = ep.base_tokens + ua_before_c + out_cost.sum(axis=1) + user_c
    changed = np.zeros((nc, n), bool)
    if ep.call_model is None:
        prev = np.concatenate([[0], prompts[:-1]])
        changed[1:] = (V[1:] != V[:-1]) & stored[:-1]  # was already stored at the previous call
    else:  # against the last call to the same model (a cache is per model); none: nothing cached
        pc = ep.prev_call
        had = pc >= 0
        prev = np.where(had, prompts[np.maximum(pc, 0)], 0)
        changed[had] = (V[had] != V[pc[had]]) & stored[pc[had]]
    has_change = changed.any(axis=1)
    fc = np.where(has_change, changed.argmax(axis=1), 0)
    # prefix up to and including U_fc, A_fc at call t (O before fc is unchanged)
    o_cum = np.concatenate([np.zeros((nc, 1), np.int64), np.cumsum(out_cost, axis=1)], axis=1)
    prefix = ep.base_tokens + ua_before[fc] + o_cum[np.arange(nc), fc] + ua[fc]
    cached = np.where(has_change, np.minimum(prev, prefix), prev)
    cached = (cfg or CostConfig()).provider_cached(ep, cached, prompts)
    return float(p.bill(cached, prompts - cached, asst_c).sum())


class _Costing:
    """:func:`schedule_cost` of a schedule changed one output's calls at a time, each change billed on
    the calls it touches: showing or hiding output ``k`` at calls ``T`` changes those calls' prompts,
    the cached prefix of the calls after them (their model's next call), and where each prompt's
    first change sits only where ``T`` starts or ends.  A descent over a run's gaps then costs about
    O(gaps · steps) instead of O(gaps · steps · calls), which decides whether a run of a thousand
    calls is planned in seconds or in minutes.  Every figure equals :func:`schedule_cost`'s to the
    bit (the same per-call bills, summed alike; ``tests/policies/test_oracle_costing.py``)."""

    def __init__(
        self, ep: Episode, V: np.ndarray, cfg: CostConfig | None = None, need: np.ndarray | None = None
    ):
        """``need``: the run's :func:`_need_matrix` under ``cfg``, when the caller has it already."""
        self.ep, self.cfg = ep, cfg or CostConfig()
        n, nc = ep.n, ep.n_calls
        self.p = self.cfg.call_prices(ep)
        first, user_c, self.asst_c, ua_before_c = _call_tokens(ep)
        self.stored = (np.arange(n)[None, :] < first[:, None]) & ep.has_out[None, :]
        self.R = need if need is not None else _need_matrix(ep, self.cfg)
        self.ua = ep.user_tok + ep.asst_tok
        self.ua_before = np.concatenate([[0], np.cumsum(self.ua)[:-1]])
        self.fixed = ep.base_tokens + ua_before_c + user_c  # each prompt but its outputs
        # the call each call's cache is read from (-1: none)
        self.pc = np.arange(nc) - 1 if ep.call_model is None else np.asarray(ep.prev_call)
        self.has_pc = self.pc >= 0
        self.V = V.astype(bool) | ~self.stored
        self.bad = int((self.R & ~self.V).sum())
        self.fc = np.array([self._first_change(t, self.V[t]) for t in range(nc)], np.int64)
        # each prompt's outputs' tokens, and those before its first change, a call at a time (a matrix
        # of them would be 8 bytes a call and step: 800 MB at 10,000 calls)
        self.prompts = self.fixed.astype(np.int64)
        self.ocf = np.zeros(nc, np.int64)
        for t in range(nc):
            out = self._out(t, self.V[t])
            self.prompts[t] += out.sum()
            self.ocf[t] = out[: max(self.fc[t], 0)].sum()
        self.bills = self._bills(np.arange(nc), self.prompts, self.fc, self.ocf)
        self.commits = 0  # a proposal holds the whole state it was made from: only the latest applies

    def _out(self, t: int, row: np.ndarray) -> np.ndarray:
        """The tokens each output takes in call ``t``'s prompt when ``row`` says which are shown."""
        return np.where(row, self.ep.vis_cost, self.ep.hid_cost) * self.stored[t]

    def _first_change(self, t: int, row: np.ndarray, prev_row: np.ndarray | None = None) -> int:
        """The first output call ``t``'s prompt shows otherwise than its model's previous call's
        (-1: none, or no previous call)."""
        pc = self.pc[t]
        if pc < 0:
            return -1
        prev_row = self.V[pc] if prev_row is None else prev_row
        changed = (row != prev_row) & self.stored[pc]
        return int(changed.argmax()) if changed.any() else -1

    def _bills(self, calls: np.ndarray, prompts: np.ndarray, fc: np.ndarray, ocf: np.ndarray) -> np.ndarray:
        """The bills of ``calls`` given every call's ``prompts`` and their first changes and the
        outputs' tokens before them."""
        pc = self.pc[calls]
        prev = np.where(pc >= 0, prompts[np.maximum(pc, 0)], 0)
        f = fc[calls]
        at = np.maximum(f, 0)
        prefix = self.ep.base_tokens + self.ua_before[at] + ocf[calls] + self.ua[at]
        cached = np.where(f >= 0, np.minimum(prev, prefix), prev)
        now = prompts[calls]
        cached = self.cfg.provider_cached(self.ep, cached, now, calls)
        return self.p.at(calls).bill(cached, now - cached, self.asst_c[calls])

    def total(self) -> float:
        return float("inf") if self.bad else float(self.bills.sum())

    def propose(self, k: int, a: int, values: np.ndarray) -> tuple[float, Any]:
        """The cost with output ``k`` shown (True) or hidden at calls ``a`` to ``a + len(values) - 1``,
        and the change, for :meth:`commit`."""
        rows = a + np.flatnonzero(
            (values | ~self.stored[a : a + len(values), k]) != self.V[a : a + len(values), k]
        )
        if not len(rows):
            return self.total(), None
        new = ~self.V[rows, k]
        ep = self.ep
        delta = np.where(new, ep.vis_cost[k] - ep.hid_cost[k], ep.hid_cost[k] - ep.vis_cost[k])
        prompts = self.prompts.copy()
        prompts[rows] += delta
        bad = self.bad + int((self.R[rows, k] & ~new).sum()) - int((self.R[rows, k] & new).sum())
        flipped = np.zeros(ep.n_calls, bool)
        flipped[rows] = True
        touched = flipped.copy()  # the calls flipped, and those whose cache is read from one
        touched[self.has_pc] |= flipped[self.pc[self.has_pc]]
        touched = np.flatnonzero(touched)
        fc, ocf = self.fc.copy(), self.ocf.copy()
        pc = self.pc[touched]
        has = pc >= 0
        row_moves, prev_moves = flipped[touched], flipped[np.maximum(pc, 0)] & has
        # calls where whether the prompt changes output k against the previous one turned: their first
        # change is found again; elsewhere it stays, and only the outputs' tokens before it move
        ends = has & (row_moves != prev_moves) & self.stored[np.maximum(pc, 0), k]
        inside = ~ends & row_moves & (k < fc[touched])
        ocf[touched[inside]] += delta[np.searchsorted(rows, touched[inside])]
        for t in touched[ends]:
            row, prev_row = self.V[t].copy(), self.V[self.pc[t]].copy()
            row[k] ^= flipped[t]
            prev_row[k] ^= flipped[self.pc[t]]
            fc[t] = self._first_change(t, row, prev_row)
            ocf[t] = self._out(t, row)[: max(fc[t], 0)].sum()
        bills = self.bills.copy()
        bills[touched] = self._bills(touched, prompts, fc, ocf)
        cost = float("inf") if bad else float(bills.sum())
        return cost, (self.commits, k, rows, new, prompts, bad, fc, ocf, bills)

    def commit(self, change: Any) -> None:
        """Apply a change :meth:`propose` made since the last commit."""
        if change is None:
            return
        made, k, rows, new, self.prompts, self.bad, self.fc, self.ocf, self.bills = change
        if made != self.commits:
            raise ValueError("a change proposed before the last commit: propose it again")
        self.V[rows, k] = new
        self.commits += 1


def _gaps(ep: Episode, R: np.ndarray, forced: np.ndarray | None = None) -> list[tuple[int, int, int]]:
    """(output k, first call of the gap, the call after its last): each run of calls after the one
    that stored k at which k is neither needed nor ``forced`` hidden, so the plan may hide or show it.
    Outputs whose placeholder is no smaller than the output itself are never hidden (it could only cost
    more), but up to where the harness hides them anyway: there hiding one at a call whose cache breaks
    anyway can spare the harness's later re-write."""
    out = []
    call_of = ep.call_of_step
    small = ep.hid_cost >= ep.vis_cost
    for k in np.flatnonzero(ep.has_out & (~small if forced is None else True)):
        ends = R[:, k] if forced is None else R[:, k] | forced[:, k]
        start = int(call_of[k]) + 1  # the first call after the one that stored it
        for b in [*(start + np.flatnonzero(ends[start:])).tolist(), ep.n_calls]:
            # a small output only up to where the harness hides it anyway: its re-write made earlier
            if b > start and (not small[k] or (b < ep.n_calls and forced[b, k])):
                out.append((int(k), start, int(b)))
            start = b + 1
    return out


def forced_hidden(ep: Episode, hidden: Sequence[AbstractSet[int]] | None) -> np.ndarray | None:
    """F[t, k]: output k was hidden at call t whatever a policy did (``hidden``: one set of steps per
    call, what the run's harness hid: :meth:`~dtoc_rl.sim.episode.Episode.harness_hidden`); None where
    it hid nothing.  A plan on top of the harness keeps those cells hidden and charges no need there
    (:func:`~dtoc_rl.sim.episode.drop_unseen_needs`; a re-access there is every policy's miss alike)."""
    if hidden is None or not any(hidden):
        return None
    F = np.zeros((ep.n_calls, ep.n), bool)
    cols: dict[int, np.ndarray] = {}  # one index array per set: after a compaction the calls share one
    for t, h in enumerate(hidden[: ep.n_calls]):
        if h:
            idx = cols.get(id(h))
            if idx is None:
                idx = cols[id(h)] = np.fromiter((k for k in h if 0 <= k < ep.n), np.int64)
            F[t, idx] = True
    stored = np.arange(ep.n)[None, :] < ep.starts[:-1, None]
    return F & stored & ep.has_out[None, :]


def _apply(V: np.ndarray, gap: tuple[int, int, int], hidden: bool) -> None:
    k, a, b = gap
    V[a:b, k] = not hidden


def plan(
    ep: Episode, cfg: CostConfig | None = None, *, max_passes: int = 4, forced: np.ndarray | None = None
) -> np.ndarray:
    """The oracle's schedule (see the module docstring); with ``forced`` (:func:`forced_hidden`), made
    around what a harness hid anyway."""
    n = ep.n_calls
    p = (cfg or CostConfig()).call_prices(ep)  # each call at its own model's, in a run of several
    R = _need_matrix(ep, cfg)
    V = np.ones((n, ep.n), bool)
    if forced is not None:
        R &= ~forced
        V &= ~forced
    gaps = _gaps(ep, R, forced)
    if np.all(np.asarray(p.cache_read) >= np.asarray(p.cache_write)):  # no cache discount: separable
        for g in gaps:
            if ep.hid_cost[g[0]] < ep.vis_cost[g[0]]:  # a small output's hide spares no re-write here
                _apply(V, g, True)
        return V
    scalar = not np.ndim(p.cache_read)

    def at(price: Any, t: int) -> float:  # call t's price
        return price if scalar else price[t]

    # Initial: hide gaps whose own saving beats their own re-write (cache read vs write), each priced
    # at the model of the calls it concerns.
    seg = ep.user_tok + ep.asst_tok + np.where(ep.has_out, ep.vis_cost, 0)
    cum = np.concatenate([[0], np.cumsum(seg)])
    first, user_c = ep.starts, ep.per_call(ep.user_tok)
    for k, a, b in gaps:
        gap_tok = ep.vis_cost[k] - ep.hid_cost[k]
        suffix_a = cum[first[a]] - cum[k + 1] + user_c[a]  # tokens after O_k in call a's prompt
        write, read = at(p.cache_write, a), at(p.cache_read, a)
        if forced is not None and forced[a - 1, k]:  # hidden before: showing it is the re-write
            cost = -(suffix_a + ep.vis_cost[k]) * (write - read)
        else:
            cost = suffix_a * (write - read) + ep.hid_cost[k] * write
            cost -= ep.vis_cost[k] * read
        saving = gap_tok * p.cache_read * (b - a - 1) if scalar else gap_tok * p.cache_read[a + 1 : b].sum()
        if b < n:
            suffix_b = cum[first[b]] - cum[k + 1] + user_c[b]
            rewrite = (suffix_b + ep.vis_cost[k]) * (at(p.cache_write, b) - at(p.cache_read, b))
            # hidden after it anyway: hiding the gap spares the re-write that showing it would end with
            cost += -rewrite if forced is not None and forced[b, k] else rewrite
        if saving > cost:
            _apply(V, (k, a, b), True)
    V, cost = _descend(ep, V, gaps, cfg, max_passes, need=R)
    if forced is None:
        return V
    # a descent ends in a local optimum: also from the plan that ignores the harness, with what the
    # harness hid hidden, and the cheaper kept, so knowing the harness never makes the plan dearer
    alt, alt_cost = _descend(
        ep, plan(ep, cfg, max_passes=max_passes) & ~forced, gaps, cfg, max_passes, need=R
    )
    return alt if alt_cost < cost else V


def _descend(
    ep: Episode,
    V: np.ndarray,
    gaps: list[tuple[int, int, int]],
    cfg: CostConfig | None,
    max_passes: int,
    need: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    # Coordinate descent: flip each gap (hidden <-> visible) while a flip lowers the exact cost; returns
    # the schedule and its cost.
    costing = _Costing(ep, V, cfg, need)
    best = costing.total()
    for _ in range(max_passes):
        improved = False
        for k, a, b in gaps:
            # the whole gap shown or hidden (a gap of exact_plan's may be hidden in part)
            c, change = costing.propose(k, a, np.full(b - a, not V[a, k]))
            if c < best - 1e-15:
                costing.commit(change)
                V[a:b, k] = not V[a, k]
                best, improved = c, True
        if not improved:
            break
    return V, best


def need_schedule(ep: Episode, cfg: CostConfig | None = None, *, hide_small: bool = False) -> np.ndarray:
    """Each output visible through its last need (or the call that reads it first) and hidden from the
    next call on, at once and whatever the re-write costs: what knowing when an output is needed for
    the last time saves with no pricing of the changes (``oracle:schedule=need``).  An output whose
    placeholder is no smaller than itself stays visible, unless ``hide_small``: the need labels of
    ``--mode need`` training, which say whether an output is still needed, whatever a hide is worth."""
    R = _need_matrix(ep, cfg)
    V = np.ones((ep.n_calls, ep.n), bool)
    outs = ep.has_out if hide_small else ep.has_out & (ep.hid_cost < ep.vis_cost)
    for k in np.flatnonzero(outs):
        reads = np.flatnonzero(R[:, k])  # its needs and its first read
        V[int(reads.max()) + 1 if len(reads) else int(ep.call_of_step[k]) + 1 :, k] = False
    return V


def without_restores(
    ep: Episode,
    V: np.ndarray,
    cfg: CostConfig | None = None,
    *,
    max_passes: int = 4,
    forced: np.ndarray | None = None,
) -> np.ndarray:
    """``V`` (a copy) with every hide that a later need ends shown instead, then improved by coordinate
    descent over the hides that no need ends (from an output's last need to the end of the run): a
    zero-miss schedule in which nothing hidden is ever shown again.  Its savings are what hindsight
    gives a policy that only needs to know when an output is needed for the last time, without
    foreseeing when a hidden one will be needed again (``oracle:restores=0``).  With ``forced``
    (:func:`forced_hidden`), a gap that ends where the harness hides the output anyway may stay hidden
    too: nothing is shown again there."""
    V = V.copy()
    R = _need_matrix(ep, cfg)
    if forced is not None:
        R &= ~forced
    gaps = _gaps(ep, R, forced)
    n = ep.n_calls
    free = [g for g in gaps if g[2] == n or (forced is not None and forced[g[2], g[0]])]
    for k, a, b in gaps:
        if b < n and not (forced is not None and forced[b, k]):
            V[a:b, k] = True
        else:  # hidden from the first call that hides it on (exact_plan may show one again a call early)
            V[a:b, k] = ~np.logical_or.accumulate(~V[a:b, k])
    return _descend(ep, V, free, cfg, max_passes, need=R)[0]


def exact_plan(
    ep: Episode, cfg: CostConfig | None = None, max_outputs: int = 8, forced: np.ndarray | None = None
) -> np.ndarray:
    """Exact optimum by dynamic programming over visibility states (small episodes); with ``forced``
    (:func:`forced_hidden`), among the states that keep those outputs hidden."""
    outs = np.flatnonzero(ep.has_out)
    K = len(outs)
    if K > max_outputs:
        raise ValueError(f"exact_plan handles up to {max_outputs} outputs; this episode has {K}")
    n = ep.n_calls
    if K == 0:
        return np.ones((n, ep.n), bool)
    if ep.call_model is not None:  # its state would be every model's last visibility, not one
        raise ValueError("exact_plan prices episodes of one model; this one calls several (use plan)")
    p = _prices(ep, cfg)
    R = _need_matrix(ep, cfg)
    F = np.zeros_like(R) if forced is None else forced
    R &= ~F
    ua = ep.user_tok + ep.asst_tok
    ua_before = np.concatenate([[0], np.cumsum(ua)[:-1]])  # per step
    first_step, user_c, asst_c, ua_before_c = _call_tokens(ep)
    states = np.arange(1 << K)
    bits = ((states[:, None] >> np.arange(K)[None, :]) & 1).astype(bool)  # bits[s, i]: output i visible

    def prompt_tokens(t: int) -> np.ndarray:
        stored = outs < first_step[t]
        o = np.where(bits, ep.vis_cost[outs][None, :], ep.hid_cost[outs][None, :]) * stored[None, :]
        return ep.base_tokens + ua_before_c[t] + o.sum(axis=1) + user_c[t]

    def feasible(t: int) -> np.ndarray:
        need, hid = R[t, outs], F[t, outs]
        stored = outs < first_step[t]
        # shown: what it needs, and an output whose placeholder is no smaller, unless there is a harness
        # (hiding it before the harness does may spare a re-write: the optimum decides)
        small = (ep.hid_cost[outs] >= ep.vis_cost[outs]) & (forced is None)
        keep = (need | small) & ~hid
        bad = ((~bits & keep[None, :]) | (bits & hid[None, :])) & stored[None, :]
        bad = bad.any(axis=1)
        # outputs not stored yet are "visible" by convention: one state per real situation
        canonical = bits[:, ~stored].all(axis=1)
        return ~bad & canonical

    rules = (cfg or CostConfig()).rules_for(ep)
    idle = idle_seconds(ep)
    INF = float("inf")
    cost = np.full(len(states), INF)
    back = np.zeros((n, len(states)), np.int64)
    pr0 = prompt_tokens(0)
    f0 = feasible(0)
    cost[f0] = p.bill(0, pr0[f0], asst_c[0])
    prev_prompt = pr0
    for t in range(1, n):
        pr = prompt_tokens(t)
        ft = feasible(t)
        stored_prev = outs < first_step[t - 1]
        stored_now = outs < first_step[t]
        new = np.full(len(states), INF)
        for s in np.flatnonzero(ft):
            diff = (bits[s] != bits) & stored_prev[None, :]  # vs every previous state
            any_diff = diff.any(axis=1)
            first = np.where(any_diff, diff.argmax(axis=1), 0)
            k_first = outs[first]
            o_vis = np.where(bits[s], ep.vis_cost[outs], ep.hid_cost[outs]) * stored_now
            o_cum = np.concatenate([[0], np.cumsum(o_vis)])
            prefix = ep.base_tokens + ua_before[k_first] + o_cum[first] + ua[k_first]
            cached = np.where(any_diff, np.minimum(prev_prompt, prefix), prev_prompt)
            if rules is not None:
                cached = rules.cached(cached, pr[s], idle[t])
            step = p.bill(cached, pr[s] - cached, asst_c[t])
            total = cost + step
            j = int(np.argmin(total))
            new[s] = total[j]
            back[t, s] = j
        cost = new
        prev_prompt = pr
    s = int(np.argmin(cost))
    if not np.isfinite(cost[s]):
        raise ValueError("no feasible schedule")
    V = np.ones((n, ep.n), bool)
    for t in range(n - 1, -1, -1):
        V[t, outs] = bits[s]
        s = int(back[t, s])
    return V


class HindsightOracle(Policy):
    """Plays the oracle's schedule; needs ``info["episode"]`` at reset
    (``ReplayEnv(expose_episode=True)``, which also passes its ``cost_config``: the schedule is
    planned under the costs it is scored with).  Episodes with at most ``exact_max_outputs``
    outputs get the exact optimum (:func:`exact_plan`), longer ones :func:`plan`.

    Three hindsight variants are references for what a causal policy can learn: ``restores=False``
    (:func:`without_restores`: priced like the oracle, but nothing hidden is shown again),
    ``schedule="need"`` (:func:`need_schedule`: every output hidden at once after its last need, no
    pricing: a perfect prediction of need alone) and ``schedule="rule"`` (the same knowledge, its hides
    timed as the learned policy times its own, :func:`~dtoc_rl.policies.learned.timed_hides`, and made
    at once before a call whose cache has expired anyway: what the learned policy would save if its
    network knew need perfectly)."""

    name = "oracle"
    needs_logged_run = True
    SCHEDULES = ("cost", "need", "rule")

    def __init__(
        self,
        cost_config: CostConfig | None = None,
        exact_max_outputs: int = 8,
        restores: bool = True,
        schedule: str = "cost",
    ):
        if restores not in (True, False):  # 0 and 1 from a spec compare equal
            raise ValueError(f"restores must be true or false (1 or 0), got {restores!r}")
        if schedule not in self.SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(self.SCHEDULES)}, got {schedule!r}")
        if schedule != "cost" and not restores:  # two labels for one schedule would be two rows
            raise ValueError(f"schedule={schedule} never restores: leave restores out")
        self.cfg = cost_config
        self.exact_max_outputs = exact_max_outputs
        #: False: the schedule of :func:`without_restores` (an output hidden only after its last need)
        self.restores = bool(restores)
        #: "need": :func:`need_schedule` instead of the priced plan; "rule": it, timed by price at each call
        self.schedule = schedule
        self.V: np.ndarray | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        ep = (info or {}).get("episode")
        if ep is None:
            raise ValueError("the oracle needs info['episode']: make the env with expose_episode=True")
        # the optimum of what is being scored: the env's cost configuration unless one was given
        cfg = self.cfg or (info or {}).get("cost_config")
        if self.schedule != "cost":
            self.V = need_schedule(ep, cfg)
            return
        # on top of a harness (OnHarness): planned around what it hid, not as if it had kept everything
        forced = forced_hidden(ep, (info or {}).get("harness_hidden"))
        one_model = getattr(ep, "call_model", None) is None  # exact_plan prices one model per episode
        if one_model and self.exact_max_outputs and int(ep.has_out.sum()) <= self.exact_max_outputs:
            self.V = exact_plan(ep, cfg, self.exact_max_outputs, forced=forced)
        else:
            self.V = plan(ep, cfg, forced=forced)
        if not self.restores:
            self.V = without_restores(ep, self.V, cfg, forced=forced)

    def config(self) -> dict[str, Any]:
        # the reference oracle's label is "oracle"; a variant's must differ (evaluate keys rows by it)
        c: dict[str, Any] = {} if self.restores else {"restores": False}
        if self.schedule != "cost":
            c["schedule"] = self.schedule
        return c

    def act(self, obs, info=None):
        if self.V is None or info is None or "slot_steps" not in info:
            raise ValueError("the oracle needs reset(info) first and info['slot_steps'] at every step")
        t = int(obs["globals"][2])  # model calls done: this decision shapes call t
        slots = info["slot_steps"]
        want = np.zeros(len(slots), bool)
        ok = slots >= 0
        if t < self.V.shape[0]:
            want[ok] = self.V[t, slots[ok]]
        if self.schedule == "rule":
            from dtoc_rl.policies.learned import cold_of, timed_hides  # torch: only this variant needs it

            if not cold_of(info):  # before a call whose cache has expired: all at once, as the policy
                want = timed_hides(obs, want)
        return to_action(obs, want)
