"""The Policy interface: an observation in, enable/disable sets out.

The observation is the ``Dict`` described in :mod:`dtoc_rl.engine.features`; the
action is ``{"enable": MultiBinary(N), "disable": MultiBinary(N)}`` over the
same slots.  The same object runs in ReplayEnv, LiveEnv and the live
Orchestrator.  ``info`` carries extras some policies need (``"text"`` for LLM
policies, ``"slot_steps"``); rule policies ignore it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from dtoc_rl.engine.contract import check_policy, reset_policy

__all__ = ["Policy", "check_policy", "empty_action", "reset_policy"]


def empty_action(n: int) -> dict[str, np.ndarray]:
    return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}


class Policy(ABC):
    """Base class.  Subclasses implement :meth:`act`; :meth:`act_batch` loops by default."""

    name: str = "policy"
    #: True for a policy that decides from the whole logged run (what later calls need, or what the log
    #: hid): it replays logs (``dtoc-rl evaluate``) and cannot decide a live agent's calls
    needs_logged_run: bool = False

    def reset(self, info: dict[str, Any] | None = None) -> None:  # noqa: B027 - optional hook
        """Called at the start of every episode."""

    @abstractmethod
    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Enable/disable masks for one observation."""

    def act_batch(self, obs: dict[str, np.ndarray], infos: list[dict] | None = None) -> dict[str, np.ndarray]:
        """Batched form: every array in ``obs`` has a leading batch axis."""
        b = len(obs["item_mask"])
        acts = [self.act({k: v[i] for k, v in obs.items()}, infos[i] if infos else None) for i in range(b)]
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
