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
         "target": [True, False], "trajectory": [NEBIUS_SWE_AGENT, NEBIUS_SWE_AGENT[:4]],
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
    assert [s.tool_name for s in t.steps] == ["open", "edit", "submit"]
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


def test_thought_action_needs_an_agent_loop():
    chat = [
        {"role": "user", "content": "How do I list files?"},
        {"role": "assistant", "content": "Use:\n```\nls -la\n```"},
        {"role": "user", "content": "Thanks! And hidden ones?"},
        {"role": "assistant", "content": "Those are shown by -a already."},
        {"role": "user", "content": "And sizes?"},
        {"role": "assistant", "content": "Add -h for human-readable sizes."},
    ]
    assert as_tool_calls(chat, lambda c, w: c or "")[1] is None
    assert thought_action("text\n```python\nprint(1)\n```\nmore") == (
        "thought_action",
        "bash",
        "print(1)",
        "text\n\nmore",
    )
    assert thought_action("no block here") is None


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
