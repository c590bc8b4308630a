"""Prices given as the plain dicts the README shows are read as a prices file's, everywhere."""

from __future__ import annotations

import pytest

from dtoc_rl.sim.pricing import Prices
from dtoc_rl.sim.simulator import CostConfig

ENTRY = {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.0}


def test_a_cost_config_reads_dict_entries_as_prices():
    cfg = CostConfig(price_table={"gpt-4o": ENTRY}, prices=ENTRY)
    want = Prices(1.0, 2.0, 0.1, 1.0)
    for got in (cfg.price_table["gpt-4o"], cfg.prices):
        assert (got.input, got.output, got.cache_read, got.cache_write) == (want.input, 2.0, 0.1, 1.0)
    with pytest.raises(ValueError, match="price_table: a table by model name"):
        CostConfig(price_table=ENTRY)
    with pytest.raises(ValueError, match="'gpt-4o': needs input and output"):
        CostConfig(price_table={"gpt-4o": {"input": 1.0}})


def test_the_env_evaluate_and_the_orchestrator_take_dicts():
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.policies.evaluate import evaluate
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.orchestrator import Orchestrator

    env = ReplayEnv(cost_config={"miss": "fail", "price_table": {"gpt-4o": ENTRY}})
    env.reset()
    assert env.cfg.miss == "fail" and env.cfg.price_table["gpt-4o"].cache_read == 0.1
    with pytest.raises(ValueError, match=r"cost_config: .*'mis'"):
        ReplayEnv(cost_config={"mis": "fail"})
    one = evaluate(None, ["none"], source="tau-bench", prices={"gpt-4o": ENTRY}, progress=False)
    two = evaluate(None, ["none"], source="tau-bench", prices={"gpt-4o": Prices(**ENTRY)}, progress=False)
    assert [r.base_dollars for r in one] == [r.base_dollars for r in two]
    plain = evaluate(None, ["none"], source="tau-bench", progress=False)  # gpt-4o's list prices
    assert all(a.base_dollars < b.base_dollars for a, b in zip(one, plain))  # $1 input against $2.50
    orch = Orchestrator(make_policy("none"), model="mine", prices=ENTRY)
    assert orch.prices.cache_read == 0.1
    orch.use_model("other-model", {"input": 3.0, "output": 4.0, "cache_read": 0.3})
    assert orch.prices.input == 3.0
    with pytest.raises(ValueError, match=r"^prices: input must be a non-negative number"):
        Orchestrator(make_policy("none"), prices={"input": -1.0, "output": 2.0})


def test_one_need_kind_is_a_kind_not_its_letters():
    from dtoc_rl.envs import ReplayEnv

    assert ReplayEnv(need_kinds="provenance").cfg.need_kinds == ("provenance",)
