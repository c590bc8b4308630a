"""The learned policy trained at several seeds, each measured on its own held-out tasks.

    python -m scripts.seeds --dataset D
    python -m scripts.seeds --dataset D --seeds 10 11 12 13 14 --split-seed 0
    python -m scripts.seeds --dataset D --seeds 0 1 2 --train="--miss-weight 5" --out runs/mw5

Each seed runs the README's two commands: `dtoc-rl train --dataset D -o CKPT --seed S` (the defaults,
and --train's flags; --jobs trainings at once, one torch thread each), then `dtoc-rl evaluate --dataset
D -p learned:path=CKPT "learned:path=CKPT,threshold=T|..." oracle:schedule=rule --holdout-from CKPT
--held-out-only --by overall length --miss-budget B --json`. Per seed and group it reports the issue's
"done when" reading (the best share of the oracle's savings within the miss budget, at which threshold
and misses) and the threshold table the checkpoint stores (what ships), then per group the mean and
range over seeds, how many seeds reach --target, and the share the policy's own timing would take if
its network knew need perfectly (``oracle:schedule=rule``: the part of the gap that is need, not timing).

A seed is its own task split, so the spread over seeds mixes which tasks are held out with the
training's own draw (initial weights, sampling); --split-seed holds the split, and the spread left is
the training's alone: compare a change against that before calling it a gain. A checkpoint already in
--out for a seed is measured again without training when its settings are these (--retrain trains it
anew); one made of other data or with other settings is an error, not overwritten."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from dtoc_rl.cli.common import at_least, finite_json
from dtoc_rl.cli.dataclass_args import add_args_fields
from dtoc_rl.data.paths import write_text_atomic
from scripts.lofo import train_settings

#: The hindsight reference measured beside each checkpoint: its batching, with need known.
RULE = "oracle:schedule=rule"
#: The thresholds docs/results.md sweeps: dense where 1 miss per 100 calls binds.
THRESHOLDS = (0.0002, 0.002, 0.005, 0.01, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016, 0.017, 0.018, 0.02,
              0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.07, 0.09, 0.1, 0.11, 0.13, 0.15, 0.17, 0.2, 0.25,
              0.3, 0.4)  # fmt: skip


@dataclass
class Args:
    dataset: str = ""
    """dataset folder from `dtoc-rl ingest` (default: the bundled sample)"""
    out: str = "runs/seeds"
    """folder for the checkpoints (seed-S, or seed-S-split-K), their logs (seed-S.train.log,
    seed-S.evaluate.log) and seeds.json (default runs/seeds, under the current folder)"""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """the trainings' seeds, each its own task split unless --split-seed holds it (default 0 1 2 3 4)"""
    split_seed: int = -1
    """hold the task split at this seed (`dtoc-rl train --split-seed`): the seeds then differ in their
    initial weights and sampling only, on the same held-out tasks (-1: each seed its own split)"""
    train: str = ""
    """`dtoc-rl train` settings for every training (the flags of its network, data and training
    options) as one string after an equals sign, e.g. --train="--miss-weight 5". The seed and the
    split are this script's own. A --miss-budget given inside --train sets the budget the stored
    thresholds are chosen for; this script's own --miss-budget only reads the results"""
    jobs: int = 2
    """trainings at once (each on one torch thread unless --train sets --threads); also the
    evaluation's worker processes (default 2)"""
    thresholds: list[float] = field(default_factory=lambda: list(THRESHOLDS))
    """thresholds evaluated besides the checkpoint's stored table (default: the 30 of
    docs/results.md, 0.0002 to 0.4, dense where 1 miss per 100 calls binds)"""
    miss_budget: float = 1.0
    """misses per 100 model calls the "done when" reading allows (default 1)"""
    target: float = 0.6
    """the share of the oracle's savings a seed must reach in a group to count as meeting it (default
    0.6)"""
    retrain: bool = False
    """train every seed anew, even where --out holds its checkpoint"""
    against: str = ""
    """a seeds.json of another setting at the same seeds (and --split-seed) on the same data: each
    seed's difference in best share, then per group their mean and its standard error (paired on the
    same held-out tasks, so the splits' difficulty cancels)"""
    json: bool = False
    """print the result as JSON instead of tables"""


def parse(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.seeds", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_args_fields(ap, Args, {"jobs": {"type": at_least(1)}, "split_seed": {"type": at_least(-1)}})
    args = Args(**vars(ap.parse_args(argv)))
    if not args.miss_budget >= 0:  # NaN too
        ap.error(f"--miss-budget must be >= 0, got {args.miss_budget}")
    if not 0 < args.target <= 1:
        ap.error(f"--target must be in (0, 1], got {args.target}")
    if bad := [t for t in args.thresholds if not 0 <= t <= 1]:
        ap.error(f"--thresholds must be in [0, 1], got {bad[0]}")
    if len(set(args.seeds)) < len(args.seeds):
        ap.error(f"--seeds: each seed once, got {args.seeds}")
    return args


def _cli(*argv: str) -> list[str]:
    # this interpreter's dtoc-rl, whatever is first on PATH
    return [sys.executable, "-c", "import sys; from dtoc_rl.cli import main; sys.exit(main())", *argv]


def checkpoint(args: Args, seed: int) -> Path:
    split = f"-split-{args.split_seed}" if args.split_seed >= 0 else ""
    return Path(args.out) / f"seed-{seed}{split}"


#: Config fields that do not change what a training learns.
_HOW = ("threads", "wandb", "wandb_project")


def wanted(args: Args, seed: int, settings: dict) -> dict:
    """The config a checkpoint of ``seed`` must hold to be this script's (every field but how it ran)."""
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    split = args.split_seed if args.split_seed >= 0 else None
    cfg = LearnedPolicyConfig(**{**settings, "seed": seed, "split_seed": split}).to_dict()
    return {k: v for k, v in cfg.items() if k not in _HOW}


def data_name(dataset: str) -> str:
    """What ``dtoc-rl train`` records as a checkpoint's ``trained_on`` when this script trains it."""
    return str(Path(dataset).resolve()) if dataset else "objects"  # the bundled sample is read as objects


def _same_tasks(meta: dict, dataset: str) -> bool:
    """Whether ``dataset`` holds the very tasks the checkpoint split into train, validation and tune
    (a dataset moved, reached by another path, or given relative when trained)."""
    from dtoc_rl.data.dataset import DatasetError, dataset_tasks

    if not dataset or meta.get("train_tasks") is None:
        return False
    seen = set(meta["train_tasks"]) | set(meta.get("val_tasks") or ()) | set(meta.get("tune_tasks") or ())
    try:
        return seen == dataset_tasks(dataset)
    except DatasetError:  # not a dataset: training it says why
        return False


def reusable(ckpt: Path, want: dict, dataset: str) -> bool:
    """Whether ``ckpt`` holds a finished training of ``dataset`` with the settings ``want``; a
    ValueError when it holds one of other data or settings (kept: it may be someone's results)."""
    from dtoc_rl.policies.learned import read_checkpoint_config, saved_settings
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    if not (ckpt / "config.json").exists() or not (ckpt / "model.safetensors").exists():
        return False
    whole = read_checkpoint_config(ckpt / "config.json")
    # the settings as the checkpoint loads: one saved before a field existed has what it was trained with
    try:
        config = LearnedPolicyConfig(**saved_settings(whole.get("config", {}))).to_dict()
    except (TypeError, ValueError):  # settings it cannot be built with: compared as written
        config = whole.get("config", {})
    on = whole.get("meta", {}).get("trained_on")
    if on != data_name(dataset) and not _same_tasks(whole.get("meta", {}), dataset):
        raise ValueError(
            f"{ckpt} was trained on {on}, not {data_name(dataset)}: give another --out, or --retrain"
        )
    other = {k: (config.get(k), v) for k, v in want.items() if config.get(k) != v}
    if other:
        k, (has, asked) = next(iter(other.items()))
        raise ValueError(
            f"{ckpt} was trained with {k}={has!r}, not {asked!r}: give another --out, or --retrain"
        )
    return True


def _run_cli(what: str, seed: int, argv: list[str], log_file: Path) -> dict:
    """One ``dtoc-rl`` command's JSON; its stderr (warnings, errors) kept whole in ``log_file``."""
    with open(log_file, "w") as err:  # written as it runs: `tail -f` it
        done = subprocess.run(_cli(*argv), stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode:
        last = (log_file.read_text().strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"seed {seed}: dtoc-rl {what} failed ({log_file}): {last}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"seed {seed}: dtoc-rl {what} printed no JSON report ({log_file})") from None


def train(args: Args, seed: int, flags: list[str], log) -> dict:
    ckpt = checkpoint(args, seed)
    cmd = ["train", "-o", str(ckpt), "--seed", str(seed), "--quiet", "--json"]
    if args.dataset:  # absolute: the checkpoint's trained_on names it wherever this runs next
        cmd += ["--dataset", data_name(args.dataset)]
    if args.split_seed >= 0:
        cmd += ["--split-seed", str(args.split_seed)]
    log(f"seed {seed}: training (log: {ckpt}.train.log)")
    report = _run_cli("train", seed, cmd + flags, Path(f"{ckpt}.train.log"))
    log(f"seed {seed}: trained in {report.get('seconds', float('nan')):.0f} s -> {ckpt}")
    return {"train_seconds": report.get("seconds"), "trained": True}


def measure(args: Args, seed: int, log) -> dict:
    """`dtoc-rl evaluate` of one checkpoint on its held-out tasks: its done-when rows and stored table."""
    ckpt = checkpoint(args, seed)
    spec = f"learned:path={ckpt}"
    sweep = f"{spec},threshold=" + "|".join(f"{t:g}" for t in args.thresholds)
    cmd = ["evaluate", "-p", spec, sweep, RULE, "--holdout-from", str(ckpt), "--held-out-only",
           "--by", "overall", "length", "--miss-budget", f"{args.miss_budget:g}",
           "--workers", str(args.jobs), "--json", "--quiet"]  # fmt: skip
    if args.dataset:
        cmd[1:1] = ["--dataset", data_name(args.dataset)]
    t0 = time.perf_counter()
    out = _run_cli("evaluate", seed, cmd, Path(f"{ckpt}.evaluate.log"))
    groups = {}
    for d in out["done_when"]:
        if d["group_by"] == "split":  # --holdout-from adds it: the same runs as overall here
            continue
        name = "all" if d["group_by"] == "overall" else d["group"]
        key = (d["group_by"], d["group"])
        table, rule = (
            next((r for r in out["rows"] if r["policy"] == p and (r["group_by"], r["group"]) == key), {})
            for p in (spec, RULE)
        )
        groups[name] = {
            "n": d["n"],
            "oracle_savings": d["oracle_savings"],
            "best_share": d["oracle_fraction"] if d["policy"] else None,
            "best_policy": d["policy"],
            "best_misses_per_100": d["misses_per_100"],
            "reaches": d["reaches"],
            "no_loss": d["no_loss"],
            "beats_rules": d["beats_rules"],
            "oracle_failed": d.get("oracle_failed", False),
            "table_savings": table.get("savings"),
            "table_misses_per_100": table.get("misses_per_100"),
            "table_share": table.get("oracle_fraction"),
            # what the policy's own timing would take knowing need perfectly, as a share of the oracle's
            "rule_share": rule.get("oracle_fraction"),
        }
    seconds = round(time.perf_counter() - t0, 1)
    log(f"seed {seed}: evaluated in {seconds:.0f} s")
    return {"groups": groups, "eval_seconds": seconds, "failed_runs": len(out["failed_runs"])}


def summary(seeds: list[dict], target: float, budget: float) -> dict:
    """Per group: the mean and range over seeds of the best share (0 where nothing keeps the budget)
    and of the stored table's savings, and how many seeds reach ``target`` and keep the table within
    ``budget``; a seed whose group was not judged (no run of it held out, or the oracle failed on
    every one, or it saved next to nothing: ``reaches`` None) is left out of that group's figures, and
    ``seeds`` says how many remain."""
    out = {}
    names = list(dict.fromkeys(g for s in seeds for g in s["groups"]))
    for g in names:
        rows = [
            r
            for s in seeds
            if g in s["groups"]
            and not (r := s["groups"][g])["oracle_failed"]
            and r.get("reaches", False) is not None
        ]
        if not rows:
            continue
        share = [r["best_share"] if r["best_share"] is not None else 0.0 for r in rows]
        table = [r["table_savings"] for r in rows if r["table_savings"] is not None]
        rule = [r["rule_share"] for r in rows if r.get("rule_share") is not None]  # older files: none
        out[g] = {
            "seeds": len(rows),
            "mean_share": sum(share) / len(share),
            "min_share": min(share),
            "max_share": max(share),
            "reach": sum(x >= target for x in share),
            "mean_table_savings": sum(table) / len(table) if table else None,
            "mean_rule_share": sum(rule) / len(rule) if rule else None,
            "table_within_budget": sum(
                r["table_misses_per_100"] is not None and r["table_misses_per_100"] <= budget for r in rows
            ),
        }
    return out


def run(args: Args, log=print) -> dict:
    from dtoc_rl.provenance import environment

    # a typo is told before anything trains
    settings = train_settings(args.train, own=("seed", "split_seed"), hint="--seeds, --split-seed")
    other = read_other(args.against) if args.against else None  # before the hours of training
    flags = shlex.split(args.train) if args.train.strip() else []
    if "threads" not in settings:
        flags += ["--threads", "1"]  # two trainings share two cores; one thread is also the fastest
    if args.dataset and not Path(args.dataset).is_dir():
        raise FileNotFoundError(f"--dataset {args.dataset}: no such dataset folder")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    todo, per_seed = [], {s: {"seed": s, "checkpoint": str(checkpoint(args, s))} for s in args.seeds}
    for s in args.seeds:
        if args.retrain or not reusable(checkpoint(args, s), wanted(args, s, settings), args.dataset):
            todo.append(s)
        else:
            per_seed[s].update(trained=False, train_seconds=None)
            log(f"seed {s}: {checkpoint(args, s)} holds it; measured again, not trained")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each training is its own process
        jobs = {pool.submit(train, args, s, flags, log): s for s in todo}
        for job in as_completed(jobs):
            try:
                per_seed[jobs[job]].update(job.result())
            except BaseException as e:
                for queued in jobs:  # those running finish, and a next run reuses them
                    queued.cancel()
                log(f"seed {jobs[job]}: failed ({e}); waiting for the trainings running, then stopping")
                raise
    for s in args.seeds:
        per_seed[s].update(measure(args, s, log))
    seeds = [per_seed[s] for s in args.seeds]
    result = {
        "dataset": args.dataset or "bundled sample",
        "args": vars(args),
        "settings": settings,
        "environment": environment(),  # figures compare only with those of the same software
        "seeds": seeds,
        "summary": summary(seeds, args.target, args.miss_budget),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.against:
        result["against"] = {"file": args.against, "groups": paired(result, other)}
    write_text_atomic(Path(args.out) / "seeds.json", [json.dumps(finite_json(result), indent=1, default=str)])
    return result


def read_other(path: str) -> dict:
    """The seeds.json --against names, or a ValueError saying what is wrong with it."""
    try:
        other = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        why = " ".join(str(e).split())[:120]
        raise ValueError(f"--against {path}: not a readable seeds.json ({why})") from None
    if not isinstance(other, dict) or not isinstance(other.get("seeds"), list):
        raise ValueError(f"--against {path}: not a seeds.json of this script (no seeds list)")
    return other


def paired(this: dict, other: dict) -> dict:
    """Per group, each seed's best share here minus there (0 where nothing keeps the budget), their
    mean and its standard error over the seeds both judged.  A seed whose held-out runs differ (their
    number or the oracle's savings) is a ValueError: the comparison is only paired on the same tasks."""
    theirs = {s["seed"]: s for s in other["seeds"]}
    out: dict = {}
    for s in this["seeds"]:
        o = theirs.get(s["seed"])
        if o is None:
            continue
        for g, r in s["groups"].items():
            q = o.get("groups", {}).get(g)
            if q is None or r["oracle_failed"] or q.get("oracle_failed"):
                continue
            if (r["n"], r["oracle_savings"]) != (q["n"], q["oracle_savings"]):
                raise ValueError(
                    f"--against: seed {s['seed']} holds out other runs there ({q['n']} runs, oracle "
                    f"{q['oracle_savings']}) than here ({r['n']}, {r['oracle_savings']}): not the same "
                    "data and split; give the same --dataset, --seeds and --split-seed"
                )
            diff = (r["best_share"] or 0.0) - (q["best_share"] or 0.0)
            out.setdefault(g, {"seeds": [], "diff": []})
            out[g]["seeds"].append(s["seed"])
            out[g]["diff"].append(diff)
    for g in out.values():
        d, k = g["diff"], len(g["diff"])
        g["mean_diff"] = sum(d) / k
        sd = math.sqrt(sum((x - g["mean_diff"]) ** 2 for x in d) / (k - 1)) if k > 1 else float("nan")
        g["standard_error"] = sd / math.sqrt(k)
    if not out:
        raise ValueError("--against: no seed of it is among these seeds")
    return out


def tables(result: dict) -> str:
    """The result as Markdown: a row per seed (each group's best share, threshold and misses, and the
    stored table on all its held-out runs), then per group the mean and range over the seeds that
    judged it and how many reach the target."""
    names, sm = list(result["summary"]), result["summary"]
    if not names:
        return "no group was judged: the oracle failed on every held-out run (see the seeds' evaluate logs)"

    def pct(x, sign=""):
        return "—" if x is None or not math.isfinite(x) else f"{100 * x:{sign}.1f}%"

    def cell(r):
        if r is None:
            return "—"
        if r["oracle_failed"]:
            return "oracle failed"
        if r["best_share"] is None:
            return "none within budget"
        p = r["best_policy"]
        t = p.rsplit("threshold=", 1)[1] if "threshold=" in p else "table"
        return f"{pct(r['best_share'])} ({t}, {r['best_misses_per_100']:.2f})"

    def table(r):
        if r is None or r["table_savings"] is None or not math.isfinite(r["table_savings"]):
            return "—"
        return f"{100 * r['table_savings']:+.2f}% at {r['table_misses_per_100']:.2f}"

    def row(*cells):
        return "| " + " | ".join(cells) + " |"

    lines = [
        row("seed (held-out runs, oracle)", *names, "stored table (all)"),
        "|---" * (len(names) + 2) + "|",
    ]
    for s in result["seeds"]:
        a = s["groups"].get("all")
        head = f"{s['seed']} ({a['n']}, {pct(a['oracle_savings'], '+')})" if a else str(s["seed"])
        lines.append(row(head, *(cell(s["groups"].get(n)) for n in names), table(a)))
    judged = [f"{sm[n]['seeds']} seed{'s' if sm[n]['seeds'] != 1 else ''}" for n in names]
    lines.append(row("judged on", *judged, ""))
    stored = ""
    if "all" in sm and sm["all"]["mean_table_savings"] is not None:
        stored = (f"{pct(sm['all']['mean_table_savings'], '+')}, {sm['all']['table_within_budget']} of "
                  f"{sm['all']['seeds']} within the budget")  # fmt: skip
    lines.append(row("mean", *(f"**{pct(sm[n]['mean_share'])}**" for n in names), stored))
    lines.append(row("range", *(f"{pct(sm[n]['min_share'])} – {pct(sm[n]['max_share'])}" for n in names), ""))
    if any(sm[n].get("mean_rule_share") is not None for n in names):
        lines.append(row(f"`{RULE}` (knowing need)", *(pct(sm[n].get("mean_rule_share")) for n in names), ""))
    target = f"seeds at >= {100 * result['args']['target']:.0f}%"
    lines.append(row(target, *(str(sm[n]["reach"]) for n in names), ""))
    if against := result.get("against"):
        pg = against["groups"]
        lines += ["", f"Against {against['file']} (here minus there, paired by seed):", ""]
        lines.append(row("seed", *names))
        lines.append("|---" * (len(names) + 1) + "|")
        for seed in dict.fromkeys(x for n in names if n in pg for x in pg[n]["seeds"]):
            cells = []
            for n in names:
                d = dict(zip(pg[n]["seeds"], pg[n]["diff"], strict=True)) if n in pg else {}
                cells.append(f"{100 * d[seed]:+.1f} points" if seed in d else "—")
            lines.append(row(str(seed), *cells))

        def mean(n):
            if n not in pg:
                return "—"
            g, se = pg[n], pg[n]["standard_error"]
            return (
                f"**{100 * g['mean_diff']:+.1f}** ± {100 * se:.1f}"
                if math.isfinite(se)
                else f"{100 * g['mean_diff']:+.1f}"
            )

        lines.append(row("mean ± standard error", *(mean(n) for n in names)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from dtoc_rl.data.dataset import DatasetError

    args = parse(argv)
    log = (lambda *a, **k: None) if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        result = run(args, log=log)
    except (ValueError, FileNotFoundError, DatasetError, RuntimeError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(finite_json(result), default=str))
    else:
        print(tables(result))
        n = len(result["seeds"])
        print(f"\n{n} seed{'s' if n != 1 else ''} in {result['seconds']} s; JSON in {args.out}/seeds.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
