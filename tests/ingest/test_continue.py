"""Continue sessions: a real one (tests/fixtures/continue/session.json, written by the Continue CLI
1.5.47 against a scripted chat-completions API; make_fixtures.py there), and the shapes its history
items take in other cases, built on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.base import IngestError

REAL = Path(__file__).parent.parent / "fixtures" / "continue" / "session.json"


def _write(path: Path, root) -> Path:
    path.write_text(json.dumps(root))
    return path


def test_a_real_session_reads_its_calls_outputs_and_usage():
    assert detect_format(REAL).name == "continue"
    _, t = read_first(REAL)
    assert t.model_raw == "gpt-4o" and t.task_text.startswith("Read gamma.txt, alpha.txt")
    assert [s.tool_name for s in t.steps] == ["Read", "Read", "List", "Read", None]
    assert [s.turn for s in t.steps] == [0, 1, 1, 2, 3]  # a Read and a List in one call
    assert t.steps[0].output_is_error and "File does not exist: gamma.txt" in t.steps[0].output
    assert t.steps[1].output.startswith("Content of alpha.txt:\nalpha line 1\n")
    usage = [(s.usage.input_tokens, s.usage.cached_tokens) for s in t.steps if s.usage]
    assert usage == [(2000, 0), (2400, 2000), (2800, 2400), (3200, 2800)]
    assert (t.tokens_in, t.api_calls) == (10400, 4) and t.cost_usd == pytest.approx(0.0268)
    # Continue's system prompt is not in the session: counted from the first call's usage
    assert t.unlogged_prompt_tokens > 0


def test_context_items_and_cancelled_calls(tmp_path):
    root = json.loads(REAL.read_text())
    root["history"][0]["contextItems"] = [{"name": "notes.md", "content": "remember the tests", "id": {}}]
    root["history"][3]["toolCallStates"][0]["output"] = []  # the user cancelled it
    _, t = read_first(_write(tmp_path / "s.json", root))
    # as Continue sends them: the context before the text; a call with no output "Tool cancelled"
    assert t.task_text.startswith('<context name="notes.md">\nremember the tests\n</context>\n\nRead gamma')
    assert t.steps[3].output == "Tool cancelled"


def test_a_compaction_summary_as_the_cli_and_as_the_ide_write_it(tmp_path):
    root = json.loads(REAL.read_text())
    # the IDE: the summary on an existing item (here the second call's), the whole history kept
    root["history"][2]["conversationSummary"] = "Summary so far."
    _, ide = read_first(_write(tmp_path / "ide.json", root))
    assert [s.tool_name for s in ide.steps] == ["Read", "Read", "List", "Read", None]  # no call lost
    assert ide.steps[3].user_text == "Summary so far."
    (event,) = ide.steps[3].events
    assert event.kind == "compaction" and event.targets == [0, 1, 2]
    # the CLI: the summary an item of its own, only what follows it kept
    root = json.loads(REAL.read_text())
    summary = {"message": {"role": "assistant", "content": "Summary so far."}, "contextItems": [],
               "conversationSummary": "Summary so far."}  # fmt: skip
    root["history"] = [summary, *root["history"][3:]]
    _, cli = read_first(_write(tmp_path / "cli.json", root))
    assert [s.tool_name for s in cli.steps] == ["Read", None] and cli.steps[0].user_text == "Summary so far."


def test_the_index_beside_the_sessions_is_no_session_and_damage_is_named(tmp_path):
    index = _write(tmp_path / "sessions.json", [{"sessionId": "x", "title": "t", "messageCount": 1}])
    assert detect_format(index) is None or detect_format(index).name != "continue"
    root = json.loads(REAL.read_text())
    root["history"][1]["message"]["role"] = "robot"
    with pytest.raises(IngestError, match=r"history\[1\]\.message has role 'robot'"):
        read_first(_write(tmp_path / "bad.json", root))


def test_claude_calls_through_continues_anthropic_adapter_count_their_cache_in_the_prompt(tmp_path):
    # Continue's Anthropic adapter keeps Anthropic's input_tokens (the uncached rest) as prompt_tokens
    # and the cache's reads and writes apart (packages/openai-adapters/src/apis/Anthropic.ts)
    root = json.loads(REAL.read_text())
    for k, item in enumerate(h for h in root["history"] if h["message"].get("usage")):
        details = {"cached_tokens": 5000 * k, "cache_read_tokens": 5000 * k, "cache_write_tokens": 400}
        usage = {"prompt_tokens": 3, "completion_tokens": 10, "prompt_tokens_details": details}
        item["message"]["usage"] = {**usage, "model": "claude-sonnet-4-5"}
    _, t = read_first(_write(tmp_path / "a.json", root))
    usage = [
        (s.usage.input_tokens, s.usage.cached_tokens, s.usage.cache_write_tokens) for s in t.steps if s.usage
    ]
    assert usage == [(403, 0, 400), (5403, 5000, 400), (10403, 10000, 400), (15403, 15000, 400)]
    assert t.tokens_in == 403 + 5403 + 10403 + 15403  # summed from the calls
