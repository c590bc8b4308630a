import json

import pytest

from dtoc_rl.core.record import ToolOutput, format_key
from dtoc_rl.core.tokens import CharEstimator

EST = CharEstimator()


def test_keys_are_short_and_ordered():
    assert format_key(7) == "t0007"
    assert format_key(9999) == "t9999"
    assert format_key(10000) == "t10000"


def test_envelope_has_exactly_the_three_fields():
    rec = ToolOutput.create("t0001", "hello\nworld", EST, timestamp=0.0)
    env = json.loads(rec.envelope())
    assert set(env) == {"tool_key", "tool_result", "estimated_tokens"}
    assert env == {"tool_key": "t0001", "tool_result": "hello\nworld", "estimated_tokens": 3}


@pytest.mark.parametrize("size", [1, 10, 1000, 100_000, 1_000_000])
@pytest.mark.parametrize("key", [0, 42, 9999, 123456])
def test_placeholder_costs_30_to_50_tokens_whatever_the_size(size, key):
    rec = ToolOutput.create(format_key(key), "x" * size, EST, timestamp=1.9e9)
    rec.visible = False
    assert 30 <= rec.hidden_cost <= 50
    assert rec.cost == rec.hidden_cost == EST.count(rec.placeholder())


def test_placeholder_carries_only_key_time_tokens_and_hidden_flag():
    rec = ToolOutput.create("t0003", "secret content " * 50, EST, timestamp=1_700_000_000.0)
    ph = json.loads(rec.placeholder())
    assert ph["tool_key"] == "t0003"
    assert ph["hidden"] is True
    assert ph["timestamp"] == "2023-11-14T22:13:20Z"
    assert ph["estimated_tokens"] == rec.estimated_tokens
    assert set(ph) <= {"tool_key", "hidden", "timestamp", "estimated_tokens", "note"}
    assert "secret" not in rec.placeholder()


@pytest.mark.parametrize(
    "content",
    [
        "héllo wörld — ünïcode ✓",
        "日本語のテキスト",
        "emoji 🎉🚀",
        "\x00\x01\x02\xff binary-ish \ufffd",
        "\udcff lone",
    ],
)
def test_non_ascii_and_binary_looking_content_round_trips_in_envelope(content):
    rec = ToolOutput.create("t0000", content, EST, timestamp=0.0)
    assert json.loads(rec.envelope())["tool_result"] == content
    assert rec.estimated_tokens == EST.count(content)
