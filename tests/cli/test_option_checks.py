"""Options that cannot be right are refused when the command line is read, before any work."""

from __future__ import annotations

import pytest

from dtoc_rl.cli import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["evaluate", "-p", "none", "--bootstrap", "0"], "argument --bootstrap: must be at least 1, got 0"),
        (["evaluate", "-p", "none", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (["evaluate", "-p", "none", "--workers", "two"], "argument --workers: not an integer: 'two'"),
        (["calibrate", "D", "--bootstrap", "-5"], "argument --bootstrap: must be at least 1, got -5"),
        (["calibrate", "D", "--examples", "-1"], "argument --examples: must be at least 0, got -1"),
        (["ingest", "x", "-o", "y", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error(capsys, argv, said):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and said in err[0]


def test_the_bill_checks_options_without_cost_are_refused_not_ignored(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "D"), "--fit", "--calls-out", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "dtoc-rl: error: --fit, --calls-out: the bill check's options; add --cost (or leave them out)"
    ]
    assert not (tmp_path / "c.jsonl").exists()
