"""One resolution of an episode's prices (``CostConfig.prices_of``): the user's table, else list prices.

The Simulator, the all-visible bill, the oracle, the rules (``episode_prices``), evaluation and training
must price the same episode alike, and a model the price table lacks must train at the user's prices.
"""

from __future__ import annotations

import json
import math
import pickle
import warnings
from dataclasses import asdict

import numpy as np
import pytest

from dtoc_rl.cli import main
from dtoc_rl.engine.features import GLOBAL_FEATURES, price_vector
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import episode_prices
from dtoc_rl.policies.evaluate import evaluate
from dtoc_rl.policies.learned import LearnedPolicy
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import _cost_config, collect
from dtoc_rl.policies.oracle import _prices as oracle_prices
from dtoc_rl.policies.oracle import plan
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.pricing import (
    DEFAULT_FAMILY,
    PRICES,
    VERSION_PRICES,
    Prices,
    cache_regime,
    load_price_table,
    prices_for,
)
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals

from .crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=1, dagger_rounds=0)
# an unknown model whose cache writes cost 10x its input: a write premium its default prices lack
ACME_JSON = json.dumps({"acme-1": {"input": 4, "output": 16, "cache_read": 0.4, "cache_write": 40}})
ACME = load_price_table(ACME_JSON)["acme-1"]
CHEAP = Prices(0.5, 1.0, 0.05, 0.5, source="test: a family entry")


def _traj(i=0, model="acme-1", family="other", sizes=(20000, *[400] * 9), needs=None):
    t = crafted(list(sizes), needs if needs is not None else {5: [0]}, family=family)
    t.model_raw, t.traj_id, t.task_id = model, f"acme/{i}-{model}", f"task{i}"
    return t


def _quiet(f, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown model priced as the default family warns once
        return f(*a, **kw)


def test_training_plans_and_observes_an_unknown_model_at_the_users_prices():
    ep = compile_episode(_traj())
    pol = LearnedPolicyConfig(**TINY, prices=ACME_JSON).create()
    cfg = _cost_config(pol)
    assert cfg.prices_of(ep) == ACME
    cache: dict = {}
    samples = collect(pol, [ep], mode="oracle", cache=cache, progress=False)
    assert samples
    # the oracle's targets are its plan at the user's prices, which differs from the default's
    want, default = plan(ep, CostConfig(prices=ACME)), _quiet(plan, ep, CostConfig())
    assert (want != default).any()
    assert np.array_equal(cache[ep.traj_id], want)
    # the economics each sample carries: cache read, cache write and output relative to input, log input
    G = len(GLOBAL_FEATURES)
    for s in samples:
        assert s.glob[G : G + 4] == pytest.approx([0.1, 10.0, 4.0, math.log(4.0)], rel=1e-6)


def test_the_threshold_table_is_chosen_at_the_users_prices(tmp_path):
    eps = [compile_episode(_traj(i)) for i in range(8)]
    with_table = LearnedPolicyConfig(**TINY, prices=ACME_JSON).create()
    rep = with_table.fit(episodes=eps, progress=False)
    assert set(rep["thresholds"]["regime"]) == {"write premium"}
    without = LearnedPolicyConfig(**TINY).create()
    rep = _quiet(without.fit, episodes=eps, progress=False)
    assert set(rep["thresholds"]["regime"]) == {"discount, no write premium"}  # priced as gpt-4o
    # the checkpoint records the prices as given
    path = with_table.save(tmp_path / "ckpt")
    assert json.loads((path / "config.json").read_text())["config"]["prices"] == ACME_JSON
    assert LearnedPolicy.load(path).cfg.prices == ACME_JSON


def test_train_refuses_a_bad_price_table_in_one_line_before_reading_data(tmp_path, capsys):
    f = tmp_path / "prices.json"
    f.write_text('{"acme-1": {"input": 4}}')
    missing = tmp_path / "no-such-dataset"  # never reached: the prices are checked first
    assert main(["train", "--dataset", str(missing), "-o", str(tmp_path / "c"), "--prices", str(f)]) == 2
    err = capsys.readouterr().err
    assert "--prices" in err and "needs input and output" in err and err.count("\n") == 1, err
    assert not (tmp_path / "c").exists()
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--prices" in capsys.readouterr().out


# (model, family, the user's table, the prices that must bill it)
CASES = [
    ("acme-1", "other", None, PRICES[DEFAULT_FAMILY]),  # unknown, no table: the default family
    ("acme-1", "other", {"acme-1": ACME}, ACME),
    ("acme/ACME-1", "other", {"acme-1": ACME}, ACME),  # provider prefix, any case
    ("acme-1", "other", {"other": CHEAP}, CHEAP),  # by family
    ("gpt-4o-2024-05-13", "gpt-4o", None, VERSION_PRICES["gpt-4o-2024-05-13"]),  # versioned
    ("gpt-4o-2024-05-13", "gpt-4o", {"acme-1": ACME}, VERSION_PRICES["gpt-4o-2024-05-13"]),  # no entry
    ("gpt-4o-2024-05-13", "gpt-4o", {"gpt-4o": CHEAP}, CHEAP),  # the user's family entry wins
    ("claude-opus-4-5-20251101", "claude-opus", None, VERSION_PRICES["claude-opus-4-5-20251101"]),
    ("claude-sonnet", "claude-sonnet", {"acme-1": ACME}, PRICES["claude-sonnet"]),  # known family
]


@pytest.mark.parametrize("model,family,table,want", CASES)
def test_every_site_resolves_the_same_prices(model, family, table, want):
    traj = _traj(model=model, family=family)
    ep = compile_episode(traj)
    cfg = CostConfig(price_table=table)
    assert _quiet(cfg.prices_of, ep) == want
    assert _quiet(Simulator, ep, cfg).prices == want
    assert _quiet(oracle_prices, ep, cfg) == want
    assert _quiet(episode_prices, {"episode": ep, "cost_config": cfg}) == want
    fixed = CostConfig(prices=want)
    assert _quiet(baseline_totals, ep, cfg).dollars == baseline_totals(ep, fixed).dollars
    env = ReplayEnv(trajectories=[traj], cost_config=cfg)
    obs, _ = _quiet(env.reset, options={"index": 0})
    assert np.array_equal(obs["prices"], price_vector(want))
    # evaluate, with the table in the cost config or given apart
    for kw in ({"cost_config": cfg}, {"prices": table}):
        runs = _quiet(evaluate, [traj], ["none", "last_n:n=2"], progress=False, threads=None, **kw)
        assert not any(r.error for r in runs)
        for r in runs:
            assert r.regime == cache_regime(want)
            assert r.base_dollars == baseline_totals(ep, fixed).dollars
        oracle = next(r for r in runs if r.policy == "oracle")
        same = _quiet(evaluate, [traj], ["none"], cost_config=fixed, progress=False, threads=None)
        assert oracle.dollars == next(r for r in same if r.policy == "oracle").dollars
    # an explicit override beats the table
    assert CostConfig(prices=CHEAP, price_table={model: ACME, family: ACME}).prices_of(ep) == CHEAP


def test_a_changed_table_is_a_changed_config_and_the_config_pickles():
    traj = _traj()
    cfg = CostConfig(price_table={"acme-1": ACME})
    sim = Simulator(compile_episode(traj), cfg)
    assert sim.cfg_snapshot() == sim._cfg_snapshot
    cfg.price_table = {"acme-1": CHEAP}  # ReplayEnv then builds a new Simulator rather than reuse this one
    assert sim.cfg_snapshot() != sim._cfg_snapshot
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.price_table == {"acme-1": CHEAP}
    # the config holds its own copy: the caller's dict may change without changing the bill
    mine = {"acme-1": ACME}
    cfg = CostConfig(price_table=mine)
    mine["acme-1"] = CHEAP
    assert cfg.prices_of(compile_episode(traj)) == ACME


def _doubled_gemini() -> dict:
    model = "google/gemini-3-pro-preview"
    base = prices_for("gemini-3-pro", model)
    return {model: {k: 2 * getattr(base, k) for k in ("input", "output", "cache_read", "cache_write")}}


@pytest.mark.slow
def test_evaluate_prices_with_workers_matches_one_process():
    table = load_price_table(json.dumps(_doubled_gemini()))
    kw = dict(model_family="gemini-3-pro", progress=False)
    specs = ["none", "last_n:n=3"]
    one = evaluate(None, specs, prices=table, **kw)
    two = evaluate(None, specs, cost_config=CostConfig(price_table=table), workers=2, **kw)
    assert len(one) == len(two) > 0 and not any(r.error for r in one)
    assert [asdict(r) for r in two] == [asdict(r) for r in one]
    plain = evaluate(None, specs, **kw)
    for a, b in zip(one, plain):
        assert a.base_dollars == pytest.approx(2 * b.base_dollars, rel=1e-9)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # with the other tests that start Ray (tests/policies/test_evaluate_ray.py)
def test_evaluate_cli_prices_with_ray_matches_local(capsys):
    pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    args = ["evaluate", "-p", "none", "--by", "model_family", "--json", "--bootstrap", "10", "--quiet",
            "--model-family", "gemini-3-pro", "--prices", json.dumps(_doubled_gemini())]  # fmt: skip
    assert main(args) == 0
    local = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert main([*args, "--backend", "ray", "--workers", "2"]) == 0
    remote = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert remote.keys() == local.keys()
    for k in local:
        assert remote[k]["dollars"] == local[k]["dollars"], k


def test_fine_tuning_takes_the_commands_prices_else_the_checkpoints(tmp_path):
    import argparse

    from dtoc_rl.cli.train import _from_checkpoint, _init_from_takes

    path = LearnedPolicyConfig(**TINY, prices=ACME_JSON).create().save(tmp_path / "ckpt")
    args = argparse.Namespace(init_from=path, dataset=None)
    policy, _ = _from_checkpoint(path, args, LearnedPolicyConfig(rl_updates=1), _init_from_takes)
    assert policy.cfg.prices == ACME_JSON  # the checkpoint's own
    other = json.dumps({"acme-1": {"input": 1, "output": 2}})
    policy, _ = _from_checkpoint(
        path, args, LearnedPolicyConfig(rl_updates=1, prices=other), _init_from_takes
    )
    assert policy.cfg.prices == other and _cost_config(policy).prices_of(compile_episode(_traj())).input == 1
