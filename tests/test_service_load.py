"""The service under concurrent clients on 127.0.0.1: no error, no request lost, sessions intact.

The short version runs with the suite; the long one (``scripts/bench_policy.py --load``, whose
figures are in docs/benchmarks.md) is in the slow tier.
"""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecisionService, serve_in_thread

CLIENTS, REQUESTS, ITEMS = 4, 40, 300


def _items(n):
    return [
        {
            "key": f"t{i:04d}",
            "tokens": 50 + 7 * i,
            "visible": i % 3 != 0,
            "tool": "bash",
            "args": {"command": f"cat src/module_{i % 40}.py"},
            "age": n - 1 - i,
        }
        for i in range(n)
    ]


def test_concurrent_clients_get_every_answer_and_keep_their_sessions_apart():
    srv, thread = serve_in_thread(
        DecisionService(make_policy("last_n:n=5"), max_request_items=1000), "127.0.0.1", 0
    )
    port = srv.server_address[1]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"}
    plain = json.dumps({"model_family": "gpt-4o", "items": _items(ITEMS)}).encode()
    expected = {}
    results: dict[int, list] = {c: [] for c in range(CLIENTS)}

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for i in range(REQUESTS):
                if i % 4 == 3:  # every 4th request carries a new turn of this client's session
                    turn = {"index": i // 4, "assistant_text": f"client {c} turn {i // 4}", "calls": [
                        {"key": f"c{c}k{i}", "tool": "bash", "output": f"out {c} {i}"}]}  # fmt: skip
                    body = json.dumps({"model_family": "gpt-4o", "session": f"s{c}", "turns": [turn],
                                       "items": _items(ITEMS)}).encode()  # fmt: skip
                else:
                    body = plain
                conn.request("POST", "/decide", body, headers)
                r = conn.getresponse()
                results[c].append((r.status, json.loads(r.read())))
        except Exception as e:  # recorded, so the main thread reports it
            results[c].append((None, repr(e)))
        finally:
            conn.close()

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/decide", plain, headers)
        expected = json.loads(conn.getresponse().read())
        conn.close()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        sessions = {c: srv.service.sessions.get(f"s{c}", "client0") for c in range(CLIENTS)}
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
    bad = [(c, s, b) for c, rs in results.items() for s, b in rs if s != 200]
    assert not bad, bad[:3]
    assert all(len(rs) == REQUESTS for rs in results.values())
    for c, rs in results.items():  # the same store gets the same answer under load
        assert all(b["disable"] == expected["disable"] for _, b in rs if "session" not in b)
        s = sessions[c]
        assert s.turns == REQUESTS // 4
        texts = [st.assistant_text for st in s.orch.trajectory().steps]
        assert all(t.startswith(f"client {c} ") for t in texts)  # no other client's turn in it


@pytest.mark.slow
def test_the_load_benchmark_runs_short_with_no_error(capsys):
    from scripts import bench_policy

    code = bench_policy.main(["--load", "--clients", "4", "--load-requests", "50", "--load-seconds", "300",
                              "--json"])  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    assert code == 0 and r["errors"] == 0 and r["requests"] == 50 + 4 * 50
    assert r["rows"]["HTTP /decide, 4 clients at once, keep-alive"]["n"] == 200
    assert r["rows"]["HTTP /decide, 1 client, keep-alive"]["p99_ms"] > 0
