"""The policy-facing view of a DTOC store: feature names, spaces, and a builder.

ReplayEnv, LiveEnv and the live Orchestrator all hand policies the same
``Dict`` observation, so one policy object works in all three.  ReplayEnv
fills it from compiled arrays (fast path); the others describe each stored
output with an :class:`ItemState` and call :func:`build_observation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from dtoc_rl.models import FAMILIES, family_id
from dtoc_rl.tools import TOOL_CATEGORIES

__all__ = [
    "GLOBAL_FEATURES",
    "ITEM_FEATURES",
    "ItemState",
    "action_space",
    "build_observation",
    "check_action",
    "decode_action",
    "observation_space",
]

ITEM_FEATURES: tuple[str, ...] = (
    "est_tokens_k",  # the output's estimated tokens / 1000
    "age",  # steps since it was stored (newest = 0)
    "visible",
    "times_needed",  # needs on it so far
    "since_need",  # steps since its last need (its age if never needed)
    "modified",  # what it read was modified later, so far
    "is_error",
    "superseded",  # a later step re-read the same resource, so far
    "rereads",  # misses it caused
    "toggles",  # visibility changes so far
    "turns_after",  # user turns that began after it
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
    "full_tokens_k",  # active tokens if every output were visible
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


@dataclass
class ItemState:
    """One stored output as a policy sees it (see ITEM_FEATURES)."""

    est_tokens: int
    age: int
    visible: bool
    tool_id: int = 0
    times_needed: int = 0
    since_need: int | None = None
    modified: bool = False
    is_error: bool = False
    superseded: bool = False
    rereads: int = 0
    toggles: int = 0
    turns_after: int = 0

    def row(self) -> list[float]:
        return [
            self.est_tokens / 1000.0,
            self.age,
            float(self.visible),
            self.times_needed,
            self.age if self.since_need is None else self.since_need,
            float(self.modified),
            float(self.is_error),
            float(self.superseded),
            self.rereads,
            self.toggles,
            self.turns_after,
        ]


def build_observation(
    items: Sequence[ItemState],
    n: int,
    *,
    active_tokens: int,
    step: int,
    model_family: str = "other",
    budget_tokens: int = 0,
    saved_tokens: int = 0,
    misses: int = 0,
    mgmt_calls: int = 0,
) -> dict[str, np.ndarray]:
    """The observation for the ``n`` most recent of ``items`` (oldest first)."""
    window = list(items)[-n:] if n else []
    m = len(window)
    feats = np.zeros((n, len(ITEM_FEATURES)), np.float32)
    tool = np.zeros(n, np.int64)
    vis = np.zeros(n, bool)
    if m:
        feats[:m] = np.asarray([it.row() for it in window], np.float32)
        tool[:m] = [it.tool_id for it in window]
        vis[:m] = [it.visible for it in window]
    item_mask = np.zeros(n, np.int8)
    item_mask[:m] = 1
    return {
        "items": feats,
        "item_tool": tool,
        "item_mask": item_mask,
        "enable_mask": (item_mask.astype(bool) & ~vis).astype(np.int8),
        "disable_mask": vis.astype(np.int8),
        "globals": np.array(
            [
                active_tokens / 1000.0,
                budget_tokens / 1000.0,
                step,
                len(items),
                sum(1 for it in items if it.visible),
                saved_tokens / 1000.0,
                misses,
                mgmt_calls,
                (active_tokens + saved_tokens) / 1000.0,
            ],
            np.float32,
        ),
        "family": np.int64(family_id(model_family)),
    }


def decode_action(action: Any, n: int, space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """Validate an ``{"enable", "disable"}`` action over ``n`` slots into two boolean masks.

    Errors name the expected space; any non-zero integer counts as set."""
    en, di = check_action(action, n, space)
    return (
        en if en.dtype.kind == "b" else en.astype(np.bool_),  # nonzero -> True
        di if di.dtype.kind == "b" else di.astype(np.bool_),
    )


def check_action(action: Any, n: int, space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decode_action` without the conversion: the two arrays, checked to have shape ``(n,)`` and an
    integer or bool dtype, as given (any non-zero entry counts as set).  For callers that only need
    the few valid slots as booleans and count the rest with ``np.count_nonzero``, which reads
    integers as they are, so converting all ``n`` entries would be wasted work."""
    try:
        en, di = action["enable"], action["disable"]
    except (TypeError, KeyError, IndexError):
        raise ValueError(
            f"action must be a dict with keys 'enable' and 'disable' matching {space}; "
            f"got {type(action).__name__}"
            + (f" with keys {sorted(action)}" if isinstance(action, dict) else "")
        ) from None
    # the usual case, two arrays of the right shape and kind, checked inline (called on every env step)
    if (
        type(en) is np.ndarray
        and type(di) is np.ndarray
        and en.shape == di.shape == (n,)
        and en.dtype.kind in "biu"
        and di.dtype.kind in "biu"
    ):
        return en, di
    return _mask("enable", en, n, space), _mask("disable", di, n, space)


def _mask(name: str, a: Any, n: int, space: spaces.Space) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != (n,):
        raise ValueError(f"action[{name!r}] has shape {a.shape}; expected ({n},) for {space}")
    if a.dtype.kind not in "biu":
        raise ValueError(
            f"action[{name!r}] has dtype {a.dtype}; expected integers or bools, MultiBinary({n})"
        )
    return a
