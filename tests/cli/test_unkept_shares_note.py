"""A dataset ingested before the labeller kept the outputs' own shares is named as such."""

from __future__ import annotations

import dataclasses

from dtoc_rl.cli import main
from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.data.paths import bundled_dataset


def test_evaluate_says_when_runs_lack_the_kept_shares(tmp_path, capsys):
    trajs = load_trajectories(bundled_dataset())
    bare = [dataclasses.replace(t, unique_events=None, unique_digest=None) for t in trajs[:5]] + trajs[5:]
    old = write_dataset(bare, tmp_path / "old")
    assert main(["evaluate", "--dataset", str(old), "-p", "none", "--by", "overall"]) == 0
    err = capsys.readouterr().err
    assert f"note: 5 of {len(trajs)} runs of {old} were ingested without their outputs' own shares" in err
    assert main(["evaluate", "--dataset", str(old), "-p", "none", "--json"]) == 0
    assert "note:" not in capsys.readouterr().err  # --json: stderr holds only what goes wrong
    assert main(["evaluate", "--dataset", str(bundled_dataset()), "-p", "none", "--by", "overall"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_dataset_without_the_column_counts_every_run(tmp_path, capsys):
    import pyarrow.parquet as pq

    from dtoc_rl.cli.common import note_unkept_shares

    new = write_dataset(load_trajectories(bundled_dataset()), tmp_path / "ds")
    f = next(new.glob("*.parquet"))
    pq.write_table(pq.read_table(f).drop(["unique_events", "unique_digest"]), f)  # as written at 1.3
    note_unkept_shares(str(new))
    assert "note: 34 of 34 runs" in capsys.readouterr().err
