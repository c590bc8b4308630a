"""Hindsight need labels (dtoc_rl.labels): crafted trajectories pin each rule; real traces check rates."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.labels import (
    Resource,
    label_stats,
    label_trajectory,
    modified_between,
    parse_resource,
    read_resources,
)
from dtoc_rl.labels.calls import _step_resources
from dtoc_rl.labels.shell import _State
from dtoc_rl.labels.spans import _GUTTER, _TOKEN

FILE_A = """\
import os


class PriceCalculator:
    def compute_total_price(self, items, discount_rate):
        subtotal = sum(item.unit_price * item.quantity for item in items)
        if discount_rate > 0.5:
            raise ValueError("discount_rate must not exceed fifty percent")
        return subtotal * (1 - discount_rate)
"""


def make(steps: list[dict], task: str = "Fix the bug.", system: str = "You are an agent.") -> Trajectory:
    return Trajectory(
        traj_id="test/x",
        source="test",
        model_raw="m",
        model_family="other",
        task_id="x",
        task_text=task,
        system_prompt=system,
        steps=[Step(index=i, turn=kw.pop("turn", i), **kw) for i, kw in enumerate(steps)],
    )


def needs(traj: Trajectory, i: int, kind: str) -> dict[int, str]:
    return {n.step: n.evidence for n in traj.steps[i].needs if n.kind == kind}


def bash(cmd: str, output: str | None = "", text: str = "") -> dict:
    return {"tool_name": "bash", "tool_args": cmd, "output": output, "assistant_text": text}


def numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{start + k:6d}\t{line}" for k, line in enumerate(text.split("\n")))


# ---------------------------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------------------------


def test_provenance_old_str_copied_from_numbered_view():
    edit = {
        "command": "str_replace",
        "path": "src/calc.py",
        "old_str": (
            "        if discount_rate > 0.5:\n"
            '            raise ValueError("discount_rate must not exceed fifty percent")'
        ),
        "new_str": "        if discount_rate > 0.9:\n            raise ValueError('too big')",
    }
    t = make(
        [
            bash("nl -ba src/calc.py", numbered(FILE_A)),
            bash("ls", "README.md\nsrc\n"),
            {"tool_name": "str_replace_editor", "tool_args": json.dumps(edit), "output": "edited"},
        ]
    )
    label_trajectory(t)
    prov = needs(t, 2, "provenance")
    assert set(prov) == {0}
    # the span runs across the two lines although the view had a line-number gutter
    assert "discount_rate > 0.5" in prov[0] and "fifty percent" in prov[0]
    assert needs(t, 1, "provenance") == {}


def test_provenance_identifier_and_path_atoms():
    t = make(
        [
            bash(
                'grep -rn "total" src', "src/shop/price_calculator.py:5:    def compute_total_price(self):\n"
            ),
            bash("sed -n '1,20p' src/shop/price_calculator.py", "x = 1\n", text="Found compute_total_price."),
        ]
    )
    label_trajectory(t)
    ev = needs(t, 1, "provenance")
    assert list(ev) == [0]
    assert ev[0] in ("src/shop/price_calculator.py", "compute_total_price")


def test_trivial_tokens_do_not_count():
    t = make(
        [
            bash("cat a.py", "self\nthe value is 1\nreturn self\n"),
            bash("echo self the 1 return", ""),
        ]
    )
    label_trajectory(t)
    assert t.steps[1].needs == []


def test_no_provenance_for_span_in_task_text():
    line = 'raise ValueError("discount_rate must not exceed fifty percent")'
    t = make(
        [
            bash("cat src/calc.py", FILE_A),
            bash(f"grep -n '{line}' src/calc.py", "8:" + line),
        ],
        task=f"Calling it fails with: {line}",
    )
    label_trajectory(t)
    assert needs(t, 1, "provenance") == {}
    # the same action without the task text is a copy
    t2 = make(
        [bash("cat src/calc.py", FILE_A), bash(f"grep -n '{line}' src/calc.py", "8:" + line)],
        task="Calling it fails.",
    )
    label_trajectory(t2)
    assert set(needs(t2, 1, "provenance")) == {0}


def test_no_provenance_for_span_in_system_prompt():
    t = make(
        [
            bash("cat notes.txt", "please_run_the_linter_before_submitting\n"),
            bash("echo please_run_the_linter_before_submitting"),
        ],
        system="Rule: please_run_the_linter_before_submitting",
    )
    label_trajectory(t)
    assert needs(t, 1, "provenance") == {}


def test_agent_repeating_its_own_command_is_not_provenance():
    cmd = 'grep -rn "compute_total_price" src/shop'
    out = "src/shop/calc.py:5:    def compute_total_price(self, items, discount_rate):\n"
    t = make([bash(cmd, out), bash("ls", "src\n"), bash(cmd, out)])
    label_trajectory(t)
    assert needs(t, 2, "provenance") == {}  # the agent's own words, echoed by the output
    assert set(needs(t, 2, "reaccess")) == {0}  # but it is a re-access


def test_agent_quoting_its_own_earlier_message_is_not_provenance():
    line = "subtotal = sum(item.unit_price * item.quantity for item in items)"
    t = make(
        [
            bash("cat src/calc.py", FILE_A),
            bash("ls", "src\n", text=f"The sum is `{line}`."),
            bash("ls src", "calc.py\n", text=f"Again: {line}"),
        ]
    )
    label_trajectory(t)
    assert set(needs(t, 1, "provenance")) == {0}
    assert needs(t, 2, "provenance") == {}  # already in the agent's own step-1 message


def test_attribution_to_most_recent_output():
    t = make(
        [
            bash("cat src/calc.py", FILE_A),
            bash("sed -n '5,9p' src/calc.py", "\n".join(FILE_A.split("\n")[4:9])),
            bash(
                "python -c 'print(1)'",
                "1\n",
                text='Next: raise ValueError("discount_rate must not exceed fifty',
            ),
        ]
    )
    label_trajectory(t)
    assert set(needs(t, 2, "provenance")) == {1}


def test_parallel_calls_of_one_turn_do_not_see_each_other():
    t = make(
        [
            {**bash("cat src/calc.py", FILE_A), "turn": 0},
            {**bash("grep -n compute_total_price src/calc.py", "5:x"), "turn": 0},
            {**bash("cat src/calc.py", FILE_A), "turn": 1},
        ]
    )
    label_trajectory(t)
    assert t.steps[1].needs == []
    assert set(needs(t, 2, "reaccess")) == {0}


def test_needs_only_point_to_steps_with_output():
    t = make([bash("cat src/calc.py", None), bash("cat src/calc.py", FILE_A)])
    label_trajectory(t)
    assert t.steps[1].needs == []


# ---------------------------------------------------------------------------------------------
# re-access and resources
# ---------------------------------------------------------------------------------------------


def test_reaccess_overlapping_file_ranges_and_modification():
    t = make(
        [
            bash("sed -n '10,40p' src/a.py", "x\n"),  # 0
            bash("nl -ba src/a.py | sed -n '30,50p'", "y\n"),  # 1 overlaps 0
            bash("sed -n '100,120p' src/a.py", "z\n"),  # 2 overlaps nothing
            bash("cat /testbed/src/a.py", "w\n"),  # 3 whole file (absolute path) overlaps 0, 1, 2
            bash("sed -i 's/x/y/' src/a.py", ""),  # 4 write
            bash("head -n 15 src/a.py", "v\n"),  # 5 overlaps 0 and 3
        ]
    )
    label_trajectory(t)
    assert t.steps[1].read_resource == "file:src/a.py#L30-50"
    assert needs(t, 1, "reaccess") == {0: "file:src/a.py#L10-40"}
    assert needs(t, 2, "reaccess") == {}
    assert set(needs(t, 3, "reaccess")) == {0, 1, 2}
    assert t.steps[4].write_resources == ["src/a.py"]
    assert set(needs(t, 5, "reaccess")) == {0, 3}
    assert not modified_between(t, 0, 1)
    assert not modified_between(t, 0, 3)
    assert modified_between(t, 3, 5)
    assert modified_between(t, 0, 5)


def test_reaccess_same_command_search_and_call():
    t = make(
        [
            bash("python reproduce.py", "Traceback ..."),
            bash("grep -rn foo src", "src/a.py:1:foo"),
            {"tool_name": "get_user_details", "tool_args": '{"user_id": "mia_li_3668"}', "output": "{}"},
            bash("python  reproduce.py", "ok"),
            bash("grep -rn foo src", "src/a.py:1:foo"),
            {"tool_name": "get_user_details", "tool_args": '{ "user_id":"mia_li_3668" }', "output": "{}"},
            {"tool_name": "get_user_details", "tool_args": '{"user_id": "other_user_1"}', "output": "{}"},
            bash("python reproduce.py", "ok"),
        ]
    )
    label_trajectory(t)
    assert needs(t, 3, "reaccess") == {0: "cmd:python reproduce.py"}
    assert needs(t, 4, "reaccess") == {1: "search:grep:foo@src"}
    assert needs(t, 5, "reaccess") == {2: 'call:get_user_details({"user_id":"mia_li_3668"})'}
    assert needs(t, 6, "reaccess") == {}
    assert needs(t, 7, "reaccess") == {3: "cmd:python reproduce.py"}  # the most recent run only


def test_reaccess_swe_agent_aci_windows():
    def view(a: int, b: int) -> str:
        lines = "\n".join(f"{k}:line {k}" for k in range(a, b + 1))
        return f"[File: /repo/pkg/mod.py (400 lines total)]\n({a - 1} more lines above)\n{lines}\n"

    t = make(
        [
            {"tool_name": "open", "tool_args": "open pkg/mod.py", "output": view(1, 100)},
            {"tool_name": "scroll_down", "tool_args": "scroll_down", "output": view(101, 200)},
            {"tool_name": "goto", "tool_args": "goto 50", "output": view(1, 100)},
            {"tool_name": "search_file", "tool_args": 'search_file "needle"', "output": "Found 1"},
            {"tool_name": "edit", "tool_args": "edit 5:5\nx = 1\nend_of_edit", "output": view(1, 100)},
        ]
    )
    label_trajectory(t)
    assert t.steps[1].read_resource == "file:pkg/mod.py#L101-200"
    assert needs(t, 1, "reaccess") == {}
    assert set(needs(t, 2, "reaccess")) == {0}
    assert t.steps[3].read_resource.startswith("search:search_file:needle@")
    assert t.steps[4].write_resources and t.steps[4].write_resources[0].endswith("pkg/mod.py")


RESOURCE_CASES = [
    ("bash", "cat src/a.py", ["file:src/a.py"], []),
    ("bash", "head -n 20 src/a.py", ["file:src/a.py#L1-20"], []),
    ("bash", "tail -n 5 src/a.py", ["file:src/a.py#tail5"], []),
    ("bash", "sed -n '10,40p' src/a.py", ["file:src/a.py#L10-40"], []),
    ("bash", "cat -n src/a.py | sed -n '30,50p'", ["file:src/a.py#L30-50"], []),
    ("bash", "nl -ba src/a.py | head -n 20", ["file:src/a.py#L1-20"], []),
    (
        "bash",
        "cd /testbed && grep -rn 'def foo' src --include=*.py",
        ["search:grep:def foo@/testbed/src[*.py]"],
        [],
    ),
    ("bash", "cat src/a.py | grep -n foo", ["search:grep:foo@src/a.py"], []),
    ("bash", "find . -name '*.py'", ["search:find:-name *.py@."], []),
    ("bash", "ls -la src", ["list:src"], []),
    ("bash", "sed -i 's/a/b/' src/a.py", [], ["src/a.py"]),
    ("bash", "cat <<'EOF' > new.py\nprint('hi')\nEOF", [], ["new.py"]),
    ("bash", "echo x >> log.txt", [], ["log.txt"]),
    ("bash", "git stash", [], ["*"]),
    ("bash", "python -m pytest tests/test_a.py -q", ["cmd:python -m pytest tests/test_a.py -q"], []),
    ("bash", "# look\nawk 'NR>=5 && NR<=9' src/a.py", ["file:src/a.py#L5-9"], []),
    ("open", "open pkg/mod.py 120", ["file:pkg/mod.py#L70-170"], []),
    ("search_dir", "search_dir foo src", ["search:search_dir:foo@src"], []),
    ("find_file", "find_file mod.py", ["search:find_file:mod.py@."], []),
    (
        "str_replace_editor",
        '{"command": "view", "path": "/testbed/a.py", "view_range": [5, -1]}',
        ["file:/testbed/a.py#L5-"],
        [],
    ),
    (
        "str_replace_editor",
        '{"command": "create", "path": "/testbed/b.py", "file_text": "x"}',
        [],
        ["/testbed/b.py"],
    ),
    ("str_replace_editor", "view /testbed/a.py --view_range 1 20", ["file:/testbed/a.py#L1-20"], []),
    ("file_editor", '{"command": "view", "path": "/workspace/a.py"}', ["file:/workspace/a.py"], []),
    ("execute_bash", '{"command": "head -5 a.py"}', ["file:a.py#L1-5"], []),
    (
        "Read",
        '{"file_path": "C:\\\\proj\\\\a.py", "offset": 10, "limit": 20}',
        ["file:/c/proj/a.py#L10-29"],
        [],
    ),
    ("Grep", '{"pattern": "foo", "path": "src", "glob": "*.py"}', ["search:grep:foo@src[*.py]"], []),
    ("Glob", '{"pattern": "**/*.md"}', ["search:glob:**/*.md@."], []),
    ("Bash", '{"command": "ls src", "description": "list"}', ["list:src"], []),
    ("Edit", '{"file_path": "/p/a.py", "old_string": "x", "new_string": "y"}', [], ["/p/a.py"]),
    ("Write", '{"file_path": "/p/b.py", "content": "x"}', [], ["/p/b.py"]),
    ("read", '{"filePath": "/p/a.py", "offset": 0, "limit": 50}', ["file:/p/a.py#L1-50"], []),
    # Gemini CLI: read_file took an absolute_path and a 0-based offset, now a file_path and 1-based lines;
    # searches and listings name their folder dir_path
    ("read_file", '{"absolute_path": "/p/a.py", "offset": 10, "limit": 20}', ["file:/p/a.py#L11-30"], []),
    ("read_file", '{"file_path": "/p/a.py", "start_line": 5, "end_line": 9}', ["file:/p/a.py#L5-9"], []),
    ("read_file", '{"file_path": "/p/a.py", "offset": 10, "limit": 20}', ["file:/p/a.py#L11-30"], []),
    ("replace", '{"file_path": "/p/a.py", "old_string": "x", "new_string": "y"}', [], ["/p/a.py"]),
    ("run_shell_command", '{"command": "cat a.py", "description": "show it"}', ["file:a.py"], []),
    (
        "grep_search",
        '{"pattern": "foo", "dir_path": "src", "include_pattern": "*.py"}',
        ["search:grep:foo@src[*.py]"],
        [],
    ),
    ("glob", '{"pattern": "**/*.md", "dir_path": "docs"}', ["search:glob:**/*.md@docs"], []),
    ("list_directory", '{"dir_path": "src/pkg"}', ["list:src/pkg"], []),
    (
        "get_reservation_details",
        '{"reservation_id": "NO6JO3"}',
        ['call:get_reservation_details({"reservation_id":"NO6JO3"})'],
        [],
    ),
    (
        "cancel_reservation",
        '{"reservation_id": "NO6JO3"}',
        [],
        ['state:cancel_reservation({"reservation_id":"NO6JO3"})'],
    ),
    ("search_class", '{"class_name": "Foo"}', ['call:search_class({"class_name":"Foo"})'], []),
    ("think", '{"thought": "hmm"}', [], []),
]


@pytest.mark.parametrize(("tool", "args", "reads", "writes"), RESOURCE_CASES)
def test_resource_parser(tool, args, reads, writes):
    r, w = _step_resources(Step(index=0, tool_name=tool, tool_args=args, output=""), _State())
    assert [str(x) for x in r] == reads
    assert w == writes


def test_python_script_writes_are_remembered():
    state = _State()
    script = "cat <<'EOF' > fix.py\npath = 'src/calc.py'\nwith open(path, 'w') as f:\n    f.write(x)\nEOF"
    _step_resources(Step(index=0, tool_name="bash", tool_args=script), state)
    _, w = _step_resources(Step(index=1, tool_name="bash", tool_args="python fix.py"), state)
    assert w == ["src/calc.py"]


def test_resource_round_trip_and_overlap():
    for s in [
        "file:a.py",
        "file:a.py#L3-9",
        "file:a.py#L3-",
        "file:a.py#tail5",
        "search:grep:x@.",
        "cmd:ls -la",
    ]:
        assert str(parse_resource(s)) == s
    assert Resource("file", "/testbed/a/b.py", 1, 10).overlaps(Resource("file", "a/b.py", 10, 20))
    assert not Resource("file", "a/b.py", 1, 9).overlaps(Resource("file", "a/b.py", 10, 20))
    assert not Resource("file", "x/b.py").overlaps(Resource("file", "y/b.py"))


# ---------------------------------------------------------------------------------------------
# reference
# ---------------------------------------------------------------------------------------------


def test_reference_to_dtoc_key_and_call_id():
    t = make(
        [
            {"tool_name": "bash", "tool_args": "ls", "output": "a\n", "tool_call_id": "call_Xy12ab34"},
            {"tool_name": "bash", "tool_args": "pwd", "output": "/x\n", "tool_call_id": "call_Qq98zz76"},
            {
                "tool_name": "manage_context",
                "tool_args": '{"action": "enable", "keys": ["t0001"]}',
                "output": "ok",
            },
            {
                "tool_name": None,
                "tool_args": "",
                "assistant_text": "As call_Xy12ab34 showed, and t0009 (no such).",
            },
        ]
    )
    label_trajectory(t)
    assert needs(t, 2, "reference") == {1: "t0001"}  # key n = the n-th step with an output
    assert needs(t, 3, "reference") == {0: "call_Xy12ab34"}


def test_reference_keys_from_envelopes_and_explicit_map():
    env = json.dumps({"tool_key": "t0042", "tool_result": "hello", "estimated_tokens": 2})
    t = make([bash("ls", env), bash("ls -a", "b\n"), bash("echo", "", text="restore t0042")])
    label_trajectory(t)
    assert needs(t, 2, "reference") == {0: "t0042"}
    label_trajectory(t, keys={"t0042": 1})
    assert needs(t, 2, "reference") == {1: "t0042"}


def test_no_duplicate_step_kind_and_evidence_cut():
    long_line = "x_" + "abcdefghij" * 40
    t = make([bash("cat big.txt", long_line + "\n" + long_line), bash(f"echo {long_line} {long_line}")])
    label_trajectory(t)
    keys = [(n.step, n.kind) for n in t.steps[1].needs]
    assert len(keys) == len(set(keys)) == 1
    assert len(t.steps[1].needs[0].evidence) <= 200


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


def test_label_stats_and_anticipation():
    line = 'raise ValueError("discount_rate must not exceed fifty percent")'
    t = make(
        [
            bash("cat src/calc.py", FILE_A),  # 0
            bash("ls", "src\n", text=f"Key line: {line}"),  # 1: provenance on 0
            bash("cat src/calc.py", FILE_A),  # 2: real re-read of 0, anticipated by step 1
            bash("cat src/other.py", "pass\n"),  # 3
            bash("cat src/other.py", "pass\n"),  # 4: real re-read of 3, not anticipated
        ]
    )
    label_trajectory(t)
    st = label_stats([t])
    assert st["needs_by_kind"] == {"provenance": 1, "reaccess": 2, "reference": 0, "edit": 0}
    assert st["provenance_step_fraction"] == pytest.approx(1 / 5)
    assert st["real_rereads"] == 2 and st["modified_rereads"] == 0
    assert st["anticipated"] == 1 and st["anticipation_rate"] == pytest.approx(0.5)
    assert st["age"]["provenance"]["median"] == 1


# ---------------------------------------------------------------------------------------------
# scaling: cost linear in text, not quadratic
# ---------------------------------------------------------------------------------------------


def synthetic(n_steps: int, seed: int = 0) -> Trajectory:
    rng = random.Random(seed)
    words = [
        f"{a}{b}"
        for a in ("get", "set", "load", "parse", "build", "check")
        for b in ("Item", "Row", "Node", "Key")
    ]
    steps = []
    outputs = []
    for i in range(n_steps):
        lines = [
            f"    value_{rng.randrange(10**6)} = {rng.choice(words)}"
            f"(arg_{rng.randrange(10**6)}, {rng.randrange(99)})"
            for _ in range(60)
        ]
        outputs.append(lines)
        src = outputs[rng.randrange(len(outputs))]
        copied = "\n".join(src[rng.randrange(50) : rng.randrange(50, 60)])
        steps.append(
            {
                "tool_name": "str_replace_editor",
                "tool_args": json.dumps(
                    {"command": "str_replace", "path": f"m{i}.py", "old_str": copied, "new_str": "x"}
                ),
                "assistant_text": f"Editing m{i}.py",
                "output": numbered("\n".join(lines)),
            }
        )
    return make(steps)


def best_time(n_steps: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = synthetic(n_steps)
        t0 = time.perf_counter()
        label_trajectory(t)
        best = min(best, time.perf_counter() - t0)
    return best


def test_labelling_scales_linearly_in_output_text():
    small = synthetic(60)
    label_trajectory(small)
    assert sum(bool(needs(small, i, "provenance")) for i in range(60)) > 30  # the copies are found
    t1 = best_time(60)
    # 8x the steps is 8x the output text; a scan of every earlier output would be 64x. The bound sits
    # near the geometric middle so a loaded CI machine (timings off by 2x) cannot flip the verdict.
    t8 = best_time(480)
    assert t8 < 24 * t1, (t1, t8)


# ---------------------------------------------------------------------------------------------
# real traces
# ---------------------------------------------------------------------------------------------


def _tokens_of(text: str) -> str:
    return "\x00".join(_TOKEN.findall(text))


@pytest.mark.shared
def test_real_mini_swe_agent_traces(shared_traces: Path):
    from dtoc_rl.ingest.mini_swe_agent import MiniSweAgentIngester

    files = sorted(
        (shared_traces / "mini-swe-agent_gemini-3-pro_swebench-verified" / "trajs").glob("*.traj.json")
    )
    assert len(files) >= 3
    trajs = [next(MiniSweAgentIngester().parse(f)) for f in files[:3]]
    for t in trajs:
        label_trajectory(t)
    st = label_stats(trajs)
    assert 0.05 < st["provenance_step_fraction"] < 0.6, st
    assert st["needs_by_kind"]["reaccess"] > 0
    assert any(s.read_resource for t in trajs for s in t.steps)
    assert any(s.write_resources for t in trajs for s in t.steps)
    for t in trajs:
        for s in t.steps:
            seen = set()
            for n in s.needs:
                assert n.step < s.index and t.steps[n.step].output is not None
                assert (n.step, n.kind) not in seen
                seen.add((n.step, n.kind))
                if n.kind != "provenance":
                    continue
                src = t.steps[n.step].output
                # evidence is a real copy: its tokens occur in order in the (gutter-stripped) output ...
                toks = _TOKEN.findall(n.evidence)
                if len(n.evidence) == 200:
                    toks = toks[:-1]  # cut mid-token
                assert _tokens_of(" ".join(toks)) in _tokens_of(_GUTTER.sub(" ", src)) or n.evidence in src
                # ... and in the action, but it is not the task text
                action = s.tool_args + "\n" + s.assistant_text
                assert toks[0] in action
                assert n.evidence not in t.task_text
    # labels are stable: relabelling gives the same needs
    before = [[(n.step, n.kind, n.evidence) for n in s.needs] for s in trajs[0].steps]
    label_trajectory(trajs[0])
    assert before == [[(n.step, n.kind, n.evidence) for n in s.needs] for s in trajs[0].steps]
    assert all(isinstance(r, Resource) for s in trajs[0].steps for r in read_resources(s))
    assert re.fullmatch(r"[a-z]+:.+", next(s.read_resource for s in trajs[0].steps if s.read_resource))


# -- corrections from the output (found calibrating against masked SWE-agent runs) -----------------


def _editor(args: dict, output: str, error: bool = False) -> dict:
    return {"tool_name": "str_replace_editor", "tool_args": json.dumps(args), "output": output,
            "output_is_error": error}  # fmt: skip


def test_refused_edit_writes_nothing_so_the_reread_is_real():
    view = {"command": "view", "path": "/testbed/calc.py", "view_range": [1, 9]}
    t = make(
        [
            _editor(view, FILE_A),
            _editor(
                {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "x", "new_str": "y"},
                "No replacement was performed, old_str `x` did not appear verbatim in /testbed/calc.py.",
            ),
            _editor(view, FILE_A),
            _editor(
                {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "a", "new_str": "b"},
                "The file /testbed/calc.py has been edited.",
            ),
            {
                "tool_name": "edit",
                "tool_args": "edit 1:2\nfoo\nend_of_edit",
                "output": "Your proposed edit has introduced new syntax error(s). ...",
            },
            {
                "tool_name": "Edit",
                "tool_args": '{"file_path": "/p/a.py", "old_string": "x", "new_string": "y"}',
                "output": "<tool_use_error>File has not been read yet.</tool_use_error>",
                "output_is_error": True,
            },
        ]
    )
    label_trajectory(t)
    assert t.steps[1].write_resources == []
    assert t.steps[3].write_resources == ["/testbed/calc.py"]
    assert t.steps[4].write_resources == [] and t.steps[5].write_resources == []
    refusal = "File has been unexpectedly modified. Read it again."
    changed = Step(index=0, tool_name="Edit", tool_args='{"file_path": "/p/a.py", "old_string": "x"}',
                   output=refusal, output_is_error=True)  # fmt: skip
    assert _step_resources(changed, _State())[1] == ["/p/a.py"]  # someone else changed the file
    assert needs(t, 2, "reaccess") == {0: "file:/testbed/calc.py#L1-9"}
    assert not modified_between(t, 0, 2)  # the failed edit did not change what step 0 read
    assert modified_between(t, 0, 3)
    # a shell command that fails still counts as a possible write
    r, w = _step_resources(Step(index=0, tool_name="bash", tool_args="sed -i s/a/b/ f.py", output="x",
                                output_is_error=True), _State())  # fmt: skip
    assert w == ["f.py"]


ABBREVIATED = """\
<NOTE>This file is too large to display entirely. Showing abbreviated version. Please use `str_replace_editor view` with the `view_range` parameter to show selected lines next.</NOTE>
     1 import os
     2
     3 class Big:
     4     def method(self):
     5 ... eliding lines 5-40 ...
    41
    42     def other(self):
    43 ... eliding lines 43-90 ...
    91
    92 def tail():
"""  # noqa: E501


def test_abbreviated_view_reads_only_the_lines_it_shows():
    whole = {"command": "view", "path": "/testbed/big.py"}
    t = make(
        [
            _editor(whole, ABBREVIATED),
            _editor({"command": "view", "path": "/testbed/big.py", "view_range": [10, 30]}, "elided body"),
            _editor({"command": "view", "path": "/testbed/big.py", "view_range": [41, 43]}, "shown lines"),
            _editor(whole, ABBREVIATED),
            _editor(whole, FILE_A),  # a small file shown entirely stays a whole-file read
            _editor({"command": "view", "path": "/testbed/big.py", "view_range": [10, 12]}, "again"),
        ]
    )
    label_trajectory(t)
    assert t.steps[0].read_resource.split("\n") == [
        "file:/testbed/big.py#L1-4",
        "file:/testbed/big.py#L41-42",
        "file:/testbed/big.py#L91-92",
    ]
    assert needs(t, 1, "reaccess") == {}  # lines 10-30 were elided: a first read
    assert set(needs(t, 2, "reaccess")) == {0}
    assert set(needs(t, 3, "reaccess")) == {0, 2}
    assert t.steps[4].read_resource == "file:/testbed/big.py"
    assert set(needs(t, 5, "reaccess")) == {1, 4}


def test_builtin_names_are_not_distinctive_atoms():
    out = "Traceback ...\nImportError: No module named numpy\nCustomLoaderError: broken"
    t = make(
        [
            bash("python run.py", out),
            bash("cat patch.py", "", text="I will catch ImportError and CustomLoaderError here."),
        ]
    )
    label_trajectory(t)
    assert needs(t, 1, "provenance") == {0: "CustomLoaderError"}


def test_the_builtin_names_are_those_of_every_python_not_the_running_one():
    # a name one version adds is a builtin under every version, so labels do not depend on the Python
    # that ingests the logs (PythonFinalizationError is new in 3.13, ExceptionGroup in 3.11)
    from dtoc_rl.labels.spans import _distinctive

    for name in ("PythonFinalizationError", "ExceptionGroup", "EncodingWarning", "ModuleNotFoundError"):
        assert not _distinctive(name, 10), name
    assert _distinctive("CustomLoaderError", 10)


def test_edit_need_points_to_the_current_reads_of_the_file():
    path = "/testbed/calc.py"
    view = {"command": "view", "path": path}
    old = 'raise ValueError("discount_rate must not exceed fifty percent")'
    t = make(
        [
            _editor(view, numbered(FILE_A)),  # 0
            _editor({"command": "view", "path": path, "view_range": [5, 9]}, numbered(FILE_A)),  # 1
            bash("python -m pytest -q", "1 failed"),  # 2
            _editor(  # 3: refused, old_str reconstructed from memory: it needed what the reads showed
                {
                    "command": "str_replace",
                    "path": path,
                    "old_str": "raise ValueError('bad')",
                    "new_str": "x",
                },
                "No replacement was performed, old_str `raise ValueError('bad')` did not appear verbatim in "
                f"{path}.",
            ),
            _editor(
                {"command": "str_replace", "path": path, "old_str": old, "new_str": "pass"}, "edited"
            ),  # 4
            _editor(
                {"command": "insert", "path": path, "insert_line": 3, "new_str": "# note"}, "edited"
            ),  # 5
            _editor(view, numbered(FILE_A)),  # 6
            bash(f"sed -i 's/subtotal/total/' {path}", ""),  # 7
            _editor({"command": "create", "path": path, "file_text": "new"}, "File created"),  # 8
        ]
    )
    label_trajectory(t)
    assert needs(t, 3, "edit") == {0: f"file:{path}", 1: f"file:{path}"}
    assert set(needs(t, 4, "provenance")) == {1}
    assert set(needs(t, 4, "edit")) == {1}  # the old_str was copied from the range view: only that one
    assert set(needs(t, 5, "edit")) == {1}  # the file changed at 4 after every read: the latest read
    assert set(needs(t, 7, "edit")) == {6}
    assert needs(t, 8, "edit") == {}  # a whole-file write matches nothing
    assert needs(t, 2, "edit") == {}


@pytest.mark.parametrize(
    "step",
    [
        {
            "tool_name": "edit",
            "tool_args": "edit 2:3\nfoo\nend_of_edit",
            "output": "[File: /r/calc.py (9 lines total)]",
        },
        {
            "tool_name": "Edit",
            "tool_args": json.dumps({"file_path": "/r/calc.py", "old_string": "a", "new_string": "b"}),
            "output": "ok",
        },
        {
            "tool_name": "edit",
            "tool_args": json.dumps({"filePath": "/r/calc.py", "oldString": "a", "newString": "b"}),
            "output": "ok",
        },
        bash("str_replace_editor str_replace /r/calc.py --old_str a --new_str b", "edited"),
    ],
    ids=["swe-agent-0.x-edit", "claude-code-Edit", "opencode-edit", "editor-cli"],
)
def test_edit_need_across_harnesses(step):
    t = make([bash("cat /r/calc.py", FILE_A), dict(step)])
    if step["tool_name"] == "edit" and step["tool_args"].startswith("edit"):
        t.steps[0] = Step(index=0, turn=0, tool_name="open", tool_args="open /r/calc.py",
                          output="[File: /r/calc.py (9 lines total)]\n" + numbered(FILE_A))  # fmt: skip
    label_trajectory(t)
    assert set(needs(t, 1, "edit")) == {0}


def test_grep_hits_on_lines_far_apart_are_not_joined():
    far = "/src/m.py:10:    return value + other\n/src/m.py:50:    if value is None: pass\n"
    near = "/src/m.py:10:    return value + other\n/src/m.py:11:    if value is None: pass\n"
    action = "return value + other if value is None: pass"
    for out, expected in ((far, {}), (near, {0})):
        t = make(
            [bash("grep -rn value /src", out), bash("cat x", "", text=f"Replace `{action}` with a helper")]
        )
        label_trajectory(t)
        assert set(needs(t, 1, "provenance")) == set(expected)


def test_window_straddling_own_words_is_not_a_copy():
    words = "alpha beta gamma delta epsilon zeta"
    for tail, copied in (("eta", False), ("computation normalisation", True)):
        t = make(
            [
                bash("cat notes.txt", f"{words} {tail}\n"),
                bash("echo hi", "hi", text=f"The notes begin: {words}."),  # the agent's own words
                bash("cat y", "", text=f"So {words} {tail} it is."),
            ]
        )
        label_trajectory(t)
        assert bool(needs(t, 2, "provenance")) is copied, tail


def test_first_modified_is_the_first_step_that_changes_what_was_read():
    from dtoc_rl.labels import first_modified

    steps = [bash("cat a.py", FILE_A), bash("ls", "a.py"), bash("sed -i s/x/y/ a.py"), bash("cat b.py", "b")]
    t = make(steps)
    label_trajectory(t)
    assert first_modified(t, 0) == 2
    assert first_modified(t, 3) is None  # nothing after it
    assert first_modified(t, 2) is None  # no later write


def test_first_modified_is_the_least_step_modified_between_names():
    """The scan over the steps that write gives what the definition gives: the least ``t`` with
    ``modified_between(i, t)``, on random runs of reads, listings, searches, commands and writes."""
    from dtoc_rl.labels import first_modified, modified_between

    cmds = [
        "cat a.py", "cat src/b.py", "ls src", "grep -rn foo src", "python -m pytest -q", "sed -n 1,5p a.py",
        "sed -i s/x/y/ a.py", "echo hi > src/b.py", "rm src/c.py", "touch notes.txt", "git status",
    ]  # fmt: skip
    rng = random.Random(7)
    checked = 0
    for _ in range(40):
        t = make([bash(rng.choice(cmds), f"out {k}") for k in range(rng.randint(2, 14))])
        label_trajectory(t)
        n = len(t.steps)
        writers = [k for k, s in enumerate(t.steps) if s.write_resources]
        for i in range(n):
            want = next((j for j in range(i + 1, n) if modified_between(t, i, j)), None)
            assert first_modified(t, i) == want == first_modified(t, i, writers), (
                i,
                [s.tool_args for s in t.steps],
            )
            checked += want is not None
    assert checked > 50  # most outputs were changed by a later step, some were not
