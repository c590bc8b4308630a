"""Gymnasium environments: ``dtoc_rl/Replay-v0`` and ``dtoc_rl/Live-v0``.

Importing this package registers both ids::

    import gymnasium as gym
    import dtoc_rl.envs  # noqa: F401  (registers the ids)

    env = gym.make("dtoc_rl/Replay-v0")                 # the bundled sample
    env = gym.make("dtoc_rl/Replay-v0", dataset="out")  # a dataset from `dtoc-rl ingest`
    env = gym.make("dtoc_rl/ReplayFlat-v0")             # for stock RL libraries (dtoc_rl.envs.wrappers)
"""

from gymnasium.envs.registration import register, registry

from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.envs.live import LiveEnv
from dtoc_rl.envs.replay import ReplayEnv
from dtoc_rl.envs.wrappers import StockRLWrapper

__all__ = ["GLOBAL_FEATURES", "ITEM_FEATURES", "LiveEnv", "ReplayEnv", "StockRLWrapper"]

if "dtoc_rl/Replay-v0" not in registry:
    register(id="dtoc_rl/Replay-v0", entry_point="dtoc_rl.envs.replay:ReplayEnv")
if "dtoc_rl/ReplayFlat-v0" not in registry:
    register(id="dtoc_rl/ReplayFlat-v0", entry_point="dtoc_rl.envs.wrappers:make_flat_replay")
if "dtoc_rl/Live-v0" not in registry:
    # real tools (clocks, pids, test timings in their outputs) and a sampled model: a seed picks the
    # task, not what the agent sees, so gymnasium's determinism checks do not apply
    register(id="dtoc_rl/Live-v0", entry_point="dtoc_rl.envs.live:LiveEnv", nondeterministic=True)
