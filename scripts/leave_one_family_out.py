"""Leave-one-family-out: train without model family F, evaluate on every trajectory of F.

    python -m scripts.leave_one_family_out --dataset /tmp/all2 --out runs/lofo
    python -m scripts.leave_one_family_out --dataset /tmp/all2 --families claude-sonnet gpt-4 --json

For every family with at least --min-trajectories trajectories it trains a learned policy with the
default settings on all other families (`LearnedPolicyConfig(exclude_family=F)`, thresholds chosen on
the other families' validation tasks, so F takes its price regime's entry), then evaluates it, no
management and the oracle on all of F's trajectories. This is what a user with a model the toolkit
never saw gets: its prices are the only thing the network knows about it. Writes one checkpoint per
family and ``lofo.json`` into --out and prints a table ($ saved with its 95% CI, misses per 100 steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset folder from `dtoc-rl ingest`")
    ap.add_argument("--out", default="runs/lofo", help="folder for the checkpoints and lofo.json")
    ap.add_argument(
        "--families", nargs="*", default=[], help="families to leave out (default: all with enough)"
    )
    ap.add_argument(
        "--min-trajectories", type=int, default=20, help="trajectories a family needs to be left out"
    )
    ap.add_argument("--epochs", type=int, default=None, help="max supervised epochs (default: the config's)")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    return ap.parse_args(argv)


def left_out_families(episodes, wanted: list[str], min_trajectories: int) -> list[str]:
    """The families to leave out: ``wanted`` (each must be present), else every family with enough runs."""
    counts = Counter(e.model_family for e in episodes)
    if wanted:
        missing = [f for f in wanted if f not in counts]
        if missing:
            raise ValueError(f"families not in the dataset: {missing} (present: {sorted(counts)})")
        return list(wanted)
    return sorted(f for f, n in counts.items() if n >= min_trajectories)


def main(argv: list[str] | None = None) -> int:
    import warnings

    from dtoc_rl.dataset import DatasetError
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.evaluate import aggregate, evaluate
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    args = parse(argv)
    warnings.simplefilter("ignore", UserWarning)  # versions priced as their family: evaluate reports them
    try:
        eps = load_episodes(args.dataset)
        families = left_out_families(eps, args.families, args.min_trajectories)
    except (ValueError, FileNotFoundError, DatasetError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = []
    for fam in families:
        t0 = time.perf_counter()
        kw = {"exclude_family": fam, "seed": args.seed}
        if args.epochs is not None:
            kw["epochs"] = args.epochs
        policy = LearnedPolicyConfig(**kw).create()
        policy.fit(args.dataset, episodes=eps, progress=False)
        policy.save(out / fam)
        runs = evaluate(eps, ["none"], policies={"learned": policy}, model_family=fam, progress=False)
        rows = {r["policy"]: r for r in aggregate(runs, by=["overall"])}
        entry = {
            "family": fam,
            "trajectories": rows["learned"]["n"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        for p in ("learned", "oracle"):
            r = rows[p]
            entry[p] = {k: r[k] for k in ("savings", "savings_lo", "savings_hi", "misses_per_100")}
        result.append(entry)
        (out / "lofo.json").write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("| left-out family | runs | learned $ saved (95% CI) / misses per 100 | oracle $ saved |")
    print("|---|---:|---|---:|")
    for e in result:
        le, o = e["learned"], e["oracle"]
        print(
            f"| {e['family']} | {e['trajectories']} | {100 * le['savings']:+.1f}% "
            f"[{100 * le['savings_lo']:+.1f}, {100 * le['savings_hi']:+.1f}] / {le['misses_per_100']:.2f} "
            f"| {100 * o['savings']:+.1f}% |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
