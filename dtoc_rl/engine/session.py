"""One session as a policy sees it, tracked as it happens.

:class:`SessionTracker` keeps what the live Orchestrator, LiveEnv and the ``/decide`` service's
sessions (an Orchestrator each) know of a session between model calls: its steps in the canonical
schema, its stored outputs with their policy features (:class:`~dtoc_rl.engine.features.ItemColumns`), the
need labels of each turn (:class:`~dtoc_rl.labels.NeedLabeller`, fed incrementally), misses,
``modified``/``superseded`` flags, the visibility changes as :class:`~dtoc_rl.data.schema.ContextEvent`\\ s,
and invalid actions.  The owner runs the agent loop (its context, tools, requests and bill); the
tracker is told what happened and answers the policy's observation.

Misses (live): a need of any kind on an output that was hidden when its call was made, because live
the agent pays for the re-read, and an output of the previous turn hidden before this one read it
(``Episode.call_reads``), counted as the turn is recorded (it needs no labels).  The feature columns
count only :data:`dtoc_rl.data.schema.MISS_KINDS`, the kinds ReplayEnv counts, so a policy sees
online what it was trained on.

The tracker is not thread-safe: its owner serialises calls (the Orchestrator under its lock).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import math
import time
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dtoc_rl.core.actions import Applied, apply_slots, resolve
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory, Usage
from dtoc_rl.engine.features import ItemColumns, ItemState
from dtoc_rl.labels import NeedLabeller, modified_by
from dtoc_rl.labels.vocabulary import tool_category_id
from dtoc_rl.labels.words import output_words

__all__ = ["Output", "SessionCounts", "SessionTracker", "args_json"]


def args_json(args: Any) -> str:
    """A call's arguments as a step keeps them: text as given, anything else as JSON."""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False)


@dataclass
class SessionCounts:
    """The counters the tracker keeps; an owner's totals class extends it."""

    mgmt_calls: int = 0  # actions that changed something (a policy's or a model's manage_context)
    changes: int = 0  # outputs whose visibility changed
    misses: int = 0  # needs (any kind) on outputs hidden when the call was made, and unread outputs hidden
    invalid_actions: int = 0  # action entries naming no stored output, or a stored one in both sets


@dataclass
class Output:
    """One stored output as the tracker knows it."""

    key: str
    rec: Any  # its ToolOutput (``visible``, ``tool_name``, ``preview``, ``estimated_tokens``)
    step: int  # its step's index, -1 when its call is not a step of the session
    row: int  # its row in the tracker's ItemColumns (= its position in ``outputs``)
    gain: int  # tokens hiding it saves


@dataclass
class SessionTracker:
    """A session's steps, outputs, features and labels (see the module docstring).

    ``task``/``system`` are what the need labeller reads first; ``counts`` the counters to update
    (an owner passes its totals); ``id_prefix`` starts the ids made for calls without a usable one."""

    task: str = ""
    system: str = ""
    counts: SessionCounts = field(default_factory=SessionCounts)
    id_prefix: str = "dtoc"
    steps: list[Step] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    cols: ItemColumns = field(default_factory=ItemColumns)
    by_key: dict[str, Output] = field(default_factory=dict)
    key_step: dict[str, int] = field(default_factory=dict)  # DTOC key -> step
    label_keys: dict[str, int] = field(default_factory=dict)  # the key the model knows -> step
    step_of_call: dict[str, Step] = field(default_factory=dict)
    step_row: dict[int, int] = field(default_factory=dict)
    users: int = 0  # user messages after the task
    pending_user: list[str] = field(default_factory=list)  # since the last assistant turn
    pending_events: list[ContextEvent] = field(default_factory=list)
    saved: int = 0  # tokens hiding saves now
    labelled: int = 0  # steps fed to the labeller
    labeller: NeedLabeller | None = None  # made at the first labelling (the task text is known)
    label_errors: list[str] = field(default_factory=list)
    label_ms: float = 0.0
    # misses on unread outputs recorded since the last labelling (label() returns them)
    unread_misses: int = 0
    # each output row's step (-1: none), as an array: masked_steps reads it for every hidden output
    _row_step: np.ndarray = field(default_factory=lambda: np.full(256, -1, np.int64), repr=False)

    @property
    def kind_misses(self) -> int:
        """Needs of a hidden output of the kinds ReplayEnv counts (the observation's ``misses``), so
        far; ``counts.misses`` is the bill's count, re-accesses included."""
        return self.cols.kind_misses

    # -- recording ------------------------------------------------------------------------------
    def call_ids(self, ids: Sequence[Any], turn: int) -> list[str]:
        """Ids for one turn's calls: each given id, or a fresh one when it is missing or already used
        (providers reuse ids; a step is found by its call's id)."""
        used: set[str] = set()
        out = []
        for k, cid in enumerate(ids):
            if not isinstance(cid, str) or not cid or cid in self.step_of_call or cid in used:
                cid = f"{self.id_prefix}_{turn:03d}_{k}"
                while cid in self.step_of_call or cid in used:
                    cid += "x"
            used.add(cid)
            out.append(cid)
        return out

    def add_user(self, text: str) -> None:
        """A user message between model calls (it opens the next turn's first step)."""
        self.users += 1
        self.pending_user.append(text)

    def add_turn(
        self,
        turn: int,
        content: str,
        calls: Sequence[Mapping[str, Any]],
        *,
        reasoning: str = "",
        masked: Sequence[int] | None,
        now: float,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> list[Step]:
        """One assistant turn: a step per tool call (``{"id", "name", "arguments"}``), or one step
        without a call.  ``masked``: the steps whose outputs its call did not see (None: unknown).
        The user text, visibility events since the previous turn, the call's ``usage`` (what the
        provider reported) and ``model`` (the one it went to, when known) go to its first step."""
        user_text = "\n\n".join(self.pending_user)
        self.pending_user = []
        events, self.pending_events = self.pending_events, []
        first = len(self.steps)
        # A tuple of ints, which the garbage collector stops tracking: a long session holds one per
        # step, each as long as the hidden list, and lists of them made every full collection walk
        # them all (40 ms at 3,000 calls).
        hidden = None if masked is None else tuple(sorted(masked))
        base = {"turn": turn, "timestamp": now, "masked_before": hidden}
        head = {"user_text": user_text, "assistant_text": content, "reasoning": reasoning, "events": events,
                "usage": usage, "model": model}  # fmt: skip
        for k, c in enumerate(calls or [None]):
            step = Step(index=len(self.steps), **(head if k == 0 else {}), **base)
            if c is not None:
                step.tool_name, step.tool_args = c["name"], args_json(c["arguments"])
                step.tool_call_id = c["id"]
                self.step_of_call[c["id"]] = step
            self.steps.append(step)
        if hidden:  # outputs of the previous call it did not see: misses that need no labels
            start = first  # the previous call's first step: no earlier output can be unread
            while start > 0 and self.steps[start - 1].turn >= turn - 1:
                start -= 1
            unread = self.cols.add_unread(turn, hidden[bisect.bisect_left(hidden, start) :], self.step_row)
            self.counts.misses += unread
            self.unread_misses += unread
        return self.steps[first:]

    def set_output(self, step: Step, text: str, is_error: bool = False) -> None:
        """A call's output text on its step (a turn already labelled without it gets it now)."""
        step.output = text
        step.output_is_error = bool(is_error)
        step.output_tokens = math.ceil(len(text) / 4)
        if step.index < self.labelled and self.labeller is not None:
            self.labeller.add_output(step)

    def track(
        self, rec: Any, step: Step | None, *, call: int, is_error: bool, model_key: str | None = None
    ) -> Output:
        """A stored output (``rec``, a ToolOutput) of ``step`` (None: a call outside the session's
        steps, made at model call ``call``); ``model_key``: the key the model knows it by."""
        args = step.tool_args if step is not None else args_json(rec.tool_args or {})
        row = self.cols.append(
            rec.estimated_tokens,
            tool_category_id(rec.tool_name, args),
            call=step.turn if step is not None else call,
            users_at=self.users,
            is_error=is_error,
            visible=rec.visible,
            words=output_words(rec.tool_name, args, rec.tool_result),
        )
        o = Output(
            rec.tool_key, rec, step.index if step is not None else -1, row, rec.visible_cost - rec.hidden_cost
        )
        self.outputs.append(o)
        self.by_key[o.key] = o
        if row >= len(self._row_step):
            self._row_step = np.concatenate([self._row_step, np.full_like(self._row_step, -1)])
        self._row_step[row] = o.step
        if not rec.visible:
            self.saved += o.gain
        if o.step >= 0:
            self.key_step[o.key] = o.step
            self.label_keys[model_key or o.key] = o.step
            self.step_row[o.step] = row
        return o

    # -- visibility -----------------------------------------------------------------------------
    def on_visibility(self, keys: Iterable[str], visible: bool) -> None:
        """A store listener: these outputs' visibility changed (by any caller)."""
        for k in keys:
            o = self.by_key.get(k)
            if o is not None:
                self.cols.set_visible(o.row, visible)
                self.saved += -o.gain if visible else o.gain

    def masked_steps(self) -> list[int]:
        """The steps whose outputs are hidden now (a call made now does not see them)."""
        steps = self._row_step[: len(self.cols)][~self.cols.visible()]
        return np.sort(steps[steps >= 0]).tolist()

    def record_changes(self, enabled: Sequence[str], disabled: Sequence[str], invalid: int = 0) -> None:
        """An action's effect: counters, ``toggles``, and the events the next turn's first step carries."""
        c = self.counts
        c.invalid_actions += invalid
        if not (enabled or disabled):
            return
        c.mgmt_calls += 1
        c.changes += len(enabled) + len(disabled)
        for kind, keys in (("enable", enabled), ("disable", disabled)):
            if not keys:
                continue
            for k in keys:
                o = self.by_key.get(k)
                if o is not None:
                    self.cols.bump(o.row, "toggles")
            targets = sorted(self.key_step[k] for k in keys if k in self.key_step)
            self.pending_events.append(ContextEvent(kind=kind, targets=targets, detail=",".join(keys)))

    def apply(
        self, ctx: Any, enable: np.ndarray, disable: np.ndarray, window: Sequence[Output], **kw: Any
    ) -> Applied:
        """A policy's masks over ``window`` (the observation's slots) applied to ``ctx`` and recorded
        (see :func:`dtoc_rl.core.actions.apply_slots`)."""
        done = apply_slots(ctx, enable, disable, [o.key for o in window], self._window_visible(window), **kw)
        self.record_changes(done.enabled, done.disabled, done.invalid)
        return done

    def count_invalid(self, enable: np.ndarray, disable: np.ndarray, window: Sequence[Output]) -> None:
        """An action that is not applied (the episode is over): only its invalid entries count."""
        self.counts.invalid_actions += resolve(enable, disable, self._window_visible(window)).invalid

    def _window_visible(self, window: Sequence[Output]) -> np.ndarray:
        if not window:
            return np.zeros(0, bool)
        return self.cols.visible(window[0].row, window[-1].row + 1)

    # -- labelling ------------------------------------------------------------------------------
    def label(self, pending: Collection[str] = ()) -> int:
        """Label the steps recorded since the last labelling, a turn at a time, and update the features
        of the outputs they needed; returns their misses, with those on unread outputs recorded since
        the last labelling (:meth:`add_turn` counts them).  ``pending``: calls still unanswered; the
        latest turn waits while one of its own is (its labels depend on its results).  A labeller
        error is kept in :attr:`label_errors` (warned about once) and that turn keeps no labels."""
        unread, self.unread_misses = self.unread_misses, 0
        first = self.labelled
        steps = self.steps
        end = len(steps)
        if pending:
            waiting = set(pending)
            last = steps[-1].turn
            if any(s.tool_call_id in waiting for s in steps[first:] if s.turn == last):
                while end > first and steps[end - 1].turn == last:
                    end -= 1
        if first >= end:
            return unread
        t0 = time.perf_counter()
        if self.labeller is None:
            # the keys dict grows with the session; the labeller only resolves keys of steps it has seen
            self.labeller = NeedLabeller(self.task, self.system, keys=self.label_keys, track_unique=True)
        lab = self.labeller
        new = steps[first:end]
        misses = 0
        for _, group in itertools.groupby(new, key=lambda st: st.turn):
            turn = list(group)
            try:
                lab.label_turn(turn)
            except Exception as e:  # a labeller bug must not stop the agent: features just miss it
                self.label_errors.append(f"{type(e).__name__}: {e}")
                if len(self.label_errors) == 1:
                    warnings.warn(f"dtoc_rl session: need labelling failed: {e!r}", stacklevel=3)
                with contextlib.suppress(Exception):  # its outputs may be what the labeller chokes on
                    lab.skip_turn(turn)
            # a turn at a time: add_needs counts an output once per batch, ReplayEnv once per model call
            misses += self.cols.add_needs(turn, self.step_row)
        self.labelled = end
        self.counts.misses += misses
        self._flag_modified(new)
        self._update_unique(lab)
        self.label_ms += (time.perf_counter() - t0) * 1000
        return misses + unread

    def _update_unique(self, lab: NeedLabeller) -> None:
        """Write the shares of what each output alone holds that moved with these turns (and with
        outputs that arrived after their turn was labelled) into the feature columns."""
        for step in lab.take_unique_changes():
            row = self.step_row.get(step)
            if row is not None:
                text, names = lab.unique(step)
                self.cols.set_share(row, "unique_text", text)
                self.cols.set_share(row, "unique_names", names)

    def _flag_modified(self, new: list[Step]) -> None:
        """Flag ``modified`` the outputs whose reads a write of ``new`` may have changed: those of
        earlier steps, a step's own turn included (the offline rule, ``labels.modified_between``)."""
        writes = [(st.index, w) for st in new for w in st.write_resources]
        if not writes:
            return
        first, last = new[0].index, writes[-1][0]
        every = [w for _, w in writes]
        cols = self.cols
        for o in self.outputs:
            if not 0 <= o.step < last or cols.get(o.row, "modified"):
                continue
            after = every if o.step < first else [w for i, w in writes if i > o.step]
            if modified_by(self.steps[o.step], after):
                cols.flag(o.row, "modified")

    # -- what the policy sees -------------------------------------------------------------------
    def observe(self, n: int, *, now: int, **context: Any) -> tuple[dict[str, np.ndarray], list[Output]]:
        """The observation of the ``n`` most recent outputs and those outputs (its slots, oldest first);
        ``now``: the current model call; ``context``: :func:`~dtoc_rl.engine.features.build_observation`'s
        keywords besides the ones the tracker knows (saved tokens, misses, management calls)."""
        obs = self.cols.observation(
            None,  # the visibility on_visibility keeps
            n,
            now=now,
            users=self.users,
            saved_tokens=self.saved,
            misses=self.kind_misses,
            mgmt_calls=self.counts.mgmt_calls,
            **context,
        )
        return obs, self.outputs[-n:]

    def slot_info(self, obs: Mapping[str, np.ndarray], window: Sequence[Output], n: int) -> dict[str, Any]:
        """The ``info`` entries every owner gives a policy: each slot's key and step, the action mask
        and the misses so far."""
        slot_steps = np.full(n, -1, np.int64)
        slot_steps[: len(window)] = [o.step for o in window]
        return {
            "slot_keys": [o.key for o in window] + [""] * (n - len(window)),
            "slot_steps": slot_steps,
            "action_mask": {"enable": obs["enable_mask"], "disable": obs["disable_mask"]},
            "misses": self.counts.misses,
        }

    def states(self, outputs: Iterable[Output], now: int) -> list[tuple[str, ItemState]]:
        """``(key, ItemState)`` of these outputs at model call ``now``."""
        return [(o.key, self.cols.state(o.row, o.rec.visible, now=now, users=self.users)) for o in outputs]

    def listing(self, window: Sequence[Output]) -> str:
        """One line per output of ``window``, as an LLM policy reads the store."""
        lines = []
        for o in window:
            rec = o.rec
            state = "visible" if rec.visible else "HIDDEN"
            lines.append(
                f"- {o.key} [{state}] step {o.step}, {rec.tool_name or 'tool'}, "
                f"~{rec.estimated_tokens:,} tokens: {rec.preview(100)}"
            )
        return "\n".join(lines)

    def recent_reasoning(self, recent: int = 3) -> str:
        """The latest ``recent`` steps with assistant text or reasoning, a line each."""
        lines = []
        for s in [s for s in self.steps if s.assistant_text or s.reasoning][-recent:]:
            lines.append(f"[step {s.index}] {(s.reasoning + ' ' + s.assistant_text).strip()[:400]}")
        return "\n".join(lines)

    def trajectory(self, extra: Mapping[str, Any], **meta: Any) -> Trajectory:
        """The session so far in the canonical schema: a copy of its steps, its task and system prompt,
        ``extra`` (as JSON, with the key map) and ``meta`` (the Trajectory's other fields)."""
        steps = [
            replace(s, needs=list(s.needs), events=list(s.events), masked_before=_as_list(s.masked_before))
            for s in self.steps
        ]
        return Trajectory(
            task_text=self.task,
            system_prompt=self.system,
            extra=json.dumps({**extra, "keys": dict(self.key_step)}, default=str),
            steps=steps,
            **meta,
        )


def _as_list(steps: Sequence[int] | None) -> list[int] | None:
    return None if steps is None else list(steps)
