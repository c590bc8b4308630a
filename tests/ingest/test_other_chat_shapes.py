"""The same conversations in the other shapes agent logs take: Anthropic Messages blocks, OpenAI
Responses items and Codex CLI rollouts must give the steps the chat-completions reading gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.codex import CodexRolloutIngester
from dtoc_rl.ingest.openai_chat import OpenAIChatIngester, iso_to_epoch
from dtoc_rl.ingest.responses import responses_to_messages
from dtoc_rl.labels import label_trajectory

CHAT = OpenAIChatIngester()
CODEX = CodexRolloutIngester()
TAU = Path("raw") / "tau-bench_gpt-4o_airline" / "gpt-4o-airline.json"
FIELDS = ("turn", "user_text", "assistant_text", "tool_name", "tool_args", "tool_call_id", "output")


def _fields(t):
    return [tuple(getattr(s, f) for f in FIELDS) for s in t.steps]


def _anthropic(msgs: list[dict]) -> list[dict]:
    # tool calls as tool_use blocks, consecutive tool replies as one user message of tool_result blocks
    out: list[dict] = []
    for m in msgs:
        if m["role"] == "assistant" and m.get("tool_calls"):
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for c in m["tool_calls"]:
                args = json.loads(c["function"]["arguments"])
                blocks.append(
                    {"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": args}
                )
            out.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def _items(msgs: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in msgs:
        if m["role"] == "assistant":
            if m.get("content"):
                out.append({"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": m["content"]}]})  # fmt: skip
            for c in m.get("tool_calls") or []:
                out.append({"type": "function_call", "call_id": c["id"], **c["function"]})
        elif m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        else:
            out.append({"type": "message", "role": m["role"],
                        "content": [{"type": "input_text", "text": m["content"]}]})  # fmt: skip
    return out


def _rollout(path: Path, items: list[dict], *, usage_after: bool = True, legacy: bool = False) -> Path:
    lines: list[dict] = []
    if legacy:
        lines.append({"id": "s-legacy", "timestamp": "2025-06-01T00:00:00Z", "instructions": None})
        lines.extend(items)
    else:
        env = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"
        lines.append(
            {"type": "session_meta", "payload": {"id": "s1", "cwd": "/repo", "cli_version": "0.60.0"}}
        )
        first = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": env}]}
        lines.append({"type": "response_item", "payload": first})
        lines.append({"type": "turn_context", "payload": {"model": "gpt-5.1-codex"}})
        total = 0
        for k, it in enumerate(items):
            lines.append({"timestamp": f"2026-05-01T10:{k:02d}:00Z", "type": "response_item", "payload": it})
            nxt = items[k + 1] if k + 1 < len(items) else None
            ends_call = (
                it["type"] != "function_call_output"
                and it.get("role") != "user"
                and (nxt is None or nxt["type"] == "function_call_output" or nxt.get("role") == "user")
            )
            if usage_after and ends_call:
                total += 1000 + k
                last = {"input_tokens": 1000 + k, "cached_input_tokens": 900, "output_tokens": 7}
                info = {"last_token_usage": last, "total_token_usage": {"input_tokens": total}}
                for _ in range(2):  # Codex reports a call twice at times: one call, one usage
                    lines.append({"type": "event_msg", "payload": {"type": "token_count", "info": info}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def tau_runs(data_dir):
    return [x["traj"] for x in json.loads((data_dir / TAU).read_text())[:6]]


def test_anthropic_blocks_read_as_tool_calls(tmp_path, tau_runs):
    ref = list(CHAT.parse(_write(tmp_path / "chat.jsonl", [{"messages": m} for m in tau_runs])))
    got = list(CHAT.parse(_write(tmp_path / "anth.jsonl", [{"messages": _anthropic(m)} for m in tau_runs])))
    assert detect_format(tmp_path / "anth.jsonl").name == "openai-chat"
    assert sum(s.tool_name is not None for t in got for s in t.steps) > 20
    assert [_fields(t) for t in got] == [_fields(t) for t in ref]


def test_anthropic_error_flag_thinking_and_text_beside_results(tmp_path):
    msgs = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look first", "signature": "x"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "cat a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "No such file"}],
                },
                {"type": "text", "text": "try b.py"},
            ],
        },
        {"role": "assistant", "content": "ok"},
    ]
    (t,) = CHAT.parse(_write(tmp_path / "a.json", [{"messages": msgs}]))
    s0, s1 = t.steps
    assert (s0.tool_name, s0.tool_args, s0.output, s0.output_is_error, s0.reasoning) == (
        "bash", '{"command": "cat a.py"}', "No such file", True, "look first")  # fmt: skip
    assert s1.user_text == "try b.py" and s1.assistant_text == "ok"


def test_a_runs_own_system_prompt_beside_its_messages_is_kept(tmp_path):
    # an Anthropic Messages request keeps it in "system" (text or blocks), a Responses one in
    # "instructions": every call is sent it, so it is the system prompt, not a field of extra
    msgs = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "ok"}]
    blocks = [{"type": "text", "text": "You are "}, {"type": "text", "text": "careful.", "cache_control": {}}]
    items = [{"role": "user", "content": "fix it"}, {"type": "message", "role": "assistant", "content": "ok"}]
    rows = [
        {"id": "a", "system": "Be brief.", "messages": msgs},
        {"id": "b", "system": blocks, "messages": msgs},
        {"id": "c", "instructions": "Use the tools.", "input": items},
        {"id": "d", "system": "beside", "messages": [{"role": "system", "content": "inside"}, *msgs]},
    ]
    got = {t.traj_id.rsplit("/", 1)[-1]: t for t in CHAT.parse(_write(tmp_path / "runs.jsonl", rows))}
    assert {k: t.system_prompt for k, t in got.items()} == {
        "a": "Be brief.", "b": "You are careful.", "c": "Use the tools.", "d": "inside"}  # fmt: skip
    assert all(t.task_text == "fix it" for t in got.values())
    assert "system" not in json.loads(got["a"].extra) and "instructions" not in json.loads(got["c"].extra)
    assert json.loads(got["d"].extra)["system"] == "beside"  # not used, so kept


def test_responses_items_read_as_chat(tmp_path, tau_runs):
    ref = list(CHAT.parse(_write(tmp_path / "chat.jsonl", [{"messages": m} for m in tau_runs])))
    rows = [{"id": str(i), "input": _items(m)} for i, m in enumerate(tau_runs)]
    p = _write(tmp_path / "resp.jsonl", rows)
    assert detect_format(p).name == "openai-chat"
    assert [_fields(t) for t in CHAT.parse(p)] == [_fields(t) for t in ref]
    bare = tmp_path / "one.json"  # one run as a bare list of items
    bare.write_text(json.dumps(_items(tau_runs[0])))
    assert detect_format(bare).name == "openai-chat"
    assert [_fields(t) for t in CHAT.parse(bare)] == [_fields(ref[0])]


def test_responses_other_call_kinds_and_skipped_items():
    items = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "web_search_call", "id": "ws1", "status": "completed"},
        {"type": "local_shell_call", "call_id": "l1", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "mcp_call", "id": "m1", "name": "fetch", "arguments": "{}", "output": "page"},
    ]
    rp = responses_to_messages(items)
    assert [m["role"] for m in rp.messages] == ["user", "assistant", "tool"]
    a = rp.messages[1]
    assert a["reasoning_content"] == "plan"
    assert [c["function"]["name"] for c in a["tool_calls"]] == ["local_shell", "fetch"]
    assert rp.messages[2] == {"role": "tool", "tool_call_id": "m1", "content": "page"}
    assert dict(rp.skipped) == {"web_search_call": 1}
    with pytest.raises(IngestError, match=r"items\[1\] has no call_id"):
        responses_to_messages([{"role": "user", "content": "x"}, {"type": "function_call", "name": "f"}])


@pytest.mark.parametrize("legacy", [False, True])
def test_codex_rollout(tmp_path, tau_runs, legacy):
    msgs = tau_runs[0]
    ref = next(CHAT.parse(_write(tmp_path / "chat.jsonl", [{"messages": msgs}])))
    items = _items([m for m in msgs if m["role"] != "system"])
    p = _rollout(tmp_path / "rollout-1.jsonl", items, legacy=legacy)
    assert detect_format(p).name == "codex"
    (t,) = CODEX.parse(p)
    assert [f[3:] for f in _fields(t)] == [f[3:] for f in _fields(ref)]  # calls and outputs
    assert t.task_text == ref.task_text  # Codex's environment context is no task
    if legacy:
        assert all(s.usage is None for s in t.steps) and t.model_family == "other"
        return
    assert "<environment_context>" in t.system_prompt and t.model_family == "gpt-5"
    firsts = [s for k, s in enumerate(t.steps) if k == 0 or s.turn != t.steps[k - 1].turn]
    assert all(s.usage is not None and s.usage.cached_tokens == 900 for s in firsts)
    assert len({s.usage.input_tokens for s in firsts}) == len(firsts)  # each call its own usage
    assert all(s.usage is None for s in t.steps if s not in firsts)
    assert json.loads(t.extra)["cli_version"] == "0.60.0"
    # a call's time is its first item's line (item k written at minute k; item 0 is the task)
    assert t.steps[0].timestamp == iso_to_epoch("2026-05-01T10:01:00Z")
    times = [s.timestamp for s in firsts]
    assert all(a < b for a, b in zip(times, times[1:]))
    at = {s.turn: s.timestamp for s in firsts}
    assert all(s.timestamp == at[s.turn] for s in t.steps)  # parallel calls share their call's time


def test_codex_shell_argv_patch_and_compaction_are_labelled(tmp_path):
    def sh(cid, cmd, out):
        args = json.dumps({"command": ["bash", "-lc", cmd]})
        return [{"type": "function_call", "call_id": cid, "name": "shell", "arguments": args},
                {"type": "function_call_output", "call_id": cid, "output": out}]  # fmt: skip

    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch"
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix a.py"}]},
             *sh("c1", "cat a.py", "x = 1\n" * 20), *sh("c2", "ls", "a.py"),
             {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": patch},
             {"type": "custom_tool_call_output", "call_id": "c3", "output": "Success."}]  # fmt: skip
    p = _rollout(tmp_path / "rollout-2.jsonl", items)
    lines = p.read_text().splitlines()
    at = next(k for k, line in enumerate(lines) if "custom_tool_call" in line)  # before the patch call
    lines.insert(at, json.dumps({"type": "compacted", "payload": {"message": "summary so far"}}))
    p.write_text("\n".join(lines) + "\n")
    (t,) = CODEX.parse(p)
    label_trajectory(t)
    s = t.steps
    assert s[0].read_resource == "file:a.py" and s[1].read_resource == "list:."
    assert [(n.step, n.kind) for n in s[2].needs] == [(0, "edit")]
    assert [e.kind for e in s[2].events] == ["compaction"] and s[2].events[0].targets == [0, 1]
    assert s[2].user_text == "summary so far"


def test_codex_bad_lines_are_named(tmp_path):
    p = _rollout(tmp_path / "rollout-3.jsonl", [{"type": "message", "role": "user", "content": "x"}])
    p.write_text(p.read_text() + "{not json\n" + json.dumps({"type": "response_item", "payload": 3}) + "\n")
    with pytest.raises(IngestError, match=r"2 bad lines: line \d+: invalid JSON.*payload is int"):
        list(CODEX.parse(p))


def test_codex_detection_is_strict(tmp_path, repo_root):
    chat = _write(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "q"}]}])
    assert not CODEX.detect(chat, chat.read_text())
    fixture = next((repo_root / "tests/fixtures/claude_code_transcript").glob("*.jsonl"))
    assert not CODEX.detect(fixture, fixture.read_text()[:65536])


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_text_actions_match_the_native_mini_swe_agent_reading(tmp_path, data_dir):
    from dtoc_rl.ingest.mini_swe_agent import MiniSweAgentIngester

    files = sorted((data_dir / "raw" / "mini-swe-agent_gemini-3-pro_swebench-verified").rglob("*.traj.json"))
    native = [t for f in files for t in MiniSweAgentIngester().parse(f)]
    p = _write(tmp_path / "plain.jsonl", [{"messages": json.loads(f.read_text())["messages"]} for f in files])
    got = list(CHAT.parse(p))
    fields = ("tool_name", "tool_args", "output", "assistant_text", "user_text", "turn")
    assert [[tuple(getattr(s, f) for f in fields) for s in t.steps] for t in got] == [
        [tuple(getattr(s, f) for f in fields) for s in t.steps] for t in native
    ]
    assert len(files) >= 10 and sum(s.tool_name is not None for t in got for s in t.steps) > 200
    assert {json.loads(t.extra)["text_actions"] for t in got} == {"bash"}


def test_text_actions_match_the_native_swe_agent_reading(shared_traces, tmp_path):
    from dtoc_rl.ingest.swe_agent import SweAgentIngester

    files = sorted((shared_traces / "swe-agent-1.0_swebench-verified").rglob("*.traj"))[:20]
    if not files:
        pytest.skip("no SWE-agent 1.x runs in ../shared")
    for f in files:
        (native,) = SweAgentIngester().parse(f)
        history = json.loads(f.read_text())["history"]
        msgs = [{"role": m["role"], "content": m["content"]} for m in history]
        (got,) = CHAT.parse(_write(tmp_path / "h.jsonl", [{"messages": msgs}]))
        want = [(s.tool_name, s.tool_args) for s in native.steps if s.tool_name]
        assert [(s.tool_name, s.tool_args) for s in got.steps if s.tool_name] == want, f.name


_ACT = [{"role": "user", "content": "task"}]


@pytest.mark.parametrize(
    ("reply", "name", "args", "thought"),
    [
        ("Let me look.\n<function=str_replace_editor>\n<parameter=command>view</parameter>\n"
         "<parameter=path>/repo/a.py</parameter>\n<parameter=view_range>[1, 20]</parameter>\n</function>",
         "str_replace_editor", '{"command": "view", "path": "/repo/a.py", "view_range": [1, 20]}',
         "Let me look."),
        ("Run it.\n<execute_bash>\npytest -q\n</execute_bash>", "bash", '{"command": "pytest -q"}',
         "Run it."),
        ("THOUGHT: list it\n\n```bash\nls -la\n```", "bash", "ls -la", "list it"),
    ],
)  # fmt: skip
def test_text_action_conventions(tmp_path, reply, name, args, thought):
    msgs = [*_ACT, {"role": "assistant", "content": reply}, {"role": "user", "content": "OBS 1"},
            {"role": "assistant", "content": reply}, {"role": "user", "content": "OBS 2"},
            {"role": "assistant", "content": "done"}]  # fmt: skip
    (t,) = CHAT.parse(_write(tmp_path / "t.jsonl", [{"messages": msgs}]))
    got = [(s.tool_name, s.tool_args, s.output, s.assistant_text) for s in t.steps]
    assert got == [(name, args, "OBS 1", thought), (name, args, "OBS 2", thought), (None, "", None, "done")]


def test_a_chat_that_shows_code_is_no_agent_loop(tmp_path):
    fence = "Use:\n```bash\nls\n```"
    xml = "Like `<function=bash>\n<parameter=command>ls</parameter>\n</function>`."
    chats = [
        [*_ACT, {"role": "assistant", "content": fence}, {"role": "user", "content": "thanks, and?"},
         {"role": "assistant", "content": "Nothing else."}],
        [*_ACT, {"role": "assistant", "content": xml}, {"role": "user", "content": "ok"},
         {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"},
         {"role": "assistant", "content": fence}, {"role": "user", "content": "c"},
         {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}],
        [*_ACT, {"role": "assistant", "content": "```bash\nls\n```\n```bash\npwd\n```"},
         {"role": "user", "content": "format error"}, {"role": "assistant", "content": "```bash\nls\n```"}],
    ]  # fmt: skip
    for i, msgs in enumerate(chats):
        (t,) = CHAT.parse(_write(tmp_path / f"c{i}.jsonl", [{"messages": msgs}]))
        assert all(s.tool_name is None for s in t.steps) and "text_actions" not in json.loads(t.extra), i


def test_text_actions_never_second_guess_a_function_calling_log(tmp_path):
    call = {"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    native = [*_ACT, {"role": "assistant", "content": "```bash\nls\n```", "tool_calls": [call]},
              {"role": "tool", "tool_call_id": "c", "content": "x"},
              {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "y"},
              {"role": "assistant", "content": "```bash\nls\n```"},
              {"role": "user", "content": "z"}]  # fmt: skip
    (t,) = CHAT.parse(_write(tmp_path / "b.jsonl", [{"messages": native}]))
    assert [(s.tool_name, s.output) for s in t.steps] == [("read", "x"), (None, None), (None, None)]


def test_ingest_warns_when_runs_have_no_tool_calls(tmp_path, capsys):
    from dtoc_rl.cli import main

    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    tools = [{"messages": _anthropic(m)} for m in _tau_like()]
    src = _write(tmp_path / "runs.jsonl", [{"messages": chat}, *tools])
    assert main(["ingest", str(src), "-o", str(tmp_path / "ds"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 of 2 trajectories have no tool calls" in err


def _tau_like() -> list[list[dict]]:
    call = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"id": 1}'}}
    return [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "content": "user 1"}]]  # fmt: skip


def test_codex_argv_commands_and_apply_patch_forms_are_labelled():
    from dtoc_rl.data.schema import Trajectory
    from dtoc_rl.ingest.common import finalize, new_step

    patch = (
        "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** Add File: b.py\n+y\n*** End Patch"
    )
    commands = [
        ["cat", "a.py"],
        ["apply_patch", patch],  # the patch as the argument
        ["bash", "-lc", f"apply_patch <<'EOF'\n{patch}\nEOF"],  # as a heredoc
        ["bash", "--norc", "-c", "cat a.py"],  # long options before -c
        # a log that kept the command on one line, its newlines written \n (RepoLaunch's gpt-5.2)
        ["bash", "-lc", "apply_patch <<'PATCH'\\n" + patch.replace("\n", "\\n") + "\\nPATCH"],
    ]
    steps = [new_step(turn=i, tool_name="shell", tool_args=json.dumps({"command": c}), output="x = 1\n")
             for i, c in enumerate(commands)]  # fmt: skip
    t = finalize(Trajectory(traj_id="x", source="codex", model_raw="", model_family="other", task_id="t",
                            task_text="t", system_prompt="", success=None, outcome_source="", source_path="",
                            extra="{}", steps=steps))  # fmt: skip
    label_trajectory(t)
    s = t.steps
    assert s[1].write_resources == s[2].write_resources == ["a.py", "b.py"]
    assert [(n.step, n.kind) for n in s[1].needs] == [(0, "edit")] == [(n.step, n.kind) for n in s[2].needs]
    assert s[3].read_resource == "file:a.py"
    assert s[4].write_resources == ["a.py", "b.py"] and s[4].read_resource is None


def test_responses_short_form_messages_computer_calls_and_ids():
    items = [
        {"role": "user", "content": "go"},  # the short form first
        {"type": "computer_call", "call_id": "cc1", "action": {"type": "click", "x": 1, "y": 2}},
        {"type": "computer_call_output", "call_id": "cc1", "output": {"type": "input_image"}},
        {"type": "local_shell_call", "id": "ls1", "call_id": None, "action": {"command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "ls1", "output": "a.py"},
    ]
    from dtoc_rl.ingest.responses import is_item_list

    assert is_item_list(items) and not is_item_list([{"role": "user", "content": "x"}])
    assert not is_item_list([{"type": ["message"]}])
    rp = responses_to_messages(items)
    calls = [c["function"]["name"] for m in rp.messages if m["role"] == "assistant" for c in m["tool_calls"]]
    assert calls == ["computer", "local_shell"]
    assert [m.get("tool_call_id") for m in rp.messages if m["role"] == "tool"] == ["cc1", "ls1"]
    with pytest.raises(IngestError, match=r"items\[0\] has type \['message'\]"):
        responses_to_messages([{"type": ["message"]}])


def test_codex_forgives_only_a_torn_last_line(tmp_path):
    items = [{"type": "message", "role": "user", "content": "x"}, *_items([
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"}])]  # fmt: skip
    p = _rollout(tmp_path / "rollout-4.jsonl", items)
    p.write_text(p.read_text() + '{"type": "response_item", "payload": {"type": "mess')
    (t,) = CODEX.parse(p)
    assert json.loads(t.extra)["torn_last_line"] is True and t.steps[0].output == "out"


def test_no_shipped_log_is_read_as_codex(repo_root):
    from dtoc_rl.ingest import detect_format

    files = [f for d in ("data/raw", "tests/fixtures") for f in (repo_root / d).rglob("*") if f.is_file()]
    assert len(files) > 20
    assert not [f for f in files if (ing := detect_format(f)) is not None and ing.name == "codex"]


def test_anthropic_block_errors_name_the_block_and_a_call_without_input_has_empty_arguments(tmp_path):
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": None}]},
        {"role": "user", "content": [{"type": "text", "text": "x"},
                                     {"type": "tool_result", "tool_use_id": "t9", "content": "y"}]},
    ]  # fmt: skip
    with pytest.raises(IngestError, match=r"content\[1\]: tool reply \(tool_call_id='t9'\)"):
        list(CHAT.parse(_write(tmp_path / "bad.jsonl", [{"messages": msgs}])))
    msgs[2]["content"][1]["tool_use_id"] = "t1"
    (t,) = CHAT.parse(_write(tmp_path / "ok.jsonl", [{"messages": msgs}]))
    assert (t.steps[0].tool_args, t.steps[0].output) == ("{}", "y")


def _codex_outputs_rollout(tmp_path: Path) -> Path:
    # Outputs in the three ways Codex CLIs write them: JSON-wrapped (older `shell`), an exit-code
    # header (newer `exec_command`), an `Exit code:` header (`apply_patch`).
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30))

    def call(cid, name, args, out):
        return [{"type": "function_call", "call_id": cid, "name": name, "arguments": json.dumps(args)},
                {"type": "function_call_output", "call_id": cid, "output": out}]  # fmt: skip

    def wrapped(out, code):
        return json.dumps({"output": out, "metadata": {"exit_code": code, "duration_seconds": 0.1}})

    patch = (
        "*** Begin Patch\n*** Update File: src/p.py\n@@\n-    return x + 3\n+    return x - 3\n*** End Patch"
    )
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix p.py"}]},
        *call("c1", "exec_command", {"cmd": "cat src/p.py", "workdir": "/repo"},
              "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\n" + body),
        *call("c2", "exec_command", {"cmd": "pytest -q"},
              "Process exited with code 1\nOutput:\nFAILED t.py::x\n"),
        *call("c3", "shell", {"command": ["bash", "-lc", "cat src/u.py"]},
              wrapped("def g():\n    return 1\n", 0)),
        *call("c4", "shell", {"command": ["bash", "-lc", "python -c 'import x'"]}, wrapped("Traceback\n", 1)),
        {"type": "custom_tool_call", "call_id": "c5", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "c5", "output": "Exit code: 0\nOutput:\nSuccess."},
        *call("c6", "update_plan", {"plan": [{"step": "fix", "status": "completed"}]}, "Plan updated"),
    ]  # fmt: skip
    return _rollout(tmp_path / "rollout-4.jsonl", items)


def test_codex_outputs_are_unwrapped_their_exit_codes_read_and_exec_command_is_a_shell(tmp_path):
    (t,) = CODEX.parse(_codex_outputs_rollout(tmp_path))
    label_trajectory(t)
    s = t.steps
    assert [x.output_is_error for x in s] == [False, True, False, True, False, False]
    assert s[2].output == "def g():\n    return 1\n"  # the wrapper's own text, lines the labeller can match
    assert s[0].output.startswith("Chunk ID: 1\n")  # a header the model read stays
    assert (s[0].read_resource, s[2].read_resource) == ("file:src/p.py", "file:src/u.py")
    assert [(n.step, n.kind) for n in s[4].needs] == [(0, "edit")]  # the patch edits what call 1 read
    assert s[5].read_resource is None and not s[5].write_resources  # a plan reads and writes nothing


def _stream(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_codex_exec_json_stream(tmp_path):
    body = "".join(f"line {i} of the module\n" for i in range(40))

    def item(i, **kw):
        return {"type": "item.completed", "item": {"id": f"item_{i}", **kw}}

    events = [
        {"type": "thread.started", "thread_id": "th-1"},
        {"type": "turn.started"},
        item(0, type="reasoning", text="**Reading the module**"),
        {"type": "item.started", "item": {"id": "item_1", "type": "command_execution", "command": "cat m.py",
                                          "aggregated_output": "", "exit_code": None,
                                          "status": "in_progress"}},
        item(1, type="command_execution", command="bash -lc 'cat m.py'", aggregated_output=body, exit_code=0,
             status="completed"),
        item(2, type="todo_list", items=[{"text": "fix", "completed": False}]),
        item(3, type="file_change", status="completed",
             changes=[{"path": "m.py", "kind": "update"}, {"path": "n.py", "kind": "add"}]),
        item(4, type="command_execution", command="pytest", aggregated_output="1 failed\n", exit_code=1,
             status="failed"),
        item(5, type="mcp_tool_call", server="docs", tool="search", arguments={"q": "x"}, result=None,
             error={"message": "timeout"}, status="failed"),
        item(6, type="agent_message", text="Done: m.py fixed."),
        {"type": "turn.completed",
         "usage": {"input_tokens": 5000, "cached_input_tokens": 3000, "output_tokens": 200}},
    ]  # fmt: skip
    p = _stream(tmp_path / "codex-exec.jsonl", events)
    assert detect_format(p).name == "codex"
    (t,) = CODEX.parse(p)
    label_trajectory(t)
    s = t.steps
    assert [x.tool_name for x in s] == ["shell", "apply_patch", "shell", "docs.search", None]
    assert s[0].reasoning == "**Reading the module**" and s[0].output == body
    assert [x.output_is_error for x in s[:4]] == [False, False, True, True]
    assert s[1].write_resources == ["m.py", "n.py"]
    assert [(n.step, n.kind) for n in s[1].needs] == [(0, "edit")]  # the change edits what call 1 read
    assert s[3].output == "timeout" and s[4].assistant_text == "Done: m.py fixed."
    assert (t.traj_id, t.tokens_in, t.tokens_out, t.task_text) == ("codex/th-1", 5000, 200, "")
    assert json.loads(t.extra)["skipped_items"] == json.dumps({"todo_list": 1})


def test_codex_exec_json_stream_with_a_broken_item_names_its_line(tmp_path):
    p = _stream(tmp_path / "codex-exec.jsonl", [{"type": "thread.started", "thread_id": "t"},
                                                 {"type": "item.completed", "item": "oops"}])  # fmt: skip
    with pytest.raises(IngestError, match=r"line 2: item is str, expected object"):
        list(CODEX.parse(p))


def test_codex_exec_json_usage_is_the_threads_running_total_and_odd_items_are_read(tmp_path):
    def item(i, **kw):
        return {"type": "item.completed", "item": {"id": f"item_{i}", **kw}}

    diff = "@@\n-a = 1\n+a = 2"
    events = [
        {"type": "thread.started", "thread_id": "th-2"},
        item(0, type="command_execution", command="rm -rf /", aggregated_output="", exit_code=None,
             status="declined"),
        item(1, type="file_change", status="completed",
             changes=[{"path": "a.py", "kind": "update", "diff": diff}]),
        item(2, type="mcp_tool_call", server="s", tool="t", arguments=None, result="plain text", error=None),
        item(3, type="mcp_tool_call", server="s", tool="t", arguments={}, result=None, error="boom"),
        {"type": "turn.completed", "usage": {"input_tokens": 1000, "output_tokens": 10}},
        {"type": "turn.started"},
        item(4, type="agent_message", text="ok"),
        {"type": "turn.completed", "usage": {"input_tokens": 2500, "output_tokens": 30}},
    ]  # fmt: skip
    (t,) = CODEX.parse(_stream(tmp_path / "codex-exec.jsonl", events))
    label_trajectory(t)
    s = t.steps
    assert (t.tokens_in, t.tokens_out) == (2500, 30)  # the last running total, not 3500 summed
    assert s[0].output_is_error  # a declined command did not run
    assert diff in s[1].tool_args and s[1].write_resources == ["a.py"]
    assert (s[2].output, s[2].output_is_error, s[3].output, s[3].output_is_error) == (
        "plain text", False, "boom", True,
    )  # fmt: skip


def test_codex_exit_codes_are_read_from_the_header_only_and_only_codex_wrappers_are_unwrapped(tmp_path):
    def call(cid, out):
        return [{"type": "function_call", "call_id": cid, "name": "exec_command", "arguments": "{}"},
                {"type": "function_call_output", "call_id": cid, "output": out}]  # fmt: skip

    mcp_like = json.dumps({"output": "x", "structured": {"rows": 3}})
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        *call("c1", "Process running with session ID 7\nOutput:\nExit code: 2\n"),
        *call("c2", mcp_like),
    ]
    (t,) = CODEX.parse(_rollout(tmp_path / "rollout-5.jsonl", items))
    assert [s.output_is_error for s in t.steps] == [False, False]  # "Exit code: 2" is the program's text
    assert t.steps[1].output == mcp_like  # not Codex's {"output", "metadata"} wrapper: kept whole


def _hermes(calls, text="Let me look."):
    blocks = "".join(
        f"\n<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
    )
    return {"role": "assistant", "content": text + blocks}


def _resp(text):
    return f"<tool_response>\n{text}\n</tool_response>"


@pytest.mark.parametrize("one_message", [False, True])
def test_hermes_tool_calls_written_as_text_are_steps_with_their_outputs(tmp_path, one_message):
    # the Hermes / Qwen chat templates write a call as <tool_call>{json}</tool_call> in the reply; a
    # rollout saved as raw text keeps them there, each answered by a tool message (no ids), or two
    # answered together by one message of <tool_response> blocks
    two = [("bash", {"command": "cat a.py"}), ("bash", {"command": "cat b.py"})]
    answers = (
        [{"role": "tool", "content": _resp("A") + "\n" + _resp("B")}]
        if one_message
        else [{"role": "tool", "content": _resp("A")}, {"role": "tool", "content": _resp("B")}]
    )
    msgs = [
        {"role": "user", "content": "compare a.py and b.py"},
        _hermes(two),
        *answers,
        _hermes([("bash", {"command": "diff a.py b.py"})], "Now the diff."),
        {"role": "tool", "content": _resp("1c1")},
        {"role": "assistant", "content": "They differ in one line."},
    ]
    f = tmp_path / "rollout.jsonl"
    f.write_text(json.dumps({"id": "r0", "model": "Qwen/Qwen3-32B", "messages": msgs}) + "\n")
    (t,) = CHAT.parse(f)
    steps = [s for s in t.steps if s.tool_name]
    assert [(s.tool_name, json.loads(s.tool_args)["command"]) for s in steps] == [
        ("bash", "cat a.py"), ("bash", "cat b.py"), ("bash", "diff a.py b.py")
    ]  # fmt: skip
    assert ["A" in s.output for s in steps] == [True, False, False] and "B" in steps[1].output
    assert "1c1" in steps[2].output and steps[0].turn == steps[1].turn != steps[2].turn
    assert steps[0].assistant_text == "Let me look." and "<tool_call>" not in steps[2].assistant_text


def test_a_langchain_message_dump_reads_as_the_chat_it_is(tmp_path):
    def ai(content, calls, tokens, cached):
        return {"type": "ai", "content": content, "id": f"run-{tokens}",
                "tool_calls": [{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls],
                "usage_metadata": {"input_tokens": tokens, "output_tokens": 9,
                                   "input_token_details": {"cache_read": cached}},
                "response_metadata": {"model_name": "gpt-4o-2024-08-06"}}  # fmt: skip

    msgs = [
        {"type": "system", "content": "You are a coding agent."},
        {"type": "human", "content": "What is in foo.py?"},
        ai("", [("read_file", {"path": "foo.py"}, "c1")], 900, 0),
        {
            "type": "tool",
            "content": "def foo():\n    return 1/0\n",
            "tool_call_id": "c1",
            "name": "read_file",
        },
        ai("foo() divides by zero.", [], 950, 896),
    ]
    f = tmp_path / "state.json"
    f.write_text(json.dumps({"messages": msgs}))
    assert detect_format(f) is CHAT or type(detect_format(f)) is type(CHAT)
    (t,) = CHAT.parse(f)
    assert t.model_raw == "gpt-4o-2024-08-06" and t.system_prompt == "You are a coding agent."
    call, answer = t.steps
    assert (call.tool_name, json.loads(call.tool_args), call.output) == (
        "read_file", {"path": "foo.py"}, "def foo():\n    return 1/0\n"
    )  # fmt: skip
    assert answer.tool_name is None and answer.assistant_text == "foo() divides by zero."
    assert (call.usage.input_tokens, answer.usage.input_tokens, answer.usage.cached_tokens) == (900, 950, 896)


def test_langchain_dumps_of_claude_and_of_messages_to_dict_give_each_call_once(tmp_path):
    use = {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.py"}}
    call = {"name": "read_file", "args": {"path": "a.py"}, "id": "c1", "type": "tool_call"}
    claude = [
        {"type": "human", "content": "read a.py"},
        # ChatAnthropic: the call both as a tool_use block of the content and in tool_calls
        {"type": "ai", "content": [{"type": "text", "text": "Reading."}, use], "tool_calls": [call]},
        {"type": "tool", "content": "boom", "tool_call_id": "c1", "status": "error"},
        {"type": "ai", "content": "It failed."},
    ]
    as_dicts = [{"type": m["type"], "data": m} for m in claude]  # messages_to_dict's shape
    for i, msgs in enumerate((claude, as_dicts)):
        f = tmp_path / f"state{i}.json"
        f.write_text(json.dumps({"messages": msgs}))
        (t,) = CHAT.parse(f)
        tools = [s for s in t.steps if s.tool_name]
        assert [(s.tool_name, s.output, s.output_is_error) for s in tools] == [("read_file", "boom", True)]
        assert tools[0].assistant_text == "Reading."


def test_qwen3_coder_xml_calls_inside_tool_call_blocks_and_a_malformed_block_kept_as_text(tmp_path):
    def xml(cmd):
        body = f"<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>"
        return f"<tool_call>\n{body}\n</tool_call>"

    msgs = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "Look.\n" + xml("ls") + "\n<tool_call>{not json</tool_call>"},
        {"role": "user", "content": _resp("a b")},
        {"role": "assistant", "content": xml("cat a") + "\n" + xml("cat b")},
        {"role": "user", "content": _resp("AAA") + "\n" + _resp("BBB")},
        {"role": "assistant", "content": "fin"},
    ]
    f = tmp_path / "q.json"
    f.write_text(json.dumps({"messages": msgs, "model": "Qwen/Qwen3-Coder-480B-A35B-Instruct"}))
    (t,) = CHAT.parse(f)
    tools = [s for s in t.steps if s.tool_name]
    assert [json.loads(s.tool_args)["command"] for s in tools] == ["ls", "cat a", "cat b"]
    assert "AAA" in tools[1].output and "BBB" in tools[2].output and "AAA" not in tools[2].output
    assert "<tool_call>{not json</tool_call>" in tools[0].assistant_text  # as the model wrote it


def _goose_request(i, value):
    return {"type": "toolRequest", "id": i, "toolCall": value}


def _goose_response(i, result):
    return {"type": "toolResponse", "id": i, "toolResult": result}


def _goose_shell(command):
    return {"status": "success", "value": {"name": "developer__shell", "arguments": {"command": command}}}


def test_a_goose_session_export_reads_its_tool_requests_and_responses(tmp_path):
    request = _goose_request("t1", _goose_shell("ls"))
    response = _goose_response("t1", {"status": "success", "value": [{"type": "text", "text": "a.py"}]})

    def msg(k, role, *blocks):
        return {"id": f"m{k}", "role": role, "created": 1750000000 + k, "content": list(blocks)}

    msgs = [
        msg(1, "user", {"type": "text", "text": "list files"}),
        msg(2, "assistant", {"type": "text", "text": "Listing."}, request),
        msg(3, "user", response),
        msg(4, "assistant", {"type": "text", "text": "One file."}),
    ]
    f = tmp_path / "session.json"
    f.write_text(json.dumps({"id": "s1", "working_dir": "/w", "description": "list", "messages": msgs}))
    (t,) = CHAT.parse(f)
    assert [(s.tool_name, json.loads(s.tool_args) if s.tool_name else None, s.output) for s in t.steps] == [
        ("developer__shell", {"command": "ls"}, "a.py"), (None, None, None)
    ]  # fmt: skip


def test_a_tool_call_tag_named_in_prose_does_not_swallow_the_call_after_it():
    from dtoc_rl.ingest.text_actions import hermes_calls

    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    text = "I will wrap it in a <tool_call> block.\n" + call
    assert hermes_calls(text) == ([("bash", '{"command": "ls"}')], "I will wrap it in a <tool_call> block.")
    xml = "<tool_call>\n<function=finish>\n<parameter=message>\n  indented\n</parameter>\n</function>\n"
    xml += "</tool_call>"
    assert hermes_calls(xml)[0] == [("finish", '{"message": "  indented"}')]  # as written, no alias


def test_goose_results_in_its_newer_shape_and_failures_keep_their_text(tmp_path):
    req, resp, ok = _goose_request, _goose_response, _goose_shell("ls")
    bad = {"status": "error", "error": "bad json"}
    newer = {"status": "success", "value": {"content": [{"type": "text", "text": "a.py"}], "isError": False}}
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [req("a", ok), req("b", ok), req("c", bad)]},
        {"role": "user", "content": [
            resp("a", newer),
            resp("b", {"status": "error", "error": "command failed: exit 2"}),
            resp("c", {"status": "error", "error": "could not parse the arguments"}),
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]  # fmt: skip
    f = tmp_path / "goose.json"
    f.write_text(json.dumps({"id": "s", "messages": msgs}))
    (t,) = CHAT.parse(f)
    a, b, c, _ = t.steps
    assert (a.output, a.output_is_error) == ("a.py", False)
    assert (b.output, b.output_is_error) == ("command failed: exit 2", True)
    assert (
        c.tool_name == "invalid_tool_call"
        and c.output == "could not parse the arguments"
        and c.output_is_error
    )


def test_a_goose_export_renders_a_failed_tools_error_data_as_the_model_is_sent_it(tmp_path):
    # newer Goose keeps MCP's ErrorData, which rmcp renders "{code}: {message}({data})" for the model
    req, resp, ok = _goose_request, _goose_response, _goose_shell("lint .")
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [req("a", ok), req("b", ok)]},
        {"role": "user", "content": [
            resp("a", {"status": "error", "error": {"code": -32603, "message": "command not found: lint"}}),
            resp("b", {"status": "error", "error": {"code": -32602, "message": "bad", "data": {"k": 1}}}),
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]  # fmt: skip
    f = tmp_path / "goose.json"
    f.write_text(json.dumps({"id": "s", "messages": msgs}))
    (t,) = CHAT.parse(f)
    outs = [(s.output, s.output_is_error) for s in t.steps if s.tool_name]
    assert outs == [("-32603: command not found: lint", True), ('-32602: bad({"k":1})', True)]


def test_a_json_call_may_hold_the_tags_and_xml_values_keep_their_own_newlines():
    from dtoc_rl.ingest.text_actions import hermes_calls

    args = {"new": "if s.startswith('<tool_call>'): pass"}  # an edit of a chat template's parser
    text = "Edit:\n<tool_call>\n" + json.dumps({"name": "edit", "arguments": args}) + "\n</tool_call>"
    assert hermes_calls(text) == ([("edit", json.dumps(args))], "Edit:")
    body = "<function=write>\n<parameter=content>\n\nimport os\n\n\n</parameter>\n</function>"
    ((name, written),) = hermes_calls(f"<tool_call>\n{body}\n</tool_call>")[0]
    assert (name, json.loads(written)) == ("write", {"content": "\nimport os\n\n"})


def test_a_goose_result_block_for_the_user_only_is_not_the_models_output(tmp_path):
    both = {"type": "text", "text": "x = 1", "annotations": {"audience": ["assistant"]}}
    user_only = {"type": "text", "text": "x = 1", "annotations": {"audience": ["user"], "priority": 0.0}}
    request = _goose_request("t1", _goose_shell("cat a.py"))
    response = _goose_response("t1", {"status": "success", "value": [both, user_only]})
    msgs = [{"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [request]}, {"role": "user", "content": [response]},
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]  # fmt: skip
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"id": "s", "messages": msgs}))
    (t,) = CHAT.parse(f)
    assert t.steps[0].output == "x = 1"


def _goose_messages():
    request = _goose_request("t1", _goose_shell("ls"))
    response = _goose_response("t1", {"status": "success", "value": [{"type": "text", "text": "a.py"}]})
    ask, answer = {"type": "text", "text": "list files"}, {"type": "text", "text": "One."}
    blocks = [[ask], [request], [response], [answer]]
    roles = ("user", "assistant", "user", "assistant")
    return [
        {"id": None, "role": r, "created": 1750000001 + k, "content": c}
        for k, (r, c) in enumerate(zip(roles, blocks, strict=True))
    ]


def test_a_goose_session_file_a_message_per_line_after_its_header_is_one_run(tmp_path):
    header = {"working_dir": "/w", "description": "list", "schedule_id": None, "message_count": 4,
              "total_tokens": 900, "input_tokens": 800, "output_tokens": 100}  # fmt: skip
    f = tmp_path / "20250601_120000.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [header, *_goose_messages()]) + "\n")
    assert isinstance(detect_format(f), OpenAIChatIngester)
    (t,) = CHAT.parse(f)
    assert t.traj_id.endswith("/20250601_120000") and t.task_text == "list files"
    assert [(s.tool_name, s.output) for s in t.steps] == [("developer__shell", "a.py"), (None, None)]
    assert json.loads(t.extra)["working_dir"] == "/w"
    assert t.steps[0].timestamp == 1750000002  # the message's "created": the call's time


def test_a_chat_logged_a_message_per_line_is_one_run_and_a_run_per_line_file_is_not_one(tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "assistant", "content": "done"}]  # fmt: skip
    one = tmp_path / "chat.jsonl"
    one.write_text("\n".join(json.dumps(m) for m in msgs))
    (t,) = CHAT.parse(one)
    assert (t.system_prompt, t.steps[0].output) == ("sys", "a.py")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps({"id": f"r{i}", "messages": msgs}) for i in range(2)))
    assert [t.traj_id.rsplit("/", 1)[-1] for t in CHAT.parse(runs)] == ["r0", "r1"]


def test_a_message_per_line_file_with_a_bad_line_is_not_read_with_a_hole_in_it(tmp_path):
    lines = [json.dumps(m) for m in _goose_messages()]
    lines[2] = lines[2][:-5]  # the tool's reply cut off
    f = tmp_path / "s.jsonl"
    f.write_text("\n".join(lines))
    with pytest.raises(IngestError, match="a message per line, not read: line 3: invalid JSON"):
        list(CHAT.parse(f))


def test_a_message_per_line_file_with_a_line_that_is_no_message_is_not_guessed(tmp_path):
    from dtoc_rl.ingest import unknown_format_reason

    f = tmp_path / "mixed.jsonl"
    f.write_text(json.dumps({"role": "user", "content": "go"}) + "\n" + json.dumps({"note": 1}) + "\n")
    assert detect_format(f) is None
    assert unknown_format_reason(f).startswith("chat messages one per line, but not every line is one")


def _session_chat(name: str, cmd: str, out: str, model: str | None = None) -> list[dict]:
    call = {
        "id": f"{name}-c1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})},
    }
    said = {"role": "assistant", "content": None, "tool_calls": [call]}
    if model:
        said["model"] = model  # as an OpenAI response names the model that answered
    msgs = [{"role": "user", "content": f"task {name}"}, said,
            {"role": "tool", "tool_call_id": f"{name}-c1", "content": out},
            {"role": "assistant", "content": "done"}]  # fmt: skip
    return [{"session_id": name, **m} for m in msgs]


def test_an_app_log_of_interleaved_sessions_a_message_per_line_is_a_run_per_session(tmp_path):
    a, b = _session_chat("s-a", "ls", "a.py"), _session_chat("s-b", "cat b.py", "print(1)")
    f = tmp_path / "applog.jsonl"
    f.write_text("\n".join(json.dumps(m) for pair in zip(a, b, strict=True) for m in pair) + "\n")
    assert isinstance(detect_format(f), OpenAIChatIngester)  # a session's name is no other format's mark
    runs = list(CHAT.parse(f))
    assert [(t.task_id, t.task_text, t.steps[0].output) for t in runs] == [
        ("s-a", "task s-a", "a.py"), ("s-b", "task s-b", "print(1)"),
    ]  # fmt: skip
    assert [t.traj_id.rsplit("/", 1)[-1] for t in runs] == ["s-a", "s-b"]


def test_an_app_log_with_a_message_naming_no_session_is_not_guessed(tmp_path):
    msgs = _session_chat("s-a", "ls", "a.py") + _session_chat("s-b", "ls", "b.py")
    del msgs[2]["session_id"]
    f = tmp_path / "applog.jsonl"
    f.write_text("\n".join(json.dumps(m) for m in msgs))
    with pytest.raises(IngestError, match="line 3: names no 'session_id' where other messages do"):
        list(CHAT.parse(f))


def test_a_runs_model_is_the_one_its_calls_name_when_the_run_names_none(tmp_path):
    f = tmp_path / "chat.jsonl"
    msgs = [
        {k: v for k, v in m.items() if k != "session_id"}
        for m in _session_chat("x", "ls", "a", "gpt-4o-2024-08-06")
    ]
    f.write_text("\n".join(json.dumps(m) for m in msgs))
    (t,) = CHAT.parse(f)
    assert (t.model_raw, t.model_family) == ("gpt-4o-2024-08-06", "gpt-4o")
    f.write_text(json.dumps({"id": "r", "model": "claude-sonnet-4-5", "messages": msgs}))
    assert next(iter(CHAT.parse(f))).model_raw == "claude-sonnet-4-5"  # a model the run names is kept


@pytest.mark.parametrize("case", ["one_name", "named_on_some", "null_everywhere", "run_id_per_call"])
def test_a_single_sessions_log_a_message_per_line_stays_one_run_under_its_own_id(tmp_path, case):
    msgs = [{k: v for k, v in m.items() if k != "session_id"} for m in _session_chat("x", "ls", "a.py")]
    if case == "one_name":
        msgs = [{**m, "conversation_id": "conv-9"} for m in msgs]
    elif case == "named_on_some":  # an Assistants-style log: the run named on the assistant's messages
        msgs = [{**m, "thread_id": "t1"} if m["role"] == "assistant" else m for m in msgs]
    elif case == "null_everywhere":
        msgs = [{**m, "session_id": None} for m in msgs]
    else:  # LangChain's run_id names one call, not the conversation
        msgs = [{**m, "run_id": f"call-{k}"} for k, m in enumerate(msgs)]
    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join(json.dumps(m) for m in [{"id": "run-7"}, *msgs]))
    (t,) = CHAT.parse(f)
    assert (t.traj_id.rsplit("/", 1)[-1], t.steps[0].output) == ("run-7", "a.py")


def test_a_session_that_cannot_be_read_is_named_and_the_others_are_read(tmp_path):
    a, b = _session_chat("s-a", "ls", "a.py"), _session_chat("s-b", "cat b.py", "print(1)")
    b = [m for m in b if m["role"] == "user"]  # s-b never answered: no run
    f = tmp_path / "applog.jsonl"
    f.write_text("\n".join(json.dumps(m) for m in a + b))
    got, err = [], None
    try:
        got.extend(CHAT.parse(f))
    except IngestError as e:
        err = e.reason
    assert [t.task_id for t in got] == ["s-a"] and err.startswith("1 of 2 sessions failed: session s-b: ")


def test_json_lines_under_another_name_are_read_as_lines(tmp_path):
    msgs = [{k: v for k, v in m.items() if k != "session_id"} for m in _session_chat("x", "ls", "a.py")]
    rows = "\n".join(json.dumps({"id": f"r{i}", "messages": msgs}) for i in range(2)) + "\n"
    nd = tmp_path / "runs.ndjson"
    nd.write_text(rows)
    assert isinstance(detect_format(nd), OpenAIChatIngester)
    from dtoc_rl.ingest.driver import ingest_paths

    assert len(ingest_paths([tmp_path], progress=False).trajectories) == 2  # found in a folder too
    log = tmp_path / "agent.log"  # found in a folder it is a note; named with --format it is read
    log.write_text(rows)
    for f in (nd, log):
        assert [t.traj_id.rsplit("/", 1)[-1] for t in CHAT.parse(f)] == ["r0", "r1"]
    one = tmp_path / "run.log"  # one value over several lines is one value
    one.write_text(json.dumps({"id": "r", "messages": msgs}, indent=2))
    assert [t.steps[0].output for t in CHAT.parse(one)] == ["a.py"]


def test_codex_web_search_calls_are_read_as_calls_of_the_model_call_that_made_them(tmp_path):
    # codex-tui 0.125 writes the provider's own search as a web_search_call item (no id, no result),
    # after a web_search_end event that holds its id; the model call goes on after it
    search = {
        "type": "search",
        "query": "opencode compact threshold",
        "queries": ["opencode compact threshold"],
    }
    page = {"type": "open_page", "url": "https://opencode.ai/docs/config"}

    def item(payload, k):
        return {"timestamp": f"2026-05-11T08:{k:02d}:00Z", "type": "response_item", "payload": payload}

    def said(role, text, k):
        kind = "output_text" if role == "assistant" else "input_text"
        return item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]}, k)

    usage = {"last_token_usage": {"input_tokens": 2000, "output_tokens": 30}, "total_token_usage": {"n": 1}}
    ls = '{"cmd": "ls"}'
    ended = {"type": "web_search_end", "call_id": "ws_abc", "query": search["query"], "action": search}
    lines = [
        {"type": "session_meta", "payload": {"id": "s-ws", "cwd": "/repo", "cli_version": "0.125.0"}},
        {"type": "turn_context", "payload": {"model": "gpt-5.5"}},
        said("user", "find it", 0),
        item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "search first"}]}, 1),
        {"type": "event_msg", "payload": ended},
        item({"type": "web_search_call", "status": "completed", "action": search}, 2),
        item({"type": "reasoning", "summary": []}, 3),
        said("assistant", "Found.", 4),
        item({"type": "function_call", "name": "exec_command", "arguments": ls, "call_id": "c1"}, 5),
        {"type": "event_msg", "payload": {"type": "token_count", "info": usage}},
        item({"type": "function_call_output", "call_id": "c1", "output": "a.py"}, 6),
        item({"type": "web_search_call", "status": "failed", "action": page}, 7),  # no event: an id made up
        said("assistant", "Done.", 8),
    ]  # fmt: skip
    p = tmp_path / "rollout-2026-05-11T11-26-55-s-ws.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (t,) = CODEX.parse(p)
    got = [(s.turn, s.tool_name, s.tool_call_id, s.tool_args, s.output, s.output_is_error) for s in t.steps]
    assert got == [
        (0, "web_search", "ws_abc", json.dumps(search), "", False),
        (0, "exec_command", "c1", '{"cmd": "ls"}', "a.py", False),
        (1, "web_search", "web_search_1", json.dumps(page), "", True),
    ]
    first = t.steps[0]  # one model call: its text, reasoning, usage and time on its first step
    assert first.assistant_text == "Found." and first.reasoning == "search first"
    assert first.usage.input_tokens == 2000 and t.steps[1].usage is None
    assert t.steps[2].assistant_text == "Done." and first.timestamp == iso_to_epoch("2026-05-11T08:01:00Z")
    assert "skipped_items" not in json.loads(t.extra)
