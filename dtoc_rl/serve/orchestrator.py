"""Orchestrator: DTOC inside an existing agent loop, with a policy (or the model) deciding.

Drop it into any OpenAI- or Anthropic-style tool loop.  It stores every tool
output (a :class:`~dtoc_rl.core.context.DTOCContext` over a MemoryStore, or a
SQLiteStore when ``session_path``/``session_id`` is given, so the session survives
a restart) and, before each model call, decides what the model sees::

    orch = Orchestrator(make_policy("ckpt/"), query="Fix the failing test", system="You are ...")
    while True:
        resp = client.chat.completions.create(model=MODEL, **orch.openai_request(TOOLS))
        calls = orch.record_openai_response(resp)     # the calls you must run
        if not calls:
            break
        for c in calls:
            orch.add_tool_result(c["id"], run_tool(c["name"], c["arguments"]))
    orch.save_log("run.jsonl")                         # dtoc-rl ingest run.jsonl -o DATASET

Modes
-----
``"agent"``
    The model has the ``manage_context`` tool (the DTOC paper's DTOC-ON): the
    request's tools get its definition and the orchestrator answers the model's
    calls itself (they are never returned to you).  No policy.
``"policy"``
    A policy decides before each model call; the model never sees the tool.
``"hybrid"``
    The policy decides and the model may override with ``manage_context``.  An
    override *pins* the key: a key the model enabled is never hidden by the
    policy, a key it disabled is never shown by it, until the model changes it
    again.

The default is ``"policy"`` when a policy is given, else ``"agent"``.  A policy is
any object with ``act(obs, info) -> {"enable", "disable"}`` (int masks over slots,
see :mod:`dtoc_rl.engine.features`): ``make_policy("last_n:n=5")``, a
``LearnedPolicy``, an LLM policy.  The core never imports the policies package.

The decision
------------
:meth:`decide` runs once per model call, when something changed since the last
one (:meth:`openai_request`, :meth:`openai_messages`, :meth:`anthropic_request`
call it).  Slot ``i`` of the observation holds the ``i``-th oldest of the
``max_items`` most recent outputs; older outputs keep their visibility.  The session is
tracked by a :class:`~dtoc_rl.engine.session.SessionTracker`, the one LiveEnv uses too: per
output it keeps the features of an :class:`~dtoc_rl.engine.features.ItemState`
(as columns, :class:`~dtoc_rl.engine.features.ItemColumns`; :meth:`item_states` lists them): tokens,
age in model calls, visibility, tool category, and the online need features
(``times_needed``, ``since_need``, ``modified``, ``superseded``, ``rereads``, and ``unique_text``
and ``unique_names``, what of the output no newer output and none of the agent's words hold),
``toggles`` and ``turns_after``.  ``info`` holds ``keys``/``slot_keys`` (DTOC key
per slot), ``slot_steps``, ``step``, ``model_family``, ``active_tokens``,
``budget_tokens``, ``action_mask``, ``cache_cold`` (the model's last response came longer ago than
its provider keeps a prompt cache: the next request writes its whole prompt, so a change now costs no
re-write), ``prices_per_call`` (True while :meth:`Orchestrator.use_model` names another model than the
session's: the observation's ``prices`` are that model's), and, computed only when a policy reads them,
``text`` (the store listing and recent reasoning), ``store_listing``,
``recent_reasoning`` and ``previews`` for LLM policies.

Online need labels
------------------
Needs are labelled turn by turn with a :class:`dtoc_rl.labels.NeedLabeller`, the
incremental form of :func:`~dtoc_rl.labels.label_trajectory`: a turn's actions are
labelled when something reads the policy's view (:meth:`decide`, :meth:`observation`,
:meth:`item_states`, :attr:`totals`, :meth:`trajectory`) once all its tool results
are in (the latest turn waits for them; an earlier turn with a call still unanswered
is labelled without it, and the output becomes visible to later turns when it comes).
So the online labels are the ones ``label_trajectory`` gives the logged trajectory,
and ``dtoc-rl ingest`` the saved log (the log carries the key map, ``dtoc_keys``);
the one exception is a session of a single turn with several calls (see
:class:`~dtoc_rl.labels.NeedLabeller`).  A turn costs time linear in its own text,
whatever the length of the session.
``label_every=k`` labels every k-th assistant turn (the skipped turns are labelled
together at the next one); ``label_every=0`` switches labelling off (need features
stay 0; rule policies do not read them).  Misses (a new step needs an output that
was hidden when its call was made, or the previous turn's output was hidden before
this turn read it, which needs no labels) are counted in :attr:`totals`, as
are invalid actions (a policy's padding slots and slots in both masks, a model's
unknown keys and keys in both lists: :mod:`dtoc_rl.core.actions`, the rule every env
applies).  A labeller
error never stops the loop: it is kept in :attr:`label_errors`, warned about once,
and the turn it failed on keeps no labels (its outputs still count for later turns).

Restarts
--------
With a SQLiteStore, a new ``Orchestrator(session_path=..., session_id=...)``
reopens the session: outputs, visibility and messages come back and the need
labels are recomputed; the decision history (``toggles``, misses, hybrid pins,
``masked_before`` of earlier steps) starts afresh.  ``query``/``system`` are then
ignored (:attr:`resumed` is True).

Threads and asyncio
-------------------
Methods are thread-safe.  The ``a``-prefixed variants (:meth:`aopenai_request`,
:meth:`arecord_openai_response`, ...) run the same work in a worker thread
(``asyncio.to_thread``), so a slow policy (an LLM) or labelling never blocks the
event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dtoc_rl.core.context import DTOCContext
from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME, anthropic_tool, openai_tool
from dtoc_rl.core.record import HIDDEN_NOTE, POLICY_NOTE
from dtoc_rl.core.render import message_text
from dtoc_rl.core.store import MemoryStore, Store
from dtoc_rl.core.tokens import TokenEstimator
from dtoc_rl.data.chatlog import trajectory_to_chat, visibility
from dtoc_rl.data.models import normalize_family, same_model
from dtoc_rl.data.paths import write_text_atomic
from dtoc_rl.data.schema import Trajectory, Usage
from dtoc_rl.engine.contract import check_policy, reset_policy
from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS, ItemState
from dtoc_rl.engine.session import Output, SessionCounts, SessionTracker
from dtoc_rl.ingest.common import usage_from
from dtoc_rl.ingest.openai_chat import check_log_source
from dtoc_rl.sim.pricing import (
    Prices,
    as_prices,
    cache_expired,
    hour_ttl,
    model_prices,
    price_entries,
    retained,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_SESSION_DB",
    "GC_THRESHOLDS",
    "MODES",
    "Decision",
    "Orchestrator",
    "OrchestratorTotals",
    "log_line",
    "log_pieces",
]

MODES = ("agent", "policy", "hybrid")
# Where ``session_id`` alone keeps its sessions (override with DTOC_SESSION_DB).
DEFAULT_SESSION_DB = "dtoc_sessions.sqlite"
#: Garbage-collector thresholds for a process that keeps long sessions (``dtoc-rl proxy`` and ``dtoc-rl
#: serve`` run with them; an agent running thousands of calls through an Orchestrator may set them too,
#: ``gc.set_threshold(*GC_THRESHOLDS)``).  A session holds objects in proportion to its length, and
#: with Python's defaults (700, 10, 10) a full collection, which walks them all, comes every few dozen
#: calls: at 4,000 calls 40-110 ms (more with torch loaded), the whole tail of a call's time; with these
#: 6-8 ms p99 (docs/benchmarks.md, Python 3.11).  A proxy request also makes tens of thousands of
#: short-lived objects.  They are rarely in cycles: little waits longer.
GC_THRESHOLDS = (50_000, 20, 100)
SOURCE = "dtoc-orchestrator"


def log_pieces(row: Mapping[str, Any]) -> Iterator[str]:
    """A session's log row (:meth:`Orchestrator.log_row`) as the JSONL line its log file holds, in
    pieces: one per message of its ``messages`` (the bulk of a long run's row), so a writer can pause
    between them (``dtoc_rl.serve.log_writer``).  Joined, they are ``json.dumps(row)`` with the options
    below and a newline."""
    yield "{"
    for i, (key, value) in enumerate(row.items()):
        head = (", " if i else "") + json.dumps(key, ensure_ascii=False) + ": "
        if key == "messages" and isinstance(value, list):
            yield head + "["
            for j, message in enumerate(value):
                yield (", " if j else "") + json.dumps(message, ensure_ascii=False, default=str)
            yield "]"
        else:
            yield head + json.dumps(value, ensure_ascii=False, default=str)
    yield "}\n"


def log_line(row: Mapping[str, Any]) -> str:
    """A session's log row as the JSONL line its log file holds (:func:`log_pieces` joined)."""
    return "".join(log_pieces(row))


@dataclass
class Decision:
    """What one :meth:`Orchestrator.decide` did."""

    enabled: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    ran: bool = False  # False: agent mode, or nothing changed since the last decision
    latency_ms: float = 0.0  # observation + policy + applying it
    blocked: list[str] = field(default_factory=list)  # hybrid: policy changes a model pin overruled

    @property
    def changed(self) -> list[str]:
        return self.enabled + self.disabled


@dataclass
class OrchestratorTotals(SessionCounts):
    """The session's counters: :class:`~dtoc_rl.engine.session.SessionCounts` (management calls,
    changes, misses, invalid actions of the policy or the model) and these."""

    calls: int = 0  # assistant turns recorded (model calls)
    tool_calls: int = 0
    decisions: int = 0  # policy decisions that ran
    model_mgmt_calls: int = 0  # manage_context calls made by the model
    input_tokens: int = 0  # as reported by the provider
    output_tokens: int = 0
    decision_ms: float = 0.0  # total time in decide()
    label_ms: float = 0.0  # total time labelling needs

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _LazyInfo(Mapping):
    """``info`` for the policy: cheap entries up front, text views computed on first read."""

    def __init__(self, eager: dict[str, Any], lazy: dict[str, Callable[[], Any]]):
        self._d = eager
        self._lazy = lazy

    def __getitem__(self, k: str) -> Any:
        if k in self._d:
            return self._d[k]
        if k in self._lazy:
            v = self._d[k] = self._lazy.pop(k)()
            return v
        raise KeyError(k)

    def __iter__(self) -> Iterator[str]:
        yield from list(self._d)
        yield from list(self._lazy)

    def __len__(self) -> int:
        return len(self._d) + len(self._lazy)


def _as_dict(obj: Any, what: str) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    for meth in ("model_dump", "to_dict", "dict"):
        f = getattr(obj, meth, None)
        if callable(f):
            try:
                d = f()
            except TypeError:
                continue
            if isinstance(d, Mapping):
                return dict(d)
    raise TypeError(f"{what} must be a dict or an SDK object, got {type(obj).__name__}")


def _tool_list(tools: Any) -> list[dict[str, Any]]:
    """``tools`` as dicts (SDK objects too), checked: each a tool definition with a ``name``, a
    ``function`` or a ``type`` (a provider's own tools); a ValueError names the one that is not,
    before a provider's 400 would."""
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise ValueError(f"tools must be a list of tool definitions, got {type(tools).__name__}")
    out = []
    for i, t in enumerate(tools):
        try:
            d = _as_dict(t, f"tools[{i}]")
        except TypeError:
            d = None
        if d is None or not {"name", "function", "type"} & set(d):
            raise ValueError(
                f"tools[{i}] is not a tool definition: expected "
                "{'type': 'function', 'function': {'name': ..., 'parameters': ...}} (OpenAI) or "
                "{'name': ..., 'input_schema': ...} (Anthropic)"
            )
        out.append(d)
    return out


def _to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        if "function" in t:  # OpenAI format
            fn = t["function"]
            out.append(
                {
                    "name": fn["name"],
                    "description": fn.get("description", ""),
                    "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
                }
            )
        else:
            out.append(dict(t))
    return out


class Orchestrator:
    """DTOC in a live agent loop (see the module docstring).

    Args:
        policy: anything with ``act(obs, info)``; None for ``mode="agent"``.
        mode: ``"agent"``, ``"policy"`` or ``"hybrid"`` (default: policy if given, else agent).
        query, system: the task and the system prompt of a new session.
        model: the model's name (prices and family; read from the first response when empty).
        model_family: the policy's model family (default: ``normalize_family(model)``).
        prices: the model's prices for the policy's ``prices`` observation (default: the list
            prices of ``model``, else of its family: give them for a model the price table lacks).
        cache_ttl: seconds the provider keeps a prompt cache, for ``info["cache_cold"]`` (default:
            an hour once most of the session's responses report Anthropic's 1-hour cache writes, which
            the policy's prices then carry too, else the documented lifetime,
            ``dtoc_rl.sim.pricing.CACHE_RULES``; give the longer one of another extended retention: a
            cache taken for cold when it is not makes a hide re-write it).
        session_path: a SQLite file: the session is stored there and reopens after a restart.
        session_id: the session to create or reopen (with ``session_path``, or alone:
            then the file is ``$DTOC_SESSION_DB`` or ``./dtoc_sessions.sqlite``).
        store: a ready :class:`~dtoc_rl.core.store.Store` instead (overrides the two above).
        estimator: token estimator for a new store (default ``ceil(len/4)``).
        max_items: observation slots: the policy sees the ``max_items`` most recent outputs
            (default: the policy's ``cfg.max_items`` when it has one, as learned policies do, else 128).
        budget_tokens: the budget passed to the policy (0: none).
        label_every: online need labelling every k-th turn, 0: off (see the module docstring).
        task_id: the trajectory's task id (default: the session id).
        include_reasoning: prefix reasoning to assistant text in rendered requests.
        log_source: the ``source`` a ``dtoc-rl ingest`` of :meth:`save_log`'s log gives the run
            (default the ingester's, ``openai-chat``); ``dtoc-rl proxy`` names the agent that sent it.
    """

    def __init__(
        self,
        policy: Any = None,
        *,
        mode: str | None = None,
        query: str | None = None,
        system: str | None = None,
        model: str = "",
        model_family: str | None = None,
        prices: Prices | None = None,
        cache_ttl: float | None = None,
        session_path: str | Path | None = None,
        session_id: str | None = None,
        store: Store | None = None,
        estimator: TokenEstimator | str | None = None,
        max_items: int | None = None,
        budget_tokens: int = 0,
        label_every: int = 1,
        task_id: str | None = None,
        include_reasoning: bool = False,
        log_source: str | None = None,
    ):
        mode = mode or ("policy" if policy is not None else "agent")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode in ("policy", "hybrid"):
            if policy is None:
                raise ValueError(f"mode {mode!r} needs a policy (anything with act(obs, info))")
            check_policy(policy, live=True)
        if max_items is None:  # the slots the policy was trained with, when it says
            max_items = getattr(getattr(policy, "cfg", None), "max_items", None) or DEFAULT_MAX_ITEMS
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        if label_every < 0:
            raise ValueError(f"label_every must be >= 0, got {label_every}")
        self.policy = policy if mode != "agent" else None
        self.mode = mode
        self.N = int(max_items)
        self.budget = int(budget_tokens)
        self.label_every = int(label_every)
        self.include_reasoning = include_reasoning
        self._model = model or ""
        self._family_fixed = model_family is not None
        self.model_family = model_family or normalize_family(self._model)
        self._prices = as_prices(prices, "prices") if prices is not None else None
        # the model the next call goes to when it is another than ``model`` (use_model), and its prices
        self._next: tuple[str, Prices | None] | None = None
        self._call_model: str | None = None  # what use_model named last: the model of the calls it makes
        self._listed: tuple[tuple[str, str], Prices] | None = None  # the list prices of (family, model)
        # the prices the caller gave, by model: the log keeps them, so that its run is billed at them
        self._given: dict[str, Prices] = {self._model: self._prices} if self._prices and self._model else {}
        if cache_ttl is not None and not cache_ttl > 0:
            raise ValueError(f"cache_ttl must be > 0 seconds, got {cache_ttl!r}")
        self.cache_ttl = cache_ttl
        self._written = [0, 0]  # tokens the responses say were written to the cache, and of them 1-hour
        self._answered_at: float | None = None  # time.monotonic() of the last model response
        self._answered_by: list[tuple[str, float]] = []  # of each model's, once calls name models
        if store is None and (session_path is not None or session_id is not None):
            from dtoc_rl.core.sqlite_store import SQLiteStore

            path = session_path or os.environ.get("DTOC_SESSION_DB") or DEFAULT_SESSION_DB
            store = SQLiteStore(path, session_id=session_id, estimator=estimator)
        store = store if store is not None else MemoryStore(estimator)
        self.resumed = bool(store.messages)
        self.ctx = DTOCContext(
            query=None if self.resumed else query,
            system=None if self.resumed else system,
            store=store,
            # in policy mode the model has no manage_context tool: its placeholders do not offer one
            hidden_note=POLICY_NOTE if mode == "policy" else HIDDEN_NOTE,
        )
        self.store = store
        self.task_id = task_id
        self.log_source = check_log_source(log_source) if log_source is not None else None
        self.success: bool | None = None
        self._totals = OrchestratorTotals()
        self._lock = threading.RLock()
        # steps, outputs and their policy features, kept up to date (not rebuilt per decision)
        self._s = SessionTracker(counts=self._totals, id_prefix="dtoc")
        self._masked_at_request: list[int] | None = None
        self._turns_since_label = 0
        self._pins: dict[str, bool] = {}
        self._version = 0  # bumps on every change the policy could react to
        self._decided_version = -1
        self.last_decision = Decision()
        self._rebuild()
        # Every visibility change goes through the store (ours and ``ctx.manage_context`` calls
        # made directly): hearing of each keeps the policy's view current without a scan.
        store.listeners.append(self._on_visibility)
        if self.policy is not None:
            reset_policy(self.policy, {"model_family": self.model_family, "mode": self.mode})

    # ------------------------------------------------------------------------------ properties
    @property
    def totals(self) -> OrchestratorTotals:
        """Counters of the session (labels the turns not labelled yet: needs count misses)."""
        with self._lock:
            self._label_due()
            return self._totals

    @property
    def label_errors(self) -> list[str]:
        """Labeller errors so far (each turn it failed on keeps no labels)."""
        return self._s.label_errors

    @property
    def session_id(self) -> str:
        return self.store.session_id

    @property
    def model(self) -> str:
        return self._model

    @property
    def active_tokens(self) -> int:
        return self.ctx.active_tokens

    @property
    def prices(self) -> Prices:
        """The model's prices as the policy sees them: the caller's, else ``model``'s list prices (or
        its family's, with a warning once), as ReplayEnv bills the same model; those of the model the
        next call goes to when :meth:`use_model` named another (as ReplayEnv prices a call of a run
        that changes models)."""
        nxt = self._next  # read once: use_model may change it meanwhile
        if nxt is not None:
            listed = nxt[1] or self._listed_prices(nxt[0], normalize_family(nxt[0]))
        else:
            listed = self._prices or self._listed_prices(self._model or None, self.model_family)
        # the writes the responses report, as ReplayEnv prices a run whose log says an hour
        return retained(listed, hour_ttl(*self._written) or self.cache_ttl)

    def _ttl(self) -> float | None:
        """The cache lifetime decisions take: the caller's, else an hour when the responses say most
        writes were 1-hour ones (as an ingested log of the session would), else None (documented)."""
        return self.cache_ttl if self.cache_ttl is not None else hour_ttl(*self._written)

    def _listed_prices(self, model: str | None, family: str) -> Prices:
        """``model``'s list prices (its family's, with a warning once), looked up once per model, not
        per decision; a learned policy trained with its own prices (`dtoc-rl train --prices`) is priced
        at them."""
        key = (family, model)
        if self._listed is None or self._listed[0] != key:
            table = getattr(self.policy, "price_table", None)
            self._listed = (key, model_prices(model, family, table))
        return self._listed[1]

    @property
    def policy_label(self) -> str:
        if self.policy is None:
            return "model" if self.mode == "agent" else "none"
        return str(getattr(self.policy, "label", None) or type(self.policy).__name__)

    def _set_model(self, name: Any) -> None:
        if name and isinstance(name, str) and not self._model:
            self._model = name
            if not self._family_fixed:
                self.model_family = normalize_family(name)

    def use_model(self, name: str, prices: Prices | None = None) -> None:
        """The model the next call goes to (a router's choice, a user's /model switch): decisions until
        the next :meth:`use_model` are priced at it (``prices``, else its list prices) and see its family
        (unless the caller fixed ``model_family``), and the calls are logged with it.  The session's own
        ``model`` (the first) keeps naming the run."""
        if prices is not None:
            prices = as_prices(prices, "use_model prices")
        with self._lock:
            if prices is not None and name:
                self._given[name] = prices
            self._set_model(name)
            if not name or same_model(name, self._model):
                self._next = None
                if prices is not None:
                    self._prices = prices
            else:
                self._next = (name, prices)
            self._call_model = name or None

    # ------------------------------------------------------------------------------ requests
    def openai_tools(self, tools: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """``tools`` (OpenAI format) plus ``manage_context`` in agent and hybrid modes."""
        out = _tool_list(tools)
        if self.mode != "policy":
            out.append(openai_tool())
        return out

    def anthropic_tools(self, tools: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """``tools`` (Anthropic or OpenAI format) as Anthropic tools, plus ``manage_context``
        in agent and hybrid modes."""
        out = _to_anthropic_tools(_tool_list(tools))
        if self.mode != "policy":
            out.append(anthropic_tool())
        return out

    def _check_answered(self) -> None:
        if self.ctx.pending_calls:
            raise ValueError(
                f"tool call(s) {self.ctx.pending_calls} have no result yet; "
                "call add_tool_result(call_id, content) for each before the next model call"
            )

    def _note_request(self) -> None:
        self._masked_at_request = self._s.masked_steps()

    def _sent_masked(self) -> list[int]:
        """The steps the call in flight was sent hidden: as noted when its messages were built, else
        (a proxy rewrote the request itself) the store's visibility now, which no decision has changed
        since that request."""
        return self._s.masked_steps() if self._masked_at_request is None else self._masked_at_request

    def openai_messages(self) -> list[dict[str, Any]]:
        """Decide (policy modes), then the chat-completions ``messages`` for the next call."""
        with self._lock:
            self._check_answered()  # before deciding: a decision needs the turn's results
        self.decide()
        with self._lock:
            self._check_answered()
            self._note_request()
            return self.ctx.to_openai(include_reasoning=self.include_reasoning)

    def openai_request(self, tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> dict:
        """``{"messages", "tools"?}`` (plus ``extra``) to pass as ``**kwargs`` to
        ``client.chat.completions.create(model=..., ...)``."""
        req: dict[str, Any] = {"messages": self.openai_messages()}
        tl = self.openai_tools(tools)
        if tl:
            req["tools"] = tl
        req.update(extra)
        return req

    def anthropic_request(self, tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> dict:
        """``{"system"?, "messages", "tools"?}`` (plus ``extra``) for ``client.messages.create``."""
        with self._lock:
            self._check_answered()
        self.decide()
        with self._lock:
            self._check_answered()
            self._note_request()
            parts = self.ctx.to_anthropic(include_reasoning=self.include_reasoning)
        req: dict[str, Any] = {"messages": parts["messages"]}
        if parts["system"]:
            req["system"] = parts["system"]
        tl = self.anthropic_tools(tools)
        if tl:
            req["tools"] = tl
        req.update(extra)
        return req

    # ------------------------------------------------------------------------------ recording
    def add_user(self, content: str) -> None:
        """A user (or environment) message between model calls."""
        with self._lock:
            self.ctx.add_user(content)
            self._s.add_user(content)
            self._touch()

    def record_openai_response(self, response: Any) -> list[dict[str, Any]]:
        """Record a chat-completions answer (a ``ChatCompletion``, a choice, or a message;
        SDK objects or dicts).  Returns the tool calls you must run, ``{"id", "name",
        "arguments"}`` with ``arguments`` a dict; [] when the model is done."""
        d = _as_dict(response, "response")
        usage, answered_by = None, None
        if "choices" in d:
            self._set_model(d.get("model"))
            usage = d.get("usage")
            answered_by = d.get("model") if isinstance(d.get("model"), str) else None
            if not d["choices"]:
                raise ValueError("the response has no choices")
            d = _as_dict(d["choices"][0], "choice")
        if "message" in d and "role" not in d:
            d = _as_dict(d["message"], "message")
        if isinstance(d.get("content"), list) and d.get("type") == "message":
            raise ValueError("an Anthropic Messages answer: record it with record_anthropic_response")
        if "content" not in d and "tool_calls" not in d:  # else it would be recorded as an empty turn
            raise ValueError(
                "not a chat-completions answer (a ChatCompletion, a choice or a message with content or "
                f"tool_calls); got the keys {sorted(d)[:8]}"
            )
        calls = []
        for i, tc in enumerate(d.get("tool_calls") or []):
            tc = _as_dict(tc, f"tool_calls[{i}]")
            fn = _as_dict(tc.get("function") or {}, f"tool_calls[{i}].function")
            calls.append({"id": tc.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")})
        reasoning = d.get("reasoning_content") or d.get("reasoning")
        return self.record_assistant(
            message_text(d.get("content")),
            calls,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            usage=_as_dict(usage, "usage") if usage is not None else None,
            model=answered_by,
        )

    def record_anthropic_response(self, response: Any) -> list[dict[str, Any]]:
        """Record a messages-API answer (a ``Message``, SDK object or dict).  Returns the
        tool calls you must run (see :meth:`record_openai_response`)."""
        d = _as_dict(response, "response")
        if "choices" in d or "tool_calls" in d:
            raise ValueError("a chat-completions answer: record it with record_openai_response")
        if not isinstance(d.get("content"), list):  # else it would be recorded as an empty turn
            raise ValueError(
                f"not an Anthropic Messages answer (a message whose content is a list of blocks); got the "
                f"keys {sorted(d)[:8]}"
            )
        self._set_model(d.get("model"))
        texts, thinking, calls = [], [], []
        for i, b in enumerate(d.get("content") or []):
            b = _as_dict(b, f"content[{i}]")
            kind = b.get("type")
            if kind == "text":
                texts.append(b.get("text") or "")
            elif kind == "thinking":
                thinking.append(b.get("thinking") or "")
            elif kind == "tool_use":
                calls.append({"id": b.get("id"), "name": b.get("name"), "arguments": b.get("input") or {}})
        return self.record_assistant(
            "\n".join(texts),
            calls,
            reasoning="\n".join(thinking) or None,
            usage=_as_dict(d["usage"], "usage") if d.get("usage") is not None else None,
            model=d.get("model") if isinstance(d.get("model"), str) else None,
        )

    def record_assistant(
        self,
        content: str = "",
        tool_calls: Sequence[Mapping[str, Any]] = (),
        *,
        reasoning: str | None = None,
        usage: Mapping[str, Any] | None = None,
        answered_at: float | None = None,
        model: str | None = None,
        seen: bool = True,
    ) -> list[dict[str, Any]]:
        """Provider-neutral form: ``tool_calls`` are ``{"id"?, "name", "arguments"}``
        (arguments a dict or JSON text); ``usage`` is the provider's usage object as its API returned
        it (OpenAI's ``prompt_tokens``..., Anthropic's ``input_tokens`` with its cache counts, Gemini's
        ``usageMetadata``; or just ``{"input_tokens", "output_tokens"}``), kept with the call and in
        :meth:`save_log`.  ``answered_at``: the ``time.monotonic()`` of the answer when it is recorded
        later (a proxy hears of it with the next request); the prompt cache's age is timed from it.
        ``model``: the model that answered (default: the one :meth:`use_model` named, if any).
        ``seen=False``: a turn of history this session did not see happen (a proxy meeting a
        conversation already under way: restarted, or the conversation dropped from its memory), so
        what its call was shown is not known (``masked_before`` null in the log).
        Returns the calls you must run."""
        with self._lock:
            tot = self._totals
            turn = tot.calls
            masked = self._sent_masked() if seen else None
            self._masked_at_request = None
            for k, c in enumerate(tool_calls):
                name = c.get("name")
                if not isinstance(name, str) or not name:
                    # its keys, not its values: arguments may hold what is not to be printed
                    raise ValueError(f"tool_calls[{k}] has no name (its keys: {sorted(map(str, c))[:8]})")
            ids = self._s.call_ids([c.get("id") for c in tool_calls], turn)
            calls = [
                {
                    "id": cid,
                    "name": c["name"],
                    "arguments": {} if c.get("arguments") is None else c["arguments"],
                }
                for c, cid in zip(tool_calls, ids)
            ]
            ids = self.ctx.add_assistant(content or "", reasoning=reasoning, tool_calls=calls)
            asst = self.store.messages[-1]
            for c, cid in zip(calls, ids):
                c["id"] = cid
            tot.calls += 1
            tot.tool_calls += len(calls)
            used = usage_from(dict(usage)) if usage else None
            if used is not None:
                tot.input_tokens += used.input_tokens or 0
                tot.output_tokens += used.output_tokens or 0
                self._written[0] += used.cache_write_tokens or 0
                self._written[1] += used.cache_write_1h_tokens or 0
            self._answered_at = time.monotonic() if answered_at is None else answered_at
            by = model or self._call_model
            if by or self._answered_by:  # each model's cache is timed from its own last answer
                self._answered_by = [
                    (n, t) for n, t in self._answered_by if not same_model(n, by or self._model)
                ]
                self._answered_by.append((by or self._model, self._answered_at))
            self._add_turn(asst, turn, masked, time.time(), used, by)
            out = []
            for c, m in zip(calls, asst.get("tool_calls") or []):
                if c["name"] == MANAGE_CONTEXT_NAME:
                    self._answer_manage_context(m)
                else:
                    out.append({"id": m["id"], "name": m["name"], "arguments": m["arguments"]})
            self._turns_since_label += 1
            self._touch()
            return out

    def add_tool_result(
        self,
        call_id: str | None,
        content: Any,
        *,
        is_error: bool = False,
        tool_name: str | None = None,
        timestamp: float | None = None,
        model_key: str | None = None,
    ) -> str:
        """Store the result of tool call ``call_id`` (None: the oldest unanswered one);
        returns its DTOC key.  ``content`` is text or bytes (anything else is JSON-encoded).
        ``model_key``: the key the model knows this output by, when the agent shows it under
        its own key rather than this store's (as a client of ``dtoc-rl serve`` does): key
        references in later actions are labelled through it."""
        if not isinstance(content, str | bytes | bytearray):
            content = json.dumps(content, ensure_ascii=False, default=str)
        with self._lock:
            if call_id is None:
                if not self.ctx.pending_calls:
                    raise ValueError("no pending tool call to answer")
                call_id = self.ctx.pending_calls[0]
            rec = self.ctx.add_tool_result(content, call_id, tool_name=tool_name, timestamp=timestamp)
            step = self._s.step_of_call.get(call_id)
            if step is not None:
                self._s.set_output(step, rec.tool_result, is_error)
            self._s.track(rec, step, call=self._call_now(), is_error=is_error, model_key=model_key)
            self._touch()
            return rec.tool_key

    # ------------------------------------------------------------------------------ deciding
    def decide(self, force: bool = False) -> Decision:
        """Run the policy if something changed since the last decision (or ``force``).

        Called by the request builders; call it yourself only to decide at another time.
        """
        with self._lock:
            self._label_due()
            if self.policy is None or (not force and self._decided_version == self._version):
                return Decision()
            t0 = time.perf_counter()
            version = self._version
            obs, info, window = self._observe()
        action = self.policy.act(obs, info)  # outside the lock: an LLM policy may take seconds
        with self._lock:
            concurrent = self._version != version  # something changed while the policy ran
            d = self._apply(action, window)
            d.ran = True
            d.latency_ms = (time.perf_counter() - t0) * 1000
            self._totals.decisions += 1
            self._totals.decision_ms += d.latency_ms
            if d.changed:
                self._touch()
            self._decided_version = -1 if concurrent else self._version
            self.last_decision = d
            return d

    def observation(self) -> tuple[dict[str, np.ndarray], Mapping[str, Any]]:
        """The ``(obs, info)`` the policy would get now (for inspection and tests)."""
        with self._lock:
            self._label_due()
            obs, info, _ = self._observe()
            return obs, info

    def item_states(self, keys: Iterable[str] | None = None) -> list[tuple[str, ItemState]]:
        """Every stored output, oldest first (or those of ``keys`` that exist, in that order), as
        ``(key, ItemState)``: what the policy knows of it now (e.g. to send the store to
        ``dtoc-rl serve`` as a ``/decide`` request)."""
        with self._lock:
            self._label_due()
            by_key = self._s.by_key
            outs = self._s.outputs if keys is None else [by_key[k] for k in keys if k in by_key]
            return self._s.states(outs, self._call_now())

    def manage_context(self, enable: Sequence[str] = (), disable: Sequence[str] = ()):
        """Change visibility yourself (outside the model); returns the StatusReport."""
        with self._lock:
            report = self.ctx.manage_context(enable, disable)
            self._s.record_changes(report.enabled, report.disabled, report.invalid)
            if report.changed:
                self._touch()
            return report

    # ------------------------------------------------------------------------------ async
    async def adecide(self, force: bool = False) -> Decision:
        return await asyncio.to_thread(self.decide, force)

    async def aopenai_messages(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.openai_messages)

    async def aopenai_request(self, tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> dict:
        return await asyncio.to_thread(self.openai_request, tools, **extra)

    async def aanthropic_request(
        self, tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any
    ) -> dict:
        return await asyncio.to_thread(self.anthropic_request, tools, **extra)

    async def arecord_openai_response(self, response: Any) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.record_openai_response, response)

    async def arecord_anthropic_response(self, response: Any) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.record_anthropic_response, response)

    async def arecord_assistant(self, content: str = "", tool_calls=(), **kw: Any) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.record_assistant, content, tool_calls, **kw)

    async def aadd_tool_result(self, call_id: str | None, content: Any, **kw: Any) -> str:
        return await asyncio.to_thread(self.add_tool_result, call_id, content, **kw)

    # ------------------------------------------------------------------------------ logs
    def trajectory(self, success: bool | None = None) -> Trajectory:
        """The session so far in the canonical schema (online need labels; the policy's
        changes as ``ContextEvent``\\ s on the first step after them; ``masked_before``)."""
        with self._lock:
            if self.label_every:
                self._label()
            tot = self._totals
            ok = self.success if success is None else success
            extra = {"env": SOURCE, "mode": self.mode, "policy": self.policy_label}
            extra.update(dtoc_session=self.session_id, totals=tot.to_dict(), resumed=self.resumed)
            return self._s.trajectory(
                extra,
                traj_id=f"orchestrator/{self.session_id}",
                source=SOURCE,
                model_raw=self._model,
                model_family=self.model_family,
                task_id=self.task_id or self.session_id,
                success=ok,
                outcome_source="Orchestrator.success" if ok is not None else "",
                tokens_in=tot.input_tokens or None,
                tokens_out=tot.output_tokens or None,
                api_calls=tot.calls,
            )

    def log_row(self, success: bool | None = None, *, in_flight: bool = False) -> dict[str, Any]:
        """The session as one generic OpenAI chat JSONL row (what :meth:`save_log` writes).
        ``in_flight``: a model call was sent after the last one recorded (a proxy logs at each request):
        the row also says what it was sent hidden (``dtoc_sent_masked``)."""
        traj = self.trajectory(success)
        msgs = trajectory_to_chat(traj, reasoning=True)
        with self._lock:
            if self._s.pending_user:
                msgs.append({"role": "user", "content": "\n\n".join(self._s.pending_user)})
            # what the call in flight was sent hidden: a log cut off before its answer (a proxy
            # killed) still says how that call was sent
            sent = self._sent_masked() if in_flight else None
        # "messages" early: format detection reads the first 64 KiB.
        return {
            "id": traj.traj_id,
            "model": traj.model_raw,
            "task_id": traj.task_id,
            "success": traj.success,
            "messages": msgs,
            "source_env": SOURCE,
            "dtoc_mode": self.mode,
            "dtoc_policy": self.policy_label,
            "dtoc_session": self.session_id,
            "api_calls": traj.api_calls,
            "tokens_in": traj.tokens_in,
            "tokens_out": traj.tokens_out,
            "dtoc_totals": json.dumps(self._totals.to_dict()),
            "dtoc_visibility": json.dumps(visibility(traj)),
            # keys follow the order results arrived in, not the steps': label_trajectory reads this
            "dtoc_keys": json.dumps(json.loads(traj.extra)["keys"]),
            **({"dtoc_source": self.log_source} if self.log_source else {}),
            **({"dtoc_sent_masked": json.dumps(sent)} if sent is not None else {}),
            # the caller's prices of models the price table may lack, as `--prices` reads them
            **({"dtoc_prices": json.dumps(price_entries(given))} if (given := dict(self._given)) else {}),
        }

    def save_log(self, path: str | Path, *, append: bool = False, success: bool | None = None) -> Path:
        """Write the session as generic OpenAI chat JSONL (one line), the format
        ``dtoc-rl ingest`` reads; ``append`` adds a line to an existing file."""
        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(
                f"save_log: {path} is a folder; give the log file's path (e.g. {path}/run.jsonl)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        line = log_line(self.log_row(success))
        if append:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line)
        else:  # a log rewritten as the session goes on is never seen half written
            write_text_atomic(path, [line], encoding="utf-8")
        return path

    def close(self) -> None:
        if self._on_visibility in self.store.listeners:  # a closed orchestrator is not kept alive
            self.store.listeners.remove(self._on_visibility)
        self.ctx.detach()
        self.store.close()

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Orchestrator(mode={self.mode!r}, policy={self.policy_label!r}, outputs={len(self._s.outputs)}, "
            f"hidden={len(self.store.hidden_keys())}, active_tokens={self.ctx.active_tokens})"
        )

    # ------------------------------------------------------------------------------ internals
    def _touch(self) -> None:
        self._version += 1

    def _call_now(self) -> int:
        """The current model call (the latest recorded; 0 before the first)."""
        return max(0, self._totals.calls - 1)

    def _add_turn(
        self,
        asst: dict[str, Any],
        turn: int,
        masked: list[int] | None,
        now: float,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> None:
        self._s.add_turn(
            turn,
            asst.get("content") or "",
            asst.get("tool_calls") or [],
            reasoning=asst.get("reasoning") or "",
            masked=masked,
            now=now,
            usage=usage,
            model=model,
        )

    def _answer_manage_context(self, call: dict[str, Any]) -> None:
        step = self._s.step_of_call[call["id"]]
        if self.mode == "policy":
            text = json.dumps(
                {"error": "manage_context is not available in this session; the context is managed for you"}
            )
            rec = self.ctx.add_tool_result(text, call["id"])
            self._s.set_output(step, rec.tool_result, True)
            self._s.track(rec, step, call=self._call_now(), is_error=True)
            return
        report = self.ctx.handle_manage_context_call(call["arguments"], call["id"])
        self._s.set_output(step, report.to_json(), not report.ok)
        self._totals.model_mgmt_calls += 1
        self._s.record_changes(report.enabled, report.disabled, report.invalid)
        if self.mode == "hybrid":
            for k in report.enabled:
                self._pins[k] = True
            for k in report.disabled:
                self._pins[k] = False
            for k in report.unchanged:  # restating a state is a pin too
                self._pins[k] = self.store.get(k).visible

    def _on_visibility(self, keys: list[str], visible: bool) -> None:
        with self._lock:  # a change made on ctx from another thread must not race the tracker
            self._s.on_visibility(keys, visible)

    def _observe(self) -> tuple[dict[str, np.ndarray], Mapping[str, Any], list[Output]]:
        active = self.ctx.active_tokens
        nxt = self._next
        # the family of the model the next call goes to (as ReplayEnv observes a run that changes
        # models), unless the caller fixed the policy's family
        family = normalize_family(nxt[0]) if nxt is not None and not self._family_fixed else self.model_family
        obs, window = self._s.observe(
            self.N,
            now=self._call_now(),
            active_tokens=active,
            step=self._totals.calls,
            model_family=family,
            prices=self.prices,
            budget_tokens=self.budget,
        )
        pad = self.N - len(window)
        eager = self._s.slot_info(obs, window, self.N)
        eager.update(
            keys=eager["slot_keys"],
            step=self._totals.calls,
            model_family=self.model_family,
            active_tokens=active,
            budget_tokens=self.budget,
            mode=self.mode,
            session_id=self.session_id,
            cache_cold=self._cache_cold(),
        )
        if nxt is not None:  # this call goes to another model than the session's
            eager["prices_per_call"] = True
        lazy: dict[str, Callable[[], Any]] = {
            "store_listing": lambda: self._s.listing(window),
            "recent_reasoning": lambda: self._s.recent_reasoning(),
            "text": lambda: self._text_view(window, active),
            "previews": lambda: [o.rec.preview(100) for o in window] + [""] * pad,
        }
        return obs, _LazyInfo(eager, lazy), window

    def _cache_cold(self) -> bool:
        """Whether the provider's cache of the last request has expired by now (the agent's tools ran
        longer than the provider keeps a prefix): the next request writes its whole prompt anyway.
        Timed from the last response, a little after the request was cached, so it errs warm; a
        session reopened from its store is warm until its next response."""
        nxt = self._next
        if nxt is None or not self._answered_by:
            idle = None if self._answered_at is None else time.monotonic() - self._answered_at
            # the session's model, since its own last answer (a name no answer matched: any answer's)
            at = next((t for n, t in self._answered_by if same_model(n, self._model)), None)
            if at is not None:
                idle = time.monotonic() - at
            return cache_expired(idle, self.model_family, self._model or None, self._ttl())
        # another model's call: its cache was written at its own last answer, under its own rules
        at = next((t for n, t in self._answered_by if same_model(n, nxt[0])), None)
        idle = float("inf") if at is None else time.monotonic() - at
        return cache_expired(idle, normalize_family(nxt[0]), nxt[0], self._ttl())

    def _text_view(self, window: list[Output], active: int) -> str:
        return (
            f"Active context: {active:,} tokens. Stored tool outputs (oldest first):\n"
            f"{self._s.listing(window)}\nRecent reasoning:\n{self._s.recent_reasoning()}"
        )

    def _apply(self, action: Any, window: list[Output]) -> Decision:
        try:
            en = np.asarray(action["enable"]).reshape(-1)
            di = np.asarray(action["disable"]).reshape(-1)
        except (TypeError, KeyError, IndexError, ValueError):
            raise ValueError(
                f"policy {self.policy_label} returned {type(action).__name__}; expected "
                f"{{'enable': int[{self.N}], 'disable': int[{self.N}]}}"
            ) from None
        if en.shape != (self.N,) or di.shape != (self.N,):
            raise ValueError(
                f"policy {self.policy_label} returned masks of shapes {en.shape} and {di.shape}; "
                f"expected ({self.N},) each"
            )
        allow = None
        if self.mode == "hybrid":  # the model's pins overrule the policy
            allow = lambda key, show: self._pins.get(key, show) == show  # noqa: E731
        done = self._s.apply(self.ctx, en, di, window, allow=allow)
        return Decision(enabled=done.enabled, disabled=done.disabled, blocked=done.blocked)

    def _label_due(self) -> None:
        """Label the turns recorded since the last labelling when ``label_every`` says so
        (under the lock)."""
        if self.label_every and self._turns_since_label >= self.label_every:
            self._label()

    def _label(self) -> None:
        """Label the turns not labelled yet (under the lock; the latest waits for its tool results)."""
        s = self._s
        before = s.labelled
        s.label(self.ctx.pending_calls)
        self._totals.label_ms = s.label_ms
        if s.labelled == len(s.steps):
            self._turns_since_label = 0
        if s.labelled != before:
            self._touch()

    def _rebuild(self) -> None:
        """Rebuild the tracking state from the store's messages (a new or reopened session)."""
        s = self._s
        turn = 0
        seen_task = False
        for m in self.store.messages:
            role = m["role"]
            if role == "system" and not s.steps and not seen_task:
                s.system = "\n\n".join(p for p in (s.system, m.get("content") or "") if p)
            elif role == "user":
                if not seen_task and not s.steps:
                    s.task = m.get("content") or ""
                    seen_task = True
                else:
                    s.add_user(m.get("content") or "")
            elif role == "assistant":
                self._add_turn(m, turn, None, 0.0)  # what was hidden then is not stored: unknown
                turn += 1
            elif role == "tool":
                step = s.step_of_call.get(m["tool_call_id"])
                if "tool_key" in m:
                    rec = self.store.get(m["tool_key"])
                    if step is not None:
                        s.set_output(step, rec.tool_result)
                    s.track(rec, step, call=max(0, turn - 1), is_error=False)
                elif step is not None:
                    s.set_output(step, m.get("content") or "")
        self._totals.calls = turn
        self._totals.tool_calls = sum(1 for st in s.steps if st.tool_name is not None)
        if self.label_every:
            self._label()
