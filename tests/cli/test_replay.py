import json

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
    assert main(["replay", "django__django-11239", "-n", "-1"]) == 2
