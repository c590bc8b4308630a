"""The live paths over long sessions: time per model call as a session grows to thousands of calls.

A live path does some work per model call; if that work grows with the session, a session of
N calls costs N² and its last calls wait on the toolkit, not the model.  This benchmark drives
one synthetic coding session (an assistant turn with one shell or file call, its output of
0.3-8 KB of code-like text that names files and functions earlier outputs named, so need
labels fire) to the largest of ``--sizes`` calls and times, per call:

* **orchestrator**: the Python agent's whole overhead per model call: record the assistant
  turn, store its output, decide (the policy), and build the OpenAI request
  (``Orchestrator.openai_request``).  Policies: ``hide_big`` (a rule) and the default
  ``LearnedPolicyConfig`` network (untrained: time does not depend on the weights).
* **service**: ``DecisionService.decide`` in-process on the request the OpenCode plugin
  sends after each call: every stored item, with its tool, inputs and first lines for the
  service's ``max_items`` most recent only (``--items all``: for every item), and the session's
  newest turn for its need labels (``session``/``turns``); the request's JSON size is reported
  too.  ``--log``: the service writes each session's log as ``dtoc-rl serve --log-dir``
  does (to a temporary folder), whose row is the whole session; ``--answer-ms``: a wait after each
  timed answer, as a model's (the log is written meanwhile).

``--gc``: the garbage collector's thresholds: ``auto`` (default) runs the orchestrator rows at
Python's defaults, as an agent's own process does, and the service rows at those ``dtoc-rl serve``
sets (``GC_THRESHOLDS``); ``python`` and ``servers`` run every row at one or the other.

Rows give the median and p99 over the ``--window`` calls before each size in ``--sizes``, and
the process's resident memory then (all rows share one process: a row's figure includes the
rows before it).

    python -m scripts.bench_live                       # table, sizes 500 1000 2000 4000
    python -m scripts.bench_live --sizes 250 500 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from dtoc_rl.cli.common import at_least
from dtoc_rl.provenance import environment
from dtoc_rl.serve.orchestrator import GC_THRESHOLDS

_WORDS = ("value", "config", "result", "parser", "index", "buffer", "handler", "token", "cache", "state")


@dataclass
class Session:
    """A deterministic synthetic session: turn ``i``'s assistant text, call and output."""

    seed: int = 0
    files: list[str] = field(default_factory=list)

    def turn(self, i: int) -> tuple[str, str, dict[str, Any], str]:
        rng = random.Random(self.seed * 1_000_003 + i)
        if not self.files or rng.random() < 0.3:
            self.files.append(f"src/pkg{rng.randint(0, 40)}/mod_{i}.py")
        path = rng.choice(self.files)
        if rng.random() < 0.6:
            tool, args = "read", {"filePath": path}
        else:
            tool, args = "bash", {"command": f"grep -rn {rng.choice(_WORDS)}_{rng.randint(0, 99)} src/"}
        lines = []
        for k in range(rng.randint(8, 200)):
            w = rng.choice(_WORDS)
            lines.append(f"{k:4d}  def {w}_{rng.randint(0, 99)}(self, {rng.choice(_WORDS)}): return {path}")
        text = f"Looking at {path} for the {rng.choice(_WORDS)} handling."
        return text, tool, args, "\n".join(lines)


def _stats(times: list[float]) -> dict[str, float]:
    xs = sorted(times)
    return {
        "p50_ms": round(statistics.median(xs) * 1000, 3),
        "p99_ms": round(xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1000, 3),
    }


def _rss_mb() -> float:
    try:  # Linux; elsewhere the peak, which is what the standard library can tell
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _collected_at(thresholds: tuple[int, ...] | None, run: Any) -> Any:
    old = gc.get_threshold()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
    try:
        return run()
    finally:
        gc.set_threshold(*old)


def bench_orchestrator(policy_spec: str, sizes: list[int], window: int, seed: int) -> list[dict[str, Any]]:
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.orchestrator import Orchestrator

    if policy_spec == "learned":  # the default network, untrained
        from dtoc_rl.policies.learned import LearnedPolicy, LearnedPolicyConfig

        policy = LearnedPolicy(LearnedPolicyConfig(seed=seed))
    else:
        policy = make_policy(policy_spec)
    orch = Orchestrator(
        policy, query="Fix the failing parser test", system="You are a coding agent.", model="gpt-4o"
    )
    sess = Session(seed)
    rows, times = [], []
    for i in range(max(sizes)):
        text, tool, args, output = sess.turn(i)
        t0 = time.perf_counter()
        calls = orch.record_assistant(text, [{"id": f"c{i}", "name": tool, "arguments": args}])
        orch.add_tool_result(calls[0]["id"], output)
        orch.openai_request()
        times.append(time.perf_counter() - t0)
        if i + 1 in sizes:
            rows.append({"path": "orchestrator", "policy": policy_spec, "calls": i + 1,
                         **_stats(times[-window:]), "rss_mb": round(_rss_mb())})  # fmt: skip
    return rows


def bench_service(
    sizes: list[int],
    window: int,
    seed: int,
    all_items: bool = False,
    log: bool = False,
    answer_s: float = 0.0,
) -> list[dict[str, Any]]:
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.service import DecisionService

    with tempfile.TemporaryDirectory() as logs:
        svc = DecisionService(
            make_policy("hide_big"),
            max_session_chars=10**9,
            max_total_chars=10**9,
            log_dir=logs if log else None,
        )
        rows = _drive_service(svc, sizes, window, seed, all_items, answer_s)
        svc.flush_logs(600)
    for r in rows:
        r["path"] += " +log" if log else ""
    return rows


def _drive_service(
    svc: Any, sizes: list[int], window: int, seed: int, all_items: bool, answer_s: float
) -> list[dict[str, Any]]:
    sess = Session(seed)
    items: list[dict[str, Any]] = []
    rows, times, sizes_b = [], [], []
    for i in range(max(sizes)):
        text, tool, args, output = sess.turn(i)
        key = f"call_{i}"
        call = {"key": key, "tool": tool, "args": json.dumps(args), "output": output}
        turn = {"index": i, "assistant_text": text, "calls": [call]}
        items.append({"key": key, "tokens": len(output) // 4, "visible": True, "tool": tool,
                      "args": call["args"], "head": output[:600]})  # fmt: skip
        first = 0 if all_items else max(0, len(items) - svc.max_items)
        for k in range(first, len(items)):
            items[k]["age"] = i - k
        older = [{"key": it["key"], "tokens": it["tokens"], "visible": it["visible"]} for it in items[:first]]
        active = sum(it["tokens"] if it["visible"] else 40 for it in items)
        body = {"model": "gpt-4o", "step": i + 1, "session": "s", "items": older + items[first:],
                "turns": [turn], "active_tokens": active}  # fmt: skip
        raw = json.dumps(body).encode()  # what the client sends (not timed: the client's work)
        t0 = time.perf_counter()
        answer = svc.decide(json.loads(raw))
        times.append(time.perf_counter() - t0)
        sizes_b.append(len(raw))
        if answer_s and any(size - window <= i < size for size in sizes):  # a model answering, timed calls
            time.sleep(answer_s)
        hidden = set(answer["disable"])
        shown = set(answer["enable"])
        for it in items:
            if it["key"] in hidden:
                it["visible"] = False
            elif it["key"] in shown:
                it["visible"] = True
        if i + 1 in sizes:
            rows.append({"path": "service" + (" (all)" if all_items else ""), "policy": "hide_big",
                         "calls": i + 1, **_stats(times[-window:]),
                         "body_kb": round(sizes_b[-1] / 1024), "rss_mb": round(_rss_mb())})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=at_least(10), nargs="+", default=[500, 1000, 2000, 4000],
                    help="session lengths (model calls) at which a row is taken")  # fmt: skip
    ap.add_argument("--window", type=at_least(10), default=100, help="calls before each size timed per row")
    ap.add_argument("--paths", nargs="+", choices=("orchestrator", "service"),
                    default=["orchestrator", "service"], help="which live paths to drive")  # fmt: skip
    ap.add_argument("--policies", nargs="+", default=["hide_big", "learned"],
                    help="policy specs for the orchestrator rows (make_policy's; `learned` alone: the "
                    "default network, untrained)")  # fmt: skip
    ap.add_argument("--items", choices=("plugin", "all"), default="plugin",
                    help="what the service rows' requests carry: every item, with its texts for the "
                    "service's window only (as the OpenCode plugin sends), or for every item")  # fmt: skip
    ap.add_argument("--log", action="store_true", help="the service rows write each session's log")
    ap.add_argument("--answer-ms", type=float, default=0.0,
                    help="the service rows wait this long after each timed answer, as a model answering "
                    "does (0: requests back to back)")  # fmt: skip
    ap.add_argument("--gc", choices=("auto", "python", "servers"), default="auto",
                    help="garbage-collector thresholds: auto = the orchestrator rows at Python's defaults "
                    "(an agent's process), the service rows at dtoc-rl serve's")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0, help="the synthetic session's seed")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    if a.answer_ms < 0:
        ap.error(f"argument --answer-ms: must be at least 0, got {a.answer_ms:g}")
    from dtoc_rl.policies.registry import PolicySpecError, make_policy

    for spec in a.policies:  # a bad spec is a usage error before any session is driven
        try:
            if spec != "learned":
                make_policy(spec)
        except (PolicySpecError, ValueError) as e:
            ap.error(f"argument --policies: {e}")
    sizes = sorted(set(a.sizes))
    rows: list[dict[str, Any]] = []
    servers = GC_THRESHOLDS if a.gc != "python" else None
    if "orchestrator" in a.paths:
        for spec in a.policies:
            run = lambda spec=spec: bench_orchestrator(spec, sizes, a.window, a.seed)  # noqa: E731
            rows += _collected_at(GC_THRESHOLDS if a.gc == "servers" else None, run)
    if "service" in a.paths:
        rows += _collected_at(
            servers,
            lambda: bench_service(sizes, a.window, a.seed, a.items == "all", a.log, a.answer_ms / 1000),
        )
    for r in rows:
        r["gc"] = a.gc
    if a.json:
        print(json.dumps({"rows": rows, "environment": environment()}, indent=2))
        return 0
    print(f"{'path':<15} {'policy':<9} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'body KB':>8} {'RSS MB':>7}")
    for r in rows:
        print(f"{r['path']:<15} {r['policy']:<9} {r['calls']:>6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r.get('body_kb', ''):>8} {r['rss_mb']:>7}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
