"""Need labels for clients of ``dtoc-rl serve`` that cannot label them (agents in other languages).

A client that names a ``session`` in its ``/decide`` requests may send each model call of
the session once, as a ``turn`` (the assistant text, the user text since the previous
turn, and each tool call with its item key, tool, arguments and output).  The service
keeps an :class:`~dtoc_rl.orchestrator.Orchestrator` per session, which labels the turns
as it does for a Python agent (:class:`~dtoc_rl.labels.NeedLabeller`: the labels
``dtoc-rl ingest`` gives the session's log), and fills the need features
(``times_needed``, ``since_need``, ``modified``, ``rereads``) of the request's items that
carry none themselves.  Sessions live in memory, the least recently used dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from dtoc_rl.decide_request import DecideError, Request, Turn
from dtoc_rl.features import ItemState
from dtoc_rl.manage import MANAGE_CONTEXT_NAME
from dtoc_rl.orchestrator import Orchestrator

__all__ = ["DEFAULT_MAX_SESSIONS", "SessionLabels", "Sessions"]

DEFAULT_MAX_SESSIONS = 256


class SessionLabels:
    """The need labels of one client session, fed turn by turn."""

    def __init__(self, task: str | None = None, system: str | None = None, model: str = ""):
        # Agent mode: no policy runs here; the orchestrator only stores and labels.
        self.orch = Orchestrator(mode="agent", query=task or None, system=system or None, model=model)
        self.turns = 0
        self._keys: dict[str, str] = {}  # the client's item key -> the orchestrator's key

    def add(self, turns: list[Turn]) -> None:
        """Record the turns not seen yet (a resent turn is skipped; a gap is a 409 error)."""
        for k, t in enumerate(turns):
            if t.index < self.turns:
                continue
            if t.index > self.turns:
                raise DecideError(
                    409,
                    f"turns[{k}].index: turn {t.index} came before turn {self.turns}; send each turn "
                    "of the session once, in order (or start a new session)",
                    f"turns[{k}].index",
                )
            if t.user_text:
                self.orch.add_user(t.user_text)
            # a manage_context call of the client's own is not a stored output
            calls = [c for c in t.calls if c.tool != MANAGE_CONTEXT_NAME]
            recorded = self.orch.record_assistant(
                t.assistant_text, [{"name": c.tool, "arguments": _args(c.args)} for c in calls]
            )
            for c, r in zip(calls, recorded):
                self._keys[c.key] = self.orch.add_tool_result(r["id"], c.output, is_error=c.is_error)
            self.turns += 1

    def states(self) -> dict[str, ItemState]:
        """Need features by the client's item key."""
        ours = dict(self.orch.item_states())
        return {k: ours[o] for k, o in self._keys.items() if o in ours}

    def close(self) -> None:
        self.orch.close()


def _args(args: Any) -> Any:
    if args is None:
        return {}
    return args if isinstance(args, dict | str) else {"input": args}


class Sessions:
    """The service's sessions (least recently used dropped beyond ``max_sessions``)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.max_sessions = int(max_sessions)
        self._sessions: OrderedDict[str, SessionLabels] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def labels(self, req: Request) -> tuple[dict[str, ItemState], SessionLabels]:
        """Feed a request's turns to its session (made on first use); its need features."""
        assert req.session is not None
        with self._lock:  # labelling a turn takes about a millisecond: one lock is enough
            s = self._sessions.get(req.session)
            if s is None:
                s = SessionLabels(req.task, req.system, req.model or "")
                self._sessions[req.session] = s
                while len(self._sessions) > self.max_sessions:
                    _, old = self._sessions.popitem(last=False)
                    old.close()
            else:
                self._sessions.move_to_end(req.session)
            s.add(req.turns)
            return s.states(), s
