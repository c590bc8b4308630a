"""Observation and action spaces shared by ReplayEnv and LiveEnv."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from dtoc_rl.models import FAMILIES
from dtoc_rl.tools import TOOL_CATEGORIES

__all__ = ["GLOBAL_FEATURES", "ITEM_FEATURES", "action_space", "observation_space"]

ITEM_FEATURES: tuple[str, ...] = (
    "est_tokens_k",
    "age",
    "visible",
    "times_needed",
    "since_need",
    "modified",
    "is_error",
    "superseded",
    "rereads",
    "toggles",
)
GLOBAL_FEATURES: tuple[str, ...] = (
    "active_tokens_k",
    "budget_k",
    "step",
    "stored",
    "visible",
    "saved_tokens_k",
    "misses",
    "mgmt_calls",
)


def observation_space(n: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "items": spaces.Box(-np.inf, np.inf, (n, len(ITEM_FEATURES)), np.float32),
            "item_tool": spaces.Box(0, len(TOOL_CATEGORIES) - 1, (n,), np.int64),
            "item_mask": spaces.MultiBinary(n),
            "enable_mask": spaces.MultiBinary(n),
            "disable_mask": spaces.MultiBinary(n),
            "globals": spaces.Box(-np.inf, np.inf, (len(GLOBAL_FEATURES),), np.float32),
            "family": spaces.Discrete(len(FAMILIES)),
        }
    )


def action_space(n: int) -> spaces.Dict:
    return spaces.Dict({"enable": spaces.MultiBinary(n), "disable": spaces.MultiBinary(n)})
