"""smolagents runs saved as the memory's messages to the model (``write_memory_to_messages()``, as
smolagents' own benchmark script writes them): a hand-made run in the shape of real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.common import text_task_id
from dtoc_rl.ingest.smolagents import SmolagentsIngester


def _msg(role: str, text: str) -> dict:
    return {"role": role, "content": [{"type": "text", "text": text}], "tool_calls": None, "raw": None,
            "token_usage": None}  # fmt: skip


def _calling(*calls: tuple[str, str, object]) -> dict:
    listed = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return _msg("tool-call", "Calling tools:\n" + repr(listed))


RETRY = "\nNow let's retry: take care not to repeat previous errors!\n"
MESSAGES = [
    _msg("system", "You are an expert assistant who can solve any task using code blobs."),
    _msg("user", "New task:\nHow many legs has a spider?"),
    # a reply smolagents could not parse: no call, its error the next call's prompt
    _msg("assistant", "Eight</code>"),
    _msg("tool-response", "Error:\nError in code parsing: no <code> block." + RETRY),
    _msg("assistant", "Thought: search.\n<code>print(web_search('spider legs'))</code>"),
    _calling(("call_2", "python_interpreter", "print(web_search('spider legs'))")),
    _msg("tool-response", "Observation:\nExecution logs:\nSpiders have 8 legs."),
    _msg("assistant", "Thought: both at once."),
    _calling(("c3", "web_search", {"query": "a"}), ("c4", "web_search", {"query": "b"})),
    _msg("tool-response", "Observation:\nA and B"),
    _msg("tool-response", "Call id: c3\nError:\nReached max steps." + RETRY),
]


def _run(tmp_path: Path, messages: list[dict]) -> Path:
    row = {
        "model_id": "m-1",
        "agent_action_type": "code",
        "question": "How many legs has a spider?",
        "answer": "8",
        "true_answer": "8",
        "intermediate_steps": messages,
        "start_time": 1753384487.6,
        "token_counts": {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940},
    }
    p = tmp_path / "m-1__code__gaia__2025-07-24.jsonl"
    p.write_text(json.dumps(row) + "\n")
    return p


def test_the_memorys_messages_are_calls_with_their_outputs(tmp_path):
    path = _run(tmp_path, MESSAGES)
    assert detect_format(path).name == "smolagents"
    (t,) = SmolagentsIngester().parse(path)
    assert t.system_prompt.startswith("You are an expert assistant")
    assert t.task_text == "New task:\nHow many legs has a spider?"  # as the model read it
    assert [(s.turn, s.tool_name) for s in t.steps] == [
        (0, None), (1, "python_interpreter"), (2, "web_search"), (2, "web_search")
    ]  # fmt: skip
    parse_error, code, first, second = t.steps
    assert parse_error.assistant_text == "Eight</code>" and parse_error.output is None
    assert code.user_text.startswith("Error:\nError in code parsing") and code.user_text.endswith(RETRY)
    assert code.tool_args == "print(web_search('spider legs'))"
    assert code.output == "Observation:\nExecution logs:\nSpiders have 8 legs." and not code.output_is_error
    # one observation for the step's calls, given to the first, then the error the step ended with
    assert first.output == "Observation:\nA and B\nCall id: c3\nError:\nReached max steps." + RETRY
    assert first.output_is_error and second.output == ""
    assert json.loads(first.tool_args) == {"query": "a"}
    assert (t.tokens_in, t.tokens_out, t.model_raw) == (900, 40, "m-1")


def test_the_task_id_is_the_questions_without_the_memorys_opening(tmp_path):
    # a run saved as steps hashes the question alone: so does one saved as messages
    (t,) = SmolagentsIngester().parse(_run(tmp_path, MESSAGES))
    assert t.task_id == text_task_id("How many legs has a spider?", "q-", fold_space=False)


def test_calls_that_cannot_be_read_are_named(tmp_path):
    bad = [*MESSAGES[:5], _msg("tool-call", "Calling tools:\n[{'id': 'x', 'function': ")]
    with pytest.raises(IngestError, match=r"intermediate_steps\[5\]: its calls are unreadable"):
        list(SmolagentsIngester().parse(_run(tmp_path, bad)))
