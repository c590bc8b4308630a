"""Minari export of ReplayEnv episodes under a policy."""

import json
import sys

import numpy as np
import pytest

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.envs import ReplayEnv, StockRLWrapper
from dtoc_rl.policies.export import action_to_bits, export_minari
from dtoc_rl.policies.registry import make_policy

N = 16


def test_action_to_bits_matches_the_native_action():
    # the bits an action implies, sent through the flat wrapper, replay the native run exactly
    pol = make_policy("last_n:n=3")
    native = ReplayEnv(max_items=N, sequential=True)
    flat = StockRLWrapper(ReplayEnv(max_items=N, sequential=True))
    obs, _ = native.reset()
    flat.reset()
    done = False
    while not done:
        a = pol.act(obs)
        obs, r, done, _, _ = native.step(a)
        _, r2, _, _, _ = flat.step(action_to_bits(a, flat.native_observation))
        assert r == r2
    # an output in both sets is left as it is
    o = {"disable_mask": np.array([1, 0], np.int8)}
    both = {"enable": np.array([1, 1]), "disable": np.array([1, 1])}
    np.testing.assert_array_equal(action_to_bits(both, o), [1, 0])


def test_missing_minari_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "minari", None)
    with pytest.raises(ImportError, match=r"dtoc-rl\[minari\]|\.\[minari\]"):
        export_minari("dtoc_rl/x-v0", out_dir=tmp_path)


@pytest.fixture
def minari():
    return pytest.importorskip("minari")  # the tests above run without it


def _load(out, dataset_id, monkeypatch):
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(out))
    return minari.load_dataset(dataset_id)


def test_export_replays_the_policy_and_loads_back(tmp_path, monkeypatch, minari):
    out = export_minari("dtoc_rl/replay-last3-v0", "last_n:n=3", out_dir=tmp_path, episodes=3, max_items=N)
    assert out["episodes"] == 3 and out["policy"] == "last_n(n=3,polling=1)"
    ds = _load(tmp_path, "dtoc_rl/replay-last3-v0", monkeypatch)
    assert ds.total_episodes == 3 and ds.total_steps == out["steps"]
    assert ds.spec.env_spec.id == "dtoc_rl/Replay-v0"  # recreates the env
    # the recorded actions are the policy's, on the recorded observations, and replay to the same rewards
    env = ds.recover_environment()
    pol = make_policy("last_n:n=3")
    returns = []
    for i, ep in enumerate(ds.iterate_episodes()):
        obs, _ = env.reset(options={"index": i})
        for t in range(len(ep.rewards)):
            np.testing.assert_array_equal(obs["items"], ep.observations["items"][t])
            a = pol.act(obs)
            np.testing.assert_array_equal(a["disable"], ep.actions["disable"][t])
            obs, r, *_ = env.step({"enable": ep.actions["enable"][t], "disable": ep.actions["disable"][t]})
            assert r == pytest.approx(ep.rewards[t])
        returns.append(float(np.sum(ep.rewards)))
    assert out["mean_return"] == pytest.approx(np.mean(returns))
    with pytest.raises(FileExistsError, match="already exists"):
        export_minari("dtoc_rl/replay-last3-v0", "none", out_dir=tmp_path, episodes=1)


def test_flat_export_records_visible_bits_and_objects_need_no_spec(tmp_path, monkeypatch, minari):
    trajs = load_trajectories(bundled_dataset())[:2]
    out = export_minari(
        "dtoc_rl/flat-v0", "last_n:n=3", dataset=trajs, out_dir=tmp_path, flat=True, max_items=N
    )
    ds = _load(tmp_path, "dtoc_rl/flat-v0", monkeypatch)
    assert out["episodes"] == 2 and ds.spec.env_spec is None
    ep = next(ds.iterate_episodes())
    assert ep.actions.shape == (len(ep.rewards), N) and set(np.unique(ep.actions)) <= {0, 1}
    assert "item_features" in ep.observations and "items" not in ep.observations


def test_script_writes_a_dataset_and_reports_errors_in_one_line(tmp_path, capsys, minari):
    from scripts import minari_export

    argv = ["--dataset-id", "dtoc_rl/s-v0", "--policy", "oracle", "--episodes", "2", "--out", str(tmp_path)]
    assert minari_export.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 2 and out["policy"] == "oracle"
    assert minari_export.main(argv) == 2  # exists
    err = capsys.readouterr().err
    assert err.startswith("error: Minari dataset 'dtoc_rl/s-v0' already exists") and err.count("\n") == 1
