"""A cache hit rate in the user's prices: read from a prices file, billed by the simulator in place of
the stored one, and written by `dtoc-rl calibrate --cost --prices-out` from the logs' own bills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import write_dataset
from dtoc_rl.data.schema import Usage
from dtoc_rl.sim.billcheck import bill_check, fitted_prices
from dtoc_rl.sim.pricing import cache_rules_for, load_price_table, price_entries
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals
from tests.cost_episodes import make_episode
from tests.test_billcheck import _log, _usage

GPT4O = {"input": 2.5, "output": 10.0, "cache_read": 1.25, "cache_write": 2.5}


def test_a_prices_entry_carries_a_hit_rate_and_keeps_it_through_a_round_trip():
    table = load_price_table(json.dumps({"my-model": {**GPT4O, "cache_hit_rate": 0.4}, "other": GPT4O}))
    assert table["my-model"].cache_hit_rate == 0.4 and table["other"].cache_hit_rate is None
    entries = price_entries(table)
    assert entries["my-model"]["cache_hit_rate"] == 0.4 and "cache_hit_rate" not in entries["other"]
    assert load_price_table(json.dumps(entries)) == table


@pytest.mark.parametrize("bad", [1.5, -0.1, "0.5", True, float("nan")])
def test_a_bad_hit_rate_is_one_line_naming_the_entry(bad):
    with pytest.raises(ValueError) as e:
        load_price_table(json.dumps({"my-model": {**GPT4O, "cache_hit_rate": bad}}))
    msg = str(e.value)
    assert "'my-model'" in msg and "cache_hit_rate" in msg and "\n" not in msg


def test_the_users_hit_rate_replaces_the_stored_one():
    assert cache_rules_for("gpt-5", "gpt-5.2").hit_rate == 0.52  # stored (RepoLaunch's Azure bills)
    assert cache_rules_for("gpt-5", "gpt-5.2", None, 0.3).hit_rate == 0.3
    assert cache_rules_for("gpt-4o", "gpt-4o", None, 0.3).hit_rate == 0.3  # none stored
    # a model without a cache discount has nothing to hit
    assert cache_rules_for("gpt-4", "gpt-4-0125-preview", None, 0.3).hit_rate == 1.0


def _episode():
    # base 3000, four calls each adding 50 user + 50 assistant + a 2,000-token output: every call after
    # the first shares the whole previous prompt, all above OpenAI's 1,024-token minimum
    ep = make_episode(base=3000, user=[50] * 4, asst=[50] * 4, vis=[2000] * 4, hid=[40] * 4)
    ep.model_raw = "gpt-4o-2024-08-06"
    return ep


@pytest.mark.parametrize("rate", [None, 1.0, 0.5, 0.0])
def test_the_simulator_and_the_baseline_bill_at_the_users_hit_rate(rate):
    entry = dict(GPT4O) if rate is None else {**GPT4O, "cache_hit_rate": rate}
    cfg = CostConfig(price_table={"gpt-4o-2024-08-06": entry})
    ep = _episode()
    assert cfg.rules_for(ep).hit_rate == (1.0 if rate is None else rate)
    # prompts 3050, 5150, 7250, 9350; each call after the first shares its predecessor's whole
    # prompt, which OpenAI's rules read in 128-token blocks: 2944 + 5120 + 7168 = 15232 allowed
    allowed = 2944 + 5120 + 7168
    want = allowed if rate is None else sum(round(c * rate) for c in (2944, 5120, 7168))
    base = baseline_totals(ep, cfg)
    assert base.cache_read_tokens == want
    sim = Simulator(ep, cfg)
    for _ in range(ep.n_calls):
        sim.call()
    assert sim.totals.cache_read_tokens == want and sim.totals.dollars == pytest.approx(base.dollars)
    # fewer hits, a dearer bill: every token not read from the cache is written at the input price
    cached_usd = (want * 1.25 + (3050 + 5150 + 7250 + 9350 - want) * 2.5 + 4 * 50 * 10.0) / 1e6
    assert base.dollars == pytest.approx(cached_usd)


def test_one_prices_override_carries_its_hit_rate_to_every_run():
    cfg = CostConfig(prices={**GPT4O, "cache_hit_rate": 0.25})
    assert cfg.rules_for(_episode()).hit_rate == 0.25


def _half_hit_log():
    # tests.test_billcheck's log with the provider reading half of what the rules allow
    t = _log()
    for s, c in zip(t.steps, [0, 1000, 2020, 1000]):
        cached = c // 128 * 128 // 2 if c >= 1024 else 0
        s.usage = _usage(s.usage.input_tokens, cached)
    return t


def test_the_bill_checks_rate_per_model_makes_a_prices_table():
    res = bill_check([_half_hit_log()], "chars", size="fit")
    table, unknown = fitted_prices(res)
    assert unknown == [] and list(table) == ["gpt-5.2-20251211"]  # without the router's prefix
    assert table["gpt-5.2-20251211"].cache_hit_rate == pytest.approx(0.5, abs=0.01)
    assert table["gpt-5.2-20251211"].input == 1.75  # its list prices


@pytest.mark.filterwarnings("ignore:no price for model")
def test_a_model_without_a_list_price_is_left_out():
    t = _half_hit_log()
    t.model_raw = "acme/unknown-llm-7"
    table, unknown = fitted_prices(bill_check([t], "chars", size="fit"))
    assert table == {} and unknown == ["unknown-llm-7"]


def test_calibrate_writes_the_prices_file_and_evaluate_reads_it(tmp_path: Path, capsys):
    ds = write_dataset([_half_hit_log()], tmp_path / "ds")
    out = tmp_path / "prices.json"
    assert (
        cli(["calibrate", "--cost", str(ds), "--estimator", "chars", "--prices-out", str(out), "--json"]) == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert got["prices_out"]["path"] == str(out)
    table = load_price_table(out)
    assert table["gpt-5.2-20251211"].cache_hit_rate == pytest.approx(0.5, abs=0.01)
    assert cli(["calibrate", str(ds), "--prices-out", str(out)]) == 2  # the bill check's option
    err = capsys.readouterr().err
    assert "--prices-out" in err and "--cost" in err and len(err.strip().splitlines()) == 1
    # logs without a logged cached token give no rate: said, and no file
    bare = _log()
    for s in bare.steps:
        s.usage = Usage(input_tokens=s.usage.input_tokens, output_tokens=20)
    ds2 = write_dataset([bare], tmp_path / "bare")
    none = tmp_path / "none.json"
    assert cli(["calibrate", "--cost", str(ds2), "--estimator", "chars", "--prices-out", str(none)]) == 2
    err = capsys.readouterr().err
    assert "--prices-out" in err and len(err.strip().splitlines()) == 1 and not none.exists()


def test_each_model_of_a_run_is_read_at_its_own_hit_rate():
    import numpy as np

    ep = _episode()
    ep.models, ep.call_model = ["gpt-4o-2024-08-06", "gpt-4.1"], np.array([0, 1, 0, 1])
    cfg = CostConfig(price_table={"gpt-4o-2024-08-06": {**GPT4O, "cache_hit_rate": 0.5},
                                  "gpt-4.1": {**GPT4O, "cache_hit_rate": 0.2}})  # fmt: skip
    assert [r.hit_rate for r in cfg.model_rules(ep)] == [0.5, 0.2]
    # without an entry of its own, the second model keeps its provider's stored rules
    cfg = CostConfig(price_table={"gpt-4o-2024-08-06": {**GPT4O, "cache_hit_rate": 0.5}})
    assert [r.hit_rate for r in cfg.model_rules(ep)] == [0.5, 1.0]
