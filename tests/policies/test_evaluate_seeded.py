"""What the simulator draws in an evaluation is fixed by the run, not by when or where it ran."""

from __future__ import annotations

from dtoc_rl.policies.evaluate import evaluate
from dtoc_rl.sim.simulator import CostConfig

SAMPLE = "data/sample"


def _bills(runs):
    return {(r.policy, r.traj_id): (r.dollars, r.misses, r.rereads) for r in runs}


def test_calibrated_misses_draw_the_same_for_every_evaluation_and_worker_count():
    cfg = CostConfig(miss="calibrated", reread_prob=0.5)
    specs = ["hide_big:tokens=500", "last_n:n=2"]
    one = _bills(evaluate(SAMPLE, specs, cost_config=cfg, progress=False))
    again = _bills(evaluate(SAMPLE, specs, cost_config=cfg, progress=False))
    two = _bills(evaluate(SAMPLE, specs, cost_config=cfg, progress=False, workers=2))
    assert one == again == two
    # the draws matter here: some misses re-read and some do not
    assert any(m and 0 < rr < m for _, m, rr in one.values())


def test_token_curves_repeat_under_calibrated_misses():
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.evaluate import token_curves

    cfg = CostConfig(miss="calibrated", reread_prob=0.5, recovery="append")
    ids = [e.traj_id for e in load_episodes(SAMPLE)]
    one = token_curves(SAMPLE, ["last_n:n=1"], ids, cost_config=cfg)
    assert one == token_curves(SAMPLE, ["last_n:n=1"], ids, cost_config=cfg)


def test_evaluate_takes_the_command_lines_sweeps_in_the_pool_too():
    # one spec with a|b is one policy per value, as `dtoc-rl evaluate -p` reads it
    runs = evaluate(SAMPLE, ["hide_big:tokens=500|2000"], source="tau-bench", progress=False, workers=2)
    assert {r.policy for r in runs} == {"hide_big:tokens=500", "hide_big:tokens=2000", "oracle"}


def test_a_bad_spec_fails_before_the_worker_pool_in_one_error():
    import pytest

    from dtoc_rl.policies.registry import PolicySpecError

    with pytest.raises(PolicySpecError, match="no_such_rule"):
        evaluate(SAMPLE, ["no_such_rule:x=1"], progress=False, workers=2)
