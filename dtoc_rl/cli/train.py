"""``dtoc-rl train``: train a learned context-management policy from logged trajectories.

Supervised on the hindsight oracle's decisions by default (--mode oracle), each
output's loss weighted by what a wrong decision about it would cost in dollars
(--loss-weights); or on the hindsight need labels (--mode need: visible while a
later call needs the output), or behaviour cloning of logged masking (--mode bc), optionally
followed by PPO fine-tuning in ReplayEnv (--rl-updates N; --init-from CKPT
fine-tunes an existing checkpoint).  The network sees each model's prices, so
it can price a model it never saw.  Validation
holds out whole tasks; training stops early when the validation loss stops
improving.  Then the decision threshold is chosen on the validation tasks per
model family and per price regime: the one saving the most dollars within
--miss-budget misses per 100 steps, or abstaining (never hiding) where none
saves money; the table is stored in the checkpoint and used unless a threshold
is given.  Each threshold is held to every source harness with enough validation runs
(--min-source-val), and where the table abstains a hide_big rule that pays on the same
runs may take over (--fallback-rule).  --retune CKPT chooses a trained checkpoint's
thresholds again without training; --adapt CKPT chooses them on other logs (your
own harness or models: a network scores the outputs of a harness it never saw higher
or lower than its own tune runs', so their thresholds do not carry).  Writes a
checkpoint folder (model.safetensors + config.json).  How long: seconds on the
bundled sample; on all of ../shared/traces (2,394 trajectories) 5-12 minutes on
two cores, by the machine's load (docs/benchmarks.md), with a progress bar per
phase (--quiet shows none until the report).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dtoc_rl.cli.common import emit_json, fail, note_unkept_shares, warn


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dtoc_rl.cli.dataclass_args import add_dataclass_arguments
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--dataset", type=Path, help="dataset folder from `dtoc-rl ingest` (default: bundled sample)"
    )
    p.add_argument(
        "-o",
        "--out",
        type=Path,
        required=True,
        help="checkpoint folder to write (new, or a checkpoint folder, which is replaced; never another "
        "folder)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the training report as JSON")
    p.add_argument(
        "--init-from",
        type=Path,
        metavar="CKPT",
        help="fine-tune this checkpoint with PPO (--rl-updates N and the other --rl-* flags) instead of "
        "training from scratch, which skips the supervised part (minutes on all of ../shared): its network, "
        "data and split settings are kept so that it trains on its own training tasks, its thresholds are "
        "chosen again on its tune tasks, and the result is written to --out (the checkpoint is not "
        "changed). --dataset defaults to the data it was trained on; of the other flags only --rl-*, "
        "--threads, --wandb* and --prices apply (any other is refused)",
    )
    p.add_argument(
        "--retune",
        type=Path,
        metavar="CKPT",
        help="train nothing: choose this checkpoint's thresholds (and fallback rules) again on its own "
        "tune tasks with this version's rule, and write it to --out: e.g. a stricter --miss-budget, or an "
        "older checkpoint's thresholds held to every harness. --miss-budget, --min-family-val, "
        "--min-source-val, --fallback-rule and the settings the thresholds are chosen with (--size-weight, "
        "--miss-governor, --cold-scale) apply when given (else the checkpoint's own), as do --threads and "
        "--prices; any other flag is refused. --dataset defaults to the data it was "
        "trained on",
    )
    p.add_argument(
        "--adapt",
        type=Path,
        metavar="CKPT",
        help="train nothing: choose this checkpoint's thresholds (and fallback rules) on --dataset, logs it "
        "was not trained on (your harness, your models; no success labels needed), and write it to --out. "
        "Runs of tasks it trained on (a task is its source and id, whatever the model) are skipped; "
        "--holdout-share of the others is kept out of the choice so that "
        "`dtoc-rl evaluate --holdout-from OUT --held-out-only` measures the result on runs it was not "
        "chosen on. The same flags apply as with --retune",
    )
    p.add_argument(
        "--holdout-share",
        type=float,
        metavar="F",
        help="with --adapt: the share of the tasks kept out of the choice, to evaluate on (default 0.5; "
        "0: choose on every task, for a checkpoint to deploy rather than measure)",
    )
    add_dataclass_arguments(p, LearnedPolicyConfig, "policy and training configuration")
    from dtoc_rl.tracking import add_wandb_arguments

    add_wandb_arguments(p, switch=False)  # --wandb and --wandb-project are config fields


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.cli.dataclass_args import dataclass_from_args
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    try:
        cfg = dataclass_from_args(LearnedPolicyConfig, args)
    except ValueError as e:
        return fail(str(e))
    from dtoc_rl.tracking import WandbError, finish_run, log_checkpoint, start_run, unused_run_options

    if msg := unused_run_options(args, cfg.wandb):
        return fail(msg)
    from dtoc_rl.policies.learned import check_checkpoint_target

    try:  # before any work: a folder that is not a checkpoint is never replaced
        check_checkpoint_target(args.out)
    except ValueError as e:
        return fail(f"-o {args.out}: {e}")
    dataset = str(args.dataset) if args.dataset else None
    if args.adapt is not None and args.retune is not None:
        return fail("--retune and --adapt: give one of them")
    if args.adapt is None and args.holdout_share is not None:
        return fail("--holdout-share applies only with --adapt CKPT")
    if args.holdout_share is not None and not 0.0 <= args.holdout_share < 1.0:  # NaN fails too
        return fail(f"--holdout-share must be at least 0 and below 1, got {args.holdout_share}")
    if args.retune is not None or args.adapt is not None:
        return _retune(args, cfg)
    if args.init_from is not None:
        if cfg.rl_updates < 1:
            return fail(f"--init-from {args.init_from}: fine-tuning needs --rl-updates N with N >= 1")
        try:
            policy, dataset = _from_checkpoint(args.init_from, args, cfg, _init_from_takes)
        except ValueError as e:
            return fail(f"--init-from {args.init_from}: {e}")
        cfg = policy.cfg
    else:
        policy = cfg.create()
    if cfg.prices:  # a bad price table stops here, before the data is read or anything is trained
        from dtoc_rl.sim.pricing import load_price_table

        try:
            load_price_table(cfg.prices)
        except ValueError as e:
            return fail(f"--prices: {e}")
    run = None
    if cfg.wandb:
        try:
            run = start_run(
                project=cfg.wandb_project,
                name=args.wandb_name,
                tags=args.wandb_tags,
                group=args.wandb_group,
                config=cfg.to_dict(),
                job_type="train",
            )
        except WandbError as e:
            return fail(str(e))
    # the run stays open until the checkpoint is saved and logged; any failure closes it as failed
    try:
        if args.init_from is not None:
            from dtoc_rl.policies.learned_rl import finetune

            report = finetune(
                policy,
                dataset,
                progress=not (args.quiet or args.json),
                log=run.log if run is not None else (lambda *_a, **_k: None),
            )
        else:
            if not (args.quiet or args.json):
                note_unkept_shares(dataset)
            report = policy.fit(dataset, progress=not (args.quiet or args.json), wandb_run=run)
        policy.save(args.out)
        if run is not None:
            log_checkpoint(run, args.out, metadata={"val_metrics": report.get("val_metrics", {})})
    except (ValueError, DatasetError, FileNotFoundError) as e:
        finish_run(run, 1)
        return fail(str(e))
    except BaseException:
        finish_run(run, 1)
        raise
    finish_run(run, 0)
    report["checkpoint"] = str(args.out)
    if args.json:
        emit_json({k: v for k, v in report.items()})
        return 0
    vm = report.get("val_metrics", {})
    print(
        f"trained on {report['train_episodes']} episodes "
        f"({report.get('train_decisions', report.get('rl', {}).get('transitions', '?'))} decisions), "
        f"thresholds chosen on {report.get('tune_episodes', 0)} tune episodes, judged on "
        f"{report['val_episodes']} held-out-task episodes, in {report['seconds']} s"
    )
    if vm:
        print(
            f"held-out tasks: $ saved vs. no management {100 * (1 - vm['cost_ratio']):+.1f}% "
            "(mean over runs; evaluate's figure pools their dollars), "
            f"{vm['misses_per_100_steps']:.2f} misses per 100 steps"
        )
    if report.get("thresholds"):
        _print_thresholds(report["thresholds"])
    print(f"checkpoint written to {args.out}")
    return 0


def _print_thresholds(table: dict, where: str = "validation") -> None:
    fmt = lambda d: ", ".join(f"{k} {'abstain' if v == 0 else f'{v:g}'}" for k, v in d.items()) or "none"  # noqa: E731
    print(
        f"thresholds chosen on {where} (most dollars at <= {table['budget_misses_per_100']:g} "
        f"misses per 100 steps; abstain where none saves): per family: {fmt(table['family'])}; "
        f"per price regime: {fmt(table['regime'])}; pooled: {fmt({'all': table['default']})}"
    )
    fb = table.get("fallback") or {}
    rules = [*fb.get("family", {}).items(), *fb.get("regime", {}).items()]
    if fb.get("default"):
        rules.append(("pooled", fb["default"]))
    if rules:
        said = ", ".join(f"{k} hide_big:tokens={r['tokens']},age={r['age']}" for k, r in rules)
        print(f"where it abstains, a rule that pays on the same runs: {said}")
    if not warn_if_abstaining(table):  # which says it of its few runs itself
        warn_if_few(table)


#: Tune runs below which a threshold choice is mostly chance: at 1 miss per 100 calls, a few runs of a few
#: dozen calls allow one miss or none, so one run more or less moves the choice.
FEW_TUNE_RUNS = 20


def warn_if_few(table: dict) -> None:
    """Say so when the thresholds were chosen on fewer than :data:`FEW_TUNE_RUNS` runs."""
    runs = ((table.get("validation") or {}).get("pooled") or {}).get("trajectories")
    if isinstance(runs, int) and 0 < runs < FEW_TUNE_RUNS:
        warn(
            f"the thresholds were chosen on {runs} tune run{'' if runs == 1 else 's'}: too few for a miss "
            "budget to tell thresholds apart, so the choice is mostly chance; a few dozen runs of several "
            "tasks give it more to go on (or give a threshold: learned:path=CKPT,threshold=T)"
        )


def warn_if_abstaining(table: dict) -> bool:
    """Say so when a threshold table hides nothing anywhere (and no rule takes over); whether it did."""
    from dtoc_rl.policies.learned import table_abstains

    if not table_abstains(table):
        return False
    runs = ((table.get("validation") or {}).get("pooled") or {}).get("trajectories", "its")
    warn(
        f"the checkpoint abstains everywhere: on {runs} tune runs no threshold saved "
        "money within the miss budget, so it hides nothing unless given one (learned:path=CKPT,"
        "threshold=T); more logs give the choice more to go on"
    )
    return True


def _retune(args: argparse.Namespace, cfg) -> int:
    """``--retune CKPT`` (on its own tune tasks) or ``--adapt CKPT`` (on ``--dataset``, other logs):
    the checkpoint with its thresholds chosen again, written to ``--out``."""
    import shlex

    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.policies.learned_trainer import adapt, retune

    flag, path = ("--adapt", args.adapt) if args.adapt is not None else ("--retune", args.retune)
    if args.init_from is not None:
        return fail(f"{flag} and --init-from: give one of them")
    if args.adapt is not None:
        if args.dataset is None:
            return fail("--adapt needs --dataset: the logs to choose the thresholds on")
        if args.out.resolve() == args.adapt.resolve():  # the original is what it is judged against
            return fail("--adapt writes a new checkpoint: give -o another folder than the one adapted")
    try:
        policy, dataset = _from_checkpoint(path, args, cfg, _retune_takes, only_given=True)
        if args.adapt is not None:
            share = 0.5 if args.holdout_share is None else args.holdout_share
            table = adapt(policy, dataset, holdout=share, progress=not (args.quiet or args.json))
        else:
            table = retune(policy, dataset, progress=not (args.quiet or args.json))
    except (ValueError, DatasetError, FileNotFoundError) as e:
        return fail(f"{flag} {path}: {e}")
    key = "adapted_from" if args.adapt is not None else "retuned_from"
    policy.meta[key] = str(path)
    policy.save(args.out)
    meta = policy.meta
    if args.json:
        report = {"checkpoint": str(args.out), key: str(path), "thresholds": table}
        if args.adapt is not None:
            report.update(
                adapt_runs=meta["adapt_runs"],
                held_out_runs=meta["adapt_held_out_runs"],
                skipped_runs=meta["adapt_skipped_runs"],
            )
        emit_json(report)
        return 0
    if args.adapt is None:
        _print_thresholds(table)
    else:
        _print_thresholds(table, where=f"{meta['adapt_runs']} runs of {args.dataset}")
        if meta["adapt_skipped_runs"]:
            print(f"{meta['adapt_skipped_runs']} runs skipped: the checkpoint trained on their tasks")
        if meta["adapt_held_out_runs"]:
            q = shlex.quote
            print(
                f"{meta['adapt_held_out_runs']} runs held out; to compare the adapted thresholds with the "
                f"checkpoint's own on them: dtoc-rl evaluate --dataset {q(str(args.dataset))} "
                f"-p {q(f'learned:path={args.out}')} {q(f'learned:path={path}')} oracle hide_big "
                f"--holdout-from {q(str(args.out))} --held-out-only"
            )
        elif share > 0:
            n = meta["adapt_split_tasks"]
            warn(
                f"nothing held out: {n} task{'' if n == 1 else 's'} beside those the checkpoint trained on "
                "or chose its own thresholds on, and a split needs two"
            )
    print(f"checkpoint written to {args.out}")
    return 0


def _from_checkpoint(path: Path, args: argparse.Namespace, cfg, takes, only_given: bool = False):
    """The checkpoint at ``path`` with the command's values of the config fields ``takes(name)`` accepts
    (with ``only_given``, of those the command line gave: the others keep the checkpoint's), and the
    data it was trained on (``--dataset`` if given).  Raises ValueError (a CheckpointError too) with a
    one-line reason, also for a flag the checkpoint's own settings would override."""
    from dtoc_rl.cli.dataclass_args import given_fields
    from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy

    if not path.exists():
        raise ValueError("no such checkpoint folder")
    defaults, given = type(cfg)().to_dict(), given_fields(args)
    ignored = [n for n, v in cfg.to_dict().items() if not takes(n) and (n in given or v != defaults[n])]
    if ignored:  # the checkpoint's settings win: say so rather than drop the flag unseen
        flags = ", ".join("--" + n.replace("_", "-") for n in ignored)
        raise ValueError(f"keeps the checkpoint's own settings, so {flags} would be ignored: drop it")
    try:
        policy = LearnedPolicy.load(path)
    except CheckpointError as e:
        raise ValueError(str(e)) from None
    # the checkpoint's own network, data and split settings; the command's run settings
    for name, value in cfg.to_dict().items():
        if takes(name) and name != "prices" and (name in given or not only_given):
            setattr(policy.cfg, name, value)
    if cfg.prices:  # the user's prices for this run; without --prices, the checkpoint's own
        policy.cfg.prices = cfg.prices
    if args.dataset:
        return policy, str(args.dataset)
    trained_on = policy.meta.get("trained_on")
    if trained_on and trained_on != "objects" and not Path(trained_on).exists():
        raise ValueError(f"the data it was trained on ({trained_on}) is gone: give --dataset")
    return policy, (trained_on if trained_on and trained_on != "objects" else None)


def _init_from_takes(name: str) -> bool:
    """Whether ``--init-from`` applies the command's value of this config field to the checkpoint."""
    return name.startswith("rl_") or name in ("threads", "wandb", "wandb_project", "prices")


def _retune_takes(name: str) -> bool:
    """Whether ``--retune`` applies the command's value of this config field to the checkpoint."""
    retunable = (
        "miss_budget",
        "min_family_val",
        "min_source_val",
        "fallback_rule",
        "size_weight",
        "miss_governor",
        "cold_scale",
    )
    return name in (*retunable, "threads", "prices")
