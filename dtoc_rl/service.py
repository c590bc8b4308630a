"""The decision service: a policy behind a small HTTP JSON API, for agents not written in Python.

``http.server.ThreadingHTTPServer`` (HTTP/1.1 keep-alive); requests are decoded and
type-checked by msgspec against the schema in :mod:`dtoc_rl.decide_request`.
``dtoc-rl serve --policy SPEC_OR_CHECKPOINT`` runs it; the service itself takes
any object with ``act(obs, info)`` (the core never imports the policies).

Endpoints
---------
``GET /health``
    ``{"status": "ok", "policy", "uptime_s", "requests"}``.
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
    "fallback": false, "window": 64, "latency_ms": 0.4}``.  Only changes are
    returned: enable lists hidden items to show again, disable visible ones to hide.

Item fields: ``key`` (required, unique string), ``tokens`` (required, the
output's estimated tokens), ``visible`` (default true), ``tool`` (tool name) and
``args`` (its arguments, JSON text or object) or ``tool_category`` (one of
``dtoc_rl.tools.TOOL_CATEGORIES``), ``age`` (model calls since it was stored;
default: ``step - stored_step`` when ``stored_step`` is given, else the number
of items after it), ``timestamp`` (seconds; when every item has one, items are
ordered by it), ``needs`` (alias ``times_needed``), ``since_need``,
``modified``, ``is_error``, ``superseded``, ``rereads``, ``toggles``,
``turns_after`` (see :data:`dtoc_rl.features.ITEM_FEATURES`).  Top level:
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
                              "output": "...", "is_error": false}]}]

The service labels them as it does for a Python agent's Orchestrator
(:mod:`dtoc_rl.session_labels`) and fills ``needs``, ``since_need``, ``modified`` and
``rereads`` of the items that send no ``needs`` of their own.  A turn sent again (a retry)
is skipped; a gap in the indices, or an unknown session whose turns do not start at 0, is a
409 (send the session anew, e.g. after a revert or a restart of the service); a session
over 5 million characters of text is a 413.  Key references (``t0003``) in the texts are
read in the client's numbering (the item keys of the calls).  The
response then carries ``"session": {"turns", "needed": {key: times needed}}`` (the service's
counts, for the items in the policy's window; an item that sends ``needs`` keeps its own).
A session is made when its turn 0 arrives.  Sessions
live in memory, the least recently used dropped beyond ``--max-sessions``.

Model families: the request's family (or ``normalize_family(model)``) picks the
policy.  A family the service does not accept (``"other"``, i.e. an unknown
model, or, for a checkpoint trained on one family, any other family) gets the
**fallback policy** instead (``dtoc-rl serve --fallback``, default ``none``:
everything visible, so an unknown model never loses context); the response says
``"fallback": true``.

:class:`RemotePolicy` is the Python client: a policy object (``act(obs, info)``)
that asks a running service, so an Orchestrator, ReplayEnv or LiveEnv can use a
policy served elsewhere.

Errors are JSON ``{"error", "field", "status"}``: 400 invalid JSON, 404 unknown
path, 405 wrong method, 409 a session's turns out of order, 411 no Content-Length,
413 body over the limit (default 1 MiB) or too many items, 422 a field of the wrong type or range (``field``
names it, e.g. ``items[3].tokens``).  Bad input never produces a 500.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from dtoc_rl.decide_request import DecideError, decode, parse, request_schema, to_request
from dtoc_rl.features import GLOBAL_FEATURES, ITEM_FEATURES, build_observation
from dtoc_rl.models import FAMILIES
from dtoc_rl.session_labels import DEFAULT_MAX_SESSIONS, Sessions
from dtoc_rl.tools import TOOL_CATEGORIES

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY",
    "DEFAULT_PORT",
    "DecideError",
    "DecisionService",
    "RemotePolicy",
    "make_server",
    "serve_in_thread",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB
DEFAULT_MAX_REQUEST_ITEMS = 10_000
_INT_FIELDS = ("rereads", "toggles", "turns_after")
_G_STORED = GLOBAL_FEATURES.index("stored")
_G_VISIBLE = GLOBAL_FEATURES.index("visible")
_BOOL_FIELDS = ("modified", "is_error", "superseded")


class DecisionService:
    """Validates ``/decide`` requests and runs the policy (no HTTP here; see :func:`make_server`).

    Args:
        policy: anything with ``act(obs, info)``.
        label: the policy's name in responses (default: ``policy.label``).
        fallback: the policy for model families not in ``families`` (None: keep
            everything visible).
        fallback_label: its name (default: its ``label``, or ``"none"``).
        families: accepted model families (default: every known family, not ``"other"``).
        max_items: observation slots (the most recent items the policy sees).
        max_body: request body limit in bytes; ``max_request_items``: items per request.
        max_sessions: sessions whose need labels the service keeps (least recently used
            dropped first; see :mod:`dtoc_rl.session_labels`).
    """

    def __init__(
        self,
        policy: Any,
        *,
        label: str | None = None,
        fallback: Any = None,
        fallback_label: str | None = None,
        families: set[str] | frozenset[str] | None = None,
        max_items: int = 128,
        max_body: int = DEFAULT_MAX_BODY,
        max_request_items: int = DEFAULT_MAX_REQUEST_ITEMS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ):
        if not callable(getattr(policy, "act", None)):
            raise TypeError(f"policy must have an act(obs, info) method, got {type(policy).__name__}")
        if fallback is not None and not callable(getattr(fallback, "act", None)):
            raise TypeError(f"fallback must have an act(obs, info) method, got {type(fallback).__name__}")
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
        self.max_body = int(max_body)
        self.max_request_items = int(max_request_items)
        self.sessions = Sessions(max_sessions)
        self.started = time.time()
        self.requests = 0
        self.errors = 0
        self._lock = threading.Lock()

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
            "endpoints": ["GET /health", "GET /version", "POST /decide"],
            "request_schema": request_schema(),  # JSON Schema of a /decide body
        }

    # -- deciding ------------------------------------------------------------------
    def parse(self, req: Any) -> dict[str, Any]:
        """Validate a request (a decoded JSON object, or a :class:`~dtoc_rl.decide_request.Request`);
        returns the observation inputs (raises DecideError).  With a ``session``, its new turns
        are labelled first and the session's need features fill the items that carry none."""
        req = to_request(req)
        session = None
        if req.session is not None:
            session = self.sessions.feed(req)  # None: unknown and no turns yet
        elif req.turns:
            raise DecideError(422, "turns: need a session (the service keeps a session's labels)", "turns")
        p = parse(
            req,
            max_items=self.max_items,
            max_request_items=self.max_request_items,
            labels=session.states if session is not None else None,
        )
        if req.session is not None:
            p["session"] = {
                "turns": session.turns if session is not None else 0,
                # the service's counts, of the items in the policy's window
                "needed": {k: st.times_needed for k, st in p["labels"].items() if st.times_needed},
            }
        return p

    def decide(self, req: Any) -> dict[str, Any]:
        """One ``/decide`` request (a decoded JSON object, or a Request) → its response (raises
        DecideError)."""
        t0 = time.perf_counter()
        p = self.parse(req)
        fallback = p["family"] not in self.families
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
            }
            with self._lock:
                action = policy.act(obs, info)
            en = np.asarray(action["enable"]).reshape(-1)[: len(window)] != 0
            di = np.asarray(action["disable"]).reshape(-1)[: len(window)] != 0
            vis = obs["disable_mask"][: len(window)].astype(bool)
            enable = [window[i] for i in np.flatnonzero(en & ~di & ~vis)]
            disable = [window[i] for i in np.flatnonzero(di & ~en & vis)]
        return {
            "enable": enable,
            "disable": disable,
            "policy": label,
            "family": p["family"],
            "fallback": fallback,
            "window": len(window),
            **({"session": p["session"]} if "session" in p else {}),
            "latency_ms": round((time.perf_counter() - t0) * 1000, 3),
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "dtoc-rl"
    timeout = 30  # seconds a client may take to send its request
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log(f"{self.address_string()} {format % args}")

    def _send(self, status: int, body: dict[str, Any], close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, err: DecideError, close: bool = False) -> None:
        self.server.service.errors += 1
        self._send(err.status, err.to_dict(), close=close)

    def _route(self, method: str) -> None:
        svc = self.server.service
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        routes = {"/health": "GET", "/version": "GET", "/decide": "POST"}
        try:
            if path not in routes:
                self._drain_or_close()
                return self._error(DecideError(404, f"no endpoint {path}; try {sorted(routes)}", "<path>"))
            if routes[path] != method:
                self._drain_or_close()
                return self._error(DecideError(405, f"{path} takes {routes[path]}, not {method}", "<method>"))
            svc.requests += 1
            if path == "/health":
                return self._send(200, svc.health())
            if path == "/version":
                return self._send(200, svc.version())
            body = self._read_body()
            if body is None:
                return
            return self._send(200, svc.decide(decode(body)))
        except DecideError as e:
            return self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a policy bug: report it, keep serving
            svc.errors += 1
            if self.server.log is not None:
                self.server.log(f"internal error: {type(e).__name__}: {e}")
            try:
                self._send(
                    500, {"error": f"internal error: {type(e).__name__}: {e}", "field": None, "status": 500}
                )
            except OSError:
                self.close_connection = True

    def _length(self) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        try:
            n = int(raw)
        except ValueError:
            return -1
        return n

    def _drain_or_close(self) -> None:
        n = self._length()
        if n and 0 < n <= self.server.service.max_body:
            self.rfile.read(n)
        elif n:
            self.close_connection = True

    def _read_body(self) -> bytes | None:
        svc = self.server.service
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._error(DecideError(411, "send the body with a Content-Length (no chunked encoding)"), True)
            return None
        n = self._length()
        if n is None:
            self._error(DecideError(411, "Content-Length is required", "<headers>"), True)
            return None
        if n < 0:
            self._error(DecideError(400, "Content-Length is not a non-negative integer", "<headers>"), True)
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
        return self.rfile.read(n)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], service: DecisionService, log: Callable[[str], None] | None):
        self.service = service
        self.log = log
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:  # never print tracebacks per request
        if self.log is not None:
            exc = sys.exc_info()[1]
            self.log(f"{client_address}: connection error: {type(exc).__name__}: {exc}")


def make_server(
    service: DecisionService,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    log: Callable[[str], None] | None = None,
) -> ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server for ``service``; port 0 picks a free port
    (``server.server_address[1]``).  ``log`` receives one line per request."""
    return _Server((host, port), service, log)


def serve_in_thread(
    service: DecisionService, host: str = DEFAULT_HOST, port: int = 0
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start serving in a daemon thread (tests, benchmarks); stop with ``server.shutdown()``
    then ``server.server_close()``."""
    server = make_server(service, host, port)
    thread = threading.Thread(target=server.serve_forever, name="dtoc-service", daemon=True)
    thread.start()
    return server, thread


class RemotePolicy:
    """A policy served by ``dtoc-rl serve``, used like a local one: ``act(obs, info)``.

    The observation's slots are sent as ``/decide`` items with every feature
    (keys from ``info["keys"]``, else ``s000``, ``s001``, ...), the answer's keys
    are mapped back to enable/disable masks.  When the service cannot be reached
    or answers with an error, ``on_error`` decides: ``"show_all"`` (default: enable
    every hidden slot, like the OpenCode plugin), ``"keep"`` (change nothing) or
    ``"raise"``.  ``errors`` counts failures; ``last`` is the last answer.
    """

    name = "remote"

    def __init__(self, url: str = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}", *, timeout: float = 5.0,
                 on_error: str = "show_all"):  # fmt: skip
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
        self.errors = 0
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
                self._conn.request("POST", "/decide", body, {"Content-Type": "application/json"})
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
                    "age": age,
                    "needs": max(0, needed),
                    "since_need": max(0, round(row[f["since_need"]])) if needed else None,
                    **{b: bool(row[f[b]] > 0.5) for b in _BOOL_FIELDS},
                    **{k: max(0, round(row[f[k]])) for k in _INT_FIELDS},
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
            "saved_tokens": max(0, round(g[gi["saved_tokens_k"]] * 1000)),
            "misses": max(0, round(g[gi["misses"]])),
            "mgmt_calls": max(0, round(g[gi["mgmt_calls"]])),
            "stored": max(len(items), round(g[gi["stored"]])),
            "visible_count": max(0, round(g[gi["visible"]])),
        }
        return body, keys

    def act(self, obs: dict[str, np.ndarray], info: Any = None) -> dict[str, np.ndarray]:
        body, keys = self.request(obs, info)
        n = len(keys)
        action = {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}
        try:
            with self._lock:
                ans = self._post(json.dumps(body).encode())
        except Exception:
            self.errors += 1
            if self.on_error == "raise":
                raise
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
        if self._conn is not None:
            self._conn.close()
            self._conn = None
