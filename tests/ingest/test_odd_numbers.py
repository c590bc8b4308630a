"""Values a JSON log may hold but no provider writes: infinite or negative usage counts, a tool
call id that is not a string."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dtoc_rl.ingest.common import usage_from
from dtoc_rl.ingest.driver import ingest_paths

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _chat(usage: str) -> str:
    # written as text: json.dumps cannot write 1e999, but a log file can hold it
    return (
        '{"messages": [{"role": "user", "content": "fix it"},'
        ' {"role": "assistant", "content": null, "usage": ' + usage + ","
        ' "tool_calls": [{"id": "c1", "type": "function",'
        ' "function": {"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}}]},'
        ' {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]}'
    )


def test_usage_counts_that_are_infinite_or_negative_are_not_figures():
    assert usage_from({"prompt_tokens": float("inf"), "completion_tokens": 3}).input_tokens is None
    assert usage_from({"prompt_tokens": 10, "completion_tokens": -5}).output_tokens is None
    anth = usage_from({"input_tokens": 5, "cache_read_input_tokens": float("inf"), "output_tokens": 1})
    assert anth.input_tokens == 5 and anth.cached_tokens is None
    assert usage_from({"prompt_tokens": 10, "completion_tokens": 1, "cost": -0.5}).cost_usd is None


def test_usage_counts_written_as_decimal_text_are_figures_and_other_text_is_not():
    u = usage_from({"prompt_tokens": "1200", "completion_tokens": " 7 ", "cost": "5e-05"})
    assert (u.input_tokens, u.output_tokens, u.cost_usd) == (1200, 7, 5e-05)
    assert usage_from({"prompt_tokens": 1, "cost": "0.30000000000000004"}).cost_usd == 0.30000000000000004
    for odd in ("abc", "-5", "", "12 tokens", "9" * 40, "1e999", "nan"):
        assert usage_from({"prompt_tokens": odd, "completion_tokens": 1}).input_tokens is None, odd


def test_a_chat_log_with_an_infinite_usage_count_is_ingested(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(_chat('{"prompt_tokens": 1e999, "completion_tokens": 7}'))
    res = ingest_paths([f], progress=False)
    assert not res.skipped
    (t,) = res.trajectories
    assert t.steps[0].usage.input_tokens is None and t.steps[0].usage.output_tokens == 7


def test_a_usage_count_that_is_no_figure_leaves_its_total_unknown_and_the_batch_goes_on(tmp_path):
    # Claude Code's usage totals are summed by the ingester itself: 1e999 or "12x" there overflowed
    # int() or raised, and skipped the whole log
    src = next((FIXTURES / "claude_code_transcript").glob("*.jsonl"))
    good = tmp_path / "good.json"
    good.write_text(_chat('{"prompt_tokens": 10, "completion_tokens": 2}'))
    (plain,) = [t for t in ingest_paths([src], progress=False).trajectories]
    assert plain.tokens_out and plain.tokens_out > 0
    for odd in ("1e999", '"12x"'):
        bad = tmp_path / odd.strip('"') / src.name
        bad.parent.mkdir()
        # every record of a message carries its usage (the last one counts): change them all
        bad.write_text(re.sub(r'"output_tokens": ?[0-9]+', f'"output_tokens": {odd}', src.read_text()))
        shutil.copy(src.parent / "README.md", bad.parent / "README.md")
        res = ingest_paths([bad, good], progress=False)
        assert not res.skipped and sorted(t.source for t in res.trajectories)[-1] == "openai-chat"
        (t,) = [t for t in res.trajectories if t.source != "openai-chat"]
        assert t.tokens_out is None and t.tokens_in == plain.tokens_in  # the input total is intact


@pytest.mark.parametrize("call_id", ['{"a": [1]}', "[1, 2]", "7"])
def test_a_tool_call_id_that_is_not_a_string_skips_its_file_and_the_batch_goes_on(tmp_path, call_id):
    # the labeller keys tool calls by their id: an object there ended the batch with a traceback
    src = next((FIXTURES / "opencode").glob("ses_*.json"))
    bad = tmp_path / src.name
    bad.write_text(re.sub(r'"callID": ?"[^"]*"', f'"callID": {call_id}', src.read_text(), count=1))
    good = tmp_path / "good.json"
    good.write_text(_chat('{"prompt_tokens": 10, "completion_tokens": 2}'))

    res = ingest_paths([bad, good], progress=False)
    assert [t.source for t in res.trajectories] == ["openai-chat"]
    (skip,) = res.skipped
    assert skip.path.endswith(src.name) and "tool call id" in skip.reason and "\n" not in skip.reason


def _swe_agent(thought, observation) -> str:
    entry = {"action": "ls", "observation": observation, "thought": thought, "response": "r", "state": "{}"}
    history = [
        {"role": "system", "content": "sys", "agent": "primary"},
        {"role": "user", "content": "fix it"},
    ]
    return json.dumps({"environment": "swe_main", "trajectory": [entry], "history": history, "info": {}})


@pytest.mark.parametrize(
    ("thought", "observation", "field"),
    [
        (-1.5, "a.py", "assistant text is float"),
        ("look", {"a": [1]}, "output is dict"),
        ("look", 123, "step 0: output is int, expected string"),
    ],
)
def test_a_text_field_of_another_type_skips_its_file_and_the_batch_goes_on(
    tmp_path, thought, observation, field
):
    # the need labeller reads these as text: a number or an object ended the batch with a traceback
    ok = tmp_path / "ok" / "inst-1.traj"
    ok.parent.mkdir()
    ok.write_text(_swe_agent("look", "a.py"))
    bad = tmp_path / "inst-2.traj"
    bad.write_text(_swe_agent(thought, observation))

    res = ingest_paths([bad, ok], progress=False)
    assert [t.traj_id for t in res.trajectories] == [
        ingest_paths([ok], progress=False).trajectories[0].traj_id
    ]
    (skip,) = res.skipped
    assert skip.path.endswith("inst-2.traj") and field in skip.reason and "\n" not in skip.reason


@pytest.mark.parametrize("cost", ["-", "+", "1e999", "-0.5"])
def test_a_repolaunch_cost_that_is_no_price_is_not_logged_and_the_log_is_kept(tmp_path, cost):
    # one odd tag ("-" raised ValueError: the whole log, all its conversations, was skipped)
    src = FIXTURES / "repolaunch"
    shutil.copytree(src, tmp_path / "r")
    log = next((tmp_path / "r").rglob("setup.log"))
    log.write_text(log.read_text().replace("cost_usd: 0.009 ", f"cost_usd: {cost} ", 1))
    res = ingest_paths([log], progress=False)
    assert not res.skipped and res.trajectories
    usages = [s.usage for t in res.trajectories for s in t.steps if s.usage is not None]
    (odd,) = [u for u in usages if u.input_tokens == 5000]
    assert odd.cost_usd is None and odd.output_tokens == 20
    assert all(u.cost_usd is None or 0 <= u.cost_usd < 1 for u in usages)


def test_replay_of_a_malformed_log_is_a_one_line_error(tmp_path, capsys):
    # read_first (dtoc-rl replay, the live example's --replay) let the OverflowError out as a traceback
    from dtoc_rl.cli import main as cli
    from dtoc_rl.ingest import IngestError, read_first

    src = next((FIXTURES / "claude_code_transcript").glob("*.jsonl"))
    bad = tmp_path / src.name
    lines = src.read_text().splitlines()
    lines[10] = lines[10][:50]  # a line cut short
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match="line 11: invalid JSON"):
        read_first(bad)
    assert cli(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dtoc-rl: error:") and "line 11: invalid JSON" in err and "\n" not in err


def test_replay_of_a_fifo_is_refused_without_opening_it(tmp_path, capsys):
    # dtoc-rl replay FIFO waited for a writer forever (the ingest driver already refuses FIFOs)
    import os
    import threading

    from dtoc_rl.cli import main as cli

    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    codes: list = []
    worker = threading.Thread(target=lambda: codes.append(cli(["replay", str(fifo)])), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # let the blocked reader go before failing
        with open(fifo, "w"):
            pass
        worker.join(timeout=5)
        pytest.fail("dtoc-rl replay blocked on a FIFO")
    assert codes == [2] and "FIFO" in capsys.readouterr().err


def test_a_trajectory_the_labeller_fails_on_is_skipped_and_the_others_are_kept(tmp_path, monkeypatch):
    # labelling ran outside the per-file guard: any exception there ended the batch with a traceback
    import dtoc_rl.labels

    real = dtoc_rl.labels.label_trajectory

    def picky(traj, **kw):
        if "fix it twice" in traj.task_text:
            raise ValueError("an input the labeller did not expect")
        return real(traj, **kw)

    monkeypatch.setattr(dtoc_rl.labels, "label_trajectory", picky)
    runs = tmp_path / "runs.jsonl"
    one, two = json.loads(_chat("{}")), json.loads(_chat("{}"))
    two["messages"][0]["content"] = "fix it twice"
    runs.write_text(json.dumps(one) + "\n" + json.dumps(two) + "\n")
    good = tmp_path / "good.json"
    good.write_text(_chat('{"prompt_tokens": 10, "completion_tokens": 2}'))

    res = ingest_paths([runs, good], progress=False)
    assert sorted(t.task_text for t in res.trajectories) == ["fix it", "fix it"]
    (skip,) = res.skipped
    assert "#" in skip.path and "need labelling failed: ValueError" in skip.reason


def test_a_value_no_column_holds_skips_its_run_by_name_and_the_batch_goes_on(tmp_path):
    from dtoc_rl.data.dataset import storable, write_dataset

    good = tmp_path / "good.json"
    good.write_text(_chat('{"prompt_tokens": 10, "completion_tokens": 2}'))
    (t,) = ingest_paths([good], progress=False).trajectories
    assert storable(t) is None
    t.unlogged_prompt_tokens = 10**19  # beyond int64: the write of every run failed on it
    assert storable(t).startswith("unlogged_prompt_tokens: 10000000000000000000 does not fit the dataset")
    t.unlogged_prompt_tokens = 0
    t.steps[0].output_tokens = "many"
    assert storable(t).startswith("step 0 output_tokens: 'many' does not fit the dataset")
    # a float count beyond any real one is not a logged figure (int() of it overflowed the column)
    big = tmp_path / "big.json"
    big.write_text(_chat('{"prompt_tokens": 1e19, "completion_tokens": 2}'))
    (b,) = ingest_paths([big], progress=False).trajectories
    assert b.steps[0].usage.input_tokens is None and storable(b) is None
    write_dataset([b], tmp_path / "ds")


def test_a_lone_surrogate_is_mended_not_fatal(tmp_path):
    # a JavaScript harness cuts a string inside an emoji: JSON keeps the half as "\ud83d"
    f = tmp_path / "cut.json"
    f.write_text(_chat('{"prompt_tokens": 10, "completion_tokens": 2}').replace('"a.py"', '"a.py \\ud83d"'))
    res = ingest_paths([f], progress=False)
    (t,) = res.trajectories
    assert not res.skipped and t.steps[0].output == "a.py \ufffd"
    from dtoc_rl.data.dataset import load_trajectories, write_dataset

    (back,) = load_trajectories(write_dataset(res.trajectories, tmp_path / "ds"))
    assert back.steps[0].output == "a.py \ufffd"


def test_one_line_nested_too_deeply_loses_only_itself(tmp_path):
    lines = [json.loads(_chat('{"prompt_tokens": 10, "completion_tokens": 2}')) for _ in range(3)]
    for i, row in enumerate(lines):
        row["id"] = f"run{i}"
    f = tmp_path / "runs.jsonl"
    deep = json.dumps(lines[1]).replace(
        '"messages"', '"x": ' + "[" * 100_000 + "]" * 100_000 + ', "messages"'
    )
    f.write_text("\n".join([json.dumps(lines[0]), deep, json.dumps(lines[2])]) + "\n")
    res = ingest_paths([f], progress=False)
    assert sorted(t.traj_id.rsplit("/", 1)[-1] for t in res.trajectories) == ["run0", "run2"]
    (skip,) = res.skipped
    assert "line 2: JSON nested too deeply to read" in skip.reason
    # arguments nested too deeply are kept as the text they are
    args = "[" * 5000 + "]" * 5000
    row = json.loads(_chat('{"prompt_tokens": 10, "completion_tokens": 2}'))
    row["messages"][1]["tool_calls"][0]["function"]["arguments"] = args
    g = tmp_path / "args.json"
    g.write_text(json.dumps(row))
    (t,) = ingest_paths([g], progress=False).trajectories
    assert t.steps[0].tool_args == args


def test_a_row_is_what_asdict_makes_of_the_trajectory(data_dir):
    """``Trajectory.to_row`` builds the row itself for speed: pinned equal to ``dataclasses.asdict`` on
    every trajectory of the bundled sample (needs, events, usage, lists of resources)."""
    from dataclasses import asdict

    from dtoc_rl.data.dataset import load_trajectories

    trajs = load_trajectories(data_dir / "sample")
    assert any(s.needs for t in trajs for s in t.steps) and any(s.usage for t in trajs for s in t.steps)
    for t in trajs:
        row = t.to_row()
        assert row.pop("n_steps") == len(t.steps) and row == asdict(t)


def test_a_json_integer_no_reader_takes_costs_its_line_not_the_ingest(tmp_path):
    ok = json.loads(_chat('{"prompt_tokens": 10, "completion_tokens": 7}'))
    rows = [
        json.dumps({**ok, "id": "a"}),
        json.dumps({**ok, "id": "b"})[:-1] + ', "seed": ' + "9" * 5000 + "}",
    ]
    (tmp_path / "runs.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "one.json").write_text(rows[1])
    res = ingest_paths([tmp_path], progress=False)  # never raises for a bad unit
    assert [t.traj_id.rsplit("/", 1)[-1] for t in res.trajectories] == ["a"]
    why = {Path(s.path).name: s.reason for s in res.skipped}
    assert why["one.json"].startswith("JSON not readable: Exceeds the limit (4300 digits)")
    assert why["runs.jsonl"].startswith("1 of 2 lines failed: line 2: JSON not readable")


def test_set_extra_sets_a_key_of_the_runs_extra_and_leaves_text_that_is_no_object_alone():
    import json

    from dtoc_rl.data.schema import Trajectory
    from dtoc_rl.ingest.common import set_extra

    t = Trajectory(traj_id="r", source="s", model_raw="m", model_family="other", task_id="t")
    set_extra(t, "a", 1)
    set_extra(t, "b", 2, only_if_present=True)  # not there: not set
    assert json.loads(t.extra) == {"a": 1}
    set_extra(t, "a", [3], only_if_present=True)
    assert json.loads(t.extra) == {"a": [3]}
    for odd in ("[1, 2]", "not json"):
        t.extra = odd
        set_extra(t, "a", 1)
        assert t.extra == odd
