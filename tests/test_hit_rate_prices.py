"""A cache hit rate in the user's prices: read from a prices file, billed by the simulator in place of
the stored one, and written by `dtoc-rl calibrate --cost --prices-out` from the logs' own bills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import write_dataset
from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Usage
from dtoc_rl.sim.billcheck import bill_check, fitted_prices
from dtoc_rl.sim.pricing import cache_rules_for, load_price_table, price_entries
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals
from tests.cost_episodes import make_episode
from tests.test_billcheck import GPT52, _log, _usage

GPT4O = {"input": 2.5, "output": 10.0, "cache_read": 1.25, "cache_write": 2.5}


def test_a_prices_entry_carries_a_hit_rate_and_keeps_it_through_a_round_trip():
    table = load_price_table(json.dumps({"my-model": {**GPT4O, "cache_hit_rate": 0.4}, "other": GPT4O}))
    assert table["my-model"].cache_hit_rate == 0.4 and table["other"].cache_hit_rate is None
    entries = price_entries(table)
    assert entries["my-model"]["cache_hit_rate"] == 0.4 and "cache_hit_rate" not in entries["other"]
    assert load_price_table(json.dumps(entries)) == table


def test_an_entry_of_a_hit_rate_alone_is_the_models_list_prices_of_the_day_at_it():
    from dtoc_rl.sim.pricing import PRICE_HISTORY, as_prices, model_prices, prices_for

    version, ((changed, before), *_) = next(iter(PRICE_HISTORY.items()))
    table = load_price_table(json.dumps({version: {"cache_hit_rate": 0.3}}))
    assert table[version].rate_only and price_entries(table) == {version: {"cache_hit_rate": 0.3}}
    family = normalize_family(version)
    then = model_prices(version, family, table, when="2000-01-01")  # before the price changed
    assert then.cache_hit_rate == 0.3 and then.cache_read == before.cache_read
    now = model_prices(version, family, table)
    assert now.cache_read == prices_for(family, version).cache_read != before.cache_read
    listed = prices_for(family, version).source  # both sources named: the list's and the user's rate
    assert now.source.startswith(f"{listed}; ") and now.source != listed
    with pytest.raises(ValueError, match="cache_hit_rate alone"):  # one price for every run: none to read
        as_prices({"cache_hit_rate": 0.3}, "prices")
    with pytest.raises(ValueError, match="a table by model name"):  # an entry, not a table
        load_price_table('{"cache_hit_rate": 0.3}')


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


def test_an_entry_for_the_family_gives_its_versions_the_rate():
    cfg = CostConfig(price_table={"gpt-4o": {"cache_hit_rate": 0.3}})
    ep = _episode()  # gpt-4o-2024-08-06, family gpt-4o
    assert cfg.rules_for(ep).hit_rate == 0.3 and cfg.prices_of(ep).input == 2.5  # its list prices


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
    assert unknown == []
    # keyed by the name as logged, and without the router's prefix when one router was logged
    assert list(table) == ["azure/gpt-5.2-20251211", "gpt-5.2-20251211"]
    assert table["azure/gpt-5.2-20251211"].rate_only
    assert table["azure/gpt-5.2-20251211"].cache_hit_rate == pytest.approx(0.5, abs=0.01)


def _runs_at(rates, *, first_cached=0.0, factor=1.0, model=GPT52, sources=("repolaunch",)):
    # one run per rate, each reading that share of what the rules allow (its first call first_cached of
    # its prompt, as a cache the run before left warm would), prompts counted factor times the estimate
    runs = []
    for i, rate in enumerate(rates):
        t = _log()
        t.traj_id, t.source, t.model_raw = f"r/{i}", sources[i % len(sources)], model
        for k, (s, c) in enumerate(zip(t.steps, [0, 1000, 2020, 1000])):
            inp = round(factor * s.usage.input_tokens)
            allowed = round(factor * c) // 128 * 128 if factor * c >= 1024 else 0
            cached = round(first_cached * inp) if k == 0 else round(rate * allowed)
            s.usage = _usage(inp, cached)
        runs.append(t)
    return runs


def test_a_models_rate_is_its_sources_rate_on_the_same_calls():
    # runs on both halves at different rates, warm first calls, provider tokens 1.25 times the estimate
    # unfitted: the model's rate must come from the fit half's later calls at the logged prompt size,
    # as the source's does
    rates = [0.2, 0.4, 0.6, 0.8, 0.3, 0.9, 0.5, 0.7]
    res = bill_check(_runs_at(rates, first_cached=0.5, factor=1.25), "chars", size="none")
    src = res["sources"]["repolaunch"]
    m = src["hit_rate_by_model"][GPT52]
    assert m["logged_cached"] / m["allowed"] == pytest.approx(src["hit_rate"], rel=1e-12)
    assert src["hit_rate"] != pytest.approx(sum(rates) / len(rates), abs=0.005)  # the halves differ


def test_sources_calling_one_model_are_pooled_and_a_rate_is_at_most_one():
    runs = _runs_at([0.4] * 4, sources=("repolaunch", "mini-swe-agent"))
    table, _ = fitted_prices(bill_check(runs, "chars", size="fit"))
    assert table[GPT52].cache_hit_rate == pytest.approx(0.4, abs=0.01)
    one = _runs_at([0.4, 1.6, 0.4, 1.6], sources=("repolaunch", "mini-swe-agent"))
    rates = {s: r["hit_rate"] for s, r in bill_check(one, "chars", size="fit")["sources"].items()}
    pooled = fitted_prices(bill_check(one, "chars", size="fit"))[0][GPT52].cache_hit_rate
    assert pooled <= 1.0 and pooled == pytest.approx(min(1.0, sum(rates.values()) / 2), abs=0.01)
    over = fitted_prices(bill_check(_runs_at([1.6] * 4), "chars", size="fit"))[0][GPT52].cache_hit_rate
    assert over == 1.0


@pytest.mark.filterwarnings("ignore:no price for model")
def test_each_call_counts_for_its_own_model():
    # six calls, the last three to another model (a cache of its own): each model's later calls read
    # its own share of what the rules allow
    from tests.test_billcheck import _step, _traj

    other = "acme/gpt-5.2-20251211-b"  # not a version the list knows: its own entry, and said
    steps, prev = [], {}
    for k in range(6):
        model = GPT52 if k < 3 else other
        prompt = 1000 + 120 * k  # base 1000, each step 20 of message and 100 of output
        allowed = prev[model] // 128 * 128 if model in prev and prev[model] >= 1024 else 0
        rate = 0.5 if model == GPT52 else 0.25
        steps.append(_step(k, 400, _usage(prompt, round(rate * allowed)), 10.0 * k, model=model))
        prev[model] = prompt
    table, unknown = fitted_prices(bill_check([_traj(steps)], "chars", size="fit"))
    assert unknown == [other]
    assert table[GPT52].cache_hit_rate == pytest.approx(0.5, abs=0.02)
    assert table[other].cache_hit_rate == pytest.approx(0.25, abs=0.02)


@pytest.mark.filterwarnings("ignore:no price for model")
def test_a_model_without_a_list_price_keeps_its_rate_and_is_named():
    t = _half_hit_log()
    t.model_raw = "acme/unknown-llm-7"
    table, unknown = fitted_prices(bill_check([t], "chars", size="fit"))
    assert unknown == ["acme/unknown-llm-7"]
    assert table["acme/unknown-llm-7"].cache_hit_rate == pytest.approx(0.5, abs=0.01)


def test_logs_of_a_listed_model_keep_the_rate_they_were_given(tmp_path: Path):
    from dtoc_rl.cli.evaluate import logged_prices

    t = _log()
    t.extra = json.dumps({"dtoc_prices": json.dumps({GPT52: {**GPT4O, "cache_hit_rate": 0.3}})})
    ds = write_dataset([t], tmp_path / "ds")
    table = logged_prices(ds, quiet=True)
    assert table[GPT52].rate_only and table[GPT52].cache_hit_rate == 0.3  # list prices, the rate logged


def test_calibrate_writes_the_prices_file_and_evaluate_reads_it(tmp_path: Path, capsys):
    ds = write_dataset([_half_hit_log()], tmp_path / "ds")
    out = tmp_path / "prices.json"
    assert (
        cli(["calibrate", "--cost", str(ds), "--estimator", "chars", "--prices-out", str(out), "--json"]) == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert got["prices_out"]["path"] == str(out)
    table = load_price_table(out)
    assert table[GPT52].cache_hit_rate == pytest.approx(0.5, abs=0.01)

    def none_bill(*prices):
        argv = [
            "evaluate",
            "--dataset",
            str(ds),
            "-p",
            "none",
            "--json",
            "--quiet",
            "--by",
            "overall",
            *prices,
        ]
        assert cli(argv) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        (row,) = [r for r in rows if r["group_by"] == "overall" and r["policy"] == "none"]
        return row["dollars"]

    at_rate = {r: none_bill("--prices", json.dumps({GPT52: {"cache_hit_rate": r}})) for r in (0.0, 0.5, 1.0)}
    assert at_rate[0.0] > at_rate[0.5] > at_rate[1.0]
    assert none_bill("--prices", str(out)) == pytest.approx(at_rate[0.5], rel=0.02)
    assert none_bill() != none_bill("--prices", str(out))  # the stored 0.52 is not the logs' 0.50
    assert cli(["calibrate", str(ds), "--prices-out", str(out)]) == 2  # the bill check's option
    err = capsys.readouterr().err
    assert "--prices-out" in err and "--cost" in err and len(err.strip().splitlines()) == 1
    assert cli(["calibrate", "--cost", "--no-fit", str(ds), "--prices-out", str(out)]) == 2  # fits nothing
    err = capsys.readouterr().err
    assert "--no-fit" in err and len(err.strip().splitlines()) == 1
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


@pytest.mark.filterwarnings("ignore:no price for model")
def test_a_hit_rate_alone_does_not_serve_a_family_the_policy_never_saw():
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.service import DecisionService

    body = {"model": "acme-llm-3", "items": [{"key": "a", "tokens": 100, "visible": True}]}
    table = load_price_table(json.dumps({"acme-llm-3": {"cache_hit_rate": 0.5}}))
    rate_only = DecisionService(make_policy("hide_big"), families={"gpt-4o"}, prices=table)
    assert rate_only.decide(dict(body))["fallback"] is True  # no prices of its own to decide at
    priced = DecisionService(
        make_policy("hide_big"),
        families={"gpt-4o"},
        prices=load_price_table(json.dumps({"acme-llm-3": GPT4O})),
    )
    assert priced.decide(dict(body))["fallback"] is False


def test_a_hit_rate_in_a_decide_request_reaches_its_prices():
    from dtoc_rl.engine.decide_request import to_request

    req = to_request({"items": [], "prices": {**GPT4O, "cache_hit_rate": 0.4}})
    assert req.prices.to_prices().cache_hit_rate == 0.4
    with pytest.raises(Exception, match="cache_hit_rate"):
        to_request({"items": [], "prices": {**GPT4O, "cache_hit_rate": 1.4}})


@pytest.mark.filterwarnings("ignore:no price for model")
def test_calibrate_names_the_models_it_cannot_price(tmp_path: Path, capsys):
    t = _half_hit_log()
    t.model_raw = "acme/unknown-llm-7"
    ds = write_dataset([t], tmp_path / "ds")
    out = tmp_path / "prices.json"
    assert (
        cli(["calibrate", "--cost", str(ds), "--estimator", "chars", "--prices-out", str(out), "--json"]) == 0
    )
    err = capsys.readouterr().err
    assert "'acme/unknown-llm-7'" in err and "add input and output" in err
    assert load_price_table(out)["acme/unknown-llm-7"].rate_only


@pytest.mark.filterwarnings("ignore:no price for model")
def test_nor_does_it_make_the_proxy_manage_such_a_family():
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.proxy import ContextProxy

    body = {"model": "acme-llm-3", "messages": [{"role": "user", "content": "hi"}]}
    table = load_price_table(json.dumps({"acme-llm-3": {"cache_hit_rate": 0.5}}))
    rw = ContextProxy(make_policy("hide_big"), prices=table, warn=lambda m: None).rewrite(
        "openai", dict(body)
    )
    assert "not served" in (rw.passed or "")
    priced = ContextProxy(make_policy("hide_big"), prices=load_price_table(json.dumps({"acme-llm-3": GPT4O})))
    assert "not served" not in (priced.rewrite("openai", dict(body)).passed or "")


def test_a_model_without_a_cache_discount_gets_no_rate():
    t = _half_hit_log()
    t.model_raw, t.model_family = "gpt-4-0125-preview", "gpt-4"  # cached tokens cost the input price
    res = bill_check([t], "chars", size="fit")
    assert res["sources"]["repolaunch"]["hit_rate_by_model"]  # measured, but nothing to hit
    assert fitted_prices(res) == ({}, [])
