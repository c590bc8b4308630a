"""How well did a checkpoint choose its thresholds, and what would other choosing rules have given?

    python -m scripts.threshold_rules --checkpoint C --dataset /tmp/all2
    python -m scripts.threshold_rules --checkpoint C --dataset /tmp/all2 --json

A trained policy hides an output when its P(visible) falls below a threshold, chosen per model family,
price regime and pooled on the tune half of its validation tasks (``learned_trainer.threshold_table``).
This replays every threshold of the training grid on the tune runs and on the held-out runs (the
checkpoint's ``val_tasks``, never used for any choice), then scores on the held-out runs the table the
checkpoint stores and the tables other rules would have chosen from the same tune runs:

* ``stored``: the checkpoint's own thresholds (what it does unless a fixed ``threshold`` is
  configured; the ``hide_big`` rules its abstaining entries may fall back to are not replayed here,
  so such an entry scores as abstaining: ``dtoc-rl evaluate`` measures the policy with them);
* ``chosen again``: the table this version's rule chooses from the same tune runs (what ``retune``
  would store), with the checkpoint's ``miss_budget``, ``min_family_val`` and ``min_source_val``;
* ``no per-harness check``: the same with ``min_source_val`` 0 (each entry chosen on its pooled runs,
  not held to each source harness);
* ``quantile Q``: misses judged at the Q-th quantile of their bootstrap over tasks (the default 0.8);
* ``families >= N``: a family needs N tune runs for an entry of its own (else its regime's);
* ``regimes only`` / ``pooled only``: no family entries / one threshold for every run;
* ``hindsight``: the single threshold best on the held-out runs themselves within the miss budget.
  No rule can know it; its distance from ``stored`` is what a better rule could win at most (for
  one threshold).

Cells: dollars saved against no management / misses per 100 model calls, overall and for long and
short runs (``evaluate.run_length``); a cell over the miss budget is marked ``!``.  Needs the data the
checkpoint was trained on (same --dataset), so that its held-out tasks are the same.  ``--excluded``
scores on the runs a leave-one-out checkpoint never saw (its ``exclude_source`` or ``exclude_family``,
``scripts.lofo``) instead of its held-out tasks: how its thresholds carry to a harness or model unseen.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: threshold_table's arguments per rule, over the checkpoint's own (budget, min_family_val, min_source_val)
RULES: dict[str, dict[str, Any]] = {
    "chosen again": {},
    "no per-harness check": {"min_source": 0},
    "quantile 0.5": {"quantile": 0.5},
    "quantile 0.9": {"quantile": 0.9},
    "families >= 30": {"min_family": 30},
    "regimes only": {"min_family": 10**9},
}
GROUPS = ("all", "long", "short")


def score(rows: Sequence[dict], grid: Sequence[float], pick: Callable[[dict], float]) -> dict[str, Any]:
    """Dollars saved (fraction of the unmanaged bill) and misses per 100 calls of ``rows`` when each
    run takes the threshold ``pick(row)`` (0: abstain, the unmanaged bill)."""
    base = dollars = misses = steps = 0.0
    for r in rows:
        t = pick(r)
        base += r["base"]
        steps += r["steps"]
        if t > 0:
            i = grid.index(t)
            dollars, misses = dollars + r["dollars"][i], misses + r["misses"][i]
        else:
            dollars += r["base"]
    return {
        "n": len(rows),
        "saved": (base - dollars) / base if base > 0 else 0.0,
        "misses_per_100": 100.0 * misses / steps if steps else 0.0,
    }


def compare(tune: list[dict], held: list[dict], grid: Sequence[float], stored: dict, cfg: Any) -> dict:
    """Every rule's held-out score per group (see the module docstring)."""
    from dtoc_rl.policies.learned import table_threshold
    from dtoc_rl.policies.learned_trainer import threshold_table

    def by_table(table: dict) -> Callable[[dict], float]:
        return lambda r: table_threshold(table, r["family"], None, regime=r["regime"]) or 0.0

    on_grid = set(grid) | {0.0}
    for t in [*stored.get("family", {}).values(), *stored.get("regime", {}).values(), stored.get("default")]:
        if t is not None and float(t) not in on_grid:
            raise ValueError(f"the stored threshold {t} is not on the replay grid {list(grid)}")
    budget = cfg.miss_budget
    own = {
        "min_family": cfg.min_family_val,
        "min_source": cfg.min_source_val,
        "min_regime": cfg.min_family_val,
    }
    tables = {name: threshold_table(tune, grid, budget, **{**own, **kw}) for name, kw in RULES.items()}
    picks: dict[str, Callable[[dict], float]] = {"stored": by_table(stored)}
    picks.update({name: by_table(table) for name, table in tables.items()})
    pooled = tables["chosen again"]["default"] or 0.0  # its pooled entry, for every run
    picks["pooled only"] = lambda r: pooled
    out: dict[str, Any] = {"budget_misses_per_100": budget, "rules": {}}
    for name, pick in picks.items():
        out["rules"][name] = {g: score(_group(held, g), grid, pick) for g in GROUPS}
    best = {}
    for g in GROUPS:
        runs = _group(held, g)
        options = [(score(runs, grid, lambda r, t=t: t), t) for t in grid]
        ok = [(s, t) for s, t in options if s["misses_per_100"] <= budget and s["saved"] > 0]
        s, t = max(ok, key=lambda o: o[0]["saved"]) if ok else (score(runs, grid, lambda r: 0.0), 0.0)
        best[g] = {**s, "threshold": t}
    out["rules"]["hindsight"] = best
    return out


def _group(rows: list[dict], group: str) -> list[dict]:
    return rows if group == "all" else [r for r in rows if r["length"] == group]


def _sweep(policy, episodes, cost_cfg, label: str, progress: bool) -> list[dict]:
    from tqdm.auto import tqdm

    from dtoc_rl.policies.learned_trainer import sweep_thresholds

    it = tqdm(episodes, desc=f"replay {label}", disable=not progress, leave=False)
    return [sweep_thresholds(policy, [ep], cost_cfg)[0] for ep in it]


def run(
    checkpoint: str, dataset: str | None, progress: bool = True, excluded: bool = False, max_runs: int = 0
) -> dict[str, Any]:
    import random

    import torch

    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_trainer import THRESHOLD_GRID, _cost_config, own_splits

    policy = LearnedPolicy.load(checkpoint)
    stored = policy.meta.get("thresholds")
    if not stored:
        raise ValueError(f"{checkpoint} stores no threshold table (trained without validation tasks?)")
    torch.set_num_threads(max(1, policy.cfg.threads))
    _, _, held_eps, tune_eps = own_splits(policy, dataset, None)
    scored_on = "held-out tasks"
    if excluded:
        src, fam = policy.cfg.exclude_source, policy.cfg.exclude_family
        if not (src or fam):
            raise ValueError(f"{checkpoint} left no source or family out of its training (--excluded)")
        held_eps = [e for e in load_episodes(dataset) if e.source == src or e.model_family == fam]
        held_eps.sort(key=lambda e: e.traj_id)
        if max_runs and len(held_eps) > max_runs:
            held_eps = random.Random(0).sample(held_eps, max_runs)
        scored_on = "runs of what it never saw (" + ", ".join(x for x in (src, fam) if x) + ")"
    cost_cfg = _cost_config(policy)
    grid = list(THRESHOLD_GRID)
    tune = _sweep(policy, tune_eps, cost_cfg, "tune runs", progress)
    held = _sweep(policy, held_eps, cost_cfg, "scored runs", progress)
    result = compare(tune, held, grid, stored, policy.cfg)
    result.update(
        fixed_threshold=policy.cfg.threshold,
        checkpoint=str(checkpoint),
        tune_runs=len(tune),
        held_out_runs=len(held),
        grid=grid,
        scored_on=scored_on,
    )
    return result


def table(result: dict[str, Any]) -> str:
    budget = result["budget_misses_per_100"]
    first = result["rules"]["stored"]
    head = " | ".join(f"{g} ({first[g]['n']})" for g in GROUPS)
    lines = [f"| rule | {head} |", "|---|" + "---|" * len(GROUPS)]
    for name, cells in result["rules"].items():
        row = []
        for g in GROUPS:
            c = cells[g]
            mark = " !" if c["misses_per_100"] > budget else ""
            t = f" (t={c['threshold']})" if "threshold" in c else ""
            row.append(f"{100 * c['saved']:+.1f}% / {c['misses_per_100']:.2f}{mark}{t}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.threshold_rules",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--checkpoint", required=True, help="a trained learned policy (dtoc-rl train -o)")
    ap.add_argument("--dataset", help="the dataset folder it was trained on (default: the bundled sample)")
    ap.add_argument(
        "--excluded",
        action="store_true",
        help="score on the runs of the source or family the checkpoint left out of its training "
        "(dtoc-rl train --exclude-source/--exclude-family) instead of its held-out tasks",
    )
    ap.add_argument("--max-runs", type=int, default=0, help="with --excluded: score on at most this many")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if args.max_runs < 0:
        ap.error("--max-runs must be >= 0")
    if args.max_runs and not args.excluded:
        ap.error("--max-runs caps the runs of --excluded; the held-out tasks are scored whole")
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.policies.learned import CheckpointError

    try:
        progress = not (args.quiet or args.json)
        result = run(args.checkpoint, args.dataset, progress, args.excluded, args.max_runs)
    except (ValueError, CheckpointError, DatasetError, FileNotFoundError) as e:
        print(f"threshold_rules: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table(result))
        if result["fixed_threshold"] is not None:
            print(f"(the checkpoint is configured to a fixed threshold {result['fixed_threshold']}, "
                  "which it uses instead of its table)")  # fmt: skip
        print(
            f"\n{result['tune_runs']} tune runs; scored on {result['held_out_runs']} {result['scored_on']}; "
            f"cells: $ saved / misses per 100 calls; ! over the {result['budget_misses_per_100']} budget"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
