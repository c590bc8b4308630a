"""The real Cline CLI through ``dtoc-rl proxy``: an OpenAI-compatible provider, chat completions
streamed with tool calls.

A scripted chat-completions API has ``cline`` read three files with its ``read_files`` tool, then
answer.  Run once straight at that API and once through the proxy under ``last_n:n=1`` (the CLI's
provider set with ``cline auth -p openai -b URL``), Cline must finish the same way both times, and
the API must receive the same requests through the proxy as without it, except that every file but
the newest arrives as the store's placeholder.  Cline's own session file of the run ingests as that
run.

Needs the real CLI: ``CLINE_BIN`` (``npm install cline`` and its ``node_modules/.bin/cline``; 3.0.65
was tested) or ``cline`` on the PATH; skipped otherwise.  No request leaves the machine: the provider
is a local URL and the CLI's home a temporary folder.
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

CLINE = os.environ.get("CLINE_BIN") or shutil.which("cline")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CLINE is None, reason="the Cline CLI is not installed (CLINE_BIN)"),
]


class _ClineChat(ScriptedChat):
    tool = "read_files"

    def arguments(self, path: str) -> dict:
        return {"files": [{"path": path}]}


def _cline(base_url: str, folder: Path, home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CLINE_"))}
    env["HOME"] = str(fresh_home(home))
    auth = [CLINE, "auth", "-p", "openai", "-k", "sk-test", "-m", "gpt-4o", "-b", f"{base_url}/v1"]
    subprocess.run(auth, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=True)
    res = subprocess.run(
        [CLINE, "--json", "Read alpha.txt, beta.txt and gamma.txt."],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"cline failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def test_cline_through_the_proxy_sends_earlier_reads_as_placeholders(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths

    folder = repo(tmp_path)
    runs = straight_and_through(
        _ClineChat, lambda url: _cline(url, folder, tmp_path / "home"), chat_calls, tmp_path / "logs",
        folder=folder,
    )  # fmt: skip
    for out in (runs.direct, runs.via):
        (last,) = [json.loads(line) for line in out.splitlines() if '"run_result"' in line]
        assert last["finishReason"] == "completed" and last["text"] == ANSWER
    check_chat_run(runs)

    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["read_files"] * len(FILES)
    assert all(s.usage is not None and s.usage.cached_tokens == 8000 for s in traj.steps)

    # and Cline's own session file of the same run reads as that run
    (session,) = (tmp_path / "home" / ".cline" / "data" / "sessions").glob("*/*.messages.json")
    _, own = read_first(session)
    check_own_log(own, "cline", "read_files", folder, lambda a: a["files"][0]["path"])
