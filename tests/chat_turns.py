"""A small chat-completions conversation that the proxy's tests build on: its opening messages, a turn
(the agent's call of one tool and the tool's output) and a model's answer, in OpenAI's chat format."""

from __future__ import annotations

MODEL = "gpt-4o-2024-08-06"
HEAD = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
LS = '{"command": "ls"}'


def tool_call(call_id: str, arguments: str = LS, name: str = "bash") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(
    k: int, output: str, *, call_id: str | None = None, arguments: str = LS, text: str | None = None
) -> list[dict]:
    """Turn ``k``: the assistant's message calling one tool (``call_k`` unless named) and its output."""
    cid = call_id or f"call_{k}"
    return [{"role": "assistant", "content": f"Step {k}." if text is None else text,
             "tool_calls": [tool_call(cid, arguments)]},
            {"role": "tool", "tool_call_id": cid, "content": output}]  # fmt: skip


def answer(text: str, calls: tuple = (), usage: dict | None = None, model: str = MODEL) -> dict:
    """A chat completion whose message says ``text`` and calls a tool under each id in ``calls``."""
    message: dict = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [tool_call(c, "{}") for c in calls]
    out: dict = {"model": model, "choices": [{"index": 0, "message": message}]}
    if usage is not None:
        out["usage"] = usage
    return out
