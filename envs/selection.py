"""Which episode a ``reset`` plays: shared by ReplayEnv (logged trajectories) and LiveEnv (tasks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["pick_index"]


def pick_index(
    options: dict[str, Any],
    *,
    key: str,
    ids: Sequence[str],
    rng: np.random.Generator,
    sequential: bool,
    counter: int,
) -> tuple[int, int]:
    """``options[key]`` names an item, ``options["index"]`` picks by position (modulo the count);
    otherwise the next item in order (``sequential``) or one drawn from ``rng``.

    Returns ``(index, counter)``, the counter advanced when the sequential order was used."""
    unknown = set(options) - {key, "index"}
    if unknown:  # a misspelt option would pick an episode the caller did not ask for
        raise ValueError(f"unknown reset options {sorted(unknown)}; known: {key!r}, 'index'")
    n = len(ids)
    if key in options:
        try:
            return list(ids).index(options[key]), counter
        except ValueError:
            raise KeyError(f"no {key} {options[key]!r}; available: {list(ids)[:20]}") from None
    if "index" in options:
        return int(options["index"]) % n, counter
    if sequential:
        return counter % n, counter + 1
    return int(rng.integers(n)), counter
