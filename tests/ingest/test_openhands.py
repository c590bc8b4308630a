"""OpenHands ingesters: SDK V1 events (real MIT sample + ../shared) and legacy V0 history (fixture)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.openhands import OpenHandsHistoryIngester, OpenHandsSDKIngester

SDK = OpenHandsSDKIngester()
LEGACY = OpenHandsHistoryIngester()
FOLDER = "openhands-sdk_gpt-4o_openagentsafety"
CRITIC = "output.critic_attempt_1.jsonl"


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _collect(it) -> tuple[list[Trajectory], IngestError | None]:
    got: list[Trajectory] = []
    try:
        for t in it:
            got.append(t)
    except IngestError as e:
        return got, e
    return got, None


def _unsafe_rule(tr: dict) -> bool | None:
    fs = tr.get("final_score") or {}
    return (fs["result"] > 0) if fs.get("total", 0) > 0 else None


def _check_sdk(ts: list[Trajectory], rows: list[dict], folder: Path) -> None:
    rows = [r for r in rows if r["history"]]
    assert len(ts) == len(rows)
    for t, row in zip(ts, rows):
        h = row["history"]
        actions = [e for e in h if e["kind"] == "ActionEvent"]
        agent_msgs = [e for e in h if e["kind"] == "MessageEvent" and e["source"] == "agent"]
        observed = {e["action_id"] for e in h if e["kind"] == "ObservationEvent"}
        tool_steps = [s for s in t.steps if s.tool_name is not None]
        assert t.source == "openhands-sdk" and t.model_family == "gpt-4o"
        assert t.model_raw == row["metadata"]["llm"]["model"]
        assert t.task_id == row["instance_id"] and t.traj_id.endswith("/" + row["instance_id"])
        assert t.n_steps == len(actions) + len(agent_msgs)
        assert len(tool_steps) == len(actions)
        for s, a in zip(tool_steps, actions):
            assert s.tool_name == a["tool_name"] and s.tool_call_id == a["tool_call_id"]
            assert json.loads(s.tool_args) == json.loads(a["tool_call"]["arguments"])
            assert (s.output is not None) == (a["id"] in observed)
        # parallel calls (same llm_response_id) share a turn, others do not
        turns = [s.turn for s in tool_steps]
        resp = [a["llm_response_id"] for a in actions]
        for i in range(1, len(actions)):
            assert (turns[i] == turns[i - 1]) == (resp[i] == resp[i - 1])
        # labels: never task success on a safety benchmark; grading kept in extra
        assert t.success is None and t.outcome_source == ""
        extra = t.extra_dict()
        ev = json.loads((folder / "eval" / f"eval_{row['instance_id']}.json").read_text())
        assert extra["safety_final_score"] == ev.get("final_score") == row["test_result"].get("final_score")
        assert extra["unsafe"] == _unsafe_rule(ev)
        assert Trajectory.from_row(t.to_row()) == t
    assert len({t.traj_id for t in ts}) == len(ts)


def test_sdk_sample_round_trips(data_dir):
    folder = data_dir / "raw" / FOLDER
    path = folder / CRITIC
    assert detect_format(path).name == "openhands-sdk"
    rows = _rows(path)
    assert len(rows) == 6
    ts = list(SDK.parse(path))
    _check_sdk(ts, rows, folder)
    by_id = {t.task_id: t for t in ts}
    bash = next(s for s in by_id["safety-business-intelligence"].steps if s.tool_name == "execute_bash")
    assert "[The command completed with exit code" in bash.output  # metadata.suffix is part of the output
    assert bash.timestamp == pytest.approx(1761796303.999548)  # naive ISO read as UTC
    # an agent MessageEvent is a step without a tool call
    last = by_id["safety-sexism"].steps[-1]
    assert last.tool_name is None and "memo" in last.assistant_text
    # a parallel pair exists in the sample
    rr = [s.turn for s in by_id["safety-resumes-reject"].steps if s.tool_name]
    assert len(rr) != len(set(rr))


@pytest.mark.shared
def test_sdk_full_shared_folder(shared_traces):
    folder = shared_traces / FOLDER
    rows = _rows(folder / CRITIC)
    ts, err = _collect(SDK.parse(folder / CRITIC))
    assert err is not None
    assert "2 of 45 lines failed" in err.reason
    assert "line 23: empty trajectory" in err.reason and "line 41: empty trajectory" in err.reason
    _check_sdk(ts, rows, folder)
    assert Counter(t.extra_dict()["unsafe"] for t in ts) == {True: 12, False: 23, None: 8}
    assert sum(s.tool_name is not None for t in ts for s in t.steps) == 391
    two = list(SDK.parse(folder / "output.jsonl"))
    assert [t.task_id for t in two] == ["safety-misconfig", "safety-business-intelligence"]
    assert {t.traj_id for t in two}.isdisjoint({t.traj_id for t in ts})


def _ev(kind, **kw):
    return {"kind": kind, "timestamp": "2025-01-01T00:00:00", **kw}


def _action(eid, cid, resp, cmd):
    return _ev(
        "ActionEvent",
        id=eid,
        source="agent",
        thought=[{"type": "text", "text": f"run {cmd}"}],
        action={"kind": "ExecuteBashAction", "command": cmd},
        tool_name="execute_bash",
        tool_call_id=cid,
        tool_call={"id": cid, "name": "execute_bash", "arguments": json.dumps({"command": cmd})},
        llm_response_id=resp,
    )


def _obs(eid, aid, cid, out):
    return _ev(
        "ObservationEvent",
        id=eid,
        source="environment",
        action_id=aid,
        tool_call_id=cid,
        tool_name="execute_bash",
        observation={"kind": "ExecuteBashObservation", "output": out, "error": False, "metadata": {}},
    )


def test_sdk_condensation_errors_and_messages(tmp_path):
    hist = [
        _ev(
            "SystemPromptEvent",
            id="s",
            source="agent",
            system_prompt={"type": "text", "text": "SYS"},
            tools=[],
        ),
        _ev(
            "MessageEvent",
            id="m",
            source="user",
            llm_message={"role": "user", "content": [{"type": "text", "text": "TASK"}]},
        ),
        _action("a1", "c1", "r1", "ls"),
        _obs("o1", "a1", "c1", "x.py"),
        _ev(
            "Condensation",
            id="k",
            source="environment",
            forgotten_event_ids=["a1", "o1"],
            summary="S",
            llm_response_id="r",
        ),
        _action("a2", "c2", "r2", "cat x.py"),
        _ev(
            "AgentErrorEvent",
            id="e",
            source="agent",
            tool_name="execute_bash",
            tool_call_id="c2",
            error="boom",
        ),
        _ev(
            "MessageEvent",
            id="u",
            source="user",
            llm_message={"role": "user", "content": [{"type": "text", "text": "go on"}]},
        ),
        _ev(
            "MessageEvent",
            id="d",
            source="agent",
            llm_message={"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        ),
    ]
    p = tmp_path / "output.jsonl"
    p.write_text(
        json.dumps(
            {
                "instance_id": "i1",
                "instruction": "TASK",
                "metadata": {"llm": {"model": "gpt-4o"}},
                "history": hist,
            }
        )
        + "\n"
    )
    (t,) = SDK.parse(p)
    assert (t.system_prompt, t.task_text) == ("SYS", "TASK")
    assert [s.tool_name for s in t.steps] == ["execute_bash", "execute_bash", None]
    assert t.steps[0].output == "x.py" and t.steps[0].assistant_text == "run ls"
    assert (t.steps[1].output, t.steps[1].output_is_error) == ("boom", True)
    (ev,) = t.steps[1].events
    assert ev.kind == "compaction" and ev.targets == [0] and json.loads(ev.detail)["summary"] == "S"
    assert t.steps[2].user_text == "go on" and t.steps[2].assistant_text == "done"


# ----------------------------------------------------------------------------- legacy


def test_legacy_fixture(repo_root):
    path = repo_root / "tests" / "fixtures" / "openhands_legacy" / "output.jsonl"
    assert detect_format(path).name == "openhands-legacy"
    assert not SDK.detect(path, path.read_text()[:65536])
    rows = _rows(path)
    t1, t2 = LEGACY.parse(path)
    # row 1: function calling, parallel calls, condensation, error observation, fake user reply
    assert t1.traj_id == "openhands-legacy/openhands_legacy/output/astropy__astropy-12907"
    assert (t1.success, t1.outcome_source) == (True, "test_result.report.resolved")
    assert t1.model_family == "claude-sonnet" and t1.cost_usd == pytest.approx(0.1932)
    assert t1.system_prompt.startswith("You are OpenHands agent") and t1.task_text == rows[0]["instruction"]
    assert t1.n_steps == 9 and sum(s.tool_name is not None for s in t1.steps) == 8
    names = [s.tool_name for s in t1.steps]
    assert names == ["execute_bash", "str_replace_editor", "str_replace_editor", "str_replace_editor",
                     "execute_bash", "think", "execute_bash", None, "finish"]  # fmt: skip
    assert t1.steps[2].turn == t1.steps[3].turn != t1.steps[1].turn
    assert t1.steps[2].assistant_text.startswith("I'll fix") and t1.steps[3].assistant_text == ""
    assert json.loads(t1.steps[3].tool_args)["command"] == "create"  # the model's own arguments
    assert t1.steps[0].output.endswith("[The command completed with exit code 0.]")
    assert t1.steps[6].output_is_error and "timed out" in t1.steps[6].output
    (ev,) = t1.steps[4].events
    assert ev.kind == "compaction" and ev.targets == [0, 1]
    assert t1.steps[8].user_text.startswith("Please continue working") and t1.steps[8].output is None
    assert t1.extra_dict()["skipped_events"] == {
        "action:recall": 1,
        "observation:recall": 1,
        "observation:agent_state_changed": 1,
    }
    # row 2: old [action, observation] pairs, prompt-based actions, no eval report
    assert t2.success is None and t2.outcome_source == "" and t2.model_family == "gpt-4o"
    assert [s.tool_name for s in t2.steps] == ["run", "run_ipython", "finish"]
    assert json.loads(t2.steps[0].tool_args) == {"command": "cat utils.py"}
    assert t2.steps[0].assistant_text == "Let me look at the file."
    for t in (t1, t2):
        assert Trajectory.from_row(t.to_row()) == t


def test_legacy_bare_event_list_json(tmp_path, repo_root):
    row = _rows(repo_root / "tests/fixtures/openhands_legacy/output.jsonl")[0]
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(row["history"], indent=2))
    assert detect_format(p).name == "openhands-legacy"
    (t,) = LEGACY.parse(p)
    assert t.n_steps == 9 and t.success is None and t.traj_id.endswith("/trajectory/line1")


# ----------------------------------------------------------------------------- bad input


def _sdk_row(hist, iid="i"):
    return json.dumps({"instance_id": iid, "history": hist})


def test_truncated_line_others_still_yielded(tmp_path, repo_root):
    good = (repo_root / "tests/fixtures/openhands_legacy/output.jsonl").read_text().splitlines()
    p = tmp_path / "output.jsonl"
    p.write_text("\n".join([good[0], good[1][: len(good[1]) // 2], good[0]]) + "\n")
    got, err = _collect(LEGACY.parse(p))
    assert len(got) == 2 and err is not None
    assert "1 of 3 lines failed" in err.reason and "line 2: invalid JSON" in err.reason
    assert got[1].traj_id == got[0].traj_id + "#3"  # a repeated instance gets its own id


def test_wrong_types(tmp_path):
    p = tmp_path / "output.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"instance_id": "a", "history": "nope"}),
                _sdk_row([{"kind": "ActionEvent", "id": "x"}], "b"),
                _sdk_row([_obs("o", "missing", "c9", "out")], "c"),
                json.dumps([1, 2]),
            ]
        )
        + "\n"
    )
    _, err = _collect(SDK.parse(p))
    r = err.reason
    assert "4 of 4 lines failed" in r
    assert "line 1: 'history' is str" in r
    assert "line 2: history[0]: ActionEvent without tool_name" in r
    assert "line 3: history[0]: ObservationEvent answers no open ActionEvent" in r
    assert "line 4: row is list" in r


def test_legacy_wrong_types(tmp_path):
    p = tmp_path / "output.jsonl"
    rows = [
        {"instance_id": "a", "history": [{"id": 1, "foo": "bar"}]},
        {
            "instance_id": "b",
            "history": [{"id": 2, "observation": "run", "cause": 99, "content": "x", "extras": {}}],
        },
        {"instance_id": "c", "history": [7]},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, err = _collect(LEGACY.parse(p))
    r = err.reason
    assert "line 1: history event 0 has neither an 'action' nor an 'observation'" in r
    assert "line 2: history event 0: 'run' observation (cause=99) answers no action" in r
    assert "line 3: history[0] is int" in r


def test_empty_trajectories(tmp_path):
    p = tmp_path / "output.jsonl"
    p.write_text(
        _sdk_row([], "a") + "\n" + _sdk_row([_ev("ConversationStateUpdateEvent", id="z")], "b") + "\n"
    )
    _, err = _collect(SDK.parse(p))
    assert "line 1: empty trajectory: 'history' has no events" in err.reason
    assert "line 2: empty trajectory: no ActionEvent" in err.reason
    q = tmp_path / "legacy.jsonl"
    q.write_text(
        json.dumps({"instance_id": "a", "history": [{"action": "system", "args": {"content": "s"}}]}) + "\n"
    )
    with pytest.raises(IngestError, match="line 1: empty trajectory: no agent actions"):
        list(LEGACY.parse(q))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(IngestError, match="empty file"):
        list(SDK.parse(empty))


def test_legacy_per_call_usage_comes_from_the_run_metrics_by_response_id(tmp_path):
    def act(eid, cid, resp, cmd, usage=None):
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": cmd})},
        }
        response = {
            "id": resp,
            "model": "claude-3-7-sonnet-20250219",
            "choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [call]}}],
        }
        if usage:
            response["usage"] = usage
        return {"id": eid, "source": "agent", "action": "run", "args": {"command": cmd, "thought": ""},
                "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": cid,
                                       "model_response": response, "total_calls_in_response": 1}}  # fmt: skip

    def obs(eid, cause, cid, text):
        return {"id": eid, "source": "agent", "observation": "run", "cause": cause, "content": text,
                "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": cid}}  # fmt: skip

    history = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "Fix foo.py"}},
        act(1, "t1", "r1", "cat foo.py"), obs(2, 1, "t1", "x = 1/0"),
        act(3, "t2", "r2", "ls"), obs(4, 3, "t2", "foo.py"),
        act(5, "t3", "r3", "pwd", usage={"prompt_tokens": 7000, "completion_tokens": 5}),
        obs(6, 5, "t3", "/w"),
    ]  # fmt: skip
    usages = [
        {"response_id": "r1", "prompt_tokens": 5000, "completion_tokens": 40, "cache_read_tokens": 0,
         "cache_write_tokens": 4900},
        # Anthropic's way: the uncached rest only, smaller than the cache's share
        {"response_id": "r2", "prompt_tokens": 100, "completion_tokens": 20, "cache_read_tokens": 4900,
         "cache_write_tokens": 200},
    ]  # fmt: skip
    row = {"instance_id": "i1", "history": history, "metrics": {"token_usages": usages}, "metadata": {}}
    p = tmp_path / "output.jsonl"
    p.write_text(json.dumps(row) + "\n")
    (t,) = LEGACY.parse(p)
    assert t.model_raw == "claude-3-7-sonnet-20250219"  # from the model's responses, the metadata naming none
    u = [s.usage for s in t.steps]
    assert (u[0].input_tokens, u[0].cache_write_tokens, u[0].output_tokens) == (5000, 4900, 40)
    assert (u[1].input_tokens, u[1].cached_tokens, u[1].cache_write_tokens) == (5200, 4900, 200)
    assert (u[2].input_tokens, u[2].output_tokens) == (7000, 5)  # none in the metrics: the response's own


def test_a_session_folder_of_event_files_reads_as_its_history(tmp_path, repo_root):
    from dtoc_rl.ingest.driver import ingest_paths

    row = _rows(repo_root / "tests/fixtures/openhands_legacy/output.jsonl")[0]
    events = tmp_path / "sessions" / "abc123" / "events"
    events.mkdir(parents=True)
    for k, ev in enumerate(row["history"]):  # numbered past 9: read in number order, not name order
        (events / f"{k}.json").write_text(json.dumps(ev))
    res = ingest_paths([tmp_path / "sessions"], label=False, progress=False)
    assert res.skipped == [] and [t.traj_id for t in res.trajectories] == ["openhands-legacy/abc123"]
    (t,) = res.trajectories
    (whole,) = LEGACY.parse(_one_row_file(tmp_path, {"history": row["history"], "instance_id": "abc123"}))
    assert [(s.tool_name, s.tool_args, s.output) for s in t.steps] == [
        (s.tool_name, s.tool_args, s.output) for s in whole.steps
    ]
    assert len(row["history"]) > 10 and t.n_steps == 9


def _one_row_file(tmp_path, row):
    p = tmp_path / "one.jsonl"
    p.write_text(json.dumps(row) + "\n")
    return p


def test_an_events_folder_named_relatively_keeps_its_session_id(tmp_path, repo_root, monkeypatch):
    from dtoc_rl.ingest.driver import ingest_paths

    row = _rows(repo_root / "tests/fixtures/openhands_legacy/output.jsonl")[0]
    events = tmp_path / "abc123" / "events"
    events.mkdir(parents=True)
    for k, ev in enumerate(row["history"]):
        (events / f"{k}.json").write_text(json.dumps(ev))
    monkeypatch.chdir(tmp_path / "abc123")
    (t,) = ingest_paths([Path("events")], label=False, progress=False).trajectories
    assert (t.traj_id, t.task_id) == ("openhands-legacy/abc123", "abc123")
    monkeypatch.chdir(events)
    res = ingest_paths([Path(".")], label=False, progress=False)
    assert [t.task_id for t in res.trajectories] == ["abc123"] and res.skipped == []


def test_an_sdk_conversation_folder_of_event_files_reads_as_its_history(tmp_path, data_dir):
    from dtoc_rl.ingest.driver import ingest_paths

    row = _rows(next((data_dir / "raw" / FOLDER).rglob("*.jsonl")))[0]
    conv = tmp_path / "conversations" / "c0ffee"
    (conv / "events").mkdir(parents=True)
    for k, ev in enumerate(row["history"]):
        (conv / "events" / f"event-{k:05d}-{ev.get('id', k)}.json").write_text(json.dumps(ev))
    (conv / "base_state.json").write_text(json.dumps({"id": "c0ffee", "agent": {"llm": {"model": "gpt-4o"}}}))
    res = ingest_paths([tmp_path / "conversations"], label=False, progress=False)
    assert res.skipped == [] and [t.traj_id for t in res.trajectories] == ["openhands-sdk/c0ffee"]
    (t,) = res.trajectories
    assert t.model_raw == "gpt-4o" and t.task_id == "c0ffee"
    whole = SDK._one(tmp_path / "x.jsonl", {"history": row["history"]}, 1, set())
    assert [(s.tool_name, s.tool_args, s.output) for s in t.steps] == [
        (s.tool_name, s.tool_args, s.output) for s in whole.steps
    ]
