"""The cost simulator's state under visibility changes: whatever path applies them (one by one, or by
fancy indexing), the counters, the context size and the cached prefix stay consistent."""

import numpy as np
import pytest

import dtoc_rl.sim.simulator as simulator
from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.simulator import CostConfig, Simulator


def _episode(n=40, seed=0):
    rng = np.random.default_rng(seed)
    steps = []
    for k in range(n):
        size = int(rng.integers(50, 3000))
        picks = rng.integers(0, k, 2) if k else []
        needs = [Need(step=int(j), kind="provenance", evidence="x") for j in picks]
        steps.append(Step(index=k, assistant_text=f"s{k}", tool_name="bash", tool_args=f"cat f{k}",
                          output="x" * size, output_tokens=-(-size // 4), needs=needs))  # fmt: skip
    traj = Trajectory(traj_id="t/1", source="test", model_raw="gpt-4o", model_family="gpt-4o", task_id="t",
                      task_text="q", success=True, steps=steps)  # fmt: skip
    return compile_episode(traj)


def _check(sim):
    ep, t = sim.ep, sim.t
    stored = np.arange(ep.n) < t
    hidden = stored & ep.has_out & ~sim.visible
    assert sim.ctx == ep.base_tokens + sum(sim.seg[:t])
    assert sim.saved == int(ep.gap[hidden].sum()) and sim.placeholders == int(ep.hid_cost[hidden].sum())
    assert sim.n_visible == int((stored & ep.has_out & sim.visible).sum())
    j = sim.first_changed
    if j < ep.n:  # the cached prefix: everything before the first changed output, its call's message
        # and any re-runs appended before that message
        expected = min(ep.base_tokens + sum(sim.seg[:j]) + sim._ua[j] + sim.pre[j], sim.prev_prompt)
        assert sim._cached_prefix() == expected


@pytest.mark.parametrize("few", [0, 8, 10**9])
@pytest.mark.parametrize("overhead", ["orchestrator", "agent"])
def test_visibility_changes_keep_the_state_consistent(monkeypatch, few, overhead):
    monkeypatch.setattr(simulator, "_FEW", few)
    ep = _episode()
    rng = np.random.default_rng(1)
    runs = []
    for as_list in (False, True):
        sim = Simulator(ep, CostConfig(overhead=overhead))
        sim.log = []
        out = []
        while not sim.done:
            out.append(sim.call())
            _check(sim)
            stored = np.flatnonzero(ep.has_out[: sim.t])
            pick = stored[rng.random(len(stored)) < 0.3]
            en, di = pick[~sim.visible[pick]], pick[sim.visible[pick]]
            if as_list:
                en, di = en.tolist(), di.tolist()
            out.append(sim.apply_changes(en, di))
            _check(sim)
            for entry in sim.log:  # the change log holds Python ints, or int arrays with a count
                steps, k = entry if isinstance(entry, tuple) else (entry, None)
                assert type(steps) is int or (steps.dtype == np.int64 and 0 <= k <= len(steps))
            sim.log.clear()
        runs.append((out, sim.totals.to_dict(), list(sim.toggles), sim.visible.tolist()))
        rng = np.random.default_rng(1)
    assert runs[0] == runs[1]


def test_apply_validates_and_counts_invalid_indices():
    sim = Simulator(_episode(10))
    for _ in range(5):
        sim.call()
    sim.apply([0, 1, 2, 99, -1], [2, 3])  # 99 and -1 are not stored, 2 is in both
    assert sim.totals.invalid_actions == 3
    assert sim.visible[:5].tolist() == [True, True, True, False, True]
    assert sim.toggles[:5] == [0, 0, 0, 1, 0]
    _check(sim)


def test_calibrated_misses_without_an_rng_draw_from_one_stream():
    """Without an rng the Simulator makes one seeded generator, not a new one per miss (which gave
    every miss the same draw: all re-read or all absorbed, whatever reread_prob said)."""
    from tests.cost_episodes import UNIT, make_episode

    n = 40
    ep = make_episode(100, [0] * n, [10] * n, [100] + [0] * (n - 1), [10] + [0] * (n - 1),
                      needs={t: [0] for t in range(2, n)})  # fmt: skip
    runs = []
    for _ in range(2):
        sim = Simulator(ep, CostConfig(prices=UNIT, miss="calibrated", reread_prob=0.5))
        sim.call()
        sim.apply_changes([], [0])
        while not sim.done:
            sim.call()
        runs.append((sim.totals.misses, sim.totals.rereads, sim.totals.absorbed))
    misses, rereads, absorbed = runs[0]
    assert rereads == 1 and absorbed == misses - 1  # the re-run's copy meets every later need
    assert runs[1] == runs[0]  # still reproducible
