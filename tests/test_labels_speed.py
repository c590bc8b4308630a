"""The shell parser stays linear on long arguments (a client may send a cut JSON text as the command)."""

import json
import time

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.labels import label_trajectory


def test_a_long_run_of_digits_is_parsed_in_linear_time():
    # `\d*>&\d+` tried from every position of a 20k-digit run took ~0.15 s per step (seconds per request
    # in the service); anchored at the run's start it is linear
    steps = [
        Step(
            index=k,
            turn=k,
            tool_name="bash",
            tool_args='{"command": "cat f", "content": "' + str(k) * 20_000,
            output="ok",
        )
        for k in range(10)
    ]
    traj = Trajectory(
        traj_id="t", source="test", model_raw="m", model_family="other", task_id="x", steps=steps
    )
    t0 = time.perf_counter()
    label_trajectory(traj)
    assert time.perf_counter() - t0 < 0.5


def test_devnull_redirections_are_still_dropped():
    from dtoc_rl.labels.shell import _DEVNULL

    line = "cat x 2>&1 | grep y > /dev/null; ls 2>/dev/null; echo a1>&2; x 12>>/dev/null; y &>/dev/null"
    assert _DEVNULL.sub(" ", line).split() == [
        "cat",
        "x",
        "|",
        "grep",
        "y",
        ";",
        "ls",
        ";",
        "echo",
        "a",
        ";",
        "x",
        ";",
        "y",
    ]


def test_a_shell_script_holding_a_whole_file_is_labelled_in_linear_time():
    # `bash -lc "cat > f.py <<'EOF' ... EOF"` is how Codex writes a file; splitting it with shlex took
    # 2.6 s for 240 KB (quadratic), the labeller's own lexer about 0.4 s
    body = "x = 1\n" * 40_000
    cmd = f"bash -lc \"cat > f.py <<'EOF'\n{body}EOF\""
    steps = [Step(index=0, turn=0, tool_name="bash", tool_args=json.dumps({"command": cmd}), output="")]
    traj = Trajectory(
        traj_id="t", source="test", model_raw="m", model_family="other", task_id="x", steps=steps
    )
    t0 = time.perf_counter()
    label_trajectory(traj)
    assert time.perf_counter() - t0 < 1.5
    assert traj.steps[0].write_resources == ["f.py"]  # the script was read, not the wrapper
