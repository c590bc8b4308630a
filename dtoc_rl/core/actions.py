"""What an enable/disable action does: the one rule, for slot masks and for key sets.

A policy acts with two masks over observation slots (:func:`dtoc_rl.engine.features.action_space`); a
model or a script acts with two lists of output keys (``manage_context``).  Either way:

* an entry naming a stored output that is hidden, in ``enable`` only, shows it; one naming a visible
  output, in ``disable`` only, hides it; anything else about a stored output does nothing;
* an entry naming no stored output (a padding slot, an unknown key) is **invalid**, once per set it
  is in; a stored output named in both sets is invalid once and left as it is.

:func:`resolve` is that rule over masks; :func:`resolve_keys` maps key sets onto it, so the changes
and the invalid count are the same whichever form the action takes.  :func:`apply_slots` resolves a
policy's masks over a window of keys and applies them to a context; ReplayEnv's byte-level fast path
is pinned equal to :func:`resolve` by a test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Applied", "KeyChanges", "SlotChanges", "apply_slots", "resolve", "resolve_keys"]

_gt = np.greater
try:  # the C function behind np.count_nonzero, without its Python-level dispatch
    from numpy._core.multiarray import count_nonzero as _count
except ImportError:  # numpy < 2
    _count = np.count_nonzero


@dataclass(frozen=True)
class SlotChanges:
    """What an action over slots does: the slots to show, to hide, and its invalid entries."""

    enable: np.ndarray  # slot indices, ascending
    disable: np.ndarray
    invalid: int


def resolve(enable: np.ndarray, disable: np.ndarray, visible: np.ndarray) -> SlotChanges:
    """The changes of masks ``enable``/``disable`` (any non-zero entry is set) over slots whose first
    ``len(visible)`` hold stored outputs of that visibility (bools); the slots after them hold nothing."""
    m = len(visible)
    e, d = enable[:m], disable[:m]
    if e.dtype.kind != "b":
        e = e != 0
    if d.dtype.kind != "b":
        d = d != 0
    invalid = _count(enable[m:]) + _count(disable[m:]) + _count(e & d)
    # for booleans x > y is x & ~y: shown = enable & ~disable & ~visible, hidden = disable & ~enable & visible
    return SlotChanges(_gt(_gt(e, d), visible).nonzero()[0], (_gt(d, e) & visible).nonzero()[0], int(invalid))


@dataclass
class KeyChanges:
    """What an action over keys does (see :func:`resolve_keys`)."""

    enable: list[str] = field(default_factory=list)  # keys to show
    disable: list[str] = field(default_factory=list)  # keys to hide
    unchanged: list[str] = field(default_factory=list)  # stored, one set, already in that state
    conflicts: list[Any] = field(default_factory=list)  # named in both sets
    unknown: list[Any] = field(default_factory=list)  # naming no stored output (one set)
    duplicates: list[Any] = field(default_factory=list)  # repeated within one set (acted on once)
    invalid: int = 0


def resolve_keys(
    enable: Iterable[Any], disable: Iterable[Any], visible_of: Callable[[str], bool | None]
) -> KeyChanges:
    """The changes of key sets ``enable``/``disable``; ``visible_of(key)`` is the stored output's
    visibility, None when nothing is stored under it (an entry that is not a string names nothing).

    Each distinct stored key takes a slot and each unknown entry one past them, so :func:`resolve`
    decides and counts exactly as it does for a policy's masks.  Lists keep the order of the input."""
    out = KeyChanges()
    named: tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]] = ([], [])  # distinct (tag, entry) per set
    seen: tuple[set[Any], set[Any]] = (set(), set())
    for j, keys in enumerate((enable, disable)):
        for k in keys:
            tag = k if isinstance(k, str) else ("\0", repr(k))  # unhashable entries compare by repr
            if tag in seen[j]:
                if isinstance(k, str) and k not in out.duplicates:
                    out.duplicates.append(k)
                continue
            seen[j].add(tag)
            named[j].append((tag, k))
    slot: dict[str, int] = {}  # stored keys, numbered in the order they are first named
    vis: list[bool] = []
    for tag, k in itertools.chain(*named):
        if tag is k and k not in slot and (v := visible_of(k)) is not None:
            slot[k] = len(vis)
            vis.append(bool(v))
    m = len(vis)
    pos: tuple[list[int], list[int]] = ([], [])
    size = m
    for j in (0, 1):
        for tag, _ in named[j]:
            i = slot.get(tag) if tag.__class__ is str else None
            if i is None:  # an unknown entry: a padding slot of its own
                i, size = size, size + 1
            pos[j].append(i)
    masks = ([False] * size, [False] * size)
    for j in (0, 1):
        for i in pos[j]:
            masks[j][i] = True
    ch = resolve(np.array(masks[0], np.bool_), np.array(masks[1], np.bool_), np.array(vis, np.bool_))
    out.invalid = ch.invalid
    # slots are numbered in naming order, so ascending slots keep each list's order
    key_at = list(slot)
    out.enable = [key_at[i] for i in ch.enable.tolist()]
    out.disable = [key_at[i] for i in ch.disable.tolist()]
    both = {t for t in seen[0] & seen[1] if t.__class__ is str}
    for j in (0, 1):
        for tag, k in named[j]:
            if tag in both:
                if j == 0:
                    out.conflicts.append(k)
            elif tag not in slot or tag.__class__ is not str:
                out.unknown.append(k)
            elif vis[slot[tag]] == (j == 0):
                out.unchanged.append(k)
    return out


@dataclass
class Applied:
    """What :func:`apply_slots` did."""

    enabled: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # changes ``allow`` refused
    invalid: int = 0


def apply_slots(
    ctx: Any,
    enable: np.ndarray,
    disable: np.ndarray,
    keys: Sequence[str],
    visible: np.ndarray,
    *,
    allow: Callable[[str, bool], bool] | None = None,
) -> Applied:
    """Apply a policy's checked masks to ``ctx`` (a :class:`~dtoc_rl.core.context.DTOCContext`): slot ``i``
    holds the output ``keys[i]`` of visibility ``visible[i]``, the slots after ``len(keys)`` nothing.
    ``allow(key, visible)`` may refuse a change (a hybrid session's pins): it is listed in ``blocked``."""
    ch = resolve(enable, disable, visible)
    done = Applied(invalid=ch.invalid)
    want: tuple[list[str], list[str]] = ([], [])
    for slots, show, dest in ((ch.enable, True, want[0]), (ch.disable, False, want[1])):
        for i in slots:
            k = keys[int(i)]
            if allow is not None and not allow(k, show):
                done.blocked.append(k)
            else:
                dest.append(k)
    if want[0] or want[1]:
        report = ctx.manage_context(enable=want[0], disable=want[1])
        done.enabled, done.disabled = list(report.enabled), list(report.disabled)
    return done
