"""tau-bench ingester: the MIT sample in data/raw, the full ../shared file, and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.tau_bench import TauBenchIngester

ING = TauBenchIngester()
FOLDER = "tau-bench_gpt-4o_airline"
FILE = "gpt-4o-airline.json"


def _check_against_raw(ts: list[Trajectory], raw: list[dict]) -> None:
    assert len(ts) == len(raw)
    for t, item in zip(ts, raw):
        assert t.source == "tau-bench"
        assert t.traj_id == f"tau-bench/gpt-4o-airline/{item['task_id']}/trial{item['trial']}"
        assert t.task_id == f"airline/{item['task_id']}"
        assert t.model_raw == "gpt-4o" and t.model_family == "gpt-4o"
        assert t.success is (item["reward"] == 1)
        assert t.outcome_source == "reward"
        msgs = item["traj"]
        assert t.system_prompt == msgs[0]["content"]
        assert t.task_text == next(m["content"] for m in msgs if m["role"] == "user")
        calls = [c for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        replies = [m for m in msgs if m["role"] == "tool"]
        assert t.n_steps == sum(m["role"] == "assistant" for m in msgs)
        tool_steps = [s for s in t.steps if s.tool_name is not None]
        assert len(tool_steps) == len(calls) == len(replies)
        for s, c, r in zip(tool_steps, calls, replies):
            assert s.tool_name == c["function"]["name"] == r["name"]
            assert s.tool_call_id == c["id"] == r["tool_call_id"]
            assert json.loads(s.tool_args) == json.loads(c["function"]["arguments"])
            assert s.output == r["content"]
            assert s.output_is_error == r["content"].startswith("Error:")
        extra = t.extra_dict()
        assert extra["trial"] == item["trial"] and extra["reward"] == item["reward"]
        assert extra["user_instruction"] == item["info"]["task"]["instruction"]
        assert Trajectory.from_row(t.to_row()) == t
    assert len({t.traj_id for t in ts}) == len(ts)


def test_sample_round_trips(data_dir):
    path = data_dir / "raw" / FOLDER / FILE
    assert detect_format(path).name == "tau-bench"
    raw = json.loads(path.read_text())
    assert len(raw) == 16
    ts = list(ING.parse(path))
    _check_against_raw(ts, raw)
    # user turns between steps land on the next step; the closing ###STOP### is kept aside
    t0 = ts[0]
    assert t0.steps[1].user_text == raw[0]["traj"][3]["content"]
    assert "###STOP###" in t0.extra_dict()["trailing_user_text"]


def test_reused_tool_call_ids_pair_in_order(data_dir):
    (t0, *_) = ING.parse(data_dir / "raw" / FOLDER / FILE)
    ids = [s.tool_call_id for s in t0.steps if s.tool_name]
    assert len(ids) > len(set(ids)), "sample item 0 reuses tool_call ids; the test relies on it"
    outs = [s.output for s in t0.steps if s.tool_name]
    assert all(o is not None for o in outs)


@pytest.mark.shared
def test_full_shared_file(shared_traces):
    path = shared_traces / FOLDER / FILE
    raw = json.loads(path.read_text())
    ts = list(ING.parse(path))
    _check_against_raw(ts, raw)
    assert (sum(t.success is True for t in ts), sum(t.success is False for t in ts)) == (84, 116)
    assert sum(s.tool_name is not None for t in ts for s in t.steps) == 1164


# ----------------------------------------------------------------------------- bad input


def _write(tmp_path: Path, data, name: str = "gpt-4o-airline.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def _item(**kw):
    item = {
        "task_id": 7,
        "trial": 0,
        "reward": 1.0,
        "info": {"task": {"instruction": "be a user"}},
        "traj": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ],
    }
    item.update(kw)
    return item


def test_truncated_json(tmp_path):
    p = _write(tmp_path, json.dumps([_item()])[:-40])
    with pytest.raises(IngestError, match="invalid JSON"):
        list(ING.parse(p))


def test_not_a_list(tmp_path):
    with pytest.raises(IngestError, match="expected a JSON list"):
        list(ING.parse(_write(tmp_path, {"task_id": 1})))


def test_wrong_types_name_the_item_and_field(tmp_path):
    p = _write(tmp_path, [_item(), _item(traj="oops"), _item(reward="1")])
    got = []
    with pytest.raises(IngestError) as e:
        for t in ING.parse(p):
            got.append(t)
    assert len(got) == 1 and got[0].success is True
    assert "item 1: 'traj'" in e.value.reason and "item 2: 'reward'" in e.value.reason
    assert "2 of 3 items failed" in e.value.reason


def test_empty_trajectory(tmp_path):
    p = _write(tmp_path, [_item(traj=[{"role": "system", "content": "x"}, {"role": "user", "content": "y"}])])
    with pytest.raises(IngestError, match="empty trajectory"):
        list(ING.parse(p))


def test_empty_list(tmp_path):
    with pytest.raises(IngestError, match="empty file"):
        list(ING.parse(_write(tmp_path, [])))


def test_orphan_tool_reply(tmp_path):
    item = _item()
    item["traj"][3]["tool_call_id"] = "nope"
    with pytest.raises(IngestError, match="matches no unanswered tool call"):
        list(ING.parse(_write(tmp_path, [item])))
