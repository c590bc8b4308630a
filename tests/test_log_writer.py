"""The proxy's conversation logs are written off the request path: a request does not wait for its log,
a file's waiting row is replaced by a newer one, a failed file is reported once, and nothing put is lost
when the process ends or the server stops."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve import log_writer
from dtoc_rl.serve.log_writer import LogWriter
from dtoc_rl.serve.proxy import ContextProxy
from tests.chat_turns import HEAD, MODEL, turn
from tests.slow_writes import slow_log_writes


def _turn(k: int) -> list[dict]:
    return turn(k, f"out {k}\n" * 50, call_id=f"c{k}")


def _upstream(body_received=lambda: None):
    """A chat-completions API answering "ok", calling ``body_received()`` once it has a request's body."""
    from http.server import BaseHTTPRequestHandler

    class Upstream(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body_received()
            out = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Upstream


def _gated(monkeypatch):
    """write_text_atomic held at a gate: (gate, entered, calls) - ``entered`` is set once a write waits
    at the gate, and ``calls`` holds each call's path and line, once let through."""
    gate, entered, calls, real = threading.Event(), threading.Event(), [], log_writer.write_text_atomic

    def write(path, chunks, encoding=None, private=False):
        entered.set()
        gate.wait(10)
        text = "".join(chunks)
        calls.append((path, text))
        real(path, [text], encoding=encoding, private=private)

    monkeypatch.setattr(log_writer, "write_text_atomic", write)
    return gate, entered, calls


def test_a_request_does_not_wait_for_its_log_and_a_waiting_row_is_replaced_by_the_newest(
    monkeypatch, tmp_path
):
    gate, entered, calls = _gated(monkeypatch)
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    msgs = HEAD + _turn(0)
    done = threading.Thread(target=proxy.rewrite, args=("openai", {"model": MODEL, "messages": msgs}))
    done.start()
    done.join(5)
    assert not done.is_alive()  # answered while its log is held at the gate
    assert entered.wait(5)  # the writer has taken the first row (else the newest would replace it too)
    for k in (1, 2, 3):  # while the first row is being written, three more requests of the conversation
        msgs = msgs + _turn(k)
        proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
    assert not list(tmp_path.glob("*.jsonl")) and not proxy.flush_logs(timeout=0.2)
    gate.set()
    assert proxy.flush_logs(timeout=10)
    (log,) = tmp_path.glob("*.jsonl")
    row = json.loads(log.read_text())
    outputs = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    assert outputs == [f"out {k}\n" * 50 for k in range(4)]
    # the first row, then only the newest of the three that waited behind it
    assert len(calls) == 2 and calls[1][1] == log.read_text()
    assert proxy.logs_written == 2 and proxy._logs.pending == 0


def test_a_log_that_fails_is_reported_once_and_the_other_conversations_are_logged(monkeypatch, tmp_path):
    real = log_writer.write_text_atomic

    def write(path, chunks, encoding=None, private=False):
        if "c00001" in path.name:
            raise OSError(28, "No space left on device")
        real(path, chunks, encoding=encoding, private=private)

    monkeypatch.setattr(log_writer, "write_text_atomic", write)
    warned: list[str] = []
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path, warn=warned.append)
    first = HEAD + _turn(0)
    proxy.rewrite("openai", {"model": MODEL, "messages": first})
    proxy.flush_logs()
    other = [HEAD[0], {"role": "user", "content": "Another task."}, *_turn(7)]
    for k in (1, 2):
        first = first + _turn(k)
        proxy.rewrite("openai", {"model": MODEL, "messages": first})
        other = other + _turn(10 + k)
        proxy.rewrite("openai", {"model": MODEL, "messages": other})
        proxy.flush_logs()
    assert len(proxy.mirrors) == 2
    said = r"conversation \S+-c00001-\S+: not logged \(OSError: .*No space.*\)"
    assert len(warned) == 1 and re.fullmatch(said, warned[0])
    (log,) = tmp_path.glob("*.jsonl")  # the other conversation's, with its latest request
    assert "c00002" in log.name and "out 12" in log.read_text()
    assert proxy._logs.written == 2  # the failed conversation was not tried again


def test_rows_put_are_written_before_the_process_exits(tmp_path):
    # put from a daemon thread, as a server's request threads are: a thread inherits that flag
    code = f"""
import threading, time
from pathlib import Path
from dtoc_rl.serve import log_writer
real = log_writer.write_text_atomic
def slow(path, chunks, encoding=None, private=False):
    time.sleep(0.5)
    real(path, chunks, encoding=encoding, private=private)
log_writer.write_text_atomic = slow
w = log_writer.LogWriter(lambda path, e: print("failed", e))
def put():
    w.put(Path({str(tmp_path / "a.jsonl")!r}), {{"messages": ["a"]}})
    w.put(Path({str(tmp_path / "b.jsonl")!r}), {{"messages": ["b"]}})
t = threading.Thread(target=put, daemon=True)
t.start()
t.join()
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"messages": ["a"]}
    assert json.loads((tmp_path / "b.jsonl").read_text()) == {"messages": ["b"]}
    assert not list(tmp_path.glob("*.partial"))


def test_the_writer_goes_on_after_a_report_that_raises(tmp_path):
    def report(path, e):
        raise RuntimeError("a broken report")

    w = LogWriter(report)
    w.put(tmp_path / "no" / "such" / "folder.jsonl", {"x": 1})
    w.put(tmp_path / "ok.jsonl", {"x": 2})
    assert w.flush(timeout=10) and json.loads((tmp_path / "ok.jsonl").read_text()) == {"x": 2}


def test_a_write_that_raises_anything_is_reported_and_the_writer_goes_on(monkeypatch, tmp_path):
    real, errors = log_writer.write_text_atomic, []

    def write(path, chunks, encoding=None, private=False):
        if path.name == "big.jsonl":
            raise MemoryError("no memory for the row")
        real(path, chunks, encoding=encoding, private=private)

    monkeypatch.setattr(log_writer, "write_text_atomic", write)
    w = LogWriter(lambda path, e: errors.append((path.name, type(e).__name__)))
    w.put(tmp_path / "big.jsonl", {"x": 1})
    assert w.flush(timeout=10)
    w.put(tmp_path / "ok.jsonl", {"x": 2})  # a writer is there for the next row
    assert w.flush(timeout=10) and errors == [("big.jsonl", "MemoryError")]
    assert json.loads((tmp_path / "ok.jsonl").read_text()) == {"x": 2}


def test_where_no_thread_can_be_started_the_caller_writes_the_row(monkeypatch, tmp_path):
    real_start, refused = threading.Thread.start, []

    def start(self):
        if self.name == "dtoc-rl log writer" and not refused:
            refused.append(1)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    w = LogWriter(lambda path, e: None)
    t0 = time.monotonic()
    with w.busy():  # as a request rewriting: written here, before put returns, without waiting on itself
        w.put(tmp_path / "a.jsonl", {"x": 1})
    assert time.monotonic() - t0 < 0.5
    assert refused and json.loads((tmp_path / "a.jsonl").read_text()) == {"x": 1}
    w.put(tmp_path / "a.jsonl", {"x": 2})  # and a thread again for the next
    assert w.flush(timeout=10) and json.loads((tmp_path / "a.jsonl").read_text()) == {"x": 2}


def test_flush_waits_for_the_rows_put_before_it_not_for_a_stream_that_never_ends(monkeypatch, tmp_path):
    slow_log_writes(monkeypatch, 0.02)
    w, stop = LogWriter(lambda path, e: None), threading.Event()

    def agent(k: int) -> None:  # four conversations that always have a row waiting
        n = 0
        while not stop.is_set():
            n += 1
            w.put(tmp_path / f"c{k}.jsonl", {"n": n})
            time.sleep(0.005)

    agents = [threading.Thread(target=agent, args=(k,), daemon=True) for k in range(4)]
    for a in agents:
        a.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    assert w.flush(timeout=10) and time.monotonic() - t0 < 5
    stop.set()
    for a in agents:
        a.join()
    assert w.flush(timeout=10) and w.pending == 0


def test_no_log_is_written_while_a_request_is_read_rewritten_and_sent_and_a_stop_writes_the_last(
    monkeypatch, tmp_path
):
    from http.server import ThreadingHTTPServer

    from dtoc_rl.serve.proxy import make_proxy_server

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    at_upstream: list[int] = []

    def body_received():  # the request lets go once its send returns, before the answer
        deadline = time.monotonic() + 2
        while proxy._logs._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        at_upstream.append(proxy._logs._busy)

    Upstream = _upstream(body_received)

    in_rewrite: list[int] = []
    real_rewrite = ContextProxy.rewrite

    def rewrite(self, *args, **kwargs):
        in_rewrite.append(self._logs._busy)
        return real_rewrite(self, *args, **kwargs)

    monkeypatch.setattr(ContextProxy, "rewrite", rewrite)
    slow_log_writes(monkeypatch, 0.3)  # longer than the server takes to stop (it polls every 0.05 s here)
    up = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    srv = make_proxy_server(proxy, f"http://127.0.0.1:{up.server_address[1]}", port=0)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    body = json.dumps({"model": MODEL, "messages": HEAD + _turn(0) + _turn(1)}).encode()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1/chat/completions"
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    srv.shutdown()  # the log is still being written: the stop waits for it
    (log,) = tmp_path.glob("*.jsonl")
    assert "out 1" in log.read_text()
    srv.server_close()
    up.shutdown()
    up.server_close()
    assert in_rewrite == [1] and at_upstream == [0]


def test_a_rows_pieces_joined_are_the_json_of_the_row():
    from dtoc_rl.serve.orchestrator import log_line, log_pieces

    proxy = ContextProxy(make_policy("last_n:n=1"))
    msgs = HEAD + _turn(0) + [{"role": "user", "content": 'Ünïcode, "quotes", \\ and \u2028'}] + _turn(1)
    proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
    (mirror,) = proxy.mirrors.values()
    rows = [
        mirror.orch.log_row(),
        {"messages": [], "n": 1.5, "none": None},
        {"a": Path("x"), "messages": "not a list"},
        {},
    ]
    for row in rows:
        assert log_line(row) == json.dumps(row, ensure_ascii=False, default=str) + "\n"
    assert len(list(log_pieces(rows[0]))) > len(rows[0]["messages"])  # a piece per message at least


def test_a_row_waits_while_a_request_is_in_hand_and_at_most_max_wait(monkeypatch, tmp_path):
    w = LogWriter(lambda path, e: None)
    with w.busy():
        w.put(tmp_path / "a.jsonl", {"messages": ["a"]})
        time.sleep(0.3)
        assert not (tmp_path / "a.jsonl").exists()
    assert w.flush(timeout=5) and (tmp_path / "a.jsonl").exists()
    monkeypatch.setattr(log_writer, "MAX_WAIT_S", 0.2)
    with w.busy():  # a request that never lets go (a fleet's, always one in hand)
        w.put(tmp_path / "b.jsonl", {"messages": ["b"]})
        t0 = time.monotonic()
        assert w.flush(timeout=5) and time.monotonic() - t0 < 2


def test_the_exit_waits_for_the_logs_at_most_stop_wait(tmp_path):
    code = f"""
import time
from pathlib import Path
from dtoc_rl.serve import log_writer
log_writer.STOP_WAIT_S = 0.5
log_writer.write_text_atomic = lambda path, chunks, **kw: time.sleep(30)  # a disk that hangs
w = log_writer.LogWriter(lambda path, e: print("not written:", path.name, type(e).__name__, flush=True))
w.put(Path({str(tmp_path / "a.jsonl")!r}), {{"messages": ["a"]}})
w.put(Path({str(tmp_path / "b.jsonl")!r}), {{"messages": ["b"]}})
"""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and time.monotonic() - t0 < 20
    assert sorted(out.stdout.splitlines()) == [
        "not written: a.jsonl TimeoutError",
        "not written: b.jsonl TimeoutError",
    ]


def test_a_row_put_as_the_writer_ends_is_written(tmp_path):
    import sys as _sys

    w = LogWriter(lambda path, e: None)
    ending = threading.Event()

    class SlowToLetGo(threading.Condition):
        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            if _sys._getframe(1).f_code.co_name == "_run" and not w._pending:
                ending.set()  # the writer found nothing: a put arrives before it is gone
                time.sleep(0.3)
            return out

    w._cond = SlowToLetGo()
    w.put(tmp_path / "a.jsonl", {"messages": ["a"]})
    assert ending.wait(5)
    w.put(tmp_path / "b.jsonl", {"messages": ["b"]})
    assert w.flush(timeout=3) and (tmp_path / "b.jsonl").exists()


def test_closing_the_server_waits_for_the_logs(monkeypatch, tmp_path):
    from http.server import ThreadingHTTPServer

    from dtoc_rl.serve.proxy import make_proxy_server

    Upstream = _upstream()

    slow_log_writes(monkeypatch, 0.3)
    up = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    srv = make_proxy_server(proxy, f"http://127.0.0.1:{up.server_address[1]}", port=0)
    one = threading.Thread(target=srv.handle_request)  # as dtoc-rl proxy stops: server_close alone
    one.start()
    body = json.dumps({"model": MODEL, "messages": HEAD + _turn(0)}).encode()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1/chat/completions"
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    one.join(5)
    srv.server_close()
    assert len(list(tmp_path.glob("*.jsonl"))) == 1
    up.shutdown()
    up.server_close()


def test_a_row_given_as_a_function_is_made_by_the_writer_and_only_the_newest(monkeypatch, tmp_path):
    """A long session's row takes its time to make: a function put for it is called when the row is
    written, on the writer's thread, and of rows waiting behind a write only the newest is made."""
    gate, entered, calls = _gated(monkeypatch)
    made, errors = [], []

    def maker(k):
        def row():
            made.append((k, threading.current_thread().name))
            return {"k": k}

        return row

    def broken():
        raise ValueError("no row")

    w = LogWriter(lambda path, e: errors.append((path.name, str(e))))
    w.put(tmp_path / "a.jsonl", maker(0))
    assert entered.wait(5)
    for k in (1, 2, 3):
        w.put(tmp_path / "a.jsonl", maker(k))
    w.put(tmp_path / "b.jsonl", broken)
    assert [k for k, _ in made] == [0]
    gate.set()
    assert w.flush(timeout=10)
    assert made == [(0, "dtoc-rl log writer"), (3, "dtoc-rl log writer")]
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"k": 3}
    assert errors == [("b.jsonl", "no row")] and not (tmp_path / "b.jsonl").exists()
