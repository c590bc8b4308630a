"""ReplayEnv through StockRLWrapper: what stock RL libraries need from it."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.envs import ReplayEnv, StockRLWrapper
from dtoc_rl.envs.wrappers import bits_to_action, make_flat_replay
from dtoc_rl.policies.registry import make_policy

N = 16


def _rollout(env, act, index=0):
    obs, info = env.reset(options={"index": index})
    done = False
    while not done:
        obs, _, done, _, info = env.step(act(obs))
    return info


def test_unknown_render_mode_warns_and_renders_nothing():
    with pytest.warns(UserWarning, match="rgb_array"):
        env = ReplayEnv(max_items=N, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render_mode is None and env.render() is None


def test_replay_flat_is_registered_and_passes_the_env_checker():
    env = gym.make("dtoc_rl/ReplayFlat-v0", max_items=N)
    assert env.action_space == gym.spaces.MultiBinary(N)
    keys = set(env.observation_space.spaces)
    assert "item_features" in keys and "items" not in keys
    check_env(make_flat_replay(max_items=N), skip_render_check=True)
    check_env(make_flat_replay(max_items=N, flatten_obs=True), skip_render_check=True)


def test_observation_keys_build_a_module_dict():
    # SB3's CombinedExtractor (and many hand-written nets) keep one sub-module per observation key
    nn = pytest.importorskip("torch.nn")
    env = StockRLWrapper(ReplayEnv(max_items=N))
    nn.ModuleDict({k: nn.Identity() for k in env.observation_space.spaces})
    # word hashes (up to 2**31) would swamp a stock network's inputs: left out, and from each observation
    obs, _ = env.reset(seed=0)
    assert "item_words" not in env.observation_space.spaces and env.observation_space.contains(obs)


def test_visibility_bits_replay_the_native_action_exactly():
    # last_n:n=3 through its native action and through the bits it implies: same bill, same misses
    native = ReplayEnv(max_items=N, sequential=True)
    pol = make_policy("last_n:n=3")
    want = _rollout(native, lambda obs: pol.act(obs))

    wrapped = StockRLWrapper(ReplayEnv(max_items=N, sequential=True))

    def bits(_obs):
        o = wrapped.native_observation
        a = pol.act(o)
        vis = o["disable_mask"].astype(bool)  # visible now
        return ((vis | (a["enable"] != 0)) & ~(a["disable"] != 0)).astype(np.int8)

    got = _rollout(wrapped, bits)
    assert got["totals"] == want["totals"]
    assert got["totals"]["invalid_actions"] == 0


def test_all_ones_is_no_management_and_padding_bits_are_ignored():
    env = StockRLWrapper(ReplayEnv(max_items=N))
    info = _rollout(env, lambda obs: np.ones(N, np.int8))
    assert info["totals"]["dollars"] == pytest.approx(info["all_visible"]["dollars"])
    assert info["totals"]["changes"] == 0 and info["totals"]["invalid_actions"] == 0
    info = _rollout(env, lambda obs: np.zeros(N, np.int8))
    assert info["totals"]["changes"] > 0 and info["totals"]["invalid_actions"] == 0


def test_bits_of_the_wrong_shape_are_a_clear_error():
    env = StockRLWrapper(ReplayEnv(max_items=N))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"16 visibility bits"):
        env.step(np.ones(N + 1, np.int8))
    obs = env.native_observation
    a = bits_to_action(np.zeros(N), obs)  # hide everything: disable exactly the visible stored outputs
    assert not a["enable"].any()
    np.testing.assert_array_equal(a["disable"], obs["disable_mask"])


def test_flat_observation_layout():
    env = StockRLWrapper(ReplayEnv(max_items=N), flatten_obs=True)
    x, _ = env.reset(seed=0)
    native = env.native_observation
    nf = N * len(ITEM_FEATURES)
    assert x.shape == env.observation_space.shape and x.dtype == np.float32
    np.testing.assert_array_equal(x[:nf], native["items"].reshape(-1))
    np.testing.assert_array_equal(x[nf + 2 * N : nf + 3 * N], native["disable_mask"])
    g0 = nf + 3 * N
    np.testing.assert_array_equal(x[g0 : g0 + len(GLOBAL_FEATURES)], native["globals"])
    fam = x[g0 + len(GLOBAL_FEATURES) : -len(native["prices"])]
    assert fam.sum() == 1.0 and fam[int(native["family"])] == 1.0  # one-hot family
    np.testing.assert_array_equal(x[-len(native["prices"]) :], native["prices"])  # then its prices


def test_wrapper_refuses_an_env_that_is_not_a_replay_env():
    with pytest.raises(TypeError, match="wraps a ReplayEnv"):
        StockRLWrapper(gym.make("CartPole-v1"))


def test_sb3_ppo_trains_on_replay_env_with_make_vec_env():
    pytest.importorskip("stable_baselines3")
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    # make_vec_env asks for render_mode="rgb_array": a warning, not an error
    with pytest.warns(UserWarning, match="rgb_array"):
        venv = make_vec_env("dtoc_rl/ReplayFlat-v0", n_envs=2, seed=0, env_kwargs={"max_items": 32})
    model = PPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    obs = venv.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (2, 32) and set(np.unique(action)) <= {0, 1}
    venv.close()


@pytest.mark.parametrize("rule", ["none", "last_n", "obs_mask", "anthropic_clear", "opencode_prune",
                                  "gemini_mask", "budget", "hide_big", "cache_clear"])  # fmt: skip
def test_a_rule_given_the_stock_rl_observation_says_which_env_it_reads(rule):
    from dtoc_rl.policies.registry import make_policy

    obs, info = gym.make("dtoc_rl/ReplayFlat-v0").reset(seed=0)
    pol = make_policy(rule)
    pol.reset(info)
    with pytest.raises(ValueError, match="decide on dtoc_rl/Replay-v0"):
        pol.act(obs, info)


@pytest.mark.parametrize(
    "bits",
    [np.full(N, 0.1, np.float32), np.full(N, np.nan), np.full(N, 2), np.array([None] * N, dtype=object)],
)
def test_the_flat_action_takes_bits_only(bits):
    env = make_flat_replay(max_items=N)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action bits must be 0 or 1, got"):
        env.step(bits)


def test_the_flat_action_takes_float_bits_as_sb3_samples_them():
    env = make_flat_replay(max_items=N)
    env.reset(seed=0)
    env.step(np.ones(N, np.float32))
