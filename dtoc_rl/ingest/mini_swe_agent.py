"""mini-swe-agent ``.traj.json`` (``trajectory_format: "mini-swe-agent-1"`` or ``"-1.1"``).

Format (``minisweagent/run/utils/save.py``): in 1.x, ``messages`` alternates assistant
turns holding exactly one ```` ```bash ```` block with user messages holding
``<returncode>…</returncode><output>…</output>``.  2.x keeps that as its text-based
mode (the block fenced ```` ```mswea_bash_command ````) and by default calls a ``bash``
tool: assistant messages carry OpenAI ``tool_calls`` (``content`` may be null), each
answered by a ``role: "tool"`` message with its ``tool_call_id``, and the run ends with a
``role: "exit"`` message holding the submission; its Responses-API model saves each whole response
(``object: "response"``, ``function_call`` output items) and the replies as ``function_call_output``
items.  The first user message is the task;
``info.model_stats`` has cost and call count, each assistant message's
``extra.response.usage`` the provider's tokens (and, in 2.x, ``extra.timestamp`` the call's
time and ``extra.cost`` its dollars, which ``instance_cost`` sums).  A submitted 2.x run's last
call, the submit command, has no reply: the ``exit`` message after it holds the submission, which
the model never reads.  Labels come from the nearest ``selected_labels.jsonl`` (``resolved``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Step, Trajectory, Usage
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cap_output, finalize, load_selected_labels, message_usage, new_step, number
from dtoc_rl.ingest.openai_chat import iso_to_epoch
from dtoc_rl.ingest.responses import responses_to_messages
from dtoc_rl.ingest.text_actions import bash_block  # its action regex: a ```python block is no action


def _when(msg: dict) -> float | None:
    # 2.x stamps each message it keeps (extra.timestamp, epoch seconds): the call's time
    extra = msg.get("extra") if isinstance(msg.get("extra"), dict) else {}
    return iso_to_epoch(extra.get("timestamp"))


def _usage(msg: dict) -> Usage | None:
    """The call's provider usage, with the dollars mini-swe-agent itself charged it (``extra.cost``,
    what its ``model_stats.instance_cost`` sums) as the call's cost."""
    usage = message_usage(msg)
    cost = number(msg["extra"], "cost") if isinstance(msg.get("extra"), dict) else None
    # 0.0 is what it charges a model its cost tracking cannot price (``cost_tracking: ignore_errors``):
    # a bill not known, not a free call
    if cost:
        usage = usage or Usage()
        usage.cost_usd = float(cost)
    return usage


def _content(msg: dict, i: int) -> str:
    c = msg.get("content")
    if c is None:  # an assistant message of tool calls only
        return ""
    if isinstance(c, list):  # content blocks
        return "".join(b.get("text", "") for b in c if isinstance(b, dict))
    if not isinstance(c, str):
        raise IngestError(f"messages[{i}].content is {type(c).__name__}, expected string or list")
    return c


def _tool_call(call: object, i: int, k: int, path: Path) -> tuple[str, str, str | None]:
    """``(tool name, arguments, call id)`` of one 2.x tool call; a ``bash`` call's arguments are its
    command line, as 1.x's action is (what the shell labeller reads)."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise IngestError(f"messages[{i}].tool_calls[{k}] has no function name", path)
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            parsed = None
    else:
        parsed, args = args, json.dumps(args)
    if isinstance(parsed, dict) and isinstance(parsed.get("command"), str):
        args = parsed["command"]
    call_id = call.get("id")
    return fn["name"], args or "", call_id if isinstance(call_id, str) else None


def _from_response(resp: dict, where: str) -> dict:
    """A saved Responses-API response as the chat message its output items make (the one reader of
    Responses items, :func:`~dtoc_rl.ingest.responses.responses_to_messages`), with its ``usage``."""
    msgs = responses_to_messages(resp.get("output") or [], f"{where}.output").messages
    msg = next((m for m in msgs if m.get("role") == "assistant"), {"role": "assistant", "content": ""})
    return {**msg, "content": msg.get("content") or "", "usage": resp.get("usage")}


class MiniSweAgentIngester(Ingester):
    name = "mini-swe-agent"

    def detect(self, path: Path, head: str) -> bool:
        if not head.lstrip().startswith("{"):
            return False
        return re.search(r'"trajectory_format"\s*:\s*"mini-swe-agent', head) is not None or (
            path.name.endswith(".traj.json") and '"messages"' in head
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise IngestError("expected an object with a 'messages' list (mini-swe-agent .traj.json)", path)
        msgs = data["messages"]
        info = data.get("info") or {}
        instance_id = data.get("instance_id") or path.name.removesuffix(".traj.json")
        if not isinstance(info, dict):
            raise IngestError(f"'info' is {type(info).__name__}, expected object", path)
        model_raw = (((info.get("config") or {}).get("model") or {}).get("model_name")) or ""
        if not isinstance(model_raw, str):
            raise IngestError(
                f"info.config.model.model_name is {type(model_raw).__name__}, expected string", path
            )
        system = ""
        task = ""
        steps = []
        pending_user = ""
        turn = 0
        awaiting: list[Step] = []  # the tool calls made so far, pruned of those answered at each reply
        for i, msg in enumerate(msgs):
            if not isinstance(msg, dict):
                raise IngestError(f"messages[{i}] is {type(msg).__name__}, expected object", path)
            if msg.get("object") == "response":  # 2.x's Responses-API model: the whole response is saved
                msg = _from_response(msg, f"messages[{i}]")
            elif msg.get("type") == "function_call_output":  # ...and its tool replies as input items
                msg = {"role": "tool", "tool_call_id": msg.get("call_id"), "content": msg.get("output")}
            role = msg.get("role")
            text = _content(msg, i)
            if role == "system":
                system = text
            elif role == "user":
                if not task and not steps:
                    task = text
                elif steps and steps[-1].tool_name and steps[-1].output is None:
                    steps[-1].output = cap_output(text)
                else:
                    pending_user += text
            elif role == "tool":  # 2.x: the answer to one tool call, by its id
                call_id = msg.get("tool_call_id")
                open_ = awaiting = [s for s in awaiting if s.output is None]
                match = next((s for s in open_ if call_id and s.tool_call_id == call_id), None)
                if match is None and not call_id and open_:
                    match = open_[0]
                if match is None:
                    raise IngestError(
                        f"messages[{i}]: tool reply (tool_call_id={call_id!r}) answers no tool call", path
                    )
                match.output = cap_output(text)
            elif role == "assistant" and msg.get("tool_calls"):
                when = _when(msg)
                calls = msg["tool_calls"]
                if not isinstance(calls, list):
                    raise IngestError(
                        f"messages[{i}].tool_calls is {type(calls).__name__}, expected list", path
                    )
                for k, call in enumerate(calls):
                    name, args, call_id = _tool_call(call, i, k, path)
                    steps.append(
                        step := new_step(
                            turn=turn,
                            user_text=pending_user if k == 0 else "",
                            assistant_text=text if k == 0 else "",
                            tool_name=name,
                            tool_args=args,
                            tool_call_id=call_id,
                            usage=_usage(msg) if k == 0 else None,
                            timestamp=when,
                        )
                    )
                    awaiting.append(step)
                pending_user = ""
                turn += 1
            elif role == "assistant":
                # no action (zero or several bash blocks): the harness answers with its format error
                # and keeps the whole reply in every later prompt, code blocks included
                cmd, thought = bash_block(text)
                steps.append(
                    new_step(
                        turn=turn,
                        user_text=pending_user,
                        assistant_text=thought,
                        tool_name="bash" if cmd is not None else None,
                        tool_args=cmd or "",
                        usage=_usage(msg),
                        timestamp=_when(msg),
                    )
                )
                if cmd is not None:
                    awaiting.append(steps[-1])
                pending_user = ""
                turn += 1
        if not steps:
            raise IngestError("empty trajectory: no assistant turns", path)
        label = next((r for r in load_selected_labels(path) if r.get("instance_id") == instance_id), None)
        stats = info.get("model_stats") or {}
        traj = Trajectory(
            traj_id=f"{self.name}/{instance_id}",
            source=self.name,
            model_raw=model_raw,
            model_family=normalize_family(model_raw),
            task_id=instance_id,
            task_text=task,
            system_prompt=system,
            success=None if label is None else bool(label.get("resolved")),
            outcome_source="selected_labels.jsonl:resolved" if label is not None else "",
            cost_usd=stats.get("instance_cost"),
            api_calls=stats.get("api_calls"),
            source_path=str(path),
            extra=json.dumps(
                {"exit_status": info.get("exit_status"), "mini_version": info.get("mini_version")}
            ),
            steps=steps,
        )
        yield finalize(traj)
