"""OpenHands SDK conversation folders in the shape newer SDKs persist (checked against real ones): a
terminal observation as ``content`` plus ``metadata``, and each call's dollars in ``stats``."""

from __future__ import annotations

import json
from pathlib import Path

from dtoc_rl.ingest import read_first


def _event(k: int, kind: str, **kw) -> tuple[str, dict]:
    eid = f"e{k}"
    return f"event-{k:05d}-{eid}.json", {"id": eid, "kind": kind, "timestamp": f"2026-02-01T10:00:0{k}", **kw}


def _observed(k: int, tool: str, call: str, observation: dict) -> tuple[str, dict]:
    # the observation answering the action event just before it
    return _event(k, "ObservationEvent", source="environment", tool_name=tool, tool_call_id=call,
                  action_id=f"e{k - 1}", observation=observation)  # fmt: skip


def _action(k: int, tool: str, call: str, resp: str, args: dict) -> tuple[str, dict]:
    return _event(
        k,
        "ActionEvent",
        source="agent",
        thought=[],
        action={"kind": "TerminalAction" if tool == "terminal" else "FinishAction", **args},
        tool_name=tool,
        tool_call_id=call,
        tool_call={"id": call, "name": tool, "arguments": json.dumps(args)},
        llm_response_id=resp,
    )


def _conversation(tmp_path: Path, metrics: dict) -> Path:
    terminal_obs = {
        "kind": "TerminalObservation",
        "content": [{"type": "text", "text": "a.txt\n"}],
        "is_error": False,
        "command": "ls",
        "exit_code": 0,
        "metadata": {
            "exit_code": 0,
            "pid": -1,
            "working_dir": "/w",
            "py_interpreter_path": "/w/.venv/bin/python",
            "prefix": "",
            "suffix": "\n[The command completed with exit code 0.]",
        },
    }
    events = [
        _event(
            0,
            "MessageEvent",
            source="user",
            llm_message={"role": "user", "content": [{"type": "text", "text": "list"}]},
        ),
        _action(1, "terminal", "c1", "r1", {"command": "ls"}),
        _observed(2, "terminal", "c1", terminal_obs),
        _action(3, "finish", "c2", "r2", {"message": "done"}),
        _observed(
            4, "finish", "c2", {"kind": "FinishObservation", "content": [{"type": "text", "text": "done"}]}
        ),
    ]
    conv = tmp_path / "conversations" / "abc"
    (conv / "events").mkdir(parents=True)
    for name, ev in events:
        (conv / "events" / name).write_text(json.dumps(ev))
    state = {"id": "abc", "agent": {"llm": {"model": "m"}}, "stats": {"usage_to_metrics": {"agent": metrics}}}
    (conv / "base_state.json").write_text(json.dumps(state))
    return conv / "events"


def _usage(resp: str, prompt: int) -> dict:
    return {
        "model": "m",
        "prompt_tokens": prompt,
        "completion_tokens": 5,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "response_id": resp,
    }


def _metrics(costs: list[float]) -> dict:
    return {
        "accumulated_cost": sum(costs),
        "accumulated_token_usage": {"prompt_tokens": 300, "completion_tokens": 10},
        "costs": [{"model": "m", "cost": c, "timestamp": 1.0} for c in costs],
        "response_latencies": [{"model": "m", "latency": 1.0, "response_id": r} for r in ("r1", "r2")],
        "token_usages": [_usage("r1", 100), _usage("r2", 200)],
    }


def test_a_terminal_observation_reads_as_the_sdk_renders_it_for_the_model(tmp_path):
    _, t = read_first(_conversation(tmp_path, _metrics([0.001, 0.002])))
    assert t.steps[0].output == (
        "a.txt\n\n[The command completed with exit code 0.]\n[Current working directory: /w]"
        "\n[Python interpreter: /w/.venv/bin/python]\n[Command finished with exit code 0]"
    )
    assert t.steps[1].output == "done"


def test_each_call_keeps_its_cost_when_every_call_has_one(tmp_path):
    _, t = read_first(_conversation(tmp_path, _metrics([0.001, 0.002])))
    assert [(s.usage.input_tokens, s.usage.cost_usd) for s in t.steps] == [(100, 0.001), (200, 0.002)]


def test_costs_that_cannot_be_paired_with_their_calls_are_left_out(tmp_path):
    # the SDK records no cost for a call that cost nothing: one cost for two calls names neither
    _, t = read_first(_conversation(tmp_path, _metrics([0.002])))
    assert [(s.usage.input_tokens, s.usage.cost_usd) for s in t.steps] == [(100, None), (200, None)]


def test_costs_are_not_paired_across_metrics_objects_whose_counts_differ(tmp_path):
    # the agent's two costs for one response and a condenser's response without a cost: as many costs
    # as responses in all, but which cost is whose cannot be told
    events = _conversation(tmp_path, _metrics([0.001, 0.002]))
    state_path = events.parent / "base_state.json"
    state = json.loads(state_path.read_text())
    agent = state["stats"]["usage_to_metrics"]["agent"]
    condenser = {**agent, "costs": [], "response_latencies": agent["response_latencies"][1:],
                 "token_usages": agent["token_usages"][1:]}  # fmt: skip
    agent["response_latencies"], agent["token_usages"] = (
        agent["response_latencies"][:1],
        agent["token_usages"][:1],
    )
    state["stats"]["usage_to_metrics"] = {"agent": agent, "condenser": condenser}
    state_path.write_text(json.dumps(state))
    _, t = read_first(events)
    assert [(s.usage.input_tokens, s.usage.cost_usd) for s in t.steps] == [(100, None), (200, None)]
