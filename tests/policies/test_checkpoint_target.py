"""Saving a checkpoint replaces a checkpoint folder, and never deletes anything else."""

from __future__ import annotations

import os

import pytest

from dtoc_rl.cli import main
from dtoc_rl.policies.learned import LearnedPolicy, check_checkpoint_target


def test_a_checkpoint_folder_is_replaced_and_any_other_folder_or_file_is_refused(tmp_path):
    pol = LearnedPolicy()
    first = pol.save(tmp_path / "ck")
    assert sorted(p.name for p in first.iterdir()) == ["config.json", "model.safetensors"]
    assert pol.save(tmp_path / "ck") == first  # a checkpoint is replaced whole
    notes = tmp_path / "mine"
    notes.mkdir()
    (notes / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match="not a checkpoint folder .it holds notes.txt"):
        pol.save(notes)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        pol.save(tmp_path / "afile")
    assert (notes / "notes.txt").read_text() == "precious" and (tmp_path / "afile").read_text() == "x"


def test_train_refuses_a_folder_it_would_delete_before_any_work(tmp_path, capsys, monkeypatch):
    (tmp_path / "keep.txt").write_text("precious")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for out in ("..", ".", str(tmp_path)):
        assert main(["train", "--retune", "no-such-checkpoint", "-o", out]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"dtoc-rl: error: -o {out}:") and "\n" not in err
    assert (tmp_path / "keep.txt").read_text() == "precious" and work.is_dir()
    assert check_checkpoint_target(tmp_path / "new") == tmp_path / "new"
    assert os.listdir(work) == []
