"""Plain chat logs in any file, --format, and logged usage from every provider's shape."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.ingest.common import usage_from
from dtoc_rl.ingest.driver import ingest_paths

MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Read config.yaml and tell me the port."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "config.yaml"}'}}
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 12,
                  "prompt_tokens_details": {"cached_tokens": 64}},
    },
    {"role": "tool", "tool_call_id": "c1", "content": "port: 8080\nhost: localhost"},
    {"role": "assistant", "content": "The port is 8080."},
]  # fmt: skip


@pytest.mark.parametrize(
    "payload",
    [
        {"model": "gpt-4o-2024-08-06", "task_id": "demo-1", "pass": True, "messages": MESSAGES},
        MESSAGES,
        [{"task_id": "demo-1", "messages": MESSAGES}, {"task_id": "demo-2", "messages": MESSAGES}],
    ],
    ids=["object", "bare-list", "list-of-runs"],
)
def test_a_json_file_with_chat_messages_ingests_without_conversion(tmp_path, payload):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(payload))
    res = ingest_paths([f], progress=False)
    assert not res.skipped
    assert res.trajectories and all(t.source == "openai-chat" for t in res.trajectories)
    t = res.trajectories[0]
    assert [s.tool_name for s in t.steps] == ["read_file", None]
    assert t.steps[0].output == "port: 8080\nhost: localhost"
    assert t.steps[0].usage.input_tokens == 120 and t.steps[0].usage.cached_tokens == 64
    if isinstance(payload, dict):
        assert t.success is True and t.outcome_source == "row:pass"
        assert t.model_family == "gpt-4o"


def test_format_forces_an_ingester_and_a_wrong_one_is_a_one_line_error(tmp_path, capsys):
    f = tmp_path / "notes.txt.json"
    f.write_text(json.dumps({"messages": MESSAGES}))
    assert cli(["ingest", str(f), "-o", str(tmp_path / "ok"), "--format", "openai-chat", "--quiet"]) == 0
    assert len(load_trajectories(tmp_path / "ok")) == 1
    capsys.readouterr()
    code = cli(["ingest", str(f), "-o", str(tmp_path / "bad"), "--format", "repolaunch", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not (tmp_path / "bad").exists()
    assert err[-1].startswith("dtoc-rl: error: nothing was ingested:") and "--format repolaunch" in err[-1]


def test_usage_from_reads_every_providers_shape():
    openai = usage_from(
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 80}}
    )
    assert (openai.input_tokens, openai.cached_tokens, openai.output_tokens) == (100, 80, 5)
    # Anthropic's input_tokens is the uncached part only: the total adds reads and writes
    anth = usage_from(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 90,
            "output_tokens": 7,
        }
    )
    assert (anth.input_tokens, anth.cached_tokens, anth.cache_write_tokens) == (1000, 900, 90)
    gem = usage_from({"promptTokenCount": 50, "cachedContentTokenCount": 20, "candidatesTokenCount": 3})
    assert (gem.input_tokens, gem.cached_tokens, gem.output_tokens) == (50, 20, 3)
    routed = usage_from({"prompt_tokens": 10, "completion_tokens": 1, "cost": 0.002})
    assert routed.cost_usd == pytest.approx(0.002)
    assert usage_from({"foo": 1}) is None and usage_from(None) is None


def test_prompt_tokens_the_log_lacks_are_the_first_calls_input_less_what_it_holds(tmp_path):
    from dtoc_rl.core.tokens import get_estimator

    f = tmp_path / "run.json"
    f.write_text(json.dumps({"model": "gpt-4o-2024-08-06", "messages": MESSAGES}))
    (t,) = ingest_paths([f], progress=False).trajectories
    est = get_estimator("o200k_base")  # gpt-4o's tokenizer
    held = est.count("You are helpful.") + est.count("Read config.yaml and tell me the port.")
    assert t.unlogged_prompt_tokens == 120 - held  # the tool definitions, never in a chat log
    f.write_text(json.dumps({"messages": [MESSAGES[1], {**MESSAGES[2], "usage": None}, *MESSAGES[3:]]}))
    (t,) = ingest_paths([f], progress=False).trajectories
    assert t.unlogged_prompt_tokens == 0  # nothing logged, nothing inferred


def test_a_run_written_as_one_json_value_under_a_jsonl_name_is_read_whole(tmp_path, repo_root):
    # the readers that take both .json and .jsonl share the test (one_json_value): a pretty-printed
    # run named .jsonl has no line that is JSON, and was refused line by line
    from dtoc_rl.ingest.base import one_json_value

    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"messages": MESSAGES}, indent=2))
    runs = tmp_path / "runs.jsonl"
    runs.write_text(
        json.dumps([{"id": "a", "messages": MESSAGES}, {"id": "b", "messages": MESSAGES}], indent=1)
    )
    assert one_json_value(run) and one_json_value(runs)
    res = ingest_paths([run, runs], progress=False)
    assert res.skipped == []
    assert sorted(t.traj_id for t in res.trajectories) == [
        "openai-chat/run/file1", "openai-chat/runs/a", "openai-chat/runs/b"
    ]  # fmt: skip
    assert all([s.tool_name for s in t.steps] == ["read_file", None] for t in res.trajectories)
    # OpenHands' event list, pretty-printed under a JSONL name
    row = json.loads((repo_root / "tests/fixtures/openhands_legacy/output.jsonl").read_text().splitlines()[0])
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps(row["history"], indent=2))
    (t,) = ingest_paths([events], progress=False).trajectories
    assert t.source == "openhands-legacy" and t.n_steps == 9
    # a JSON-lines file whose first line is bad is no such file: its lines are read, the bad one named
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"messages": [\n' + json.dumps({"messages": MESSAGES}) + "\n")
    assert not one_json_value(torn)
    res = ingest_paths([torn], progress=False)
    assert len(res.trajectories) == 1 and "line 1: invalid JSON" in res.skipped[0].reason
