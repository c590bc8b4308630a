"""The real Qwen Code CLI through ``dtoc-rl proxy``: an OpenAI-compatible API, chat completions
streamed with tool calls.

A scripted chat-completions API has ``qwen -p`` read three files with its ``read_file`` tool, then
answer.  Run once straight at that API and once through the proxy under ``last_n:n=1`` (the CLI
reaches both through ``OPENAI_BASE_URL``), Qwen Code must finish the same way both times, and the API
must receive the same requests through the proxy as without it, except that every file but the
newest arrives as the store's placeholder.  Qwen Code's own session file of the run ingests as that
run.

Needs the real CLI: ``QWEN_BIN`` (``npm install @qwen-code/qwen-code`` and its
``node_modules/.bin/qwen``; 0.24.4 was tested) or ``qwen`` on the PATH; skipped otherwise.  No
request leaves the machine: the API is a local URL and the CLI's home a temporary folder.
"""

from __future__ import annotations

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
    check_chat_run,
    check_own_log,
    fresh_home,
    repo,
    straight_and_through,
)

QWEN = os.environ.get("QWEN_BIN") or shutil.which("qwen")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(QWEN is None, reason="the Qwen Code CLI is not installed (QWEN_BIN)"),
]


def _qwen(base_url: str, folder: Path, home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "QWEN_"))}
    env.update(HOME=str(fresh_home(home)), OPENAI_BASE_URL=f"{base_url}/v1", OPENAI_API_KEY="sk-test",
               OPENAI_MODEL="gpt-4o", QWEN_CODE_SUPPRESS_YOLO_WARNING="1")  # fmt: skip
    res = subprocess.run(
        [QWEN, "-p", "Read alpha.txt, beta.txt and gamma.txt.", "--yolo"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, f"qwen failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout.strip()


def _calls(seen: list) -> list[dict]:
    """The agent's own model calls (those that offer read_file), in order."""
    return [body for path, body in seen if path.endswith("/chat/completions")
            and any(t["function"]["name"] == "read_file" for t in body.get("tools") or [])]  # fmt: skip


def test_qwen_code_through_the_proxy_sends_earlier_reads_as_placeholders(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.ingest.driver import ingest_paths

    folder = repo(tmp_path)
    runs = straight_and_through(
        ScriptedChat, lambda url: _qwen(url, folder, tmp_path / "home"), _calls, tmp_path / "logs",
        folder=folder,
    )  # fmt: skip
    assert runs.direct.endswith(ANSWER) and runs.via.endswith(ANSWER)
    check_chat_run(runs)

    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert [s.tool_name for s in calls_and_closing(traj)] == ["read_file"] * len(FILES)

    # and Qwen Code's own session file of the same run reads as that run
    (session,) = (tmp_path / "home" / ".qwen" / "projects").glob("*/chats/*.jsonl")
    _, own = read_first(session)
    check_own_log(own, "qwen-code", "read_file", folder, lambda a: a["file_path"])
    assert own.task_text.startswith("Read alpha")
