"""Benchmark long runs: labelling, compiling, the oracle's plan and evaluation by a run's length.

A run of many calls (a long agent session) is made by repeating a dataset's longest run (its outputs
marked with their copy, so that each copy's are new outputs), and each stage is timed on it:

* **labelling**: ``label_trajectory`` (what ingest does per run);
* **compile**: ``compile_episode`` (what every replay and training does first);
* **oracle plan**: ``policies.oracle.plan`` (every evaluation and training plans each run);
* **evaluate**: ``evaluate([run], [policy])`` per policy, as ``dtoc-rl evaluate`` runs it: compiling,
  the oracle's plan and replay, and the policy's replay; ``none`` (nothing hidden) is the reference in
  the same run, so a policy's own cost is its column less ``none``'s.

Seconds per stage and milliseconds per model call; a stage whose time per call grows with the length
grows faster than the run.

    python -m scripts.bench_long                       # the bundled sample's longest run x 1, 4, 16
    python -m scripts.bench_long --dataset D --copies 1 16 32 --policies none hide_big learned:path=C
    python -m scripts.bench_long --json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import warnings
from typing import Any

from dtoc_rl.cli.common import at_least
from dtoc_rl.core.tokens import get_estimator
from dtoc_rl.data.dataset import DatasetError, iter_trajectories
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.labels import label_trajectory
from dtoc_rl.provenance import environment
from dtoc_rl.sim.episode import compile_episode


def long_run(base: Trajectory, copies: int) -> Trajectory:
    """``base``'s steps ``copies`` times over, each copy's outputs marked with its number and its turns
    after the copy before it; labels and kept shares dropped (labelling makes them again)."""
    t = copy.deepcopy(base)
    turns = max((s.turn for s in base.steps), default=0) + 1
    t.steps = []
    for r in range(copies):
        for s in base.steps:
            s2 = copy.deepcopy(s)
            s2.index, s2.turn = len(t.steps), s.turn + r * turns
            if s2.output and r:
                s2.output = f"[copy {r}]\n{s2.output}"
            s2.needs, s2.events = [], []
            t.steps.append(s2)
    t.traj_id, t.unique_events, t.unique_digest = f"{base.traj_id}x{copies}", None, None
    return t


def _timed(fn) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(base: Trajectory, copies: list[int], policies: list[str]) -> list[dict[str, Any]]:
    from dtoc_rl.policies.evaluate import evaluate
    from dtoc_rl.policies.oracle import plan
    from dtoc_rl.sim.simulator import CostConfig

    rows = []
    for n in copies:
        t = long_run(base, n)
        row: dict[str, Any] = {"copies": n, "steps": len(t.steps)}
        row["labelling_s"], _ = _timed(lambda: label_trajectory(t))  # noqa: B023
        row["compile_s"], ep = _timed(lambda: compile_episode(t, get_estimator("chars")))  # noqa: B023
        row["calls"] = ep.n_calls
        row["plan_s"], _ = _timed(lambda: plan(ep, CostConfig()))  # noqa: B023
        for spec in policies:
            row[f"evaluate {spec}_s"], runs = _timed(lambda: evaluate([t], [spec], progress=False))  # noqa: B023
            failed = [r.error for r in runs if r.error]
            if failed:
                raise SystemExit(f"bench_long: {spec} failed on the run: {failed[0]}")
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    keys = [k for k in rows[0] if k.endswith("_s")]
    head = ["calls", "steps", *[k[:-2] + " s (ms/call)" for k in keys]]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        cells = [f"{r['calls']:,}", f"{r['steps']:,}"]
        cells += [f"{r[k]:.2f} ({1000 * r[k] / max(r['calls'], 1):.2f})" for k in keys]
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_long", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", help="a dataset folder (default: the bundled sample)")
    ap.add_argument("--traj", help="the run to repeat, by trajectory id (default: the one of most steps)")
    ap.add_argument(
        "--copies", type=at_least(1), nargs="+", default=[1, 4, 16], help="lengths, in copies of the run"
    )
    ap.add_argument(
        "--policies", nargs="+", default=["none", "hide_big"], help="policies to evaluate (none first)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    try:
        runs = list(iter_trajectories(args.dataset or bundled_dataset()))
    except (DatasetError, FileNotFoundError) as e:
        ap.error(str(e).splitlines()[0])
    if args.traj is not None:
        runs = [t for t in runs if t.traj_id == args.traj]
        if not runs:
            ap.error(f"--traj {args.traj!r}: no such trajectory in the dataset")
    base = max(runs, key=lambda t: len(t.steps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # price estimates for models the table lacks, said by evaluate
        rows = measure(base, args.copies, args.policies)
    out = {"base": base.traj_id, "base_steps": len(base.steps), "rows": rows, "environment": environment()}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"{base.traj_id} ({len(base.steps)} steps) repeated; seconds (ms per model call)")
        print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
