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
         _call("s3", "run_shell_command", {"command": "ls"}, error="[Operation Cancelled] by the user",
               status="cancelled"),
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
    assert cancelled.output.startswith("[Operation Cancelled]") and cancelled.output_is_error
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


def test_the_clis_setup_message_is_system_text_and_the_users_first_words_the_task(tmp_path):
    # Gemini CLI 0.61 opens a session with its own <session_context> user message (seen in a real one)
    setup = {"id": "u0", "timestamp": "2026-05-01T09:59:59.000Z", "type": "user",
             "content": [{"text": "<session_context>\nThis is the Gemini CLI.\nMy OS is: linux\n"
                                  "</session_context>"}]}  # fmt: skip
    f = tmp_path / "session-2026-05-01T10-00-abc.json"
    f.write_text(json.dumps({**META, "lastUpdated": "2026-05-01T10:00:15Z", "messages": [setup, *MESSAGES]}))
    t = _one(f)
    assert t.task_text == "Fix the failing test in src/utils.py"
    assert t.system_prompt.startswith("<session_context>") and t.steps[0].user_text == ""
    # the same text later in a session is the user's
    late = dict(setup, id="u9", timestamp="2026-05-01T10:00:16.000Z")
    f.write_text(json.dumps({**META, "lastUpdated": "2026-05-01T10:00:16Z", "messages": [*MESSAGES, late]}))
    assert "<session_context>" in json.loads(_one(f).extra)["trailing_user_text"]


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


def test_a_bad_line_inside_a_session_is_passed_over_as_the_cli_does_and_named(tmp_path):
    f = tmp_path / "session-3.jsonl"
    f.write_text("\n".join([json.dumps(META), "{not json", json.dumps(MESSAGES[0]), json.dumps(MESSAGES[1])]))
    t = _one(f)
    assert [s.tool_name for s in t.steps] == ["read_file"]
    assert json.loads(t.extra)["bad_lines"].startswith("line 2: invalid JSON")
    odd = tmp_path / "session-4.jsonl"  # a metadata line whose messages are no list: no crash
    odd.write_text(
        "\n".join([json.dumps({**META, "messages": 5}), json.dumps(MESSAGES[0]), json.dumps(MESSAGES[1])])
    )
    assert [s.tool_name for s in _one(odd).steps] == ["read_file"]
    # a record with a string id is a message whatever else it holds (the CLI's test), never metadata
    stray = tmp_path / "session-5.jsonl"
    stray.write_text("\n".join(json.dumps(x) for x in [META, {"id": "x", "summary": "no"}, *MESSAGES[:2]]))
    extra = json.loads(_one(stray).extra)
    assert "summary" not in extra and json.loads(extra["skipped_messages"]) == {"None": 1}


def _two_calls(results):
    # a turn of two parallel calls whose records hold ``results`` (one list of parts per call)
    calls = [{"id": cid, "name": name, "args": {}, "status": "success", "result": r}
             for (cid, name), r in zip([("a", "read_file"), ("b", "list_directory")], results)]  # fmt: skip
    return {
        "id": "g1",
        "timestamp": "2026-05-01T10:00:05Z",
        "type": "gemini",
        "content": "",
        "toolCalls": calls,
    }


def _response(cid, name, output):
    return {"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}


def test_each_parallel_call_keeps_its_own_output_when_the_cli_records_the_whole_turn(tmp_path):
    turn = [_response("a", "read_file", FILE), _response("b", "list_directory", "src/ docs/")]
    f = tmp_path / "s.json"
    f.write_text(json.dumps({**META, "messages": [MESSAGES[0], _two_calls([turn, turn])]}))
    t = _one(f)
    assert [(s.tool_name, s.output) for s in t.steps] == [
        ("read_file", FILE),
        ("list_directory", "src/ docs/"),
    ]


def test_outputs_the_cli_masked_later_are_read_as_first_recorded_and_counted_where_lost(tmp_path):
    masked = "<tool_output_masked>\ndef add(a, b):...\nOutput too large.\n</tool_output_masked>"
    first = _two_calls([[_response("a", "read_file", FILE)], [_response("b", "list_directory", "src/")]])
    later = _two_calls([[_response("a", "read_file", masked)], [_response("b", "list_directory", "src/")]])
    f = tmp_path / "session-m.jsonl"  # the masking rewrote the history: a checkpoint of the same ids
    f.write_text(
        "\n".join(
            json.dumps(x) for x in [META, MESSAGES[0], first, {"$set": {"messages": [MESSAGES[0], later]}}]
        )
    )
    t = _one(f)
    assert t.steps[0].output == FILE and "masked_outputs" not in json.loads(t.extra)
    g = tmp_path / "s.json"  # a session file that holds only the preview: read as it is, and said so
    g.write_text(json.dumps({**META, "messages": [MESSAGES[0], later]}))
    t = _one(g)
    assert t.steps[0].output.startswith("<tool_output_masked>") and json.loads(t.extra)["masked_outputs"] == 1


def test_a_compression_keeps_the_calls_it_replaced_and_marks_the_compaction(tmp_path):
    # after a compression the CLI re-records the new history under new ids: the summary, and the kept
    # turns as contents with functionCall parts (no toolCalls), their responses as user messages
    kept_call = {"id": "n3", "type": "gemini", "content": [{"functionCall": {"id": "k1", "name": "read_file",
                 "args": {"file_path": "/repo/b.py"}}}]}  # fmt: skip
    kept_reply = {"id": "n4", "type": "user", "content": [_response("k1", "read_file", "B = 1")]}
    summary = {"id": "n1", "type": "user", "content": [{"text": "<state_snapshot>summary</state_snapshot>"}]}
    ack = {"id": "n2", "type": "gemini", "content": "Got it."}
    checkpoint = {"$set": {"messages": [summary, ack, kept_call, kept_reply]}}
    test = _call("z", "run_shell_command", {"command": "pytest"}, output="1 passed")
    after = {
        "id": "g9",
        "timestamp": "2026-05-01T10:01:00Z",
        "type": "gemini",
        "content": "",
        "toolCalls": [test],
    }
    f = tmp_path / "session-c.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [META, *MESSAGES, checkpoint, after]))
    t = _one(f)
    assert t.task_text == "Fix the failing test in src/utils.py"  # not the summary
    names = [s.tool_name for s in t.steps]
    assert names == ["read_file", "run_shell_command", "run_shell_command", None, "run_shell_command"]
    assert [e.kind for e in t.steps[-1].events] == ["compaction"] and t.steps[-1].output == "1 passed"
    # a session re-recorded that way from the start: its calls come from the content parts
    g = tmp_path / "session-r.jsonl"
    g.write_text("\n".join(json.dumps(x) for x in [META, MESSAGES[0], kept_call, kept_reply]))
    assert [(s.tool_name, s.output) for s in _one(g).steps] == [("read_file", "B = 1")]


def test_responses_the_cli_also_records_as_user_messages_are_not_read_twice(tmp_path):
    echo = {"id": "u2", "type": "user", "content": [_response("r1", "read_file", FILE)]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps({**META, "messages": [MESSAGES[0], MESSAGES[1], echo, MESSAGES[4]]}))
    assert [s.tool_name for s in _one(f).steps] == ["read_file", None]


def test_a_json_session_the_cli_moved_to_jsonl_on_resume_is_left_to_that_file(tmp_path):
    (tmp_path / "session-x.json").write_text(json.dumps({**META, "messages": MESSAGES[:2]}))
    (tmp_path / "session-x.jsonl").write_text("\n".join(json.dumps(x) for x in [META, *MESSAGES]))
    res = ingest_paths([tmp_path], progress=False)
    assert len(res.trajectories) == 1 and len(res.trajectories[0].steps) == 4
    assert "superseded by session-x.jsonl" in res.skipped[0].reason


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
        # two runs of one file that carry the same id are both kept, under ids of their own; a copy of
        # one of them is read once
        other = {
            **run,
            "id": "b",
            "contents": [*CONTENTS[:-1], {"role": "model", "parts": [{"text": "9090."}]}],
        }
        f.write_text("".join(json.dumps(r) + "\n" for r in ({**run, "id": "b"}, other, {**run, "id": "b"})))
    else:
        f = tmp_path / "run.json"
        f.write_text(json.dumps(run if shape == "object" else CONTENTS))
    res = ingest_paths([f], progress=False)
    if shape == "jsonl":
        assert [s.reason for s in res.skipped] == [
            "1 of 3 lines failed: line 3: a copy of the file's run 'b' (the same steps): read once"
        ]
    else:
        assert not res.skipped
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
        assert [t.traj_id for t in res.trajectories] == ["gemini-api/runs/b", "gemini-api/runs/b#2"]


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
    # the CLI's own /chat and restore checkpoints copy a session's history: not conversations of their own
    saved = tmp_path / "checkpoint-mytag.json"
    saved.write_text(json.dumps({"history": CONTENTS, "authType": "oauth-personal"}))
    bare = tmp_path / "checkpoint-old.json"
    bare.write_text(json.dumps(CONTENTS))
    assert detect_format(saved) is None or detect_format(saved).name != "gemini-api"
    assert detect_format(bare) is None or detect_format(bare).name != "gemini-api"


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
    tool = usage_from({"promptTokenCount": 50, "toolUsePromptTokenCount": 20, "candidatesTokenCount": 3})
    assert tool.input_tokens == 70  # a built-in tool's prompt is billed as input


def test_responses_pair_by_id_then_name_then_order_and_made_ids_stay_out_of_the_steps(tmp_path):
    from dtoc_rl.ingest.gemini import contents_to_chat

    # id-less parallel calls answered in another order: each response finds its call by name
    turned = [CONTENTS[0], CONTENTS[1], {"role": "user", "parts": CONTENTS[2]["parts"][::-1]}]
    f = tmp_path / "order.json"
    f.write_text(json.dumps({"contents": turned}))
    t = _one(f)
    assert [(s.tool_name, s.output, s.output_is_error) for s in t.steps] == [
        ("read_file", "port: 8080", False), ("list_dir", "denied", True)
    ]  # fmt: skip
    assert [s.tool_call_id for s in t.steps] == [None, None]  # made up for pairing, not the log's
    # a response whose id no call has, but whose name one has, answers that call
    renamed = json.loads(json.dumps(CONTENTS[:3]))
    renamed[1]["parts"][2]["functionCall"]["id"] = "a1"
    renamed[2]["parts"][0]["functionResponse"]["id"] = "rewritten"
    msgs = contents_to_chat(renamed)
    assert next((m["tool_call_id"], m["content"]) for m in msgs if m["role"] == "tool") == (
        "a1",
        "port: 8080",
    )


def test_the_clis_setup_message_is_system_text_in_api_contents_too():
    from dtoc_rl.ingest.gemini import contents_to_chat

    setup = {"role": "user", "parts": [{"text": "<session_context>\nMy OS is: linux\n</session_context>"}]}
    msgs = contents_to_chat([setup, *CONTENTS])
    assert msgs[0]["role"] == "system" and msgs[1] == {
        "role": "user",
        "content": CONTENTS[0]["parts"][0]["text"],
    }


def test_a_call_whose_tokens_the_cli_kept_as_zeros_has_no_usage(tmp_path):
    # real sessions of Oct. 2025 hold a call that wrote three files with every count 0: not a free call
    zeros = {"input": 0, "output": 0, "cached": 0, "thoughts": 0, "tool": 0, "total": 0}
    messages = [dict(m) for m in MESSAGES if m["type"] != "info"]
    messages[1]["tokens"] = zeros
    path = tmp_path / "session-2025-10-21T20-04-0b23371a.json"
    path.write_text(json.dumps({"sessionId": "s", "projectHash": "h", "messages": messages}))
    t = _one(path)
    firsts = [s for s in t.steps if s.model]
    assert firsts[0].usage is None
    assert [s.usage.input_tokens for s in firsts[1:]] == [5600, 5800]


def test_a_json_session_saved_under_a_jsonl_name_is_read_as_the_json_one(tmp_path):
    # checkpoint stores keep a CLI session of the .json kind, pretty-printed, as full.jsonl: one object
    # over many lines, no line of which is JSON by itself
    session = {**META, "lastUpdated": "2026-05-01T10:00:15Z", "messages": MESSAGES}
    as_json = tmp_path / "a" / "session.json"
    as_jsonl = tmp_path / "b" / "full.jsonl"
    for f in (as_json, as_jsonl):
        f.parent.mkdir()
        f.write_text(json.dumps(session, indent=2))
    assert detect_format(as_jsonl).name == "gemini-cli"
    want, got = _one(as_json), _one(as_jsonl)
    assert [(s.tool_name, s.output, s.usage) for s in got.steps] == [
        (s.tool_name, s.output, s.usage) for s in want.steps
    ]
    assert got.traj_id == want.traj_id and "bad_lines" not in json.loads(got.extra)
    # so is a Gemini API conversation written that way
    api = tmp_path / "b" / "conversation.jsonl"
    api.write_text(json.dumps({"contents": CONTENTS}, indent=2))
    assert detect_format(api).name == "gemini-api"
    assert [s.tool_name for s in _one(api).steps] == ["read_file", "list_dir", None]


def test_a_jsonl_session_none_of_whose_lines_is_json_says_so_not_that_it_is_empty(tmp_path):
    from dtoc_rl.ingest.gemini import GeminiCliIngester

    f = tmp_path / "full.jsonl"
    f.write_text(json.dumps({**META, "messages": MESSAGES}, indent=2)[:-3])  # cut off: no whole value
    with pytest.raises(IngestError, match=r"no line is valid JSON \(\d+ lines; invalid JSON"):
        list(GeminiCliIngester().parse(f))
