"""Trajectories as OpenAI chat logs (shared by the Orchestrator's save_log and the env recorder)."""

from __future__ import annotations

from dtoc_rl.data.chatlog import trajectory_to_chat, visibility
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory
from dtoc_rl.ingest.openai_chat import chat_to_steps


def _traj() -> Trajectory:
    steps = [
        Step(index=0, turn=0, assistant_text="look", reasoning="first read", tool_name="bash",
             tool_args='{"command": "ls"}', tool_call_id="c0", output="a.py", masked_before=[]),
        Step(index=1, turn=1, assistant_text="two at once", reasoning="both", tool_name="bash",
             tool_args='{"command": "cat a.py"}', tool_call_id=None, output="x = 1", masked_before=[]),
        Step(index=2, turn=1, tool_name="read_file", tool_args="", tool_call_id="c2", output="y = 2",
             masked_before=[]),
        Step(index=3, turn=2, user_text="go on", assistant_text="done", masked_before=[0],
             events=[ContextEvent(kind="disable", targets=[0], detail="t0000")]),
    ]  # fmt: skip
    return Trajectory(traj_id="t/1", source="test", model_raw="m", model_family="other", task_id="t",
                      task_text="do it", system_prompt="sys", steps=steps)  # fmt: skip


def test_turns_become_assistant_messages_with_parallel_calls_and_raw_outputs():
    msgs = trajectory_to_chat(_traj())
    assert [m["role"] for m in msgs] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "tool", "user", "assistant",
    ]  # fmt: skip
    calls = msgs[4]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["bash", "read_file"]
    assert calls[0]["id"] == "call_0001_0"  # made up when the log has none
    assert calls[1]["function"]["arguments"] == "{}"
    assert [m["tool_call_id"] for m in msgs[5:7]] == ["call_0001_0", "c2"]
    assert msgs[6]["content"] == "y = 2" and msgs[7]["content"] == "go on"
    assert not any("reasoning_content" in m for m in msgs)


def test_reasoning_is_kept_on_request_and_read_back_by_the_ingester():
    traj = _traj()
    msgs = trajectory_to_chat(traj, reasoning=True)
    assert msgs[2]["reasoning_content"] == "first read" and "reasoning_content" not in msgs[-1]
    back = chat_to_steps(msgs)
    assert back.system == "sys" and back.task == "do it"
    keep = ("turn", "user_text", "assistant_text", "reasoning", "tool_name", "output")
    assert [[getattr(s, k) for k in keep] for s in back.steps] == [
        [getattr(s, k) for k in keep] for s in traj.steps
    ]


def test_visibility_lists_only_steps_with_hidden_outputs_or_events():
    assert visibility(_traj()) == {
        "3": {"masked_before": [0], "events": [{"kind": "disable", "targets": [0], "detail": "t0000"}]}
    }


def _chain(schedules: list[list[int] | None]) -> Trajectory:
    steps = [
        Step(index=i, turn=i, tool_name="bash", tool_args="{}", tool_call_id=f"c{i}", output=f"out {i}",
             masked_before=m)
        for i, m in enumerate(schedules)
    ]  # fmt: skip
    return Trajectory(traj_id="t/2", source="test", model_raw="m", model_family="other", task_id="t",
                      task_text="do it", steps=steps)  # fmt: skip


def _read_back(traj: Trajectory, vis) -> list[list[int] | None]:
    import json

    from dtoc_rl.ingest.openai_chat import apply_visibility

    back = chat_to_steps(trajectory_to_chat(traj))
    for i, s in enumerate(back.steps):  # as the ingester numbers them
        s.index = i
    t = Trajectory(
        traj_id="t/3", source="test", model_raw="m", model_family="other", task_id="t", steps=back.steps
    )
    apply_visibility(t, json.dumps(vis))
    return [s.masked_before for s in t.steps]


def test_a_long_sessions_hidden_steps_are_written_as_changes_and_read_back_whole():
    import random

    rng = random.Random(0)
    for _ in range(20):
        hidden: set[int] = set()
        schedules: list[list[int] | None] = []
        for i in range(60):
            if rng.random() < 0.05:
                schedules.append(None)  # unknown: the next step must list its steps again
                continue
            for j in range(i):
                if rng.random() < 0.08:
                    hidden ^= {j}
            schedules.append(sorted(hidden))
        traj = _chain(schedules)
        vis = visibility(traj)
        assert _read_back(traj, vis) == schedules
        # changes, where shorter than the list, and the map says it holds some: a reader of whole lists
        # only (which takes a step not listed or an unknown key's step as "nothing hidden") refuses it
        assert vis.pop("format") == 2 and any("hide" in e for e in vis.values())
        assert all(k.isdigit() for k in vis)
        vis["format"] = 2
    # a session that hides one more output a call: the log holds one step per call, not all of them
    grow = _chain([list(range(i)) for i in range(300)])
    vis = visibility(grow)
    assert (
        sum(len(e.get("hide", e.get("masked_before") or [])) for k, e in vis.items() if k != "format") == 299
    )
    assert "format" not in visibility(_chain([[], [0], [1]]))  # whole lists only: as before
    assert _read_back(grow, vis) == [list(range(i)) for i in range(300)]


def test_bad_changes_to_the_hidden_steps_are_errors_that_say_what():
    import pytest

    from dtoc_rl.ingest.base import IngestError

    traj = _chain([[], [0], [0, 1], [1]])
    bad = [
        ({"1": {"hide": [0]}, "2": {"hide": [0]}}, "hides a step already hidden or shows one not hidden"),
        ({"1": {"show": [0]}}, "hides a step already hidden or shows one not hidden"),
        ({"1": {"hide": [0], "masked_before": [0]}}, "both masked_before and hide/show"),
        ({"0": {"masked_before": None}, "1": {"hide": [0]}}, "changes to an unknown schedule"),
        ({"1": {"hide": [3]}}, "step 1 hide must be a list of distinct earlier steps"),
        ({"2": {"show": "0"}}, "step 2 show must be a list"),
        ({"format": 3}, "format 3 is not one this version reads"),
    ]
    for vis, says in bad:
        with pytest.raises(IngestError, match=says):
            _read_back(traj, vis)
    assert _read_back(traj, {"1": {"hide": [0]}, "2": {"hide": [1]}, "3": {"show": [0]}}) == [
        [],
        [0],
        [0, 1],
        [1],
    ]
