"""The real pi coding agent through ``dtoc-rl proxy``: an OpenAI-compatible provider, chat
completions streamed with tool calls.

A scripted chat-completions API has ``pi -p`` read three files with its ``read`` tool, then answer.
Run once straight at that API and once through the proxy under ``last_n:n=1`` (a provider in pi's
``models.json`` with the URL as its ``baseUrl``), pi must finish the same way both times, and the API
must receive the same requests through the proxy as without it, except that every file but the
newest arrives as the store's placeholder.  pi's own session file of the run ingests as that run.

Needs the real CLI: ``PI_BIN`` (``npm install @mariozechner/pi-coding-agent`` and its
``node_modules/.bin/pi``; 0.73.1 was tested) or ``pi`` on the PATH; skipped otherwise.  No request
leaves the machine: the provider is a local URL and pi's home a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integrations.live_cli import (
    ANSWER,
    FILES,
    ScriptedChat,
    calls_and_closing,
    chat_calls,
    check_chat_run,
    check_own_log,
    fresh_home,
    repo,
    straight_and_through,
)

PI = os.environ.get("PI_BIN") or shutil.which("pi")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PI is None, reason="the pi coding agent is not installed (PI_BIN)"),
]


class _PiChat(ScriptedChat):
    tool = "read"

    def arguments(self, path: str) -> dict:
        return {"path": path}


def _pi(base_url: str, folder: Path, home: Path) -> str:
    agent = fresh_home(home) / ".pi" / "agent"
    agent.mkdir(parents=True)
    provider = {"baseUrl": f"{base_url}/v1", "api": "openai-completions", "apiKey": "sk-test",
                "models": [{"id": "gpt-4o"}]}  # fmt: skip
    (agent / "models.json").write_text(json.dumps({"providers": {"local": provider}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PI_"))}
    env["HOME"] = str(home)
    res = subprocess.run(
        [PI, "--provider", "local", "--model", "gpt-4o", "-p", "Read alpha.txt, beta.txt and gamma.txt."],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"pi failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout.strip()


def test_pi_through_the_proxy_sends_earlier_reads_as_placeholders(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths

    folder = repo(tmp_path)
    runs = straight_and_through(
        _PiChat, lambda url: _pi(url, folder, tmp_path / "home"), chat_calls, tmp_path / "logs", folder=folder
    )
    assert runs.direct.endswith(ANSWER) and runs.via.endswith(ANSWER)
    check_chat_run(runs)

    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["read"] * len(FILES)

    # and pi's own session file of the same run reads as that run
    (session,) = (tmp_path / "home" / ".pi" / "agent" / "sessions").glob("*/*.jsonl")
    _, own = read_first(session)
    check_own_log(own, "pi", "read", folder, lambda a: a["path"])
    assert own.task_text.startswith("Read alpha")
