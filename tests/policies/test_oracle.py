import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtoc_rl.data.schema import Need
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import AnthropicClearToolUses, LastNObservations, NoManagement, TokenBudget
from dtoc_rl.policies.oracle import (
    HindsightOracle,
    exact_plan,
    need_schedule,
    plan,
    schedule_cost,
    without_restores,
)
from dtoc_rl.policies.registry import PolicySpecError, make_policy
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.simulator import CostConfig

from .crafted import crafted


def play(policy, env, index=0):
    obs, info = env.reset(options={"index": index})
    policy.reset(info)
    done = False
    while not done:
        obs, _, done, _, info = env.step(policy.act(obs, info))
    return info["totals"]


def test_oracle_has_zero_misses_and_matches_its_planned_cost_on_bundled_data():
    env = ReplayEnv(max_items=256, expose_episode=True)
    for i, ep in enumerate(env.episodes):
        oracle = HindsightOracle()
        tot = play(oracle, env, i)
        assert tot["misses"] == 0, ep.traj_id
        # the simulator (provider cache rules, call by call) and schedule_cost (vectorised) agree
        assert tot["dollars"] == pytest.approx(schedule_cost(ep, oracle.V), rel=1e-9), ep.traj_id


def test_schedule_cost_of_all_visible_is_the_baseline():
    env = ReplayEnv(max_items=256, expose_episode=True)
    ep = env.episodes[0]
    assert schedule_cost(ep, np.ones((ep.n, ep.n), bool)) == pytest.approx(
        play(NoManagement(), env)["dollars"]
    )


def test_without_restores_hides_only_after_the_last_need_and_costs_between_the_oracle_and_nothing():
    # output 0 is needed at calls 3 and 9: the oracle hides it between them; without restores it stays
    # visible until 9 and may go after
    ep = compile_episode(crafted([40_000, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400],
                                 needs={3: [0], 9: [0]}, family="gpt-4"))  # fmt: skip
    V = plan(ep)
    assert not V[5, 0]  # the oracle: hidden between the needs (no cache: always worth it)
    W = without_restores(ep, V)
    assert W[4:10, 0].all() and not W[10:, 0].any()  # visible until its last need, hidden after
    for k in range(ep.n):  # nothing is shown again once hidden
        col = W[ep.call_of_step[k] + 1 :, k]
        assert not (~col[:-1] & col[1:]).any()
    assert not np.shares_memory(V, W) and not V[5, 0]  # the oracle's schedule is left as it was
    S = np.ones_like(V)
    S[10, 0], S[11, 0] = False, True  # a final gap hidden, then shown again: hidden from its first hide
    assert not without_restores(ep, S, max_passes=0)[10:, 0].any()
    full, none = schedule_cost(ep, V), schedule_cost(ep, np.ones_like(V))
    assert full < schedule_cost(ep, W) < none
    oracle = HindsightOracle(restores=False)
    env = ReplayEnv(trajectories=[ep], max_items=32, expose_episode=True)
    tot = play(oracle, env)
    assert tot["misses"] == 0 and tot["dollars"] == pytest.approx(schedule_cost(ep, W), rel=1e-9)
    assert make_policy("oracle:restores=0").restores is False and make_policy("oracle").restores
    with pytest.raises(PolicySpecError, match="restores must be true or false"):
        make_policy("oracle:restores=2")


def test_need_schedule_hides_each_output_at_once_after_its_last_need():
    # output 0 is needed at calls 3 and 9, output 2 is smaller than its placeholder; the others are read
    # once, by the call after the one that made them
    sizes = [40_000, 4_000, 10, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000]
    ep = compile_episode(crafted(sizes, needs={3: [0], 9: [0]}))
    N = need_schedule(ep)
    assert N.shape == (ep.n_calls, ep.n)
    assert N[:10, 0].all() and not N[10:, 0].any()  # visible through its last need, never shown again
    assert N[:, 2].all()  # a placeholder would cost more than the output
    for k in (1, 3, 4):  # visible for the call that reads it first, hidden from the next on
        first = ep.call_of_step[k] + 1
        assert N[: first + 1, k].all() and not N[first + 1 :, k].any()
    # the oracle prices the same needs: never dearer; the need schedule is itself a zero-miss schedule
    oracle, need = HindsightOracle(), HindsightOracle(schedule="need")
    env = ReplayEnv(trajectories=[ep], max_items=32, expose_episode=True)
    tot, ref = play(need, env), play(oracle, env)
    assert tot["misses"] == 0 and tot["dollars"] == pytest.approx(schedule_cost(ep, N), rel=1e-9)
    assert ref["dollars"] <= tot["dollars"] + 1e-12 < play(NoManagement(), env)["dollars"]
    assert (need.V == N).all()


def test_the_need_schedule_is_a_spec_with_a_label_of_its_own():
    pol = make_policy("oracle:schedule=need")
    assert pol.schedule == "need" and pol.restores and pol.config() == {"schedule": "need"}
    assert make_policy("oracle").config() == {}
    assert make_policy("oracle:schedule=rule").config() == {"schedule": "rule"}
    with pytest.raises(PolicySpecError, match="schedule must be one of cost, need, rule"):
        make_policy("oracle:schedule=plan")
    for name in ("need", "rule"):
        with pytest.raises(PolicySpecError, match=f"schedule={name} never restores"):
            make_policy(f"oracle:schedule={name},restores=0")


def test_the_rule_schedule_decides_as_the_learned_policy_would_if_its_network_knew_need():
    # one timing rule: the oracle's rule variant and the learned policy's want_visible, given P(visible)
    # 1 for what the need schedule shows and 0 for what it hides, make the same changes at every call
    from dtoc_rl.policies.baselines import to_action
    from dtoc_rl.policies.learned import cold_of
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    learned = LearnedPolicyConfig(d_model=8, n_heads=2, n_layers=1, word_vocab=0).create()
    assert learned.cfg.batching == "pays" and learned.cfg.cold_hides
    env = ReplayEnv(max_items=256, expose_episode=True)
    hides = held = 0
    for i in range(len(env.episodes)):
        rule, need = HindsightOracle(schedule="rule"), HindsightOracle(schedule="need")
        obs, info = env.reset(options={"index": i})
        rule.reset(info)
        need.reset(info)
        done, calls = False, 0
        while not done:
            # every third call as if its cache had expired (the bundled runs are untimed): both hide at once
            info = {**info, "cache_cold": calls % 3 == 2}
            calls += 1
            asked = need.act(obs, info)
            probs = np.where(asked["disable"], 0.0, 1.0) * obs["item_mask"]
            probs = np.where(obs["items"][:, 2] > 0.5, probs, np.where(asked["enable"], 1.0, 0.0))
            mine = to_action(obs, learned.want_visible(obs, probs, 0.5, cold=cold_of(info)))
            action = rule.act(obs, info)
            assert (action["disable"] == mine["disable"]).all() and (action["enable"] == mine["enable"]).all()
            hides += int(action["disable"].sum())
            held += int(asked["disable"].sum() - action["disable"].sum())
            obs, _, done, _, info = env.step(action)
        assert info["totals"]["misses"] == 0
    assert hides and held  # it hid outputs, and held some back the need schedule hides at once


def test_need_mode_trains_on_the_need_schedule():
    from dtoc_rl.policies.learned_trainer import _targets

    env = ReplayEnv(max_items=256, expose_episode=True)
    for ep in env.episodes[:5]:
        labels = need_schedule(ep, hide_small=True)
        assert (_targets(ep, "need", CostConfig(), {}) == labels).all(), ep.traj_id


def test_need_schedule_counts_only_the_needs_the_cost_config_makes_misses():
    traj = crafted([4000] * 8, needs={5: [0]})
    traj.steps[6].needs.append(Need(step=1, kind="reference", evidence="f1"))
    ep = compile_episode(traj)
    both, only = need_schedule(ep), need_schedule(ep, CostConfig(need_kinds=("provenance",)))
    assert both[:7, 1].all() and not both[7:, 1].any()  # visible for the reference at call 6
    assert only[:3, 1].all() and not only[3:, 1].any()  # read at call 2, nothing after
    assert (both[:, 0] == only[:, 0]).all() and not both[6:, 0].any()
    # the need labels of --mode need hide a tiny output too, the schedule never does
    tiny = compile_episode(crafted([4000, 10, 4000, 4000], needs={2: [0]}))
    assert need_schedule(tiny)[:, 1].all() and not need_schedule(tiny, hide_small=True)[3:, 1].any()


def _shown_again(ep, W) -> bool:
    for k in np.flatnonzero(ep.has_out):
        col = W[ep.call_of_step[k] + 1 :, k]
        if (~col[:-1] & col[1:]).any():
            return True
    return False


@pytest.mark.parametrize("start", [plan, exact_plan])
def test_without_restores_is_a_local_optimum_over_final_hides_on_bundled_data(start):
    # from either oracle's schedule (exact_plan's may hide an output for part of a gap): no miss,
    # nothing shown again, no cheaper than the exact oracle, no dearer than where its descent starts,
    # and no single final hide or show lowers its cost
    from dtoc_rl.policies.oracle import _gaps, _need_matrix

    env = ReplayEnv(max_items=256, expose_episode=True)
    checked = 0
    for ep in env.episodes:
        if start is exact_plan and int(ep.has_out.sum()) > 8:
            continue
        V = start(ep)
        W = without_restores(ep, V)
        cost = schedule_cost(ep, W)
        assert cost < float("inf"), ep.traj_id
        if start is exact_plan:  # the optimum of all zero-miss schedules (plan's is a local one: its
            assert schedule_cost(ep, V) <= cost + 1e-12, ep.traj_id  # descent can end above this one)
        assert not _shown_again(ep, W), ep.traj_id
        gaps = _gaps(ep, _need_matrix(ep, None))
        S = V.copy()  # the descent's start: shown until the last need, hidden from the first hide on
        for k, a, b in gaps:
            S[a:b, k] = True if b < ep.n_calls else ~np.logical_or.accumulate(~S[a:b, k])
        assert cost <= schedule_cost(ep, S) + 1e-12, ep.traj_id
        for k, a, b in (g for g in gaps if g[2] == ep.n_calls):
            F = W.copy()
            F[a:b, k] = not F[a, k]
            assert schedule_cost(ep, F) >= cost - 1e-12, (ep.traj_id, k)
        checked += 1
    assert checked >= 10


def test_missing_schedule_costs_infinity():
    ep = compile_episode(crafted([400] * 4, needs={3: [0]}))
    V = np.ones((4, 4), bool)
    V[3, 0] = False
    assert schedule_cost(ep, V) == float("inf")


def test_without_cache_discount_oracle_shows_outputs_only_when_needed():
    ep = compile_episode(crafted([4000] * 6, needs={4: [1]}, family="gpt-4"))  # gpt-4: no caching
    V = plan(ep)
    assert V[4, 1] and not V[3, 1] and not V[5, 1] and not V[2, 0]


def _small_episode(draw_sizes, draw_needs, family):
    n = len(draw_sizes)
    needs = {}
    for t, js in draw_needs:
        if t < n:
            needs.setdefault(t, []).extend(j for j in js if j < t)
    return compile_episode(crafted(draw_sizes, needs=needs, family=family))


episodes = st.builds(
    _small_episode,
    st.lists(st.integers(4, 40_000), min_size=2, max_size=7),
    st.lists(st.tuples(st.integers(1, 6), st.lists(st.integers(0, 5), max_size=2)), max_size=4),
    st.sampled_from(["claude-sonnet", "gemini-3-pro", "gpt-4", "gpt-4o"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep=episodes, seed=st.integers(0, 2**16))
def test_no_zero_miss_schedule_beats_the_exact_oracle(ep, seed):
    best = schedule_cost(ep, exact_plan(ep))
    approx = schedule_cost(ep, plan(ep))
    assert best <= approx + 1e-12
    rng = np.random.default_rng(seed)
    for _ in range(20):
        V = rng.random((ep.n, ep.n)) < 0.5
        c = schedule_cost(ep, V)
        assert c >= best - 1e-12 or c == float("inf")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep=episodes)
def test_no_baseline_beats_the_oracle_at_zero_misses(ep):
    env = ReplayEnv(trajectories=[ep], max_items=16, expose_episode=True)
    oracle = play(HindsightOracle(exact_max_outputs=8), env)
    assert oracle["misses"] == 0
    for pol in (NoManagement(), LastNObservations(1), LastNObservations(2, polling=2), TokenBudget(2000),
                AnthropicClearToolUses(trigger=1000, keep=1)):  # fmt: skip
        tot = play(pol, env)
        if tot["misses"] == 0:
            assert tot["dollars"] >= oracle["dollars"] - 1e-12, pol.label


@pytest.mark.parametrize("cache, worst", [("ideal", 0.006), ("provider", 0.086)])
def test_approximation_gap_on_real_prefixes(cache, worst):
    """plan() against the exact optimum on the first 8 calls of each bundled trajectory: within 0.6%
    with the ideal cache; up to 8.6% under the providers' rules (a minimum cacheable prompt makes
    hiding part of a gap pay, which plan()'s whole-gap flips cannot find), which is why the oracle
    solves episodes of up to 8 outputs exactly (docs/billcheck.md reports the gap)."""
    from dtoc_rl.data.dataset import load_trajectories
    from dtoc_rl.data.paths import bundled_dataset

    cfg = CostConfig(cache=cache)
    gaps = []
    for t in load_trajectories(bundled_dataset())[:12]:
        t.steps = t.steps[:8]
        ep = compile_episode(t)
        if ep.has_out.sum() > 8:
            continue
        exact, approx = schedule_cost(ep, exact_plan(ep, cfg), cfg), schedule_cost(ep, plan(ep, cfg), cfg)
        assert approx >= exact - 1e-12
        gaps.append(approx / exact - 1)
    assert len(gaps) == 12 and max(gaps) < worst, gaps


def _small_parallel_episode(draw_sizes, draw_needs, family, new_turn):
    """As _small_episode, with the steps grouped into turns of parallel tool calls (step k opens a
    new turn where ``new_turn[k - 1]``)."""
    t = crafted(draw_sizes, needs={}, family=family)
    turn = 0
    for k, s in enumerate(t.steps):
        turn += k > 0 and new_turn[(k - 1) % len(new_turn)]
        s.turn = turn + 1  # from 1: all-zero turns mean "not recorded"
    for step, js in draw_needs:
        if step < len(t.steps):
            t.steps[step].needs += [Need(step=j, kind="provenance", evidence="span") for j in js if j < step]
    return compile_episode(t)


parallel_episodes = st.builds(
    _small_parallel_episode,
    st.lists(st.integers(4, 40_000), min_size=2, max_size=6),
    st.lists(st.tuples(st.integers(1, 5), st.lists(st.integers(0, 4), max_size=2)), max_size=4),
    st.sampled_from(["claude-sonnet", "gemini-3-pro", "gpt-4", "gpt-4o"]),
    st.lists(st.booleans(), min_size=1, max_size=5),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep=parallel_episodes, seed=st.integers(0, 2**16))
def test_with_parallel_tool_calls_the_oracle_plans_per_call_and_no_schedule_beats_the_exact_one(ep, seed):
    exact, approx = exact_plan(ep), plan(ep)
    assert exact.shape == approx.shape == (ep.n_calls, ep.n)
    best = schedule_cost(ep, exact)
    assert best <= schedule_cost(ep, approx) + 1e-12
    rng = np.random.default_rng(seed)
    for _ in range(20):
        c = schedule_cost(ep, rng.random((ep.n_calls, ep.n)) < 0.5)
        assert c >= best - 1e-12 or c == float("inf")
    if ep.n_calls < 2:
        return  # one model call: no decision to make, ReplayEnv does not load it
    # played in ReplayEnv, one decision per model call, the exact schedule costs what it planned
    env = ReplayEnv(trajectories=[ep], max_items=16, expose_episode=True)
    oracle = HindsightOracle(exact_max_outputs=8)
    tot = play(oracle, env)
    assert tot["misses"] == 0 and tot["calls"] == ep.n_calls
    assert tot["dollars"] == pytest.approx(schedule_cost(ep, oracle.V), rel=1e-9)


def test_the_rule_schedule_prices_each_call_as_the_observation_does():
    # priced with no cache discount, a re-write costs nothing more: every hide that frees a token pays at
    # once, so the rule makes the need schedule's hides (list prices of the runs' families hold some back)
    from dtoc_rl.sim.pricing import Prices

    flat = CostConfig(prices=Prices(input=3.0, output=15.0, cache_read=3.0, cache_write=3.0))
    env = ReplayEnv(max_items=256, expose_episode=True, cost_config=flat)
    listed = ReplayEnv(max_items=256, expose_episode=True)
    differs = False
    for i in range(len(env.episodes)):
        rule = play(HindsightOracle(schedule="rule"), env, i)["dollars"]
        assert rule == pytest.approx(play(HindsightOracle(schedule="need"), env, i)["dollars"], rel=5e-3)
        rule = play(HindsightOracle(schedule="rule"), listed, i)["dollars"]
        differs |= rule != pytest.approx(
            play(HindsightOracle(schedule="need"), listed, i)["dollars"], rel=3e-2
        )
    assert differs
