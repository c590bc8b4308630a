"""A long-context tier: a call whose whole prompt is above a threshold is billed at higher rates on every
token (OpenAI's GPT-6 above 272K input tokens, Gemini Pro above 200K, Claude Haiku 5.5 above 100K).

Prices are whole dollars per token (tests/cost_episodes.UNIT: $1 read / $2 write / $10 output) and the
tier doubles the prompt's rates and multiplies output by 1.5 above 300 tokens, so every bill below is
worked out by hand in the comment above it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dtoc_rl.policies.oracle import plan, schedule_cost
from dtoc_rl.sim.pricing import Prices, load_price_table, price_entries
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals
from tests.cost_episodes import UNIT, make_episode

TIER = replace(UNIT, long_above=300, long_input=2.0, long_output=1.5)


def test_a_call_above_the_threshold_pays_the_tier_on_every_token():
    # 100 read, 250 written, 10 out: a 350-token prompt, above 300: 100*2 + 250*4 + 10*15 = 1350
    assert TIER.bill(100, 250, 10) == 1350
    # 300 is not above it: 100*1 + 200*2 + 10*10 = 600
    assert TIER.bill(100, 200, 10) == 600
    # the whole prompt decides, uncached tokens included (billed at input, 2 here, 4 above)
    assert TIER.bill(100, 150, 10, uncached=100) == 100 * 2 + 150 * 4 + 150 + 100 * 4
    # a part of a call, billed at the tier the whole call is at
    assert TIER.bill(0, 10, 0, prompt=1000) == 40 and TIER.bill(0, 10, 0) == 20
    # arrays: call by call, the same figures
    got = TIER.bill(np.array([100, 100]), np.array([250, 200]), np.array([10, 10]))
    assert got.tolist() == [1350, 600]
    assert UNIT.bill(100, 250, 10) == 700  # no tier: as before


def test_the_simulator_bills_the_tier_as_the_biller_does_bit_for_bit():
    """Prompts cross the threshold on the way; every path (the simulator call by call, the all-visible
    baseline, the oracle's schedule cost) gives the same dollars, at prices with fractions."""
    rng = np.random.default_rng(0)
    frac = Prices(input=1.75, output=14.0, cache_read=0.175, cache_write=2.1875, long_above=3000,
                  long_input=2.0, long_output=1.5, source="test")  # fmt: skip
    n = 30
    vis = rng.integers(50, 400, n).tolist()
    ep = make_episode(base=500, user=[5] * n, asst=[20] * n, vis=vis, hid=[10] * n)
    for cache in ("ideal", "provider"):
        cfg = CostConfig(prices=frac, cache=cache)
        sim = Simulator(ep, cfg)
        while not sim.done:
            sim.call()
        base = baseline_totals(ep, cfg)
        assert sim.totals.dollars == base.dollars
        assert schedule_cost(ep, np.ones((ep.n_calls, ep.n), bool), cfg) == pytest.approx(
            base.dollars, rel=1e-12
        )
        # the tier is billed: the same run without it costs less
        assert (
            base.dollars
            > baseline_totals(ep, CostConfig(prices=replace(frac, long_above=0), cache=cache)).dollars
        )


def test_hiding_below_the_threshold_is_worth_the_tier_and_the_oracle_sees_it():
    # base 100; 4 calls each answering 10 tokens with a 100-token output (placeholder 10); no needs.
    # Visible, prompts are 100, 210, 320, 430: the last two above 300.  Hiding O_0 before call 2
    # keeps it at 230 (under the tier).
    ep = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[100, 100, 100, 0], hid=[10, 10, 10, 0])
    cfg = CostConfig(prices=TIER, cache="ideal")
    none = baseline_totals(ep, cfg).dollars
    # 100*2 + 100 = 300; 100 + 110*2 + 100 = 420; above: 210*2 + 110*4 + 150 = 1010; 320*2 + 110*4 +
    # 150 = 1230
    assert none == 300 + 420 + 1010 + 1230
    sim = Simulator(ep, cfg)
    sim.call(), sim.call()
    sim.apply_changes([], [0])  # O_0 hidden before call 2: its prompt 230, O_0 re-written from 100
    # call 2: 110 read (the base and A_0), 120 written, 10 out = 110 + 240 + 100 = 450; call 3: 230 + 110
    # = 340, above: 230*2 + 110*4 + 150 = 1050
    assert [sim.call()[0] for _ in range(2)] == [450, 1050]
    assert sim.totals.dollars == 300 + 420 + 450 + 1050
    planned = schedule_cost(ep, plan(ep, cfg), cfg)
    assert planned <= sim.totals.dollars < none


def test_per_call_prices_keep_each_models_tier():
    b = replace(UNIT, source="b")  # no tier
    ep = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[100, 100, 100, 0], hid=[10, 10, 10, 0])
    ep.model_raw, ep.models, ep.call_model = "a", ["a", "b"], np.array([0, 1, 0, 1])
    cfg = CostConfig(price_table={"a": TIER, "b": b}, cache="ideal")
    sim = Simulator(ep, cfg)
    while not sim.done:
        sim.call()
    assert sim.totals.dollars == baseline_totals(ep, cfg).dollars
    # a's call 2 (320 tokens) is at a's tier: 100 read + 220 written, 10 out = 200 + 880 + 150 = 1230;
    # b's call 3 (430 tokens) is not: 210 + 220*2 + 100 = 750; calls 0, 1: 300 and 210*2 + 100 = 520
    assert sim.totals.dollars == 300 + 520 + 1230 + 750


def test_a_users_prices_file_takes_a_tier_and_says_what_is_wrong(tmp_path):
    table = load_price_table('{"m": {"input": 2, "output": 10, "cache_read": 0.2, "cache_write": 2.5, '
                             '"long_above": 272000, "long_input": 2, "long_output": 1.5}}')  # fmt: skip
    p = table["m"]
    assert (p.long_above, p.long_input, p.long_output) == (272000, 2.0, 1.5)
    back = load_price_table(str(_write(tmp_path, price_entries(table))))["m"]
    assert replace(back, source=p.source) == p  # what a log or checkpoint keeps reads back the same
    plain = load_price_table('{"m": {"input": 2, "output": 10}}')["m"]
    assert "long_above" not in price_entries({"m": plain})["m"]  # kept out where there is no tier
    for bad, says in [('"long_above": -1', "long_above must be a non-negative number"),
                      ('"long_above": 1.5', "long_above must be a whole number"),
                      ('"long_input": "x"', "long_input must be a non-negative number"),
                      ('"long_cap": 3', "long_output optional")]:  # fmt: skip
        with pytest.raises(ValueError, match=says):
            load_price_table('{"m": {"input": 2, "output": 10, ' + bad + "}}")
    with pytest.raises(ValueError, match="a table by model name"):  # an entry without its model's name
        load_price_table('{"input": 2, "output": 10, "long_above": 272000}')


def _write(tmp_path, entries):
    import json

    path = tmp_path / "prices.json"
    path.write_text(json.dumps(entries))
    return path


def test_openais_newest_models_keep_their_cache_half_an_hour():
    from dtoc_rl.sim.pricing import cache_rules_for

    assert cache_rules_for("gpt-6", "gpt-6.1-sol").expired(600) is False  # 10 minutes: still there
    assert cache_rules_for("gpt-6", "gpt-6.1-sol").expired(1900) is True
    assert cache_rules_for("gpt-6", "gpt-6-sol").expired(600) is True  # 5 minutes, as before


def test_the_bill_check_bills_a_logged_call_above_the_tier_whole():
    """A Claude Sonnet 4.5 call of 250K tokens (1M window) whose log gives its tokens but no cost: all of
    it at the long rates, its 1-hour writes included, whichever part of it is below the threshold."""
    from dtoc_rl.core.tokens import get_estimator
    from dtoc_rl.data.schema import Step, Trajectory, Usage
    from dtoc_rl.sim.billcheck import log_calls
    from dtoc_rl.sim.pricing import prices_for

    usage = Usage(input_tokens=250_000, cached_tokens=60_000, cache_write_tokens=190_000, output_tokens=2_000,
                  cache_write_1h_tokens=150_000)  # fmt: skip
    step = Step(index=0, turn=0, timestamp=0.0, assistant_text="a", tool_name="bash", tool_args="x",
                output="o", usage=usage)  # fmt: skip
    traj = Trajectory(traj_id="cc/1", source="claude-code-transcript", model_raw="claude-sonnet-4-5",
                      model_family="claude-sonnet", task_id="t", steps=[step])  # fmt: skip
    (call,) = log_calls(traj, get_estimator("chars"))
    p = prices_for("claude-sonnet", "claude-sonnet-4-5")  # $3 in, $0.30 read, $3.75 5-minute write, $15 out
    # x2 on the prompt's rates, x1.5 on output: 60K read at $0.60, 40K written at $7.50, 150K written for an
    # hour at $12 (twice the long input price), 2K out at $22.50
    assert p.long_above == 200_000
    assert call.logged_dollars == pytest.approx(
        (60_000 * 0.60 + 40_000 * 7.50 + 150_000 * 12 + 2_000 * 22.5) / 1e6
    )
