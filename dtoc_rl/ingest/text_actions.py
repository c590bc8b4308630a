"""Tool calls written as text: agents whose model writes its action in the reply, not as a tool call.

Many harnesses parse the action out of the assistant's text and send its output back as the next
user message; saved as plain chat messages, such a run has no ``tool_calls`` at all, and read
literally it would have no tool outputs to manage.  :func:`text_action` finds the action of one
reply in the conventions these harnesses use:

* ``xml``: ``<function=NAME><parameter=KEY>VALUE</parameter>...</function>`` (SWE-agent's
  ``xml_function_calling`` parser, OpenHands without native function calling) → ``NAME`` with the
  parameters as JSON arguments;
* ``codeact``: ``<execute_bash>...</execute_bash>``, ``<execute_ipython>``, ``<execute_browse>``
  (OpenHands CodeAct) → ``execute_bash`` ``{"command"}``, ``execute_ipython_cell`` ``{"code"}``,
  ``browser`` ``{"code"}``;
* ``fence``: the one fenced block tagged ``bash``/``sh``/``shell`` (mini-swe-agent, which runs
  nothing when a reply has several), else the last untagged one (SWE-agent 0.x) → ``bash`` with the
  command text as
  arguments, or the ACI command's own name when its first word is one (``open``, ``edit``, ...), as
  the native SWE-agent and mini-swe-agent ingesters name them.

:func:`as_tool_calls` rewrites a run's messages so that each reply with an action carries it as a
tool call and the message after it (the harness's observation) is its tool reply.  It applies only
to a run with no native tool calls, so a function-calling log is never second-guessed.
"""

from __future__ import annotations

import json
import re

from dtoc_rl.labels.vocabulary import ACI_COMMANDS

__all__ = ["as_tool_calls", "text_action"]

_XML_FN = re.compile(r"<function=([\w.\-]+)>(.*?)</function>", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([\w.\-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_CODEACT = re.compile(r"<execute_(bash|ipython|browse)>\n?(.*?)\n?</execute_\1>", re.DOTALL)
_CODEACT_TOOL = {"bash": ("execute_bash", "command"), "ipython": ("execute_ipython_cell", "code"),
                 "browse": ("browser", "code")}  # fmt: skip


def text_action(text: str) -> tuple[str, str, str, str] | None:
    """``(convention, tool name, tool arguments, the text without the action)`` of one assistant
    reply, or None when it holds no action (see the module docstring)."""
    if not text:
        return None
    fns = list(_XML_FN.finditer(text))
    if fns:
        m = fns[-1]
        params = {k: v for k, v in _XML_PARAM.findall(m.group(2))}
        return "xml", m.group(1), json.dumps(params), _without(text, m)
    acts = list(_CODEACT.finditer(text))
    if acts:
        m = acts[-1]
        name, key = _CODEACT_TOOL[m.group(1)]
        return "codeact", name, json.dumps({key: m.group(2)}), _without(text, m)
    blocks = _fences(text)
    shell = [b for b in blocks if b[0] in _SHELL_TAGS]
    # exactly one shell block, as mini-swe-agent demands (several: its format error, no action);
    # else SWE-agent 0.x's untagged block, the last one
    pick = (shell if len(shell) == 1 else []) or ([b for b in blocks if b[0] == ""][-1:] if not shell else [])
    if not pick:
        return None
    _, command, start, end = pick[0]
    if not command.strip():
        return None
    word = command.split(None, 1)[0]
    rest = (text[:start] + text[end:]).strip()
    return "fence", word if word in ACI_COMMANDS else "bash", command, rest


def _without(text: str, m: re.Match) -> str:
    return (text[: m.start()] + text[m.end() :]).strip()


_SHELL_TAGS = ("bash", "sh", "shell", "console")
_OPEN = re.compile(r"^[ \t]*```[ \t]*([\w+\-]*)[ \t]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")


def _fences(text: str) -> list[tuple[str, str, int, int]]:
    # (tag, body, start, end) of each fenced block, read line by line: a fence opens on a line of
    # three backticks and an optional tag and closes on a line of three backticks alone
    out = []
    pos, open_at, tag, body_at = 0, -1, "", 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if open_at < 0:
            m = _OPEN.match(bare)
            if m:
                open_at, tag, body_at = pos, m.group(1).lower(), pos + len(line)
        elif _CLOSE.match(bare):
            out.append((tag, text[body_at:pos].rstrip("\r\n"), open_at, pos + len(bare)))
            open_at = -1
        pos += len(line)
    return out


def _native(m) -> bool:
    # a message of a function-calling log: OpenAI tool calls or replies, Anthropic tool blocks
    if not isinstance(m, dict):
        return False
    if m.get("tool_calls") or m.get("function_call") or m.get("role") in ("tool", "function"):
        return True
    c = m.get("content")
    return isinstance(c, list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in c
    )


def as_tool_calls(msgs: list, content_text) -> tuple[list, str | None]:
    """``msgs`` with text actions as tool calls and the observation after each as its tool reply, and
    the conventions found (None, and ``msgs`` unchanged, when a message has native tool calls or no
    reply holds an action).  ``content_text(content, where)`` reads a message's text."""
    if not isinstance(msgs, list) or any(_native(m) for m in msgs):
        return msgs, None
    out: list = []
    found: set[str] = set()
    waiting: str | None = None  # the call id the next user message answers
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            return msgs, None  # chat_to_steps names the error
        role = m.get("role")
        if role == "assistant":
            act = text_action(content_text(m.get("content"), f"messages[{i}].content"))
            if act is None:
                out.append(m)
                waiting = None
                continue
            convention, name, args, rest = act
            found.add(convention)
            waiting = f"text-action-{i}"
            call = {"id": waiting, "type": "function", "function": {"name": name, "arguments": args}}
            out.append({**m, "content": rest, "tool_calls": [call]})
        elif role == "user" and waiting is not None:
            out.append({"role": "tool", "tool_call_id": waiting, "content": m.get("content")})
            waiting = None
        else:
            out.append(m)
    if not found:
        return msgs, None
    return out, ",".join(sorted(found))
