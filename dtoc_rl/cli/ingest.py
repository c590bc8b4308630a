"""``dtoc-rl ingest PATH... -o OUT``: agent logs → a trajectory dataset.

Walks every PATH (files or folders, any mix of supported formats), detects each
log's format, converts it to the canonical schema, adds hindsight need labels,
and writes OUT as Parquet shards (atomically: OUT appears only when complete).
Ends with a summary table per source and model; every skipped file is listed
with its reason.

Formats are detected file by file (--format NAME forces one; its help lists every
name): the logs of mini-swe-agent, SWE-agent, OpenHands (benchmark rows, sessions,
SDK conversations), Claude Code, Codex CLI, Gemini CLI, Qwen Code, Cline and Roo
Code, OpenCode, Goose, pi, Continue, Trae Agent, smolagents, AutoCodeRover,
RepoLaunch, tau-bench and tau2-bench, Harbor's ATIF trajectories, Inspect AI's
.eval and .json logs, OpenTelemetry GenAI traces (OTLP JSON from openai-v2,
OpenLLMetry or OpenInference), and chat logs in any .json/.jsonl/Parquet file (OpenAI,
Anthropic or Responses messages, ShareGPT, Hub trajectory datasets).  README, 'Log
formats', says what each reads.  Logged per-call usage (tokens, cached tokens,
dollars) and times are kept where the log has them.

Exit status: 0 when anything was ingested, 1 when nothing was (or, with
--strict, when anything was skipped), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from dtoc_rl.cli.common import at_least, emit_json, fail, warn


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("paths", nargs="+", type=Path, help="log files or folders to ingest")
    p.add_argument("-o", "--out", type=Path, required=True, help="output dataset folder")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if it is a dataset already (a folder holding anything else, or the logs, is "
        "refused)",
    )
    p.add_argument(
        "--strict", action="store_true", help="treat any skipped file as an error (nothing is written)"
    )
    p.add_argument("--no-labels", action="store_true", help="skip hindsight need labelling")
    p.add_argument(
        "--model",
        metavar="NAME",
        help="the model of runs whose logs name none (e.g. gpt-5.2, claude-sonnet-4-5): it prices them and "
        "tells the policy whose they are; a log that names its model keeps it",
    )
    p.add_argument(
        "--task-id",
        dest="task_from",
        choices=("log", "prompt"),
        default="log",
        help="what makes two runs one task, so that a held-out split keeps a task's runs on one side: log "
        "(default), the id the log gives (for a session log such as a Claude Code transcript or an OTel "
        "trace, the session's own, so repeated runs of one task count as several); prompt, the task text "
        "the run opens with (a harness's runs that start from the same request are one task; the log's id is "
        "kept as extra.log_task_id)",
    )
    from dtoc_rl.ingest import INGESTERS

    p.add_argument(
        "--format",
        dest="fmt",
        metavar="NAME",
        choices=[i.name for i in INGESTERS],
        help="read every file with this ingester instead of detecting each file's format (for a log "
        "detection cannot tell; a file it cannot read is skipped with the reason): "
        + ", ".join(i.name for i in INGESTERS),
    )
    p.add_argument(
        "--workers",
        type=at_least(1),
        default=min(4, os.cpu_count() or 1),
        help="parallel processes (default: up to 4)",
    )
    from dtoc_rl.ingest.run_store import SPILL_AFTER

    p.add_argument(
        "--memory",
        type=at_least(0),
        default=SPILL_AFTER // 2**20,
        metavar="MB",
        help="MB of the runs' text held as objects until the dataset is written (their objects take "
        "more); the runs read past it wait compressed in a temporary file in TMPDIR, which keeps the "
        "memory used while reading near that budget (default "
        f"{SPILL_AFTER // 2**20}; a larger value keeps more in memory)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.data.dataset import DatasetError, check_dataset_target, write_dataset
    from dtoc_rl.ingest.driver import ingest_paths, summarize

    try:  # before any work: only an earlier dataset is ever replaced, never the logs or other files
        check_dataset_target(args.out, args.paths)
    except DatasetError as e:  # said first: --overwrite would not help
        return fail(str(e))
    if args.out.exists() and not args.overwrite:
        return fail(f"{args.out} already exists; pass --overwrite to replace it")
    if args.model is not None and (not args.model.strip() or not args.model.isprintable()):
        return fail(f"--model must be a model's name (printable, not blank), got {args.model[:100]!r}")
    if args.model is not None:
        from dtoc_rl.data.models import normalize_family

        if normalize_family(args.model) == "other":  # a typo shows now, not at evaluate's prices
            warn(
                f"--model {args.model[:100]!r} is not a model dtoc-rl knows (family 'other'): its runs are "
                "priced as a default model unless evaluate and train are given --prices for it"
            )
    import warnings

    from dtoc_rl.ingest.driver import IngestWarning

    noted: list[str] = []  # ingest's own warnings, for the summary (--json, the dataset card)
    show = warnings.showwarning

    def note(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, IngestWarning):  # a library's: as it would be shown anyway
            return show(message, category, filename, lineno, file, line)
        if str(message) not in noted:
            noted.append(str(message))
            if not args.json:  # now, while the progress bar runs, not after the table
                warn(str(message))

    try:
        with warnings.catch_warnings():
            warnings.showwarning = note
            res = ingest_paths(
                args.paths,
                label=not args.no_labels,
                workers=args.workers,
                progress=not (args.quiet or args.json),
                fmt=args.fmt,
                model=args.model,
                task_from=args.task_from,
                spill_after=args.memory * 2**20,
            )
    except FileNotFoundError as e:
        return fail(str(e))
    from dtoc_rl.ingest.driver import damaged

    unnamed = bare = 0
    hurt: list[str] = []
    first_unnamed = ""

    def tallied():  # one pass: runs past the memory budget are read back from disk for each
        nonlocal unnamed, bare, first_unnamed
        for t in res.trajectories:
            if not t.model_raw:
                unnamed += 1
                first_unnamed = first_unnamed or t.traj_id
            bare += not any(s.tool_name for s in t.steps)
            if damaged(t):
                hurt.append(t.traj_id)
            yield t

    summary = summarize(tallied(), res)
    summary["out"] = str(args.out)
    summary["warnings"] = list(noted)
    if bare:  # runs that only talked, or a log whose tool calls no ingester reads
        summary["warnings"].append(
            f"{bare} of {len(res.trajectories)} trajectories have no tool calls, so nothing a policy could "
            "hide: if their agent did call tools, its log writes them in a shape dtoc-rl does not read "
            "(README, 'Log formats'; --format NAME forces an ingester)"
        )
    if hurt:
        summary["warnings"].append(
            f"{len(hurt)} of {len(res.trajectories)} trajectories were read from logs with lines that "
            f"could not be read (cut off, or still being written): what those lines held is missing; "
            f"extra.bad_lines or extra.torn_last_line says which (first: {hurt[0]})"
        )
    if res.joined:
        summary["warnings"].append(
            f"{len(res.joined)} log(s) held the start of a run another log continues (a proxy restarted "
            "mid-run, or a conversation it had dropped from memory): each run joined into one "
            "(the summary's 'joined')"
        )
    if unnamed:
        summary["warnings"].append(
            f"{unnamed} of {len(res.trajectories)} trajectories name no model (first: {first_unnamed}), so "
            "they are priced as gpt-4o and a policy cannot tell theirs: --model NAME names it for runs whose "
            "logs do not"
        )
    if not summary["warnings"]:
        del summary["warnings"]
    code = 0
    if not res.trajectories:
        first = res.skipped[0] if res.skipped else None
        why = ""
        if first is not None and len(res.skipped) == 1:
            why = f": {first.path}: {first.reason}"
        elif not res.skipped and res.auxiliary:  # every file passed over as notes, configs or labels
            why = (
                f": the {res.auxiliary} file(s) found are of kinds read as no log (README, *.md, *.txt, "
                "*.yaml, labels, results; dtoc_rl.ingest.driver.AUXILIARY); name a log file itself, with "
                "--format NAME where its format is not detected"
            )
        elif not res.skipped and not res.units:
            why = ": no files found there (hidden files and folders, named with a leading dot, are not read)"
        summary["error"] = "nothing was ingested" + why
        code = 1
    elif args.strict and res.skipped:
        summary["error"] = f"--strict: {len(res.skipped)} file(s) skipped, dataset not written"
        code = 1
    else:
        try:
            # the card names the inputs and the options that change the rows, i.e. how to remake it
            redo = ["dtoc-rl", "ingest", *map(str, args.paths), "-o", str(args.out)]
            redo += ["--format", args.fmt] if args.fmt else []
            redo += ["--model", args.model] if args.model else []
            redo += ["--task-id", args.task_from] if args.task_from != "log" else []
            write_dataset(
                res.trajectories,
                args.out,
                summary=summary,
                overwrite=args.overwrite,
                inputs=args.paths,
                command=shlex.join(redo + (["--no-labels"] if args.no_labels else [])),
            )
        except DatasetError as e:
            return fail(str(e))
    if args.json:
        emit_json(summary)
    else:
        from dtoc_rl.cli.tables import print_summary

        print_summary(summary, f"ingested → {args.out}" if code == 0 else "ingest (not written)")
        for w in summary.get("warnings", ()):
            if w not in noted:  # those were shown as they happened
                warn(w)
        if code:
            print(f"dtoc-rl: error: {summary['error']}", file=sys.stderr)
    return code
