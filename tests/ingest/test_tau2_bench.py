"""τ²-bench results files, built here in the shapes of tau2's data model (Results, SimulationRun,
AssistantMessage / UserMessage / ToolMessage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.tau2_bench import Tau2BenchIngester

TAU2 = Tau2BenchIngester()
ORDER = json.dumps({"order_id": "#W1", "items": [{"name": f"item {i}", "price": i} for i in range(40)]})


def _call(cid: str, name: str, requestor: str = "assistant", **args) -> dict:
    return {"id": cid, "name": name, "arguments": args, "requestor": requestor}


def _simulation(sid: str, reward: float | None, task: str = "7") -> dict:
    usage = {"prompt_tokens": 3000, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 2000}}
    messages = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None, "turn_idx": 0},
        {"role": "user", "content": None, "tool_calls": [_call("u0", "check_status_bar", "user")]},
        {"role": "tool", "id": "u0", "content": "No service", "requestor": "user", "error": False},
        {"role": "user", "content": "My phone has no data.", "usage": {"prompt_tokens": 500}, "turn_idx": 1},
        {"role": "assistant", "content": None, "usage": usage, "cost": 0.004,
         "tool_calls": [_call("a1", "get_order_details", order_id="#W1")]},
        {"role": "tool", "id": "a1", "content": ORDER, "requestor": "assistant", "error": False},
        {"role": "assistant", "content": "Please toggle airplane mode.", "tool_calls": None, "usage": usage},
        {"role": "user", "content": None, "tool_calls": [_call("u1", "toggle_airplane_mode", "user")]},
        {"role": "tool", "id": "u1", "content": "Airplane mode: OFF", "requestor": "user", "error": False},
        {"role": "user", "content": "Done, still nothing."},
        {"role": "assistant", "content": None, "tool_calls": [_call("a2", "refuel_data", gb=2)],
         "usage": usage},
        {"role": "tool", "id": "a2", "content": "Error: no plan", "requestor": "assistant", "error": True},
        {"role": "assistant", "content": "Transferring you.", "usage": usage},
        {"role": "user", "content": "###STOP###"},
    ]  # fmt: skip
    sim = {"id": sid, "task_id": task, "trial": 0, "messages": messages, "termination_reason": "user_stop"}
    if reward is not None:
        sim["reward_info"] = {"reward": reward}
    return sim


def _results(path: Path, sims: list[dict]) -> Path:
    root = {
        "timestamp": "2026-07-30T14:20:00",
        "info": {
            "git_commit": "abc",
            "num_trials": 1,
            "user_info": {"implementation": "user_simulator", "llm": "gpt-4.1"},
            "agent_info": {"implementation": "llm_agent", "llm": "claude-sonnet-4-5-20250929"},
            "environment_info": {"domain_name": "telecom", "policy": "# Telecom agent policy"},
        },
        "tasks": [{"id": "7"}],
        "simulations": sims,
    }
    path.write_text(json.dumps(root, indent=1))
    return path


def test_a_telecom_simulation_reads_as_the_agents_context(tmp_path):
    p = _results(tmp_path / "claude_telecom.json", [_simulation("s1", 1.0), _simulation("s2", 0.0)])
    assert detect_format(p).name == "tau2-bench"
    t1, t2 = TAU2.parse(p)
    s = t1.steps
    assert (t1.task_id, t1.success, t2.success, t1.model_family) == (
        "telecom/7",
        True,
        False,
        "claude-sonnet",
    )
    # the policy is the agent's system prompt, the greeting follows it; a user's own tool call is no task
    assert t1.system_prompt == "# Telecom agent policy\n\nHi! How can I help you today?"
    assert t1.task_text == "My phone has no data."
    # the user's own tool call and its reply are not in the agent's context
    assert [x.tool_name for x in s] == ["get_order_details", None, "refuel_data", None]
    assert s[0].output == ORDER and (s[2].output, s[2].output_is_error) == ("Error: no plan", True)
    assert s[2].user_text == "Done, still nothing." and "Airplane" not in json.dumps([x.user_text for x in s])
    assert (s[0].usage.input_tokens, s[0].usage.cached_tokens) == (3000, 2000)  # the user's usage is not
    assert json.loads(t1.extra)["trailing_user_text"] == "###STOP###"


def test_a_broken_simulation_is_named(tmp_path):
    sim = _simulation("s1", 1.0)
    sim["messages"][4]["tool_calls"] = [{"id": "x"}]
    with pytest.raises(IngestError, match=r"simulations\[0\]\.messages\[4\]\.tool_calls\[0\] must be"):
        list(TAU2.parse(_results(tmp_path / "bad.json", [sim])))
    sim = _simulation("s1", None)
    sim["messages"][5]["role"] = "robot"
    with pytest.raises(IngestError, match=r"messages\[5\] has role 'robot'"):
        list(TAU2.parse(_results(tmp_path / "bad2.json", [sim])))


def test_detection_is_strict(tmp_path, repo_root):
    files = [f for d in ("data/raw", "tests/fixtures") for f in (repo_root / d).rglob("*.json")]
    assert files and not [f for f in files if TAU2.detect(f, f.read_text(errors="replace")[:65536])]
    tau1 = tmp_path / "gpt-4o-airline.json"
    tau1.write_text(json.dumps([{"task_id": 1, "reward": 1, "info": {}, "traj": []}]))
    assert not TAU2.detect(tau1, tau1.read_text())
