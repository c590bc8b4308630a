"""Runs whose calls go to several models (a router, a /model switch): each call is billed at its own
model's prices and reads only its own model's cache.

Prices are whole dollars per token (tests/cost_episodes.UNIT for model "a": $1 read / $2 write / $10
output; model "b" three times as dear to read and write, twice to answer), so every bill below is
worked out by hand in the comment above it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.policies.oracle import exact_plan, plan, schedule_cost
from dtoc_rl.sim.billcheck import log_calls
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.pricing import Prices, prices_for
from dtoc_rl.sim.simulator import CostConfig, Simulator, baseline_totals, idle_seconds
from tests.cost_episodes import UNIT, make_episode

B = Prices(input=6e6, output=20e6, cache_read=3e6, cache_write=6e6, source="test b")
CFG = CostConfig(price_table={"a": UNIT, "b": B}, cache="ideal")


def _alternating():
    # base 100; four calls, each answering 10 tokens and getting a 100-token output (placeholder 10),
    # sent to a, b, a, b.  Prompts: 100, 210, 320, 430.
    ep = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[100, 100, 100, 0], hid=[10, 10, 10, 0])
    ep.model_raw, ep.models, ep.call_model = "a", ["a", "b"], np.array([0, 1, 0, 1])
    return ep


def test_each_call_is_billed_at_its_models_prices_from_its_models_cache():
    ep = _alternating()
    # a: nothing cached, 100 written, 10 out: 200 + 100 = 300.  b: its first call, 210 written at 6
    # and 10 out at 20: 1260 + 200 = 1460.  a again: its call 0's 100 read, 220 written: 100 + 440 +
    # 100 = 640.  b again: its call 1's 210 read at 3, 220 written at 6: 630 + 1320 + 200 = 2150.
    sim = Simulator(ep, CFG)
    assert [sim.call()[0] for _ in range(4)] == [300, 1460, 640, 2150]
    assert (sim.totals.cache_read_tokens, sim.totals.dollars) == (310, 4550)
    base = baseline_totals(ep, CFG)
    assert (base.cache_read_tokens, base.dollars) == (310, 4550)
    # one model at a's prices, for contrast: 300 + (100 + 110*2 + 100) + (210 + 220) + (320 + 220) ...
    one = make_episode(base=100, user=[0] * 4, asst=[10] * 4, vis=[100, 100, 100, 0], hid=[10, 10, 10, 0])
    one.model_raw = "a"
    assert baseline_totals(one, CFG).dollars == 300 + 420 + 530 + 640


def test_a_hide_rewrites_each_models_cache_from_the_change_on():
    ep = _alternating()
    sim = Simulator(ep, CFG)
    sim.call(), sim.call()
    sim.apply_changes([], [0])  # O_0: 100 -> 10 before call 2
    # call 2 (a): prompt 230; a's cache holds 100 (call 0's, all before O_0): 100 + 130*2 + 100 = 460.
    # call 3 (b): prompt 340; b's cache holds call 1's 210, of which the 110 before O_0 still match:
    # 110*3 + 230*6 + 200 = 1910.
    assert [sim.call()[0] for _ in range(2)] == [460, 1910]
    assert sim.totals.dollars == 300 + 1460 + 460 + 1910
    V = np.ones((4, 4), bool)
    V[2:, 0] = False
    assert schedule_cost(ep, V, CFG) == sim.totals.dollars  # the oracle's biller agrees, call by call


def test_the_oracle_plans_a_mixed_run_and_exact_plan_says_it_cannot():
    ep = _alternating()
    V = plan(ep, CFG)
    assert schedule_cost(ep, V, CFG) <= baseline_totals(ep, CFG).dollars
    with pytest.raises(ValueError, match="several"):
        exact_plan(ep, CFG)


def test_the_cache_waits_since_the_same_models_last_call():
    ep = _alternating()
    ep.timestamps = np.array([0.0, 10.0, 400.0, 410.0])
    # a waited 400 s since its call 0; b 400 s since its call 1; each model's first call: unknown
    assert np.array_equal(idle_seconds(ep), [np.nan, np.nan, 400.0, 400.0], equal_nan=True)
    ep.call_model = None
    assert np.array_equal(idle_seconds(ep), [np.nan, 10.0, 390.0, 10.0], equal_nan=True)


def test_observations_carry_the_next_calls_model_prices():
    env = ReplayEnv([_alternating()], cost_config=CFG)
    obs, _ = env.reset(seed=0)
    seen = [obs["prices"].tolist()]
    done, nothing = False, {"enable": np.zeros(env.N, np.int8), "disable": np.zeros(env.N, np.int8)}
    while not done:
        obs, _, term, trunc, _ = env.step(nothing)
        done = term or trunc
        if not done:
            seen.append(obs["prices"].tolist())
    a, b = [UNIT.input, UNIT.output, UNIT.cache_read, UNIT.cache_write], [6e6, 20e6, 3e6, 6e6]
    assert seen == [b, a, b]  # decisions come before calls 1, 2, 3 (call 0 has nothing to hide)


def _traj(models: list[str | None], raw: str = "gpt-4o") -> Trajectory:
    steps = [
        Step(index=k, turn=k, tool_name="bash", tool_args='{"command": "ls"}', output="x" * 400,
             output_tokens=100, model=m)
        for k, m in enumerate(models)
    ]  # fmt: skip
    return Trajectory(
        traj_id="t",
        source="test",
        model_raw=raw,
        model_family="gpt-4o",
        task_id="t",
        task_text="fix the bug " * 10,
        steps=steps,
    )


def test_names_of_one_model_are_one_model():
    # a dated name, a provider prefix and no name at all are the run's own model: nothing changes
    ep = compile_episode(_traj(["gpt-4o-2024-08-06", "openai/gpt-4o", None]))
    assert ep.call_model is None
    ep = compile_episode(_traj([None, "gpt-4o-mini", "gpt-4o", "gpt-4o-mini"]))
    assert ep.models == ["gpt-4o", "gpt-4o-mini"] and ep.call_model.tolist() == [0, 1, 0, 1]
    assert ep.prev_call.tolist() == [-1, -1, 0, 1]
    # the list prices of each: gpt-4o-mini is the cheaper
    p = CostConfig().call_prices(ep)
    assert p.input[1] < p.input[0] and p.input[1] == p.input[3] and p.input[0] == p.input[2]


def test_the_bill_check_prices_each_logged_call_at_its_model(tmp_path):
    from dtoc_rl.core.tokens import get_estimator
    from dtoc_rl.data.schema import Usage

    t = _traj(["gpt-4o", "gpt-4o-mini", "gpt-4o"])
    for s in t.steps:
        s.usage = Usage(input_tokens=1000, cached_tokens=0, output_tokens=10)
    calls = log_calls(t, get_estimator(None))
    assert calls[0].prices.source == calls[2].prices.source != calls[1].prices.source
    # each model's first call has nothing of its own cached; the third reads what gpt-4o was sent first
    assert [c.first for c in calls] == [True, True, False]
    assert calls[2].est_shared > 0


def _ingest_one(path):
    res = ingest_paths([path], progress=False)
    assert not res.skipped, res.skipped
    (t,) = res.trajectories
    return t


def test_a_gemini_cli_session_routed_between_models_names_each_calls_model(tmp_path):
    def call(k, model):
        cid = f"c{k}"
        response = {"output": "text " * 50}
        result = [{"functionResponse": {"id": cid, "name": "read_file", "response": response}}]
        return {"id": f"g{k}", "timestamp": f"2026-05-01T10:00:0{k}.000Z", "type": "gemini", "content": "",
                "model": model, "tokens": {"input": 1000 * (k + 1), "output": 5, "cached": 0, "total": 1},
                "toolCalls": [{"id": cid, "name": "read_file", "args": {"absolute_path": f"/r/{k}"},
                               "status": "success", "result": result}]}  # fmt: skip

    msgs = [{"id": "u", "timestamp": "2026-05-01T10:00:00.000Z", "type": "user", "content": [{"text": "go"}]}]
    routed = ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-pro"]
    msgs += [call(k, m) for k, m in enumerate(routed)]
    f = tmp_path / "session-2026-05-01T10-00-abc.json"
    f.write_text(json.dumps({"sessionId": "s", "projectHash": "f" * 64, "startTime": "x", "messages": msgs}))
    t = _ingest_one(f)
    assert t.model_raw == "gemini-2.5-pro"  # the run's model: the one most calls went to
    assert [s.model for s in t.steps] == routed
    ep = compile_episode(t)
    assert ep.call_model.tolist() == [1, 0, 0]
    p = CostConfig().call_prices(ep)
    assert p.output[0] < p.output[1]  # flash answers for less than pro


def test_a_codex_session_switching_models_names_each_calls_model(tmp_path):
    def item(k):
        return [
            {"type": "function_call", "call_id": f"c{k}", "name": "shell", "arguments": '{"command": "ls"}'},
            {"type": "function_call_output", "call_id": f"c{k}", "output": "a b c"},
        ]

    lines = [{"type": "session_meta", "payload": {"id": "s1", "cwd": "/r", "cli_version": "0.60.0"}}]
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}
    lines.append({"type": "response_item", "payload": user})
    for k, model in enumerate(["gpt-5.1-codex", "gpt-5.1-codex", "gpt-5.1-codex-mini"]):
        if k != 1:
            lines.append({"type": "turn_context", "payload": {"model": model}})
        at = f"2026-05-01T10:0{k}:00Z"
        lines += [{"timestamp": at, "type": "response_item", "payload": p} for p in item(k)]
    f = tmp_path / "rollout-2026-05-01T10-00-00-s1.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    t = _ingest_one(f)
    assert t.model_raw == "gpt-5.1-codex"
    assert [s.model for s in t.steps] == ["gpt-5.1-codex", "gpt-5.1-codex", "gpt-5.1-codex-mini"]


def test_a_chat_log_names_each_replys_model(tmp_path):
    msgs = [{"role": "user", "content": "go"}]
    for k, model in enumerate(["claude-sonnet-4-5", "claude-haiku-4-5"]):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        msgs += [{"role": "assistant", "content": "", "model": model, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": "out"}]  # fmt: skip
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"model": "claude-sonnet-4-5", "messages": msgs}))
    t = _ingest_one(f)
    assert [s.model for s in t.steps] == ["claude-sonnet-4-5", "claude-haiku-4-5"]
    assert compile_episode(t).call_model.tolist() == [0, 1]


def test_the_simulator_and_the_oracles_biller_agree_on_random_mixed_runs():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(3, 9))
        vis = rng.integers(50, 400, n).tolist()
        user = rng.integers(0, 30, n).tolist()
        ep = make_episode(base=100, user=user, asst=[10] * n, vis=vis, hid=[10] * n)
        ep.model_raw, ep.models, ep.call_model = "a", ["a", "b"], rng.integers(0, 2, n)
        # hides from a random call on, some shown again later (a change undone before a model's next
        # call changes nothing its cache holds)
        hide_at, show_at = rng.integers(1, n + 2, n), rng.integers(1, n + 3, n)
        V = np.ones((n, n), bool)
        for k in range(n):
            V[max(hide_at[k], k + 2) : max(show_at[k], hide_at[k], k + 2) + rng.integers(0, 2), k] = False
        for cfg in (CFG, CostConfig(price_table={"a": UNIT, "b": B})):
            sim = Simulator(ep, cfg)
            for c in range(n):
                if c:
                    want = V[c, : sim.t]
                    en = [k for k in range(sim.t) if want[k] and not sim.visible[k]]
                    di = [k for k in range(sim.t) if not want[k] and sim.visible[k] and ep.has_out[k]]
                    sim.apply_changes(en, di)
                sim.call()
            assert sim.totals.misses == 0
            assert sim.totals.dollars == pytest.approx(schedule_cost(ep, V, cfg), rel=1e-12)


def test_policies_price_each_decision_at_the_next_calls_model():
    from dtoc_rl.policies.baselines import CacheAwareClear, episode_prices, per_call
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    env = ReplayEnv([_alternating()], cost_config=CFG, expose_episode=True)
    obs, info = env.reset(seed=0)
    assert per_call(info) and episode_prices(info) is None
    rule = CacheAwareClear()
    rule.reset(info)
    used = []
    learned = LearnedPolicy(LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, seed=0))
    learned.reset(info)
    assert learned._prices is None and learned._thr is None  # both from each observation
    done = False
    while not done:
        used.append(rule._prices(obs, info).cache_write)
        learned.act(obs, info)
        obs, _, term, trunc, info = env.step(rule.act(obs, info))
        done = term or trunc
    assert used == [B.cache_write, UNIT.cache_write, B.cache_write]
    # one model (or models priced alike): the episode's prices, as before
    one = _alternating()
    one.call_model = None
    _, info = ReplayEnv([one], cost_config=CFG, expose_episode=True).reset(seed=0)
    assert not per_call(info) and episode_prices(info) == UNIT


def test_a_conversation_through_the_proxy_that_changes_models_is_decided_and_logged_per_call(tmp_path):
    from dtoc_rl.data.models import family_id
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.proxy import ContextProxy
    from dtoc_rl.sim.pricing import prices_for
    from tests.test_proxy import HEAD, MODEL, _openai_turn

    proxy = ContextProxy(make_policy("last_n:n=2"), log_dir=tmp_path / "logs")
    msgs, sent = list(HEAD), []
    for k in range(6):
        model = MODEL if k < 3 else "gpt-4o-mini"
        sent.append(model)
        proxy.rewrite("openai", {"model": model, "messages": msgs})
        (mirror,) = proxy.mirrors.values()
        obs, info = mirror.orch.observation()
        assert mirror.orch.prices == prices_for("gpt-4o-mini" if k >= 3 else "gpt-4o", model)
        assert obs["prices"][0] == np.float32(mirror.orch.prices.input)
        assert bool(info.get("prices_per_call")) == (k >= 3)  # policies price this call at its model
        assert int(obs["family"]) == family_id("gpt-4o-mini" if k >= 3 else "gpt-4o")  # and see its family
        msgs = msgs + _openai_turn(k, lines=60)
    proxy.rewrite("openai", {"model": "gpt-4o-mini", "messages": msgs})
    proxy.flush_logs()
    (traj,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert traj.model_raw == MODEL
    assert [s.model for s in traj.steps] == sent  # each answer logged with the model it came from
    ep = compile_episode(traj)
    assert ep.call_model.tolist() == [0, 0, 0, 1, 1, 1]


def test_each_call_reads_its_cache_by_its_own_providers_rules():
    # a and b called in turn; b's provider keeps nothing under 300 tokens (a's: no minimum)
    from dataclasses import replace

    ep = _alternating()
    ep.models = ["claude-sonnet-4-5", "gpt-4o"]
    ep.model_raw, ep.model_family = ep.models[0], "claude-sonnet"
    cfg = CostConfig(price_table={"claude-sonnet-4-5": UNIT, "gpt-4o": B})
    rules = cfg.model_rules(ep)
    assert rules[0] != rules[1]  # Anthropic's and OpenAI's
    low = [replace(r, min_prefix=0, step=1, hit_rate=1.0) for r in rules]
    low[1] = replace(low[1], min_prefix=300)
    cfg.model_rules = lambda e: low  # the rules under test, on this config only
    # as the ideal cache (test above) but b's second call: its 210 cached tokens are under b's minimum
    # of 300, so it writes all 430: 430 * 6 + 200 = 2780 where the ideal cache billed 2150
    sim = Simulator(ep, cfg)
    assert [sim.call()[0] for _ in range(4)] == [300, 1460, 640, 2780]
    assert baseline_totals(ep, cfg).dollars == 300 + 1460 + 640 + 2780
    V = np.ones((4, 4), bool)
    assert schedule_cost(ep, V, cfg) == 300 + 1460 + 640 + 2780


def test_training_reads_each_decisions_economics_at_its_calls_model():
    from dtoc_rl.engine.features import price_vector
    from dtoc_rl.policies.learned import LearnedPolicy, economics
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig
    from dtoc_rl.policies.learned_trainer import _ep_prices, collect

    def as_json(p):
        return {
            "input": p.input,
            "output": p.output,
            "cache_read": p.cache_read,
            "cache_write": p.cache_write,
        }

    # b: a tenth to read, a write premium (UNIT reads at half and writes at input)
    c = Prices(input=6e6, output=20e6, cache_read=0.6e6, cache_write=7.5e6)
    table = json.dumps({"a": as_json(UNIT), "b": as_json(c)})
    policy = LearnedPolicy(LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, seed=0, prices=table))
    ep = _alternating()
    assert _ep_prices(ep, CostConfig(price_table={"a": UNIT, "b": c})) is None  # no one price for the run
    samples = collect(policy, [ep], mode="oracle")
    assert len(samples) == 3  # decisions before calls 1 (b), 2 (a) and 3 (b)
    for s, p in zip(samples, [c, UNIT, c], strict=True):
        f = s.items.shape[1] - 5  # the economics are the last five item features
        want, _ = economics(s.items[:, :f], np.ones(len(s.items), bool), s.glob[:-5], price_vector(p))
        assert np.allclose(s.items[:, f:], want)


ROUTED = Path(__file__).parent / "fixtures" / "gemini_cli_routed" / "session-routed.jsonl"


def test_a_real_gemini_cli_session_routed_to_two_models_is_billed_per_call():
    """The real Gemini CLI 0.61.0 (auto routing, four prompts chained with --resume; its router sent
    them to pro, flash, pro, flash): each call keeps the model, usage and time of its own record,
    though every resume recorded the history again without them."""
    from dtoc_rl.ingest import read_first

    _, t = read_first(ROUTED)
    models = [s.model for s in t.steps]
    pro, flash = "gemini-2.5-pro", "gemini-3.8-flash"
    assert models == [pro, pro, flash, flash, pro, pro, flash]
    assert t.model_raw == pro
    # the scripted API's usage per call, as it answered them (requests-routed.json)
    assert [s.usage.input_tokens for s in t.steps] == [9000, 11500, 14000, 16500, 19000, 21500, 24000]
    times = [s.timestamp for s in t.steps]
    assert times == sorted(times) and times[-1] - times[0] > 5  # each call's own time, not the resume's
    ep = compile_episode(t)
    assert ep.call_model.tolist() == [0, 0, 1, 1, 0, 0, 1]
    per_call = baseline_totals(ep, CostConfig()).dollars
    # flash at pro's prices: dearer than one model, each model's first call writing its own cache
    alike = baseline_totals(ep, CostConfig(price_table={flash: prices_for("gemini-2.5-pro", pro)})).dollars
    ep.call_model = None
    as_first = baseline_totals(ep, CostConfig()).dollars
    assert as_first < alike and per_call < alike  # and flash's calls for less


def test_the_oracle_policy_plans_small_mixed_runs_with_plan():
    from dtoc_rl.policies.oracle import HindsightOracle

    env = ReplayEnv([_alternating()], cost_config=CFG, expose_episode=True)
    obs, info = env.reset(seed=0)
    oracle = HindsightOracle()
    oracle.reset(info)  # few outputs: exact_plan for one model, plan for several
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(oracle.act(obs, info))
        done = term or trunc
    assert env.sim.totals.dollars == pytest.approx(
        schedule_cost(_alternating(), plan(_alternating(), CFG), CFG)
    )


def test_names_of_one_version_are_one_model_and_two_versions_two():
    from dtoc_rl.data.models import same_model

    assert same_model("gpt-4o", "openai/gpt-4o-2024-08-06")
    assert not same_model("gpt-4o-2024-05-13", "gpt-4o-2024-08-06")  # priced apart, cached apart
    assert same_model("claude-opus-4-0", "claude-opus-4-20250514")
    assert same_model("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5")
    assert not same_model("gemini-2.5-pro", "gemini-2.5-flash")
    ep = compile_episode(_traj(["claude-opus-4-0", "claude-opus-4-20250514", None], raw="claude-opus-4-0"))
    assert ep.call_model is None


def test_live_the_cache_is_timed_from_the_next_models_own_last_answer(monkeypatch):
    import time

    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.orchestrator import Orchestrator

    seen = []

    class Spy(type(make_policy("none"))):
        def act(self, obs, info=None):
            seen.append(info["cache_cold"])
            return super().act(obs, info)

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    orch = Orchestrator(Spy(), query="task", model="gpt-5.2")  # OpenAI: a cache kept 5 minutes
    call = [{"name": "bash", "arguments": {"command": "make"}}]

    def answer(model, wait):
        orch.use_model(model)
        (c,) = orch.record_assistant("", call)
        clock[0] += wait
        orch.add_tool_result(c["id"], "ok")

    answer("gpt-5.2", 200.0)  # gpt-5.2 answered 200 s ago
    answer("gpt-5-mini", 200.0)  # gpt-5-mini 200 s ago, gpt-5.2 400 s ago
    orch.use_model("gpt-5-mini")
    orch.decide(force=True)
    orch.use_model("gpt-5.2")
    orch.decide(force=True)
    orch.use_model("gpt-4.1")  # never called: nothing of it is cached
    orch.decide(force=True)
    assert seen == [False, True, True]
    (traj,) = [orch.trajectory()]
    assert [s.model for s in traj.steps] == ["gpt-5.2", "gpt-5-mini"]


def test_a_routed_run_is_observed_as_the_family_of_each_calls_model():
    from dtoc_rl.data.models import family_id
    from dtoc_rl.ingest import read_first

    _, t = read_first(ROUTED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ReplayEnv([compile_episode(t)], expose_episode=True)
        obs, info = env.reset(seed=0)
        seen, done = [], False
        nothing = {"enable": np.zeros(env.N, np.int8), "disable": np.zeros(env.N, np.int8)}
        while not done:
            seen.append((int(obs["family"]), bool(info.get("prices_per_call"))))
            obs, _, term, trunc, info = env.step(nothing)
            done = term or trunc
    pro, flash = family_id("gemini-2.5-pro"), family_id("gemini")
    # decisions before calls 1-6: pro, flash, flash, pro, pro, flash
    assert seen == [(f, True) for f in (pro, flash, flash, pro, pro, flash)]
