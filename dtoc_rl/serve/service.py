"""The decision service: a policy behind a small HTTP JSON API, for agents not written in Python.

``http.server.ThreadingHTTPServer`` (HTTP/1.1 keep-alive); requests are decoded and
type-checked by msgspec against the schema in :mod:`dtoc_rl.engine.decide_request`.
``dtoc-rl serve --policy SPEC_OR_CHECKPOINT`` runs it; the service itself takes
any object with ``act(obs, info)`` (the core never imports the policies).

Access
------
Every endpoint but ``GET /health`` needs ``Authorization: Bearer <token>``: the service's
shared secret (``dtoc-rl serve --token``, the ``DTOC_TOKEN`` environment variable, or a random
one printed at start); a missing or wrong token is a 401.  The ``Host`` header must name the
service (``127.0.0.1``, ``localhost`` or ``[::1]`` or the bound host, with the port, or a name
given with ``allow_hosts``), else 421: a web page whose DNS name points at 127.0.0.1 cannot
reach it.  ``POST /decide`` takes ``Content-Type: application/json`` only (415), so a browser
cannot send it as a form or plain text without a CORS preflight, which gets a 405.

Endpoints
---------
``GET /health``
    ``{"status": "ok", "policy", "uptime_s", "requests"}`` (``requests``: those taken so far, this
    one included).
``GET /version``
    Package version, policy and fallback labels, accepted model families,
    feature names (items, globals, tool categories), limits, and ``request_schema``:
    the JSON Schema of a ``/decide`` body (for clients in other languages).
``POST /decide``
    The client describes its store; the policy says what to change::

        {"model_family": "gpt-4o",          # or "model": a raw name ("openai/gpt-4o-2024-08-06")
         "items": [                          # stored tool outputs, OLDEST FIRST
            {"key": "t0000", "tokens": 1200, "visible": true, "tool": "bash",
             "args": "{\\"command\\": \\"cat a.py\\"}", "age": 3, "needs": 1}, ...],
         "active_tokens": 15000, "step": 12, "budget": 0}

    → ``{"enable": [keys], "disable": [keys], "policy": label, "family": family,
    "fallback": false, "window": 64, "max_items": 128, "latency_ms": 0.4}``.  Only changes are
    returned: enable lists hidden items to show again, disable visible ones to hide.  ``window``: the
    items the policy saw; ``max_items``: the most it sees, so the most whose ``tool``, ``args`` and
    ``head`` are read (older items may send ``key``, ``tokens`` and ``visible`` alone; a client without
    a session may even send only the most recent, with ``stored``, ``visible_count``, ``active_tokens``
    and ``saved_tokens`` of all, but a session records what each call was sent from the items).

Item fields: ``key`` (required, unique string), ``tokens`` (required, the
output's estimated tokens), ``visible`` (default true), ``tool`` (tool name) and
``args`` (its arguments, JSON text or object) or ``tool_category`` (one of
``dtoc_rl.labels.vocabulary.TOOL_CATEGORIES``), ``age`` (model calls since the call that
stored it: 0 for an output of the latest call, which no call has read and a learned policy never
hides; default: ``step - stored_step`` when ``stored_step``, the ``step`` at which it was stored, is
given, else the number of items after it, so send one of them when a call runs several tools in
parallel), ``timestamp`` (seconds; when every item has one, items are
ordered by it), ``needs`` (alias ``times_needed``), ``since_need``,
``modified``, ``is_error``, ``superseded``, ``rereads``, ``toggles``,
``turns_after``, ``unique_text`` and ``unique_names`` (shares from 0 to 1, default 1; see
:data:`dtoc_rl.engine.features.ITEM_FEATURES`), ``head`` (the output's first
lines: with ``tool`` and ``args``, the words a learned policy reads, ``dtoc_rl.labels.words``) or
``words`` (those words already hashed, in first-seen order: up to 64 are taken, the first eight
read).  Top level:
``active_tokens`` (default: visible tokens plus ~40 per hidden placeholder),
``step`` (default: the oldest age + 1), ``budget`` (alias ``budget_tokens``),
``saved_tokens``, ``misses``, ``mgmt_calls``, and ``stored`` / ``visible_count``
(outputs in the whole store, and how many are visible, when ``items`` is only the
most recent part of it).  Unknown fields are ignored.  Counts are integers (a JSON number
with a fraction, even ``5.0``, is refused), flags are booleans, ``timestamp`` is a number.
The policy sees the ``max_items`` most recent items; older ones are never changed, and of
them only ``key``, ``tokens``, ``age`` and ``visible`` are used (for the global features;
every item's fields are type-checked).

Sessions (need labels for clients that cannot label): a request may name a ``session``
(any string) and carry its new ``turns``, each model call once and in order::

        "session": "opencode-ses_42", "task": "Fix the failing test",   # task: first request
        "turns": [{"index": 0, "assistant_text": "Let me look.", "user_text": "",
                   "calls": [{"key": "t0000", "tool": "bash", "args": {"command": "cat a.py"},
                              "output": "...", "is_error": false, "id": "call_1"}]}]

The service labels them as it does for a Python agent's Orchestrator
(:mod:`dtoc_rl.serve.session_labels`) and fills ``needs``, ``since_need``, ``modified`` and
``rereads`` of the items that send no ``needs`` of their own, and ``unique_text``,
``unique_names`` and ``turns_after`` of those that send none.  A turn sent again (a retry)
is skipped; a gap in the indices, or an unknown session whose turns do not start at 0, is a
409 (send the session anew, e.g. after a revert or a restart of the service); a session
over 20 million characters of text is a 413, and text beyond the service's total (50 million
characters; idle sessions are dropped first) a 429.  Sessions are kept per token: a session
name is looked up among the sessions of the request's token, so a client with another token
cannot add turns to it (its turn N of an unknown session is a 409, and the owner's turn N is
labelled as sent).  Clients sharing one token share its sessions.  Key references (``t0003``) in the texts are
read in the client's numbering (the item keys of the calls), and a call's optional ``id`` (the
provider's tool call id) lets a later turn that names it need its output, as in a log.  The
response then carries ``"session": {"turns", "needed": {key: times needed}}`` (the service's
counts, for the items in the policy's window; an item that sends ``needs`` keeps its own).
A request may also carry ``pending_user_text``, the user's words since the newest turn, which
the call being decided is sent (the next turn brings them as its ``user_text``): the outputs before
them are then a user turn older (``turns_after``) at this decision, as a replay of the log sees
them.  It is read when the session has every turn before ``step``, and not kept.
A session also records what each call was sent hidden: the request's items' ``visible`` flags are
what the call whose answer is its newest turn was sent (its last turn, when it is turn ``step - 1``;
send ``step``, the model calls so far, else the items tell it), and with ``--log-dir`` the session
is written as a log of it (``dtoc-rl ingest``, ``evaluate -p logged``).
A session is made when its turn 0 arrives.  Sessions
live in memory; beyond ``--max-sessions``, the least recently used one of the client (token)
holding the most is dropped.

Model families: the request's family (or ``normalize_family(model)``) picks the
policy.  A family the service does not accept (``"other"``, i.e. an unknown
model, or, for a checkpoint trained on one family, any other family) gets the
**fallback policy** instead (``dtoc-rl serve --fallback``, default ``none``:
everything visible, so an unknown model never loses context); the response says
``"fallback": true``.

:class:`RemotePolicy` is the Python client: a policy object (``act(obs, info)``)
that asks a running service, so an Orchestrator, ReplayEnv or LiveEnv can use a
policy served elsewhere.

Errors are JSON ``{"error", "field", "status"}``: 400 invalid JSON, JSON nested too deeply
(tool arguments deeper than 64 levels, a body deeper than about 1,000), a malformed request
line or header, two Content-Length headers or a body shorter than its Content-Length; 401 no or
a wrong token; 404 unknown path; 405 a method other than GET and POST, or the wrong one for the
path (a HEAD gets the status without a body); 408 a request not complete within 10 s of its
first byte; 409 a session's turns out of order; 411 no Content-Length (or a Transfer-Encoding);
413 body over the limit (default 1 MiB), too many items or a session's text over its cap;
414/431 a request line or header too long; 415 not application/json; 421 a foreign Host;
422 a field of the wrong type or range (``field`` names it, e.g. ``items[3].tokens``); 429 the
sessions' total text is full.  Errors that leave the connection's framing in doubt close it.
Bad input never produces a 5xx (a 500 is a bug of the policy itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import ipaddress
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from email.errors import MissingHeaderBodySeparatorDefect
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from dtoc_rl.data.models import FAMILIES, normalize_family
from dtoc_rl.data.paths import others_write_warning, writable_folder
from dtoc_rl.engine.contract import check_policy
from dtoc_rl.engine.decide_request import DecideError, decode, parse, request_schema, to_request
from dtoc_rl.engine.features import (
    DEFAULT_MAX_ITEMS,
    GLOBAL_FEATURES,
    ITEM_FEATURES,
    build_observation,
)
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.serve.log_writer import STOP_WAIT_S, FailedOnce, LogWriter, StopsCleanly
from dtoc_rl.serve.session_labels import (
    DEFAULT_MAX_SESSION_CHARS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_TOTAL_CHARS,
    SessionLabels,
    Sessions,
)
from dtoc_rl.sim.pricing import Prices, cache_expired, model_prices, priced_by_user, user_prices

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY",
    "DEFAULT_PORT",
    "DEFAULT_REQUEST_TIMEOUT",
    "TOKEN_ENV",
    "DecideError",
    "DecisionService",
    "RemotePolicy",
    "check_token",
    "is_loopback",
    "make_server",
    "new_token",
    "serve_in_thread",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB
DEFAULT_MAX_REQUEST_ITEMS = 10_000
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds from a request's first byte to its last
DEFAULT_IDLE_TIMEOUT = 30.0  # seconds a kept-alive connection may wait for its next request
TOKEN_ENV = "DTOC_TOKEN"  # the token's environment variable, for the service and its clients
_INT_FIELDS = ("rereads", "toggles", "turns_after")
_G_STORED = GLOBAL_FEATURES.index("stored")
_G_VISIBLE = GLOBAL_FEATURES.index("visible")
_BOOL_FIELDS = ("modified", "is_error", "superseded")
_SHARE_FIELDS = ("unique_text", "unique_names")


class DecisionService:
    """Validates ``/decide`` requests and runs the policy (no HTTP here; see :func:`make_server`).

    Args:
        policy: anything with ``act(obs, info)``.
        label: the policy's name in responses (default: ``policy.label``).
        fallback: the policy for model families not in ``families`` (None: keep
            everything visible).
        fallback_label: its name (default: its ``label``, or ``"none"``).
        families: accepted model families (default: every known family, not ``"other"``).
        prices: the user's prices by model name (``pricing.load_price_table``), for the policy's
            ``prices`` observation; a request may also carry its own.  A model of another family is
            served by the policy, not the fallback, when its prices are known this way.
        max_items: observation slots (the most recent items the policy sees).
        max_body: request body limit in bytes; ``max_request_items``: items per request.
        max_sessions: sessions whose need labels the service keeps (the least recently used
            of the client holding the most dropped first; see :mod:`dtoc_rl.serve.session_labels`);
            ``max_session_chars`` and ``max_total_chars``: their text, per session (413 beyond) and
            in all (429).
        log_dir: when given, each session (a request's ``session`` with its ``turns``) is written there
            after every request, as the JSONL log ``dtoc-rl ingest`` reads (the proxy's kind), with
            what each call was sent hidden: ``dtoc-rl evaluate -p logged none`` prices what the client
            did.  Each log is its owner's alone (mode 600), written on a thread of its own.
        warn: where a log that cannot be written is said (default: stderr).
    """

    def __init__(
        self,
        policy: Any,
        *,
        label: str | None = None,
        fallback: Any = None,
        fallback_label: str | None = None,
        families: set[str] | frozenset[str] | None = None,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_body: int = DEFAULT_MAX_BODY,
        max_request_items: int = DEFAULT_MAX_REQUEST_ITEMS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_session_chars: int = DEFAULT_MAX_SESSION_CHARS,
        max_total_chars: int = DEFAULT_MAX_TOTAL_CHARS,
        prices: Mapping[str, Prices] | None = None,
        log_dir: str | Path | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        check_policy(policy, live=True)
        if fallback is not None:
            check_policy(fallback, live=True)
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.policy = policy
        self.label = label or str(getattr(policy, "label", None) or type(policy).__name__)
        self.fallback = fallback
        self.fallback_label = fallback_label or (
            str(getattr(fallback, "label", None) or type(fallback).__name__)
            if fallback is not None
            else "none"
        )
        known = set(FAMILIES) - {"other"}
        self.families = frozenset(families if families is not None else known)
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown model families {sorted(unknown)}; known: {list(FAMILIES)}")
        self.max_items = int(max_items)
        self.prices = dict(prices or {})
        self.max_body = int(max_body)
        self.max_request_items = int(max_request_items)
        self.sessions = Sessions(max_sessions, max_session_chars, max_total_chars)
        # the logs hold every tool output the sessions sent: a new folder is private, each log its owner's
        self.log_dir = writable_folder(log_dir, "log folder", private=True) if log_dir is not None else None
        self._unlogged = FailedOnce(lambda message: self.warn(message), "session")
        self._logs = LogWriter(self._unlogged) if self.log_dir is not None else None
        self.warn = warn or (lambda msg: print(f"dtoc-rl serve: warning: {msg}", file=sys.stderr))
        said = others_write_warning(self.log_dir) if self.log_dir is not None else None
        if said:
            self.warn(said)
        self.started = time.time()
        self.requests = 0
        self.errors = 0
        self._lock = threading.Lock()

    # -- session logs --------------------------------------------------------------
    def flush_logs(self, timeout: float | None = None) -> bool:
        """Wait until every session's log holds its latest request; False if ``timeout`` ran out."""
        return self._logs.flush(timeout) if self._logs is not None else True

    def _sent(
        self,
        s: SessionLabels,
        session: str,
        client: str,
        visible: dict[str, bool],
        label: str,
        model: str | None = None,
        prices: Prices | None = None,
        family: str = "other",
    ) -> None:
        """Record what the client's call is sent in its session and, with ``log_dir``, put the session's
        log to be written off the request's path (a log that cannot be written costs the log, never the
        answer).  One file per session object: a session sent anew (after a restart, or dropped from
        the table) is a new log that opens with history, which ``dtoc-rl ingest`` joins to the old."""
        with s.lock:  # one session's requests at once
            # the model this call goes to, and the prices it was decided at, for the log: as the request
            # names it, else by the family it names unless that is the session model's (whose name is
            # the more exact); a request naming neither is the session's model, not an earlier one's
            if not model and family not in ("other", normalize_family(s.orch.model)):
                model = family
            try:
                s.orch.use_model(model or "", prices)
                s.sent(visible)
            except (ValueError, TypeError) as e:  # what the client sent cannot be followed: no log
                if self._logs is not None:
                    self._unlogged(Path(f"{session}.jsonl"), e)
                return
            if self._logs is None or self.log_dir is None:
                return
            digest = hashlib.sha256(f"{client}\0{session}\0{s.orch.session_id}".encode()).hexdigest()[:12]
            # no leading dot: ingest passes over hidden files
            name = f"{re.sub(r'^[.]|[^A-Za-z0-9._-]', '_', session)[:64]}-{digest}"
            if name in self._unlogged:
                return

        def row() -> dict[str, Any]:  # made by the log's writer, when it writes: the session's newest state
            with s.lock:
                made = s.orch.log_row(in_flight=True)
            # the service's policy decided what was hidden, not the model the session's store was made for
            made.update(dtoc_policy=label, dtoc_mode="orchestrator")
            return made

        # put holding no session's lock: with no thread to be had, it makes every waiting row itself
        self._logs.put(self.log_dir / f"{name}.jsonl", row)

    # -- metadata ------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "policy": self.label,
            "uptime_s": round(time.time() - self.started, 3),
            "requests": self.requests,
        }

    def version(self) -> dict[str, Any]:
        from dtoc_rl import __version__

        return {
            "name": "dtoc-rl",
            "version": __version__,
            "policy": self.label,
            "fallback": self.fallback_label,
            "families": sorted(self.families),
            "all_families": list(FAMILIES),
            "item_features": list(ITEM_FEATURES),
            "global_features": list(GLOBAL_FEATURES),
            "tool_categories": list(TOOL_CATEGORIES),
            "max_items": self.max_items,
            "max_body_bytes": self.max_body,
            "max_request_items": self.max_request_items,
            "max_sessions": self.sessions.max_sessions,
            "max_session_chars": self.sessions.max_chars,
            "max_total_chars": self.sessions.max_total_chars,
            "endpoints": ["GET /health", "GET /version", "POST /decide"],
            "auth": "every endpoint but /health: Authorization: Bearer <token>",
            "request_schema": request_schema(),  # JSON Schema of a /decide body
        }

    # -- deciding ------------------------------------------------------------------
    def parse(self, req: Any, client: str = "") -> dict[str, Any]:
        """Validate a request (a decoded JSON object, or a :class:`~dtoc_rl.engine.decide_request.Request`);
        returns the observation inputs (raises DecideError).  With a ``session`` (one of
        ``client``'s: the HTTP layer passes the id of the request's token), its new turns are
        labelled first and the session's need features fill the items that carry none."""
        req = to_request(req)
        if req.session is None and req.turns:
            raise DecideError(422, "turns: need a session (the service keeps a session's labels)", "turns")
        fed: list[Any] = []

        def labels(keys: list[str]) -> dict[str, Any]:
            # called by parse once the request passed every check: a refused request feeds no
            # session, makes none and pushes none out
            s = self.sessions.feed(req, client)  # None: unknown and no turns yet
            fed.append(s)
            return s.states(keys, req.pending_user_text, req.step) if s is not None else {}

        p = parse(
            req,
            max_items=self.max_items,
            max_request_items=self.max_request_items,
            labels=labels if req.session is not None else None,
        )
        session = fed[0] if fed else None
        p["session_labels"], p["session_name"] = session, req.session
        if req.session is not None:
            p["session"] = {
                "turns": session.turns if session is not None else 0,
                # the service's counts, of the items in the policy's window
                "needed": {k: st.times_needed for k, st in p["labels"].items() if st.times_needed},
            }
        return p

    def decide(self, req: Any, client: str = "") -> dict[str, Any]:
        """One ``/decide`` request (a decoded JSON object, or a Request) → its response (raises
        DecideError); ``client`` names whose sessions it may use."""
        # session logs written meanwhile pause between their pieces (the interpreter is the request's)
        with self._logs.busy() if self._logs is not None else contextlib.nullcontext():
            return self._decide(req, client)

    def _decide(self, req: Any, client: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        p = self.parse(req, client)
        given = p["prices"] or user_prices(p["model"], p["family"], self.prices)
        # a model of a family the policy never saw is served when its prices are given (a hit rate alone
        # gives none: the family's fallback prices would stand for it)
        served = p["prices"] is not None or priced_by_user(p["model"], p["family"], self.prices)
        fallback = p["family"] not in self.families and not served
        policy = self.fallback if fallback else self.policy
        label = self.fallback_label if fallback else self.label
        keys, states = p["keys"], p["states"]  # states: the window's items only
        window = keys[-self.max_items :]
        if policy is None:  # the built-in fallback: everything visible
            enable = [k for k, s in zip(window, states) if not s.visible]
            disable: list[str] = []
        else:
            obs = build_observation(
                states,
                self.max_items,
                active_tokens=p["active_tokens"],
                step=p["step"],
                model_family=p["family"],
                # a learned policy trained with its own prices is priced at them (they do not make
                # another family served, as the user's --prices do: the policy was not trained on it)
                prices=given
                or model_prices(p["model"] or None, p["family"], getattr(policy, "price_table", None)),
                budget_tokens=p["budget"],
                saved_tokens=p["saved_tokens"],
                misses=p["misses"],
                mgmt_calls=p["mgmt_calls"],
            )
            # over all the items (or the client's whole store, when it sent only part of it)
            obs["globals"][_G_STORED] = p["stored"]
            obs["globals"][_G_VISIBLE] = p["visible_count"]
            pad = self.max_items - len(window)
            info = {
                "keys": window + [""] * pad,
                "slot_keys": window + [""] * pad,
                "slot_steps": np.full(self.max_items, -1, np.int64),
                "step": p["step"],
                "model_family": p["family"],
                "active_tokens": p["active_tokens"],
                "budget_tokens": p["budget"],
                "action_mask": {"enable": obs["enable_mask"], "disable": obs["disable_mask"]},
                # the provider's cache has expired since the model's last response: the client says so,
                # or its wait is longer than the provider keeps a cached prompt
                "cache_cold": p["cache_cold"]
                if p["cache_cold"] is not None
                else cache_expired(p["idle_seconds"], p["family"], p["model"] or None),
            }
            with self._lock:
                action = policy.act(obs, info)
            en = np.asarray(action["enable"]).reshape(-1)[: len(window)] != 0
            di = np.asarray(action["disable"]).reshape(-1)[: len(window)] != 0
            vis = obs["disable_mask"][: len(window)].astype(bool)
            enable = [window[i] for i in np.flatnonzero(en & ~di & ~vis)]
            disable = [window[i] for i in np.flatnonzero(di & ~en & vis)]
        if p.get("session_labels") is not None:  # what the call is sent: the session's next turn's
            visible = dict(zip(keys, p["visible"]))  # enable and disable are disjoint
            visible.update(dict.fromkeys(enable, True))
            visible.update(dict.fromkeys(disable, False))
            self._sent(
                p["session_labels"], p["session_name"], client, visible, label, p["model"], given, p["family"]
            )
        return {
            "enable": enable,
            "disable": disable,
            "policy": label,
            "family": p["family"],
            "fallback": fallback,
            "window": len(window),
            "max_items": self.max_items,
            **({"session": p["session"]} if "session" in p else {}),
            "latency_ms": round((time.perf_counter() - t0) * 1000, 3),
        }


_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARD = ("", "0.0.0.0", "::")
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_DIGITS = re.compile(r"[0-9]{1,18}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address to bind) reaches only this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """A token as a client can send it in a header (raises ValueError naming the problem)."""
    if not isinstance(token, str) or not token:
        raise ValueError("a token must be a non-empty string")
    if any(not (0x21 <= ord(c) <= 0x7E) for c in token):
        raise ValueError("a token may hold only printable ASCII without spaces (it is sent in a header)")
    return token


class _DeadlineReader(io.RawIOBase):
    """The connection's receiving side with a deadline for the whole request, not only per read
    (a client sending a byte at a time would otherwise keep the connection forever)."""

    def __init__(self, sock: socket.socket, idle: float):
        self.sock, self.idle = sock, idle
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        wait = self.idle
        if self.deadline is not None:
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                raise TimeoutError("the request took longer than its deadline")
        self.sock.settimeout(wait)
        return self.sock.recv_into(buf)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "dtoc-rl"
    timeout = None  # the deadlines are _DeadlineReader's
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain file of StreamRequestHandler: reads go through the deadline
        self._reader = _DeadlineReader(self.connection, self.server.idle_timeout)
        self.rfile = io.BufferedReader(self._reader, 1 << 16)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:  # the request line is the client's: no raw control bytes
            self.server.log(f"{self.address_string()} {format % args}".translate(_CONTROL))

    # -- one request, under its deadline ---------------------------------------------
    def handle_one_request(self) -> None:
        self.command = self.request_version = None
        self.requestline = ""
        self._reader.deadline = None
        try:
            if not self.rfile.peek(1):  # the client closed the connection
                self.close_connection = True
                return
        except OSError:  # idle too long between requests, or a reset
            self.close_connection = True
            return
        self._reader.deadline = time.monotonic() + self.server.request_timeout
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = ""
                return self._reject(414, "the request line is longer than 65536 bytes", "<request>")
            if not self.parse_request():  # it answered with send_error
                return
            self._route(self.command)
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True
            try:
                secs = self.server.request_timeout
                self._reject(408, f"the request was not complete within {secs:g} s", "<request>")
            except OSError:
                pass
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            self._reader.deadline = None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's errors for a malformed request line or headers, in the service's JSON form;
        # a request the server cannot parse is the client's fault (4xx), whatever http.server says.
        status = code if 400 <= code < 500 else 400
        text = message or self.responses.get(code, ("error",))[0]
        if self.request_version == "HTTP/0.9":  # unparsed version: answer with a status line anyway
            self.request_version = "HTTP/1.1"
        self._reject(status, f"malformed request: {text}", "<request>")

    # -- responses -------------------------------------------------------------------
    def _send(self, status: int, body: dict[str, Any], close: bool = False, headers: Any = ()) -> None:
        data = json.dumps(body).encode()
        self._reader.sock.settimeout(self.server.idle_timeout)  # writing: not under the read deadline
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":  # a HEAD response has no body, only its length
            self.wfile.write(data)

    def _error(self, err: DecideError, close: bool = False, headers: Any = ()) -> None:
        self.server.service.errors += 1
        self._send(err.status, err.to_dict(), close=close, headers=headers)

    def _reject(self, status: int, message: str, field: str, headers: Any = ()) -> None:
        """An error after which the connection's framing cannot be trusted: answer and close."""
        self._error(DecideError(status, message, field), close=True, headers=headers)

    # -- routing ---------------------------------------------------------------------
    def _host_ok(self) -> str | None:
        """None if the Host header names this service, else the error message."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1:
            return f"expected one Host header, got {len(hosts)}"
        host = hosts[0].strip().lower()
        if host in self.server.allowed_hosts:
            return None
        return (
            f"Host {host[:100]!r} is not this service's address (one of "
            f"{', '.join(sorted(self.server.allowed_hosts))}); a web page reaching this port through "
            "another name is refused, and --allow-host adds a name"
        )

    def _client(self) -> str | None:
        """The id of the token the request carries (None: none of the service's tokens)."""
        auth = self.headers.get_all("Authorization") or []
        if len(auth) != 1:
            return None
        scheme, _, given = auth[0].strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        given_b = given.strip().encode("utf-8", "surrogateescape")
        found = None
        for i, tok in enumerate(self.server.token_bytes):  # compare with every token: no early exit
            if hmac.compare_digest(given_b, tok):
                found = f"client{i}"
        return found

    def _route(self, method: str) -> None:
        svc = self.server.service
        routes = {"/health": "GET", "/version": "GET", "/decide": "POST"}
        try:
            if self.request_version == "HTTP/0.9":  # no headers: answered with a status line anyway
                self.request_version = "HTTP/1.1"
                return self._reject(400, "HTTP/0.9 request line: send 'METHOD PATH HTTP/1.1'", "<request>")
            # a line without a colon ends http.server's header parsing early, and a folded line
            # continues a value: either way the headers are not what the client meant
            cut = any(isinstance(d, MissingHeaderBodySeparatorDefect) for d in self.headers.defects)
            if cut or any("\r" in v or "\n" in v for v in self.headers.values()):
                return self._reject(
                    400, "malformed header (a line without ':' or a folded line)", "<headers>"
                )
            if len(self.headers.get_all("Content-Length") or []) > 1:
                return self._reject(400, "more than one Content-Length header", "<headers>")
            if self.headers.get("Transfer-Encoding") is not None:
                return self._reject(
                    411, "send the body with a Content-Length (no Transfer-Encoding)", "<headers>"
                )
            bad_host = self._host_ok()
            if bad_host:
                return self._reject(421, bad_host, "<headers>")
            if method not in ("GET", "POST"):
                return self._reject(
                    405, f"method {method[:20]!r} is not served; use GET or POST", "<method>",
                    headers=[("Allow", "GET, POST")],
                )  # fmt: skip
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path not in routes:
                self._drain_or_close()
                return self._error(
                    DecideError(404, f"no endpoint {path[:200]}; try {sorted(routes)}", "<path>")
                )
            if routes[path] != method:
                self._drain_or_close()
                return self._error(
                    DecideError(405, f"{path} takes {routes[path]}, not {method}", "<method>"),
                    headers=[("Allow", routes[path])],
                )
            client = None
            if path != "/health":
                client = self._client()
                if client is None:
                    self._drain_or_close()
                    return self._error(
                        DecideError(
                            401,
                            "missing or wrong token: send 'Authorization: Bearer <token>' (the token "
                            "dtoc-rl serve printed at start, or the one it was given)",
                            "<headers>",
                        ),
                        headers=[("WWW-Authenticate", 'Bearer realm="dtoc-rl"')],
                    )
            svc.requests += 1
            if method == "GET":  # a body sent with a GET is read away: it is not the next request
                self._drain_or_close()
            if path == "/health":
                return self._send(200, svc.health())
            if path == "/version":
                return self._send(200, svc.version())
            ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                self._drain_or_close()
                return self._error(
                    DecideError(
                        415, f"Content-Type must be application/json, got {ctype[:100]!r}", "<headers>"
                    )
                )
            body = self._read_body()
            if body is None:
                return
            return self._send(200, svc.decide(decode(body), client=client or ""))
        except DecideError as e:
            return self._error(e)
        except OSError:  # a timeout (408) or a client gone: handle_one_request answers or closes
            raise
        except Exception as e:  # a policy bug: report it, keep serving
            svc.errors += 1
            if self.server.log is not None:
                self.server.log(f"internal error: {type(e).__name__}: {e}".translate(_CONTROL))
            self._send(
                500, {"error": f"internal error: {type(e).__name__}: {e}", "field": None, "status": 500}
            )

    def _length(self) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        raw = raw.strip()
        return int(raw) if _DIGITS.fullmatch(raw) else -1

    def _drain_or_close(self) -> None:
        n = self._length()
        if n and 0 < n <= self.server.service.max_body:
            self._read_exactly(n)
        elif n:
            self.close_connection = True

    def _read_exactly(self, n: int) -> bytes | None:
        """``n`` bytes of body, or None (answered: 400 and closed) when the client ends sooner."""
        data = self.rfile.read(n)
        if len(data) < n:
            self._reject(400, f"the body ended after {len(data)} of its {n} bytes (Content-Length)", "<body>")
            return None
        return data

    def _read_body(self) -> bytes | None:
        svc = self.server.service
        n = self._length()
        if n is None:
            self._reject(411, "Content-Length is required", "<headers>")
            return None
        if n < 0:
            self._reject(400, "Content-Length is not a non-negative integer", "<headers>")
            return None
        if n > svc.max_body:
            err = DecideError(413, f"the body is {n} bytes; the limit is {svc.max_body}", "<body>")
            if n <= 16 * svc.max_body:  # read it away so the client sees the answer, not a reset
                left = n
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            self._error(err, True)
            return None
        return self._read_exactly(n)


class _Server(StopsCleanly, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # a burst of new connections waits in the kernel, not refused

    def __init__(
        self,
        addr: tuple[str, int],
        service: DecisionService,
        log: Callable[[str], None] | None,
        tokens: list[str],
        allow_hosts: Iterable[str],
        request_timeout: float,
        idle_timeout: float,
    ):
        self.service = service
        self.log = log
        self.tokens = tokens
        self.token_bytes = [t.encode() for t in tokens]
        self.request_timeout = float(request_timeout)
        self.idle_timeout = float(idle_timeout)
        if ":" in addr[0]:  # an IPv6 address (::1, ::): socketserver's default family is IPv4 only
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        host, port = addr[0], self.server_address[1]
        names = {*_LOOPBACK_NAMES, *(h.strip().lower() for h in allow_hosts if h.strip())}
        if host not in _WILDCARD:
            names.add(f"[{host}]" if ":" in host else host.lower())
        self.allowed_hosts = frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))

    @property
    def token(self) -> str:
        """The (first) token clients send as ``Authorization: Bearer <token>``."""
        return self.tokens[0]

    def _write_logs(self) -> None:
        if not self.service.flush_logs(timeout=STOP_WAIT_S):
            self.service.warn(f"session logs not all written within {STOP_WAIT_S:g} s of stopping")

    def handle_error(self, request: Any, client_address: Any) -> None:  # never print tracebacks per request
        if self.log is not None:
            exc = sys.exc_info()[1]
            self.log(f"{client_address}: connection error: {type(exc).__name__}: {exc}".translate(_CONTROL))


def make_server(
    service: DecisionService,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    log: Callable[[str], None] | None = None,
    token: str | Sequence[str] | None = None,
    allow_hosts: Iterable[str] = (),
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> _Server:
    """A bound (not yet serving) HTTP server for ``service``; port 0 picks a free port
    (``server.server_address[1]``).  ``log`` receives one line per request.

    ``token``: the shared secret (or several, one per client: sessions are kept per token)
    every request but ``GET /health`` must carry as ``Authorization: Bearer <token>``; None
    makes a random one (``server.token``).  A host other than loopback needs a token given
    here.  ``allow_hosts``: more names clients reach the service by (the Host header is checked
    against the loopback names and the bound host).  ``request_timeout``: seconds a request may
    take from its first byte to its last (408 after); ``idle_timeout``: seconds a kept-alive
    connection may wait for its next request."""
    if token is None:
        if not is_loopback(host):
            raise ValueError(f"listening on {host!r} (not loopback) needs a token given explicitly")
        tokens = [new_token()]
    else:
        tokens = [check_token(t) for t in ([token] if isinstance(token, str) else list(token))]
        if not tokens:
            raise ValueError("token: give at least one")
    if request_timeout <= 0 or idle_timeout <= 0:
        raise ValueError("request_timeout and idle_timeout must be > 0")
    return _Server((host, port), service, log, tokens, allow_hosts, request_timeout, idle_timeout)


def serve_in_thread(
    service: DecisionService, host: str = DEFAULT_HOST, port: int = 0, **kwargs: Any
) -> tuple[_Server, threading.Thread]:
    """Start serving in a daemon thread (tests, benchmarks); ``kwargs`` go to :func:`make_server`
    (the token is ``server.token``).  Stop with ``server.shutdown()`` then ``server.server_close()``."""
    server = make_server(service, host, port, **kwargs)
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="dtoc-service", daemon=True)
    thread.start()
    return server, thread


class RemotePolicy:
    """A policy served by ``dtoc-rl serve``, used like a local one: ``act(obs, info)``.

    The observation's slots are sent as ``/decide`` items with every feature
    (keys from ``info["keys"]``, else ``s000``, ``s001``, ...; ``info["cache_cold"]``, which
    ReplayEnv, LiveEnv and the Orchestrator set, as ``cache_cold``), the answer's keys
    are mapped back to enable/disable masks.  When the service cannot be reached
    or answers with an error, ``on_error`` decides: ``"show_all"`` (default: enable
    every hidden slot, like the OpenCode plugin), ``"keep"`` (change nothing) or
    ``"raise"``.  ``errors`` counts failures; ``last`` is the last answer.  ``token``: the
    service's token (default: the ``DTOC_TOKEN`` environment variable), sent as
    ``Authorization: Bearer <token>``.  The first failure of each kind (an HTTP status, or the
    service unreachable) is also a ``RuntimeWarning``: a wrong token would otherwise show
    everything, silently, for the whole run.
    """

    name = "remote"

    def __init__(self, url: str = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}", *, timeout: float = 5.0,
                 on_error: str = "show_all", token: str | None = None):  # fmt: skip
        from urllib.parse import urlsplit

        if on_error not in ("show_all", "keep", "raise"):
            raise ValueError(f"on_error must be show_all, keep or raise, got {on_error!r}")
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected an http://host:port URL, got {url!r}")
        self.url = f"http://{parts.hostname}:{parts.port or 80}"
        self._host, self._port = parts.hostname, parts.port or 80
        self.timeout = float(timeout)
        self.on_error = on_error
        tok = token if token is not None else os.environ.get(TOKEN_ENV)
        self._headers = {"Content-Type": "application/json"}
        if tok:
            self._headers["Authorization"] = f"Bearer {check_token(tok)}"
        self.errors = 0
        self._warned: set[str] = set()  # kinds of failure already warned about
        self.last: dict[str, Any] | None = None
        self._conn: Any = None
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        served = (self.last or {}).get("policy")
        return f"remote({self.url}{', ' + served if served else ''})"

    def _post(self, body: bytes) -> dict[str, Any]:
        import http.client

        for attempt in (0, 1):  # one retry on a fresh connection (the server may have closed it)
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            try:
                self._conn.request("POST", "/decide", body, self._headers)
                r = self._conn.getresponse()
                data = json.loads(r.read() or b"{}")
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {data.get('error')}")
                return data
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def request(self, obs: dict[str, np.ndarray], info: Any = None) -> tuple[dict[str, Any], list[str]]:
        """The ``/decide`` body for an observation, and the slot keys."""
        info = info or {}
        mask = np.asarray(obs["item_mask"]).astype(bool)
        n = len(mask)
        raw = list(info.get("keys") or [])[:n]
        keys = [str(raw[i]) if i < len(raw) and raw[i] else f"s{i:03d}" for i in range(n)]
        items = []
        f = {name: i for i, name in enumerate(ITEM_FEATURES)}
        g = np.asarray(obs["globals"], np.float64)
        gi = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
        for i in np.flatnonzero(mask):
            row = np.asarray(obs["items"][i], np.float64)
            age = max(0, round(row[f["age"]]))
            needed = round(row[f["times_needed"]])
            items.append(
                {
                    "key": keys[i],
                    "tokens": max(0, round(row[f["est_tokens_k"]] * 1000)),
                    "visible": bool(row[f["visible"]] > 0.5),
                    "tool_category": TOOL_CATEGORIES[int(obs["item_tool"][i])],
                    **_words_field(obs, i),
                    "age": age,
                    "needs": max(0, needed),
                    "since_need": max(0, round(row[f["since_need"]])) if needed else None,
                    **{b: bool(row[f[b]] > 0.5) for b in _BOOL_FIELDS},
                    **{k: max(0, round(row[f[k]])) for k in _INT_FIELDS},
                    **{k: min(1.0, max(0.0, float(row[f[k]]))) for k in _SHARE_FIELDS},
                }
            )
        fam = info.get("model_family")
        if fam is None:
            fid = int(np.asarray(obs.get("family", 0)))
            fam = FAMILIES[fid] if 0 <= fid < len(FAMILIES) else "other"
        body = {
            "model_family": fam,
            "items": items,
            "active_tokens": max(0, round(g[gi["active_tokens_k"]] * 1000)),
            "budget": max(0, round(g[gi["budget_k"]] * 1000)),
            "step": max(0, round(g[gi["step"]])),
            "saved_tokens": round(g[gi["saved_tokens_k"]] * 1000),  # < 0 when placeholders outweigh
            "misses": max(0, round(g[gi["misses"]])),
            "mgmt_calls": max(0, round(g[gi["mgmt_calls"]])),
            "stored": max(len(items), round(g[gi["stored"]])),
            "visible_count": max(0, round(g[gi["visible"]])),
        }
        if "cache_cold" in info:  # ReplayEnv, LiveEnv and the Orchestrator know it; a policy acts on it
            body["cache_cold"] = bool(info["cache_cold"])
        return body, keys

    def reset(self, info: Any = None) -> None:
        """Start of an episode: nothing to do (each ``/decide`` request carries the whole state), but
        ``evaluate()``, ReplayEnv loops and the Orchestrator call it on every policy."""

    def __enter__(self) -> RemotePolicy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a policy dropped without close() leaves no socket open
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def act(self, obs: dict[str, np.ndarray], info: Any = None) -> dict[str, np.ndarray]:
        body, keys = self.request(obs, info)
        n = len(keys)
        action = {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}
        try:
            with self._lock:
                ans = self._post(json.dumps(body).encode())
        except Exception as e:
            self.errors += 1
            if self.on_error == "raise":
                raise
            kind = str(e).split(":", 1)[0] if str(e).startswith("HTTP ") else type(e).__name__
            if kind not in self._warned:
                self._warned.add(kind)
                warnings.warn(
                    f"RemotePolicy {self.url}: {' '.join(str(e).split())[:300] or kind}; "
                    f"on_error={self.on_error!r} decides until the service answers",
                    RuntimeWarning,
                    stacklevel=2,
                )
            if self.on_error == "show_all":
                action["enable"] = np.asarray(obs["enable_mask"], np.int8).copy()
            return action
        self.last = ans
        slot = {k: i for i, k in enumerate(keys)}
        for name in ("enable", "disable"):
            for k in ans.get(name) or []:
                if k in slot:
                    action[name][slot[k]] = 1
        return action

    def close(self) -> None:
        """Close the kept-alive connection to the service (a later decision opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _words_field(obs: dict[str, np.ndarray], i: int) -> dict[str, list[int]]:
    # the slot's hashed words, so that a served learned policy reads what a local one would
    w = obs.get("item_words")
    if w is None:
        return {}
    row = [int(x) for x in np.asarray(w[i]) if x]
    return {"words": row} if row else {}
