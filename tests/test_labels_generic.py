"""Need labels for function-calling tools the shell parser does not know (MCP servers, agent SDKs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.labels import label_trajectory
from dtoc_rl.labels.vocabulary import base_tool_name, tool_category, tool_kind

FIXTURE = Path(__file__).parent / "fixtures" / "mcp" / "mcp_tools.jsonl"


def _labelled():
    t = next(detect_format(FIXTURE).parse(FIXTURE))
    label_trajectory(t)
    return t


def _needs(t, k):
    return [(n.step, n.kind) for n in t.steps[k].needs]


def test_reaccess_needs_appear_on_a_hand_made_mcp_log():
    t = _labelled()
    assert _needs(t, 4) == [(0, "reaccess")]  # mcp__filesystem__read_file of the same path
    assert _needs(t, 5) == [(1, "reaccess")]  # the same GitHub file: same tool, same arguments
    assert _needs(t, 6) == [(2, "reaccess")]  # the same SQL query
    assert _needs(t, 7) == [(3, "reaccess")]  # the same URL
    assert _needs(t, 9) == [(4, "reaccess")]  # another tool reading the same local file


def test_write_like_tools_modify_what_they_name():
    t = _labelled()
    assert t.steps[8].write_resources == ["/srv/app/config.yaml"]  # write_file with a path
    assert t.steps[10].write_resources[0].startswith("state:sqlite.write_query(")  # an UPDATE statement
    assert t.steps[8].read_resource is None


def test_a_path_inside_a_repository_is_not_a_local_file():
    t = _labelled()
    # the GitHub read of config.yaml is not a re-read of the local /srv/app/config.yaml
    assert (0, "reaccess") not in _needs(t, 1)
    assert "file:" not in (t.steps[1].read_resource or "")


@pytest.mark.parametrize(
    ("name", "args", "reads", "writes"),
    [
        (
            "browser_navigate",
            {"url": "https://a.b/c"},
            ['call:browser_navigate({"url":"https://a.b/c"})', "call:url(https://a.b/c)"],
            [],
        ),
        ("browser_click", {"element": "Submit"}, [], ['state:browser_click({"element":"Submit"})']),
        ("postgres.query", {"sql": "DELETE FROM t"}, [], ['state:postgres.query({"sql":"DELETE FROM t"})']),
        ("run_query", {"sql": "select 1"}, ['call:run_query({"sql":"select 1"})'], []),
        ("createOrUpdateFile", {"path": "src/a.py", "content": "x"}, [], ["src/a.py"]),
        ("think", {"thought": "hmm"}, [], []),
        ("read_multiple_files", {"paths": ["a.py", "b.py"]}, None, []),
    ],
)
def test_the_generic_rule(name, args, reads, writes):
    s = Step(index=0, tool_name=name, tool_args=json.dumps(args), output="ok")
    t = Trajectory("x", "openai-chat", "", "other", "t", steps=[s])
    label_trajectory(t)
    got = (s.read_resource or "").split("\n") if s.read_resource else []
    if reads is None:
        assert "file:a.py" in got and "file:b.py" in got
    else:
        assert got == reads
    assert s.write_resources == writes


def test_server_prefixes_are_stripped_and_known_tools_keep_their_category():
    assert base_tool_name("mcp__filesystem__read_file") == "read_file"
    assert base_tool_name("github/get_file_contents") == "get_file_contents"
    # Goose names a tool by its extension; Gemini CLI's grep has its own name
    assert base_tool_name("developer__shell") == "shell" and base_tool_name("__init__") == "__init__"
    assert tool_kind("developer__shell") == "shell" and tool_kind("developer__text_editor") == "editor"
    assert tool_category("search_file_content", '{"pattern": "x"}') == "search"
    assert tool_category("mcp__filesystem__read_file") == "read"
    assert tool_category("read_file") == "read"  # LiveEnv's own tools
    assert tool_category("write_file") == "edit" and tool_category("str_replace") == "edit"
    assert tool_category("NotebookEdit") == "edit" and tool_category("WebFetch") == "read"
