"""Published trajectory datasets: Parquet shards and JSONL exports whose runs use other column and role
names (nebius' SWE-agent and SWE-rebench OpenHands sets, ShareGPT tool datasets) read as chat runs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dtoc_rl.cli import main
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.chat_parquet import ChatParquetIngester
from dtoc_rl.ingest.chat_rows import chat_run
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.ingest.openai_chat import OpenAIChatIngester
from dtoc_rl.ingest.text_actions import as_tool_calls, thought_action
from dtoc_rl.labels import label_trajectory


def _nebius_msg(role: str, text: str) -> dict:
    # nebius/SWE-agent-trajectories: every message has all five fields
    return {"cutoff_date": "", "mask": False, "role": role, "system_prompt": None, "text": text}


VIEW = "[File: src/foo.py (2 lines total)]\n1:def foo_bar_baz_quux():\n2:    return compute_answer_value(41)"
NEBIUS_SWE_AGENT = [
    _nebius_msg("system", "You are an autonomous programmer."),
    _nebius_msg("user", "ISSUE: foo returns 41 in src/foo.py"),
    _nebius_msg("ai", "Let me look at the file.\n```\nopen src/foo.py\n```"),
    _nebius_msg("user", VIEW + "\n(Open file: src/foo.py)"),
    _nebius_msg("ai", "Fix the value.\n```\nedit 2:2\n    return compute_answer_value(42)\nend_of_edit\n```"),
    _nebius_msg("user", "File updated."),
    _nebius_msg("ai", "Run the tests.\n```\npython -m pytest -q tests\n```"),
    _nebius_msg("user", "1 passed"),
    _nebius_msg("ai", "Check the diff.\n```bash\ngit diff\n```"),
    _nebius_msg("user", "diff --git a/src/foo.py b/src/foo.py"),
    _nebius_msg("ai", "Done.\n```\nsubmit\n```"),
    _nebius_msg("user", "diff --git a/src/foo.py b/src/foo.py"),
]


def _openhands_msgs() -> list[dict]:
    # nebius/SWE-rebench-openhands-trajectories: OpenAI messages, struct fields present on every message
    def m(role, content=None, tool_calls=None, tool_call_id=None, name=None):
        return {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": tool_call_id,
                "name": name}  # fmt: skip

    args = '{"command": "view", "path": "/r/a.py"}'
    call = {"id": "c1", "type": "function", "function": {"name": "str_replace_editor", "arguments": args}}
    return [
        m("system", "You are OpenHands agent."),
        m("user", "Fix a.py"),
        m("assistant", "Viewing.", [call]),
        m(
            "tool",
            "1\tdef distinctive_function_name():\n2\t    pass",
            tool_call_id="c1",
            name="str_replace_editor",
        ),
        m("assistant", "All done."),
    ]


def _write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def test_nebius_swe_agent_shard_reads_as_a_thought_action_agent(tmp_path):
    f = _write_parquet(
        tmp_path / "train-00000-of-00012.parquet",
        {"instance_id": ["o__r-1", "o__r-1"], "model_name": ["gpt-4o-2024-08-06", "qwen2.5-72b"],
         "target": [True, False], "trajectory": [NEBIUS_SWE_AGENT, NEBIUS_SWE_AGENT[:10]],
         "exit_status": ["submitted", "exit_cost"], "eval_logs": ["x" * 10_000, ""]},
    )  # fmt: skip
    ing = detect_format(f)
    assert isinstance(ing, ChatParquetIngester)
    runs = list(ing.parse(f))
    assert [r.success for r in runs] == [True, False]
    assert [r.outcome_source for r in runs] == ["row:target", "row:target"]
    assert runs[0].task_id == runs[1].task_id == "o__r-1"
    assert runs[0].model_raw == "gpt-4o-2024-08-06" and runs[0].model_family == "gpt-4o"
    assert runs[0].traj_id != runs[1].traj_id
    t = runs[0]
    assert [s.tool_name for s in t.steps] == ["open", "edit", "bash", "bash", "submit"]
    assert t.steps[3].tool_args == "git diff"
    assert (
        t.steps[0].output.startswith("[File: src/foo.py")
        and t.steps[0].assistant_text == "Let me look at the file."
    )
    assert t.task_text.startswith("ISSUE:") and t.system_prompt == "You are an autonomous programmer."
    extra = t.extra_dict()
    assert extra["text_actions"] == "thought_action"
    assert json.loads(extra["long_fields"]) == {"eval_logs": 10_000} and "eval_logs" not in extra
    label_trajectory(t)
    assert t.steps[0].read_resource == "file:src/foo.py#L1-2"
    assert {(n.step, n.kind) for n in t.steps[1].needs} == {(0, "edit"), (0, "provenance")}


def test_openhands_trajectory_column_with_integer_resolved(tmp_path):
    f = _write_parquet(
        tmp_path / "part.parquet",
        {"trajectory_id": ["chatcmpl-1"], "instance_id": ["a__b-2"], "resolved": [1],
         "trajectory": [_openhands_msgs()]},
    )  # fmt: skip
    (t,) = list(detect_format(f).parse(f))
    assert t.success is True and t.outcome_source == "row:resolved"
    assert t.traj_id.endswith("/chatcmpl-1") and t.task_id == "a__b-2"
    assert [s.tool_name for s in t.steps] == ["str_replace_editor", None]
    assert "distinctive_function_name" in t.steps[0].output


def test_messages_stored_as_json_text_and_sharegpt_roles():
    conv = [
        {"from": "system", "value": "tools: get_weather"},
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
        {"from": "observation", "value": '{"temp": 21}'},
        {"from": "gpt", "value": "It is 21 degrees."},
    ]
    run = chat_run({"conversations": json.dumps(conv), "id": "r1"})
    roles = [m["role"] for m in run["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert run["messages"][2]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    }
    with pytest.raises(IngestError, match=r"conversations\[0\]: a function_call turn must hold JSON"):
        chat_run({"conversations": [{"from": "function_call", "value": "get_weather(Paris)"}]})
    with pytest.raises(IngestError, match="'trajectory' is text but not JSON"):
        chat_run({"trajectory": "[{oops"})


def test_a_run_in_openai_shape_is_not_changed():
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": []}]
    row = {"messages": msgs, "model": "gpt-4o"}
    assert chat_run(row) == row


def test_sharegpt_jsonl_export_is_detected_and_read(tmp_path):
    rows = [
        {"id": "a", "conversations": [
            {"from": "human", "value": "Find order 7"},
            {"from": "function_call", "value": json.dumps({"name": "get_order", "arguments": {"id": 7}})},
            {"from": "observation", "value": "order 7: shipped to ZX81QQ"},
            {"from": "gpt", "value": "Order 7 was shipped."}]},
    ]  # fmt: skip
    f = tmp_path / "tools.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ing = detect_format(f)
    assert isinstance(ing, OpenAIChatIngester)
    (t,) = list(ing.parse(f))
    assert t.steps[0].tool_name == "get_order" and t.steps[0].output == "order 7: shipped to ZX81QQ"


def test_swe_agent_traj_json_is_still_not_taken_for_a_dataset_run(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"trajectory": [{"role": "assistant", "action": "ls"}], "history": []}))
    assert not isinstance(detect_format(f), OpenAIChatIngester)


def _chat(*replies: str) -> list[dict]:
    out: list[dict] = []
    for i, r in enumerate(replies):
        out += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": r}]
    return out + [{"role": "user", "content": "Thanks!"}]


def test_thought_action_needs_an_agent_loop():
    read = lambda c, w: c or ""  # noqa: E731
    # a coding chat: tagged blocks, or an explanation after the block: answers, not commands
    coding = _chat(*[f"Here:\n```python\ndef f{i}(): pass\n```" for i in range(6)])
    assert as_tool_calls(coding, read)[1] is None
    explained = _chat(*[f"Run:\n```\nls -{i}\n```\nThis lists the files." for i in range(6)])
    assert as_tool_calls(explained, read)[1] is None
    # a short help chat that ends each answer with a command: too few to be an agent loop
    assert as_tool_calls(_chat("Use:\n```\nls -la\n```", "Use:\n```\nls -h\n```"), read)[1] is None
    # an agent loop: five commands, each reply ending with one
    loop = _chat(*[f"Step {i}.\n```\nls -{i}\n```" for i in range(5)])
    msgs, kind = as_tool_calls(loop, read)
    assert kind == "thought_action" and sum(bool(m.get("tool_calls")) for m in msgs) == 5
    assert thought_action("x\n```bash\nls -la\n```") == ("thought_action", "bash", "ls -la", "x")
    assert thought_action("no block here") is None and thought_action("```\n\n```") is None


def test_thought_action_reads_in_linear_time():
    import time

    t0 = time.perf_counter()
    thought_action("```python\n" * 50_000)  # openers and never a closer
    assert time.perf_counter() - t0 < 1.0


def test_a_damaged_shard_keeps_its_good_rows_and_names_the_bad_ones(tmp_path):
    bad = [{"role": "ai", "text": "x"}, {"role": "alien", "text": "y"}]
    f = _write_parquet(tmp_path / "d.parquet", {"trajectory": [NEBIUS_SWE_AGENT, bad, NEBIUS_SWE_AGENT]})
    got = []
    with pytest.raises(IngestError, match=r"1 of 3 rows failed: row 2: .*role 'alien'"):
        for t in ChatParquetIngester().parse(f):
            got.append(t)
    assert len(got) == 2
    torn = tmp_path / "torn.parquet"
    torn.write_bytes(f.read_bytes()[:-40])
    assert detect_format(torn) is None  # a footer Parquet cannot read: no format claims it
    (skip,) = ingest_paths([torn], progress=False).skipped
    assert skip.reason.startswith("unreadable Parquet")


def test_ingest_reads_a_parquet_shard_and_not_its_own_dataset(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    _write_parquet(logs / "train-00000-of-00001.parquet",
                   {"instance_id": ["o__r-1"], "model_name": ["gpt-4o"], "target": [True],
                    "trajectory": [NEBIUS_SWE_AGENT]})  # fmt: skip
    res = ingest_paths([logs], progress=False)
    assert dict(res.formats) == {"chat-parquet": 1} and len(res.trajectories) == 1
    out = tmp_path / "ds"
    assert main(["ingest", str(logs), "-o", str(out), "--quiet", "--workers", "1"]) == 0
    again = ingest_paths([out], progress=False)  # the dataset written is Parquet, but not a log
    reasons = {Path(s.path).suffix: s.reason for s in again.skipped}
    assert again.trajectories == [] and reasons[".parquet"].startswith("a dtoc-rl dataset, ingested already")
    plain = _write_parquet(tmp_path / "plain.parquet", {"a": [1], "b": ["x"]})
    (skip,) = ingest_paths([plain], progress=False).skipped
    assert skip.reason.startswith("Parquet without a message column (messages / trajectory / conversations")
    assert skip.reason.endswith("; its columns: a, b")


def test_a_list_of_runs_with_one_bad_run_keeps_the_others(tmp_path):
    good = {"id": "g", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    f = tmp_path / "runs.json"
    f.write_text(json.dumps([good, {"id": "b", "conversations": None}, {**good, "id": "g2"}]))
    got = []
    with pytest.raises(
        IngestError, match=r"1 of 3 runs failed: run 2: 'conversations' is NoneType, expected a list"
    ):
        got.extend(OpenAIChatIngester().parse(f))
    assert [t.traj_id.rsplit("/", 1)[1] for t in got] == ["g", "g2"]


def test_deeply_nested_json_text_is_named_not_raised():
    with pytest.raises(IngestError, match="'trajectory' is JSON text nested too deeply"):
        chat_run({"trajectory": "[" * 100_000 + "]" * 100_000})


def test_a_damaged_row_group_loses_only_its_own_rows(tmp_path):
    f = tmp_path / "groups.parquet"
    rows = [NEBIUS_SWE_AGENT] * 40
    pq.write_table(pa.table({"trajectory": rows}), f, row_group_size=20, compression="none")
    meta = pq.ParquetFile(f).metadata
    second = meta.row_group(1).column(0)
    data = bytearray(f.read_bytes())
    at = second.data_page_offset + 8
    data[at : at + 64] = b"\x0f" * 64  # the second group's first page
    f.write_bytes(bytes(data))
    got = []
    with pytest.raises(IngestError) as err:
        got.extend(ChatParquetIngester().parse(f))
    assert len(got) == 20  # the first group, whole
    assert "row group 1 (rows 21-40) unreadable" in err.value.reason
    assert "\x0f" not in err.value.reason


def test_zero_rows_and_a_forced_format_say_what_is_wrong(tmp_path):
    empty = _write_parquet(tmp_path / "empty.parquet", {"trajectory": pa.array([], pa.list_(pa.string()))})
    with pytest.raises(IngestError, match="empty Parquet file: no rows"):
        list(ChatParquetIngester().parse(empty))
    other = _write_parquet(tmp_path / "other.parquet", {"a": [1]})
    with pytest.raises(IngestError, match="Parquet without a message column"):
        list(ChatParquetIngester().parse(other))


def test_shards_of_two_datasets_with_the_same_name_get_different_ids(tmp_path):
    ids = []
    for name in ("nebius_swe", "other_set"):
        (tmp_path / name / "data").mkdir(parents=True)
        f = _write_parquet(
            tmp_path / name / "data" / "train-00000-of-00001.parquet", {"trajectory": [NEBIUS_SWE_AGENT]}
        )
        ids += [t.traj_id for t in ChatParquetIngester().parse(f)]
    assert ids == [
        "chat-parquet/nebius_swe/data/train-00000-of-00001/row1",
        "chat-parquet/other_set/data/train-00000-of-00001/row1",
    ]


def test_table_gaps_and_orchestrator_fields(tmp_path):
    f = _write_parquet(
        tmp_path / "gaps.parquet",
        {"trajectory": [NEBIUS_SWE_AGENT, NEBIUS_SWE_AGENT], "resolved": [1.0, float("nan")],
         "id": [float("nan"), 7.0]},
    )  # fmt: skip
    a, b = ChatParquetIngester().parse(f)
    assert (a.success, b.success) == (True, None)
    assert a.traj_id.endswith("/row1") and json.loads(a.extra)["id"] is None  # valid JSON, no NaN
    # a DTOC orchestrator's own fields are kept whole however long: labels read its key map
    keys = {f"t{i:04d}": i for i in range(400)}
    run = {"messages": _openhands_msgs(), "dtoc_keys": json.dumps(keys)}
    t = OpenAIChatIngester().run(tmp_path / "x.jsonl", run, 1, {}, "line")
    assert json.loads(t.extra_dict()["dtoc_keys"]) == keys and "long_fields" not in t.extra_dict()


def test_swe_agent_traj_saved_as_json_with_messages_in_steps_is_not_claimed(tmp_path):
    step = {"action": "ls", "observation": "a.py", "response": "ls", "thought": "look",
            "execution_time": 0.1, "messages": [{"role": "system", "content": "x"}]}  # fmt: skip
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"trajectory": [step] * 3, "info": {}}))
    assert not isinstance(detect_format(f), OpenAIChatIngester)


def test_jsonl_rows_with_messages_as_json_text_are_detected(tmp_path):
    call = {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1", "content": "a.py"},
        {"role": "assistant", "content": "done"},
    ]
    f = tmp_path / "smith.jsonl"
    f.write_text(json.dumps({"traj_id": "x.1", "messages": json.dumps(msgs), "resolved": True}) + "\n")
    ing = detect_format(f)
    assert isinstance(ing, OpenAIChatIngester)
    (t,) = list(ing.parse(f))
    assert t.success is True and t.steps[0].output == "a.py" and t.traj_id.endswith("/x.1")


def test_sharegpt_text_actions_answered_by_observation_turns(tmp_path):
    conv = [{"from": "human", "value": "Fix the bug in util.py"}]
    for i in range(3):
        conv += [
            {"from": "gpt", "value": f"THOUGHT: step {i}\n\n```bash\ncat util_{i}.py\n```"},
            {"from": "observation", "value": f"def helper_{i}(): pass"},
        ]
    conv.append({"from": "gpt", "value": "Done."})
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps([{"id": "a", "conversations": conv}]))
    (t,) = list(OpenAIChatIngester().parse(f))
    assert t.extra_dict()["text_actions"] == "bash"
    assert [(s.tool_name, s.tool_args, s.output) for s in t.steps[:3]] == [
        ("bash", f"cat util_{i}.py", f"def helper_{i}(): pass") for i in range(3)
    ]
