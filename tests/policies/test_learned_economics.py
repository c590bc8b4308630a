"""The learned policy's economics: price features, the validation threshold table (abstaining where
nothing pays), and dollar-weighted imitation."""

import dataclasses
import json
import re
import warnings

import numpy as np
import pytest

from dtoc_rl.data.dataset import dataset_tasks
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.learned import (
    ECON_ITEM_FEATURES,
    CheckpointError,
    LearnedPolicy,
    economics,
    price_vector,
    table_threshold,
)
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import (
    FALLBACK_LADDER,
    THRESHOLD_GRID,
    dollar_weights,
    fallback_table,
    retune,
    threshold_table,
)
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.pricing import PRICES

from .crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=3, dagger_rounds=0)
_F = {f: i for i, f in enumerate(ITEM_FEATURES)}
_E = {f: i for i, f in enumerate(ECON_ITEM_FEATURES)}


def _env(family="claude-sonnet", sizes=(4000,) * 8):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = compile_episode(crafted(list(sizes), family=family))
    return ReplayEnv(trajectories=[ep], max_items=16, expose_episode=True)


def _hideable(obs):
    # what a threshold of 1 hides: every visible output a call has read (the newest, age 0, stays)
    return obs["disable_mask"] * (obs["items"][:, _F["age"]] >= 1)


def _obs_after(env, calls=5):
    obs, info = env.reset(seed=0)
    first = info
    for _ in range(calls):
        obs, *_ = env.step({"enable": np.zeros(16, np.int8), "disable": np.zeros(16, np.int8)})
    return obs, first


# ------------------------------------------------------------------------------ economics features


def test_economics_prices_the_suffix_and_the_reads_of_each_output():
    # three visible outputs of 1k, 2k, 3k tokens, oldest first; 10k active tokens at call 4
    items = np.zeros((4, len(ITEM_FEATURES)), np.float32)
    items[:3, _F["est_tokens_k"]] = [1, 2, 3]
    items[:3, _F["visible"]] = 1
    items[:3, _F["age"]] = [3, 2, 1]
    mask = np.array([1, 1, 1, 0], bool)
    glob = np.zeros(len(GLOBAL_FEATURES), np.float32)
    glob[0], glob[2] = 10.0, 4  # active_tokens_k, step
    anthropic = price_vector(PRICES["claude-sonnet"])  # read 10%, write 125% of input
    per_item, per_call = economics(items, mask, glob, anthropic)
    # the rest of the prompt (4k tokens) is spread over 4 calls: 1k per call after each output
    np.testing.assert_allclose(per_item[:3, _E["suffix_k"]], [5 + 3, 3 + 2, 0 + 1])
    np.testing.assert_allclose(per_item[:3, _E["prompt_share"]], [0.1, 0.2, 0.3], rtol=1e-6)
    # keeping an output visible: its reads over the calls expected to remain (4) at 10% of input
    np.testing.assert_allclose(
        per_item[:3, _E["keep_cost_rel"]], np.array([1, 2, 3]) * 4 * 0.1 / 10, rtol=1e-5
    )
    # a change re-writes the suffix at (125% - 10%) of input
    np.testing.assert_allclose(
        per_item[:3, _E["change_cost_rel"]], np.array([8, 5, 1]) * 1.15 / 10, rtol=1e-5
    )
    assert not per_item[3].any()  # padding stays zero
    np.testing.assert_allclose(per_call[:4], [0.1, 1.25, 5.0, np.log(3.0)], rtol=1e-6)
    # no cache discount: a change is free, keeping costs full reads
    doubao = price_vector(PRICES["doubao-pro"])
    per_item, _ = economics(items, mask, glob, doubao)
    assert not per_item[:3, _E["change_cost_rel"]].any()
    np.testing.assert_allclose(per_item[:3, _E["keep_cost_rel"]], np.array([1, 2, 3]) * 4 / 10, rtol=1e-5)


def test_the_network_sees_the_prices_the_episode_is_billed_at():
    pol = LearnedPolicyConfig(**TINY, seed=2).create()
    obs, info = _obs_after(_env("claude-sonnet"))
    obs = {k: v for k, v in obs.items() if k != "prices"}  # only the family id: its family's prices
    by_family = pol.probs(obs)
    cheap = pol.probs(obs, price_vector(PRICES["deepseek-chat"]))
    assert not np.allclose(by_family, cheap)  # one network, priced per model
    np.testing.assert_array_equal(pol.probs(obs, price_vector(PRICES["claude-sonnet"])), by_family)
    pol.reset(info)  # the episode's prices, taken at reset
    np.testing.assert_array_equal(pol._prices, price_vector(PRICES["claude-sonnet"]))
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    np.testing.assert_allclose(pol.probs(batch)[0], by_family, atol=1e-6)


# ------------------------------------------------------------------------------ threshold table


def _row(family, regime, base, dollars, misses, steps=100):
    return {"family": family, "regime": regime, "steps": steps, "base": base, "dollars": dollars,
            "misses": misses}  # fmt: skip


GRID = (0.1, 0.3, 0.5)
DISC, PREM = "discount, no write premium", "write premium"


def test_threshold_table_saves_the_most_within_the_miss_budget_and_abstains_where_nothing_saves():
    rows = (
        # gpt-4o: 0.5 saves most but misses 3/100; 0.3 saves within the budget
        [_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 1, 3]) for _ in range(10)]
        # claude: every threshold loses money -> abstain
        + [_row("claude-sonnet", PREM, 10.0, [10.2, 10.5, 11.0], [0, 0, 1]) for _ in range(10)]
        # too few runs for an entry of its own: its regime's entry applies
        + [_row("deepseek-chat", DISC, 1.0, [0.5, 0.4, 0.3], [0, 0, 0]) for _ in range(3)]
    )
    table = threshold_table(rows, GRID, budget=1.0, min_family=10)
    assert table["family"] == {"gpt-4o": 0.3, "claude-sonnet": 0.0}
    assert table["regime"] == {DISC: 0.3, PREM: 0.0}
    assert table["validation"]["family"]["gpt-4o"]["misses_per_100"] == pytest.approx(1.0)
    # a stricter budget picks the lower threshold; a budget nothing meets abstains
    assert threshold_table(rows, GRID, budget=0.5, min_family=10)["family"]["gpt-4o"] == 0.1
    assert threshold_table(rows, GRID, budget=1.0, min_family=3)["family"]["deepseek-chat"] == 0.5
    assert json.loads(json.dumps(table)) == table  # stored as JSON beside the weights


def test_a_regime_with_few_runs_is_never_bolder_than_the_pooled_threshold():
    rows = (
        [_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 1, 3]) for _ in range(10)]  # pooled: 0.3
        # 4 write-premium runs that save most at 0.5 with no miss seen: too few to trust the boldest
        + [_row("claude-sonnet", PREM, 10.0, [9.9, 9.5, 9.0], [0, 0, 0]) for _ in range(4)]
    )
    table = threshold_table(rows, GRID, budget=1.0, min_family=10)
    assert table["default"] == 0.3
    assert table["regime"][PREM] == 0.3
    assert table["validation"]["regime"][PREM]["capped_at_pooled"] == 0.5
    # with enough runs the regime keeps its own choice
    assert threshold_table(rows, GRID, budget=1.0, min_family=4)["regime"][PREM] == 0.5
    # a few runs that lose everywhere still abstain: caution needs no large sample
    losing = rows[:10] + [_row("claude-sonnet", PREM, 10.0, [10.2, 10.5, 11.0], [0, 0, 0]) for _ in range(4)]
    assert threshold_table(losing, GRID, budget=1.0, min_family=10)["regime"][PREM] == 0.0


def test_a_threshold_whose_misses_sit_in_a_few_runs_is_judged_by_their_spread_not_their_mean():
    # 0.3: 10 misses in one run of ten (a mean of 1 per 100 calls, within the budget, but most
    # resamples of the runs land above it); 0.1: misses spread evenly, mean 0.5
    rows = [_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 10 if k == 0 else 0, 30]) for k in range(10)]
    for k, r in enumerate(rows):
        r["misses"][0] = k % 2
    entry = threshold_table(rows, GRID, budget=1.0, min_family=10)["validation"]["family"]["gpt-4o"]
    by_t = {o["threshold"]: o for o in entry["options"]}
    assert by_t[0.3]["misses_per_100"] == pytest.approx(1.0) and by_t[0.3]["misses_high"] > 1.0
    assert by_t[0.1]["misses_high"] <= 1.0
    assert entry["threshold"] == 0.1


def test_a_threshold_is_held_to_every_harness_with_enough_tune_runs():
    # gpt-4o on two harnesses: the pool (mostly A, no misses) allows 0.5, but B's five runs miss 2 per
    # 100 calls there; held to every harness with >= 5 runs, the entry falls to B's 0.3
    rows = [{**_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 0, 0]), "source": "A"} for _ in range(20)]
    rows += [{**_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 0, 2]), "source": "B"} for _ in range(5)]
    assert threshold_table(rows, GRID, budget=1.0, min_family=10)["family"]["gpt-4o"] == 0.5
    table = threshold_table(rows, GRID, budget=1.0, min_family=10, min_source=5)
    assert table["family"]["gpt-4o"] == table["regime"][DISC] == table["default"] == 0.3
    entry = table["validation"]["family"]["gpt-4o"]
    assert entry["by_source"] == {"A": 0.5, "B": 0.3} and entry["lowered_from"] == 0.5
    # its figures are the lowered threshold's: 0.3 saves 2 of 10 per run, with no miss
    assert entry["saved_fraction"] == pytest.approx(0.2) and entry["misses_per_100"] == 0.0
    # a harness with fewer runs than min_source has no say
    assert threshold_table(rows, GRID, budget=1.0, min_family=10, min_source=6)["family"]["gpt-4o"] == 0.5


def test_a_regime_cap_can_be_set_apart_from_the_family_minimum():
    rows = [_row("gpt-4o", DISC, 10.0, [9.5, 8.0, 7.0], [0, 1, 3]) for _ in range(10)]  # pooled: 0.3
    rows += [_row("claude-sonnet", PREM, 10.0, [9.9, 9.5, 9.0], [0, 0, 0]) for _ in range(20)]
    no_families = threshold_table(rows, GRID, budget=1.0, min_family=10**9, min_regime=10)
    assert no_families["family"] == {} and no_families["regime"][PREM] == 0.5  # 20 runs: not capped
    assert threshold_table(rows, GRID, budget=1.0, min_family=10**9)["regime"][PREM] == no_families["default"]


def test_table_lookup_family_then_regime_then_pooled():
    table = {"family": {"gpt-4o": 0.2}, "regime": {PREM: 0.0, DISC: 0.1}, "default": 0.3}
    assert table_threshold(table, "gpt-4o", PRICES["gpt-4o"]) == 0.2
    assert table_threshold(table, "some-new-model", PRICES["claude-opus"]) == 0.0  # priced: its regime
    assert table_threshold(table, "some-new-model", PRICES["doubao-pro"]) == 0.3  # no entry: pooled
    assert table_threshold(None, "gpt-4o", PRICES["gpt-4o"]) is None


def test_policy_uses_the_table_by_default_abstains_with_zero_and_threshold_overrides(tmp_path):
    pol = LearnedPolicyConfig(**TINY, seed=1).create()
    pol.set_threshold_table({"family": {"claude-sonnet": 0.0}, "regime": {}, "default": 1.0})
    obs, info = _obs_after(_env("claude-sonnet"))
    assert obs["disable_mask"].sum() >= 4
    pol.reset(info)
    assert not pol.act(obs)["disable"].any()  # abstains on claude-sonnet
    back = LearnedPolicy.load(pol.save(tmp_path / "ckpt"))
    assert back.cfg.threshold is None and back.config() == {"threshold": "table"}
    back.reset(info)
    assert not back.act(obs)["disable"].any()
    back.reset({})  # no model named: the observation's family id decides
    assert not back.act(obs)["disable"].any()
    obs4o, info4o = _obs_after(_env("gpt-4o"))
    back.reset(info4o)  # no family entry, no regime entry: the pooled 1.0 hides every visible output
    np.testing.assert_array_equal(back.act(obs4o)["disable"], _hideable(obs4o))
    back.cfg.threshold = 1.0  # an explicit threshold overrides the table
    back.reset(info)
    np.testing.assert_array_equal(back.act(obs)["disable"], _hideable(obs))
    b = back.act_batch({k: np.stack([v, v]) for k, v in obs.items()})
    np.testing.assert_array_equal(b["disable"][1], _hideable(obs))


def test_an_abstaining_entry_falls_back_to_the_hide_big_rung_that_pays_within_the_budget():
    rung = len(FALLBACK_LADDER)
    table = {"family": {"qwen-coder": 0.0, "gpt-4o": 0.2}, "regime": {DISC: 0.0, PREM: 0.0}, "default": 0.0}
    saves_at_3 = [10.0, 10.0, 9.0] + [8.0] * (rung - 3)  # rungs 4+ save more but miss 3 per 100
    misses = [0, 0, 0] + [3] * (rung - 3)
    rows = [_row("qwen-coder", DISC, 10.0, saves_at_3, misses) for _ in range(10)]
    rows += [_row("gpt-4o", PREM, 10.0, [10.5] * rung, [0] * rung) for _ in range(10)]  # no rung saves
    fb = fallback_table(table, rows, budget=1.0)
    assert fb["family"] == {"qwen-coder": dict(zip(("tokens", "age"), FALLBACK_LADDER[2]))}
    assert fb["regime"] == {DISC: fb["family"]["qwen-coder"]}  # gpt-4o's entry does not abstain
    assert PREM not in fb["regime"]  # a regime where no rung saves gets none
    assert fb["default"] == fb["family"]["qwen-coder"]  # the pooled runs: rung 3 still pays most
    few = fallback_table(table, rows, budget=1.0, min_runs=11)  # each entry has 10 tune runs, the pool 20
    assert few["family"] == few["regime"] == {} and few["default"] == fb["default"]
    assert fallback_table(table, rows, budget=1.0, min_runs=10) == fb


def test_the_policy_runs_its_fallback_rule_where_its_table_abstains(tmp_path):
    from dtoc_rl.policies.baselines import HideBig

    pol = LearnedPolicyConfig(**TINY, seed=1).create()
    rule = {"tokens": 1000, "age": 2}
    fallback = {"family": {"claude-sonnet": rule}, "regime": {}, "default": None}
    pol.set_threshold_table(
        {"family": {"claude-sonnet": 0.0}, "regime": {}, "default": 0.0, "fallback": fallback}
    )
    obs, info = _obs_after(_env("claude-sonnet"))
    want = HideBig(**rule).act(obs)
    assert want["disable"].any()
    back = LearnedPolicy.load(pol.save(tmp_path / "ckpt"))
    for p in (pol, back):
        p.reset(info)
        np.testing.assert_array_equal(p.act(obs)["disable"], want["disable"])
        p.reset({})  # from the observation's family id
        np.testing.assert_array_equal(p.act(obs)["disable"], want["disable"])
        b = p.act_batch({k: np.stack([v, v]) for k, v in obs.items()})
        np.testing.assert_array_equal(b["disable"][1], want["disable"])
    obs4o, info4o = _obs_after(_env("gpt-4o"))
    back.reset(info4o)  # the pooled entry abstains without a rule: everything stays visible
    assert not back.act(obs4o)["disable"].any()
    back.cfg.threshold = 1.0  # a fixed threshold: the network, no fallback
    back.reset(info)
    np.testing.assert_array_equal(back.act(obs)["disable"], _hideable(obs))
    path = back.save(tmp_path / "bad")
    meta = json.loads((path / "config.json").read_text())
    meta["meta"]["thresholds"]["fallback"]["family"]["claude-sonnet"] = {"tokens": 1000, "age": 0}
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="not a threshold table"):
        LearnedPolicy.load(path)


def test_a_damaged_threshold_table_is_a_clear_error(tmp_path):
    pol = LearnedPolicyConfig(**TINY).create()
    pol.set_threshold_table({"family": {"gpt-4o": 0.2}, "regime": {}, "default": 0.1})
    path = pol.save(tmp_path / "ckpt")
    good = json.loads((path / "config.json").read_text())
    meta = json.loads((path / "config.json").read_text())
    meta["meta"]["thresholds"]["family"]["gpt-4o"] = "high"
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="not a threshold table"):
        LearnedPolicy.load(path)
    del meta["econ_item_features"]  # a checkpoint from before the economics features
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="different econ item features"):
        LearnedPolicy.load(path)
    for key, value in (("families", None), ("item_features", "est_tokens_k"), ("tool_categories", [1, 2])):
        (path / "config.json").write_text(json.dumps({**good, key: value}))
        with pytest.raises(CheckpointError, match=f"'{key}' is not a list of names"):
            LearnedPolicy.load(path)


def test_fit_stores_a_validated_threshold_table(tmp_path):
    pol = LearnedPolicyConfig(**TINY).create()
    rep = pol.fit(None, progress=False)
    table = rep["thresholds"]
    assert table["budget_misses_per_100"] == 1.0
    pooled = table["validation"]["pooled"]
    assert pooled["threshold"] == table["default"]
    assert pooled["misses_per_100"] <= 1.0 and pooled["trajectories"] == rep["tune_episodes"]
    # the held-out half of the validation tasks is never used to choose a threshold
    assert rep["val_tasks"] and rep["tune_tasks"] and not set(rep["val_tasks"]) & set(rep["tune_tasks"])
    # the tasks it trained on are listed too, apart from both (so a task in none of them is unseen)
    train, other = set(rep["train_tasks"]), set(rep["val_tasks"]) | set(rep["tune_tasks"])
    assert train and not train & other and len(train) + len(other) == len(dataset_tasks(bundled_dataset()))
    assert [o["threshold"] for o in pooled["options"]] == list(THRESHOLD_GRID)
    back = LearnedPolicy.load(pol.save(tmp_path / "c"))
    assert back.meta["thresholds"]["regime"] == table["regime"]
    # chosen again under a stricter budget, on the same tune tasks: every entry within it
    back.cfg.miss_budget = 0.0
    again = retune(back, None)
    assert again["budget_misses_per_100"] == 0.0 and back.meta["thresholds"] is again
    assert again["validation"]["pooled"]["trajectories"] == rep["tune_episodes"]
    for entry in [*again["validation"]["regime"].values(), again["validation"]["pooled"]]:
        assert entry["misses_per_100"] == 0.0
    with pytest.raises(ValueError, match="not the data it was trained on"):
        retune(back, episodes=load_episodes(None, model_family="gpt-4o"))


# ------------------------------------------------------------------------------ dollar weights


def test_dollar_weights_price_each_wrong_decision():
    items = np.zeros((3, len(ITEM_FEATURES)), np.float32)
    items[:, _F["visible"]] = [1, 1, 0]
    econ = np.zeros((3, len(ECON_ITEM_FEATURES)), np.float32)
    econ[:, _E["prompt_share"]] = 0.1
    econ[:, _E["change_cost_rel"]] = [0.5, 0.5, 0.5]
    prices = price_vector(PRICES["claude-sonnet"])
    target = np.array([1, 0, 0], np.float32)
    needed = np.array([True, False, False])
    w = dollar_weights(items, econ, prices, target, needed, np.zeros(3, bool), calls_left=20, need_weight=4.0)
    assert w[0] == pytest.approx(4.0 * (0.1 + 0.1))  # a miss: a cached re-read plus the output again
    assert w[1] == pytest.approx(0.1 * 20 * 0.1)  # left visible: its reads over the 20 calls left
    assert w[2] == pytest.approx(0.1 * 20 * 0.1 + 0.5)  # shown again: the reads and the re-write
    fewer = dollar_weights(
        items, econ, prices, target, needed, np.zeros(3, bool), calls_left=2, need_weight=4.0
    )
    assert fewer[1] < w[1]  # near the end of a run, a visible output costs little
    later = dollar_weights(
        items, econ, prices, np.ones(3, np.float32), np.zeros(3, bool), np.array([True, False, False]),
        calls_left=5, need_weight=4.0,
    )  # fmt: skip
    assert later[0] == pytest.approx(0.5 + 0.5 * 4.0 * 0.2) and later[1] == pytest.approx(0.5)


def test_an_unknown_model_takes_its_regime_entry_from_the_prices_in_the_observation():
    # the live path: no reset info, family id 0 ("other"), the caller's prices in obs["prices"]
    pol = LearnedPolicyConfig(**TINY, seed=1).create()
    pol.set_threshold_table({"family": {}, "regime": {PREM: 0.0, DISC: 1.0}, "default": 1.0})
    obs, _ = _obs_after(_env("gpt-4o"))
    obs = {**obs, "family": np.int64(0)}
    obs["prices"] = price_vector(PRICES["claude-opus"])  # write premium: abstain
    assert not pol.act(obs)["disable"].any()
    obs["prices"] = price_vector(PRICES["deepseek-chat"])  # discount: 1.0 hides every visible output
    np.testing.assert_array_equal(pol.act(obs)["disable"], _hideable(obs))
    b = pol.act_batch({k: np.stack([v, v]) for k, v in obs.items()})
    np.testing.assert_array_equal(b["disable"][0], _hideable(obs))


@pytest.mark.parametrize("miss", ["reread", "fail"])
def test_the_threshold_sweep_decides_as_the_policy_acts_in_evaluation(miss):
    # thresholds are chosen on sweep_thresholds' replays, so each of its columns must be what the policy
    # does with that threshold fixed: the same dollars and misses, with the outputs a re-run copied
    # after a miss left hidden in both (a network that hides everything, then asks for all of it back);
    # with miss="fail" the bolder threshold's run ends first, and the others go on
    from dtoc_rl.policies.learned_trainer import _cost_config, _replay, sweep_thresholds

    class Flapping(LearnedPolicy):
        def probs(self, obs, prices=None):
            step = np.asarray(obs["globals"])[..., 2]
            p = np.where(step % 3 == 2, 0.9, 0.01).astype(np.float32)
            return np.broadcast_to(p[..., None], np.shape(obs["item_mask"])).copy()

    eps = [e for e in load_episodes() if e.n_calls > 8][:6]
    grid = (0.005, 0.5)
    pol = Flapping(LearnedPolicyConfig(**TINY))
    cfg = dataclasses.replace(_cost_config(pol), miss=miss)
    rows = sweep_thresholds(pol, eps, cfg, grid)
    copied = 0
    for ep, row in zip(eps, rows):
        for i, t in enumerate(grid):
            pol.cfg.threshold = t
            info = _replay(pol, ep, cfg, pol.cfg.max_items)
            copied += int(np.asarray(info.get("item_copied", [])).sum())
            assert row["dollars"][i] == pytest.approx(info["totals"]["dollars"], rel=1e-9)
            assert row["misses"][i] == info["totals"]["misses"]
    assert sum(r["misses"][1] for r in rows) > 0  # the case the rule is for occurred
    if miss == "reread":
        assert copied > 0
    else:  # a bold threshold failed a run that the cautious one finished
        assert any(r["misses"][1] and not r["misses"][0] for r in rows)


def test_the_miss_bootstrap_draws_tasks_not_runs():
    from dtoc_rl.policies.learned_trainer import _choose

    # ten runs of task A miss 1.6 times per 100 calls at threshold 0.3, ten runs of task B never: drawn
    # as twenty runs the mean misses look well known (0.8), drawn as the two tasks they are, not at all
    def run(task, misses):
        return {"task": task, "base": 1.0, "steps": 1000, "dollars": [0.9, 0.5], "misses": [0, misses]}

    rows = [run("A", 16) for _ in range(10)] + [run("B", 0) for _ in range(10)]
    assert _choose(rows, [0.1, 0.3], 1.0)["threshold"] == 0.1
    runs = [{k: v for k, v in r.items() if k != "task"} for r in rows]  # each run a task of its own
    assert _choose(runs, [0.1, 0.3], 1.0)["threshold"] == 0.3


def test_tuning_holds_fallback_rules_to_min_family_val_tune_runs(monkeypatch):
    from dtoc_rl.policies import learned_trainer as lt

    given = {}
    real = lt.fallback_table

    def spy(*args, **kwargs):
        given.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(lt, "fallback_table", spy)
    pol = LearnedPolicyConfig(**TINY, min_family_val=7).create()
    lt._tune(pol, load_episodes(None)[:3], lt._cost_config(pol))
    assert given["min_runs"] == 7  # an abstaining entry of fewer tune runs gets no rule
    assert pol.meta["thresholds"]["fallback"]["default"] is None  # 3 tune runs < 7


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [("n_layers", 1_000_000_000, "n_layers 1000000000 does not fit the weights, which hold"),
     ("d_model", 1_048_576, "d_model 1048576 does not fit the weights, which hold"),
     ("word_vocab", 4096, "word_vocab 4096 does not fit the weights, which hold"),
     ("max_items", 10**12, "max_items 1000000000000 is not in [1, 65536]")],
)  # fmt: skip
def test_a_config_asking_for_a_network_its_weights_do_not_hold_is_refused_before_it_is_built(
    tmp_path, field, value, said
):
    path = LearnedPolicyConfig(**TINY).create().save(tmp_path / "ckpt")
    meta = json.loads((path / "config.json").read_text())
    meta["config"][field] = value
    if field == "d_model":
        meta["config"]["n_heads"] = 1
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=re.escape(said)):
        LearnedPolicy.load(path)
