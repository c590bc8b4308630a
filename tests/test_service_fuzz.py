"""The service fuzz corpus: malformed HTTP and hostile JSON over raw sockets on 127.0.0.1.

Every request of the corpus is bad in one way (nesting, lengths, methods, headers, encodings,
framing); each must get a 4xx (never a 5xx, never a hang) in the documented JSON error form
``{"error", "field", "status"}``, and the service must still answer a good request after all
of them.  Bounded: each case has a socket timeout, the server a 1 s request deadline.
"""

from __future__ import annotations

import json
import socket

import pytest

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecisionService, serve_in_thread

DEADLINE = 1.0


@pytest.fixture(scope="module")
def server():
    svc = DecisionService(make_policy("last_n:n=2"), max_body=64 * 1024, max_request_items=100)
    srv, thread = serve_in_thread(svc, "127.0.0.1", 0, request_timeout=DEADLINE)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def exchange(srv, raw: bytes, *, half_close: bool = False) -> tuple[int, dict, bytes]:
    """Send raw bytes, read one response: (status, headers, body)."""
    host, port = srv.server_address[:2]
    with socket.create_connection((host, port), timeout=DEADLINE + 5) as s:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the server may answer and close before it has read everything
            pass
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"connection closed without a response; got {data[:200]!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        if not raw.startswith(b"HEAD "):
            while len(body) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
    return status, headers, body


def req(srv, method="POST", path="/decide", body=b'{"items": []}', headers=None, *, host=None,
        token=True, version="HTTP/1.1") -> bytes:  # fmt: skip
    port = srv.server_address[1]
    h = {"Host": host if host is not None else f"127.0.0.1:{port}", "Content-Type": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {srv.token}"
    if body is not None:
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    lines = [f"{method} {path} {version}"] + [f"{k}: {v}" for k, v in h.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def nest(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def item(**extra) -> dict:
    return {"key": "a", "tokens": 1, **extra}


def body(obj) -> bytes:
    return json.dumps(obj).encode()


def corpus(srv) -> list[tuple[str, bytes, bool]]:
    """(name, raw request, half-close after sending)."""
    port = srv.server_address[1]
    big = b'{"items": [], "pad": "' + b"x" * (70 * 1024) + b'"}'
    cases = [
        # -- nesting
        ("2 KB body nested 1,000 deep", req(srv, body=b'{"items": [], "x": ' + nest(1000) + b"}"), False),
        ("nested 5,000 deep at the top", req(srv, body=nest(5000)), False),
        ("objects nested 3,000 deep", req(srv, body=b'{"a":' * 3000 + b"1" + b"}" * 3000), False),
        (
            "tool args nested 65 deep",
            req(srv, body=body({"items": [item(args=json.loads(nest(65)))]})),
            False,
        ),
        (
            "turn args nested 900 deep",
            req(
                srv,
                body=b'{"items": [], "session": "s", "turns": [{"index": 0, "calls": [{"key": "k", '
                b'"tool": "bash", "output": "", "args": ' + nest(900) + b"}]}]}",
            ),
            False,
        ),
        ("unclosed nesting", req(srv, body=b"[" * 3000), False),
        # -- lengths
        ("body over the limit", req(srv, body=big), False),
        (
            "Content-Length over the limit, no body",
            req(srv, body=None, headers={"Content-Length": "999999999"}),
            False,
        ),
        ("Content-Length 10^30", req(srv, body=None, headers={"Content-Length": "1" + "0" * 30}), False),
        ("negative Content-Length", req(srv, body=None, headers={"Content-Length": "-5"}), False),
        ("Content-Length with a sign", req(srv, body=b"{}", headers={"Content-Length": "+2"}), False),
        ("Content-Length not a number", req(srv, body=None, headers={"Content-Length": "ten"}), False),
        (
            "Content-Length larger than the body (deadline)",
            req(srv, body=None, headers={"Content-Length": "50"}) + b'{"items"',
            False,
        ),
        (
            "body ends before its Content-Length",
            req(srv, body=None, headers={"Content-Length": "50"}) + b'{"items": []}',
            True,
        ),
        ("no Content-Length", req(srv, body=None), False),
        ("empty body", req(srv, body=b""), False),
        ("2,000-character key", req(srv, body=body({"items": [item(key="k" * 2000)]})), False),
        ("101 items", req(srv, body=body({"items": [item(key=f"k{i}") for i in range(101)]})), False),
        ("huge integer", req(srv, body=b'{"items": [{"key": "a", "tokens": 1' + b"0" * 400 + b"}]}"), False),
        ("request line of 70,000 bytes", req(srv, path="/" + "a" * 70_000, body=None), False),
        ("header line of 70,000 bytes", req(srv, headers={"X-Long": "v" * 70_000}), False),
        ("200 headers", req(srv, headers={f"X-H{i}": "v" for i in range(200)}), False),
        # -- methods and paths
        ("HEAD", req(srv, method="HEAD", path="/health", body=None), False),
        (
            "OPTIONS (a CORS preflight)",
            req(srv, method="OPTIONS", body=None, headers={"Origin": "http://evil.example"}),
            False,
        ),
        ("PUT", req(srv, method="PUT"), False),
        ("DELETE", req(srv, method="DELETE", body=None), False),
        ("unknown method", req(srv, method="BREW", body=None), False),
        ("lower-case method", req(srv, method="post"), False),
        ("GET /decide", req(srv, method="GET", body=None), False),
        ("POST /health", req(srv, path="/health"), False),
        ("unknown path", req(srv, path="/admin", body=None, method="GET"), False),
        ("path with control bytes", req(srv, path="/\x1b[31mred\x07", method="GET", body=None), False),
        # -- request line and version
        ("HTTP/2.0", req(srv, version="HTTP/2.0"), False),
        ("HTTP/9.9", req(srv, version="HTTP/9.9"), False),
        ("garbage version", req(srv, version="HTXP/1.1"), False),
        ("four words", b"POST /decide HTTP/1.1 extra\r\nHost: x\r\n\r\n", False),
        ("NUL in the request line", b"GET /he\x00alth HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port, False),
        ("request line with no version", b"POST /decide\r\n\r\n", False),
        # -- headers
        ("no token", req(srv, token=False), False),
        ("wrong token", req(srv, headers={"Authorization": "Bearer nope"}), False),
        ("token with another scheme", req(srv, headers={"Authorization": f"Basic {srv.token}"}), False),
        ("token with non-ASCII bytes", req(srv, headers={"Authorization": "Bearer \xff\xfe"}), False),
        (
            "two Authorization headers",
            req(srv).replace(b"Authorization", b"Authorization: x\r\nAuthorization", 1),
            False,
        ),
        ("foreign Host (DNS rebinding)", req(srv, host=f"evil.example:{port}"), False),
        ("Host without the port", req(srv, host="127.0.0.1"), False),
        ("Host with another port", req(srv, host=f"127.0.0.1:{port + 1}"), False),
        ("no Host", req(srv, host="").replace(b"Host: \r\n", b""), False),
        ("two Host headers", req(srv).replace(b"Host:", b"Host: evil.example\r\nHost:", 1), False),
        ("text/plain (a simple cross-origin POST)", req(srv, headers={"Content-Type": "text/plain"}), False),
        ("form body", req(srv, headers={"Content-Type": "application/x-www-form-urlencoded"}), False),
        ("no Content-Type", req(srv).replace(b"Content-Type: application/json\r\n", b""), False),
        (
            "two Content-Length headers",
            req(srv).replace(b"Content-Length:", b"Content-Length: 0\r\nContent-Length:"),
            False,
        ),
        (
            "chunked",
            req(srv, body=None, headers={"Transfer-Encoding": "chunked"}) + b"2\r\n{}\r\n0\r\n\r\n",
            False,
        ),
        ("Content-Length and chunked", req(srv, headers={"Transfer-Encoding": "chunked"}), False),
        ("header without a colon", req(srv).replace(b"\r\n\r\n", b"\r\nBrokenHeader\r\n\r\n", 1), False),
        (
            "header continuation line",
            req(srv).replace(b"\r\n\r\n", b"\r\nX-A: 1\r\n  folded\r\n\r\n", 1),
            False,
        ),
        # -- encodings and bodies
        ("invalid UTF-8", req(srv, body=b'{"items": [{"key": "\xff\xfe", "tokens": 1}]}'), False),
        ("UTF-8 BOM", req(srv, body=b"\xef\xbb\xbf" + b'{"items": 5}'), False),
        ("UTF-16 body", req(srv, body='{"items": 5}'.encode("utf-16")), False),
        ("NaN", req(srv, body=b'{"items": [], "step": NaN}'), False),
        (
            "Infinity timestamp",
            req(srv, body=b'{"items": [{"key": "a", "tokens": 1, "timestamp": 1e999}]}'),
            False,
        ),
        ("trailing garbage", req(srv, body=b'{"items": []} xyz'), False),
        ("not JSON", req(srv, body=b"\x00\x01\x02\x03"), False),
        ("JSON string", req(srv, body=b'"items"'), False),
        ("null", req(srv, body=b"null"), False),
        ("duplicate key", req(srv, body=body({"items": [item(), item()]})), False),
        ("fractional count", req(srv, body=b'{"items": [{"key": "a", "tokens": 5.0}]}'), False),
        ("turns without a session", req(srv, body=body({"items": [], "turns": [{"index": 0}]})), False),
        (
            "unknown session at turn 3",
            req(srv, body=body({"items": [], "session": "zz", "turns": [{"index": 3}]})),
            False,
        ),
        (
            "a call with an empty tool name",
            req(
                srv,
                body=body(
                    {
                        "items": [],
                        "session": "e",
                        "turns": [{"index": 0, "calls": [{"key": "k", "tool": "", "output": ""}]}],
                    }
                ),
            ),
            False,
        ),
    ]
    return cases


def test_every_bad_request_gets_a_4xx_in_the_json_error_form(server):
    failures = []
    for name, raw, half_close in corpus(server):
        try:
            status, headers, payload = exchange(server, raw, half_close=half_close)
        except (OSError, AssertionError, ValueError, IndexError) as e:
            failures.append(f"{name}: no HTTP response ({type(e).__name__}: {e})")
            continue
        if not 400 <= status < 500:
            failures.append(f"{name}: status {status}")
            continue
        if headers.get("content-type") != "application/json":
            failures.append(f"{name}: content-type {headers.get('content-type')!r}")
            continue
        if raw.startswith(b"HEAD "):  # a HEAD response has no body
            continue
        try:
            err = json.loads(payload)
        except ValueError:
            failures.append(f"{name}: body is not JSON: {payload[:120]!r}")
            continue
        if set(err) != {"error", "field", "status"} or err["status"] != status or not err["error"]:
            failures.append(f"{name}: not the documented error form: {err}")
        elif "\n" in err["error"]:
            failures.append(f"{name}: a multi-line error: {err['error']!r}")
    assert not failures, "\n".join(failures)
    # the service is still fine
    status, _, payload = exchange(
        server, req(server, body=body({"model_family": "gpt-4o", "items": [item()]}))
    )
    assert status == 200 and json.loads(payload)["window"] == 1


def test_lone_surrogates_and_control_characters_in_texts_are_not_a_5xx(server):
    texts = ['"\\ud800"', '"\\udfff tail"', '"\\u0000\\u001b[2J"', '"\\ud83d\\ude00 ok"']
    for i, t in enumerate(texts):
        raw = (
            b'{"items": [{"key": "k0", "tokens": 1}], "session": "sur%d", "task": %s, "turns": [{"index": 0, '
            b'"assistant_text": %s, "calls": [{"key": "k0", "tool": %s, "output": %s, "args": {"p": %s}}]}]}'
            % (i, t.encode(), t.encode(), t.encode(), t.encode(), t.encode())
        )
        status, _, payload = exchange(server, req(server, body=raw))
        assert status < 500, (t, payload)
