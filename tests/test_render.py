"""Rendered messages validated against the providers' own SDK request types (no network)."""

import pytest
from pydantic import TypeAdapter

from dtoc_rl import DTOCContext

openai_types = pytest.importorskip("openai.types.chat")
anthropic_types = pytest.importorskip("anthropic.types")

OPENAI_MESSAGES = TypeAdapter(list[openai_types.ChatCompletionMessageParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[anthropic_types.MessageParam])


def _session():
    c = DTOCContext(query="Why does the build fail?", system="sys")
    c.add_assistant("", tool_calls=[{"name": "bash", "arguments": {"cmd": "make"}, "id": "call|weird:id"}])
    c.add_tool_result("error: undefined reference ü 日本\x00")
    c.add_assistant(
        "Two more.",
        reasoning="parallel",
        tool_calls=[
            {"name": "read", "arguments": {"path": "a.c"}},
            {"name": "read", "arguments": {"path": "b.c"}},
        ],
    )
    c.add_tool_result("int main() {}")
    c.add_tool_result("x" * 5000)
    c.manage_context(disable=["t0000", "t0002"])
    c.add_user("please continue")
    c.add_assistant("Done.")
    return c


def test_openai_render_validates_and_pairs_ids():
    msgs = _session().to_openai()
    OPENAI_MESSAGES.validate_python(msgs)
    call_ids = [tc["id"] for m in msgs if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    tool_ids = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    assert call_ids == tool_ids and len(tool_ids) == 3
    assert sum('"hidden": true' in m["content"] for m in msgs if m["role"] == "tool") == 2


def test_anthropic_render_validates_alternates_and_pairs_ids():
    req = _session().to_anthropic()
    ANTHROPIC_MESSAGES.validate_python(req["messages"])
    assert req["system"] == "sys"
    roles = [m["role"] for m in req["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:]))
    uses = [b["id"] for m in req["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in req["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert uses == results and uses[0] == "call_weird_id"


def test_openai_reasoning_only_on_request():
    c = _session()
    assert not any("parallel" in (m.get("content") or "") for m in c.to_openai())
    assert any("parallel" in (m.get("content") or "") for m in c.to_openai(include_reasoning=True))


def test_message_text_reads_strings_parts_and_sdk_objects():
    from types import SimpleNamespace

    from dtoc_rl.core.render import message_text

    assert message_text(None) == "" and message_text("hi") == "hi"
    image = {"type": "image_url", "image_url": {}}
    parts = ["a", {"type": "text", "text": "b"}, image, SimpleNamespace(text="c")]
    assert message_text(parts) == "abc"
    assert message_text(parts, "\n") == "a\nb\nc"
    assert message_text(42) == "42"


def test_a_contexts_rendering_is_rendered_once_and_equals_the_plain_renderer():
    """DTOCContext.to_openai renders each message once (again when its visibility changes): pinned
    equal to render.to_openai over assemble() through every kind of change, and what it returns is
    the caller's to change."""
    import random

    from dtoc_rl.core.render import to_openai

    rng = random.Random(0)
    c = _session()
    for i in range(300):
        op = rng.random()
        if op < 0.3:
            call = {"name": "bash", "arguments": {"cmd": f"ls {i}", "n": [i, "é"]}}
            c.add_assistant(f"step {i}", reasoning=f"why {i}" if i % 3 else None, tool_calls=[call])
            c.add_tool_result(f"out {i} " * rng.randint(1, 50))
        elif op < 0.5:
            keys = c.store.keys()
            c.manage_context(disable=rng.sample(keys, min(3, len(keys))))
        elif op < 0.65:
            c.manage_context(enable=list(c.store.hidden_keys())[:2])
        elif op < 0.7:
            c.add_user(f"more {i}")
        elif op < 0.75:
            change = {"enable": [], "disable": ["t0001"]}
            c.add_assistant("", tool_calls=[{"name": "manage_context", "arguments": change}])
            c.handle_manage_context_call(change)
        reasoning = rng.random() < 0.3
        got = c.to_openai(include_reasoning=reasoning)
        assert got == to_openai(c.assemble(), include_reasoning=reasoning), i
        got[-1]["content"] = "changed by the caller"
        got.append({"role": "user", "content": "appended by the caller"})
    assert c.to_openai() == to_openai(c.assemble())


def test_a_context_renders_only_what_is_new_or_changed(monkeypatch):
    import dtoc_rl.core.render as render

    rendered = []
    plain = render.openai_message
    monkeypatch.setattr(
        render, "openai_message", lambda m, **kw: rendered.append(m["role"]) or plain(m, **kw)
    )
    c = _session()
    n = len(c.to_openai())
    assert len(rendered) == n
    rendered.clear()
    c.to_openai()
    assert rendered == []
    c.manage_context(enable=["t0000"])
    c.add_user("next")
    c.to_openai()
    assert rendered == ["tool", "user"]


def test_threads_rendering_one_context_at_once_get_the_plain_rendering():
    import sys

    from dtoc_rl.core.render import to_openai

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: what a busy process does now and then
    try:
        _render_in_threads(to_openai)
    finally:
        sys.setswitchinterval(old)


def _render_in_threads(to_openai):
    import threading

    for _ in range(20):
        c = DTOCContext(query="q")
        for i in range(300):
            c.add_assistant("", tool_calls=[{"name": "bash", "arguments": {"i": i}}])
            c.add_tool_result("x" * 50)
        got: list = []
        threads = [threading.Thread(target=lambda c=c, got=got: got.append(c.to_openai())) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        want = to_openai(c.assemble())
        assert got == [want] * 4 and c.to_openai() == want
