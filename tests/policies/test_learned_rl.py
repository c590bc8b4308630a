"""PPO fine-tuning of learned policies (policies/learned_rl.py) and `dtoc-rl train --init-from`."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from dtoc_rl.cli import main
from dtoc_rl.policies import learned_rl
from dtoc_rl.policies.learned import LearnedPolicy
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_rl import Critic, finetune, make_vector_env, ppo
from dtoc_rl.sim.episode import compile_episode

from .crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=1, dagger_rounds=0)
TINY_CLI = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--epochs", "1", "--dagger-rounds", "0"]


def _huge_first(i: int = 0):
    """A 50k-token output nobody needs again, then small outputs each needed by the next call: hiding
    the big one for good is where nearly all of the money is (a cache read of it every call)."""
    t = crafted([200_000] + [400] * 24, needs={k + 1: [k] for k in range(1, 24)})
    t.traj_id, t.task_id = f"huge/{i}", f"task{i}"
    return compile_episode(t)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs))


def test_ppo_learns_to_save_dollars_on_a_crafted_run():
    pol = LearnedPolicyConfig(
        **TINY, rl_updates=12, rl_envs=2, rl_steps=24, rl_lr=1e-2, rl_target_kl=0.0, rl_miss_weight=0.0,
        max_items=32,
    ).create()  # fmt: skip
    rep = ppo(pol, [_huge_first()])
    assert rep["vector_env"] == "SyncVectorEnv" and rep["updates_run"] == 12
    curve = [h["mean_return"] for h in rep["history"]]
    first, last = _mean(curve[:3]), _mean(curve[-3:])
    # a return is minus the run's cost relative to everything visible: the initial coin-flip policy
    # keeps re-showing the big output (a full cache write each time) and pays about 2.5 times the
    # bill; PPO must learn to keep it hidden and save money (measured: -2.6 to -0.4)
    assert last > first + 1.0, curve
    assert last > -0.8, curve


def test_vector_env_is_a_gymnasium_sync_vector_env_with_same_step_autoreset():
    pol = LearnedPolicyConfig(**TINY, max_items=32).create()
    envs = make_vector_env(pol, [_huge_first()], 3, 0.0)
    assert isinstance(envs, gym.vector.SyncVectorEnv) and envs.num_envs == 3
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = envs.reset(seed=0)
    zero = {"enable": np.zeros((3, 32), np.int8), "disable": np.zeros((3, 32), np.int8)}
    for _ in range(24):  # 25 calls, the first made at reset: the 24th step ends the run, returns the next
        obs, r, term, trunc, _ = envs.step(zero)
    assert term.all() and (obs["globals"][:, 2] == 1).all()  # already the next run's first call


def test_each_miss_costs_rl_miss_weight_in_the_reward():
    t = crafted([4000] * 5, needs={3: [0]})
    t.traj_id = "miss/0"
    ep = compile_episode(t)
    pol = LearnedPolicyConfig(**TINY, max_items=32).create()
    assert pol.cfg.rl_miss_weight > 0  # dollars alone price a miss too cheaply (see its help)
    totals = []
    for w in (0.0, 0.7):
        envs = make_vector_env(pol, [ep], 1, w)
        envs.reset(seed=0)
        hide0 = np.zeros((1, 32), np.int8)
        hide0[0, 0] = 1
        total, misses = 0.0, 0
        for k in range(4):  # hide output 0 at the first decision; call 3 needs it: a miss
            act = {"enable": np.zeros((1, 32), np.int8), "disable": hide0 if k == 0 else 0 * hide0}
            _, r, *_, info = envs.step(act)
            total += float(r[0])
            last = info["final_info"] if "final_info" in info else info  # the run ends at call 4
            misses += int(last["step_misses"][0])
        totals.append(total)
    assert misses == 1 and totals[1] == pytest.approx(totals[0] - 0.7)


def test_critic_is_not_saved_and_the_checkpoint_keeps_its_format(tmp_path):
    pol = LearnedPolicyConfig(**TINY, rl_updates=2, rl_envs=2, rl_steps=8, max_items=32).create()
    fresh_keys = set(pol.net.state_dict())
    before = {k: v.clone() for k, v in pol.net.state_dict().items()}
    ppo(pol, [_huge_first()])
    assert any(not torch.equal(before[k], v) for k, v in pol.net.state_dict().items())  # the actor moved
    pol.save(tmp_path / "ck")
    saved = set(load_file(str(tmp_path / "ck" / "model.safetensors")))
    assert saved == fresh_keys
    critic_keys = {f"net.{k}" for k in Critic().state_dict()}
    assert not saved & critic_keys and not any("critic" in k for k in saved)
    LearnedPolicy.load(tmp_path / "ck")


def test_mode_rl_and_rl_updates_both_run_ppo(monkeypatch):
    calls = []
    real = learned_rl.ppo

    def spy(policy, episodes, **kw):
        calls.append(policy.cfg.rl_updates)
        return real(policy, episodes, **kw)

    monkeypatch.setattr(learned_rl, "ppo", spy)
    eps = [_huge_first(i) for i in range(6)]
    small = dict(TINY, rl_envs=2, rl_steps=4, rl_epochs=1, rl_minibatches=1, max_items=32)
    LearnedPolicyConfig(**small, mode="rl", rl_updates=0).create().fit(episodes=eps, progress=False)
    rep = LearnedPolicyConfig(**small, rl_updates=1).create().fit(episodes=eps, progress=False)
    assert calls == [50, 1] and rep["rl"]["algorithm"] == "ppo"


def test_finetune_refuses_data_that_is_not_the_checkpoints():
    eps = [_huge_first(i) for i in range(8)]
    pol = LearnedPolicyConfig(**TINY, rl_updates=1, rl_envs=2, rl_steps=4, max_items=32).create()
    pol.meta = {"val_tasks": ["test/elsewhere"]}
    with pytest.raises(ValueError, match="not the data it was trained on"):
        finetune(pol, episodes=eps)


def test_train_init_from_round_trip(tmp_path, capsys):
    ck, out = tmp_path / "ck", tmp_path / "ft"
    assert main(["train", "-o", str(ck), "--quiet", *TINY_CLI]) == 0
    capsys.readouterr()
    weights = (ck / "model.safetensors").read_bytes()
    args = ["train", "--init-from", str(ck), "-o", str(out), "--rl-updates", "2", "--rl-steps", "8",
            "--rl-envs", "2", "--json"]  # fmt: skip
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rl"]["updates_run"] == 2 and rep["rl"]["vector_env"] == "SyncVectorEnv"
    a, b = LearnedPolicy.load(ck), LearnedPolicy.load(out)
    assert b.meta["val_tasks"] == a.meta["val_tasks"]  # same split: the held-out tasks stay unused
    assert b.meta["rl"]["updates_run"] == 2 and "thresholds" in b.meta
    # the fine-tuning records its own software beside the first training's
    assert b.meta["rl"]["environment"]["torch"] == torch.__version__ and "environment" in b.meta
    assert b.cfg.d_model == 16 and b.cfg.rl_updates == 2  # the checkpoint's network, the command's RL
    sa, sb = a.net.state_dict(), b.net.state_dict()
    assert sa.keys() == sb.keys() and any(not torch.equal(sa[k], sb[k]) for k in sa)
    assert (ck / "model.safetensors").read_bytes() == weights  # the checkpoint itself is not changed
    assert main([*args[:-1], "--quiet"]) == 0  # the text report counts the decisions PPO made
    assert "episodes (32 decisions)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make,extra,msg",
    [(lambda p: None, ["--rl-updates", "1"], "no such checkpoint folder"),
     (lambda p: (p.mkdir(), (p / "config.json").write_text("{"), (p / "model.safetensors").write_text("x")),
      ["--rl-updates", "1"], "invalid JSON"),
     (lambda p: p.mkdir(), ["--rl-updates", "1"], "is not a checkpoint"),
     (lambda p: p.mkdir(), [], "needs --rl-updates"),
     (lambda p: LearnedPolicyConfig(**TINY).create().save(p), ["--rl-updates", "1", "--miss-budget", "2"],
      "--miss-budget would be ignored")],
)  # fmt: skip
def test_train_bad_init_from_is_one_clear_line(tmp_path, capsys, make, extra, msg):
    ck = tmp_path / "bad"
    make(ck)
    assert main(["train", "--init-from", str(ck), "-o", str(tmp_path / "o"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--init-from" in err and msg in err, err
    assert not (tmp_path / "o").exists()


def test_train_init_from_with_other_data_is_refused(tmp_path, capsys):
    pol = LearnedPolicyConfig(**TINY).create()
    pol.meta = {"val_tasks": ["test/elsewhere"], "trained_on": "objects"}
    pol.save(tmp_path / "ck")
    args = ["train", "--init-from", str(tmp_path / "ck"), "-o", str(tmp_path / "o"), "--rl-updates", "1"]
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not the data it was trained on" in err


def test_train_retune_chooses_the_thresholds_again_and_nothing_else(tmp_path, capsys):
    ck, out = tmp_path / "ck", tmp_path / "rt"
    assert main(["train", "-o", str(ck), "--quiet", *TINY_CLI]) == 0
    capsys.readouterr()
    weights = (ck / "model.safetensors").read_bytes()
    assert main(["train", "--retune", str(ck), "-o", str(out), "--miss-budget", "0", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    a, b = LearnedPolicy.load(ck), LearnedPolicy.load(out)
    assert rep["thresholds"]["budget_misses_per_100"] == 0.0 == b.meta["thresholds"]["budget_misses_per_100"]
    assert a.meta["thresholds"]["budget_misses_per_100"] == 1.0  # the checkpoint itself is not changed
    assert (out / "model.safetensors").read_bytes() == weights == (ck / "model.safetensors").read_bytes()
    assert b.meta["val_tasks"] == a.meta["val_tasks"] and b.cfg.miss_budget == 0.0
    for entry in [*b.meta["thresholds"]["validation"]["regime"].values()]:
        assert entry["misses_per_100"] == 0.0  # within the new budget on its tune runs
    assert b.meta["retuned_from"] == str(ck) and "val_metrics" not in b.meta  # those were the old table's
    assert b.meta["retune_environment"]["numpy"] == np.__version__ and "retune_environment" not in a.meta
    # a setting not given keeps the checkpoint's own: retuned again without flags, still budget 0
    assert main(["train", "--retune", str(out), "-o", str(tmp_path / "again"), "--quiet"]) == 0
    assert LearnedPolicy.load(tmp_path / "again").meta["thresholds"]["budget_misses_per_100"] == 0.0
    # a setting the thresholds are chosen with is one --retune takes
    cold = ["train", "--retune", str(ck), "-o", str(tmp_path / "cold"), "--cold-scale", "3", "--quiet"]
    assert main(cold) == 0
    assert LearnedPolicy.load(tmp_path / "cold").cfg.cold_scale == 3.0


@pytest.mark.parametrize(
    "make,extra,msg",
    [(lambda p: None, [], "no such checkpoint folder"),
     (lambda p: p.mkdir(), [], "is not a checkpoint"),
     (lambda p: LearnedPolicyConfig(**TINY).create().save(p), ["--epochs", "2"], "--epochs would be ignored"),
     (lambda p: LearnedPolicyConfig(**TINY).create().save(p), ["--seed", "0"], "--seed would be ignored"),
     (lambda p: LearnedPolicyConfig(**TINY).create().save(p), ["--init-from", "x"], "give one of them")],
)  # fmt: skip
def test_train_bad_retune_is_one_clear_line(tmp_path, capsys, make, extra, msg):
    ck = tmp_path / "bad"
    make(ck)
    assert main(["train", "--retune", str(ck), "-o", str(tmp_path / "o"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--retune" in err and msg in err, err
    assert not (tmp_path / "o").exists()


def test_the_training_report_names_the_fallback_rules(capsys):
    from dtoc_rl.cli.train import _print_thresholds

    rule = {"tokens": 1000, "age": 4}
    fallback = {"family": {"qwen-coder": rule}, "regime": {}, "default": None}
    table = {"budget_misses_per_100": 1.0, "family": {"qwen-coder": 0.0}, "regime": {}, "default": 0.1}
    _print_thresholds({**table, "fallback": fallback})
    out = capsys.readouterr().out
    assert "qwen-coder abstain" in out and "qwen-coder hide_big:tokens=1000,age=4" in out
    _print_thresholds({"budget_misses_per_100": 1.0, "family": {}, "regime": {}, "default": 0.1})
    assert "where it abstains" not in capsys.readouterr().out


def test_the_actor_draws_no_bit_for_an_output_no_call_has_read():
    from dtoc_rl.policies.learned import obs_to_tensors

    pol = LearnedPolicyConfig(**TINY, max_items=32).create()
    envs = make_vector_env(pol, [_huge_first()], 1, 0.0)
    obs, _ = envs.reset(seed=0)
    zero = {"enable": np.zeros((1, 32), np.int8), "disable": np.zeros((1, 32), np.int8)}
    for _ in range(3):
        obs, *_ = envs.step(zero)
    x = obs_to_tensors(obs)
    free, stored = learned_rl._free(x)[0], x["mask"][0]
    assert int(stored.sum()) == 4
    # the newest output (stored by the call just made) stays visible, the three read ones are drawn
    assert free[:3].all() and not free[3] and not free[4:].any()
    rows = learned_rl._rows(x, torch.ones(1, 32), learned_rl._free(x))
    assert rows[0].weight.tolist() == [1.0, 1.0, 1.0, 0.0]  # and the update takes no gradient through it
    envs.close()
