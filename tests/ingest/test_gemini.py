"""Gemini CLI sessions (JSON and JSONL) and Gemini API conversations."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.ingest import IngestError, detect_format
from dtoc_rl.ingest.common import usage_from
from dtoc_rl.ingest.driver import ingest_paths

FILE = "def add(a, b):\n    return a - b\n" * 20


def _call(cid, name, args, *, output=None, error=None, status="success"):
    response = {"error": error} if error is not None else {"output": output}
    return {"id": cid, "name": name, "args": args, "status": status, "timestamp": "2026-05-01T10:00:01Z",
            "result": [{"functionResponse": {"id": cid, "name": name, "response": response}}]}  # fmt: skip


MESSAGES = [
    {"id": "u1", "timestamp": "2026-05-01T10:00:00.000Z", "type": "user",
     "content": [{"text": "Fix the failing test in src/utils.py"}]},
    {"id": "g1", "timestamp": "2026-05-01T10:00:05.000Z", "type": "gemini", "content": "",
     "model": "gemini-2.5-pro",
     "thoughts": [{"subject": "Reading", "description": "I will read the file.", "timestamp": "x"}],
     "tokens": {"input": 5000, "output": 20, "cached": 0, "thoughts": 40, "tool": 0, "total": 5060},
     "toolCalls": [_call("r1", "read_file", {"absolute_path": "/repo/src/utils.py"}, output=FILE)]},
    {"id": "i1", "timestamp": "2026-05-01T10:00:06.000Z", "type": "info", "content": "Switched model"},
    {"id": "g2", "timestamp": "2026-05-01T10:00:09.000Z", "type": "gemini", "content": "Running the tests.",
     "model": "gemini-2.5-pro", "tokens": {"input": 5600, "output": 15, "cached": 4800, "total": 5615},
     "toolCalls": [
         _call("s2", "run_shell_command", {"command": "pytest -q"}, error="1 failed", status="error"),
         {"id": "s3", "name": "run_shell_command", "args": {"command": "ls"}, "status": "cancelled"},
     ]},
    {"id": "g3", "timestamp": "2026-05-01T10:00:15.000Z", "type": "gemini", "content": "Done.",
     "model": "gemini-2.5-pro", "tokens": {"input": 5800, "output": 5, "cached": 5500, "total": 5805}},
]  # fmt: skip
META = {"sessionId": "abc-123", "projectHash": "f" * 64, "startTime": "2026-05-01T10:00:00Z"}


def _one(path):
    res = ingest_paths([path], progress=False)
    assert not res.skipped, res.skipped
    (t,) = res.trajectories
    return t


def test_a_gemini_cli_session_reads_calls_outputs_errors_usage_and_times(tmp_path):
    f = tmp_path / "session-2026-05-01T10-00-abc.json"
    f.write_text(json.dumps({**META, "lastUpdated": "2026-05-01T10:00:15Z", "messages": MESSAGES}))
    t = _one(f)
    assert t.source == "gemini-cli" and t.traj_id == "gemini-cli/abc-123" and t.task_id == "abc-123"
    assert t.model_raw == "gemini-2.5-pro" and t.task_text == "Fix the failing test in src/utils.py"
    assert [s.tool_name for s in t.steps] == ["read_file", "run_shell_command", "run_shell_command", None]
    read, failed, cancelled, last = t.steps
    assert (
        read.output == FILE
        and not read.output_is_error
        and read.reasoning == "Reading: I will read the file."
    )
    assert failed.output == "1 failed" and failed.output_is_error  # status error and response.error
    assert cancelled.output is None or cancelled.output == ""  # a call that never ran has no output
    assert failed.turn == cancelled.turn == 1 and failed.assistant_text == "Running the tests."
    # thinking is billed as output: 20 answer + 40 thought tokens
    assert read.usage.input_tokens == 5000 and read.usage.output_tokens == 60
    assert failed.usage.cached_tokens == 4800 and last.usage.output_tokens == 5
    assert read.timestamp == pytest.approx(1777629605.0) and last.timestamp - read.timestamp == pytest.approx(
        10.0
    )
    assert (
        json.loads(t.extra)["skipped_messages"] == '{"info": 1}'
    )  # the CLI's notice never reached the model


def test_a_jsonl_session_applies_rewinds_rewrites_and_checkpoints_as_the_cli_reads_them(tmp_path):
    first = dict(MESSAGES[1], content="first try")
    dropped = {
        "id": "gx",
        "type": "gemini",
        "content": "",
        "toolCalls": [_call("x", "grep", {}, output="hit")],
    }
    redo = dict(MESSAGES[3], content="written again")
    lines = [
        {**META, "kind": "main"},
        MESSAGES[0],
        first,
        dropped,
        {"$rewindTo": "g1"},  # the user rewound: the first try and the call after it are gone
        *MESSAGES[1:],
        redo,  # the same id again replaces the message in its place
        {"$set": {"lastUpdated": "2026-05-01T10:01:00Z", "summary": "fixed add"}},
    ]
    f = tmp_path / "session-1.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"id": "g9", "type": "gem')  # torn last line
    t = _one(f)
    assert [s.tool_name for s in t.steps] == ["read_file", "run_shell_command", "run_shell_command", None]
    assert t.steps[1].assistant_text == "written again" and t.steps[3].assistant_text == "Done."
    extra = json.loads(t.extra)
    assert extra["summary"] == "fixed add" and extra["torn_last_line"] is True and extra["kind"] == "main"

    # a checkpoint ($set with messages) replaces every message before it
    g = tmp_path / "session-2.jsonl"
    g.write_text("\n".join(json.dumps(x) for x in [META, *MESSAGES, {"$set": {"messages": MESSAGES[:2]}}]))
    assert [s.tool_name for s in _one(g).steps] == ["read_file"]


def test_a_bad_line_inside_a_session_fails_the_file_naming_the_line(tmp_path):
    f = tmp_path / "session-3.jsonl"
    f.write_text("\n".join([json.dumps(META), "{not json", json.dumps(MESSAGES[0]), json.dumps(MESSAGES[1])]))
    res = ingest_paths([f], progress=False)
    assert not res.trajectories and "line 2" in res.skipped[0].reason


CONTENTS = [
    {"role": "user", "parts": [{"text": "What is the port in config.yaml?"}]},
    {"role": "model", "parts": [{"text": "Plan: read it.", "thought": True}, {"text": "Let me look."},
                                {"functionCall": {"name": "read_file", "args": {"path": "config.yaml"}}},
                                {"functionCall": {"name": "list_dir", "args": {"path": "."}}}],
     "usageMetadata": {"promptTokenCount": 300, "cachedContentTokenCount": 0, "candidatesTokenCount": 12,
                       "thoughtsTokenCount": 30}},
    {"role": "user", "parts": [
        {"functionResponse": {"name": "read_file", "response": {"output": "port: 8080"}}},
        {"functionResponse": {"name": "list_dir", "response": {"error": "denied"}}},
    ]},
    {"role": "model", "parts": [{"text": "The port is 8080."}]},
]  # fmt: skip


@pytest.mark.parametrize("shape", ["object", "bare-list", "jsonl"])
def test_a_gemini_api_conversation_reads_calls_in_order_thoughts_and_usage(tmp_path, shape):
    run = {"model": "models/gemini-2.5-flash", "systemInstruction": {"parts": [{"text": "Be brief."}]},
           "contents": CONTENTS, "success": True}  # fmt: skip
    if shape == "jsonl":
        f = tmp_path / "runs.jsonl"
        f.write_text(json.dumps(run) + "\n" + json.dumps({**run, "id": "b"}) + "\n")
    else:
        f = tmp_path / "run.json"
        f.write_text(json.dumps(run if shape == "object" else CONTENTS))
    res = ingest_paths([f], progress=False)
    assert not res.skipped and res.trajectories
    t = res.trajectories[0]
    assert t.source == "gemini-api" and t.task_text == "What is the port in config.yaml?"
    assert [s.tool_name for s in t.steps] == ["read_file", "list_dir", None]
    assert t.steps[0].output == "port: 8080" and t.steps[1].output == "denied" and t.steps[1].output_is_error
    assert t.steps[0].reasoning == "Plan: read it." and t.steps[0].assistant_text == "Let me look."
    assert t.steps[0].usage.output_tokens == 42  # answer and thoughts
    if shape != "bare-list":
        assert t.model_raw == "gemini-2.5-flash" and t.system_prompt == "Be brief."
        assert t.success is True and t.outcome_source == "row:success"
    if shape == "jsonl":
        assert len(res.trajectories) == 2


def test_calls_with_ids_take_their_own_responses_and_a_stray_one_is_an_error(tmp_path):
    swapped = [
        CONTENTS[0],
        {"role": "model", "parts": [{"functionCall": {"id": "a", "name": "read_file", "args": {}}},
                                    {"functionCall": {"id": "b", "name": "list_dir", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "b", "name": "list_dir", "response": {"output": "x"}}},
            {"functionResponse": {"id": "a", "name": "read_file", "response": {"output": "y"}}},
        ]},
    ]  # fmt: skip
    f = tmp_path / "ids.json"
    f.write_text(json.dumps({"contents": swapped}))
    t = _one(f)
    assert [(s.tool_name, s.output) for s in t.steps] == [("read_file", "y"), ("list_dir", "x")]
    stray = swapped[:2] + [
        {"role": "user", "parts": [{"functionResponse": {"id": "zz", "name": "n", "response": {}}}]}
    ]
    g = tmp_path / "stray.jsonl"
    g.write_text(json.dumps({"contents": swapped}) + "\n" + json.dumps({"contents": stray}) + "\n")
    res = ingest_paths([g], progress=False)
    assert len(res.trajectories) == 1  # the good line is kept
    assert "line 2" in res.skipped[0].reason and "matches no unanswered tool call" in res.skipped[0].reason


def test_detection_picks_the_gemini_readers_and_leaves_other_chat_logs_alone(tmp_path):
    cli = tmp_path / "s.json"
    cli.write_text(json.dumps({**META, "messages": MESSAGES}))
    api = tmp_path / "a.json"
    api.write_text(json.dumps({"contents": CONTENTS}))
    chat = tmp_path / "c.json"
    chat.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]})
    )
    assert detect_format(cli).name == "gemini-cli" and detect_format(api).name == "gemini-api"
    assert detect_format(chat).name == "openai-chat"


def test_malformed_gemini_logs_are_one_line_errors(tmp_path):
    from dtoc_rl.ingest.gemini import GeminiApiIngester, GeminiCliIngester

    f = tmp_path / "s.json"
    f.write_text(json.dumps({**META, "messages": "nope"}))
    with pytest.raises(IngestError, match="'messages' list"):
        list(GeminiCliIngester().parse(f))
    g = tmp_path / "a.json"
    g.write_text(json.dumps({"contents": [{"role": "critic", "parts": []}]}))
    with pytest.raises(IngestError, match="role 'critic'"):
        list(GeminiApiIngester().parse(g))


def test_gemini_thinking_tokens_are_billed_as_output_in_either_spelling():
    rest = usage_from({"promptTokenCount": 50, "candidatesTokenCount": 3, "thoughtsTokenCount": 7})
    sdk = usage_from({"prompt_token_count": 50, "candidates_token_count": 3, "thoughts_token_count": 7})
    assert rest.output_tokens == sdk.output_tokens == 10
    assert usage_from({"promptTokenCount": 50, "thoughtsTokenCount": 7}).output_tokens == 7
    assert usage_from({"promptTokenCount": 50, "candidatesTokenCount": 3}).output_tokens == 3
