"""Options that cannot be right are refused when the command line is read, before any work."""

from __future__ import annotations

import re

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
        (["serve", "--policy", "none", "--max-body", "10"], "--max-body: must be at least 1024, got 10"),
        (["serve", "--policy", "none", "--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (["serve", "--policy", "none", "--port", "70000"], "argument --port: must be in 0..65535, got 70000"),
        (
            ["proxy", "--policy", "none", "--upstream", "https://a.b", "--max-items", "0"],
            "argument --max-items: must be at least 1, got 0",
        ),
        (
            ["proxy", "--policy", "none", "--upstream", "https://a.b", "--timeout", "nan"],
            "argument --timeout: must be in (0, 604800], got nan",
        ),
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


def test_evaluate_checks_its_output_files_before_the_run(tmp_path, capsys, monkeypatch):
    from dtoc_rl.policies import evaluate as ev

    def no_run(*a, **k):
        raise AssertionError("the run started before its outputs were checked")

    monkeypatch.setattr(ev, "evaluate", no_run)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    cases = [
        (["--csv", str(tmp_path)], f"--csv: {tmp_path}: a folder, not a file"),
        (["--runs-out", str(afile / "r.jsonl")],
         f"--runs-out: {afile / 'r.jsonl'}: cannot be written (folder {afile}: not a folder)"),
        (["--plots", str(afile)], f"--plots: folder {afile}: not a folder"),
    ]  # fmt: skip
    for argv, said in cases:
        assert main(["evaluate", "-p", "none", "--quiet", *argv]) == 2
        assert capsys.readouterr().err.strip() == f"dtoc-rl: error: {said}"
    assert afile.read_text() == "mine"


def test_a_policy_that_fails_on_some_runs_only_does_not_fail_the_command(tmp_path, monkeypatch, capsys):
    """Exit status 1 is for a policy none of whose runs completed, not one with a group of n = 0."""
    (tmp_path / "famfail_mod.py").write_text(
        "from dtoc_rl.policies.baselines import NoManagement\n"
        "class FailOnGemini(NoManagement):\n"
        "    def reset(self, info=None):\n"
        "        self.bad = 'gemini' in str((info or {}).get('model_family'))\n"
        "    def act(self, obs, info=None):\n"
        "        if self.bad:\n"
        "            raise RuntimeError('no gemini here')\n"
        "        return super().act(obs, info)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["evaluate", "-p", "famfail_mod:FailOnGemini", "--quiet", "--bootstrap", "10"]) == 0
    err = capsys.readouterr().err
    assert "RuntimeError: no gemini here" in err and "every run of" not in err


def test_a_number_type_checks_its_range_and_its_ends():
    import argparse

    from dtoc_rl.cli.common import number_in

    frac, prob = number_in(0, 1, open_low=True, open_high=True), number_in(0, 1)
    assert frac("0.5") == 0.5 and prob("0") == 0.0 and prob("1") == 1.0
    cases = [
        (frac, "0", "must be in (0, 1), got 0"),
        (frac, "nan", "must be in (0, 1)"),
        (prob, "1.5", "must be in [0, 1], got 1.5"),
        (prob, "x", "not a number: 'x'"),
    ]
    for parse, text, said in cases:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(said)):
            parse(text)


def test_an_integer_type_with_an_empty_range_is_a_programming_error():
    from dtoc_rl.cli.common import at_least

    with pytest.raises(ValueError, match="high 1 is below low 2"):
        at_least(2, 1)
