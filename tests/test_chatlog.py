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
