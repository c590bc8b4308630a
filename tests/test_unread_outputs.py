"""An output no call has read yet (the answer to the call just made) must be seen by the next call:
hiding it is a miss in the simulator, infeasible for the oracle, and a miss live (Episode.call_reads)."""

import numpy as np
import pytest

from dtoc_rl.policies.oracle import exact_plan, plan, schedule_cost
from dtoc_rl.sim.simulator import CostConfig, Simulator
from tests.cost_episodes import UNIT, make_episode


def _ep(calls=None, needs=None):
    # steps 0..3 each store a 1000-token output (placeholder 10); step 4 stores nothing
    return make_episode(
        base=100, user=[0] * 5, asst=[10] * 5, vis=[1000, 1000, 1000, 1000, 0], hid=[10] * 4 + [0],
        needs=needs, calls=calls,
    )  # fmt: skip


def test_call_reads_lists_the_needs_and_the_outputs_of_the_call_before():
    ep = _ep(needs={3: [0]})
    assert ep.call_reads(0).tolist() == []
    assert ep.call_reads(1).tolist() == [0]
    assert ep.call_reads(3).tolist() == [0, 2]
    assert ep.call_reads(4).tolist() == [3]
    par = _ep(calls=[0, 1, 3, 4])  # steps 1 and 2 are parallel tool calls of call 1
    assert par.call_reads(2).tolist() == [1, 2] and par.call_reads(3).tolist() == [3]


@pytest.mark.parametrize(
    "miss,recovery", [("reread", "append"), ("reread", "restore"), ("reread", "cheaper"), ("fail", "append"),
                      ("calibrated", "append")],
)  # fmt: skip
def test_hiding_an_output_before_any_call_read_it_is_a_miss_and_not_a_need(miss, recovery):
    # calibrated with reread_prob 0 absorbs every need; the answer to the agent's own call is still fetched
    cfg = CostConfig(prices=UNIT, cache="ideal", miss=miss, recovery=recovery, reread_prob=0.0)
    sim = Simulator(_ep(), cfg)
    sim.call()  # call 0 stores output 0
    sim.apply_changes([], [0])  # hidden before call 1, its first reader
    dollars, misses = sim.call()
    assert misses == 1 and sim.totals.misses == 1
    assert sim.need_count[0] == 0 and sim.last_need[0] == -1  # not a need: the agent's later uses count
    if miss == "fail":
        assert sim.totals.failed
        return
    assert sim.rereads_of[0] == 1 and sim.totals.rereads == 1 and sim.totals.extra_calls == 1
    assert sim.copied[0] or (recovery != "append" and sim.visible[0])
    read = Simulator(_ep(), cfg)  # the same hide one call later: call 1 read it, nothing needs it again
    read.call(), read.call()
    read.apply_changes([], [0])
    assert read.call()[1] == 0 and read.totals.misses == 0


def test_the_oracle_never_hides_an_output_before_its_first_read():
    for calls in (None, [0, 1, 3, 4]):
        ep = _ep(calls=calls)
        for V in (plan(ep), exact_plan(ep)):
            for k in np.flatnonzero(ep.has_out):
                first = int(ep.call_of_step[k]) + 1
                if first < ep.n_calls:
                    assert V[first, k], (calls, k)
            later = np.ones_like(V)
            later[2:, 0] = False  # output 0 hidden from call 2 on: call 1 read it
            assert np.isfinite(schedule_cost(ep, later))
            early = np.ones_like(V)
            early[1:, 0] = False  # from call 1 on: before any call read it
            assert schedule_cost(ep, early) == float("inf")


def test_calibrated_misses_still_absorb_needs():
    cfg = CostConfig(prices=UNIT, cache="ideal", miss="calibrated", reread_prob=0.0)
    sim = Simulator(_ep(needs={3: [0]}), cfg)
    sim.call(), sim.call()  # call 1 read output 0
    sim.apply_changes([], [0])
    sim.call()
    assert sim.call()[1] == 1 and sim.totals.absorbed == 1 and sim.totals.rereads == 0


def test_need_mode_targets_keep_an_output_visible_until_a_call_has_read_it():
    from dtoc_rl.policies.learned_trainer import _targets

    ep = _ep(needs={3: [0]})
    V = _targets(ep, "need", CostConfig(), {})
    # output 0: needed by call 3, hidden after; outputs 1-3: never needed, visible for their first read
    assert V[:4, 0].all() and not V[4:, 0].any()
    assert V[2, 1] and not V[3:, 1].any() and V[3, 2] and not V[4:, 2].any() and V[4, 3]


def test_the_simulators_reads_are_the_episodes():
    import warnings

    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.envs.data import load_episodes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = load_episodes(bundled_dataset()) + [_ep(calls=[0, 1, 3, 4], needs={3: [0, 1]})]
    assert any(ep.n_calls < ep.n for ep in eps)  # parallel tool calls among them
    for cfg in (CostConfig(), CostConfig(need_kinds=("provenance",))):
        for ep in eps:
            sim = Simulator(ep, cfg)
            for c in range(ep.n_calls):
                assert sim._reads_of(c) == ep.call_reads(c, cfg.kind_mask()).tolist(), (ep.traj_id, c)
