"""mini-swe-agent ingester: every token of a hand-made log's prompts is kept."""

from __future__ import annotations

import json
from pathlib import Path

from dtoc_rl.ingest.mini_swe_agent import MiniSweAgentIngester

TWO_BLOCKS = (
    "THOUGHT: first look, then run it.\n\n```bash\ncat a.py\n```\n\nand then\n\n```bash\npython a.py\n```"
)
FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."


def _assistant(text: str, prompt_tokens: int) -> dict:
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    return {"role": "assistant", "content": text, "extra": {"response": {"usage": usage}}}


def _log(tmp_path: Path) -> Path:
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        _assistant("THOUGHT: look first.\n\n```bash\nls\n```", 100),
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
        _assistant(TWO_BLOCKS, 130),
        {"role": "user", "content": FORMAT_ERROR},
        _assistant("THOUGHT: one at a time.\n\n```bash\ncat a.py\n```", 200),
    ]
    p = tmp_path / "x__y-1.traj.json"
    p.write_text(
        json.dumps({"trajectory_format": "mini-swe-agent-1", "instance_id": "x__y-1", "messages": msgs})
    )
    return p


def test_a_reply_without_one_action_is_kept_whole(tmp_path: Path):
    # The harness sends a rejected reply back in every later prompt, code blocks and all; dropping
    # its bash blocks under-counted those prompts by up to 4,500 tokens on the gemini runs.
    (traj,) = MiniSweAgentIngester().parse(_log(tmp_path))
    ok, bad, after = traj.steps
    assert (ok.tool_name, ok.tool_args, ok.assistant_text) == ("bash", "ls", "look first.")
    assert bad.tool_name is None and bad.assistant_text == TWO_BLOCKS
    assert after.user_text == FORMAT_ERROR and after.tool_args == "cat a.py"
    assert [s.usage.input_tokens for s in traj.steps] == [100, 130, 200]


def test_fields_of_the_wrong_type_are_named(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths

    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix"}]
    for info, content, said in (
        (
            {"config": {"model": {"model_name": {"x": 1}}}},
            "ok",
            "info.config.model.model_name is dict, expected string",
        ),
        ({}, None, "messages[2].content is NoneType, expected string or list"),
    ):
        f = tmp_path / "x.traj.json"
        log = {"trajectory_format": "mini-swe-agent-1", "info": info,
               "messages": [*msgs, {"role": "assistant", "content": content}]}  # fmt: skip
        f.write_text(json.dumps(log))
        (skip,) = ingest_paths([f], progress=False).skipped
        assert said in skip.reason and "\n" not in skip.reason
