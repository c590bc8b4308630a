"""An output path that cannot be written is a one-line error, not a traceback."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.cli import main as cli
from dtoc_rl.data.paths import bundled_dataset


@pytest.fixture
def blocked(tmp_path):
    """A path whose parent is a regular file: no folder can be made there, even by root."""
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile" / "sub"


def _one_line_error(capsys, blocked) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dtoc-rl: error:") and "afile" in err[0], err


def test_ingest_into_an_unwritable_folder(tmp_path, blocked, capsys):
    log = tmp_path / "run.json"
    log.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]})
    )
    assert cli(["ingest", str(log), "-o", str(blocked / "out"), "--quiet"]) == 2
    _one_line_error(capsys, blocked)


def test_stats_plot_into_an_unwritable_folder(blocked, capsys):
    assert cli(["stats", str(bundled_dataset()), "--plot", str(blocked / "x.png")]) == 2
    _one_line_error(capsys, blocked)


def test_evaluate_csv_into_an_unwritable_folder(blocked, capsys):
    data = str(bundled_dataset())
    assert cli(["evaluate", "-p", "none", "--dataset", data, "--csv", str(blocked / "m.csv"), "--quiet"]) == 2
    _one_line_error(capsys, blocked)


@pytest.mark.parametrize("flag", ["--csv", "--runs-out", "--misses-out", "--plots"])
def test_evaluate_checks_its_output_folders_before_evaluating(blocked, capsys, monkeypatch, flag):
    # the whole evaluation ran first, then the write failed: minutes of work for a mistyped path
    import dtoc_rl.policies.evaluate

    def must_not_run(*a, **k):
        raise AssertionError("evaluate() ran before the output folder was checked")

    monkeypatch.setattr(dtoc_rl.policies.evaluate, "evaluate", must_not_run)
    out = str(blocked / "x.csv") if flag != "--plots" else str(blocked)
    assert cli(["evaluate", "-p", "none", "--dataset", str(bundled_dataset()), flag, out, "--quiet"]) == 2
    _one_line_error(capsys, blocked)
