"""Trae Agent trajectories: real ones (tests/fixtures/trae_agent, written by trae-cli at
bytedance/trae-agent e839e55 against a scripted OpenAI Responses / Anthropic Messages API;
make_fixtures.py there), and the shapes its recorder writes in other cases, built on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.base import IngestError

HERE = Path(__file__).parent.parent / "fixtures" / "trae_agent"
OPENAI, ANTHROPIC = HERE / "openai.json", HERE / "anthropic.json"


def _write(path: Path, root: dict) -> Path:
    path.write_text(json.dumps(root, indent=2))
    return path


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_a_real_run_reads_its_calls_outputs_usage_and_times(path):
    assert detect_format(path).name == "trae-agent"
    _, t = read_first(path)
    assert t.source == "trae-agent" and t.task_text.startswith("[Project root path]:")
    assert t.system_prompt.startswith("You are an expert AI software engineering agent")
    view = "str_replace_based_edit_tool"
    assert [s.tool_name for s in t.steps] == [view, view, view, "bash", "task_done"]
    assert [s.turn for s in t.steps] == [0, 1, 1, 2, 3]  # two views in one call
    assert t.steps[0].output_is_error and "nope.py does not exist" in t.steps[0].output
    assert t.steps[1].output.startswith("Here's the result of running `cat -n`")
    assert t.steps[3].output == "8:    return x * 3  # line 3"
    # every call's prompt as the API counted it: the cached part inside it
    usage = [(s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) for s in t.steps if s.usage]
    assert usage == [(2000, 0, 30), (2600, 2000, 30), (3200, 2600, 30), (3800, 3200, 30)]
    assert (t.tokens_in, t.tokens_out, t.api_calls) == (11600, 120, 4)
    stamps = [s.timestamp for s in t.steps]
    assert None not in stamps and stamps == sorted(stamps)
    # the agent's own claim is no outcome
    assert t.success is None and json.loads(t.extra)["agent_success"] is True


def test_each_provider_reads_a_failure_as_its_client_sent_it():
    _, o = read_first(OPENAI)
    _, a = read_first(ANTHROPIC)
    assert o.steps[0].output.startswith("Error: The path ")
    assert a.steps[0].output.startswith("Tool call failed with error:\nThe path ")
    # Anthropic's cache write is part of the prompt too
    assert [s.usage.cache_write_tokens for s in a.steps if s.usage] == [0, 600, 600, 600]


def test_a_google_run_reads_results_as_its_function_responses(tmp_path):
    root = json.loads(OPENAI.read_text())
    root["provider"] = "google"
    root["llm_interactions"][3]["input_messages"][0]["tool_result"]["result"] = "résumé ✓"
    _, t = read_first(_write(tmp_path / "g.json", root))
    error = root["llm_interactions"][1]["input_messages"][0]["tool_result"]["error"]
    assert json.loads(t.steps[0].output) == {"error": error} and "does not exist" in error
    assert t.steps[3].output == '{"result": "résumé ✓"}'  # as the text the SDK sends, not escaped


def test_a_swe_bench_run_takes_its_outcome_from_the_labels_beside_it(tmp_path):
    run = tmp_path / "trajs" / "astropy__astropy-12907.json"
    run.parent.mkdir()
    run.write_text(OPENAI.read_text())
    (tmp_path / "selected_labels.jsonl").write_text(
        json.dumps({"instance_id": "astropy__astropy-12907", "resolved": False}) + "\n"
    )
    _, t = read_first(run)
    assert (t.task_id, t.success, t.outcome_source) == (
        "astropy__astropy-12907",
        False,
        "selected_labels.jsonl:resolved",
    )


def test_text_the_agent_adds_and_a_fresh_history(tmp_path):
    root = json.loads(OPENAI.read_text())
    calls = root["llm_interactions"]
    # an agent on Trae's BaseAgent reflects on a failed call as an assistant message in the next input
    # (BaseAgent.reflect_on_result; TraeAgent's own returns none)
    calls[1]["input_messages"].append({"role": "assistant", "content": "The tool execution failed."})
    # a client called with reuse_history=False sends the system prompt again (LakeView's does, unlogged)
    calls[3]["input_messages"].insert(0, dict(calls[0]["input_messages"][0]))
    _, t = read_first(_write(tmp_path / "x.json", root))
    assert [s.turn for s in t.steps] == [0, 1, 1, 2, 3]  # no call made up for the reflection
    assert t.steps[1].user_text == "The tool execution failed."
    (event,) = t.steps[4].events
    assert event.kind == "compaction" and event.targets == [0, 1, 2, 3]


def test_calls_without_usage_have_none(tmp_path):
    root = json.loads(OPENAI.read_text())
    for it in root["llm_interactions"]:
        it["response"]["usage"] = {"input_tokens": 0, "output_tokens": 0}
    _, t = read_first(_write(tmp_path / "z.json", root))
    assert all(s.usage is None for s in t.steps) and t.tokens_in is None


def test_damaged_runs_name_what_is_wrong(tmp_path):
    root = json.loads(OPENAI.read_text())
    root["llm_interactions"][2]["response"] = None
    with pytest.raises(IngestError, match=r"llm_interactions\[2\]\.response is NoneType"):
        read_first(_write(tmp_path / "a.json", root))
    root = json.loads(OPENAI.read_text())
    root["llm_interactions"][1]["input_messages"][0]["tool_result"]["call_id"] = "elsewhere"
    with pytest.raises(IngestError, match="matches no unanswered tool call"):
        read_first(_write(tmp_path / "b.json", root))
    root = json.loads(OPENAI.read_text())
    root["llm_interactions"] = []
    with pytest.raises(IngestError, match="no model call"):
        read_first(_write(tmp_path / "c.json", root))


def test_a_chat_completions_client_keeps_no_cached_share():
    # Trae's openrouter client drops the API's prompt_tokens_details: the cache share is not known
    _, t = read_first(HERE / "openrouter.json")
    assert [(s.usage.input_tokens, s.usage.cached_tokens) for s in t.steps if s.usage] == [
        (2000, None),
        (2600, None),
        (3200, None),
        (3800, None),
    ]


def test_the_last_turns_outputs_come_from_its_agent_steps(tmp_path):
    # stopped by max_steps after the second turn's tools ran: no later call was sent their results
    _, t = read_first(HERE / "max_steps.json")
    assert [s.turn for s in t.steps] == [0, 1, 1]
    assert all(s.output.startswith("Here's the result of running `cat -n`") for s in t.steps[1:])
    assert json.loads(t.extra)["agent_success"] is False
    root = json.loads((HERE / "max_steps.json").read_text())
    root["agent_steps"][-1]["error"] = "Error code: 400 - the provider failed\nTraceback ..."
    _, t = read_first(_write(tmp_path / "e.json", root))
    assert json.loads(t.extra)["error"] == "Error code: 400 - the provider failed"


def test_a_task_longer_than_the_head_is_still_detected(tmp_path):
    root = json.loads(OPENAI.read_text())
    root["task"] = "x" * 70_000
    path = _write(tmp_path / "long.json", root)
    assert detect_format(path).name == "trae-agent"
