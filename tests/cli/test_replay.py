import json

import pytest

from dtoc_rl.cli import main


def test_replay_bundled_trace_json(capsys, tmp_path):
    png = tmp_path / "curve.png"
    assert main(["replay", "django__django-11239", "--json", "-n", "3", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    a, h = out["all_visible"]["tokens_per_call"], out["hide_older"]["tokens_per_call"]
    assert len(a) == len(h) == out["steps"] > 5
    assert all(x >= y for x, y in zip(a, h))  # hiding never adds tokens
    assert a == sorted(a)  # with nothing hidden the context only grows
    assert out["hide_older"]["total"] < out["all_visible"]["total"]
    assert max(out["hide_older"]["hidden_per_call"]) == out["outputs"] - 1 - 3
    assert png.stat().st_size > 10_000


def test_replay_table_output(capsys):
    assert main(["replay", "django__django-11239"]) == 0
    out = capsys.readouterr().out
    assert "all visible" in out and "saved" in out


def test_replay_errors_are_clear(capsys, tmp_path):
    assert main(["replay", "no-such-trace"]) == 2
    assert "neither a file nor a bundled trace" in capsys.readouterr().err
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["replay", str(bad)]) == 2
    assert "not a recognised log format" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["replay", "django__django-11239", "-n", "-1"])
    assert stop.value.code == 2 and "argument --keep-last/-n: must be at least 0" in capsys.readouterr().err


def test_parallel_tool_calls_of_one_turn_are_one_model_call():
    """A turn of three parallel tool calls is one model call (as the Simulator bills it): the replay
    records the context once for it, not once per tool call; steps without recorded turns (all
    turn 0) are a call each."""
    from dataclasses import replace

    from dtoc_rl.data.schema import Step, Trajectory
    from dtoc_rl.serve.replay import hide_older_than, replay_trajectory

    steps = [
        Step(index=k, turn=t, user_text="go on" if k in (0, 4) else "", assistant_text=f"call {t}",
             tool_name="bash", tool_args=f'{{"command": "cat f{k}"}}', output="x" * 400)
        for k, t in enumerate([0, 1, 1, 1, 2])
    ]  # fmt: skip
    traj = Trajectory(traj_id="p/1", source="test", model_raw="gpt-4o", model_family="gpt-4o",
                      task_id="p", task_text="fix it", steps=steps)  # fmt: skip
    res = replay_trajectory(traj, hide_older_than(1))
    assert len(res.tokens_per_call) == 3
    # call 2 saw call 1's three outputs, only the newest visible
    assert res.hidden_per_call == [0, 0, 3]
    flat = replay_trajectory(replace(traj, steps=[replace(s, turn=0) for s in steps]), hide_older_than(1))
    assert len(flat.tokens_per_call) == 5


def test_list_offers_only_logs_replay_reads(capsys):
    from dtoc_rl.data.paths import find_bundled_trace
    from dtoc_rl.ingest import detect_format

    assert main(["replay", "--list", "--json"]) == 0
    names = json.loads(capsys.readouterr().out)
    assert names and not [n for n in names if n.startswith("eval_safety")]  # OpenHands eval metadata
    assert all(detect_format(find_bundled_trace(n)) is not None for n in names)


def test_a_file_in_no_known_format_names_the_command_that_can_force_one(tmp_path, capsys):
    f = tmp_path / "meta.json"
    f.write_text('{"name": "not a log"}')
    assert main(["replay", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert "dtoc-rl ingest --format NAME" in err and len(err.splitlines()) == 1
