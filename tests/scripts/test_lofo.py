"""scripts/lofo.py: leave-one-family-out training and evaluation."""

import json
import platform
from pathlib import Path

import pytest

from scripts import lofo


def test_sample_caps_each_family_the_same_way_every_time():
    from dtoc_rl.envs.data import load_episodes

    eps = load_episodes(None)
    a = lofo._sample(eps, 5, seed=0)
    assert [e.traj_id for e in a] == [e.traj_id for e in lofo._sample(list(reversed(eps)), 5, seed=0)]
    fams = {e.model_family for e in eps}
    assert len(a) == 5 * len(fams) and {e.model_family for e in a} == fams
    assert len(lofo._sample(eps, 0, seed=0)) == len(eps)


def test_unknown_family_is_a_one_line_error(tmp_path, capsys):
    assert lofo.main(["--families", "gpt-9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "gpt-9" in err and "present" in err and err.count("\n") == 1


def test_help_lists_the_caps(capsys):
    with pytest.raises(SystemExit):
        lofo.main(["--help"])
    out = capsys.readouterr().out
    for flag in ("--max-train", "--max-eval", "--epochs", "--min-trajectories", "--json"):
        assert flag in out


@pytest.mark.slow
def test_leaves_the_family_out_of_training_and_evaluates_on_it(tmp_path, capsys):
    args = ["--families", "gemini-3-pro", "--epochs", "1", "--dagger-rounds", "0", "--max-train", "6",
            "--max-eval", "4", "--thresholds", "0.1", "--bootstrap", "20",
            "--train=--no-family-conditioning --d-model 16",
            "--out", str(tmp_path), "--json"]  # fmt: skip
    assert lofo.main(args) == 0
    res = json.loads(capsys.readouterr().out)
    (fold,) = res["folds"]
    assert fold["family"] == "gemini-3-pro" and "gemini-3-pro" not in fold["train_families"]
    assert res["environment"]["python"] == platform.python_version()  # what produced the figures
    ckpt = fold["checkpoint"]
    policies = {r["policy"] for r in fold["rows"]}
    assert policies == {f"learned:path={ckpt}", f"learned:path={ckpt},threshold=0.1", "none", "hide_big",
                        "cache_clear", "oracle"}  # fmt: skip
    assert all(r["n"] == 4 for r in fold["rows"])
    assert fold["train_seconds"] > 0 and fold["done_when"][0]["policy"].startswith("learned")
    assert json.loads((tmp_path / "lofo.json").read_text())["folds"][0]["family"] == "gemini-3-pro"
    cfg = json.loads((tmp_path / "without-gemini-3-pro" / "config.json").read_text())
    assert cfg["config"]["exclude_family"] == "gemini-3-pro"  # the checkpoint says what it never saw
    assert cfg["config"]["family_conditioning"] is False and cfg["config"]["d_model"] == 16  # --train


def test_train_flags_are_dtoc_rl_trains_and_bad_ones_are_one_line_errors(tmp_path, capsys):
    assert lofo.train_settings("") == {}
    assert lofo.train_settings("--no-family-conditioning --n-layers 1 --lr 0.001") == {
        "family_conditioning": False, "n_layers": 1, "lr": 0.001}  # fmt: skip
    assert lofo.train_settings("--n-layers 2") == {"n_layers": 2}  # given, even at the default
    for flags, says in (("--n-layrs 1", "--n-layrs"), ("--n-layers x", "--n-layers"),
                        ("--n-layers -1", "n_layers"), ("--seed 3", "seed"),
                        ("--exclude-source tau-bench", "exclude_source"),
                        ('--lr "0.1', "quotation")):  # fmt: skip
        assert lofo.main(["--train", flags, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert says in err and err.startswith("error: --train") and err.count("\n") == 1, err


def test_sources_need_by_source_and_unknown_sources_are_named(tmp_path, capsys):
    assert lofo.main(["--sources", "tau-bench", "--out", str(tmp_path)]) == 2
    assert "--by source" in capsys.readouterr().err
    assert lofo.main(["--by", "source", "--sources", "no-such-harness", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no-such-harness" in err and "tau-bench" in err and err.count("\n") == 1


def test_leaves_a_source_out_of_training_and_evaluates_on_it(tmp_path, capsys):
    args = ["--by", "source", "--sources", "tau-bench", "--epochs", "1", "--dagger-rounds", "0",
            "--max-train", "3", "--max-eval", "2", "--thresholds", "--rules", "none", "--bootstrap", "10",
            "--adapt", "--out", str(tmp_path), "--json"]  # fmt: skip
    assert lofo.main(args) == 0
    (fold,) = json.loads(capsys.readouterr().out)["folds"]
    assert fold["source"] == fold["left_out"] == "tau-bench" and "tau-bench" not in fold["train_sources"]
    assert len(fold["train_sources"]) >= 1 and all(r["n"] == 2 for r in fold["rows"])
    # --adapt: each of the two runs decided by the table chosen on the other one's task
    assert lofo.ADAPTED in {r["policy"] for r in fold["rows"]}
    cfg = json.loads((tmp_path / "without-tau-bench" / "config.json").read_text())
    assert cfg["config"]["exclude_source"] == "tau-bench" and cfg["config"]["exclude_family"] is None
    assert "left-out source" in lofo.table(json.loads((tmp_path / "lofo.json").read_text()))


def test_the_reading_never_picks_the_adapted_table():
    def row(policy, savings, misses):
        return {"policy": policy, "group_by": "overall", "group": "all", "n": 20, "savings": savings,
                "savings_lo": savings - 0.01, "savings_hi": savings + 0.01, "misses_per_100": misses,
                "oracle_fraction": savings / 0.3}  # fmt: skip

    rows = [row("learned:path=c", 0.05, 0.5), row(lofo.ADAPTED, 0.2, 0.1), row("oracle", 0.3, 0.0)]
    (d,) = lofo.reading(rows, 1.0, 10)
    assert d["policy"] == "learned:path=c"  # the adapted table saves more with fewer misses: not picked


def test_a_mistyped_exclusion_is_an_error_not_a_training_on_everything():
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    for key in ("exclude_source", "exclude_family"):
        pol = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, **{key: "nope"}).create()
        with pytest.raises(ValueError, match=f"{key} 'nope' is not in the data"):
            pol.fit(None, progress=False)


def test_an_old_result_without_left_out_still_makes_a_table():
    old = {"args": {}, "folds": [{"family": "gpt-4", "checkpoint": "c", "train_seconds": 1, "eval_seconds": 1,
                                   "rows": [], "done_when": [{"policy": None}]}]}  # fmt: skip
    assert "| gpt-4 | none within budget |" in lofo.table(old)


def test_a_setting_given_here_and_in_train_is_an_error(tmp_path, capsys):
    assert lofo.main(["--epochs", "2", "--train=--epochs 3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--epochs" in err and "twice" in err and err.count("\n") == 1


@pytest.mark.slow
def test_seeds_train_each_fold_once_per_seed_and_report_the_spread(tmp_path, capsys):
    args = ["--families", "gemini-3-pro", "--seeds", "0", "1", "--epochs", "1", "--dagger-rounds", "0",
            "--max-train", "6", "--max-eval", "4", "--thresholds", "0.1", "--bootstrap", "20",
            "--train=--d-model 16", "--out", str(tmp_path)]  # fmt: skip
    assert lofo.main(args) == 0
    out = capsys.readouterr().out
    res = json.loads((tmp_path / "lofo.json").read_text())
    assert [f["seed"] for f in res["folds"]] == [0, 1]
    ckpts = [f["checkpoint"] for f in res["folds"]]
    assert ckpts == [str(tmp_path / f"without-gemini-3-pro-seed{s}") for s in (0, 1)]
    configs = [json.loads((Path(c) / "config.json").read_text()) for c in ckpts]
    assert [c["config"]["seed"] for c in configs] == [0, 1]
    # the same trajectories evaluated for both trainings
    runs = [f["eval_trajectories"] for f in res["folds"]]
    assert len(runs[0]) == 4 and runs[0] == runs[1]
    (spread,) = res["over_seeds"]
    assert spread["left_out"] == "gemini-3-pro" and spread["seeds"] == [0, 1]
    shares = spread["best_share"]
    assert len(shares) == 2 and spread["min"] <= spread["mean"] <= spread["max"]
    assert "gemini-3-pro, seed 1" in out and "| gemini-3-pro | 0, 1 |" in out


def test_over_seeds_takes_each_trainings_best_within_the_budget():
    def fold(seed, frac):
        best = {"policy": "learned" if frac is not None else None, "oracle_fraction": frac}
        return {"left_out": "x", "seed": seed, "done_when": [best]}

    unjudged = {"left_out": "x", "seed": 3, "done_when": []}  # no oracle row, or every run failed
    (o,) = lofo.over_seeds([fold(0, 0.5), fold(1, 0.2), fold(2, None), unjudged])
    assert o["best_share"] == [0.5, 0.2, 0.0, None]  # nothing within the budget counts as saving nothing
    assert o["mean"] == pytest.approx(0.7 / 3) and o["min"] == 0.0 and o["max"] == 0.5


def test_a_fold_whose_oracle_failed_everywhere_is_not_judged_rather_than_a_zero():
    from dtoc_rl.policies.evaluate import Run, aggregate

    def reading(err):
        runs = [Run(p, f"t{t}", "gpt-4o", "swe", f"task{t}", calls=50, dollars=d, base_dollars=100.0,
                    error=err if p == "oracle" else None)
                for t in range(12) for p, d in (("oracle", 50), ("learned:path=c", 60))]  # fmt: skip
        return lofo.reading(aggregate(runs, by=["overall"], n_boot=20), 1.0, 10)

    ok = {"left_out": "x", "seed": 0, "done_when": reading(None)}
    failed = {"left_out": "x", "seed": 1, "done_when": reading("boom")}
    assert failed["done_when"] and failed["done_when"][0]["oracle_failed"]
    (o,) = lofo.over_seeds([ok, failed])
    assert o["best_share"] == [pytest.approx(0.8), None] and o["mean"] == pytest.approx(0.8)
