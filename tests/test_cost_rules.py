"""Each billing rule of the simulator on an episode small enough to compute by hand.

Prices are $1 read / $2 write / $10 output per token (tests/cost_episodes.UNIT).  Every expected
figure is worked out in the comment above it; removing the rule changes it.
"""

from __future__ import annotations

import numpy as np
import pytest

from dtoc_rl.sim.pricing import CACHE_RULES, CacheRules
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals
from tests.cost_episodes import UNIT, make_episode


def _miss_episode():
    # base 100; step 0: A=10, O=1000 (placeholder 10); step 1: A=10, O=500; step 2: U=5, A=10, needs
    # output 0; step 3: A=10, needs output 0 again.
    return make_episode(
        base=100, user=[0, 0, 5, 0], asst=[10, 10, 10, 10], vis=[1000, 500, 0, 0], hid=[10, 10, 0, 0],
        needs={2: [0], 3: [0]},
    )  # fmt: skip


def _run_hiding_0_before_call_2(recovery: str) -> Simulator:
    cfg = CostConfig(prices=UNIT, recovery=recovery, reread_call_tokens=30, cache="ideal")
    sim = Simulator(_miss_episode(), cfg)
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


# -- the provider's cache rules ---------------------------------------------------------------------


def _cache_episode(timestamps=None):
    # base 1000; step 0: A=10, O=20; step 1: A=10, O=200; step 2: A=10
    ep = make_episode(base=1000, user=[0, 0, 0], asst=[10, 10, 10], vis=[20, 200, 0], hid=[5, 5, 0])
    if timestamps is not None:
        ep.timestamps = np.asarray(timestamps, float)
    return ep


def _calls(ep, **kw):
    sim = Simulator(ep, CostConfig(prices=UNIT, **kw))
    out = [sim.call()[0] for _ in range(ep.n)]
    assert baseline_totals(ep, sim.cfg).dollars == pytest.approx(sim.totals.dollars)  # same rules
    return out, sim.totals


def test_ideal_cache_reads_the_whole_previous_prompt():
    # prompts 1000, 1030, 1240; each call reads the previous prompt from the cache
    out, tot = _calls(_cache_episode(), cache="ideal")
    assert out == [2000 + 100, 1000 + 30 * 2 + 100, 1030 + 210 * 2 + 100]
    assert tot.cache_read_tokens == 2030


def test_minimum_cacheable_prefix_and_128_token_steps():
    out, tot = _calls(_cache_episode(), cache_rules=CACHE_RULES["openai"])
    # call 1: the shared 1000 tokens are under the 1,024-token minimum: all 1030 written.
    # call 2: the shared 1030 tokens are read in 128-token steps: 1024 read, 216 written.
    assert out == [2100, 1030 * 2 + 100, 1024 + 216 * 2 + 100]
    assert (tot.cache_read_tokens, tot.cache_write_tokens) == (1024, 1000 + 1030 + 216)


def test_cache_expires_after_its_lifetime_between_logged_calls():
    rules = CACHE_RULES["anthropic"]  # 1,024-token minimum, 5-minute lifetime, any granularity
    out, _ = _calls(_cache_episode([0.0, 10.0, 200.0]), cache_rules=rules)
    assert out[2] == 1030 + 210 * 2 + 100  # 190 s idle: the 1030 shared tokens are read
    out, _ = _calls(_cache_episode([0.0, 10.0, 400.0]), cache_rules=rules)
    assert out[2] == 1240 * 2 + 100  # 390 s idle: expired, everything written
    out, _ = _calls(_cache_episode([0.0, 10.0, float("nan")]), cache_rules=rules)
    assert out[2] == 1030 + 210 * 2 + 100  # no timestamp: no wait assumed


def test_fitted_hit_rate_scales_what_is_read():
    rules = CacheRules("test", min_prefix=0, step=1, hit_rate=0.5)
    out, _ = _calls(_cache_episode(), cache_rules=rules)
    assert out[1:] == [500 + 530 * 2 + 100, 515 + 725 * 2 + 100]


def test_an_appended_rerun_keeps_the_prefix_under_provider_rules():
    # the miss episode scaled past the 1,024-token minimum: base 2000
    ep = make_episode(
        base=2000, user=[0, 0, 5, 0], asst=[10, 10, 10, 10], vis=[1000, 500, 0, 0], hid=[10, 10, 0, 0],
        needs={2: [0], 3: [0]},
    )  # fmt: skip
    sims = {}
    for recovery in ("append", "restore"):
        sim = Simulator(ep, CostConfig(prices=UNIT, recovery=recovery, cache_rules=CACHE_RULES["anthropic"]))
        sim.call(), sim.call()  # prompts 2000 and 3010
        sim.apply_changes([], [0])  # context 3520 -> 2530
        sims[recovery] = (sim.call()[0], sim)
    # re-run call (both): prompt 2535, cached prefix up to O_0 = 2010 -> 2010 + 525*2 + 30*10 = 3360
    # append: the call's prompt is 2535 + 1030 = 3565 with 2535 cached: 2535 + 1030*2 + 100 = 4695
    assert sims["append"][0] == 3360 + 4695
    # restore: the call's prompt is 3525 with only 2010 cached: 2010 + 1515*2 + 100 = 5140
    assert sims["restore"][0] == 3360 + 5140


def test_a_run_that_changes_nothing_costs_exactly_the_baseline():
    from dtoc_rl.envs import ReplayEnv

    env = ReplayEnv(max_items=64)
    for i, ep in enumerate(env.episodes):
        for cfg in (CostConfig(), CostConfig(cache="ideal")):
            sim = Simulator(ep, cfg)
            while not sim.done:
                sim.call()
            assert sim.totals.dollars == baseline_totals(ep, cfg).dollars, (i, cfg.cache)  # bit for bit


def test_cheaper_recovery_picks_per_miss():
    def run(ep, recovery, hide_before):
        sim = Simulator(ep, CostConfig(prices=UNIT, recovery=recovery, reread_call_tokens=30, cache="ideal"))
        while not sim.done:
            if sim.t == hide_before:
                sim.apply_changes([], [0])
            sim.call()
        return sim.totals

    # _miss_episode at call 2: restoring re-writes 1515 tokens now (3140) against an appended copy
    # (2695), and one call remains that would read 40 tokens fewer: append is cheaper.
    ep = _miss_episode()
    assert run(ep, "cheaper", 2).dollars == run(ep, "append", 2).dollars < run(ep, "restore", 2).dollars
    # output 0 is the last thing before the miss and 20 calls follow: restoring re-writes little
    # (2130 against 2190 now) and saves the copy's extra 40 tokens on each later call.
    long = make_episode(
        base=100, user=[0] * 23, asst=[10] * 23, vis=[1000] + [0] * 22, hid=[10] + [0] * 22, needs={2: [0]}
    )
    assert run(long, "cheaper", 2).dollars == run(long, "restore", 2).dollars < run(long, "append", 2).dollars


def test_the_simulator_says_when_the_next_call_finds_the_cache_expired():
    rules = CACHE_RULES["anthropic"]  # 5-minute lifetime
    sim = Simulator(_cache_episode([0.0, 10.0, 400.0]), CostConfig(prices=UNIT, cache_rules=rules))
    cold = []
    while not sim.done:
        cold.append(sim.cache_cold())  # before each call, as a policy decides
        sim.call()
    assert cold == [False, False, True]  # the first call has no wait (NaN); the third waited 390 s
    unknown = Simulator(_cache_episode([0.0, 10.0, float("nan")]), CostConfig(prices=UNIT, cache_rules=rules))
    unknown.call(), unknown.call()
    assert not unknown.cache_cold()  # no timestamp: no wait assumed, as billing assumes
    forever = CacheRules("test", min_prefix=0, step=1)  # no lifetime
    sim = Simulator(_cache_episode([0.0, 10.0, 4000.0]), CostConfig(prices=UNIT, cache_rules=forever))
    sim.call(), sim.call()
    assert not sim.cache_cold()
    ideal = Simulator(_cache_episode([0.0, 10.0, 4000.0]), CostConfig(prices=UNIT, cache="ideal"))
    ideal.call(), ideal.call()
    assert not ideal.cache_cold()  # the ideal cache never expires
    assert rules.expired(301.0) and not rules.expired(300.0) and not rules.expired(float("nan"))


def test_the_agents_manage_context_call_takes_the_wait_before_the_logged_call():
    # base 2000; step 0: A=10, O=500; step 1: A=10, O=200; step 2: A=10.  Prompts 2000, 2510, 2720.
    # overhead="agent", output 0 hidden before call 2: the agent's manage_context call comes after the
    # wait before call 2, so after 390 s it writes its whole prompt (the cache expired), and the logged
    # call right after it reads the mgmt call's prompt up to the hidden output: base + A = 2010 tokens.
    def run(wait):
        ep = make_episode(base=2000, user=[0, 0, 0], asst=[10, 10, 10], vis=[500, 200, 0], hid=[5, 5, 0])
        ep.timestamps = np.asarray([0.0, 10.0, 10.0 + wait])
        cfg = CostConfig(prices=UNIT, cache_rules=CACHE_RULES["anthropic"], overhead="agent")
        sim = Simulator(ep, cfg)
        sim.call(), sim.call()
        reads = [sim.totals.cache_read_tokens]
        sim.apply_changes([], [0])
        reads.append(sim.totals.cache_read_tokens)
        sim.call()
        reads.append(sim.totals.cache_read_tokens)
        return np.diff(reads).tolist(), sim.totals.misses

    assert run(390.0) == ([0, 2010], 0)
    assert run(10.0) == ([2510, 2010], 0)  # no wait: the mgmt call reads call 1's prompt
