"""``scripts/bench_policy.py`` on a tiny session (the real figures come from the full run)."""

from __future__ import annotations

import json
import os

import pytest

from scripts import bench_policy


@pytest.mark.slow
def test_bench_runs_small_and_reports_every_row(capsys):
    assert bench_policy.main(["--outputs", "20", "--repeat", "5", "--turns", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["outputs"] == 20 and r["http_body_bytes"] > 0
    names = list(r["rows"])
    assert any(n.startswith("in-process decide, learned") for n in names)
    assert "HTTP /decide round trip, learned, keep-alive" in names
    assert all(row["p99_ms"] >= row["p50_ms"] >= 0 for row in r["rows"].values())
    assert set(r["met"]) == {"in_process", "http"}
    assert {k: v["n"] for k, v in r["machine_jitter"].items()} == {"python": 5, "torch": 5}


def test_quick_mode_times_only_the_decision_and_the_references(capsys):
    assert bench_policy.main(["--outputs", "20", "--repeat", "5", "--quick", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [n.strip() for n in r["rows"]] == [
        "in-process decide, learned, 128 slots",
        "reference, timed in between: fixed Python work",
        "reference, timed in between: fixed torch matmuls",
    ]
    assert r["decide_over_torch_reference"] > 0 and "met" not in r


def test_busy_rows_time_the_decision_beside_spinning_processes(capsys):
    import torch

    before = torch.get_num_threads()
    want = 2 if before != 2 else 3  # not the bench's --threads (1)
    torch.set_num_threads(want)
    try:
        assert (
            bench_policy.main(["--outputs", "20", "--repeat", "5", "--quick", "--busy", "1", "--json"]) == 0
        )
        assert torch.get_num_threads() == want  # the caller's count comes back
    finally:
        torch.set_num_threads(before)
    r = json.loads(capsys.readouterr().out)
    cores = os.cpu_count()
    busy = [n for n in r["rows"] if "busy" in n]
    assert busy == [
        "in-process decide, 1 busy processes, policy threads 1",
        f"in-process decide, 1 busy processes, {cores} threads (torch's default)",
    ]
    assert all(r["rows"][n]["n"] == 5 for n in busy)


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--busy", "-1"], "--busy: must be at least 0, got -1"),
        (["--repeat", "0"], "--repeat: must be at least 1, got 0"),
        (["--outputs", "x"], "--outputs: not an integer: 'x'"),
        (["--n-heads", "3"], "must be divisible by n_heads"),
        (["--checkpoint", "/nonexistent"], "is not a checkpoint"),
    ],
)
def test_bad_arguments_are_clear_errors(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        bench_policy.main([*argv, "--quick"])
    assert e.value.code == 2 and msg in capsys.readouterr().err
