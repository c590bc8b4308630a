import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.data.schema import Need, Step, Trajectory
from dtoc_rl.engine.features import ITEM_FEATURES
from dtoc_rl.envs import ReplayEnv

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
    env = ReplayEnv(trajectories=[_traj([4000] * 10)], max_items=N)  # past the 1,024-token cache minimum

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


def _actions(n, seed):
    """Random actions in every accepted form: int8/uint8 0/1, any non-zero integers, bools, lists."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(400):
        kind = i % 6
        e, d = rng.random(n) < 0.4, rng.random(n) < 0.3
        if kind == 0:
            out.append({"enable": e.astype(np.int8), "disable": d.astype(np.int8)})
        elif kind == 1:
            out.append({"enable": e * rng.integers(-3, 4, n), "disable": d * rng.integers(-200, 200, n)})
        elif kind == 2:
            out.append({"enable": e, "disable": d})
        elif kind == 3:
            out.append({"enable": (e * 255).astype(np.uint8), "disable": d.astype(np.uint8)})
        elif kind == 4:
            out.append({"enable": e.astype(int).tolist(), "disable": d.astype(int).tolist()})
        else:
            out.append(_noop(n))
    return out


def _rollout(env, actions):
    """Every observation, reward and info of a run, flattened to comparable values."""
    rows = []
    obs, info = env.reset(seed=0)
    for a in actions:
        obs, r, term, _, info = env.step(a)
        arrays = {k: (np.asarray(v).dtype, np.asarray(v).tolist()) for k, v in obs.items()}
        keys = ("step", "invalid_actions", "misses", "dollars", "active_tokens")
        rows.append((arrays, r, [info[k] for k in keys], info["slot_steps"].tolist()))
        if term:
            rows.append(info["totals"])
            env.reset()
    return rows


@pytest.mark.parametrize("max_items", [4, 64])
def test_action_decoding_paths_agree(monkeypatch, max_items):
    """Small windows are decoded byte by byte, large ones with boolean masks, and a few changed outputs
    are applied one by one, many at once: every combination gives the same episode."""
    import dtoc_rl.envs.replay as replay
    import dtoc_rl.sim.simulator as simulator

    needs = {k: [k - 3, k - 40] for k in range(40, 90, 5)}
    trajs = [_traj([300 + 50 * (k % 7) for k in range(90)], needs=needs)]
    acts = _actions(max_items, 1)
    runs = []
    for loop_slots, few in [(48, 8), (-1, 8), (10**9, 0), (-1, 10**9)]:
        monkeypatch.setattr(replay, "_LOOP_SLOTS", loop_slots)
        monkeypatch.setattr(replay, "_FEW", few)
        monkeypatch.setattr(simulator, "_FEW", few)
        runs.append(_rollout(ReplayEnv(trajectories=trajs, max_items=max_items), acts))
    assert all(r == runs[0] for r in runs[1:])


def test_invalid_actions_count_padding_and_conflicts_whatever_the_integers():
    env = ReplayEnv(trajectories=[_traj([100] * 6)], max_items=N)
    env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(_noop())
    assert obs["item_mask"].sum() == 4  # slots 0-3 hold outputs, 4-15 are padding
    e, d = np.zeros(N, np.int64), np.zeros(N, np.int64)
    e[[5, 9]] = [-1, 7]  # padding, set by any non-zero integer
    d[15] = 300
    e[1] = d[1] = 2  # a conflict: counted once, does nothing
    d[0] = -5  # a valid hide
    obs, *_, info = env.step({"enable": e, "disable": d})
    assert info["invalid_actions"] == 4
    assert obs["disable_mask"][:5].tolist() == [0, 1, 1, 1, 1]
    assert obs["enable_mask"][:5].tolist() == [1, 0, 0, 0, 0]
    # slot 4 now holds a visible output: enabling it does nothing and is not invalid; 5-15 are padding
    e[:] = 0
    e[4:] = 1
    obs, *_, info = env.step({"enable": e.astype(np.uint8), "disable": np.zeros(N, bool)})
    assert info["invalid_actions"] == 4 + (N - 5)
    assert obs["enable_mask"][:6].tolist() == [1, 0, 0, 0, 0, 0]


def test_deepcopy_mid_episode_continues_identically():
    import copy

    env = ReplayEnv(max_items=N)
    acts = _actions(N, 2)[:60]
    env.reset(seed=5)
    for a in acts[:7]:
        env.step(a)
    twin = copy.deepcopy(env)
    for a in acts[7:]:
        o1, r1, t1, _, i1 = env.step(a)
        o2, r2, t2, _, i2 = twin.step(a)
        assert r1 == r2 and t1 == t2 and i1["invalid_actions"] == i2["invalid_actions"]
        assert all(np.array_equal(o1[k], o2[k]) for k in o1)
        if t1:
            break


def test_constructor_and_reset_misuse_is_named():
    from dtoc_rl.data.dataset import load_trajectories
    from dtoc_rl.data.paths import bundled_dataset

    for bad in ("32", True, 0):
        with pytest.raises(ValueError, match="max_items must be an integer >= 1"):
            ReplayEnv(max_items=bad)
    trajs = load_trajectories(bundled_dataset())[:2]
    with pytest.raises(ValueError, match="give dataset or trajectories, not both"):
        ReplayEnv(dataset=bundled_dataset(), trajectories=trajs)
    env = ReplayEnv(trajectories=trajs)
    with pytest.raises(ValueError, match=r"unknown reset options \['traj'\]; known: 'traj_id', 'index'"):
        env.reset(options={"traj": trajs[1].traj_id})
    _, info = env.reset(options={"traj_id": trajs[1].traj_id})
    assert info["traj_id"] == trajs[1].traj_id
