"""Statistics of need labels (:func:`label_stats`), as ``scripts/label_report.py`` prints them."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

from dtoc_rl.data.schema import NEED_KINDS, Trajectory
from dtoc_rl.labels.resources import modified_between

AGE_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, None))


def _bucket(age: int) -> str:
    for lo, hi in AGE_BUCKETS:
        if age >= lo and (hi is None or age <= hi):
            return f"{lo}-{hi}" if hi != lo and hi is not None else (f"{lo}" if hi == lo else f">{lo - 1}")
    return "?"


def real_rereads(traj: Trajectory) -> list[tuple[int, int]]:
    """(original step, re-reading step) for every re-access need not modified in between."""
    out = []
    for s in traj.steps:
        for n in s.needs:
            if n.kind == "reaccess" and not modified_between(traj, n.step, s.index):
                out.append((n.step, s.index))
    return out


def label_stats(trajs: Iterable[Trajectory]) -> dict:
    """Summary of the need labels of (already labelled) trajectories.

    Keys: ``trajectories``, ``steps``; ``needs_by_kind``; ``provenance_step_fraction``
    (steps with ≥ 1 provenance need / all steps); ``age`` per kind (mean,
    median, p90 of ``step.index - need.step``) and ``age_hist`` (provenance,
    by bucket); ``provenance_over_10_fraction`` (provenance needs reaching back
    more than 10 steps / all provenance needs); ``reaccess_steps`` (steps
    with ≥ 1 re-access need); ``real_rereads`` (re-access needs whose resource
    was not modified in between, see :func:`modified_between`) and
    ``modified_rereads``;

    ``anticipation``: for each real re-read — a re-access need of step ``j`` on
    step ``i`` with ``not modified_between(traj, i, j)`` — it is *anticipated*
    when some step ``k`` with ``i < k <= j`` has a provenance need on ``i``
    (the agent demonstrably used output ``i`` again after first reading it, up
    to and including the re-read).  ``anticipation_rate`` = anticipated / real
    re-reads (None when there are none).  ``anticipated_strict`` counts
    ``i < k < j`` only (labelled strictly before the re-read).
    """
    n_traj = n_steps = 0
    kinds: Counter = Counter()
    prov_steps = 0
    reacc_steps = 0
    ages: dict[str, list[int]] = defaultdict(list)
    hist: Counter = Counter()
    real = modified = anticipated = anticipated_strict = 0
    for t in trajs:
        n_traj += 1
        n_steps += len(t.steps)
        prov_by_src: dict[int, list[int]] = defaultdict(list)
        for s in t.steps:
            has_p = has_r = False
            for n in s.needs:
                kinds[n.kind] += 1
                age = s.index - n.step
                ages[n.kind].append(age)
                if n.kind == "provenance":
                    has_p = True
                    hist[_bucket(age)] += 1
                    prov_by_src[n.step].append(s.index)
                elif n.kind == "reaccess":
                    has_r = True
            prov_steps += has_p
            reacc_steps += has_r
        for s in t.steps:
            for n in s.needs:
                if n.kind != "reaccess":
                    continue
                if modified_between(t, n.step, s.index):
                    modified += 1
                    continue
                real += 1
                users = prov_by_src.get(n.step, ())
                if any(n.step < k <= s.index for k in users):
                    anticipated += 1
                if any(n.step < k < s.index for k in users):
                    anticipated_strict += 1

    def summary(xs: list[int]) -> dict:
        if not xs:
            return {"n": 0}
        xs = sorted(xs)
        return {
            "n": len(xs),
            "mean": round(sum(xs) / len(xs), 2),
            "median": statistics.median(xs),
            "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))],
            "max": xs[-1],
        }

    prov = ages.get("provenance", [])
    order = [_bucket(lo) for lo, _ in AGE_BUCKETS]
    return {
        "trajectories": n_traj,
        "steps": n_steps,
        "needs_by_kind": {k: kinds.get(k, 0) for k in NEED_KINDS},
        "provenance_step_fraction": prov_steps / n_steps if n_steps else None,
        "provenance_over_10_fraction": (sum(a > 10 for a in prov) / len(prov)) if prov else None,
        "age": {k: summary(ages.get(k, [])) for k in NEED_KINDS},
        "age_hist": {b: hist.get(b, 0) for b in order},
        "reaccess_steps": reacc_steps,
        "real_rereads": real,
        "modified_rereads": modified,
        "anticipated": anticipated,
        "anticipated_strict": anticipated_strict,
        "anticipation_rate": anticipated / real if real else None,
        "anticipation_rate_strict": anticipated_strict / real if real else None,
    }
