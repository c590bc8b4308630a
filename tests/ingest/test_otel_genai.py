"""OpenTelemetry GenAI traces (OTLP JSON), as five real instrumentation setups exported them.

tests/fixtures/otel_genai: one agent (three chat calls, two read_file tool calls, the last call to
gpt-4o-mini) run twice under each of openai-v2 2.3 (content as log records in a file beside the
spans), openai-v2 2.4 (gen_ai.input/output.messages), OpenLLMetry 0.54 (gen_ai.prompt.N) and 0.62
(gen_ai.input.messages), and OpenInference (llm.input_messages.N); README.md there says how.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.sim.episode import compile_episode

HERE = Path(__file__).parent.parent / "fixtures" / "otel_genai"
SPANS = ["openai_v2.jsonl", "openai_v2_latest.jsonl", "openllmetry.jsonl", "openllmetry_latest.jsonl",
         "openinference.jsonl"]  # fmt: skip


def _read(path: Path) -> tuple[list, list]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ingest_paths([path], progress=False)
    return res.trajectories, res.skipped


def _view(t):
    return (
        t.task_text,
        t.system_prompt,
        t.model_raw,
        [(s.tool_name, s.tool_args, s.output, s.assistant_text, s.model) for s in t.steps],
        [(s.usage.input_tokens, s.usage.output_tokens) for s in t.steps],
    )


@pytest.mark.parametrize("name", SPANS)
def test_every_instrumentation_reads_as_the_same_runs(name):
    got, skipped = _read(HERE / name)
    assert not skipped and detect_format(HERE / name).name == "otel-genai"
    ref, _ = _read(HERE / "openllmetry_latest.jsonl")
    by_task = {t.task_text: _view(t) for t in ref}
    assert len(got) == 2 and {t.task_text for t in got} == set(by_task)
    for t in got:
        assert _view(t) == by_task[t.task_text]
        assert [s.tool_name for s in t.steps] == ["read_file", "read_file", None]
        assert t.steps[0].output.startswith('"""alpha:') and t.steps[1].output.startswith('"""beta:')
        assert t.steps[2].assistant_text.startswith("Summary:")
        # each call keeps its model: the last went to gpt-4o-mini, billed at its own prices
        assert compile_episode(t).call_model.tolist() == [0, 0, 1]
        times = [s.timestamp for s in t.steps]
        assert None not in times and times == sorted(times)


def test_cached_tokens_where_the_instrumentation_records_them():
    for name in ("openllmetry.jsonl", "openllmetry_latest.jsonl", "openinference.jsonl"):
        (t, _), _ = _read(HERE / name)
        assert [s.usage.cached_tokens for s in t.steps] == [0, 128, 512], name
    (t, _), _ = _read(HERE / "openai_v2_latest.jsonl")  # openai-v2 leaves the cached share out
    assert [s.usage.cached_tokens for s in t.steps] == [None, None, None]


def test_content_logged_apart_is_read_from_the_file_beside_and_its_absence_named(tmp_path):
    shutil.copy(HERE / "openai_v2.jsonl", tmp_path / "spans.jsonl")
    got, skipped = _read(tmp_path / "spans.jsonl")
    assert not got and "content capture" in skipped[0].reason
    shutil.copy(HERE / "openai_v2_logs.jsonl", tmp_path / "logs.jsonl")
    got, skipped = _read(tmp_path)
    assert len(got) == 2 and [s.tool_name for s in got[0].steps] == ["read_file", "read_file", None]
    assert [s.path.rsplit("/", 1)[-1] for s in skipped] == ["logs.jsonl"]
    assert "log records only" in skipped[0].reason


def test_two_conversations_in_one_trace_are_two_runs(tmp_path):
    lines = [json.loads(x) for x in (HERE / "openllmetry_latest.jsonl").read_text().splitlines()]
    first = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    for doc in lines[1:]:  # the second agent's calls in the first one's trace (a sub-agent, say)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["traceId"] = first
    f = tmp_path / "one_trace.jsonl"
    f.write_text("".join(json.dumps(d) + "\n" for d in lines))
    got, _ = _read(f)
    assert [t.traj_id.split("/", 1)[1] for t in got] == [first, f"{first}/1"]
    assert [t.api_calls for t in got] == [3, 3] and got[0].task_text != got[1].task_text


def test_a_damaged_export_is_named_in_one_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    good = (HERE / "openllmetry.jsonl").read_text().splitlines()[0]
    f.write_text(good + "\n" + good[:200] + "\n")
    got, skipped = _read(f)
    assert not got and "line 2: not JSON" in skipped[0].reason
    f.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "GET /"}]}]}]}))
    got, skipped = _read(f)
    assert not got and "no model-call spans" in skipped[0].reason


MORE = HERE / "more"  # exports of further setups, made to find what the reader got wrong (README.md)


def test_an_agent_that_trims_its_history_is_one_run_whose_calls_left_turns_out():
    # the agent keeps the system message and its last four messages (trace 2 keeps the task too)
    got, _ = _read(MORE / "trim_openllmetry.jsonl")
    assert len(got) == 2  # one run per trace, not one per call
    for t in got:
        assert t.api_calls == 6 and [s.tool_name for s in t.steps][-1] is None
        assert all(s.output for s in t.steps if s.tool_name) and all(s.usage for s in t.steps)
        # what each call was no longer sent, as a harness that keeps its last N messages drops them
        # (and [] where it was sent everything: each call's visibility is known)
        assert [s.dropped_before for s in t.steps] == [[], [], [], [0], [0, 1], [0, 1, 2]]
        assert t.steps[3].masked_before == [0]


def test_a_call_recorded_by_two_instrumentations_is_one_call():
    # the Anthropic SDK's own span and OpenLLMetry's, siblings with one gen_ai.response.id
    (both, _), _ = _read(MORE / "anthropic_sdk_openllmetry.jsonl")
    (sdk, _), _ = _read(MORE / "anthropic_sdk.jsonl")
    assert both.api_calls == sdk.api_calls == 3 and both.tokens_in == sdk.tokens_in
    # LangChain's spans and the OpenAI client's, whose spans start traces of their own; the chat's
    # second turn, traced apart, continues the first
    (chat,), _ = _read(MORE / "langchain_plus_openai.jsonl")
    assert chat.api_calls == 4 and len(json.loads(chat.extra)["traces"]) == 2
    assert [s.tool_name for s in chat.steps] == ["read_file", "read_file", None, None]


def test_content_an_sdk_cut_is_taken_from_the_calls_that_recorded_it():
    # ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES: the oldest parts emptied in the last call
    (cut, _), _ = _read(MORE / "anthropic_sdk_trunc.jsonl")
    (whole, _), _ = _read(MORE / "anthropic_sdk.jsonl")
    assert _view(cut)[:4] == _view(whole)[:4] and not any(s.dropped_before for s in cut.steps)
    # the SDK's cache writes (gen_ai.usage.cache_write.input_tokens)
    assert [s.usage.cache_write_tokens for s in whole.steps] == [2048, 0, 512]


def test_instructions_beside_a_system_prompt_and_a_failed_tool():
    (t,), _ = _read(MORE / "pydantic_ai_v6.jsonl")
    assert t.system_prompt.endswith("Answer in English.")  # pydantic-ai sends both
    assert [s.output_is_error for s in t.steps if s.tool_name] == [True, False, False]  # ModelRetry


def _spans(doc: dict) -> list[dict]:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _edit(tmp_path: Path, name: str, edit) -> Path:
    lines = [json.loads(x) for x in (HERE / name).read_text().splitlines()]
    edit(lines)
    f = tmp_path / f"edited_{name}"
    f.write_text("".join(json.dumps(d) + "\n" for d in lines))
    return f


def _attr(span: dict, key: str) -> dict:
    return next(a for a in span["attributes"] if a["key"] == key)


def test_a_span_whose_messages_were_cut_loses_only_itself_and_is_named(tmp_path):
    def cut(lines):  # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT cuts a JSON attribute mid-string
        value = _attr(_spans(lines[1])[0], "gen_ai.input.messages")["value"]
        value["stringValue"] = value["stringValue"][:300]

    got, skipped = _read(_edit(tmp_path, "openllmetry_latest.jsonl", cut))
    assert len(got) == 2 and sorted(t.api_calls for t in got) == [2, 3]  # the rest of both runs read
    (skip,) = skipped
    assert skip.reason.startswith("1 model-call spans not read (span ")
    assert "gen_ai.input.messages is not JSON" in skip.reason  # the attribute at fault, named


def test_an_export_whose_every_call_is_unreadable_says_so_not_that_it_has_none(tmp_path):
    def cut_all(lines):
        for doc in lines:
            for span in _spans(doc):
                if any(a["key"] == "gen_ai.output.messages" for a in span.get("attributes", [])):
                    _attr(span, "gen_ai.output.messages")["value"]["stringValue"] = '[{"role": "assis'

    from dtoc_rl.ingest.otel_genai import OtelGenAIIngester

    said = r"no model call read: the messages of \d+ model-call spans cannot be read, first span "
    with pytest.raises(IngestError, match=said + r".*gen_ai.output.messages is not JSON"):
        list(OtelGenAIIngester().parse(_edit(tmp_path, "openllmetry_latest.jsonl", cut_all)))


def test_agent_spans_retries_and_unknown_starts_do_not_make_runs(tmp_path):
    def edit(lines):
        first = _spans(lines[0])
        calls = [s for s in first if s["name"] != "agent_run"]
        root = next(s for s in first if s["name"] == "agent_run")
        # the agent's own span with its input and answer, as the conventions allow
        root.setdefault("attributes", [])
        root["attributes"] += [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}]
        root["attributes"] += [
            _attr(calls[-1], "gen_ai.input.messages"),
            _attr(calls[-1], "gen_ai.output.messages"),
        ]
        # the second call retried (the same input again), and the last call's start not recorded
        again = json.loads(json.dumps(calls[1]))
        again["spanId"] = "f" * 16
        _attr(again, "gen_ai.response.id")["value"]["stringValue"] = "chatcmpl-retried"  # a call of its own
        again["startTimeUnixNano"] = str(int(calls[1]["startTimeUnixNano"]) + 1000)
        lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"].append(again)
        del calls[2]["startTimeUnixNano"]

    got, skipped = _read(_edit(tmp_path, "openllmetry_latest.jsonl", edit))
    assert not skipped and len(got) == 2
    ref, _ = _read(HERE / "openllmetry_latest.jsonl")
    assert sorted(_view(t)[3] for t in got) == sorted(_view(t)[3] for t in ref)
