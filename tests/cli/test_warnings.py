"""A command's warnings reach the user as one line each, and a caller's own handler comes back."""

from __future__ import annotations

import sys
import types
import warnings

import pytest

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


def test_thresholds_chosen_on_a_handful_of_runs_are_said_to_be_chance(capsys):
    from dtoc_rl.cli.train import FEW_TUNE_RUNS, warn_if_few

    def table(runs):
        return {"default": 0.3, "family": {}, "regime": {}, "validation": {"pooled": {"trajectories": runs}}}

    warn_if_few(table(2))
    err = capsys.readouterr().err
    assert (
        err.startswith("dtoc-rl: warning: the thresholds were chosen on 2 tune runs") and err.count("\n") == 1
    )
    for enough in (FEW_TUNE_RUNS, 200):
        warn_if_few(table(enough))
        assert capsys.readouterr().err == ""


def test_demo_refuses_a_folder_whose_policy_folder_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "notes.txt").write_text("mine")
    assert cli.main(["demo", "--out", str(tmp_path), "--quiet"]) == 2
    assert "holds notes.txt: not a checkpoint folder to replace" in capsys.readouterr().err
    assert (tmp_path / "policy" / "notes.txt").read_text() == "mine" and not (tmp_path / "dataset").exists()


def test_demo_writes_only_into_a_new_folder_an_empty_one_or_an_earlier_demos(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("mine")
    assert cli.main(["demo", "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dtoc-rl: error: --out {tmp_path} holds notes.md, which the demo does not write; "
                   "give a new folder or an earlier demo's"]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]
    afile = tmp_path / "notes.md"
    assert cli.main(["demo", "--out", str(afile), "--quiet"]) == 2
    assert "a file, not a folder" in capsys.readouterr().err and afile.read_text() == "mine"
    from dtoc_rl.cli.demo import foreign_files

    earlier = tmp_path / "earlier"
    for name in ("dataset", "policy"):
        (earlier / name).mkdir(parents=True)
    for name in ("metrics.json", "metrics.csv", "pareto.svg", "curves.png", ".DS_Store"):
        (earlier / name).write_text("")
    assert foreign_files(earlier) is None and foreign_files(tmp_path / "new") is None


def test_demo_checks_its_training_settings_before_the_ingest(tmp_path, capsys):
    out = tmp_path / "d"
    assert cli.main(["demo", "--out", str(out), "--epochs", "0", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dtoc-rl: error: --epochs must be >= 1, got 0"]
    assert not out.exists()
    with pytest.raises(SystemExit) as stop:  # a usage error, said when the command line is read
        cli.main(["demo", "--out", str(out), "--workers", "0", "--quiet"])
    assert stop.value.code == 2 and not out.exists()
    assert "argument --workers: must be at least 1, got 0" in capsys.readouterr().err


def test_ctrl_c_inside_the_demo_is_the_demos_exit_130(tmp_path, monkeypatch, capsys):
    import argparse

    from dtoc_rl.cli import demo

    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    args = p.parse_args(["--out", str(tmp_path / "d"), "--quiet"])
    monkeypatch.setattr(cli, "main", lambda argv: 130)  # the ingest step stopped by Ctrl-C
    assert demo._run(args, None) == 130
    assert "error" not in capsys.readouterr().err  # the command that was stopped said so already


def _abstaining_checkpoint(tmp_path):
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    pol = LearnedPolicy(LearnedPolicyConfig(d_model=16, n_layers=0, word_vocab=0))
    pol.set_threshold_table({"default": 0.0, "family": {"gpt-4o": 0.0}, "regime": {"discount": 0.0},
                             "fallback": {"family": {}, "regime": {}, "default": None}})  # fmt: skip
    return pol.save(tmp_path / "ckpt")


def test_a_checkpoint_that_hides_nothing_is_said_so_where_it_would_be_deployed(tmp_path, capsys):
    from dtoc_rl.cli.demo import deploy_hint
    from dtoc_rl.cli.serve import _load

    ckpt = _abstaining_checkpoint(tmp_path)
    assert "hides nothing here" in deploy_hint(ckpt) and "plug it into" not in deploy_hint(ckpt)
    _load(str(ckpt), "--policy")
    err = capsys.readouterr().err
    assert (
        err.startswith("dtoc-rl: warning: --policy") and "abstains everywhere" in err and err.count("\n") == 1
    )
    _load(f"learned:path={ckpt},threshold=0.1", "--policy")  # a threshold given: it hides
    assert capsys.readouterr().err == ""


def test_a_checkpoint_that_hides_somewhere_gets_the_deploy_line(tmp_path):
    from dtoc_rl.cli.demo import deploy_hint
    from dtoc_rl.policies.learned import LearnedPolicy

    ckpt = _abstaining_checkpoint(tmp_path)
    pol = LearnedPolicy.load(ckpt)
    pol.set_threshold_table({**pol.meta["thresholds"], "regime": {"discount": 0.05}})
    pol.save(ckpt)
    assert "plug it into an agent" in deploy_hint(ckpt)


def test_evaluation_workers_warn_in_one_line_and_not_again_what_the_parent_said(capfd, monkeypatch, tmp_path):
    from dtoc_rl.cli import main as cli_main
    from dtoc_rl.data.dataset import load_trajectories, write_dataset
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.sim import pricing

    monkeypatch.setattr(pricing, "_warned", set())  # as in a fresh process: nothing said yet
    trajs = load_trajectories(bundled_dataset())
    for t in trajs:  # a version the price table lacks: priced as its family, with a warning
        if t.model_family == "gpt-4o":
            t.model_raw = "gpt-4o-2099-01-01"
    write_dataset(trajs, tmp_path / "d")
    argv = [
        "evaluate",
        "--dataset",
        str(tmp_path / "d"),
        "-p",
        "none",
        "last_n:n=3",
        "--workers",
        "3",
        "--quiet",
    ]
    assert cli_main(argv) == 0
    err = capfd.readouterr().err
    assert "UserWarning" not in err and "pricing.py" not in err  # the workers' too: no source lines
    assert err.count("no price for model version 'gpt-4o-2099-01-01'") == 1  # the parent's, not again


def test_demo_with_a_mistyped_logs_path_says_so_once_and_leaves_no_folder(tmp_path, capsys):
    from dtoc_rl.cli import main as cli_main

    out = tmp_path / "d"
    assert cli_main(["demo", "--logs", str(tmp_path / "nope"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dtoc-rl: error: --logs: no such file or folder: {tmp_path / 'nope'}"]
    assert not out.exists()
    notes = tmp_path / "notes.md"
    notes.write_text("# not a log")
    assert cli_main(["demo", "--logs", str(notes), "--out", str(out), "--quiet"]) == 2
    assert not out.exists()  # ingest read nothing: the demo's own empty folder goes too


def test_a_table_without_a_pooled_entry_does_not_abstain_everywhere():
    from dtoc_rl.policies.learned import table_abstains

    # unlisted models then decide at the default threshold (LearnedPolicy.threshold_for): they hide
    assert not table_abstains({"default": None, "family": {"gpt-4o": 0.0}, "regime": {}})
    assert table_abstains({"default": 0.0, "family": {"gpt-4o": 0.0}, "regime": {}})
