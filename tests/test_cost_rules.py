"""Each billing rule of the simulator on an episode small enough to compute by hand.

Prices are $1 read / $2 write / $10 output per token (tests/cost_episodes.UNIT).  Every expected
figure is worked out in the comment above it; removing the rule changes it.
"""

from __future__ import annotations

import pytest

from dtoc_rl.simulator import CostConfig, Simulator
from tests.cost_episodes import UNIT, make_episode


def _miss_episode():
    # base 100; step 0: A=10, O=1000 (placeholder 10); step 1: A=10, O=500; step 2: U=5, A=10, needs
    # output 0; step 3: A=10, needs output 0 again.
    return make_episode(
        base=100, user=[0, 0, 5, 0], asst=[10, 10, 10, 10], vis=[1000, 500, 0, 0], hid=[10, 10, 0, 0],
        needs={2: [0], 3: [0]},
    )  # fmt: skip


def _run_hiding_0_before_call_2(recovery: str) -> Simulator:
    sim = Simulator(_miss_episode(), CostConfig(prices=UNIT, recovery=recovery, reread_call_tokens=30))
    sim.call()  # prompt 100, all written: 200 + 10 * 10 = 300
    sim.call()  # prompt 100+10+1000 = 1110: 100 read + 1010 written + 100 out = 2220
    sim.apply_changes([], [0])  # context 1620 -> 630
    return sim


def test_miss_recovered_by_an_appended_rerun():
    sim = _run_hiding_0_before_call_2("append")
    d2, m2 = sim.call()
    # re-run call: prompt 630 + U2 5 = 635; cached up to O_0 = 110 -> 110 + 525*2 + 30*10 = 1460.
    # The re-run's message (30) and a copy of output 0 (1000) are appended: the call's prompt is
    # 635 + 1030 = 1665, of which the re-run's 635 are cached: 635 + 1030*2 + 10*10 = 2795.
    assert (d2, m2) == (1460 + 2795, 1)
    assert not sim.visible[0]  # the original stays hidden where it was
    d3, m3 = sim.call()
    # the copy meets call 3's need: no miss; prompt 1665 + 10 = 1675, 1665 cached: 1665 + 20 + 100
    assert (d3, m3) == (1785, 0)
    t = sim.totals
    assert (t.misses, t.rereads, t.extra_calls, t.appended_tokens) == (1, 1, 1, 1030)
    assert t.dollars == 300 + 2220 + 1460 + 2795 + 1785
    assert sim.ctx == 630 + (5 + 10 + 1030) + 10


def test_miss_recovered_by_restoring_in_place():
    sim = _run_hiding_0_before_call_2("restore")
    d2, m2 = sim.call()
    # same re-run call (1460); output 0 is back at its place (context 1620): call 2's prompt 1625
    # is cached only up to O_0 (110): 110 + 1515*2 + 100 = 3240
    assert (d2, m2) == (1460 + 3240, 1)
    assert sim.visible[0]
    d3, m3 = sim.call()
    assert (d3, m3) == (1625 + 20 + 100, 0)  # prompt 1635, 1625 cached
    assert sim.totals.appended_tokens == 0


def test_recovery_is_checked():
    with pytest.raises(ValueError, match="recovery must be one of"):
        CostConfig(recovery="rewind")
