"""Runs whose harness dropped context itself (a window, a compaction) are named by `dtoc-rl evaluate`:
every policy but `logged` replays them with that context kept."""

from __future__ import annotations

import json

from dtoc_rl.cli import main
from dtoc_rl.data.paths import bundled_dataset


def test_evaluate_names_the_runs_whose_harness_dropped_context(repo_root, tmp_path, capsys):
    logs = repo_root / "tests" / "fixtures" / "claude_code_transcript"  # a compacted session
    assert main(["ingest", str(logs), "-o", str(tmp_path / "ds"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--dataset", str(tmp_path / "ds"), "-p", "none", "--by", "overall"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 of 1 runs' logs say their harness left earlier context out" in err
    assert "`-p logged` prices what the harness did" in err  # the way to the honest reference
    assert main(["evaluate", "--dataset", str(tmp_path / "ds"), "-p", "none", "logged", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["harness_dropped_runs"] == 1 and "note:" not in out.err
    assert main(["evaluate", "--dataset", str(bundled_dataset()), "-p", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["harness_dropped_runs"] == 0


def test_a_window_that_kept_every_step_is_no_drop(tmp_path, capsys):
    from dtoc_rl.data.dataset import write_dataset
    from tests.crafted_trajs import reaccess_trajectory

    kept, cut = reaccess_trajectory(), reaccess_trajectory()
    kept.traj_id, cut.traj_id = "kept", "cut"
    for s in kept.steps:  # RepoLaunch's window logs what it dropped at every call: here nothing
        s.dropped_before = s.masked_before = []
    cut.steps[3].dropped_before = cut.steps[3].masked_before = [0]
    ds = write_dataset([kept, cut], tmp_path / "ds")
    assert main(["evaluate", "--dataset", str(ds), "-p", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["harness_dropped_runs"] == 1


def test_a_run_no_policy_finished_is_still_named(repo_root, tmp_path, monkeypatch):
    from dtoc_rl.policies.evaluate import evaluate

    (tmp_path / "brk_policies.py").write_text(
        "from dtoc_rl.policies.base import Policy\n\n"
        "class Broken(Policy):\n    name = 'broken'\n\n    def act(self, obs, info=None):\n"
        "        raise RuntimeError('no')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    logs = repo_root / "tests" / "fixtures" / "claude_code_transcript"  # a compacted session
    assert main(["ingest", str(logs), "-o", str(tmp_path / "ds"), "--quiet"]) == 0
    runs = evaluate(str(tmp_path / "ds"), ["brk_policies:Broken"], workers=1, progress=False)
    (run,) = [r for r in runs if r.policy == "brk_policies:Broken"]  # the oracle is evaluated beside it
    assert run.error and run.extra["harness_dropped"]
