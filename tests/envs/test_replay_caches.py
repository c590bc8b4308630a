"""ReplayEnv's per-episode caches are bounded, and a rebuilt entry replays as the cached one did."""

from __future__ import annotations

import numpy as np

import dtoc_rl.envs.replay as replay_mod
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes


def _episode_obs(env, i):
    from dtoc_rl.policies.baselines import LastNObservations

    pol = LastNObservations(n=2)  # a rule that hides: the observations change as it acts
    obs, info = env.reset(seed=0, options={"index": i})
    out = [obs["items"].copy()]
    done = False
    while not done:
        obs, _, done, _, info = env.step(pol.act(obs, info))
        out.append(obs["items"].copy())
    return out


def test_an_env_over_many_episodes_keeps_a_bounded_cache(monkeypatch):
    eps = load_episodes(None)[:6]
    first = _episode_obs(ReplayEnv(trajectories=eps), 0)
    monkeypatch.setattr(replay_mod, "_SIM_CACHE", 3)
    env = ReplayEnv(trajectories=eps)
    for i in range(len(eps)):
        _episode_obs(env, i)
        assert len(env._templates) <= 3 and len(env._sims) <= 3
    assert 0 not in env._templates  # the first episode's entries were let go
    again = _episode_obs(env, 0)
    assert len(again) == len(first) and all(np.array_equal(a, b) for a, b in zip(first, again))
