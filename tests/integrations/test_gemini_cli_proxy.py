"""The real Gemini CLI through ``dtoc-rl proxy``: the Gemini API, streamed as server-sent events.

A scripted Gemini API has ``gemini -p`` read three files with its ``read_file`` tool, then answer.
Run once straight at that API and once through the proxy under ``last_n:n=1`` (the CLI reaches both
through ``GOOGLE_GEMINI_BASE_URL``), the CLI must finish the same way both times, and the API must
receive the same requests through the proxy as without it, except that every file but the newest
arrives as the store's placeholder inside its ``functionResponse``.  The CLI's own session log of the
run ingests as that run.

Needs the real CLI: ``GEMINI_BIN`` (``npm install @google/gemini-cli`` and its
``node_modules/.bin/gemini``; 0.61.0 was tested) or ``gemini`` on the PATH; skipped otherwise.  No
request leaves the machine: the base URL is local and the CLI's home a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

GEMINI = os.environ.get("GEMINI_BIN") or shutil.which("gemini")
USAGE = {"promptTokenCount": 9000, "cachedContentTokenCount": 8000, "candidatesTokenCount": 12,
         "totalTokenCount": 9012}  # fmt: skip
MODEL = "gemini-2.5-pro"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GEMINI is None, reason="the Gemini CLI is not installed (GEMINI_BIN)"),
]


class _ScriptedGemini(BaseHTTPRequestHandler):
    """Answers a request offering ``read_file`` by calling it on the next file not yet read (an
    absolute path in ``server.folder``), then with ``ANSWER``; a side request (no tools) with JSON
    that says the user speaks next."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, kind: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.seen.append((self.path, body))
        if ":countTokens" in self.path:
            return self._send("application/json", b'{"totalTokens": 1000}')
        read = sum(1 for c in body.get("contents", []) for p in c.get("parts", []) if "functionResponse" in p)
        if _offers_read(body) and read < len(FILES):
            parts = [
                {
                    "functionCall": {
                        "name": "read_file",
                        "args": {"file_path": str(self.server.folder / FILES[read])},
                    }
                }
            ]
        elif body.get("tools") or "stream" in self.path:
            parts = [{"text": ANSWER}]
        else:
            parts = [{"text": json.dumps({"reasoning": "answered", "next_speaker": "user"})}]
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        chunk = {"candidates": [candidate], "usageMetadata": USAGE, "modelVersion": MODEL}
        if "alt=sse" in self.path:
            return self._send("text/event-stream", f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        self._send("application/json", json.dumps(chunk).encode())


def _gemini(base_url: str, folder: Path, home: Path) -> str:
    (fresh_home(home) / ".gemini").mkdir()
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(HOME=str(home), GEMINI_API_KEY="test", GOOGLE_GEMINI_BASE_URL=base_url)
    res = subprocess.run(
        [GEMINI, "-p", "Read alpha.txt, beta.txt and gamma.txt.", "-m", MODEL, "--yolo"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"gemini failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout.strip()


def _offers_read(body: dict) -> bool:
    return any(
        d.get("name") == "read_file"
        for t in body.get("tools") or []
        for d in t.get("functionDeclarations") or []
    )


def _main_calls(seen: list) -> list[dict]:
    """The agent's own model calls (those that offer read_file), in order."""
    return [b for path, b in seen if "generatecontent" in path.lower() and _offers_read(b)]


def _responses(body: dict) -> list[dict]:
    return [p["functionResponse"] for c in body["contents"] for p in c["parts"] if "functionResponse" in p]


def _comparable(body: dict) -> dict:
    """A request without its files' contents and its calls' ids (the CLI stamps them with the time)."""

    def part(p: dict) -> dict:
        for key in ("functionCall", "functionResponse"):
            if key in p:
                p = {**p, key: {k: v for k, v in p[key].items() if k != "id"}}
        if "functionResponse" in p:
            p = {**p, "functionResponse": {**p["functionResponse"], "response": None}}
        return p

    return {**body, "contents": [{**c, "parts": [part(p) for p in c["parts"]]} for c in body["contents"]]}


def test_the_gemini_cli_through_the_proxy_sends_earlier_reads_as_placeholders(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths

    folder = repo(tmp_path)
    runs = straight_and_through(
        _ScriptedGemini, lambda url: _gemini(url, folder, tmp_path / "home"), _main_calls,
        tmp_path / "logs", folder=folder,
    )  # fmt: skip
    direct, via, proxy = runs.direct, runs.via, runs.proxy

    assert direct.endswith(ANSWER) and via.endswith(ANSWER)
    for alone, proxied_call in same_calls(runs, _comparable):
        mine, theirs = _responses(alone), _responses(proxied_call)
        calls = [
            p["functionCall"] for c in proxied_call["contents"] for p in c["parts"] if "functionCall" in p
        ]
        assert [r["id"] for r in theirs] == [c["id"] for c in calls][: len(theirs)]  # each its call's
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if k < len(mine) - 1:  # last_n:n=1: every read but the newest hidden
                text = b["response"]["output"]
                ph = json.loads(text)
                assert ph["hidden"] is True and POLICY_NOTE in text and ph["estimated_tokens"] > 500
            else:  # the newest as the CLI sent it (its id aside, stamped with the time)
                assert b["response"] == a["response"] and b["name"] == a["name"]
    assert proxy.hidden_sent == sum(range(len(FILES)))

    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["read_file"] * len(FILES)
    assert traj.model_raw == MODEL and any(s.masked_before for s in traj.steps)
    assert traj.source == "proxy:geminicli-tui"  # named from its User-Agent
    # the streamed answers' usageMetadata, read as they passed
    assert all(s.usage is not None and s.usage.cached_tokens == 8000 for s in traj.steps)

    # and the CLI's own session log of the same run reads as that run
    (session,) = (tmp_path / "home" / ".gemini" / "tmp").rglob("session-*.json*")
    _, own = read_first(session)
    assert own.source == "gemini-cli" and own.model_raw == MODEL and own.task_text.startswith("Read alpha")
    reads = [s for s in own.steps if s.tool_name == "read_file"]
    assert [json.loads(s.tool_args)["file_path"] for s in reads] == [str(folder / n) for n in FILES]
    assert all(f"{n} line 149" in s.output for n, s in zip(FILES, reads, strict=True))


def test_a_session_the_cli_routes_to_two_models_is_one_conversation_logged_per_model(tmp_path):
    """The CLI's router (-m auto-gemini-2.5) sends each prompt to pro or flash; four prompts chained
    with --resume through the proxy: one mirror for the agent's conversation, each answer logged with
    its model (the classifier's own calls, which the CLI's session log leaves out, logged apart)."""
    import importlib.util

    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.proxy import ContextProxy, make_proxy_server
    from dtoc_rl.sim.episode import compile_episode
    from tests.integrations.live_cli import serve

    script = Path(__file__).parent.parent / "fixtures" / "gemini_cli_routed" / "make_fixtures.py"
    spec = importlib.util.spec_from_file_location("gemini_routed", script)
    routed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(routed)
    folder = repo(tmp_path)
    home = fresh_home(tmp_path / "home")
    (home / ".gemini").mkdir()
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    api = ThreadingHTTPServer(("127.0.0.1", 0), routed.ScriptedGemini)
    api.log, api.lock, api.classified, api.calls, api.folder = [], threading.Lock(), 0, {}, folder
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    front = make_proxy_server(proxy, serve(api), port=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(HOME=str(home), GEMINI_API_KEY="test", GOOGLE_GEMINI_BASE_URL=serve(front))
    try:
        for k, (prompt, _) in enumerate(routed.PROMPTS):
            cmd = [
                GEMINI,
                "-p",
                prompt,
                "-m",
                routed.AUTO_MODEL,
                "--yolo",
                *(["--resume", "latest"] if k else []),
            ]
            res = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=240)
            assert res.returncode == 0, res.stderr[-2000:]
    finally:
        front.shutdown()
        api.shutdown()
    pro, flash = "gemini-2.5-pro", "gemini-3.8-flash"
    assert [r["model"] for r in api.log if r["kind"] == "main"] == [pro, pro, flash, flash, pro, pro, flash]
    runs = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    (agent,) = [t for t in runs if any(s.tool_name == "read_file" for s in t.steps)]
    # the closing answer too, logged when the proxy stopped, with the model its request named
    assert [s.model for s in agent.steps] == [pro, pro, flash, flash, pro, pro, flash]
    assert compile_episode(agent).call_model.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert any(s.masked_before for s in agent.steps)  # the policy hid reads on both models' calls
    assert {t.model_raw for t in runs if t is not agent} == {"gemini-3.5-flash-lite"}  # the router's
