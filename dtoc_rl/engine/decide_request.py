"""The ``/decide`` request of ``dtoc-rl serve``: its schema, and the observation inputs it becomes.

The schema is two msgspec Structs (:class:`Item`, :class:`Request`), so a request body is
decoded and type-checked in one pass in C; the rules a schema cannot say (unique keys,
timestamps, tool categories, the window) follow in :func:`parse`.  Errors are
:class:`DecideError`\\ s naming the field (``items[3].tokens``) for the service to return
as 4xx responses.  The fields are documented in :mod:`dtoc_rl.serve.service`.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec

from dtoc_rl.data.models import FAMILIES, normalize_family
from dtoc_rl.engine.features import ItemState
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES, tool_category_id
from dtoc_rl.labels.words import WORDS_PER_OUTPUT, call_text, text_words
from dtoc_rl.sim.pricing import Prices

__all__ = [
    "MAX_ARGS_DEPTH",
    "PLACEHOLDER_TOKENS",
    "Call",
    "DecideError",
    "Item",
    "PriceSpec",
    "Request",
    "Turn",
    "decode",
    "parse",
    "request_schema",
    "to_request",
]

PLACEHOLDER_TOKENS = 40  # a hidden output's placeholder, under the default estimator
_MAX_ARGS = 100_000
# Tool arguments are the only free-form JSON of a request; deeper nesting than this is no real
# tool call, and code that walks such values recursively (json.dumps) would run out of stack.
MAX_ARGS_DEPTH = 64

Count = Annotated[int, msgspec.Meta(ge=0, le=10**15)]
# tokens saved by hiding: below 0 when a hidden output is smaller than its placeholder (ReplayEnv sends that)
Delta = Annotated[int, msgspec.Meta(ge=-(10**15), le=10**15)]
Name = Annotated[str, msgspec.Meta(max_length=200)]


class DecideError(Exception):
    """A request the service refuses: HTTP ``status``, the bad ``field``, a message."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.message, "field": self.field, "status": self.status}


# hashed words (dtoc_rl.labels.words): 1 .. 2**31-1 in first-seen order.  The first WORDS_PER_OUTPUT
# are used; a client may send more (one built when outputs kept more words still works), within a
# bound that keeps a request small.
Word = Annotated[int, msgspec.Meta(ge=1, lt=2**31)]
MAX_CLIENT_WORDS = 64
Words = Annotated[list[Word], msgspec.Meta(max_length=MAX_CLIENT_WORDS)]


Share = Annotated[float, msgspec.Meta(ge=0, le=1)]


class Item(msgspec.Struct):
    """One stored output, as a client describes it."""

    key: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    tokens: Count
    visible: bool = True
    age: Count | None = None
    stored_step: Count | None = None
    timestamp: float | None = None
    tool: Name | None = None
    args: str | dict | list | None = None
    tool_category: Name | None = None
    # the output's first lines (all of it will do): the words of the call and of these lines are a
    # learned policy's content input (dtoc_rl.labels.words); only the first three lines are read
    head: Annotated[str, msgspec.Meta(max_length=_MAX_ARGS)] | None = None
    # the hashed words themselves (dtoc_rl.labels.words), for a client that has them (RemotePolicy)
    words: Words | None = None
    needs: Count | None = None
    times_needed: Count | None = None
    since_need: Count | None = None
    modified: bool = False
    is_error: bool = False
    superseded: bool = False
    rereads: Count = 0
    toggles: Count = 0
    # left out, the service's session fills it (the user turns it has after the output), else 0
    turns_after: Count | None = None
    # the shares of its token windows and distinctive names no newer output and none of the agent's
    # own words hold (ITEM_FEATURES); left out, the service's session labels fill them, else 1
    unique_text: Share | None = None
    unique_names: Share | None = None


Price = Annotated[float, msgspec.Meta(ge=0, le=1e6)]


class PriceSpec(msgspec.Struct):
    """The model's prices in USD per million tokens (cache read and write default to the input price)."""

    input: Price
    output: Price
    cache_read: Price | None = None
    cache_write: Price | None = None
    # a long-context tier (Prices.long_above, long_input, long_output), as a --prices entry takes it
    long_above: Annotated[int, msgspec.Meta(ge=0)] = 0
    long_input: Annotated[float, msgspec.Meta(ge=0, le=100)] = 1.0
    long_output: Annotated[float, msgspec.Meta(ge=0, le=100)] = 1.0
    # what the model's cache really reads of what its rules allow (Prices.cache_hit_rate): not a decision's
    # input, kept in the session's log for the bill `dtoc-rl evaluate` makes of it
    cache_hit_rate: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None

    def to_prices(self) -> Prices:
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        tier = {"long_above": self.long_above, "long_input": self.long_input, "long_output": self.long_output}
        return Prices(
            self.input,
            self.output,
            read,
            write,
            source="/decide request",
            cache_hit_rate=self.cache_hit_rate,
            **tier,
        )


class Call(msgspec.Struct):
    """A tool call of a turn, with the item key its output has in ``items``."""

    key: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    tool: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    output: str
    args: str | dict | list | None = None
    is_error: bool = False
    # the provider's tool call id: a later turn that names it (a harness saving a long output under
    # the call's id) needs this output, as it does in the log
    id: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class Turn(msgspec.Struct):
    """One model call of a session (its message and tool calls), for the service's need labels."""

    index: Count  # 0, 1, 2, ... within the session
    assistant_text: str = ""
    user_text: str = ""  # user messages since the previous turn
    calls: list[Call] = msgspec.field(default_factory=list)


class Request(msgspec.Struct):
    """A ``/decide`` request (unknown fields are ignored)."""

    items: list[Item]
    model_family: Name | None = None
    model: Annotated[str, msgspec.Meta(max_length=500)] | None = None
    step: Count | None = None
    active_tokens: Count | None = None
    saved_tokens: Delta | None = None
    budget: Count | None = None
    budget_tokens: Count | None = None
    stored: Count | None = None
    visible_count: Count | None = None
    misses: Count = 0
    mgmt_calls: Count = 0
    prices: PriceSpec | None = None  # for a model the service cannot price by its name
    # seconds since the model's last response: past the provider's cache lifetime the next call
    # writes its whole prompt anyway, so a change then costs no re-write (info["cache_cold"])
    idle_seconds: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None
    # the client's own finding that the next call's cache has expired (a caller that knows its
    # provider's retention, or replays a log); when given, idle_seconds is not read
    cache_cold: bool | None = None
    # need labels kept by the service: the session's new turns, sent once each, in order
    session: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    task: str | None = None
    system: str | None = None
    turns: list[Turn] = msgspec.field(default_factory=list)
    # the user's words since the newest turn, which the call being decided is sent (the next turn
    # brings them as its user_text): read, not kept, when the session has every turn before ``step``
    pending_user_text: str | None = None


_DECODER = msgspec.json.Decoder(Request)


@functools.cache
def request_schema() -> dict[str, Any]:
    """The JSON Schema of a ``/decide`` body (made once: about 2 ms; treat it as read-only)."""
    return msgspec.json.schema(Request)


_AT = re.compile(r"^(.*) - at `\$(.*)`$", re.S)
_MISSING = re.compile(r"^Object missing required field `([^`]+)`")


def _invalid(e: msgspec.ValidationError, body: Any = None) -> DecideError:
    # msgspec says "Expected `int` >= 0 - at `$.items[3].tokens`": name the field our way.
    text = str(e)
    m = _AT.match(text)
    msg, path = (m.group(1), m.group(2).lstrip(".")) if m else (text, "")
    missing = _MISSING.match(msg)
    if missing:
        name = missing.group(1)
        path = f"{path}.{name}" if path else name
        msg = "is required"
        # unknown fields are ignored, so a misspelt one reads as missing: name the likely slip
        if not m and isinstance(body, dict):
            near = difflib.get_close_matches(name, [k for k in body if isinstance(k, str)], n=1, cutoff=0.6)
            if near and near[0] != name:
                msg += f" (the body has {near[0]!r}, which is not a field)"
    field = path or "<body>"
    return DecideError(422, f"{field}: {msg}", field)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _too_deep() -> DecideError:
    return DecideError(400, "the body nests JSON too deeply (the limit is about 1,000 levels)", "<body>")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether a decoded JSON value nests lists/objects deeper than ``limit`` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return True
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, d + 1) for c in children if isinstance(c, dict | list))
    return False


def _check_depth(req: Request) -> Request:
    for i, it in enumerate(req.items):
        if isinstance(it.args, dict | list) and _depth_over(it.args, MAX_ARGS_DEPTH):
            raise DecideError(
                400, f"items[{i}].args: nested deeper than {MAX_ARGS_DEPTH} levels", f"items[{i}].args"
            )
    for k, t in enumerate(req.turns):
        for j, c in enumerate(t.calls):
            if isinstance(c.args, dict | list) and _depth_over(c.args, MAX_ARGS_DEPTH):
                field = f"turns[{k}].calls[{j}].args"
                raise DecideError(400, f"{field}: nested deeper than {MAX_ARGS_DEPTH} levels", field)
    return req


def decode(body: bytes) -> Request:
    """A request body, decoded and type-checked (raises DecideError: 400 not JSON or nested too
    deeply, 422 a field)."""
    try:
        return _check_depth(_DECODER.decode(body))
    except msgspec.ValidationError as e:
        try:
            raw = msgspec.json.decode(body) if _MISSING.match(str(e)) else None
        except msgspec.DecodeError:
            raw = None
        raise _invalid(e, raw) from None
    except RecursionError:  # the decoder's own nesting limit (about 1,000 levels)
        raise _too_deep() from None
    except msgspec.DecodeError:
        pass
    # What msgspec refuses as JSON, the standard library says why (NaN, Infinity, where the
    # text breaks); it also reads integers too large for msgspec, which then fail their field.
    try:
        obj = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        if isinstance(e, json.JSONDecodeError):
            msg = f"{e.msg} (line {e.lineno}, column {e.colno})"
        else:
            msg = str(e) or type(e).__name__
        raise DecideError(400, f"the body is not valid JSON: {msg}", "<body>") from None
    return to_request(obj)


def to_request(obj: Any) -> Request:
    """A decoded JSON value (or a Request) as a Request (raises DecideError 422)."""
    if isinstance(obj, Request):
        return obj
    try:
        return _check_depth(msgspec.convert(obj, Request))
    except msgspec.ValidationError as e:
        raise _invalid(e, obj) from None
    except RecursionError:
        raise _too_deep() from None


@functools.lru_cache(maxsize=8192)
def _category(tool: str, args: str) -> int:
    # Clients resend the same items every turn: classify each (tool, args) once.
    return tool_category_id(tool, args)


@functools.lru_cache(maxsize=8192)
def _words(text: str) -> tuple[int, ...]:
    # keyed on the few hundred characters read (call_text), not on arguments of up to 100,000
    return text_words(text)


def resolve_family(req: Request) -> str:
    """The model family a request names (``model_family``, else ``model`` normalised)."""
    fam = req.model_family if req.model_family is not None else req.model
    if not fam:
        return "other"
    return fam if fam in FAMILIES else normalize_family(fam)


def _bad(field: str, message: str) -> DecideError:
    return DecideError(422, f"{field}: {message}", field)


def parse(
    req: Request,
    *,
    max_items: int,
    max_request_items: int,
    labels: Callable[[list[str]], Mapping[str, ItemState]] | None = None,
) -> dict[str, Any]:
    """The observation inputs of a request: ``keys`` (all items, in order), ``states`` (the
    ``max_items`` most recent as ItemStates), the family and the global counts.  ``labels``:
    the window's item keys -> their need features (the service's session labels), for the
    items whose own request fields leave them out; what it returned is ``"labels"``.  Every check
    of the request runs before ``labels`` is called, so a refused request never reaches a session."""
    items = req.items
    if len(items) > max_request_items:
        raise DecideError(413, f"items: {len(items)} items; at most {max_request_items} per request", "items")
    step = req.step
    if items and all(it.timestamp is not None for it in items):
        for i, it in enumerate(items):
            if not math.isfinite(it.timestamp):
                raise _bad(f"items[{i}].timestamp", "must be a finite number of seconds")
        order = sorted(range(len(items)), key=lambda i: items[i].timestamp)
    else:
        order = list(range(len(items)))
    n = len(items)
    ordered = [items[i] for i in order]
    keys = [it.key for it in ordered]
    if len(set(keys)) != n:  # say which: the first repeated, in order
        seen: set[str] = set()
        for i in order:
            if items[i].key in seen:
                raise _bad(f"items[{i}].key", f"duplicate key {items[i].key!r}")
            seen.add(items[i].key)
    first_in_window = max(0, n - max_items)
    window = order[first_in_window:]
    args_of = {i: _args_text(items[i], i) for i in window}
    tool_of = {i: _tool_id(items[i], i, args_of[i]) for i in window}
    stored, visible_count = req.stored, req.visible_count
    if stored is not None and stored < n:
        raise _bad("stored", f"must be >= the number of items ({n}), got {stored}")
    if visible_count is not None and visible_count > (n if stored is None else stored):
        raise _bad(
            "visible_count",
            f"must be <= stored ({n if stored is None else stored}"
            f"{'' if stored is not None else ', the number of items when stored is not sent'}), "
            f"got {visible_count}",
        )
    family = resolve_family(req)
    prices = req.prices.to_prices() if req.prices is not None else None
    visible = [it.visible for it in ordered]  # every item's, for the globals
    states: list[ItemState] = []  # the window, oldest first

    def age_of(rank: int, it: Item) -> int:
        if it.age is not None:
            return it.age
        if it.stored_step is not None and step is not None:
            return max(0, step - it.stored_step)
        return n - 1 - rank

    # without a step, the step is the oldest age + 1 (older items than the window read only for it)
    max_age = max((age_of(r, items[i]) for r, i in enumerate(order)), default=-1) if step is None else -1
    known = labels([items[i].key for i in window]) if labels is not None else {}
    for rank, i in enumerate(order[first_in_window:], first_in_window):
        it = items[i]
        age = age_of(rank, it)
        args = args_of[i]
        times_needed = it.needs if it.needs is not None else it.times_needed
        since_need, modified, rereads = it.since_need, it.modified, it.rereads
        label = known.get(it.key)
        unique_text, unique_names = it.unique_text, it.unique_names
        if label is not None:  # the client's own values win
            unique_text = label.unique_text if unique_text is None else unique_text
            unique_names = label.unique_names if unique_names is None else unique_names
        if label is not None and times_needed is None:  # the client's own counts win
            times_needed, since_need = label.times_needed, label.since_need
            modified, rereads = modified or label.modified, max(rereads, label.rereads)
        if it.words is not None:
            words = tuple(it.words[:WORDS_PER_OUTPUT])
        elif it.head is None and label is not None and label.words:  # the session saw the output
            words = label.words
        else:
            words = _words(call_text(it.tool, args, it.head)) if (it.tool or it.head) else ()
        states.append(ItemState(
            est_tokens=it.tokens, age=age, visible=it.visible, tool_id=tool_of[i],
            words=words,
            times_needed=times_needed or 0, since_need=since_need, modified=modified,
            is_error=it.is_error, superseded=it.superseded, rereads=rereads, toggles=it.toggles,
            turns_after=it.turns_after
            if it.turns_after is not None
            else (label.turns_after if label is not None else 0),
            unique_text=1.0 if unique_text is None else unique_text,
            unique_names=1.0 if unique_names is None else unique_names,
        ))  # fmt: skip
    n_hidden = n - sum(visible)
    active = req.active_tokens
    if active is None:
        active = sum(it.tokens for it in ordered if it.visible) + PLACEHOLDER_TOKENS * n_hidden
    saved = req.saved_tokens
    if saved is None:
        saved = sum(max(0, it.tokens - PLACEHOLDER_TOKENS) for it in ordered if not it.visible)
    return {
        "stored": n if stored is None else stored,
        "visible_count": (n - n_hidden) if visible_count is None else visible_count,
        "keys": keys,
        "visible": visible,  # every item's, with keys (states: the window's only)
        "states": states,
        "family": family,
        "model": req.model,
        "prices": prices,
        "idle_seconds": req.idle_seconds,
        "cache_cold": req.cache_cold,
        "active_tokens": active,
        "saved_tokens": saved,
        "budget": req.budget if req.budget is not None else (req.budget_tokens or 0),
        "step": max_age + 1 if step is None else step,
        "misses": req.misses,
        "mgmt_calls": req.mgmt_calls,
        "labels": known,
    }


def _tool_id(it: Item, i: int, args: str) -> int:
    if it.tool_category is not None:
        if it.tool_category not in TOOL_CATEGORIES:
            raise _bad(
                f"items[{i}].tool_category",
                f"unknown category {it.tool_category!r}; one of {list(TOOL_CATEGORIES)}",
            )
        return TOOL_CATEGORIES.index(it.tool_category)
    return _category(it.tool, args) if it.tool else 0


def _args_text(it: Item, i: int) -> str:
    args = it.args if it.args is not None else ""
    if not isinstance(args, str):
        args = json.dumps(args)
    if len(args) > _MAX_ARGS:
        raise _bad(f"items[{i}].args", f"is longer than {_MAX_ARGS} characters")
    return args
