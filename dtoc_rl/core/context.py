"""DTOCContext: the active context of one agent session, and AssembleContext.

The context is the user query, the agent's messages and reasoning, and every
tool output: visible ones in full as envelopes, hidden ones as placeholders.
Tool outputs live in a :class:`~dtoc_rl.core.store.Store`; everything else is an
append-only message log kept in the same store, so a SQLite session reopens
whole.

Typical loop::

    ctx = DTOCContext(query="Fix the failing test", system="You are ...")
    ctx.add_assistant("Let me look.", tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}])
    rec = ctx.add_tool_result("README.md\\nsrc\\n")           # answers the pending call
    ctx.manage_context(disable=[rec.tool_key])                  # -> StatusReport
    messages = ctx.to_openai()                                  # or ctx.to_anthropic()
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME, StatusReport, apply_manage_context, parse_arguments
from dtoc_rl.core.record import HIDDEN_NOTE, ToolOutput
from dtoc_rl.core.store import MemoryStore, Store
from dtoc_rl.core.tokens import TokenEstimator

__all__ = ["DTOCContext"]


class DTOCContext:
    """One session's active context over a store.

    Args:
        query: the user's task; becomes the first user message.
        system: optional system prompt.
        store: where outputs and messages live (a fresh MemoryStore if None).
            A reopened SQLiteStore brings its messages back; then ``query`` and
            ``system`` must be left None.
        estimator: token estimator for a new MemoryStore.
        hidden_note: what a placeholder tells the model (default: that manage_context restores it;
            :data:`~dtoc_rl.core.record.POLICY_NOTE` where the model has no such tool).
    """

    def __init__(
        self,
        query: str | None = None,
        system: str | None = None,
        store: Store | None = None,
        estimator: TokenEstimator | str | None = None,
        hidden_note: str = HIDDEN_NOTE,
    ):
        self.store = store if store is not None else MemoryStore(estimator)
        self.hidden_note = hidden_note
        self.estimator = self.store.estimator
        self._pending: deque[str] = deque()
        self._calls: dict[str, dict[str, Any]] = {}
        # The assembled context, kept up to date incrementally (see assemble()).
        self._assembled: list[dict[str, Any]] = []
        self._tool_pos: dict[str, int] = {}
        # The assembled messages rendered for chat completions (to_openai), by position, and the
        # positions whose visibility changed since: a long session renders only what is new.
        self._openai: list[dict[str, Any]] = []
        self._openai_stale: set[int] = set()
        self._openai_reasoning = False
        self._openai_lock = threading.Lock()  # two threads rendering at once would both extend the list
        try:
            self._msg_tokens = sum(self._message_tokens(m) for m in self.store.messages)
            answered = set()
            for m in self.store.messages:  # rebuild pairing state of a reopened session
                if m["role"] == "assistant":
                    for c in m.get("tool_calls") or []:
                        self._calls[c["id"]] = c
                        self._pending.append(c["id"])
                elif m["role"] == "tool":
                    answered.add(m["tool_call_id"])
            self._pending = deque(c for c in self._pending if c not in answered)
            for m in self.store.messages:
                self._assemble_one(m)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{self.store.where}: a stored message is malformed ({e!r})") from None
        if self.store.messages and (query or system):
            raise ValueError("this store already holds a session; reopen it without query/system")
        self.store.listeners.append(self._on_visibility)
        self._repair()
        if system:
            self._append({"role": "system", "content": system})
        if query is not None:
            self._append({"role": "user", "content": query})

    def _repair(self) -> None:
        """Give a stored output its missing tool message.  Session files written by versions
        that committed the two separately can hold such an output (a kill in between);
        its call would otherwise stay pending and could never be answered."""
        for call_id in list(self._pending):
            rec = self.store.by_call_id(call_id)
            if rec is not None:
                self._pending.remove(call_id)
                self._append({"role": "tool", "tool_call_id": call_id, "tool_key": rec.tool_key})

    # -- building the log -------------------------------------------------------
    def _message_tokens(self, m: dict[str, Any]) -> int:
        if m["role"] == "tool" and "tool_key" in m:
            return 0  # counted by the store, visible or not
        n = self.estimator.count(m.get("content") or "")
        if m.get("reasoning"):
            n += self.estimator.count(m["reasoning"])
        for c in m.get("tool_calls") or []:
            n += self.estimator.count(c["name"] + json.dumps(c["arguments"], ensure_ascii=False))
        return n

    def _append(self, m: dict[str, Any]) -> None:
        self.store.append_message(m)
        self._msg_tokens += self._message_tokens(m)
        self._assemble_one(m)

    def _tool_entry(self, m: dict[str, Any]) -> dict[str, Any]:
        rec = self.store.get(m["tool_key"])
        return {
            "role": "tool",
            "tool_call_id": m["tool_call_id"],
            "tool_key": rec.tool_key,
            "name": rec.tool_name,
            "hidden": not rec.visible,
            "content": rec.envelope() if rec.visible else rec.placeholder(self.hidden_note),
        }

    def _assemble_one(self, m: dict[str, Any]) -> None:
        if m["role"] == "tool" and "tool_key" in m:
            self._tool_pos[m["tool_key"]] = len(self._assembled)
            self._assembled.append(self._tool_entry(m))
        else:
            self._assembled.append(dict(m))

    def detach(self) -> None:
        """Stop following the store's visibility changes (when the context is done with but its
        store lives on; the store's listener list would otherwise keep this context alive)."""
        if self._on_visibility in self.store.listeners:
            self.store.listeners.remove(self._on_visibility)

    def _on_visibility(self, keys: list[str], visible: bool) -> None:
        for k in keys:
            i = self._tool_pos.get(k)
            if i is not None:
                old = self._assembled[i]
                self._assembled[i] = self._tool_entry({"tool_key": k, "tool_call_id": old["tool_call_id"]})
                if i < len(self._openai):  # rendered already: again at the next call
                    self._openai_stale.add(i)

    def add_user(self, content: str) -> None:
        self._append({"role": "user", "content": content})

    def add_assistant(
        self,
        content: str = "",
        *,
        reasoning: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Record an assistant turn; returns the call ids (made up where missing).

        Each tool call is ``{"name", "arguments", "id"?}``; ``arguments`` is a
        dict or a JSON string.
        """
        calls = []
        for c in tool_calls or []:
            if "name" not in c:
                raise ValueError(f"tool call without a name: {c!r}")
            args = c.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    args = {"input": args}
            call_id = c.get("id") or f"call_{len(self._calls):04d}"
            if call_id in self._calls:
                raise ValueError(f"tool call id {call_id!r} was already used in this session")
            self._calls[call_id] = {"id": call_id, "name": c["name"], "arguments": args}
            calls.append({"id": call_id, "name": c["name"], "arguments": args})
        m: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            m["reasoning"] = reasoning
        if calls:
            m["tool_calls"] = calls
        self._append(m)
        self._pending.extend(c["id"] for c in calls)
        return [c["id"] for c in calls]

    def _take_call(self, call_id: str | None) -> tuple[str, int]:
        """Remove the call from the pending ones; returns it and where it was (to put it back)."""
        if call_id is None:
            if not self._pending:
                raise ValueError("no pending tool call to answer; call add_assistant(tool_calls=...) first")
            return self._pending.popleft(), 0
        try:
            pos = self._pending.index(call_id)
        except ValueError:
            raise ValueError(f"call id {call_id!r} is not a pending tool call") from None
        del self._pending[pos]
        return call_id, pos

    def add_tool_result(
        self,
        result: str | bytes,
        call_id: str | None = None,
        *,
        tool_name: str | None = None,
        tool_args: Any = None,
        timestamp: float | None = None,
        visible: bool = True,
    ) -> ToolOutput:
        """Store a tool output under a new key and put it in the context.

        It answers ``call_id``, or the oldest unanswered call when None.  The output
        and its tool message are one store transaction: both are kept or neither
        (on an error here, or a process killed in between).
        """
        call_id, pos = self._take_call(call_id)
        call = self._calls.get(call_id)
        tokens = self._msg_tokens
        try:
            with self.store.transaction():
                rec = self.store.add(
                    result,
                    tool_name=tool_name or (call["name"] if call else ""),
                    tool_args=tool_args if tool_args is not None else (call["arguments"] if call else None),
                    call_id=call_id,
                    step=len(self.store),
                    timestamp=timestamp,
                    visible=visible,
                )
                self._append({"role": "tool", "tool_call_id": call_id, "tool_key": rec.tool_key})
        except BaseException:
            self._undo_assembly(call_id, pos, tokens)
            raise
        return rec

    def _undo_assembly(self, call_id: str, pos: int, tokens: int) -> None:
        """Bring the context back in line with a store whose transaction was rolled back."""
        self._pending.insert(pos, call_id)
        self._msg_tokens = tokens
        n = len(self.store.messages)
        for m in self._assembled[n:]:
            if m.get("tool_key") is not None:
                self._tool_pos.pop(m["tool_key"], None)
        del self._assembled[n:]
        del self._openai[n:]
        self._openai_stale = {i for i in self._openai_stale if i < n}

    # -- manage_context ------------------------------------------------------------
    def manage_context(self, enable: list[str] | tuple = (), disable: list[str] | tuple = ()) -> StatusReport:
        """Apply visibility changes (outside the model: nothing enters the log)."""
        return apply_manage_context(self.store, enable, disable, total_tokens=lambda: self.active_tokens)

    def handle_manage_context_call(
        self, arguments: str | dict | None, call_id: str | None = None
    ) -> StatusReport:
        """Answer a manage_context call the model made: apply it and add the
        StatusReport as that call's (unmanaged) tool result."""
        enable, disable, errors = parse_arguments(arguments)
        call_id, pos = self._take_call(call_id)
        tokens = self._msg_tokens
        try:
            with self.store.transaction():  # the changes and their report together
                report = self.manage_context(enable, disable)
                report.errors.update(errors)
                self._append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "name": MANAGE_CONTEXT_NAME,
                        "content": report.to_json(),
                    }
                )
        except BaseException:
            self._undo_assembly(call_id, pos, tokens)
            raise
        return report

    # -- reading -----------------------------------------------------------------
    @property
    def active_tokens(self) -> int:
        """Tokens in the active context now (O(1))."""
        return self._msg_tokens + self.store.active_tokens

    def recount(self) -> int:
        """Active tokens recomputed from scratch over the assembled context."""
        return sum(self._message_tokens(m) for m in self.store.messages) + self.store.recount()

    @property
    def pending_calls(self) -> list[str]:
        return list(self._pending)

    def assemble(self) -> list[dict[str, Any]]:
        """AssembleContext: provider-neutral messages for the next model call.

        Tool messages carry ``tool_call_id``, ``tool_key``, ``hidden`` and
        ``content`` (the envelope or the placeholder).  The list is kept up to
        date as the session changes, so this costs a list copy; treat the
        message dicts as read-only.
        """
        return list(self._assembled)

    def to_openai(self, *, include_reasoning: bool = False) -> list[dict[str, Any]]:
        """Chat-completions messages (:func:`~dtoc_rl.core.render.to_openai` of :meth:`assemble`).

        A session sends all its earlier messages with every request: each message is rendered once
        (again when its visibility changes), so a call costs little more than a list of copies.  The
        list and each message dict are new (add to them freely); a message's ``tool_calls`` are
        shared with later calls' lists: treat them as read-only."""
        from dtoc_rl.core.render import openai_message

        reasoning = bool(include_reasoning)
        with self._openai_lock:
            if reasoning != self._openai_reasoning:
                self._openai, self._openai_stale = [], set()
                self._openai_reasoning = reasoning
            rendered, assembled = self._openai, self._assembled
            for i in self._openai_stale:
                rendered[i] = openai_message(assembled[i], include_reasoning=reasoning)
            self._openai_stale.clear()
            new = assembled[len(rendered) :]
            rendered.extend(openai_message(m, include_reasoning=reasoning) for m in new)
            return [dict(m) for m in rendered]

    def to_anthropic(self, **kw: Any) -> dict[str, Any]:
        from dtoc_rl.core.render import to_anthropic

        return to_anthropic(self.assemble(), **kw)

    def __repr__(self) -> str:
        return (
            f"DTOCContext(outputs={len(self.store)}, hidden={len(self.store.hidden_keys())}, "
            f"active_tokens={self.active_tokens})"
        )
