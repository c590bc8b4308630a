"""Cross-model analysis: train one policy per model family, evaluate each on every family.

    python -m scripts.cross_model --dataset /tmp/all --out runs/cross
    python -m scripts.cross_model --dataset /tmp/all --families gemini-3-pro gpt-4o --json

For every family with enough trajectories it trains a learned policy on that family's training tasks
(and one family-conditioned policy on all families), then evaluates every policy on every family's
held-out tasks (the same task split for everyone), next to no management and the oracle. Writes
``cross_model.json``, ``cross_model_savings.png`` and ``cross_model_misses.png`` into --out and
prints the matrices. Everything runs on the CPU; a family's training takes one to a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dtoc_rl.cli.common import at_least, emit_json, number_in

PROG = "python -m scripts.cross_model"


@dataclass
class Args:
    dataset: str = ""
    """dataset folder from `dtoc-rl ingest` (required)"""
    out: str = "runs/cross_model"
    """output folder for checkpoints, JSON and plots"""
    families: list[str] = field(default_factory=list)
    """families to train per-family policies for (default: every family with >= --min-trajectories)"""
    min_trajectories: int = 40
    """minimum trajectories for a family to get its own policy"""
    epochs: int = 30
    """max supervised epochs per policy"""
    threshold: float = 0.1
    """learned-policy threshold on P(visible) (low: few misses)"""
    val_fraction: float = 0.2
    """held-out task fraction (the same split is used for every family)"""
    seed: int = 0
    """random seed"""
    json: bool = False
    """print the result as JSON"""


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


#: --val-fraction: both the training and the held-out tasks need some; --threshold: a probability,
#: LearnedPolicyConfig's range, checked before any training rather than when the first policy is made
_fraction = number_in(0, 1, open_low=True, open_high=True)
_probability = number_in(0, 1)


def parse(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    for name, f in Args.__dataclass_fields__.items():
        doc = {
            "dataset": "dataset folder from `dtoc-rl ingest` (required)",
            "out": "output folder for checkpoints, JSON and plots",
            "families": "families to train per-family policies for (default: all with enough data)",
            "min_trajectories": "minimum trajectories for a family to get its own policy",
            "epochs": "max supervised epochs per policy",
            "threshold": "learned-policy threshold on P(visible) (low: few misses)",
            "val_fraction": "held-out task fraction",
            "seed": "random seed",
            "json": "print the result as JSON",
        }[name]
        flag = "--" + name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action="store_true", help=doc)
        elif name == "families":
            ap.add_argument(flag, nargs="+", default=[], help=doc)
        elif name in ("min_trajectories", "epochs"):
            ap.add_argument(flag, type=at_least(1), default=f.default, help=doc)
        elif name == "val_fraction":
            ap.add_argument(flag, type=_fraction, default=f.default, help=doc)
        elif name == "threshold":
            ap.add_argument(flag, type=_probability, default=f.default, help=doc)
        else:
            ap.add_argument(
                flag, type=type(f.default), default=f.default, help=doc, required=name == "dataset"
            )
    return Args(**vars(ap.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.plots import plot_cross_model
    from dtoc_rl.policies.evaluate import aggregate, evaluate
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig
    from dtoc_rl.policies.learned_trainer import split_by_task

    t0 = time.perf_counter()
    try:
        eps = load_episodes(args.dataset)
    except (DatasetError, ValueError, OSError) as e:
        return _error(" ".join(str(e).split()))
    counts = Counter(e.model_family for e in eps)
    families = args.families or sorted(f for f, n in counts.items() if n >= args.min_trajectories)
    unknown = sorted(set(families) - set(counts))
    if unknown:
        return _error(
            f"--families: {', '.join(unknown)} not in {args.dataset} (present: {', '.join(sorted(counts))})"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # One split for everyone, so "held-out" means the same tasks whichever policy is evaluated.
    _, val = split_by_task(eps, args.val_fraction, args.seed)
    val_tasks = {(e.source, e.task_id) for e in val}
    val_by_family = {f: [e for e in val if e.model_family == f] for f in families}

    policies = {}
    reports = {}
    for fam in [*families, "all"]:
        cfg = LearnedPolicyConfig(
            epochs=args.epochs,
            seed=args.seed + 1,  # a different inner split than the held-out one
            model_family=None if fam == "all" else fam,
            threshold=args.threshold,
        )
        pol = cfg.create()
        print(f"== train on {fam}", file=sys.stderr, flush=True)  # progress: stdout is the result's
        # Training sees no held-out task; fit() splits the rest again for early stopping.
        train_eps = [
            e
            for e in eps
            if (fam == "all" or e.model_family == fam) and (e.source, e.task_id) not in val_tasks
        ]
        reports[fam] = pol.fit(episodes=train_eps, progress=not args.json)
        pol.save(out / f"policy-{fam}")
        policies[fam] = pol

    matrix_sav: dict[str, dict[str, float]] = {}
    matrix_miss: dict[str, dict[str, float]] = {}
    rows_all = []
    for target, target_eps in val_by_family.items():
        if not target_eps:
            continue
        runs = evaluate(
            target_eps,
            ["none"],
            policies={f"trained:{f}": p for f, p in policies.items()},
            progress=False,
        )
        rows = aggregate(runs, by=["overall"], n_boot=500, seed=args.seed)
        for r in rows:
            r["evaluated_on"] = target
            rows_all.append(r)
            if r["policy"].startswith("trained:"):
                src = r["policy"].split(":", 1)[1]
                matrix_sav.setdefault(src, {})[target] = r["savings"]
                matrix_miss.setdefault(src, {})[target] = r["misses_per_100"]
            if r["policy"] == "oracle":
                matrix_sav.setdefault("(oracle)", {})[target] = r["savings"]
                matrix_miss.setdefault("(oracle)", {})[target] = 0.0
    result = {
        "families": families,
        "held_out_trajectories": {f: len(v) for f, v in val_by_family.items()},
        "savings": matrix_sav,
        "misses_per_100": matrix_miss,
        "rows": rows_all,
        "training": {f: {k: v for k, v in r.items() if k in ("train_episodes", "val_episodes", "seconds",
                                                            "val_metrics")} for f, r in reports.items()},
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    (out / "cross_model.json").write_text(json.dumps(result, indent=2, default=str))
    plot_cross_model(matrix_sav, out / "cross_model_savings.png", "savings")
    plot_cross_model({k: {c: v / 100 for c, v in r.items()} for k, r in matrix_miss.items()},
                     out / "cross_model_misses.png", "misses per 100 steps (/100)")  # fmt: skip
    if args.json:
        emit_json(result)  # strict JSON: an undefined figure (NaN) is null
        return 0
    cols = [f for f in families if val_by_family.get(f)]
    print("\ndollar savings on held-out tasks (rows: trained on; columns: evaluated on)")
    print(f"{'':18s}" + "".join(f"{c[:14]:>16s}" for c in cols))
    for src in matrix_sav:
        print(f"{src[:18]:18s}" + "".join(
            f"{100 * matrix_sav[src].get(c, float('nan')):+14.1f}% " for c in cols))  # fmt: skip
    print("\nmisses per 100 steps")
    for src in matrix_miss:
        print(f"{src[:18]:18s}" + "".join(f"{matrix_miss[src].get(c, float('nan')):16.2f}" for c in cols))
    print(f"\nwrote {out}/cross_model.json and the two heatmaps in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
