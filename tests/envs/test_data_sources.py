"""gym.make("dtoc_rl/Replay-v0", dataset=...) takes a path, a datasets.Dataset or a list."""

import gymnasium as gym
import pytest

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.data.dataset import load_hf_dataset, load_trajectories
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.registry import make_policy


def _bills(env, n=4):
    pol = make_policy("last_n:n=3")
    out = {}
    for i in range(n):
        obs, info = env.reset(options={"index": i})
        done = False
        while not done:
            obs, _, done, _, info = env.step(pol.act(obs, info))
        out[info["traj_id"]] = info["totals"]
    return out


@pytest.fixture(scope="module")
def reference():
    return _bills(gym.make("dtoc_rl/Replay-v0", dataset=str(bundled_dataset()), sequential=True).unwrapped)


@pytest.mark.parametrize("kind", ["hf", "hf_dict", "trajectories", "rows", "parquet_file"])
def test_every_dataset_form_replays_the_same_episodes(kind, reference):
    path = bundled_dataset()
    if kind == "hf":
        ds = load_hf_dataset(path)
    elif kind == "hf_dict":
        import datasets

        ds = datasets.DatasetDict({"train": load_hf_dataset(path)})
    elif kind == "trajectories":
        ds = load_trajectories(path)
    elif kind == "rows":
        ds = [t.to_row() for t in load_trajectories(path)]
    else:
        ds = next(path.glob("*.parquet"))
    env = gym.make("dtoc_rl/Replay-v0", dataset=ds, sequential=True).unwrapped
    assert _bills(env) == reference


def test_bad_dataset_items_are_named():
    with pytest.raises(TypeError, match="dataset item 1: expected a Trajectory"):
        load_episodes([load_trajectories(bundled_dataset())[0], 42])
    with pytest.raises(ValueError, match="dataset item 0: not a trajectory row"):
        load_episodes([{"traj_id": "x"}])
    with pytest.raises(TypeError, match="got int"):
        load_episodes(7)


def test_a_dataset_dict_with_several_splits_asks_for_one():
    import datasets

    ds = load_hf_dataset(bundled_dataset())
    with pytest.raises(ValueError, match=r"splits \['train', 'test'\]: pass one"):
        load_episodes(datasets.DatasetDict({"train": ds, "test": ds}))
