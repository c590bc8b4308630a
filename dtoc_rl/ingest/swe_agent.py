"""SWE-agent ``.traj`` files, both 0.x (ACI text commands) and 1.x (function calls).

Format 0.x (``sweagent`` ≤ 0.7; MANIFEST §2–3)::

    {"environment", "trajectory": [{"action", "observation", "response", "thought", "state"}…],
     "history": [{"role", "content", "agent", "is_demo"?, "thought"?, "action"?}…],
     "info": {"exit_status", "submission", "model_stats": {"instance_cost", "tokens_sent",
              "tokens_received", "api_calls"}}}

``action`` is an ACI command (``open``, ``edit 1:3\\n…\\nend_of_edit``, ``search_dir`` …) or a
plain shell line; ``state`` is the shell state *before* the action (open file, cwd).  Entries
``exit_cost``/``exit_context``/… are harness auto-exits, not model actions.  ``history`` is the
raw chat; 0.x applied its history processors at query time and did not store the result, so the
log cannot tell which outputs the model saw: ``masked_before`` stays None.

Format 1.x (MANIFEST §4)::

    {"trajectory": [{"action", "observation", "response", "thought", "execution_time", "state",
                     "messages" (1.0.x) | "query" (1.1+), "extra_info"}…],
     "history": [{"role", "content", "message_type", "agent", "thought"?, "action"?,
                  "tool_calls"?, "tool_call_ids"?}…],
     "info": {"swe_agent_version", "exit_status", "model_stats"…}, "replay_config", "environment"}

Tool calls come either as provider ``tool_calls`` (``function_calling`` parser, e.g. Claude) or
as ``<function=NAME><parameter=K>V</parameter></function>`` text (``xml_function_calling``,
e.g. SWE-agent-LM-32B), parsed here the way SWE-agent's ``XMLFunctionCallingParser`` does.

Masking (1.x).  The per-step model context is logged, but its meaning differs by version:

* 1.1+ ``query`` of entry *i* is the input that produced entry *i*'s action;
* 1.0.x ``messages`` of entry *i* is the processed history *after* entry *i* (it already holds
  entry *i*'s own response and observation), i.e. the input of entry *i+1*.

In that context, ``LastNObservations`` replaces older observations by ``Old environment
output: (N lines omitted)``.  Assistant ``action`` messages are matched, in order, to the
trajectory entries that reached the history (format-error re-queries never do), checked by
action text and ``tool_call_ids``; the observation after action *k* is step *k*'s output.
Any inconsistency leaves that step's ``masked_before`` at None rather than guessing.

Labels: the nearest ``selected_labels.jsonl``, joined on its ``traj`` path (instance ids repeat
across submissions), then on (submission, instance_id), then on a unique instance_id.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import (
    cap_output,
    finalize,
    find_upwards,
    load_selected_labels,
    new_step,
    set_masking,
)
from dtoc_rl.ingest.text_actions import xml_function_call  # SWE-agent 1.x's XMLFunctionCallingParser
from dtoc_rl.labels.vocabulary import ACI_COMMANDS  # SWE-agent 0.x commands; anything else ran in bash

__all__ = ["SweAgentIngester"]

_HARNESS_EXIT = re.compile(r"exit_[a-z_]+")  # exit_cost, exit_context, exit_format, exit_api, …
_ISSUE_0X = re.compile(r"ISSUE:\n(.*?)\n\s*INSTRUCTIONS:", re.DOTALL)
_ISSUE_1X = re.compile(r"<pr_description>\n?(.*?)\n?</pr_description>", re.DOTALL)
_MASKED_PREFIX = "Old environment output"
_CLIPPED = re.compile(r"<response clipped><NOTE>.*?(\d+) characters were elided", re.DOTALL)
_EDITOR_WRITES = frozenset({"create", "str_replace", "insert", "undo_edit"})


# --------------------------------------------------------------------------- small helpers


def _text(content: Any) -> str:
    """Message content as text (plain string or a list of content blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    raise IngestError(f"message content has type {type(content).__name__}, expected string or list")


def _starts_with(content: Any, prefix: str) -> bool:
    """``_text(content).startswith(prefix)`` without joining long block lists."""
    if isinstance(content, str):
        return content.startswith(prefix)
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type", "text") == "text":
                return str(b.get("text", "")).startswith(prefix)
    return False


def _as_dict(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            out = json.loads(value)
        except json.JSONDecodeError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


@lru_cache(maxsize=32)
def _read_yaml(path: str, mtime: float) -> dict:
    try:
        import yaml  # PyYAML: present with transformers; only used for run metadata
    except ImportError:  # pragma: no cover - depends on the environment
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _yaml_near(path: Path, name: str, levels: int) -> dict:
    found = find_upwards(path, name, levels)
    return _read_yaml(str(found), found.stat().st_mtime) if found else {}


def _run_dir(path: Path) -> Path:
    """The submission folder: the parent of ``trajs/`` when files sit there."""
    return path.parent.parent if path.parent.name == "trajs" else path.parent


def _resolve(p: str, cwd: str | None) -> str:
    p = p.strip().strip("'\"")
    if not p:
        return p
    if not posixpath.isabs(p) and cwd:
        p = posixpath.join(cwd, p)
    return posixpath.normpath(p)


def _split_args(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


# --------------------------------------------------------------------------- model name


def _model_name(path: Path, data: dict, replay: dict) -> tuple[str, str]:
    """(raw model name, where it came from).

    Order: the submission's ``metadata.yaml`` ("SWE-agent + <model>" or ``tags.model``), the
    run's ``args.yaml`` (0.x ``agent.model.model_name``), the 1.x ``replay_config`` model name
    unless it was served from a custom ``api_base`` (there the name is an alias: the LM-32B run
    calls its own endpoint "gpt-4o"), and finally the folder name after ``SWE-agent_``.
    """
    meta = _yaml_near(path, "metadata.yaml", 1)
    if meta:
        info = meta.get("info") if isinstance(meta.get("info"), dict) else {}
        name = str(meta.get("name") or info.get("name") or "")
        m = re.match(r"\s*SWE-?agent\s*\+\s*(\S+)\s*$", name, re.IGNORECASE)
        if m:
            return m.group(1), "metadata.yaml:name"
        tags = meta.get("tags") if isinstance(meta.get("tags"), dict) else {}
        models = tags.get("model") or []
        if isinstance(models, list) and models and " " not in str(models[0]):
            return str(models[0]), "metadata.yaml:tags.model"
    args = _yaml_near(path, "args.yaml", 2)
    model_name = (((args.get("agent") or {}).get("model") or {}).get("model_name")) if args else None
    if model_name:
        return str(model_name), "args.yaml:agent.model.model_name"
    model_cfg = ((replay.get("agent") or {}).get("model") or {}) if replay else {}
    if model_cfg.get("name") and not model_cfg.get("api_base"):
        return str(model_cfg["name"]), "replay_config:agent.model.name"
    m = re.search(r"(?:swe-?agent)[_-]+(.+)$", _run_dir(path).name, re.IGNORECASE)
    if m:
        return m.group(1), "folder name"
    return str(model_cfg.get("name") or ""), "replay_config:agent.model.name" if model_cfg.get("name") else ""


# --------------------------------------------------------------------------- labels


def _label(path: Path, instance_id: str) -> tuple[dict | None, str]:
    """(label row, label file as ``folder/selected_labels.jsonl``) for one trajectory file."""
    rows = load_selected_labels(path)
    if not rows:
        return None, ""
    lf = find_upwards(path, "labels/selected_labels.jsonl", 3) or find_upwards(
        path, "selected_labels.jsonl", 3
    )
    label_dir = lf.parent if lf else path.parent
    me = path.resolve()
    for r in rows:
        if r.get("traj") and (label_dir / str(r["traj"])).resolve() == me:
            return r, f"{label_dir.name}/{lf.name if lf else 'selected_labels.jsonl'}"
    run = _run_dir(path).name
    same = [r for r in rows if r.get("instance_id") == instance_id]
    pick = [r for r in same if r.get("submission") == run] or (same if len(same) == 1 else [])
    if len(pick) == 1:
        return pick[0], f"{label_dir.name}/{lf.name if lf else 'selected_labels.jsonl'}"
    return None, ""


# --------------------------------------------------------------------------- 0.x


def _aci_resources(cmd: str, action: str, state: dict) -> tuple[str | None, list[str]]:
    cwd = state.get("working_dir") or None
    open_file = state.get("open_file")
    open_file = None if open_file in (None, "", "n/a") else open_file
    first_line = action.strip().split("\n", 1)[0]
    args = _split_args(first_line)[1:]
    if cmd == "open" and args:
        return _resolve(args[0], cwd), []
    if cmd in ("goto", "scroll_down", "scroll_up"):
        return open_file, []
    if cmd == "search_file":
        return (_resolve(args[1], cwd) if len(args) > 1 else open_file), []
    if cmd == "edit" and open_file:
        return None, [open_file]
    if cmd == "create" and args:
        return None, [_resolve(args[0], cwd)]
    return None, []


def _steps_0x(traj: list[dict], extra: dict) -> list[Step]:
    steps = []
    for i, e in enumerate(traj):
        action = e.get("action") or ""
        a = action.strip()
        state = _as_dict(e.get("state"))
        step = new_step(turn=i, assistant_text=e.get("thought") or "")
        if not a or _HARNESS_EXIT.fullmatch(a):
            if a:
                extra.setdefault(
                    "harness_exit", {"step": i, "action": a, "observation": e.get("observation")}
                )
        else:
            word = a.split(None, 1)[0]
            step.tool_name = word if word in ACI_COMMANDS else "bash"
            step.tool_args = action.rstrip("\n")
            step.output = cap_output(e.get("observation") or "")
            if step.tool_name != "bash":
                step.read_resource, step.write_resources = _aci_resources(word, action, state)
        steps.append(step)
    return steps


# --------------------------------------------------------------------------- 1.x


def _tool_call(hmsg: dict | None, entry: dict) -> tuple[str | None, str, str | None]:
    """(tool name, JSON arguments, provider call id) of one 1.x entry."""
    calls = hmsg.get("tool_calls") if hmsg else None
    if isinstance(calls, list) and calls:
        fn = calls[0].get("function") or {}
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else json.dumps(args)
        return fn.get("name"), args, calls[0].get("id")
    action = entry.get("action") or ""
    if not action.strip():
        return None, "", None
    fn = xml_function_call(entry.get("response") or "")
    if fn is not None:
        return fn[0], fn[1], None
    return action.strip().split(None, 1)[0], action, None  # thought-action style fallback


def _editor_resources(name: str | None, args_json: str) -> tuple[str | None, list[str]]:
    if name != "str_replace_editor":
        return None, []
    args = _as_dict(args_json)
    path, cmd = args.get("path"), args.get("command")
    if not isinstance(path, str) or not path:
        return None, []
    if cmd == "view":
        return posixpath.normpath(path), []
    if cmd in _EDITOR_WRITES:
        return None, [posixpath.normpath(path)]
    return None, []


def _align_history(
    traj: list[dict], history: list[dict]
) -> tuple[list[int], dict[int, dict], dict[int, dict]]:
    """Entries that reached the history, with their assistant and observation messages.

    Returns (recorded entry indices in order, entry → assistant message, entry → observation).
    Entries missing from the history are re-queried turns (format errors) whose output the
    harness discarded.
    """
    pairs: list[tuple[dict, dict | None]] = []
    for m in history:
        if not isinstance(m, dict) or m.get("is_demo"):
            continue
        if m.get("role") == "assistant" and m.get("message_type", "action") == "action":
            pairs.append((m, None))
        elif (
            pairs
            and pairs[-1][1] is None
            and (m.get("message_type") == "observation" or m.get("role") == "tool")
        ):
            pairs[-1] = (pairs[-1][0], m)
    recorded: list[int] = []
    amsg: dict[int, dict] = {}
    omsg: dict[int, dict] = {}
    j = 0
    for i, e in enumerate(traj):
        act = e.get("action", "")
        if (
            j < len(pairs)
            and pairs[j][0].get("action", "") == act
            and (act.strip() or pairs[j][0].get("thought", "") == e.get("thought", ""))
        ):
            recorded.append(i)
            amsg[i] = pairs[j][0]
            if pairs[j][1] is not None:
                omsg[i] = pairs[j][1]
            j += 1
    return recorded, amsg, omsg


def _context(traj: list[dict], i: int) -> list[dict] | None:
    """The messages that produced entry ``i``'s action, when the log has them."""
    e = traj[i]
    if isinstance(e.get("query"), list):
        q = e["query"]
        return q if q and all(isinstance(m, dict) and "role" in m for m in q) else None
    if "messages" in traj[0]:  # 1.0.x: entry i-1's post-step view is entry i's input
        if i == 0:
            return []
        prev = traj[i - 1].get("messages")
        return prev if isinstance(prev, list) else None
    return None


def _scan_context(
    ctx: list[dict], i: int, traj: list[dict], recorded: list[int], call_ids: dict[int, str | None]
) -> tuple[list[int], dict[int, str], str] | None:
    """(masked step indices, their masked text, trailing user text) or None when inconsistent."""
    masked: list[int] = []
    texts: dict[int, str] = {}
    k = 0  # action messages seen
    last_obs = -1
    for pos, m in enumerate(ctx):
        if m.get("is_demo"):
            continue
        role, mtype = m.get("role"), m.get("message_type")
        if role == "assistant" and mtype in (None, "action"):
            if k >= len(recorded) or recorded[k] >= i:
                return None
            if m.get("action", "") != traj[recorded[k]].get("action", ""):
                return None
            k += 1
        elif (mtype == "observation" or role == "tool") and k > 0:
            target = recorded[k - 1]
            ids = m.get("tool_call_ids")
            if ids and call_ids.get(target) and call_ids[target] not in ids:
                return None
            content = m.get("content")
            if _starts_with(content, _MASKED_PREFIX):
                masked.append(target)
                texts[target] = _text(content)[:120]
            last_obs = pos
    if k != sum(1 for r in recorded if r < i):
        return None
    tail = [
        _text(m.get("content"))
        for m in ctx[last_obs + 1 :]
        if m.get("role") == "user" and k > 0 and m.get("content")
    ]
    return sorted(masked), texts, "\n\n".join(tail)


def _steps_1x(data: dict, extra: dict, n_last: int | None) -> list[Step]:
    traj = data["trajectory"]
    recorded, amsg, omsg = _align_history(traj, data.get("history") or [])
    steps: list[Step] = []
    call_ids: dict[int, str | None] = {}
    for i, e in enumerate(traj):
        name, args, call_id = _tool_call(amsg.get(i), e)
        call_ids[i] = call_id
        step = new_step(turn=i, assistant_text=e.get("thought") or "")
        if name is not None:
            step.tool_name, step.tool_args, step.tool_call_id = name, args, call_id
            step.output = cap_output(e.get("observation") or "")
            step.read_resource, step.write_resources = _editor_resources(name, args)
            obs_text = _text((omsg.get(i) or {}).get("content"))
            if obs_text.startswith("Observation: ") and "<response clipped>" in obs_text[-2000:]:
                m = _CLIPPED.search(obs_text[-2000:])
                detail = "next_step_truncated_observation_template" + (
                    f": {m.group(1)} characters elided" if m else ""
                )
                step.events.append(ContextEvent(kind="truncate", targets=[i], detail=detail))
        elif (e.get("observation") or "").strip():
            extra.setdefault(
                "harness_exit", {"step": i, "thought": e.get("thought"), "observation": e.get("observation")}
            )
        if i not in amsg:
            extra.setdefault("requery_steps", []).append(i)
        steps.append(step)

    unverified = []
    label = f"LastNObservations(n={n_last})" if n_last else "LastNObservations"
    masks: list[list[int] | None] = []
    placeholders: list[dict[int, str]] = []
    for i, step in enumerate(steps):
        ctx = _context(traj, i)
        scan = _scan_context(ctx, i, traj, recorded, call_ids) if ctx is not None else None
        if scan is None:
            unverified.append(i)
            masks.append(None)
            placeholders.append({})
            continue
        masked, texts, step.user_text = scan
        masks.append(masked)
        placeholders.append(texts)
    set_masking(steps, masks, label, texts=placeholders)
    if unverified:
        extra["masking_unknown_steps"] = unverified
    return steps


# --------------------------------------------------------------------------- ingester


class SweAgentIngester(Ingester):
    name = "swe-agent"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix != ".traj":
            return False
        h = head.lstrip()
        return h.startswith("{") and '"trajectory"' in h and ('"observation"' in h or '"history"' in h)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
            raise IngestError("expected an object with a 'trajectory' list (SWE-agent .traj)", path)
        traj = data["trajectory"]
        if not traj:
            raise IngestError("empty trajectory: 'trajectory' has no entries", path)
        for i, e in enumerate(traj):
            if not isinstance(e, dict):
                raise IngestError(f"trajectory[{i}] is {type(e).__name__}, expected object", path)
        history = data.get("history") or []
        if not isinstance(history, list):
            raise IngestError(f"'history' is {type(history).__name__}, expected a list", path)
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        is_1x = bool(info.get("swe_agent_version")) or "messages" in traj[0] or "query" in traj[0]
        source = "swe-agent-1.x" if is_1x else "swe-agent-0.x"
        replay = _as_dict(data.get("replay_config"))

        instance_id = path.name.removesuffix(".traj")
        system, first_user = "", ""
        # Demonstrations (0.x ``is_demo`` messages, a worked example of some 5,000 tokens) are sent
        # with every model call, right after the system message: they belong to the prompt's fixed
        # part, so they are kept with the system prompt rather than dropped.
        try:
            demos = [
                _text(m.get("content"))
                for m in history
                if isinstance(m, dict) and m.get("is_demo") and m.get("content")
            ]
            for m in history:
                if not isinstance(m, dict) or m.get("is_demo"):
                    continue
                if m.get("role") == "system" and not system:
                    system = _text(m.get("content"))
                elif m.get("role") == "user" and not first_user:
                    first_user = _text(m.get("content"))
                    break
        except IngestError as err:
            raise IngestError(err.reason, path) from None
        if demos:
            system = "\n\n".join([system, *demos]) if system else "\n\n".join(demos)
        m = (_ISSUE_1X if is_1x else _ISSUE_0X).search(first_user)
        task = m.group(1).strip() if m else ""
        if not task:
            task = str(((replay.get("problem_statement") or {}).get("text")) or first_user)

        extra: dict[str, Any] = {"exit_status": info.get("exit_status")}
        if demos:
            extra["demonstration_chars"] = sum(len(d) for d in demos)
        n_last = None
        if is_1x:
            extra["swe_agent_version"] = info.get("swe_agent_version")
            agent_cfg = replay.get("agent") or {}
            hps = agent_cfg.get("history_processors") or []
            extra["history_processors"] = [h.get("type") for h in hps if isinstance(h, dict)]
            n_last = next(
                (h.get("n") for h in hps if isinstance(h, dict) and h.get("type") == "last_n_observations"),
                None,
            )
            extra["model_config_name"] = (agent_cfg.get("model") or {}).get("name")
        try:
            steps = _steps_1x(data, extra, n_last) if is_1x else _steps_0x(traj, extra)
        except IngestError as err:
            raise IngestError(err.reason, path) from None

        model_raw, model_src = _model_name(path, data, replay)
        extra["model_source"] = model_src
        label, label_file = _label(path, instance_id)
        stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
        success = None
        if label is not None and label.get("resolved") is not None:
            success = bool(label["resolved"])
        traj_obj = Trajectory(
            traj_id=f"{source}/{_run_dir(path).name}/{instance_id}",
            source=source,
            model_raw=model_raw,
            model_family=normalize_family(model_raw),
            task_id=instance_id,
            task_text=task,
            system_prompt=system,
            success=success,
            outcome_source=f"{label_file}:resolved" if label is not None else "",
            cost_usd=stats.get("instance_cost"),
            tokens_in=stats.get("tokens_sent"),
            tokens_out=stats.get("tokens_received"),
            api_calls=stats.get("api_calls"),
            source_path=str(path),
            extra=json.dumps(extra),
            steps=steps,
        )
        yield finalize(traj_obj)
