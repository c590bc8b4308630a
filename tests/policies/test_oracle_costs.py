"""The oracle plans under the costs it is scored with, is exact on small episodes and never hides an
output whose placeholder is no smaller than the output."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.oracle import HindsightOracle, exact_plan, plan, schedule_cost
from dtoc_rl.sim.pricing import Prices
from dtoc_rl.sim.simulator import CostConfig
from tests.cost_episodes import make_episode

from .test_oracle import episodes, play


def _tiny_output_episode(family: str):
    # output 0 is 5 tokens with a 10-token placeholder; output 1 is large, read first by call 2, and
    # call 4 needs it
    return make_episode(
        base=2000, user=[0] * 6, asst=[20] * 6, vis=[5, 3000, 0, 0, 0, 0], hid=[10, 10, 0, 0, 0, 0],
        needs={4: [1]}, family=family,
    )  # fmt: skip


def test_never_hides_an_output_whose_placeholder_is_larger():
    for family in ("gpt-4", "gpt-4o", "claude-sonnet"):  # without, and with, a cache discount
        ep = _tiny_output_episode(family)
        for V in (plan(ep), exact_plan(ep)):
            assert V[1:, 0].all(), family
    ep = _tiny_output_episode("gpt-4")
    V = plan(ep)
    assert V[2, 1] and not V[3, 1] and V[4, 1]  # the large one is hidden between its first read and need


def test_the_oracle_plans_with_the_env_cost_config():
    ep = _tiny_output_episode("gpt-4o")
    dear_writes = Prices(input=2.5, output=10, cache_read=0.01, cache_write=100, source="test")
    for cfg in (CostConfig(), CostConfig(prices=dear_writes), CostConfig(cache="ideal", overhead="agent")):
        env = ReplayEnv(trajectories=[ep], max_items=8, expose_episode=True, cost_config=cfg)
        oracle = HindsightOracle(exact_max_outputs=0)  # plan(): its result depends on cfg
        play(oracle, env)
        assert np.array_equal(oracle.V, plan(ep, cfg))
    # and the configurations give different plans, so the check above can fail
    assert not np.array_equal(plan(ep, CostConfig()), plan(ep, CostConfig(prices=dear_writes)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep=episodes, cache=st.sampled_from(["provider", "ideal"]))
def test_the_oracle_never_costs_more_than_the_exact_solver(ep, cache):
    cfg = CostConfig(cache=cache)
    env = ReplayEnv(trajectories=[ep], max_items=16, expose_episode=True, cost_config=cfg)
    oracle = HindsightOracle()
    tot = play(oracle, env)
    assert tot["misses"] == 0
    assert tot["dollars"] <= schedule_cost(ep, exact_plan(ep, cfg), cfg) + 1e-12
