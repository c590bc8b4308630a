"""Leave-one-out: can the learned policy save money on a model family (or a harness) it never saw?

    python -m scripts.lofo --dataset /tmp/all2
    python -m scripts.lofo --dataset /tmp/all2 --families gemini-3-pro gpt-4 --epochs 5 --json
    python -m scripts.lofo --dataset /tmp/all2 --by source --sources mini-swe-agent tau-bench
    python -m scripts.lofo --dataset /tmp/all2 --by source --train="--no-family-conditioning"

For every model family (with --by source: every source harness) with at least --min-trajectories
trajectories it trains a policy with `dtoc-rl train`'s defaults (LearnedPolicyConfig()) on every other
one, then evaluates it on all of the left-out one's trajectories: the learned policy at the threshold
its checkpoint stores (and at --thresholds), the rules hide_big, cache_clear and none, and the hindsight
oracle. Reported per left-out group: dollar savings with a 95% bootstrap CI, misses per 100 steps, the
share of the oracle's savings, and the "done when" reading (the best learned threshold at <= 1 miss per
100 steps, and whether every rule within the budget is out-saved at its own miss rate).

A full run retrains once per left-out family or source, so it is capped for a shared machine: --epochs
and --dagger-rounds bound each training, --max-train and --max-eval sample the trajectories trained and
evaluated on (deterministically, per family or source, so that a large one does not dominate), and the
times are measured and reported. Checkpoints are written into --out."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dtoc_rl.cli.common import at_least, finite_json
from dtoc_rl.cli.dataclass_args import add_args_fields


@dataclass
class Args:
    dataset: str = ""
    """dataset folder from `dtoc-rl ingest` (default: the bundled sample)"""
    out: str = "runs/lofo"
    """folder for the checkpoints and lofo.json"""
    by: str = "family"
    """what is left out: a model family (can it price and judge a model it never saw?) or a source
    harness (other tools, other output formats, other words)"""
    families: list[str] = field(default_factory=list)
    """left-out families to run, with --by family (default: every family with >= --min-trajectories)"""
    sources: list[str] = field(default_factory=list)
    """left-out sources to run, with --by source (default: every source with >= --min-trajectories)"""
    min_trajectories: int = 10
    """a family or source with fewer trajectories is still trained on, but not left out (too few to
    judge)"""
    epochs: int = 0
    """max supervised epochs per training (0: the training default)"""
    dagger_rounds: int = -1
    """DAgger rounds per training (-1: the training default)"""
    train: str = ""
    """`dtoc-rl train` flags for every fold's training, as one string after an equals sign
    (--train="--no-family-conditioning --n-layers 1"): leave-one-out of another setting than the
    defaults. The seed and what is left out are this script's own (--seed, --by)"""
    max_train: int = 0
    """train on at most this many trajectories per family or source (0: all): bounds a training's time"""
    max_eval: int = 0
    """evaluate on at most this many trajectories of the left-out family or source (0: all)"""
    thresholds: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    """learned-policy thresholds evaluated besides the checkpoint's own"""
    rules: list[str] = field(default_factory=lambda: ["none", "hide_big", "cache_clear"])
    """rule baselines evaluated on each left-out family or source"""
    miss_budget: float = 1.0
    """misses per 100 steps allowed in the 'done when' reading"""
    bootstrap: int = 1000
    """bootstrap resamples for the 95% CIs"""
    seed: int = 0
    """random seed: the trajectories sampled (--max-train, --max-eval), the bootstrap, and the training
    unless --seeds gives its seeds"""
    seeds: list[int] = field(default_factory=list)
    """train each fold once per seed (the trajectories sampled stay --seed's) and report every
    training's row and, per left-out group, the mean and range of the best learned share of the
    oracle's savings within the budget: one training's draw moves a fold by up to tens of points, so a
    comparison of two settings wants two or three (default: --seed alone)"""
    adapt: bool = False
    """also choose each fold's thresholds on half of the left-out group's tasks (`dtoc-rl train --adapt`)
    and decide the other half with them, and the other way round: what a user who has logs of the new
    harness or model gets. Reported as the policy "learned (adapted on the other half)" on every
    evaluated run; the "done when" reading stays the checkpoint's own"""
    json: bool = False
    """print the result as JSON instead of a table"""


def parse(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.lofo", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    special: dict[str, dict] = {
        "by": {"choices": ("family", "source")},
        "thresholds": {"nargs": "*"},  # none: only the stored table and the rules
        **{name: {"type": at_least(low)} for name, low in _LOWEST.items()},
    }
    add_args_fields(ap, Args, special)
    args = ap.parse_args(argv)
    if not args.miss_budget >= 0:  # NaN too
        ap.error(f"--miss-budget must be >= 0, got {args.miss_budget}")
    return Args(**vars(args))


#: The smallest value of each integer option: below it the option means nothing (a CI of no resamples,
#: a negative cap).  -1 for --dagger-rounds is "the training default".
_LOWEST = {"min_trajectories": 1, "epochs": 0, "dagger_rounds": -1, "max_train": 0, "max_eval": 0,
           "bootstrap": 1}  # fmt: skip


def _group(e, by: str) -> str:
    from dtoc_rl.policies.learned_trainer import episode_group

    return episode_group(e, by)


def _sample(eps: list, cap: int, seed: int, by: str = "family") -> list:
    """At most ``cap`` of ``eps`` per family (or source), the same ones on every run (0: all)."""
    if not cap:
        return list(eps)
    groups: dict[str, list] = defaultdict(list)
    for e in eps:
        groups[_group(e, by)].append(e)
    out = []
    for name in sorted(groups):
        group = sorted(groups[name], key=lambda e: e.traj_id)
        if len(group) > cap:
            group = random.Random(f"{seed}:{name}").sample(group, cap)
        out += group
    return out


def leave_one_out(args: Args, log=print) -> dict:
    from dtoc_rl.envs.data import load_episodes
    from dtoc_rl.policies.evaluate import aggregate, evaluate
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig
    from dtoc_rl.provenance import environment

    t_all = time.perf_counter()
    by = args.by
    if args.sources and by == "family":
        raise ValueError("--sources needs --by source")
    if args.families and by == "source":
        raise ValueError("--families needs --by family")
    overrides = train_settings(args.train)  # a typo is told before the data loads
    rules = check_policies(args.rules, args.thresholds)  # and a bad spec before any fold trains
    caps = {"epochs": args.epochs} if args.epochs else {}
    if args.dagger_rounds >= 0:
        caps["dagger_rounds"] = args.dagger_rounds
    twice = sorted(caps.keys() & overrides.keys())
    if twice:
        raise ValueError(f"--{twice[0].replace('_', '-')} is given twice: here and in --train")
    overrides.update(caps)
    eps = load_episodes(args.dataset or None)
    counts = Counter(_group(e, by) for e in eps)
    eligible = sorted(f for f, n in counts.items() if n >= args.min_trajectories)
    chosen = (args.families if by == "family" else args.sources) or eligible
    unknown = sorted(set(chosen) - set(counts))
    if unknown:
        flag = "--families" if by == "family" else "--sources"
        where = args.dataset or "the bundled sample"
        raise ValueError(f"{flag}: {unknown} not in {where} (present: {sorted(counts)})")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "dataset": str(args.dataset),
        "args": vars(args),
        "trajectories": dict(counts),
        "environment": environment(),  # figures compare only with those of the same software
        "folds": [],
    }
    seeds = list(dict.fromkeys(args.seeds)) or [args.seed]
    for fam, seed in ((f, s) for f in chosen for s in seeds):
        fold: dict = {by: fam, "left_out": fam, "trajectories": counts[fam], "seed": seed}
        train_eps = _sample([e for e in eps if _group(e, by) != fam], args.max_train, args.seed, by)
        test_eps = _sample([e for e in eps if _group(e, by) == fam], args.max_eval, args.seed, by)
        # kept in the checkpoint's config: it says what it never saw
        cfg = LearnedPolicyConfig(**{**overrides, "seed": seed, f"exclude_{by}": fam})
        others = len({_group(e, by) for e in train_eps})
        which = f"{fam} (seed {seed})" if len(seeds) > 1 else fam
        log(f"== {which}: train on {len(train_eps)} trajectories of {others} other "
            f"{'families' if by == 'family' else 'sources'}, evaluate on {len(test_eps)}")  # fmt: skip
        t0 = time.perf_counter()
        policy = cfg.create()
        report = policy.fit(episodes=train_eps, progress=False)
        ckpt = out_dir / (f"without-{fam}" if len(seeds) == 1 else f"without-{fam}-seed{seed}")
        policy.save(ckpt)
        fold["train_seconds"] = round(time.perf_counter() - t0, 3)
        fold["train_episodes"] = report.get("train_episodes")
        fold["train_families"] = sorted({e.model_family for e in train_eps})
        fold["train_sources"] = sorted({e.source for e in train_eps})
        fold["checkpoint"] = str(ckpt)
        fold["eval_trajectories"] = [e.traj_id for e in test_eps]
        learned = [f"learned:path={ckpt}"] + [f"learned:path={ckpt},threshold={t}" for t in args.thresholds]
        t0 = time.perf_counter()
        runs = evaluate(test_eps, [*learned, *rules], progress=False)
        if args.adapt:
            runs += adapted_runs(ckpt, test_eps, args.seed)
        fold["eval_seconds"] = round(time.perf_counter() - t0, 3)
        rows = aggregate(runs, by=["overall"], n_boot=args.bootstrap, seed=args.seed)
        fold["rows"] = rows
        fold["done_when"] = reading(rows, args.miss_budget, args.min_trajectories)
        fold["failed_runs"] = [
            {"policy": r.policy, "traj_id": r.traj_id, "error": r.error} for r in runs if r.error
        ]
        log(f"   trained in {fold['train_seconds']:.1f} s, evaluated in {fold['eval_seconds']:.1f} s")
        result["folds"].append(fold)
        result["over_seeds"] = over_seeds(result["folds"])
        _write(out_dir / "lofo.json", result)
    result["seconds"] = round(time.perf_counter() - t_all, 1)
    _write(out_dir / "lofo.json", result)
    return result


#: The row of a fold's table adapted to the left-out group (--adapt).
ADAPTED = "learned (adapted on the other half)"


def reading(rows: list[dict], budget: float, min_n: int) -> list[dict]:
    """A fold's "done when" reading (policies.evaluate.done_when) of the checkpoint's own sweep: a table
    adapted to the group left out is another policy, judged beside it but never picked."""
    from dtoc_rl.policies.evaluate import done_when

    return done_when([r for r in rows if r["policy"] != ADAPTED], max_misses=budget, min_n=min_n)


def adapted_runs(ckpt: Path, eps: list, seed: int) -> list:
    """The runs of ``eps`` decided by the checkpoint with its thresholds adapted to the other half of
    their tasks (two adaptations, each judged on the half it was not chosen on)."""
    from dtoc_rl.policies.evaluate import ORACLE, evaluate
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_trainer import ADAPT_SPLIT_SALT, adapt, split_by_task

    first, second = split_by_task(eps, 0.5, seed + ADAPT_SPLIT_SALT)  # not the halves training split
    runs = []
    for chosen_on, judged in ((first, second), (second, first)):
        if not chosen_on or not judged:  # a single task: nothing to judge an adaptation on
            continue
        policy = LearnedPolicy.load(ckpt)
        # no run of the group left out was trained on, though another family's runs of its tasks may be
        adapt(policy, episodes=chosen_on, holdout=0.0, skip_trained=False)
        for r in evaluate(judged, [policy], progress=False):
            if r.policy != ORACLE:  # the reference's runs are the fold's own
                r.policy = ADAPTED
                runs.append(r)
    return runs


def over_seeds(folds: list[dict]) -> list[dict]:
    """Per left-out group, the best learned share of the oracle's savings within the budget of each
    training (0 where no threshold keeps the budget, every learned run failing included; None where
    the fold was not judged: no oracle row, or the oracle failed on every run) and their mean, min and
    max over the judged ones."""
    shares: dict[str, list] = defaultdict(list)
    for fold in folds:
        best = [d for d in fold["done_when"] if d["policy"] is not None]
        judged = [d for d in fold["done_when"] if not d.get("oracle_failed")]
        frac = (_finite(best[0]["oracle_fraction"]) if best else 0.0) if judged else None
        shares[fold.get("left_out", fold.get("family"))].append((fold.get("seed"), frac))
    out = []
    for name, got in shares.items():
        vals = [f for _, f in got if f is not None]
        out.append({
            "left_out": name, "seeds": [s for s, _ in got], "best_share": [f for _, f in got],
            "mean": sum(vals) / len(vals) if vals else None, "min": min(vals, default=None),
            "max": max(vals, default=None),
        })  # fmt: skip
    return out


def check_policies(rules: list[str], thresholds: list[float]) -> list[str]:
    """The rule specs, sweeps (``key=a|b``) expanded, each built once: a PolicySpecError (a ValueError)
    names a bad one, and a threshold out of range is a ValueError, before any fold trains."""
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig
    from dtoc_rl.policies.registry import expand_specs, make_policy

    specs = expand_specs(rules)
    for spec in specs:
        make_policy(spec)
    for t in thresholds:
        try:
            LearnedPolicyConfig(threshold=t)
        except ValueError as e:
            raise ValueError(f"--thresholds: {e}") from None
    return specs


#: Settings a fold's training takes from this script, not from --train.
_OWN = ("seed", "exclude_family", "exclude_source", "model_family", "source")


def train_settings(
    flags: str, own: tuple[str, ...] = _OWN, hint: str = "--seed or --seeds, --by, what is left out"
) -> dict:
    """The LearnedPolicyConfig fields that ``dtoc-rl train`` flags (one string) set, parsed as that
    command parses them; a ValueError names a flag it does not know or one of ``own``, which the
    calling script sets itself (``hint`` says with which of its options)."""
    import shlex

    from dtoc_rl.cli.dataclass_args import add_dataclass_arguments, given_fields
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    if not flags.strip():
        return {}

    class _Parser(argparse.ArgumentParser):
        def error(self, message):  # a one-line ValueError instead of argparse's exit
            raise ValueError(f"--train: {message}")

    ap = _Parser(prog="--train", add_help=False)
    add_dataclass_arguments(ap, LearnedPolicyConfig)
    try:
        words = shlex.split(flags)
    except ValueError as e:  # an unclosed quote
        raise ValueError(f"--train: {e}") from None
    ns = ap.parse_args(words)
    given = given_fields(ns)
    theirs = sorted(given & set(own))
    if theirs:
        raise ValueError(f"--train: {', '.join(theirs)} is set by this script ({hint})")
    settings = {k: getattr(ns, k) for k in sorted(given)}
    try:
        LearnedPolicyConfig(**settings)  # a bad value of a field fails here, before any fold trains
    except ValueError as e:
        raise ValueError(f"--train: {e}") from None
    return settings


def _write(path: Path, result: dict) -> None:
    from dtoc_rl.data.paths import write_text_atomic

    # through a .partial file: a run stopped mid-write never leaves a cut lofo.json
    write_text_atomic(path, [json.dumps(finite_json(result), indent=1, default=str)])


def _finite(x):
    return x if isinstance(x, int | float) and math.isfinite(x) else None


def _label(policy: str, ckpt: str) -> str:
    if policy.startswith(f"learned:path={ckpt}"):
        rest = policy[len(f"learned:path={ckpt}") :]
        return "learned (stored t)" if not rest else f"learned t={rest.split('=', 1)[1]}"
    return policy


def table(result: dict) -> str:
    """The result as a Markdown table: one row per left-out family (or source) and policy."""
    from dtoc_rl.cli.evaluate import beats_text

    by = result["args"].get("by", "family")
    lines = [
        f"| left-out {by} (n) | policy | $ saved (95% CI) | misses /100 steps | of oracle's savings |",
        "|---|---|---|---:|---:|",
    ]
    multi = len({fold.get("seed") for fold in result["folds"]}) > 1

    def fold_name(fold: dict) -> str:
        name = fold.get("left_out", fold.get("family"))
        return f"{name}, seed {fold['seed']}" if multi else name

    for fold in result["folds"]:
        name = fold_name(fold)
        for r in fold["rows"]:
            frac = _finite(r["oracle_fraction"])
            lines.append(
                f"| {name} ({r['n']}) | {_label(r['policy'], fold['checkpoint'])} | "
                f"{100 * r['savings']:+.1f}% [{100 * r['savings_lo']:+.1f}, {100 * r['savings_hi']:+.1f}] | "
                f"{r['misses_per_100']:.2f} | {'—' if frac is None else f'{100 * frac:.0f}%'} |"
            )
    lines += ["", f"| left-out {by} | best learned at <= budget | $ saved (95% CI) | misses | of oracle | "
              "CI hi >= 0 | best rule at <= misses | beats every rule at its misses | train s | eval s |",
              "|---|---|---|---:|---:|---|---|---|---:|---:|"]  # fmt: skip
    for fold in result["folds"]:
        name = fold_name(fold)
        for d in fold["done_when"]:
            if d["policy"] is None:
                why = "not judged: the oracle failed" if d.get("oracle_failed") else "none within budget"
                lines.append(f"| {name} | {why} | | | | no | | no | "
                             f"{fold['train_seconds']:.1f} | {fold['eval_seconds']:.1f} |")  # fmt: skip
                continue
            frac = _finite(d["oracle_fraction"])
            rule = d["best_rule"] or "—"
            if d["best_rule"]:
                rule += f" {100 * d['best_rule_savings']:+.1f}% ({d['best_rule_misses_per_100']:.2f})"
            lines.append(
                f"| {name} | {_label(d['policy'], fold['checkpoint'])} | "
                f"{100 * d['savings']:+.1f}% [{100 * d['savings_lo']:+.1f}, {100 * d['savings_hi']:+.1f}] | "
                f"{d['misses_per_100']:.2f} | {'—' if frac is None else f'{100 * frac:.0f}%'} | "
                f"{ {True: 'yes', False: 'no', None: '—'}[d['no_loss']] } | {rule} | "
                f"{beats_text(d)} | {fold['train_seconds']:.1f} | {fold['eval_seconds']:.1f} |"
            )
    spread = [o for o in result.get("over_seeds", []) if len(o["seeds"]) > 1]
    if spread:
        lines += ["", f"| left-out {by} | seeds | best share of the oracle within the budget, per seed | "
                  "mean | range |", "|---|---|---|---:|---|"]  # fmt: skip
        pct = lambda x: "—" if x is None else f"{100 * x:.0f}%"  # noqa: E731
        for o in spread:
            lines.append(
                f"| {o['left_out']} | {', '.join(map(str, o['seeds']))} | "
                f"{', '.join(pct(f) for f in o['best_share'])} | {pct(o['mean'])} | "
                f"{pct(o['min'])} – {pct(o['max'])} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from dtoc_rl.data.dataset import DatasetError

    args = parse(argv)
    try:
        result = leave_one_out(args, log=(lambda *a, **k: None) if args.json else print)
    except (ValueError, FileNotFoundError, DatasetError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except Exception as e:  # a rule naming a damaged checkpoint folder
        from dtoc_rl.policies.learned import CheckpointError

        if not isinstance(e, CheckpointError):
            raise
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(finite_json(result), default=str))
    else:
        print(table(result))
        print(f"\n{len(result['folds'])} folds in {result['seconds']} s; JSON in {args.out}/lofo.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
