"""Offline-RL datasets from ReplayEnv: every logged trajectory replayed under a policy, written in
Minari's format (``pip install 'dtoc-rl[minari]'``).

    from dtoc_rl.policies.export import export_minari
    export_minari("dtoc_rl/replay-last_n-v0", "last_n:n=5", out_dir="minari_data")
    # MINARI_DATASETS_PATH=minari_data, then minari.load_dataset("dtoc_rl/replay-last_n-v0")

Episode ``i`` of the dataset is trajectory ``i`` of ``dataset`` in its order (``sequential=True``).
With ``flat=False`` the dataset has ReplayEnv's own spaces (``dtoc_rl/Replay-v0``: the ``Dict``
observation, the ``{"enable", "disable"}`` action); with ``flat=True`` those of
``dtoc_rl/ReplayFlat-v0`` (``item_features``, one visible bit per slot), which offline-RL libraries
take as they are.  The policy always acts on the native observation.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["action_to_bits", "export_minari"]


def action_to_bits(action: dict[str, Any], obs: dict[str, np.ndarray]) -> np.ndarray:
    """The visible bit per slot that a native ``{"enable", "disable"}`` action leads to."""
    visible = obs["disable_mask"] != 0  # stored and visible now
    en, di = np.asarray(action["enable"]) != 0, np.asarray(action["disable"]) != 0
    return ((visible | (en & ~di)) & ~(di & ~en)).astype(np.int8)


@contextmanager
def _datasets_path(out_dir: str | Path | None):
    # Minari reads where to write from this variable; set it for this export only.
    if out_dir is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(out_dir).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def export_minari(
    dataset_id: str,
    policy: Any = "none",
    *,
    dataset: Any = None,
    out_dir: str | Path | None = None,
    flat: bool = False,
    episodes: int | None = None,
    seed: int = 0,
    author: str | None = None,
    description: str | None = None,
    **env_kwargs: Any,
) -> dict[str, Any]:
    """Replay ``dataset`` (anything ReplayEnv takes; None: the bundled sample) under ``policy`` (a
    spec or a Policy object) and write the episodes as the Minari dataset ``dataset_id``
    (``namespace/name-vN``) under ``out_dir`` (default: Minari's own, ``MINARI_DATASETS_PATH`` or
    ``~/.minari/datasets``).  ``episodes`` caps how many trajectories are replayed.  Returns a
    summary (id, path, episodes, steps, the policy's label, mean return)."""
    import gymnasium as gym

    from dtoc_rl.engine.contract import reset_policy
    from dtoc_rl.envs.replay import ReplayEnv
    from dtoc_rl.envs.wrappers import StockRLWrapper
    from dtoc_rl.optional import require
    from dtoc_rl.policies.registry import make_policy

    minari = require("minari", "exporting to Minari", extra="minari")
    from minari.data_collector import EpisodeBuffer

    with _datasets_path(out_dir):  # before the replay, which can take a while
        if Path(minari.storage.get_dataset_path(dataset_id)).exists():
            raise FileExistsError(
                f"Minari dataset {dataset_id!r} already exists; delete it or pick another id"
            )
    pol = make_policy(policy)
    # sequential: episode i is trajectory i; expose_episode: the hindsight oracle plans from it
    env_kwargs = {"expose_episode": True, **env_kwargs, "sequential": True}
    if dataset is None or isinstance(dataset, str | os.PathLike):
        # through gym.make, so the dataset records an env spec that recreates the env
        env_id = "dtoc_rl/ReplayFlat-v0" if flat else "dtoc_rl/Replay-v0"
        kw = {**env_kwargs, **({"dataset": str(Path(dataset).resolve())} if dataset is not None else {})}
        import dtoc_rl.envs  # noqa: F401  registers the ids

        env = gym.make(env_id, **kw)
    else:  # objects cannot go in an env spec: the dataset then has none
        base = ReplayEnv(dataset, **env_kwargs)
        env = StockRLWrapper(base) if flat else base
    replay = env.unwrapped
    flat_view = _find(env, StockRLWrapper)
    n = len(replay.episodes) if episodes is None else min(episodes, len(replay.episodes))
    if n < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    label = getattr(pol, "label", type(pol).__name__)
    returns, buffers = [], []
    for i in range(n):
        obs, info = env.reset(seed=seed if i == 0 else None, options={"index": i})
        native = flat_view.native_observation if flat_view else obs
        reset_policy(pol, info)
        ep_obs, ep_act, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            act = pol.act(native, info)
            a = action_to_bits(act, native) if flat else act
            obs, r, term, trunc, info = env.step(a)
            native = flat_view.native_observation if flat_view else obs
            ep_obs.append(obs)
            ep_act.append(a)
            rewards.append(float(r))
            terms.append(bool(term))
            truncs.append(bool(trunc))
            done = term or trunc
        returns.append(sum(rewards))
        buffers.append(
            EpisodeBuffer(
                id=i,
                seed=seed if i == 0 else None,
                options={"index": i},
                observations=_columns(ep_obs),
                actions=_columns(ep_act),
                rewards=rewards,
                terminations=terms,
                truncations=truncs,
                infos={},
            )
        )
    with _datasets_path(out_dir):
        # Minari's own DataCollector needs jax (minari[create]); buffers written here need only minari.
        # Arrow storage: pyarrow comes with `datasets`; Minari's default (HDF5) needs h5py as well.
        ds = minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=env if env.spec is not None else None,
            eval_env=env if env.spec is not None else None,
            observation_space=env.observation_space,
            action_space=env.action_space,
            algorithm_name=f"dtoc_rl policy {label}",
            author=author,
            description=description
            or f"{n} logged agent trajectories replayed in DTOC-RL's ReplayEnv under the policy {label}",
            data_format="arrow",
        )
        path = str(minari.storage.get_dataset_path(dataset_id))
    return {
        "dataset_id": dataset_id,
        "path": path,
        "episodes": int(ds.total_episodes),
        "steps": int(ds.total_steps),
        "policy": label,
        "flat": flat,
        "mean_return": float(np.mean(returns)),
    }


def _columns(items: list[Any]) -> Any:
    """A list of dict observations/actions as a dict of lists (Minari's layout for Dict spaces)."""
    if items and isinstance(items[0], dict):
        return {k: [x[k] for x in items] for k in items[0]}
    return items


def _find(env: Any, cls: type) -> Any:
    """The wrapper of type ``cls`` in ``env``'s chain, or None."""
    while env is not None:
        if isinstance(env, cls):
            return env
        env = getattr(env, "env", None)
    return None
