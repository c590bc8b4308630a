"""Qwen Code session files: a real one (tests/fixtures/qwen_code/session.jsonl, written by Qwen Code
0.24.4 reading three files against a scripted chat-completions API), and its rewinds and
compressions built on it in the shapes its chat recording service writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.base import IngestError

REAL = Path(__file__).parent.parent / "fixtures" / "qwen_code" / "session.jsonl"


def _records() -> list[dict]:
    return [json.loads(line) for line in REAL.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_real_session_reads_its_calls_outputs_usage_and_times():
    assert detect_format(REAL).name == "qwen-code"
    _, t = read_first(REAL)
    assert (
        t.source == "qwen-code"
        and t.model_raw == "gpt-4o"
        and t.task_text == "Read f0.txt, f1.txt and f2.txt"
    )
    assert t.task_id == t.traj_id.split("/", 1)[1] and len(t.task_id) == 36  # the session's id
    assert [s.tool_name for s in t.steps] == ["read_file"] * 3 + [None]
    assert [json.loads(s.tool_args)["file_path"] for s in t.steps[:3]] == [
        f"/tmp/w/qw/run/f{i}.txt" for i in range(3)
    ]
    assert all(s.output.startswith(f"line 0 of file {i}") for i, s in enumerate(t.steps[:3]))
    assert all(
        (s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) == (9000, 8000, 12)
        for s in t.steps
    )
    stamps = [s.timestamp for s in t.steps]
    assert None not in stamps and stamps == sorted(stamps)


def test_a_rewound_session_is_the_branch_that_ends_the_file(tmp_path):
    records = _records()
    first_call = next(i for i, r in enumerate(records) if r["type"] == "assistant")
    # the user rewound to the first prompt and asked again: a new branch off it, written last
    redo = dict(
        records[0], uuid="redo-1", parentUuid=records[0]["parentUuid"], timestamp="2026-12-05T10:30:00Z"
    )
    redo["message"] = {"role": "user", "parts": [{"text": "Only read f2.txt"}]}
    answer = dict(records[first_call], uuid="redo-2", parentUuid="redo-1")
    answer["message"] = {"role": "model", "parts": [{"text": "Done."}]}
    _, t = read_first(_write(tmp_path / "s.jsonl", [*records, redo, answer]))
    assert t.task_text == "Only read f2.txt" and [s.tool_name for s in t.steps] == [None]
    assert json.loads(t.extra)["records_off_branch"] == len(records)


def test_a_compression_is_a_compaction_whose_summary_the_next_call_reads(tmp_path):
    records = _records()
    last_result = max(i for i, r in enumerate(records) if r["type"] == "tool_result")
    summary = {"role": "user", "parts": [{"text": "Summary: three files were read."}]}
    payload = {
        "info": {"originalTokenCount": 9000, "newTokenCount": 40, "compressionStatus": 1},
        "compressedHistory": [summary, {"role": "model", "parts": [{"text": "Got it."}]}],
        "completedToolCallIds": ["call_0"],
    }
    squeeze = {**{k: records[last_result][k] for k in ("sessionId", "cwd", "version")}, "uuid": "c-1",
               "parentUuid": records[last_result]["uuid"], "timestamp": "2026-12-05T10:22:06Z",
               "type": "system", "subtype": "chat_compression", "systemPayload": payload}  # fmt: skip
    tail = [dict(r) for r in records[last_result + 1 :]]
    tail[0]["parentUuid"] = "c-1"
    _, t = read_first(_write(tmp_path / "s.jsonl", [*records[: last_result + 1], squeeze, *tail]))
    last = t.steps[-1]
    assert [e.kind for e in last.events] == ["compaction"] and last.events[0].targets == [0, 1, 2]
    assert "three files were read" in last.user_text and "Got it" not in last.user_text  # not the model's ack


def test_a_fast_compression_clears_old_outputs_and_thinking_is_counted_once(tmp_path):
    import copy

    records = _records()
    for r in records:  # an OpenAI-style answer with 200 thinking tokens inside its 500 completion tokens
        if r["type"] == "assistant":
            r["usageMetadata"] = {
                **r["usageMetadata"],
                "candidatesTokenCount": 500,
                "thoughtsTokenCount": 200,
            }
    last_result = max(i for i, r in enumerate(records) if r["type"] == "tool_result")
    kept = []  # /compress-fast: every turn kept, the older outputs cleared, no summary
    for r in records[: last_result + 1]:
        if r["type"] in ("user", "assistant", "tool_result"):
            m = copy.deepcopy(r["message"])
            for p in m["parts"]:
                if p.get("functionResponse", {}).get("id") in ("call_0", "call_1"):
                    p["functionResponse"]["response"] = {"output": "[Old tool result content cleared]"}
            kept.append(m)
    where = {k: records[last_result][k] for k in ("sessionId", "cwd", "version")}
    squeeze = {**where, "uuid": "c-1", "parentUuid": records[last_result]["uuid"], "type": "system",
               "timestamp": "2026-12-05T10:22:06Z", "subtype": "chat_compression",
               "systemPayload": {"compressedHistory": kept}}  # fmt: skip
    tail = [dict(r) for r in records[last_result + 1 :]]
    tail[0]["parentUuid"] = "c-1"
    _, t = read_first(_write(tmp_path / "s.jsonl", [*records[: last_result + 1], squeeze, *tail]))
    last = t.steps[-1]
    assert [(e.kind, e.targets) for e in last.events] == [("mask", [0, 1])] and last.user_text == ""
    assert all(s.usage.output_tokens == 500 for s in t.steps)  # not 700: the thinking is in the 500


def test_claude_code_transcripts_and_broken_files_are_told_apart(tmp_path):
    claude = {"parentUuid": None, "sessionId": "s", "type": "user", "uuid": "u",
              "message": {"role": "user", "content": "hi"}}  # fmt: skip
    ing = detect_format(_write(tmp_path / "claude.jsonl", [claude]))
    assert ing is not None and ing.name == "claude-code-transcript"
    only_system = [r for r in _records() if r["type"] == "system"][:1] + [_records()[0]]
    only_system[-1] = {**only_system[-1], "message": {"role": "user", "parts": "not a list"}}
    with pytest.raises(IngestError, match="parts"):
        read_first(_write(tmp_path / "bad.jsonl", only_system))


def _sidechain(i: int, kind: str, parts: list, session: str, **more) -> dict:
    role = "model" if kind == "assistant" else "user"
    return {"uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i else None, "sessionId": session, "type": kind,
            "agentId": "a1", "agentName": "general", "isSidechain": True,
            "message": {"role": role, "parts": parts}, **more}  # fmt: skip


def _read(cid: str, path: str) -> dict:
    return {"functionCall": {"id": cid, "name": "read_file", "args": {"file_path": path}}}


def _got(cid: str, out: str) -> dict:
    return {"functionResponse": {"id": cid, "name": "read_file", "response": {"output": out}}}


def test_a_subagents_transcript_is_read_as_its_own_rounds(tmp_path):
    # a subagent writes a round's text and usage as one record, then each of its calls as one more
    session = _records()[0]["sessionId"]
    usage = {"promptTokenCount": 500, "candidatesTokenCount": 20, "totalTokenCount": 520}
    parts = [([{"text": "read a and b"}], "user", {}),
             ([{"text": "Reading both."}], "assistant", {"usageMetadata": usage}),
             ([_read("ca", "a")], "assistant", {}), ([_read("cb", "b")], "assistant", {}),
             ([_got("ca", "A")], "tool_result", {}), ([_got("cb", "B")], "tool_result", {}),
             ([{"text": "Done."}], "assistant", {"usageMetadata": usage})]  # fmt: skip
    rows = [_sidechain(i, kind, p, session, **more) for i, (p, kind, more) in enumerate(parts)]
    _, t = read_first(_write(tmp_path / "agent-a1.jsonl", rows))
    assert t.traj_id == f"qwen-code/{session}/a1" and json.loads(t.extra)["parent_session"] == session
    got = [(s.turn, s.tool_name, s.output) for s in t.steps]
    assert got == [(0, "read_file", "A"), (0, "read_file", "B"), (1, None, None)]
    assert t.steps[0].assistant_text == "Reading both." and t.steps[0].usage.output_tokens == 20


def test_a_compression_in_a_session_whose_calls_have_no_ids(tmp_path):
    records = _records()
    for r in records:  # a provider that gives no call ids
        for p in (r.get("message") or {}).get("parts") or []:
            for key in ("functionCall", "functionResponse"):
                if key in p:
                    p[key].pop("id", None)
    last_result = max(i for i, r in enumerate(records) if r["type"] == "tool_result")
    summary = {"role": "user", "parts": [{"text": "Summary: read."}]}
    squeeze = {"uuid": "c-1", "parentUuid": records[last_result]["uuid"], "type": "system",
               "subtype": "chat_compression", "systemPayload": {"compressedHistory": [summary]}}  # fmt: skip
    tail = [dict(r) for r in records[last_result + 1 :]]
    tail[0]["parentUuid"] = "c-1"
    _, t = read_first(_write(tmp_path / "s.jsonl", [*records[: last_result + 1], squeeze, *tail]))
    assert [(e.kind, e.targets) for e in t.steps[-1].events] == [("compaction", [0, 1, 2])]


def test_a_torn_line_costs_that_line_only(tmp_path):
    lines = REAL.read_text().splitlines()
    first_call = next(i for i, line in enumerate(lines) if '"type":"assistant"' in line)
    lines[first_call] = lines[first_call][:60]  # the first call's record cut short
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _, t = read_first(path)
    extra = json.loads(t.extra)
    assert t.task_text == "Read f0.txt, f1.txt and f2.txt" and [s.tool_name for s in t.steps] == [
        "read_file"
    ] * 2 + [None]
    assert extra["bad_lines"].startswith(f"line {first_call + 1}:") and extra["bridged_gaps"] == 1
    assert extra["replies_without_call"] == 1  # the lost call's reply, with nothing to answer
