"""Training runs re-priced as another provider's model (``LearnedPolicyConfig.price_augment``)."""

from dataclasses import replace

import numpy as np
import pytest

from dtoc_rl.data.models import family_id
from dtoc_rl.engine.features import price_vector
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import REPRICE_FAMILIES, REPRICE_VERSIONS, repriced
from dtoc_rl.sim.calibrated import CACHE_HIT_RATES
from dtoc_rl.sim.pricing import cache_rules_for, prices_for
from dtoc_rl.sim.simulator import CostConfig

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=1, dagger_rounds=0)


def test_a_copy_is_the_same_run_billed_as_another_familys_model():
    eps = load_episodes(None)
    copies = repriced(eps, 1.0, seed=0)
    plain = [e for e in eps if e.call_model is None]
    assert len(copies) == len(plain) > 0
    cfg = CostConfig()
    for ep, cp in zip(plain, copies, strict=True):
        assert cp.model_family in REPRICE_FAMILIES and cp.model_family != ep.model_family
        assert cp.family_id == family_id(cp.model_family)  # the family input follows the prices
        assert cp.traj_id == f"{ep.traj_id}@{cp.model_family}" and cp.task_id == ep.task_id
        assert cp.source == ep.source and cp.n == ep.n
        for name in ("est_tok", "need_ptr", "need_idx", "need_kind", "tool_id", "user_tok", "asst_tok"):
            assert np.array_equal(getattr(cp, name), getattr(ep, name)), name
        # billed at the family's list prices, as the version whose logs measured its cache hit rate where
        # one did: no logged version or cache lifetime of the original's
        version = REPRICE_VERSIONS.get(cp.model_family, "")
        assert cp.model_raw == version and cp.cache_ttl is None
        assert cfg.prices_of(cp) == prices_for(cp.model_family, version or None)
        assert cfg.rules_for(cp) == cache_rules_for(cp.model_family, version)
        assert cfg.rules_for(cp).hit_rate == CACHE_HIT_RATES.get(version, 1.0)
    assert len({c.model_family for c in copies}) >= 3  # drawn, not one family for all
    assert [c.traj_id for c in repriced(eps, 1.0, seed=0)] == [c.traj_id for c in copies]
    assert [c.traj_id for c in repriced(eps, 1.0, seed=1)] != [c.traj_id for c in copies]


def test_what_the_policy_sees_of_a_copy_and_what_its_log_said_of_the_original_dropped():
    ep = load_episodes(None)[0]
    # an hour's cache, as a Claude Code log says: a copy as another model has that model's lifetime
    hour = replace(ep, model_family="claude-opus", family_id=family_id("claude-opus"), cache_ttl=3600.0)
    cfg = CostConfig()
    for cp in repriced([hour] * 20, 1.0, seed=0):
        assert cp.model_family != "claude-opus" and cp.cache_ttl is None
        version = REPRICE_VERSIONS.get(cp.model_family, "")
        assert cfg.rules_for(cp) == cache_rules_for(cp.model_family, version)
        obs, _ = ReplayEnv(trajectories=[cp]).reset(seed=0)
        assert int(obs["family"]) == family_id(cp.model_family)
        assert np.allclose(obs["prices"], price_vector(prices_for(cp.model_family, version or None)))


def test_a_copy_is_never_of_its_own_family_nor_of_one_left_out():
    ep = load_episodes(None)[0]
    mine = replace(ep, model_family="gemini-3-pro", family_id=family_id("gemini-3-pro"))
    fams = {c.model_family for c in repriced([mine] * 60, 1.0, seed=0, exclude="claude-sonnet")}
    assert fams == set(REPRICE_FAMILIES) - {"gemini-3-pro", "claude-sonnet"}


def test_the_share_copied_and_a_run_of_several_models_left_alone():
    eps = load_episodes(None)
    assert repriced(eps, 0.0, seed=0) == []
    some = repriced(eps * 10, 0.5, seed=0)
    assert 0.3 * len(eps) * 10 < len(some) < 0.7 * len(eps) * 10
    routed = [replace(e, call_model=np.zeros(e.n_calls, np.int64), models=[e.model_raw]) for e in eps]
    assert repriced(routed, 1.0, seed=0) == []


@pytest.mark.parametrize(
    "bad", [dict(price_augment=1.5), dict(price_augment=-0.1), dict(price_augment=0.5, mode="rl"),
            dict(price_augment=0.5, model_family="gpt-4o")],
)  # fmt: skip
def test_the_share_must_be_a_fraction_of_a_supervised_training_of_several_families(bad):
    with pytest.raises(ValueError, match="price_augment"):
        LearnedPolicyConfig(**bad)


def test_training_learns_on_the_copies_and_chooses_thresholds_on_the_runs_as_billed(monkeypatch):
    import dtoc_rl.policies.learned_trainer as lt

    collected, tuned, drawn, collect, tune, reprice = [], [], [], lt.collect, lt._tune, lt.repriced

    def spy_collect(policy, episodes, **kw):
        collected.append([e.traj_id for e in episodes])
        return collect(policy, episodes, **kw)

    def spy_tune(policy, tune_eps, *a, **kw):
        tuned.append([e.traj_id for e in tune_eps])
        return tune(policy, tune_eps, *a, **kw)

    def spy_reprice(episodes, share, seed, **kw):
        drawn.append((share, seed, kw))
        return reprice(episodes, share, seed, **kw)

    monkeypatch.setattr(lt, "collect", spy_collect)
    monkeypatch.setattr(lt, "_tune", spy_tune)
    monkeypatch.setattr(lt, "repriced", spy_reprice)
    cfg = LearnedPolicyConfig(**{**TINY, "price_augment": 1.0, "dagger_rounds": 1, "seed": 3})
    report = cfg.create().fit(None, progress=False)
    train, val, dagger_train, dagger_val = collected
    copies = [t for t in train if "@" in t]
    assert report["repriced_episodes"] == len(copies) > 0
    assert {t.split("@")[0] for t in copies} <= set(train)  # copies of the training runs themselves
    assert dagger_train == train  # the policy's own states on the copies too
    assert drawn == [(1.0, 3, {"exclude": None})]  # the training's seed draws the copies
    assert not any("@" in t for t in val + dagger_val) and tuned and not any("@" in t for t in tuned[0])
    collected.clear()
    report = LearnedPolicyConfig(**TINY).create().fit(None, progress=False)
    assert report["repriced_episodes"] == 0 and not any("@" in t for t in collected[0])
