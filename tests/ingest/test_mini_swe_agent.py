"""mini-swe-agent ingester: every token of a hand-made log's prompts is kept."""

from __future__ import annotations

import json
from pathlib import Path

from dtoc_rl.ingest.mini_swe_agent import MiniSweAgentIngester

TWO_BLOCKS = (
    "THOUGHT: first look, then run it.\n\n```bash\ncat a.py\n```\n\nand then\n\n```bash\npython a.py\n```"
)
FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."


def _assistant(text: str, prompt_tokens: int) -> dict:
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    return {"role": "assistant", "content": text, "extra": {"response": {"usage": usage}}}


def _log(tmp_path: Path) -> Path:
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        _assistant("THOUGHT: look first.\n\n```bash\nls\n```", 100),
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
        _assistant(TWO_BLOCKS, 130),
        {"role": "user", "content": FORMAT_ERROR},
        _assistant("THOUGHT: one at a time.\n\n```bash\ncat a.py\n```", 200),
    ]
    p = tmp_path / "x__y-1.traj.json"
    p.write_text(
        json.dumps({"trajectory_format": "mini-swe-agent-1", "instance_id": "x__y-1", "messages": msgs})
    )
    return p


def test_a_reply_without_one_action_is_kept_whole(tmp_path: Path):
    # The harness sends a rejected reply back in every later prompt, code blocks and all; dropping
    # its bash blocks under-counted those prompts by up to 4,500 tokens on the gemini runs.
    (traj,) = MiniSweAgentIngester().parse(_log(tmp_path))
    ok, bad, after = traj.steps
    assert (ok.tool_name, ok.tool_args, ok.assistant_text) == ("bash", "ls", "look first.")
    assert bad.tool_name is None and bad.assistant_text == TWO_BLOCKS
    assert after.user_text == FORMAT_ERROR and after.tool_args == "cat a.py"
    assert [s.usage.input_tokens for s in traj.steps] == [100, 130, 200]


def test_fields_of_the_wrong_type_are_named(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths

    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix"}]
    for info, content, said in (
        (
            {"config": {"model": {"model_name": {"x": 1}}}},
            "ok",
            "info.config.model.model_name is dict, expected string",
        ),
        # (null is 2.x's content of a message of tool calls only)
        ({}, 42, "messages[2].content is int, expected string or list"),
    ):
        f = tmp_path / "x.traj.json"
        log = {"trajectory_format": "mini-swe-agent-1", "info": info,
               "messages": [*msgs, {"role": "assistant", "content": content}]}  # fmt: skip
        f.write_text(json.dumps(log))
        (skip,) = ingest_paths([f], progress=False).skipped
        assert said in skip.reason and "\n" not in skip.reason


def _call(call_id: str, command: str) -> dict:
    args = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": args}}


def test_version_2_tool_calls_are_steps_with_their_outputs(tmp_path: Path):
    # mini-swe-agent 2.x's default model calls a bash tool: content may be null, replies are role
    # "tool" by call id (here answered out of order), and an "exit" message ends the run
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        {**_assistant("Look first.", 100), "tool_calls": [_call("c1", "ls"), _call("c2", "cat a.py")]},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "<returncode>0</returncode>\n<output>\nx = 1\n</output>",
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "<returncode>0</returncode>\n<output>\na.py\n</output>",
        },
        {**_assistant(None, 150), "tool_calls": [_call("c3", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]},
        {"role": "tool", "tool_call_id": "c3", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        {"role": "exit", "content": "diff", "extra": {"exit_status": "Submitted"}},
    ]
    p = tmp_path / "x__y-2.traj.json"
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": msgs}))
    (traj,) = MiniSweAgentIngester().parse(p)
    assert [(s.tool_name, s.tool_args) for s in traj.steps] == [
        ("bash", "ls"), ("bash", "cat a.py"), ("bash", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    ]  # fmt: skip
    assert "a.py" in traj.steps[0].output and "x = 1" in traj.steps[1].output
    assert [s.turn for s in traj.steps] == [0, 0, 1]
    assert traj.steps[0].assistant_text == "Look first." and traj.steps[1].assistant_text == ""
    assert traj.steps[0].usage.input_tokens == 100 and traj.steps[2].usage.input_tokens == 150


def test_version_2_text_mode_fences_its_action_as_mswea_bash_command(tmp_path: Path):
    msgs = [
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        _assistant("THOUGHT: look\n\n```mswea_bash_command\ncat a.py\n```", 100),
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nx = 1\n</output>"},
    ]
    p = tmp_path / "x__y-3.traj.json"
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": msgs}))
    (traj,) = MiniSweAgentIngester().parse(p)
    (step,) = traj.steps
    assert (step.tool_name, step.tool_args, step.assistant_text) == ("bash", "cat a.py", "look")
    assert "x = 1" in step.output


def test_a_tool_reply_that_answers_no_call_is_one_clear_error(tmp_path: Path):
    import pytest

    from dtoc_rl.ingest.base import IngestError

    msgs = [
        {"role": "user", "content": "task"},
        {**_assistant("", 100), "tool_calls": [_call("c1", "ls")]},
        {"role": "tool", "tool_call_id": "zz", "content": "out"},
    ]
    p = tmp_path / "x__y-4.traj.json"
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": msgs}))
    with pytest.raises(IngestError, match=r"messages\[2\].*'zz'.*answers no tool call"):
        list(MiniSweAgentIngester().parse(p))


def test_version_2_responses_api_model_saves_whole_responses_and_reads_as_tool_calls(tmp_path: Path):
    def response(rid, call_id, command, tokens, cached):
        call = {"type": "function_call", "call_id": call_id, "name": "bash",
                "arguments": json.dumps({"command": command})}  # fmt: skip
        usage = {
            "input_tokens": tokens,
            "output_tokens": 9,
            "input_tokens_details": {"cached_tokens": cached},
        }
        return {"id": rid, "object": "response", "output": [{"type": "reasoning", "summary": []}, call],
                "usage": usage}  # fmt: skip

    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        response("r1", "c1", "cat a.py", 1000, 0),
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": "<returncode>0</returncode>\n<output>\nx\n",
        },
        response("r2", "c2", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 1200, 1000),
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
    ]
    p = tmp_path / "x__y-5.traj.json"
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": msgs}))
    (traj,) = MiniSweAgentIngester().parse(p)
    assert [(s.tool_args, s.usage.input_tokens, s.usage.cached_tokens) for s in traj.steps] == [
        ("cat a.py", 1000, 0), ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 1200, 1000)
    ]  # fmt: skip
    assert "x" in traj.steps[0].output and traj.steps[1].output is None


def test_a_real_version_2_run_reads_its_calls_outputs_usage_and_times():
    # tests/fixtures/mini_swe_agent_v2: the real mini 2.4.6 (its bash tool, the local environment)
    # against a scripted chat-completions API (make_fixtures.py there)
    from dtoc_rl.ingest import detect_format, read_first

    path = Path(__file__).parent.parent / "fixtures" / "mini_swe_agent_v2" / "run.traj.json"
    assert detect_format(path).name == "mini-swe-agent"
    _, t = read_first(path)
    assert [s.tool_args for s in t.steps] == [
        "cat alpha.txt",
        "cat beta.txt && cat gamma.txt",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
    ]
    # each output as the model read it: 2.4.6's observation template
    assert t.steps[0].output.startswith('{\n  "returncode": 0,\n  "output": "alpha line 1\\nalpha line 2')
    assert '"returncode": 1' in t.steps[1].output and "No such file" in t.steps[1].output
    usage = [(s.usage.input_tokens, s.usage.cached_tokens) for s in t.steps]
    assert usage == [(1500, 0), (1800, 1500), (2100, 1800)]
    stamps = [s.timestamp for s in t.steps]
    assert None not in stamps and stamps == sorted(stamps)
    assert (t.api_calls, t.model_raw) == (3, "openai/gpt-4o") and json.loads(t.extra)[
        "mini_version"
    ] == "2.4.6"


def test_each_call_keeps_the_dollars_mini_charged_it(tmp_path: Path):
    # 2.x's litellm model saves each call's cost in the message's extra (instance_cost is their sum)
    def call(cmd: str, cost: float, call_id: str) -> dict:
        fn = {"name": "bash", "arguments": json.dumps({"command": cmd})}
        tool_call = {"id": call_id, "type": "function", "function": fn}
        usage = {"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 40}}
        extra = {"response": {"model": "m-served", "usage": usage}, "cost": cost, "timestamp": 1700000000.5}
        return {"role": "assistant", "content": "", "tool_calls": [tool_call], "extra": extra}

    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "fix it"},
        call("ls", 0.0002, "c1"),
        {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>"},
        call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 0.0003, "c2"),
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
    ]
    info = {"model_stats": {"instance_cost": 0.0005, "api_calls": 2}, "mini_version": "2.3.0"}
    p = tmp_path / "a__b-1.traj.json"
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "info": info, "messages": msgs}))
    (traj,) = MiniSweAgentIngester().parse(p)
    assert [s.usage.cost_usd for s in traj.steps] == [0.0002, 0.0003]
    assert [(s.usage.input_tokens, s.usage.cached_tokens) for s in traj.steps] == [(50, 40), (50, 40)]
    assert traj.steps[0].output == "<returncode>0</returncode>" and traj.steps[1].output is None
    # a model its cost tracking cannot price (cost_tracking: ignore_errors) is charged 0.0 a call:
    # not a free call, a bill not known
    msgs[2], msgs[4] = call("ls", 0.0, "c1"), call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 0.0, "c2")
    p.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "info": info, "messages": msgs}))
    (traj,) = MiniSweAgentIngester().parse(p)
    assert [s.usage.cost_usd for s in traj.steps] == [None, None]
    assert [s.usage.input_tokens for s in traj.steps] == [50, 50]
