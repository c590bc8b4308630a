"""Loopback fakes of the OpenAI chat-completions and Anthropic messages endpoints.

Stdlib only (``http.server`` in a daemon thread on 127.0.0.1, a free port).
Each server records every request (``server.requests``: path, headers, parsed
JSON body) and answers according to a *behaviour*:

* ``"tool"``       - a manage_context tool call with ``server.answer`` as arguments
  (OpenAI: ``tool_calls`` with a JSON-string ``arguments``; Anthropic: a ``tool_use`` block)
* ``"text"``       - a plain text answer, ``server.text``
* ``"bad_args"``   - a manage_context call whose arguments are not JSON (OpenAI) /
  not an object (Anthropic)
* ``"other_tool"`` - a call to a different tool
* ``"garbage"``    - HTTP 200 with a non-JSON body
* ``"wrong_shape"``- HTTP 200 with JSON that is not a chat answer
* ``"500"`` / ``"429"`` / ``"400"`` / any other 4xx/5xx - that status with an error body and
  ``server.error_headers`` (default ``retry-after-ms: 1``, so that the SDKs' retries are quick in
  tests; ``{"retry-after": "2"}`` to test that a wait is honoured)
* ``"400_tool_choice"`` - HTTP 400 complaining about ``tool_choice``
* ``"hang"``       - never answers (until ``hang_seconds`` or the server stops)

``behaviour`` may be a list, consumed one per request (the last one repeats);
or a callable ``(request) -> behaviour``.  ``answer`` may be a callable
``(request) -> dict``.  Use as a context manager::

    with FakeOpenAIServer(answer={"disable": ["t0001"]}) as srv:
        backend = OpenAIBackend("fake-model", base_url=srv.url, api_key="x")

Run one standalone (e.g. for a subprocess-based test)::

    python -m tests.policies.fake_servers openai --behaviour tool --answer '{"disable": ["t0001"]}'

prints its base URL on the first line of stdout, then serves until killed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeAnthropicServer", "FakeLLMServer", "FakeOpenAIServer"]

Behaviour = str | list[str] | Callable[[dict[str, Any]], str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def handle_error(self, request, client_address):  # a client that timed out and left: not our problem
        pass


class FakeLLMServer:
    """Base class; see the module docstring.  ``flavour`` is ``"openai"`` or ``"anthropic"``."""

    flavour = ""

    def __init__(
        self,
        answer: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        *,
        behaviour: Behaviour = "tool",
        text: str = "I will not change anything.",
        hang_seconds: float = 30.0,
        model: str = "fake-model",
        error_headers: dict[str, str] | None = None,
    ):
        self.answer = answer if answer is not None else {"enable": [], "disable": []}
        self.behaviour = behaviour
        self.text = text
        self.hang_seconds = hang_seconds
        self.model = model
        self.error_headers = {"retry-after-ms": "1"} if error_headers is None else dict(error_headers)
        self.requests: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                fake._handle(self)

            def do_GET(self):
                self._send(404, {"error": {"message": "not found"}})

            def _send(
                self, status: int, body: Any, content_type: str = "application/json", headers=None
            ) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), daemon=True, name=type(self).__name__
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The base URL to give the SDK (OpenAI's includes ``/v1``; Anthropic's SDK adds it)."""
        return f"http://127.0.0.1:{self.port}" + ("/v1" if self.flavour == "openai" else "")

    @property
    def bodies(self) -> list[Any]:
        return [r["body"] for r in self.requests]

    # -- requests ----------------------------------------------------------------------------------------
    def _next_behaviour(self, req: dict[str, Any]) -> str:
        b = self.behaviour
        if callable(b):
            return b(req)
        if isinstance(b, list):
            i = min(len(self.requests) - 1, len(b) - 1)
            return b[i]
        return b

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        req = {"path": h.path, "headers": {k.lower(): v for k, v in h.headers.items()}, "body": body}
        req["time"] = time.monotonic()
        with self._lock:
            self.requests.append(req)
            behaviour = self._next_behaviour(req)
        send = h._send  # type: ignore[attr-defined]
        if behaviour == "hang":
            self._stop.wait(self.hang_seconds)
            send(200, self._reply(req, "text"))
        elif behaviour == "garbage":
            send(200, b"<html>this is not json", "text/html")
        elif behaviour == "wrong_shape":
            send(200, {"hello": "world"})
        elif behaviour.isdigit() and int(behaviour) >= 400:
            send(int(behaviour), self._error(int(behaviour)), headers=self.error_headers)
        elif behaviour == "400_tool_choice":
            send(400, self._error(400, "tool_choice of this form is not supported by this server"))
        else:
            send(200, self._reply(req, behaviour))

    def _args(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.answer(req) if callable(self.answer) else self.answer

    def _reply(self, req: dict[str, Any], behaviour: str) -> dict[str, Any]:
        raise NotImplementedError

    def _error(self, status: int, message: str = "") -> dict[str, Any]:
        raise NotImplementedError


class FakeOpenAIServer(FakeLLMServer):
    """Answers ``POST .../chat/completions`` like the OpenAI API."""

    flavour = "openai"

    def _reply(self, req: dict[str, Any], behaviour: str) -> dict[str, Any]:
        i = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "tool_calls"
        if behaviour in ("tool", "bad_args", "other_tool"):
            name = "other_tool" if behaviour == "other_tool" else "manage_context"
            args = "{not json" if behaviour == "bad_args" else json.dumps(self._args(req))
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            ]
        else:
            message["content"] = self.text
            finish = "stop"
        return {
            "id": f"chatcmpl-{i}",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    def _error(self, status: int, message: str = "") -> dict[str, Any]:
        return {
            "error": {"message": message or f"fake error {status}", "type": "server_error", "code": status}
        }


class FakeAnthropicServer(FakeLLMServer):
    """Answers ``POST /v1/messages`` like the Anthropic API."""

    flavour = "anthropic"

    def _reply(self, req: dict[str, Any], behaviour: str) -> dict[str, Any]:
        i = next(self._ids)
        if behaviour in ("tool", "bad_args", "other_tool"):
            name = "other_tool" if behaviour == "other_tool" else "manage_context"
            args: Any = ["not", "an", "object"] if behaviour == "bad_args" else self._args(req)
            content = [{"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": self.text}]
            stop = "end_turn"
        return {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }

    def _error(self, status: int, message: str = "") -> dict[str, Any]:
        kind = {429: "rate_limit_error", 408: "timeout_error", 409: "conflict_error"}.get(
            status, "invalid_request_error" if status < 500 else "api_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message or f"fake error {status}"}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("flavour", choices=["openai", "anthropic"])
    p.add_argument("--behaviour", default="tool")
    p.add_argument("--answer", default='{"enable": [], "disable": []}', help="tool arguments, JSON")
    p.add_argument("--text", default="I will not change anything.")
    a = p.parse_args(argv)
    cls = FakeOpenAIServer if a.flavour == "openai" else FakeAnthropicServer
    srv = cls(json.loads(a.answer), behaviour=a.behaviour.split(",") if "," in a.behaviour else a.behaviour)
    srv.text = a.text
    srv.start()
    print(srv.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
