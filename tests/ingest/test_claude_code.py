"""Claude Code ingesters: stream-json (real files only via ../shared; synthetic here) and transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.claude_code import ClaudeCodeStreamIngester, ClaudeCodeTranscriptIngester

STREAM = ClaudeCodeStreamIngester()
TRANSCRIPT = ClaudeCodeTranscriptIngester()
FOLDER = "claude-code_sonnet-4-5_vecsum-reqloop"


# ----------------------------------------------------------------------------- real stream files


@pytest.mark.shared
def test_shared_stream_reports(shared_traces):
    root = shared_traces / FOLDER
    index = {
        Path(r["file"]).name: r
        for r in (
            json.loads(x) for x in (root / "sessions_index.jsonl").read_text().splitlines() if x.strip()
        )
    }
    files = sorted((root / "reports").glob("*_RESPONSE.md"))
    assert len(files) == 49
    ts, failed = [], []
    for f in files:
        assert detect_format(f).name == "claude-code-stream", f
        try:
            (t,) = STREAM.parse(f)
        except IngestError as e:
            failed.append((f.name, e.reason))
            continue
        ts.append(t)
        row = index[f.name]
        tool_steps = [s for s in t.steps if s.tool_name]
        assert len(tool_steps) == row["tool_results"]
        assert all(s.output is not None for s in tool_steps)
        assert t.extra_dict()["result_subtype"] == row["result_subtype"]
        assert t.extra_dict()["num_turns"] == row["num_turns"]
        assert t.model_family in ("claude-opus", "claude-sonnet")
        assert t.task_text, f  # the prompt comes from the sibling PROMPT file
        label = t.extra_dict()["label"]
        if "FIX_ATTEMPT" in label:
            assert t.success is not None and "TEST_" in t.outcome_source
        else:
            assert t.success is None and t.outcome_source == ""
        assert Trajectory.from_row(t.to_row()) == t
    assert len(ts) == 48 and len({t.traj_id for t in ts}) == 48
    assert failed == [
        (
            "2026-01-14-14-10-33-271_{03_summary-tree-building}_FIX_ATTEMPT1_RESPONSE.md",
            "empty trajectory: no stream events, only a result "
            "(only prompt commands are supported in streaming mode)",
        )
    ]
    assert sum(len([s for s in t.steps if s.tool_name]) for t in ts) == 608
    assert sum(t.success is True for t in ts) == 12 and sum(t.success is False for t in ts) == 0
    # report files other than RESPONSE (PROMPT / TEST_*) and MANIFEST-like text are not claimed
    for f in (
        sorted((root / "reports").glob("*_PROMPT.md"))[:5]
        + sorted((root / "reports").glob("*_TEST_*.md"))[:5]
    ):
        assert not STREAM.detect(f, f.read_text()[:65536])
    manifest = shared_traces / "MANIFEST.md"
    assert not STREAM.detect(manifest, manifest.read_text()[:65536])


# ----------------------------------------------------------------------------- synthetic stream


def _assistant(mid, block, model="claude-sonnet-4-5-20250929"):
    return {
        "type": "assistant",
        "message": {"model": model, "id": mid, "type": "message", "role": "assistant", "content": [block],
                    "usage": {"input_tokens": 3, "cache_read_input_tokens": 100, "output_tokens": 20}},
        "parent_tool_use_id": None,
        "session_id": "s1",
    }  # fmt: skip


def _result_ev(tid, text, is_error=False):
    return {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"tool_use_id": tid, "type": "tool_result", "content": text, "is_error": is_error}],
        },
        "parent_tool_use_id": None,
        "session_id": "s1",
    }


def _stream_events():
    return [
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "claude-sonnet-4-5-20250929",
         "tools": ["Bash"]},
        _assistant("m1", {"type": "text", "text": "Looking."}),
        _assistant("m1", {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.py"}}),
        _assistant("m1", {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}}),
        _result_ev("t1", [{"type": "text", "text": "A"}]),
        # a subagent's event: never in the main context
        {**_assistant("mX", {"type": "text", "text": "sub"}), "parent_tool_use_id": "t9"},
        _result_ev("t2", "Exit code 2", is_error=True),
        _assistant("m2", {"type": "thinking", "thinking": "hmm", "signature": "x"}),
        _assistant("m2", {"type": "text", "text": "Done."}),
        {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "session_id": "s1",
         "total_cost_usd": 0.01,
         "usage": {"input_tokens": 6, "cache_read_input_tokens": 200, "output_tokens": 40}},
    ]  # fmt: skip


def _check_stream(t: Trajectory) -> None:
    assert [s.tool_name for s in t.steps] == ["Read", "Bash", None]
    assert [s.turn for s in t.steps] == [0, 0, 1]
    assert (t.steps[0].assistant_text, t.steps[1].assistant_text) == ("Looking.", "")
    assert t.steps[0].output == "A" and (t.steps[1].output, t.steps[1].output_is_error) == (
        "Exit code 2",
        True,
    )
    assert (t.steps[2].reasoning, t.steps[2].assistant_text) == ("hmm", "Done.")
    assert json.loads(t.steps[1].tool_args) == {"command": "ls"}
    assert t.model_family == "claude-sonnet" and t.cost_usd == 0.01 and t.api_calls == 2
    assert (t.tokens_in, t.tokens_out) == (206, 40)
    assert t.extra_dict()["sidechain_events_skipped"] == 1
    assert Trajectory.from_row(t.to_row()) == t


def test_plain_jsonl_stream(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in _stream_events()))
    assert detect_format(p).name == "claude-code-stream"
    (t,) = STREAM.parse(p)
    _check_stream(t)
    assert t.success is None and t.task_id == "s1"


def _report(tmp_path: Path, ts: str, label: str, events, start="2026-01-14T13:28:01.761876Z") -> Path:
    body = json.dumps(
        {"_START-TIME": start, "_END-TIME": "x", "_ELAPSED-SECS": 1, "_RESPONSE": events}, indent=1
    )
    text = (
        "# Fix [RESPONSE]\n\n## Response\n\nDone.\n\n---\n\n## Raw JSON Output\n\n"
        f"```json\n// FULL JSON FROM AI\n{body}\n```\n"
    )
    p = tmp_path / f"{ts}_{label}_RESPONSE.md"
    p.write_text(text)
    return p


def _md(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)


@pytest.mark.parametrize(
    ("reports", "want"),
    [
        (["13-30-20-000_{R}_TEST_EXTERNAL_DEPENDENCY_FAILURE", "13-30-27-231_{R}_TEST_PASS"], True),
        (["13-29-00-000_{R}_TEST_PASS", "13-30-27-231_{R}_TEST_FAIL"], False),  # before the session: ignored
        (["13-31-00-000_{R}_FIX_ATTEMPT1_PROMPT", "13-32-00-000_{R}_TEST_PASS"], None),  # next fix first
        (["13-30-27-231_{S}_TEST_PASS"], None),  # another requirement
    ],
)
def test_report_wrapper_and_label_join(tmp_path, reports, want):
    _md(
        tmp_path,
        "2026-01-14-13-28-01-762_{R}_FIX_ATTEMPT1_PROMPT.md",
        "# Fix\n\n---\n\n## Prompt\n\nFix code until the test passes.\n",
    )
    _md(tmp_path, "2026-01-14-13-25-00-000_{R}_FIX_ATTEMPT1_PROMPT.md", "## Prompt\n\nAn older prompt.\n")
    for r in reports:
        status = r.split("_TEST_")[-1]  # as in the real reports: PASS, FAIL, EXTERNAL_DEPENDENCY_FAILURE
        _md(tmp_path, f"2026-01-14-{r}.md", f"# Test Report: R\n\n**Status:** {status}\n")
    p = _report(tmp_path, "2026-01-14-13-30-15-506", "{R}_FIX_ATTEMPT1", _stream_events())
    assert detect_format(p).name == "claude-code-stream"
    (t,) = STREAM.parse(p)
    _check_stream(t)
    assert t.task_text == "Fix code until the test passes."
    assert t.task_id == "{R}_FIX_ATTEMPT1" and t.traj_id.endswith("/{R}_FIX_ATTEMPT1@2026-01-14-13-30-15-506")
    assert t.success is want
    if want is not None:
        assert t.outcome_source.startswith("2026-01-14-13-30-27-231_{R}_TEST_")


def test_report_status_line_must_agree(tmp_path):
    _md(tmp_path, "2026-01-14-13-30-27-231_{R}_TEST_PASS.md", "**Status:** FAIL\n")
    (t,) = STREAM.parse(_report(tmp_path, "2026-01-14-13-30-15-506", "{R}_FIX_ATTEMPT1", _stream_events()))
    assert t.success is None


# ----------------------------------------------------------------------------- transcript fixture


def test_transcript_fixture(repo_root):
    path = next((repo_root / "tests" / "fixtures" / "claude_code_transcript").glob("*.jsonl"))
    assert detect_format(path).name == "claude-code-transcript"
    (t,) = TRANSCRIPT.parse(path)
    sid = "4f35e220-c435-4cf7-b9b9-f40426042847"
    assert t.traj_id == f"claude-code-transcript/{sid}" and t.task_id == sid
    assert t.task_text.startswith("Add a retry with exponential backoff")
    assert [s.tool_name for s in t.steps] == [
        "Read",
        "Grep",
        "Edit",
        "Bash",
        "Edit",
        "Bash",
        None,
        "Edit",
        None,
    ]
    assert t.steps[0].turn == t.steps[1].turn and len({s.turn for s in t.steps}) == 8
    assert t.steps[0].reasoning.startswith("Read the client") and t.steps[0].assistant_text.startswith(
        "I'll read"
    )
    assert t.steps[0].output.startswith("     1\u2192import urllib.request")
    assert t.steps[1].output.startswith("Found 1 file")  # block-list content
    assert t.steps[3].output_is_error and not any(s.output_is_error for s in t.steps if s is not t.steps[3])
    assert t.steps[4].assistant_text.startswith("`time` is not imported")
    assert t.steps[5].user_text == "Keep it dependency-free; just run the tests again."
    assert not any("tenacity" in (s.user_text + s.assistant_text) for s in t.steps)  # abandoned branch
    (ev,) = t.steps[7].events
    assert ev.kind == "compaction" and ev.targets == list(range(7))
    assert json.loads(ev.detail)["trigger"] == "manual" and json.loads(ev.detail)["preTokens"] == 48213
    assert t.steps[7].user_text.startswith("This session is being continued")
    assert t.steps[7].user_text.endswith("Now add a docstring to fetch().")
    assert sum(len(s.events) for s in t.steps) == 1
    assert t.steps[0].timestamp is not None and all(s.masked_before is None for s in t.steps)
    extra = t.extra_dict()
    assert extra["titles"] == ["Add retry with backoff to fetch()"] and extra["off_chain_records"] == 2
    assert t.success is None and t.model_family == "claude-sonnet" and t.api_calls == 8
    assert Trajectory.from_row(t.to_row()) == t


# ----------------------------------------------------------------------------- bad input


def test_truncated_transcript_line(tmp_path, repo_root):
    lines = (
        next((repo_root / "tests/fixtures/claude_code_transcript").glob("*.jsonl")).read_text().splitlines()
    )
    lines[10] = lines[10][:50]
    p = tmp_path / "x.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match="line 11: invalid JSON"):
        list(TRANSCRIPT.parse(p))


def test_transcript_wrong_types(tmp_path):
    base = {"parentUuid": None, "sessionId": "s", "isSidechain": False, "timestamp": "2025-01-01T00:00:00Z"}
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({**base, "type": "assistant", "uuid": "u1", "message": "hi"}) + "\n")
    with pytest.raises(IngestError, match="line 1: assistant record without a 'message' object"):
        list(TRANSCRIPT.parse(p))
    p.write_text(
        json.dumps({**base, "type": "assistant", "uuid": "u1", "message": {"id": "m", "content": "hi"}})
        + "\n"
    )
    with pytest.raises(IngestError, match=r"line 1: assistant message\.content is str"):
        list(TRANSCRIPT.parse(p))
    p.write_text(
        json.dumps({**base, "type": "user", "uuid": "u1", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}}) + "\n"
    )  # fmt: skip
    with pytest.raises(IngestError, match="'toolu_x' answers no open tool_use"):
        list(TRANSCRIPT.parse(p))


def test_empty_transcript(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"type": "summary", "summary": "t", "leafUuid": "x"}) + "\n")
    assert detect_format(p).name == "claude-code-transcript"
    with pytest.raises(IngestError, match="empty trajectory"):
        list(TRANSCRIPT.parse(p))
    p.write_text("")
    with pytest.raises(IngestError, match="empty file"):
        list(TRANSCRIPT.parse(p))


def test_stream_bad_inputs(tmp_path):
    bad = tmp_path / "2026-01-14-13-30-15-506_x_RESPONSE.md"
    bad.write_text('## Raw JSON Output\n\n```json\n// FULL JSON FROM AI\n{"_RESPONSE": [\n```\n')
    with pytest.raises(IngestError, match="invalid JSON in the ```json block"):
        list(STREAM.parse(bad))
    bad.write_text('```json\n// FULL JSON FROM AI\n{"_RESPONSE": {"type": "system"}}\n```\n')
    with pytest.raises(IngestError, match="'_RESPONSE' is dict"):
        list(STREAM.parse(bad))
    bad.write_text('```json\n// FULL JSON FROM AI\n{"_RESPONSE": []}\n```\n')
    with pytest.raises(IngestError, match="empty trajectory"):
        list(STREAM.parse(bad))
    j = tmp_path / "s.jsonl"
    for text in (
        json.dumps(_stream_events()[0]) + "\n{oops\n",  # a last line written whole: bad, not cut off
        json.dumps(_stream_events()[0]) + "\n{oops\n" + json.dumps(_stream_events()[1]) + "\n",  # a hole
    ):
        j.write_text(text)
        with pytest.raises(IngestError, match="line 2: invalid JSON"):
            list(STREAM.parse(j))
    j.write_text(
        json.dumps(_stream_events()[0])
        + "\n"
        + json.dumps({"type": "assistant", "message": {"content": "x"}})
        + "\n"
    )
    with pytest.raises(IngestError, match=r"event 1: assistant event without a message\.content list"):
        list(STREAM.parse(j))


def test_a_compaction_whose_logical_parent_was_never_written_keeps_the_calls_before_it(repo_root, tmp_path):
    """Claude Code 2.1.39 can write a compact_boundary whose logicalParentUuid names no record of the file:
    the conversation before the compaction is still the run's, read on from the last record before the
    boundary (the chain stopped at the boundary and lost every earlier call)."""
    path = next((repo_root / "tests" / "fixtures" / "claude_code_transcript").glob("*.jsonl"))
    (whole,) = TRANSCRIPT.parse(path)
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("subtype") == "compact_boundary":
            assert rec["logicalParentUuid"] in path.read_text().replace(line, "")
            rec["logicalParentUuid"] = "00000000-0000-4000-8000-000000000000"
        lines.append(json.dumps(rec))
    cut = tmp_path / path.name
    cut.write_text("\n".join(lines) + "\n")
    (t,) = TRANSCRIPT.parse(cut)
    assert [s.tool_name for s in t.steps] == [s.tool_name for s in whole.steps]
    assert [s.output for s in t.steps] == [s.output for s in whole.steps]
    (ev,) = t.steps[7].events
    assert ev.kind == "compaction" and ev.targets == list(range(7))
    assert t.extra_dict()["off_chain_records"] == whole.extra_dict()["off_chain_records"]


def test_the_sessions_cost_is_its_last_cost_state_record(repo_root, tmp_path):
    """Newer CLIs keep the session's running total in ``cost-state`` records: the run's cost_usd is the
    last one's, none when the CLI says it had no price for a model, and another session's is not read."""
    path = next((repo_root / "tests" / "fixtures" / "claude_code_transcript").glob("*.jsonl"))
    sid = "4f35e220-c435-4cf7-b9b9-f40426042847"

    def state(total, session=sid, unknown=False):
        return json.dumps({"type": "cost-state", "sessionId": session, "totalCostUSD": total,
                           "hasUnknownModelCost": unknown, "modelUsage": {}})  # fmt: skip

    def cost(*lines):
        p = tmp_path / path.name
        p.write_text(path.read_text() + "\n".join(lines) + "\n")
        (t,) = TRANSCRIPT.parse(p)
        return t.cost_usd

    assert TRANSCRIPT.parse(path).__next__().cost_usd is None
    assert cost(state(0.25), state(0.5)) == 0.5
    assert cost(state(0.25), state(0.5, unknown=True)) is None
    assert cost(state(0.25), state(9.0, session="another")) == 0.25


def _rec(uuid, parent, kind, message, **kw):
    return {"parentUuid": parent, "isSidechain": False, "sessionId": "s1", "type": kind, "uuid": uuid,
            "timestamp": "2025-12-01T10:00:00.000Z", "message": message, **kw}  # fmt: skip


def _use(mid, tid, path):
    block = {"type": "tool_use", "id": tid, "name": "Read", "input": {"file_path": path}}
    return {"id": mid, "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [block]}


def _res(tid, text):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": text}]}


@pytest.mark.parametrize("result_b_last", [False, True])
def test_a_parallel_call_off_the_parent_chain_keeps_every_output(tmp_path, result_b_last):
    # one reply, two tool_use blocks: Claude Code writes a record per block and hangs each result off
    # the record it answers, so the chain back from the leaf passes through one branch only
    recs = [
        _rec("u0", None, "user", {"role": "user", "content": "compare a.py and b.py"}),
        _rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("a2", "a1", "assistant", _use("msg_1", "tB", "/r/b.py")),
        _rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
        _rec("r2", "a2", "user", _res("tB", "def b(): return 2")),
    ]
    if result_b_last:  # the next reply hangs off whichever result came last
        recs[3], recs[4] = recs[4], recs[3]
    last = recs[-1]["uuid"]
    text = {"id": "msg_2", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "a returns 1, b returns 2"}]}  # fmt: skip
    recs.append(_rec("a3", last, "assistant", text))
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (traj,) = ClaudeCodeTranscriptIngester().parse(p)
    tools = [(s.tool_args, s.output) for s in traj.steps if s.tool_name]
    assert [a for a, _ in tools] == [
        json.dumps({"file_path": "/r/a.py"}),
        json.dumps({"file_path": "/r/b.py"}),
    ]
    assert "return 1" in tools[0][1] and "return 2" in tools[1][1]
    assert json.loads(traj.extra)["off_chain_records"] == 0


@pytest.mark.parametrize("shape", ["sub-agent", "hook progress", "hung off an earlier result"])
def test_parallel_calls_are_kept_in_sub_agents_past_hooks_and_wherever_a_sibling_hangs(tmp_path, shape):
    """Shapes of Claude Code 2.1.39's real transcripts that lost parallel calls and their outputs: a
    sub-agent's file, every record of it ``isSidechain``; a sibling record hung off the hook ``progress``
    records written after the first; and (a sub-agent writing while its tools run) a sibling hung off
    the result of an earlier call."""
    side = shape == "sub-agent"

    def rec(uuid, parent, kind, message, **kw):
        return {**_rec(uuid, parent, kind, message, **kw), "isSidechain": side}

    recs = [
        rec("u0", None, "user", {"role": "user", "content": "compare a.py, b.py and c.py"}),
        rec("a0", "u0", "assistant", _use("msg_0", "t0", "/r/c.py")),
        rec("r0", "a0", "user", _res("t0", "def c(): return 3")),
        rec("a1", "r0", "assistant", _use("msg_1", "tA", "/r/a.py")),
    ]
    parent = "a1"
    if shape == "hook progress":
        recs += [
            {"type": "progress", "uuid": "p1", "parentUuid": "a1", "data": {"type": "hook_progress"}},
            {"type": "progress", "uuid": "p2", "parentUuid": "p1", "data": {"type": "hook_progress"}},
        ]
        parent = "p2"
    elif shape == "hung off an earlier result":
        recs[2], recs[3] = recs[3], recs[2]  # the first call's result written after the next reply began
        recs[2]["parentUuid"] = "a0"
        parent = "r0"
    recs += [
        rec("a2", parent, "assistant", _use("msg_1", "tB", "/r/b.py")),
        rec("r2", "a2", "user", _res("tB", "def b(): return 2")),
        rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
    ]
    text = {"id": "msg_2", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "1, 2 and 3"}]}  # fmt: skip
    recs.append(
        rec("a3", "r1", "assistant", text)
    )  # off the first call's result: the second is off the chain
    p = tmp_path / ("agent-a1.jsonl" if side else "s1.jsonl")
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (traj,) = ClaudeCodeTranscriptIngester().parse(p)
    tools = [(json.loads(s.tool_args)["file_path"], s.output) for s in traj.steps if s.tool_name]
    assert [f for f, _ in tools] == ["/r/c.py", "/r/a.py", "/r/b.py"]
    assert ["return 3" in tools[0][1], "return 1" in tools[1][1], "return 2" in tools[2][1]] == [True] * 3
    assert traj.extra_dict()["off_chain_records"] == 0


def test_a_copy_of_a_call_off_the_chain_is_not_a_second_step(tmp_path):
    """A record repeating a chain call (same message and tool_use id) on an abandoned branch is not a
    sibling: the reply's own calls are kept wherever they hang, copies of them are not."""
    recs = [
        _rec("u0", None, "user", {"role": "user", "content": "read a.py"}),
        _rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
        _rec("uX", "r1", "user", {"role": "user", "content": "never mind"}),
        _rec("a1copy", "uX", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("u2", "r1", "user", {"role": "user", "content": "now b"}),
        _rec("a2", "u2", "assistant", {"id": "msg_2", "role": "assistant", "model": "claude-sonnet-4-5",
                                       "content": [{"type": "text", "text": "ok"}]}),
    ]  # fmt: skip
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (traj,) = ClaudeCodeTranscriptIngester().parse(p)
    assert [(s.tool_call_id, s.output) for s in traj.steps] == [("tA", "def a(): return 1"), (None, None)]


def test_a_sub_agent_of_the_real_cli_is_a_run_tied_to_the_call_that_spawned_it():
    """Claude Code 2.1.332 (tests/fixtures/claude_code_subagent, made by its make_fixtures.py against a
    scripted API): the main agent's Agent call runs a sub-agent that reads alpha.txt."""
    from dtoc_rl.ingest.driver import ingest_paths

    folder = Path(__file__).parent.parent / "fixtures" / "claude_code_subagent"
    res = ingest_paths([folder], progress=False)
    runs = {(t.source, json.loads(t.extra).get("sidechain_file")): t for t in res.trajectories}
    (stream,) = ingest_paths([folder / "stream.jsonl"], progress=False).trajectories
    main, sub = runs["claude-code-transcript", False], runs["claude-code-transcript", True]
    assert [s.tool_name for s in main.steps] == [s.tool_name for s in stream.steps] == ["Agent", "Read", None]
    assert [s.tool_name for s in sub.steps] == ["Read", None] and "alpha.txt line 0" in sub.steps[0].output
    extra = json.loads(sub.extra)
    assert (
        extra["agent_type"] == "general-purpose" and extra["parent_tool_use_id"] == main.steps[0].tool_call_id
    )
    # the stream leaves the sub-agent's events out of the main run (its transcript has them)
    assert json.loads(stream.extra)["sidechain_events_skipped"] == 3
    # its usage is each message's as the API opened it: output counts unknown there, final in the transcript
    assert [s.usage.output_tokens for s in stream.steps] == [None] * 3
    assert [s.usage.output_tokens for s in main.steps] == [60, 70, 80]
    assert [s.usage.cached_tokens for s in stream.steps] == [s.usage.cached_tokens for s in main.steps]
    # the sub-agent's metadata is read beside its transcript, not reported as an unknown file; the
    # stream is the same session as the transcript, read once (below)
    assert [Path(s.path.split("#")[0]).name for s in res.skipped] == ["requests.json", "stream.jsonl"]


def test_a_session_in_its_stream_and_its_transcript_is_one_run(tmp_path):
    """The CLI's stream kept beside the session's transcript is the same session: read once, as the
    transcript (it holds more); a stream of another session, or of other calls, is a run of its own."""
    import shutil

    from dtoc_rl.ingest.driver import ingest_paths

    fixture = Path(__file__).parent.parent / "fixtures" / "claude_code_subagent"
    shutil.copytree(fixture / "transcripts", tmp_path / "projects")
    text = (fixture / "stream.jsonl").read_text()
    (tmp_path / "kept.jsonl").write_text(text)
    res = ingest_paths([tmp_path], progress=False)
    assert sorted(t.source for t in res.trajectories) == ["claude-code-transcript"] * 2
    (skip,) = res.skipped
    assert skip.path.startswith(f"{tmp_path.name}/kept.jsonl#claude-code-stream/")
    assert skip.format == "claude-code-stream"
    assert f"the same session as {tmp_path.name}/projects/" in skip.reason
    (main,) = [t for t in res.trajectories if not json.loads(t.extra)["sidechain_file"]]
    assert json.loads(main.extra)["also_logged_in"] == [tmp_path.name + "/kept.jsonl"]
    assert sum(res.formats.values()) == 2
    # a stream cut short (a torn run) is the transcript's beginning: still the same session
    lines = text.splitlines(keepends=True)
    last_call = max(i for i, line in enumerate(lines) if '"tool_result"' in line)
    (tmp_path / "kept.jsonl").write_text("".join(lines[:last_call]))
    res = ingest_paths([tmp_path], progress=False)
    assert sorted(t.source for t in res.trajectories) == ["claude-code-transcript"] * 2
    # another session's stream, and the same session with another output, are runs of their own
    for other in (
        text.replace("89e2dac9-47f8-4c95-8639-36205556ffc6", "00000000-47f8-4c95-8639-36205556ffc6"),
        text.replace("beta.txt line 0", "beta.txt line zero"),
    ):
        (tmp_path / "kept.jsonl").write_text(other)
        res = ingest_paths([tmp_path], progress=False)
        sources = sorted(t.source for t in res.trajectories)
        assert sources == ["claude-code-stream", "claude-code-transcript", "claude-code-transcript"]


def test_a_resumed_runs_stream_is_a_run_of_its_transcripts_calls_and_read_once(tmp_path):
    """``claude -p --resume ID`` goes on in the session's transcript, under its id, and its stream holds
    only that run's calls: the transcript's last ones, or (the session resumed again later) some in its
    middle.  Here the real CLI's stream cut down to the events of the run it would be, had the session
    been resumed after the Agent call: its system/init, then the Read call and the answer, and its
    result (Claude Code 2.1.332 prints nothing of the earlier runs on resume)."""
    import shutil

    from dtoc_rl.ingest.driver import ingest_paths

    fixture = Path(__file__).parent.parent / "fixtures" / "claude_code_subagent"
    shutil.copytree(fixture / "transcripts", tmp_path / "projects")
    lines = (fixture / "stream.jsonl").read_text().splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    assert [(e["type"], e.get("subtype")) for e in events[:: len(events) - 1]] == [
        ("system", "init"),
        ("result", "success"),
    ]
    read = next(  # the main agent's Read call
        i
        for i, e in enumerate(events)
        if e["type"] == "assistant"
        and not e["parent_tool_use_id"]
        and e["message"]["content"][0].get("name") == "Read"
    )
    init, tail = lines[0], lines[read:]  # the Read call, its result, the answer and the run's result
    cases = {
        "the last calls": init + "".join(tail),
        "calls in the middle": init + "".join(tail[:2]),
        "a call in the middle, cut off before its output": init + tail[0],
    }
    for case, text in cases.items():
        (tmp_path / "resumed.jsonl").write_text(text)
        res = ingest_paths([tmp_path], progress=False)
        assert sorted(t.source for t in res.trajectories) == ["claude-code-transcript"] * 2, case
        (skip,) = res.skipped
        assert skip.path.startswith(f"{tmp_path.name}/resumed.jsonl#") and "the same session" in skip.reason
    # the same calls under another session id, or calls of the session that are not in a row (the Agent
    # call and the answer, without the Read between them), are a run of their own
    agent = lines[1 : lines.index(tail[0])]
    for case, text in {
        "another session": cases["the last calls"].replace(
            "89e2dac9-47f8-4c95-8639-36205556ffc6", "00000000-47f8-4c95-8639-36205556ffc6"
        ),
        "not in a row": init + "".join(agent) + "".join(tail[2:]),
    }.items():
        (tmp_path / "resumed.jsonl").write_text(text)
        res = ingest_paths([tmp_path], progress=False)
        sources = sorted(t.source for t in res.trajectories)
        assert sources == ["claude-code-stream", "claude-code-transcript", "claude-code-transcript"], case


def test_a_session_still_being_written_is_read_without_its_cut_off_last_line(tmp_path):
    recs = [
        _rec("u0", None, "user", {"role": "user", "content": "read a.py"}),
        _rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
        _rec("a2", "r1", "assistant", _use("msg_2", "tB", "/r/b.py")),
    ]
    p = tmp_path / "s1.jsonl"
    whole = "\n".join(json.dumps(r) for r in recs)
    p.write_text(whole + "\n" + json.dumps(_rec("r2", "a2", "user", _res("tB", "x")))[:40])  # mid-write
    (traj,) = TRANSCRIPT.parse(p)
    assert next(s.output for s in traj.steps if s.tool_name) == "def a(): return 1"
    assert json.loads(traj.extra)["torn_last_line"] is True
    p.write_text(whole + "\n")
    assert "torn_last_line" not in json.loads(next(iter(TRANSCRIPT.parse(p))).extra)
    p.write_text(json.dumps(recs[0])[:30])  # nothing but a cut-off line: its own error, not "empty"
    with pytest.raises(IngestError, match="line 1: invalid JSON"):
        list(TRANSCRIPT.parse(p))
    # a line cut off anywhere else is a hole in the session: refused, named
    lines = [json.dumps(r) for r in recs]
    lines[1] = lines[1][:30]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match="line 2: invalid JSON"):
        list(TRANSCRIPT.parse(p))


def _run(source, calls, sid="S", **extra):
    from dtoc_rl.data.schema import Step

    steps = [Step(index=k, tool_name=n, tool_args="{}", output=o, assistant_text=a) for k, (n, o, a) in
             enumerate(calls)]  # fmt: skip
    return Trajectory(traj_id=f"{source}/{sid}/{len(extra)}", source=source, model_raw="claude-sonnet-4-5",
                      model_family="claude-sonnet", task_id=sid, steps=steps,
                      extra=json.dumps({"session_id": sid, **extra}))  # fmt: skip


def test_a_sub_agents_run_is_never_taken_for_its_sessions_stream_and_the_streams_outcome_is_kept():
    from dtoc_rl.ingest.same_session import drop_second_logs

    read, report = ("Read", "a", ""), ("Bash", "b", "")
    main = _run("claude-code-transcript", [read, report, (None, None, "done")], sidechain_file=False)
    sub = _run("claude-code-transcript", [read], sidechain_file=True, agent_id="x")
    stream = _run("claude-code-stream", [read, report, (None, None, "done")], prompt_file="vecsum.md")
    stream.success, stream.outcome_source, stream.task_id = True, "vecsum_RESPONSE.md", "vecsum-7"
    kept, dropped = drop_second_logs([main, sub, stream])
    assert kept == [main, sub] and [(d.dropped, d.kept) for d in dropped] == [(stream, main)]
    assert (main.success, main.outcome_source, main.task_id) == (True, "vecsum_RESPONSE.md", "vecsum-7")
    assert json.loads(main.extra)["prompt_file"] == "vecsum.md"
    # a stream whose calls open a sub-agent's, with no main transcript beside it: both kept
    alone = _run("claude-code-stream", [read, report])
    assert drop_second_logs([sub, alone])[0] == [sub, alone]
    # the same calls with another answer are another run
    other = _run("claude-code-stream", [read, report, (None, None, "not done")])
    assert (
        drop_second_logs([_run("claude-code-transcript", [read, report, (None, None, "done")]), other])[1]
        == []
    )


def test_a_resumed_runs_outcome_is_the_sessions_only_where_its_calls_end_the_transcripts():
    """A stream's result is the end of its own run: the session's outcome only if the session did not go
    on after it (a resume)."""
    from dtoc_rl.ingest.same_session import drop_second_logs

    read, edit, done = ("Read", "a", ""), ("Edit", "b", ""), (None, None, "done")
    first = _run("claude-code-stream", [read, (None, None, "read")], prompt_file="vecsum.md")
    first.success, first.outcome_source, first.task_id = False, "vecsum_RESPONSE.md", "vecsum-7"
    resumed = _run("claude-code-stream", [edit, done])
    resumed.success, resumed.outcome_source = True, "resumed_RESPONSE.md"
    calls = [read, (None, None, "read"), edit, done]
    for streams in ([first], [first, resumed], [resumed, first]):
        main = _run("claude-code-transcript", calls, sidechain_file=False)
        kept, dropped = drop_second_logs([main, *streams])
        assert kept == [main] and [(d.dropped, d.kept) for d in dropped] == [
            (stream, main) for stream in streams
        ]
        # every log dropped into it is named, not only the last
        assert json.loads(main.extra)["also_logged_in"] == [stream.traj_id for stream in streams]
        # the label is the first run's (the transcript has only the id); the outcome the last run's, or none
        assert (main.task_id, json.loads(main.extra)["prompt_file"]) == ("vecsum-7", "vecsum.md")
        want = (True, "resumed_RESPONSE.md") if resumed in streams else (None, "")
        assert (main.success, main.outcome_source) == want


def test_a_streams_cost_is_its_own_run_not_the_sessions_since_it_began(tmp_path):
    """``total_cost_usd`` sums the session's runs (a resumed run's stream carries those before it);
    what each result adds since the one before is the stream's own, where the CLI writes it."""
    fixture = Path(__file__).parent.parent / "fixtures" / "claude_code_subagent" / "stream.jsonl"
    lines = fixture.read_text().splitlines()
    result = json.loads(lines[-1])
    own = result["model_usage_since_last_result"]["claude-sonnet-4-5"]["costUSD"]

    def cost(last: dict) -> float | None:
        p = tmp_path / "stream.jsonl"
        p.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
        (traj,) = ClaudeCodeStreamIngester().parse(p)
        return traj.cost_usd

    resumed = {**result, "total_cost_usd": own + 0.5}  # two earlier runs of the session cost $0.50
    assert cost(resumed) == pytest.approx(own)
    older = {k: v for k, v in resumed.items() if k != "model_usage_since_last_result"}
    assert cost(older) == pytest.approx(own + 0.5)  # an older CLI's: the session's, all it says
    two = {**result["model_usage_since_last_result"], "claude-haiku-4-5": {"costUSD": 0.01}}
    assert cost({**resumed, "model_usage_since_last_result": two}) == pytest.approx(own + 0.01)
    assert cost({**resumed, "model_usage_since_last_result": {"m": {"costUSD": "x"}}}) == pytest.approx(
        own + 0.5
    )
    # two results (a stream fed several prompts): what each added, a result that called no model none
    p = tmp_path / "stream.jsonl"
    idle = {**resumed, "total_cost_usd": own + 0.5, "model_usage_since_last_result": {}}
    p.write_text("\n".join([*lines[:-1], json.dumps(resumed), json.dumps(idle)]) + "\n")
    (traj,) = ClaudeCodeStreamIngester().parse(p)
    assert traj.cost_usd == pytest.approx(own)
    p.write_text("\n".join([*lines[:-1], json.dumps(resumed), json.dumps(resumed)]) + "\n")
    (traj,) = ClaudeCodeStreamIngester().parse(p)
    assert traj.cost_usd == pytest.approx(2 * own)


@pytest.mark.parametrize("spill", [None, 0], ids=["in-memory", "on-disk"])
def test_a_forked_session_holds_the_calls_it_copied_and_its_original_is_read_once_if_it_ended_there(
    tmp_path, spill
):
    """``claude --resume S --fork-session`` (2.1.332) writes a new session whose transcript copies S's
    records, each copied reply naming the session its request was made in (``requestSessionId``): an
    original that ended at the fork is the fork's beginning, read once; one that went on is a run of
    its own, and the calls both hold are said to be counted in each."""
    import warnings

    from dtoc_rl.ingest.driver import ingest_paths

    def session(sid, upto, *, copied_from=None, more=()):
        recs = [_rec("u0", None, "user", {"role": "user", "content": "read the files"}, sessionId=sid)]
        last = "u0"
        for k in range(upto):
            made = {"requestSessionId": copied_from} if copied_from else {}
            recs.append(
                _rec(f"a{k}", last, "assistant", _use(f"m{k}", f"t{k}", f"/r/{k}.py"), sessionId=sid, **made)
            )
            recs.append(_rec(f"r{k}", f"a{k}", "user", _res(f"t{k}", f"file {k}\n" * 20), sessionId=sid))
            last = f"r{k}"
        for k in more:  # calls of this session's own
            recs.append(_rec(f"a{k}", last, "assistant", _use(f"m{k}", f"t{k}", f"/r/{k}.py"), sessionId=sid))
            recs.append(_rec(f"r{k}", f"a{k}", "user", _res(f"t{k}", f"file {k}\n" * 20), sessionId=sid))
            last = f"r{k}"
        return "\n".join(json.dumps(r) for r in recs) + "\n"

    def ingest():
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            res = ingest_paths([tmp_path], progress=False, spill_after=spill)
        return res, [str(w.message) for w in said]

    (tmp_path / "S.jsonl").write_text(session("S", 3))
    (tmp_path / "F.jsonl").write_text(session("F", 3, copied_from="S", more=(7, 8)))
    res, said = ingest()
    (fork,) = res.trajectories
    assert json.loads(fork.extra)["forked_from"] == "S" and len(fork.steps) == 5 and not said
    (skip,) = res.skipped
    assert skip.reason.startswith(f"its calls are the first of its fork {tmp_path.name}/F.jsonl")
    # the original went on after the fork: two runs, and the three calls they share are said
    (tmp_path / "S.jsonl").write_text(session("S", 3, more=(4,)))
    res, said = ingest()
    assert sorted(len(t.steps) for t in res.trajectories) == [4, 5] and not res.skipped
    assert said == [
        f"{tmp_path.name}/F.jsonl and {tmp_path.name}/S.jsonl both hold the 3 calls before a fork "
        "(--fork-session) of one session: counted in each"
    ]
    # two forks of a session that ended at the first: the original is read once, in one fork, and
    # the calls both forks copied are said
    (tmp_path / "S.jsonl").write_text(session("S", 3))
    (tmp_path / "G.jsonl").write_text(session("G", 3, copied_from="S", more=(9,)))
    res, said = ingest()
    assert sorted(len(t.steps) for t in res.trajectories) == [4, 5] and len(res.skipped) == 1
    assert said == [
        f"{tmp_path.name}/G.jsonl and {tmp_path.name}/F.jsonl both hold the 3 calls before a fork "
        "(--fork-session) of one session: counted in each"
    ]
    (tmp_path / "G.jsonl").unlink()
    # a session that names no other's requests is no fork, whatever calls it shares
    (tmp_path / "F.jsonl").write_text(session("F", 3, more=(7, 8)))
    res, said = ingest()
    assert len(res.trajectories) == 2 and not said


def test_hook_reminders_the_session_file_lacks_are_read_from_its_compaction_agent(tmp_path):
    """Claude Code 2.1.39 sends a hook's additional context to the model as a ``<system-reminder>`` user
    message and does not write it in the session's file; the agent that compacts the session writes it
    in its own file (``subagents/agent-acompact-*.jsonl``).  It belongs to the first call after it."""

    def at(rec, second):
        return {**rec, "timestamp": f"2025-12-01T10:00:{second:02d}.000Z"}

    def reply(mid, text):
        return {"id": mid, "role": "assistant", "model": "claude-opus-4-6",
                "content": [{"type": "text", "text": text}]}  # fmt: skip

    reminder = "<system-reminder>\nPostToolUse:Read hook additional context: [LINT] 2 warnings"
    recs = [
        at(_rec("u0", None, "user", {"role": "user", "content": "read a.py"}), 0),
        at(_rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")), 1),
        at(_rec("r1", "a1", "user", _res("tA", "def a(): return 1")), 2),
        at(_rec("a2", "r1", "assistant", reply("msg_2", "a returns 1")), 5),
        at(_rec("u1", "a2", "user", {"role": "user", "content": "thanks"}), 6),
        at(_rec("a3", "u1", "assistant", reply("msg_3", "welcome")), 7),
    ]
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (plain,) = ClaudeCodeTranscriptIngester().parse(p)
    agent = tmp_path / "s1" / "subagents" / "agent-acompact-0a1b2c.jsonl"
    agent.parent.mkdir(parents=True)
    summarise = "Your task is to create a detailed summary of the conversation so far"
    written = [("h1", reminder, 3), ("h2", summarise, 8), ("h3", "<system-reminder>late", 9)]
    agent_recs = [at(_rec(u, None, "user", {"role": "user", "content": c}), sec) for u, c, sec in written]
    agent.write_text("\n".join(json.dumps({**r, "isSidechain": True}) for r in agent_recs) + "\n")
    (t,) = ClaudeCodeTranscriptIngester().parse(p)
    assert [s.user_text for s in t.steps] == ["", reminder, "thanks"]
    assert [s.user_text for s in plain.steps] == ["", "", "thanks"]
    assert json.loads(t.extra)["reminders_from_compaction"] == 1
    assert [(s.turn, s.usage) for s in t.steps] == [(s.turn, s.usage) for s in plain.steps]
    # an agent file of another session (copied in) adds nothing
    agent.write_text("\n".join(json.dumps({**r, "isSidechain": True, "sessionId": "s2"}) for r in agent_recs))
    (other,) = ClaudeCodeTranscriptIngester().parse(p)
    assert [s.user_text for s in other.steps] == ["", "", "thanks"]


def test_a_reminder_the_session_file_holds_is_not_read_twice(tmp_path):
    # the session's own record of a reminder (as text blocks) and the compacting agent's copy: one text
    reminder = "<system-reminder>\nPostToolUse:Read hook additional context: [LINT] 2 warnings"

    def at(rec, second):
        return {**rec, "timestamp": f"2025-12-01T10:00:{second:02d}.000Z"}

    reply = {"id": "msg_2", "role": "assistant", "model": "claude-opus-4-6",
             "content": [{"type": "text", "text": "a returns 1"}]}  # fmt: skip
    held = {"role": "user", "content": [{"type": "text", "text": reminder + "\n"}]}
    recs = [
        at(_rec("u0", None, "user", {"role": "user", "content": "read a.py"}), 0),
        at(_rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")), 1),
        at(_rec("r1", "a1", "user", _res("tA", "def a(): return 1")), 2),
        at(_rec("h1", "r1", "user", held), 3),
        at(_rec("a2", "h1", "assistant", reply), 5),
    ]
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    agent = tmp_path / "s1" / "subagents" / "agent-acompact-0a1b2c.jsonl"
    agent.parent.mkdir(parents=True)
    copy = at(_rec("x1", None, "user", {"role": "user", "content": reminder}), 3)
    agent.write_text(json.dumps({**copy, "isSidechain": True}) + "\n")
    (t,) = ClaudeCodeTranscriptIngester().parse(p)
    assert sum(s.user_text.count("<system-reminder>") for s in t.steps) == 1
    assert json.loads(t.extra)["reminders_from_compaction"] == 0


def test_a_reminder_written_after_the_last_call_before_a_compaction_went_to_the_compacting_agent_only(
    repo_root, tmp_path
):
    from datetime import datetime, timezone

    from dtoc_rl.ingest.openai_chat import iso_to_epoch

    src = next((repo_root / "tests" / "fixtures" / "claude_code_transcript").glob("*.jsonl"))
    recs = [json.loads(x) for x in src.read_text().splitlines()]
    when = [iso_to_epoch(r.get("timestamp")) for r in recs]
    b = next(i for i, r in enumerate(recs) if r.get("subtype") == "compact_boundary")
    before = max(w for r, w in zip(recs[:b], when[:b]) if r.get("type") == "assistant")
    after = min(w for r, w in zip(recs[b:], when[b:]) if r.get("type") == "assistant")

    def iso(t):
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    p = tmp_path / src.name
    p.write_text(src.read_text())
    agent = tmp_path / src.stem / "subagents" / "agent-acompact-0a1b2c.jsonl"
    agent.parent.mkdir(parents=True)
    late, next_ = "<system-reminder>late: after the last call", "<system-reminder>after the summary"
    written = [(late, (before + when[b]) / 2), (next_, (when[b] + after) / 2)]
    agent.write_text("\n".join(json.dumps({"type": "user", "uuid": f"x{k}", "isSidechain": True,
                                           "timestamp": iso(t), "message": {"role": "user", "content": c}})
                               for k, (c, t) in enumerate(written)) + "\n")  # fmt: skip
    (t,) = TRANSCRIPT.parse(p)
    texts = "\n".join(s.user_text for s in t.steps)
    assert "late: after the last call" not in texts
    (ev,) = t.steps[7].events
    assert ev.kind == "compaction" and t.steps[7].user_text.endswith(next_)
    assert json.loads(t.extra)["reminders_from_compaction"] == 1


def _text_reply(mid, text):
    return {"id": mid, "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": text}]}  # fmt: skip


def test_two_records_written_on_one_line_are_both_read(tmp_path):
    # real transcripts hold lines of two records back to back (the newline between them lost): an
    # assistant reply and a summary line, or two conversation records
    recs = [
        _rec("u0", None, "user", {"role": "user", "content": "read a.py"}),
        _rec("a1", "u0", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
        _rec("a2", "r1", "assistant", _text_reply("msg_2", "a returns 1")),
    ]
    lines = [json.dumps(r) for r in recs]
    lines[1:3] = [lines[1] + lines[2]]  # the call and its result on one line
    lines.append(json.dumps({"type": "summary", "summary": "Reading a.py", "leafUuid": "a2"}))
    lines[-2:] = [lines[-2] + " " + lines[-1]]
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(lines) + "\n")
    (traj,) = TRANSCRIPT.parse(p)
    assert [(s.tool_name, s.output) for s in traj.steps] == [("Read", "def a(): return 1"), (None, None)]
    extra = json.loads(traj.extra)
    assert extra["joined_records"] == 2 and extra["titles"] == ["Reading a.py"]
    # a line that is a record and then anything but another record is still bad, named
    p.write_text(
        "\n".join([json.dumps(recs[0]), json.dumps(recs[1]) + ' {"oops', json.dumps(recs[2])]) + "\n"
    )
    with pytest.raises(IngestError, match="line 2: invalid JSON"):
        list(TRANSCRIPT.parse(p))


def test_a_transcript_copied_from_mid_session_drops_the_results_it_opens_with(tmp_path):
    # the copy's first record answers a call made before it began (its parent is not in the file)
    recs = [
        _rec("r0", "before-the-copy", "user", _res("toluEarlier", "old output")),
        _rec("a1", "r0", "assistant", _use("msg_1", "tA", "/r/a.py")),
        _rec("r1", "a1", "user", _res("tA", "def a(): return 1")),
        _rec("a2", "r1", "assistant", _text_reply("msg_2", "done")),
    ]
    p = tmp_path / "s1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (traj,) = TRANSCRIPT.parse(p)
    assert [(s.tool_name, s.output) for s in traj.steps] == [("Read", "def a(): return 1"), (None, None)]
    assert json.loads(traj.extra)["orphan_results_at_start"] == 1
    # a result answering no call after the first call is damage, refused as before
    bad = [*recs[:3], _rec("r9", "r1", "user", _res("tGhost", "?")), {**recs[3], "parentUuid": "r9"}]
    p.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
    with pytest.raises(IngestError, match="'tGhost' answers no open tool_use"):
        list(TRANSCRIPT.parse(p))
    # and so is one at the start of a file that is the session's beginning (its first parent is null)
    p.write_text("\n".join(json.dumps(r) for r in [_rec("r0", None, "user", _res("tX", "?")), *recs[1:]]))
    with pytest.raises(IngestError, match="'tX' answers no open tool_use"):
        list(TRANSCRIPT.parse(p))
