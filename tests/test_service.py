"""The decision service over real HTTP on 127.0.0.1, and ``dtoc-rl serve``'s start-up checks."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from dtoc_rl import __version__
from dtoc_rl.cli import main as cli_main
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecideError, DecisionService, serve_in_thread


def items(n, hidden=()):
    return [
        {"key": f"t{i:04d}", "tokens": 100 * (i + 1), "visible": f"t{i:04d}" not in hidden, "tool": "bash",
         "args": {"command": f"cat f{i}.py"}}
        for i in range(n)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def server():
    svc = DecisionService(make_policy("last_n:n=2"), max_body=4096, max_request_items=50)
    srv, thread = serve_in_thread(svc, "127.0.0.1", 0)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def auth(srv):
    return {"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"}


def request(srv, method, path, body=None, headers=None, conn=None):
    host, port = srv.server_address[:2]
    c = conn or http.client.HTTPConnection(host, port, timeout=10)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    c.request(method, path, data, auth(srv) if headers is None else headers)
    r = c.getresponse()
    out = r.status, json.loads(r.read())
    if conn is None:
        c.close()
    return out


def test_health_and_version(server):
    status, body = request(server, "GET", "/health")
    assert status == 200 and body["status"] == "ok" and body["policy"].startswith("last_n")
    status, body = request(server, "GET", "/version")
    assert status == 200 and body["version"] == __version__
    assert body["item_features"] == list(ITEM_FEATURES) and body["fallback"] == "none"
    assert "other" not in body["families"] and "gpt-4o" in body["families"]
    schema = body["request_schema"]["$defs"]  # JSON Schema of a /decide body, for clients elsewhere
    assert schema["Request"]["required"] == ["items"]
    assert sorted(schema["Item"]["required"]) == ["key", "tokens"]
    assert schema["Item"]["properties"]["tokens"]["minimum"] == 0


def test_decide_returns_changes_by_key(server):
    status, body = request(
        server, "POST", "/decide", {"model": "openai/gpt-4o-2024-08-06", "items": items(5)}
    )
    assert status == 200, body
    assert body["disable"] == ["t0000", "t0001", "t0002"] and body["enable"] == []
    assert body["family"] == "gpt-4o" and body["fallback"] is False and body["window"] == 5
    assert body["latency_ms"] >= 0 and body["policy"] == "last_n(n=2,polling=1)"
    # already hidden ones are not repeated; a hidden recent one comes back
    status, body = request(
        server, "POST", "/decide", {"model_family": "gpt-4o", "items": items(5, hidden=("t0000", "t0004"))}
    )
    assert body["disable"] == ["t0001", "t0002"] and body["enable"] == ["t0004"]
    status, body = request(server, "POST", "/decide", {"model_family": "gpt-4o", "items": []})
    assert status == 200 and body["enable"] == body["disable"] == []


def test_timestamps_order_items_and_keepalive_works(server):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    its = items(3)
    for i, it in enumerate(its):
        it["timestamp"] = 1000.0 - i  # listed newest first
    for _ in range(3):  # one connection, several requests
        status, body = request(server, "POST", "/decide", {"model_family": "gpt-4o", "items": its}, conn=conn)
        assert status == 200 and body["disable"] == ["t0002"]
    conn.close()


def test_unknown_family_falls_back_to_showing_everything(server):
    status, body = request(
        server, "POST", "/decide", {"model": "mystery-model-7b", "items": items(4, hidden=("t0000",))}
    )
    assert status == 200
    assert body["fallback"] is True and body["family"] == "other" and body["policy"] == "none"
    assert body["enable"] == ["t0000"] and body["disable"] == []
    status, body = request(server, "POST", "/decide", {"items": items(2)})  # no model at all
    assert body["fallback"] is True


@pytest.mark.parametrize(
    "payload,status,field",
    [
        ([1, 2], 422, "<body>"),
        ({}, 422, "items"),
        ({"items": {"key": "a"}}, 422, "items"),
        ({"items": [5]}, 422, "items[0]"),
        ({"items": [{"tokens": 5}]}, 422, "items[0].key"),
        ({"items": [{"key": "a"}]}, 422, "items[0].tokens"),
        ({"items": [{"key": "a", "tokens": "12"}]}, 422, "items[0].tokens"),
        ({"items": [{"key": "a", "tokens": -1}]}, 422, "items[0].tokens"),
        ({"items": [{"key": "a", "tokens": 1.5}]}, 422, "items[0].tokens"),
        ({"items": [{"key": "a", "tokens": True}]}, 422, "items[0].tokens"),
        ({"items": [{"key": "a", "tokens": 1, "visible": "yes"}]}, 422, "items[0].visible"),
        ({"items": [{"key": "a", "tokens": 1, "age": -2}]}, 422, "items[0].age"),
        ({"items": [{"key": "a", "tokens": 1, "tool_category": "nope"}]}, 422, "items[0].tool_category"),
        ({"items": [{"key": "a", "tokens": 1, "args": 5}]}, 422, "items[0].args"),
        ({"items": [{"key": "a", "tokens": 1}, {"key": "a", "tokens": 2}]}, 422, "items[1].key"),
        ({"items": [], "active_tokens": "many"}, 422, "active_tokens"),
        ({"items": [], "model_family": 7}, 422, "model_family"),
        ({"items": [{"key": f"k{i}", "tokens": 1} for i in range(51)]}, 413, "items"),
    ],
)
def test_bad_requests_get_4xx_naming_the_field(server, payload, status, field):
    got, body = request(server, "POST", "/decide", payload)
    assert got == status, body
    assert body["field"] == field and body["status"] == status
    assert field.startswith("<") or body["error"].startswith(field.split("[")[0])


def test_malformed_json_oversized_body_and_http_errors(server):
    assert request(server, "POST", "/decide", b'{"items": [')[0] == 400
    status, body = request(server, "POST", "/decide", b'{"items": [], "step": NaN}')
    assert status == 400 and "NaN" in body["error"]
    status, body = request(server, "POST", "/decide", b"[" * 100_000 + b"]" * 100_000)
    assert status == 413  # over the 4 KiB limit of this test server
    # an integer beyond 64 bits gets its field's error, not "invalid JSON"
    huge = b'{"items": [{"key": "a", "tokens": 100000000000000000000}]}'
    status, body = request(server, "POST", "/decide", huge)
    assert status == 422 and body["field"] == "items[0].tokens" and "<= 1000000000000000" in body["error"]
    deep = b"[" * 2000 + b"]" * 2000
    assert request(server, "POST", "/decide", deep)[0] in (400, 422)
    status, body = request(server, "POST", "/decide", b"x" * 5000)
    assert status == 413 and "limit" in body["error"]
    assert request(server, "GET", "/nope")[0] == 404
    assert request(server, "GET", "/decide")[0] == 405
    assert request(server, "POST", "/health", {})[0] == 405
    # no Content-Length at all
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(
            f"POST /decide HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {server.token}\r\n"
            "Content-Type: application/json\r\n\r\n".encode()
        )
        head = s.recv(4096).decode()
    assert head.startswith("HTTP/1.1 411")
    # the server is still fine
    assert request(server, "GET", "/health")[0] == 200


def test_a_policy_that_crashes_is_a_500_and_the_server_lives_on():
    class Broken:
        label = "broken"

        def act(self, obs, info):
            raise RuntimeError("boom")

    srv, thread = serve_in_thread(DecisionService(Broken()), "127.0.0.1", 0)
    try:
        status, body = request(srv, "POST", "/decide", {"model_family": "gpt-4o", "items": items(2)})
        assert status == 500 and "boom" in body["error"]
        assert request(srv, "GET", "/health")[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()


def test_learned_checkpoint_and_per_family_fallback(tmp_path):
    pol = LearnedPolicyConfig(n_layers=1, d_model=32, model_family="gpt-4o").create()
    svc = DecisionService(pol, families={"gpt-4o"}, max_items=4)
    out = svc.decide({"model_family": "gpt-4o", "items": items(6), "step": 6})
    assert out["fallback"] is False and out["window"] == 4 and out["policy"].startswith("learned")
    assert set(out["enable"] + out["disable"]) <= {"t0002", "t0003", "t0004", "t0005"}
    other = svc.decide({"model_family": "claude-sonnet", "items": items(3, hidden=("t0001",))})
    assert other["fallback"] is True and other["enable"] == ["t0001"]
    with pytest.raises(DecideError) as e:
        svc.decide({"items": [{"key": "a", "tokens": 1, "since_need": "x"}]})
    assert e.value.field == "items[0].since_need"


def test_observation_defaults_from_sparse_items():
    seen = {}

    class Spy:
        def act(self, obs, info):
            seen["obs"], seen["info"] = obs, info
            n = len(obs["item_mask"])
            return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}

    svc = DecisionService(Spy(), max_items=8)
    svc.decide({"model_family": "qwen", "items": items(3, hidden=("t0000",)), "budget": 2000})
    obs, info = seen["obs"], seen["info"]
    f = {n: obs["items"][:3, i].tolist() for i, n in enumerate(ITEM_FEATURES)}
    assert (
        f["age"] == [2, 1, 0]
        and f["visible"] == [0, 1, 1]
        and f["est_tokens_k"] == pytest.approx([0.1, 0.2, 0.3])
    )
    assert info["keys"][:3] == ["t0000", "t0001", "t0002"] and info["keys"][3] == ""
    assert info["active_tokens"] == 200 + 300 + 40 and info["budget_tokens"] == 2000 and info["step"] == 3


# ------------------------------------------------------------------------------ dtoc-rl serve


def test_serve_refuses_a_bad_checkpoint_at_start(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    (bad / "model.safetensors").write_bytes(b"junk")
    assert cli_main(["serve", "--policy", str(bad), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "cannot load policy" in err and "invalid JSON" in err
    assert cli_main(["serve", "--policy", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "no such checkpoint folder" in capsys.readouterr().err
    (tmp_path / "file.txt").write_text("x")
    assert cli_main(["serve", "--policy", str(tmp_path / "file.txt")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert cli_main(["serve", "--policy", "no_such_policy"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    # a checkpoint of another version's features
    good = LearnedPolicyConfig(n_layers=1, d_model=32).create().save(tmp_path / "ckpt")
    meta = json.loads((good / "config.json").read_text())
    meta["item_features"] = meta["item_features"][:-1]
    (good / "config.json").write_text(json.dumps(meta))
    assert cli_main(["serve", "--policy", str(good)]) == 2
    assert "different item features" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_a_policy_that_needs_the_whole_logged_run_cannot_be_served(command, capsys):
    extra = ["--upstream", "http://127.0.0.1:9"] if command == "proxy" else []
    for spec in ("oracle", "logged"):
        assert cli_main([command, "--policy", spec, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"dtoc-rl: error: policy '{spec}': ")
        assert "decides from the whole logged run" in err[0] and "it is for evaluation on logs" in err[0]


def test_serve_names_its_fallback_self_when_the_policy_takes_every_family(monkeypatch, capsys):
    import dtoc_rl.serve.service as service

    made = []

    def make_server(*a, **kw):  # the real server, which returns at once instead of serving
        srv = real(*a, **kw)
        srv.serve_forever = lambda **_: None
        made.append(srv)
        return srv

    real = service.make_server
    monkeypatch.setattr(service, "make_server", make_server)
    monkeypatch.setenv("DTOC_TOKEN", "a-token-for-this-test-0123456789")
    assert cli_main(["serve", "--policy", "hide_big", "--fallback", "self", "--port", "0", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["fallback"] == "self" and "other" in info["families"]
    assert made[0].service.version()["fallback"] == "self"
    # a rule that reads no prices serves every family: a fallback given is said to be unused
    assert cli_main(["serve", "--policy", "hide_big", "--fallback", "last_n", "--port", "0", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "other" in json.loads(out)["families"]
    assert "--fallback last_n is not used: hide_big reads no prices" in err
    argv = ["serve", "--policy", "cache_clear", "--fallback", "last_n", "--port", "0", "--json"]
    assert cli_main(argv) == 0
    out, err = capsys.readouterr()
    assert "other" not in json.loads(out)["families"] and "is not used" not in err


def test_serve_takes_its_session_limits_and_collects_garbage_at_the_servers_thresholds(monkeypatch, capsys):
    import gc

    import dtoc_rl.serve.service as service
    from dtoc_rl.serve.orchestrator import GC_THRESHOLDS

    made, during = [], []

    def make_server(*a, **kw):
        srv = real(*a, **kw)
        srv.serve_forever = lambda **_: during.append(gc.get_threshold())
        made.append(srv)
        return srv

    real = service.make_server
    monkeypatch.setattr(service, "make_server", make_server)
    monkeypatch.setenv("DTOC_TOKEN", "a-token-for-this-test-0123456789")
    old = gc.get_threshold()
    try:
        argv = ["serve", "--policy", "hide_big", "--port", "0", "--json",
                "--max-session-chars", "1234", "--max-total-chars", "5678"]  # fmt: skip
        assert cli_main(argv) == 0
        assert gc.get_threshold() == old  # given back when the server stops
    finally:
        gc.set_threshold(*old)
    capsys.readouterr()
    sessions = made[0].service.sessions
    assert (sessions.max_chars, sessions.max_total_chars) == (1234, 5678)
    assert during == [GC_THRESHOLDS]


def test_serve_process_prints_json_and_its_token_serves_and_stops_on_sigterm():
    env = {k: v for k, v in os.environ.items() if k != "DTOC_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from dtoc_rl.cli import main; sys.exit(main())",
         "serve", "--policy", "last_n:n=2", "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        assert info["host"] == "127.0.0.1" and info["port"] > 0 and info["fallback"] == "none"
        assert info["token"].startswith("generated")
        line = proc.stderr.readline()  # the generated token, printed once
        token = line.split("token: ", 1)[1].split()[0]
        assert len(token) >= 40 and token not in json.dumps(info)
        body = json.dumps({"model_family": "gpt-4o", "items": items(3)})
        c = http.client.HTTPConnection(info["host"], info["port"], timeout=10)
        c.request("POST", "/decide", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 401 and json.loads(r.read())["status"] == 401
        c.request(
            "POST", "/decide", body, {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        )
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())["disable"] == ["t0000"]
        c.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


# ------------------------------------------------------------------------------ RemotePolicy


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_remote_policy_decides_like_the_local_one(server):
    from dtoc_rl.serve.orchestrator import Orchestrator
    from dtoc_rl.serve.service import RemotePolicy

    svc = DecisionService(make_policy("last_n:n=3,polling=4"))
    srv, _ = serve_in_thread(svc, "127.0.0.1", 0)
    try:
        remote = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token=srv.token)
        runs = []
        for pol in (make_policy("last_n:n=3,polling=4"), remote):
            o = Orchestrator(pol, query="q", model="gpt-4o", max_items=8, label_every=0)
            for i in range(20):  # more outputs than slots: the service needs `stored`
                (c,) = o.record_assistant("", [{"name": "bash", "arguments": {"command": f"cat f{i}"}}])
                o.add_tool_result(c["id"], "x" * (50 * i + 1))
                o.decide()
            runs.append(o.store.hidden_keys())
        assert runs[0] == runs[1] and len(runs[0]) >= 14
        assert remote.errors == 0 and "last_n(n=3,polling=4)" in remote.label
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_remote_policy_dropped_or_closed_leaves_no_socket_open():
    import gc
    import warnings

    from dtoc_rl.serve.orchestrator import Orchestrator
    from dtoc_rl.serve.service import RemotePolicy

    srv, _ = serve_in_thread(DecisionService(make_policy("last_n:n=1")), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    port = srv.server_address[1]
    gc.collect()  # what earlier tests left unclosed is said now, not inside the check below
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for closing in (False, True):
                remote = RemotePolicy(url, token=srv.token)
                o = Orchestrator(remote, query="q", model="gpt-4o", label_every=0)
                (c,) = o.record_assistant("", [{"name": "bash", "arguments": {"command": "ls"}}])
                o.add_tool_result(c["id"], "x" * 400)
                o.decide()
                assert remote._conn is not None  # kept alive between decisions
                if closing:
                    with remote:
                        pass
                    assert remote._conn is None
                del o, remote
                gc.collect()
        # sockets to this test's service only: another test's leak collected here is not this one's
        mine = [w for w in said if issubclass(w.category, ResourceWarning) and f", {port})" in str(w.message)]
        assert not mine
    finally:
        srv.shutdown()
        srv.server_close()


def test_remote_policy_in_evaluate_like_a_local_one():
    # evaluate() calls reset() on every policy object: RemotePolicy must have it ("like a local one")
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.policies.evaluate import evaluate
    from dtoc_rl.serve.service import RemotePolicy

    srv, _ = serve_in_thread(DecisionService(make_policy("last_n:n=5")), "127.0.0.1", 0)
    try:
        remote = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token=srv.token)
        remote.reset({"model_family": "gpt-4o"})
        runs = evaluate(bundled_dataset(), [remote, "last_n:n=5"], progress=False)
    finally:
        srv.shutdown()
        srv.server_close()
    by = {}
    for r in runs:
        assert r.error is None, r.error
        by.setdefault(r.policy.split("(")[0], {})[r.traj_id] = (r.calls, round(float(r.dollars), 9))
    assert by["remote"] == by["last_n:n=5"] and len(by["remote"]) == 34


def test_remote_policy_when_the_service_is_down():
    from dtoc_rl.serve.service import RemotePolicy

    obs = {
        "items": np.zeros((4, len(ITEM_FEATURES)), np.float32),
        "item_tool": np.zeros(4, np.int64),
        "item_mask": np.array([1, 1, 1, 0], np.int8),
        "enable_mask": np.array([1, 0, 1, 0], np.int8),
        "disable_mask": np.array([0, 1, 0, 0], np.int8),
        "globals": np.zeros(len(GLOBAL_FEATURES), np.float32),
        "family": np.int64(0),
    }
    url = f"http://127.0.0.1:{_free_port()}"
    shown = RemotePolicy(url, timeout=2).act(obs, {"keys": ["a", "b", "c", ""]})
    assert shown["enable"].tolist() == [1, 0, 1, 0] and not shown["disable"].any()
    kept = RemotePolicy(url, timeout=2, on_error="keep")
    assert not kept.act(obs)["enable"].any() and kept.errors == 1
    with pytest.raises(OSError):
        RemotePolicy(url, timeout=2, on_error="raise").act(obs)
    with pytest.raises(ValueError):
        RemotePolicy("ftp://x")


def _cold_spy(seen: list):
    """A policy that keeps nothing hidden and records each decision's ``info["cache_cold"]``."""

    class Spy(type(make_policy("none"))):
        def act(self, obs, info=None):
            seen.append(info["cache_cold"])
            return super().act(obs, info)

    return Spy()


def test_a_learned_policy_served_hides_more_before_a_cold_call_with_cold_scale(tmp_path):
    import numpy as np

    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    ck = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, batching="off").create().save(tmp_path / "ck")
    body = {"model": "gpt-5.2", "step": 20, "items": [
        {"key": f"t{i}", "tokens": 2000, "age": 5, "tool": "bash"} for i in range(4)]}  # fmt: skip
    hidden = {}
    for scale in (1, 3):
        pol = make_policy(f"learned:path={ck},threshold=0.1,cold_scale={scale}")
        pol.probs = lambda o, prices=None: np.r_[[0.05, 0.15, 0.25, 0.5], np.zeros(len(o["item_mask"]) - 4)]
        svc = DecisionService(pol)
        for wait in (120.0, 301.0):  # gpt-5.2's cache keeps a prefix five minutes
            hidden[scale, wait] = svc.decide({**body, "idle_seconds": wait})["disable"]
    assert hidden[1, 120.0] == hidden[1, 301.0] == hidden[3, 120.0] == ["t0"]
    assert hidden[3, 301.0] == ["t0", "t1", "t2"]  # 0.1 x 3 before the cold call


def test_decide_tells_the_policy_when_the_clients_wait_outlasted_the_cache():
    seen = []
    svc = DecisionService(_cold_spy(seen))
    body = {"model": "gpt-5.2", "items": items(3)}
    for wait in (None, 120.0, 301.0):
        svc.decide({**body, **({} if wait is None else {"idle_seconds": wait})})
    svc.decide({"model": "gemini-3-pro-preview", "items": items(3), "idle_seconds": 3600.0})  # no lifetime
    assert seen == [False, False, True, False]
    # a client that knows better (an extended retention, a replayed log) says so itself
    svc.decide({**body, "idle_seconds": 10.0, "cache_cold": True})
    svc.decide({**body, "idle_seconds": 3600.0, "cache_cold": False})
    assert seen[4:] == [True, False]
    with pytest.raises(DecideError) as e:
        svc.decide({**body, "idle_seconds": -1})
    assert e.value.status == 422 and "idle_seconds" in str(e.value.to_dict())
    with pytest.raises(DecideError) as e:
        svc.decide({**body, "cache_cold": "yes"})
    assert e.value.status == 422 and "cache_cold" in str(e.value.to_dict())


def test_remote_policy_passes_on_what_its_caller_knows_of_the_cache():
    from dtoc_rl.serve.service import RemotePolicy

    seen = []
    obs = {
        "item_mask": np.array([1, 1, 0], np.int8),
        "items": np.zeros((3, len(ITEM_FEATURES)), np.float32),
        "item_tool": np.zeros(3, np.int64),
        "enable_mask": np.zeros(3, np.int8),
        "disable_mask": np.array([1, 1, 0], np.int8),
        "globals": np.zeros(len(GLOBAL_FEATURES), np.float32),
        "family": np.int64(0),
    }
    srv, _ = serve_in_thread(DecisionService(_cold_spy(seen)), "127.0.0.1", 0)
    try:
        remote = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token=srv.token)
        for cold in (True, False, None):
            remote.act(obs, {"model_family": "gpt-5", **({} if cold is None else {"cache_cold": cold})})
    finally:
        srv.shutdown()
        srv.server_close()
    assert seen == [True, False, False] and remote.errors == 0


@pytest.mark.parametrize("which", ["service", "proxy"])
def test_a_closed_server_answers_no_more_requests_on_connections_kept_alive(which):
    """In a process that goes on (an embedding application, a test), a closed server's kept-alive
    connections end: their handler threads would otherwise answer from it until the client left."""
    import time

    from dtoc_rl.serve.proxy import HEALTH_PATH, ContextProxy, make_proxy_server

    if which == "service":
        srv, thread = serve_in_thread(DecisionService(make_policy("last_n:n=1")), "127.0.0.1", 0)
        path = "/health"
    else:
        srv = make_proxy_server(ContextProxy(make_policy("none")), "http://127.0.0.1:9", port=0)
        thread = threading.Thread(target=srv.serve_forever, args=(0.1,), daemon=True)
        thread.start()
        path = HEALTH_PATH
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=5)
    conn.request("GET", path)
    first = conn.getresponse()
    first.read()
    assert first.status == 200 and not first.will_close
    srv.shutdown()
    srv.server_close()
    time.sleep(0.2)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", path)
        conn.getresponse().read()
    conn.close()
    thread.join(5)


def test_the_recent_part_with_the_stores_counts_is_decided_as_the_whole():
    """A client may send only the ``max_items`` most recent items (the OpenCode plugin does, so a request
    stays the same size however long its session grows): with the whole store's counts, the policy sees
    what it sees for the whole list, and the answer names ``max_items``."""
    policy = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, seed=0).create()
    seen = []
    act = policy.act
    policy.act = lambda obs, info=None: seen.append(obs) or act(obs, info)
    svc = DecisionService(policy, max_items=8)
    whole = items(40, hidden={f"t{i:04d}" for i in range(0, 30, 3)})
    for k, it in enumerate(whole):
        it["age"] = 39 - k
    full = svc.decide({"model": "gpt-4o", "step": 40, "items": whole})
    hidden = [it for it in whole if not it["visible"]]
    part = svc.decide({
        "model": "gpt-4o", "step": 40, "items": whole[-8:], "stored": 40,
        "visible_count": 40 - len(hidden),
        "active_tokens": sum(it["tokens"] for it in whole if it["visible"]) + 40 * len(hidden),
        "saved_tokens": sum(it["tokens"] - 40 for it in hidden),
    })  # fmt: skip
    assert full["max_items"] == part["max_items"] == 8 and full["window"] == part["window"] == 8
    assert (full["enable"], full["disable"]) == (part["enable"], part["disable"])
    assert seen[0].keys() == seen[1].keys()
    for name in seen[0]:
        np.testing.assert_array_equal(seen[0][name], seen[1][name], err_msg=name)
