"""Generic OpenAI chat JSONL ingester: real tau-bench chats re-wrapped, edge cases, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.openai_chat import OpenAIChatIngester, chat_to_steps, iso_to_epoch
from dtoc_rl.ingest.tau_bench import TauBenchIngester

ING = OpenAIChatIngester()
TAU = Path("raw") / "tau-bench_gpt-4o_airline" / "gpt-4o-airline.json"


def _jsonl(tmp_path: Path, rows, name: str = "chats.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_real_chats_match_tau_ingester(tmp_path, data_dir):
    raw = json.loads((data_dir / TAU).read_text())
    rows = [
        {
            "id": f"{x['task_id']}-{x['trial']}",
            "model": "gpt-4o-2024-08-06",
            "reward": x["reward"],
            "messages": x["traj"],
        }
        for x in raw
    ]
    rows[-1] = raw[-1]["traj"]  # one bare message list
    p = _jsonl(tmp_path, rows)
    assert detect_format(p).name == "openai-chat"
    ts = list(ING.parse(p))
    tau = list(TauBenchIngester().parse(data_dir / TAU))
    assert len(ts) == len(tau) == 16
    for t, ref in zip(ts, tau):
        assert t.n_steps == ref.n_steps
        for a, b in zip(t.steps, ref.steps):
            assert (
                a.turn,
                a.user_text,
                a.assistant_text,
                a.tool_name,
                a.tool_args,
                a.tool_call_id,
                a.output,
            ) == (
                b.turn,
                b.user_text,
                b.assistant_text,
                b.tool_name,
                b.tool_args,
                b.tool_call_id,
                b.output,
            )
        assert t.task_text == ref.task_text and t.system_prompt == ref.system_prompt
        assert Trajectory.from_row(t.to_row()) == t
    assert ts[0].traj_id == "openai-chat/chats/0-0" and ts[0].model_family == "gpt-4o"
    assert [t.success for t in ts[:-1]] == [x["reward"] == 1 for x in raw[:-1]]
    assert ts[-1].success is None and ts[-1].traj_id == "openai-chat/chats/line16"


def test_parallel_calls_replies_out_of_order(tmp_path):
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "two at once",
            "tool_calls": [_call("a", "read", {"p": "x"}), _call("b", "read", {"p": "y"})],
            "timestamp": "2026-05-01T10:00:00Z",
        },
        {"role": "tool", "tool_call_id": "b", "content": "Y"},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "X"}]},
        {"role": "user", "content": "more"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c", "run", {})],
            "timestamp": 1777629660,
        },
        {"role": "tool", "content": "no id"},
        {"role": "assistant", "content": "bye"},
    ]
    (t,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs, "success": False, "task_id": "T1"}]))
    s = t.steps
    assert [x.turn for x in s] == [0, 0, 1, 2]
    assert [x.timestamp for x in s] == [
        1777629600.0,
        1777629600.0,
        1777629660.0,
        None,
    ]  # a call's time, if given
    assert (s[0].assistant_text, s[1].assistant_text) == ("two at once", "")
    assert (s[0].output, s[1].output, s[2].output) == ("X", "Y", "no id")
    assert s[0].tool_args == '{"p": "x"}'
    assert s[2].user_text == "more" and s[3].tool_name is None and s[3].output is None
    assert t.success is False and t.outcome_source == "row:success" and t.task_id == "T1"
    assert t.system_prompt == "sys" and t.task_text == "task"


def test_duplicate_pending_ids_answer_in_order(tmp_path):
    msgs = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("x", "f", {"i": 1}), _call("x", "f", {"i": 2})],
        },
        {"role": "tool", "tool_call_id": "x", "content": "first"},
        {"role": "tool", "tool_call_id": "x", "content": "second"},
    ]
    (t,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs}]))
    assert [s.output for s in t.steps] == ["first", "second"]


@pytest.mark.parametrize(
    ("row", "want"),
    [
        ({"reward": 1}, (True, "row:reward==1")),
        ({"reward": 0.0}, (False, "row:reward==0")),
        ({"reward": 0.5}, (None, "")),
    ],
)
def test_reward_rule(tmp_path, row, want):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    (t,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs, **row}]))
    assert (t.success, t.outcome_source) == want


def test_detection_is_strict(tmp_path, repo_root):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    j = tmp_path / "a.json"
    j.write_text(json.dumps(msgs))
    assert ING.detect(j, j.read_text())  # a saved run: a bare message list in a .json file
    acr = tmp_path / "conversation_round_0.json"
    acr.write_text(json.dumps(msgs))
    assert not ING.detect(acr, acr.read_text())  # a piece of an AutoCodeRover task folder
    tau_like = _jsonl(tmp_path, [{"traj": msgs, "reward": 1}], "tau.jsonl")
    assert not ING.detect(tau_like, tau_like.read_text())
    fixture = next((repo_root / "tests/fixtures/claude_code_transcript").glob("*.jsonl"))
    assert not ING.detect(fixture, fixture.read_text()[:65536])
    oh = repo_root / "tests/fixtures/openhands_legacy/output.jsonl"
    assert not ING.detect(oh, oh.read_text()[:65536])


def test_iso_to_epoch():
    assert iso_to_epoch("1970-01-01T00:00:10Z") == 10.0
    assert iso_to_epoch("1970-01-01T00:00:10.1234567") == pytest.approx(10.123456)
    assert iso_to_epoch("1970-01-01T01:00:00+01:00") == 0.0
    assert iso_to_epoch("yesterday") is None and iso_to_epoch(None) is None
    # epoch numbers: seconds as they are; milliseconds (JavaScript's Date.now()) and finer scaled down
    assert (
        iso_to_epoch(1717000000)
        == iso_to_epoch(1717000000000)
        == iso_to_epoch(1717000000000000)
        == 1717000000.0
    )
    assert iso_to_epoch(1717000000123) == pytest.approx(1717000000.123)
    assert iso_to_epoch(-5) is None and iso_to_epoch(float("nan")) is None and iso_to_epoch(True) is None
    # beyond nanoseconds a number is no time at all, not a plausible date after enough divisions
    assert iso_to_epoch(1717000000 * 10**9) == 1717000000.0
    assert iso_to_epoch(1e300) is None and iso_to_epoch(1717000000 * 10**12) is None
    # placeholder dates before 1970 are no times, as negative numbers are; year 1 east of UTC is out of
    # datetime's range once shifted
    assert iso_to_epoch("0001-01-01T00:00:00Z") is None and iso_to_epoch("1969-12-31T23:59:59Z") is None
    assert iso_to_epoch("0001-01-01T00:00:00+01:00") is None


# ----------------------------------------------------------------------------- bad input

GOOD = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def test_truncated_line_is_reported_after_good_rows(tmp_path):
    p = _jsonl(tmp_path, [GOOD, json.dumps(GOOD)[:-7], GOOD])
    got = []
    with pytest.raises(IngestError) as e:
        for t in ING.parse(p):
            got.append(t)
    assert len(got) == 2
    assert "1 of 3 lines failed" in e.value.reason and "line 2: invalid JSON" in e.value.reason


def test_wrong_types(tmp_path):
    rows = [
        {"messages": "nope"},
        {"messages": [{"role": "robot", "content": "x"}]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}]},
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "tool", "tool_call_id": "z", "content": ""},
            ]
        },
        42,
        {**GOOD, "id": {"x": 1}},
        {**GOOD, "task_id": [1, 2]},
    ]
    with pytest.raises(IngestError) as e:
        list(ING.parse(_jsonl(tmp_path, rows)))
    r = e.value.reason
    assert "8 of 8 lines failed" in r
    assert "line 7: 'id' is dict, expected text or a number" in r
    assert "line 8: 'task_id' is list, expected text or a number" in r
    assert "line 1: 'messages' is str, expected a list of messages" in r
    assert "line 2: messages[0] has role 'robot'" in r
    assert "line 3: messages[0].content has type int" in r
    assert "line 4: messages[0].tool_calls[0] must be an object with a 'function'" in r
    assert "line 5: messages[1]: tool reply" in r
    assert "line 6: row is int" in r


def test_empty_trajectory_and_empty_file(tmp_path):
    with pytest.raises(IngestError, match="line 1: empty trajectory"):
        list(ING.parse(_jsonl(tmp_path, [{"messages": [{"role": "user", "content": "q"}]}])))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(IngestError, match="empty file"):
        list(ING.parse(empty))


def test_chat_to_steps_rejects_non_list():
    with pytest.raises(IngestError, match="expected a list of messages"):
        chat_to_steps({"role": "user"})


def test_dtoc_visibility_becomes_the_masking_schedule(tmp_path):
    msgs = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "bash", {"command": "ls"})]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [_call("b", "bash", {"command": "pwd"})]},
        {"role": "tool", "tool_call_id": "b", "content": "/"},
    ]
    vis = {"1": {"masked_before": [0], "events": [{"kind": "disable", "targets": [0], "detail": "t0000"}]}}
    (t,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs, "dtoc_visibility": json.dumps(vis)}]))
    assert [s.masked_before for s in t.steps] == [[], [0]]
    assert [(e.kind, e.targets, e.detail) for e in t.steps[1].events] == [("disable", [0], "t0000")]
    (plain,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs}], name="plain.jsonl"))
    assert [s.masked_before for s in plain.steps] == [None, None]  # unknown, not "nothing hidden"
    unknown = {"0": {"masked_before": None, "events": []}}  # e.g. a step from before a resume
    (t,) = ING.parse(_jsonl(tmp_path, [{"messages": msgs, "dtoc_visibility": unknown}], name="u.jsonl"))
    assert [s.masked_before for s in t.steps] == [None, []]


@pytest.mark.parametrize(
    ("vis", "says"),
    [
        ("{not json", "not JSON"),
        ("[1]", "expected an object"),
        ({"7": {"masked_before": [0]}}, "bad step index '7'"),
        ({"01": {"masked_before": [0]}}, "bad step index '01'"),
        ({"1": {"masked_before": [5]}}, "step 1 masked_before must be null or a list of distinct earlier"),
        ({"1": {"masked_before": 0}}, "step 1 masked_before must be"),
        ({"1": {"masked_before": [0, 0]}}, "step 1 masked_before must be"),
        ({"0": {"masked_before": [1]}}, "step 0 masked_before must be"),
        ({"1": {"events": {}}}, "step 1 events must be a list"),
        ({"1": {"events": [{"kind": "explode"}]}}, "bad event"),
        ({"1": {"events": [{"kind": "disable", "targets": [9]}]}}, "bad event"),
    ],
)
def test_bad_dtoc_visibility_is_an_error_that_says_what(tmp_path, vis, says):
    msgs = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "bash", {"command": "ls"})]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "assistant", "content": "done"},
    ]
    good = {"messages": msgs}
    path = _jsonl(tmp_path, [{"messages": msgs, "dtoc_visibility": vis}, good])
    got = []
    with pytest.raises(IngestError, match=r"1 of 2 lines failed: line 1: ") as e:
        got.extend(ING.parse(path))  # the good row still comes out
    assert says in str(e.value) and len(got) == 1


@pytest.mark.parametrize(
    ("logged", "source"),
    [("proxy:claude-cli", "proxy:claude-cli"), ("../../etc", "openai-chat"), ("A" * 5, "openai-chat"),
     (7, "openai-chat"), (None, "openai-chat"), ("repolaunch", "openai-chat"), ("swe-agent", "openai-chat")],
)  # fmt: skip
def test_a_run_named_by_its_log_keeps_a_plain_name_only(tmp_path, logged, source):
    msgs = [{"role": "user", "content": "Fix it."},
            {"role": "assistant", "content": "", "tool_calls": [_call("c1", "bash", {"command": "ls"})]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]  # fmt: skip
    row = {"id": "r", "model": "gpt-4o", "messages": msgs, "dtoc_source": logged}
    (traj,) = ING.parse(_jsonl(tmp_path, [row]))
    assert traj.source == source


def test_an_orchestrator_refuses_a_log_source_ingest_would_not_keep():
    from dtoc_rl.serve.orchestrator import Orchestrator

    for bad, says in (("repolaunch", "not be an ingester's name"), ("My Team", "short plain name")):
        with pytest.raises(ValueError, match=says):
            Orchestrator(log_source=bad)
    assert Orchestrator(log_source="team:nightly").log_row()["dtoc_source"] == "team:nightly"
