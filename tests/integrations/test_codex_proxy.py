"""The real Codex CLI through ``dtoc-rl proxy``: OpenAI's Responses API, streamed, with its own shell.

A scripted Responses API has ``codex exec`` run ``cat`` on three files with its ``exec_command``
tool, then answer.  Run once straight at that API and once through the proxy under ``last_n:n=1``,
Codex must finish the same way both times, and the API must receive the same requests through the
proxy as without it, except that every command's output but the newest arrives as the store's
placeholder (outputs are compared without Codex's own chunk ids and timings, which differ run to run).

Needs the real CLI: ``CODEX_BIN`` (``npm install @openai/codex`` and its ``node_modules/.bin/codex``;
0.171.0 was tested) or ``codex`` on the PATH; skipped otherwise.  No request leaves the machine: the
model provider is a local URL in a temporary ``CODEX_HOME``.
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

CODEX = os.environ.get("CODEX_BIN") or shutil.which("codex")
USAGE = {"input_tokens": 9000, "input_tokens_details": {"cached_tokens": 8000}, "output_tokens": 12,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9012}  # fmt: skip
# what differs between two runs of one request: its session's keys
_PER_RUN = ("prompt_cache_key", "client_metadata")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CODEX is None, reason="the Codex CLI is not installed (CODEX_BIN)"),
]


class _ScriptedResponses(BaseHTTPRequestHandler):
    """Answers by calling ``exec_command`` with ``cat`` on the next file not yet read, then with
    ``ANSWER``, as Responses API events."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.seen.append((self.path, body))
        done = sum(1 for i in body.get("input", []) if i.get("type") == "function_call_output")
        if done < len(FILES):
            item = {"type": "function_call", "id": f"fc_{done}", "call_id": f"call_{done}",
                    "status": "completed", "name": "exec_command",
                    "arguments": json.dumps({"cmd": f"cat {FILES[done]}"})}  # fmt: skip
        else:
            item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}  # fmt: skip
        response = {"id": f"resp_{done}", "object": "response", "status": "completed",
                    "model": body.get("model"), "output": [item], "usage": USAGE}  # fmt: skip
        events = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def _codex(base_url: str, folder: Path, home: Path) -> str:
    (fresh_home(home) / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        'model = "gpt-5.2"\nmodel_provider = "local"\n\n[model_providers.local]\nname = "local"\n'
        f'base_url = "{base_url}/v1"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(HOME=str(home), CODEX_HOME=str(home / ".codex"), OPENAI_API_KEY="sk-test")
    res = subprocess.run(
        [CODEX, "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "Read the three files."],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"codex failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout.strip()


def _outputs(body: dict) -> list[str]:
    return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]


def _comparable(body: dict) -> dict:
    """A request without what differs run to run: its session's keys, its items' ids and its commands'
    outputs."""
    items = [{k: v for k, v in i.items() if k != "id"} for i in body["input"]]
    items = [{**i, "output": None} if i.get("type") == "function_call_output" else i for i in items]
    return {**{k: v for k, v in body.items() if k not in _PER_RUN}, "input": items}


def test_codex_through_the_proxy_sends_earlier_outputs_as_placeholders(tmp_path):
    folder = repo(tmp_path)
    runs = straight_and_through(
        _ScriptedResponses, lambda url: _codex(url, folder, tmp_path / "home"),
        lambda seen: [body for _, body in seen], tmp_path / "logs",
    )  # fmt: skip
    direct, via, proxy = runs.direct, runs.via, runs.proxy

    assert direct.endswith(ANSWER) and via.endswith(ANSWER)
    for alone, proxied_call in same_calls(runs, _comparable):
        mine, theirs = _outputs(alone), _outputs(proxied_call)
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if k < len(mine) - 1:  # last_n:n=1: every output but the newest hidden
                ph = json.loads(b)
                assert ph["hidden"] is True and POLICY_NOTE in b and ph["estimated_tokens"] > 500
            else:  # the newest in full (beside Codex's own chunk id and timing, which differ run to run)
                assert f"{FILES[k]} line 149" in a and f"{FILES[k]} line 149" in b
    assert proxy.hidden_sent == sum(range(len(FILES)))

    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths

    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["exec_command"] * len(FILES)
    assert all(s.usage is not None and s.usage.cached_tokens == 8000 for s in traj.steps)
    assert any(s.masked_before for s in traj.steps)

    # and the CLI's own rollout of the same run, in its home, reads as that run
    (rollout,) = (tmp_path / "home" / ".codex" / "sessions").rglob("rollout-*.jsonl")
    _, own = read_first(rollout)
    assert own.source == "codex" and own.task_text == "Read the three files."
    calls = [s for s in own.steps if s.tool_name == "exec_command"]
    assert [json.loads(s.tool_args)["cmd"] for s in calls] == [f"cat {n}" for n in FILES]
    assert all(f"{n} line 149" in s.output for n, s in zip(FILES, calls, strict=True))
    assert all(s.usage.cached_tokens == 8000 for s in calls)
