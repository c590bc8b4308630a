"""Smoke test of the CleanRL-style PPO script on tiny settings (it trains end to end)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from scripts import ppo_replay


def test_help_lists_every_args_field_with_its_docstring(repo_root):
    p = subprocess.run([sys.executable, "-m", "scripts.ppo_replay", "--help"], cwd=repo_root,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    for f in dataclasses.fields(ppo_replay.Args):
        assert "--" + f.name.replace("_", "-") in text
    assert "steps per env per rollout (default: 128)" in text
    assert "--track" in text and "--no-track" in text


@pytest.mark.slow  # ~5-9 s: torch.optim imports torch._dynamo
def test_tiny_training_run_updates_the_agent_and_saves_it(tmp_path, capsys):
    threads = torch.get_num_threads()
    save = tmp_path / "agent.safetensors"
    argv = ["--total-timesteps", "64", "--num-envs", "2", "--num-steps", "16", "--max-items", "8",
            "--num-minibatches", "2", "--update-epochs", "1", "--save", str(save), "--json"]  # fmt: skip
    try:
        assert ppo_replay.main(argv) == 0
    finally:
        torch.set_num_threads(threads)  # the script sets --threads for its own process
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    hist = out["history"]
    assert [h["global_step"] for h in hist] == [32, 64] and "note" not in cap.err  # 64: whole rollouts
    assert all(math.isfinite(h["policy_loss"]) and math.isfinite(h["value_loss"]) for h in hist)
    assert all(r < 0 for r in out["episode_returns"])  # every call costs dollars
    from safetensors.torch import load_file

    weights = load_file(str(save))
    assert weights["logit.bias"].shape == (1,) and float(weights["logit.bias"]) != 4.0  # it was trained

    # the saved agent is a policy evaluate runs (module:Class from the repository's root)
    from dtoc_rl.policies.evaluate import evaluate

    spec = f"scripts.ppo_replay:PPOPolicy:path={save}"
    runs = evaluate("data/sample", [spec, f"{spec},threshold=0", "none"], progress=False, max_items=8)
    assert not [r.error for r in runs if r.error]
    bill = {(r.policy, r.traj_id): r.dollars for r in runs}
    for r in runs:
        if r.policy == "none":  # P >= 0 everywhere: everything visible, as keeping everything
            assert bill[(f"{spec},threshold=0", r.traj_id)] == r.dollars
    # its decision is the network's: visible where sigmoid(logit) >= the threshold
    from dtoc_rl.envs import ReplayEnv

    env = ReplayEnv(max_items=8, sequential=True)
    obs, _ = env.reset(seed=0)
    for _ in range(5):  # a few outputs stored, all visible
        obs, *_ = env.step({"enable": np.zeros(8, np.int8), "disable": np.zeros(8, np.int8)})
    with torch.no_grad():
        x = {
            k: torch.as_tensor(obs[k], dtype=torch.float32)[None]
            for k in ("item_tool", "item_mask", "globals", "family")
        }
        x["item_features"] = torch.as_tensor(obs["items"])[None]
        probs = torch.sigmoid(ppo_replay.PPOPolicy(str(save)).agent(x)[0])[0].numpy()
    stored = obs["item_mask"] != 0
    cut = float(np.median(probs[stored]))
    act = ppo_replay.PPOPolicy(str(save), threshold=cut).act(obs)
    np.testing.assert_array_equal(act["disable"][stored] == 1, probs[stored] < cut)
    assert act["disable"][stored].any() and not act["disable"][stored].all()  # the cut splits them
    policy = ppo_replay.PPOPolicy(str(save))
    with pytest.warns(UserWarning, match="trained on 8 slots, deciding on 16"):
        policy.act(ReplayEnv(max_items=16).reset(seed=0)[0])

    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"not an agent saved by python -m scripts\.ppo_replay --save"):
        ppo_replay.PPOPolicy(str(tmp_path / "other.safetensors"))


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--num-envs", "0"], "--num-envs must be >= 1"),
        (["--num-envs", "3", "--num-steps", "5", "--num-minibatches", "4"], "must divide by"),
    ],
)
def test_bad_settings_are_usage_errors(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        ppo_replay.parse_args(argv)
    assert e.value.code == 2 and msg in capsys.readouterr().err


def test_a_missing_dataset_is_one_line(tmp_path, capsys):
    code = ppo_replay.main(["--dataset", str(tmp_path / "nope"), "--total-timesteps", "8", "--num-envs", "1",
                            "--num-steps", "8", "--num-minibatches", "1", "--json"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_a_length_that_is_not_whole_rollouts_is_said(capsys):
    threads = torch.get_num_threads()
    argv = ["--total-timesteps", "40", "--num-envs", "2", "--num-steps", "16", "--max-items", "8",
            "--num-minibatches", "2", "--update-epochs", "1", "--json"]  # fmt: skip
    try:
        assert ppo_replay.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    cap = capsys.readouterr()
    assert [h["global_step"] for h in json.loads(cap.out)["history"]] == [32]
    assert "note: 32 steps, whole rollouts of num_envs x num_steps = 32 (--total-timesteps 40)" in cap.err
