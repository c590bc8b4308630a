"""Benchmark offline evaluation: trajectories/s and steps/s per policy, one process and a pool.

The dataset is ``../shared/traces`` ingested (with need labels) into a temporary folder first,
unless ``--dataset`` names an existing one.  Policies: every baseline at its defaults, the
hindsight oracle, and a learned policy (``--checkpoint``, or the default network untrained: its
cost per step does not depend on the weights, only the decisions it makes do).

* **Per policy, one process**: one ``ReplayEnv`` (``dtoc_rl.engine.features.DEFAULT_MAX_ITEMS``
  slots, as ``dtoc-rl evaluate``), the policy run over every trajectory with
  ``run_policy_on_episode`` (what ``evaluate()`` does), after a warm-up pass; median of
  ``--repeats``.  Steps are env steps (a trajectory of n calls has n - 1).
* **Per policy, N worker processes**: the worker pool of ``evaluate(workers=N)`` (forkserver, the
  same initializer and parts of the dataset), timed after the workers have started; each part is
  read, compiled and labelled by the worker that runs it, every pass, as ``evaluate()``'s workers do
  (which the warm one-process figure does not pay); speed-up = one-process time / pool time.
* **End to end**: ``evaluate(dataset, all policies, workers=N)`` (which adds the oracle when the list
  lacks it) as a user runs it: pool start-up and per-worker dataset loading included.

    python -m scripts.bench_eval            # table
    python -m scripts.bench_eval --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from dtoc_rl.cli.common import at_least
from dtoc_rl.data.dataset import DatasetError
from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.evaluate import _init_worker, _plan, _work, evaluate, run_policy_on_episode
from dtoc_rl.policies.registry import BASELINES, PolicySpecError, expand_specs, make_policy
from dtoc_rl.provenance import environment
from dtoc_rl.sim.simulator import CostConfig

REPO = Path(__file__).resolve().parents[1]
#: The slots `dtoc-rl evaluate` gives the env by default: the figures are those a user gets.
MAX_ITEMS = DEFAULT_MAX_ITEMS


def default_traces() -> Path:
    return Path(os.environ.get("DTOC_SHARED_TRACES", REPO.parent / "shared" / "traces"))


def make_dataset(traces: Path, out: Path) -> dict[str, Any]:
    from dtoc_rl.data.dataset import write_dataset
    from dtoc_rl.ingest.driver import ingest_paths

    t0 = time.perf_counter()
    res = ingest_paths([traces], label=True, workers=min(2, os.cpu_count() or 1), progress=False)
    write_dataset(res.trajectories, out)
    return {"path": str(out), "trajectories": len(res.trajectories), "seconds": time.perf_counter() - t0}


def one_process(eps, spec: str, repeats: int) -> dict[str, Any]:
    env = ReplayEnv(trajectories=eps, max_items=MAX_ITEMS, cost_config=CostConfig(), expose_episode=True)
    pol = make_policy(spec)
    n = len(eps)
    steps = sum(e.n - 1 for e in eps)
    times = []
    errors = 0
    for r in range(repeats + 1):  # the first pass warms caches (compiled baselines, templates)
        t0 = time.perf_counter()
        for i in range(n):
            errors += run_policy_on_episode(pol, env, i, spec).error is not None
        if r:
            times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    return {"seconds": sec, "seconds_all": times, "trajectories_per_s": n / sec, "steps_per_s": steps / sec,
            "errors": errors}  # fmt: skip


def pool(dataset: str, n: int, steps: int, spec: str, workers: int, repeats: int) -> dict[str, Any]:
    plan, _, _ = _plan(dataset, {"model_family": None, "source": None}, None, workers)
    t_start = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=_init_worker,
        initargs=([spec], CostConfig(), MAX_ITEMS),
    ) as ex:
        # every worker starts and builds its policy before the timed runs
        wait([ex.submit(time.sleep, 0.5) for _ in range(workers)])
        startup = time.perf_counter() - t_start
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            runs = [r for out in ex.map(_work, plan) for r in out]
            times.append(time.perf_counter() - t0)
    assert len(runs) == n
    sec = statistics.median(times)
    return {"workers": workers, "seconds": sec, "seconds_all": times, "startup_seconds": startup,
            "trajectories_per_s": n / sec, "steps_per_s": steps / sec}  # fmt: skip


def end_to_end(dataset: str, specs: list[str], workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    runs = evaluate(dataset, specs, workers=workers, progress=False)
    sec = time.perf_counter() - t0
    # evaluate() adds the oracle when the list lacks it: count what ran, not what was asked
    ran = len({r.policy for r in runs})
    return {
        "workers": workers,
        "seconds": sec,
        "policies": ran,
        "runs": len(runs),
        "runs_per_s": len(runs) / sec,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_eval", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dataset", help="an ingested dataset (default: ingest ../shared/traces to a temp folder)"
    )
    ap.add_argument("--traces", type=Path, help="logs to ingest when no --dataset (default ../shared/traces)")
    ap.add_argument(
        "--checkpoint",
        help="learned policy checkpoint, measured after --policies (default without --policies: the "
        "untrained default network)",
    )
    ap.add_argument("--policies", nargs="+", help="policy specs (default: baselines, oracle, learned)")
    ap.add_argument(
        "--workers", type=at_least(1), nargs="+", default=[2], help="pool sizes to measure (1: none)"
    )
    ap.add_argument("--repeats", type=at_least(1), default=3, help="timed passes per measurement (median)")
    ap.add_argument("--no-end-to-end", action="store_true", help="skip the end-to-end evaluate() runs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)

    # every spec and the dataset are checked before any ingest or timing: a typo costs nothing
    asked = [*(args.policies or []), *([args.checkpoint] if args.checkpoint else [])]
    try:
        asked = expand_specs(asked)
        for spec in asked:
            make_policy(spec)
    except (PolicySpecError, ValueError) as e:
        ap.error(" ".join(str(e).split()))
    except Exception as e:  # a damaged checkpoint; its module (torch) is imported only when one is named
        from dtoc_rl.policies.learned import CheckpointError

        if not isinstance(e, CheckpointError):
            raise
        ap.error(" ".join(str(e).split()))
    eps = None
    if args.dataset:
        try:
            eps = load_episodes(args.dataset)
        except (DatasetError, ValueError, OSError) as e:
            ap.error(f"--dataset: {' '.join(str(e).split())}")

    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
        meta: dict[str, Any] = {
            **environment(),
            "load_avg_start": os.getloadavg(),
        }
        if args.dataset:
            dataset = str(args.dataset)
        else:
            traces = args.traces or default_traces()
            if not traces.exists():
                ap.error(f"{traces} does not exist (set DTOC_SHARED_TRACES, or pass --traces or --dataset)")
            meta["ingest"] = make_dataset(traces, Path(tmp) / "dataset")
            dataset = meta["ingest"]["path"]
        if args.policies:
            specs = list(dict.fromkeys(asked))
        else:
            ckpt = args.checkpoint
            if ckpt is None:
                from dtoc_rl.policies.learned import LearnedPolicy

                ckpt = str(LearnedPolicy().save(Path(tmp) / "learned-untrained"))
            specs = [*BASELINES, "oracle", ckpt]
        labels = {s: ("learned" if Path(s).is_dir() else s) for s in specs}
        if eps is None:
            eps = load_episodes(dataset)
        n, steps = len(eps), sum(e.n - 1 for e in eps)
        meta.update(dataset=dataset, trajectories=n, steps=steps, max_items=MAX_ITEMS, repeats=args.repeats)
        rows = []
        for spec in specs:
            row: dict[str, Any] = {
                "policy": labels[spec],
                "one_process": one_process(eps, spec, args.repeats),
            }
            for w in args.workers:
                if w > 1:
                    p = pool(dataset, n, steps, spec, w, args.repeats)
                    p["speedup"] = row["one_process"]["seconds"] / p["seconds"]
                    row[f"workers_{w}"] = p
            rows.append(row)
        e2e = []
        if not args.no_end_to_end:
            for w in sorted({1, *args.workers}):
                e2e.append(end_to_end(dataset, specs, w))
            for r in e2e:
                r["speedup"] = e2e[0]["seconds"] / r["seconds"]
        meta["load_avg_end"] = os.getloadavg()
    out = {"meta": meta, "policies": rows, "end_to_end": e2e}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"evaluation over {n} trajectories, {steps:,} env steps ({MAX_ITEMS} slots), median of {args.repeats}"
    )
    head = f"{'policy':<18}{'1 proc traj/s':>14}{'steps/s':>10}"
    for w in args.workers:
        if w > 1:
            head += f"{f'{w} proc traj/s':>14}{'steps/s':>10}{'speed-up':>9}"
    print(head)
    for r in rows:
        o = r["one_process"]
        line = f"{r['policy']:<18}{o['trajectories_per_s']:>14,.0f}{o['steps_per_s']:>10,.0f}"
        for w in args.workers:
            if w > 1:
                p = r[f"workers_{w}"]
                line += f"{p['trajectories_per_s']:>14,.0f}{p['steps_per_s']:>10,.0f}{p['speedup']:>8.2f}×"
        print(line)
    for r in e2e:
        print(
            f"end to end, evaluate({r['policies']} policies, workers={r['workers']}): {r['seconds']:.1f} s, "
            f"{r['runs_per_s']:.0f} runs/s, speed-up {r['speedup']:.2f}×"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
