"""AutoCodeRover task-dir ingester: real task dirs from ../shared, plus small synthetic cases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.autocoderover import AutoCodeRoverIngester
from dtoc_rl.ingest.base import IngestError

ING = AutoCodeRoverIngester()
FOLDER = "autocoderover_gpt-4-0125_swebench-lite"
_RESULT_LINE = re.compile(r"(?m)^Result of \w+\(")


def _parse(path: Path) -> Trajectory:
    (traj,) = list(ING.parse(path))
    return traj


def _last_round(d: Path) -> list[dict]:
    rounds = sorted(d.glob("conversation_round_*.json"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    return json.loads(rounds[-1].read_text())


@pytest.mark.shared
def test_every_task_dir_round_trips_with_labels(shared_traces):
    root = shared_traces / FOLDER
    rows = [json.loads(x) for x in (root / "selected_labels.jsonl").read_text().splitlines() if x.strip()]
    labels = {(root / r["task_dir"]).resolve(): r["resolved"] for r in rows}
    dirs = sorted(p for p in (root / "tasks").glob("*/*") if p.is_dir())
    assert len(dirs) == 90
    n_true = 0
    for d in dirs:
        assert detect_format(d).name == ING.name, d
        t = _parse(d)
        assert t.source == "autocoderover" and t.traj_id == f"autocoderover/{d.name}"
        assert (t.model_raw, t.model_family) == ("gpt-4-0125-preview", "gpt-4")
        assert d.name.startswith(t.task_id + "_")
        assert t.success is labels[d.resolve()]
        assert t.outcome_source == f"{FOLDER}/selected_labels.jsonl:resolved"
        n_true += t.success
        conv = _last_round(d)
        # one step per model message, plus one per extra executed search in the same turn
        assert len({s.turn for s in t.steps}) == sum(m["role"] == "assistant" for m in conv)
        # every "Result of <api>(...)" section of the tool responses is one search step
        n_results = sum(len(_RESULT_LINE.findall(m["content"])) for m in conv[2:] if m["role"] == "user")
        searches = [s for s in t.steps if s.tool_name and s.tool_name != "search_for_bug_location"]
        assert len(searches) == n_results
        layer_calls = [c for layer in json.loads((d / "tool_call_layers.json").read_text()) for c in layer]
        for s in searches:
            assert {"func_name": s.tool_name, "arguments": json.loads(s.tool_args)} in [
                {"func_name": c["func_name"], "arguments": c["arguments"]} for c in layer_calls
            ]
            assert s.output is not None and not s.output.startswith("Result of")
        bugloc = [
            m for m in conv if m["role"] == "user" and m["content"].startswith("Here are the code in buggy")
        ]
        assert sum(s.tool_name == "search_for_bug_location" for s in t.steps) == len(bugloc)
        assert Trajectory.from_row(t.to_row()) == t
    assert n_true == 45


@pytest.mark.shared
def test_one_task_dir_by_hand(shared_traces):
    d = next((shared_traces / FOLDER / "tasks/applicable_patch").glob("astropy__astropy-14365_*"))
    t = _parse(d)
    assert t.task_id == "astropy__astropy-14365" and t.success is False  # "Applied but not resolved"
    assert t.task_text.startswith("ascii.qdp Table format assumes QDP commands are upper case")
    assert t.system_prompt.startswith("You are a software developer maintaining a large project.")
    assert [(s.turn, s.tool_name) for s in t.steps] == [
        (0, "search_method_in_class"),
        (0, "search_code"),
        (1, None),  # analysis after "Let's analyze collected context first"
        (2, None),  # answer without API calls -> "The search API calls seem not valid"
        (3, None),
        (4, None),
        (5, "search_code_in_file"),
        (6, None),
        (7, "search_for_bug_location"),
    ]
    s0, s1 = t.steps[0], t.steps[1]
    assert json.loads(s0.tool_args) == {"method_name": "read", "class_name": "Table"}
    assert s0.output == "Could not find method read in class Table`."
    assert s0.read_resource == 'search_method_in_class("read", "Table")'
    assert s0.assistant_text.startswith("To address the issue effectively") and s1.assistant_text == ""
    assert s0.user_text.startswith("Based on the files, classes, methods")
    assert json.loads(s1.tool_args) == {"code_str": "READ SERR"}
    assert s1.output.startswith("Found 12 snippets containing `READ SERR` in the codebase.")
    assert t.steps[2].user_text == "Let's analyze collected context first"
    assert t.steps[3].user_text.startswith("Based on your analysis, answer below questions")
    assert t.steps[4].user_text.startswith("The search API calls seem not valid")
    assert json.loads(t.steps[6].tool_args) == {
        "code_str": "READ SERR",
        "file_name": "astropy/io/ascii/qdp.py",
    }
    last = t.steps[8]
    assert [c["arguments"]["method_name"] for c in json.loads(last.tool_args)["calls"]] == [
        "_line_type",
        "_interpret_err_lines",
        "_write_table_qdp",
    ]
    assert last.output.startswith("Found 1 methods with name `_line_type` in file astropy/io/ascii/qdp.py.")
    assert t.cost_usd == pytest.approx(0.43185) and t.tokens_in == 31449 and t.tokens_out == 3912


# ----------------------------------------------------------------------------- synthetic


def _task_dir(tmp_path: Path, conv) -> Path:
    d = tmp_path / "pkg__pkg-1_2024-04-06_13-27-09"
    d.mkdir()
    (d / "conversation_round_0.json").write_text(conv if isinstance(conv, str) else json.dumps(conv))
    (d / "meta.json").write_text(json.dumps({"task_id": "pkg__pkg-1"}))
    return d


def test_truncated_round_is_an_ingest_error(tmp_path):
    d = _task_dir(tmp_path, '[{"role": "system", "content": "You are')
    assert ING.detect(d, "")
    with pytest.raises(IngestError, match=r"invalid JSON: .* at line 1 column"):
        list(ING.parse(d))


def test_conversation_without_model_turns_is_empty(tmp_path):
    d = _task_dir(
        tmp_path, [{"role": "system", "content": "s"}, {"role": "user", "content": "<issue>x</issue>"}]
    )
    with pytest.raises(IngestError, match="empty trajectory"):
        list(ING.parse(d))


def test_dir_without_rounds_is_not_detected(tmp_path):
    assert not ING.detect(tmp_path, "")
    with pytest.raises(IngestError, match=r"no conversation_round_N\.json"):
        list(ING.parse(tmp_path))


def test_synthetic_results_without_layers_parse_header_args(tmp_path):
    conv = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "<issue>bug</issue>"},
        {"role": "assistant", "content": 'search_code("a(b):")'},
        {
            "role": "user",
            "content": 'Result of search_code("a(b):");:\nno\n\nResult of search_class("C"):\nyes\n\n',
        },
        {"role": "user", "content": "Let's analyze collected context first"},
        {"role": "assistant", "content": "done"},
    ]
    t = _parse(_task_dir(tmp_path, conv))
    assert t.task_text == "bug" and t.task_id == "pkg__pkg-1"
    assert [(s.tool_name, json.loads(s.tool_args) if s.tool_args else None, s.output) for s in t.steps] == [
        ("search_code", {"code_str": "a(b):"}, "no"),
        ("search_class", {"class_name": "C"}, "yes"),
        (None, None, None),
    ]
