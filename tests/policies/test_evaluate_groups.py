"""Evaluation reports by run length, cost regime and crossed groupings, and the issue-17 summary."""

import json

import pytest

from dtoc_rl.cli import main
from dtoc_rl.cli.evaluate import beats_text
from dtoc_rl.policies.evaluate import (
    LONG_RUN_TOKENS,
    Run,
    aggregate,
    done_when,
    evaluate,
    mark_split,
    run_length,
)
from dtoc_rl.sim.pricing import cache_regime, prices_for


def _run(policy, tid, *, dollars, base=100.0, misses=0, calls=100, split="held-out", length="short"):
    return Run(policy, tid, "gpt-4o", "src", tid, calls=calls, dollars=dollars, base_dollars=base,
               input_tokens=1, base_input_tokens=1, misses=misses, split=split, length=length)  # fmt: skip


def test_mark_split_orders_left_out_held_out_tune_and_train_and_lets_an_adapted_choice_go_first():
    pairs = [("t1", "claude"), ("t1", "gpt-4o"), ("t2", "gpt-4o"), ("t3", "claude"), ("t4", "claude")]

    def runs():  # (task, family): tasks span families within a source
        return [Run("p", f"{t}-{f}", f, "src", t) for t, f in pairs]

    def split(**kw):
        rs = runs()
        mark_split(rs, {"src/t3"}, {"family": "gpt-4o"}, **kw)
        return [r.split for r in rs]

    # trained without gpt-4o: its runs were dropped before the tune split, so never chosen on
    assert split(tune_tasks={"src/t1"}) == ["tune", "left out", "left out", "held-out", "train"]
    # adapted on t1: chosen on every run of it, the left-out family's too
    assert split(tune_tasks={"src/t1"}, adapted=True) == ["tune", "tune", "left out", "held-out", "train"]
    # one validation task that had to stop training and choose the thresholds as well stays held-out
    only = ["train", "left out", "left out", "held-out", "train"]
    assert split(tune_tasks={"src/t3"}, adapted=True) == only
    assert split() == only  # no tune tasks listed


def test_run_length_rule():
    assert run_length(LONG_RUN_TOKENS * 10, 10) == "long"
    assert run_length(LONG_RUN_TOKENS * 10 - 1, 10) == "short"
    assert run_length(0, 0) == "short"


def test_evaluate_labels_every_run_with_its_regime_and_length():
    from dtoc_rl.envs.data import load_episodes

    raw = {e.traj_id: e.model_raw for e in load_episodes(None)}
    runs = evaluate(None, ["none", "hide_big"], progress=False)
    by_traj: dict[str, set] = {}
    for r in runs:
        assert r.error is None
        assert r.regime == cache_regime(prices_for(r.model_family, raw[r.traj_id]))
        assert r.length == run_length(r.base_input_tokens, r.calls)
        by_traj.setdefault(r.traj_id, set()).add((r.regime, r.length))
    assert all(len(v) == 1 for v in by_traj.values())  # every policy's run of a trajectory agrees


def test_an_oracle_object_never_merges_into_the_reference_oracle():
    from dtoc_rl.policies.oracle import HindsightOracle

    runs = evaluate(None, [HindsightOracle(restores=False), HindsightOracle()], progress=False)
    by_policy: dict[str, list] = {}
    for r in runs:
        by_policy.setdefault(r.policy, []).append(r)
    assert set(by_policy) == {"oracle", "oracle(restores=False)", "oracle#2"}
    n = {len(v) for v in by_policy.values()}
    assert len(n) == 1  # one run per trajectory each: nothing merged into the reference
    ref = {r.traj_id: r.dollars for r in by_policy["oracle"]}
    assert all(r.dollars == pytest.approx(ref[r.traj_id]) for r in by_policy["oracle#2"])
    assert sum(r.dollars for r in by_policy["oracle(restores=False)"]) >= sum(ref.values()) - 1e-9
    rows = aggregate(runs, by=["overall"], n_boot=10)
    assert done_when(rows) == []  # only hindsight: nothing to judge


def test_a_failed_run_still_has_its_length():
    from dtoc_rl.policies.baselines import NoManagement

    class Broken(NoManagement):
        def act(self, obs, info=None):
            raise RuntimeError("boom")

    runs = evaluate(None, [], policies={"broken": Broken()}, progress=False)
    bad = [r for r in runs if r.policy == "broken"]
    oracle = {r.traj_id: r for r in runs if r.policy == "oracle"}
    assert bad and all(r.error for r in bad)
    assert all(r.length == oracle[r.traj_id].length != "" for r in bad)


def test_crossed_grouping_splits_the_overall_figures():
    runs = [
        _run("oracle", "a", dollars=50, split="held-out", length="long"),
        _run("x", "a", dollars=80, split="held-out", length="long"),
        _run("oracle", "b", dollars=90, split="held-out", length="short"),
        _run("x", "b", dollars=100, split="held-out", length="short"),
        _run("oracle", "c", dollars=90, split="train", length="short"),
        _run("x", "c", dollars=95, split="train", length="short"),
    ]
    rows = aggregate(runs, by=["overall", "split+length"], n_boot=20)
    crossed = {r["group"]: r for r in rows if r["group_by"] == "split+length" and r["policy"] == "x"}
    assert set(crossed) == {"held-out | long", "held-out | short", "train | short"}
    assert crossed["held-out | long"]["savings"] == pytest.approx(0.2)
    assert crossed["held-out | short"]["savings"] == pytest.approx(0.0)
    assert sum(r["n"] for r in crossed.values()) == 3
    with pytest.raises(ValueError, match="'lenght' is not one of"):
        aggregate(runs, by=["split+lenght"])


def _row(policy, savings, misses, *, group="all", n=20, lo=None, hi=None, frac=None, errors=0):
    return {"policy": policy, "group_by": "overall", "group": group, "n": n, "errors": errors,
            "savings": savings,
            "savings_lo": savings - 0.05 if lo is None else lo,
            "savings_hi": savings + 0.05 if hi is None else hi,
            "misses_per_100": misses, "oracle_fraction": savings / 0.3 if frac is None else frac}  # fmt: skip


def test_done_when_picks_the_best_policy_within_the_budget_and_the_rule_it_must_beat():
    rows = [
        _row("oracle", 0.30, 0.0),
        _row("learned:path=p,threshold=0.1", 0.15, 0.5),
        _row("learned:path=p,threshold=0.2", 0.20, 0.9),
        _row("learned:path=p,threshold=0.5", 0.28, 4.0),  # saves most, but over the budget
        _row("cache_clear", 0.14, 0.8),  # beaten at its misses by threshold 0.1
        _row("hide_big:tokens=2000", 0.25, 1.5),  # over the budget: not a rival
        _row("none", 0.0, 0.0),
    ]
    (d,) = done_when(rows, max_misses=1.0)
    assert d["policy"] == "learned:path=p,threshold=0.2" and d["best_rule"] == "cache_clear"
    assert d["beats_rules"] and d["no_loss"] and d["reaches"]  # 0.20 of 0.30: 67% >= 60%
    assert d["unbeaten"] == []
    assert d["oracle_fraction"] == pytest.approx(0.2 / 0.3)
    (d,) = done_when(rows, max_misses=1.0, target=0.7)
    assert d["reaches"] is False
    # a tighter budget: threshold 0.1, and no rule within it but keeping everything (not a rival)
    (d,) = done_when(rows, max_misses=0.6)
    assert d["policy"].endswith("0.1") and d["best_rule"] is None and d["beats_rules"]
    # what the log hid live is the run of a policy, not a rule one could run instead: no rival
    (d,) = done_when([*rows, _row("logged", 0.26, 0.2)], max_misses=1.0)
    assert d["best_rule"] == "cache_clear" and d["beats_rules"] and d["unbeaten"] == []
    # a hindsight variant is a reference, never the policy picked
    (d,) = done_when([*rows, _row("oracle:restores=0", 0.29, 0.0)], max_misses=1.0)
    assert d["policy"] == "learned:path=p,threshold=0.2" and d["oracle_fraction"] == pytest.approx(0.2 / 0.3)


def test_done_when_judges_each_rule_at_its_own_misses():
    rows = [
        _row("oracle", 0.30, 0.0),
        _row("learned:path=p,threshold=0.1", 0.15, 0.5),
        _row("learned:path=p,threshold=0.2", 0.20, 0.9),
        _row("hide_big:tokens=1000,age=8", 0.18, 0.4),  # below the pick's savings, with fewer misses
    ]
    (d,) = done_when(rows, max_misses=1.0)
    # the pick out-saves the best rule at its own misses, but no point of the sweep at <= 0.4 misses
    # out-saves the rule: it is the better choice there, so the check fails and names it
    assert d["best_rule"] == "hide_big:tokens=1000,age=8" and d["savings"] > d["best_rule_savings"]
    assert d["beats_rules"] is False
    assert d["unbeaten"] == [{"policy": "hide_big:tokens=1000,age=8", "savings": 0.18, "misses_per_100": 0.4}]
    assert beats_text(d) == "no: hide_big:tokens=1000,age=8 +18.0% (0.40)"
    # a lower threshold that out-saves it with fewer misses settles it
    (d,) = done_when([*rows, _row("learned:path=p,threshold=0.05", 0.185, 0.3)], max_misses=1.0)
    assert d["beats_rules"] and d["unbeaten"] == []
    # a rule that never misses needs a point that never misses
    zero = [*rows[:3], _row("hide_big:tokens=8000", 0.02, 0.0)]
    (d,) = done_when(zero, max_misses=1.0)
    assert not d["beats_rules"] and [r["policy"] for r in d["unbeaten"]] == ["hide_big:tokens=8000"]
    (d,) = done_when([*zero, _row("learned:path=p,threshold=0.01", 0.03, 0.0)], max_misses=1.0)
    assert d["beats_rules"]
    # rules that save nothing, or only beyond the budget, or NaN (no baseline dollars), are not rivals
    rivals = [_row("none", 0.0, 0.0), _row("cache_clear", 0.5, 3.0), _row("obs_mask", float("nan"), 0.0)]
    (d,) = done_when([*rows[:3], *rivals], max_misses=1.0)
    assert d["beats_rules"] and d["unbeaten"] == [] and d["best_rule"] is None
    # abstaining (+0.0%) ties keeping everything and beats rules that lose money within the budget
    abstains = [_row("oracle", 0.04, 0.0), _row("learned:path=p", 0.0, 0.0), _row("none", 0.0, 0.0),
                _row("hide_big:tokens=8000", -0.01, 0.0)]  # fmt: skip
    (d,) = done_when(abstains, max_misses=1.0)
    assert d["beats_rules"] and d["best_rule"] == "hide_big:tokens=8000"
    (d,) = done_when([*abstains, _row("cache_clear", 0.0, 0.0)], max_misses=1.0)
    assert d["beats_rules"]  # a rule that saves nothing, tied: it saves no money to beat
    (d,) = done_when(
        [*abstains, _row("cache_clear", 0.0, 0.0), _row("learned:path=p,threshold=0.1", -0.02, 0.0)]
    )
    assert d["policy"] == "learned:path=p" and d["beats_rules"]
    lose = [_row("oracle", 0.04, 0.0), _row("learned:path=p", -0.02, 0.0), _row("cache_clear", -0.01, 0.0)]
    (d,) = done_when(lose, max_misses=1.0)
    assert not d["beats_rules"]  # trailing a rule that loses less is not beating it
    assert beats_text(d) == "no: cache_clear -1.0% (0.00)"
    # only the pick's own sweep answers a rule: another checkpoint's point does not
    other = _row("learned:path=q,threshold=0.05", 0.185, 0.3)
    (d,) = done_when([*rows, other], max_misses=1.0)
    assert d["policy"] == "learned:path=p,threshold=0.2" and not d["beats_rules"]
    assert beats_text(d, red=True) == "[red]no[/red]: hide_big:tokens=1000,age=8 +18.0% (0.40)"


def test_done_when_flags_losses_and_small_groups():
    rows = [
        _row("oracle", 0.30, 0.0, group="g", n=12),
        _row("learned:path=p,threshold=0.1", -0.10, 0.2, group="g", n=12, hi=-0.01),
        _row("hide_big:tokens=8000", 0.01, 0.1, group="g", n=12),
        _row("oracle", 0.30, 0.0, group="tiny", n=3),
        _row("learned:path=p,threshold=0.1", -0.10, 0.2, group="tiny", n=3, hi=-0.01),
        _row("oracle", 0.30, 0.0, group="over", n=30),
        _row("learned:path=p,threshold=0.1", 0.10, 3.0, group="over", n=30),
    ]
    d = {r["group"]: r for r in done_when(rows, max_misses=1.0)}
    assert d["g"]["no_loss"] is False and d["g"]["beats_rules"] is False and d["g"]["reaches"] is False
    assert d["tiny"]["no_loss"] is None  # too few trajectories to judge
    assert d["over"]["policy"] is None and not d["over"]["beats_rules"]


def test_cli_reports_lengths_and_the_done_when_summary(capsys):
    args = ["evaluate", "-p", "none", "hide_big:tokens=2000",
            "--by", "overall", "length", "model_family+length",
            "--json", "--bootstrap", "20", "--quiet"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["group"] for r in out["rows"] if r["group_by"] == "length"} <= {"short", "long"}
    assert any(" | " in r["group"] for r in out["rows"] if r["group_by"] == "model_family+length")
    assert out["done_when"] == []  # only rules: nothing to judge


def test_cli_refuses_an_unknown_grouping(capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "-p", "none", "--by", "split+family"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "'family' is not one of" in err


def _against_checkpoint(tmp_path, config: dict, by: str) -> list[str]:
    """`dtoc-rl evaluate` arguments marking runs against a checkpoint folder holding only ``config``."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(config))
    return ["evaluate", "-p", "none", "--holdout-from", str(ckpt), "--by", by, "--json", "--bootstrap", "10"]


def test_held_out_only_evaluates_the_checkpoints_validation_tasks(tmp_path, capsys):
    from dtoc_rl.envs.data import load_episodes

    eps = load_episodes(None)
    keep = {f"{e.source}/{e.task_id}" for e in eps[:3]}
    args = _against_checkpoint(tmp_path, {"meta": {"val_tasks": sorted(keep)}}, "overall")
    assert main([*args, "--held-out-only"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    n = sum(1 for e in eps if f"{e.source}/{e.task_id}" in keep)
    assert {r["n"] for r in rows} == {n} and {r["group"] for r in rows if r["group_by"] == "split"} == {
        "held-out"
    }
    assert main(["evaluate", "-p", "none", "--held-out-only"]) == 2
    assert "--held-out-only needs --holdout-from" in capsys.readouterr().err


def test_runs_of_a_source_the_checkpoint_was_trained_without_are_left_out(tmp_path, capsys):
    from dtoc_rl.envs.data import load_episodes

    eps = load_episodes(None)
    keep = set(sorted({f"{e.source}/{e.task_id}" for e in eps if e.source != "tau-bench"})[:2])
    config = {"config": {"exclude_source": "tau-bench"}, "meta": {"val_tasks": sorted(keep)}}
    assert main(_against_checkpoint(tmp_path, config, "split")) == 0
    n = {r["group"]: r["n"] for r in json.loads(capsys.readouterr().out)["rows"] if r["policy"] == "none"}
    tau = sum(e.source == "tau-bench" for e in eps)
    held = sum(f"{e.source}/{e.task_id}" in keep for e in eps)
    assert n == {"left out": tau, "held-out": held, "train": len(eps) - tau - held}


def test_tasks_a_checkpoint_never_saw_are_held_out_and_an_old_checkpoint_says_why_none_are(tmp_path, capsys):
    # your own logs against a checkpoint trained elsewhere: every task it did not train on is held out
    from dtoc_rl.envs.data import load_episodes

    eps = load_episodes(None)
    tasks = sorted({f"{e.source}/{e.task_id}" for e in eps})
    meta = {"val_tasks": tasks[:1], "tune_tasks": tasks[1:2], "train_tasks": tasks[2:4]}
    args = _against_checkpoint(tmp_path, {"meta": meta}, "split")
    assert main([*args, "--quiet"]) == 0
    n = {r["group"]: r["n"] for r in json.loads(capsys.readouterr().out)["rows"] if r["group_by"] == "split"}
    trained = sum(f"{e.source}/{e.task_id}" in tasks[2:4] for e in eps)
    tuned = sum(f"{e.source}/{e.task_id}" == tasks[1] for e in eps)
    assert n == {"held-out": len(eps) - trained - tuned, "tune": tuned, "train": trained}
    # a checkpoint that names only validation tasks from another dataset: one line saying so
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(
        json.dumps({"meta": {"val_tasks": ["x/y"], "trained_on": "/data/theirs"}})
    )
    assert main(["evaluate", "-p", "none", "--holdout-from", str(old), "--held-out-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing in this dataset is held out" in err and "/data/theirs" in err and "\n" not in err


def test_groups_holding_the_same_runs_get_the_same_interval():
    """Overall, one family and one source that hold the same runs are one set of runs: one CI."""
    from dtoc_rl.policies.evaluate import aggregate, evaluate

    runs = evaluate(None, ["none", "last_n:n=3"], source="mini-swe-agent", progress=False)
    rows = aggregate(runs, by=["overall", "model_family", "source"], n_boot=200)
    for policy in ("last_n:n=3", "oracle"):
        cis = {(r["savings_lo"], r["savings_hi"]) for r in rows if r["policy"] == policy}
        assert len(cis) == 1, cis
    again = aggregate(list(reversed(runs)), by=["overall"], n_boot=200)  # nor does the runs' order matter
    first = {r["policy"]: (r["savings_lo"], r["savings_hi"]) for r in rows if r["group_by"] == "overall"}
    assert {r["policy"]: (r["savings_lo"], r["savings_hi"]) for r in again} == first


def test_one_string_where_a_list_is_asked_is_one_item_not_its_letters():
    from dtoc_rl.policies.evaluate import aggregate, evaluate

    runs = evaluate(None, "last_n:n=3", source="tau-bench", progress=False)
    assert {r.policy for r in runs} == {"last_n:n=3", "oracle"}
    task = f"{runs[0].source}/{_task_of(runs[0])}"
    one = evaluate(None, "none", tasks=task, progress=False)
    assert {r.traj_id for r in one} == {runs[0].traj_id}
    assert {r["group_by"] for r in aggregate(runs, by="model_family", n_boot=10)} == {"model_family"}
    held = evaluate(None, "none", source="tau-bench", holdout_tasks=[task], progress=False)  # a list
    assert {r.traj_id for r in held if r.split == "held-out"} == {runs[0].traj_id}


def test_names_are_one_string_or_many_and_no_filter_is_none_or_empty():
    from dtoc_rl.data.dataset import name_set
    from dtoc_rl.envs.data import load_episodes, select_episodes

    assert name_set("tau-bench") == {"tau-bench"} and name_set(None) is None and name_set([]) == set()
    assert name_set(x for x in ("a", "b", "a")) == {"a", "b"}
    eps = load_episodes(None)
    tau = select_episodes(eps, source="tau-bench")
    assert tau and {e.source for e in tau} == {"tau-bench"}
    assert len(select_episodes(eps, source=[])) == len(select_episodes(eps)) > len(tau)


def test_bare_task_ids_as_holdout_tasks_are_said_not_silently_all_train():
    from dtoc_rl.policies.evaluate import evaluate

    with pytest.warns(UserWarning, match="task names are 'source/task_id'"):
        runs = evaluate(None, "none", source="tau-bench", holdout_tasks={"0", "1"}, progress=False)
    assert {r.split for r in runs} == {"train"}


def _task_of(run):
    from dtoc_rl.envs.data import load_episodes

    (ep,) = [e for e in load_episodes(None) if e.traj_id == run.traj_id]
    return ep.task_id


def test_done_when_judges_no_policy_on_fewer_runs_than_the_oracle():
    """A policy that failed on runs the oracle completed has its savings from the rest: it is not
    picked, and a rule that failed is not beaten."""
    rows = [_row("oracle", 0.30, 0.0, n=34), _row("learned:path=p", 0.20, 0.5, n=6, errors=28),
            _row("learned:path=q", 0.10, 0.5, n=34),
            _row("hide_big:tokens=8000", 0.05, 0.6, n=34)]  # fmt: skip
    (d,) = done_when(rows, max_misses=1.0)
    assert d["policy"] == "learned:path=q" and d["n"] == 34 and d["failed"] == ["learned:path=p"]
    assert d["beats_rules"]
    (d,) = done_when([*rows, _row("cache_clear", 0.01, 0.0, n=30, errors=4)], max_misses=1.0)
    assert d["policy"] == "learned:path=q" and not d["beats_rules"]
    assert d["failed"] == ["cache_clear", "learned:path=p"]
    (d,) = done_when([*rows, _row("none", 0.0, 0.0, n=30, errors=4)], max_misses=1.0)
    assert d["beats_rules"]  # keeping everything is no rival, failed or not
    (d,) = done_when([rows[0], rows[1], rows[3]], max_misses=1.0)  # the only policy failed on some runs
    assert (
        d["policy"] is None
        and not d["reaches"]
        and not d["beats_rules"]
        and d["failed"] == ["learned:path=p"]
    )


def test_a_run_every_policy_failed_on_leaves_the_rest_comparable():
    """aggregate measures every policy on the runs the oracle completed: a run all of them failed on,
    the oracle too, is left out, and no one is judged short for it."""
    from dtoc_rl.policies.evaluate import Run, aggregate

    runs = []
    for t in range(20):
        err = "boom" if t == 0 else None
        for policy, dollars in (
            ("oracle", 50),
            ("learned:path=p", 60),
            ("hide_big:tokens=8000", 90),
            ("none", 100),
        ):
            runs.append(Run(policy, f"t{t:02d}", "gpt-4o", "swe", f"task{t}", calls=50, dollars=dollars,
                            base_dollars=100.0, error=err))  # fmt: skip
    (d,) = done_when(aggregate(runs, by=["overall"], n_boot=50), max_misses=1.0)
    assert d["policy"] == "learned:path=p" and d["n"] == 19 and d["failed"] == [] and d["beats_rules"]


def test_a_rule_objects_label_is_a_rule_as_its_spec_is():
    from dtoc_rl.policies.evaluate import is_rule

    assert is_rule("hide_big:tokens=8000") and is_rule("hide_big(tokens=8000,age=1)") and is_rule("last_n")
    assert not is_rule("learned:path=p") and not is_rule("oracle(restores=False)")
    rows = [
        _row("oracle", 0.30, 0.0),
        _row("learned:path=p", 0.10, 0.5),
        _row("hide_big(tokens=8000,age=1)", 0.2, 0.1),
    ]
    (d,) = done_when(rows, max_misses=1.0)
    assert d["policy"] == "learned:path=p" and d["best_rule"] == "hide_big(tokens=8000,age=1)"


def test_a_group_the_oracle_failed_on_is_said_not_skipped(capsys):
    """Where the oracle completed no run there is nothing to measure savings against: the group
    still gets a done-when row, every check failed, and the table says why."""
    from dtoc_rl.cli.evaluate import print_done_when

    runs = []
    for t in range(12):
        fam = "gpt-4o" if t < 6 else "claude"
        for policy, dollars in (("oracle", 50), ("learned:path=p", 60), ("hide_big:tokens=8000", 90)):
            err = "boom" if policy == "oracle" and fam == "claude" else None
            runs.append(Run(policy, f"t{t:02d}", fam, "swe", f"task{t}", calls=50, dollars=dollars,
                            base_dollars=100.0, error=err))  # fmt: skip
    done = done_when(aggregate(runs, by=["model_family"], n_boot=20), max_misses=1.0)
    by = {d["group"]: d for d in done}
    assert set(by) == {"gpt-4o", "claude"}
    assert by["gpt-4o"]["policy"] == "learned:path=p" and not by["gpt-4o"]["oracle_failed"]
    c = by["claude"]
    assert c["policy"] is None and c["oracle_failed"] and c["n"] == 0
    assert not c["reaches"] and not c["beats_rules"]
    print_done_when(done, 1.0)
    out = capsys.readouterr().out
    assert "oracle failed on every run" in out
    from dtoc_rl.cli.evaluate import print_rows

    print_rows(aggregate(runs, by=["model_family"], n_boot=20))
    out = capsys.readouterr().out
    assert "not measured: the oracle failed" in out and "all 0 runs failed" not in out
    # a policy that failed on some of those runs too is still unmeasured there, not "all 1 runs failed"
    runs[-2].error = "boom"
    print_rows(aggregate(runs, by=["model_family"], n_boot=20))
    out = capsys.readouterr().out
    assert out.count("not measured: the oracle failed") == 2 and "all 1 runs failed" not in out


def test_a_share_of_an_oracle_that_saved_next_to_nothing_is_not_a_number_nor_a_target_judged(capsys):
    from dtoc_rl.cli.evaluate import print_done_when, print_rows
    from dtoc_rl.policies.evaluate import MIN_ORACLE_SAVINGS

    # the oracle saves 0.03% of the bill and the policy loses 0.5%: a ratio of -1666% is noise
    runs = [
        _run("oracle", "a", dollars=99.97),
        _run("learned:path=p,threshold=0.1", "a", dollars=100.5),
        _run("hide_big", "a", dollars=100.2),
    ]
    rows = aggregate(runs, by=["overall"], n_boot=20)
    learned = next(r for r in rows if r["policy"].startswith("learned"))
    assert learned["oracle_fraction"] != learned["oracle_fraction"]  # NaN, and no interval around it
    # pooled, next to nothing saved, though a resample of the small run alone saves 10%: still no interval
    pooled = [
        _run("oracle", "big", dollars=1000.0, base=1000.0),
        _run("oracle", "small", dollars=9.0, base=10.0),
        _run("learned:path=p,threshold=0.1", "big", dollars=1000.0, base=1000.0),
        _run("learned:path=p,threshold=0.1", "small", dollars=9.5, base=10.0),
    ]
    learned = next(
        r for r in aggregate(pooled, by=["overall"], n_boot=200) if r["policy"].startswith("learned")
    )
    assert learned["oracle_fraction"] != learned["oracle_fraction"]
    assert all(learned[f"oracle_fraction_{e}"] != learned[f"oracle_fraction_{e}"] for e in ("lo", "hi"))
    assert 1 - 99.97 / 100 < MIN_ORACLE_SAVINGS
    print_rows(rows)
    assert "1666" not in capsys.readouterr().out
    (d,) = done_when(rows, max_misses=1.0)
    assert d["policy"].startswith("learned") and d["reaches"] is None
    # above it, a share again, and a policy that loses money reaches none of it
    runs[0] = _run("oracle", "a", dollars=100 * (1 - 2 * MIN_ORACLE_SAVINGS))
    (d,) = done_when(aggregate(runs, by=["overall"], n_boot=20), max_misses=1.0)
    assert d["reaches"] is False and d["oracle_fraction"] == pytest.approx(-0.005 / (2 * MIN_ORACLE_SAVINGS))
    print_done_when([d], 1.0)
    assert "-250%" in capsys.readouterr().out


def test_the_bootstrap_drawn_in_blocks_gives_the_figures_of_one_draw(monkeypatch):
    import math

    import dtoc_rl.policies.evaluate as ev

    runs = []
    for i in range(37):  # an odd count: blocks that do not divide the draws
        tid = f"t{i:02d}"
        runs += [
            _run("oracle", tid, dollars=60.0 + i),
            _run("p", tid, dollars=70.0 + (i * 7) % 23, misses=i % 3),
        ]
    runs.append(Run("p", "bad", "gpt-4o", "src", "bad", error="boom"))
    whole = aggregate(runs, by=("overall", "model_family"))
    sizes = []
    real = ev._stats
    monkeypatch.setattr(ev, "_stats", lambda a, o, idx: (sizes.append(idx.shape), real(a, o, idx))[1])
    monkeypatch.setattr(ev, "BOOT_BLOCK", 37 * 3)
    blocked = aggregate(runs, by=("overall", "model_family"))
    # no block holds more than BOOT_BLOCK indices (beyond the point estimate's one row)
    assert max(r * n for r, n in sizes if r > 1) <= 37 * 3 and len(sizes) > 4

    def same(x, y):
        return x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))

    assert len(whole) == len(blocked) and all(
        w.keys() == b.keys() and all(same(w[k], b[k]) for k in w) for w, b in zip(whole, blocked)
    )
    assert any(r["errors"] == 1 and r["policy"] == "p" for r in whole)


def test_no_resample_gives_no_interval_not_an_error():
    runs = [_run("oracle", "t1", dollars=60.0), _run("p", "t1", dollars=70.0)]
    (row,) = [r for r in aggregate(runs, by=("overall",), n_boot=0) if r["policy"] == "p"]
    assert row["savings"] == pytest.approx(0.3) and row["savings_lo"] != row["savings_lo"]  # NaN
