"""A command's warnings reach the user as one line each, and a caller's own handler comes back."""

from __future__ import annotations

import sys
import types
import warnings

from dtoc_rl import cli


def test_a_commands_warnings_are_one_line_and_the_callers_handler_comes_back(monkeypatch, capsys):
    mod = types.ModuleType("fake_command")
    mod.add_arguments = lambda p: None

    def run(args):
        warnings.warn("a price\n  was guessed", UserWarning, stacklevel=1)
        return 0

    mod.run = run
    monkeypatch.setitem(sys.modules, "fake_command", mod)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_command", "a command that warns"))
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["fake"]) == 0
    assert capsys.readouterr().err == "dtoc-rl: warning: a price was guessed\n"  # no source line
    assert warnings.showwarning is before


def test_a_checkpoint_that_hides_nothing_anywhere_is_named_as_such(capsys):
    from dtoc_rl.cli.train import warn_if_abstaining

    table = {"default": 0.0, "family": {"gpt-4o": 0.0}, "regime": {},
             "validation": {"pooled": {"trajectories": 4}},
             "fallback": {"family": {}, "regime": {}, "default": None}}  # fmt: skip
    warn_if_abstaining(table)
    err = capsys.readouterr().err
    assert (
        err.startswith("dtoc-rl: warning: the checkpoint abstains everywhere: on 4 tune runs")
        and err.count("\n") == 1
    )
    rule = {"family": {}, "regime": {}, "default": {"tokens": 8000, "age": 1}}
    for other in ({**table, "regime": {"discount": 0.05}}, {**table, "fallback": rule}):
        warn_if_abstaining(other)
        assert capsys.readouterr().err == ""  # something hides somewhere


def test_demo_refuses_a_folder_whose_policy_folder_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "notes.txt").write_text("mine")
    assert cli.main(["demo", "--out", str(tmp_path), "--quiet"]) == 2
    assert "holds notes.txt: not a checkpoint folder to replace" in capsys.readouterr().err
    assert (tmp_path / "policy" / "notes.txt").read_text() == "mine" and not (tmp_path / "dataset").exists()


def test_ctrl_c_inside_the_demo_is_the_demos_exit_130(tmp_path, monkeypatch, capsys):
    import argparse

    from dtoc_rl.cli import demo

    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    args = p.parse_args(["--out", str(tmp_path / "d"), "--quiet"])
    monkeypatch.setattr(cli, "main", lambda argv: 130)  # the ingest step stopped by Ctrl-C
    assert demo._run(args, None) == 130
    assert "error" not in capsys.readouterr().err  # the command that was stopped said so already
