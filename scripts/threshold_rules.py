"""How well did a checkpoint choose its thresholds, and what would other choosing rules have given?

    python -m scripts.threshold_rules --checkpoint C --dataset /tmp/all2
    python -m scripts.threshold_rules --checkpoint C --dataset /tmp/all2 --json

A trained policy hides an output when its P(visible) falls below a threshold, chosen per model family,
price regime and pooled on the tune half of its validation tasks (``learned_trainer.threshold_table``).
This replays every threshold of the training grid on the tune runs and on the held-out runs (the
checkpoint's ``val_tasks``, never used for any choice), then scores on the held-out runs the table the
checkpoint stores and the tables other rules would have chosen from the same tune runs:

* ``stored``: the checkpoint's own table;
* ``quantile Q``: misses judged at the Q-th quantile of their bootstrap over runs (the default 0.8);
* ``families >= N``: a family needs N tune runs for an entry of its own (else its regime's);
* ``regimes only`` / ``pooled only``: no family entries / one threshold for every run;
* ``hindsight``: the single threshold best on the held-out runs themselves within the miss budget.
  No rule can know it; its distance from ``stored`` is what a better rule could win at most (for
  one threshold).

Cells: dollars saved against no management / misses per 100 model calls, overall and for long and
short runs (``evaluate.run_length``); a cell over the miss budget is marked ``!``.  Needs the data the
checkpoint was trained on (same --dataset), so that its held-out tasks are the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

RULES: dict[str, dict[str, Any]] = {
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

    budget, min_family = cfg.miss_budget, cfg.min_family_val
    pooled = threshold_table(tune, grid, budget, min_family)["default"] or 0.0
    picks: dict[str, Callable[[dict], float]] = {"stored": by_table(stored)}
    for name, kw in RULES.items():
        kw = {"min_family": min_family, **kw}
        picks[name] = by_table(threshold_table(tune, grid, budget, **kw))
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


def run(checkpoint: str, dataset: str | None, progress: bool = True) -> dict[str, Any]:
    import torch

    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_trainer import THRESHOLD_GRID, _cost_config, own_splits

    policy = LearnedPolicy.load(checkpoint)
    stored = policy.meta.get("thresholds")
    if not stored:
        raise ValueError(f"{checkpoint} stores no threshold table (trained without validation tasks?)")
    torch.set_num_threads(max(1, policy.cfg.threads))
    _, _, held_eps, tune_eps = own_splits(policy, dataset, None)
    cost_cfg = _cost_config(policy)
    grid = list(THRESHOLD_GRID)
    tune = _sweep(policy, tune_eps, cost_cfg, "tune runs", progress)
    held = _sweep(policy, held_eps, cost_cfg, "held-out runs", progress)
    result = compare(tune, held, grid, stored, policy.cfg)
    result.update(checkpoint=str(checkpoint), tune_runs=len(tune), held_out_runs=len(held), grid=grid)
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
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.policies.learned import CheckpointError

    try:
        result = run(args.checkpoint, args.dataset, progress=not (args.quiet or args.json))
    except (ValueError, CheckpointError, DatasetError, FileNotFoundError) as e:
        print(f"threshold_rules: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table(result))
        print(
            f"\n{result['tune_runs']} tune runs, {result['held_out_runs']} held-out runs; cells: $ saved / "
            f"misses per 100 calls on the held-out runs; ! over the {result['budget_misses_per_100']} budget"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
