"""A policy in front of any agent, as an OpenAI-, Anthropic- and Gemini-compatible HTTP proxy.

An agent that lets its API's base URL be set (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``,
``GOOGLE_GEMINI_BASE_URL``, LiteLLM's ``api_base``) needs no change of code to have a policy manage
its context: point it at ``dtoc-rl proxy`` and the proxy, before each model call,

1. mirrors the request's conversation into an :class:`~dtoc_rl.serve.orchestrator.Orchestrator` (one
   per conversation, fed only the messages it has not seen: the same session engine, need labels and
   features a Python agent's orchestrator and ``dtoc-rl serve`` use);
2. lets the policy decide (:meth:`Orchestrator.decide`), and
3. sends the request on to the upstream API with the tool outputs the policy hides replaced by their
   DTOC placeholders; every other byte of the request is the agent's own (its messages, tools, settings
   and credentials), and the answer comes back unchanged, streamed as it arrives.

The agent's store is its own history: nothing is lost, an output hidden at one call is shown again in
full at a later one when the policy enables it.  Chat completions (``POST .../chat/completions``),
Responses (``POST .../responses``, unless it names a ``previous_response_id``: then the API holds the
history), Anthropic Messages (``POST .../messages``) and Gemini (``POST .../models/M:generateContent``
and ``:streamGenerateContent``, the model named in the path) requests are managed; anything else is
passed through.

Conversations are told apart by their messages: a request whose messages start with all the messages a
mirror has seen continues that conversation (tool results by their call ids, so a harness that masks
or trims its own old outputs still continues it, and the newest results by their text as well, so a
run of the same task with the same call ids does not); any other starts a new one (a harness that rewrites
earlier messages, e.g. after compacting, gets a fresh mirror, and its outputs are shown again until the
policy hides them anew).  Where the agent names its run (an ``X-DTOC-Session`` header, Claude Code's
session id, Codex's ``prompt_cache_key``; :func:`session_of`), requests of two named runs never share a
conversation, so the same task started twice at once is two from its first named request (a request
naming no run is matched by its messages alone, and a mirror takes the first name it is given).  Models of a
family the policy does not serve (``other``, unless the user priced it; for a checkpoint trained on one
family, every other) pass through untouched, as ``dtoc-rl serve`` answers them with its ``none``
fallback.  A request the proxy cannot read, or whose mirroring fails, goes upstream as it came, with a
warning: the proxy never stops an agent.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import http.client
import json
import os
import re
import select
import sys
import threading
import time
import urllib.request
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME
from dtoc_rl.core.record import POLICY_NOTE
from dtoc_rl.data.models import FAMILIES, normalize_family
from dtoc_rl.data.paths import others_write_warning, writable_folder
from dtoc_rl.engine.contract import check_policy
from dtoc_rl.ingest.gemini import field_key
from dtoc_rl.serve.api_messages import (
    EVENTS,
    LISTED,
    Event,
    StreamAnswer,
    answer_event,
)
from dtoc_rl.serve.log_writer import STOP_WAIT_S, FailedOnce, LogWriter, StopsCleanly
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.sim.pricing import Prices, priced_by_user, user_prices

__all__ = ["DEFAULT_PROXY_PORT", "ContextProxy", "Rewrite", "check_upstream", "make_proxy_server"]

DEFAULT_PROXY_PORT = 8766
#: Conversations mirrored at once; beyond it the least recently used is dropped (its outputs are then
#: shown again, in full, if it comes back).
DEFAULT_MAX_CONVERSATIONS = 256
# Headers a proxy must not pass on (RFC 9110 section 7.6.1) and the ones it recomputes; Accept-Encoding too,
# so that an answer's usage can be read from it.
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
)  # fmt: skip
#: A request header naming the agent for the conversation's log (``proxy:<name>``), over its
#: User-Agent: agents built on one SDK all send that SDK's.  The proxy's own; not sent upstream.
AGENT_HEADER = "X-DTOC-Agent"
_AGENT = AGENT_HEADER.lower()
#: A request header naming the agent's run: requests of two runs are never taken for one conversation,
#: even while their messages are the same (the same task started twice).  Not sent upstream.
SESSION_HEADER = "X-DTOC-Session"
_OURS = {_AGENT, SESSION_HEADER.lower()}
#: Headers by which agents name their own runs, read when ``SESSION_HEADER`` is absent.
AGENT_SESSION_HEADERS = ("X-Claude-Code-Session-Id",)
#: What goes no further than the proxy: the hop-by-hop headers and its own.
_NOT_SENT = _HOP | _OURS
_SERVED = frozenset(FAMILIES) - {"other"}


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


def agent_source(user_agent: str | None) -> str:
    """The source a proxied conversation's log names: ``proxy:`` and the first product of its
    ``User-Agent`` (``claude-cli/2.1.3 (external, cli)`` -> ``proxy:claude-cli``), else ``proxy``."""
    first = (user_agent or "").strip().split("/")[0].split(" ")[0].lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", first).strip("-._")[:40].rstrip("-._")
    return f"proxy:{name}" if name else "proxy"


def session_of(api: str, body: Mapping[str, Any], header: str | None = None) -> str | None:
    """A digest of the agent's own name for the run a request belongs to, if it gives one: ``header`` (the
    request's ``X-DTOC-Session``, else an agent's own session header such as Claude Code's), else
    the body's ``prompt_cache_key`` (OpenAI APIs; Codex sends its thread id) or Anthropic's
    ``metadata.user_id`` (the session id in Claude Code's, so that it names the run as its header
    does).  A key that names a user rather than a run only keeps that user's runs apart from others';
    within them messages decide, as without."""
    if header:
        return _digest(header)
    key: Any = None
    if api in ("openai", "responses"):
        key = body.get("prompt_cache_key")
    elif api == "anthropic" and isinstance(body.get("metadata"), dict):
        key = body["metadata"].get("user_id")
        if isinstance(key, str):  # Claude Code's session id, as its session header gives it
            try:
                inner = json.loads(key) if key.startswith("{") else None
            except ValueError:
                inner = None
            if isinstance(inner, dict) and isinstance(inner.get("session_id"), str):
                key = inner["session_id"]
            elif "_session_" in key:  # its older form, user_<hash>_account_<uuid>_session_<uuid>
                key = key.rsplit("_session_", 1)[1]
    return _digest(key) if isinstance(key, str) and key else None  # compared only: whole, bounded


class _Request:
    """One request's events as the mirrors match and feed them: their prints, where its last model
    turn is, and its events' text digests, each taken once whatever mirrors ask; ``session`` is the
    run it names (:func:`session_of`): no mirror of another named run continues it."""

    def __init__(self, events: list[Event], session: str | None = None):
        self.events = events
        self.session = session
        self.prints = [e.fingerprint() for e in events]
        self.last_turn = max((i for i, e in enumerate(events) if e.kind == "assistant"), default=-1)
        self._digests: dict[int, str] = {}

    def digest(self, i: int) -> str:
        if i not in self._digests:
            self._digests[i] = _digest(self.events[i].text)
        return self._digests[i]


class _Mirror:
    """One conversation as an Orchestrator has it, and how its tool results map to DTOC keys."""

    def __init__(self, orch: Orchestrator, name: str, session: str | None = None):
        self.orch = orch
        self.name = name
        # the run the agent named (session_of), from the first request that named one: a request naming
        # another never continues it; one naming none is matched by its messages alone
        self.session = session
        self.prints: list[str] = []
        self.keys: list[str | None] = []  # per event: the DTOC key of a tool result
        self.pending: dict[Any, deque[str]] = {}  # the request's call id -> the orchestrator's
        # events up to the last model turn or tool result: the user text after it may be a side
        # question a harness asks about the conversation (Gemini CLI's next-speaker and loop checks),
        # which its next request goes on without
        self.settled = 0
        self.answered_at: float | None = None  # time.monotonic() of the last answer through the proxy
        self.usage: dict[str, Any] | None = None  # that answer's usage, for the call it made
        self.answered_by: str | None = None  # the model that answer names (else the request's)
        self.api: str | None = None  # the API of the conversation's requests (how its answers read)
        # that answer as it came (decoded), recorded by the request after it or, when none follows, read
        # at the conversation's close (the model's closing words, and the call that made them): most
        # are followed by a request, so an answer is read only when it is the last
        self.answer: Any = None
        self.closed = False  # its last answer recorded: no request continues it
        self.fed = False  # a request fed it: model turns after that were answered through this proxy
        self.lock = threading.Lock()
        # every tool result fed, by position: its text's digest.  A result is told by its call id alone
        # (harnesses trim their own old outputs), so a run of the same task with the same call ids
        # would otherwise continue this one: the results of the latest feed must keep their text while
        # they are the request's newest (no harness trims those), and among mirrors that continue a
        # request the one whose results agree with it most is taken (agreement)
        self.digests: dict[int, str] = {}
        self.fresh: tuple[int, ...] = ()

    def feed(self, req: _Request) -> None:
        """Record the request's events after those already mirrored."""
        start = len(self.prints)
        new = req.events[start:]
        asked = sum(e.kind == "assistant" for e in new)
        fresh = tuple(start + i for i, e in enumerate(new) if e.kind == "tool")
        if fresh:
            self.fresh = fresh
            self.digests.update((i, req.digest(i)) for i in fresh)
        if asked:  # the request holds the answer as the agent kept it: that is the one recorded
            self.answer = None
        # the first request's model turns were answered before this mirror was made (a proxy restarted,
        # a conversation dropped from memory and met again): what their calls were shown is not known
        seen, self.fed = self.fed, True
        for i, e in enumerate(new, start):
            key = None
            if e.kind == "assistant":
                self.turn(e, answered=asked == 1, seen=seen)
            elif e.kind == "tool":
                waiting = self.pending.get(e.call_id)
                if waiting:  # a reused id answers its newest call (an older one left unanswered stays so)
                    key = self.orch.add_tool_result(waiting.pop(), e.text, is_error=e.is_error)
            elif e.text:
                self.orch.add_user(e.text)
            self.prints.append(req.prints[i])
            self.keys.append(key)
            if e.kind in ("assistant", "tool"):
                self.settled = len(self.prints)

    def turn(self, e: Event, answered: bool, seen: bool = True) -> None:
        """Record a model turn; ``answered``: it is the answer the proxy saw last (its usage and the
        model that gave it go with it); ``seen=False``: one answered before the mirror was made."""
        usage, by = (self.usage, self.answered_by) if answered else (None, None)
        self.usage = self.answered_by = None
        calls = self.orch.record_assistant(
            e.text,
            e.calls,
            reasoning=e.reasoning or None,
            usage=usage,
            answered_at=self.answered_at,
            model=by,
            seen=seen,
        )
        ours = [c for c in e.calls if c.get("name") != MANAGE_CONTEXT_NAME]  # it answers those itself
        for asked_call, made in zip(ours, calls, strict=False):
            self.pending.setdefault(asked_call.get("id"), deque()).append(made["id"])

    def continues(self, req: _Request) -> int:
        """How much of ``req`` this conversation has seen: all of its own prints (a continuation), its
        settled ones when the request goes on from there with other user text or ends there (it left
        a side question out), else 0 (another conversation, another run the agent named otherwise, or
        another run whose newest tool results differ from those this one was fed)."""
        if self.closed or (req.session and self.session and req.session != self.session):
            return 0
        prints, n = req.prints, len(self.prints)
        if 0 < n <= len(prints) and self.prints == prints[:n]:
            return n if self._same_fresh(req, n) else 0
        k = self.settled
        if 0 < k < n and k <= len(prints) and self.prints[:k] == prints[:k]:
            return k if self._same_fresh(req, k) else 0
        return 0

    def _same_fresh(self, req: _Request, upto: int) -> bool:
        # only results that are still the request's newest (no model turn after them): an older one
        # is the harness's to trim or mask, and a twin run differs at the first request it sends them
        return all(req.digest(i) == self.digests[i] for i in self.fresh if req.last_turn < i < upto)

    def agreement(self, req: _Request, upto: int) -> int:
        """How many of the results this mirror was fed, before ``upto``, have the text ``req`` has
        there."""
        # a copy: another request may be feeding this mirror (under its own lock) meanwhile
        return sum(req.digest(i) == d for i, d in list(self.digests.items()) if i < upto)


@dataclass
class Rewrite:
    """What the proxy did to one request: the conversation, the outputs it sent hidden, and why it left
    the request as it was (``passed``: an unserved family, unreadable messages, ...)."""

    body: Any
    conversation: str | None = None
    hidden: list[str] = field(default_factory=list)
    outputs: int = 0
    passed: str | None = None
    decision_ms: float = 0.0


class ContextProxy:
    """Mirrors conversations and rewrites requests (no HTTP here; see :func:`make_proxy_server`).

    Args:
        policy: anything with ``act(obs, info)``; each conversation gets a shallow copy (its own
            per-run state, the same network).
        prices: the user's prices by model name (``pricing.load_price_table``): a model of a family the
            policy does not serve is managed when priced here.
        max_conversations: conversations mirrored at once (least recently used dropped first).
        log_dir: when given, each conversation is written there after every request as the JSONL log
            ``dtoc-rl ingest`` reads (its visibility, the calls' usage as the API reported it), on a
            thread of its own while the model answers (:meth:`flush_logs` waits for it).
        orchestrator: extra keyword arguments of every Orchestrator (``max_items``, ``cache_ttl``...).
        families: the model families the policy manages (default: every known one; a checkpoint trained
            on one family, that one, as ``dtoc-rl serve`` serves it); others pass through unless priced.
        warn, log: where warnings and a line per managed request go (default: warnings to stderr,
            no request lines).
    """

    def __init__(
        self,
        policy: Any,
        *,
        prices: Mapping[str, Prices] | None = None,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        log_dir: str | Path | None = None,
        orchestrator: Mapping[str, Any] | None = None,
        families: set[str] | frozenset[str] | None = None,
        warn: Callable[[str], None] | None = None,
        log: Callable[[str], None] | None = None,
    ):
        check_policy(policy, live=True)
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be >= 1, got {max_conversations}")
        self.policy = policy
        self.families = frozenset(families if families is not None else _SERVED)
        self.prices = dict(prices or {})
        self.max_conversations = int(max_conversations)
        # the logs hold every tool output the agent read (a .env it printed too): a new folder is private,
        # and each log is written for its owner alone (LogWriter) whatever the folder's mode
        self.log_dir = writable_folder(log_dir, "log folder", private=True) if log_dir is not None else None
        self._unlogged = FailedOnce(lambda message: self.warn(message), "conversation")
        self._logs = LogWriter(self._unlogged) if self.log_dir is not None else None
        self.orch_kwargs = dict(orchestrator or {})
        self.warn = warn or (lambda msg: print(f"dtoc-rl proxy: warning: {msg}", file=sys.stderr))
        said = others_write_warning(self.log_dir) if self.log_dir is not None else None
        if said:  # reading a log takes its own mode; writing one in takes only the folder's
            self.warn(said)
        self.log = log
        self.mirrors: OrderedDict[str, _Mirror] = OrderedDict()
        self._evicted: list[_Mirror] = []  # dropped from the table, their last answers not yet recorded
        self._lock = threading.Lock()  # the mirrors' table
        self._decide = threading.Lock()  # one decision at a time: policies keep inference buffers
        self._made = 0
        self.started = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.requests = 0
        self.hidden_sent = 0
        #: requests passed on unmanaged because their model is not served, and the models said so
        self.unmanaged = 0
        self._unserved: set[str] = set()

    # -- requests ------------------------------------------------------------------------
    def rewrite(
        self,
        api: str,
        body: Any,
        model: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> Rewrite:
        """``body`` (a decoded request of ``api``: "openai", "responses", "anthropic" or "gemini") with
        the outputs the policy hides replaced by placeholders; the conversation it used is named in the
        result, for :meth:`answered`.  ``model``: the model a request names outside its body (Gemini's
        path), else the body's ``model``.  ``agent``: the request's ``X-DTOC-Agent`` header, else its
        ``User-Agent``; a conversation's log names its first word as the run's source
        (``proxy:claude-cli``), so runs of several agents logged in one folder are told apart by
        ``dtoc-rl evaluate --by source``.  ``session``: the run a request's headers name
        (``X-DTOC-Session``, or an agent's own such as Claude Code's), else read from its body
        (:func:`session_of`): requests of two named runs never share a conversation, so the same task
        run twice at once is mirrored twice from its first request."""
        self.requests += 1
        listed = LISTED[api]
        if not isinstance(body, dict) or not isinstance(body.get(listed), list | str):
            return Rewrite(body, passed=f"no {listed} list")
        if api == "responses" and body.get("previous_response_id"):
            return Rewrite(body, passed="the API holds the history (previous_response_id): nothing to manage")
        if model is None:
            model = body.get("model") if isinstance(body.get("model"), str) else ""
        family = normalize_family(model)
        given = user_prices(model, family, self.prices)
        if family not in self.families and not priced_by_user(model, family, self.prices):
            why = f"model {model!r} (family {family!r}) is not served: give --prices for it"
            self.unmanaged += 1
            if model not in self._unserved and len(self._unserved) < 100:  # said once a model, bounded
                self._unserved.add(model)
                self.warn(f"requests of {why}; they are passed on unmanaged")
            return Rewrite(body, passed=why)
        try:
            events = EVENTS[api](body)
        except (ValueError, TypeError, AttributeError, RecursionError) as e:
            self.warn(f"request passed on unchanged: its {listed} were not read ({type(e).__name__}: {e})")
            return Rewrite(body, passed=f"messages not read: {e}")
        if not events:
            return Rewrite(body, passed=f"no {listed}")
        req = _Request(events, session_of(api, body, session))
        mirror = self._mirror(req, model, given, agent)  # returned locked: matched and fed at once
        try:
            mirror.api = api
            mirror.feed(req)  # the answers it brings were the previous request's model's
            mirror.orch.use_model(model, given)  # this request's: a conversation may change models
            t0 = time.perf_counter()
            with self._decide:
                mirror.orch.decide()
            ms = (time.perf_counter() - t0) * 1000
            hidden = set(mirror.orch.store.hidden_keys())
            out = self._patch(api, body, events, mirror, hidden)
            if self.log_dir is not None:
                self._log(mirror, in_flight=True)
        except Exception as e:  # a mirror that cannot follow is dropped; the agent goes on
            with self._lock:
                self.mirrors.pop(mirror.name, None)
            self.warn(f"conversation {mirror.name}: not managed this call ({type(e).__name__}: {e})")
            return Rewrite(body, conversation=mirror.name, passed=f"{type(e).__name__}: {e}")
        finally:
            mirror.lock.release()
            if self._evicted:
                self._close_evicted()
        sent = [k for k in mirror.keys if k is not None and k in hidden]
        outputs = sum(k is not None for k in mirror.keys)
        return Rewrite(out, conversation=mirror.name, hidden=sent, outputs=outputs, decision_ms=ms)

    def check(self) -> None:
        """Run the policy once on a sample conversation of a family it manages, keeping nothing of it:
        a checkpoint that cannot decide fails here, not at an agent's first call (RuntimeError)."""

        def fail(message: str) -> None:
            raise RuntimeError(message)

        # a model of no family: served by the probe whatever families this proxy serves (openai-o's
        # name, for one, is no model name)
        model = "dtoc-proxy-check"
        probe = ContextProxy(self.policy, prices=self.prices, families=self.families | {"other"},
                             orchestrator=self.orch_kwargs, warn=fail)  # fmt: skip
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
        for k in range(3):
            call = {
                "id": f"c{k}",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
            messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"c{k}", "content": "a.py\n" * 200}]  # fmt: skip
        with warnings.catch_warnings():  # a made-up model name: its price warning says nothing
            warnings.simplefilter("ignore")
            rw = probe.rewrite("openai", {"model": model, "messages": messages})
        if rw.passed is not None:
            raise RuntimeError(rw.passed)

    def report(self, rw: Rewrite, sent: bool) -> None:
        """Count and log one request's rewrite once it was ``sent`` upstream as rewritten (False: it
        went as it came)."""
        if sent:
            self.hidden_sent += len(rw.hidden)
        if self.log is None:
            return
        if rw.passed is not None:
            self.log(f"passed on unmanaged: {rw.passed}")
        else:  # managed, whether or not anything was hidden this time
            self.log(f"{rw.conversation}: {rw.outputs} outputs, {len(rw.hidden) if sent else 0} sent hidden, "
                     f"decided in {rw.decision_ms:.1f} ms")  # fmt: skip

    def answered(self, conversation: str | None, answer: Any = None) -> None:
        """The API answered a request of ``conversation``: the time (the cache's age at the next call)
        and, from a decoded answer, its usage and the model that answered (kept with the call it
        made)."""
        if conversation is None:
            return
        with self._lock:
            mirror = self.mirrors.get(conversation)
        if mirror is None:
            return
        with mirror.lock:
            mirror.answered_at = time.monotonic()
            mirror.answer = answer
            if isinstance(answer, list) and answer:  # Gemini's stream without alt=sse: a JSON list
                answer = answer[-1]  # whose last chunk counts the whole answer
            usage = answer.get("usage") or answer.get("usageMetadata") if isinstance(answer, dict) else None
            mirror.usage = usage if isinstance(usage, dict) else None
            by = answer.get("model") or answer.get("modelVersion") if isinstance(answer, dict) else None
            mirror.answered_by = by if isinstance(by, str) and by else None

    def close_conversations(self) -> int:
        """Record each conversation's last answer, which no request followed (the model's closing
        words, and the usage of the call that made them), and log it: what a stopping proxy does
        (the server's ``shutdown()``/``server_close()``), and an evicted conversation.  A closed
        conversation is not continued: a request after it starts a new one.  Returns how many answers
        were recorded."""
        with self._lock:
            mirrors = list(self.mirrors.values())
        closed = 0
        for mirror in mirrors:
            with mirror.lock:
                closed += self._close(mirror)
        return closed

    def _close(self, mirror: _Mirror) -> bool:
        # with the mirror's lock held, not the table's (a log that fails is reported under it)
        turn = answer_event(mirror.api, mirror.answer) if not mirror.closed and mirror.api else None
        if turn is None:
            return False
        mirror.closed = True
        try:
            mirror.turn(turn, answered=True)
        except Exception as e:  # an answer the mirror cannot record costs its log's last turn only
            self.warn(f"conversation {mirror.name}: its last answer not logged ({type(e).__name__}: {e})")
            return False
        finally:
            mirror.answer = None
        if self.log_dir is not None:
            self._log(mirror)
        return True

    # -- internals -----------------------------------------------------------------------
    def _mirror(self, req: _Request, model: str, given: Prices | None, agent: str | None = None) -> _Mirror:
        """The conversation ``req`` continues (of the mirrors whose messages start it, the one
        whose results' texts agree with the request most, then the longest), or a new one; returned
        with its lock held, so that no other request feeds it between the match and this request's
        feed (two requests branching from one history would take each other's keys)."""
        for _ in range(100):
            with self._lock:
                seen = {m.name: m.continues(req) for m in self.mirrors.values()}
                found = [m for m in self.mirrors.values() if seen[m.name]]
                # of several, the one whose results agree with the request most (a twin run of the
                # same call ids agrees with its own), then the longest; one needs no texts read
                best = (
                    found[0]
                    if len(found) == 1
                    else max(
                        found, key=lambda m: (m.agreement(req, seen[m.name]), seen[m.name]), default=None
                    )
                )
                if best is None:  # none continues it
                    return self._new_mirror(req, model, given, agent)
                self.mirrors.move_to_end(best.name)
            best.lock.acquire()
            if best.continues(req) == seen[best.name] and self.mirrors.get(best.name) is best:
                best.session = best.session or req.session
                # a side question left out: the texts it added stay in the mirror, its prints do not,
                # and its answer is not the conversation's
                if seen[best.name] < len(best.prints):
                    best.answer = None
                del best.prints[seen[best.name] :], best.keys[seen[best.name] :]
                for i in [i for i in best.digests if i >= seen[best.name]]:
                    del best.digests[i]
                return best
            best.lock.release()  # another request fed it meanwhile: match again
        with self._lock:
            return self._new_mirror(req, model, given, agent)

    def _new_mirror(
        self, req: _Request, model: str, given: Prices | None, agent: str | None = None
    ) -> _Mirror:
        # with the table's lock held; the new mirror is returned locked
        events, prints = req.events, req.prints
        system = "\n\n".join(e.text for e in events if e.kind == "system" and e.text) or None
        first = next((e for e in events if e.kind == "user"), None)
        self._made += 1
        # this proxy's start and a count: names never meet those of an earlier run in --log-dir
        name = f"{self.started}-c{self._made:05d}-{hashlib.sha1(prints[0].encode()).hexdigest()[:8]}"
        orch = Orchestrator(
            copy.copy(self.policy),
            mode="policy",
            query=first.text if first is not None else None,
            system=system,
            model=model,
            prices=given,
            task_id=name,
            log_source=agent_source(agent),
            **self.orch_kwargs,
        )
        mirror = _Mirror(orch, name, req.session)
        # the system prompt and the task are the orchestrator's own: mark them as seen
        head = 0
        while head < len(events) and events[head].kind == "system":
            head += 1
        if first is not None and head < len(events) and events[head] is first:
            head += 1
        mirror.prints = prints[:head]
        mirror.keys = [None] * head
        mirror.lock.acquire()
        self.mirrors[name] = mirror
        while len(self.mirrors) > self.max_conversations:
            self._evicted.append(self.mirrors.popitem(last=False)[1])  # closed once this lock is let go
        return mirror

    def _close_evicted(self) -> None:
        with self._lock:
            evicted, self._evicted = self._evicted, []
        for old in evicted:
            if old.lock.acquire(blocking=False):  # one a request is using is not closed under it: forgotten
                try:
                    self._close(old)
                    old.orch.close()
                finally:
                    old.lock.release()

    def _patch(self, api: str, body: dict, events: list[Event], mirror: _Mirror, hidden: set[str]) -> dict:
        # the body itself when nothing is hidden: then the request goes on byte for byte as it came
        if not hidden:
            return body
        listed = LISTED[api]
        messages = list(body[listed])
        copied: set[int] = set()
        for e, key in zip(events, mirror.keys, strict=False):
            if key is None or key not in hidden or e.where is None:
                continue
            # the Orchestrator's own placeholder, with policy mode's note (the model has no manage_context)
            text = mirror.orch.store.get(key).placeholder(POLICY_NOTE)
            i, j = e.where
            if api == "anthropic":
                if i not in copied:  # the message's blocks copied once, then each result set in them
                    messages[i] = {**messages[i], "content": list(messages[i]["content"])}
                messages[i]["content"][j] = {**messages[i]["content"][j], "content": text}
            elif api == "responses":
                messages[i] = {**messages[i], "output": text}
            elif (
                api == "gemini"
            ):  # a functionResponse part: its name and id kept, its response the placeholder
                if i not in copied:
                    messages[i] = {**messages[i], "parts": list(messages[i]["parts"])}
                part = messages[i]["parts"][j]
                fr_key = field_key(part, "functionResponse")  # written back in the spelling it came in
                # its parts (images, files returned with the response) go with the rest of it
                response = {k: v for k, v in part[fr_key].items() if k != "parts"}
                said = "error" if e.is_error else "output"  # a failed call's placeholder says so too
                messages[i]["parts"][j] = {**part, fr_key: {**response, "response": {said: text}}}
            else:
                messages[i] = {**messages[i], "content": text}
            copied.add(i)
        return {**body, listed: messages} if copied else body

    def rewriting(self) -> contextlib.AbstractContextManager[None]:
        """Held while a request is read, rewritten and sent upstream: logs are written outside it,
        while models answer (:class:`LogWriter`)."""
        return self._logs.busy() if self._logs is not None else contextlib.nullcontext()

    @property
    def logs_written(self) -> int:
        """Conversation logs written so far (a row a newer one replaced before it was written is not
        counted)."""
        return self._logs.written if self._logs is not None else 0

    def flush_logs(self, timeout: float | None = None) -> bool:
        """Wait until every conversation's log holds its latest request (logs are written on a thread
        of their own, while the model answers); False if ``timeout`` ran out first."""
        return self._logs.flush(timeout) if self._logs is not None else True

    def _log(self, mirror: _Mirror, in_flight: bool = False) -> None:
        # a log that cannot be written costs the log, never the hiding
        assert self.log_dir is not None and self._logs is not None
        if mirror.name in self._unlogged:
            return
        # The row now, under the request's hold of the mirror (the mirror changes with the next request),
        # written off the request's path.  Made here, unlike a service session's row: a conversation is
        # what the agent sends each request, which the agent's own context management bounds, so its row
        # costs about what reading the request did.
        try:
            self._logs.put(self.log_dir / f"{mirror.name}.jsonl", mirror.orch.log_row(in_flight=in_flight))
        except ValueError as e:
            self._unlogged(Path(f"{mirror.name}.jsonl"), e)


# ---------------------------------------------------------------------------------------- HTTP
#: The proxy's own endpoint (a path no API uses: an upstream's /health, e.g. vLLM's, is passed on).
HEALTH_PATH = "/dtoc-proxy/health"
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


class _BadBody(ValueError):
    """A request body cut short or framed wrongly."""


class _TooLarge(_BadBody):
    """A request body over :data:`MAX_BODY_BYTES`."""

    def __init__(self, size: int):
        super().__init__(f"a request body of {size} bytes, over the proxy's limit of {MAX_BODY_BYTES}")


#: The largest model-call body passed on (other requests, a file upload, go whatever their size).  A
#: model call with a long context is a few megabytes, with images tens; one far larger is a mistake or
#: an attack, and would be read into memory whole to be rewritten.
MAX_BODY_BYTES = 256 * 2**20
#: Seconds a client connection may stay silent (mid-request, or idle between an agent's calls) before
#: it is closed: a stalled or hostile client holds no thread for ever, and an agent's HTTP client opens
#: a new connection for its next call.
CLIENT_IDLE_S = 120.0


#: A Gemini model call's path: the model, then the method (AI Studio's /v1beta/models/M:..., Vertex's
#: /v1/projects/P/locations/L/publishers/google/models/M:...).
_GEMINI_CALL = re.compile(r"/models/([^/:]+):(?:stream)?generateContent$", re.IGNORECASE)


def _route(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/")


def _gemini_model(path: str) -> str | None:
    """The model a Gemini model call's path names, or None for any other path."""
    named = _GEMINI_CALL.search(_route(path))
    return unquote(named.group(1)) if named else None


def _api_of(method: str, path: str) -> str | None:
    route = _route(path)
    if method != "POST":
        return None
    if _gemini_model(path) is not None:
        return "gemini"
    if route.endswith("/chat/completions"):
        return "openai"
    if route.endswith("/responses"):
        return "responses"
    if route.endswith("/messages"):  # not .../messages/count_tokens: no model call
        return "anthropic"
    return None


def check_upstream(url: str) -> None:
    """ValueError unless ``url`` is an http:// or https:// URL with a host (what ``--upstream`` takes)."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:  # never echoed: it holds a secret
        raise ValueError(
            "upstream must not carry credentials (user:password@): the agent's own API key header is passed "
            "on as it came, and a forward proxy's credentials go in HTTPS_PROXY"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"upstream must be an http:// or https:// URL with a host, got {url!r}")
    try:
        parts.port  # noqa: B018 - read for its check: a port that is no number, or out of range
    except ValueError:
        raise ValueError(f"upstream {url!r}: its port is no port number (1-65535)") from None


def versioned_upstream(url: str) -> str | None:
    """What to say of an upstream URL that ends in its API version (``https://openrouter.ai/api/v1``):
    the proxy adds the path the agent sends after it, so the API would get ``/api/v1/v1/...``; None for
    the usual form, the API's origin (and any prefix before its version)."""
    path = urlsplit(url).path.rstrip("/")
    version = path.rsplit("/", 1)[-1]
    if version not in ("v1", "v1beta"):
        return None
    origin = url.rstrip("/")[: -len(version) - 1]
    return (
        f"--upstream {url} ends in its API version: the proxy adds the path the agent sends (/v1/...), "
        f"so the API would get {path}/v1/...; the usual form is {origin}"
    )


class _Upstream:
    """Where requests go: the URL's parts, and connections to it (through ``HTTPS_PROXY`` /
    ``HTTP_PROXY`` when the environment names one for that host)."""

    def __init__(self, url: str, timeout_s: float):
        check_upstream(url)
        parts = urlsplit(url)
        self.url = url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.netloc = parts.netloc
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        via = urllib.request.getproxies().get(parts.scheme)
        if via is not None and "://" not in via:
            via = "http://" + via  # "proxy.corp:3128", as curl and requests read it
        via_parts = None if via is None or urllib.request.proxy_bypass(self.host) else urlsplit(via)
        self.via = via_parts if via_parts is not None and via_parts.hostname else None
        self.proxy_auth: str | None = None
        if self.via is not None and self.via.username is not None:
            pair = f"{unquote(self.via.username)}:{unquote(self.via.password or '')}"
            self.proxy_auth = "Basic " + base64.b64encode(pair.encode()).decode()

    def target(self, path: str) -> str:
        """What the request line names: the path, or the whole URL when a forward proxy carries plain
        HTTP (RFC 9112, section 3.2.2)."""
        path = self.prefix + path
        return f"http://{self.netloc}{path}" if self.via is not None and not self.https else path

    def connect(self) -> Any:
        if self.via is not None:  # TLS, for an https upstream, only inside the tunnel the proxy opens
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = cls(self.via.hostname, self.via.port or 80, timeout=self.timeout_s)
            if self.https:
                auth = {"Proxy-Authorization": self.proxy_auth} if self.proxy_auth else None
                conn.set_tunnel(self.host, self.port, headers=auth)
            return conn
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # an answer goes out in several writes: with Nagle's algorithm a kept-alive client's delayed ACK
    # held each one back about 40 ms
    disable_nagle_algorithm = True
    server: _ProxyServer
    _conn: Any = None  # the upstream connection this client connection reuses

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == HEALTH_PATH:
            p = self.server.proxy
            health = {"status": "ok", "upstream": self.server.upstream.url, "requests": p.requests}
            health.update(conversations=len(p.mirrors), hidden_sent=p.hidden_sent, unmanaged=p.unmanaged)
            self._json(200, health)
            return
        self._relay()

    def finish(self) -> None:
        if self._conn is not None:
            self._conn.close()
        super().finish()

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"error": {"type": kind, "message": message}})

    def _drop_upstream(self) -> None:
        """Close the kept upstream connection: it is not used again."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self, api: str | None) -> bytes | None:
        """The request's body (None: it has none); a body cut short or framed wrongly raises
        :class:`_BadBody`: nothing of it may go upstream as if whole; a model call's (``api``: the
        request's, :func:`_api_of`) over :data:`MAX_BODY_BYTES` raises :class:`_TooLarge`."""
        cap = MAX_BODY_BYTES if api is not None else 2**62
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts, total = [], 0
            while True:
                token = self.rfile.readline().split(b";", 1)[0].strip()
                if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", token):
                    raise _BadBody("a chunked body cut short or framed wrongly")
                size = int(token, 16)
                if size == 0:
                    break
                total += size
                if total > cap:
                    raise _TooLarge(total)
                part = self.rfile.read(size)
                if len(part) != size or self.rfile.readline() not in (b"\r\n", b"\n"):
                    raise _BadBody("a chunked body cut short")
                parts.append(part)
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        lengths = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not lengths:
            return None
        if len(lengths) > 1:  # which one frames the body is ambiguous (RFC 9112, section 6.3)
            raise _BadBody(f"Content-Length given {len(lengths)} different values")
        (length,) = lengths
        if not re.fullmatch(r"[0-9]{1,18}", length):
            raise _BadBody(f"Content-Length {length!r} is no length")
        if int(length) > cap:
            raise _TooLarge(int(length))
        data = self.rfile.read(int(length)) if int(length) > 0 else b""
        if len(data) != int(length):
            raise _BadBody(f"the body ended after {len(data)} of its {int(length)} bytes")
        return data

    def _rewrite(self, api: str | None, raw: bytes | None) -> tuple[bytes | None, str | None]:
        """The body to send upstream and the managed conversation it belongs to (None: not managed);
        ``api``: the request's (:func:`_api_of`)."""
        proxy = self.server.proxy
        if api is None or not raw:
            return raw, None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer of 4,300+ digits
            return raw, None  # the API answers it with its own error
        sent = False
        rw = Rewrite(body, passed="not read")
        try:
            model = _gemini_model(self.path) if api == "gemini" else None
            named = (self.headers.get(h) for h in (SESSION_HEADER, *AGENT_SESSION_HEADERS))
            rw = proxy.rewrite(
                api,
                body,
                model,
                self.headers.get(AGENT_HEADER) or self.headers.get("User-Agent"),
                next((v for v in named if v), None),
            )
            if rw.body is not body:
                try:
                    raw = json.dumps(rw.body, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate no UTF-8 holds: escaped, as JSON allows
                    raw = json.dumps(rw.body).encode("ascii")
                sent = True
        except Exception as e:  # never the agent's failure: its request goes on as it came
            proxy.warn(f"request passed on unchanged ({type(e).__name__}: {e})")
            return raw, None
        proxy.report(rw, sent)
        return raw, rw.conversation if rw.passed is None else None

    def _relay(self) -> None:
        """Pass the request on (every method: do_POST and the others are this) and its answer back."""
        # logs being written pause while this request is read, rewritten and sent: encoding holds the
        # interpreter lock (LogWriter)
        with contextlib.ExitStack() as sending:
            self._pass_on(sending)

    def _pass_on(self, sending: contextlib.ExitStack) -> None:
        sending.enter_context(self.server.proxy.rewriting())
        method = self.command
        # an absolute URL, or a path climbing out of the upstream's prefix: no API's request
        why = "the request target must be a path, not a URL" if not self.path.startswith("/") else None
        if why is None and any(seg in (".", "..") for seg in unquote(self.path.split("?", 1)[0]).split("/")):
            why = "the request path may not hold . or .. segments"
        if why is not None:
            self.close_connection = True
            return self._error(400, "dtoc_proxy_request", why)
        api = _api_of(method, self.path)  # a model call's API (its body capped and rewritten), else None
        try:
            raw = self._body(api)
        except _BadBody as e:
            self.close_connection = True
            return self._error(413 if isinstance(e, _TooLarge) else 400, "dtoc_proxy_request", str(e))
        raw, conversation = self._rewrite(api, raw)
        up = self.server.upstream
        # every header but the hop-by-hop ones and those Connection names (RFC 9110, section 7.6.1),
        # repeated ones kept (anthropic-beta may come twice)
        drop = _NOT_SENT | _connection_named(self.headers.get_all("Connection"))
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in drop]
        path = self.path  # as the client sent it, its bytes read as latin-1
        if not path.isascii() or any(ord(c) < 33 or ord(c) == 127 for c in path):
            path = quote(path.encode("latin-1", "replace"), safe="/?&=:@!$'()*+,;~%#[]")
        resp = None
        for attempt in (0, 1):
            if self._conn is not None and self._conn.sock is not None:
                # an idle kept connection has nothing to read unless the upstream closed it meanwhile
                # (servers close idle ones after seconds; a tool run takes longer): not used again
                if select.select([self._conn.sock], [], [], 0)[0]:
                    self._drop_upstream()
            reused = self._conn is not None
            if self._conn is None:
                self._conn = up.connect()
            sent = False
            try:
                self._conn.putrequest(method, up.target(path), skip_host=True, skip_accept_encoding=True)
                self._conn.putheader("Host", up.netloc)
                if up.proxy_auth and not up.https:  # through a forward proxy, plain HTTP: on every request
                    self._conn.putheader("Proxy-Authorization", up.proxy_auth)
                self._conn.putheader("Accept-Encoding", "identity")  # an answer whose usage can be read
                for k, v in headers:
                    self._conn.putheader(k, v)
                if raw is not None:
                    self._conn.putheader("Content-Length", str(len(raw)))
                try:
                    self._conn.endheaders(raw)
                except OSError:
                    resp = self._early_answer()  # an upstream that answered (413) before it read it all
                    if resp is None:
                        raise
                    resp.dtoc_interim = True  # the connection is broken whatever the answer says
                sent = True
                sending.close()  # the model answers now: logs may be written meanwhile
                resp = resp or self._final(self._conn.getresponse(), method)
                break
            except (OSError, http.client.HTTPException) as e:
                self._drop_upstream()
                stale = (ConnectionError, http.client.RemoteDisconnected, http.client.ImproperConnectionState)
                # once more on a new connection when the kept one had been closed: not a model call
                # already sent, which the upstream may be answering (the agent's SDK retries a 502 itself)
                if reused and attempt == 0 and isinstance(e, stale) and (not sent or method in _IDEMPOTENT):
                    continue
                if isinstance(e, TimeoutError):
                    why = f"no answer from upstream {up.url} within {up.timeout_s:g} s"
                    return self._error(504, "dtoc_proxy_upstream", why)
                why = f"upstream {up.url} not reached: {e}"
                return self._error(502, "dtoc_proxy_upstream", why)
        assert resp is not None
        try:
            self._answer(method, resp, conversation, api)
        finally:
            if resp.will_close or getattr(resp, "dtoc_interim", False):
                self._drop_upstream()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _relay

    def _early_answer(self) -> Any:
        if self._conn.sock is None:  # never connected: nothing can have answered
            return None
        try:
            return self._conn.getresponse()
        except (OSError, http.client.HTTPException):
            return None

    def _final(self, resp: Any, method: str) -> Any:
        """The final answer after any interim ones (103 Early Hints, ...; http.client passes over 100
        only): read from the same socket, and the connection not kept after it."""
        while 100 < resp.status < 200 and resp.status != 101:
            fp, resp.fp = resp.fp, None  # what the interim answer's reader already holds of the next one
            resp = self._conn.response_class(self._conn.sock, method=method)
            resp.fp.close()
            resp.fp = fp
            resp.begin()
            resp.dtoc_interim = True
        return resp

    def _start_answer(self, resp: Any, headers: list[tuple[str, str]]) -> None:
        self.send_response_only(resp.status, resp.reason)
        for k, v in headers:
            self.send_header(k, v)

    def _answer(self, method: str, resp: Any, conversation: str | None, api: str | None = None) -> None:
        proxy = self.server.proxy
        bodiless = method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        # by how the answer came, not by its header (an upstream may send a length beside chunks)
        streamed = (resp.chunked or resp.length is None) and not bodiless
        drop = _HOP | _connection_named([v for k, v in resp.getheaders() if k.lower() == "connection"])
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in drop]
        if not streamed and not bodiless and conversation is None:
            # an answer of known length the proxy need not read (a download): passed on as it arrives
            self._start_answer(resp, headers)
            self.send_header("Content-Length", str(resp.length))
            self.end_headers()
            try:
                while chunk := resp.read(65536):  # read(n), not read1: it frees the connection at the end
                    self.wfile.write(chunk)
                cut = bool(resp.length)  # bytes announced and never sent (read(n) ends quietly on them)
            except (OSError, http.client.HTTPException):
                cut = True
            if cut:  # the client sees fewer bytes than announced, and the connection end
                self.close_connection = True
                self._drop_upstream()
            return
        if not streamed:
            try:
                data = resp.read()  # b"" for HEAD: read all the same, so the connection is free again
                if bodiless:
                    data = b""
            except (OSError, http.client.HTTPException) as e:
                self._drop_upstream()
                why = f"upstream answer cut short: {type(e).__name__}"
                return self._error(502, "dtoc_proxy_upstream", why)
            # recorded before the agent has the answer: its next request must find the usage in place
            if "text/event-stream" in (resp.getheader("Content-Type") or ""):  # events sent with a length
                sniff = StreamAnswer(api)
                sniff.feed(data + b"\n")
                proxy.answered(conversation, sniff.answer())
            else:
                proxy.answered(conversation, _decoded(data))
            self._start_answer(resp, headers)
            if method == "HEAD" or resp.status == 304:  # the length of the answer not sent
                length = resp.getheader("Content-Length")
            else:  # none on a 204 (RFC 9110, section 8.6)
                length = None if resp.status == 204 or resp.status < 200 else str(len(data))
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.write(data)
            return
        # an answer of unknown length (server-sent events, NDJSON): passed on as it arrives
        old = self.request_version == "HTTP/1.0"
        self._start_answer(resp, headers)
        if old:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = "text/event-stream" in (resp.getheader("Content-Type") or "")
        sniff = StreamAnswer(api if conversation is not None else None)
        kept: list[bytes] = []  # a JSON answer sent without a length, read whole for its usage at the end
        size = 0
        try:
            while chunk := resp.read1(65536):
                if conversation is not None:
                    if events:
                        sniff.feed(chunk)
                        if sniff.done:  # recorded before the agent reads the answer's end
                            proxy.answered(conversation, sniff.answer())
                            conversation = None
                    elif size + len(chunk) <= _MAX_KEPT:
                        kept.append(chunk)
                        size += len(chunk)
                self.wfile.write(chunk if old else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # cut short upstream: the client sees it end without its last chunk
            self._drop_upstream()
            return
        if conversation is not None:
            proxy.answered(conversation, sniff.answer() if events else _decoded(b"".join(kept)))
        if not old:
            self.wfile.write(b"0\r\n\r\n")


def _connection_named(values: list[str] | None) -> frozenset[str]:
    """The header names a ``Connection`` header lists (hop-by-hop for this connection only)."""
    return frozenset(t.strip().lower() for v in values or () for t in v.split(",") if t.strip())


# An answer of unknown length kept to read its usage, at the most (a chat answer is some kilobytes).
_MAX_KEPT = 16 * 2**20


def _decoded(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer of 4,300+ digits
        return None


class _ProxyServer(StopsCleanly, ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a burst of an agent fleet's connections waits in the kernel, not refused

    def __init__(self, addr: tuple[str, int], proxy: ContextProxy, upstream: _Upstream):
        handler = type("_TimedHandler", (_ProxyHandler,), {"timeout": CLIENT_IDLE_S})
        super().__init__(addr, handler)
        self.proxy = proxy
        self.upstream = upstream

    def _write_logs(self) -> None:
        self.proxy.close_conversations()  # their closing answers, which no request follows
        if not self.proxy.flush_logs(timeout=STOP_WAIT_S):
            self.proxy.warn(f"logs not all written within {STOP_WAIT_S:g} s of stopping: still writing")

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if not isinstance(err, ConnectionError | TimeoutError):
            print(f"dtoc-rl proxy: warning: {type(err).__name__}: {err}", file=sys.stderr)


def make_proxy_server(
    proxy: ContextProxy,
    upstream: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PROXY_PORT,
    *,
    timeout_s: float = 600.0,
) -> _ProxyServer:
    """An HTTP server (not started: ``serve_forever()``) that rewrites the requests it passes to
    ``upstream`` (``https://api.openai.com``, ``https://api.anthropic.com``: the request's path is
    appended as it came, after the URL's own path if it has one)."""
    if not (0 < timeout_s <= 7 * 86400):
        raise ValueError(f"timeout_s must be > 0 and at most a week, got {timeout_s!r}")
    return _ProxyServer((host, port), proxy, _Upstream(upstream, timeout_s))
