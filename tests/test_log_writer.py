"""The proxy's conversation logs are written off the request path: a request does not wait for its log,
a file's waiting row is replaced by a newer one, a failed file is reported once, and nothing put is lost
when the process ends or the server stops."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve import log_writer
from dtoc_rl.serve.log_writer import LogWriter
from dtoc_rl.serve.proxy import ContextProxy

MODEL = "gpt-4o-2024-08-06"
HEAD = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]


def _turn(k: int) -> list[dict]:
    call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    return [
        {"role": "assistant", "content": f"Step {k}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"out {k}\n" * 50},
    ]


def _gated(monkeypatch):
    """write_text_atomic held at a gate: (gate, calls) - each call's path and line, once let through."""
    gate, calls, real = threading.Event(), [], log_writer.write_text_atomic

    def write(path, chunks, encoding=None):
        gate.wait(10)
        chunks = list(chunks)
        calls.append((path, chunks[0]))
        real(path, chunks, encoding=encoding)

    monkeypatch.setattr(log_writer, "write_text_atomic", write)
    return gate, calls


def test_a_request_does_not_wait_for_its_log_and_a_waiting_row_is_replaced_by_the_newest(
    monkeypatch, tmp_path
):
    gate, calls = _gated(monkeypatch)
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    msgs = HEAD + _turn(0)
    done = threading.Thread(target=proxy.rewrite, args=("openai", {"model": MODEL, "messages": msgs}))
    done.start()
    done.join(5)
    assert not done.is_alive()  # answered while its log is held at the gate
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
    assert proxy._logs.written == 2 and proxy._logs.pending == 0


def test_a_log_that_fails_is_reported_once_and_the_other_conversations_are_logged(monkeypatch, tmp_path):
    real = log_writer.write_text_atomic

    def write(path, chunks, encoding=None):
        if "c00001" in path.name:
            raise OSError(28, "No space left on device")
        real(path, chunks, encoding=encoding)

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
    code = f"""
import time
from pathlib import Path
from dtoc_rl.serve import log_writer
real = log_writer.write_text_atomic
def slow(path, chunks, encoding=None):
    time.sleep(0.5)
    real(path, chunks, encoding=encoding)
log_writer.write_text_atomic = slow
w = log_writer.LogWriter(lambda path, e: print("failed", e))
w.put(Path({str(tmp_path / "a.jsonl")!r}), {{"messages": ["a"]}})
w.put(Path({str(tmp_path / "b.jsonl")!r}), {{"messages": ["b"]}})
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
