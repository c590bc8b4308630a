"""What the serving and evaluating layers ask of a policy object, checked in one place.

A policy is any object with ``act(obs, info)``; ``reset(info)`` is optional.  The policies package
builds on :class:`dtoc_rl.policies.base.Policy`, but the Orchestrator and the service take any such
object, so the check lives below both.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_policy", "reset_policy"]


def check_policy(policy: Any, live: bool = False) -> Any:
    """``policy`` if it can decide: an object (not a class) with ``act(obs, info)`` (``reset(info)`` is
    optional: :func:`reset_policy`); with ``live``, one that needs no logged run (the oracle and the
    logged visibility replay logs).  A TypeError or ValueError says what is wrong."""
    if isinstance(policy, type):
        raise TypeError(f"{policy.__name__} is a class: give an instance, {policy.__name__}(...)")
    if not callable(getattr(policy, "act", None)):
        raise TypeError(f"a policy needs an act(obs, info) method; {type(policy).__name__} has none")
    if live and getattr(policy, "needs_logged_run", False):
        raise ValueError(
            f"{type(policy).__name__} decides from the whole logged run (what later calls need, or what "
            "the log hid), so it cannot decide a live agent's calls: it is for evaluation on logs"
        )
    return policy


def reset_policy(policy: Any, info: dict[str, Any] | None) -> None:
    """Start an episode: the policy's ``reset(info)`` where it has one (a plain object with ``act``
    only is a policy too)."""
    reset = getattr(policy, "reset", None)
    if callable(reset):
        reset(info)
