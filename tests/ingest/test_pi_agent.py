"""pi coding agent sessions: a real one (tests/fixtures/pi/session.jsonl, written by pi 0.73.1
reading three files against a scripted chat-completions API), and its branches, compactions, user
commands and failed calls built on it in the shapes of pi's session format (docs/session-format.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.base import IngestError

REAL = Path(__file__).parent.parent / "fixtures" / "pi" / "session.jsonl"


def _entries() -> list[dict]:
    return [json.loads(line) for line in REAL.read_text().splitlines()]


def _write(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_a_real_session_reads_its_calls_outputs_usage_and_times():
    assert detect_format(REAL).name == "pi"
    _, t = read_first(REAL)
    assert (
        t.source == "pi"
        and t.model_raw == "gpt-4o"
        and t.task_text == "Read alpha.txt, beta.txt and gamma.txt."
    )
    assert [s.tool_name for s in t.steps] == ["read"] * 3 + [None]
    paths = [json.loads(s.tool_args)["path"] for s in t.steps[:3]]
    assert [p.rsplit("/", 1)[1] for p in paths] == ["alpha.txt", "beta.txt", "gamma.txt"]
    assert all(s.output.startswith(f"line 0 of file {i}") for i, s in enumerate(t.steps[:3]))
    # pi logs the uncached rest as input: the call's input is it plus the cache read
    assert all(
        (s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) == (9000, 8000, 12)
        for s in t.steps
    )
    assert all(s.usage.cost_usd is None for s in t.steps)  # pi's 0 for a model it cannot price
    stamps = [s.timestamp for s in t.steps]
    assert None not in stamps and stamps == sorted(stamps)


def test_branches_compactions_user_commands_and_failures(tmp_path):
    header, *entries = _entries()
    last = entries[-1]

    def entry(eid: str, parent: str, **fields) -> dict:
        return {
            "type": "message",
            "id": eid,
            "parentId": parent,
            "timestamp": "2026-12-05T10:26:00.000Z",
            **fields,
        }

    call = {"type": "toolCall", "id": "x1", "name": "bash", "arguments": {"command": "false"}}
    usage = {"input": 10, "output": 1, "cacheRead": 0, "cacheWrite": 0}
    more = [
        entry("b1", last["id"], message={"role": "bashExecution", "command": "ls", "exitCode": 0,
                                         "output": "alpha.txt\nbeta.txt", "cancelled": False}),
        {"type": "compaction", "id": "c1", "parentId": "b1", "timestamp": "2026-12-05T10:26:01.000Z",
         "summary": "Read three files.", "firstKeptEntryId": last["id"], "tokensBefore": 9000},
        entry("a1", "c1", message={"role": "assistant", "content": [call], "usage": usage}),
        entry("r1", "a1", message={"role": "toolResult", "toolCallId": "x1", "toolName": "bash",
                                   "content": [{"type": "text", "text": "exit 1"}], "isError": True}),
        entry("a2", "r1", message={"role": "assistant", "content": [{"type": "text", "text": "It failed."}]}),
    ]  # fmt: skip
    _, t = read_first(_write(tmp_path / "s.jsonl", [header, *entries, *more]))
    failed = next(s for s in t.steps if s.tool_name == "bash")
    assert failed.output == "exit 1" and failed.output_is_error
    assert [e.kind for e in failed.events] == ["compaction"] and "Read three files." in failed.user_text
    assert "$ ls\nalpha.txt" in failed.user_text  # the user's own command, sent to the model
    # a branch from before the first user message, written last, is the session
    said = {"role": "assistant", "content": [{"type": "text", "text": "Nothing to do."}]}
    fork = entry("f1", entries[2]["parentId"], message=said)
    _, t = read_first(_write(tmp_path / "fork.jsonl", [header, *entries, *more, fork]))
    assert [s.tool_name for s in t.steps] == [None] and t.steps[0].assistant_text == "Nothing to do."
    assert json.loads(t.extra)["entries_off_branch"] > 0


def test_a_session_without_a_model_call_is_one_line_of_error_and_claude_code_is_not_pi(tmp_path):
    header, *entries = _entries()
    user_only = [header, next(e for e in entries if e.get("type") == "message")]
    with pytest.raises(IngestError, match="no model call") as e:
        read_first(_write(tmp_path / "u.jsonl", user_only))
    assert "\n" not in str(e.value)
    claude = {
        "parentUuid": None,
        "sessionId": "s",
        "type": "user",
        "message": {"role": "user", "content": "hi"},
    }
    assert detect_format(_write(tmp_path / "c.jsonl", [claude])).name == "claude-code-transcript"


def test_a_failed_call_is_left_out_and_an_extensions_message_is_sent(tmp_path):
    header, *entries = _entries()
    first_call = next(i for i, e in enumerate(entries) if e.get("message", {}).get("role") == "assistant")
    # a call that failed before the first: kept in the file, never sent again, nor its result
    failed = {
        **entries[first_call],
        "id": "err1",
        "message": {
            **entries[first_call]["message"],
            "stopReason": "error",
            "errorMessage": "overloaded",
            "content": [{"type": "toolCall", "id": "bad", "name": "read", "arguments": {"path": "x"}}],
        },
    }
    result = {**entries[first_call + 1], "id": "res1", "parentId": "err1",
              "message": {**entries[first_call + 1]["message"], "toolCallId": "bad"}}  # fmt: skip
    entries[first_call] = {**entries[first_call], "parentId": "res1"}
    note = {"type": "custom_message", "id": "n1", "parentId": entries[-1]["id"], "customType": "reminder",
            "content": "Also read delta.txt", "display": True}  # fmt: skip
    order = [header, *entries[:first_call], failed, result, *entries[first_call:], note]
    _, t = read_first(_write(tmp_path / "s.jsonl", order))
    assert [s.tool_name for s in t.steps] == ["read"] * 3 + [None]
    assert json.loads(t.extra)["failed_calls"] == ["overloaded"]
    assert json.loads(t.extra)["trailing_user_text"] == "Also read delta.txt"


def test_a_compaction_drops_the_steps_before_the_first_entry_it_kept(tmp_path):
    header, *entries = _entries()
    calls = [e for e in entries if e.get("message", {}).get("role") == "assistant"]
    squeeze = {"type": "compaction", "id": "c1", "parentId": entries[-1]["id"], "summary": "Read two files.",
               "firstKeptEntryId": calls[2]["id"], "tokensBefore": 9000}  # fmt: skip
    said = {"role": "assistant", "content": [{"type": "text", "text": "Go on."}], "model": "gpt-4o"}
    after = {
        "type": "message",
        "id": "a9",
        "parentId": "c1",
        "timestamp": "2026-12-05T10:26:02Z",
        "message": said,
    }
    _, t = read_first(_write(tmp_path / "s.jsonl", [header, *entries, squeeze, after]))
    (event,) = t.steps[-1].events
    # pi sends the summary, then every entry from the third call on: the first two calls' steps are gone
    assert event.kind == "compaction" and event.targets == [0, 1]


def test_a_version_1_session_is_read_in_file_order(tmp_path):
    # before the tree (version 1), pi wrote a session's entries one after another, without ids
    header, *entries = _entries()
    linear = [{**header, "version": 1}] + [
        {k: v for k, v in e.items() if k not in ("id", "parentId")} for e in entries
    ]
    path = _write(tmp_path / "v1.jsonl", linear)
    assert detect_format(path).name == "pi"
    _, t = read_first(path)
    assert [s.tool_name for s in t.steps] == ["read"] * 3 + [None] and t.task_text.startswith("Read alpha")


def test_a_compaction_counts_kept_turns_whatever_their_call_ids(tmp_path):
    # a provider that reuses call ids (Kimi's functions.read:0) and a kept turn with no call at all
    header, *entries = _entries()
    for e in entries:
        m = e.get("message", {})
        for b in m.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "toolCall":
                b["id"] = "functions.read:0"
        if m.get("role") == "toolResult":
            m["toolCallId"] = "functions.read:0"
    calls = [e for e in entries if e.get("message", {}).get("role") == "assistant"]
    squeeze = {"type": "compaction", "id": "c1", "parentId": entries[-1]["id"], "summary": "Read them.",
               "firstKeptEntryId": calls[-1]["id"]}  # fmt: skip
    said = {"role": "assistant", "content": [{"type": "text", "text": "Go on."}], "model": "gpt-4o"}
    after = {"type": "message", "id": "a9", "parentId": "c1", "message": said}
    _, t = read_first(_write(tmp_path / "s.jsonl", [header, *entries, squeeze, after]))
    (event,) = t.steps[-1].events
    assert event.targets == [0, 1, 2]  # the text-only answer kept, the three reads gone


def test_a_forked_session_names_the_session_it_came_from(tmp_path):
    header, *entries = _entries()
    forked = {**header, "parentSession": "/home/u/.pi/agent/sessions/--repo--/2026-12-05_parent.jsonl"}
    _, t = read_first(_write(tmp_path / "fork.jsonl", [forked, *entries]))
    assert json.loads(t.extra)["parent_session"].endswith("_parent.jsonl")
    _, plain = read_first(REAL)
    assert "parent_session" not in json.loads(plain.extra)


# pi 0.87 writes its prompt as a transcript message: a hand-made session in that shape
SYSTEM = Path(__file__).parent.parent / "fixtures" / "pi" / "system_message.jsonl"


def _definitions_tokens(tools: list[dict]) -> int:
    # what the model is sent of a tool, counted as the estimator of a model without a tokenizer here does
    keys = ("name", "description", "parameters")
    return sum(math.ceil(len(json.dumps({k: t[k] for k in keys})) / 4) for t in tools)


def test_a_system_message_is_the_system_prompt_and_its_tools_are_in_the_prompt(tmp_path):
    header, *entries = [json.loads(line) for line in SYSTEM.read_text().splitlines()]
    system = next(e for e in entries if e.get("message", {}).get("role") == "system")["message"]
    assert detect_format(SYSTEM).name == "pi"
    _, t = read_first(SYSTEM)
    assert t.task_text == "Count the tulips in beds.txt." and t.steps[0].user_text == ""
    assert t.system_prompt == "\n\n".join(system["sections"].values())
    assert t.system_prompt.startswith("You tend a small garden") and t.system_prompt.endswith("</cwd>")
    assert json.loads(t.extra)["tools"] == ["look", "shell"]
    # the first call's logged input (40) is less than the prompt the log holds: the definitions count
    assert t.unlogged_prompt_tokens == _definitions_tokens(system["toolsAdded"]) > 100
    # a logged input that leaves more over counts all of it (the definitions are in it)
    call = next(e for e in entries if e.get("message", {}).get("role") == "assistant")
    call["message"]["usage"]["input"] = 5000
    _, t = read_first(_write(tmp_path / "big.jsonl", [header, *entries]))
    held = math.ceil(len(t.system_prompt) / 4) + math.ceil(len(t.task_text) / 4)
    assert t.unlogged_prompt_tokens == 5000 - held


def test_a_later_system_message_changes_the_prompt_from_the_next_call_on(tmp_path):
    header, *entries = [json.loads(line) for line in SYSTEM.read_text().splitlines()]
    result = next(e for e in entries if e.get("message", {}).get("role") == "toolResult")
    water = {"name": "water", "description": "Water one bed.", "parameters": {"type": "object"}}
    change = {"type": "message", "id": "s2", "parentId": result["id"],
              "message": {"role": "system", "content": "Answer in one line.", "sections": {"tools": None},
                          "toolsAdded": [water], "toolsRemoved": [{"name": "shell"}]}}  # fmt: skip
    after = {**entries[-1], "parentId": "s2"}
    _, t = read_first(_write(tmp_path / "s.jsonl", [header, *entries[:-1], change, after]))
    assert t.system_prompt.startswith("You tend a small garden")  # the first call's prompt, unchanged
    said = t.steps[1].user_text  # the change, and the definition of the tool it adds
    assert said.startswith("Answer in one line.") and '"name": "water"' in said
    assert json.loads(t.extra)["tools"] == ["look", "shell"]  # the tools the first call was offered
    # a removal before the first call leaves the tool out of its prompt
    first = {**change, "parentId": entries[2]["id"], "message": {"role": "system", "content": "",
             "toolsRemoved": [{"name": "shell"}]}}  # fmt: skip
    user = {**entries[3], "parentId": "s2"}
    _, t = read_first(_write(tmp_path / "r.jsonl", [header, *entries[:3], first, user, *entries[4:]]))
    assert json.loads(t.extra)["tools"] == ["look"] and t.task_text == "Count the tulips in beds.txt."
