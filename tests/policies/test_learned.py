import json

import numpy as np
import pytest

from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import split_by_task

from .crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=3, dagger_rounds=0)


def _obs(env_kw=None):
    env = ReplayEnv(max_items=32, **(env_kw or {}))
    obs, info = env.reset(seed=0)
    for _ in range(4):
        obs, *_ = env.step({"enable": np.zeros(32, np.int8), "disable": np.zeros(32, np.int8)})
    return obs


@pytest.mark.parametrize(
    "bad,msg",
    [(dict(mode="ppo"), "mode must be"), (dict(d_model=10, n_heads=4), "divisible"),
     (dict(val_fraction=1.0), "val_fraction"), (dict(threshold=2.0), "threshold")],
)  # fmt: skip
def test_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        LearnedPolicyConfig(**bad)


def test_untrained_policy_acts_on_any_number_of_items_and_batches_consistently():
    pol = LearnedPolicyConfig(**TINY).create()
    obs = _obs()
    a = pol.act(obs)
    assert a["enable"].shape == (32,) and not (a["enable"] & a["disable"]).any()
    assert not a["enable"][obs["item_mask"] == 0].any()
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    b = pol.act_batch(batch)
    assert (b["disable"][0] == a["disable"]).all() and (b["disable"][1] == a["disable"]).all()
    empty = {k: v.copy() for k, v in obs.items()}
    empty["item_mask"][:] = 0
    assert not pol.act(empty)["disable"].any()  # no stored output: nothing to do, no NaN


def test_checkpoint_round_trip_is_exact_and_pickle_free(tmp_path):
    pol = LearnedPolicyConfig(**TINY, seed=3).create()
    path = pol.save(tmp_path / "ckpt")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    back = LearnedPolicy.load(path)
    obs = _obs()
    np.testing.assert_allclose(back.probs(obs), pol.probs(obs), rtol=0, atol=0)
    assert back.cfg == pol.cfg


def test_checkpoint_with_other_features_is_a_clear_error(tmp_path):
    path = LearnedPolicyConfig(**TINY).create().save(tmp_path / "ckpt")
    meta = json.loads((path / "config.json").read_text())
    meta["item_features"] = meta["item_features"][:-1] + ["something_else"]
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"different item features.*something_else"):
        LearnedPolicy.load(path)
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        LearnedPolicy.load(tmp_path)


def test_split_never_puts_a_task_on_both_sides():
    eps = load_episodes(None)
    train, val = split_by_task(eps, 0.3, seed=1)
    assert train and val
    assert not {(e.source, e.task_id) for e in train} & {(e.source, e.task_id) for e in val}
    assert split_by_task(eps, 0.3, seed=1)[1] == val  # deterministic


def test_fit_on_bundled_sample_learns_and_reports(tmp_path):
    pol = LearnedPolicyConfig(**{**TINY, "epochs": 6}).create()
    rep = pol.fit(None, progress=False)
    hist = rep["supervised"]["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert rep["train_decisions"] > 100 and rep["val_episodes"] > 0
    assert set(rep["val_metrics"]) == {"cost_ratio", "misses_per_100_steps"}
    back = LearnedPolicy.load(pol.save(tmp_path / "c"))
    assert back.meta["val_tasks"] == rep["val_tasks"]


def test_bc_mode_needs_logged_masking():
    with pytest.raises(ValueError, match="logged masking schedule"):
        LearnedPolicyConfig(**TINY, mode="bc").create().fit(None, progress=False)


def test_bc_mode_clones_a_logged_schedule():
    trajs = []
    for i in range(6):
        t = crafted([4000] * 10)
        t.traj_id, t.task_id = f"bc/{i}", f"task{i}"
        for k, s in enumerate(t.steps):
            s.masked_before = list(range(max(0, k - 2)))  # a keep-last-2 log
        trajs.append(t)
    from dtoc_rl.episode import compile_episode

    pol = LearnedPolicyConfig(**{**TINY, "epochs": 40, "mode": "bc", "lr": 5e-3}).create()
    rep = pol.fit(episodes=[compile_episode(t) for t in trajs], progress=False)
    assert rep["train_decisions"] > 0
    hist = rep["supervised"]["history"]
    assert hist[-1]["train_loss"] < 0.5 * hist[0]["train_loss"]


def test_rl_fine_tuning_runs():
    pol = LearnedPolicyConfig(**{**TINY, "epochs": 1, "rl_updates": 2, "rl_envs": 2}).create()
    rep = pol.fit(None, progress=False)
    assert len(rep["rl"]["rl_mean_return_last"]) == 1
