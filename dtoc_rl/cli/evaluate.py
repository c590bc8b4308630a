"""``dtoc-rl evaluate --dataset D --policy P [P ...]``: offline evaluation.

Runs every policy (and the hindsight oracle, the reference) over every
trajectory in ReplayEnv and reports, per policy, overall and per model family
and source, with 95% bootstrap confidence intervals over trajectories:
dollar savings against no management (with prompt caching), input-token
savings, mean active tokens per call, total input tokens, dollars, misses per
100 steps (a step is one model call: its parallel tool calls are one step),
re-reads, management calls, placeholder overhead, and the fraction of the
oracle's savings.

Policies: {baselines}, oracle (and three hindsight references for what a policy
can learn: oracle:restores=0, priced but never showing a hidden output again;
oracle:schedule=need, each output hidden at once after its last need; and
oracle:schedule=rule, the same timed as the learned policy times its hides),
a checkpoint folder (or learned:path=DIR,threshold=0.3), llm:...,
or your own policy as module:Class[:key=value,...] (imported from the Python
path or the current folder; it needs an act(obs, info) method).
A parameter written a|b|c is swept (one policy per value).  A policy whose
runs fail is reported with its errors (each error once, with the runs it
stopped); the others complete, and the exit status is 1 when every run of a
policy failed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import textwrap
from pathlib import Path

from dtoc_rl.cli.common import at_least, emit_json, fail, note_unkept_shares, write_text_atomic
from dtoc_rl.provenance import environment


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dtoc_rl.policies.registry import baseline_synopsis

    paras = __doc__.split("\n\n")[1:]
    # the rules and their defaults from the registry, so a new rule shows up here too
    paras = [
        textwrap.fill(x.replace("{baselines}", baseline_synopsis()), 79) if "{baselines}" in x else x
        for x in paras
    ]
    p.description = "\n\n".join(paras)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--dataset", type=Path, help="dataset folder (default: the bundled sample)")
    p.add_argument("--policy", "-p", nargs="+", required=True, help="policy specs (see above)")
    p.add_argument("--model-family", nargs="+", help="only these model families")
    p.add_argument("--source", nargs="+", help="only these source harnesses")
    p.add_argument(
        "--miss",
        default="reread",
        choices=["reread", "fail", "calibrated"],
        help="what a miss (a call needing a hidden output) costs: reread (default; the agent spends one "
        "more model call to get it back, the paper's metric), fail (the run ends as a failure: for "
        "policies that must never miss) or calibrated (a re-read with the probability dtoc-rl calibrate "
        "fitted on logs that really were masked, else the agent carries on without it)",
    )
    p.add_argument(
        "--reread-prob",
        type=float,
        default=None,
        help="calibrated miss model: P(re-read | miss) (default: the fitted value)",
    )
    p.add_argument(
        "--overhead",
        default="orchestrator",
        choices=["orchestrator", "agent"],
        help="who makes the changes: orchestrator (default; a change costs only its cache effect, as "
        "when the orchestrator or the proxy hides outputs) or agent (each decision with a change is a "
        "manage_context call the model makes, an extra call whose tokens stay in the context: the "
        "paper's setting; a harness's own window, compaction or masking, which `logged` and "
        "--on-harness replay, is never billed as one; the oracle plans for orchestrator overhead)",
    )
    p.add_argument(
        "--recovery",
        default="append",
        choices=["append", "restore", "cheaper"],
        help="how a re-read brings a missed output back: append (the agent re-runs the tool; masking "
        "rules), restore (in place; only a policy that can re-enable outputs) or cheaper (per miss, "
        "whichever of the two costs less)",
    )
    p.add_argument(
        "--cache",
        default="provider",
        choices=["provider", "ideal"],
        help="prompt cache: the provider's rules (minimum size, steps, lifetime, hit rate) or ideal",
    )
    p.add_argument(
        "--max-items",
        type=at_least(1),
        default=None,
        help="env slots (default: dtoc_rl.engine.features.DEFAULT_MAX_ITEMS, the env's and training's, so a "
        "policy is judged on the window it was trained on)",
    )
    p.add_argument(
        "--prices",
        metavar="FILE|JSON",
        help="your prices for models the price table lacks (or to override it): a JSON or YAML file, or "
        "inline JSON, {model: {input, output, cache_read, cache_write}} in USD per million tokens "
        "(cache_read and cache_write default to input, i.e. no caching, with a warning); a "
        "trajectory whose model name (or family) has an entry is billed, planned and observed at them, "
        "its cache read at the entry's cache_hit_rate if it has one (calibrate --cost --prices-out measures "
        "it on your logs) (the table travels with the cost settings, to --workers and --backend ray too)",
    )
    p.add_argument(
        "--on-harness",
        action="store_true",
        help="replay every policy on top of what each run's harness did itself (its context window, "
        "compactions, masking, as the log records them): what the harness left out of a call stays out "
        "whatever the policy says, and savings are "
        "against the harness as it ran rather than against keeping everything: what the policy would "
        "save plugged into that harness (runs whose log left nothing out: the same either way); the "
        "oracle plans around what the harness hid",
    )
    p.add_argument("--workers", type=at_least(1), default=1, help="worker processes (default 1)")
    p.add_argument(
        "--backend",
        default="local",
        choices=["local", "ray"],
        help="local: this machine; ray: Ray Data over the dataset's Parquet shards, --workers actors "
        "(RAY_ADDRESS picks a cluster; needs pip install 'dtoc-rl[ray]')",
    )
    p.add_argument(
        "--by",
        nargs="+",
        type=_grouping,
        default=["overall", "model_family", "source"],
        metavar="GROUPING",
        help="groupings to report: overall, model_family, source, split (with --holdout-from: train, "
        "tune: training stopped and thresholds were chosen on them, held-out tasks, left out), regime (the "
        "model's cache pricing) and length (short or long runs: long when the unmanaged prompt "
        "averages >= 20,000 tokens per call); a+b crosses two, e.g. split+length or split+model_family",
    )
    p.add_argument(
        "--miss-budget",
        type=float,
        default=1.0,
        help="misses per 100 steps (model calls) allowed in the 'done when' summary (the learned "
        "policy's target is 1): per group, the best non-rule policy within it against the oracle "
        "(>= 60%% of its savings?), the upper end of its 95%% CI (>= 0?) and every rule within the "
        "budget, each at its own miss rate (does a threshold of the same policy with equal or fewer "
        "misses save more?)",
    )
    p.add_argument(
        "--holdout-from",
        type=Path,
        metavar="CKPT",
        help="mark trajectories of tasks this checkpoint neither trained on nor chose anything on as "
        "held-out (its validation tasks, and any task it never saw: your own logs), those it chose its "
        "thresholds on as tune, and those of a source or family it was trained without "
        "(--exclude-source/--exclude-family) as left out, or tune where --adapt chose on them (adds "
        "--by split)",
    )
    p.add_argument(
        "--held-out-only",
        action="store_true",
        help="evaluate only the tasks the --holdout-from checkpoint did not train on: its held-out tasks "
        "and every task it never saw (all of a source it was trained without; of a family it was trained "
        "without, its runs of those tasks: the others' runs of a task taught it the task), split as "
        "held-out or left out; the fair test of a learned policy, and much faster than running every "
        "policy on the training tasks too",
    )
    p.add_argument("--bootstrap", type=at_least(1), default=1000,
                   help="bootstrap resamples for the 95%% CIs (default 1000)")  # fmt: skip
    p.add_argument("--plots", type=Path, help="write the pareto and curves plots into this folder")
    p.add_argument(
        "--plot-format",
        choices=["png", "pdf", "svg"],
        default="png",
        help="plot file format (pdf/svg: vector, for papers)",
    )
    p.add_argument("--dpi", type=at_least(1), default=200, help="plot resolution for png (default: 200)")
    p.add_argument("--csv", type=Path, help="also write the metric rows as CSV")
    p.add_argument("--runs-out", type=Path, help="also write every per-trajectory run as JSONL")
    p.add_argument(
        "--misses-out",
        type=Path,
        help="also write every miss as JSONL, one line each: the policy, the run, the model call that "
        "needed the hidden output, the output (step, age in calls, tool, tokens, the start of its "
        "text) and why the call needed it (a need label's kind, or unread: the answer to the call "
        "before): where a policy's misses come from",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the metric rows as JSON")
    from dtoc_rl.tracking import add_wandb_arguments

    add_wandb_arguments(p)


def _grouping(value: str) -> str:
    from dtoc_rl.policies.evaluate import GROUPINGS

    bad = [d for d in value.split("+") if d not in GROUPINGS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{value!r}: {', '.join(map(repr, bad))} is not one of {', '.join(GROUPINGS)} (a+b crosses two)"
        )
    return value


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
    from dtoc_rl.policies.evaluate import aggregate, done_when, evaluate, miss_rows
    from dtoc_rl.policies.registry import PolicySpecError, expand_specs, make_policy
    from dtoc_rl.sim.simulator import CostConfig

    if args.max_items is None:
        args.max_items = DEFAULT_MAX_ITEMS
    if not args.miss_budget >= 0:  # NaN too; before the run, not after it
        return fail(f"--miss-budget must be >= 0, got {args.miss_budget}")
    from dtoc_rl.tracking import unused_run_options

    if msg := unused_run_options(args, args.wandb):
        return fail(msg)
    # the outputs before any work: one that cannot be written fails now, not after the run
    from dtoc_rl.data.paths import writable_file, writable_folder

    outputs = [("--csv", args.csv, writable_file), ("--runs-out", args.runs_out, writable_file),
               ("--misses-out", args.misses_out, writable_file),
               ("--plots", args.plots, writable_folder)]  # fmt: skip
    for flag, path, check in outputs:
        try:
            if path is not None:
                check(path)
        except ValueError as e:
            return fail(f"{flag}: {e}")
    try:
        specs = expand_specs(args.policy)
        for s in specs:  # fail fast, before any work, on a bad spec or checkpoint
            make_policy(s)
        holdout = None
        if args.held_out_only and not args.holdout_from:
            return fail("--held-out-only needs --holdout-from CKPT (whose unseen tasks to keep)")
        if args.held_out_only and args.backend == "ray":
            return fail("--held-out-only runs on the local backend; drop --backend ray")
        if args.on_harness and args.backend == "ray":
            return fail("--on-harness runs on the local backend; drop --backend ray")
        left_out, tune, adapted = None, None, False
        if args.holdout_from:
            holdout, left_out, tune, adapted = _held_out_tasks(args.holdout_from, args.dataset)
            if "split" not in args.by:
                args.by.append("split")
        kw = {} if args.reread_prob is None else {"reread_prob": args.reread_prob}
        table = logged_prices(args.dataset, quiet=args.json) if args.dataset else {}
        if not (args.quiet or args.json):
            note_unkept_shares(args.dataset)
        if args.prices:
            from dtoc_rl.sim.pricing import load_price_table

            table.update(load_price_table(args.prices))
        if table:
            kw["price_table"] = table
        cost = CostConfig(
            miss=args.miss, overhead=args.overhead, recovery=args.recovery, cache=args.cache, **kw
        )
        if args.backend == "ray":
            from dtoc_rl.policies.evaluate_ray import evaluate_ray as evaluate
        runs = evaluate(
            str(args.dataset) if args.dataset else None,
            specs,
            model_family=args.model_family,
            source=args.source,
            cost_config=cost,
            max_items=args.max_items,
            workers=args.workers,
            progress=not (args.quiet or args.json),
            holdout_tasks=holdout,
            left_out=left_out,
            tune_tasks=tune,
            adapted=adapted,
            **({"tasks": holdout} if args.held_out_only else {}),
            **({"on_harness": True} if args.on_harness else {}),
        )
    except (PolicySpecError, DatasetError, FileNotFoundError) as e:
        return fail(str(e))
    except ImportError as e:
        from dtoc_rl.policies.evaluate_ray import RayNotAvailable

        if isinstance(e, RayNotAvailable):
            return fail(str(e))
        raise
    except ValueError as e:  # empty filter results and bad settings
        return fail(str(e))
    except Exception as e:
        from dtoc_rl.policies.learned import CheckpointError

        if isinstance(e, CheckpointError):
            return fail(str(e))
        raise
    rows = aggregate(runs, by=args.by, n_boot=args.bootstrap, progress=not (args.quiet or args.json))
    failed = [{"policy": r.policy, "traj_id": r.traj_id, "error": r.error} for r in runs if r.error]
    done = done_when(rows, max_misses=args.miss_budget)
    # runs whose harness left context out of later calls itself (a window, a compaction): every
    # policy but `logged` is replayed without that, so their `none` bills what the harness dropped
    dropped = len({r.traj_id for r in runs if r.extra.get("harness_dropped")})
    out = {
        "rows": rows,
        "done_when": done,
        "failed_runs": failed,
        "harness_dropped_runs": dropped,
        "on_harness": args.on_harness,
        "policies": specs,
        "environment": environment(),  # figures compare only with those of the same software
    }
    if args.runs_out:
        write_text_atomic(args.runs_out, (json.dumps(r.__dict__, default=str) + "\n" for r in runs))
    if args.misses_out:
        write_text_atomic(args.misses_out, (json.dumps(m) + "\n" for m in miss_rows(runs)))
    if args.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        write_text_atomic(args.csv, [buf.getvalue()])
    if args.plots:
        out["plots"] = write_plots(args, specs, rows, runs, cost)
    if args.wandb:
        from dtoc_rl.tracking import WandbError, log_evaluation, start_cli_run

        try:
            wb = start_cli_run(args, job_type="evaluate")
        except WandbError as e:
            return fail(str(e))
        files = [p for p in (args.csv, args.runs_out, args.misses_out) if p]
        try:
            log_evaluation(wb, rows, failed=failed, plots=out.get("plots", []), files=files)
        except BaseException:
            wb.finish(exit_code=1)
            raise
        wb.finish()
    if args.json:
        emit_json(out)
    else:
        print_rows(rows, on_harness=args.on_harness)
        if done:
            print_done_when(done, args.miss_budget)
        for line in failure_lines(failed):
            print(line, file=sys.stderr)
        if dropped and not (args.quiet or args.on_harness):
            n_runs = len({r.traj_id for r in runs})
            print(f"note: {dropped} of {n_runs} runs' logs say their harness left earlier context out of "
                  "later calls (a window, a compaction); every policy but `logged` is replayed with it "
                  "kept, so `none` bills what the harness dropped and savings are against that; "
                  "`-p logged` prices what the harness did, --on-harness every policy on top of it "
                  "(docs/results.md, \"dtoc-rl evaluate names the runs whose harness dropped context "
                  "itself\")",
                  file=sys.stderr)  # fmt: skip
        if args.overhead == "agent" and not args.quiet:
            print("note: the oracle plans as if a change cost only its cache effect (orchestrator "
                  "overhead); billed here a manage_context call per call it changes at, it is no bound "
                  "under --overhead agent and shares of its savings say little",
                  file=sys.stderr)  # fmt: skip
        if args.plots:
            print("plots: " + ", ".join(out["plots"]))
    # from the runs, not the rows: a policy that failed on one family only has a row of n = 0 there
    if dead := sorted({r.policy for r in runs if r.error} - {r.policy for r in runs if not r.error}):
        return fail(f"every run of {', '.join(dead)} failed (the errors are above, or in failed_runs)", 1)
    return 0


def failure_lines(failed: list[dict[str, str]]) -> list[str]:
    """One line per policy and error, naming the runs it failed on (the first few): a policy that
    fails alike on 1,500 runs is one line, not 1,500."""
    groups: dict[tuple[str, str], list[str]] = {}
    for f in failed:
        groups.setdefault((f["policy"], f["error"]), []).append(f["traj_id"])
    lines = []
    for (policy, error), ids in groups.items():
        more = f" and {len(ids) - 2} more" if len(ids) > 2 else ""
        runs = ids[0] if len(ids) == 1 else f"{len(ids)} runs ({', '.join(ids[:2])}{more})"
        lines.append(f"failed: {policy} on {runs}: {error}")
    return lines


def _held_out_tasks(
    ckpt: Path, dataset: Path | None
) -> tuple[set[str], dict[str, str | None], set[str], bool]:
    """The tasks of ``dataset`` the checkpoint did not train on (its validation tasks, and every task it
    never saw: a checkpoint that lists its training tasks; an older one names only its validation
    tasks), the source and family it was trained without, the tasks its thresholds were chosen on (for
    ``--by split``'s ``tune``; :func:`~dtoc_rl.policies.evaluate.mark_split` lets held-out win), and
    whether they were chosen by ``train --adapt``."""
    from dtoc_rl.data.dataset import dataset_tasks
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.policies.learned import read_checkpoint_config

    if not ckpt.is_dir():
        what = "not a checkpoint folder" if ckpt.exists() else "no such checkpoint folder"
        raise FileNotFoundError(f"--holdout-from {ckpt}: {what}")
    meta = read_checkpoint_config(ckpt / "config.json")  # CheckpointError: one line, named file
    config, info = meta.get("config", {}), meta.get("meta", {})
    left_out = {"source": config.get("exclude_source"), "family": config.get("exclude_family")}
    held = set(info.get("val_tasks") or ())
    here = dataset_tasks(dataset or bundled_dataset())
    if info.get("train_tasks") is not None:
        seen = set(info["train_tasks"]) | set(info.get("tune_tasks") or ()) | held
        held |= here - seen
    if not held & here:
        if info.get("train_tasks") is not None:
            what = "the checkpoint trained on, or chose its thresholds on, every one of its tasks"
        else:
            what = (
                f"none of its {len(here)} tasks is a validation task of the checkpoint, which was trained on "
                f"{info.get('trained_on', 'another dataset')} and lists no training tasks to tell unseen "
                "ones by"
            )
        raise ValueError(f"--holdout-from {ckpt}: nothing in this dataset is held out: {what}")
    return held, left_out, set(info.get("tune_tasks") or ()), bool(info.get("adapted_on"))


def write_plots(args, specs, rows, runs, cost=None) -> list[str]:
    from dtoc_rl.plots import plot_pareto, plot_token_curves
    from dtoc_rl.policies.evaluate import token_curves

    fmt = {"dpi": args.dpi}
    rows = [r for r in rows if r["n"]]  # a policy whose runs all failed has no point to plot
    paths = [str(plot_pareto(rows, args.plots / f"pareto.{args.plot_format}", **fmt))]
    # one sample trajectory per source, the longest, so the curves show something
    best: dict[str, tuple[int, str]] = {}
    for r in runs:
        if r.policy == "oracle" and r.error is None and r.calls > best.get(r.source, (0, ""))[0]:
            best[r.source] = (r.calls, r.traj_id)
    ids = [tid for _, tid in best.values()][:3]
    curves = token_curves(  # billed as the runs were: the same misses and re-reads
        str(args.dataset) if args.dataset else None, specs, ids, cost_config=cost, max_items=args.max_items
    )
    paths.append(str(plot_token_curves(curves, args.plots / f"curves.{args.plot_format}", **fmt)))
    return paths


def _share(frac) -> str:
    """A share of the oracle's savings; a dash where there is none (the oracle saved nothing, or a row
    read back from JSON, where NaN is written as null)."""
    return "—" if frac is None or frac != frac else f"{100 * frac:.0f}%"


def _dollars(x) -> str:
    return "—" if x is None or x != x else f"${x:,.2f}" if abs(x) >= 10 else f"${x:,.4f}"


def logged_prices(dataset, quiet: bool = False) -> dict:
    """The prices the logs say were given to models the price table does not price (a proxy's or
    service's ``--prices``: ``extra.dtoc_prices``), so that such a model's runs are billed as they were
    decided rather than at the default model's.  A model the table prices keeps its list prices (the
    prices a log gives are those of every run of that name in the dataset, logged at them or not), read at
    the cache hit rate the log gives it (``cache_hit_rate``, as the user measured it);
    ``--prices`` overrides both, and a model logged at two prices is priced by neither (a warning)."""
    import json
    import sys

    from dtoc_rl.data.dataset import DatasetError, dataset_column
    from dtoc_rl.ingest.common import extra_of
    from dtoc_rl.sim.pricing import as_price_table, has_list_price

    try:
        extras = dataset_column(dataset, "extra")
    except DatasetError:  # the evaluation says what is wrong with the dataset, in its own words
        return {}
    seen: dict[str, dict] = {}
    clash: set[str] = set()
    for extra in extras:
        try:
            given = json.loads(extra_of(extra).get("dtoc_prices") or "{}")
        except (ValueError, TypeError):
            continue
        for model, entry in given.items() if isinstance(given, dict) else ():
            if not isinstance(model, str):
                continue
            if has_list_price(model):  # its list prices, at the cache hit rate it was given, if any
                if not isinstance(entry, dict) or "cache_hit_rate" not in entry:
                    continue
                entry = {"cache_hit_rate": entry["cache_hit_rate"]}
            if seen.setdefault(model, entry) != entry:
                clash.add(model)
    for model in sorted(clash):
        print(f"dtoc-rl evaluate: warning: {model} was logged at two prices: priced by --prices or the "
              "price table", file=sys.stderr)  # fmt: skip
        del seen[model]
    try:
        table = as_price_table(seen, "the logs' dtoc_prices") if seen else {}
    except ValueError as e:
        print(f"dtoc-rl evaluate: warning: {e}: not used", file=sys.stderr)
        return {}
    if table and not quiet:
        print(f"dtoc-rl evaluate: prices the logs give, for {', '.join(sorted(table))} (--prices overrides "
              "them)", file=sys.stderr)  # fmt: skip
    return table


def print_rows(rows, console=None, on_harness: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    from dtoc_rl.cli.tables import wide_console
    from dtoc_rl.policies.registry import short_label

    console = console or wide_console()
    # groups where the oracle completed no run: nothing there is measured, whatever else failed
    unmeasured = {(r["group_by"], r["group"]) for r in rows if r["policy"] == "oracle" and not r["n"]}
    for dim in dict.fromkeys(r["group_by"] for r in rows):
        for group in dict.fromkeys(r["group"] for r in rows if r["group_by"] == dim):
            sel = [r for r in rows if r["group_by"] == dim and r["group"] == group]
            title = "overall" if dim == "overall" else f"{dim} = {group}"
            n = max(r["n"] for r in sel)
            t = Table(title=f"{title} ({n} trajectories)", title_justify="left")
            for c in ("policy", "$ saved (95% CI)", "$ billed", "tokens saved", "active tok/call",
                      "misses/100", "re-reads", "mgmt", "placeholder", "of oracle"):  # fmt: skip
                t.add_column(c, justify="left" if c == "policy" else "right")
            for r in sel:
                if not r["n"]:  # every run failed: a row that says so (the errors follow the tables)
                    failed = (
                        "[red]not measured: the oracle failed on these runs[/red]"
                        if (dim, group) in unmeasured and r["policy"] != "oracle"
                        else f"[red]all {r['errors']} runs failed[/red]"
                    )
                    t.add_row(escape(short_label(r["policy"])), failed, *["—"] * 8)
                    continue
                t.add_row(
                    escape(short_label(r["policy"]))
                    + (f" [red]({r['errors']} failed)[/red]" if r["errors"] else ""),
                    f"{100 * r['savings']:+.1f}% "
                    f"[{100 * r['savings_lo']:+.1f}, {100 * r['savings_hi']:+.1f}]",
                    _dollars(r["dollars"]),
                    f"{100 * r['token_savings']:+.1f}%",
                    f"{r['mean_active_tokens']:,.0f}",
                    f"{r['misses_per_100']:.2f}",
                    f"{r['rereads']:.0f}",
                    f"{r['mgmt_calls']:.0f}",
                    f"{100 * r['placeholder_overhead']:.2f}%",
                    _share(r["oracle_fraction"]),
                )
            console.print(t)
    base = "with nothing hidden"
    if on_harness:
        base = "as their harness ran them (its window, compactions, masking)"
    console.print(
        f"$ billed: the group's runs' dollars summed, under each policy; $ saved against the same runs "
        f"{base}",
        highlight=False,
    )
    for r in rows:
        if r["group_by"] != rows[0]["group_by"] or (r["group_by"], r["group"]) in unmeasured:
            continue  # one grouping is enough, and where the oracle failed the table said so
        if not r["n"] and r["errors"]:
            console.print(
                f"[red]{escape(short_label(r['policy']))}: all {r['errors']} runs failed in "
                f"{r['group']}; first error: {escape(r.get('first_error') or '')}[/red]"
            )


def print_done_when(done, budget: float, console=None) -> None:
    """The learned policy's targets per group, one line each (see policies.evaluate.done_when)."""
    from rich.markup import escape
    from rich.table import Table

    from dtoc_rl.cli.tables import wide_console
    from dtoc_rl.policies.evaluate import is_rule
    from dtoc_rl.policies.registry import short_label

    console = console or wide_console()
    mark = {True: "yes", False: "[red]no[/red]", None: "—"}
    t = Table(
        title=f"done when: best non-rule policy at <= {budget:g} misses/100 steps",
        title_justify="left",
        caption="— in 'CI hi >= 0': a group of fewer than 10 runs, too few to judge a loss; in 'best rule': "
        "no rule saves money within the budget; 'beats every rule': each rule within the budget against "
        "this policy's own thresholds at equal or fewer misses",
        caption_justify="left",
    )
    for c in ("group", "n", "policy", "$ saved (95% CI)", "misses/100", "oracle", "of oracle", ">= 60%",
              "CI hi >= 0", "best rule at <= misses", "beats every rule at its misses"):  # fmt: skip
        left = ("group", "policy", "best rule at <= misses", "beats every rule at its misses")
        t.add_column(c, justify="left" if c in left else "right")
    for d in done:
        group = "overall" if d["group_by"] == "overall" else f"{d['group_by']} = {d['group']}"
        if d["policy"] is None:
            oracle = "failed" if d.get("oracle_failed") else f"{100 * d['oracle_savings']:+.1f}%"
            short = [f for f in d.get("failed", ()) if not is_rule(f)]
            why = "none within budget" + (" (failed runs: see below)" if short else "")
            if d.get("oracle_failed"):
                why = "not judged: the oracle failed on every run (see the failures below)"
            t.add_row(group, str(d["n"]), f"[red]{why}[/red]", "—", "—", oracle, "—",
                      mark[False], mark[d["no_loss"]], "—", mark[False])  # fmt: skip
            continue
        frac = d["oracle_fraction"]
        rule = "—" if d["best_rule"] is None else (
            f"{escape(short_label(d['best_rule']))} {100 * d['best_rule_savings']:+.1f}% "
            f"({d['best_rule_misses_per_100']:.2f})"
        )  # fmt: skip
        t.add_row(
            group,
            str(d["n"]),
            escape(short_label(d["policy"])),
            f"{100 * d['savings']:+.1f}% [{100 * d['savings_lo']:+.1f}, {100 * d['savings_hi']:+.1f}]",
            f"{d['misses_per_100']:.2f}",
            f"{100 * d['oracle_savings']:+.1f}%",
            _share(frac),
            mark[d["reaches"]],
            mark[d["no_loss"]],
            rule,
            beats_text(d, short_label, red=True),
        )
    console.print(t)
    failed = sorted({f for d in done for f in d.get("failed", ())})
    if failed:  # judged on fewer runs than the oracle and the rules: not comparable
        console.print(
            "left out of the done-when checks, having failed on some runs (see the failures above): "
            + ", ".join(escape(short_label(f)) for f in failed),
            highlight=False,
        )


def beats_text(d: dict, label=str, red: bool = False) -> str:
    """A done-when row's rule check in words: "yes", or "no:" and the first rule that no point of the
    sweep beats at equal or fewer misses (policies.evaluate.done_when)."""
    from rich.markup import escape

    if d["beats_rules"]:
        return "yes"
    no = "[red]no[/red]" if red else "no"
    if d.get("unbeaten"):
        r = d["unbeaten"][0]
        more = f" (+{len(d['unbeaten']) - 1} more)" if len(d["unbeaten"]) > 1 else ""
    elif d.get("best_rule") and d.get("policy"):  # the pick itself saves no more than this rule
        r = {k: d[f"best_rule{s}"] for k, s in (("policy", ""), ("savings", "_savings"),
                                                ("misses_per_100", "_misses_per_100"))}  # fmt: skip
        more = ""
    else:
        return no
    text = f"{label(r['policy'])} {100 * r['savings']:+.1f}% ({r['misses_per_100']:.2f}){more}"
    return f"{no}: {escape(text) if red else text}"
