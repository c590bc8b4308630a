"""scripts.bench_long times each stage on a run repeated to a length; bad arguments are one-line errors."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.data.dataset import iter_trajectories
from dtoc_rl.data.paths import bundled_dataset
from scripts import bench_long


def test_a_run_repeated_is_that_run_copies_times_each_copy_new():
    base = max(iter_trajectories(bundled_dataset()), key=lambda t: len(t.steps))
    t = bench_long.long_run(base, 3)
    n = len(base.steps)
    assert len(t.steps) == 3 * n and [s.index for s in t.steps] == list(range(3 * n))
    assert [s.turn for s in t.steps] == sorted(s.turn for s in t.steps)  # later copies, later turns
    for r in range(3):  # each copy's outputs are the run's, marked from the second copy on
        for i, s in enumerate(base.steps):
            want = s.output if not r or s.output is None else f"[copy {r}]\n{s.output}"
            assert t.steps[r * n + i].output == want
    assert all(not s.needs for s in t.steps)
    assert not any((s.output or "").startswith("[copy") for s in base.steps)  # the run itself untouched


def test_the_table_has_a_row_per_length_and_the_json_the_same(capsys):
    assert bench_long.main(["--copies", "1", "2", "--policies", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first, second = out["rows"]
    assert second["calls"] == 2 * first["calls"] and second["steps"] == 2 * out["base_steps"]
    for key in ("labelling_s", "compile_s", "plan_s", "evaluate none_s"):
        assert first[key] >= 0 and second[key] >= 0
    assert bench_long.main(["--copies", "1", "--policies", "none"]) == 0
    assert "ms per model call" in capsys.readouterr().out


def test_bad_arguments_are_one_line_errors(capsys, tmp_path):
    for argv, said in (
        (["--traj", "no/such/run"], "--traj 'no/such/run': no such trajectory"),
        (["--copies", "0"], "--copies"),
        (["--dataset", str(tmp_path / "missing")], "missing"),
    ):
        with pytest.raises(SystemExit) as e:
            bench_long.main(argv)
        assert e.value.code == 2 and said in capsys.readouterr().err
