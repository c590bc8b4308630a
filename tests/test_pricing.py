"""Prices per model version: the raw name picks the version, unknown versions fall back (warned once)."""

from __future__ import annotations

import warnings

import pytest

from dtoc_rl.data.models import model_version
from dtoc_rl.sim import pricing
from dtoc_rl.sim.pricing import PRICES, VERSION_PRICES, prices_for
from dtoc_rl.sim.simulator import baseline_totals
from tests.cost_episodes import make_episode


@pytest.mark.parametrize(
    "raw, version",
    [
        ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
        ("gpt4-0125", "gpt-4-0125-preview"),
        ("azure/gpt-5.2-20251211", "gpt-5.2"),
        ("azure/gpt-5.2-codex-20260114", "gpt-5.2-codex"),
        ("openrouter/google/gemini-3-pro-preview", "gemini-3-pro-preview"),
        ("claude-4-sonnet-20250514", "claude-sonnet-4-20250514"),
        ("gpt-4o", None),  # a bare alias pins no snapshot
        ("SWE-agent-LM-32B", None),
        # models outside ../shared that agents run on: a mini model is no full one, an older Opus
        # costs three times the newest, Haiku 4.5 has a cache-write premium
        ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
        ("openai/gpt-5.1-codex", "gpt-5"),
        ("gpt-4.1-mini", "gpt-4.1-mini"),
        ("o4-mini-2025-04-16", "o4-mini"),
        ("anthropic/claude-opus-4-1-20250805", "claude-opus-4-1-20250805"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5-20251001"),
        ("gemini/gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),  # not the flash model
        ("models/gemini-3-flash-preview", "gemini-3-flash-preview"),  # not 2.5 Flash, nor 3 Pro
        ("gemini-3-flash-preview-tts", None),  # a speech model is no text model
        ("gemini-2.5-flash-preview-tts", None),  # a speech model is no text model
        ("bedrock/us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1-20250805"),
        ("vertex_ai/claude-opus-4-1@20250805", "claude-opus-4-1-20250805"),
        ("o1-mini", "o3-mini"),
        ("gpt-5.1-codex-mini", "gpt-5-codex-mini"),
        ("gpt-5.1-codex-max", "gpt-5"),  # priced as GPT-5.1, not as the family's GPT-5.2
        ("gpt-5-1-codex-2025-11-13", "gpt-5"),
        # released in 2026: each its own version (two versions are two caches), a Bedrock or dated
        # name of one the same version, the 1M-window name the model's own, Mythos priced as Fable
        ("claude-opus-4-6", "claude-opus-4-6"),
        ("claude-opus-5", "claude-opus-5"),
        ("anthropic/claude-opus-5-5", "claude-opus-5-5"),
        ("us.anthropic.claude-sonnet-5-v1:0", "claude-sonnet-5"),
        ("claude-sonnet-5-5[1m]", "claude-sonnet-5-5"),
        ("claude-mythos-5-1", "claude-fable-5-1"),
        ("claude-haiku-5-5", "claude-haiku-5-5"),
        ("gpt-5.6", "gpt-5.6-sol"),  # the alias routes to Sol
        ("gpt-5.4-nano-2026-03-17", "gpt-5.4-nano"),
        ("openai/gpt-6-sol-2026-09-22", "gpt-6-sol"),
        ("gpt-6.1-sol", "gpt-6.1-sol"),  # not 6 Sol: cache reads at half its price
        ("gemini-3.1-pro-preview-customtools", "gemini-3.1-pro-preview"),
        ("gpt-6.2-astra", None),
        # the spellings of routes and clouds: a dotted version, a global or regional Bedrock profile with
        # or without ":0", the 1M window of a model that has a tier, an undated alias
        ("openrouter/anthropic/claude-haiku-5.5", "claude-haiku-5-5"),
        ("global.anthropic.claude-haiku-5-5-v1:0", "claude-haiku-5-5"),
        ("apac.anthropic.claude-sonnet-5-v1", "claude-sonnet-5"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5-20250929"),
        ("claude-haiku-5-5@default", "claude-haiku-5-5"),
        ("gpt-5.4-20260305", "gpt-5.4"),
        ("gpt-5-max", None),  # no such model: not GPT-5's price without a word
        ("deepseek-chat-v2", "deepseek-chat-v2"),  # a "-v2" of a model's own name is no cloud's suffix
    ],
)
def test_raw_names_map_to_versions(raw, version):
    assert model_version(raw) == version


def test_families_outside_the_shared_logs_have_their_own_prices_and_regimes():
    from dtoc_rl.data.models import normalize_family
    from dtoc_rl.sim.pricing import cache_regime

    def priced(raw):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a known model is priced without a fallback warning
            return prices_for(normalize_family(raw), raw)

    assert cache_regime(priced("claude-haiku-4-5")) == "write premium"  # was gpt-4o's: none
    assert priced("gpt-4.1").cache_read / priced("gpt-4.1").input == 0.25  # gpt-4o's is 0.5
    assert priced("o3").input == 2.00 and priced("gemini-2.5-flash").input == 0.30
    assert priced("gemini-3-flash-preview").input == 0.50 and priced("gemini-3-flash-preview").output == 3.00
    assert {"gpt-4.1", "openai-o", "claude-haiku", "gemini-2.5-pro", "gemini"} <= PRICES.keys()


def test_models_of_2026_are_priced_as_their_providers_list_them(monkeypatch):
    """Families the 2025 table did not know are no longer priced as gpt-4o (GPT-6, Fable) or Gemini 2.5
    Flash (Gemini 3.1 Pro), and the regimes follow the price lists: OpenAI charges cache writes from
    GPT-5.6 on, Opus 5.5 reads its cache at a twentieth of the input price."""
    from dtoc_rl.data.models import normalize_family
    from dtoc_rl.sim.pricing import cache_regime

    def priced(raw):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a known model is priced without a fallback warning
            return prices_for(normalize_family(raw), raw)

    assert normalize_family("gpt-6-sol") == "gpt-6" and normalize_family("claude-fable-5-1") == "claude-fable"
    assert normalize_family("gemini-3.1-pro-preview") == "gemini-3-pro"
    assert normalize_family("gpt-60") != "gpt-6" and normalize_family("mistral-fable") != "claude-fable"
    assert cache_regime(priced("gpt-6-sol")) == "write premium" and cache_regime(priced("gpt-5.2")) != (
        "write premium"
    )
    assert priced("claude-opus-5-5").cache_read / priced("claude-opus-5-5").input == 0.05
    assert (priced("gemini-3.1-pro-preview").input, priced("claude-fable-5").output) == (2.00, 50.00)
    monkeypatch.setattr(pricing, "_warned", set())  # warned once per process: say it here
    with pytest.warns(UserWarning, match="priced as its family 'gpt-6'"):  # not as gpt-4o
        assert prices_for("gpt-6", "gpt-6.2-astra") == PRICES["gpt-6"]
    # the long-context tiers
    assert (priced("gpt-6-luna").long_above, priced("claude-haiku-5-5").long_above) == (272_000, 100_000)
    assert priced("claude-opus-4-6").long_above == 0  # flat across its 1M window


def test_gpt_4o_2024_05_13_has_no_cache_discount_and_its_own_list_price():
    p = prices_for("gpt-4o", "gpt-4o-2024-05-13")
    assert (p.input, p.output, p.cache_read, p.cache_write) == (5.0, 15.0, 5.0, 5.0)
    assert prices_for("gpt-4o", "gpt-4o-2024-08-06").cache_read == 1.25
    # gpt-5.2 as RepoLaunch billed it: 7,659 uncached input + 280 output tokens = $0.01732325
    p = prices_for("gpt-5", "azure/gpt-5.2-20251211")
    assert (7659 * p.input + 280 * p.output) / 1e6 == pytest.approx(0.01732325, abs=1e-9)


def test_every_price_is_dated_and_sourced():
    for table in (VERSION_PRICES, PRICES):
        for name, p in table.items():
            assert p.source and len(p.as_of) == 10, name
            assert p.cache_read <= p.input <= p.cache_write, name


def test_unknown_versions_fall_back_to_the_family_with_one_warning(monkeypatch):
    monkeypatch.setattr(pricing, "_warned", set())
    with pytest.warns(UserWarning, match="'gpt-4o-2099-01-01': priced as its family 'gpt-4o'"):
        assert prices_for("gpt-4o", "gpt-4o-2099-01-01") == PRICES["gpt-4o"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time is silent
        assert prices_for("gpt-4o", "gpt-4o-2099-01-01") == PRICES["gpt-4o"]
    with pytest.warns(UserWarning, match="priced as gpt-4o"):
        assert prices_for("mystery", "mystery-1") == PRICES[pricing.DEFAULT_FAMILY]


def test_a_familys_undated_name_is_priced_as_the_family_without_a_warning(monkeypatch):
    """'gpt-4o' is the family's own name (the version it names today), as 'claude-sonnet-4-5' is:
    no warning on every run that logs it; a dated version the table lacks still warns."""
    monkeypatch.setattr(pricing, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert prices_for("gpt-4o", "openai/GPT-4o") == PRICES["gpt-4o"]
    with pytest.warns(UserWarning, match="'gpt-4o-2099-01-01': priced as its family"):
        prices_for("gpt-4o", "gpt-4o-2099-01-01")


def test_no_model_named_yet_is_said_as_such_not_as_a_model_called_other(monkeypatch):
    monkeypatch.setattr(pricing, "_warned", set())
    with pytest.warns(UserWarning, match=r"^a run names no model: priced as gpt-4o \(ingest --model NAME"):
        assert prices_for("other", None) == PRICES[pricing.DEFAULT_FAMILY]


def test_warnings_about_unpriced_models_are_bounded(monkeypatch):
    """Model names come from clients of the service too: new names must not grow memory or the log."""
    monkeypatch.setattr(pricing, "_warned", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(pricing.MAX_WARNED + 50):
            prices_for("gpt-4o", f"gpt-4o-x{i}")
    assert len(seen) == pricing.MAX_WARNED + 1 and len(pricing._warned) == pricing.MAX_WARNED + 1
    assert "the rest are priced without a warning" in str(seen[-1].message)
    monkeypatch.setattr(pricing, "_warned", set())
    with pytest.warns(UserWarning) as seen:
        prices_for("gpt-4o", "gpt-4o-" + "x" * 200_000)
    assert len(str(seen[0].message)) < 300


def test_the_simulator_prices_the_episode_by_its_version():
    ep = make_episode(base=2048, user=[0, 0], asst=[0, 0], vis=[0, 0], hid=[0, 0])
    ep.model_raw = "gpt-4o-2024-05-13"
    # two calls of 2,048 prompt tokens each, the second one's cached: no discount at $5
    assert baseline_totals(ep).dollars == pytest.approx(4096 * 5.0 / 1e6)
    ep.model_raw = "gpt-4o-2024-08-06"
    assert baseline_totals(ep).dollars == pytest.approx((2048 * 2.5 + 2048 * 1.25) / 1e6)


def test_cache_regimes():
    from dtoc_rl.sim.pricing import cache_regime

    assert cache_regime(prices_for("gpt-4o", "gpt-4o-2024-05-13")) == "no caching"
    assert cache_regime(prices_for("gpt-4", "gpt4-0125")) == "no caching"
    assert cache_regime(prices_for("gpt-5", "azure/gpt-5.2-20251211")) == "discount, no write premium"
    assert cache_regime(prices_for("gemini-3-pro", "gemini-3-pro-preview")) == "discount, no write premium"
    assert cache_regime(prices_for("claude-opus", "claude-opus-4-5-20251101")) == "write premium"


def test_bill_is_the_dollar_formula_by_hand():
    p = pricing.Prices(input=2.0, output=10.0, cache_read=0.5, cache_write=2.5)
    # 1,000 cached x $0.5 + 200 written x $2.5 + 50 output x $10 + 100 uncached x $2, per million
    assert p.bill(1000, 200, 50, 100) == pytest.approx((500 + 500 + 500 + 200) / 1e6, rel=1e-15)
    assert p.bill(0, 0, 0) == 0.0


def test_the_per_token_fast_path_equals_bill_bit_for_bit():
    """The simulator's hot loop multiplies by per_token() itself: it must give bill()'s exact floats."""
    import numpy as np

    rng = np.random.default_rng(3)
    for prices in [*PRICES.values(), *VERSION_PRICES.values()]:
        short, long = prices.per_token(), prices.per_token(long=True)
        cached, written, out = (rng.integers(0, 300_000, 200) for _ in range(3))
        fast = []
        for c, x, y in zip(cached.tolist(), written.tolist(), out.tolist()):
            r, w, o = long if prices.long_above and c + x > prices.long_above else short  # as the simulator
            fast.append(c * r + x * w + y * o)
        plain = [prices.bill(c, x, y) for c, x, y in zip(cached.tolist(), written.tolist(), out.tolist())]
        assert fast == plain
        assert prices.bill(cached, written, out).tolist() == plain  # arrays: the same figure per call


def test_a_run_is_priced_at_the_list_prices_of_its_day():
    """Sonnet 5.5's cache reads halved on 2026-10-07: a run made before is billed at $0.20, one made
    after (or a live session, today) at $0.10; a run whose log has no time takes today's."""
    from datetime import datetime, timezone

    from dtoc_rl.sim.pricing import run_day
    from dtoc_rl.sim.simulator import CostConfig

    assert prices_for("claude-sonnet", "claude-sonnet-5-5", "2026-10-06").cache_read == 0.20
    assert prices_for("claude-sonnet", "claude-sonnet-5-5", "2026-10-07").cache_read == 0.10
    assert prices_for("claude-sonnet", "claude-sonnet-5-5").cache_read == 0.10
    assert prices_for("gpt-5", "gpt-5.6-terra", "2026-07-10").input == 2.50  # before the cut
    ts = datetime(2026, 10, 1, 23, 30, tzinfo=timezone.utc).timestamp()
    assert run_day([float("nan"), ts + 7200, ts]) == "2026-10-01" and run_day([float("nan")]) is None
    ep = make_episode(
        base=100, user=[0] * 2, asst=[10] * 2, vis=[100, 0], hid=[10, 0], family="claude-sonnet"
    )
    ep.model_raw = "claude-sonnet-5-5"
    assert CostConfig().prices_of(ep).cache_read == 0.10  # no time in the log: today's
    ep.timestamps = [ts, ts + 60]
    assert CostConfig().prices_of(ep).cache_read == 0.20
