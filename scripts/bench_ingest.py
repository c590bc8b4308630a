"""Benchmark ingestion: trajectories/s and MB/s over real logs, and need-labelling µs per step.

* **Ingest**: ``dtoc_rl.ingest.driver.ingest_paths`` over ``--paths`` (default ``../shared/traces``),
  with and without need labelling, with 1 and 2 worker processes (forkserver; the pool's start-up
  is included, as a user of ``dtoc-rl ingest --workers`` pays it).  Parsing and labelling only:
  writing the Parquet dataset is not included.  Median wall time over ``--repeats`` runs;
  MB/s counts the bytes of the log files read (the unit sizes the driver reports).
* **Labelling**: ``dtoc_rl.labels.label_trajectory`` alone, in one process, on the same
  trajectories ingested without labels (a fresh copy each repeat): µs per step overall, and the
  median and p90 over trajectories of each one's µs per step.

    python -m scripts.bench_ingest            # table
    python -m scripts.bench_ingest --json     # machine-readable
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from dtoc_rl.cli.common import at_least
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.labels import label_trajectory
from dtoc_rl.provenance import environment

REPO = Path(__file__).resolve().parents[1]


def default_traces() -> Path:
    return Path(os.environ.get("DTOC_SHARED_TRACES", REPO.parent / "shared" / "traces"))


def bench_ingest(paths: list[str], label: bool, workers: int, repeats: int) -> dict[str, Any]:
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = ingest_paths(paths, label=label, workers=workers, progress=False)
        times.append(time.perf_counter() - t0)
    assert res is not None
    sec = statistics.median(times)
    n = len(res.trajectories)
    steps = sum(len(t.steps) for t in res.trajectories)
    return {
        "label": label,
        "workers": workers,
        "seconds": sec,
        "seconds_all": times,
        "trajectories": n,
        "steps": steps,
        "files": res.units,
        "skipped": len(res.skipped),
        "mb_read": res.bytes_read / 1e6,
        "trajectories_per_s": n / sec,
        "steps_per_s": steps / sec,
        "mb_per_s": res.bytes_read / 1e6 / sec,
    }


def bench_labelling(paths: list[str], repeats: int) -> dict[str, Any]:
    base = ingest_paths(paths, label=False, workers=1, progress=False).trajectories
    totals, per_traj = [], []
    steps = sum(len(t.steps) for t in base)
    for _ in range(repeats):
        trajs = copy.deepcopy(base)
        per: list[float] = []
        t_all = time.perf_counter()
        for t in trajs:
            t0 = time.perf_counter()
            label_trajectory(t)
            if t.steps:
                per.append((time.perf_counter() - t0) / len(t.steps) * 1e6)
        totals.append((time.perf_counter() - t_all) / max(steps, 1) * 1e6)
        per_traj.append(sorted(per))
    mid = per_traj[len(per_traj) // 2]
    return {
        "trajectories": len(base),
        "steps": steps,
        "repeats": repeats,
        "us_per_step": statistics.median(totals),
        "us_per_step_all": totals,
        "per_trajectory_us_per_step_p50": mid[len(mid) // 2] if mid else 0.0,
        "per_trajectory_us_per_step_p90": mid[int(0.9 * (len(mid) - 1))] if mid else 0.0,
        "per_trajectory_us_per_step_max": mid[-1] if mid else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_ingest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", nargs="+", help="log files or folders (default: ../shared/traces)")
    ap.add_argument("--workers", type=at_least(1), nargs="+", default=[1, 2], help="worker counts to measure")
    ap.add_argument("--repeats", type=at_least(1), default=3, help="runs per configuration (median reported)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    paths = args.paths or [str(default_traces())]
    for p in paths:
        if not Path(p).exists():
            ap.error(f"{p} does not exist (set DTOC_SHARED_TRACES or pass --paths)")

    rows = [bench_ingest(paths, label, w, args.repeats) for label in (False, True) for w in args.workers]
    out = {
        "meta": {
            **environment(),
            "paths": paths,
            "load_avg_start": os.getloadavg(),
        },
        "ingest": rows,
        "labelling": bench_labelling(paths, args.repeats),
    }
    out["meta"]["load_avg_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"ingest of {', '.join(paths)} (median of {args.repeats})")
    print(
        f"{'labels':<8}{'workers':>8}{'seconds':>9}{'trajs':>7}{'trajs/s':>9}{'steps/s':>9}{'MB':>8}{'MB/s':>7}"
    )
    for r in rows:
        print(
            f"{'yes' if r['label'] else 'no':<8}{r['workers']:>8}{r['seconds']:>9.2f}{r['trajectories']:>7}"
            f"{r['trajectories_per_s']:>9.1f}{r['steps_per_s']:>9,.0f}{r['mb_read']:>8.1f}{r['mb_per_s']:>7.2f}"
        )
    lab = out["labelling"]
    print(
        f"\nneed labelling alone: {lab['us_per_step']:.0f} µs/step over {lab['steps']:,} steps "
        f"({lab['trajectories']} trajectories); per trajectory µs/step p50 "
        f"{lab['per_trajectory_us_per_step_p50']:.0f}, p90 {lab['per_trajectory_us_per_step_p90']:.0f}, "
        f"max {lab['per_trajectory_us_per_step_max']:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
