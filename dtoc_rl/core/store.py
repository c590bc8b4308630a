"""The DTOC store S: key → ToolOutput, plus the session's message log.

One interface, two backends: :class:`MemoryStore` (default, fast, for RL) and
:class:`~dtoc_rl.core.sqlite_store.SQLiteStore` (persistent, reopenable by session
id).  Both keep the active-token total of the stored outputs up to date on
every change, so reading it is O(1); :meth:`Store.recount` recomputes it from
scratch for checking.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dtoc_rl.core.record import ToolOutput, format_key
from dtoc_rl.core.tokens import TokenEstimator, get_estimator

__all__ = ["MemoryStore", "SessionConflictError", "Store", "StoreFileError", "UnknownKeyError"]


class UnknownKeyError(KeyError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"unknown tool key {self.key!r}"


class StoreFileError(ValueError):
    """A session file that cannot be used: empty, corrupt, or not a DTOC store."""


class SessionConflictError(RuntimeError):
    """Another writer changed the session since this store loaded it."""


class Store(ABC):
    """Common behaviour; backends implement the ``_persist_*`` hooks.

    Every change is durable on its own; :meth:`transaction` groups several into
    one unit that is kept whole or not at all (an output and the message that
    places it in the context, for example).
    """

    session_id: str
    estimator: TokenEstimator

    def __init__(self, estimator: TokenEstimator | str | None = None, session_id: str | None = None):
        self.estimator = get_estimator(estimator)
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._records: dict[str, ToolOutput] = {}
        self._by_call: dict[str, str] = {}
        self._messages: list[dict[str, Any]] = []
        self._active = 0
        # Called with (changed_keys, visible) after every visibility change, so views
        # such as an assembled context can update in place instead of rebuilding.
        self.listeners: list[Callable[[list[str], bool], None]] = []
        self._undo: list[Callable[[], None]] | None = None  # set inside transaction()

    # -- reading --------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __iter__(self) -> Iterator[ToolOutput]:
        return iter(self._records.values())

    def keys(self) -> list[str]:
        return list(self._records)

    def get(self, key: str) -> ToolOutput:
        try:
            return self._records[key]
        except KeyError:
            raise UnknownKeyError(key) from None

    def by_call_id(self, call_id: str) -> ToolOutput | None:
        key = self._by_call.get(call_id)
        return self._records[key] if key is not None else None

    @property
    def where(self) -> str:
        """The session and where it lives, for error messages."""
        return f"session {self.session_id!r} (in memory)"

    @property
    def active_tokens(self) -> int:
        """Tokens the stored outputs occupy in the active context (O(1))."""
        return self._active

    def recount(self) -> int:
        """Active tokens recomputed from every record's rendered text."""
        return sum(self.estimator.count(r.render()) for r in self._records.values())

    def visible_keys(self) -> list[str]:
        return [k for k, r in self._records.items() if r.visible]

    def hidden_keys(self) -> list[str]:
        return [k for k, r in self._records.items() if not r.visible]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The session's non-tool-output messages, in order (see DTOCContext)."""
        return self._messages

    # -- writing --------------------------------------------------------------
    def next_key(self) -> str:
        return format_key(len(self._records))

    def add(
        self,
        tool_result: str | bytes,
        *,
        tool_name: str = "",
        tool_args: Any = None,
        call_id: str | None = None,
        step: int | None = None,
        timestamp: float | None = None,
        visible: bool = True,
    ) -> ToolOutput:
        """Store one output under a fresh key and return its record."""
        if isinstance(tool_result, bytes | bytearray):
            # Keep undecodable bytes visible as escapes rather than dropping them.
            tool_result = bytes(tool_result).decode("utf-8", errors="backslashreplace")
        if not isinstance(tool_result, str):
            raise TypeError(f"tool_result must be str or bytes, got {type(tool_result).__name__}")
        if call_id is not None and call_id in self._by_call:
            raise ValueError(f"call id {call_id!r} already answered by {self._by_call[call_id]}")
        rec = ToolOutput.create(
            self.next_key(),
            tool_result,
            self.estimator,
            timestamp=time.time() if timestamp is None else timestamp,
            visible=visible,
            tool_name=tool_name,
            tool_args=tool_args,
            step=len(self._records) if step is None else step,
            call_id=call_id,
        )
        self._persist_add(rec)
        self._records[rec.tool_key] = rec
        if call_id is not None:
            self._by_call[call_id] = rec.tool_key
        self._active += rec.cost
        if self._undo is not None:
            self._undo.append(lambda: self._forget(rec))
        return rec

    def _forget(self, rec: ToolOutput) -> None:
        del self._records[rec.tool_key]
        if rec.call_id is not None:
            self._by_call.pop(rec.call_id, None)
        self._active -= rec.cost

    def set_visible(self, keys: Iterable[str], visible: bool) -> list[str]:
        """Set visibility; returns the keys that changed.  Unknown keys raise
        before anything changes."""
        keys = list(dict.fromkeys(keys))
        for k in keys:
            if k not in self._records:
                raise UnknownKeyError(k)
        changed = [k for k in keys if self._records[k].visible != visible]
        if changed:
            self._persist_visibility(changed, visible)
            self._flip(changed, visible)
            if self._undo is not None:
                self._undo.append(lambda: self._flip(changed, not visible))
        return changed

    def _flip(self, keys: list[str], visible: bool) -> None:
        for k in keys:
            rec = self._records[k]
            self._active -= rec.cost
            rec.visible = visible
            self._active += rec.cost
        for listener in self.listeners:
            listener(keys, visible)

    def append_message(self, message: dict[str, Any]) -> None:
        self._persist_message(message)
        self._messages.append(message)
        if self._undo is not None:
            self._undo.append(self._messages.pop)

    def transaction(self) -> _Transaction:
        """Make the changes inside a ``with store.transaction():`` block one unit: on an
        exception none of them is kept (the store is as before the block) and a process
        killed inside the block leaves none of them on disk.  Nested blocks join the
        outermost one."""
        return _Transaction(self)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (no-op in memory)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- backend hooks --------------------------------------------------------
    def _begin(self) -> None:  # noqa: B027 - optional hook
        """Start a transaction (see :meth:`transaction`)."""

    def _commit(self) -> None:  # noqa: B027 - optional hook
        """Make the transaction's changes durable."""

    def _rollback(self) -> None:  # noqa: B027 - optional hook
        """Drop the transaction's persisted changes."""

    @abstractmethod
    def _persist_add(self, rec: ToolOutput) -> None: ...

    @abstractmethod
    def _persist_visibility(self, keys: list[str], visible: bool) -> None: ...

    @abstractmethod
    def _persist_message(self, message: dict[str, Any]) -> None: ...


class _Transaction:
    """The context manager of :meth:`Store.transaction` (a plain class: it runs on every stored
    output, where a generator-based one costs several times more)."""

    __slots__ = ("outer", "store")

    def __init__(self, store: Store):
        self.store = store
        self.outer = False

    def __enter__(self) -> None:
        s = self.store
        if s._undo is None:
            s._begin()
            s._undo = []
            self.outer = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.outer:
            return False
        s = self.store
        if exc_type is None:
            try:
                s._commit()
            except BaseException:
                self._abort()
                raise
            s._undo = None
            return False
        self._abort()
        return False

    def _abort(self) -> None:
        s = self.store
        undo, s._undo = s._undo or [], None
        try:
            s._rollback()
        finally:
            for step in reversed(undo):
                step()


class MemoryStore(Store):
    """In-memory store: the default, and what the RL environments use."""

    def _persist_add(self, rec: ToolOutput) -> None:
        pass

    def _persist_visibility(self, keys: list[str], visible: bool) -> None:
        pass

    def _persist_message(self, message: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return (
            f"MemoryStore(session_id={self.session_id!r}, outputs={len(self)}, active_tokens={self._active})"
        )
