"""The proxy's last answer of a conversation, which no request follows: read from the answer itself
(whole or streamed, each API), recorded once, and logged when the proxy stops or drops the
conversation."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve import api_messages
from dtoc_rl.serve.api_messages import StreamAnswer, answer_event
from dtoc_rl.serve.proxy import ContextProxy
from tests.chat_turns import HEAD, answer, turn

USAGE = {"prompt_tokens": 900, "completion_tokens": 40}


def _sse(events: list) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def _streamed(api: str, events: list, cut: int = 7) -> dict:
    """The events fed in pieces of ``cut`` bytes, as a socket may hand them over."""
    sniff = StreamAnswer(api)
    raw = _sse(events) + (b"data: [DONE]\n\n" if api == "openai" else b"")
    for i in range(0, len(raw), cut):
        sniff.feed(raw[i : i + cut])
    assert sniff.done
    return sniff.answer()


def _read(event) -> tuple:
    return event.text, event.reasoning, [(c["id"], c["name"], c["arguments"]) for c in event.calls]


# -- each API: the stream read as its whole answer is --------------------------------------------
def _openai() -> tuple[dict, list]:
    calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls -la"}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
    ]
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Two looks.",
                                                  "reasoning_content": "think", "tool_calls": calls}}],
             "usage": USAGE}  # fmt: skip

    def delta(d: dict) -> dict:
        return {"choices": [{"index": 0, "delta": d}]}

    events = [
        delta({"role": "assistant", "reasoning_content": "thi"}),
        delta({"reasoning_content": "nk"}),
        delta({"content": "Two "}),
        delta({"content": "looks."}),
        # a second choice is not the one the agent goes on with
        {"choices": [{"index": 1, "delta": {"content": "other"}}]},
        delta({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "bash", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": '}}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "read", "arguments": "{"}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"ls -la"}'}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '"path": "a.py"}'}}]}),
        {"choices": [], "usage": USAGE},
    ]
    return whole, events


def _anthropic() -> tuple[dict, list]:
    blocks = [
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "pytest -x"}},
    ]
    whole = {"role": "assistant", "content": blocks, "usage": {"input_tokens": 10, "output_tokens": 30}}
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "h"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "m"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Look"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ing."}},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "input_json_delta", "partial_json": '{"comm'}},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "input_json_delta", "partial_json": 'and": "pytest -x"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return whole, events


def _responses() -> tuple[dict, list]:
    output = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Run it."}]},
        {"type": "function_call", "call_id": "fc_1", "name": "shell", "arguments": '{"cmd": "make"}'},
    ]
    whole = {"output": output, "usage": {"input_tokens": 70, "output_tokens": 9}}
    events = [
        {"type": "response.output_item.done", "output_index": i, "item": item}
        for i, item in enumerate(output)
    ]
    return whole, [*events, {"type": "response.completed", "response": whole}]


def _gemini() -> tuple[dict, list]:
    parts = [{"text": "plan", "thought": True}, {"text": "Reading it."},
             {"functionCall": {"name": "read_file", "args": {"path": "m.py"}}}]  # fmt: skip
    usage = {"promptTokenCount": 80, "candidatesTokenCount": 12}
    whole = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
             "usageMetadata": usage}  # fmt: skip

    def chunk(*ps: dict, last: bool = False) -> dict:
        candidate = {
            "content": {"role": "model", "parts": list(ps)},
            **({"finishReason": "STOP"} if last else {}),
        }
        return {"candidates": [candidate], **({"usageMetadata": usage} if last else {})}

    # text split mid-word, a thought's apart from the answer's
    events = [chunk({"text": "pl", "thought": True}), chunk({"text": "an", "thought": True}),
              chunk({"text": "Read"}), chunk({"text": "ing it."}), chunk(parts[2], last=True)]  # fmt: skip
    return whole, events


@pytest.mark.parametrize("api, made", [("openai", _openai), ("anthropic", _anthropic),
                                       ("responses", _responses), ("gemini", _gemini)])  # fmt: skip
def test_a_streamed_answer_reads_as_its_whole_answer(api, made):
    whole, events = made()
    expected = answer_event(api, whole)
    assert expected is not None and expected.calls and expected.text
    streamed = _streamed(api, events)
    assert _read(answer_event(api, streamed)) == _read(expected)
    assert streamed["usage"]  # the usage read as before, beside the turn


def test_a_responses_stream_without_its_final_event_reads_the_items_it_finished():
    whole, events = _responses()
    assert _read(
        answer_event("responses", _streamed("responses", events[:-1] + [{"type": "error"}]))
    ) == _read(answer_event("responses", whole))


def test_a_tool_call_streamed_with_its_input_whole_keeps_it():
    start = {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {"path": "."}}
    events = [{"type": "content_block_start", "index": 0, "content_block": start}, {"type": "message_stop"}]
    assert _read(answer_event("anthropic", _streamed("anthropic", events))) == (
        "",
        "",
        [("toolu_2", "ls", {"path": "."})],
    )


def test_a_gemini_json_list_stream_reads_as_its_whole_answer():
    whole, events = _gemini()
    assert _read(answer_event("gemini", events)) == _read(answer_event("gemini", whole))


def test_answers_that_hold_no_model_turn_read_as_none():
    assert answer_event("openai", {"error": {"message": "overloaded"}}) is None
    assert answer_event("openai", {"choices": []}) is None
    assert answer_event("anthropic", {"type": "error", "error": {}}) is None
    assert answer_event("gemini", {"candidates": [{"finishReason": "SAFETY"}]}) is None
    assert answer_event("responses", {"output": "not a list"}) is None
    assert answer_event("openai", {"choices": [{"message": {"content": ""}}]}) is None  # says nothing
    # events of shapes no API sends are passed over: the usage still read
    sniff = StreamAnswer("anthropic")
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    odd = [
        {"type": "content_block_delta", "index": "x"},
        {"type": "content_block_delta", "index": 0, "delta": [1]},
    ]
    sniff.feed(_sse([start, *odd, {"type": "message_delta", "usage": {"output_tokens": 3}}]))
    assert sniff.answer() == {"usage": {"output_tokens": 3}}


def test_an_answer_over_the_cap_keeps_its_usage_only(monkeypatch):
    monkeypatch.setattr(api_messages, "MAX_ANSWER_CHARS", 5)
    whole, events = _openai()
    streamed = _streamed("openai", events)
    assert streamed == {"usage": USAGE} and answer_event("openai", streamed) is None
    assert StreamAnswer(None).answer() is None  # no API, no usage: nothing read


# -- the proxy: recorded once, logged at the close -------------------------------------------------
def _turn(k: int) -> list[dict]:
    return turn(k, f"file_{k}.py\n" * 300)


def _answer(text: str, calls: tuple = ()) -> dict:
    return answer(text, calls, usage=USAGE)


def _log(tmp_path, name: str) -> dict:
    return json.loads((tmp_path / f"{name}.jsonl").read_text())


def _run(proxy: ContextProxy, turns: int) -> tuple[str, list[dict]]:
    msgs, name = list(HEAD), None
    for k in range(turns):
        rw = proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs})
        assert rw.passed is None and name in (None, rw.conversation)
        name = rw.conversation
        proxy.answered(name, _answer(f"Step {k}.", (f"call_{k}",)))
        msgs = msgs + _turn(k)
    return name, msgs


def test_the_closing_answer_is_logged_once_with_its_usage_and_the_conversation_ends(tmp_path):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    name, msgs = _run(proxy, 3)
    rw = proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs})
    proxy.answered(name, _answer("All tests pass."))
    proxy.flush_logs()
    before = _log(tmp_path, name)
    assert before["api_calls"] == 3 and before["messages"][-1]["role"] == "tool"  # the answer not yet in
    assert proxy.close_conversations() == 1 and proxy.close_conversations() == 0
    proxy.flush_logs()
    row = _log(tmp_path, name)
    assert row["api_calls"] == 4 and row["messages"][-1]["role"] == "assistant"
    assert row["messages"][-1]["content"] == "All tests pass."
    assert sum(m["role"] == "assistant" for m in row["messages"]) == 4  # each answer recorded once
    assert (
        row["tokens_in"] == 4 * USAGE["prompt_tokens"] and row["tokens_out"] == 4 * USAGE["completion_tokens"]
    )
    # a request after the close starts a conversation of its own, and an answer to the closed one is
    # heard of no more
    proxy.answered(name, _answer("late"))
    assert proxy.close_conversations() == 0
    again = proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs})
    assert again.conversation not in (None, rw.conversation)


def test_an_answer_the_next_request_holds_is_recorded_from_the_request_not_twice(tmp_path):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    name, msgs = _run(proxy, 3)
    proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs})  # holds the third answer
    assert proxy.close_conversations() == 0  # the fourth was never answered
    proxy.flush_logs()
    row = _log(tmp_path, name)
    assert row["api_calls"] == 3 and sum(m["role"] == "assistant" for m in row["messages"]) == 3


def test_a_conversation_dropped_for_a_newer_one_logs_its_closing_answer(tmp_path):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path, max_conversations=1)
    name, msgs = _run(proxy, 2)
    proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs})
    proxy.answered(name, _answer("Done."))
    other = [HEAD[0], {"role": "user", "content": "Another task."}]
    assert proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": other}).conversation != name
    assert list(proxy.mirrors) != [name]
    proxy.flush_logs()
    row = _log(tmp_path, name)
    assert row["api_calls"] == 3 and row["messages"][-1]["content"] == "Done."


def test_the_server_stopping_logs_the_closing_answers(tmp_path):
    import threading

    from dtoc_rl.serve.proxy import make_proxy_server

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    srv = make_proxy_server(proxy, "http://127.0.0.1:9", port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    name, _ = _run(proxy, 2)
    srv.shutdown()
    srv.server_close()
    row = _log(tmp_path, name)
    assert row["api_calls"] == 2 and row["messages"][-1]["tool_calls"][0]["id"] == "call_1"


# -- what servers and hostile upstreams send -------------------------------------------------------
def _chat_delta(d: dict) -> dict:
    return {"choices": [{"index": 0, "delta": d}]}


def test_chat_tool_calls_without_an_index_or_all_at_index_0_stay_apart():
    whole, _ = _openai()
    expected = _read(answer_event("openai", whole))
    calls = [("call_a", "bash", '{"command": "ls -la"}'), ("call_b", "read", '{"path": "a.py"}')]
    for index in (None, 0):  # Gemini's OpenAI-compatible endpoint leaves it out; some gateways send 0
        events = [_chat_delta({"content": "Two looks.", "reasoning_content": "think"})]
        for cid, name, args in calls:
            head = {"id": cid, "function": {"name": name, "arguments": args[:5]}}
            tail = {"function": {"arguments": args[5:]}}
            events += [_chat_delta({"tool_calls": [{**d, **({} if index is None else {"index": index})}]})
                       for d in (head, tail)]  # fmt: skip
        assert _read(answer_event("openai", _streamed("openai", events))) == expected


def test_a_responses_stream_whose_last_event_lists_no_items_reads_the_items_it_finished():
    whole, events = _responses()
    emptied = [*events[:-1], {"type": "response.completed", "response": {**whole, "output": []}}]
    assert _read(answer_event("responses", _streamed("responses", emptied))) == _read(
        answer_event("responses", whole)
    )


def test_events_of_odd_types_and_whole_items_over_the_cap_keep_the_usage(monkeypatch):
    sniff = StreamAnswer("responses")
    sniff.feed(
        _sse(
            [
                {"type": []},
                {"type": {"a": 1}},
                {"type": "response.completed", "response": {"usage": {"x": 1}}},
            ]
        )
    )
    assert sniff.done and sniff.usage == {"x": 1}
    # whole items count against the cap as well as text: a stream of big items is not kept whole
    monkeypatch.setattr(api_messages, "MAX_ANSWER_CHARS", 1000)
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x" * 400}]}
    events = [{"type": "response.output_item.done", "output_index": i, "item": item} for i in range(5)]
    events.append({"type": "response.completed", "response": {"output": [], "usage": {"input_tokens": 3}}})
    assert _streamed("responses", events) == {"usage": {"input_tokens": 3}}
    # and so do calls that bring nothing but an id: each is kept
    ids = [_chat_delta({"tool_calls": [{"index": 0, "id": f"c{i}", "function": {}}]}) for i in range(50)]
    assert _streamed("openai", [*ids, {"choices": [], "usage": USAGE}]) == {"usage": USAGE}


def test_long_answers_are_read_in_time_that_grows_with_their_length():
    import time

    text = [{"type": "output_text", "text": "y" * 1000}]
    items = [{"type": "message", "role": "assistant", "content": text} for _ in range(8000)]
    # Gemini's stream as one JSON list: its chunks' text parts joined into one
    chunks = [{"candidates": [{"content": {"parts": [{"text": "z" * 100}]}}]} for _ in range(40_000)]
    t0 = time.perf_counter()
    assert len(answer_event("responses", {"output": items}).text) == 8_000_000
    assert len(answer_event("gemini", chunks).text) == 4_000_000
    assert time.perf_counter() - t0 < 5  # 16 s and 23 s when their texts were added to one by one


def test_a_side_questions_answer_left_out_by_the_next_request_is_not_the_closing_answer(tmp_path):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    name, msgs = _run(proxy, 2)
    side = [*msgs, {"role": "user", "content": "Who speaks next? Answer in JSON."}]
    assert proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": side}).conversation == name
    proxy.answered(name, _answer('{"next_speaker": "model"}'))
    # the agent goes on without it; its next answer never arrives (the proxy stops first)
    on = [*msgs, {"role": "user", "content": "Please continue."}]
    assert proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": on}).conversation == name
    assert proxy.close_conversations() == 0
    proxy.flush_logs()
    assert "next_speaker" not in json.dumps(_log(tmp_path, name)["messages"])


def test_a_request_that_ends_where_a_side_question_began_goes_on_in_the_same_conversation(tmp_path):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    name, msgs = _run(proxy, 3)
    side = [*msgs, {"role": "user", "content": "Who speaks next? Answer in JSON."}]
    proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": side})
    proxy.answered(name, _answer('{"next_speaker": "model"}'))
    # the agent sends its history again, up to the last tool result, and goes on
    assert proxy.rewrite("openai", {"model": "gpt-4o-2024-08-06", "messages": msgs}).conversation == name
    proxy.answered(name, _answer("Done."))
    assert proxy.close_conversations() == 1 and len(proxy.mirrors) == 1
    proxy.flush_logs()
    row = _log(tmp_path, name)
    assert row["api_calls"] == 4 and row["messages"][-1]["content"] == "Done."
    assert "next_speaker" not in json.dumps(row["messages"])
