"""Each baseline pinned to its documented behaviour on crafted traces."""

import numpy as np
import pytest

from dtoc_rl.engine.features import ItemState, build_observation
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import (
    AnthropicClearToolUses,
    GeminiCliMasking,
    LastNObservations,
    NoManagement,
    ObservationMasking,
    OpenCodePrune,
    TokenBudget,
)

from .crafted import crafted

N = 64


def visible_sets(policy, traj, **env_kw):
    """Visible step indices at every call after the first, under ``policy``."""
    env = ReplayEnv(trajectories=[traj], max_items=N, **env_kw)
    obs, info = env.reset(seed=0)
    policy.reset(info)
    seen, done = [], False
    while not done:
        obs, _, done, _, info = env.step(policy.act(obs, info))
        slots = info["slot_steps"]
        vis = obs["items"][:, 2] > 0.5
        # visibility the call just made saw = before its own output was stored
        seen.append(sorted(int(s) for s in slots[(slots >= 0) & vis] if s < env.sim.t - 1))
    return seen, info


def test_no_management_never_hides():
    seen, info = visible_sets(NoManagement(), crafted([400] * 6))
    assert seen[-1] == [0, 1, 2, 3, 4]
    assert info["totals"]["changes"] == 0


def test_last_n_matches_swe_agent_arithmetic():
    # n=5, polling=1: call i sees outputs 0..i-6 elided (SWE-agent 1.x logs show exactly this)
    seen, _ = visible_sets(LastNObservations(5), crafted([400] * 12))
    for i, vis in enumerate(seen, start=1):
        assert vis == list(range(max(0, i - 5), i)), (i, vis)


def test_last_n_polling_keeps_between_n_and_n_plus_polling():
    seen, _ = visible_sets(LastNObservations(2, polling=3), crafted([400] * 14))
    counts = [len(v) for v in seen[4:]]
    assert min(counts) >= 2 and max(counts) <= 2 + 3
    assert len(set(counts)) > 1  # the cut moves in jumps of `polling`


def test_last_n_never_elides_an_output_no_call_has_read():
    """Three parallel calls in one turn: under n=1 the call after them sees all three (each SWE-agent
    call has one observation, so its window never reaches an unread one)."""
    from dataclasses import replace

    traj = crafted([400] * 5)
    turns = [0, 1, 1, 1, 2]  # steps 1-3: one model call with three tool calls
    traj = replace(traj, steps=[replace(s, turn=t) for s, t in zip(traj.steps, turns)])
    env = ReplayEnv(trajectories=[traj], max_items=N)
    obs, info = env.reset(seed=0)
    pol = LastNObservations(1)
    pol.reset(info)
    done = False
    while not done:
        obs, _, done, _, info = env.step(pol.act(obs, info))
    assert info["totals"]["misses"] == 0  # none of the three was hidden before a call read it


def test_last_n_rejects_bad_n():
    with pytest.raises(ValueError, match="positive"):
        LastNObservations(0)


def test_observation_masking_counts_events_not_observations():
    # each step = action + observation: attention_window=5 keeps outputs of age < 2.5 -> the last 3
    seen, _ = visible_sets(ObservationMasking(5), crafted([400] * 10))
    assert seen[-1] == [6, 7, 8]
    assert ObservationMasking().attention_window == 100 and ObservationMasking.CLASS_DEFAULT == 5


def test_anthropic_clear_waits_for_trigger_then_keeps_three():
    # 8,000 chars = 2,000 tokens each; trigger at 10,000 input tokens
    seen, _ = visible_sets(AnthropicClearToolUses(trigger=10_000), crafted([8000] * 10))
    first_clear = next(i for i, v in enumerate(seen) if len(v) < i + 1)
    assert first_clear >= 3  # below the trigger nothing is cleared
    assert all(v == list(range(i + 1 - 3, i + 1)) for i, v in enumerate(seen) if i >= first_clear)


def test_anthropic_clear_at_least_and_exclude_tools():
    # clearing must free 100k tokens: never reached in this small trace
    seen, _ = visible_sets(AnthropicClearToolUses(trigger=5_000, clear_at_least=100_000), crafted([8000] * 8))
    assert all(len(v) == i + 1 for i, v in enumerate(seen))
    # read outputs are excluded: nothing is ever cleared
    seen, _ = visible_sets(AnthropicClearToolUses(trigger=5_000, exclude_tools=["read"]), crafted([8000] * 8))
    assert all(len(v) == i + 1 for i, v in enumerate(seen))
    with pytest.raises(ValueError, match="unknown tool categories"):
        AnthropicClearToolUses(exclude_tools=["skill"])


def test_opencode_prune_protects_last_two_user_turns():
    # one user turn only: OpenCode never prunes a single-prompt session
    seen, _ = visible_sets(OpenCodePrune(protect=4_000, minimum=2_000), crafted([8000] * 12))
    assert all(len(v) == i + 1 for i, v in enumerate(seen))


def test_opencode_prune_protects_recent_tokens_and_needs_a_minimum():
    # user messages before steps 4 and 8: outputs 0..3 lie before the last two user turns
    traj = crafted([8000] * 10, user_turns=(4, 8))
    seen, _ = visible_sets(OpenCodePrune(protect=4_000, minimum=2_000), traj)
    # once both turns began, walking back over outputs 3,2,1,0 (2,000 tokens each):
    # 3 and 2 fill the 4,000 protected tokens; 1 and 0 (4,000 > 2,000 minimum) are pruned
    assert seen[-1][:2] == [2, 3] and 0 not in seen[-1] and 1 not in seen[-1]
    # with a minimum it cannot reach, nothing is pruned
    seen, _ = visible_sets(OpenCodePrune(protect=4_000, minimum=50_000), traj)
    assert 0 in seen[-1]


def _hidden_by(policy, outputs):
    """Ages of the outputs ``policy`` hides, from ``(tokens, age, visible)`` oldest first."""
    items = [ItemState(est_tokens=t, age=a, visible=v) for t, a, v in outputs]
    obs = build_observation(items, 16, active_tokens=sum(t for t, _, v in outputs if v), step=10)
    act = policy.act(obs)
    assert not act["enable"].any()  # one-way
    return [outputs[j][1] for j in np.flatnonzero(act["disable"])]


def test_gemini_mask_keeps_its_defaults_and_masks_a_single_prompt_session():
    from dtoc_rl.policies.registry import make_policy

    p = make_policy("gemini_mask")
    assert isinstance(p, GeminiCliMasking) and (p.protect, p.minimum) == (50_000, 30_000)
    # no user turns are protected (OpenCode's prune never touches this session)
    seen, _ = visible_sets(GeminiCliMasking(protect=5_000, minimum=3_000), crafted([8000] * 12))
    assert any(len(v) < i + 1 for i, v in enumerate(seen))
    assert all(i in v for i, v in enumerate(seen))  # the output no call has read stays


def test_gemini_mask_scans_past_masked_outputs_and_triggers_at_the_minimum():
    rule = GeminiCliMasking(protect=5_000, minimum=3_000)
    # ages 3 and 2 pass the protected 5,000 tokens (age 0 is unread); a masked output is passed over,
    # so the two older ones are masked too, where OpenCode's prune stops at it
    outputs = [(3000, 9, True), (3000, 8, True), (3000, 7, False), (3000, 3, True), (3000, 2, True),
               (3000, 1, True), (3000, 0, True)]  # fmt: skip
    assert _hidden_by(rule, outputs) == [9, 8, 3, 2]
    # the outputs past the protection hold exactly the minimum: masked (Gemini's "< minimum" test)
    exact = [(3000, 3, True), (3000, 2, True), (2000, 1, True), (5000, 0, True)]
    assert _hidden_by(rule, exact) == [3]
    assert _hidden_by(GeminiCliMasking(protect=5_000, minimum=3_001), exact) == []
    # an output no longer than the preview that would replace it counts, but stays
    small = [(3000, 4, True), (150, 3, True), (3000, 2, True), (3000, 1, True), (5000, 0, True)]
    assert _hidden_by(rule, small) == [4, 2]
    assert _hidden_by(GeminiCliMasking(protect=5_000, minimum=3_000, min_tokens=100), small) == [4, 3, 2]


def test_token_budget_keeps_newest_within_budget():
    seen, info = visible_sets(TokenBudget(budget=5_000), crafted([8000] * 8))
    assert all(len(v) <= 2 for v in seen)  # 2,000-token outputs, ~5,000 tokens in all
    assert seen[-1][-1] == 6  # the newest stored before the last call stays


@pytest.mark.parametrize(
    "policy",
    [NoManagement(), LastNObservations(5), ObservationMasking(5), AnthropicClearToolUses(trigger=1000),
     OpenCodePrune(), GeminiCliMasking(protect=2000, minimum=1000), TokenBudget(3000)],
)  # fmt: skip
def test_baselines_run_on_bundled_data_and_act_in_batch(policy):
    env = ReplayEnv(max_items=N, sequential=True)
    obs, info = env.reset(seed=0)
    policy.reset(info)
    for _ in range(40):
        a = policy.act(obs, info)
        assert a["enable"].dtype == np.int8 and not (a["enable"] & a["disable"]).any()
        obs, _, done, _, info = env.step(a)
        if done:
            obs, info = env.reset()
            policy.reset(info)
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    b = policy.act_batch(batch)
    assert b["disable"].shape == (2, N)


def test_act_batch_takes_a_vector_envs_infos():
    """gymnasium's vector envs give one dict of arrays ("_key": which rows carry key), not a list."""
    from gymnasium.vector import SyncVectorEnv

    from dtoc_rl.policies.base import batch_infos
    from dtoc_rl.policies.registry import make_policy

    venv = SyncVectorEnv([lambda: ReplayEnv(max_items=8) for _ in range(2)])  # two episodes, seeds 0 and 1
    obs, infos = venv.reset(seed=0)
    rows = batch_infos(infos, 2)
    assert [sorted(r) for r in rows] == [sorted(k for k in infos if not k.startswith("_"))] * 2
    assert list(rows[1]["slot_steps"]) == list(infos["slot_steps"][1])
    assert list(rows[1]["action_mask"]["enable"]) == list(infos["action_mask"]["enable"][1])
    policy = make_policy("hide_big:tokens=500")
    act = policy.act_batch(obs, infos)
    assert act["enable"].shape == (2, 8)
    for _ in range(400):  # on to an episode's end: the ended row carries its final info, the other not
        obs, _, term, trunc, infos = venv.step(policy.act_batch(obs, infos))
        if (term | trunc).any():
            break
    rows = batch_infos(infos, 2)
    assert [("totals" in r) for r in rows] == list(term | trunc) and any(term | trunc)
    assert batch_infos({"d": {}, "_d": np.array([True, True])}, 2) == [{"d": {}}, {"d": {}}]
    with pytest.raises(ValueError, match="3 infos for a batch of 2 observations"):
        batch_infos([{}, {}, {}], 2)
    with pytest.raises(ValueError, match=r"infos\['a'\] has 4 rows for a batch of 2"):
        batch_infos({"a": np.arange(4)}, 2)
    venv.close()
