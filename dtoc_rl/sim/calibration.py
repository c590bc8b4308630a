"""Calibrating the offline miss model against logs that really were masked.

The simulator (:mod:`dtoc_rl.sim.simulator`) assumes that a need label pointing to
a hidden output is a *miss* and that the agent recovers by re-reading the
output.  Logs run with observation masking — SWE-agent 1.x with
``LastNObservations``, whose per-step prompts show which older outputs were
replaced by ``Old environment output: (N lines omitted)`` — let us check that
against what agents did when an output really was hidden.  The ingester
records, per step, the outputs hidden in the context that produced the step's
action (:attr:`~dtoc_rl.data.schema.Step.masked_before`); this module measures,
from labelled trajectories only (it never imports the envs or policies):

Opportunities
    An *opportunity* is a pair ``(i, t)``: step ``i`` has an output, step
    ``t`` comes in a later turn, and the log says which outputs were hidden
    from step ``t`` (``masked_before`` is not None).  The pair is *masked* when
    ``i`` is in ``steps[t].masked_before``, else *visible*.

Re-access hazard (``reaccess``)
    Pairs whose output has a read resource (``read_resources``, the labeller's
    parser) and which are not yet re-accessed: ``t <= first(i)``, where
    ``first(i)`` is the first step with a ``reaccess`` need on ``i`` (after it
    the labeller points re-accesses to the newer read).  Event: ``t ==
    first(i)``.  The rate is the per-step hazard of the first re-access, by
    the output's visibility at that step.

Re-read of unchanged resources (``reread``)
    The same, restricted to pairs where the resource has not changed through
    ``t`` (``not modified_between(traj, i, t)``): a re-read of text the agent
    had already seen.

Needs on hidden outputs (``need``)
    All pairs; event: step ``t`` carries a *use* need on ``i`` — a need of a
    kind in ``use_kinds`` (default ``provenance``, ``edit`` and ``reference``:
    every kind except ``reaccess``, which is the re-read itself).  On a masked
    pair the label says the action relied on text the agent could not see:
    knowledge from elsewhere (pre-training, an earlier output the labeller
    attributed elsewhere), a failed reconstruction (the action fails:
    ``output_is_error`` or an editor's "no replacement" message), or label
    noise.  ``need_masked_failed`` is the fraction of those whose action failed.

Lift
    Masked pairs of outputs with a read resource whose resource is unchanged
    before ``t`` (``not modified_between(traj, i, t - 1)``) and which step
    ``t`` does not itself re-access.  ``X``: a use need of ``t`` on ``i``.
    ``Y``: some step ``u`` in ``(t, t + k]`` re-accesses ``i`` while its text
    is still unchanged (``not modified_between(traj, i, u)``).  ``lift =
    P(Y | X) / P(Y | not X)``: how much more likely the agent re-reads a hidden
    output soon after a step that the labels say needed it.  ``lift_miss_kinds``
    is the same with ``X`` restricted to ``miss_kinds`` (default ``provenance``
    and ``reference``, the kinds the simulator charges).

Miss episodes (the fitted miss model)
    Per masked output ``i``, in step order: a re-access of unchanged text
    (``R``) at a step where ``i`` is hidden is a re-read; a need of a kind in
    ``miss_kinds`` (``X``) opens an episode that is *re-read* when an ``R`` follows within
    ``k`` steps (delay = steps from the ``X``) and *absorbed* otherwise; an
    ``R`` without an open episode is a direct re-read (delay 0: the agent
    re-read before using the output, the simulator's assumption).
    ``reread_prob`` = re-read episodes / episodes; ``absorbed`` = the rest;
    ``need_action_failed`` = episodes opened by a need whose action
    failed (a wasted call the simulator does not charge).

Confidence intervals
    95 % percentile intervals from a cluster bootstrap over trajectories
    (``n_boot`` resamples, fixed seed): pairs from one trajectory are not
    independent.  Every rate also carries a Wilson score interval, which treats
    the pairs as independent (too narrow when they cluster; defined when the
    bootstrap is degenerate, e.g. with no event at all).

Under ``LastNObservations(n, polling=1)`` an output is hidden exactly when it
is more than ``n`` steps old, so *masked against visible* compares old
outputs with recent ones: the contrast is confounded with age.  ``by_age``
gives the hazard per age bucket for that reason.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dtoc_rl.data.schema import NEED_KINDS, Trajectory
from dtoc_rl.labels import first_modified, read_resources, writing_steps
from dtoc_rl.sim.simulator import MISS_KINDS

__all__ = [
    "DEFAULT_BOOT",
    "DEFAULT_K",
    "NO_MASKED_DATA",
    "USE_KINDS",
    "Calibration",
    "NoMaskedData",
    "Rate",
    "action_failed",
    "age_hazard",
    "calibrate",
    "masked_trajectories",
    "ratio_ci",
    "traj_counts",
    "wilson",
]

NO_MASKED_DATA = (
    "no trajectory with a logged masking schedule (masked_before); calibration needs logs run with "
    "observation masking, e.g. SWE-agent LastNObservations"
)
DEFAULT_K = 3  # steps after a need within which a re-read counts as its recovery
DEFAULT_BOOT = 2000
# Needs that say a step used an output's text (every kind but ``reaccess``, which is the re-read itself).
USE_KINDS: tuple[str, ...] = tuple(k for k in NEED_KINDS if k != "reaccess")
AGE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 3), (4, 5), (6, 7), (8, 10), (11, None))

# Editors that report a failed edit without flagging an error (SWE-agent/OpenHands str_replace_editor,
# Claude Code Edit, OpenCode edit).
_FAILED_EDIT = re.compile(
    r"No replacement was performed|did not appear verbatim|String to replace not found|"
    r"oldString not found|Multiple occurrences of old_str|old_str .{0,40}is the same as new_str",
    re.IGNORECASE,
)


class NoMaskedData(ValueError):
    """The trajectories carry no masking schedule that hides anything."""

    def __init__(self, message: str = NO_MASKED_DATA):
        super().__init__(message)


def action_failed(step) -> bool:
    """The step's action failed: an error output, or an editor's "no replacement" message."""
    if step.output_is_error:
        return True
    return bool(step.output and _FAILED_EDIT.search(step.output[:2000]))


def masked_trajectories(trajs: Iterable[Trajectory]) -> list[Trajectory]:
    """Trajectories whose log hides at least one output from some step (``masked_before`` non-empty)."""
    return [t for t in trajs if any(s.masked_before for s in t.steps)]


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------


def wilson(k: float, n: float, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (nan, nan when n == 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def _boot_idx(n_traj: int, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_traj, size=(n_boot, n_traj))


def ratio_ci(
    num: Sequence[float],
    den: Sequence[float],
    *,
    scale: float = 1.0,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    idx: np.ndarray | None = None,
) -> tuple[float, float, float]:
    """``scale * sum(num) / sum(den)`` and its 95 % cluster-bootstrap interval (one entry per
    trajectory; resamples whose denominator is 0 are dropped)."""
    num_a, den_a = np.asarray(num, float), np.asarray(den, float)
    point = scale * num_a.sum() / den_a.sum() if den_a.sum() > 0 else math.nan
    if len(num_a) == 0 or n_boot <= 0:
        return point, math.nan, math.nan
    if idx is None:
        idx = _boot_idx(len(num_a), n_boot, seed)
    n_s, d_s = num_a[idx].sum(1), den_a[idx].sum(1)
    ok = d_s > 0
    if not ok.any():
        return point, math.nan, math.nan
    r = scale * n_s[ok] / d_s[ok]
    return point, float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


@dataclass
class Rate:
    """``k`` events in ``n`` opportunities; ``rate`` = k/n with its bootstrap and Wilson intervals."""

    k: float
    n: float
    rate: float
    lo: float
    hi: float
    wilson_lo: float
    wilson_hi: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _rate(num: np.ndarray, den: np.ndarray, idx: np.ndarray, scale: float = 1.0) -> Rate:
    point, lo, hi = ratio_ci(num, den, scale=scale, idx=idx)
    k, n = float(num.sum()), float(den.sum())
    w = wilson(k, n) if scale == 1.0 else (math.nan, math.nan)
    return Rate(k=k, n=n, rate=float(point), lo=float(lo), hi=float(hi), wilson_lo=w[0], wilson_hi=w[1])


def _ratio_of_rates(
    a_num: np.ndarray, a_den: np.ndarray, b_num: np.ndarray, b_den: np.ndarray, idx: np.ndarray
) -> dict[str, float]:
    """(a_num/a_den) / (b_num/b_den) with its cluster-bootstrap interval; ``defined`` is the
    fraction of resamples where both rates exist and the lower one is not 0."""

    def ratio(an, ad, bn, bd):
        with np.errstate(divide="ignore", invalid="ignore"):
            return (an / ad) / (bn / bd)

    point = float(ratio(a_num.sum(), a_den.sum(), b_num.sum(), b_den.sum())) if a_den.sum() else math.nan
    r = ratio(a_num[idx].sum(1), a_den[idx].sum(1), b_num[idx].sum(1), b_den[idx].sum(1))
    ok = np.isfinite(r)
    out = {"ratio": point, "lo": math.nan, "hi": math.nan, "defined": float(ok.mean()) if len(r) else 0.0}
    if ok.any():
        out["lo"], out["hi"] = float(np.percentile(r[ok], 2.5)), float(np.percentile(r[ok], 97.5))
        out["p_le_1"] = float((r[ok] <= 1).mean())  # share of resamples with no lift
    return out


# --------------------------------------------------------------------------------------------
# Per-trajectory counts
# --------------------------------------------------------------------------------------------


def _groups(traj: Trajectory) -> list[int]:
    """Turn-group id of each step, as the labeller groups them (parallel calls share a group)."""
    steps = traj.steps
    turns = [s.turn for s in steps]
    informative = len(set(turns)) > 1 or len(steps) == 1
    out, g = [], -1
    for k, s in enumerate(steps):
        if not (informative and k and turns[k - 1] == s.turn):
            g += 1
        out.append(g)
    return out


COUNT_KEYS = (
    "steps",
    "decision_steps",
    "masked_steps",
    "outputs_masked",
    # re-access hazard (first re-access of outputs with a read resource)
    "reacc_m_n", "reacc_m_k", "reacc_v_n", "reacc_v_k",
    # the same for unchanged resources
    "reread_m_n", "reread_m_k", "reread_v_n", "reread_v_k",
    # use needs (provenance, edit, reference) per pair
    "use_m_n", "use_m_k", "use_v_n", "use_v_k", "use_m_failed",
    # all labelled re-access needs on hidden outputs (per 100 steps), and those on unchanged text
    "reacc_needs_masked", "reread_needs_masked",
    # lift: masked pairs split by a use need at t, re-read within k after
    "lift_x_n", "lift_x_k", "lift_nx_n", "lift_nx_k",
    # the same with X = a need of a kind the simulator charges (provenance, reference)
    "liftm_x_n", "liftm_x_k", "liftm_nx_n", "liftm_nx_k",
    # miss episodes: direct re-reads, episodes opened by a miss-kind need (failed, re-read within k)
    "ep", "ep_reread", "ep_absorbed", "ep_direct", "ep_x", "ep_x_failed", "ep_x_reread", "ep_censored",
    # how a re-read episode got the output back (recovery_kind)
    "rec_same", "rec_narrower", "rec_other",
)  # fmt: skip

RECOVERY_KINDS = {
    "rec_same": "re-ran the same command (its output appended at the end)",
    "rec_narrower": "viewed a narrower range of the same file",
    "rec_other": "re-accessed the resource another way (other command or range)",
}


def _view_range(step) -> tuple[float, float] | None:
    """(first, last) line a file view shows; the whole file when it names no range; None: no view."""
    import json

    try:
        args = json.loads(step.tool_args) if step.tool_args.strip().startswith("{") else None
    except ValueError:
        return None
    if not isinstance(args, dict) or args.get("command") != "view" or not args.get("path"):
        return None
    rng = args.get("view_range")
    if isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng):
        return float(rng[0]), float("inf") if rng[1] == -1 else float(rng[1])
    return 1.0, float("inf")


def recovery_kind(original, reread) -> str:
    """How step ``reread`` re-accessed what step ``original`` had read: one of RECOVERY_KINDS."""
    if " ".join((reread.tool_args or "").split()) == " ".join((original.tool_args or "").split()):
        return "rec_same"
    a, b = _view_range(original), _view_range(reread)
    if a and b and a[0] <= b[0] and b[1] <= a[1] and (b[1] - b[0]) < (a[1] - a[0]):
        return "rec_narrower"
    return "rec_other"


@dataclass
class TrajCounts:
    traj_id: str
    counts: dict[str, int] = field(default_factory=dict)
    delays: list[int] = field(default_factory=list)  # per re-read episode
    age_m: Counter = field(default_factory=Counter)  # (bucket, "n"|"k") -> count, masked pairs
    age_v: Counter = field(default_factory=Counter)
    examples: list[dict[str, Any]] = field(default_factory=list)  # use needs on hidden outputs


def _bucket(age: int) -> str:
    for lo, hi in AGE_BUCKETS:
        if age >= lo and (hi is None or age <= hi):
            return f"{lo}" if hi == lo else (f"{lo}-{hi}" if hi is not None else f"{lo}+")
    return "?"


def traj_counts(
    traj: Trajectory,
    k: int = DEFAULT_K,
    use_kinds: Sequence[str] = USE_KINDS,
    miss_kinds: Sequence[str] = MISS_KINDS,
) -> TrajCounts:
    """Every count the report needs, for one labelled trajectory (see the module docstring).

    ``use_kinds``: the need kinds tested (the lift's *X*, the hidden/visible need rates);
    ``miss_kinds``: the kinds that open a miss episode (the kinds the simulator charges).
    """
    steps = traj.steps
    n = len(steps)
    c = dict.fromkeys(COUNT_KEYS, 0)
    tc = TrajCounts(traj.traj_id, c)
    c["steps"] = n
    grp = _groups(traj)
    has_out = [s.output is not None for s in steps]
    has_res = [bool(read_resources(s)) for s in steps]
    reacc: list[set[int]] = [{x.step for x in s.needs if x.kind == "reaccess"} for s in steps]
    use: list[dict[int, str]] = [
        {x.step: f"{x.kind}: {x.evidence}" for x in s.needs if x.kind in use_kinds} for s in steps
    ]
    miss: list[set[int]] = [{x.step for x in s.needs if x.kind in miss_kinds} for s in steps]
    first_re = [n] * n
    for t in range(n):
        for i in reacc[t]:
            if 0 <= i < n and first_re[i] == n:
                first_re[i] = t
    # first step that changes what i read (n: never)
    writers = writing_steps(traj)
    first_mod = [(first_modified(traj, i, writers) if has_out[i] else None) or n for i in range(n)]
    masked_sets = [set(s.masked_before) if s.masked_before is not None else None for s in steps]
    ever_masked = set().union(*(m for m in masked_sets if m))
    c["outputs_masked"] = sum(1 for i in ever_masked if 0 <= i < n and has_out[i])

    for t, s in enumerate(steps):
        m_set = masked_sets[t]
        if m_set is None:
            continue
        c["decision_steps"] += 1
        c["masked_steps"] += bool(m_set)
        for i in range(t):
            if not has_out[i] or grp[i] >= grp[t]:
                continue
            masked = i in m_set
            tag = "m" if masked else "v"
            # use needs on every pair
            c[f"use_{tag}_n"] += 1
            if i in use[t]:
                c[f"use_{tag}_k"] += 1
                if masked:
                    failed = action_failed(s)
                    c["use_m_failed"] += failed
                    tc.examples.append(
                        {
                            "traj_id": traj.traj_id,
                            "step": t,
                            "needs": i,
                            "age": t - i,
                            "evidence": use[t][i][:120],
                            "failed": failed,
                            "action": (s.tool_args or "")[:160],
                        }
                    )
            if masked and i in reacc[t]:
                c["reacc_needs_masked"] += 1
                if t < first_mod[i]:
                    c["reread_needs_masked"] += 1
            if not has_res[i]:
                continue
            # lift: masked, unchanged before t, not re-accessed at t itself
            if masked and first_mod[i] >= t and i not in reacc[t]:
                y = any(i in reacc[u] for u in range(t + 1, min(n, t + k + 1, first_mod[i])))
                x = "x" if i in use[t] else "nx"
                c[f"lift_{x}_n"] += 1
                c[f"lift_{x}_k"] += y
                x = "x" if i in miss[t] else "nx"
                c[f"liftm_{x}_n"] += 1
                c[f"liftm_{x}_k"] += y
            if t > first_re[i]:
                continue
            event = t == first_re[i]
            c[f"reacc_{tag}_n"] += 1
            c[f"reacc_{tag}_k"] += event
            age = tc.age_m if masked else tc.age_v
            b = _bucket(t - i)
            age[(b, "n")] += 1
            age[(b, "k")] += event
            if t < first_mod[i]:
                c[f"reread_{tag}_n"] += 1
                c[f"reread_{tag}_k"] += event

    # miss episodes, per output, over the steps where it is hidden
    for i in sorted(ever_masked):
        if not (0 <= i < n and has_out[i]):
            continue
        open_t: int | None = None  # step of the need that opened an episode
        for t in range(i + 1, n):
            m_set = masked_sets[t]
            if m_set is None or i not in m_set or grp[i] >= grp[t]:
                continue
            if open_t is not None and t - open_t > k:
                open_t = None  # absorbed
            if i in reacc[t] and t < first_mod[i]:
                if open_t is None:
                    c["ep_direct"] += 1
                    tc.delays.append(0)
                else:
                    c["ep_x_reread"] += 1
                    tc.delays.append(t - open_t)
                c[recovery_kind(steps[i], steps[t])] += 1
                open_t = None
            elif i in miss[t] and open_t is None:
                open_t = t
                c["ep_x"] += 1
                c["ep_x_failed"] += action_failed(steps[t])
        if open_t is not None:
            c["ep_censored"] += n - 1 - open_t < k  # absorbed, but the log ended within k steps
    c["ep_reread"] = c["ep_direct"] + c["ep_x_reread"]
    c["ep_absorbed"] = c["ep_x"] - c["ep_x_reread"]
    c["ep"] = c["ep_direct"] + c["ep_x"]
    return tc


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _by_age(tcs: list[TrajCounts], idx: np.ndarray) -> list[dict[str, Any]]:
    out = []
    for lo, _ in AGE_BUCKETS:
        b = _bucket(lo)
        for tag, attr in (("masked", "age_m"), ("visible", "age_v")):
            num = np.array([getattr(tc, attr)[(b, "k")] for tc in tcs], float)
            den = np.array([getattr(tc, attr)[(b, "n")] for tc in tcs], float)
            if den.sum() == 0:
                continue
            out.append({"age": b, "status": tag, **_rate(num, den, idx).to_dict()})
    return out


def age_hazard(
    trajs: Iterable[Trajectory], *, n_boot: int = DEFAULT_BOOT, seed: int = 0, assume_visible: bool = True
) -> list[dict[str, Any]]:
    """First re-access hazard per age bucket (rows like ``Calibration.by_age``), for a *control*: logs
    of a harness that never hides outputs.  With ``assume_visible`` a step whose ``masked_before`` is
    unknown counts as having seen every output (true of mini-swe-agent, not of SWE-agent 0.x, whose
    default configs masked without logging it).  The trajectories are not modified."""
    tcs = []
    for t in trajs:
        if assume_visible and any(s.masked_before is None for s in t.steps):
            steps = [replace(s, masked_before=[]) if s.masked_before is None else s for s in t.steps]
            t = replace(t, steps=steps)
        tcs.append(traj_counts(t))
    if not tcs:
        return []
    return _by_age(tcs, _boot_idx(len(tcs), n_boot, seed))


@dataclass
class Calibration:
    """What :func:`calibrate` measured; ``to_dict()`` is the JSON of ``dtoc-rl calibrate``."""

    trajectories: int
    steps: int
    decision_steps: int
    k: int
    n_boot: int
    rates: dict[str, Rate]
    ratios: dict[str, dict[str, float]]
    per_100: dict[str, Rate]
    miss_model: dict[str, Any]
    by_age: list[dict[str, Any]]
    examples: list[dict[str, Any]]
    per_traj: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    traj_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "steps": self.steps,
            "decision_steps": self.decision_steps,
            "k": self.k,
            "n_boot": self.n_boot,
            "ci": "95% percentile cluster bootstrap over trajectories; wilson_* ignore clustering",
            "rates": {k: v.to_dict() for k, v in self.rates.items()},
            "ratios": self.ratios,
            "per_100_steps": {k: v.to_dict() for k, v in self.per_100.items()},
            "miss_model": self.miss_model,
            "by_age": self.by_age,
            "examples": self.examples,
        }


def calibrate(
    trajs: Iterable[Trajectory],
    *,
    k: int = DEFAULT_K,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    use_kinds: Sequence[str] = USE_KINDS,
    miss_kinds: Sequence[str] = MISS_KINDS,
) -> Calibration:
    """Measure behaviour under logged masking (see the module docstring).

    ``trajs`` must be labelled; those without a masking schedule that hides
    something are ignored, and :class:`NoMaskedData` is raised when none is left.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    masked = masked_trajectories(trajs)
    if not masked:
        raise NoMaskedData()
    tcs = [traj_counts(t, k, use_kinds, miss_kinds) for t in masked]
    per = {key: np.array([tc.counts[key] for tc in tcs], float) for key in COUNT_KEYS}
    idx = _boot_idx(len(tcs), n_boot, seed)

    def r(num: str, den: str, scale: float = 1.0) -> Rate:
        return _rate(per[num], per[den], idx, scale)

    rates = {
        "reaccess_masked": r("reacc_m_k", "reacc_m_n"),
        "reaccess_visible": r("reacc_v_k", "reacc_v_n"),
        "reread_masked": r("reread_m_k", "reread_m_n"),
        "reread_visible": r("reread_v_k", "reread_v_n"),
        "need_masked": r("use_m_k", "use_m_n"),
        "need_visible": r("use_v_k", "use_v_n"),
        "need_masked_failed": r("use_m_failed", "use_m_k"),
        "reread_after_need": r("lift_x_k", "lift_x_n"),
        "reread_without_need": r("lift_nx_k", "lift_nx_n"),
        "reread_after_miss_kind_need": r("liftm_x_k", "liftm_x_n"),
        "reread_without_miss_kind_need": r("liftm_nx_k", "liftm_nx_n"),
    }
    ratios = {
        "reaccess_masked_vs_visible": _ratio_of_rates(
            per["reacc_m_k"], per["reacc_m_n"], per["reacc_v_k"], per["reacc_v_n"], idx
        ),
        "reread_masked_vs_visible": _ratio_of_rates(
            per["reread_m_k"], per["reread_m_n"], per["reread_v_k"], per["reread_v_n"], idx
        ),
        "need_masked_vs_visible": _ratio_of_rates(
            per["use_m_k"], per["use_m_n"], per["use_v_k"], per["use_v_n"], idx
        ),
        "lift": _ratio_of_rates(per["lift_x_k"], per["lift_x_n"], per["lift_nx_k"], per["lift_nx_n"], idx),
        "lift_miss_kinds": _ratio_of_rates(
            per["liftm_x_k"], per["liftm_x_n"], per["liftm_nx_k"], per["liftm_nx_n"], idx
        ),
    }
    per_100 = {
        "reaccess_needs_masked": r("reacc_needs_masked", "steps", 100.0),
        "rereads_masked_unmodified": r("reread_needs_masked", "steps", 100.0),
        "needs_masked": r("use_m_k", "steps", 100.0),
        "miss_episodes": r("ep", "steps", 100.0),
        "miss_episodes_reread": r("ep_reread", "steps", 100.0),
        "miss_episodes_absorbed": r("ep_absorbed", "steps", 100.0),
    }
    delays = Counter(d for tc in tcs for d in tc.delays)
    ep = per["ep"].sum()
    pr = r("ep_reread", "ep")
    miss_model = {
        "episodes": int(ep),
        "reread_prob": pr.to_dict(),
        "absorbed_fraction": r("ep_absorbed", "ep").to_dict(),
        "direct_fraction": r("ep_direct", "ep").to_dict(),
        "opened_by_need": int(per["ep_x"].sum()),
        "need_then_reread": r("ep_x_reread", "ep_x").to_dict(),
        "need_action_failed": r("ep_x_failed", "ep_x").to_dict(),
        "censored": int(per["ep_censored"].sum()),
        "delay_hist": {str(d): delays[d] for d in range(0, k + 1)},
        "delay_mean": (sum(d * c for d, c in delays.items()) / sum(delays.values())) if delays else math.nan,
        # how the agents got a hidden output back, and how often they went on without it
        "recovery": {
            **{RECOVERY_KINDS[key]: r(key, "ep").to_dict() for key in RECOVERY_KINDS},
            "went on without it (no re-read within k steps)": r("ep_absorbed", "ep").to_dict(),
        },
    }
    by_age = _by_age(tcs, idx)
    return Calibration(
        trajectories=len(masked),
        steps=int(per["steps"].sum()),
        decision_steps=int(per["decision_steps"].sum()),
        k=k,
        n_boot=n_boot,
        rates=rates,
        ratios=ratios,
        per_100=per_100,
        miss_model=miss_model,
        by_age=by_age,
        examples=[e for tc in tcs for e in tc.examples],
        per_traj=per,
        traj_ids=[tc.traj_id for tc in tcs],
    )
