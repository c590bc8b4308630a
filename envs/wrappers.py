"""ReplayEnv for stock RL libraries (Stable-Baselines3, CleanRL-style loops, ...; RLlib is not tested here).

ReplayEnv's native action is ``Dict(enable=MultiBinary(N), disable=MultiBinary(N))``, which most
libraries do not take, and its observation key ``items`` is also the name of a ``dict`` /
``nn.ModuleDict`` method, which breaks libraries that build one sub-network per key.
:class:`StockRLWrapper` gives the same episodes with:

* **action** ``MultiBinary(N)``: one "visible" bit per slot, the visibility the policy wants for that
  slot's output at the next call.  A bit that asks for the output's current state does nothing, so a
  policy cannot make an invalid move; padding slots (``obs["item_mask"] == 0``) are ignored.
* **observation** the native ``Dict`` with ``items`` renamed ``item_features`` (every other key as in
  ``help(ReplayEnv)``), or, with ``flatten_obs=True``, one float32 ``Box`` vector: item features
  (slot-major), tool ids, item mask, visible mask, globals, one-hot family, the model's prices (what
  lets one network price a model it never trained on).

Rewards, episode ends and ``info`` are ReplayEnv's.  ``gym.make("dtoc_rl/ReplayFlat-v0", **kwargs)``
builds the wrapped env (``flatten_obs=True`` is accepted there too), so SB3 needs no adapter::

    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    import dtoc_rl.envs  # registers the ids

    venv = make_vec_env("dtoc_rl/ReplayFlat-v0", n_envs=4)
    PPO("MultiInputPolicy", venv).learn(10_000)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES

__all__ = ["StockRLWrapper", "bits_to_action", "make_flat_replay"]

_RENAMED = {"items": "item_features"}
_LEFT_OUT = frozenset({"item_words"})


def bits_to_action(bits: Any, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ReplayEnv's ``{"enable", "disable"}`` action that makes each stored slot's visibility equal its
    bit in ``bits`` (shape ``(N,)``), given the native observation ``obs`` it answers."""
    n = obs["item_mask"].shape[-1]
    b = np.asarray(bits)
    if b.shape != (n,):
        raise ValueError(f"action must be {n} visibility bits (MultiBinary({n})), got shape {b.shape}")
    # 0.0 / 1.0 floats are bits (SB3 returns MultiBinary samples so); a probability or NaN is not
    if b.dtype != bool and not ((b == 0) | (b == 1)).all():
        bad = b[(b != 0) & (b != 1)][0]
        bad = bad.item() if isinstance(bad, np.generic) else bad
        raise ValueError(
            f"action bits must be 0 or 1, got {bad!r} ({b.dtype}): threshold probabilities first"
        )
    want = b != 0
    return {
        "enable": (want & (obs["enable_mask"] != 0)).astype(np.int8),  # stored, hidden, wanted visible
        "disable": (~want & (obs["disable_mask"] != 0)).astype(np.int8),  # stored, visible, wanted hidden
    }


class StockRLWrapper(gym.Wrapper):
    """A ReplayEnv (or a wrapper of one) with a flat ``MultiBinary(N)`` action and library-safe
    observation keys; see the module docstring."""

    def __init__(self, env: gym.Env, *, flatten_obs: bool = False):
        super().__init__(env)
        native = env.observation_space
        if not isinstance(native, spaces.Dict) or "item_mask" not in native.spaces:
            raise TypeError(f"StockRLWrapper wraps a ReplayEnv; got an env with observation space {native}")
        self.n_slots = n = native["item_mask"].n
        self.flatten_obs = flatten_obs
        self.action_space = spaces.MultiBinary(n)
        self._n_families = native["family"].n
        if flatten_obs:
            size = (
                n * len(ITEM_FEATURES)
                + 3 * n
                + len(GLOBAL_FEATURES)
                + self._n_families
                + native["prices"].shape[0]
            )
            self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        else:
            # word hashes (up to 2**31) are ids for a learned embedding, not numbers an MLP can scale
            self.observation_space = spaces.Dict(
                {_RENAMED.get(k, k): s for k, s in native.spaces.items() if k not in _LEFT_OUT}
            )
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs = obs
        return self._convert(obs), info

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(bits_to_action(action, self._obs))
        self._obs = obs
        return self._convert(obs), reward, terminated, truncated, info

    @property
    def native_observation(self) -> dict[str, np.ndarray] | None:
        """The last observation in ReplayEnv's own form (what a ``dtoc_rl`` Policy reads)."""
        return self._obs

    def _convert(self, obs: dict[str, np.ndarray]):
        if not self.flatten_obs:
            return {_RENAMED.get(k, k): v for k, v in obs.items() if k not in _LEFT_OUT}
        onehot = np.zeros(self._n_families, np.float32)
        onehot[int(obs["family"])] = 1.0
        visible = obs["disable_mask"]  # stored and visible
        return np.concatenate(
            [
                obs["items"].reshape(-1),
                obs["item_tool"].astype(np.float32),
                obs["item_mask"].astype(np.float32),
                visible.astype(np.float32),
                obs["globals"],
                onehot,
                obs["prices"],
            ]
        ).astype(np.float32, copy=False)


def make_flat_replay(*, flatten_obs: bool = False, **kwargs: Any) -> StockRLWrapper:
    """``StockRLWrapper(ReplayEnv(**kwargs))``: the entry point of ``dtoc_rl/ReplayFlat-v0``."""
    from dtoc_rl.envs.replay import ReplayEnv

    return StockRLWrapper(ReplayEnv(**kwargs), flatten_obs=flatten_obs)
