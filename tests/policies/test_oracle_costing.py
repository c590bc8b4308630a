"""The oracle's descent bills each flip on the calls it touches: every figure is schedule_cost's to the
bit, and the plans are those of the descent that billed the whole schedule each time."""

from __future__ import annotations

import numpy as np
import pytest

from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies import oracle
from dtoc_rl.policies.oracle import _Costing, _gaps, _need_matrix, plan, schedule_cost
from dtoc_rl.sim.pricing import CacheRules, Prices
from dtoc_rl.sim.simulator import CostConfig
from tests.cost_episodes import UNIT, make_episode

B = Prices(input=6e6, output=20e6, cache_read=3e6, cache_write=6e6, source="test b")
CONFIGS = [
    CostConfig(),  # the providers' cache rules (each model its own)
    CostConfig(cache="ideal"),
    CostConfig(price_table={"a": UNIT, "b": B}),
    CostConfig(cache_rules=CacheRules("test", min_prefix=2000, step=64, ttl=60.0, hit_rate=0.9)),
]
IDS = ["rules", "ideal", "price-table", "own-rules"]
#: models priced and cached by other rules (OpenAI's and Anthropic's), and two of the price table
MODELS = (["gpt-4o-2024-08-06", "claude-3-5-sonnet-20241022"], ["a", "b"])


def _random_episode(rng, n: int, models: list[str] | None):
    # outputs of all sizes, some with a placeholder no smaller, some never read again
    vis = [int(v) if rng.random() < 0.8 else 0 for v in rng.integers(20, 3000, n)]
    hid = [int(min(v, rng.choice([40, 40, 3000]))) for v in vis]
    needs = {t: sorted(set(rng.integers(0, t, rng.integers(0, 3)).tolist())) for t in range(1, n)}
    calls = sorted({0, *rng.integers(1, n, n // 4).tolist()})  # parallel tool calls in some turns
    ep = make_episode(base=1500, user=rng.integers(0, 200, n).tolist(), asst=rng.integers(5, 80, n).tolist(),
                      vis=vis, hid=hid, needs=needs, calls=calls)  # fmt: skip
    # waits, some past a provider's cache lifetime, some unknown
    ep.timestamps = np.cumsum(rng.choice([5.0, 30.0, 70.0, 400.0], n, p=[0.5, 0.2, 0.2, 0.1]))
    ep.timestamps[rng.random(n) < 0.1] = np.nan
    if models:
        ep.model_raw, ep.models = models[0], list(models)
        ep.call_model = rng.integers(0, 2, ep.n_calls)
    return ep


def _episodes():
    rng = np.random.default_rng(7)
    eps = [e for e in load_episodes(None) if e.n_calls >= 3][:25]
    eps += [
        _random_episode(rng, int(rng.integers(4, 40)), MODELS[k % 3] if k % 3 < 2 else None)
        for k in range(21)
    ]
    return eps


def _plain_descent(ep, V, gaps, cfg, max_passes=4):
    """The descent as it was: the whole schedule billed after each flip (the schedule and its cost)."""
    best = schedule_cost(ep, V, cfg)
    for _ in range(max_passes):
        improved = False
        for k, a, b in gaps:
            was = V[a:b, k].copy()
            V[a:b, k] = not V[a, k]
            c = schedule_cost(ep, V, cfg)
            if c < best - 1e-15:
                best, improved = c, True
            else:
                V[a:b, k] = was
        if not improved:
            break
    return V, best


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_each_proposed_and_committed_change_costs_what_schedule_cost_says(cfg):
    rng = np.random.default_rng(3)
    finite = checked = 0
    for ep in _episodes():
        R = _need_matrix(ep, cfg)
        V = (rng.random((ep.n_calls, ep.n)) < 0.5) | R  # mostly schedules without a miss
        costing = _Costing(ep, V, cfg)
        assert costing.total() == schedule_cost(ep, V, cfg)
        for _ in range(12):
            k = int(rng.integers(0, ep.n))
            a = int(rng.integers(0, ep.n_calls))
            b = int(rng.integers(a, ep.n_calls + 1))
            values = rng.random(b - a) < 0.5  # any pattern, not only a whole gap flipped
            if rng.random() < 0.8:
                values |= R[a:b, k]  # a miss now and then
            trial = costing.V.copy()
            trial[a:b, k] = values
            cost, change = costing.propose(k, a, values)
            assert cost == schedule_cost(ep, trial, cfg), (ep.traj_id, k, a, b)
            finite += cost < float("inf")
            if rng.random() < 0.5:
                costing.commit(change)
                V = trial
                assert costing.total() == schedule_cost(ep, V, cfg)
                checked += 1
    assert checked > 100 and finite > 200


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_the_plans_are_those_of_the_descent_that_billed_every_call(cfg, monkeypatch):
    for ep in _episodes():
        fast = plan(ep, cfg)
        monkeypatch.setattr(
            oracle,
            "_descend",
            lambda ep, V, gaps, cfg, passes, need=None: _plain_descent(ep, V, gaps, cfg, passes),
        )
        slow = plan(ep, cfg)
        monkeypatch.undo()
        assert np.array_equal(fast, slow), ep.traj_id
        assert schedule_cost(ep, fast, cfg) < float("inf")


def test_hiding_what_a_call_needs_is_a_miss_and_showing_it_again_is_not():
    ep = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[500, 500, 500, 0], hid=[10] * 3 + [0],
                      needs={3: [0]})  # fmt: skip
    R = _need_matrix(ep, None)
    assert R[3, 0] and _gaps(ep, R)  # call 3 needs output 0
    costing = _Costing(ep, np.ones((4, 4), bool))
    # output 0 is read first by call 1 and needed by call 3: hidden at calls 2-3, a miss
    cost, change = costing.propose(0, 2, np.zeros(2, bool))
    assert cost == float("inf")
    costing.commit(change)
    cost, change = costing.propose(0, 3, np.ones(1, bool))  # shown again at call 3
    assert cost < float("inf")
    V = np.ones((4, 4), bool)
    V[2, 0] = False
    assert cost == schedule_cost(ep, V)


def test_a_run_whose_first_model_has_no_cache_discount_is_still_planned_for_the_others():
    """The first call to a model without caching, the rest to one with it: the plan is the descent's,
    never dearer than showing everything (hiding every gap, as for a run without any discount, was)."""
    one = [2000, 0, 0, 0, 0, 0]  # output 0, needed again at call 5
    ep = make_episode(
        base=3000, user=[10] * 6, asst=[20] * 6, vis=one, hid=[40, 0, 0, 0, 0, 0], needs={5: [0]}
    )
    ep.model_raw, ep.models = "gpt-4o-2024-05-13", ["gpt-4o-2024-05-13", "claude-3-5-sonnet-20241022"]
    ep.call_model = np.array([0, 1, 1, 1, 1, 1])
    cfg = CostConfig(cache="ideal")
    V = plan(ep, cfg)
    assert schedule_cost(ep, V, cfg) <= schedule_cost(ep, np.ones_like(V), cfg)


def test_a_change_proposed_before_another_was_committed_is_refused():
    ep = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[500, 500, 500, 0], hid=[10] * 3 + [0])
    costing = _Costing(ep, np.ones((4, 4), bool))
    _, first = costing.propose(0, 2, np.zeros(2, bool))
    _, second = costing.propose(1, 3, np.zeros(1, bool))
    costing.commit(second)
    with pytest.raises(ValueError, match="proposed before the last commit"):
        costing.commit(first)
