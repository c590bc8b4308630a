"""A live agent works a real task with a policy managing its context, end to end.

The agent (a local transformers model, any OpenAI-compatible endpoint, or a scripted
dry run that needs nothing) fixes one of the tiny repositories in ``envs/tasks/``
through the :class:`~dtoc_rl.serve.orchestrator.Orchestrator`: its tool calls run for real
in a temporary copy of the repository, the policy (a learned checkpoint or any
policy spec) decides before every model call which past outputs it sees, the
task's tests decide success, the session log is written as OpenAI chat JSONL and
re-ingested with ``dtoc-rl ingest`` into a need-labelled dataset.

    python -m scripts.live_example --scripted                       # dry run, no model needed
    python -m scripts.live_example --model-path /models/qwen2.5-0.5b-instruct --policy ckpt/
    OPENAI_BASE_URL=http://localhost:8000/v1 python -m scripts.live_example --openai-model qwen2.5 \\
        --policy last_n:n=3 --mode hybrid

``--replay TRACE`` drives the same loop with a logged trajectory instead of an agent
(a log file in any supported format, or a bundled trace name), and ``--service URL``
asks a running ``dtoc-rl serve`` for the decisions instead of a local policy::

    dtoc-rl serve --policy ckpt/ &
    python -m scripts.live_example --replay django__django-11239 --service http://127.0.0.1:8765

Outputs in ``--out`` (default ``live_example_out/``): ``live.jsonl`` (the log) and
``dataset/`` (the re-ingested dataset).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from dtoc_rl.cli import main as dtoc_main
from dtoc_rl.cli.common import at_least, number_in
from dtoc_rl.core.store import SessionConflictError, StoreFileError
from dtoc_rl.envs.agents import AgentError, ScriptedAgent, make_agent, normalize_response
from dtoc_rl.envs.coding_tasks import TaskChecker, load_tasks
from dtoc_rl.envs.live import DEFAULT_SYSTEM_PROMPT, MANAGE_HINT, NUDGE
from dtoc_rl.envs.tools import Toolbox, tool_specs
from dtoc_rl.policies.learned import CheckpointError
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.orchestrator import MODES, Orchestrator
from dtoc_rl.serve.service import RemotePolicy

PROG = "python -m scripts.live_example"


def _one_line(e: BaseException, limit: int = 500) -> str:
    """An error as one line (a provider's message may carry an HTML page)."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# One correct fix per shipped task: (file, test file, old, new).
FIXES = {
    "pagination": ("pager.py", "test_pager.py", "start = page * per_page", "start = (page - 1) * per_page"),
    "date_parsing": ("dates.py", "test_dates.py", '"%Y-%d-%m"', '"%Y-%m-%d"'),
    "html_escape": (
        "markup.py",
        "test_markup.py",
        "for char, entity in _REPLACEMENTS:",
        'for char, entity in sorted(_REPLACEMENTS, key=lambda r: r[0] != "&"):',
    ),
}


def scripted_agent(task_id: str) -> ScriptedAgent:
    """What a careful agent does: look, test, re-read the source (a need on a hidden output
    when the policy hid it), fix, test, submit."""
    if task_id not in FIXES:
        raise SystemExit(f"--scripted knows the shipped tasks {sorted(FIXES)}, not {task_id!r}")
    src, test, old, new = FIXES[task_id]

    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {"name": name, "arguments": arguments}

    return ScriptedAgent(
        [
            {"content": "Let me look at the repository.", "tool_calls": [call("bash", command="ls")]},
            {"content": f"Reading {src}.", "tool_calls": [call("read_file", path=src)]},
            {"content": "Running the tests.", "tool_calls": [call("bash", command="python -m pytest -q")]},
            {"content": "Reading the failing test.", "tool_calls": [call("read_file", path=test)]},
            {"content": f"Back to {src} to fix it.", "tool_calls": [call("read_file", path=src)]},
            {
                "content": "Fixing the bug.",
                "tool_calls": [call("str_replace", path=src, old_str=old, new_str=new)],
            },
            {"content": "Checking.", "tool_calls": [call("bash", command="python -m pytest -q")]},
            {"content": "Done.", "tool_calls": [call("submit", summary=f"fixed {src}")]},
        ],
        model_name="scripted",
    )


def build_agent(args: argparse.Namespace):
    if args.scripted:
        return scripted_agent(args.task)
    if args.model_path:
        return make_agent(f"hf:{args.model_path}", max_new_tokens=args.max_new_tokens)
    if args.openai_model:
        return make_agent(f"openai:{args.openai_model}")
    raise SystemExit("choose an agent: --scripted, --model-path PATH or --openai-model MODEL")


def snapshot(orch: Orchestrator) -> dict[str, Any]:
    """What the model is about to see, and what the policy just changed (one table row)."""
    dec = orch.last_decision
    return {
        "call": orch.totals.calls,
        "active_tokens": orch.active_tokens,
        "hidden": len(orch.store.hidden_keys()),
        "stored": len(orch.store),
        "enabled": dec.enabled if dec.ran else [],
        "disabled": dec.disabled if dec.ran else [],
        "decision_ms": round(dec.latency_ms, 3),
    }


def finish(orch: Orchestrator, args: argparse.Namespace, out: Path, **info: Any) -> dict[str, Any]:
    """Write the log, re-ingest it with ``dtoc-rl ingest``, summarise."""
    log = orch.save_log(out / "live.jsonl")
    dataset = out / "dataset"
    ingest = ["ingest", str(log), "-o", str(dataset), "--overwrite", "--workers", "1", "--quiet"]
    if args.json:  # keep stdout for our own JSON
        with contextlib.redirect_stdout(sys.stderr):
            code = dtoc_main(ingest)
    else:
        code = dtoc_main(ingest)
    traj = orch.trajectory()
    tot = orch.totals
    remote = orch.policy if isinstance(orch.policy, RemotePolicy) else None
    return {
        **info,
        "mode": orch.mode,
        "policy": orch.policy_label,
        "success": orch.success,
        "calls": tot.calls,
        "steps": traj.n_steps,
        "outputs": len(orch.store),
        "hidden_at_end": len(orch.store.hidden_keys()),
        "misses": tot.misses,
        "changes": tot.changes,
        "needs": sum(len(s.needs) for s in traj.steps),
        "decisions": tot.decisions,
        # a failed /decide request is answered by RemotePolicy's on_error rule, not by the service:
        # those decisions are not the served policy's
        "service": remote.url if remote else None,
        "fallback_decisions": remote.errors if remote else 0,
        "fallback": remote.on_error if remote else None,
        "mean_decision_ms": tot.decision_ms / max(1, tot.decisions),
        "log": str(log),
        "dataset": str(dataset),
        "ingest_exit_code": code,
        "session_id": orch.session_id,
    }


def make_orch_policy(args: argparse.Namespace):
    if args.mode == "agent":
        return None
    if args.service:
        return RemotePolicy(args.service)
    return make_policy(args.policy)


def run_episode(args: argparse.Namespace) -> dict[str, Any]:
    tasks = {t.id: t for t in load_tasks()}
    if args.task not in tasks:
        raise SystemExit(f"unknown task {args.task!r}; shipped: {sorted(tasks)}")
    task = tasks[args.task]
    try:  # what a user gets wrong (a path, a key, a package) is one line, not a traceback
        task.check_runnable()
        agent = build_agent(args)
        policy = make_orch_policy(args)
    except (OSError, ValueError, ImportError, RuntimeError, CheckpointError) as e:
        raise SystemExit(f"{PROG}: error: {_one_line(e)}") from None
    system = DEFAULT_SYSTEM_PROMPT + (MANAGE_HINT if args.mode != "policy" else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = task.make_workdir()
    try:  # a damaged, foreign or busy --session-db is the user's to fix: one line
        orch = Orchestrator(
            policy,
            mode=args.mode,
            query=task.prompt,
            system=system,
            model=str(getattr(agent, "model_name", "") or ""),
            task_id=task.id,
            session_path=args.session_db,
            session_id=args.session_id,
            max_items=args.max_items,
            budget_tokens=args.budget,
        )
    except (StoreFileError, SessionConflictError, OSError) as e:
        raise SystemExit(f"{PROG}: error: {_one_line(e)}") from None
    tools = Toolbox(workdir, timeout=args.tool_timeout)
    turns: list[dict[str, Any]] = []
    end = "max_steps"
    t_start = time.perf_counter()
    try:
        for _ in range(args.max_steps or 20):
            messages = orch.openai_messages()  # the policy decides here
            turns.append(snapshot(orch))
            try:
                resp = normalize_response(agent.next_action(messages, orch.openai_tools(tool_specs())))
            except AgentError as e:
                if orch.totals.calls == 0:  # nothing happened: no log worth ingesting
                    raise SystemExit(f"{PROG}: the first model call failed: {_one_line(e)}") from None
                end = f"agent_error: {e}"
                break
            calls = orch.record_assistant(resp["content"], resp["tool_calls"], usage=resp.get("usage"))
            if not calls and not resp["tool_calls"]:
                orch.add_user(NUDGE)
                continue
            submitted = False
            for c in calls:
                res = tools.run(c["name"], c["arguments"])
                orch.add_tool_result(c["id"], res.output, is_error=res.is_error)
                submitted = submitted or res.submitted
            if submitted:
                end = "submit"
                break
        check = TaskChecker(task).check(workdir)
        orch.success = bool(check.success)
        return finish(
            orch,
            args,
            out,
            task=task.id,
            agent=str(getattr(agent, "model_name", type(agent).__name__)),
            end=end,
            seconds=round(time.perf_counter() - t_start, 2),
            turns=turns,
        )
    finally:
        orch.close()
        if not args.keep_workdir:
            shutil.rmtree(workdir.parent, ignore_errors=True)


def replay_episode(args: argparse.Namespace) -> dict[str, Any]:
    """A logged trajectory instead of a live agent: its outputs go through the Orchestrator
    and the policy (or the service) decides before every logged model call."""
    from dtoc_rl.data.paths import find_bundled_trace
    from dtoc_rl.ingest import IngestError, read_first

    path = Path(args.replay)
    if not path.exists():
        try:
            path = find_bundled_trace(args.replay)
        except FileNotFoundError as e:
            raise SystemExit(f"{args.replay!r} is neither a file nor a bundled trace ({e})") from None
    try:
        _, traj = read_first(path)
    except IngestError as e:
        raise SystemExit(f"{path}: {e.reason}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        policy = make_orch_policy(args) or make_policy("none")
    except (OSError, ValueError, ImportError, CheckpointError) as e:
        raise SystemExit(f"{PROG}: error: {_one_line(e)}") from None
    orch = Orchestrator(
        policy,
        mode="policy",
        query=traj.task_text,
        system=traj.system_prompt or None,
        model=traj.model_raw,
        task_id=traj.task_id,
        max_items=args.max_items,
        budget_tokens=args.budget,
    )
    turns: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    try:
        by_turn: dict[int, list] = {}
        for st in traj.steps:
            by_turn.setdefault(st.turn, []).append(st)
        for k in sorted(by_turn)[: args.max_steps or None]:
            group = by_turn[k]
            if group[0].user_text:
                orch.add_user(group[0].user_text)
            orch.openai_messages()  # the policy decides here
            turns.append(snapshot(orch))
            logged = [st for st in group if st.tool_name is not None]
            calls = orch.record_assistant(
                group[0].assistant_text,
                [{"id": st.tool_call_id, "name": st.tool_name, "arguments": st.tool_args} for st in logged],
            )
            for c, st in zip(calls, logged):
                text = st.output if st.output is not None else "[no output in the log]"
                orch.add_tool_result(c["id"], text, is_error=st.output_is_error)
        orch.success = traj.success
        return finish(
            orch,
            args,
            out,
            task=traj.task_id,
            agent=f"replay of {path.name} ({traj.model_raw or 'unknown model'})",
            end="replayed",
            seconds=round(time.perf_counter() - t_start, 2),
            turns=turns,
        )
    finally:
        orch.close()


def _print(r: dict[str, Any]) -> None:
    print(f"task {r['task']} · agent {r['agent']} · mode {r['mode']} · policy {r['policy']}")
    print(f"{'call':>4} {'active tokens':>13} {'stored':>6} {'hidden':>6}  decision")
    for t in r["turns"]:
        change = " ".join([f"+{k}" for k in t["enabled"]] + [f"-{k}" for k in t["disabled"]])
        print(f"{t['call']:>4} {t['active_tokens']:>13,} {t['stored']:>6} {t['hidden']:>6}  {change}")
    print(
        f"end: {r['end']} · success {r['success']} · {r['calls']} calls · {r['outputs']} outputs · "
        f"{r['misses']} misses · {r['changes']} visibility changes · {r['needs']} needs · "
        f"{r['mean_decision_ms']:.2f} ms/decision"
    )
    if r["service"]:
        served = r["decisions"] - r["fallback_decisions"]
        print(
            f"decisions: {served} of {r['decisions']} from the service at {r['service']}, "
            f"{r['fallback_decisions']} from the fallback (on_error={r['fallback']})"
        )
    status = "ok" if r["ingest_exit_code"] == 0 else f"FAILED ({r['ingest_exit_code']})"
    print(f"log {r['log']} → dtoc-rl ingest → {r['dataset']}: {status}")


def never_served(r: dict[str, Any]) -> bool:
    """Every decision came from RemotePolicy's fallback: the service was never reached (or refused every
    request, e.g. a wrong token), so the run shows the fallback rule, not the served policy."""
    return bool(r["service"]) and r["decisions"] > 0 and r["fallback_decisions"] >= r["decisions"]


#: a time limit: a positive, finite number of seconds
_seconds = number_in(0, float("inf"), open_low=True, open_high=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agent = p.add_mutually_exclusive_group()
    agent.add_argument(
        "--scripted", action="store_true", help="a scripted agent: a dry run that needs nothing"
    )
    agent.add_argument("--model-path", help="a local transformers model folder (never downloads)")
    agent.add_argument("--openai-model", help="a model on an OpenAI-compatible endpoint (OPENAI_BASE_URL)")
    agent.add_argument(
        "--replay", metavar="TRACE", help="no agent: replay a logged trace (a file or a bundled trace name)"
    )
    p.add_argument(
        "--service",
        metavar="URL",
        help="ask a running `dtoc-rl serve` (e.g. http://127.0.0.1:8765) for decisions",
    )
    p.add_argument("--task", default="pagination", help="a task from envs/tasks (default pagination)")
    p.add_argument(
        "--policy", default="last_n:n=3", help="policy spec or checkpoint folder (default last_n:n=3)"
    )
    p.add_argument("--mode", choices=MODES, default="policy", help="who manages the context (default policy)")
    p.add_argument(
        "--max-steps",
        type=at_least(0),
        default=20,
        help="model calls at most (default 20; 0: 20 for an agent, all for a replay)",
    )
    p.add_argument(
        "--max-items",
        type=at_least(1),
        default=None,
        help="policy slots (default: the checkpoint's, else 128)",
    )
    p.add_argument(
        "--budget", type=at_least(0), default=0, help="token budget passed to the policy (default none)"
    )
    p.add_argument("--max-new-tokens", type=at_least(1), default=256, help="local model: tokens per reply")
    p.add_argument("--tool-timeout", type=_seconds, default=30.0, help="seconds per tool call")
    p.add_argument("--session-db", help="keep the session in this SQLite file (survives a restart)")
    p.add_argument("--session-id", help="session id in --session-db (reopened if it exists)")
    p.add_argument("--out", default="live_example_out", help="folder for live.jsonl and dataset/")
    p.add_argument("--keep-workdir", action="store_true", help="keep the task's working copy")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    r = replay_episode(args) if args.replay else run_episode(args)
    if args.json:
        print(json.dumps(r, indent=2, default=str))
    else:
        _print(r)
    if never_served(r):
        print(
            f"{PROG}: error: all {r['decisions']} decisions came from the fallback "
            f"(on_error={r['fallback']}): the service at {r['service']} never answered",
            file=sys.stderr,
        )
        return 1
    if r["service"] and r["fallback_decisions"]:  # the run went on, but not all of it shows the service
        print(
            f"{PROG}: warning: {r['fallback_decisions']} of {r['decisions']} decisions came from the "
            f"fallback (on_error={r['fallback']}): the service at {r['service']} did not answer them",
            file=sys.stderr,
        )
    return 0 if r["ingest_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
