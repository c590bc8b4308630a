"""Saving a checkpoint replaces a checkpoint folder, and never deletes anything else."""

from __future__ import annotations

import os
import re

import pytest

from dtoc_rl.cli import main
from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy, check_checkpoint_target


def test_a_checkpoint_folder_is_replaced_and_any_other_folder_or_file_is_refused(tmp_path):
    pol = LearnedPolicy()
    first = pol.save(tmp_path / "ck")
    assert sorted(p.name for p in first.iterdir()) == ["config.json", "model.safetensors"]
    assert pol.save(tmp_path / "ck") == first  # a checkpoint is replaced whole
    notes = tmp_path / "mine"
    notes.mkdir()
    (notes / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match=r"holds notes\.txt: not a checkpoint folder to replace"):
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


def test_a_damaged_checkpoint_is_refused_at_load_in_one_line(tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    from dtoc_rl.policies.learned import CheckpointError

    ck = LearnedPolicy().save(tmp_path / "ck")
    state = load_file(str(ck / "model.safetensors"))
    name = next(k for k, v in state.items() if v.is_floating_point())
    state[name] = state[name].clone().fill_(float("nan"))
    save_file(state, str(ck / "model.safetensors"))
    with pytest.raises(CheckpointError, match=f"non-finite weights .NaN or inf. in {name}"):
        LearnedPolicy.load(ck)
    good = LearnedPolicy().save(tmp_path / "good")
    meta = json.loads((good / "config.json").read_text())
    for change, says in (
        ({"config": {**meta["config"], "max_items": "128"}}, "max_items must be int, got str '128'"),
        ({"config": {**meta["config"], "max_items": 0}}, "max_items must be >= 1"),
        ({"meta": {"val_tasks": 5}}, "'meta.val_tasks' is not a list of task names"),
        ({"meta": {"trained_on": 5}}, "'meta.trained_on' is not a dataset path"),
    ):
        (good / "config.json").write_text(json.dumps({**meta, **change}))
        with pytest.raises(CheckpointError, match=says.replace("(", ".").replace(")", ".")) as e:
            LearnedPolicy.load(good)
        assert "\n" not in str(e.value)


def test_holdout_from_a_damaged_config_is_one_line(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "model.safetensors").write_bytes(b"")  # the config is read before the weights
    kind = '"kind": "dtoc_rl.learned", '
    for text, says in (
        ('{"meta": {"val_tasks": ', "invalid JSON"),
        ("[1, 2]", "not a dtoc_rl learned-policy checkpoint"),
        ("{" + kind + '"meta": []}', "'config' and 'meta' must be objects"),
        ("{" + kind + '"meta": {"val_tasks": [["a"]]}}', "'meta.val_tasks' is not a list of task names"),
        ("[" * 100_000, "cannot be read (RecursionError"),  # nesting too deep to decode
        ('{"n": ' + "9" * 5000 + "}", "cannot be read (ValueError"),  # too long for an int
    ):
        (ck / "config.json").write_text(text)
        assert main(["evaluate", "-p", "none", "--holdout-from", str(ck), "--held-out-only"]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and str(ck / "config.json") in err and "\n" not in err
        with pytest.raises(CheckpointError, match=re.escape(says)):  # one reader: loading says the same
            LearnedPolicy.load(ck)
    # a config of something else is not "damaged": loading says whose it is not
    (ck / "config.json").write_text('{"architectures": ["X"], "config": "abc"}')
    with pytest.raises(CheckpointError, match=r"not a dtoc_rl learned-policy checkpoint$"):
        LearnedPolicy.load(ck)
    (ck / "config.json").unlink()
    assert main(["evaluate", "-p", "none", "--holdout-from", str(ck), "--held-out-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.json: no such file (not a checkpoint folder)" in err and "\n" not in err
    assert main(["evaluate", "-p", "none", "--holdout-from", str(ck / "model.safetensors")]) == 2
    assert "not a checkpoint folder" in capsys.readouterr().err


def test_a_newer_checkpoint_is_refused_and_an_unknown_setting_named(tmp_path):
    import json
    import warnings

    from dtoc_rl.policies.learned import CheckpointError

    ck = LearnedPolicy().save(tmp_path / "ck")
    meta = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**meta, "checkpoint_version": 999}))
    with pytest.raises(CheckpointError, match="checkpoint_version 999, and this dtoc-rl reads up to"):
        LearnedPolicy.load(ck)
    (ck / "config.json").write_text(json.dumps({**meta, "config": {**meta["config"], "treshold": 0.9}}))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        LearnedPolicy.load(ck)
    assert any("ignored: treshold" in str(x.message) for x in w)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import sys
    import types

    from dtoc_rl import cli

    mod = types.ModuleType("interrupted_command")
    mod.add_arguments = lambda p: None

    def run(args):
        raise KeyboardInterrupt

    mod.run = run
    monkeypatch.setitem(sys.modules, "interrupted_command", mod)
    monkeypatch.setitem(cli.COMMANDS, "slow", ("interrupted_command", "a command the user stops"))
    assert cli.main(["slow"]) == 130
    assert capsys.readouterr().err == "dtoc-rl: slow interrupted\n"


def test_a_checkpoint_saved_with_threads_0_still_loads():
    # trainings before the settings' checks stored --threads 0 (they ran on one thread)
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        ck = LearnedPolicy().save(Path(tmp) / "ck")
        meta = json.loads((ck / "config.json").read_text())
        meta["config"]["threads"] = 0
        (ck / "config.json").write_text(json.dumps(meta))
        assert LearnedPolicy.load(ck).cfg.threads == 1
