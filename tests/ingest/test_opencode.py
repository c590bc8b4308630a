"""OpenCode export ingester: the source-faithful fixture and bad inputs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.opencode import OpenCodeIngester

ING = OpenCodeIngester()
SID = "ses_6aade4081ffe216ygZUgcUQdR1"


@pytest.fixture
def export_path(repo_root) -> Path:
    return repo_root / "tests" / "fixtures" / "opencode" / f"{SID}.json"


def test_fixture(export_path):
    assert detect_format(export_path).name == "opencode"
    raw = json.loads(export_path.read_text())
    (t,) = ING.parse(export_path)
    tool_parts = [p for m in raw["messages"] for p in m["parts"] if p["type"] == "tool"]
    tool_steps = [s for s in t.steps if s.tool_name]
    assert t.traj_id == f"opencode/{SID}" and t.task_id == SID
    assert t.task_text == "The test in tests/test_ops.py fails. Please fix safe_div."
    assert t.model_raw == "claude-sonnet-4-5-20250929" and t.model_family == "claude-sonnet"
    assert t.n_steps == 12 and len(tool_steps) == len(tool_parts) == 8
    for s, p in zip(tool_steps, tool_parts):
        assert (s.tool_name, s.tool_call_id) == (p["tool"], p["callID"])
        assert json.loads(s.tool_args) == p["state"]["input"]
        want = p["state"].get("output", p["state"].get("error"))
        assert s.output == want  # pruned outputs are kept, not replaced
        assert s.output_is_error == (p["state"]["status"] == "error")
        assert s.timestamp == p["state"]["time"]["start"] / 1000
    # one step-start … step-finish = one turn; two read parts in one step are parallel
    assert [s.turn for s in t.steps] == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert t.steps[0].reasoning.startswith("I should read") and t.steps[0].assistant_text.startswith(
        "I'll read"
    )
    assert t.steps[1].assistant_text == "" and t.steps[3].assistant_text.startswith("safe_div divides")
    assert t.steps[6].tool_name is None and t.steps[6].assistant_text.startswith("Fixed:")
    assert t.steps[7].user_text == "Also add a test for negative numbers."
    # prune → mask event on the first step after it; compaction → on the summary step
    events = [(i, e.kind, e.targets) for i, s in enumerate(t.steps) for e in s.events]
    assert events == [(7, "mask", [0, 1]), (10, "compaction", list(range(10)))]
    assert json.loads(t.steps[10].events[0].detail)["auto"] is True
    assert t.steps[11].user_text == "Continue if you have next steps"
    assert [s.masked_before for s in t.steps] == [[]] * 7 + [[0, 1]] * 4 + [list(range(10))]
    assert t.cost_usd == pytest.approx(sum(m["info"].get("cost", 0) for m in raw["messages"]))
    assert t.api_calls == sum(p["type"] == "step-start" for m in raw["messages"] for p in m["parts"])
    assert t.success is None and t.extra_dict()["pruned_steps"] == 2
    assert Trajectory.from_row(t.to_row()) == t


# ----------------------------------------------------------------------------- bad input


def _write(tmp_path: Path, data) -> Path:
    p = tmp_path / "export.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_truncated_json(tmp_path, export_path):
    p = _write(tmp_path, export_path.read_text()[:5000])
    with pytest.raises(IngestError, match="invalid JSON"):
        list(ING.parse(p))


def test_wrong_types(tmp_path, export_path):
    raw = json.loads(export_path.read_text())
    cases = [
        ({"info": {}, "messages": {}}, "'messages' is dict"),
        ({"info": "x", "messages": []}, "'info' is str"),
    ]
    bad_status = copy.deepcopy(raw)
    bad_status["messages"][1]["parts"][3]["state"]["status"] = "weird"
    cases.append((bad_status, r"messages\[1\].parts\[3\].state.status is 'weird'"))
    bad_parts = copy.deepcopy(raw)
    bad_parts["messages"][0]["parts"] = "text"
    cases.append((bad_parts, r"messages\[0\].parts is str"))
    bad_role = copy.deepcopy(raw)
    bad_role["messages"][2]["info"]["role"] = "system"
    cases.append((bad_role, r"messages\[2\].info.role is 'system'"))
    bad_output = copy.deepcopy(raw)
    bad_output["messages"][1]["parts"][3]["state"]["output"] = 12
    cases.append((bad_output, r"state.output is int"))
    for data, msg in cases:
        with pytest.raises(IngestError, match=msg):
            list(ING.parse(_write(tmp_path, data)))


def test_empty_trajectory(tmp_path, export_path):
    raw = json.loads(export_path.read_text())
    raw["messages"] = raw["messages"][:1]  # the user's request only
    with pytest.raises(IngestError, match="empty trajectory"):
        list(ING.parse(_write(tmp_path, raw)))
    with pytest.raises(IngestError, match="expected an OpenCode export object"):
        list(ING.parse(_write(tmp_path, [])))
