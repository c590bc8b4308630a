"""LiveEnv's tools against hostile or malformed calls: checked arguments, bounded reads, no hard
links or special files, an allow-listed shell environment, and nothing raised out of a step."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtoc_rl.envs import LiveEnv
from dtoc_rl.envs.agents import ScriptedAgent
from dtoc_rl.envs.tools import TOOL_NAMES, Toolbox, ToolResult

N = 8


@pytest.fixture
def work(tmp_path):
    w = tmp_path / "work"
    w.mkdir()
    (w / "a.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    return w


def _in_time(fn, seconds=10.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it blocks."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the tool call blocked"
    return out[0]


# -- numeric arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [1e999, -1e999, float("nan"), "3", "abc", -2, 0, 2.5, True, [1], {"a": 1}],
)
@pytest.mark.parametrize("arg", ["start_line", "end_line"])
def test_bad_line_numbers_are_error_outputs(work, arg, value):
    res = Toolbox(work).run("read_file", {"path": "a.py", arg: value})
    assert res.is_error and res.output.startswith(f"[error] read_file: '{arg}'"), res.output


def test_line_numbers_as_json_text_too(work):
    res = Toolbox(work).run("read_file", '{"path": "a.py", "start_line": 1e999}')
    assert res.is_error and "'start_line' must be a whole number" in res.output
    ok = Toolbox(work).run("read_file", {"path": "a.py", "start_line": 3.0, "end_line": 10**30})
    assert not ok.is_error and ok.output.startswith("line 3\n") and ok.output.endswith("line 20\n")


# -- bounded reads ---------------------------------------------------------------------------------


def _run_in_child(work, calls, **box_kw):
    """Run tool calls in a fresh process; returns their results and how much its peak memory
    grew (MB) while they ran, unaffected by what this test process did before."""
    code = textwrap.dedent(
        f"""
        import json, resource, sys
        from dtoc_rl.envs.tools import Toolbox
        box = Toolbox({str(work)!r}, **{box_kw!r})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = [vars(box.run(name, args)) for name, args in {calls!r}]
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        json.dump({{"results": out, "grew_mb": grew}}, sys.stdout)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return [ToolResult(**r) for r in data["results"]], data["grew_mb"]


def test_a_huge_sparse_file_is_never_read_whole(work):
    big = work / "big.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB of holes: costs no disk, 1 GiB of memory if read whole
        f.seek((1 << 30) - 9)
        f.write(b"\nthe end\n")
    calls = [
        ("read_file", {"path": "big.bin"}),
        ("read_file", {"path": "big.bin", "start_line": 2}),  # line 1 is 1 GiB long
        ("read_file", {"path": "big.bin", "end_line": 1}),
        ("str_replace", {"path": "big.bin", "old_str": "end", "new_str": "END"}),
    ]
    (whole, ranged, first, edit), grew = _run_in_child(work, calls)
    limit = Toolbox(work).max_output_chars
    assert not whole.is_error and "the file is 1073741824 bytes" in whole.output
    assert whole.output.endswith("the end\n") and len(whole.output) < limit + 300
    assert "stopped scanning" in ranged.output and len(ranged.output) <= limit
    assert "stopped after" in first.output and len(first.output) <= limit
    assert edit.is_error and "over the" in edit.output
    assert grew < 200  # MB; reading it whole would add more than 1,000


def test_a_command_printing_hundreds_of_megabytes_is_kept_in_bounded_memory(work):
    cmd = "head -c 300000000 /dev/zero | tr '\\0' a; echo; echo THE-END; exit 3"
    small_cmd = "printf 'x%.0s' $(seq 1 30000)"  # 30,000 characters: cut as before
    (res, small), grew = _run_in_child(
        work, [("bash", {"command": cmd}), ("bash", {"command": small_cmd})], timeout=60
    )
    assert grew < 100  # MB; keeping the output would add 300 (600 as text)
    assert res.is_error and res.returncode == 3
    assert res.output.startswith("aaaa") and res.output.endswith("THE-END\n\n[exit code 3]")
    assert "bytes cut ...]" in res.output and len(res.output) < Toolbox(work).max_output_chars + 100
    assert small.output.startswith("x" * 5000 + "\n[... 20000 characters cut ...]\n")


def test_a_line_range_of_a_large_file_is_found_by_scanning(work):
    lines = [f"row {i:07d} " + "x" * 80 + "\n" for i in range(1, 30_001)]  # ~2.8 MB
    (work / "log.txt").write_text("".join(lines))
    res = Toolbox(work).run("read_file", {"path": "log.txt", "start_line": 25_000, "end_line": 25_002})
    assert res.output == "".join(lines[24_999:25_002])


# -- hard links and special files -----------------------------------------------------------------------


def test_hard_links_are_refused_and_the_outside_file_is_untouched(work, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    os.link(secret, work / "inside.txt")
    box = Toolbox(work)
    for name, args in [
        ("read_file", {"path": "inside.txt"}),
        ("write_file", {"path": "inside.txt", "content": "overwritten"}),
        ("str_replace", {"path": "inside.txt", "old_str": "top", "new_str": "no"}),
    ]:
        res = box.run(name, args)
        assert res.is_error and "hard links" in res.output and "top secret" not in res.output, res.output
    assert secret.read_text() == "top secret\n"


def test_fifos_and_sockets_are_refused_without_blocking(work):
    os.mkfifo(work / "pipe")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(work / "sock"))
    try:
        box = Toolbox(work)
        for path in ("pipe", "sock"):
            for name, args in [
                ("read_file", {"path": path}),
                ("write_file", {"path": path, "content": "x"}),
                ("str_replace", {"path": path, "old_str": "a", "new_str": "b"}),
            ]:
                res = _in_time(lambda n=name, a=args: box.run(n, a))
                assert res.is_error and "not a regular file" in res.output, res.output
    finally:
        sock.close()


def test_device_files_are_refused(work):
    try:
        os.mknod(work / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    res = _in_time(lambda: Toolbox(work).run("read_file", {"path": "zero"}))
    assert res.is_error and "not a regular file" in res.output


# -- the shell's environment -------------------------------------------------------------------------


LEAKY = {
    "AUTH": "v-auth",
    "COOKIE": "v-cookie",
    "DATABASE_URL": "v-dburl",
    "PASSWD": "v-passwd",
    "PAT": "v-pat",
    "PRIVATE": "v-private",
    "SSH_AUTH_SOCK": "v-sshsock",
    "MY_API_KEY": "v-apikey",
    "GITHUB_TOKEN": "v-ghtoken",
    "AWS_SECRET_ACCESS_KEY": "v-aws",
    "PYTHON_KEYRING_PASSWORD": "v-pykeyring",
    "SOME_UNKNOWN_THING": "v-unknown",
    "PYTHONPATH": "/v-pythonpath",
}
KEPT = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "7", "TZ": "UTC"}


def test_the_shell_gets_an_allow_listed_environment(work, monkeypatch):
    for k, v in {**LEAKY, **KEPT}.items():
        monkeypatch.setenv(k, v)
    res = Toolbox(work).run("bash", {"command": "env"})
    env = dict(line.split("=", 1) for line in res.output.splitlines() if "=" in line)
    leaked = [k for k, v in LEAKY.items() if v in res.output]
    assert leaked == []
    for k, v in KEPT.items():
        assert env.get(k) == v
    assert env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") == "1"
    extra = Toolbox(work, env_allow=["SOME_UNKNOWN_THING"]).run("bash", {"command": "env"})
    assert "v-unknown" in extra.output


# -- malformed calls --------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["a.py", "../x", "/etc/passwd", "", "\x00", "sub/b.py", "."]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
arg_keys = st.sampled_from(
    ["path", "file_path", "start_line", "end_line", "content", "old_str", "new_str", "summary", "x"]
)
arguments = (
    st.fixed_dictionaries(
        {"path": st.sampled_from(["a.py", "new.py"])},
        optional={"start_line": json_values, "end_line": json_values, "content": json_values},
    )
    | st.dictionaries(arg_keys, json_values, max_size=5)
    | json_values
    | st.text(max_size=40)
    | st.dictionaries(arg_keys, json_values, max_size=5).map(json.dumps)
)
# bash is left out: random text run as a shell command could do anything.
names = st.sampled_from([n for n in TOOL_NAMES if n != "bash"] + ["finish", "nope", ""]) | st.text(
    max_size=10
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, args=arguments)
def test_no_malformed_call_raises_out_of_toolbox_run(work, name, args):
    res = Toolbox(work).run(name, args)
    assert isinstance(res, ToolResult) and isinstance(res.output, str) and res.output


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["read_file", "str_replace", "write_file"]), start=json_values, end=json_values)
def test_no_line_range_raises_out_of_the_file_tools(work, name, start, end):
    args = {
        "path": "a.py",
        "start_line": start,
        "end_line": end,
        "old_str": "line 3\n",
        "new_str": "line 3\n",
    }
    res = Toolbox(work).run(name, args)
    assert isinstance(res, ToolResult) and res.output


DEEP = "[" * 50_000 + "]" * 50_000
CORPUS = [
    {"name": "read_file", "arguments": {"path": "pager.py", "start_line": 1e999}},
    {"name": "read_file", "arguments": '{"path": "pager.py", "start_line": 1e999, "end_line": -1}'},
    {"name": "read_file", "arguments": {"path": "pager.py", "start_line": "7"}},
    {"name": "read_file", "arguments": DEEP},
    {"name": "manage_context", "arguments": DEEP},
    {"name": "manage_context", "arguments": {"enable": 5, "disable": [{"a": 1}, None]}},
    {"name": "bash", "arguments": {"command": "echo\x00hi"}},
    {"name": "bash", "arguments": {"command": ["ls"]}},
    {"name": "bash", "arguments": {"command": {"x": 1}}},
    {"name": "x" * 5000, "arguments": {}},
    {"name": "read_file", "arguments": {"path": {"a": 1}}},
    {"name": "read_file", "arguments": "[1, 2]"},
    {"name": "read_file", "arguments": "not json at all"},
    {"name": "write_file", "arguments": {"path": "new.py", "content": "\ud800"}},
    {"name": "write_file", "arguments": {"path": "", "content": "x"}},
    {"name": "str_replace", "arguments": {"path": "pager.py", "old_str": 5, "new_str": None}},
]
# Odd but usable: a line past the end reads nothing, extra arguments are ignored.
ODD_BUT_FINE = [
    {"name": "read_file", "arguments": {"path": "pager.py", "start_line": 10**400}},
    {"name": "read_file", "arguments": {"path": "pager.py", "nested": {"x": [float("inf")]}}},
]


def test_no_malformed_tool_call_raises_out_of_live_env_step():
    script = [*CORPUS, *ODD_BUT_FINE, {"name": "bash", "arguments": {"command": "echo still going"}}]
    env = LiveEnv(
        ScriptedAgent(script), tasks=["pagination"], max_items=N, max_steps=len(script), agent_can_manage=True
    )
    env.reset(seed=0)
    noop = {"enable": np.zeros(N, np.int8), "disable": np.zeros(N, np.int8)}
    done = False
    while not done:
        _, _, term, trunc, info = env.step(noop)
        done = term or trunc
    steps = env.trajectory().steps
    assert len(steps) == len(script)
    outs = [s.output for s in steps]
    assert "'start_line' must be a whole number" in outs[0]
    assert "nested too deeply" in outs[3] and "nested too deeply" in outs[4]
    assert all(s.output_is_error for s in steps[: len(CORPUS)])
    assert outs[-3] == "[empty]"
    assert "def page_count" in outs[-2]
    assert outs[-1].strip() == "still going"
    env.close()


def test_background_child_holding_the_output_does_not_stall_the_agent(tmp_path):
    # `server &` keeps the pipe open after the shell exits: the call returns after a short grace
    # period with what was printed, says the background process was stopped, and is not a timeout.
    import time

    from dtoc_rl.envs.tools import run_command

    t0 = time.monotonic()
    r = run_command("sleep 30 & echo started", tmp_path, timeout=20)
    took = time.monotonic() - t0
    assert took < 5, took
    assert not r.timed_out and r.returncode == 0 and not r.is_error
    assert r.output.startswith("started") and "background processes" in r.output
    # a child that lets go of the output finishes its words inside the grace period
    r = run_command("(sleep 0.2; echo late) & echo now", tmp_path, timeout=20)
    assert r.output == "now\nlate\n"
