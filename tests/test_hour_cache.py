"""Anthropic's 1-hour prompt cache: a run whose log says its writes were kept for an hour is billed as
the provider bills it (writes at twice the input price, a cache still warm after a 10-minute wait),
from the log's usage to the simulator's bill and the bill check."""

from __future__ import annotations

import dataclasses

import pytest

from dtoc_rl.core.tokens import get_estimator
from dtoc_rl.data.schema import Trajectory, Usage
from dtoc_rl.ingest.common import usage_from
from dtoc_rl.sim.billcheck import log_calls
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.pricing import HOUR_CACHE, logged_ttl, prices_for, retained
from dtoc_rl.sim.simulator import CostConfig, baseline_totals
from tests.crafted_trajs import bash

SONNET = "claude-sonnet-4-5-20250929"  # $3 in, $3.75 a 5-minute write, $0.30 a read


def _anthropic_usage(read: int, five: int, hour: int) -> dict:
    return {
        "input_tokens": 3, "cache_read_input_tokens": read, "cache_creation_input_tokens": five + hour,
        "cache_creation": {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour},
        "output_tokens": 50,
    }  # fmt: skip


def test_the_hour_writes_are_read_from_anthropic_usage():
    u = usage_from(_anthropic_usage(1000, 20, 300))
    assert (u.input_tokens, u.cached_tokens, u.cache_write_tokens, u.cache_write_1h_tokens) == (
        1323,
        1000,
        320,
        300,
    )
    plain = usage_from({"input_tokens": 3, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5})
    assert plain.cache_write_1h_tokens is None and plain.cache_write_tokens == 5


def _run(hour: bool, wait: float = 600.0) -> Trajectory:
    """Three calls of a Claude model, ``wait`` seconds apart, each reading a file of about 2,000 tokens;
    its log's writes were 1-hour ones (``hour``) or 5-minute ones."""
    steps = [
        bash(i, f"cat f{i}.py", f"def f{i}(x):\n    return x + {i}  # padding\n" * 190) for i in range(3)
    ]
    for i, s in enumerate(steps):
        s.timestamp = 1_700_000_000.0 + i * wait
        written = 2000 if i == 0 else 2100
        s.usage = Usage(
            input_tokens=written + 2000 * i + 3, cached_tokens=2000 * i, cache_write_tokens=written,
            output_tokens=50, cache_write_1h_tokens=written if hour else 0,
        )  # fmt: skip
    return Trajectory(
        "t/h", "claude-code-transcript", SONNET, "claude-sonnet", "t", task_text="read", steps=steps
    )


def test_a_run_of_hour_writes_is_priced_and_cached_for_an_hour():
    hour, five = compile_episode(_run(True)), compile_episode(_run(False))
    assert (hour.cache_ttl, five.cache_ttl) == (HOUR_CACHE, None)
    cfg = CostConfig()
    listed = prices_for("claude-sonnet", SONNET)
    assert cfg.prices_of(five) == listed and listed.cache_write == 3.75
    assert cfg.prices_of(hour).cache_write == 2 * listed.input == 6.0
    assert (cfg.rules_for(hour).ttl, cfg.rules_for(five).ttl) == (3600.0, 300.0)
    h, f = baseline_totals(hour, cfg), baseline_totals(five, cfg)
    # ten minutes apart: the 5-minute cache is gone at every call, the hour's still holds the prefix
    assert f.cache_read_tokens == 0 and h.cache_read_tokens > 1500
    # every prompt written whole at 3.75 against the hour's reads at 0.30 and writes at 6: the bill is
    # what those counts cost at those prices
    assert h.dollars == pytest.approx(
        (h.cache_read_tokens * 0.30 + h.cache_write_tokens * 6.0 + h.output_tokens * 15.0) / 1e6
    )
    assert f.dollars == pytest.approx((f.cache_write_tokens * 3.75 + f.output_tokens * 15.0) / 1e6)
    # within five minutes both are warm, and the hour's writes cost more
    h2, f2 = (baseline_totals(compile_episode(_run(k, wait=60.0)), cfg) for k in (True, False))
    assert h2.cache_read_tokens == f2.cache_read_tokens > 1500 and h2.dollars > f2.dollars
    # the caller's own rules win over what the log says
    own = dataclasses.replace(cfg.rules_for(five), ttl=10.0)
    assert CostConfig(cache_rules=own).rules_for(hour).ttl == 10.0


def test_a_few_hour_writes_in_a_run_of_five_minute_ones_leave_it_a_five_minute_run():
    t = _run(False)
    t.steps[2].usage.cache_write_1h_tokens = 100  # of 2,100 written
    assert logged_ttl(s.usage for s in t.steps) is None
    t.steps[1].usage.cache_write_1h_tokens = 2100
    t.steps[2].usage.cache_write_1h_tokens = 2100
    assert logged_ttl(s.usage for s in t.steps) == HOUR_CACHE  # 4,200 of 6,200
    assert logged_ttl([None, Usage(input_tokens=5)]) is None


def test_the_bill_check_prices_each_write_at_its_lifetime():
    listed = prices_for("claude-sonnet", SONNET)
    for hour in (False, True):
        calls = log_calls(_run(hour), get_estimator("chars"))
        assert len(calls) == 3
        for c, s in zip(calls, _run(hour).steps):
            u = s.usage
            rate = 6.0 if hour else 3.75
            want = (u.cached_tokens * 0.30 + u.cache_write_tokens * rate + 3 * 3.0 + 50 * 15.0) / 1e6
            assert c.logged_dollars == pytest.approx(want)
    # prices with no write premium are left as listed (an hour's writes cost what any write costs)
    gpt = prices_for("gpt-5", "gpt-5")
    assert retained(gpt, HOUR_CACHE) == gpt and retained(listed, None) == listed


def test_a_call_of_both_lifetimes_is_billed_each_at_its_price_and_logs_keep_the_split():
    from dtoc_rl.data.chatlog import usage_dict

    t = _run(False)
    t.steps[2].usage.cache_write_1h_tokens = 100  # of its 2,100 written
    c = log_calls(t, get_estimator("chars"))[2]
    u = t.steps[2].usage
    want = (u.cached_tokens * 0.30 + 2000 * 3.75 + 100 * 6.0 + 3 * 3.0 + 50 * 15.0) / 1e6
    assert c.logged_dollars == pytest.approx(want)
    # a log dtoc-rl writes (the Orchestrator, the proxy) reads back with the split
    assert usage_from(usage_dict(u)) == u


def test_a_live_session_whose_responses_report_hour_writes_decides_with_the_hour(monkeypatch):
    """The Orchestrator reads the split from each response's usage: once most writes are 1-hour ones a
    ten-minute tool run leaves the cache warm and the policy sees the hour's write price, as ReplayEnv
    bills an ingested log of the same session; the caller's cache_ttl still wins."""
    import time

    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.orchestrator import Orchestrator

    seen = []

    class Spy(type(make_policy("none"))):
        def act(self, obs, info=None):
            seen.append((info["cache_cold"], float(obs["prices"][3])))
            return super().act(obs, info)

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    for hour, ttl, want in (
        (True, None, (False, 6.0)),
        (False, None, (True, 3.75)),
        (True, 60.0, (True, 6.0)),
    ):
        orch = Orchestrator(Spy(), query="task", model=SONNET, cache_ttl=ttl)
        five, one = (0, 2000) if hour else (2000, 0)
        (c,) = orch.record_assistant(
            "", [{"name": "bash", "arguments": {"command": "make"}}], usage=_anthropic_usage(0, five, one)
        )
        clock[0] += 600.0
        orch.add_tool_result(c["id"], "ok")
        orch.decide(force=True)
        assert seen[-1] == want, (hour, ttl)
