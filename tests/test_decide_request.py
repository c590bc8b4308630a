"""The /decide request schema: decoding, field-named errors, and the observation inputs."""

from __future__ import annotations

import json
import re

import pytest

from dtoc_rl.engine.decide_request import DecideError, Request, decode, parse, to_request


def body(obj) -> bytes:
    return json.dumps(obj).encode()


def test_a_body_decodes_to_the_same_request_as_the_object():
    items = [
        {"key": "t0", "tokens": 1200, "tool": "bash", "args": {"command": "cat a.py"}},
        {"key": "t1", "tokens": 30, "visible": False, "age": 0, "unknown_field": 1},
    ]
    obj = {"model": "openai/gpt-4o-2024-08-06", "step": 7, "items": items}
    req = decode(body(obj))
    assert isinstance(req, Request) and req == to_request(obj) and to_request(req) is req
    p = parse(req, max_items=1, max_request_items=10)
    assert p["keys"] == ["t0", "t1"] and [s.est_tokens for s in p["states"]] == [30]  # the window only
    assert p["family"] == "gpt-4o" and p["stored"] == 2 and p["visible_count"] == 1
    assert p["active_tokens"] == 1200 + 40 and p["saved_tokens"] == 0 and p["step"] == 7


def test_without_a_step_the_step_is_the_oldest_age_and_one_older_items_than_the_window_included():
    items = [
        {"key": "t0", "tokens": 10, "age": 9},
        {"key": "t1", "tokens": 20},
        {"key": "t2", "tokens": 30, "age": 0},
    ]
    p = parse(to_request({"items": items}), max_items=1, max_request_items=10)
    assert p["step"] == 10 and [s.age for s in p["states"]] == [0]
    p = parse(to_request({"items": items[1:]}), max_items=1, max_request_items=10)
    assert p["step"] == 2  # t1 has no age: the items after it count it, 1


@pytest.mark.parametrize(
    "raw,status,field,text",
    [
        (b'{"items": [], "step": NaN}', 400, "<body>", "NaN"),
        (b'{"items": [', 400, "<body>", "not valid JSON: Expecting value (line 1, column 12)"),
        (b'{"items": [{"key": "a", "tokens": 100000000000000000000}]}', 422, "items[0].tokens", "<="),
        (b'{"items": [{"key": "a", "tokens": 5.0}]}', 422, "items[0].tokens", "Expected `int`"),
        (b'{"items": [{"tokens": 5}]}', 422, "items[0].key", "is required"),
        (b"{}", 422, "items", "is required"),
        # unknown fields are ignored, so a misspelt one is named where the field it meant is missing
        (b'{"itemz": []}', 422, "items", "is required (the body has 'itemz', which is not a field)"),
        (b"[1]", 422, "<body>", "Expected `object`"),
        (b'{"items": [{"key": "a", "tokens": 1, "timestamp": "now"}]}', 422, "items[0].timestamp", "float"),
    ],
)
def test_errors_name_the_field(raw, status, field, text):
    with pytest.raises(DecideError) as e:
        decode(raw)
    assert (e.value.status, e.value.field) == (status, field) and text in e.value.message
    assert e.value.message.startswith(field) or field == "<body>"


def test_rules_beyond_the_schema():
    dup = to_request({"items": [{"key": "a", "tokens": 1}, {"key": "a", "tokens": 2}]})
    with pytest.raises(DecideError, match=r"items\[1\].key: duplicate key 'a'"):
        parse(dup, max_items=4, max_request_items=10)
    with pytest.raises(DecideError) as e:
        parse(
            to_request({"items": [{"key": f"k{i}", "tokens": 1} for i in range(3)]}),
            max_items=4,
            max_request_items=2,
        )
    assert e.value.status == 413
    late_first = to_request(
        {"items": [{"key": "b", "tokens": 2, "timestamp": 9}, {"key": "a", "tokens": 1, "timestamp": 1}]}
    )
    assert parse(late_first, max_items=4, max_request_items=10)["keys"] == ["a", "b"]  # ordered by timestamp
    one = [{"key": "a", "tokens": 1}]
    for extra, text in (({"visible_count": 5}, "must be <= stored (1, the number of items"),
                        ({"visible_count": 5, "stored": 3}, "must be <= stored (3)")):  # fmt: skip
        with pytest.raises(DecideError, match=re.escape("visible_count: " + text)):
            parse(to_request({"items": one, **extra}), max_items=4, max_request_items=10)


def test_every_check_runs_before_the_labels_are_asked_for():
    asked = []
    bad = to_request({"items": [{"key": "a", "tokens": 1}, {"key": "b", "tokens": 1, "tool_category": "x"}]})
    with pytest.raises(DecideError, match=r"items\[1\].tool_category"):
        parse(bad, max_items=4, max_request_items=10, labels=lambda keys: asked.append(keys) or {})
    assert asked == []
    ok = to_request({"items": [{"key": "a", "tokens": 1}, {"key": "b", "tokens": 1}]})
    parse(ok, max_items=1, max_request_items=10, labels=lambda keys: asked.append(keys) or {})
    assert asked == [["b"]]  # the window's keys


@pytest.mark.parametrize(
    "raw,field",
    [
        (b'{"items": [], "x": ' + b"[" * 1000 + b"]" * 1000 + b"}", "<body>"),  # an ignored field, 2 KB
        (b'{"items": [], "x": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}", "<body>"),
        (b'{"items": [], "big": 1' + b"0" * 30 + b', "x": ' + b"[" * 3000 + b"]" * 3000 + b"}", "<body>"),
    ],
)
def test_json_nested_too_deeply_is_a_400(raw, field):
    with pytest.raises(DecideError) as e:  # not a RecursionError (an HTTP 500)
        decode(raw)
    assert (e.value.status, e.value.field) == (400, field) and "too deeply" in e.value.message


def test_tool_arguments_nested_deeper_than_the_limit_are_a_400_naming_the_field():
    from dtoc_rl.engine.decide_request import MAX_ARGS_DEPTH

    ok = json.loads("[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH)
    deep = {"a": json.loads("[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH)}
    assert decode(body({"items": [{"key": "a", "tokens": 1, "args": ok}]})).items[0].args == ok
    with pytest.raises(DecideError) as e:
        decode(body({"items": [{"key": "a", "tokens": 1}, {"key": "b", "tokens": 1, "args": deep}]}))
    assert (e.value.status, e.value.field) == (400, "items[1].args")
    turns = [{"index": 0, "calls": [{"key": "k", "tool": "bash", "output": "", "args": deep}]}]
    with pytest.raises(DecideError) as e:  # the same from a decoded object
        to_request({"items": [], "session": "s", "turns": turns})
    assert (e.value.status, e.value.field) == (400, "turns[0].calls[0].args")


def test_saved_tokens_may_be_negative():
    """Hiding an output smaller than its placeholder saves fewer than zero tokens; ReplayEnv's observation
    says so and a client mirroring it must be able to send it (the parity test's service path)."""
    from dtoc_rl.engine.decide_request import decode

    body = b'{"items": [{"key": "t0000", "tokens": 20, "age": 1, "visible": false}], "saved_tokens": -12}'
    assert decode(body).saved_tokens == -12
