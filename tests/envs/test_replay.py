import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.features import ITEM_FEATURES
from dtoc_rl.schema import Need, Step, Trajectory

N = 16


def _noop(n=N):
    return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}


def _traj(outputs, needs=None, family="claude-sonnet", success=True):
    """Crafted trajectory: step k outputs outputs[k] chars; needs: {step: [earlier steps]}."""
    needs = needs or {}
    steps = []
    for k, size in enumerate(outputs):
        steps.append(
            Step(
                index=k,
                assistant_text=f"thinking {k}",
                tool_name="bash",
                tool_args=f"cat f{k}",
                output="x" * size,
                output_tokens=-(-size // 4),
                needs=[Need(step=j, kind="provenance", evidence="span") for j in needs.get(k, [])],
            )
        )
    return Trajectory(
        traj_id="crafted/1", source="test", model_raw=family, model_family=family, task_id="t1",
        task_text="do it", success=success, steps=steps,
    )  # fmt: skip


def test_check_env_and_registered_id_on_bundled_data():
    env = gym.make("dtoc_rl/Replay-v0", max_items=N)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert set(info["action_mask"]) == {"enable", "disable"}


def test_no_management_return_is_minus_one():
    env = ReplayEnv(trajectories=[_traj([4000] * 6)], max_items=N)
    env.reset(seed=0)
    ret, done = 0.0, False
    while not done:
        _, r, done, _, info = env.step(_noop())
        ret += r
    assert ret == pytest.approx(-1.0)
    assert info["totals"]["dollars"] == pytest.approx(info["all_visible"]["dollars"])
    assert info["totals"]["input_tokens"] == info["all_visible"]["input_tokens"]


def _run(env, policy):
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        obs, _, done, _, info = env.step(policy(obs))
    return info


def _hide_all_but_newest(obs):
    a = _noop()
    a["disable"][:] = obs["disable_mask"]
    newest = int(obs["item_mask"].sum()) - 1
    a["disable"][newest] = 0
    return a


def test_hiding_unneeded_outputs_saves_tokens_without_misses():
    env = ReplayEnv(trajectories=[_traj([8000] * 8)], max_items=N)
    info = _run(env, _hide_all_but_newest)
    assert info["totals"]["misses"] == 0
    assert info["totals"]["input_tokens"] < 0.5 * info["all_visible"]["input_tokens"]
    # placeholders are what remains of hidden outputs in the prompts
    assert info["totals"]["placeholder_tokens"] > 0


def test_needed_hidden_output_is_a_miss_and_reread():
    env = ReplayEnv(trajectories=[_traj([8000] * 6, needs={5: [0]})], max_items=N)
    info = _run(env, _hide_all_but_newest)
    assert info["totals"]["misses"] == 1 and info["totals"]["rereads"] == 1
    assert info["totals"]["extra_calls"] == 1


def test_reenabling_before_the_need_avoids_the_miss():
    def policy(obs):
        a = _hide_all_but_newest(obs)
        if obs["globals"][2] == 5:  # calls done: the next call (index 5) needs output 0
            a["disable"][0] = 0
            a["enable"][0] = obs["enable_mask"][0]
        return a

    env = ReplayEnv(trajectories=[_traj([8000] * 6, needs={5: [0]})], max_items=N)
    assert _run(env, policy)["totals"]["misses"] == 0


def test_fail_mode_ends_episode_with_failure():
    env = ReplayEnv(
        trajectories=[_traj([8000] * 6, needs={3: [0]})], max_items=N, miss="fail", fail_penalty=5
    )
    obs, _ = env.reset(seed=0)
    steps, done = 0, False
    while not done:
        obs, r, done, _, info = env.step(_hide_all_but_newest(obs))
        steps += 1
    assert steps == 3 and info["totals"]["failed"] and info["success"] is False
    assert r <= -5.0  # the fail penalty


def test_cache_break_makes_late_hiding_cost_more_than_its_token_savings_suggest():
    """Hiding output 0 rewrites the whole cached suffix once; with claude prices the writes are dearer."""
    env = ReplayEnv(trajectories=[_traj([400] * 10)], max_items=N)

    def hide_first_once(obs):
        a = _noop()
        if obs["globals"][2] == 9:
            a["disable"][0] = 1
        return a

    info = _run(env, hide_first_once)
    assert info["totals"]["input_tokens"] < info["all_visible"]["input_tokens"]
    assert info["totals"]["cache_write_tokens"] > info["all_visible"]["cache_write_tokens"]


def test_agent_overhead_costs_a_call_per_change_step():
    env_o = ReplayEnv(trajectories=[_traj([8000] * 6)], max_items=N, overhead="orchestrator")
    env_a = ReplayEnv(trajectories=[_traj([8000] * 6)], max_items=N, overhead="agent")
    io, ia = _run(env_o, _hide_all_but_newest), _run(env_a, _hide_all_but_newest)
    assert io["totals"]["extra_calls"] == 0
    assert ia["totals"]["extra_calls"] == ia["totals"]["mgmt_calls"] == io["totals"]["mgmt_calls"] > 0
    assert ia["totals"]["dollars"] > io["totals"]["dollars"]


def test_invalid_actions_are_counted_and_ignored():
    env = ReplayEnv(trajectories=[_traj([100] * 4)], max_items=N)
    env.reset(seed=0)
    a = _noop()
    a["enable"][N - 1] = 1  # padding slot
    a["enable"][0] = a["disable"][0] = 1  # conflict
    obs, _, _, _, info = env.step(a)
    assert info["invalid_actions"] == 2
    assert obs["items"][0, 2] == 1.0  # still visible


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"enable": np.zeros(3, np.int8), "disable": np.zeros(N, np.int8)}, "shape"),
        ({"enable": np.zeros(N, np.float32), "disable": np.zeros(N, np.int8)}, "dtype"),
        (np.zeros(N), "dict with keys"),
    ],
)
def test_bad_action_names_expected_space(bad, msg):
    env = ReplayEnv(trajectories=[_traj([100] * 4)], max_items=N)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=msg) as e:
        env.step(bad)
    assert "MultiBinary" in str(e.value) or "Dict" in str(e.value)


def test_empty_filter_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no usable trajectory.*families present"):
        ReplayEnv(model_family="no-such-family")


def test_seeding_is_deterministic():
    def roll(seed):
        env = ReplayEnv(max_items=N)
        env.action_space.seed(seed)
        obs, info = env.reset(seed=seed)
        ids, rs = [info["traj_id"]], []
        for _ in range(60):
            obs, r, term, _, info = env.step(env.action_space.sample())
            rs.append(r)
            if term:
                obs, info = env.reset()
                ids.append(info["traj_id"])
        return ids, rs

    assert roll(7) == roll(7)
    assert roll(7) != roll(8)


def test_filters_by_family_and_source():
    env = ReplayEnv(source="tau-bench", max_items=N)
    assert {e.source for e in env.episodes} == {"tau-bench"}
    env = ReplayEnv(model_family=["gemini-3-pro"], max_items=N)
    assert {e.model_family for e in env.episodes} == {"gemini-3-pro"}


def test_text_view_lists_store_and_reasoning():
    env = ReplayEnv(trajectories=[_traj([100] * 4)], max_items=N, text_view=True, render_mode="ansi")
    obs, info = env.reset(seed=0)
    obs, *_, info = env.step(_noop())
    obs, *_, info = env.step(_hide_all_but_newest(obs))
    assert "t0000 [HIDDEN]" in info["text"] and "t0002 [visible]" in info["text"]
    assert "thinking 2" in info["text"] and env.render() == env.text()


def test_window_shows_most_recent_outputs():
    env = ReplayEnv(trajectories=[_traj([100] * 30)], max_items=8)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        obs, *_, info = env.step(_noop(8))
    assert obs["item_mask"].sum() == 8
    assert list(info["slot_steps"]) == list(range(13, 21))


@pytest.mark.parametrize("vec", [SyncVectorEnv, AsyncVectorEnv])
def test_vector_envs(vec):
    envs = vec([lambda: ReplayEnv(max_items=N) for _ in range(2)])
    obs, _ = envs.reset(seed=1)
    assert obs["items"].shape == (2, N, len(ITEM_FEATURES))
    for _ in range(30):
        obs, r, term, trunc, info = envs.step(envs.action_space.sample())
        assert r.shape == (2,)
    envs.close()
