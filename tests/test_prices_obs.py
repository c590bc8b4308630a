"""The ``prices`` observation: one builder, the same vector for the same model in ReplayEnv, the
Orchestrator, LiveEnv's builder and ``/decide``, and the user's prices for a model the table lacks."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from dtoc_rl.cli import main
from dtoc_rl.engine.features import ItemColumns, ItemState, build_observation, observation_space, price_vector
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.serve.service import DecisionService
from dtoc_rl.sim.pricing import Prices, load_price_table, model_prices, prices_for
from tests.test_orchestrator import read_loop

ACME = Prices(input=4.0, output=16.0, cache_read=0.5, cache_write=5.0, source="test")


class Spy:
    label = "spy"

    def __init__(self):
        self.obs = None

    def reset(self, info=None):
        pass

    def act(self, obs, info=None):
        self.obs = obs
        n = len(obs["item_mask"])
        return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}


def _items(n):
    return [
        {"key": f"k{i}", "tokens": 500 + i, "tool": "bash", "args": {"command": f"cat f{i}"}}
        for i in range(n)
    ]


def _replay_prices(model_raw: str, family: str) -> np.ndarray:
    ep = dataclasses.replace(load_episodes(None)[0], model_raw=model_raw, model_family=family)
    env = ReplayEnv(trajectories=[ep])
    obs, _ = env.reset(options={"index": 0})
    first = obs["prices"].copy()
    for _ in range(3):
        obs, *_ = env.step({"enable": np.zeros(env.N, np.int8), "disable": np.zeros(env.N, np.int8)})
        assert np.array_equal(obs["prices"], first)  # constant over the episode
    assert env.observation_space.contains(obs)
    return first


def _orchestrator_prices(model: str, **kw) -> np.ndarray:
    spy = Spy()
    read_loop(Orchestrator(spy, query="task", model=model, **kw), 3)
    return spy.obs["prices"]


def _service_prices(body: dict, **kw) -> tuple[np.ndarray, dict]:
    spy = Spy()
    out = DecisionService(spy, **kw).decide({"items": _items(4), **body})
    return (None if spy.obs is None else spy.obs["prices"]), out


@pytest.mark.parametrize(
    "model,family",
    [("gpt-4o-2024-05-13", "gpt-4o"),  # a version priced apart from its family ($5, no caching)
     ("google/gemini-3-pro-preview", "gemini-3-pro"),
     ("claude-sonnet-4-5-20250929", "claude-sonnet")],
)  # fmt: skip
def test_the_same_model_gives_the_same_prices_everywhere(model, family):
    want = price_vector(prices_for(family, model))
    assert np.array_equal(_replay_prices(model, family), want)
    assert np.array_equal(_orchestrator_prices(model), want)
    got, out = _service_prices({"model": model})
    assert np.array_equal(got, want) and out["family"] == family
    cols = ItemColumns()
    cols.append(100, 0, call=0, users_at=1)
    live = cols.observation(None, 4, now=1, users=1, active_tokens=100, step=1, model_family=family,
                            prices=prices_for(family, model))  # fmt: skip
    assert np.array_equal(live["prices"], want)


def test_a_versioned_model_is_not_priced_as_its_family():
    # the case a family-only lookup got wrong: gpt-4o-2024-05-13 cost twice gpt-4o-2024-08-06
    assert _orchestrator_prices("gpt-4o-2024-05-13")[0] == 5.0
    assert _orchestrator_prices("gpt-4o-2024-08-06")[0] == 2.5


def test_build_observation_defaults_to_the_family_and_fits_the_space():
    states = [ItemState(est_tokens=100, age=1, visible=True)]
    obs = build_observation(states, 4, active_tokens=100, step=2, model_family="claude-opus")
    assert np.array_equal(obs["prices"], price_vector(prices_for("claude-opus")))
    assert observation_space(4).contains(obs)
    obs = build_observation(states, 4, active_tokens=100, step=2, model_family="claude-opus", prices=ACME)
    assert obs["prices"].tolist() == [4.0, 16.0, 0.5, 5.0]


def test_replay_env_observes_the_prices_it_bills():
    from dtoc_rl.sim.simulator import CostConfig

    ep = load_episodes(None)[0]
    env = ReplayEnv(trajectories=[ep], cost_config=CostConfig(prices=ACME))
    obs, _ = env.reset(options={"index": 0})
    assert obs["prices"].tolist() == [4.0, 16.0, 0.5, 5.0]


def test_an_unknown_model_takes_the_users_prices():
    table = load_price_table('{"acme-1": {"input": 4, "output": 16, "cache_read": 0.5, "cache_write": 5}}')
    assert model_prices("acme/ACME-1", "other", table) == table["acme-1"]  # provider prefix, any case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert model_prices("acme-2", "other", table) == prices_for("other", "acme-2")  # the fallback
    # the service: the table's prices, and the policy serves the unknown family (no fallback)
    got, out = _service_prices({"model": "acme-1"}, prices=table)
    assert got.tolist() == [4.0, 16.0, 0.5, 5.0] and out["fallback"] is False
    got, out = _service_prices({"model": "acme-2"}, prices=table)
    assert got is None and out["fallback"] is True  # unknown and unpriced: everything stays visible
    # a request's own prices (cache prices default to the input price)
    got, out = _service_prices({"model": "acme-3", "prices": {"input": 1, "output": 2}})
    assert got.tolist() == [1.0, 2.0, 1.0, 1.0] and out["fallback"] is False
    # the Orchestrator
    assert _orchestrator_prices("acme-1", prices=ACME).tolist() == [4.0, 16.0, 0.5, 5.0]


def test_a_request_with_bad_prices_is_refused():
    from dtoc_rl.serve.service import DecideError

    with pytest.raises(DecideError, match="prices"):
        DecisionService(Spy()).decide({"items": _items(2), "prices": {"input": -1, "output": 2}})


def test_evaluate_bills_a_model_at_the_users_prices(capsys):
    model = "google/gemini-3-pro-preview"
    base = prices_for("gemini-3-pro", model)
    doubled = {k: 2 * getattr(base, k) for k in ("input", "output", "cache_read", "cache_write")}
    args = ["evaluate", "-p", "none", "--by", "model_family", "--json", "--bootstrap", "10", "--quiet",
            "--model-family", "gemini-3-pro"]  # fmt: skip
    assert main(args) == 0
    before = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert main([*args, "--prices", json.dumps({model: doubled})]) == 0
    after = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert after["none"]["dollars"] == pytest.approx(2 * before["none"]["dollars"], rel=1e-9)


@pytest.mark.parametrize(
    "text,msg",
    [('{"m": {"input": 1}}', "needs input and output"),
     ('{"m": {"input": 1, "output": -2}}', "output must be a non-negative number"),
     ('{"m": {"input": 1, "output": 2, "cache": 1}}', "needs input and output"),
     ("[1, 2]", "expected an object"),
     ('{"m": 3}', "expected an object with input")],
)  # fmt: skip
def test_bad_price_tables_are_one_line_errors(text, msg, tmp_path, capsys):
    with pytest.raises(ValueError, match=msg):
        load_price_table(text)
    f = tmp_path / "prices.yaml"
    f.write_text(text)
    assert main(["evaluate", "-p", "none", "--prices", str(f), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err


def test_a_yaml_price_file_and_serve_help(tmp_path, capsys):
    f = tmp_path / "prices.yaml"
    f.write_text("acme-1:\n  input: 4\n  output: 16\n  cache_read: 0.4\n")
    assert load_price_table(f)["acme-1"] == Prices(4.0, 16.0, 0.4, 4.0, source=f"user prices ({f})")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--prices" in capsys.readouterr().out


def test_serve_refuses_a_bad_price_file_in_one_line(tmp_path, capsys):
    f = tmp_path / "prices.json"
    f.write_text('{"acme-1": {"input": 4}}')
    assert main(["serve", "--policy", "none", "--port", "0", "--prices", str(f)]) == 2
    err = capsys.readouterr().err
    assert "--prices" in err and "needs input and output" in err and err.count("\n") == 1, err


def test_a_checkpoint_trained_with_prices_keeps_them_and_a_live_agent_runs_at_them(tmp_path):
    from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy, LearnedPolicyConfig

    acme = {"input": 4, "output": 16, "cache_read": 0.5, "cache_write": 5}
    table = json.dumps({"acme-1": acme, "gpt-4o": {"input": 1, "output": 2}})
    tiny = dict(d_model=16, n_heads=2, n_layers=1, epochs=1, dagger_rounds=0)
    pol = LearnedPolicyConfig(**tiny, prices=table).create()
    pol.fit(None, progress=False)
    path = pol.save(tmp_path / "c")
    back = LearnedPolicy.load(path)
    want = {m: price_vector(p).tolist() for m, p in load_price_table(table).items()}
    assert {m: price_vector(p).tolist() for m, p in back.price_table.items()} == want  # the prices themselves
    assert price_vector(Orchestrator(back, query="task", model="acme-1").prices).tolist() == want["acme-1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert Orchestrator(back, query="t", model="gpt-4").prices == prices_for("gpt-4", "gpt-4")
    # the service prices a model of a family it serves at them, and leaves another family to the fallback
    spy = Spy()
    spy.price_table = back.price_table
    svc = DecisionService(spy)
    svc.decide({"items": _items(4), "model": "gpt-4o"})
    assert spy.obs["prices"].tolist() == want["gpt-4o"]
    spy.obs = None
    assert svc.decide({"items": _items(4), "model": "acme-1"})["fallback"] is True and spy.obs is None
    # a damaged table is refused at load, naming what is wrong
    meta = json.loads((path / "config.json").read_text())
    meta["meta"]["prices"] = {"acme-1": {"input": "four", "output": 16}}
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"meta\.prices.*input must be a non-negative number"):
        LearnedPolicy.load(path)


def test_prices_without_a_cache_read_are_said_to_bill_no_cache():
    with pytest.warns(UserWarning, match=r"no cache_read for 'm1': cached prompt tokens are billed at"):
        t = load_price_table(
            '{"m1": {"input": 2, "output": 8}, "m2": {"input": 2, "output": 8, "cache_read": 0.2}}'
        )
    assert t["m1"].cache_read == t["m1"].cache_write == 2.0 and t["m2"].cache_read == 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every entry with its cache price: nothing to say
        load_price_table('{"m2": {"input": 2, "output": 8, "cache_read": 0.2}}')


def test_a_price_warning_marked_as_given_is_not_given_again():
    from dtoc_rl.sim import pricing

    with pytest.warns(UserWarning, match="no price for model version 'gpt-4o-2099-01-01'"):
        prices_for("gpt-4o", "gpt-4o-2099-01-01")
    keys = pricing.warned()
    assert any("gpt-4o-2099-01-01" in k for k in keys)
    pricing._warned.clear()  # a fresh worker process, told what its parent said
    pricing.mark_warned(keys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prices_for("gpt-4o", "gpt-4o-2099-01-01")


def test_a_requests_prices_take_a_long_context_tier_as_a_prices_file_does():
    import msgspec

    from dtoc_rl.engine.decide_request import PriceSpec

    given = {"input": 2, "output": 10, "long_above": 272000, "long_input": 2, "long_output": 1.5}
    spec = msgspec.convert(given, PriceSpec)
    p = spec.to_prices()
    assert (p.long_above, p.long_input, p.long_output) == (272000, 2.0, 1.5)
    assert p.bill(0, 300_000, 0) == 300_000 * 4 / 1e6  # cache writes at the input price, doubled
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"input": 2, "output": 10, "long_above": -1}, PriceSpec)
