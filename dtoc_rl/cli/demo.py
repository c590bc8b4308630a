"""``dtoc-rl demo``: the main job, end to end.

1. ingest the logs (the bundled real sample by default, or --logs PATH...);
2. train a learned policy on them (supervised on the hindsight oracle, with a
   held-out split by task);
3. evaluate it against every baseline and the oracle;
4. print the table and write the plots.

Everything lands in --out (default ./dtoc-demo): the dataset, the checkpoint,
metrics.json, metrics.csv, pareto.png and curves.png (--plot-format pdf or svg for
papers).  On the bundled sample it takes well under a minute on 2 CPU cores.  --wandb logs
the training curves, the checkpoint, the metric tables and the plots as one wandb run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dtoc_rl.cli.common import INTERRUPTED, at_least, emit_json, fail, write_text_atomic

BASELINES = [
    "none",
    "last_n:n=5|10",
    "obs_mask:attention_window=5|100",
    "anthropic_clear:trigger=20000|100000",
    "opencode_prune",
    "gemini_mask",
    "budget:budget=8000|32000",
    "hide_big",
    "cache_clear",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--logs", type=Path, nargs="+", help="log files or folders (default: the bundled sample)")
    p.add_argument("--out", type=Path, default=Path("dtoc-demo"), help="output folder (default: ./dtoc-demo)")
    p.add_argument(
        "--epochs",
        type=int,
        default=20,
        help="max supervised epochs (default 20; each DAgger round trains up to max(3, epochs / 3) more)",
    )
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.02, 0.1, 0.5],
                   help="learned-policy thresholds to evaluate beside its stored ones (a sweep on "
                        "the Pareto chart)")  # fmt: skip
    p.add_argument(
        "--workers", type=at_least(1), default=2, help="processes for ingest and evaluation (default 2)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON at the end")
    p.add_argument("--plot-format", choices=["png", "pdf", "svg"], default="png",
                   help="plot file format (pdf/svg: vector, for papers)")  # fmt: skip
    p.add_argument("--dpi", type=at_least(1), default=200, help="plot resolution for png (default: 200)")
    from dtoc_rl.tracking import add_wandb_arguments

    add_wandb_arguments(p)


def _step(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"\n== {msg}", flush=True)


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.tracking import WandbError, finish_run, start_cli_run, unused_run_options

    if msg := unused_run_options(args, args.wandb):
        return fail(msg)
    run_ = None
    if args.wandb:
        try:
            run_ = start_cli_run(args, job_type="demo")
        except WandbError as e:
            return fail(str(e))
    # the run is closed whatever happens, marked failed unless the demo completes
    code = 1
    try:
        code = _run(args, run_)
    finally:
        finish_run(run_, code)
    return code


def _run(args: argparse.Namespace, wandb_run) -> int:
    from dtoc_rl.cli import main as cli
    from dtoc_rl.data.paths import bundled_raw

    t0 = time.perf_counter()
    quiet = args.quiet or args.json
    out: Path = args.out
    missing = [str(p) for p in args.logs or () if not p.exists()]
    if missing:  # before the output folder is made: a mistyped path leaves nothing behind
        return fail(f"--logs: no such file or folder: {', '.join(missing)}")
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    try:  # the training settings are checked before any work, not after the ingest
        config = LearnedPolicyConfig(epochs=args.epochs, seed=args.seed)
    except ValueError as e:
        from dtoc_rl.cli.dataclass_args import flags_named

        return fail(flags_named(str(e), ["epochs", "seed"]))
    if msg := foreign_files(out):
        return fail(msg)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    logs = [str(p) for p in (args.logs or [bundled_raw()])]
    dataset, ckpt = out / "dataset", out / "policy"
    from dtoc_rl.policies.learned import check_checkpoint_target

    try:  # before any work: the demo replaces only its own checkpoint
        check_checkpoint_target(ckpt)
    except ValueError as e:
        return fail(str(e))

    import contextlib
    import io

    _step(f"1/3 ingest {', '.join(logs)} → {dataset}", quiet)
    ingest_argv = ["ingest", *logs, "-o", str(dataset), "--overwrite", "--workers", str(args.workers)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf) if args.json else contextlib.nullcontext():
        code = cli(ingest_argv + (["--json"] if args.json else (["--quiet"] if quiet else [])))
    if code == INTERRUPTED:  # Ctrl-C: said already
        return code
    if code:
        if made and not any(out.iterdir()):  # the demo's own folder, still empty: not left behind
            out.rmdir()
        return fail("ingest produced no dataset (its error is above)")
    ingest_summary = json.loads(buf.getvalue()) if args.json else None

    _step(f"2/3 train a learned policy → {ckpt}", quiet)
    policy = config.create()
    try:
        report = policy.fit(str(dataset), progress=not quiet, wandb_run=wandb_run)
    except ValueError as e:
        return fail(f"training failed: {e}")
    policy.save(ckpt)
    if wandb_run is not None:
        from dtoc_rl.tracking import log_checkpoint

        log_checkpoint(wandb_run, ckpt, metadata={"val_metrics": report.get("val_metrics", {})})
    if not quiet:
        print(f"trained on {report['train_episodes']} episodes in {report['seconds']} s; "
              f"held-out tasks: {len(report['val_tasks'])}")  # fmt: skip
    if report.get("thresholds"):
        from dtoc_rl.cli.train import warn_if_abstaining

        warn_if_abstaining(report["thresholds"])

    _step("3/3 evaluate against every baseline and the oracle", quiet)
    # the checkpoint as deployed (its stored thresholds), then the sweep
    learned = [f"learned:path={ckpt}", *(f"learned:path={ckpt},threshold={t:g}" for t in args.thresholds)]
    argv = ["evaluate", "--dataset", str(dataset), "--policy", *BASELINES, *learned,
            "--workers", str(args.workers), "--plots", str(out), "--csv", str(out / "metrics.csv"),
            "--by", "overall", "model_family", "--holdout-from", str(ckpt), "--json",
            "--plot-format", args.plot_format, "--dpi", str(args.dpi)]  # fmt: skip
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli(argv + (["--quiet"] if quiet else []))
    if code == INTERRUPTED:
        return code
    if code:
        return fail("evaluation failed")
    metrics = json.loads(buf.getvalue())
    metrics["training"] = {
        k: v for k, v in report.items() if k not in ("supervised",) and not k.startswith("dagger")
    }
    if ingest_summary is not None:
        metrics["ingest"] = {
            k: ingest_summary[k] for k in ("total", "groups", "skipped") if k in ingest_summary
        }
    metrics["seconds"] = round(time.perf_counter() - t0, 1)
    write_text_atomic(out / "metrics.json", [json.dumps(metrics, indent=2, default=str)])
    if wandb_run is not None:
        from dtoc_rl.tracking import log_evaluation

        files = [out / "metrics.json", out / "metrics.csv"]
        log_evaluation(wandb_run, metrics["rows"], failed=metrics.get("failed_runs", []),
                       plots=metrics.get("plots", []), files=files)  # fmt: skip
    if args.json:
        emit_json(metrics)
        return 0
    from dtoc_rl.cli.evaluate import print_rows

    print_rows(metrics["rows"])
    ext = args.plot_format
    print(f"\nwrote {out}/metrics.json, metrics.csv, pareto.{ext}, curves.{ext} in {metrics['seconds']} s")
    print(deploy_hint(ckpt))
    return 0


#: What the demo writes into its folder (the plots in any of --plot-format's formats); a folder holding
#: anything else is someone else's, whose files the demo would overwrite or mix its own with.
DEMO_FILES = frozenset(
    {"dataset", "policy", "metrics.json", "metrics.csv"}
    | {f"{name}.{ext}" for name in ("pareto", "curves") for ext in ("png", "pdf", "svg")}
)


def foreign_files(out: Path) -> str | None:
    """Why the demo may not write into ``out`` (None: it may): a file, or a folder holding files the
    demo does not write.  A new folder, an empty one or an earlier demo's is fine (hidden files, such
    as a file manager's, aside)."""
    from dtoc_rl.data.paths import not_replaceable

    if not out.exists():
        return None
    why = not_replaceable(out, lambda n: n in DEMO_FILES or n.startswith("."), written_into=True)
    if why == "is a file":
        return f"--out {out}: a file, not a folder; give a new folder"
    if why:
        return f"--out {out} {why}, which the demo does not write; give a new folder or an earlier demo's"
    return None


def deploy_hint(ckpt: Path) -> str:
    """The demo's last line: how to plug the checkpoint into an agent, or, when its table hides nothing
    anywhere (the rows above then show +0.0% for it and nothing says why), that it needs more logs."""
    from dtoc_rl.policies.learned import LearnedPolicy

    policy = LearnedPolicy.load(ckpt)
    if policy.abstains_everywhere:
        return (
            f"the learned policy {ckpt} hides nothing here: on this data's few validation runs no "
            "threshold saved money within the miss budget, so it abstains everywhere. Give it more "
            "logs (dtoc-rl demo --logs YOUR_LOGS: a few hundred runs of several tasks) before plugging it "
            f"into an agent; 'learned:path={ckpt},threshold=T' decides at T meanwhile"
        )
    threshold = policy.cfg.threshold
    where = (
        f"threshold {threshold:g}"
        if threshold is not None
        else "the thresholds chosen on validation per model family / price regime"
    )
    return (
        f"the learned policy is {ckpt} (it decides at {where} unless told; "
        f"'learned:path={ckpt},threshold=T' picks another): plug it into an agent with "
        f"Orchestrator(make_policy('{ckpt}')) or dtoc-rl serve --policy {ckpt}"
    )
