"""ReplayEnv's arguments: what a researcher gives is what the episode uses, or an error says why."""

from __future__ import annotations

import numpy as np
import pytest

from dtoc_rl.envs import ReplayEnv
from dtoc_rl.sim.simulator import CostConfig


def test_arguments_given_beside_a_cost_config_are_set_in_it():
    env = ReplayEnv(
        miss="fail", overhead="agent", need_kinds="provenance", cost_config={"recovery": "restore"}
    )
    cfg = env.cfg
    assert (cfg.miss, cfg.overhead, cfg.need_kinds, cfg.recovery) == (
        "fail",
        "agent",
        ("provenance",),
        "restore",
    )
    assert ReplayEnv(cost_config={"miss": "fail"}).cfg.miss == "fail"  # the defaults leave it alone
    assert ReplayEnv(miss="fail", cost_config={"miss": "fail"}).cfg.miss == "fail"


def test_a_field_given_both_ways_differently_is_an_error():
    with pytest.raises(ValueError, match="miss='fail' and cost_config's miss='calibrated': give it once"):
        ReplayEnv(miss="fail", cost_config={"miss": "calibrated"})
    # an argument given as its default value is given all the same
    with pytest.raises(ValueError, match="miss='reread' and cost_config's miss='fail'"):
        ReplayEnv(miss="reread", cost_config={"miss": "fail"})
    with pytest.raises(ValueError, match="overhead='orchestrator' and cost_config's overhead='agent'"):
        ReplayEnv(overhead="orchestrator", cost_config=CostConfig(overhead="agent"))
    # the same kinds as a list in a dict are the same
    env = ReplayEnv(
        need_kinds=("reference", "provenance"), cost_config={"need_kinds": ["provenance", "reference"]}
    )
    assert set(env.cfg.need_kinds) == {"provenance", "reference"}
    assert ReplayEnv(cost_config={"need_kinds": ["provenance"]}).cfg.need_kinds == ("provenance",)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [({"budget_tokens": -5}, "budget_tokens must be an integer >= 0"),
     ({"budget_tokens": 2.5}, "budget_tokens must be an integer >= 0"),
     ({"cost_weight": float("nan")}, "cost_weight must be a finite number, got nan"),
     ({"over_budget_weight": "1"}, "over_budget_weight must be a finite number, got '1'"),
     ({"fail_penalty": float("inf")}, "fail_penalty must be a finite number")],
)  # fmt: skip
def test_a_budget_or_weight_that_would_turn_the_reward_is_refused(kwargs, says):
    with pytest.raises(ValueError, match=says):
        ReplayEnv(**kwargs)


def test_a_numpy_integer_is_a_slot_count():
    env = ReplayEnv(max_items=np.int64(4))
    obs, _ = env.reset(seed=0)
    assert obs["items"].shape[0] == 4 and type(env.N) is int
