"""smolagents runs as smolagents 1.26 wrote them (tests/fixtures/smolagents, made by its
make_fixtures.py with real agents and a scripted model): memory dicts and the steps' text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_one
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.common import name_model
from dtoc_rl.ingest.smolagents import SmolagentsIngester, parse_step_repr

FIX = Path(__file__).parent.parent / "fixtures" / "smolagents"
SMOL = SmolagentsIngester()


def _runs(name: str) -> list:
    return list(SMOL.parse(FIX / name))


def test_each_way_of_saving_is_detected_as_smolagents():
    for name in ("memory_full_steps.json", "tool_calling_full_steps.json", "gaia_answers.jsonl"):
        assert detect_format(FIX / name).name == "smolagents", name


def test_a_code_agent_with_plans_and_a_failing_snippet():
    (t,) = _runs("memory_full_steps.json")
    kinds = [(s.turn, s.tool_name) for s in t.steps]
    # a plan, three snippets (the third fails), a plan again, the snippet that answers
    assert kinds == [(0, None), (1, "python_interpreter"), (2, "python_interpreter"),
                     (3, "python_interpreter"), (4, None), (5, "python_interpreter")]  # fmt: skip
    plan, first, second, failed, _, last = t.steps
    assert plan.assistant_text.startswith("Here are the facts") and "Read the modules" in plan.assistant_text
    assert first.user_text == "Now proceed and carry out this plan."  # what the agent sends after a plan
    assert first.tool_args == "print(read_file('src/mod0.py'))"
    assert "def f0_3(x):" in first.output and "def f1_3(x):" in second.output
    assert failed.output_is_error and "undefined_name" in failed.output
    assert not first.output_is_error and "final_answer" in last.tool_args
    assert t.task_text == "Which functions multiply by 3?"
    assert t.system_prompt == "You are an agent that calls tools (stand-in)."
    assert (t.model_raw, t.model_family) == ("gpt-4o-2024-08-06", "gpt-4o")
    assert [s.usage.input_tokens for s in (first, second, failed)] == sorted(
        s.usage.input_tokens for s in (first, second, failed)
    )
    stamps = [s.timestamp for s in t.steps]
    assert None not in stamps and stamps == sorted(stamps)
    # the prompt the log lacks is counted from the first call that acts, not from the plan's request,
    # and counted so again when the model is named at ingest (--model)
    assert t.unlogged_prompt_tokens > plan.usage.input_tokens
    counted = t.unlogged_prompt_tokens
    name_model(t, "gpt-4o-2024-08-06")
    assert t.unlogged_prompt_tokens == counted


def test_parallel_calls_share_one_observation_given_to_the_first():
    (t,) = _runs("tool_calling_full_steps.json")
    assert [(s.turn, s.tool_name) for s in t.steps] == [
        (0, "read_file"), (1, "read_file"), (1, "read_file"), (2, "final_answer")
    ]  # fmt: skip
    both, other = t.steps[1], t.steps[2]
    assert json.loads(both.tool_args) == {"path": "src/mod3.py"}
    assert "def f3_0" in both.output and "def f0_0" in both.output and other.output == ""
    assert t.model_family == "claude-sonnet"


def test_steps_saved_as_text_read_as_the_same_run_and_keep_the_cached_share():
    code_text, tools_text = _runs("gaia_answers.jsonl")
    (code_dict,) = _runs("memory_full_steps.json")
    (tools_dict,) = _runs("tool_calling_full_steps.json")
    for a, b in ((code_text, code_dict), (tools_text, tools_dict)):
        assert [(s.turn, s.tool_name, s.tool_args, s.output, s.output_is_error) for s in a.steps] == [
            (s.turn, s.tool_name, s.tool_args, s.output, s.output_is_error) for s in b.steps
        ]
        assert [s.usage and s.usage.input_tokens for s in a.steps] == [
            s.usage and s.usage.input_tokens for s in b.steps
        ]
    # the text keeps the provider's response, whose usage has the cached share; the dicts do not
    acting = [s for s in code_text.steps if s.tool_name]
    assert all(s.usage.cached_tokens == s.usage.input_tokens - 600 for s in acting)
    assert all(s.usage.cached_tokens is None for s in code_dict.steps)
    assert (code_text.task_id, tools_text.task_id) == ("t-code", "t-tools")
    assert code_text.success is None  # GAIA's answer files keep the answers, not a verdict
    assert code_text.system_prompt == ""  # the GAIA script drops the prompts before saving


def test_one_question_in_several_files_is_one_task():
    (a,) = _runs("memory_full_steps.json")
    (b,) = _runs("tool_calling_full_steps.json")
    assert a.task_id == b.task_id and a.task_id.startswith("q-")


def test_a_steps_text_is_parsed_never_run(tmp_path):
    target = tmp_path / "ran"
    text = f"ActionStep(step_number=1, observations=__import__('os').system('touch {target}'))"
    step = parse_step_repr(text)
    assert not target.exists()
    assert step["__type__"] == "ActionStep" and step["observations"]["__type__"].endswith("system")
    enum = parse_step_repr(
        "ActionStep(model_output_message=ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, "
        "content='hi', raw=<litellm.Foo object at 0x7f00>), error=AgentExecutionError('boom'))"
    )
    assert enum["model_output_message"]["role"] == "assistant"
    assert enum["model_output_message"]["raw"] is None
    assert enum["error"]["__args__"] == ["boom"]
    for bad in ("ActionStep(step_number=1", "[1, 2]", ""):
        with pytest.raises(IngestError):
            parse_step_repr(bad)


def test_a_damaged_run_costs_its_own_line_only(tmp_path):
    rows = (FIX / "gaia_answers.jsonl").read_text().splitlines()
    broken = json.loads(rows[1])
    broken["intermediate_steps"][2] = broken["intermediate_steps"][2][:200]  # cut mid-step
    path = tmp_path / "answers.jsonl"
    path.write_text(rows[0] + "\n" + json.dumps(broken) + "\n")
    got = []
    with pytest.raises(IngestError) as e:
        for t in SMOL.parse(path):
            got.append(t.task_id)
    assert got == ["t-code"]
    assert "line 2" in e.value.reason and "intermediate_steps[2]" in e.value.reason
    assert "\n" not in e.value.reason


def test_a_bare_list_of_steps_and_wrong_shapes(tmp_path):
    steps = json.loads((FIX / "tool_calling_full_steps.json").read_text())
    runs = tmp_path / "runs.json"
    runs.write_text(
        json.dumps([{"steps": steps, "task_id": "a"}, {"intermediate_steps": steps, "task_id": "b"}])
    )
    assert [t.task_id for t in SMOL.parse(runs)] == ["a", "b"]
    odd = tmp_path / "odd.json"
    odd.write_text(
        json.dumps([{"step_number": 1, "timing": {}, "observations": "x", "tool_calls": [{"id": "c"}]}])
    )
    with pytest.raises(IngestError, match="tool call without a name"):
        read_one(odd)


def test_a_tool_that_raised_and_the_answer_forced_at_max_steps(tmp_path):
    # shapes of real smolagents 1.26 runs: a ToolCallingAgent keeps a call whose tool raised only in
    # the model's message; after max_steps the forced answer is the last step's action_output
    task = {"task": "Read boom.", "task_images": None}
    error = {"type": "AgentToolExecutionError", "message": "Error executing tool 'read_file': disk on fire"}
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "read_file", "arguments": {"path": "boom"}},
    }
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    raised = {"step_number": 1, "timing": {"start_time": 1.0}, "tool_calls": [], "model_output": "",
              "error": error, "model_output_message": message, "observations": None,
              "token_usage": {"input_tokens": 900, "output_tokens": 50}}  # fmt: skip
    steps_out = {"type": "AgentMaxStepsError", "message": "Reached max steps."}
    forced = {"step_number": 2, "timing": {"start_time": 2.0}, "tool_calls": [], "model_output": None,
              "model_output_message": None, "error": steps_out, "action_output": "The answer is 42.",
              "token_usage": {"input_tokens": 600, "output_tokens": 50}}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps([task, raised, forced]))
    (t,) = SMOL.parse(path)
    call, answer = t.steps
    assert (call.tool_name, json.loads(call.tool_args), call.output_is_error) == (
        "read_file",
        {"path": "boom"},
        True,
    )
    assert "disk on fire" in call.output
    assert answer.tool_name is None and answer.assistant_text == "The answer is 42."
    assert answer.usage.input_tokens == 600 and "trailing_user_text" not in json.loads(t.extra)


def test_reprs_that_are_not_python_and_text_too_large_to_parse():
    step = parse_step_repr(
        "ActionStep(step_number=1, action_output=<class 'str'>, a=<built-in function len>, "
        "b=<module 'math' (built-in)>, c=<Response [200]>, d='<kept as written>', "
        "e=<function <lambda> at 0x7f>)"
    )
    assert [step[k] for k in "abcde"] == [None, None, None, "<kept as written>", None]
    assert step["action_output"] is None
    with pytest.raises(IngestError, match="too many to parse"):  # some 500 bytes a token, parsed
        parse_step_repr("ActionStep(action_output=[" + "0," * 300_000 + "])")
    with pytest.raises(IngestError, match=r"NUL|not a step"):
        parse_step_repr("ActionStep(a='\0')")


def test_detection_of_a_bare_list_of_texts_a_long_task_and_lookalikes(tmp_path):
    texts = [
        json.loads(line)["intermediate_steps"]
        for line in (FIX / "gaia_answers.jsonl").read_text().splitlines()
    ]
    bare = tmp_path / "steps.json"
    bare.write_text(json.dumps(texts[0]))  # json.dump([str(step) ...])
    assert detect_format(bare).name == "smolagents" and len(read_one(bare, 0)[1].steps) == 6
    steps = json.loads((FIX / "tool_calling_full_steps.json").read_text())
    steps[0]["task"] = "x" * 80_000 + " Which functions multiply by 3?"  # the action steps beyond the head
    long = tmp_path / "long.json"
    long.write_text(json.dumps(steps))
    assert detect_format(long).name == "smolagents"
    per_line = tmp_path / "callback.jsonl"  # one step per line, as a step callback writes: not runs
    per_line.write_text("".join(json.dumps(s) + "\n" for s in steps[1:]))
    browser = tmp_path / "history.json"  # another harness's steps
    browser.write_text(json.dumps({"history": [{"model_output": {}, "metadata": {"step_number": 1}}]}))
    runs = tmp_path / "runs.json"  # chat runs that open with a "task" field, longer than the head read
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x" * 800}]
    runs.write_text(json.dumps([{"task": f"t{i}", "messages": chat, "resolved": True} for i in range(200)]))
    for other in (per_line, browser, runs):
        ing = detect_format(other)
        assert ing is None or ing.name != "smolagents", other.name
