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
