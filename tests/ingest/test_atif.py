"""Harbor's ATIF trajectories (``<trial>/agent/trajectory.json``), built here in the RFC's shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.atif import AtifIngester
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.labels import label_trajectory

ATIF = AtifIngester()
BODY = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30))


def _agent(step_id: int, message, calls=(), results=None, metrics=None, **kw) -> dict:
    st = {"step_id": step_id, "source": "agent", "message": message, **kw}
    if calls:
        st["tool_calls"] = [
            {"tool_call_id": cid, "function_name": name, "arguments": args} for cid, name, args in calls
        ]
    if results is not None:
        st["observation"] = {"results": results}
    if metrics is not None:
        st["metrics"] = metrics
    return st


def _terminus(tmp_path: Path, reward: float | None = 1.0) -> Path:
    steps = [
        {"step_id": 1, "source": "system", "message": "You drive a terminal."},
        {"step_id": 2, "source": "user", "message": "Task Description:\nFix src/p.py"},
        _agent(3, "Read it.", [("c1", "bash_command", {"keystrokes": "cat src/p.py\n", "duration": 0.1})],
               [{"content": BODY}], reasoning_content="look first", timestamp="2026-05-01T10:00:00Z",
               metrics={"prompt_tokens": 5000, "cached_tokens": 3000, "completion_tokens": 80,
                        "cost_usd": 0.01, "extra": {"cache_creation_input_tokens": 1500}}),
        _agent(4, [{"type": "text", "text": "Fix and test."}],
               [("c2", "bash_command", {"keystrokes": "sed -i 's/x + 3/x - 3/' src/p.py\n"}),
                ("c3", "bash_command", {"keystrokes": "pytest -q\n"})],
               [{"content": "1 passed\n$ "}], metrics={"prompt_tokens": 6500, "completion_tokens": 60},
               timestamp="2026-05-01T10:07:30Z"),
        _agent(5, "Done."),
    ]  # fmt: skip
    root = {
        "schema_version": "ATIF-v1.5",
        "session_id": "sess-1",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "anthropic/claude-sonnet-4-5"},
        "steps": steps,
    }
    trial = tmp_path / "job" / "fix-parser__a1b2"
    (trial / "agent").mkdir(parents=True)
    path = trial / "agent" / "trajectory.json"
    path.write_text(json.dumps(root, indent=1))
    if reward is not None:
        result = {
            "task_name": "terminal-bench/fix-parser",
            "verifier_result": {"rewards": {"reward": reward}},
        }
        (trial / "result.json").write_text(json.dumps(result))
    return path


def test_a_terminus_trial_reads_as_steps_with_usage_outcome_and_labels(tmp_path):
    path = _terminus(tmp_path)
    assert detect_format(path).name == "atif"
    (t,) = ATIF.parse(path)
    label_trajectory(t)
    s = t.steps
    assert (t.task_id, t.success, t.model_family) == ("terminal-bench/fix-parser", True, "claude-sonnet")
    assert t.system_prompt == "You drive a terminal." and t.task_text == "Task Description:\nFix src/p.py"
    assert [x.tool_name for x in s] == ["bash_command", "bash_command", "bash_command", None]
    assert [x.turn for x in s] == [0, 1, 1, 2]
    # each call's time, for the cache's lifetime (7.5 minutes apart: past a 5-minute cache)
    assert [x.timestamp for x in s] == [1777629600.0, 1777630050.0, 1777630050.0, None]
    # one terminal screen answers the turn's two keystrokes: it goes to the last of them
    assert (s[0].output, s[1].output, s[2].output) == (BODY, "", "1 passed\n$ ")
    assert s[0].reasoning == "look first" and s[1].assistant_text == "Fix and test."
    u = s[0].usage
    assert (u.input_tokens, u.cached_tokens, u.cache_write_tokens, u.output_tokens, u.cost_usd) == (
        5000, 3000, 1500, 80, 0.01,
    )  # fmt: skip
    assert s[1].usage.input_tokens == 6500 and s[2].usage is None  # a turn's usage is its first step's
    assert s[0].read_resource == "file:src/p.py" and s[1].write_resources == ["src/p.py"]
    assert [(n.step, n.kind) for n in s[1].needs] == [(0, "edit")]  # keystrokes are a shell command
    assert json.loads(t.extra)["agent"] == "terminus-2"


def test_without_a_result_file_the_outcome_is_unknown_and_so_is_a_partial_reward(tmp_path):
    (t,) = ATIF.parse(_terminus(tmp_path / "a", reward=None))
    assert (t.success, t.task_id) == (None, "sess-1")
    (t,) = ATIF.parse(_terminus(tmp_path / "b", reward=0.5))
    assert t.success is None and json.loads(t.extra)["reward"] == 0.5
    (t,) = ATIF.parse(_terminus(tmp_path / "c", reward=0.0))
    assert t.success is False and t.outcome_source == "reward"


def test_harbor_layout_a_completion_marker_continuations_and_totals(tmp_path):
    path = _terminus(tmp_path)
    root = json.loads(path.read_text())
    del root["session_id"]
    # the turn's screen belongs to the keystrokes, not to the completion marker after them
    root["steps"][3]["tool_calls"].append({"tool_call_id": "c4", "function_name": "mark_task_complete",
                                           "arguments": {}})  # fmt: skip
    root["final_metrics"] = {
        "total_prompt_tokens": 11500,
        "total_completion_tokens": 140,
        "total_cost_usd": 0.02,
    }
    path.write_text(json.dumps(root))
    cont = path.with_name("trajectory.cont-1.json")
    cont_root = {**root, "steps": [{**root["steps"][2], "is_copied_context": True}, root["steps"][4]]}
    cont.write_text(json.dumps(cont_root))
    (t,) = ATIF.parse(path)
    s = t.steps
    assert [x.tool_name for x in s] == ["bash_command"] * 3 + ["mark_task_complete", None]
    assert (s[2].output, s[3].output) == ("1 passed\n$ ", "")
    assert (t.traj_id, t.tokens_in, t.tokens_out, t.cost_usd) == ("atif/fix-parser__a1b2", 11500, 140, 0.02)
    (c,) = ATIF.parse(cont)  # its own trajectory: no copied steps, no outcome of the trial
    assert c.traj_id == "atif/fix-parser__a1b2/trajectory.cont-1" and c.success is None
    assert [x.tool_name for x in c.steps] == [None]


def test_results_without_calls_are_a_bash_block_or_text_and_named_results_find_their_calls(tmp_path):
    steps = [
        {"step_id": 1, "source": "user", "message": "go"},
        _agent(2, "THOUGHT: look\n```bash\nls src\n```", results=[{"content": "p.py"}]),
        _agent(3, "hmm", results=[{"content": "screen"}]),
        _agent(4, "two", [("a", "read_file", {"path": "x"}), ("b", "read_file", {"path": "y"})],
               [{"source_call_id": "b", "content": "Y"},
                {"source_call_id": "a", "content": "X", "is_error": True}]),
    ]  # fmt: skip
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps({"schema_version": "ATIF-v1.2", "session_id": "s", "agent": {}, "steps": steps}))
    (t,) = ATIF.parse(p)
    s = t.steps
    assert [(x.tool_name, x.output) for x in s] == [
        ("bash", "p.py"), (None, None), ("read_file", "X"), ("read_file", "Y"),
    ]  # fmt: skip
    assert json.loads(s[0].tool_args) == {"command": "ls src"}
    assert s[2].user_text == "screen"  # feedback without a call: text the next call reads
    assert [x.output_is_error for x in s] == [False, False, True, False]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"step_id": 1, "source": "robot", "message": "x"}], r"steps\[0\] has source 'robot'"),
        ([_agent(1, "x", [("a", "ls", {})], [{"content": "1"}, {"content": "2"}])], "more results than"),
        ([_agent(1, "x", [("a", "ls", {})], [{"source_call_id": "b", "content": "1"}])], "names call 'b'"),
        ([{"step_id": 1, "source": "agent", "message": "x", "tool_calls": 5}], "tool_calls is int"),
        (
            [{"step_id": 1, "source": "agent", "message": "x", "tool_calls": [{"arguments": {}}]}],
            "function_name",
        ),
        ([_agent(1, "x", results=[3])], r"results\[0\] is int"),
    ],
)
def test_a_broken_step_is_named(tmp_path, steps, message):
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {}, "steps": steps}))
    with pytest.raises(IngestError, match=message):
        list(ATIF.parse(p))


def test_detection_is_strict(tmp_path, repo_root):
    other = tmp_path / "trajectory.json"
    other.write_text(json.dumps({"steps": [], "schema_version": "1.0"}))
    assert not ATIF.detect(other, other.read_text())
    files = [f for d in ("data/raw", "tests/fixtures") for f in (repo_root / d).rglob("*.json")]
    assert files and not [f for f in files if ATIF.detect(f, f.read_text(errors="replace")[:65536])]


def test_a_harbor_job_folder_reads_each_trial_once(tmp_path, repo_root):
    from dtoc_rl.ingest.driver import ingest_paths

    path = _terminus(tmp_path)
    sessions = path.parent / "sessions" / "projects" / "p"
    sessions.mkdir(parents=True)
    transcript = next((repo_root / "tests/fixtures/claude_code_transcript").glob("*.jsonl"))
    (sessions / transcript.name).write_text(transcript.read_text())  # the agent's own log of the run
    (path.parent / "agent-events.jsonl").write_text(transcript.read_text())
    res = ingest_paths([tmp_path / "job"], label=False, progress=False)
    assert [t.source for t in res.trajectories] == ["atif"]
    skipped = {Path(s.path).name: s.reason for s in res.skipped}
    assert set(skipped) == {"sessions", "agent-events.jsonl"} and "ATIF" in skipped["sessions"]
    # a damaged ATIF file (or none) leaves the agent's own log to be read as before
    path.write_text(path.read_text()[:200])
    res = ingest_paths([tmp_path / "job"], label=False, progress=False)
    assert "claude-code-transcript" in {t.source for t in res.trajectories}
    path.unlink()
    res = ingest_paths([tmp_path / "job"], label=False, progress=False)
    assert {t.source for t in res.trajectories} == {"claude-code-transcript"}  # (the copy: a duplicate id)
