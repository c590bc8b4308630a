"""Checks of the numbers both environments take: a count or a reward weight that would silently
change the experiment (a fraction of a slot, a negative budget, a NaN weight) is refused instead."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_counts", "check_weights"]


def check_counts(**counts: tuple[Any, int]) -> None:
    """Each ``name=(value, low)``: an integer (numpy's too) of at least ``low``, else ValueError."""
    for name, (n, low) in counts.items():
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {n!r}")


def check_weights(**weights: Any) -> None:
    """Each ``name=value``: a finite real number (a NaN or infinite weight makes every reward so)."""
    for name, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w):
            raise ValueError(f"{name} must be a finite number, got {w!r}")
