"""Need labels for clients of ``dtoc-rl serve`` that cannot label them (agents in other languages).

A client that names a ``session`` in its ``/decide`` requests may send each model call of
the session once, as a ``turn`` (the assistant text, the user text since the previous
turn, and each tool call with its item key, tool, arguments and output).  The service
keeps an :class:`~dtoc_rl.serve.orchestrator.Orchestrator` per session (its
:class:`~dtoc_rl.engine.session.SessionTracker`, the one LiveEnv uses), which labels the turns
as it does for a Python agent (:class:`~dtoc_rl.labels.NeedLabeller`: the labels
``dtoc-rl ingest`` gives the session's log), and fills the need features
(``times_needed``, ``since_need``, ``modified``, ``rereads``) of the request's items that
carry none themselves.  Sessions live in memory, the least recently used dropped first.

A session belongs to the client that made it: its name is looked up among the sessions of the
request's client (the service's token it authenticated with), so a client holding another
token cannot read or extend it, even knowing its name.  Memory is bounded twice: a session's
text (413 beyond ``max_chars``) and the text of all sessions together (``max_total_chars``:
sessions idle for ``idle_reclaim_s`` seconds are dropped to make room, else a 429).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME
from dtoc_rl.engine.decide_request import DecideError, Request, Turn
from dtoc_rl.engine.features import ItemState
from dtoc_rl.serve.orchestrator import Orchestrator

__all__ = [
    "DEFAULT_IDLE_RECLAIM_S",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSION_CHARS",
    "DEFAULT_MAX_TOTAL_CHARS",
    "SessionLabels",
    "Sessions",
]

DEFAULT_MAX_SESSIONS = 64
# Text a session may hold (its turns' outputs, messages and arguments).  A session's labels take
# 8-9 bytes of memory per character of real agent output (RepoLaunch's build logs) and up to ~30
# where every word is new (random hex): this bounds a session near 180 MB, 600 MB at worst, and
# holds a session of ~2,000 calls of 10,000 characters (the OpenCode plugin cuts each text to 50,000).
DEFAULT_MAX_SESSION_CHARS = 20_000_000
# All sessions together (~450 MB of real output, 1.5 GB at worst): without it, 64 sessions at the
# per-session cap could take tens of GB.
DEFAULT_MAX_TOTAL_CHARS = 50_000_000
# A session unused this long may be dropped when the total is reached (its client gets a 409 and
# sends it anew); a busier service answers 429 instead of dropping sessions still in use.
DEFAULT_IDLE_RECLAIM_S = 300.0


class SessionLabels:
    """The need labels of one client session, fed turn by turn (thread-safe)."""

    def __init__(
        self,
        task: str | None = None,
        system: str | None = None,
        model: str = "",
        *,
        max_chars: int = DEFAULT_MAX_SESSION_CHARS,
    ):
        # Agent mode: no policy runs here; the orchestrator only stores and labels.
        self.orch = Orchestrator(mode="agent", query=task or None, system=system or None, model=model)
        self.turns = 0
        self.chars = len(task or "") + len(system or "")
        self.max_chars = max_chars
        self.lock = threading.Lock()
        self.last_used = 0.0  # set by Sessions (its clock)
        self.dropped = False  # set by Sessions when it lets go of this session
        self.joined = False  # set by Sessions when a request other than the one that made it uses it
        self._keys: dict[str, str] = {}  # the client's item key -> the orchestrator's key
        self._client: dict[str, tuple[int, str]] = {}  # the orchestrator's key -> (its order, the client's)
        # the client's keys of the outputs hidden in the store, kept by a store listener: a request's
        # items are compared with it in set operations (_show), not output by output
        self._hidden: set[str] = set()
        self.orch.store.listeners.append(self._on_visibility)

    def add(
        self,
        turns: list[Turn],
        shown: dict[str, bool],
        reserve: Callable[[int, int], None] | None = None,
        step: int | None = None,
    ) -> None:
        """Record the turns not seen yet (a resent turn is skipped; a gap is a 409 error, a
        session over its text limit a 413).  ``reserve(k, size)`` claims a turn's text from a
        shared total (it raises the DecideError to return when it cannot).  A turn is checked
        before anything of it is recorded: a refused turn leaves nothing of itself (the
        request's earlier turns stay).

        ``shown``: the request's items' visibility (client key -> visible), which is what the client
        sent the call whose answer is its newest turn: that turn is recorded with it, whatever the
        service answered before (a client may time out, or not apply an answer).  Only the newest
        call's is known: the request's last turn is the newest when it is turn ``step - 1`` (``step``:
        the model calls so far, as the OpenCode plugin counts them), else, without a step, when the
        items name no output of a turn not sent yet; the other turns of a request (a client sending a
        long session in parts), and every turn of a session sent anew (a new session whose
        first request brings more than its first turn: after a restart or a drop), is history whose
        visibility is not known (``masked_before`` null; ingest joins such a log to the one before)."""
        anew = self.turns == 0 and any(t.index > 0 for t in turns)
        fresh = {c.key for t in turns if t.index >= self.turns for c in t.calls}
        if step is not None:
            newest = bool(turns) and turns[-1].index == step - 1
        else:
            newest = all(key in self._keys or key in fresh for key in shown)
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
            calls = []  # the stored outputs; j counts every call, as the request numbers them
            keys: set[str] = set()
            for j, c in enumerate(t.calls):
                if c.tool == MANAGE_CONTEXT_NAME:  # a manage_context call of the client's own stores nothing
                    continue
                if c.key in self._keys or c.key in keys:  # one key, one output: else a need goes astray
                    raise DecideError(
                        422,
                        f"turns[{k}].calls[{j}].key: duplicate key {c.key!r} (an earlier call of the "
                        "session has it; each output needs its own key)",
                        f"turns[{k}].calls[{j}].key",
                    )
                keys.add(c.key)
                calls.append(c)
            size = len(t.user_text) + len(t.assistant_text)
            size += sum(len(c.output) + len(_args_text(c.args)) for c in calls)
            if self.chars + size > self.max_chars:
                raise DecideError(
                    413,
                    f"turns[{k}]: the session would hold more than {self.max_chars:,} characters of "
                    "text; start a new session (or send shorter outputs)",
                    f"turns[{k}]",
                )
            if reserve is not None:
                reserve(k, size)
            self.chars += size
            seen = not anew and newest and k == len(turns) - 1
            try:
                if seen:
                    self._show(shown)
                if t.user_text:
                    self.orch.add_user(t.user_text)
                recorded = self.orch.record_assistant(
                    t.assistant_text,
                    [{"name": c.tool, "arguments": _args(c.args), "id": c.id} for c in calls],
                    seen=seen,
                )
                for c, r in zip(calls, recorded):
                    key = self.orch.add_tool_result(r["id"], c.output, is_error=c.is_error, model_key=c.key)
                    self._keys[c.key] = key
                    self._client[key] = (len(self._client), c.key)
                    if not self.orch.store.get(key).visible:
                        self._hidden.add(c.key)
            except (ValueError, TypeError) as e:  # what the schema cannot catch: never a 500
                raise DecideError(422, f"turns[{k}]: {e}", f"turns[{k}]") from None
            self.turns += 1

    def sent(self, shown: dict[str, bool]) -> None:
        """What the client is to show its model at the call it asked about (``shown``: client item key
        -> visible, the service's answer applied), as the session's own visibility: what a log written
        now says the call in flight was sent.  The next request's items say what it was sent in the
        end (:meth:`add`'s ``shown``); a hidden output the answer needs counts as a miss, as for a
        Python agent's Orchestrator.  Call under :attr:`lock`."""
        self._show(shown)

    def _show(self, shown: dict[str, bool]) -> None:
        # The items whose visibility differs from the store's, in set operations that run in C (a long
        # session's request holds thousands of items, and comes here twice)
        told = set(itertools.compress(shown, map(operator.not_, shown.values())))  # hidden, as told
        keys, client = self._keys, self._client
        differ = [k for k in told - self._hidden if k in keys]
        differ += [k for k in self._hidden - told if k in shown]
        if not differ:
            return
        changed = sorted((client[keys[k]][0], keys[k], shown[k]) for k in differ)
        show = [o for _, o, v in changed if v]
        hide = [o for _, o, v in changed if not v]
        self.orch.manage_context(enable=show, disable=hide)

    def _on_visibility(self, keys: list[str], visible: bool) -> None:
        for k in keys:
            c = self._client.get(k)
            if c is not None:
                (self._hidden.discard if visible else self._hidden.add)(c[1])

    def states(
        self, keys: list[str], told: str | None = None, step: int | None = None
    ) -> dict[str, ItemState]:
        """Need features of these client item keys (those the session has).  ``told``: the user's words
        since the newest turn, which the call being decided is sent (``pending_user_text``): every
        output is then a user turn older (``turns_after``) at this decision, as a replay of the log
        counts it, once the session has every turn before ``step`` (else the words come after turns it
        lacks).  They are not kept: the turn that brings them counts them, and words told and then
        taken back (a retry after an undo) leave nothing."""
        ours = [(k, self._keys[k]) for k in keys if k in self._keys]
        found = dict(self.orch.item_states([o for _, o in ours]))
        ahead = 1 if told and step is not None and self.turns == step else 0
        return {
            k: dataclasses.replace(found[o], turns_after=found[o].turns_after + ahead) if ahead else found[o]
            for k, o in ours
            if o in found
        }


def _args(args: Any) -> Any:
    if args is None:
        return {}
    return args if isinstance(args, dict | str) else {"input": args}


def _args_text(args: Any) -> str:
    return args if isinstance(args, str) else ("" if args is None else json.dumps(args))


class Sessions:
    """The service's sessions, per client (beyond ``max_sessions``, the least recently used session of
    the client holding the most is dropped; text bounded per session by ``max_chars`` and in all by
    ``max_total_chars``, which all clients share)."""

    def __init__(
        self,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_chars: int = DEFAULT_MAX_SESSION_CHARS,
        max_total_chars: int = DEFAULT_MAX_TOTAL_CHARS,
        *,
        idle_reclaim_s: float = DEFAULT_IDLE_RECLAIM_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if max_chars < 1 or max_total_chars < 1:
            raise ValueError(f"text limits must be >= 1, got {max_chars} and {max_total_chars}")
        self.max_sessions = int(max_sessions)
        self.max_chars = int(max_chars)
        self.max_total_chars = int(max_total_chars)
        self.idle_reclaim_s = float(idle_reclaim_s)
        self._clock = clock
        self._sessions: OrderedDict[tuple[str, str], SessionLabels] = OrderedDict()
        self._total = 0  # characters held by the sessions in the table
        self._lock = threading.Lock()  # the table and the total: sessions label under their own locks

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def total_chars(self) -> int:
        return self._total

    def get(self, session: str, client: str = "") -> SessionLabels | None:
        return self._sessions.get((client, session))

    def _drop(self, key: tuple[str, str]) -> None:
        s = self._sessions.pop(key)
        s.dropped = True  # a request still using it keeps its own reference, uncounted
        self._total -= s.chars

    def _victim(self) -> tuple[str, str]:
        """The session to drop when the table is full: the least recently used one of the client
        holding the most sessions, so that one client opening many cannot push out another's."""
        held: dict[str, int] = {}
        for client, _ in self._sessions:
            held[client] = held.get(client, 0) + 1
        most = max(held.values())
        return next(k for k in self._sessions if held[k[0]] == most)  # the table is in LRU order

    def _reserve(self, s: SessionLabels, size: int, field: str) -> None:
        """Count ``size`` more characters for ``s`` (under the table lock)."""
        if s.dropped:
            return
        if self._total + size > self.max_total_chars:
            now = self._clock()
            for key in [k for k, o in self._sessions.items() if o is not s]:  # least recently used first
                if self._total + size <= self.max_total_chars:
                    break
                if now - self._sessions[key].last_used >= self.idle_reclaim_s:
                    self._drop(key)
        if self._total + size > self.max_total_chars:
            raise DecideError(
                429,
                f"{field}: the service holds {self._total:,} characters of session text and its limit is "
                f"{self.max_total_chars:,}; retry later, or send this session without texts",
                field,
            )
        self._total += size

    def feed(self, req: Request, client: str = "") -> SessionLabels | None:
        """Feed a request's turns to its session among ``client``'s, made when its first turn
        arrives (None: an unknown session and no turns, so nothing to label yet)."""
        assert req.session is not None
        key = (client, req.session)
        with self._lock:
            s = self._sessions.get(key)
            new = s is None
            if new:
                if not req.turns:
                    return None
                first = req.turns[0].index
                if first > 0:  # e.g. the service restarted: the client must send the session anew
                    raise DecideError(
                        409,
                        f"turns[0].index: unknown session {req.session!r} (turn {first} came before "
                        "turn 0); send every turn of the session again",
                        "turns[0].index",
                    )
                size = len(req.task or "") + len(req.system or "")
                if size > self.max_chars:
                    raise DecideError(
                        413, f"task: the session would hold more than {self.max_chars:,} characters", "task"
                    )
                s = SessionLabels(req.task, req.system, req.model or "", max_chars=self.max_chars)
                self._sessions[key] = s
                try:
                    self._reserve(s, size, "task")
                except DecideError:
                    del self._sessions[key]
                    raise
            else:
                self._sessions.move_to_end(key)
                s.joined = True  # another request uses it: it stays even if its maker's request fails
            s.last_used = self._clock()

        def reserve(k: int, size: int) -> None:
            with self._lock:
                self._reserve(s, size, f"turns[{k}]")

        try:
            with s.lock:
                s.add(req.turns, {it.key: it.visible for it in req.items}, reserve, req.step)
        except BaseException:
            # a session made by a refused request is not kept: it would take a place (or push out
            # another session) for a request that failed; the client sends its turns again.  Unless
            # another request has used it meanwhile, whose answer counted on it.
            if new:
                with self._lock:
                    if self._sessions.get(key) is s and not s.joined:
                        self._drop(key)
            raise
        if new:  # only a session that exists pushes another out
            with self._lock:
                while len(self._sessions) > self.max_sessions:
                    self._drop(self._victim())
        return s
