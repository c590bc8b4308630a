"""scripts/threshold_rules.py: how a checkpoint's thresholds were chosen, against other rules."""

import json
from types import SimpleNamespace

import pytest

from scripts import threshold_rules as tr

GRID = [0.1, 0.3]
DISC = "discount, no write premium"


def _row(family, base, dollars, misses, length="short", steps=100, source="s"):
    return {"family": family, "regime": DISC, "steps": steps, "base": base, "dollars": dollars,
            "misses": misses, "length": length, "source": source}  # fmt: skip


def test_score_prices_an_abstaining_run_at_its_unmanaged_bill():
    rows = [_row("a", 10.0, [9.0, 8.0], [1, 3]), _row("b", 10.0, [9.0, 5.0], [0, 2], steps=300)]
    s = tr.score(rows, GRID, lambda r: 0.3 if r["family"] == "a" else 0.0)
    assert s == {"n": 2, "saved": pytest.approx(0.1), "misses_per_100": pytest.approx(0.75)}
    assert tr.score(rows, GRID, lambda r: 0.0)["saved"] == 0.0


def test_hindsight_is_the_best_single_threshold_within_the_budget_per_group():
    held = [_row("a", 10.0, [9.0, 6.0], [0, 5], "long")] + [_row("a", 10.0, [9.5, 9.0], [0, 0])] * 3
    tune = [_row("a", 10.0, [9.0, 6.0], [0, 0])] * 10  # the tune runs say 0.3 is safe
    stored = {"family": {"a": 0.3}, "regime": {}, "default": 0.3}
    cfg = SimpleNamespace(miss_budget=1.0, min_family_val=10, min_source_val=5)
    out = tr.compare(tune, held, GRID, stored, cfg)["rules"]
    assert out["stored"]["long"]["misses_per_100"] == 5.0  # over the budget on the held-out run
    assert out["hindsight"]["long"]["threshold"] == 0.1 and out["hindsight"]["long"]["saved"] == 0.1
    assert out["hindsight"]["short"]["threshold"] == 0.3
    assert out["pooled only"]["all"] == out["stored"]["all"]  # the tune runs chose 0.3 either way
    rows = tr.table({"budget_misses_per_100": 1.0, "rules": out}).splitlines()
    stored_row = next(r for r in rows if r.startswith("| stored |"))
    assert stored_row.split(" | ")[2].endswith("5.00 !")  # the long run's cell, over the budget


def test_a_stored_threshold_off_the_replay_grid_is_named():
    cfg = SimpleNamespace(miss_budget=1.0, min_family_val=10, min_source_val=5)
    rows = [_row("a", 10.0, [9.0, 8.0], [0, 0])]
    with pytest.raises(ValueError, match=r"0\.2 is not on the replay grid"):
        tr.compare(rows, rows, GRID, {"family": {"a": 0.2}, "regime": {}, "default": 0.1}, cfg)


def test_a_checkpoint_without_a_table_is_a_one_line_error(tmp_path, capsys):
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    path = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1).create().save(tmp_path / "c")
    assert tr.main(["--checkpoint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "threshold table" in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_stored_table_scores_what_evaluate_measures(tmp_path, capsys):
    from dtoc_rl.policies.evaluate import evaluate
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig
    from dtoc_rl.policies.learned_trainer import own_splits

    cfg = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, epochs=2, dagger_rounds=0, val_fraction=0.5)
    pol = cfg.create()
    pol.fit(None, progress=False)
    # a bold table of its own, so that the policy hides (a tiny network's chosen table abstains)
    pol.set_threshold_table({**pol.meta["thresholds"], "family": {}, "regime": {}, "default": 0.7})
    path = pol.save(tmp_path / "c")
    assert tr.main(["--checkpoint", str(path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["rules"]) == {"stored", *tr.RULES, "pooled only", "hindsight"}
    _, _, held, _ = own_splits(LearnedPolicy.load(path), None, None)
    spec = f"learned:path={path}"
    runs = [r for r in evaluate(held, [spec], progress=False) if r.policy == spec]  # not the oracle
    base, paid = sum(r.base_dollars for r in runs), sum(r.dollars for r in runs)
    stored = res["rules"]["stored"]["all"]
    assert stored["n"] == len(runs) == res["held_out_runs"]
    # the lockstep replay of every threshold gives what the policy itself does at its table
    assert stored["saved"] == pytest.approx(1 - paid / base, abs=1e-9) and stored["saved"] != 0.0
    misses, calls = sum(r.misses for r in runs), sum(r.calls for r in runs)
    assert stored["misses_per_100"] == pytest.approx(100 * misses / calls)
