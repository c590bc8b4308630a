"""RepoLaunch ``setup.log``: LangChain-style ReAct text logs of long environment-setup runs.

RepoLaunch (the agent that builds SWE-bench-Live's execution environments) logs each run as
timestamped Python-logging records (``2026-04-20 18:25:53,355 - message``).  A run holds one or
more *conversations*, each opened by ``----------Start setup conversation----------`` (or
``verify``) and closed by the matching ``End`` line.  Inside one, every model call is a record
that starts with LangChain's ``Ai Message`` banner: the model's text (``Thought: …`` and
``Action: <command>…</command>``, or ``<search>``, ``<issue>``, ``<stop>``) followed by
``-- <step_cost> input_tok: N, output_tok: M, cost_usd: C </step_cost>``, the provider's own figures
for that call.  The tool output follows as a ``Human Message`` record, ``Observation:`` and the text.

Mapping (one trajectory per conversation, since each conversation is a separate model context):

* ``traj_id`` ``repolaunch/<language folder>/<instance>/<setup|verify>-<attempt>``; ``task_id`` the
  instance; the conversation boundaries are kept in ``extra`` (``conversation``, ``attempt``,
  ``conversations_in_log``).
* each ``Ai Message`` is a step: ``tool_name`` the action tag (``command``, ``search``, ``issue``,
  ``stop``; None when the text has no action), ``tool_args`` the tag's text, ``output`` the following
  ``Observation`` (None for ``stop``), an error (``output_is_error``) when it ends with a non-zero
  ``exit code: N``; a Human message after a call with no action (the harness's
  format reminder) is the next step's ``user_text``.  ``usage`` holds ``input_tok``,
  ``output_tok`` and ``cost_usd``.
* the prompt RepoLaunch builds is only partly logged: its system prompt and first message (repository
  tree, documents, hints; a later attempt also carries the previous verification) are not, so
  ``unlogged_prompt_tokens`` is the first call's logged input tokens less what the log holds of that
  call's prompt, counted with the model's tokenizer (o200k for GPT-4o/4.1/5 and o-series models).
* RepoLaunch keeps only the last messages of a conversation (``SETUP_CONVERSATION_WINDOW = 40`` and
  ``VERIFY_CONVERSATION_WINDOW = 20`` in ``launch/agent/setup/{setup,verify}.py`` of
  microsoft/SWE-bench-Live): older steps are in ``masked_before`` and ``dropped_before`` (the whole
  message pair is gone, no placeholder).  The setup conversation also re-sends, with every call, the list
  of commands run so far: that text is the step's ``harness_text``.
* ``model_raw`` from ``model_config.model`` of the nearest ``config.json`` above the log;
  ``success``: a conversation pair whose verification logged a verdict takes it (``The setup is
  successful`` / ``Verification failed``); the last pair takes ``completed`` of ``result.json`` beside the
  log when there is one (the run's own outcome); otherwise unknown.
* model calls outside conversations (file relevance, base image choice) are not steps; their count,
  tokens and dollars are kept in ``extra.other_calls``.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from dtoc_rl.core.tokens import estimator_for_model
from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Step, Trajectory, Usage
from dtoc_rl.ingest.base import Ingester, IngestError, read_json, read_text
from dtoc_rl.ingest.common import cap_output, finalize, find_upwards, new_step

__all__ = ["RepoLaunchIngester"]

_RECORD = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3}) - ", re.M)
_AI = re.compile(r"^\s*=+ Ai Message =+\s*\n")
_HUMAN = re.compile(r"^\s*=+ Human Message =+\s*\n")
_COST = re.compile(
    r"\s*-- <step_cost> input_tok: (\d+), output_tok: (\d+), "
    r"cost_usd: ([-+0-9.eE]+|nan|NaN|None) </step_cost>\s*"
)
_CONV = re.compile(r"^-+(Start|End) (\w+) conversation-+")
_ACTIONS = ("command", "search", "issue")
#: Messages kept after the prompt's prefix, per conversation kind (RepoLaunch's defaults, see above).
WINDOWS = {"setup": 40, "verify": 20}


@dataclass
class _Call:
    text: str
    ts: float
    usage: Usage | None
    observation: str | None = None


@dataclass
class _Conversation:
    kind: str
    attempt: int
    calls: list[_Call] = field(default_factory=list)
    verdict: bool | None = None
    notes: list[str] = field(default_factory=list)
    leading_text: str = ""  # a Human message before any call (never seen; kept, not dropped)


def _epoch(date: str, ms: str) -> float:
    dt = datetime.strptime(date, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return dt.timestamp() + int(ms) / 1000


def _records(text: str) -> Iterator[tuple[float, str]]:
    """``(epoch seconds, message)`` per logging record; a message runs to the next record's stamp."""
    marks = list(_RECORD.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        yield _epoch(m.group(1), m.group(2)), text[m.end() : end]


def _split_cost(body: str) -> tuple[str, Usage | None]:
    """The call's usage and its text without it.  The harness appends the tag after the model's text;
    a model sometimes writes look-alike tags of its own (copied from earlier turns), so the last
    one is the harness's."""
    found = list(_COST.finditer(body))
    if not found:
        return body, None
    m = found[-1]
    # Runs whose provider returned no price log ``nan``: the dollars are then not logged; a figure
    # that is no finite price >= 0 ("-", "1e999") is not logged either, and the tokens are kept.
    try:
        cost = float(m.group(3))
    except ValueError:
        cost = None
    if cost is not None and not (math.isfinite(cost) and cost >= 0):
        cost = None
    usage = Usage(input_tokens=int(m.group(1)), output_tokens=int(m.group(2)), cost_usd=cost)
    return body[: m.start()] + ("\n\n" + body[m.end() :] if body[m.end() :].strip() else ""), usage


def _action(text: str) -> tuple[str | None, str]:
    """The action RepoLaunch's parser takes: the first tag of the first kind present, in its order."""
    for tag in _ACTIONS:
        m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.S)
        if m and m.group(1).strip():
            return tag, m.group(1).strip()
    if "<stop>" in text and "</stop>" in text:
        return "stop", ""
    return None, ""


def _conversations(text: str, path: Path) -> tuple[list[_Conversation], dict]:
    convs: list[_Conversation] = []
    other = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    attempts = {"setup": 0, "verify": 0}
    cur: _Conversation | None = None
    for ts, msg in _records(text):
        m = _CONV.match(msg)
        if m:
            kind = m.group(2)
            if m.group(1) == "Start":
                attempts[kind] = attempts.get(kind, 0) + 1
                cur = _Conversation(kind, attempts[kind])
                convs.append(cur)
            else:
                cur = None
            continue
        if cur is None and not convs and _AI.match(msg):
            # a log without conversation banners (another RepoLaunch version): one conversation whose
            # window and re-sent text are unknown
            cur = _Conversation("log", 1)
            convs.append(cur)
        if cur is None:
            _, usage = _split_cost(msg)
            if usage is not None:  # a call outside the agent loop (file relevance, base image)
                other["calls"] += 1
                other["input_tokens"] += usage.input_tokens or 0
                other["output_tokens"] += usage.output_tokens or 0
                other["cost_usd"] += usage.cost_usd or 0.0
            continue
        if _AI.match(msg):
            body, usage = _split_cost(_AI.sub("", msg, count=1))
            cur.calls.append(_Call(body.strip("\n"), ts, usage))
        elif _HUMAN.match(msg):
            body = _HUMAN.sub("", msg, count=1).lstrip("\n").rstrip("\n")
            if cur.calls and cur.calls[-1].observation is None:
                cur.calls[-1].observation = body
            elif cur.calls:  # two Human messages in a row: never seen; keep the text, do not guess
                cur.calls[-1].observation += "\n" + body
            else:
                cur.leading_text += body
        else:
            line = msg.strip()
            if line.startswith("The setup is successful"):
                cur.verdict = True
            elif line.startswith("Verification failed"):
                cur.verdict = False
            if line:
                cur.notes.append(line.split("\n", 1)[0][:300])
    other["cost_usd"] = round(other["cost_usd"], 8)
    if not any(c.calls for c in convs):
        raise IngestError("no model call (no 'Ai Message' record) in this RepoLaunch-style log", path)
    return convs, other


def _run_config(path: Path) -> dict:
    cfg = find_upwards(path, "config.json", levels=3)
    if cfg is None:
        return {}
    try:
        data = read_json(cfg)
    except IngestError:
        return {}
    return data if isinstance(data, dict) else {}


def _result(path: Path) -> tuple[dict | None, str]:
    """``result.json`` beside the log, and why it was not used when it is there but unreadable."""
    res = path.parent / "result.json"
    if not res.is_file():
        return None, ""
    try:
        data = read_json(res)
    except IngestError as e:  # the log itself is fine: keep it, with its label unknown
        return None, f"result.json not used: {e.reason}"
    if not isinstance(data, dict):
        return None, "result.json not used: not a JSON object"
    return data, ""


def _steps(conv: _Conversation) -> list[Step]:
    window = WINDOWS.get(conv.kind)
    steps: list[Step] = []
    pending_user = conv.leading_text
    # message index (after the prompt's prefix) at which each step's assistant message sits
    msg_at: list[int] = []
    n_msgs = 0
    for c in conv.calls:
        tool, args = _action(c.text)
        has_output = tool is not None and tool != "stop" and c.observation is not None
        step = new_step(
            turn=len(steps),
            timestamp=c.ts,
            user_text=pending_user,
            assistant_text=c.text,
            tool_name=tool,
            tool_args=args,
            output=cap_output(_observation_text(c.observation)) if has_output else None,
            output_is_error=has_output and _exit_code(c.observation) not in (None, 0),
            usage=c.usage,
        )
        pending_user = c.observation or "" if not has_output and tool != "stop" else ""
        if window is not None:
            # the messages in the prompt of this call are the n_msgs already logged; keep the last `window`
            dropped = list(range(bisect_left(msg_at, n_msgs - window)))  # msg_at only grows
            step.masked_before = dropped
            step.dropped_before = dropped
        msg_at.append(n_msgs)
        n_msgs += 1 + (c.observation is not None)
        steps.append(step)
    return steps


#: The line RepoLaunch's shell tool ends a command's output with.
_EXIT_CODE = re.compile(r"\nexit code: (-?\d+)\s*$")


def _exit_code(obs: str | None) -> int | None:
    """The exit code an observation ends with, read before the output is capped (its tail is the
    code); None when it names none (a search, an issue, a harness reminder)."""
    m = _EXIT_CODE.search(obs or "")
    return int(m.group(1)) if m else None


def _observation_text(obs: str | None) -> str | None:
    if obs is None:
        return None
    if obs.startswith("Observation:"):
        return obs[len("Observation:") :].removeprefix("\n")
    return obs


def _harness_texts(conv: _Conversation, steps: list[Step], before: list[str]) -> None:
    """RepoLaunch's per-call list of the commands run so far (setup conversations only)."""
    if conv.kind != "setup":
        return
    commands = list(before)
    window = WINDOWS["setup"]
    for s in steps:
        s.harness_text = (
            "\nThe previous commands which you have run to try to set up the repository:```\n"
            f"{commands!r}```\nFollowing are the last {window} messages:\n"
        )
        if s.tool_name == "command":
            commands.append(s.tool_args)


class RepoLaunchIngester(Ingester):
    name = "repolaunch"

    def detect(self, path: Path, head: str) -> bool:
        m = _RECORD.search(head)
        return (
            m is not None
            and m.start() == 0
            and any(mark in head for mark in ("conversation----------", "<step_cost>", "= Ai Message ="))
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        # The harness logged terminal output byte for byte; the model saw it decoded, invalid bytes replaced.
        text = read_text(path, lenient=True)
        convs, other = _conversations(text, path)
        cfg = _run_config(path)
        model = str((cfg.get("model_config") or {}).get("model") or "unknown")
        result, result_note = _result(path)
        instance = path.parent.name
        if result and isinstance(result.get("instance_id"), str):
            instance = result["instance_id"]
        lang = path.parent.parent.parent.name if path.parent.parent.name == "playground" else ""
        est = estimator_for_model(model)
        # pair each setup attempt with the verification that followed it
        last_attempt = max(c.attempt for c in convs)
        verdicts = {c.attempt: c.verdict for c in convs if c.kind == "verify"}
        setup_commands: list[str] = []
        for conv in convs:
            if not conv.calls:
                continue
            steps = _steps(conv)
            _harness_texts(conv, steps, setup_commands)
            if conv.kind == "setup":
                setup_commands += [s.tool_args for s in steps if s.tool_name == "command"]
            success, outcome = verdicts.get(conv.attempt), "setup.log verification verdict"
            if (
                conv.attempt == last_attempt
                and result is not None
                and isinstance(result.get("completed"), bool)
            ):
                success, outcome = result["completed"], "result.json:completed"
            traj = Trajectory(
                traj_id=f"repolaunch/{lang + '/' if lang else ''}{instance}/{conv.kind}-{conv.attempt}",
                source="repolaunch",
                model_raw=model,
                model_family=normalize_family(model),
                task_id=instance,
                success=success,
                outcome_source=outcome if success is not None else "",
                cost_usd=_sum(s.usage.cost_usd if s.usage else None for s in steps),
                tokens_in=_sum(s.usage.input_tokens if s.usage else None for s in steps),
                tokens_out=_sum(s.usage.output_tokens if s.usage else None for s in steps),
                api_calls=len(steps),
                extra=json.dumps(
                    {
                        "conversation": conv.kind,
                        "attempt": conv.attempt,
                        "conversations_in_log": [f"{c.kind}-{c.attempt}" for c in convs],
                        "window_messages": WINDOWS.get(conv.kind),
                        "notes": conv.notes[-5:],
                        "other_calls": other,
                        "run_cost_usd": (result or {}).get("cost"),
                        "exception": (result or {}).get("exception"),
                        "result_note": result_note,
                        "unlogged_prompt_estimator": repr(est),
                    }
                ),
                steps=steps,
            )
            yield finalize(traj)  # which also measures the unlogged prompt from the first call


def _sum(values) -> float | int | None:
    """The total when every call logged the figure, else None (a partial sum would pass for a bill)."""
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    total = sum(vals)
    return round(total, 8) if isinstance(total, float) else total
