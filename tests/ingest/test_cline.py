"""Cline / Roo Code task folders: XML tool calls in the reply, results in the next user message,
usage per call from ui_messages.json, the model from task_metadata.json."""

from __future__ import annotations

import json
from pathlib import Path

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.cline import ClineIngester
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.labels import label_trajectory

ENV = "<environment_details>\n# VSCode Visible Files\nfoo.py\n</environment_details>"


SEARCH = (
    "<search_files>\n<path>.</path>\n<regex>foo\\(</regex>\n<file_pattern>*.py</file_pattern>\n"
    "</search_files>"
)


def _user(*texts):
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def _assistant(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def _req(ts, tin, out, reads, writes):
    info = {"request": "...", "tokensIn": tin, "tokensOut": out, "cacheReads": reads, "cacheWrites": writes,
            "cost": 0.01}  # fmt: skip
    return {"ts": ts, "type": "say", "say": "api_req_started", "text": json.dumps(info)}


def _task(folder: Path, provider="anthropic", model="claude-sonnet-4-20250514") -> Path:
    folder.mkdir(parents=True)
    msgs = [
        _user("<task>\nFix the division by zero in foo.py\n</task>", ENV),
        _assistant(
            "<thinking>\nRead it first.\n</thinking>\n\n<read_file>\n<path>foo.py</path>\n</read_file>"
        ),
        _user("[read_file for 'foo.py'] Result:", "def foo():\n    return 1/0\n", ENV),
        _assistant(SEARCH),
        _user("[search_files for 'foo\\(' in '*.py'] Result:", "foo.py:1: def foo():", ENV),
        _assistant("<attempt_completion>\n<result>Found it.</result>\n</attempt_completion>"),
    ]
    (folder / "api_conversation_history.json").write_text(json.dumps(msgs))
    ui = [{"ts": 1, "type": "say", "say": "task", "text": "Fix"},
          _req(1730000001000, 3, 60, 0, 9000), _req(1730000002000, 40, 30, 9000, 300),
          _req(1730000003000, 9400, 10, 9300, 0)]  # fmt: skip
    (folder / "ui_messages.json").write_text(json.dumps(ui))
    meta = {"model_usage": [{"ts": 1, "model_id": model, "model_provider_id": provider, "mode": "act"}]}
    (folder / "task_metadata.json").write_text(json.dumps(meta))
    return folder / "api_conversation_history.json"


def test_a_cline_task_folder_is_steps_with_outputs_usage_and_model(tmp_path):
    path = _task(tmp_path / "tasks" / "1730000000000")
    assert detect_format(path).name == "cline"
    (t,) = ClineIngester().parse(path)
    assert (t.traj_id, t.task_id, t.model_raw, t.model_family) == (
        "cline/1730000000000", "1730000000000", "claude-sonnet-4-20250514", "claude-sonnet"
    )  # fmt: skip
    assert "Fix the division by zero" in t.task_text
    read, search, done = t.steps
    assert (read.tool_name, json.loads(read.tool_args)) == ("read_file", {"path": "foo.py"})
    assert read.output.startswith("[read_file for 'foo.py'] Result:") and "return 1/0" in read.output
    assert "environment_details" not in read.output and search.user_text.startswith("<environment_details>")
    assert "Read it first." in read.assistant_text and "<read_file>" not in read.assistant_text
    assert json.loads(search.tool_args) == {"path": ".", "regex": "foo\\(", "file_pattern": "*.py"}
    assert done.tool_name == "attempt_completion" and done.output is None
    # Anthropic counts tokensIn without the cache: the prompt is the sum; the calls' times in seconds
    assert [(s.usage.input_tokens, s.usage.cached_tokens, s.usage.cache_write_tokens) for s in t.steps] == [
        (9003, 0, 9000), (9340, 9000, 300), (18700, 9300, 0)
    ]  # fmt: skip
    assert [s.timestamp for s in t.steps] == [1730000001.0, 1730000002.0, 1730000003.0]
    # labelled, the search is read as a grep of its regex over *.py (Cline's parameter names)
    label_trajectory(t)
    assert t.steps[1].read_resource == "search:grep:foo\\(@.[*.py]"


def test_how_tokens_in_counts_follows_the_provider_that_wrote_it(tmp_path):
    # an OpenAI-compatible handler reports the whole prompt: summed only where tokensIn is smaller than
    # the cache's share (3 < 9000, 40 < 9300), kept where it holds it (9400 >= 9300)
    path = _task(tmp_path / "t2", provider="openai", model="gpt-4.1")
    (t,) = ClineIngester().parse(path)
    assert t.model_family == "gpt-4.1" and [s.usage.input_tokens for s in t.steps] == [9003, 9340, 9400]
    # Cline stamps its messages with ts too: an Anthropic provider's counts are still summed
    path = _task(tmp_path / "t3")
    msgs = json.loads(path.read_text())
    path.write_text(json.dumps([{**m, "ts": 1730000000000 + k} for k, m in enumerate(msgs)]))
    (t,) = ClineIngester().parse(path)
    assert [s.usage.input_tokens for s in t.steps] == [9003, 9340, 18700]
    assert t.extra_dict()["harness"] == "cline"


def test_a_reply_with_its_own_metrics_is_billed_from_them(tmp_path):
    path = _task(tmp_path / "t4")
    msgs = json.loads(path.read_text())
    metrics = iter([(9003, 0), (9340, 9000), (9400, 9300)])
    for m in msgs:
        if m["role"] == "assistant":
            tin, reads = next(metrics)
            m["metrics"] = {"inputTokens": tin, "outputTokens": 5, "cacheReadTokens": reads, "cost": 0.01}
    path.write_text(json.dumps(msgs))
    (t,) = ClineIngester().parse(path)
    assert [(s.usage.input_tokens, s.usage.cached_tokens) for s in t.steps] == [
        (9003, 0),
        (9340, 9000),
        (9400, 9300),
    ]


def test_usage_is_left_out_when_the_calls_do_not_match_the_replies(tmp_path):
    path = _task(tmp_path / "t3")
    ui = json.loads((path.parent / "ui_messages.json").read_text())
    (path.parent / "ui_messages.json").write_text(json.dumps([*ui, _req(1730000004000, 5, 1, 0, 0)]))
    (t,) = ClineIngester().parse(path)
    assert all(s.usage is None for s in t.steps)
    assert "4 model calls in ui_messages.json against 3 replies" in t.extra_dict()["usage"]


def test_roo_condensing_is_no_reply_and_its_summary_is_kept(tmp_path):
    folder = tmp_path / "roo"
    folder.mkdir()
    msgs = [
        _user("<task>fix foo.py</task>"),
        _assistant("<read_file>\n<args>\n<file>\n<path>foo.py</path>\n</file>\n<file>\n<path>bar.py</path>\n"
                   "</file>\n</args>\n</read_file>"),
        _user("[read_file for 'foo.py', 'bar.py'] Result:", "x = 1", ENV),
        {**_assistant("Summary: foo.py and bar.py were read."), "isSummary": True},
        _assistant("<web_search>\n<query>python division</query>\n</web_search>"),
        _user("[web_search for 'python division'] Result:", "results...", ENV),
    ]  # fmt: skip
    (folder / "api_conversation_history.json").write_text(json.dumps(msgs))
    ui = [_req(1730000001000, 100, 5, 0, 0), _req(1730000002000, 120, 6, 0, 0)]  # two calls, two replies
    (folder / "ui_messages.json").write_text(json.dumps(ui))
    (t,) = ClineIngester().parse(folder / "api_conversation_history.json")
    read, search = t.steps
    assert json.loads(read.tool_args) == {"path": "foo.py", "paths": ["foo.py", "bar.py"]}
    # a tool this reader does not list, answered by name, is still a call with its output
    assert search.tool_name == "web_search" and search.output.endswith("results...")
    # the summary is read as the next call's user text; what it replaced is not modelled
    assert search.events == [] and "Summary: foo.py and bar.py were read." in search.user_text
    assert [s.usage.output_tokens for s in t.steps] == [5, 6]  # the summary took no call's usage


def test_the_folders_other_files_are_read_with_it_not_skipped(tmp_path):
    _task(tmp_path / "tasks" / "a")
    _task(tmp_path / "tasks" / "b")
    res = ingest_paths([tmp_path / "tasks"], progress=False)
    assert sorted(t.traj_id for t in res.trajectories) == ["cline/a", "cline/b"]
    assert res.skipped == [] and res.auxiliary == 4


def test_native_tool_calls_are_answered_by_their_results(tmp_path):
    folder = tmp_path / "n"
    folder.mkdir()
    use = {"type": "tool_use", "id": "tu1", "name": "read_file", "input": {"path": "foo.py"}}
    result = {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "x = 1"}]}
    think = {"type": "thinking", "thinking": "Which file?", "signature": "s"}
    reply = {"role": "assistant", "content": [think, {"type": "text", "text": "Reading."}, use]}
    answer = {"role": "user", "content": [result, {"type": "text", "text": ENV}]}
    msgs = [_user("<task>look</task>"), reply, answer, _assistant("Done.")]
    (folder / "api_conversation_history.json").write_text(json.dumps(msgs))
    (t,) = ClineIngester().parse(folder / "api_conversation_history.json")
    assert [(s.tool_name, s.output) for s in t.steps] == [("read_file", "x = 1"), (None, None)]
    assert t.steps[0].assistant_text == "Reading." and t.steps[1].user_text.startswith("<environment")
    assert t.steps[0].reasoning == "Which file?"


def _uses(*calls, text=None):
    """A reply of native tool calls, each ``(id, name, input)``."""
    blocks = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": x} for i, n, x in calls]
    return {"role": "assistant", "content": blocks}


def test_native_tool_calls_answered_in_text_get_their_results(tmp_path):
    # Cline 3.51 on native tool calling answers a tool_use with text blocks, not a tool_result
    folder = tmp_path / "t"
    folder.mkdir()
    msgs = [
        _user("<task>halve the timeout in cfg.toml</task>", ENV),
        _uses(("tu1", "read_file", {"path": "cfg.toml"}), text="Reading it."),
        _user("[read_file for 'cfg.toml'] Result:\ntimeout = 30", ENV),
        _uses(("tu2", "replace_in_file", {"path": "cfg.toml", "diff": "30 -> 15"})),
        _user("[replace_in_file for 'cfg.toml'] Result:", "Saved cfg.toml.", "and keep a comment", ENV),
        _uses(("tu3", "attempt_completion", {"result": "Halved."})),
    ]
    (folder / "api_conversation_history.json").write_text(json.dumps(msgs))
    (t,) = ClineIngester().parse(folder / "api_conversation_history.json")
    read, edit, done = t.steps
    assert read.output == "[read_file for 'cfg.toml'] Result:\ntimeout = 30" and not read.output_is_error
    assert edit.output.endswith("Saved cfg.toml.\nand keep a comment")  # the blocks after it, as for XML
    assert (edit.user_text, done.user_text) == (ENV, ENV)  # the environment stays the next call's user text
    assert done.output is None and read.assistant_text == "Reading it."


def test_several_native_calls_answered_in_text_are_matched_by_order_and_name(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    not_run = "Tool [{}] was not executed because a tool has already been used in this message."
    skipped = "Skipping tool [write_to_file for 'a.md'] due to user rejecting a previous tool."
    three = _uses(("a", "read_file", {"path": "a.md"}), ("b", "list_files", {"path": "."}),
                  ("c", "read_file", {"path": "b.md"}))  # fmt: skip
    # the list answered first: each answer goes to the first call left of the tool it names
    answers = _user("[list_files for '.'] Result:\na.md\nb.md", not_run.format("read_file"),
                    not_run.format("read_file"), ENV)  # fmt: skip
    mixed = _user(skipped, ENV)  # one call answered by its tool_result, the other in text
    mixed["content"].insert(0, {"type": "tool_result", "tool_use_id": "d", "content": "# notes"})
    msgs = [
        _user("<task>tidy the notes</task>", ENV),
        three,
        answers,
        _uses(("d", "read_file", {"path": "a.md"}), ("e", "write_to_file", {"path": "a.md"})),
        mixed,
        _uses(("f", "read_file", {"path": "b.md"})),
        _user("[TASK RESUMPTION] Picked up again after a break.", ENV),  # no answer: the user's own words
        _assistant("Done."),
    ]
    (folder / "api_conversation_history.json").write_text(json.dumps(msgs))
    (t,) = ClineIngester().parse(folder / "api_conversation_history.json")
    a, b, c, d, e, f, done = t.steps
    assert b.output == "[list_files for '.'] Result:\na.md\nb.md" and not b.output_is_error
    assert a.output == c.output == not_run.format("read_file") and a.output_is_error and c.output_is_error
    assert d.output == "# notes" and e.output.startswith("Skipping tool") and e.output_is_error
    assert d.user_text == ENV and f.user_text == ENV
    assert f.output is None and done.user_text.startswith("[TASK RESUMPTION] Picked up again")


def test_a_cline_sdk_session_reads_its_blocks_metrics_and_model(tmp_path):
    sid = "1784094124598_abcde"
    folder = tmp_path / "sessions" / sid
    folder.mkdir(parents=True)

    def metrics(tin, reads, out):
        return {"inputTokens": tin, "outputTokens": out, "cacheReadTokens": reads, "cacheWriteTokens": 0,
                "cost": 0.01}  # fmt: skip

    info = {"id": "anthropic/claude-sonnet-4.5", "provider": "cline", "family": "claude-sonnet"}
    use = {"type": "tool_use", "id": "tu1", "name": "read_files", "input": {"files": [{"path": "/r/a.py"}]}}
    result = {"type": "tool_result", "tool_use_id": "tu1", "name": "read_files",
              "content": [{"query": "/r/a.py:1-2", "result": "1 | x = 1"}]}  # fmt: skip
    first = [{"type": "text", "text": "fix a.py"}, {"type": "file", "path": "/r/a.py", "content": "x = 1"}]

    def reply(mid, ts, m, content):
        return {"id": mid, "role": "assistant", "ts": ts, "modelInfo": info, "metrics": m, "content": content}

    msgs = [
        {"id": "m1", "role": "user", "ts": 1783376870000, "content": first},
        reply("m2", 1783376873493, metrics(3000, 0, 50), [{"type": "text", "text": "Reading."}, use]),
        {"id": "m3", "role": "user", "ts": 1783376874000, "content": [result]},
        reply("m4", 1783376875985, metrics(3100, 2990, 9), [{"type": "text", "text": "Done."}]),
    ]
    session = {
        "version": 1,
        "sessionId": sid,
        "agent": "lead",
        "messages": msgs,
        "system_prompt": "You are Cline.",
    }
    (folder / f"{sid}.messages.json").write_text(json.dumps(session))
    (folder / f"{sid}.json").write_text(json.dumps({"session_id": sid, "model": "other/model"}))
    res = ingest_paths([tmp_path / "sessions"], label=False, progress=False)
    assert res.skipped == [] and res.auxiliary == 1  # the metadata file is read as part of it
    (t,) = res.trajectories
    assert (t.traj_id, t.model_raw, t.system_prompt) == (
        f"cline/{sid}",
        "anthropic/claude-sonnet-4.5",
        "You are Cline.",
    )
    assert "fix a.py" in t.task_text and "x = 1" in t.task_text  # the attached file was sent too
    read, done = t.steps
    assert read.tool_name == "read_files" and read.output == "/r/a.py:1-2\n1 | x = 1"
    assert [(s.usage.input_tokens, s.usage.cached_tokens) for s in t.steps] == [(3000, 0), (3100, 2990)]
    assert [s.timestamp for s in t.steps] == [1783376873.493, 1783376875.985]


def test_the_extensions_own_reply_metrics_leave_the_usage_to_ui_messages(tmp_path):
    # Cline's VS Code extension writes metrics {tokens: {prompt, completion, cached}, cost} on its
    # replies: not the SDK's fields, so each call's usage still comes from ui_messages.json
    path = _task(tmp_path / "t5")
    msgs = json.loads(path.read_text())
    for m in msgs:
        if m["role"] == "assistant":
            m["metrics"] = {"tokens": {"prompt": 10, "completion": 5, "cached": 0}, "cost": 0.01}
    path.write_text(json.dumps(msgs))
    (t,) = ClineIngester().parse(path)
    assert [s.usage.input_tokens for s in t.steps] == [9003, 9340, 18700]


def test_a_cline_sdk_session_with_metrics_on_some_replies_only_keeps_no_usage(tmp_path):
    sid = "s1"
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "one"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}],
         "metadata": {"kind": "compaction", "messagesRemoved": 12}},
        {"role": "assistant", "content": [{"type": "text", "text": "two"}],
         "metrics": {"inputTokens": 90000, "outputTokens": 900}},  # the run's total, on its last reply
    ]  # fmt: skip
    f = tmp_path / f"{sid}.messages.json"
    f.write_text(json.dumps({"sessionId": sid, "messages": msgs}))
    (t,) = ClineIngester().parse(f)
    assert all(s.usage is None for s in t.steps)
    assert t.extra_dict()["usage"].startswith("metrics on some replies only") and t.extra_dict()[
        "compacted"
    ] == [12]
