"""Damaged ATIF, τ²-bench and `codex exec --json` files: each either reads or fails with an IngestError
that names what is wrong, never with a bare Python error (the driver would report only "wrong types
or missing fields")."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dtoc_rl.ingest.atif import AtifIngester
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.codex import CodexRolloutIngester
from dtoc_rl.ingest.tau2_bench import Tau2BenchIngester

ATIF = {
    "schema_version": "ATIF-v1.5", "session_id": "s", "agent": {"name": "a", "model_name": "gpt-5"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "do"},
        {"step_id": 2, "source": "agent", "message": "m",
         "tool_calls": [{"tool_call_id": "c", "function_name": "bash", "arguments": {"command": "ls"}}],
         "observation": {"results": [{"source_call_id": "c", "content": "a"}]},
         "metrics": {"prompt_tokens": 10, "cached_tokens": 5}},
        {"step_id": 3, "source": "agent", "message": "done"},
    ],
    "final_metrics": {"total_prompt_tokens": 10},
}  # fmt: skip
TAU2 = {
    "info": {"agent_info": {"llm": "gpt-4.1"}, "environment_info": {"domain_name": "retail"}},
    "simulations": [{"id": "s", "task_id": "1", "reward_info": {"reward": 1}, "messages": [
        {"role": "assistant", "content": "hi"}, {"role": "user", "content": "help"},
        {"role": "assistant", "content": None, "usage": {"prompt_tokens": 5},
         "tool_calls": [{"id": "a", "name": "f", "arguments": {"x": 1}}]},
        {"role": "tool", "id": "a", "content": "out", "error": False},
        {"role": "assistant", "content": "bye"},
    ]}],
}  # fmt: skip
STREAM = [
    {"type": "thread.started", "thread_id": "t"},
    {"type": "item.completed", "item": {"id": "i0", "type": "command_execution", "command": "ls",
                                        "aggregated_output": "a", "exit_code": 0}},
    {"type": "item.completed", "item": {"id": "i1", "type": "mcp_tool_call", "server": "s", "tool": "t",
                                        "result": {"content": [{"type": "text", "text": "x"}]}}},
    {"type": "item.completed", "item": {"id": "i2", "type": "file_change",
                                        "changes": [{"path": "a", "kind": "add"}]}},
    {"type": "turn.completed", "usage": {"input_tokens": 3}},
]  # fmt: skip
KEYS = ("content", "message", "tool_calls", "id", "name", "arguments", "observation", "results", "source",
        "role", "metrics", "usage", "item", "type", "text", "changes", "kind", "path",
        "function_name")  # fmt: skip


def _junk(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice([None, 1, -1, 1.5, True, "x", "", 1e300])
    if r < 0.6:
        return [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): _junk(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _damaged(obj, rng: random.Random, p: float = 0.15):
    if isinstance(obj, dict):
        return {k: _junk(rng) if rng.random() < p else _damaged(v, rng, p) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_junk(rng) if rng.random() < p else _damaged(v, rng, p) for v in obj]
    return obj


@pytest.mark.parametrize(
    ("ingester", "name", "write"),
    [
        (AtifIngester(), "trajectory.json", lambda rng: json.dumps(_damaged(ATIF, rng))),
        (Tau2BenchIngester(), "results.json", lambda rng: json.dumps(_damaged(TAU2, rng))),
        (
            CodexRolloutIngester(),
            "exec.jsonl",
            lambda rng: "\n".join(json.dumps(_damaged(e, rng)) for e in STREAM),
        ),
    ],
    ids=["atif", "tau2-bench", "codex-exec"],
)
def test_damaged_files_read_or_fail_with_a_reason(tmp_path: Path, ingester, name, write):
    rng = random.Random(0)
    path = tmp_path / name
    read = failed = 0
    for _ in range(300):
        path.write_text(write(rng))
        try:
            list(ingester.parse(path))
            read += 1
        except IngestError as e:
            assert e.reason.strip() and "\n" not in e.reason
            failed += 1
    assert read and failed  # the damage both spared some files and broke others
