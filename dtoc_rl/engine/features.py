"""The policy-facing view of a DTOC store: feature names, spaces, and a builder.

ReplayEnv, LiveEnv and the live Orchestrator all hand policies the same
``Dict`` observation, so one policy object works in all three.  ReplayEnv
fills it from compiled arrays; LiveEnv and the Orchestrator keep their
outputs' features up to date in :class:`ItemColumns`; a caller that only has
a description of each output (the ``/decide`` service) gives a list of
:class:`ItemState` to :func:`build_observation`.  Every builder fills the
``prices`` key with :func:`price_vector` of the model's prices, so a policy can
price a model it never saw.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from dtoc_rl.data.models import FAMILIES, family_id
from dtoc_rl.data.schema import MISS_KINDS, Step
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.labels.words import WORDS_PER_OUTPUT, words_array
from dtoc_rl.sim.pricing import Prices, prices_for

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "GLOBAL_FEATURES",
    "ITEM_FEATURES",
    "PRICE_FEATURES",
    "ItemColumns",
    "ItemState",
    "action_space",
    "build_observation",
    "check_action",
    "check_mask",
    "decode_action",
    "family_prices",
    "observation_space",
    "price_vector",
]

# Observation slots (the most recent stored outputs a policy sees) wherever none are given: the env, training,
# evaluation and the live orchestrator, so that a policy is judged on the window it was trained on.
DEFAULT_MAX_ITEMS = 128

ITEM_FEATURES: tuple[str, ...] = (
    "est_tokens_k",  # the output's estimated tokens / 1000
    "age",  # model calls since the one that stored it (0: no call has read it yet)
    "visible",
    "times_needed",  # needs on it so far
    "since_need",  # model calls since its last need (its age if never needed)
    "modified",  # what it read was modified later, so far
    "is_error",
    "superseded",  # a later step re-read the same resource, so far
    "rereads",  # misses it caused
    "toggles",  # visibility changes so far
    "turns_after",  # user turns that began after it
    # What of it a later action could copy from it alone: the shares of its token windows and of its
    # distinctive names (paths, identifiers) that no newer output and none of the agent's own words
    # hold, so far (1 while nothing repeats it; dtoc_rl.labels.NeedLabeller.unique).  A copy is
    # attributed to the newest output holding it, so a share of zero in both means nothing of it is
    # needed from it any more.
    "unique_text",
    "unique_names",
)
GLOBAL_FEATURES: tuple[str, ...] = (
    "active_tokens_k",
    "budget_k",
    "step",
    "stored",
    "visible",
    "saved_tokens_k",
    "misses",
    "mgmt_calls",
    "full_tokens_k",  # active tokens if every output were visible
)


#: The ``prices`` key: the model's list prices in USD per million tokens.  Absolute rather than relative
#: to the input price, so that nothing is lost: a policy derives the ratios (a cache read at 10% of the
#: input, a write premium) and the price level (log of the input price) it wants.
PRICE_FEATURES: tuple[str, ...] = ("input", "output", "cache_read", "cache_write")


def price_vector(p: Prices) -> np.ndarray:
    """The ``prices`` observation of a model priced ``p`` (see :data:`PRICE_FEATURES`).  The one place
    an observation's prices are built: ReplayEnv, LiveEnv, the Orchestrator and ``/decide`` call it."""
    return np.array([p.input, p.output, p.cache_read, p.cache_write], np.float32)


_FAMILY_PRICES: dict[str | None, np.ndarray] = {}


def family_prices(family: str | None, *, warn: bool = True) -> np.ndarray:
    """The ``prices`` observation of a family's list prices, for a caller that names no prices (one
    array per family, shared: copy it before changing it).  An unknown family is priced as
    ``prices_for`` prices it, which warns once unless ``warn`` is False."""
    v = _FAMILY_PRICES.get(family)
    if v is None:
        with warnings.catch_warnings():
            if not warn:
                warnings.simplefilter("ignore")
            v = _FAMILY_PRICES[family] = price_vector(prices_for(family))
    return v


_VISIBLE = ITEM_FEATURES.index("visible")


def observation_space(n: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "items": spaces.Box(-np.inf, np.inf, (n, len(ITEM_FEATURES)), np.float32),
            "item_tool": spaces.Box(0, len(TOOL_CATEGORIES) - 1, (n,), np.int64),
            "item_words": spaces.Box(0, 2**31 - 1, (n, WORDS_PER_OUTPUT), np.int64),
            "item_mask": spaces.MultiBinary(n),
            "enable_mask": spaces.MultiBinary(n),
            "disable_mask": spaces.MultiBinary(n),
            "globals": spaces.Box(-np.inf, np.inf, (len(GLOBAL_FEATURES),), np.float32),
            "family": spaces.Discrete(len(FAMILIES)),
            "prices": spaces.Box(0.0, np.inf, (len(PRICE_FEATURES),), np.float32),
        }
    )


def action_space(n: int) -> spaces.Dict:
    return spaces.Dict({"enable": spaces.MultiBinary(n), "disable": spaces.MultiBinary(n)})


@dataclass
class ItemState:
    """One stored output as a policy sees it (see ITEM_FEATURES)."""

    est_tokens: int
    age: int
    visible: bool
    tool_id: int = 0
    times_needed: int = 0
    since_need: int | None = None
    modified: bool = False
    is_error: bool = False
    superseded: bool = False
    rereads: int = 0
    toggles: int = 0
    turns_after: int = 0
    words: tuple[int, ...] = ()  # hashed call words (dtoc_rl.labels.words.output_words)
    unique_text: float = 1.0  # see ITEM_FEATURES; 1 (as a fresh output) where unknown
    unique_names: float = 1.0

    def row(self) -> list[float]:
        return [
            self.est_tokens / 1000.0,
            self.age,
            float(self.visible),
            self.times_needed,
            self.age if self.since_need is None else self.since_need,
            float(self.modified),
            float(self.is_error),
            float(self.superseded),
            self.rereads,
            self.toggles,
            self.turns_after,
            self.unique_text,
            self.unique_names,
        ]


def build_observation(
    items: Sequence[ItemState],
    n: int,
    *,
    active_tokens: int,
    step: int,
    model_family: str = "other",
    budget_tokens: int = 0,
    saved_tokens: int = 0,
    misses: int = 0,
    mgmt_calls: int = 0,
    prices: Prices | None = None,
) -> dict[str, np.ndarray]:
    """The observation for the ``n`` most recent of ``items`` (oldest first); ``prices``: the model's
    (default: its family's list prices)."""
    window = list(items)[-n:] if n else []
    m = len(window)
    feats = np.zeros((n, len(ITEM_FEATURES)), np.float32)
    tool = np.zeros(n, np.int64)
    words = np.zeros((n, WORDS_PER_OUTPUT), np.int64)
    if m:
        feats[:m] = np.asarray([it.row() for it in window], np.float32)
        tool[:m] = [it.tool_id for it in window]
        for k, it in enumerate(window):
            if it.words:
                words_array(it.words, words[k])
    return _assemble(
        feats,
        tool,
        words,
        m,
        len(items),
        sum(1 for it in items if it.visible),
        active_tokens=active_tokens,
        step=step,
        model_family=model_family,
        budget_tokens=budget_tokens,
        saved_tokens=saved_tokens,
        misses=misses,
        mgmt_calls=mgmt_calls,
        prices=prices,
    )


_CONTEXT_DEFAULTS = dict(
    model_family="other", budget_tokens=0, saved_tokens=0, misses=0, mgmt_calls=0, prices=None
)


def _assemble(
    feats: np.ndarray,
    tool: np.ndarray,
    words: np.ndarray,
    m: int,
    stored: int,
    visible_count: int,
    **context: Any,
) -> dict[str, np.ndarray]:
    # ``feats``/``tool``/``words`` hold the m most recent outputs in their first m rows, zeros after;
    # both become part of the observation (not copied).  ``context``: build_observation's
    # keywords (active_tokens and step required).
    unknown = set(context) - set(_CONTEXT_DEFAULTS) - {"active_tokens", "step"}
    missing = {"active_tokens", "step"} - set(context)
    if unknown or missing:
        raise TypeError(f"observation keywords: unknown {sorted(unknown)}, missing {sorted(missing)}")
    c = {**_CONTEXT_DEFAULTS, **context}
    active_tokens, saved_tokens = c["active_tokens"], c["saved_tokens"]
    n = len(tool)
    item_mask = np.zeros(n, np.int8)
    item_mask[:m] = 1
    vis = feats[:, _VISIBLE] > 0.5
    return {
        "items": feats,
        "item_tool": tool,
        "item_words": words,
        "item_mask": item_mask,
        "enable_mask": (item_mask.astype(bool) & ~vis).astype(np.int8),
        "disable_mask": vis.astype(np.int8),
        "globals": np.array(
            [
                active_tokens / 1000.0,
                c["budget_tokens"] / 1000.0,
                c["step"],
                stored,
                visible_count,
                saved_tokens / 1000.0,
                c["misses"],
                c["mgmt_calls"],
                (active_tokens + saved_tokens) / 1000.0,
            ],
            np.float32,
        ),
        "family": np.int64(family_id(c["model_family"])),
        "prices": family_prices(c["model_family"]).copy()
        if c["prices"] is None
        else price_vector(c["prices"]),
    }


_COL = {name: i for i, name in enumerate(ITEM_FEATURES)}


class ItemColumns:
    """The :data:`ITEM_FEATURES` of a growing list of stored outputs, kept as columns.

    For a caller that tracks its outputs between decisions (the live Orchestrator):
    counters and flags are written when they change (:meth:`bump`, :meth:`flag`,
    :meth:`need`), and :meth:`observation` fills the columns that move with time
    (age, since_need, turns_after) and visibility for the window with a few array
    operations, so a decision costs no Python per stored output.  It computes what
    :func:`build_observation` computes from the equivalent :class:`ItemState` list
    (:meth:`state` gives that list; a test pins the two equal)."""

    _COUNTERS = frozenset({"times_needed", "rereads", "toggles"})
    _FLAGS = frozenset({"modified", "is_error", "superseded"})
    _SHARES = frozenset({"unique_text", "unique_names"})

    def __init__(self, capacity: int = 256):
        cap = max(1, int(capacity))
        self._feats = np.zeros((cap, len(ITEM_FEATURES)), np.float32)
        self._tool = np.zeros(cap, np.int64)
        self._words = np.zeros((cap, WORDS_PER_OUTPUT), np.int64)
        self._call = np.zeros(cap, np.int64)  # model call that stored it (age = now - call)
        self._users_at = np.zeros(cap, np.int64)  # user turns before it
        self._last_need = np.full(cap, -1, np.int64)  # model call of its last need (-1: none)
        self._n = 0
        # misses of the counted kinds only: the ``misses`` a policy sees, as ReplayEnv counts them
        self.kind_misses = 0

    def __len__(self) -> int:
        return self._n

    def append(
        self,
        est_tokens: int,
        tool_id: int,
        *,
        call: int,
        users_at: int,
        is_error: bool = False,
        visible: bool = True,
        words: tuple[int, ...] = (),
    ) -> int:
        """Add an output; returns its row.  ``words``: its hashed call words
        (:func:`dtoc_rl.labels.words.output_words`)."""
        i = self._n
        if i == len(self._tool):
            grow = lambda a: np.concatenate([a, np.zeros_like(a)])  # noqa: E731
            self._feats, self._tool, self._words = grow(self._feats), grow(self._tool), grow(self._words)
            self._call, self._users_at = grow(self._call), grow(self._users_at)
            self._last_need = np.concatenate([self._last_need, np.full_like(self._last_need, -1)])
        self._feats[i] = 0.0
        self._feats[i, _COL["unique_text"]] = self._feats[i, _COL["unique_names"]] = 1.0
        self._feats[i, _COL["est_tokens_k"]] = est_tokens / 1000.0
        self._feats[i, _COL["is_error"]] = float(bool(is_error))
        self._feats[i, _VISIBLE] = float(bool(visible))
        self._tool[i] = tool_id
        words_array(words, self._words[i])
        self._call[i] = call
        self._users_at[i] = users_at
        self._last_need[i] = -1
        self._n = i + 1
        return i

    def bump(self, i: int, name: str, by: int = 1) -> None:
        """Add ``by`` to counter ``name`` (times_needed, rereads, toggles) of row ``i``."""
        if name not in self._COUNTERS:
            raise KeyError(f"{name!r} is not a counter; one of {sorted(self._COUNTERS)}")
        self._feats[i, _COL[name]] += by

    def flag(self, i: int, name: str, value: bool = True) -> None:
        """Set flag ``name`` (modified, is_error, superseded) of row ``i``."""
        if name not in self._FLAGS:
            raise KeyError(f"{name!r} is not a flag; one of {sorted(self._FLAGS)}")
        self._feats[i, _COL[name]] = float(bool(value))

    def set_share(self, i: int, name: str, value: float) -> None:
        """Set share ``name`` (unique_text, unique_names) of row ``i``."""
        if name not in self._SHARES:
            raise KeyError(f"{name!r} is not a share; one of {sorted(self._SHARES)}")
        self._feats[i, _COL[name]] = float(value)

    def set_visible(self, i: int, visible: bool) -> None:
        """Row ``i``'s visibility, for :meth:`observation` without a ``visible`` array (a
        caller that hears of every change, e.g. from a store listener)."""
        self._feats[i, _VISIBLE] = float(bool(visible))

    def visible(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The visibility kept with :meth:`set_visible` of rows ``lo`` to ``hi`` (default: all), as bools."""
        hi = self._n if hi is None else min(hi, self._n)
        return self._feats[lo:hi, _VISIBLE] > 0.5

    def get(self, i: int, name: str) -> float:
        """Feature ``name`` of row ``i`` as stored (time-dependent columns are filled per observation)."""
        return float(self._feats[i, _COL[name]])

    def need(self, i: int, call: int) -> None:
        """Row ``i`` was needed at model call ``call`` (its ``since_need`` counts from the latest)."""
        self._last_need[i] = max(int(self._last_need[i]), int(call))

    def _unread_at(self, row: int, turn: int) -> bool:
        # stored by the call before model call ``turn``: no call had read it when ``turn`` was made
        return int(self._call[row]) == turn - 1

    def add_unread(self, turn: int, masked: Iterable[int], row_of_step: Mapping[int, int]) -> int:
        """Count the misses of model call ``turn`` on outputs no call had read: those of call
        ``turn - 1`` among ``masked`` (the steps whose outputs the call did not see;
        ``Episode.call_reads``).  Each adds one to its ``rereads`` and to :attr:`kind_misses`; none is a
        need.  They need no labels, so the tracker counts them as the turn is recorded.  ``turn``
        numbers model calls 0, 1, 2, ... as the session tracker does (``call`` of :meth:`append`)."""
        misses = 0
        for step in set(masked):
            row = row_of_step.get(step)
            if row is not None and self._unread_at(row, turn):
                misses += 1
                self.bump(row, "rereads")
                self.kind_misses += 1
        return misses

    def add_needs(
        self, steps: Iterable[Step], row_of_step: Mapping[int, int], kinds: Sequence[str] = MISS_KINDS
    ) -> int:
        """Count the needs of newly labelled ``steps`` on the outputs they use.

        ``row_of_step`` maps a trajectory step to the row of its output.  Per output: a
        ``reaccess`` need marks it ``superseded``; the first need of a kind in ``kinds`` on it in
        this batch adds one to ``times_needed`` and moves its last need to the step's turn, and
        when the output was listed in the step's ``masked_before`` (hidden when the call was made)
        one to ``rereads``, except an output of the call before the step's: that miss (no call had
        read it) is :meth:`add_unread`'s, counted when the turn was recorded.  ``kinds`` defaults to
        the kinds ReplayEnv counts (``CostConfig.need_kinds``), so a policy sees the same features
        online as in training.

        ``turn`` is the model-call index, numbered 0, 1, 2, ... as the session tracker numbers it
        (``call`` of :meth:`append` counts the same way): "the previous call" is ``turn - 1``.

        Returns the misses of these steps: outputs they needed, of any kind, while hidden (other than
        the unread ones).  Live, a
        re-read of a hidden output is the agent paying for the hiding, so it counts there; a logged
        re-read is not charged offline because the agent made it with everything visible too.  The
        observation's ``misses`` (:attr:`kind_misses`) counts only needs of ``kinds``, as ReplayEnv's
        does, so that a policy sees the feature it was trained on."""
        misses = 0
        needed: set[int] = set()
        missed: set[int] = set()
        for s in steps:
            masked = set(s.masked_before or ()) if s.needs else ()
            for need in s.needs:
                row = row_of_step.get(need.step)
                if row is None:
                    continue
                if need.kind == "reaccess":
                    self.flag(row, "superseded")
                # a miss of an output no call had read is add_unread's (once per call, as the simulator)
                hidden = need.step in masked and not self._unread_at(row, s.turn)
                if hidden and need.step not in missed:
                    missed.add(need.step)
                    misses += 1
                if need.kind not in kinds or need.step in needed:
                    continue
                needed.add(need.step)
                self.bump(row, "times_needed")
                self.need(row, s.turn)
                if hidden:
                    self.bump(row, "rereads")
                    self.kind_misses += 1
        return misses

    def observation(
        self,
        visible: np.ndarray | None,
        n: int,
        *,
        now: int,
        users: int,
        **context: Any,
    ) -> dict[str, np.ndarray]:
        """The observation for the ``n`` most recent rows; ``visible`` (bool, one per row), or
        None for the visibility kept with :meth:`set_visible`; ``now`` is the current model
        call, ``users`` the user turns so far; ``context``: the keywords of
        :func:`build_observation` (``active_tokens``, ``step``, ``model_family``, ...)."""
        total = self._n
        if visible is None:
            visible = self._feats[:total, _VISIBLE] > 0.5
        elif len(visible) != total:
            raise ValueError(f"visible has {len(visible)} entries for {total} outputs")
        lo = max(0, total - n) if n else total
        m = total - lo
        feats = np.zeros((n, len(ITEM_FEATURES)), np.float32)
        tool = np.zeros(n, np.int64)
        words = np.zeros((n, WORDS_PER_OUTPUT), np.int64)
        if m:
            rows = slice(lo, total)
            feats[:m] = self._feats[rows]
            age = np.maximum(now - self._call[rows], 0)
            last = self._last_need[rows]
            feats[:m, _COL["age"]] = age
            feats[:m, _COL["since_need"]] = np.where(last >= 0, np.maximum(now - last, 0), age)
            feats[:m, _COL["visible"]] = visible[rows]
            feats[:m, _COL["turns_after"]] = users - self._users_at[rows]
            tool[:m] = self._tool[rows]
            words[:m] = self._words[rows]
        return _assemble(feats, tool, words, m, total, int(np.count_nonzero(visible)), **context)

    def state(self, i: int, visible: bool, *, now: int, users: int) -> ItemState:
        """Row ``i`` as an :class:`ItemState` (for a ``/decide`` request or an inspection)."""
        f = self._feats[i]
        last = int(self._last_need[i])
        return ItemState(
            est_tokens=round(float(f[_COL["est_tokens_k"]]) * 1000),
            age=max(0, now - int(self._call[i])),
            visible=bool(visible),
            tool_id=int(self._tool[i]),
            times_needed=int(f[_COL["times_needed"]]),
            since_need=None if last < 0 else max(0, now - last),
            modified=bool(f[_COL["modified"]]),
            is_error=bool(f[_COL["is_error"]]),
            superseded=bool(f[_COL["superseded"]]),
            rereads=int(f[_COL["rereads"]]),
            toggles=int(f[_COL["toggles"]]),
            turns_after=users - int(self._users_at[i]),
            words=tuple(int(w) for w in self._words[i] if w),
            unique_text=float(f[_COL["unique_text"]]),
            unique_names=float(f[_COL["unique_names"]]),
        )


def decode_action(action: Any, n: int, space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """Validate an ``{"enable", "disable"}`` action over ``n`` slots into two boolean masks.

    Errors name the expected space; any non-zero integer counts as set."""
    en, di = check_action(action, n, space)
    return (
        en if en.dtype.kind == "b" else en.astype(np.bool_),  # nonzero -> True
        di if di.dtype.kind == "b" else di.astype(np.bool_),
    )


def check_action(action: Any, n: int, space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decode_action` without the conversion: the two arrays, checked to have shape ``(n,)`` and an
    integer or bool dtype, as given (any non-zero entry counts as set).  For callers that only need
    the few valid slots as booleans and count the rest with ``np.count_nonzero``, which reads
    integers as they are, so converting all ``n`` entries would be wasted work."""
    try:
        en, di = action["enable"], action["disable"]
    except (TypeError, KeyError, IndexError):
        raise ValueError(
            f"action must be a dict with keys 'enable' and 'disable' matching {space}; "
            f"got {type(action).__name__}"
            + (f" with keys {sorted(action)}" if isinstance(action, dict) else "")
        ) from None
    # the usual case, two arrays of the right shape and kind, checked inline (called on every env step)
    if (
        type(en) is np.ndarray
        and type(di) is np.ndarray
        and en.shape == di.shape == (n,)
        and en.dtype.kind in "biu"
        and di.dtype.kind in "biu"
    ):
        return en, di
    return check_mask("enable", en, n, space), check_mask("disable", di, n, space)


def check_mask(name: str, a: Any, n: int, space: spaces.Space) -> np.ndarray:
    """``action[name]`` as an array, checked to have shape ``(n,)`` and an integer or bool dtype."""
    a = np.asarray(a)
    if a.shape != (n,):
        raise ValueError(f"action[{name!r}] has shape {a.shape}; expected ({n},) for {space}")
    if a.dtype.kind not in "biu":
        raise ValueError(
            f"action[{name!r}] has dtype {a.dtype}; expected integers or bools, MultiBinary({n})"
        )
    return a
