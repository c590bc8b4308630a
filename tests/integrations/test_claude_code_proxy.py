"""The real Claude Code CLI through ``dtoc-rl proxy``: a live agent whose only change is its base URL.

A scripted Anthropic Messages API (streamed, as Claude Code asks for it) has the agent read three
files with its own Read tool, then answer.  Run once straight at that API and once through the proxy
under ``last_n:n=1``, Claude Code must finish the same way both times, and the API must receive the
same request through the proxy as without it, except that every tool result but the newest arrives
as the store's placeholder.  The proxy's log then prices what it did as the same policy offline.

Needs the real CLI: ``CLAUDE_BIN`` (``npm install @anthropic-ai/claude-code`` and its
``node_modules/.bin/claude``; 2.1.332 was tested) or ``claude`` on the PATH; skipped otherwise.  No
request leaves the machine: the CLI's base URL is local, its home a temporary folder and its
non-essential traffic off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from dtoc_rl.core.record import POLICY_NOTE
from tests.integrations.live_cli import (
    ANSWER,
    FILES,
    calls_and_closing,
    fresh_home,
    repo,
    same_calls,
    straight_and_through,
)

CLAUDE = os.environ.get("CLAUDE_BIN") or shutil.which("claude")
USAGE = {
    "input_tokens": 12,
    "cache_read_input_tokens": 9000,
    "cache_creation_input_tokens": 700,
    "output_tokens": 9,
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CLAUDE is None, reason="the Claude Code CLI is not installed (CLAUDE_BIN)"),
]


class _ScriptedAnthropic(BaseHTTPRequestHandler):
    """Answers a request with tools by calling Read on the next file not yet read (an absolute path
    in ``server.folder``), then with ``ANSWER``; any other request with ``ANSWER`` too."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, obj: dict) -> None:
        out = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.seen.append((self.path, body))
        if "count_tokens" in self.path:
            return self._json({"input_tokens": 1000})
        read = sum(
            1
            for m in body.get("messages", [])
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        )
        can_read = any(t.get("name") == "Read" for t in body.get("tools") or [])
        if can_read and read < len(FILES):
            path = str(self.server.folder / FILES[read])
            block, delta = {"type": "tool_use", "id": f"toolu_{read}", "name": "Read", "input": {}}, {
                "type": "input_json_delta", "partial_json": json.dumps({"file_path": path})
            }  # fmt: skip
            stop = "tool_use"
        else:
            block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": ANSWER}
            stop = "end_turn"
        message = {"id": f"msg_{read}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": USAGE}  # fmt: skip
        if not body.get("stream"):
            whole = {**block, "input": json.loads(delta["partial_json"])} if stop == "tool_use" else {
                **block, "text": ANSWER}  # fmt: skip
            return self._json({**message, "content": [whole], "stop_reason": stop})
        events = [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 9}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def _claude(base_url: str, folder: Path, home: Path) -> dict:
    fresh_home(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="sk-ant-test",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1")  # fmt: skip
    res = subprocess.run(
        [CLAUDE, "-p", "Read alpha.txt, beta.txt and gamma.txt.", "--output-format", "json",
         "--model", "claude-sonnet-4-5"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"claude failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return json.loads(res.stdout)


def _main_calls(seen: list) -> list[dict]:
    """The agent's own model calls (those that offer its Read tool), in order."""
    return [b for path, b in seen if path.startswith("/v1/messages?") or path == "/v1/messages"
            if any(t.get("name") == "Read" for t in b.get("tools") or [])]  # fmt: skip


def _results(body: dict) -> list[dict]:
    return [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip


def _without_results(body: dict) -> dict:
    """A request with its tool results' contents, and what differs run to run (the session's ids),
    left out."""
    msgs = [
        {**m, "content": [{**b, "content": None} if b.get("type") == "tool_result" else b
                          for b in m["content"]]}
        if isinstance(m["content"], list) else m
        for m in body["messages"]
    ]  # fmt: skip
    return {**{k: v for k, v in body.items() if k != "metadata"}, "messages": msgs}


def test_claude_code_through_the_proxy_sends_earlier_reads_as_placeholders(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.policies.evaluate import evaluate

    folder = repo(tmp_path)
    runs = straight_and_through(
        _ScriptedAnthropic, lambda url: _claude(url, folder, tmp_path / "home"), _main_calls,
        tmp_path / "logs", folder=folder,
    )  # fmt: skip
    direct, via, proxy = runs.direct, runs.via, runs.proxy

    # the agent finishes the same way, after the same calls
    assert direct["result"] == via["result"] == ANSWER and not via["is_error"]
    assert direct["num_turns"] == via["num_turns"] == len(FILES) + 1
    for alone, proxied_call in same_calls(runs, _without_results):
        mine, theirs = _results(alone), _results(proxied_call)
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if k < len(mine) - 1:  # last_n:n=1: every read but the newest hidden
                text = b["content"] if isinstance(b["content"], str) else b["content"][0]["text"]
                ph = json.loads(text)
                assert ph["hidden"] is True and POLICY_NOTE in text and ph["estimated_tokens"] > 500
                assert {**b, "content": None} == {**a, "content": None}  # id, cache_control kept
            else:
                assert b == a
    assert proxy.hidden_sent == sum(range(len(FILES)))

    # the proxy's log prices what it did live as the same policy offline, and it saved
    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["Read"] * len(FILES)
    assert traj.model_family == "claude-sonnet" and all(s.usage is not None for s in traj.steps)
    assert traj.source == "proxy:claude-cli"  # named from its User-Agent
    bills = {r.policy: r for r in evaluate([traj], ["logged", "last_n:n=1", "none"], progress=False)}
    assert (bills["logged"].dollars, bills["logged"].input_tokens) == (
        bills["last_n:n=1"].dollars,
        bills["last_n:n=1"].input_tokens,
    )
    assert bills["logged"].input_tokens < bills["none"].input_tokens

    # and the CLI's own transcript of the same run, in its home, reads as that run
    (transcript,) = (tmp_path / "home" / ".claude" / "projects").glob("*/*.jsonl")
    _, own = read_first(transcript)
    assert own.source == "claude-code-transcript" and own.task_text.startswith("Read alpha.txt")
    reads = [s for s in own.steps if s.tool_name == "Read"]
    assert [json.loads(s.tool_args)["file_path"] for s in reads] == [str(folder / n) for n in FILES]
    assert all(f"{n} line 149" in s.output for n, s in zip(FILES, reads, strict=True))
    assert all(s.usage.cached_tokens == USAGE["cache_read_input_tokens"] for s in reads)
