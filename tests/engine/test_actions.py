import json

import numpy as np
import pytest

from dtoc_rl import MemoryStore, apply_manage_context
from dtoc_rl.core.actions import resolve, resolve_keys


def test_resolve_shows_hides_and_counts_invalid_entries():
    visible = np.array([True, False, True, False])
    en = np.array([1, 1, 0, 1, 1, 0], np.int8)  # slot 0 already visible; 4 is padding
    di = np.array([1, 0, 1, 1, 0, 1], np.int8)  # 0 and 3 in both sets; 5 is padding
    ch = resolve(en, di, visible)
    assert ch.enable.tolist() == [1]
    assert ch.disable.tolist() == [2]
    assert ch.invalid == 2 + 2  # two padding entries, two stored slots in both sets


def test_padding_set_in_both_counts_once_per_set():
    ch = resolve(np.array([0, 1]), np.array([0, 1]), np.array([True]))
    assert ch.invalid == 2 and not len(ch.enable) and not len(ch.disable)


@pytest.mark.parametrize("seed", range(20))
def test_key_sets_follow_the_rule_of_masks(seed):
    """Keys are slots: a stored key is a filled slot, an unknown one a padding slot, so a key action
    changes and counts what the same action as masks does."""
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(0, 6)), 8
    visible = rng.random(m) < 0.5
    en, di = (rng.random(n) < 0.4).astype(np.int8), (rng.random(n) < 0.4).astype(np.int8)
    keys = [f"k{i}" for i in range(n)]  # k{m}.. name nothing stored
    got = resolve_keys(
        [keys[i] for i in np.flatnonzero(en)],
        [keys[i] for i in np.flatnonzero(di)],
        lambda k: bool(visible[int(k[1:])]) if int(k[1:]) < m else None,
    )
    want = resolve(en, di, visible)
    assert got.enable == [keys[i] for i in want.enable]
    assert got.disable == [keys[i] for i in want.disable]
    assert got.invalid == want.invalid


def test_manage_context_counts_invalid_keys_as_policies_do():
    store = MemoryStore()
    for n in (100, 200, 300):
        store.add("z" * n)
    rep = apply_manage_context(store, enable=["t0001", "nope", 7], disable=["t0001", "t0002", "nope"])
    # unknown 'nope' in each list (2), the non-string (1), stored t0001 in both (1)
    assert rep.invalid == 4 and rep.disabled == ["t0002"]
    assert "invalid" not in json.loads(rep.to_json())  # the model reads errors, not the count


def test_replay_rules_are_judged_by_the_same_rule():
    from dtoc_rl.data.schema import Step, Trajectory
    from dtoc_rl.serve.replay import hide_older_than, replay_trajectory

    steps = [
        Step(index=i, turn=i, tool_name="bash", tool_args='{"command": "ls"}', output="x" * 400)
        for i in range(4)
    ]
    traj = Trajectory("t", "test", "m", "other", "t", task_text="task", steps=steps)
    keep = hide_older_than(1)

    def rule(ctx, step):
        en, di = keep(ctx, step)
        return en + ["t9999"], di  # a key no output has: invalid once per call

    res = replay_trajectory(traj, rule)
    assert res.invalid_actions == 4
    assert res.hidden_per_call == [0, 0, 1, 2]


@pytest.mark.parametrize("seed", range(10))
def test_the_simulators_step_index_actions_follow_the_rule_of_keys(seed):
    """Simulator.apply takes step indices: a stored output is a key, anything else an unknown entry, so
    its changes and invalid count are resolve_keys' (an unstored index in both sets is invalid once
    per set, not a third time as a conflict)."""
    from dtoc_rl.sim.simulator import CostConfig, Simulator
    from tests.cost_episodes import UNIT, make_episode

    rng = np.random.default_rng(seed)
    ep = make_episode(
        100, [0] * 8, [10] * 8, [100, 0, 100, 100, 0, 100, 100, 100], [10, 0, 10, 10, 0, 10, 10, 10]
    )
    sim = Simulator(ep, CostConfig(prices=UNIT))
    for _ in range(5):
        sim.call()
    sim.apply_changes([], [2])  # one stored output hidden
    en = rng.integers(-2, 9, size=int(rng.integers(0, 6))).tolist()
    di = rng.integers(-2, 9, size=int(rng.integers(0, 6))).tolist()
    stored = {str(k): bool(sim.visible[k]) for k in range(sim.t) if ep.has_out[k]}
    want = resolve_keys([str(k) for k in en], [str(k) for k in di], stored.get)
    before = sim.visible.copy()
    sim.apply(en, di)
    assert sim.totals.invalid_actions == want.invalid, (en, di)
    assert sorted(np.flatnonzero(sim.visible & ~before).tolist()) == sorted(int(k) for k in want.enable)
    assert sorted(np.flatnonzero(before & ~sim.visible).tolist()) == sorted(int(k) for k in want.disable)
