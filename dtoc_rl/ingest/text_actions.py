"""Tool calls written as text: agents whose model writes its action in the reply, not as a tool call.

Many harnesses parse the action out of the assistant's text and send its output back as the next
user message.  The parsers here are the one implementation of each convention: the native
SWE-agent and mini-swe-agent ingesters use them, and so does the generic chat reader, for a run
saved as plain chat messages (which would otherwise have no tool outputs to manage):

* ``xml``: ``<function=NAME>`` then ``<parameter=KEY>VALUE</parameter>`` lines then ``</function>``
  (SWE-agent 1.x ``sweagent/tools/parsing.py``, ``XMLFunctionCallingParser``; OpenHands without native
  function calling writes the same) → ``NAME`` (``execute_bash`` read as ``bash``, ``finish`` as
  ``submit``, SWE-agent's names) with the parameters as JSON arguments;
* ``codeact``: ``<execute_bash>...</execute_bash>``, ``<execute_ipython>``, ``<execute_browse>``
  (OpenHands CodeAct) → ``bash`` ``{"command"}``, ``execute_ipython_cell`` ``{"code"}``, ``browser``
  ``{"code"}``;
* ``bash``: exactly one ```` ```bash ```` block (mini-swe-agent 1.x's action regex; with none or several
  its harness runs nothing and answers with a format error) → ``bash`` with the command text;
* ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the Hermes and Qwen
  chat templates' tool calls, as a rollout saved as raw text holds them), one call per block, each
  answered by the next tool message in order, or all by one message of as many
  ``<tool_response>`` blocks.

An untagged ```` ``` ```` block is no action by these: in a plain chat it is far more often an example.
Only when none of them finds an agent loop is one more convention tried, on its own:

* ``thought_action``: the reply's last fenced block is the command and the text before it the thought
  (SWE-agent 0.x, ``sweagent/agent/parsing.py``, ``ThoughtActionParser``: "a discussion followed by a
  command wrapped in backticks"; the runs of nebius/SWE-agent-trajectories are written this way) → the
  ACI command it starts with (``open``, ``edit``, ... as the SWE-agent reader names them), else
  ``bash``, with the command text.  Only a block that ends the reply and is untagged or tagged as a
  shell counts, and a stricter share test guards it (:data:`MIN_THOUGHT_ACTIONS`), so a coding chat
  whose answers show code stays a chat.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from dtoc_rl.labels.vocabulary import ACI_COMMANDS  # SWE-agent 0.x commands; anything else ran in bash

__all__ = [
    "as_tool_calls",
    "bash_block",
    "hermes_calls",
    "text_action",
    "thought_action",
    "xml_function_call",
]

_FN = re.compile(r"<function=([^>]+)>\n(.*?)</function>", re.DOTALL)
_FN_PARAM = re.compile(r"<parameter=([^>]+)>(.*?)</parameter>", re.DOTALL)
_FN_ALIASES = {"execute_bash": "bash", "finish": "submit"}
_CODEACT = re.compile(r"<execute_(bash|ipython|browse)>\n?(.*?)\n?</execute_\1>", re.DOTALL)
_CODEACT_TOOL = {"bash": ("bash", "command"), "ipython": ("execute_ipython_cell", "code"),
                 "browse": ("browser", "code")}  # fmt: skip
# mini-swe-agent 1.x fences its action as ```bash, 2.x as ```mswea_bash_command (its text-based model)
_BASH = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
_THOUGHT = re.compile(r"^\s*THOUGHT:\s*", re.IGNORECASE)
# a block's body never holds another opening tag: "<tool_call>" named in prose before a real call
# must not swallow it
_HERMES = re.compile(r"<tool_call>\s*((?:(?!<tool_call>).)*?)\s*</tool_call>", re.DOTALL)
_CLOSE = re.compile(r"\s*</tool_call>")
_JSON = json.JSONDecoder()
_HERMES_REPLY = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
_SHELL_TAGS = ("", "bash", "sh", "shell", "console")

#: A plain chat is read as a text-action agent only when at least this many replies carry an action
#: and they are at least this share of the replies the harness answered (a user message follows):
#: an agent loop acts on nearly every turn, a chat that shows code now and then does not.
MIN_ACTIONS, MIN_ACTION_SHARE = 2, 0.6
#: The same for the ``thought_action`` fallback, stricter: an untagged block is a weaker sign than a
#: harness's own markup, and a short help chat can end every answer with a command to copy.
MIN_THOUGHT_ACTIONS, MIN_THOUGHT_ACTION_SHARE = 5, 0.8


def xml_function_call(text: str) -> tuple[str, str, re.Match] | None:
    """The first ``<function=...>`` call of a reply: ``(tool name, JSON arguments, match)``.  Values are
    stripped; a ``view_range`` written as ``[a, b]`` becomes a list, as the editor reads it."""
    m = _FN.search(text or "")
    if m is None:
        return None
    params: dict[str, Any] = {k: v.strip() for k, v in _FN_PARAM.findall(m.group(2))}
    if isinstance(params.get("view_range"), str) and re.fullmatch(r"\[\d+,\s*\d+\]", params["view_range"]):
        params["view_range"] = json.loads(params["view_range"])
    name = m.group(1).strip()
    return _FN_ALIASES.get(name, name), json.dumps(params), m


def bash_block(text: str) -> tuple[str | None, str]:
    """mini-swe-agent's action of a reply: ``(command, thought)``; the command is None unless the reply
    holds exactly one ```` ```bash ```` block, and the thought is then the reply without it and without
    a leading ``THOUGHT:`` (else the whole reply, which the harness keeps in every later prompt)."""
    m = _BASH.findall(text or "")
    if len(m) != 1:
        return None, text
    return m[0], _THOUGHT.sub("", _BASH.sub("", text).strip())


def _hermes_blocks(text: str) -> list[tuple[int, int, str, Any]]:
    """``(start, end, body, value)`` of each ``<tool_call>`` block.  A JSON body is read as JSON, its
    ``value`` the decoded object (its strings may hold the tags themselves: an edit of a chat
    template); any other body runs to the first closing tag with no opening tag before it, its
    ``value`` None (a body that starts as JSON but is not followed by the closing tag is no call)."""
    out, pos = [], 0
    while (i := text.find("<tool_call>", pos)) >= 0:
        j = i + len("<tool_call>")
        k = len(text) - len(text[j:].lstrip())
        if text[k : k + 1] == "{":
            try:
                value, end = _JSON.raw_decode(text, k)
            except json.JSONDecodeError:
                value, end = None, -1
            close = _CLOSE.match(text, end) if end > 0 else None
            if close is not None:
                out.append((i, close.end(), text[k:end], value))
                pos = close.end()
                continue
        m = _HERMES.match(text, i)
        if m is not None:
            out.append((i, m.end(), m.group(1), None))
            pos = m.end()
        else:
            pos = j
    return out


def hermes_calls(text: str) -> tuple[list[tuple[str, str]], str]:
    """The ``<tool_call>`` blocks of a reply as ``[(tool name, JSON arguments)]`` (a block whose JSON
    names no tool is not a call), and the reply without them."""
    calls: list[tuple[str, str]] = []
    kept: list[str] = []  # the reply without the blocks that are calls (a malformed one stays, as sent)
    last = 0
    text = text or ""
    for start, end, body, call in _hermes_blocks(text):
        # (a body that starts as JSON and was not decoded is no call)
        xml = call is None and not body.lstrip().startswith("{")
        if xml and (m_fn := _FN.search(body + "\n")) is not None:  # Qwen3-Coder: <function=...> inside
            # its names as written (no SWE-agent aliases); a value loses only the newline the template
            # puts on each side of it
            params = {k: _one_newline_off(v) for k, v in _FN_PARAM.findall(m_fn.group(2))}
            call = {"name": m_fn.group(1).strip(), "arguments": params}
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            continue
        args = call.get("arguments", call.get("parameters", {}))
        calls.append((call["name"], args if isinstance(args, str) else json.dumps(args)))
        kept.append(text[last:start])
        last = end
    if not calls:
        return calls, text
    kept.append(text[last:])
    return calls, "".join(kept).strip()


def _one_newline_off(v: str) -> str:
    v = v[1:] if v.startswith("\n") else v
    return v[:-1] if v.endswith("\n") else v


def text_action(text: str) -> tuple[str, str, str, str] | None:
    """``(convention, tool name, tool arguments, the reply without the action)`` of one assistant
    reply, or None when it holds no action (see the module docstring); of several ``hermes`` calls,
    the first (:func:`as_tool_calls` takes them all)."""
    if not text:
        return None
    calls, rest = hermes_calls(text)
    if calls:
        return "hermes", calls[0][0], calls[0][1], rest
    fn = xml_function_call(text)
    if fn is not None:
        name, args, m = fn
        return "xml", name, args, (text[: m.start()] + text[m.end() :]).strip()
    acts = list(_CODEACT.finditer(text))
    if acts:
        m = acts[-1]
        name, key = _CODEACT_TOOL[m.group(1)]
        return "codeact", name, json.dumps({key: m.group(2)}), (text[: m.start()] + text[m.end() :]).strip()
    command, thought = bash_block(text)
    if command is not None and command.strip():
        return "bash", "bash", command, thought
    return None


def thought_action(text: str) -> tuple[str, str, str, str] | None:
    """SWE-agent 0.x's action of a reply, as :func:`text_action` returns one, or None: the reply's last
    fenced block, when it ends the reply and is untagged or tagged as a shell (a ```` ```python ````
    block, or one with an explanation after it, is an answer, not a command).  One pass over the
    lines, as SWE-agent's own parser reads them (a fence opens at ```` ``` ```` plus an optional tag and
    closes at a line of only ```` ``` ````)."""
    if not text:
        return None
    last: tuple[int, int, str, str] | None = None  # (start, end offset, tag, body) of the last block
    start = tag = None
    body: list[str] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip()
        if start is None:
            if bare.startswith("```") and "`" not in bare[3:] and " " not in bare[3:].strip():
                start, tag, body = pos, bare[3:].strip(), []
        elif bare == "```":
            last = (start, pos + len(line), tag or "", "".join(body))
            start = None
        else:
            body.append(line)
        pos += len(line)
    if last is None or text[last[1] :].strip() or last[2].lower() not in _SHELL_TAGS:
        return None
    command = last[3].rstrip("\n")
    if not command.strip():
        return None
    first = command.split(None, 1)[0]
    name = first if first in ACI_COMMANDS else "bash"
    return "thought_action", name, command, text[: last[0]].strip()


def _native(m: Any) -> bool:
    # a message of a function-calling log: OpenAI tool calls or replies, Anthropic tool blocks
    if not isinstance(m, dict):
        return False
    if m.get("tool_calls") or m.get("function_call"):
        return True
    if m.get("role") in ("tool", "function") and m.get("tool_call_id"):
        return True  # a reply to a call (one without an id answers a text action: ShareGPT's observation)
    c = m.get("content")
    return isinstance(c, list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in c
    )


def as_tool_calls(msgs: Any, content_text: Callable[[Any, str], str]) -> tuple[Any, str | None]:
    """``msgs`` with text actions as tool calls and the user message after each as its tool reply, and
    the conventions found; ``msgs`` unchanged and None when a message has native tool calls or the run
    does not act like an agent loop (:data:`MIN_ACTIONS`, :data:`MIN_ACTION_SHARE`).
    ``content_text(content, where)`` reads a message's text."""
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs) or any(map(_native, msgs)):
        return msgs, None
    # with no call anywhere, a tool-role turn is the harness answering the text (ShareGPT's observation)
    given, msgs = msgs, [{**m, "role": "user"} if m.get("role") in ("tool", "function") else m for m in msgs]
    texts = {
        i: content_text(m.get("content"), f"messages[{i}].content")
        for i, m in enumerate(msgs)
        if m.get("role") == "assistant" and i + 1 < len(msgs) and msgs[i + 1].get("role") == "user"
    }  # the replies the harness answered
    tests = (
        (text_action, MIN_ACTIONS, MIN_ACTION_SHARE),
        (thought_action, MIN_THOUGHT_ACTIONS, MIN_THOUGHT_ACTION_SHARE),
    )
    for find, least, share in tests:
        acts = {i: act for i, t in texts.items() if (act := find(t)) is not None}
        if len(acts) >= least and len(acts) >= share * len(texts):
            break
    else:
        return given, None
    out: list = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if i not in acts:
            out.append(m)
            i += 1
            continue
        conv, name, args, rest = acts[i]
        calls = hermes_calls(texts[i])[0] if conv == "hermes" else [(name, args)]
        ids = [f"text-action-{i}" + (f"-{k}" if k else "") for k in range(len(calls))]
        out.append({**m, "content": rest, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
            for cid, (n, a) in zip(ids, calls)
        ]})  # fmt: skip
        # the answers: the harness's tool messages that follow, one per call, else the one user message
        j = i + 1
        replies = []
        while j < len(msgs) and len(replies) < len(calls) and given[j].get("role") in ("tool", "function"):
            replies.append(msgs[j].get("content"))
            j += 1
        if not replies:
            replies, j = [msgs[j].get("content")], j + 1  # texts only holds replies a user message answers
        if len(calls) > 1 and len(replies) == 1 and isinstance(replies[0], str):
            parts = _HERMES_REPLY.findall(replies[0])
            replies = parts if len(parts) == len(calls) else replies
        out.extend({"role": "tool", "tool_call_id": cid, "content": r} for cid, r in zip(ids, replies))
        i = j
    return out, ",".join(sorted({a[0] for a in acts.values()}))
