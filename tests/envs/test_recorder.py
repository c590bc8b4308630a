import json

import gymnasium as gym
import numpy as np
import pytest

from dtoc_rl.cli import main
from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.envs import LiveEnv, ReplayEnv
from dtoc_rl.envs.agents import ScriptedAgent
from dtoc_rl.envs.recorder import RecordTrajectory, read_rows, trajectory_to_chat
from dtoc_rl.ingest.openai_chat import chat_to_steps

N = 8


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


SCRIPT = [
    call("read_file", path="pager.py"),
    "Let me think about the slice.",
    {
        "content": "Two calls at once.",
        "tool_calls": [
            call("bash", command="ls"),
            call("read_file", path="test_pager.py", start_line=1, end_line=3),
        ],
    },
    call(
        "str_replace",
        path="pager.py",
        old_str="start = page * per_page",
        new_str="start = (page - 1) * per_page",
    ),
    call("read_file", path="pager.py"),
    call("submit"),
]


def hide_first(obs, info):
    a = {"enable": np.zeros(N, np.int8), "disable": np.zeros(N, np.int8)}
    a["disable"][0] = obs["disable_mask"][0]
    return a


def record(tmp_path, fmt, episodes=2, name="live.jsonl"):
    env = RecordTrajectory(
        LiveEnv(ScriptedAgent(SCRIPT), tasks=["pagination"], max_items=N), tmp_path / name, format=fmt
    )
    for ep in range(episodes):
        obs, info = env.reset(seed=ep)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(hide_first(obs, info))
            done = term or trunc
        assert info["success"]
    env.close()
    return env


def test_live_chat_jsonl_reingests_with_the_same_tool_steps(tmp_path):
    env = record(tmp_path, "chat")
    path = tmp_path / "live.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["success"] is True
    vis = json.loads(rows[0]["dtoc_visibility"])
    assert vis["1"]["events"][0] == {"kind": "disable", "targets": [0], "detail": "t0000"}
    out = tmp_path / "ds"
    assert main(["ingest", str(path), "-o", str(out), "--workers", "1", "--quiet"]) == 0
    back = load_trajectories(out)
    assert len(back) == 2
    for orig, new in zip(env.recorded, back):
        assert new.source == "openai-chat" and new.success is True and new.task_id == "pagination"
        tools = [s for s in orig.steps if s.tool_name]
        assert sum(1 for s in new.steps if s.tool_name) == len(tools) == 6
        assert len(new.steps) == len(orig.steps)
        for a, b in zip(orig.steps, new.steps):
            assert (a.tool_name, a.output, a.assistant_text, a.turn) == (
                b.tool_name,
                b.output,
                b.assistant_text,
                b.turn,
            )
            assert json.loads(a.tool_args or "{}") == json.loads(b.tool_args or "{}")
            # what the policy hid, and when, comes back too (masked logs replay, clone, calibrate)
            assert (a.masked_before or []) == b.masked_before and a.events == b.events
        assert any(s.masked_before for s in new.steps) and any(s.events for s in new.steps)
        assert "dtoc_visibility" in new.extra_dict()
    # the re-ingested dataset replays
    replay = ReplayEnv(out, max_items=N)
    replay.reset(seed=0)


def test_rows_keep_the_canonical_schema_with_visibility(tmp_path):
    env = record(tmp_path, "rows", episodes=1, name="rows.jsonl")
    (t,) = read_rows(tmp_path / "rows.jsonl")
    orig = env.recorded[0]
    assert t.to_row() == json.loads(json.dumps(orig.to_row()))
    steps = t.steps
    assert steps[1].events[0].kind == "disable" and steps[1].events[0].targets == [0]
    assert steps[0].masked_before == [] and all(s.masked_before == [0] for s in steps[1:])
    assert steps[1].tool_name is None and "no tool call" in steps[2].user_text
    assert steps[2].turn == steps[3].turn and steps[3].assistant_text == ""
    # the online labels: the second read of pager.py re-accessed the hidden first one
    assert any(n.step == 0 and n.kind == "reaccess" for n in steps[5].needs)
    assert t.success is True and t.cost_usd > 0 and t.api_calls == 6
    assert json.loads(t.extra)["totals"]["misses"] >= 1


def test_dataset_format_loads_and_replays(tmp_path):
    record(tmp_path, "dataset", episodes=2, name="ds")
    trajs = load_trajectories(tmp_path / "ds")
    assert len(trajs) == 2 and trajs[0].steps[1].masked_before == [0]
    env = ReplayEnv(tmp_path / "ds", max_items=N)
    env.reset(seed=0)
    with pytest.raises(FileExistsError):
        RecordTrajectory(LiveEnv(ScriptedAgent([]), max_items=N), tmp_path / "ds", format="dataset")


def _crafted():
    steps = [
        Step(index=k, turn=k, assistant_text=f"step {k}", tool_name="bash",
             tool_args=f'{{"command": "cat f{k}"}}', output="x" * 400, output_tokens=100)
        for k in range(6)
    ]  # fmt: skip
    return Trajectory(
        traj_id="crafted/1", source="test", model_raw="gpt-4o", model_family="gpt-4o", task_id="t",
        task_text="do it", success=True, steps=steps,
    )  # fmt: skip


def _recorded_replay(traj, tmp_path):
    """``traj`` replayed in ReplayEnv under hide_first, as RecordTrajectory writes it back."""
    env = RecordTrajectory(
        ReplayEnv(trajectories=[traj], max_items=N), tmp_path / "replay.jsonl", format="rows", source=[traj]
    )
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(hide_first(obs, info))
        done = term or trunc
    (t,) = read_rows(tmp_path / "replay.jsonl")
    return t


def test_replay_env_is_recorded_with_the_policy_schedule(tmp_path):
    traj = _crafted()
    t = _recorded_replay(traj, tmp_path)
    assert len(t.steps) == 6
    assert [s.masked_before for s in t.steps] == [[], [0], [0], [0], [0], [0]]
    assert t.steps[1].events[0].kind == "disable" and t.steps[1].events[0].targets == [0]
    assert all(not s.events for s in t.steps[2:])
    assert json.loads(t.extra)["replay"]["totals"]["changes"] == 1


def test_chat_conversion_round_trips_through_the_ingester():
    traj = _crafted()
    cp = chat_to_steps(trajectory_to_chat(traj))
    assert [s.output for s in cp.steps] == [s.output for s in traj.steps]
    assert cp.task == "do it"


def test_unsupported_env_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="LiveEnv"):
        RecordTrajectory(gym.make("CartPole-v1"), tmp_path / "x.jsonl")


def test_every_step_of_a_parallel_turn_is_recorded_with_what_its_model_call_saw(tmp_path):
    """A turn of three parallel tool calls is one model call: all three of its steps were made with
    output 0 hidden (as the online tracker records them), not only the first."""
    from dataclasses import replace

    traj = _crafted()
    traj.steps = [replace(s, turn=t) for s, t in zip(traj.steps, [0, 1, 2, 2, 2, 3])]
    t = _recorded_replay(traj, tmp_path)
    assert [s.masked_before for s in t.steps] == [[], [0], [0], [0], [0], [0]]
    assert [len(s.events) for s in t.steps] == [0, 1, 0, 0, 0, 0]  # the change is made once, before call 1


def test_a_harnesss_own_changes_are_masked_but_no_event_of_the_policys(tmp_path):
    from dtoc_rl.policies.baselines import OnHarness
    from tests.policies.test_on_harness import HideOne, windowed

    traj = windowed()
    env = RecordTrajectory(
        ReplayEnv(trajectories=[traj], max_items=N, expose_episode=True), tmp_path / "h.jsonl", format="rows",
        source=[traj],
    )  # fmt: skip
    policy = OnHarness(HideOne())  # the window drops output 0 from step 3 on, the policy hides 1 there
    obs, info = env.reset(seed=0)
    policy.reset(info)
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(policy.act(obs, info))
        done = term or trunc
    (t,) = read_rows(tmp_path / "h.jsonl")
    assert t.steps[3].masked_before == [0, 1]
    assert [(e.kind, e.targets) for e in t.steps[3].events] == [("disable", [1])]
