"""OpenHands agent-SDK conversations as the real SDK keeps them (tests/fixtures/openhands_sdk, written by
openhands-sdk 1.58.2 through LiteLLM against a scripted chat-completions API; make_fixtures.py
there): the events folder with each call's usage from ``base_state.json``, a condensation, and the
same run as a benchmark row."""

from __future__ import annotations

import json
from pathlib import Path

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.openhands import OpenHandsSDKIngester, _combined

HERE = Path(__file__).parent.parent / "fixtures" / "openhands_sdk"
PLAIN = next((HERE / "plain").glob("*/events"))
CONDENSED = next((HERE / "condensed").glob("*/events"))


def test_a_real_conversation_reads_its_calls_outputs_and_usage():
    assert detect_format(PLAIN).name == "openhands-conversation"
    _, t = read_first(PLAIN)
    assert t.source == "openhands-sdk" and t.model_raw == "openai/gpt-4o"
    assert t.task_text.startswith("Which functions multiply by 3?")
    assert [s.tool_name for s in t.steps] == ["file_editor"] * 5 + ["finish"]
    assert [s.turn for s in t.steps] == [0, 1, 1, 2, 3, 4]  # two views in one call
    assert t.steps[0].output_is_error and "nope.py" in t.steps[0].output
    assert t.steps[1].output.startswith("Here's the result of running `cat -n`")
    # each call's usage from the conversation's stats, by the response id its actions name
    usage = [(s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) for s in t.steps if s.usage]
    assert usage == [(3000, 0, 40), (3500, 3000, 40), (4000, 3500, 40), (4500, 4000, 40), (5000, 4500, 40)]
    assert t.steps[2].usage is None  # the second call of a turn
    assert (t.tokens_in, t.tokens_out, t.api_calls) == (20000, 200, 5) and t.cost_usd > 0


def test_a_condensation_forgets_the_steps_whose_events_it_names():
    _, t = read_first(CONDENSED)
    events = [(i, e.kind, e.targets) for i, s in enumerate(t.steps) for e in s.events]
    assert events == [(4, "compaction", [0, 1, 2, 3])]
    assert "Summary: the agent viewed" in json.loads(t.steps[4].events[0].detail)["summary"]
    # the condenser's summary call is billed too: six calls, its tokens in the totals
    assert t.api_calls == 6 and t.tokens_in == 25500


def test_a_benchmark_row_of_the_same_run_reads_the_same(tmp_path):
    _, folder = read_first(PLAIN)
    events = [json.loads(f.read_text()) for f in sorted(PLAIN.glob("event-*.json"))]
    state = json.loads((PLAIN.parent / "base_state.json").read_text())
    row = {"instance_id": "mul3", "history": events, "metrics": _combined(state["stats"])}
    (tmp_path / "output.jsonl").write_text(json.dumps(row) + "\n")
    (t,) = OpenHandsSDKIngester().parse(tmp_path / "output.jsonl")
    assert [(s.tool_name, s.output, s.usage) for s in t.steps] == [
        (s.tool_name, s.output, s.usage) for s in folder.steps
    ]


def test_a_sub_agents_metrics_the_sdk_copies_into_its_parent_are_not_counted_twice():
    # the task tool and delegation copy a sub-agent's metrics into the parent's stats under
    # "task:<id>" / "delegate:<id>"; the sub-agent's own conversation (subagents/<id>/) bills them
    state = json.loads((PLAIN.parent / "base_state.json").read_text())
    stats = state["stats"]
    own = _combined(stats)
    copied = dict(stats["usage_to_metrics"]["agent"])
    stats["usage_to_metrics"]["task:task_00000001"] = copied
    stats["usage_to_metrics"]["delegate:d1"] = copied
    assert _combined(stats) == own
    stats["usage_to_metrics"]["condenser"] = copied  # a condenser's calls are the conversation's own
    assert (
        _combined(stats)["accumulated_token_usage"]["prompt_tokens"]
        == 2 * own["accumulated_token_usage"]["prompt_tokens"]
    )
