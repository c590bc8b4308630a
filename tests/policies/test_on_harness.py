"""A need of a call on an output its log says that call was sent without is no miss (the log holds what
the agent did without it); every policy replayed on top of what a run's harness did itself (`dtoc-rl
evaluate --on-harness`): what the log says a call was sent without stays out of it, and savings are
against the harness as it ran."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dtoc_rl.cli import main
from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.base import Policy, reset_policy
from dtoc_rl.policies.baselines import LoggedVisibility, NoManagement, OnHarness, to_action
from dtoc_rl.policies.evaluate import evaluate
from dtoc_rl.policies.oracle import HindsightOracle, forced_hidden, plan, without_restores
from dtoc_rl.sim.episode import compile_episode, drop_unseen_needs
from tests.crafted_trajs import bash

BIG = "\n".join(f"line {i}: value_{i} = compute(alpha_{i}, beta_{i})" for i in range(300))


def windowed(drop_from: int = 3) -> Trajectory:
    """Four big outputs; the call of step 4 copies from output 0 and from output 2; from step
    ``drop_from`` on the harness's window sends no call output 0 (nor its call)."""
    steps = [bash(i, f"cat f{i}.txt", BIG.replace("value", f"v{i}")) for i in range(4)]
    steps.append(bash(4, "grep beta f0.txt", "line 7"))
    steps[4].needs = [Need(0, "provenance", "v0_7 = compute"), Need(2, "provenance", "v2_9 = compute")]
    steps.append(Step(index=5, turn=5, assistant_text="done"))
    for s in steps[drop_from:]:
        s.dropped_before = [0]
    for s in steps[:drop_from]:
        s.dropped_before = []
    return Trajectory("w/1", "repolaunch", "gpt-4o", "gpt-4o", "w1", task_text="read the files", steps=steps)


def test_a_need_on_what_the_call_was_sent_without_is_dropped_and_the_rest_kept():
    ep = compile_episode(windowed(), keep_unseen_needs=True)
    assert ep.logged_hidden(0) == set() and ep.logged_hidden(4) == {0}
    assert sorted(ep.needs_at(4).tolist()) == [0, 2]
    on = compile_episode(windowed())
    assert on.needs_at(4).tolist() == [2]  # output 0 was not in the prompt: not what the model copied
    assert [on.needs_at(t).tolist() for t in range(4)] == [ep.needs_at(t).tolist() for t in range(4)]
    assert drop_unseen_needs(on) is on
    plain = compile_episode(windowed(drop_from=6), keep_unseen_needs=True)  # nothing dropped: as it is
    assert drop_unseen_needs(plain) is plain


def test_a_need_at_a_call_the_log_says_nothing_of_is_dropped_as_what_it_last_said():
    traj = windowed()
    traj.steps[4].dropped_before = None  # the log says nothing of the call that copies from 0 and 2
    ep = compile_episode(traj)
    assert ep.logged_hidden(4) is None and ep.harness_hidden()[4] == {0}
    assert ep.needs_at(4).tolist() == [2]  # the window still left output 0 out


def test_a_reaccess_of_a_dropped_output_is_kept():
    traj = windowed()
    traj.steps[4].needs = [Need(0, "reaccess", "file:f0.txt")]
    on = compile_episode(traj)
    assert on.needs_at(4).tolist() == [0]  # the agent read it again: what the drop made it do


class ShowAll(Policy):
    """Wants every output visible at every call."""

    name = "show_all"

    def act(self, obs, info=None):
        return to_action(obs, obs["item_mask"].astype(bool))


def _replay(policy, ep):
    env = ReplayEnv(trajectories=[ep], expose_episode=True)
    obs, info = env.reset(seed=0)
    reset_policy(policy, info)
    shown, done = [], False
    while not done:
        action = policy.act(obs, info)
        vis = obs["items"][:, 2] > 0.5
        want = (vis | (action["enable"] > 0)) & ~(action["disable"] > 0)
        shown.append({int(k) for k, w in zip(info["slot_steps"], want) if w})
        obs, _, done, _, info = env.step(action)
    return info["totals"], shown


def test_the_harness_as_it_ran_is_the_rule_that_adds_nothing_and_no_policy_shows_what_it_dropped():
    ep = compile_episode(windowed())
    logged, _ = _replay(LoggedVisibility(), ep)
    harness, _ = _replay(OnHarness(NoManagement()), ep)
    assert harness["dollars"] == pytest.approx(logged["dollars"]) and harness["misses"] == 0
    _, shown = _replay(OnHarness(ShowAll()), ep)
    # decisions before calls 1..4 (the calls of steps 1..4); from step 3 on output 0 stays out
    assert 0 in shown[1] and all(0 not in s for s in shown[2:])
    _, free = _replay(ShowAll(), ep)
    assert all(0 in s for s in free[1:])  # unwrapped, the policy shows it: the wrapper did it


def test_the_harness_own_log_is_billed_without_a_miss_for_what_it_left_out():
    runs = evaluate([windowed()], ["logged", "none"], progress=False)
    assert {r.policy: r.misses for r in runs}["logged"] == 0  # its reaction is in the log already
    kept = compile_episode(windowed(), keep_unseen_needs=True)
    assert evaluate([kept], ["logged"], progress=False)[0].misses == 1  # what it was billed before


def test_evaluate_on_the_harness_prices_savings_against_the_harness():
    runs = evaluate([windowed()], ["none", "logged", "hide_big:tokens=100"], progress=False)
    on = evaluate([windowed()], ["none", "logged", "hide_big:tokens=100"], progress=False, on_harness=True)
    by = {r.policy: r for r in runs}
    by_on = {r.policy: r for r in on}
    assert by_on["none"].dollars == pytest.approx(by_on["logged"].dollars)
    for r in on:  # every run's base is the harness as it ran
        assert r.base_dollars == pytest.approx(by_on["none"].dollars) and r.extra["on_harness"]
        assert r.length == by[r.policy].length  # the run's length stays the log's, unmanaged
    assert by["none"].base_dollars > by_on["none"].base_dollars  # everything kept cost more
    assert by_on["hide_big:tokens=100"].dollars <= by_on["none"].dollars


def test_runs_whose_log_hid_nothing_are_the_same_on_the_harness():
    plain = windowed(drop_from=6)
    a = evaluate([plain], ["none", "hide_big:tokens=100"], progress=False)
    b = evaluate([plain], ["none", "hide_big:tokens=100"], progress=False, on_harness=True)
    assert [(r.policy, r.dollars, r.base_dollars, r.misses) for r in a] == [
        (r.policy, r.dollars, r.base_dollars, r.misses) for r in b
    ]
    assert not any("on_harness" in r.extra for r in b)


def test_the_cli_says_what_savings_are_against(repo_root, tmp_path, capsys):
    logs = repo_root / "tests" / "fixtures" / "claude_code_transcript"  # a compacted session
    assert main(["ingest", str(logs), "-o", str(tmp_path / "ds"), "--quiet"]) == 0
    capsys.readouterr()
    ds = str(tmp_path / "ds")
    assert main(["evaluate", "--dataset", ds, "-p", "none", "logged", "--on-harness", "--by", "overall"]) == 0
    out = capsys.readouterr()
    assert "against the same runs as their harness ran them" in out.out and "note:" not in out.err
    assert main(["evaluate", "--dataset", ds, "-p", "none", "logged", "--on-harness", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["on_harness"] is True
    rows = {r["policy"]: r for r in data["rows"] if r["group_by"] == "overall"}
    assert rows["none"]["dollars"] == pytest.approx(rows["logged"]["dollars"])
    assert rows["none"]["savings"] == 0
    assert main(["evaluate", "--dataset", ds, "-p", "none", "--on-harness", "--backend", "ray"]) == 2
    assert "--on-harness runs on the local backend" in capsys.readouterr().err
    assert main(["evaluate", "--dataset", ds, "-p", "none", "logged", "--overhead", "agent", "--json"]) == 0
    agent = {
        r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"] if r["group_by"] == "overall"
    }
    assert main(["evaluate", "--dataset", ds, "-p", "none", "logged", "--json"]) == 0
    plain = {
        r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"] if r["group_by"] == "overall"
    }
    assert agent["logged"]["mgmt_calls"] == 0  # the compaction was no tool call of the agent's
    assert agent["logged"]["dollars"] == pytest.approx(plain["logged"]["dollars"]) != plain["none"]["dollars"]
    assert main(["evaluate", "--dataset", ds, "-p", "none", "--overhead", "agent", "--quiet"]) == 0
    assert "note:" not in capsys.readouterr().err
    assert main(["evaluate", "--dataset", ds, "-p", "none", "--overhead", "agent"]) == 0
    assert "no bound under --overhead agent" in capsys.readouterr().err


def test_the_wrapper_needs_the_logged_run():
    with pytest.raises(ValueError, match="expose_episode"):
        OnHarness(NoManagement()).reset({})


def masked(traj: Trajectory) -> Trajectory:
    """The same run with a placeholder where the window dropped output 0 (SWE-agent's masking)."""
    for s in traj.steps:
        s.masked_before, s.dropped_before = s.dropped_before, None
    return traj


def test_a_masked_output_keeps_its_needs_except_on_the_harness():
    ep = compile_episode(masked(windowed()))
    assert ep.logged_hidden(4) == {0} and ep.logged_hidden(4, masked=False) is None
    assert sorted(ep.needs_at(4).tolist()) == [0, 2]  # its placeholder was in the prompt
    assert drop_unseen_needs(ep, masked=True).needs_at(4).tolist() == [2]
    plain = evaluate([masked(windowed())], ["logged"], progress=False)
    on = evaluate([masked(windowed())], ["logged"], progress=False, on_harness=True)
    assert plain[0].misses == 1 and on[0].misses == 0  # on the harness the log is the base, as it ran


def test_an_output_a_compaction_took_before_any_call_read_it_is_no_miss():
    from dtoc_rl.sim.simulator import CostConfig, Simulator

    traj = windowed()
    for s in traj.steps[3:]:
        s.dropped_before = [0, 2]  # output 2, the answer to the call before step 3's, never read
    ep = compile_episode(traj)
    assert ep.call_reads(3).tolist() == [] and ep.call_reads(2).tolist() == [1]
    sim = Simulator(ep, CostConfig())
    assert [sim._reads_of(c) for c in range(ep.n_calls)] == [
        ep.call_reads(c, CostConfig().kind_mask()).tolist() for c in range(ep.n_calls)
    ]
    (run,) = [r for r in evaluate([traj], ["logged"], progress=False) if r.policy == "logged"]
    assert run.misses == 0  # the log's own compaction: what the agent did without it is in the log


def test_what_the_log_says_a_call_hid_is_told_from_what_it_says_nothing_of():
    traj = windowed()
    traj.steps[1].masked_before, traj.steps[1].dropped_before = [], None  # call 1 hid nothing
    ep = compile_episode(traj)
    assert ep.logged_hidden(1) == set() and ep.logged_hidden(1) is not None
    traj.steps[1].masked_before, traj.steps[1].dropped_before = None, None  # says nothing of call 1
    assert compile_episode(traj).logged_hidden(1) is None
    assert ep.logged_hidden(4, masked=False) == {0} and ep.logged_hidden(5) == {0}


class HideOne(Policy):
    """Hides output 1 at the decisions ``first`` to ``last`` (from the call of step 4 on by default) and
    shows everything else."""

    reads_prices = False

    def __init__(self, first: int = 3, last: int | None = None, name: str = "hide_one"):
        self.first, self.last, self.name = first, last, name

    def act(self, obs, info=None):
        slots = list(info["slot_steps"])
        want = obs["item_mask"].astype(bool).copy()
        step = int(info["step"])
        if self.first <= step and (self.last is None or step <= self.last) and 1 in slots:
            want[slots.index(1)] = False
        return to_action(obs, want)


def test_the_policys_own_changes_are_kept_beside_the_harnesss():
    ep = compile_episode(windowed())
    _, shown = _replay(OnHarness(HideOne()), ep)
    assert 0 not in shown[3] and 1 not in shown[3] and 2 in shown[3]  # both hidden at once
    wrapped = OnHarness(HideOne())
    assert (wrapped.name, wrapped.reads_prices) == ("hide_one", False)  # as the policy it wraps


def test_a_masked_only_run_on_the_harness_is_priced_against_it():
    plain = masked(windowed())
    on = {r.policy: r for r in evaluate([plain], ["none", "logged"], progress=False, on_harness=True)}
    assert on["none"].extra.get("on_harness") and on["logged"].dollars == pytest.approx(on["none"].dollars)
    for r in on.values():
        assert (r.base_dollars, r.base_input_tokens) == (on["none"].dollars, on["none"].input_tokens)


def test_an_unread_output_under_a_placeholder_is_still_a_miss():
    from dtoc_rl.sim.simulator import CostConfig, Simulator

    traj = windowed()
    for s in traj.steps[3:]:
        s.masked_before, s.dropped_before = [0, 2], None  # output 2 masked before any call read it
    ep = compile_episode(traj)
    assert ep.call_reads(3).tolist() == [2]  # its placeholder was all call 3 had of its own read
    sim = Simulator(ep, CostConfig())
    assert sim._reads_of(3) == [2]


def test_a_need_of_a_calls_second_tool_call_on_a_dropped_output_is_dropped_too():
    traj = windowed()
    traj.steps[4].turn = 3  # steps 3 and 4 are one model call's two tool calls
    ep = compile_episode(traj)
    assert ep.n_calls == ep.n - 1 and ep.needs_at(4).tolist() == [2]


def test_the_worker_pool_evaluates_on_the_harness_as_one_process_does(tmp_path):
    from dtoc_rl.data.dataset import write_dataset

    trajs = [windowed(), masked(windowed()), windowed(drop_from=6)]
    for i, t in enumerate(trajs):
        t.traj_id, t.task_id = f"w/{i}", f"w{i}"
    ds = str(write_dataset(trajs, tmp_path / "ds"))
    specs = ["none", "hide_big:tokens=100"]
    one = evaluate(ds, specs, progress=False, on_harness=True)
    two = evaluate(ds, specs, progress=False, on_harness=True, workers=2)
    key = lambda r: (r.traj_id, r.policy)  # noqa: E731
    assert [(key(r), r.dollars, r.base_dollars, r.misses) for r in sorted(one, key=key)] == [
        (key(r), r.dollars, r.base_dollars, r.misses) for r in sorted(two, key=key)
    ]
    assert sum(bool(r.extra.get("on_harness")) for r in two) == 2 * 3  # two runs hid, three policies


def test_logged_keeps_the_visibility_of_a_call_its_log_says_nothing_of():
    traj = masked(windowed())
    traj.steps[4].masked_before = None  # the log says nothing of step 4's call
    _, shown = _replay(LoggedVisibility(), compile_episode(traj))
    assert 0 not in shown[2] and 0 not in shown[3]  # hidden at step 3's call, and so it stays


def test_the_harness_as_it_ran_keeps_what_it_hid_through_a_call_its_log_says_nothing_of():
    traj = windowed()
    traj.steps[5].dropped_before = None  # the log says nothing of the last call
    ep = compile_episode(traj)
    assert ep.harness_hidden() == [set(), set(), set(), {0}, {0}, {0}]
    _, shown = _replay(OnHarness(ShowAll()), ep)
    assert 0 not in shown[-1] and 1 in shown[-1]  # whatever the policy wants
    assert isinstance(LoggedVisibility(), OnHarness) and LoggedVisibility().label == "logged"


def harness_run(need_at: int = 4, drop_from: int = 5) -> Trajectory:
    """Eight big outputs; the window drops output 2 from step ``drop_from`` on; call ``need_at`` copies
    from output 2 and call 7 from output 3: a run where planning as if the harness kept everything
    costs more."""
    steps = [bash(i, f"cat f{i}.txt", BIG.replace("value", f"v{i}")) for i in range(8)]
    steps[need_at].needs = [Need(2, "provenance", "v2_7 = compute")]
    steps[7].needs = [Need(3, "provenance", "v3_7 = compute")]
    steps.append(Step(index=8, turn=8, assistant_text="done"))
    for i, s in enumerate(steps):
        s.dropped_before = [2] if i >= drop_from else []
    return Trajectory(
        "h/1", "repolaunch", "claude-sonnet-4-5", "claude-sonnet", "h1", task_text="r", steps=steps
    )


class Blind(HindsightOracle):
    """The oracle planning as if the harness had kept everything (what it did before it was told)."""

    def reset(self, info=None):
        super().reset({k: v for k, v in (info or {}).items() if k != "harness_hidden"})


@pytest.mark.parametrize("exact", [0, 8])  # the coordinate descent, and the exact plan of few outputs
def test_the_oracle_on_the_harness_plans_around_what_it_hid(exact):
    ep = compile_episode(harness_run())
    aware, shown = _replay(OnHarness(HindsightOracle(exact_max_outputs=exact)), ep)
    blind, _ = _replay(OnHarness(Blind(exact_max_outputs=exact)), ep)
    base, _ = _replay(LoggedVisibility(), ep)
    assert aware["misses"] == blind["misses"] == 0
    assert aware["dollars"] < blind["dollars"] - 1e-4 and aware["dollars"] < base["dollars"]
    assert all(2 not in s for s in shown[5:])
    oracle = HindsightOracle(exact_max_outputs=exact)
    reset_policy(oracle, {"episode": ep, "harness_hidden": ep.harness_hidden()})
    F = forced_hidden(ep, ep.harness_hidden())
    assert F is not None and F.sum() == 4 and not (oracle.V & F).any()  # calls 5-8 never show it


def test_nothing_hidden_by_the_harness_plans_as_before():
    ep = compile_episode(windowed(drop_from=6))
    assert forced_hidden(ep, ep.harness_hidden()) is None and forced_hidden(ep, None) is None
    ep = compile_episode(harness_run())
    F = forced_hidden(ep, ep.harness_hidden())
    assert np.array_equal(plan(ep, forced=np.zeros_like(F)), plan(ep))


def test_the_oracle_without_restores_on_the_harness_never_shows_again_what_it_hid():
    ep = compile_episode(harness_run())
    totals, shown = _replay(OnHarness(HindsightOracle(restores=False, exact_max_outputs=0)), ep)
    assert totals["misses"] == 0
    assert any(k not in s for k in range(8) for s in shown[k + 1 :])  # it hides something
    for k in range(8):
        seen = [k in s for s in shown[k + 1 :]]  # from the first call after the one that stored it
        assert seen == sorted(seen, reverse=True)  # shown, then hidden for good


def test_without_restores_an_output_may_stay_hidden_up_to_where_the_harness_hides_it():
    ep = compile_episode(harness_run(need_at=3, drop_from=6))  # output 2: needed at 3, dropped from 6
    F = forced_hidden(ep, ep.harness_hidden())
    W = without_restores(ep, plan(ep, forced=F), forced=F)
    assert W[3, 2] and not W[4:, 2].any()  # hidden after its need, not shown until the harness hides it


def _window(ep, last: int) -> np.ndarray:
    """What a window keeping the ``last`` newest steps before each call would hide."""
    F = np.zeros((ep.n_calls, ep.n), bool)
    for t in range(ep.n_calls):
        F[t, : max(0, int(ep.starts[t]) - last)] = True
    return F & (np.arange(ep.n)[None, :] < ep.starts[:-1, None]) & ep.has_out[None, :]


def test_knowing_what_the_harness_hid_never_makes_the_plan_dearer():
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.oracle import _Costing, _need_matrix
    from dtoc_rl.sim.simulator import CostConfig

    cfg, tried = CostConfig(), 0
    for ep in load_episodes(None):  # the bundled runs, under windows of 2, 3 and 5 steps
        for last in (2, 3, 5):
            F = _window(ep, last)
            if not F.any():
                continue
            need = _need_matrix(ep, cfg) & ~F  # a need on what the harness hid is no miss
            aware = _Costing(ep, plan(ep, cfg, forced=F), cfg, need).total()
            blind = _Costing(ep, plan(ep, cfg) & ~F, cfg, need).total()
            assert aware <= blind + 1e-12, (ep.traj_id, last)
            tried += 1
    assert tried >= 50


class Broken(LoggedVisibility):
    """The harness's own replay failing (a log it cannot be replayed from)."""

    def act(self, obs, info=None):
        raise ValueError("slot 3 is not in the log")


def test_a_run_whose_harness_cannot_be_replayed_is_an_error_not_a_saving():
    from dtoc_rl.policies.evaluate import EpisodeRunner
    from dtoc_rl.sim.simulator import CostConfig

    runner = EpisodeRunner([("none", NoManagement())], CostConfig(), 128, on_harness=True)
    runner._harness = Broken()
    (run,) = runner.runs([compile_episode(windowed())])
    assert run.error == "the harness as it ran: ValueError: slot 3 is not in the log"
    assert EpisodeRunner([("none", NoManagement())], CostConfig(), 128)._harness is None  # off: none built


def _logged_run(traj, cfg):
    return next(
        r for r in evaluate([traj], ["logged"], progress=False, cost_config=cfg) if r.policy == "logged"
    )


def test_the_harnesss_own_changes_are_no_management_call_of_a_policys():
    from dtoc_rl.sim.simulator import CostConfig

    agent, orch = CostConfig(overhead="agent"), CostConfig()
    logged = {c.overhead: _logged_run(windowed(), c) for c in (agent, orch)}
    assert logged["agent"].dollars == pytest.approx(logged["orchestrator"].dollars)  # no manage_context call
    assert (logged["agent"].mgmt_calls, logged["agent"].changes) == (0, 0)
    assert logged["agent"].placeholder_tokens > 0  # and yet it hid, as the window did
    shown = masked(windowed())
    shown.steps[5].masked_before = []  # shown again before the last call (a live policy restored it)
    again = _logged_run(shown, agent)
    assert (again.mgmt_calls, again.changes) == (0, 0)
    on = evaluate([windowed()], [HideOne()], progress=False, on_harness=True, cost_config=agent)
    (mine,) = [r for r in on if r.policy == "hide_one"]
    assert (mine.mgmt_calls, mine.changes) == (1, 1)  # its own hide only, not the window's, at that call


def test_a_harness_mask_of_the_wrong_shape_is_named():
    env = ReplayEnv(trajectories=[compile_episode(windowed())], expose_episode=True)
    obs, _ = env.reset(seed=0)
    n = len(obs["item_mask"])
    action = {
        "enable": np.zeros(n, np.int8),
        "disable": np.zeros(n, np.int8),
        "harness": np.zeros(3, np.int8),
    }
    with pytest.raises(ValueError, match="harness"):
        env.step(action)


def test_on_the_harness_no_restores_and_flat_prices_keep_what_it_hid_hidden():
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.oracle import _Costing, _gaps, _need_matrix
    from dtoc_rl.sim.pricing import Prices
    from dtoc_rl.sim.simulator import CostConfig

    cfg = CostConfig()
    flat = CostConfig(prices=Prices(input=3.0, output=15.0, cache_read=3.0, cache_write=3.0))  # no discount
    for ep in load_episodes(None):
        for last in (2, 5):
            F = _window(ep, last)
            if not F.any():
                continue
            need = _need_matrix(ep, cfg) & ~F
            W = without_restores(ep, plan(ep, cfg, forced=F), cfg, forced=F)
            assert not (W & F).any() and not (need & ~W).any(), ep.traj_id
            blind = without_restores(ep, plan(ep, cfg), cfg) & ~F
            cost = _Costing(ep, W, cfg, need)
            assert cost.total() <= _Costing(ep, blind, cfg, need).total() + 1e-12
            for k, a, b in _gaps(ep, need, F):  # no hide to the end, or up to the harness's, lowers its cost
                if b == ep.n_calls or F[b, k]:
                    assert cost.propose(k, a, np.full(b - a, not W[a, k]))[0] >= cost.total() - 1e-12
            V = plan(ep, flat, forced=F)
            assert not (V & F).any()
            flat_need = _need_matrix(ep, flat) & ~F
            assert (
                _Costing(ep, V, flat, flat_need).total()
                <= _Costing(ep, plan(ep, flat) & ~F, flat, flat_need).total()
            )
    ep = compile_episode(harness_run())
    oracle = HindsightOracle(restores=False, exact_max_outputs=0)
    reset_policy(oracle, {"episode": ep, "harness_hidden": ep.harness_hidden()})
    assert not (oracle.V & forced_hidden(ep, ep.harness_hidden())).any()


def compacted_run() -> Trajectory:
    """Twelve outputs of several sizes, needs between them; a compaction drops outputs 0-6 from step 9."""
    sizes = [163, 231, 286, 29, 60, 250, 285, 89, 107, 263, 138, 96]
    lines = BIG.split("\n")
    steps = [
        bash(i, f"cat f{i}.txt", "\n".join(lines[:m]).replace("value", f"v{i}")) for i, m in enumerate(sizes)
    ]
    for t, k in [(3, 2), (6, 2), (7, 5), (9, 3), (10, 4), (11, 0)]:
        steps[t].needs = [Need(k, "provenance", f"v{k}_7 = compute")]
    steps.append(Step(index=12, turn=12, assistant_text="done"))
    for i, s in enumerate(steps):
        s.dropped_before = list(range(7)) if i >= 9 else []
    return Trajectory(
        "c/1", "repolaunch", "claude-sonnet-4-5", "claude-sonnet", "c1", task_text="r", steps=steps
    )


def test_the_plan_keeps_the_cheaper_of_its_two_starts():
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.oracle import _Costing, _descend, _gaps, _need_matrix
    from dtoc_rl.sim.simulator import CostConfig

    cfg = CostConfig()
    (tau,) = [e for e in load_episodes(None) if e.traj_id == "tau-bench/gpt-4o-airline/2/trial0"]
    compacted = compile_episode(compacted_run())
    cases = [
        (tau, _window(tau, 5), False),
        (compacted, forced_hidden(compacted, compacted.harness_hidden()), True),
    ]
    for ep, F, first_start_wins in cases:
        need = _need_matrix(ep, cfg) & ~F
        blind_start, _ = _descend(ep, plan(ep, cfg) & ~F, _gaps(ep, need, F), cfg, 4, need=need)
        other = _Costing(ep, blind_start, cfg, need).total()
        chosen = _Costing(ep, plan(ep, cfg, forced=F), cfg, need).total()
        assert chosen <= other and (chosen < other - 1e-9) == first_start_wins, ep.traj_id


def test_the_wrapper_is_labelled_by_the_policy_it_wraps():
    assert OnHarness(HideOne()).label == "hide_one(inner=hide_one)"
    assert OnHarness(LoggedVisibility()).config() == {"inner": "logged"}


def test_a_policys_own_restore_beside_the_harnesss_hide_is_its_management_call():
    from dtoc_rl.sim.simulator import CostConfig

    agent = CostConfig(overhead="agent")
    hide_then_show = HideOne(first=2, last=2, name="hide_then_show")  # hidden at one call, shown the next
    runs = evaluate([windowed()], [hide_then_show], progress=False, on_harness=True, cost_config=agent)
    (run,) = [r for r in runs if r.policy == "hide_then_show"]
    assert (run.mgmt_calls, run.changes) == (
        2,
        2,
    )  # its hide and its restore; the window's drop at the second
    restored = CostConfig(
        overhead="agent", recovery="restore"
    )  # a miss shows it: hidden again as the log says
    again = _logged_run(masked(windowed()), restored)
    assert again.misses == 1 and (again.mgmt_calls, again.changes) == (0, 0)


def test_a_call_described_by_its_masking_alone_dropped_nothing():
    traj = windowed()
    for s in traj.steps:
        s.dropped_before = None
    for s in traj.steps[2:]:
        s.dropped_before = [0, 1]  # a compaction from step 2 on
    traj.steps[4].dropped_before, traj.steps[4].masked_before = None, []  # sent everything (a summary call)
    ep = compile_episode(traj, keep_unseen_needs=False)
    assert ep.harness_hidden(masked=False)[4] == set() and ep.harness_hidden(masked=False)[5] == {0, 1}
    assert sorted(ep.needs_at(4).tolist()) == [0, 2]  # the call saw output 0: its need stays


class Sloppy(Policy):
    """Shows everything, and sets a padding slot in both sets and output 2's slot in both: invalid bits."""

    name = "sloppy"
    reads_prices = False

    def act(self, obs, info=None):
        action = to_action(obs, obs["item_mask"].astype(bool))
        action["enable"][-1] = action["disable"][-1] = 1  # padding
        slots = list(info["slot_steps"])
        if 2 in slots:
            action["enable"][slots.index(2)] = action["disable"][slots.index(2)] = 1
        return action


def test_the_invalid_bits_of_the_policy_it_wraps_are_counted_as_without_it():
    plain = {r.policy: r for r in evaluate([windowed()], [Sloppy()], progress=False)}
    on = {r.policy: r for r in evaluate([windowed()], [Sloppy()], progress=False, on_harness=True)}
    assert on["sloppy"].extra.get("on_harness") and on["sloppy"].invalid_actions > 0
    assert on["sloppy"].invalid_actions == plain["sloppy"].invalid_actions
