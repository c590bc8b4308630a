"""Thresholds chosen on logs a checkpoint was not trained on: `dtoc-rl train --adapt`."""

import json

import pytest

from dtoc_rl.cli import main
from dtoc_rl.data.dataset import task_name
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.policies.learned import LearnedPolicy
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import ADAPT_SPLIT_SALT, adapt, retune, split_by_task

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=2, dagger_rounds=0)
LEFT_OUT = "mini-swe-agent"


def _name(e):
    return task_name(e.source, e.task_id)


@pytest.fixture(scope="module")
def fold(tmp_path_factory):
    """A checkpoint trained without one harness of the bundled sample, and that harness's runs."""
    pol = LearnedPolicyConfig(**TINY, exclude_source=LEFT_OUT).create()
    pol.fit(None, progress=False)
    path = pol.save(tmp_path_factory.mktemp("fold") / "ckpt")
    unseen = [e for e in load_episodes(None) if e.source == LEFT_OUT]
    assert len({e.task_id for e in unseen}) >= 4
    return path, unseen


def test_adapting_chooses_on_part_of_the_new_runs_and_holds_out_the_rest(fold):
    path, unseen = fold
    pol = LearnedPolicy.load(path)
    before = set(pol.meta["val_tasks"])
    table = adapt(pol, episodes=unseen, holdout=0.5)
    meta = pol.meta
    chosen_on = set(meta["tune_tasks"]) & {_name(e) for e in unseen}
    held = set(meta["val_tasks"]) & {_name(e) for e in unseen}
    assert chosen_on and held and not chosen_on & held  # a task is on one side only
    assert chosen_on | held == {_name(e) for e in unseen}
    assert before <= set(meta["val_tasks"])  # the training's own held-out tasks stay unused
    runs = sum(_name(e) in chosen_on for e in unseen)
    assert meta["adapt_runs"] == runs == table["validation"]["pooled"]["trajectories"]
    assert meta["adapt_held_out_runs"] == len(unseen) - runs
    assert meta["thresholds"] is table and "val_metrics" not in meta
    # every new run chosen on: nothing of them held out
    again = LearnedPolicy.load(path)
    adapt(again, episodes=unseen, holdout=0.0)
    assert again.meta["adapt_runs"] == len(unseen)
    assert set(again.meta["val_tasks"]) == before
    with pytest.raises(ValueError, match="held-out share"):
        adapt(again, episodes=unseen, holdout=1.0)


def test_adapting_skips_the_tasks_the_checkpoint_trained_on(fold):
    path, unseen = fold
    pol = LearnedPolicy.load(path)
    trained = set(pol.meta["train_tasks"])
    seen = [e for e in load_episodes(None) if _name(e) in trained]
    with pytest.raises(ValueError, match="every task of this data is one the checkpoint trained on"):
        adapt(pol, episodes=seen)
    adapt(pol, episodes=seen + unseen, holdout=0.0)
    assert pol.meta["adapt_runs"] == len(unseen) and pol.meta["adapt_skipped_runs"] == len(seen)
    # unless told they were never trained on (scripts.lofo: another family's runs of the same tasks)
    again = LearnedPolicy.load(path)
    adapt(again, episodes=seen + unseen, holdout=0.0, skip_trained=False)
    assert again.meta["adapt_runs"] == len(seen) + len(unseen)
    # a checkpoint that does not list its training tasks cannot tell them: refused, not guessed
    old = LearnedPolicy.load(path)
    del old.meta["train_tasks"]
    with pytest.raises(ValueError, match="lists no training tasks"):
        adapt(old, episodes=unseen)


def test_the_trainings_own_validation_tasks_are_not_all_held_out():
    # the training split its validation tasks off with the seed's hash: the same hash at a larger share
    # would hold out every one of them that the new data has again, and choose on none
    pol = LearnedPolicyConfig(**TINY).create()
    eps = load_episodes(None)
    train, val = split_by_task(eps, 0.5, pol.cfg.seed)
    pol.meta = {"train_tasks": [], "tune_tasks": [], "val_tasks": sorted({_name(e) for e in val})}
    adapt(pol, episodes=val, holdout=0.5)
    held = set(pol.meta["val_tasks"]) & {_name(e) for e in val}
    assert 0 < len(held) < len({_name(e) for e in val})
    # unsalted, all but the one task a split keeps on the other side would be held out
    unsalted = {_name(e) for e in split_by_task(val, 0.5, pol.cfg.seed)[1]}
    assert len(unsalted) == len({_name(e) for e in val}) - 1 > len(held)
    salted = {_name(e) for e in split_by_task(val, 0.5, pol.cfg.seed + ADAPT_SPLIT_SALT)[1]}
    assert salted == held


def test_the_tasks_its_own_thresholds_were_chosen_on_are_never_held_out():
    pol = LearnedPolicyConfig(**TINY).create()
    eps = load_episodes(None)
    tune = sorted({_name(e) for e in eps})[::2]
    pol.meta = {"train_tasks": [], "tune_tasks": tune, "val_tasks": []}
    adapt(pol, episodes=eps, holdout=0.5)
    assert not set(tune) & set(pol.meta["val_tasks"]) and set(tune) <= set(pol.meta["tune_tasks"])
    assert pol.meta["adapt_held_out_runs"] > 0


def test_an_adapted_checkpoint_is_not_retuned_on_its_training_split(fold):
    path, unseen = fold
    pol = LearnedPolicy.load(path)
    adapt(pol, episodes=unseen)
    with pytest.raises(ValueError, match="adapted to objects"):
        retune(pol, None)


def test_the_command_adapts_and_evaluate_measures_the_held_out_part(fold, tmp_path, capsys):
    path, unseen = fold
    out = tmp_path / "cal"
    assert main(["train", "--adapt", str(path), "-o", str(out)]) == 2
    assert "--adapt needs --dataset" in capsys.readouterr().err
    assert main(["train", "--retune", str(path), "--holdout-share", "0.3", "-o", str(out)]) == 2
    assert "--holdout-share applies only with --adapt" in capsys.readouterr().err
    assert main(["train", "--retune", str(path), "--adapt", str(path), "-o", str(out)]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(["train", "--adapt", str(path), "--dataset", str(bundled_dataset()), "--epochs", "4",
                 "-o", str(out)]) == 2  # fmt: skip
    assert "--epochs would be ignored" in capsys.readouterr().err
    for bad in ("1", "-0.1", "nan"):
        assert main(["train", "--adapt", str(path), "--holdout-share", bad, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "--holdout-share must be at least 0 and below 1" in err and err.count("\n") == 1
    # the original is what the adapted thresholds are judged against: never written over
    assert main(["train", "--adapt", str(path), "--dataset", str(bundled_dataset()), "-o", str(path)]) == 2
    assert "another folder" in capsys.readouterr().err
    data = str(bundled_dataset())
    args = ["train", "--adapt", str(path), "--dataset", data, "-o", str(out), "--json", "--threads", "1"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    meta = json.loads((out / "config.json").read_text())["meta"]
    assert report["adapt_runs"] == meta["adapt_runs"] and meta["adapted_on"] == data
    assert report["held_out_runs"] == meta["adapt_held_out_runs"] > 0
    assert report["adapted_from"] == str(path) and report["thresholds"]["default"] is not None
    assert report["skipped_runs"] == meta["adapt_skipped_runs"] > 0  # the bundled runs it trained on
    # the adapted checkpoint's held-out runs are those no choice was made on
    runs = tmp_path / "runs.jsonl"
    rc = main(["evaluate", "--dataset", data, "-p", f"learned:path={out}", "--holdout-from", str(out),
               "--held-out-only", "--runs-out", str(runs), "--quiet"])  # fmt: skip
    assert rc == 0
    capsys.readouterr()
    evaluated = {task_name(r["source"], r["task_id"]) for r in map(json.loads, runs.read_text().splitlines())}
    # (the bundled sample's training had one validation task, which chose its thresholds too)
    adapted_on = set(meta["tune_tasks"]) - set(LearnedPolicy.load(path).meta["tune_tasks"])
    assert adapted_on and evaluated and not evaluated & (adapted_on | set(meta["train_tasks"]))
    # every run, split by what the checkpoint did with its task: the adapted-on runs are "tune"
    rc = main(["evaluate", "--dataset", data, "-p", f"learned:path={out}", "--holdout-from", str(out),
               "--runs-out", str(runs), "--quiet", "--json"])  # fmt: skip
    assert rc == 0
    capsys.readouterr()
    rows = map(json.loads, runs.read_text().splitlines())
    split = {task_name(r["source"], r["task_id"]): r["split"] for r in rows}
    assert {split[t] for t in adapted_on if t in split} == {"tune"}
    assert {split[t] for t in evaluated} <= {"held-out", "left out"}  # the fold's harness: left out
    assert {s for t, s in split.items() if t in set(meta["train_tasks"])} == {"train"}
    # said in words too, with the command that compares it with the original
    assert main(args[:-3] + ["--threads", "1"]) == 0
    said = capsys.readouterr().out
    assert f"runs of {data}" in said and "runs skipped: the checkpoint trained on their tasks" in said
    assert f"-p learned:path={out} learned:path={path} oracle" in said
    assert main(args[:-3] + ["--threads", "1", "--holdout-share", "0"]) == 0
    said = capsys.readouterr().out
    assert "held out" not in said and f"checkpoint written to {out}" in said
    # chosen on every task it did not train on: nothing left to evaluate it on, said as such
    assert main(["evaluate", "--dataset", data, "-p", f"learned:path={out}", "--holdout-from", str(out),
                 "--held-out-only", "--quiet"]) == 2  # fmt: skip
    assert "chose its thresholds on, every one of its tasks" in capsys.readouterr().err


def test_the_suggested_command_quotes_its_paths(fold, tmp_path, capsys):
    path, unseen = fold
    out = tmp_path / "my adapted ckpt"
    data = str(bundled_dataset())
    assert main(["train", "--adapt", str(path), "--dataset", data, "-o", str(out), "--threads", "1"]) == 0
    assert f"-p 'learned:path={out}'" in capsys.readouterr().out


def test_an_adapted_checkpoint_is_not_fine_tuned_on_its_old_split(fold, tmp_path, capsys):
    path, unseen = fold
    pol = LearnedPolicy.load(path)
    adapt(pol, episodes=unseen, holdout=0.0)  # every held-out task of the new data chosen on
    ck = pol.save(tmp_path / "adapted")
    rc = main(["train", "--init-from", str(ck), "--rl-updates", "1", "-o", str(tmp_path / "ft")])
    assert rc == 2 and "adapted to objects" in capsys.readouterr().err


def test_nothing_to_split_is_said_with_its_reason(fold, tmp_path, capsys):
    path, unseen = fold
    one = tmp_path / "one-task"
    first = unseen[0]
    from dtoc_rl.data.dataset import load_trajectories, write_dataset

    trajs = [t for t in load_trajectories(bundled_dataset()) if (t.source, t.task_id) == (first.source,
             first.task_id)]  # fmt: skip
    write_dataset(trajs, one)
    assert main(["train", "--adapt", str(path), "--dataset", str(one), "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "nothing held out: 1 task beside those the checkpoint trained on" in err
