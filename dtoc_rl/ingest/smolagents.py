"""smolagents runs: an agent's memory steps, as its own scripts and users save them.

Format (huggingface/smolagents ``src/smolagents/memory.py``): ``agent.memory.steps`` holds a
``TaskStep`` (``task``), then an ``ActionStep`` per model call (``step_number``, ``timing``,
``model_input_messages``, ``tool_calls``, ``error``, ``model_output_message``, ``model_output``,
``observations``, ``action_output``, ``token_usage`` with ``input_tokens`` / ``output_tokens``,
``is_final_answer``) and, with planning on, a ``PlanningStep`` (``plan``, ``token_usage``) every few
steps.  They are saved three ways, all read here:

* as dicts (``agent.memory.get_full_steps()`` or ``get_succinct_steps()``, each step's ``dict()``):
  a ``.json`` file holding the list, or a run object holding it under ``intermediate_steps`` or
  ``steps``;
* as the text of each step (``[str(step) for step in agent.memory.steps]``, what smolagents'
  ``examples/open_deep_research/run_gaia.py`` writes under ``intermediate_steps``, a run per line of a
  ``.jsonl`` file).  That text is Python's repr of the dataclasses; it is parsed, never evaluated:
  calls become objects of their fields, and reprs that are not Python (an enum's
  ``<MessageRole.USER: 'user'>``, ``<class 'str'>``, ``<... object at 0x...>``) become their value
  or nothing; a text of more than 400,000 tokens outside its strings is refused, not parsed;
* as the messages the memory makes for the model (``[m.dict() for m in
  agent.write_memory_to_messages()]``, what smolagents' ``examples/smolagents_benchmark/run.py``
  writes under ``intermediate_steps``, beside the run's ``token_counts``; read off its committed
  GPT-4o GAIA outputs of July 2025): ``{"role", "content", "tool_calls", "raw", "token_usage"}``
  with smolagents' own roles: ``system``, ``user`` (the task as ``"New task:\n..."``, a plan's
  follow-up), ``assistant`` (a step's model output), ``tool-call`` (``"Calling tools:\n"`` and the
  repr of the step's calls, read as above) and ``tool-response`` (``"Observation:\n..."``, or the
  step's ``"Error:\n..."``, with its plea to retry: both as the model read them).  Such a file keeps
  no per-call usage or time: only the run's totals, its ``tokens_in`` / ``tokens_out``.

Mapping (through :func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`): the task is the first
``TaskStep`` (else the run's ``augmented_question``, ``question`` or ``task``); each ``ActionStep`` is
one model call whose tool calls are steps (a ``CodeAgent`` calls ``python_interpreter`` with its
code; its tools run inside that code), and its ``observations``, then its error's message, are the
reply to its first call (smolagents keeps one observation for a step's calls; the others' replies
are empty); a call whose tool raised, which smolagents keeps only in ``model_output_message``, is
read from there, its error its output.  A step whose output could not be parsed into a call (no call
anywhere, an error) is a call without a tool, its error the next step's user text, as the agent sends
it; the answer smolagents asks for once ``max_steps`` run out (``action_output`` of a step with no
output of its own) is that call's text.  A ``PlanningStep``
is a call without a tool (smolagents plans from the same memory, the observations kept).  A step's
usage is its raw provider response's (``model_output_message.raw``,
with the cached share when the provider wrote one), else its ``token_usage``; its time is
``timing.start_time`` (older versions: ``start_time``).  The system prompt is the first call's
``model_input_messages`` system message when kept (``get_full_steps``; a plan's own prompt is a
planning request, not the agent's context); else it is unlogged, and the
first call's input tokens count it.  The model is the run's ``agent_name`` or ``model_id``, else the
raw response's ``model``.  Labels as for chat logs (:func:`~dtoc_rl.ingest.openai_chat.row_label`):
GAIA's answer files keep ``prediction`` and ``true_answer`` but no verdict, so their ``success`` is
None.  A run's ``task_id`` is its ``task_id``, else a hash of its question, so that one question
answered in several files is one task.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, one_json_value, read_json
from dtoc_rl.ingest.common import count, finalize, text_task_id
from dtoc_rl.ingest.openai_chat import chat_to_steps, check_ids, iter_jsonl, parse_rows, row_label

__all__ = ["SmolagentsIngester", "parse_step_repr"]

_STEP_NAMES = "ActionStep|TaskStep|PlanningStep|SystemPromptStep|FinalAnswerStep"
_HEAD_REPR = re.compile(rf'"(?:{_STEP_NAMES})\(')
_HEAD_STEPS = re.compile(r'"(?:intermediate_steps|steps)"\s*:\s*\[')
# an ActionStep's dict() opens so; a list of steps opens with the TaskStep's
_HEAD_DICT = re.compile(r'"step_number"\s*:\s*\d+\s*,\s*"timing"\s*:')
_HEAD_TASK = re.compile(r'\s*(?:\[|\{[^\[]*?"(?:intermediate_steps|steps)"\s*:\s*\[)\s*\{\s*"task"\s*:\s*"')
_UNCLOSED = re.compile(r'(?:[^"\\]|\\.)*\\?', re.DOTALL)  # a JSON string's text, never closed
_BARE_TEXT = re.compile(rf'\s*\[\s*"(?:{_STEP_NAMES})\(')
# an enum member's repr, which is not Python: its value is kept
_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*: ('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|-?\d+)>")
_HEAD_MEMORY = re.compile(r'"(?:intermediate_steps|steps)"\s*:\s*\[\s*\{\s*"role"\s*:')
_MEMORY_ROLE = re.compile(r'"role"\s*:\s*"tool-(?:call|response)"')  # smolagents' own MessageRole values
_CALLING = "Calling tools:\n"
_NEW_TASK = "New task:\n"
_RUN_KEYS = ("intermediate_steps", "steps")
_TASK_KEYS = ("augmented_question", "question", "task")
# what smolagents sends after a plan (memory.py PlanningStep.to_messages)
_AFTER_PLAN = "Now proceed and carry out this plan."


class SmolagentsIngester(Ingester):
    name = "smolagents"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix not in (".json", ".jsonl") or head.lstrip()[:1] not in ("{", "["):
            return False
        if _BARE_TEXT.match(head):  # a bare list of the steps' text
            return path.suffix == ".json"
        if _HEAD_REPR.search(head):  # runs holding their steps' text
            return _HEAD_STEPS.search(head) is not None
        if _HEAD_MEMORY.search(head) and _MEMORY_ROLE.search(head):  # the memory as the model's messages
            return True
        # steps saved as dicts: an action step's opening, or the task step's (a long task may hide the
        # rest beyond the head read)
        opened = _HEAD_TASK.match(head)
        # a long task: the head read ends inside its text, before any other field
        task = opened is not None and (
            '"task_images"' in head or _UNCLOSED.fullmatch(head, opened.end()) is not None
        )
        if _HEAD_DICT.search(head) is None and not task:
            return False
        # JSONL: a run per line, unless the file is one value written over several lines (one_json_value)
        return path.suffix == ".json" or _HEAD_STEPS.search(head) is not None or one_json_value(path)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        if path.suffix == ".jsonl" and not one_json_value(path):
            yield from parse_rows(path, iter_jsonl(path), lambda row, n: self.run(path, row, n))
            return
        data = read_json(path)
        if isinstance(data, list) and data and all(isinstance(r, dict) and _holds_steps(r) for r in data):
            rows = [(i, r, None) for i, r in enumerate(data, 1)]  # a list of runs
            yield from parse_rows(path, rows, lambda row, n: self.run(path, row, n), unit="run")
            return
        yield from parse_rows(path, [(1, data, None)], lambda row, n: self.run(path, row, n), unit="file")

    def run(self, path: Path, row: Any, number: int) -> Trajectory:
        """One saved run (row ``number`` of ``path``): a run object, or a bare list of steps."""
        if isinstance(row, list):
            row = {"steps": row}
        if not isinstance(row, dict):
            raise IngestError(f"row is {type(row).__name__}, expected a run object or a list of steps")
        key = next((k for k in _RUN_KEYS if isinstance(row.get(k), list)), None)
        if key is None:
            raise IngestError("no list of steps under 'intermediate_steps' or 'steps'")
        task = next((row[k] for k in _TASK_KEYS if isinstance(row.get(k), str) and row[k]), "")
        if _is_memory_messages(row[key]):
            messages, model = _memory_messages(row[key], key), ""
        else:
            steps = [_step(s, f"{key}[{i}]") for i, s in enumerate(row[key])]
            messages, model = _messages(steps, task)
        cp = chat_to_steps(messages, key)
        if not cp.steps:
            raise IngestError("empty trajectory: no model call among the steps")
        check_ids(row)
        model = next((row[k] for k in ("agent_name", "model_id") if isinstance(row.get(k), str)), model)
        question = cp.task or task
        task_id = row.get("task_id")
        if task_id is None:  # one question answered in several files is one task
            asked = question.removeprefix(_NEW_TASK)  # how the memory's messages open it
            task_id = text_task_id(asked, "q-", fold_space=False) if asked else None
        rid = row.get("id", task_id)
        success, source = row_label(row)
        extra = {
            k: v for k, v in row.items() if k not in _RUN_KEYS and isinstance(v, (str, int, float, bool))
        }
        extra = {
            k: v if not isinstance(v, str) or len(v) <= 4000 else f"<{len(v)} chars>"
            for k, v in extra.items()
        }
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        if cp.steps[0].tool_name is None:  # a plan first: its prompt is a planning request of its own
            acting = next((i for i, st in enumerate(cp.steps) if st.tool_name is not None and st.usage), None)
            if acting is not None:
                extra["prompt_counted_from"] = acting
        traj = Trajectory(
            traj_id=f"{self.name}/{path.stem}/{rid if rid is not None else number}",
            source=self.name,
            model_raw=model,
            model_family=normalize_family(model),
            task_id=str(task_id) if task_id is not None else f"{path.stem}:{number}",
            task_text=question,
            system_prompt=cp.system,
            success=success,
            outcome_source=source,
            tokens_in=_total(row, "input_tokens", "input"),
            tokens_out=_total(row, "output_tokens", "output"),
            source_path=str(path),
            extra=json.dumps(extra),
            steps=cp.steps,
        )
        return finalize(traj)


def _total(row: dict, *keys: str) -> int | None:
    """A run total from ``token_counts`` (``agent.monitor.get_total_token_counts()``: ``input_tokens``
    / ``output_tokens``; older versions ``input`` / ``output``), None where the run has none; a run
    that made no call (its model failed at once) records zeros."""
    counts = row.get("token_counts")
    if not isinstance(counts, dict):
        return None
    return count(counts, *keys) or None


def _holds_steps(row: dict) -> bool:
    return any(isinstance(row.get(k), list) for k in _RUN_KEYS)


# ---------------------------------------------------------------- a step's repr, parsed


def parse_step_repr(text: str) -> dict:
    """A smolagents step's ``str()`` as nested dicts: a call ``Name(a=1)`` becomes ``{"__type__":
    "Name", "a": 1}`` (positional arguments under ``__args__``); nothing is evaluated.  Reprs that
    are not Python (``<class 'str'>``, ``<built-in function len>``, an enum member's ``<Role.USER:
    'user'>``) become nothing, or the member's value.  An :class:`IngestError` says why text is not
    one, or is too large to parse (Python's parser takes some 500 bytes a token)."""
    value = _repr_value(text)
    if not isinstance(value, dict) or "__type__" not in value:
        raise IngestError("not a step's text: expected a call such as ActionStep(...)")
    return value


def _repr_value(text: str) -> Any:
    """A Python repr read as data, as :func:`parse_step_repr` describes."""
    text = text.strip()
    if len(text) > _MAX_TOKENS // 2 and (n := _tokens(text)) > _MAX_TOKENS:
        raise IngestError(f"a step's text of {n:,} tokens outside its strings: too many to parse")
    try:
        tree = _parse(text)
    except SyntaxError:
        try:
            tree = _parse(_without_foreign_reprs(text))
        except SyntaxError as e:
            raise IngestError(f"not a step's text (Python syntax error at column {e.offset})") from None
    try:
        return _value(tree.body)
    except RecursionError:
        raise IngestError("a step's text nested too deeply to read") from None


#: Tokens outside string literals a step's text may hold (a long list of numbers in
#: ``action_output``, say): some 200 MB of syntax tree at the most.
_MAX_TOKENS = 400_000


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except (MemoryError, RecursionError):
        raise IngestError("a step's text too large or nested too deeply to parse") from None
    except ValueError as e:  # a NUL character
        raise IngestError(f"not a step's text ({e})") from None


def _tokens(text: str) -> int:
    """How many Python tokens ``text`` holds (a string literal is one), without building a tree."""
    n = 0
    try:
        for _ in tokenize.generate_tokens(io.StringIO(text).readline):
            n += 1
    except (tokenize.TokenError, SyntaxError):
        pass  # the parser says what is wrong
    return n


def _without_foreign_reprs(text: str) -> str:
    """``text`` with every ``<...>`` outside its string literals (a repr that is not Python) replaced
    by ``None``, or an enum member's by its value."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out, done, depth, opened = [], 0, 0, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.OP or tok.string not in "<>":
                continue
            at = starts[tok.start[0] - 1] + tok.start[1]
            if tok.string == "<":
                if depth == 0:
                    opened = at
                depth += 1
            elif depth:
                depth -= 1
                if depth == 0:
                    span = text[opened : at + 1]
                    member = _ENUM_REPR.fullmatch(span)
                    out += [text[done:opened], member.group(1) if member else "None"]
                    done = at + 1
    except (tokenize.TokenError, SyntaxError):
        pass  # the parser says what is wrong
    return "".join(out) + text[done:]


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value if not isinstance(node.value, bytes) else node.value.decode("latin-1")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            key = _value(k) if k is not None else "**"
            out[key if isinstance(key, (str, int, float, bool)) or key is None else str(key)] = _value(v)
        return out
    if isinstance(node, ast.Call):
        out: dict[str, Any] = {"__type__": _dotted(node.func)}
        if node.args:
            out["__args__"] = [_value(a) for a in node.args]
        out.update((kw.arg, _value(kw.value)) for kw in node.keywords if kw.arg)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _value(node.operand)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _dotted(node)  # a name no literal spells (inf, nan, an enum member's dotted name)
    return None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


# ---------------------------------------------------------------- steps as chat messages


def _step(raw: Any, where: str) -> dict:
    """One saved step as ``{"kind": ..., fields}``, whichever way it was saved."""
    if isinstance(raw, str):
        try:
            step = parse_step_repr(raw)
        except IngestError as e:
            raise IngestError(f"{where}: {e.reason}") from None
        kind = step.pop("__type__").rsplit(".", 1)[-1]
    elif isinstance(raw, dict):
        step = dict(raw)
        if "plan" in step:
            kind = "PlanningStep"
        elif "system_prompt" in step:
            kind = "SystemPromptStep"
        elif "task" in step and "step_number" not in step:
            kind = "TaskStep"
        elif "step_number" in step or "observations" in step or "model_output" in step:
            kind = "ActionStep"
        elif "output" in step:
            kind = "FinalAnswerStep"
        else:
            raise IngestError(f"{where} is not a smolagents step: fields {', '.join(sorted(step)[:6])}")
    else:
        raise IngestError(f"{where} is {type(raw).__name__}, expected a step (object or its text)")
    step["kind"] = kind
    step["where"] = where
    return step


def _text(v: Any) -> str:
    """A message content, observation or error as text."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else _text(p) for p in v)
    if isinstance(v, dict):
        if v.get("__type__") and v.get("__args__"):  # an exception's repr: its message
            return _text(v["__args__"][0])
        for k in ("message", "content", "text"):
            if k in v:
                return _text(v[k])
    return str(v)


def _calls(step: dict) -> list[dict]:
    """A step's tool calls in the chat-completions shape (dict ``{"id", "function"}`` or repr
    ``ToolCall(name, arguments, id)``).  A call whose tool raised is kept only in the model's message
    (``model_output_message.tool_calls``): it is read from there."""
    out = []
    made = step.get("model_output_message")
    asked = made.get("tool_calls") if isinstance(made, dict) else None
    for c in step.get("tool_calls") or asked or []:
        if not isinstance(c, dict):
            raise IngestError(f"{step['where']}.tool_calls holds {type(c).__name__}, expected a call")
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise IngestError(f"{step['where']}: a tool call without a name")
        args = fn.get("arguments")
        out.append(
            {"id": c.get("id"), "function": {"name": name, "arguments": args if args is not None else {}}}
        )
    return out


def _usage(step: dict) -> tuple[dict | None, str]:
    """The usage the step's call reported (the raw response's first: it has the cached share) and the
    model that answered, when the raw response names it."""
    out = step.get("model_output_message")
    raw = out.get("raw") if isinstance(out, dict) else None
    raw = raw if isinstance(raw, dict) else {}
    model = raw.get("model") if isinstance(raw.get("model"), str) else ""
    if isinstance(raw.get("usage"), dict):
        return raw["usage"], model
    usage = step.get("token_usage")
    if isinstance(usage, dict):
        return usage, model
    if isinstance(out, dict) and isinstance(out.get("token_usage"), dict):
        return out["token_usage"], model
    return None, model


def _start(step: dict) -> float | None:
    timing = step.get("timing")
    t = timing.get("start_time") if isinstance(timing, dict) else step.get("start_time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _system(step: dict) -> str:
    msgs = step.get("model_input_messages")
    if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) and msgs[0].get("role") == "system":
        return _text(msgs[0].get("content"))
    return ""


def _assistant(text: str, calls: list[dict], usage: dict | None, step: dict) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": calls}
    if usage is not None:
        msg["usage"] = usage
    if (start := _start(step)) is not None:
        msg["timestamp"] = start
    return msg


def _messages(steps: list[dict], task: str) -> tuple[list[dict], str]:
    """The chat an agent's steps sent, as chat-completions messages, and the model named in them."""
    msgs: list[dict] = []
    model = ""
    tasks = [s for s in steps if s["kind"] == "TaskStep"]
    system = next((_text(s.get("system_prompt")) for s in steps if s["kind"] == "SystemPromptStep"), "")
    # an action step's prompt opens with it; a plan's prompt is a planning request of its own
    system = system or next((_system(s) for s in steps if s["kind"] == "ActionStep" and _system(s)), "")
    if system:
        msgs.append({"role": "system", "content": system})
    if not tasks and task:
        msgs.append({"role": "user", "content": task})
    for s in steps:
        kind = s["kind"]
        if kind == "TaskStep":
            msgs.append({"role": "user", "content": _text(s.get("task"))})
            continue
        if kind not in ("ActionStep", "PlanningStep"):
            continue  # the system prompt (above) and the final answer (no call of its own)
        usage, named = _usage(s)
        model = model or named
        text = _text(s.get("plan")) if kind == "PlanningStep" else _text(s.get("model_output"))
        calls = _calls(s) if kind == "ActionStep" else []
        if kind == "ActionStep" and not text and not calls and s.get("action_output") is not None:
            # the answer smolagents asks for once the steps run out: the call's own text, after which
            # the error that made it (max steps reached) is sent to no model
            msgs.append(_assistant(_text(s["action_output"]), [], usage, s))
            continue
        msgs.append(_assistant(text, calls, usage, s))
        if kind == "PlanningStep":
            msgs.append({"role": "user", "content": _AFTER_PLAN})
            continue
        error = _text(s.get("error"))
        reply = _text(s.get("observations"))
        if error:
            reply = "\n".join(p for p in (reply, f"Error:\n{error}") if p)  # its plea to retry not counted
        if not calls:
            if reply:
                msgs.append({"role": "user", "content": reply})
            continue
        for k, c in enumerate(calls):
            msgs.append(
                {"role": "tool", "tool_call_id": c["id"], "content": reply if k == 0 else "",
                 "is_error": bool(error) and k == 0}
            )  # fmt: skip
    return msgs, model


# ---------------------------------------------------------------- the memory as the model's messages


def _is_memory_messages(items: list) -> bool:
    return bool(items) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in items)


def _memory_messages(items: list[dict], where: str) -> list[dict]:
    """The chat-completions messages of a run saved as ``agent.write_memory_to_messages()`` (each
    ``ChatMessage.dict()``), see the module docstring.  An action step is an ``assistant`` message
    (the model's output), a ``tool-call`` one (``"Calling tools:\\n"`` and the repr of its calls) and
    ``tool-response`` ones (``"Observation:\\n..."``, an error's ``"Error:\\n..."``): the responses
    answer the step's first call, as smolagents keeps one observation for them all."""
    msgs: list[dict] = []
    answered: dict | None = None  # the reply to the latest step's calls, once one came
    for i, m in enumerate(items):
        role, text = m["role"], _text(m.get("content"))
        if role == "system":
            msgs.append({"role": "system", "content": text})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
            if isinstance(m.get("token_usage"), dict):
                msg["usage"] = m["token_usage"]
            msgs.append(msg)
            answered = None
        elif role == "tool-call":
            calls = _memory_calls(text, f"{where}[{i}]")
            if not msgs or msgs[-1]["role"] != "assistant" or msgs[-1]["tool_calls"]:
                msgs.append({"role": "assistant", "content": "", "tool_calls": []})  # no output kept
            msgs[-1]["tool_calls"] = calls
            answered = None
        elif role == "tool-response" and (answered is not None or _calling(msgs)):
            error = text.startswith(("Error:", "Call id:"))
            if answered is None:
                calls = msgs[-1]["tool_calls"]
                answered = {"role": "tool", "tool_call_id": calls[0]["id"], "content": text}
                answered["is_error"] = error
                msgs.append(answered)
                msgs += [{"role": "tool", "tool_call_id": c["id"], "content": ""} for c in calls[1:]]
            else:  # an observation, then the error the step ended with
                answered["content"] = f"{answered['content']}\n{text}"
                answered["is_error"] = answered["is_error"] or error
        elif not text:  # the images of an observation: no text of the prompt
            continue
        else:  # the task, a plan's follow-up, an error with no call to answer (the next call's prompt)
            if msgs and msgs[-1]["role"] == "user":
                msgs[-1]["content"] += f"\n{text}"
            else:
                msgs.append({"role": "user", "content": text})
    return msgs


def _calling(msgs: list[dict]) -> bool:
    return bool(msgs) and msgs[-1]["role"] == "assistant" and bool(msgs[-1]["tool_calls"])


def _memory_calls(text: str, where: str) -> list[dict]:
    """The calls of a ``tool-call`` message: ``"Calling tools:\\n"`` then the repr of a list of
    ``{"id", "type", "function": {"name", "arguments"}}``, read, never evaluated."""
    if not text.startswith(_CALLING):
        raise IngestError(f"{where}: a tool-call message that does not start 'Calling tools:'")
    try:
        value = _repr_value(text[len(_CALLING) :])
    except IngestError as e:
        raise IngestError(f"{where}: its calls are unreadable ({e.reason})") from None
    if not isinstance(value, list):
        raise IngestError(f"{where}: its calls are {type(value).__name__}, expected a list")
    return _calls({"tool_calls": value, "where": where})
