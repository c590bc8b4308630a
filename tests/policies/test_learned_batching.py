"""Batched hides: the rule that times hides by price (best_batch), shared by cache_clear and the
learned policy's ``batching="pays"``."""

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES, price_vector
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.baselines import best_batch, to_action
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.sim.pricing import CACHE_RULES, PRICES

_F = {f: i for i, f in enumerate(ITEM_FEATURES)}


def _brute(cand, freed, prompt_from, remaining, read, rewrite, at_least=0.0, anyway=0.0):
    best, best_j = 0.0, -1
    for j in range(len(cand)):
        if not cand[j]:
            continue
        f = sum(freed[i] for i in range(j, len(cand)) if cand[i])
        if f < at_least:
            continue
        net = f * remaining * read - max(prompt_from[j] - f - anyway, 0.0) * rewrite
        if net > best:
            best, best_j = net, j
    return best_j


def test_best_batch_is_the_batch_of_largest_positive_net_saving():
    rng = np.random.default_rng(0)
    for _ in range(400):
        n = int(rng.integers(1, 9))
        cand = rng.random(n) < 0.6
        freed = rng.integers(0, 5000, n).astype(float)
        prompt_from = np.cumsum(rng.integers(0, 20000, n)[::-1])[::-1].astype(float) + freed
        args = (
            cand,
            freed,
            prompt_from,
            float(rng.integers(1, 50)),
            0.1,
            float(rng.choice([0.0, 0.9, 1.15])),
        )
        kw = dict(at_least=float(rng.choice([0, 3000])), anyway=float(rng.choice([0, 10000])))
        assert best_batch(*args, at_least=kw["at_least"], rewritten_anyway=kw["anyway"]) == _brute(
            *args, **kw
        )


def test_best_batch_waits_when_the_rewrite_costs_more_than_the_reads_it_saves():
    cand = np.array([True, False, True])
    freed = np.array([1000.0, 0.0, 1000.0])
    prompt_from = np.array([60000.0, 40000.0, 20000.0])
    # 2k tokens freed for 2 calls at 10% of input: 400; the re-write of ~58k at 115%: far more
    assert best_batch(cand, freed, prompt_from, 2, 0.1, 1.15) == -1
    # no write premium and no discount (a model without a cache): every hide pays at once
    assert best_batch(cand, freed, prompt_from, 2, 1.0, 0.0) == 0
    # the same hides late in a long run, with little prompt after them: they pay
    assert best_batch(cand, freed, np.array([3000.0, 2000.0, 1000.0]), 50, 0.1, 1.15) == 0


def _obs(tokens_k, visible, step, active_k):
    n = 8
    items = np.zeros((n, len(ITEM_FEATURES)), np.float32)
    m = len(tokens_k)
    items[:m, _F["est_tokens_k"]] = tokens_k
    items[:m, _F["visible"]] = visible
    items[:m, _F["age"]] = np.arange(m)[::-1] + 1
    glob = np.zeros(len(GLOBAL_FEATURES), np.float32)
    glob[0], glob[2], glob[3] = active_k, step, m  # active_tokens_k, step, stored
    return {
        "items": items,
        "item_tool": np.zeros(n, np.int64),
        "item_mask": np.arange(n) < m,
        "globals": glob,
        "family": np.int64(0),
    }


@pytest.mark.parametrize("family", ["claude-sonnet", "gpt-5", "doubao-pro"])
def test_pays_keeps_visible_what_the_threshold_keeps_and_hides_a_suffix_of_its_candidates(family):
    prices = price_vector(PRICES[family])
    pays = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="pays").create()
    off = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off").create()
    rng = np.random.default_rng(1)
    for step, active in itertools.product((1, 5, 40), (10.0, 100.0)):
        obs = _obs(rng.uniform(0.1, 6, 6), rng.random(6) < 0.8, step, active)
        probs = rng.random(8).astype(np.float32)
        plain = off.want_visible(obs, probs, 0.5, prices)
        timed = pays.want_visible(obs, probs, 0.5, prices)
        assert (timed >= plain).all()  # never hides what the threshold keeps
        vis = obs["items"][:, _F["visible"]] > 0.5
        cand = obs["item_mask"] & vis & ~plain
        hidden = cand & ~timed
        if hidden.any():  # the batch: every candidate from its first slot on
            j = int(np.flatnonzero(hidden)[0])
            assert (hidden == cand & (np.arange(8) >= j)).all()


def test_pays_waits_on_a_write_premium_early_in_a_run_and_acts_without_one():
    obs = _obs([2.0, 2.0, 2.0], [1, 1, 1], step=1, active_k=80.0)
    probs = np.array([0.0, 0.0, 0.9] + [0.0] * 5, np.float32)  # the two oldest would be hidden
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create()
    assert pol.cfg.batching == "pays"
    claude = pol.want_visible(obs, probs, 0.5, price_vector(PRICES["claude-sonnet"]))
    assert claude[:3].all()  # 4k tokens for one more call do not pay a ~78k-token re-write
    nocache = pol.want_visible(obs, probs, 0.5, price_vector(PRICES["doubao-pro"]))
    assert (nocache[:3] == [False, False, True]).all()
    # abstaining (threshold 0) keeps everything, whatever the network says
    assert pol.want_visible(obs, probs, 0.0, price_vector(PRICES["doubao-pro"]))[:3].all()


def test_act_batch_times_each_row_by_its_own_prices_whatever_episode_was_reset_last():
    # the same three outputs early in a run: a write premium makes their hides wait, no cache does not
    rows = []
    for fam in ("claude-sonnet", "doubao-pro"):
        o = _obs([2.0, 2.0, 2.0], [1, 1, 1], step=1, active_k=80.0)
        o["prices"] = price_vector(PRICES[fam])
        rows.append(o)
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, threshold=1.0).create()  # hides all
    fresh = [pol.act(r) for r in rows]
    assert not fresh[0]["disable"].any() and fresh[1]["disable"][:3].all()
    pol.reset({"model_family": "claude-sonnet"})  # the last episode's prices must not leak into rows
    batch = pol.act_batch({k: np.stack([r[k] for r in rows]) for k in rows[0]})
    for i, a in enumerate(fresh):
        for k in ("enable", "disable"):
            assert (batch[k][i] == a[k]).all()


def test_a_checkpoint_saved_before_batching_loads_without_it(tmp_path):
    import json

    from dtoc_rl.policies.learned import LearnedPolicy

    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create()
    path = pol.save(tmp_path / "ck")
    meta = json.loads((path / "config.json").read_text())
    assert LearnedPolicy.load(path).cfg.batching == "pays"
    del meta["config"]["batching"]  # its thresholds were chosen for hides made at once
    (path / "config.json").write_text(json.dumps(meta))
    assert LearnedPolicy.load(path).cfg.batching == "off"


def test_batching_is_checked():
    with pytest.raises(ValueError, match="batching must be pays or off"):
        LearnedPolicyConfig(batching="sometimes")


def test_need_mode_targets_are_visible_while_a_later_call_needs_the_output():
    import warnings

    from dtoc_rl.data.schema import Need
    from dtoc_rl.policies.learned_trainer import _targets
    from dtoc_rl.sim.episode import compile_episode
    from dtoc_rl.sim.simulator import CostConfig

    from .crafted import crafted

    traj = crafted([4000] * 6, needs={3: [0], 5: [1]})
    traj.steps[4].needs.append(Need(step=2, kind="reaccess", evidence="cat f2"))  # never a miss
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = compile_episode(traj)
    V = _targets(ep, "need", CostConfig(), {})
    assert V.shape == (ep.n_calls, ep.n)
    # output 0 is needed by call 3, output 1 by call 5; the others only by the call that reads them first
    assert (V[:, 0] == (np.arange(6) <= 3)).all()
    assert (V[:, 1] == (np.arange(6) <= 5)).all()
    for k in range(2, 6):
        assert (V[:, k] == (np.arange(6) <= k + 1)).all()


def test_loss_weights_count_only_the_needs_that_would_be_misses():
    import warnings

    from dtoc_rl.data.schema import Need
    from dtoc_rl.policies.learned_trainer import collect
    from dtoc_rl.sim.episode import compile_episode

    from .crafted import crafted

    traj = crafted([4000] * 6, needs={3: [0]})
    traj.steps[4].needs.append(Need(step=2, kind="reaccess", evidence="cat f2"))  # never a miss
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = compile_episode(traj)
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, loss_weights="need").create()
    samples = collect(pol, [ep], mode="oracle")
    w = pol.cfg.need_weight
    # samples[t - 1] is the decision before call t
    assert samples[2].weight[0] == w  # output 0, needed (provenance) by call 3
    assert samples[3].weight[2] == 1.0  # output 2, re-accessed by call 4: hiding it is no miss


def test_size_weight_raises_the_threshold_for_large_outputs_and_lowers_it_for_small_ones():
    obs = _obs([0.2, 20.0], [1, 1], step=5, active_k=30.0)
    probs = np.array([0.08, 0.3] + [0.0] * 6, np.float32)
    prices = price_vector(PRICES["doubao-pro"])
    plain = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off").create()
    weighted = LearnedPolicyConfig(
        d_model=16, n_heads=2, n_layers=1, batching="off", size_weight=0.5
    ).create()
    assert list(plain.want_visible(obs, probs, 0.1, prices)[:2]) == [False, True]
    # 200 tokens: 0.1 * 0.1 ** 0.5 = 0.032 <= 0.08 (kept); 20,000: 0.1 * 10 ** 0.5 = 0.32 > 0.3 (hidden)
    assert list(weighted.want_visible(obs, probs, 0.1, prices)[:2]) == [True, False]
    # at 2,000 tokens the threshold is the plain one
    at_ref = _obs([2.0], [1], step=5, active_k=30.0)
    for p in (0.09, 0.11):
        row = np.array([p] + [0.0] * 7, np.float32)
        assert (
            weighted.want_visible(at_ref, row, 0.1, prices)[0]
            == plain.want_visible(at_ref, row, 0.1, prices)[0]
        )
    with pytest.raises(ValueError, match="size_weight"):
        LearnedPolicyConfig(size_weight=-1.0)


def test_a_policy_spec_checks_size_weight_threshold_and_miss_governor(tmp_path):
    from dtoc_rl.policies.registry import PolicySpecError, make_policy

    path = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create().save(tmp_path / "ck")
    pol = make_policy(f"learned:path={path},size_weight=0.5,threshold=0.2,miss_governor=0.5")
    assert (pol.cfg.size_weight, pol.cfg.threshold, pol.cfg.miss_governor) == (0.5, 0.2, 0.5)
    bad_specs = ("size_weight=-5", "size_weight=nan", "threshold=1.5", "size_weight=abc", "threshold=x")
    for bad in (*bad_specs, "miss_governor=0", "miss_governor=2"):
        with pytest.raises(PolicySpecError, match=bad.split("=")[0]):
            make_policy(f"learned:path={path},{bad}")


@pytest.mark.parametrize("batching", ["pays", "off"])
def test_an_output_copied_by_the_re_run_of_its_miss_is_not_restored(batching):
    # three hidden outputs the network wants back; the second was missed and its call run again (ReplayEnv
    # marks it copied), so restoring it too would pay for the same tokens twice
    obs = _obs([2.0, 2.0, 2.0, 1.0], [0, 0, 0, 1], step=10, active_k=20.0)
    obs["items"][1, _F["rereads"]] = 1
    probs = np.array([0.9, 0.9, 0.9, 0.9] + [0.0] * 4, np.float32)
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching=batching).create()
    prices = price_vector(PRICES["doubao-pro"])
    copied = np.arange(8) == 1
    assert pol.want_visible(obs, probs, 0.5, prices, copied)[:4].tolist() == [True, False, True, True]
    # abstaining (threshold 0: everything visible) brings the others back, not the copied one
    assert pol.want_visible(obs, None, 0.0, prices, copied)[:4].tolist() == [True, False, True, True]
    # without the mark (live: a restore the agent asks for) a missed output can come back
    assert pol.want_visible(obs, probs, 0.5, prices)[:4].all()
    obs["items"][1, _F["visible"]] = 1  # visible already (restored in place): it stays
    assert pol.want_visible(obs, probs, 0.5, prices, copied)[1]


def test_replay_env_marks_the_outputs_a_re_run_copied():
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.baselines import to_action

    eps = [e for e in load_episodes() if e.n_calls > 6][:20]
    seen = 0
    for i in range(len(eps)):
        env = ReplayEnv(trajectories=eps, max_items=32)
        obs, info = env.reset(options={"index": i})
        done = False
        while not done:
            assert "item_copied" not in info or env.sim.totals.appended_tokens > 0
            if "item_copied" in info:
                seen += 1
                slots = info["slot_steps"]
                assert info["item_copied"].tolist() == [k >= 0 and env.sim.copied[k] for k in slots]
            obs, _, done, _, info = env.step(to_action(obs, np.zeros(32, bool)))  # hide all: misses
    assert seen > 0


@pytest.mark.parametrize("batching", ["pays", "off"])
def test_an_output_no_call_has_read_yet_is_never_hidden(batching):
    # the newest output (age 0) answers the call just made: hidden now, the agent would get a placeholder
    # for its own tool call; the network's P(visible) does not decide it, the next decision does
    obs = _obs([8.0, 8.0, 8.0], [1, 1, 1], step=40, active_k=100.0)
    obs["items"][2, _F["age"]] = 0
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching=batching).create()
    prices = price_vector(PRICES["gpt-5"])
    want = pol.want_visible(obs, np.zeros(8, np.float32), 0.5, prices)
    assert want[:3].tolist() == [False, False, True]
    obs["items"][2, _F["age"]] = 1  # read by one call: the network decides
    assert not pol.want_visible(obs, np.zeros(8, np.float32), 0.5, prices)[:3].any()


def test_the_miss_governor_lowers_the_threshold_per_miss_over_the_budget():
    from dtoc_rl.policies.learned import misses_over_budget

    g = GLOBAL_FEATURES.index("misses")
    obs = _obs([2.0] * 4, [1, 1, 1, 1], step=50, active_k=20.0)
    probs = np.array([0.05, 0.15, 0.3, 0.5] + [0.0] * 4, np.float32)
    gov = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off", miss_governor=0.5).create()
    off = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off").create()
    for misses, over, hidden in ((0, 0, 3), (1, 1, 2), (2, 2, 1)):  # 50 calls at 1 per 100: 0.5 allowed
        obs["globals"][g] = misses
        assert misses_over_budget(obs["globals"], 1.0) == over
        # threshold 0.4 halved per miss over: 0.4, 0.2, 0.1 (outputs with P below it are hidden)
        assert int((~gov.want_visible(obs, probs, 0.4)[:4]).sum()) == hidden
        assert int((~off.want_visible(obs, probs, 0.4)[:4]).sum()) == 3  # off: the threshold as given
    obs["globals"][2] = 300  # the calls catch up: 2 misses in 300 calls is within 1 per 100
    assert misses_over_budget(obs["globals"], 1.0) == 0
    for bad in (1.5, 0.0):
        with pytest.raises(ValueError, match="miss_governor"):
            LearnedPolicyConfig(miss_governor=bad)


def test_a_decision_flushes_subnormals_and_restores_the_flag_after():
    from dtoc_rl.policies.cpu import flushed_denormals

    tiny = torch.tensor([1e-39], dtype=torch.float32)  # subnormal in float32
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormals")
    with flushed_denormals():
        assert float((tiny * 1.0)[0]) == 0.0
    assert float((tiny * 1.0)[0]) > 0.0
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create()
    pol.probs(_obs([2.0, 3.0], [1, 0], step=4, active_k=5.0))
    assert float((tiny * 1.0)[0]) > 0.0  # torch's default again after a decision
    torch.set_flush_denormal(True)  # a caller's own setting is kept
    try:
        pol.probs(_obs([2.0, 3.0], [1, 0], step=4, active_k=5.0))
        assert float((tiny * 1.0)[0]) == 0.0
    finally:
        torch.set_flush_denormal(False)


def test_before_a_cold_call_the_hides_the_network_asks_for_are_made_at_once():
    # early in a run on a write-premium model the batch does not pay (test above) ...
    obs = _obs([2.0, 2.0, 2.0], [1, 1, 1], step=1, active_k=80.0)
    probs = np.array([0.0, 0.0, 0.9] + [0.0] * 5, np.float32)
    prices = price_vector(PRICES["claude-sonnet"])
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create()
    assert pol.cfg.cold_hides and pol.want_visible(obs, probs, 0.5, prices)[:3].all()
    # ... but before a call whose cache has expired anyway the whole prompt is written: hide now
    cold = pol.want_visible(obs, probs, 0.5, prices, cold=True)
    assert cold[:3].tolist() == [False, False, True]
    assert pol.want_visible(obs, probs, 0.0, prices, cold=True)[:3].all()  # abstaining keeps all
    off = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, cold_hides=False).create()
    assert off.want_visible(obs, probs, 0.5, prices, cold=True)[:3].all()  # switched off: waits
    # act() and act_batch() read it from the caller's info
    obs["prices"] = prices
    hides_all = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, threshold=1.0).create()
    assert not hides_all.act(obs, {})["disable"].any()
    assert hides_all.act(obs, {"cache_cold": True})["disable"][:3].all()
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    both = hides_all.act_batch(batch, [{"cache_cold": False}, {"cache_cold": True}])
    assert not both["disable"][0].any() and both["disable"][1][:3].all()


def test_before_a_cold_call_the_threshold_is_scaled_by_cold_scale():
    obs = _obs([2.0] * 4, [1, 1, 1, 1], step=50, active_k=20.0)
    probs = np.array([0.05, 0.15, 0.3, 0.5] + [0.0] * 4, np.float32)
    bold = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off", cold_scale=3.0).create()
    one = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off", cold_scale=1.0).create()
    # a warm call: 0.1 for both (P 0.05 hidden); a cold one: 0.1 * 3 for the bold one (0.05, 0.15 hidden)
    assert bold.want_visible(obs, probs, 0.1)[:4].tolist() == [False, True, True, True]
    assert bold.want_visible(obs, probs, 0.1, cold=True)[:4].tolist() == [False, False, True, True]
    assert one.want_visible(obs, probs, 0.1, cold=True)[:4].tolist() == [False, True, True, True]
    assert bold.want_visible(obs, probs, 0.0, cold=True)[:4].all()  # abstaining stays abstaining
    # act() reads the cold call from the caller's info, as /decide's idle_seconds and the envs set it
    obs["prices"] = price_vector(PRICES["gpt-4o"])
    bold.cfg.threshold = 0.1
    bold.probs = lambda o, prices=None: probs
    assert int(bold.act(obs, {"cache_cold": True})["disable"].sum()) == 2
    assert int(bold.act(obs, {})["disable"].sum()) == 1
    for bad in (0.5, 0.0, 101.0):
        with pytest.raises(ValueError, match="cold_scale"):
            LearnedPolicyConfig(cold_scale=bad)


def test_a_checkpoint_saved_before_cold_scale_keeps_one_threshold(tmp_path):
    import json

    from dtoc_rl.policies.learned import LearnedPolicy, saved_settings
    from dtoc_rl.policies.registry import PolicySpecError, make_policy

    bold = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, cold_scale=3.0)
    path = bold.create().save(tmp_path / "ck")
    assert LearnedPolicy.load(path).cfg.cold_scale == 3.0
    assert make_policy(f"learned:path={path},cold_scale=2").cfg.cold_scale == 2.0
    with pytest.raises(PolicySpecError, match="cold_scale"):
        make_policy(f"learned:path={path},cold_scale=0.5")
    meta = json.loads((path / "config.json").read_text())
    del meta["config"]["cold_scale"]  # its thresholds were chosen with one threshold, cold or warm
    (path / "config.json").write_text(json.dumps(meta))
    assert LearnedPolicy.load(path).cfg.cold_scale == 1.0
    assert saved_settings({})["cold_scale"] == 1.0  # whatever the default of a new training


def test_replay_env_says_when_the_next_calls_cache_is_cold_and_the_sweep_acts_on_it():
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.policies import learned_trainer as lt
    from dtoc_rl.sim.episode import Episode
    from dtoc_rl.sim.simulator import CostConfig, idle_seconds

    base = next(e for e in load_episodes() if e.n_calls > 6 and len(e.out_steps) >= 4)
    ep = Episode(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Episode) if f.init})
    waits = np.full(ep.n, 10.0)  # a tool that ran ten minutes before one call: the cache expired
    cold_call = ep.n_calls - 2
    waits[ep.starts[cold_call] if ep.n_calls != ep.n else cold_call] = 600.0
    ep.timestamps = np.cumsum(waits)
    assert idle_seconds(ep)[cold_call] == pytest.approx(600.0)
    cfg = CostConfig(cache_rules=CACHE_RULES["openai"])
    env = ReplayEnv(trajectories=[ep], cost_config=cfg)
    obs, info = env.reset(seed=0)
    seen, done = [], False
    while not done:
        seen.append((env.sim.c, bool(info["cache_cold"])))  # the call the decision comes before
        obs, _, done, _, info = env.step(to_action(obs, np.ones(len(obs["item_mask"]), bool)))
    assert [c for c, cold in seen if cold] == [cold_call]
    # the threshold sweep that tunes a checkpoint decides as act() does there
    pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create()
    swept = lt.sweep_thresholds(pol, [ep], cfg, grid=(0.5,))[0]
    pol.cfg.threshold = 0.5
    acted = lt._replay(pol, ep, cfg, pol.cfg.max_items)["totals"]
    assert swept["dollars"][0] == pytest.approx(acted["dollars"])


def test_a_checkpoint_saved_before_cold_hides_keeps_waiting_before_a_cold_call(tmp_path):
    import json

    from dtoc_rl.policies.learned import LearnedPolicy

    path = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create().save(tmp_path / "ck")
    assert LearnedPolicy.load(path).cfg.cold_hides
    meta = json.loads((path / "config.json").read_text())
    del meta["config"]["cold_hides"]  # its thresholds were chosen with every hide waiting for a batch
    (path / "config.json").write_text(json.dumps(meta))
    assert LearnedPolicy.load(path).cfg.cold_hides is False


def test_with_agent_overhead_no_call_is_cold():
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.sim.episode import Episode
    from dtoc_rl.sim.simulator import CostConfig

    base = next(e for e in load_episodes() if e.n_calls > 6 and e.n_calls == e.n)
    ep = Episode(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Episode) if f.init})
    ep.timestamps = np.arange(ep.n) * 600.0  # every call waits ten minutes
    for overhead, expect in (("orchestrator", True), ("agent", False)):
        env = ReplayEnv(
            trajectories=[ep], cost_config=CostConfig(cache_rules=CACHE_RULES["openai"], overhead=overhead)
        )
        _, info = env.reset(seed=0)
        # the agent's own manage_context call takes the cold write, and the logged call re-writes after it
        assert info["cache_cold"] is expect


def test_timed_hides_waits_until_a_hide_pays_and_joins_a_restore_s_re_write():
    from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
    from dtoc_rl.policies.learned import timed_hides

    def obs(step, first_visible=True):
        # 20k, 5k and 1k tokens read 10, 5 and 1 calls ago; the messages: 1k per call
        items = np.zeros((3, len(ITEM_FEATURES)), np.float32)
        for j, (k_tok, age) in enumerate([(20, 10), (5, 5), (1, 1)]):
            items[j, ITEM_FEATURES.index("est_tokens_k")] = k_tok
            items[j, ITEM_FEATURES.index("age")] = age
            items[j, ITEM_FEATURES.index("visible")] = 1.0
        items[0, ITEM_FEATURES.index("visible")] = float(first_visible)
        glob = np.zeros(len(GLOBAL_FEATURES), np.float32)
        glob[GLOBAL_FEATURES.index("step")] = step
        shown = (20 if first_visible else 0.04) + 6
        glob[GLOBAL_FEATURES.index("active_tokens_k")] = shown + step  # 1k of messages per call
        return {"items": items, "item_mask": np.ones(3, np.int8), "globals": glob,
                "family": np.int64(0), "prices": np.array([3.0, 15.0, 0.3, 3.75], np.float32)}  # fmt: skip

    want = np.array([True, False, True])
    # hiding the 5k output re-writes the ~6k after it at 1.15x the input price, and saves 0.1x of ~5k
    # at each call expected to remain (the calls so far): it pays after about 14 calls
    assert timed_hides(obs(5), want)[1]  # kept visible for now
    assert not timed_hides(obs(40), want)[1]  # hidden
    assert not timed_hides(obs(400), want)[1]  # the horizon is capped, still worth it
    # a restore before it re-writes everything after it anyway: the hide shares it at once
    assert not timed_hides(obs(5, first_visible=False), want)[1]
    assert timed_hides(obs(5, first_visible=False), want)[0]  # the restore itself stays
