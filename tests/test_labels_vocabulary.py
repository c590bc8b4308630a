"""One tool vocabulary (dtoc_rl.labels.vocabulary): the policy's tool categories and the need labeller's
resource rules read the same tables, so they cannot drift apart."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.data.schema import Step
from dtoc_rl.labels import calls, shell
from dtoc_rl.labels import vocabulary as v
from dtoc_rl.labels.calls import _step_resources
from dtoc_rl.labels.shell import _State
from envs.tools import tool_specs

# what the labeller's resource says a call does -> the category a policy must see for it
_CATEGORY_OF_RESOURCE = {"file": "read", "search": "search", "list": "list"}


def _resources(name: str, args: dict | str, output: str = "ok") -> tuple[list, list]:
    text = args if isinstance(args, str) else json.dumps(args)
    return _step_resources(Step(index=0, tool_name=name, tool_args=text, output=output), _State())


def _canonical_args(name: str) -> dict:
    """A call of the tool as its harness makes it, by its kind."""
    kind = v.TOOL_KINDS.get(name)
    if kind == "editor":
        return {"command": "str_replace", "path": "pkg/mod.py", "old_str": "a", "new_str": "b"}
    if kind in ("grep", "glob"):
        return {"pattern": "def main", "path": "pkg"}
    if kind == "shell":
        return {"command": "cat pkg/mod.py"}
    return {"path": "pkg/mod.py", "content": "x = 1\n"}


@pytest.mark.parametrize("name", sorted(v.TOOL_KINDS))
def test_each_named_tool_gets_the_category_its_labelled_resources_say(name):
    kind = v.TOOL_KINDS[name]
    args = _canonical_args(name)
    reads, writes = _resources(name, args)
    cat = v.tool_category(name, json.dumps(args))
    if kind == "none":
        assert (reads, writes) == ([], [])
        assert cat in ("other", "think", "submit")
    elif writes:
        assert not reads and writes == ["pkg/mod.py"]
        assert cat == "edit", (name, cat)
    else:
        assert len(reads) == 1, (name, reads)
        assert cat == _CATEGORY_OF_RESOURCE[reads[0].kind] or (
            kind == "glob" and reads[0].kind == "search" and cat == "list"  # finding files by name
        ), (name, reads, cat)


def test_every_kind_of_tool_has_its_category():
    kinds = set(v.TOOL_KINDS.values())
    assert kinds - {"shell"} <= set(v.KIND_CATEGORIES)
    assert set(v.KIND_CATEGORIES.values()) <= set(v.TOOL_CATEGORIES)
    assert set(v.NAMED_CATEGORIES.values()) <= set(v.TOOL_CATEGORIES)


def test_the_labeller_sets_are_the_vocabulary_kinds():
    """The labeller has no tool list of its own: every set it checks is a kind of TOOL_KINDS."""
    assert calls._READ_TOOLS == v.words(v.TOOL_KINDS, "read")
    assert calls._SHELL_TOOLS == v.words(v.TOOL_KINDS, "shell")
    assert calls._WRITE_TOOLS == v.words(v.TOOL_KINDS, "write") | v.words(v.TOOL_KINDS, "edit")
    assert calls._NO_RESOURCE == v.words(v.TOOL_KINDS, "none")
    for name in v.words(v.TOOL_KINDS, "read"):
        assert v.tool_category(name, '{"path": "a.py"}') == "read", name


def test_liveenv_tools_get_their_categories_and_resources():
    """LiveEnv's own tools (envs/tools.py): once all "other" for the policy while the labeller read them."""
    names = {spec["function"]["name"] for spec in tool_specs()}
    assert names == {"bash", "read_file", "write_file", "str_replace", "submit"}
    expect = {
        "bash": ({"command": "grep -n foo a.py"}, "search"),
        "read_file": ({"path": "a.py", "start_line": 3, "end_line": 9}, "read"),
        "write_file": ({"path": "a.py", "content": "x"}, "edit"),
        "str_replace": ({"path": "a.py", "old_str": "x", "new_str": "y"}, "edit"),
        "submit": ({"summary": "done"}, "submit"),
    }
    for name, (args, cat) in expect.items():
        assert v.tool_category(name, json.dumps(args)) == cat, name
    reads, _ = _resources("read_file", {"path": "a.py", "start_line": 3, "end_line": 9})
    assert [str(r) for r in reads] == ["file:a.py#L3-9"]  # its line range, not the whole file
    assert _resources("str_replace", {"path": "a.py", "old_str": "x", "new_str": "y"})[1] == ["a.py"]
    assert _resources("submit", {"summary": "done"}) == ([], [])


@pytest.mark.parametrize("word", sorted(set(v.COMMAND_KINDS) | set(shell.COMMANDS)))
def test_each_shell_command_word_has_a_handler_of_its_kind(word):
    """The shell parser dispatches on the vocabulary's command words; a word added to one side only
    fails here."""
    assert word in shell.COMMANDS, word
    assert shell.HANDLER_KINDS[word] == v.COMMAND_KINDS.get(word, "run")


@pytest.mark.parametrize(
    ("cmd", "resource", "category"),
    [
        ("cat pkg/a.py", "file:pkg/a.py", "read"),
        ("awk 'NR>=3 && NR<=9' a.py", "file:a.py#L3-9", "read"),
        ("egrep -n 'foo|bar' a.py", "search:grep:foo|bar@a.py", "search"),
        ("dir src", "list:src", "list"),
        ("find . -name '*.py'", "search:find:-name *.py@.", "list"),
        ("rm a.py", None, "edit"),
        ("cat <<'EOF' > a.py\nx = 1 -i\nEOF", None, "edit"),
        ("sed -i s/a/b/ a.py", None, "edit"),
        ("sed -n 3,9p a.py | grep -i x", "search:grep:x@a.py", "read"),
        ("python -m pytest -q", "cmd:python -m pytest -q", "test"),
        # a shell run on a script (Codex writes every command so) is the script; more after it is not
        ("bash -lc 'sed -n 3,9p pkg/a.py'", "file:pkg/a.py#L3-9", "read"),
        ("/bin/sh -c 'pytest -x'", "cmd:pytest -x", "test"),
        ("bash -lc 'cat a.py' > o.txt", "cmd:bash -lc 'cat a.py' > o.txt", "run"),
    ],
)
def test_shell_commands_agree_between_parser_and_category(cmd, resource, category):
    reads, _ = _resources("bash", {"command": cmd})
    assert [str(r) for r in reads] == ([resource] if resource else [])
    assert v.tool_category("bash", json.dumps({"command": cmd})) == category


def test_repolaunch_command_tool_is_a_shell_for_the_policy_too():
    """RepoLaunch names its shell tool ``command``: the labeller parsed it as a shell, the policy saw
    "other" for every one of its 17k calls in ../shared."""
    assert v.tool_category("command", json.dumps({"command": "cat setup.py"})) == "read"
    assert v.tool_category("run_shell_command", json.dumps({"command": "pytest -x"})) == "test"
    assert [str(r) for r in _resources("command", {"command": "cat setup.py"})[0]] == ["file:setup.py"]


def test_category_ids_keep_their_order():
    """Checkpoints hold category ids: the first twelve are fixed (new ones may only be appended)."""
    assert v.TOOL_CATEGORIES[:12] == (
        "none", "read", "list", "search", "edit", "run", "test", "api_read", "api_write", "submit", "think",
        "other",
    )  # fmt: skip
    assert v.tool_category_id(None) == 0 and v.tool_category_id("get_user_details") == 7


def test_dtoc_rl_tools_is_the_vocabulary():
    import dtoc_rl.labels.vocabulary

    assert dtoc_rl.labels.vocabulary.tool_category is v.tool_category
    assert dtoc_rl.labels.vocabulary.TOOL_CATEGORIES is v.TOOL_CATEGORIES


def test_a_shell_command_kept_as_input_is_parsed_as_a_shell_command():
    """A DTOC context keeps arguments that are not JSON (mini-swe-agent's raw command text) as
    ``{"input": text}``: the labeller read that as an opaque call while the category parsed the
    command, so the Orchestrator's labels of such a client differed from the log's."""
    raw = _resources("bash", "cat pkg/mod.py | head -n 5")
    wrapped = _resources("bash", {"input": "cat pkg/mod.py | head -n 5"})
    assert [str(r) for r in wrapped[0]] == [str(r) for r in raw[0]] == ["file:pkg/mod.py#L1-5"]
    assert v.tool_category("bash", json.dumps({"input": "cat pkg/mod.py"})) == "read"


def test_aci_command_kept_as_input_reads_the_open_window():
    """SWE-agent 0.x's ``open f.py`` sent through a DTOC context (``{"input": "open f.py"}``) reads the
    window its output shows, as the logged text does, not an opaque ``call:open(...)``."""
    out = "[File: /repo/f.py (300 lines total)]\n1:import os\n2:x = 1\n"
    raw = _resources("open", "open f.py", output=out)
    wrapped = _resources("open", {"input": "open f.py"}, output=out)
    assert [str(r) for r in wrapped[0]] == [str(r) for r in raw[0]] == ["file:f.py#L1-2"]


def test_gemini_cli_tools_get_the_categories_of_what_they_do():
    # google-gemini/gemini-cli, packages/core/src/tools/definitions/base-declarations.ts
    want = {
        "read_file": "read", "read_many_files": "read", "web_fetch": "read", "list_directory": "list",
        "glob": "list", "grep_search": "search", "google_web_search": "search", "replace": "edit",
        "write_file": "edit", "write_todos": "think", "complete_task": "submit", "enter_plan_mode": "other",
    }  # fmt: skip
    assert {name: v.tool_category(name, "{}") for name in want} == want
    assert v.tool_category("run_shell_command", json.dumps({"command": "pytest -q"})) == "test"


def test_a_tool_of_several_operations_is_read_by_the_one_a_call_names():
    import json

    from dtoc_rl.data.schema import Step
    from dtoc_rl.labels import calls

    def resources(name: str, args: dict):
        step = Step(index=0, tool_name=name, tool_args=json.dumps(args), output="x")
        return calls._tool_resources(step, calls._State())

    # Trae Agent's json_edit_tool and ckg (bytedance/trae-agent trae_agent/tools)
    reads, writes = resources("json_edit_tool", {"operation": "view", "file_path": "/repo/c.json"})
    assert [r.key for r in reads if r.kind == "file"] == ["/repo/c.json"] and writes == []
    assert resources("json_edit_tool", {"operation": "set", "file_path": "/repo/c.json"})[1] == [
        "/repo/c.json"
    ]
    reads, _ = resources("ckg", {"command": "search_function", "path": "/repo", "identifier": "f"})
    assert not any(r.kind == "file" for r in reads)  # where it looks, not a file it reads
    # a command line is no operation's name
    assert resources("my_runner", {"command": "set -e; make", "path": "/repo/x.py"})[1] == []
