"""Who may use ``dtoc-rl serve`` and how much it holds: the token, the Host check, sessions per
token, memory caps, deadlines, and the HTTP details an attacker would try (loopback only)."""

from __future__ import annotations

import http.client
import json
import socket
import time

import numpy as np
import pytest

from dtoc_rl.cli import main as cli_main
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecisionService, RemotePolicy, make_server, serve_in_thread
from dtoc_rl.serve.session_labels import Sessions


@pytest.fixture
def serve():
    started = []

    def start(svc=None, **kwargs):
        srv, thread = serve_in_thread(
            svc or DecisionService(make_policy("last_n:n=2")), "127.0.0.1", 0, **kwargs
        )
        started.append((srv, thread))
        return srv

    yield start
    for srv, thread in started:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def call(srv, method, path, body=None, *, token=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    h = {"Content-Type": "application/json"}
    if token is not False:
        h["Authorization"] = f"Bearer {token or srv.token}"
    h.update(headers or {})
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    c.request(method, path, data, {k: v for k, v in h.items() if v is not None})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, (json.loads(raw) if raw else None), dict(r.getheaders())


def raw_exchange(srv, data: bytes, timeout=10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


# ------------------------------------------------------------------------------ the token


def test_every_endpoint_but_health_needs_the_token(serve):
    srv = serve()
    assert call(srv, "GET", "/health", token=False)[0] == 200
    for method, path, body in (("GET", "/version", None), ("POST", "/decide", {"items": []})):
        for token in (False, "wrong-token"):
            status, err, headers = call(srv, method, path, body, token=token)
            assert status == 401 and err["status"] == 401 and err["field"] == "<headers>"
            assert "Bearer" in err["error"] and headers["WWW-Authenticate"].startswith("Bearer")
        assert call(srv, method, path, body)[0] == 200
    # the scheme is Bearer; the token alone, or as Basic, is refused
    assert call(srv, "GET", "/version", headers={"Authorization": srv.token})[0] == 401
    assert call(srv, "GET", "/version", headers={"Authorization": f"Basic {srv.token}"})[0] == 401
    assert call(srv, "GET", "/version", headers={"Authorization": f"bearer {srv.token}"})[0] == 200


def test_a_generated_token_is_long_and_random_and_a_given_one_is_used():
    svc = DecisionService(make_policy("none"))
    a, b = make_server(svc, "127.0.0.1", 0), make_server(svc, "127.0.0.1", 0)
    c = make_server(svc, "127.0.0.1", 0, token="my-own-token-123")
    try:
        assert len(a.token) >= 40 and a.token != b.token and c.token == "my-own-token-123"
    finally:
        for s in (a, b, c):
            s.server_close()
    with pytest.raises(ValueError, match="printable ASCII"):
        make_server(svc, "127.0.0.1", 0, token="has space")
    with pytest.raises(ValueError, match="not loopback"):  # refused before anything is bound
        make_server(svc, "0.0.0.0", 0)


def test_remote_policy_sends_the_token_from_its_argument_or_the_environment(serve, monkeypatch):
    srv = serve()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    n = 3
    obs = {
        "items": np.zeros((n, len(ITEM_FEATURES)), np.float32),
        "item_tool": np.zeros(n, np.int64),
        "item_mask": np.ones(n, np.int8),
        "enable_mask": np.zeros(n, np.int8),
        "disable_mask": np.ones(n, np.int8),
        "globals": np.zeros(len(GLOBAL_FEATURES), np.float32),
        "family": np.int64(0),
    }
    monkeypatch.delenv("DTOC_TOKEN", raising=False)
    without = RemotePolicy(url, on_error="keep")
    without.act(obs, {"model_family": "gpt-4o"})
    assert without.errors == 1  # a 401
    with pytest.raises(RuntimeError, match="HTTP 401"):
        RemotePolicy(url, on_error="raise").act(obs, {"model_family": "gpt-4o"})
    given = RemotePolicy(url, on_error="raise", token=srv.token)
    given.act(obs, {"model_family": "gpt-4o"})
    monkeypatch.setenv("DTOC_TOKEN", srv.token)
    from_env = RemotePolicy(url, on_error="raise")
    from_env.act(obs, {"model_family": "gpt-4o"})
    assert given.errors == from_env.errors == 0 and from_env.last["policy"].startswith("last_n")


# ------------------------------------------------------------------------------ Host and content type


def test_the_host_header_must_name_this_service(serve):
    srv = serve(allow_hosts=["dtoc.internal"])
    port = srv.server_address[1]
    for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}",
                 f"dtoc.internal:{port}"):  # fmt: skip
        assert call(srv, "GET", "/health", headers={"Host": good})[0] == 200, good
    for bad in (
        f"evil.example:{port}",
        "127.0.0.1",
        f"127.0.0.1:{port + 1}",
        f"127.0.0.1.evil.example:{port}",
    ):
        status, err, _ = call(srv, "POST", "/decide", {"items": []}, headers={"Host": bad})
        assert status == 421 and err["status"] == 421 and "Host" in err["error"], bad
    # a rebinding page's request carries a foreign Host even with the token
    status, _, headers = call(srv, "GET", "/version", headers={"Host": f"evil.example:{port}"})
    assert status == 421 and headers.get("Connection") == "close"


def test_a_simple_cross_origin_post_is_refused(serve):
    srv = serve()
    body = json.dumps({"items": [], "session": "s", "turns": [{"index": 0}]}).encode()
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", None):  # fmt: skip
        status, err, _ = call(srv, "POST", "/decide", body, headers={"Content-Type": ctype})
        assert status == 415 and err["field"] == "<headers>", ctype
    assert srv.service.sessions.get("s", "client0") is None  # nothing of them was kept
    assert (
        call(srv, "POST", "/decide", body, headers={"Content-Type": "application/json; charset=utf-8"})[0]
        == 200
    )
    # a CORS preflight gets no permission
    status, err, headers = call(
        srv, "OPTIONS", "/decide", token=False, headers={"Origin": "http://evil.example"}
    )
    assert status == 405 and "Access-Control-Allow-Origin" not in headers and err["status"] == 405


# ------------------------------------------------------------------------------ sessions per token


def _turn(i, output="", text=""):
    call = {"key": f"t{i:04d}", "tool": "bash", "output": output, "args": {"command": f"cat f{i}.py"}}
    return {"index": i, "assistant_text": text, "calls": [call]}


def test_a_forged_turn_cannot_alter_another_clients_session(serve):
    srv = serve(token=["token-of-the-owner", "token-of-another-client"])
    owner, other = "token-of-the-owner", "token-of-another-client"
    items = [{"key": f"t{i:04d}", "tokens": 10} for i in range(4)]
    # the owner's turns 0-2: three outputs
    body = {
        "session": "ses_1",
        "turns": [_turn(i, f"def f{i}(): pass") for i in range(3)],
        "items": items[:3],
    }
    assert call(srv, "POST", "/decide", body, token=owner)[0] == 200
    # another client (it knows the name) sends a forged turn 3, then a turn 0 of its own
    forged = {"session": "ses_1", "turns": [_turn(3, "forged", "t0000 t0001 t0002")], "items": items}
    status, err, _ = call(srv, "POST", "/decide", forged, token=other)
    assert status == 409 and "unknown session" in err["error"]
    mine = {"session": "ses_1", "turns": [_turn(0, "x", "t0000")], "items": items[:1]}
    assert call(srv, "POST", "/decide", mine, token=other)[2] is not None
    # the owner's real turn 3 is labelled: it names t0001, which is needed once
    real = {"session": "ses_1", "turns": [_turn(3, "ok", "I need t0001 again")], "items": items}
    status, out, _ = call(srv, "POST", "/decide", real, token=owner)
    assert status == 200 and out["session"] == {"turns": 4, "needed": {"t0001": 1}}
    owner_s = srv.service.sessions.get("ses_1", "client0")
    assert "forged" not in json.dumps([s.output for s in owner_s.orch.trajectory().steps])
    assert srv.service.sessions.get("ses_1", "client1").turns == 1  # its own, apart


def test_without_the_token_a_session_cannot_even_be_probed(serve):
    srv = serve()
    body = {
        "session": "ses_1",
        "turns": [_turn(0, "secret output")],
        "items": [{"key": "t0000", "tokens": 1}],
    }
    assert call(srv, "POST", "/decide", body)[0] == 200
    probe = {"session": "ses_1", "turns": [_turn(1, "forged")], "items": []}
    assert call(srv, "POST", "/decide", probe, token=False)[0] == 401
    assert srv.service.sessions.get("ses_1", "client0").turns == 1


# ------------------------------------------------------------------------------ memory caps


def test_the_sessions_total_text_is_capped_with_a_429_and_idle_sessions_make_room(serve):
    now = [0.0]
    svc = DecisionService(make_policy("none"))
    svc.sessions = Sessions(max_sessions=8, max_chars=4000, max_total_chars=5000, idle_reclaim_s=60,
                            clock=lambda: now[0])  # fmt: skip
    srv = serve(svc)

    def send(name, i, size):
        return call(srv, "POST", "/decide", {"session": name, "turns": [_turn(i, "x" * size)], "items": []})

    assert send("a", 0, 2500)[0] == 200
    assert send("b", 0, 2000)[0] == 200
    status, err, _ = send("a", 1, 1000)  # a alone is under its 4000, but all would hold over 5500
    assert status == 429 and err["field"] == "turns[0]" and "5,000" in err["error"]
    status, err, _ = send("b", 1, 2000)  # over the session's own cap: 413
    assert status == 413 and "4,000" in err["error"]
    held = svc.sessions.total_chars
    assert (
        held == svc.sessions.get("a", "client0").chars + svc.sessions.get("b", "client0").chars
        and 4500 < held <= 5000
    )
    now[0] = 61.0  # b's last use was at 0 s: idle, so it may be dropped to make room for a
    status, out, _ = send("a", 1, 1000)
    assert status == 200 and out["session"]["turns"] == 2
    assert svc.sessions.get("b", "client0") is None and svc.sessions.total_chars <= 5000
    assert send("b", 1, 10)[0] == 409  # b's client is told to send its session anew


def test_the_total_cap_counts_what_sessions_hold_and_frees_what_they_drop():
    sessions = Sessions(max_sessions=2, max_chars=10_000, max_total_chars=100_000)
    svc = DecisionService(make_policy("none"))
    svc.sessions = sessions
    for name in ("a", "b", "c"):  # c pushes a out (least recently used)
        svc.decide({"session": name, "task": "t" * 100, "turns": [_turn(0, "y" * 1000)], "items": []})
    held = sum(sessions.get(n).chars for n in ("b", "c"))
    assert sessions.get("a") is None and sessions.total_chars == held > 2000


# ------------------------------------------------------------------------------ HTTP details


def test_a_body_slower_than_the_deadline_gets_408_and_the_connection_closes(serve):
    srv = serve(request_timeout=1.0)
    port = srv.server_address[1]
    head = (
        f"POST /decide HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {srv.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    out = raw_exchange(srv, head + b'{"items": [')  # 11 of the 100 bytes, then nothing
    assert out.startswith(b"HTTP/1.1 408") and b"Connection: close" in out
    assert json.loads(out.split(b"\r\n\r\n", 1)[1])["status"] == 408
    assert time.monotonic() - t0 < 5


def test_a_slowloris_client_cannot_hold_a_connection_past_the_deadline(serve):
    srv = serve(request_timeout=1.0)
    port = srv.server_address[1]
    request = f"GET /version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "X-Pad: a\r\n" * 50
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        closed_after = None
        for ch in request.encode():  # a byte every 50 ms: each read is quick, the request never ends
            try:
                s.sendall(bytes([ch]))
            except OSError:
                closed_after = time.monotonic() - t0
                break
            time.sleep(0.05)
            if time.monotonic() - t0 > 6:
                break
        s.settimeout(5)
        try:
            out = s.recv(4096)
        except OSError:
            out = b""
        held = time.monotonic() - t0 if closed_after is None else closed_after
    assert out.startswith(b"HTTP/1.1 408") or closed_after is not None
    assert held < 4, f"the connection was held {held:.1f} s"


def test_duplicate_content_length_is_400_and_closes(serve):
    srv = serve()
    port = srv.server_address[1]
    smuggle = (
        f"POST /decide HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {srv.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 13\r\nContent-Length: 0\r\n\r\n"
        '{"items": []}GET /version HTTP/1.1\r\n\r\n'
    ).encode()
    out = raw_exchange(srv, smuggle)
    assert out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1") == 1  # one answer, then closed
    assert b"more than one Content-Length" in out


def test_a_body_sent_with_a_get_is_not_read_as_the_next_request(serve):
    srv = serve()
    port = srv.server_address[1]
    get = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    out = raw_exchange(
        srv, (get + "Content-Length: 5\r\n\r\nBREW " + get + "Connection: close\r\n\r\n").encode()
    )
    assert out.count(b"HTTP/1.1 200") == 2 and b"HTTP/1.1 4" not in out


def test_an_http_0_9_request_gets_a_status_line(serve):
    srv = serve()
    out = raw_exchange(srv, b"GET /health\r\n\r\n")  # no version: no headers, no Host either
    assert out.startswith(b"HTTP/1.1 400") and b"Content-Type: application/json" in out
    assert b"HTTP/0.9 request line" in out


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "PUT"])
def test_other_methods_get_a_json_405(serve, method):
    srv = serve()
    status, err, headers = call(srv, method, "/decide", token=False)
    assert status == 405 and headers["Content-Type"] == "application/json"
    assert headers["Allow"] == "GET, POST" and headers.get("Connection") == "close"
    if method == "HEAD":
        assert err is None  # no body, only its length
    else:
        assert err["status"] == 405 and err["field"] == "<method>"


def test_deep_json_is_a_400_not_a_500(serve):
    srv = serve()
    deep = b'{"items": [], "x": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    assert len(deep) < 2100
    status, err, _ = call(srv, "POST", "/decide", deep)
    assert status == 400 and "nests JSON too deeply" in err["error"]
    args = {"items": [{"key": "a", "tokens": 1, "args": json.loads("[" * 65 + "]" * 65)}]}
    status, err, _ = call(srv, "POST", "/decide", args)
    assert status == 400 and err["field"] == "items[0].args" and "64 levels" in err["error"]


def test_the_log_escapes_control_characters():
    lines = []
    srv, thread = serve_in_thread(DecisionService(make_policy("none")), "127.0.0.1", 0)
    srv.log = lines.append
    try:
        port = srv.server_address[1]
        raw_exchange(srv, f"GET /\x1b[2J\x07x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
                     .replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n"))  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
    assert lines and all(not any(ord(c) < 0x20 or ord(c) == 0x7F for c in ln) for ln in lines)
    assert any("\\x1b[2J\\x07x" in ln for ln in lines)


def test_the_listen_backlog_takes_a_burst(serve):
    srv = serve()
    assert srv.request_queue_size >= 128
    # 300 connections opened at once, before the server accepts them: none refused
    port = srv.server_address[1]
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for s in socks[:20]:
            s.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        assert all(s.recv(12).startswith(b"HTTP/1.1 200") for s in socks[:20])
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------------------ dtoc-rl serve


def test_serve_refuses_a_network_host_without_a_token(capsys, monkeypatch):
    monkeypatch.delenv("DTOC_TOKEN", raising=False)
    assert cli_main(["serve", "--policy", "none", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "not a loopback address" in err and "--token" in err and len(err.strip().splitlines()) == 1
    assert cli_main(["serve", "--policy", "none", "--token", "two words"]) == 2
    assert "--token: a token may hold only printable ASCII" in capsys.readouterr().err
    monkeypatch.setenv("DTOC_TOKEN", "bad\ttoken")
    assert cli_main(["serve", "--policy", "none"]) == 2
    assert "DTOC_TOKEN:" in capsys.readouterr().err


def test_serve_help_explains_the_token_the_host_check_and_the_warning(capsys):
    with pytest.raises(SystemExit):
        cli_main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Authorization: Bearer" in text and "DTOC_TOKEN" in text and "--token" in text
    assert "Host header" in text and "421" in text
    assert "WARNING: --host other than a loopback address" in text


def test_a_client_opening_many_sessions_pushes_out_only_its_own():
    """The session table is shared; when it is full the client holding the most sessions loses its
    least recently used one, so a client opening sessions in a loop cannot evict another's."""
    sessions = Sessions(max_sessions=4)
    svc = DecisionService(make_policy("none"))
    svc.sessions = sessions
    t0 = {"index": 0, "calls": [{"key": "a", "tool": "bash", "output": "x"}]}
    svc.decide({"session": "mine", "turns": [t0], "items": []}, client="victim")
    for i in range(20):  # the noisy client's sessions are all more recent than the victim's
        svc.decide({"session": f"s{i}", "turns": [t0], "items": []}, client="noisy")
    assert len(sessions) == 4 and sessions.get("mine", "victim") is not None
    assert [sessions.get(f"s{i}", "noisy") is not None for i in (16, 17, 18, 19)] == [False, True, True, True]
    # between equals, the least recently used session goes, as before
    svc.decide({"session": "mine2", "turns": [t0], "items": []}, client="victim")
    assert sessions.get("mine", "victim") is not None and sessions.get("s17", "noisy") is None
