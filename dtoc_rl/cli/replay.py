"""``dtoc-rl replay TRACE``: the orchestrator over one logged trace.

Replays every model call (a turn's parallel tool calls together) through a
DTOCContext twice, once with every output visible and once with a
hide-older-than-N rule, and prints the active-token curve of both.  TRACE is a
log file in any supported format, or the name of a bundled trace (``dtoc-rl replay --list`` shows them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dtoc_rl.cli.common import CLIError, at_least, emit_json, fail


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1].replace("``", "'")
    p.add_argument("trace", nargs="?", help="log file, or a bundled trace name such as django__django-11239")
    p.add_argument(
        "--keep-last", "-n", type=at_least(0), default=5, help="outputs kept visible by the rule (default 5)"
    )
    p.add_argument(
        "--estimator",
        default="chars",
        help="token estimator: chars (ceil(len/4), default), o200k_base, cl100k_base, hf:/path",
    )
    p.add_argument(
        "--traj",
        help="which trajectory of a log that holds several (RepoLaunch conversations, tau-bench tasks, "
        "chat JSONL lines): its index from 0 or its id (default: the first; --list-trajs shows them)",
    )
    p.add_argument("--list-trajs", action="store_true", help="list the trajectories in TRACE and exit")
    p.add_argument(
        "--every", type=at_least(0), default=0, help="print every k-th model call (default 0: about 25 rows)"
    )
    p.add_argument("--plot", type=Path, help="also write the two curves to this PNG")
    p.add_argument("--list", action="store_true", help="list the bundled traces and exit")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (replay draws none; taken so that every command accepts the same flag)",
    )


def _resolve(trace: str) -> Path:
    from dtoc_rl.data.paths import find_bundled_trace

    p = Path(trace)
    if p.exists():
        return p
    try:
        return find_bundled_trace(trace)
    except FileNotFoundError as e:
        raise CLIError(f"{trace!r} is neither a file nor a bundled trace ({e})") from None


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.core.tokens import get_estimator
    from dtoc_rl.data.paths import bundled_raw
    from dtoc_rl.ingest import IngestError, read_one
    from dtoc_rl.serve.replay import hide_older_than, replay_trajectory

    try:
        if args.list:
            from dtoc_rl.ingest import detect_format

            # only what replay can read: the sample also holds metadata beside its logs
            names = sorted(
                p.name for p in bundled_raw().rglob("*") if p.is_file() and _is_log(p) and detect_format(p)
            )
            if args.json:
                emit_json(names)
            else:
                print("\n".join(names))
            return 0
        if not args.trace:
            raise CLIError("give a TRACE (a log file or a bundled trace name; --list shows them)")
        path = _resolve(args.trace)
        try:
            pick = args.traj if args.traj is not None else (0 if args.list_trajs else None)
            ing, traj, ids = read_one(path, pick)
        except IngestError as e:  # replay has no --format: name the command that has
            reason = e.reason.replace("--format NAME forces one", "dtoc-rl ingest --format NAME forces one")
            raise CLIError(f"{path}: {reason}") from None
        if args.list_trajs:
            if args.json:
                emit_json({"trace": str(path), "format": ing.name, "trajectories": ids})
            else:
                print("\n".join(f"{i}\t{t}" for i, t in enumerate(ids)))
            return 0
        try:
            est = get_estimator(args.estimator)
        except (ValueError, FileNotFoundError) as e:
            raise CLIError(str(e)) from None
    except CLIError as e:
        return fail(str(e))

    base = replay_trajectory(traj, None, est)
    rule = replay_trajectory(traj, hide_older_than(args.keep_last), est)
    saved = 1 - rule.total_input_tokens / base.total_input_tokens if base.total_input_tokens else 0.0
    result = {
        "trace": str(path),
        "traj_id": traj.traj_id,
        "format": ing.name,
        "model": traj.model_raw,
        "steps": traj.n_steps,
        "calls": len(base.tokens_per_call),  # model calls: a turn's parallel tool calls are one
        "outputs": sum(1 for s in traj.steps if s.tool_name is not None),
        "estimator": est.name,
        "keep_last": args.keep_last,
        "all_visible": {
            "tokens_per_call": base.tokens_per_call,
            "total": base.total_input_tokens,
            "peak": base.peak,
        },
        "hide_older": {
            "tokens_per_call": rule.tokens_per_call,
            "hidden_per_call": rule.hidden_per_call,
            "total": rule.total_input_tokens,
            "peak": rule.peak,
        },
        "input_tokens_saved": saved,
    }
    if args.plot:
        _plot(result, args.plot)
        result["plot"] = str(args.plot)
    if args.json:
        emit_json(result)
        return 0
    _print_table(result, args.every)
    return 0


def _is_log(p: Path) -> bool:
    return p.suffix in (".json", ".jsonl", ".traj") and "labels" not in p.parts and p.name != "LICENSE"


def _print_table(r: dict, every: int) -> None:
    from rich.table import Table

    from dtoc_rl.cli.tables import wide_console

    a, h = r["all_visible"]["tokens_per_call"], r["hide_older"]["tokens_per_call"]
    n = len(a)
    every = every or max(1, n // 25)
    peak = max(a, default=1) or 1
    table = Table(title=f"{r['traj_id']}  ({r['format']}, {r['model']}, estimator {r['estimator']})")
    table.add_column("call", justify="right")
    table.add_column("all visible", justify="right")
    table.add_column(f"keep last {r['keep_last']}", justify="right")
    table.add_column("hidden", justify="right")
    table.add_column("curve (█ all visible, ▒ rule)")
    for i in list(range(0, n, every)) + ([n - 1] if (n - 1) % every else []):
        bar_a = round(30 * a[i] / peak)
        bar_h = round(30 * h[i] / peak)
        table.add_row(
            str(i),
            f"{a[i]:,}",
            f"{h[i]:,}",
            str(r["hide_older"]["hidden_per_call"][i]),
            "▒" * bar_h + "█" * max(0, bar_a - bar_h),
        )
    console = wide_console()
    console.print(table)
    console.print(
        f"input tokens over {n} calls: all visible {r['all_visible']['total']:,}, "
        f"keep last {r['keep_last']} {r['hide_older']['total']:,} "
        f"({100 * r['input_tokens_saved']:.1f}% saved); "
        f"peak {r['all_visible']['peak']:,} → {r['hide_older']['peak']:,}"
    )


def _plot(r: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(r["all_visible"]["tokens_per_call"], label="all visible")
    ax.plot(r["hide_older"]["tokens_per_call"], label=f"keep last {r['keep_last']}")
    ax.set_xlabel("model call")
    ax.set_ylabel(f"active tokens ({r['estimator']})")
    ax.set_title(r["traj_id"])
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
