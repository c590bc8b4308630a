"""Small hand-made trajectories shared by several tests."""

from __future__ import annotations

import json

from dtoc_rl.data.schema import Step, Trajectory

BODY = "def alpha_function(argument):\n    return argument * 2\n"


def bash(i: int, cmd: str, out: str) -> Step:
    return Step(index=i, turn=i, tool_name="bash", tool_args=json.dumps({"command": cmd}), output=out)


def reaccess_trajectory(model_raw: str = "gpt-4o", echo: bool = True) -> Trajectory:
    """``cat a.py``, ``ls``, [``echo hi``,] ``cat a.py`` again, then a final answer: the last ``cat`` is
    a re-access of the first output (a need ReplayEnv does not count as a miss)."""
    steps = [bash(0, "cat a.py", BODY), bash(1, "ls", "a.py b.py")]
    if echo:
        steps.append(bash(2, "echo hi", "hi"))
    steps.append(bash(len(steps), "cat a.py", BODY))
    steps.append(Step(index=len(steps), turn=len(steps), assistant_text="done"))
    return Trajectory(
        "t/1", "openai-chat", model_raw, "gpt-4o", "t1", task_text="look at the files", steps=steps
    )
