"""The Policy interface: an observation in, enable/disable sets out.

The observation is the ``Dict`` described in :mod:`dtoc_rl.engine.features`; the
action is ``{"enable": MultiBinary(N), "disable": MultiBinary(N)}`` over the
same slots.  The same object runs in ReplayEnv, LiveEnv and the live
Orchestrator.  ``info`` carries extras some policies need (``"text"`` for LLM
policies, ``"slot_steps"``); rule policies ignore it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from dtoc_rl.engine.contract import check_policy, reset_policy

__all__ = ["Policy", "batch_infos", "check_policy", "empty_action", "reset_policy"]


def batch_infos(infos: Any, b: int) -> list[dict[str, Any] | None]:
    """``b`` rows' infos from a list of dicts, or from a gymnasium vector env's ``infos`` (one dict
    of arrays, each ``"_key"`` marking the rows that carry ``key``)."""
    if infos is None or (not isinstance(infos, Mapping) and not len(infos)):
        return [None] * b
    if isinstance(infos, Mapping):  # nested dicts (an info's own dicts) are split the same way
        rows: list[dict[str, Any]] = [{} for _ in range(b)]
        for k, v in infos.items():
            if k.startswith("_"):
                continue
            has = infos.get(f"_{k}")
            parts = batch_infos(v, b) if isinstance(v, Mapping) else v
            if len(parts) != b:
                raise ValueError(f"act_batch: infos[{k!r}] has {len(parts)} rows for a batch of {b}")
            for i in range(b):
                if has is None or has[i]:
                    rows[i][k] = parts[i]
        return rows
    rows = list(infos)
    if len(rows) != b:
        raise ValueError(f"act_batch: {len(rows)} infos for a batch of {b} observations")
    return rows


def empty_action(n: int) -> dict[str, np.ndarray]:
    return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}


class Policy(ABC):
    """Base class.  Subclasses implement :meth:`act`; :meth:`act_batch` loops by default."""

    name: str = "policy"
    #: True for a policy that decides from the whole logged run (what later calls need, or what the log
    #: hid): it replays logs (``dtoc-rl evaluate``) and cannot decide a live agent's calls
    needs_logged_run: bool = False
    #: False for a policy whose decisions read no prices (the count and size rules): it can decide the
    #: calls of a model the price table does not know, which the live paths otherwise pass on unmanaged
    reads_prices: bool = True

    def reset(self, info: dict[str, Any] | None = None) -> None:  # noqa: B027 - optional hook
        """Called at the start of every episode."""

    @abstractmethod
    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Enable/disable masks for one observation."""

    def act_batch(self, obs: dict[str, np.ndarray], infos: Any = None) -> dict[str, np.ndarray]:
        """Batched form: every array in ``obs`` has a leading batch axis; ``infos`` a list of dicts or a
        vector env's dict of arrays.  One object decides every row, so a policy that keeps state across
        an episode's calls (most rules do: what they hid, when) needs one object per sub-env instead."""
        b = len(obs["item_mask"])
        rows = batch_infos(infos, b)
        acts = [self.act({k: v[i] for k, v in obs.items()}, rows[i]) for i in range(b)]
        return {k: np.stack([a[k] for a in acts]) for k in ("enable", "disable")}

    def config(self) -> dict[str, Any]:
        """Parameters, for reports (override where there are any)."""
        return {}

    @property
    def label(self) -> str:
        """Name plus parameters, e.g. ``last_n(n=5,polling=1)``."""
        cfg = self.config()
        return f"{self.name}({','.join(f'{k}={v}' for k, v in cfg.items())})" if cfg else self.name

    def __repr__(self) -> str:
        return self.label
