"""Billing per model call: parallel tool calls of one assistant turn are one call.

Prices are $1 read / $2 write / $10 output per token (tests/cost_episodes.UNIT), so every bill is a
small integer worked out in the comment above it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.oracle import HindsightOracle, exact_plan, plan, schedule_cost
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.simulator import CostConfig, Simulator, Totals, baseline_totals
from tests.cost_episodes import UNIT, make_episode

IDEAL = CostConfig(prices=UNIT, cache="ideal", reread_call_tokens=30)


def _two_turns():
    # base 100.  Turn 0 = step 0: A=10, O=1000 (placeholder 10).  Turn 1 = steps 1-3, three parallel
    # tool calls: U=5 (on its first step), A=10 each, outputs 200 and 300 and none; steps 1 and 2
    # both need output 0, step 2 also output 1 (of its own turn: it did not exist when the call was
    # made, so it cannot be needed by it).
    return make_episode(
        base=100, user=[0, 5, 0, 0], asst=[10, 10, 10, 10], vis=[1000, 200, 300, 0], hid=[10, 10, 10, 0],
        needs={1: [0], 2: [0, 1]}, calls=[0, 1],
    )  # fmt: skip


def test_three_parallel_tool_calls_are_billed_as_one_model_call():
    ep = _two_turns()
    assert (ep.n, ep.n_calls) == (4, 2)
    sim = Simulator(ep, IDEAL)
    # call 0: prompt 100, all written: 200 + 10 out * 10 = 300
    assert sim.call() == (300, 0)
    # call 1: prompt 100 + 10 + 1000 + U 5 = 1115, of which call 0's 100 are cached:
    # 100 + 1015 * 2 + (10 + 10 + 10) out * 10 = 2430.  (Per tool call it was 2230 + 1635 + 2045.)
    assert sim.call() == (2430, 0)
    assert sim.done
    bill_of = lambda t: (t.calls, t.input_tokens, t.cache_read_tokens, t.output_tokens, t.dollars)  # noqa: E731
    assert bill_of(sim.totals) == (2, 1215, 100, 40, 2730)
    assert sim.ctx == 1115 + 30 + 200 + 300  # every output of the turn joined the context
    assert (sim.n_stored, sim.t, sim.c) == (3, 4, 2)
    # with everything visible the baseline is the same bill, call by call
    assert bill_of(baseline_totals(ep, IDEAL)) == (2, 1215, 100, 40, 2730)


def test_a_turn_needing_a_hidden_output_misses_it_once():
    sim = Simulator(_two_turns(), IDEAL)
    sim.call()
    sim.apply_changes([], [0])  # context 1110 -> 120
    d, misses = sim.call()
    # steps 1 and 2 both need output 0: one model call, one miss.  The re-run: prompt 120 + 5 = 125,
    # 100 cached (call 0's prompt; the prefix before O_0 is 110): 100 + 25 * 2 + 30 * 10 = 450.  Then
    # the call with the re-run's 30 + 1000 appended: 1155, 125 cached: 125 + 1030 * 2 + 30 * 10 = 2485.
    assert (d, misses) == (450 + 2485, 1)
    assert sim.totals.rereads == 1 and sim.need_count[0] == 1 and sim.need_count[1] == 0


def test_one_step_per_call_is_billed_as_before_by_hand():
    # the same steps without turns: four calls (300 + 2230 + 1635 + 2045, each worked out as above)
    ep = make_episode(
        base=100, user=[0, 5, 0, 0], asst=[10] * 4, vis=[1000, 200, 300, 0], hid=[10, 10, 10, 0]
    )
    sim = Simulator(ep, IDEAL)
    assert [sim.call()[0] for _ in range(4)] == [300, 2230, 1635, 2045]
    assert baseline_totals(ep, IDEAL).dollars == 6210


def _traj(turns):
    steps = [
        Step(index=k, turn=turn, assistant_text="go" if k == 0 or turns[k - 1] != turn else "",
             tool_name="bash", tool_args=f"cat f{k}", output="x" * 400, output_tokens=100,
             needs=[Need(step=0, kind="provenance", evidence="x")] if k else [])
        for k, turn in enumerate(turns)
    ]  # fmt: skip
    return Trajectory(traj_id="p/1", source="test", model_raw="gpt-4o-2024-08-06", model_family="gpt-4o",
                      task_id="p", task_text="q", success=True, steps=steps)  # fmt: skip


def test_compile_groups_the_steps_of_a_turn_into_one_call():
    ep = compile_episode(_traj([0, 1, 1, 1, 2]))
    assert ep.starts.tolist() == [0, 1, 4, 5] and ep.n_calls == 3
    assert ep.call_of_step.tolist() == [0, 1, 1, 1, 2]
    assert ep.call_needs(1).tolist() == [0]  # the union of its three steps' needs
    # steps that all carry Step's default turn 0: turns were not recorded, every step is a call
    assert compile_episode(_traj([0, 0, 0])).call_ptr is None
    assert compile_episode(_traj([3, 4, 5])).call_ptr is None


def test_replay_env_takes_one_decision_per_model_call():
    ep = compile_episode(_traj([0, 1, 1, 1, 2]))
    env = ReplayEnv(trajectories=[ep], max_items=8)
    obs, info = env.reset(seed=0)
    steps = 0
    done = False
    while not done:
        obs, _, done, _, info = env.step({"enable": np.zeros(8, np.int8), "disable": np.zeros(8, np.int8)})
        steps += 1
        if not done:
            # after call 1 (steps 1-3): three outputs stored by that one call, all of age 0
            assert int(obs["globals"][2]) == 2 and int(obs["globals"][3]) == 4
            assert obs["items"][:4, 1].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert steps == ep.n_calls - 1
    assert info["totals"]["calls"] == 3 and info["totals"]["dollars"] == info["all_visible"]["dollars"]


def test_replay_active_tokens_count_the_coming_calls_user_text():
    """At a decision the online Orchestrator has already added the user text of the coming call to the
    context; ReplayEnv's active tokens must count it too, so a decision sees the prompt it pays for."""
    ep = _two_turns()
    env = ReplayEnv(trajectories=[ep], max_items=8, cost_config=IDEAL)
    obs, info = env.reset(seed=0)
    # after call 0: context 100 + 10 + 1000 = 1110; the next call's user text (5) has arrived
    assert info["active_tokens"] == 1115 == env.sim.ctx + 5
    assert obs["globals"][0] == pytest.approx(1.115)
    assert obs["globals"][8] == pytest.approx(1.115)  # tokens if everything were visible


def test_the_oracle_plans_per_model_call():
    ep = _two_turns()
    for solve in (plan, exact_plan):
        V = solve(ep, IDEAL)
        assert V.shape == (ep.n_calls, ep.n)
        assert V[1, 0]  # call 1 needs output 0
        sim = Simulator(ep, IDEAL)
        sim.call()
        assert schedule_cost(ep, V, IDEAL) == pytest.approx(300 + sim.call()[0])
    env = ReplayEnv(
        trajectories=[compile_episode(_traj([0, 1, 1, 1, 2, 3]))], max_items=8, expose_episode=True
    )
    oracle = HindsightOracle()
    obs, info = env.reset(seed=0)
    oracle.reset(info)
    done = False
    while not done:
        obs, _, done, _, info = env.step(oracle.act(obs, info))
    V = oracle.V
    assert info["totals"]["misses"] == 0
    assert info["totals"]["dollars"] == pytest.approx(schedule_cost(env.sim.ep, V, env.cfg), rel=1e-12)


# -- figures of one-call-per-step trajectories, against those recorded before billing per call ---------

FIXTURE = Path(__file__).parent / "fixtures" / "per_step_figures.json"
CONFIGS = {
    "default": {},
    "agent_restore": {"overhead": "agent", "recovery": "restore"},
    "ideal_cheaper": {"cache": "ideal", "recovery": "cheaper"},
}
POLICIES = ("none", "last_n:n=3", "oracle", "random")
FIELDS = (
    "calls", "extra_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
    "dollars", "misses", "rereads", "appended_tokens", "mgmt_calls", "changes", "invalid_actions",
)  # fmt: skip


def figures() -> dict:
    """Totals and return of every bundled episode under a few policies and cost settings.  The fixture
    holds this function's output under the code of commit a4fdb7e (every step billed as a model call)
    on the bundled sample of ef199c8; if the sample is rebuilt, regenerate it by running this function
    in a ``git archive a4fdb7e`` tree holding the new sample.  The oracle and random rows of the
    one-call-per-step runs were re-recorded with this function at e0ea355, when hiding an output
    before any call read it became a miss (``Episode.call_reads``); the others did not move
    (no-management and last_n=3 never do that).  A rebuilt sample: the a4fdb7e rows, then those."""
    out: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cname, kw in CONFIGS.items():
            cfg = CostConfig(**kw)
            env = ReplayEnv(max_items=16, cost_config=cfg, expose_episode=True, sequential=True)
            for i, ep in enumerate(env.episodes):
                row = out.setdefault(ep.traj_id, {})
                b = baseline_totals(ep, cfg)
                row[f"{cname}/baseline"] = [getattr(b, f) for f in FIELDS]
                for pname in POLICIES:
                    env.action_space.seed(7)
                    pol = None if pname == "random" else make_policy(pname)
                    obs, info = env.reset(seed=0, options={"index": i})
                    if pol is not None:
                        pol.reset(info)
                    ret, steps, done = 0.0, 0, False
                    while not done:
                        act = env.action_space.sample() if pol is None else pol.act(obs, info)
                        obs, r, done, _, info = env.step(act)
                        ret += r
                        steps += 1
                    row[f"{cname}/{pname}"] = [info["totals"][f] for f in FIELDS] + [ret, steps]
    return out


@pytest.mark.slow
def test_one_call_per_step_trajectories_give_the_figures_recorded_before_per_call_billing():
    old = json.loads(FIXTURE.read_text())
    new = figures()
    assert set(new) == set(old)
    parallel = {ep.traj_id for ep in ReplayEnv().episodes if ep.n_calls < ep.n}
    assert parallel  # the bundled sample has an OpenHands run with parallel tool calls
    for tid in new:
        if tid in parallel:
            # fewer model calls billed, so fewer dollars with everything visible
            assert new[tid]["default/baseline"][0] < old[tid]["default/baseline"][0]
            assert new[tid]["default/baseline"][6] < old[tid]["default/baseline"][6]
        else:
            assert new[tid] == old[tid], tid  # bit for bit: floats compared exactly


def test_the_simulators_inlined_bill_is_prices_bill_call_by_call():
    """Simulator._bill multiplies by Prices.per_token() itself (the hot loop): every call's dollars must
    be exactly Prices.bill of the tokens it added to the totals, misses and management calls included."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ReplayEnv(max_items=16, cost_config=CostConfig(overhead="agent"))
    env.action_space.seed(1)
    checked = 0
    for i in range(len(env.episodes)):
        env.reset(seed=0, options={"index": i})
        sim, done = env.sim, False
        prices = sim.prices
        before = Totals().to_dict()  # the first step's dollars include call 0, made at reset
        while not done:
            _, _, done, _, info = env.step(env.action_space.sample())
            t = sim.totals
            billed = prices.bill(
                t.cache_read_tokens - before["cache_read_tokens"],
                t.cache_write_tokens - before["cache_write_tokens"],
                t.output_tokens - before["output_tokens"],
            )
            if t.calls + t.extra_calls - before["calls"] - before["extra_calls"] == 1:
                assert info["step_dollars"] == billed  # one bill in this step: exactly the biller's figure
                checked += 1
            before = t.to_dict()
    assert checked > 100


@pytest.mark.parametrize("seed", range(8))
def test_the_simulators_compiled_needs_are_each_calls_call_needs(seed):
    """The Simulator compiles each call's needs once (kinds filtered on the CSR arrays, a turn's own
    outputs dropped); its counts must be those of the plain Episode.call_needs, for any need kinds."""
    from dtoc_rl.data.schema import NEED_KINDS

    rng = np.random.default_rng(seed)
    n = 9
    calls = [0] + sorted({int(x) for x in rng.integers(1, n, size=4)})
    needs = {t: [j for j in range(t) if rng.random() < 0.4] for t in range(1, n)}
    ep = make_episode(
        100, [5] * n, [10] * n, [100, 0, 100, 100, 100, 0, 100, 100, 100], [10] * n, needs, calls=calls
    )
    ep.need_kind = rng.integers(0, len(NEED_KINDS), len(ep.need_idx))
    for kinds in (NEED_KINDS, ("provenance",), ("reaccess", "reference")):
        cfg = CostConfig(prices=UNIT, cache="ideal", need_kinds=kinds)
        mask = cfg.kind_mask()
        sim = Simulator(ep, cfg)
        while not sim.done:
            sim.call()
        count, last = [0] * n, [-1] * n
        for c in range(ep.n_calls):
            for j in ep.call_needs(c, mask).tolist():
                count[j] += 1
                last[j] = c
        assert (sim.need_count, sim.last_need) == (count, last), kinds


def test_an_episode_without_steps_costs_nothing_on_every_path():
    ep = make_episode(100, [], [], [], [])
    assert (ep.n, ep.n_calls) == (0, 0)
    for cfg in (IDEAL, CostConfig(prices=UNIT)):
        sim = Simulator(ep, cfg)
        assert sim.done and sim.totals.dollars == 0.0 == baseline_totals(ep, cfg).dollars
        for solve in (plan, exact_plan):
            assert schedule_cost(ep, solve(ep, cfg), cfg) == 0.0


def test_turns_numbered_with_gaps_give_the_online_observation_offline():
    """ReplayEnv clocks age and since_need in model calls (0, 1, 2, ...), the online tracker in the
    turns it numbers itself: a log whose turns start at 3 and skip numbers (3, 4, 4, 9, ...), with
    parallel tool calls, must still give the Orchestrator's observation at every decision."""
    import random
    from dataclasses import replace

    from dtoc_rl.data.dataset import load_trajectories
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.labels import label_trajectory
    from tests.test_parity import _check

    rnd = random.Random(0)
    picked = []
    for t in sorted(load_trajectories(bundled_dataset()), key=lambda t: len(t.steps))[:8]:
        turns, cur = [], 3
        for k, s in enumerate(t.steps):  # two tool calls in a row may share a turn (no text between)
            if k and not (
                s.tool_name and t.steps[k - 1].tool_name and not s.user_text and rnd.random() < 0.4
            ):
                cur += rnd.choice([1, 2, 5])
            turns.append(cur)
        steps = [replace(s, turn=u, needs=[]) for s, u in zip(t.steps, turns)]
        for k in range(1, len(steps)):
            if turns[k] == turns[k - 1]:
                steps[k].assistant_text = steps[k].reasoning = ""
        picked.append(label_trajectory(replace(t, steps=steps, traj_id=t.traj_id + "/gaps")))
    assert any(len(set(s.turn for s in t.steps)) < len(t.steps) for t in picked)  # some parallel calls
    decisions, failures = _check(picked, schedules=("random",), paths=("orchestrator",))
    assert decisions > 10 and not failures, failures[:3]


def test_a_turns_user_text_on_a_later_tool_call_is_laid_out_before_the_turn():
    """User text logged on a later step of a turn is part of the call's prompt, before its assistant
    message (where the online tracker puts a turn's user text): the Simulator and the oracle's
    schedule_cost must then bill hiding an output of that turn alike (they differed by the re-write
    of that text)."""
    steps = [
        Step(index=k, turn=t, user_text=u, assistant_text="a" * 8, tool_name="bash", tool_args="{}",
             output="o" * 400)
        for k, (t, u) in enumerate([(0, ""), (1, "u" * 200), (1, "w" * 400), (2, ""), (3, "")])
    ]  # fmt: skip
    traj = Trajectory(traj_id="x/1", source="test", model_raw="gpt-4o", model_family="gpt-4o",
                      task_id="x", task_text="q" * 40, steps=steps)  # fmt: skip
    ep = compile_episode(traj)
    assert ep.user_tok.tolist() == [0, 150, 0, 0, 0]  # the turn's 50 + 100 tokens on its first step
    for cfg in (IDEAL, CostConfig(prices=UNIT)):
        for hide in (1, 2, 0):  # an output of that turn (read by call 2 first), and one of an earlier turn
            V = np.ones((ep.n_calls, ep.n), bool)
            V[3, hide] = False
            sim = Simulator(ep, cfg)
            dollars = sim.call()[0] + sim.call()[0] + sim.call()[0]
            dollars += sim.apply_changes([], [hide]) + sim.call()[0]
            assert dollars == pytest.approx(schedule_cost(ep, V, cfg), rel=1e-12), (hide, cfg.cache)
