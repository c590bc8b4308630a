"""Benchmark the DTOC core: microseconds per orchestrator step.

One step = store one tool output, apply one manage_context call (hide the
output that just fell out of a keep-last-20 window), and assemble the active
context.  Measured after the store already holds N outputs, for both backends.

    python -m scripts.bench_core            # table
    python -m scripts.bench_core --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from dtoc_rl import DTOCContext, MemoryStore, SQLiteStore
from dtoc_rl.cli.common import at_least
from dtoc_rl.provenance import environment

#: SQLite's PRAGMA synchronous modes, as SQLiteStore takes them.
SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def _fill(ctx: DTOCContext, n: int, rng: random.Random) -> None:
    for i in range(n):
        ctx.add_assistant(f"step {i}", tool_calls=[{"name": "bash", "arguments": {"cmd": f"cat f{i}.py"}}])
        ctx.add_tool_result("x" * rng.randint(100, 4000))
        if i >= 20:
            ctx.manage_context(disable=[f"t{i - 20:04d}"])


def bench(backend: str, n: int, steps: int, synchronous: str) -> dict:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        store = (
            MemoryStore() if backend == "memory" else SQLiteStore(Path(tmp) / "b.db", synchronous=synchronous)
        )
        ctx = DTOCContext(query="benchmark task", store=store)
        _fill(ctx, n, rng)
        per = {"store": [], "manage": [], "assemble": [], "step": []}
        for i in range(n, n + steps):
            payload = "y" * rng.randint(100, 4000)
            t0 = time.perf_counter()
            ctx.add_assistant(tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}])
            ctx.add_tool_result(payload)
            t1 = time.perf_counter()
            ctx.manage_context(disable=[f"t{i - 20:04d}"])
            t2 = time.perf_counter()
            ctx.assemble()
            t3 = time.perf_counter()
            per["store"].append(t1 - t0)
            per["manage"].append(t2 - t1)
            per["assemble"].append(t3 - t2)
            per["step"].append(t3 - t0)
        store.close()
    return {
        "backend": backend if backend == "memory" else f"sqlite/{synchronous}",
        "outputs": n,
        **{f"{k}_us": statistics.median(v) * 1e6 for k, v in per.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_core", description=__doc__.split("\n\n")[0])
    # a size is what the µs/output column divides by, so 0 is no size
    ap.add_argument("--sizes", type=at_least(1), nargs="+", default=[100, 1000, 10000], help="stored outputs")
    ap.add_argument("--steps", type=at_least(1), default=200, help="timed steps per size (median reported)")
    ap.add_argument(
        "--sqlite-sync",
        nargs="+",
        type=str.upper,
        choices=SYNC_MODES,
        default=["FULL", "NORMAL"],
        help="SQLite synchronous modes (default FULL NORMAL)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        rows.append(bench("memory", n, args.steps, "FULL"))
        for sync in args.sqlite_sync:
            rows.append(bench("sqlite", n, args.steps, sync))
    meta = environment()
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return 0
    print(
        f"{'backend':<14}{'outputs':>9}{'store µs':>11}{'manage µs':>11}"
        f"{'assemble µs':>13}{'step µs':>11}{'µs/output':>11}"
    )
    for r in rows:
        print(
            f"{r['backend']:<14}{r['outputs']:>9,}{r['store_us']:>11.1f}{r['manage_us']:>11.1f}"
            f"{r['assemble_us']:>13.1f}{r['step_us']:>11.1f}{r['step_us'] / r['outputs']:>11.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
