"""Benchmark ReplayEnv: steps/s next to CartPole, memory over many episodes, cost vs stored outputs.

* **Throughput**: ``gymnasium.make("dtoc_rl/Replay-v0")`` (the bundled sample, 128 slots) stepped
  by a random policy in one process, next to ``gymnasium.make("CartPole-v1")`` measured in the same
  run.  Two random policies: actions drawn in advance (1,024 uniform MultiBinary pairs, cycled: the
  policy costs nothing) and ``env.action_space.sample()`` every step (sampling a Dict of two
  MultiBinary(128) costs tens of µs by itself, more than a CartPole step, so it is also timed alone).
  Also a no-op policy (nothing hidden: the cheapest valid path).  Variants are interleaved, one
  round after another; steps/s are medians over ``--repeats`` rounds, and the ratios to CartPole
  are medians of the ratios within each round (on a shared machine the speed drifts by tens of
  per cent within seconds; measuring both envs in the same round cancels most of it).  Both envs get
  ``gymnasium.make``'s default wrappers, printed with the results: OrderEnforcing and
  PassiveEnvChecker (which checks only the first reset and step) for both, plus the TimeLimit that
  CartPole-v1 is registered with (ReplayEnv episodes end with their logs).
* **Memory**: RSS (``/proc/self/statm``) over ``--episodes`` random-policy episodes, after a warm-up;
  flat means no per-episode growth.
* **Scaling**: crafted trajectories of growing length (an output per step, needs on earlier steps),
  random policy, µs per step by the number of outputs stored when the step was taken (the median
  step in each bin, median over runs): flat beyond the padded window of ``max_items`` slots.

Targets: ≥ 20,000 steps/s and ≥ 0.25× CartPole (random policy, actions drawn in advance).

    python -m scripts.bench_env            # table
    python -m scripts.bench_env --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import dtoc_rl.envs  # noqa: F401  (registers dtoc_rl/Replay-v0)
from dtoc_rl.cli.common import at_least
from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.provenance import environment

TARGET_STEPS_PER_S = 20_000
TARGET_VS_CARTPOLE = 0.25


def rss_mb() -> float:
    """Resident set size from /proc/self/statm (Linux), in MB."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def _random_actions(space: gym.Space, n: int, seed: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def steps_per_s(env: gym.Env, steps: int, actions: list[Any] | None) -> float:
    """Steps/s of ``env`` over ``steps`` steps (resetting at episode ends, resets included)."""
    env.reset(seed=0)
    n = len(actions) if actions else 0
    space = env.action_space
    t0 = time.perf_counter()
    for i in range(steps):
        a = actions[i % n] if actions else space.sample()
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - t0)


def _wrappers(env: gym.Env) -> list[str]:
    """The wrapper classes around ``env``, outermost first."""
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def throughput(steps: int, repeats: int, max_items: int) -> dict[str, Any]:
    replay = gym.make("dtoc_rl/Replay-v0", max_items=max_items)
    cart = gym.make("CartPole-v1")
    r_acts = _random_actions(replay.action_space, 1024, 0)
    c_acts = _random_actions(cart.action_space, 1024, 0)
    zeros = np.zeros(max_items, np.int8)
    noop = [{"enable": zeros, "disable": zeros}]
    variants = {
        "replay_random_pregen": (replay, r_acts, steps),
        "replay_random_sample": (replay, None, max(1, steps // 4)),
        "replay_noop": (replay, noop, steps),
        "cartpole_random_pregen": (cart, c_acts, steps),
        "cartpole_random_sample": (cart, None, steps),
    }
    for env, acts, n in variants.values():  # warm-up: caches, first-step env checks
        steps_per_s(env, max(1, n // 10), acts)
    runs: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, (env, acts, n) in variants.items():
            runs[name].append(steps_per_s(env, n, acts))
    # ratios within each round (measured seconds apart), then the median: robust to a shared machine
    ratio = {
        kind: statistics.median(
            a / b for a, b in zip(runs[f"replay_random_{kind}"], runs[f"cartpole_random_{kind}"])
        )
        for kind in ("pregen", "sample")
    }
    noop_ratio = statistics.median(a / b for a, b in zip(runs["replay_noop"], runs["cartpole_random_pregen"]))
    space = replay.action_space
    t0 = time.perf_counter()
    for _ in range(2000):
        space.sample()
    sample_us = (time.perf_counter() - t0) / 2000 * 1e6
    med = {k: statistics.median(v) for k, v in runs.items()}
    out: dict[str, Any] = {
        "wrappers": {"replay": _wrappers(replay), "cartpole": _wrappers(cart)},
        "max_items": max_items,
        "steps": steps,
        "repeats": repeats,
        "steps_per_s": med,
        "steps_per_s_all": runs,
        "us_per_step": {k: 1e6 / v for k, v in med.items()},
        "dict_sample_us": sample_us,
        "vs_cartpole_pregen": ratio["pregen"],
        "vs_cartpole_sample": ratio["sample"],
        "noop_vs_cartpole": noop_ratio,
    }
    out["met"] = {
        "steps_per_s": med["replay_random_pregen"] >= TARGET_STEPS_PER_S,
        "vs_cartpole": out["vs_cartpole_pregen"] >= TARGET_VS_CARTPOLE,
    }
    return out


def memory(episodes: int, max_items: int, warmup: int = 200) -> dict[str, Any]:
    env = gym.make("dtoc_rl/Replay-v0", max_items=max_items)
    acts = _random_actions(env.action_space, 1024, 1)
    marks: list[tuple[int, float]] = []
    i = 0
    env.reset(seed=0)
    every = max(1, episodes // 10)
    for ep in range(warmup + episodes):
        if ep == warmup:
            marks.append((0, rss_mb()))
        done = False
        while not done:
            _, _, done, _, _ = env.step(acts[i % 1024])
            i += 1
        env.reset()
        if ep >= warmup and (ep - warmup + 1) % every == 0:
            marks.append((ep - warmup + 1, rss_mb()))
    before, after = marks[0][1], marks[-1][1]
    return {
        "episodes": episodes,
        "warmup_episodes": warmup,
        "steps": i,
        "rss_mb_before": before,
        "rss_mb_after": after,
        "rss_mb_delta": after - before,
        "rss_mb_max": max(m for _, m in marks),
        "rss_mb_marks": marks,
    }


def crafted(length: int, seed: int = 0) -> Trajectory:
    """One output per step (100–4,000 chars); each step needs 0–2 recent earlier steps."""
    rng = np.random.default_rng(seed)
    steps = []
    for k in range(length):
        needs = []
        for _ in range(int(rng.integers(0, 3))):
            if k:
                j = int(max(0, k - 1 - rng.geometric(0.05)))
                needs.append(Need(step=j, kind="provenance", evidence="bench"))
        size = int(rng.integers(100, 4000))
        steps.append(
            Step(
                index=k,
                assistant_text=f"step {k}",
                tool_name="bash",
                tool_args=f'{{"command": "cat f{k % 50}.py"}}',
                output="x" * size,
                output_tokens=-(-size // 4),
                needs=needs,
            )
        )
    return Trajectory(
        traj_id=f"bench/{length}", source="bench", model_raw="gpt-4o", model_family="gpt-4o",
        task_id=f"t{length}", task_text="benchmark", success=True, steps=steps,
    )  # fmt: skip


def scaling(lengths: list[int], max_items: int, repeats: int) -> dict[str, Any]:
    """µs per step binned by the outputs stored when the step starts."""
    edges = [0, max_items // 2, max_items, 2 * max_items, 4 * max_items, 8 * max_items, 16 * max_items]
    edges += [e for e in (32 * max_items, 64 * max_items) if e < max(lengths)]
    edges.append(10**9)
    rows = []
    for length in lengths:
        env = ReplayEnv(trajectories=[crafted(length)], max_items=max_items)
        acts = _random_actions(env.action_space, 1024, 2)
        per_bin: dict[int, list[float]] = {}
        totals = []
        for _ in range(repeats):  # per bin: median step time per run, then the median over runs
            times: dict[int, list[float]] = {}
            env.reset(seed=0)
            done, i = False, 0
            t_start = time.perf_counter()
            while not done:
                stored = env.sim.n_stored
                b = next(x for x in range(len(edges) - 1) if edges[x] <= stored < edges[x + 1])
                t0 = time.perf_counter()
                _, _, done, _, _ = env.step(acts[i % 1024])
                times.setdefault(b, []).append(time.perf_counter() - t0)
                i += 1
            totals.append((time.perf_counter() - t_start) / i * 1e6)
            for b, v in times.items():
                per_bin.setdefault(b, []).append(statistics.median(v) * 1e6)
        rows.append(
            {
                "length": length,
                "us_per_step": statistics.median(totals),
                "bins": [
                    {
                        "stored_from": edges[b],
                        "stored_to": min(edges[b + 1], length) - 1,
                        "us_per_step": statistics.median(v),
                    }
                    for b, v in sorted(per_bin.items())
                ],
            }
        )
    return {"max_items": max_items, "repeats": repeats, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_env", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=at_least(1), default=5_000, help="timed steps per throughput round")
    ap.add_argument("--repeats", type=at_least(1), default=15, help="rounds (median reported)")
    ap.add_argument("--episodes", type=at_least(1), default=10_000, help="episodes for the memory check")
    ap.add_argument(
        "--lengths",
        type=at_least(2),
        nargs="+",
        default=[100, 500, 2000, 8000],
        help="crafted trajectory lengths in steps (at least 2: ReplayEnv replays no single-call run)",
    )
    ap.add_argument(
        "--max-items", type=at_least(1), default=128, help="env slots (the registered default: 128)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)

    out = {
        "meta": {
            **environment(),
            "load_avg_start": os.getloadavg(),
        },
        "throughput": throughput(args.steps, args.repeats, args.max_items),
        "memory": memory(args.episodes, args.max_items),
        "scaling": scaling(args.lengths, args.max_items, max(1, args.repeats // 3)),
    }
    out["meta"]["load_avg_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    t, m, s = out["throughput"], out["memory"], out["scaling"]
    print(f"{'policy (steps/s, median of ' + str(t['repeats']) + ')':<44}{'steps/s':>12}{'µs/step':>10}")
    for k, v in t["steps_per_s"].items():
        print(f"{k:<44}{v:>12,.0f}{t['us_per_step'][k]:>10.1f}")
    print(f"action_space.sample() of Dict(2×MultiBinary({t['max_items']})): {t['dict_sample_us']:.1f} µs")
    w = t["wrappers"]
    print(f"wrappers (gymnasium.make defaults): ReplayEnv {' > '.join(w['replay'])}; "
          f"CartPole-v1 {' > '.join(w['cartpole'])}")  # fmt: skip
    print(
        f"ReplayEnv / CartPole (median of per-round ratios): {t['vs_cartpole_pregen']:.2f}× (actions "
        f"drawn in advance), {t['vs_cartpole_sample']:.2f}× (action_space.sample()), "
        f"no-op {t['noop_vs_cartpole']:.2f}×; "
        f"targets ≥ {TARGET_STEPS_PER_S:,} steps/s: {'met' if t['met']['steps_per_s'] else 'NOT met'}, "
        f"≥ {TARGET_VS_CARTPOLE}× CartPole: {'met' if t['met']['vs_cartpole'] else 'NOT met'}"
    )
    print(
        f"\nmemory over {m['episodes']:,} episodes ({m['steps']:,} steps): RSS {m['rss_mb_before']:.1f} MB → "
        f"{m['rss_mb_after']:.1f} MB (Δ {m['rss_mb_delta']:+.1f} MB, max {m['rss_mb_max']:.1f} MB)"
    )
    print(f"\nstep cost by outputs stored (max_items = {s['max_items']}, random policy)")
    print(f"{'length':>8}{'µs/step':>10}   by stored outputs: µs/step")
    for r in s["rows"]:
        bins = ", ".join(f"{b['stored_from']}–{b['stored_to']}: {b['us_per_step']:.1f}" for b in r["bins"])
        print(f"{r['length']:>8,}{r['us_per_step']:>10.1f}   {bins}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
