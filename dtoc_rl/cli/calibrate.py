"""``dtoc-rl calibrate DATASET``: check the need labels and the offline miss model
against logs that really were masked.

Needs trajectories whose log records which outputs were hidden from each step
(``masked_before``), e.g. SWE-agent 1.x runs with ``LastNObservations``.  It
reports, with 95% cluster-bootstrap intervals over trajectories (and Wilson
intervals that ignore clustering):

* the per-step hazard of re-accessing an output while it is hidden against
  while it is visible, also for resources that did not change;
* needs on hidden outputs (provenance, edit or reference: the action relied
  on text the agent could not see), and how many of those actions failed;
* the lift: P(re-read within k steps | such a need on a hidden output) /
  P(re-read within k steps | no such need), also with only the need kinds the
  simulator charges (provenance, reference);
* the miss model fitted from them (P(re-read | need on a hidden output), the
  delay, the absorbed fraction);
* the simulator's prediction on the same trajectories: POLICY (default: the
  SWE-agent window, last_n:n=5,polling=1) in ReplayEnv with miss=reread and
  with miss=calibrated at the fitted probability, against the observed re-reads
  per 100 steps, and how often the policy's schedule equals the logged one.

See dtoc_rl.sim.calibration for the exact definitions and docs/validity.md.

With --cost, it checks the cost model instead (the bill check, dtoc_rl.sim.billcheck): every logged
model call of every trajectory whose log keeps per-call usage is re-priced from the context the
log says was sent, and predicted input tokens, cached tokens and dollars are compared with the
logged ones, per source and per call.  The provider's prompt size comes from the text counted
with o200k and a size model per source and model family: the stored one (dtoc_rl.sim.calibrated,
fitted on half of ../shared/traces), else the stored ratio of the same model family, else one
fitted on half of these logs (--fit: always); the output says which, and gives the errors on the
fit half and on the held-out half.  For best-effort caches a hit rate is fitted per source.
Target: per source, total dollars within 5% and the median per-call input error within 5%.
See docs/billcheck.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from dtoc_rl.cli.common import at_least, emit_json, fail, warn, write_text_atomic

DEFAULT_POLICY = "last_n:n=5,polling=1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("dataset", type=Path, help="a dataset folder written by `dtoc-rl ingest`")
    p.add_argument("--k", type=at_least(1), default=3,
                   help="steps after a need within which a re-read recovers it (default 3)")  # fmt: skip
    p.add_argument("--policy", default=DEFAULT_POLICY, help="the masking the logs ran with, as a policy spec")
    p.add_argument("--bootstrap", type=at_least(1), default=2000,
                   help="bootstrap resamples for the 95%% CIs (default 2000)")  # fmt: skip
    p.add_argument("--seeds", type=at_least(1), default=20,
                   help="seeds of the simulator's calibrated (random) mode (default 20)")  # fmt: skip
    p.add_argument(
        "--examples", type=at_least(0), default=12, help="needs on hidden outputs to list (default 12)"
    )
    p.add_argument(
        "--control",
        type=Path,
        help="a dataset of runs that never hid outputs (e.g. mini-swe-agent): its re-access hazard by age "
        "is the baseline for hidden outputs of the same age",
    )
    p.add_argument("--control-source", nargs="+", help="only these sources of the control dataset")
    p.add_argument("--plot", type=Path, help="write the calibration (or, with --cost, bill check) plot here")
    p.add_argument(
        "--cost",
        action="store_true",
        help="check the cost model against the logs' per-call usage (the bill check) instead",
    )
    fit = p.add_mutually_exclusive_group()
    fit.add_argument(
        "--no-fit",
        action="store_true",
        help="--cost: no size model or fitted hit rate (estimator tokens, the configured cache rules)",
    )
    fit.add_argument(
        "--fit",
        action="store_true",
        help="--cost: fit every source's size model on the fit half of these logs, ignoring the stored "
        "ones (default: the stored model of the source and model family, dtoc_rl.sim.calibrated."
        "PROMPT_SIZE_FACTORS, else fitted here; the output says which)",
    )
    p.add_argument(
        "--estimator",
        default=None,
        help="--cost: what the logged text is counted with (default o200k_base: it follows other "
        "providers' tokenizers far better than characters; stored size models hold for it only)",
    )
    p.add_argument("--calls-out", type=Path, help="--cost: also write every checked call as a JSON line here")
    p.add_argument(
        "--prices-out",
        type=Path,
        help="--cost: write a prices file (JSON) with the cache hit rate each model's "
        "logs show (logged / rule-allowed cached tokens, fit half; an entry {model: {cache_hit_rate}} per "
        "name as logged): give it to evaluate or train as --prices, so that your runs are billed as your "
        "provider billed these logs (a best-effort cache such as OpenAI's or Gemini's may read far less "
        "than its rules allow); serve and proxy keep it in their logs for evaluate",
    )
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (calibrate draws none; taken so that every command accepts the same flag)",
    )


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.data.dataset import DatasetError, load_trajectories
    from dtoc_rl.sim.calibration import NoMaskedData, age_hazard, calibrate

    cost_only = {"--fit": args.fit, "--no-fit": args.no_fit, "--estimator": args.estimator is not None,
                 "--calls-out": args.calls_out is not None,
                 "--prices-out": args.prices_out is not None}  # fmt: skip
    if not args.cost and (given := [flag for flag, on in cost_only.items() if on]):
        return fail(f"{', '.join(given)}: the bill check's options; add --cost (or leave them out)")
    if args.no_fit and args.prices_out is not None:  # the hit rates it writes are fitted ones
        return fail("--prices-out: writes the hit rates the bill check fits; leave out --no-fit")
    try:
        trajs = load_trajectories(args.dataset)
    except DatasetError as e:
        return fail(str(e))
    if args.cost:
        return run_bill_check(args, trajs)
    try:
        cal = calibrate(trajs, k=args.k, n_boot=args.bootstrap)
    except NoMaskedData as e:
        return fail(f"{args.dataset}: {e}")
    try:
        sim = simulate(trajs, cal, args.policy, n_boot=args.bootstrap, seeds=args.seeds)
    except ValueError as e:  # a bad policy spec
        return fail(str(e))
    out: dict[str, Any] = {"dataset": str(args.dataset), **cal.to_dict(), "simulator": sim}
    out["comparison"] = comparison(cal, sim)
    if args.control:
        try:
            ctrl = [
                t
                for t in load_trajectories(args.control)
                if not any(s.masked_before for s in t.steps)
                and (not args.control_source or t.source in args.control_source)
            ]
        except DatasetError as e:
            return fail(f"--control: {e}")
        if not ctrl:
            return fail(
                f"--control: no trajectory without masking in {args.control} for {args.control_source}"
            )
        out["control"] = {
            "dataset": str(args.control),
            "sources": sorted({t.source for t in ctrl}),
            "trajectories": len(ctrl),
            "steps": sum(len(t.steps) for t in ctrl),
            "by_age": age_hazard(ctrl, n_boot=args.bootstrap),
        }
    out["examples"] = out["examples"][: args.examples]
    if args.plot:
        out["plot"] = str(plot_calibration(out, args.plot))
    if args.json:
        emit_json(out)  # strict JSON: NaN and infinities become null
    else:
        print_report(out)
    return 0


# -- the simulator on the same trajectories -------------------------------------------------------


def simulate(trajs, cal, policy_spec: str, *, n_boot: int, seeds: int) -> dict[str, Any]:
    """Run ``policy_spec`` in ReplayEnv over the calibrated trajectories (reread, per kind, calibrated)."""
    import numpy as np

    from dtoc_rl.data.schema import NEED_KINDS
    from dtoc_rl.engine.contract import reset_policy
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.sim.calibration import ratio_ci
    from dtoc_rl.sim.episode import compile_episode
    from dtoc_rl.sim.simulator import MISS_KINDS, CostConfig

    policy = make_policy(policy_spec)
    by_id = {t.traj_id: t for t in trajs}
    sel = [by_id[i] for i in cal.traj_ids]
    steps = np.array([len(t.steps) for t in sel], float)
    p_fit = cal.miss_model["reread_prob"]["rate"]
    p_fit = 1.0 if not math.isfinite(p_fit) else float(p_fit)
    kept = [compile_episode(t, keep_unseen_needs=True) for t in sel]

    def run(cfg: CostConfig, n_seeds: int = 1) -> dict[str, np.ndarray]:
        # the needs on outputs the masked calls were sent without are what this compares with the re-reads
        # the agents made; every other replay drops them (the log holds the re-reads already)
        env = ReplayEnv(trajectories=kept, cost_config=cfg, max_items=_slots(sel))
        ids = [e.traj_id for e in env.episodes]
        got = {k: np.zeros(len(sel)) for k in ("misses", "rereads", "absorbed")}
        for seed in range(n_seeds):
            for idx, tid in enumerate(ids):
                obs, info = env.reset(seed=seed, options={"index": idx})
                reset_policy(policy, info)
                done = False
                while not done:
                    obs, _, done, _, info = env.step(policy.act(obs, info))
                j = cal.traj_ids.index(tid)
                for k in got:
                    got[k][j] += info["totals"][k] / n_seeds
        return got

    def per100(x: np.ndarray) -> dict[str, float]:
        point, lo, hi = ratio_ci(x, steps, scale=100.0, n_boot=n_boot)
        return {"count": float(x.sum()), "per_100": point, "lo": lo, "hi": hi}

    reread = run(CostConfig(miss="reread"))
    calibrated = run(CostConfig(miss="calibrated", reread_prob=p_fit), n_seeds=max(1, seeds))
    by_kind = {
        kind: per100(run(CostConfig(miss="reread", need_kinds=(kind,)))["misses"]) for kind in NEED_KINDS
    }
    # edit needs are not charged by default (MISS_KINDS); what charging them too would predict
    with_edit = run(CostConfig(miss="reread", need_kinds=(*MISS_KINDS, "edit")))
    return {
        "policy": policy_spec,
        "steps": float(steps.sum()),
        "schedule_agreement": schedule_agreement(sel, policy),
        "reread": {"misses": per100(reread["misses"]), "rereads": per100(reread["rereads"])},
        "reread_with_edit": {"rereads": per100(with_edit["rereads"])},
        "misses_by_kind": by_kind,
        "calibrated": {
            "reread_prob": p_fit,
            "seeds": max(1, seeds),
            "misses": per100(calibrated["misses"]),
            "rereads": per100(calibrated["rereads"]),
            "absorbed": per100(calibrated["absorbed"]),
        },
    }


def _slots(trajs) -> int:
    """Env slots for every output of the longest trajectory, so the policy sees (and masks) them all."""
    return max([128, *(len(t.steps) for t in trajs)])


def schedule_agreement(trajs, policy) -> dict[str, float]:
    """Steps whose hidden set under ``policy`` (no misses) equals the logged ``masked_before``."""
    import numpy as np

    from dtoc_rl.engine.contract import reset_policy
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.sim.simulator import CostConfig

    env = ReplayEnv(trajectories=trajs, cost_config=CostConfig(need_kinds=()), max_items=_slots(trajs))
    by_id = {t.traj_id: t for t in trajs}
    same = known = 0
    for idx, ep in enumerate(env.episodes):
        t = by_id[ep.traj_id]
        obs, info = env.reset(options={"index": idx})
        reset_policy(policy, info)
        k = 0
        done = False
        while True:
            logged = t.steps[k].masked_before
            if logged is not None:
                # before call k the stored outputs are 0..k-1; hidden_mask() is taken right after call k,
                # when output k is stored visible, so it is the hidden set call k saw
                hidden = np.flatnonzero(env.sim.hidden_mask()).tolist()
                known += 1
                same += hidden == sorted(logged)
            if done:
                break
            obs, _, done, _, info = env.step(policy.act(obs, info))
            k += 1
    return {"steps": known, "equal": same, "fraction": same / known if known else math.nan}


def comparison(cal, sim) -> list[dict[str, Any]]:
    """Predicted against observed, per 100 steps (rows of the calibration table and plot)."""
    rows = [
        ("simulator: misses (miss=reread)", sim["reread"]["misses"]),
        ("simulator: re-reads (miss=reread)", sim["reread"]["rereads"]),
        (f"simulator: re-reads (calibrated, p={sim['calibrated']['reread_prob']:.2f})",
         sim["calibrated"]["rereads"]),
        ("simulator: re-reads (miss=reread, edit needs charged too)", sim["reread_with_edit"]["rereads"]),
    ]  # fmt: skip
    out = [{"row": name, "kind": "predicted", **d} for name, d in rows]
    for key, name in (
        ("rereads_masked_unmodified", "observed: re-reads of hidden unchanged outputs"),
        ("miss_episodes", "observed: needs on hidden outputs (miss episodes)"),
        ("reaccess_needs_masked", "observed: re-accesses of hidden outputs (incl. changed)"),
    ):
        r = cal.per_100[key]
        out.append({"row": name, "kind": "observed", "count": r.k, "per_100": r.rate, "lo": r.lo, "hi": r.hi})
    return out


# -- output -----------------------------------------------------------------------------------------


def _pct(r: dict[str, float]) -> str:
    return f"{100 * r['rate']:.2f}% [{100 * r['lo']:.2f}, {100 * r['hi']:.2f}]"


def _ci(v: float, lo: float, hi: float, fmt: str = "{:.2f}") -> str:
    f = fmt.format
    if not math.isfinite(v):
        return "—"
    return f"{f(v)} [{f(lo) if math.isfinite(lo) else '?'}, {f(hi) if math.isfinite(hi) else '?'}]"


def print_report(out: dict[str, Any], console=None) -> None:
    from rich.table import Table

    from dtoc_rl.cli.tables import wide_console

    console = console or wide_console()
    rates, ratios = out["rates"], out["ratios"]
    console.print(
        f"[bold]{out['dataset']}[/bold]: {out['trajectories']} trajectories with a logged masking schedule, "
        f"{out['steps']} steps; 95% cluster-bootstrap CIs over trajectories ({out['n_boot']} resamples), "
        f"k = {out['k']}"
    )
    t = Table(title="behaviour under logged masking (per (output, later step) pair)", title_justify="left")
    for c in ("statistic", "hidden", "visible", "hidden / visible"):
        t.add_column(c, justify="left" if c == "statistic" else "right")
    for name, key, rk in (
        ("first re-access hazard", "reaccess", "reaccess_masked_vs_visible"),
        ("  … of unchanged resources (re-read)", "reread", "reread_masked_vs_visible"),
        ("use need (provenance, edit, reference)", "need", "need_masked_vs_visible"),
    ):
        m, v, r = rates[f"{key}_masked"], rates[f"{key}_visible"], ratios[rk]
        t.add_row(
            name,
            f"{m['k']:.0f}/{m['n']:.0f} = {_pct(m)}",
            f"{v['k']:.0f}/{v['n']:.0f} = {_pct(v)}",
            _ci(r["ratio"], r["lo"], r["hi"]),
        )
    console.print(t)
    f = rates["need_masked_failed"]
    console.print(f"use needs on hidden outputs whose action failed: {f['k']:.0f}/{f['n']:.0f}")
    for label, key, suffix in (
        ("a use need", "lift", "need"),
        ("a provenance/reference need", "lift_miss_kinds", "miss_kind_need"),
    ):
        a, b, lift = rates[f"reread_after_{suffix}"], rates[f"reread_without_{suffix}"], ratios[key]
        console.print(
            f"lift: P(re-read ≤ {out['k']} steps | {label} on the hidden output) = {a['k']:.0f}/{a['n']:.0f} "
            f"= {_pct(a)}, without {b['k']:.0f}/{b['n']:.0f} = {_pct(b)}; "
            f"[bold]lift {_ci(lift['ratio'], lift['lo'], lift['hi'])}[/bold]"
            + (f", {100 * (1 - lift['p_le_1']):.0f}% of defined resamples > 1" if "p_le_1" in lift else "")
        )
    mm = out["miss_model"]
    pr, ab = mm["reread_prob"], mm["absorbed_fraction"]
    console.print(
        f"miss model: {mm['episodes']} needs on hidden outputs; P(re-read) = {pr['k']:.0f}/{pr['n']:.0f} = "
        f"{_ci(pr['rate'], pr['lo'], pr['hi'])} "
        f"(Wilson {_ci(pr['rate'], pr['wilson_lo'], pr['wilson_hi'])}); "
        f"absorbed {_ci(ab['rate'], ab['lo'], ab['hi'])}; delay histogram {mm['delay_hist']} "
        f"(0 = re-read before use); {mm['censored']} absorbed within k steps of the log's end"
    )
    sim = out["simulator"]
    ag = sim["schedule_agreement"]
    t = Table(
        title=f"predicted ({sim['policy']} in ReplayEnv) against observed, per 100 steps",
        title_justify="left",
    )
    for c in ("", "count", "per 100 steps (95% CI)"):
        t.add_column(c, justify="left" if not c else "right")
    for r in out["comparison"]:
        t.add_row(r["row"], f"{r['count']:.1f}", _ci(r["per_100"], r["lo"], r["hi"]))
    console.print(t)
    kinds = ", ".join(f"{k} {v['per_100']:.2f}" for k, v in sim["misses_by_kind"].items())
    console.print(
        f"simulated misses per 100 steps by need kind: {kinds}; the policy's schedule equals the logged one "
        f"on {ag['equal']}/{ag['steps']} steps"
    )
    if "control" in out:
        c = out["control"]
        ctrl = {r["age"]: r for r in c["by_age"]}
        t = Table(
            title=f"first re-access hazard by age: hidden outputs against the control ({c['trajectories']} "
            f"unmasked trajectories of {', '.join(c['sources'])})",
            title_justify="left",
        )
        for col in ("age", "this dataset", "status", "control (never hidden)"):
            t.add_column(col, justify="left" if col in ("age", "status") else "right")
        for r in out["by_age"]:
            cr = ctrl.get(r["age"])
            status = "hidden" if r["status"] == "masked" else r["status"]
            t.add_row(r["age"], f"{r['k']:.0f}/{r['n']:.0f} = {_pct(r)}", status,
                      f"{cr['k']:.0f}/{cr['n']:.0f} = {_pct(cr)}" if cr else "—")  # fmt: skip
        console.print(t)
    if out["examples"]:
        t = Table(title="use needs on hidden outputs", title_justify="left")
        for c in ("trajectory", "step", "needs", "age", "failed", "evidence"):
            t.add_column(c)
        for e in out["examples"]:
            t.add_row(e["traj_id"].rsplit("/", 1)[-1], str(e["step"]), str(e["needs"]), str(e["age"]),
                      "yes" if e["failed"] else "", repr(e["evidence"][:70]))  # fmt: skip
        console.print(t)
    if "plot" in out:
        console.print(f"plot: {out['plot']}")


def plot_calibration(out: dict[str, Any], path: Path) -> Path:
    """Three panels: predicted vs observed per 100 steps; hazard by age; hidden vs visible rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 5.2), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    rows = out["comparison"]
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows):
        color = "tab:red" if r["kind"] == "predicted" else "tab:blue"
        lo = r["per_100"] - r["lo"] if math.isfinite(r["lo"]) else 0
        hi = r["hi"] - r["per_100"] if math.isfinite(r["hi"]) else 0
        ax[0].barh(y, r["per_100"], color=color, alpha=0.75)
        ax[0].errorbar(r["per_100"], y, xerr=[[lo], [hi]], color="k", capsize=3)
    ax[0].set_yticks(ys, [r["row"] for r in rows], fontsize=8)
    ax[0].set_xlabel("per 100 steps (95% bootstrap CI over trajectories)")
    ax[0].set_title(f"simulator ({out['simulator']['policy']}) vs. real masked runs", fontsize=10)

    for status, color in (("visible", "tab:green"), ("masked", "tab:orange")):
        rs = [r for r in out["by_age"] if r["status"] == status]
        xs = [r["age"] for r in rs]
        ax[1].errorbar(
            xs,
            [100 * r["rate"] for r in rs],
            yerr=[[100 * (r["rate"] - r["lo"]) for r in rs], [100 * (r["hi"] - r["rate"]) for r in rs]],
            marker="o",
            capsize=3,
            color=color,
            label="hidden" if status == "masked" else "visible",
            linestyle="",
        )
    if "control" in out:
        rs = out["control"]["by_age"]
        ax[1].errorbar(
            [r["age"] for r in rs],
            [100 * r["rate"] for r in rs],
            yerr=[[100 * (r["rate"] - r["lo"]) for r in rs], [100 * (r["hi"] - r["rate"]) for r in rs]],
            marker="s",
            capsize=3,
            color="grey",
            alpha=0.8,
            label=f"control, never hidden ({', '.join(out['control']['sources'])})",
            linestyle=":",
        )
    top = max([100 * r["hi"] for r in out["by_age"] if math.isfinite(r["hi"])] or [1.0])
    ax[1].set_ylim(0, 1.45 * top)
    ax[1].set_xlabel("age of the output (steps)")
    ax[1].set_ylabel("first re-access per (output, step), %")
    ax[1].set_title("re-access hazard by age", fontsize=10)
    ax[1].legend(fontsize=7, loc="upper right")

    names = [
        ("reaccess", "re-access"),
        ("reread", "re-read\n(unchanged)"),
        ("need", "use need"),
    ]
    for off, (status, color) in ((-0.18, ("visible", "tab:green")), (0.18, ("masked", "tab:orange"))):
        vals = [out["rates"][f"{k}_{status}"] for k, _ in names]
        xs = [i + off for i in range(len(names))]
        ax[2].bar(xs, [100 * v["rate"] for v in vals], width=0.36, color=color, alpha=0.75,
                  label="hidden" if status == "masked" else "visible")  # fmt: skip
        ax[2].errorbar(
            xs,
            [100 * v["rate"] for v in vals],
            yerr=[[100 * (v["rate"] - v["lo"]) for v in vals], [100 * (v["hi"] - v["rate"]) for v in vals]],
            fmt="none",
            color="k",
            capsize=3,
        )
    ax[2].set_xticks(range(len(names)), [n for _, n in names], fontsize=8)
    ax[2].set_ylabel("events per (output, later step) pair, %")
    lift = out["ratios"]["lift"]
    ax[2].set_title(
        f"hidden vs. visible; lift {_ci(lift['ratio'], lift['lo'], lift['hi'], '{:.1f}')}", fontsize=10
    )
    ax[2].legend(fontsize=8)
    fig.suptitle(
        f"{out['trajectories']} masked trajectories, {out['steps']} steps ({out['dataset']})", fontsize=10
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the bill check ------------------------------------------------------------------------------


def run_bill_check(args: argparse.Namespace, trajs) -> int:
    from dtoc_rl.sim.billcheck import (
        bill_check,
        fitted_prices,
        in_sample,
        plot_bill_check,
        targets_met,
        write_calls,
    )
    from dtoc_rl.sim.pricing import price_entries

    size = "none" if args.no_fit else "fit" if args.fit else "stored"
    try:
        res = bill_check(trajs, args.estimator, size=size, fit_hit_rate=not args.no_fit)
    except (ValueError, OSError) as e:  # a bad --estimator
        return fail(f"--estimator: {e}")
    if not res["sources"]:
        return fail(
            f"{args.dataset}: no trajectory with logged per-call usage (Step.usage); nothing to check"
        )
    out: dict[str, Any] = {
        "dataset": str(args.dataset),
        "sources": res["sources"],
        "targets_met": targets_met(res),
        # sources with a size model fitted on all of their calls: their errors are in-sample
        "in_sample": sorted(src for src, r in res["sources"].items() if in_sample(r)),
    }
    if args.plot:
        out["plot"] = plot_bill_check(res, args.plot)
    if args.calls_out:
        out["calls_out"] = {"path": str(args.calls_out), "calls": write_calls(res, args.calls_out)}
    if args.prices_out:
        table, unknown = fitted_prices(res)
        if not table:
            return fail("--prices-out: no model of these logs has logged cached tokens and a cache discount")
        if unknown:
            warn(
                f"--prices-out: no list price for {', '.join(map(repr, unknown[:5]))}"
                f"{f' and {len(unknown) - 5} more' if len(unknown) > 5 else ''}: their entries give the hit "
                "rate only, so they are billed at a fallback's prices until you add input and output"
            )
        entries = price_entries(table)
        write_text_atomic(args.prices_out, json.dumps(entries, indent=1) + "\n")
        out["prices_out"] = {"path": str(args.prices_out), "models": entries}
    for src, r in out["sources"].items():
        # a hair over 1 is the rules' rounding (a provider's caching granularity, a token's framing)
        if r["hit_rate"] is not None and r["hit_rate"] > 1.02:
            warn(
                f"{src}: its logs count {r['hit_rate']:.2f} times the cached tokens the cache rules allow "
                "(hit rate over 1, billed as 1): a cache the rules do not model (a prefix shared across "
                "runs, another cache key) or usage fields that do not mean what their names say"
            )
    if args.json:
        emit_json(out)  # strict JSON: NaN and infinities become null
        return 0
    from rich.table import Table

    from dtoc_rl.cli.tables import wide_console

    tab = Table(title=f"bill check: {args.dataset}")
    cols = ("source", "trajs", "calls", "hit rate", "logged $", "pred $", "$ err %",
            "$ err % (ideal cache)", "cached err %", "per-call in |err| med %", "p90 %",
            "held-out: calls", "$ err %", "per-call med %", "ok")  # fmt: skip
    for c in cols:
        tab.add_column(c)
    for src, r in out["sources"].items():
        e, pc, ho = r["error_pct"], r["per_call_input_error_pct"], r["halves"]["held_out"]
        fmt = lambda x: "-" if x is None or math.isnan(x) else f"{x:+.1f}"  # noqa: E731
        tab.add_row(
            src, str(r["trajectories"]), str(r["calls"]),
            "-" if r["hit_rate"] is None else f"{r['hit_rate']:.3f}",
            f"{r['logged']['dollars']:.2f}", f"{r['predicted']['dollars']:.2f}", fmt(e["dollars"]),
            fmt(e["dollars_ideal_cache"]), fmt(e["cached_tokens"]), f"{pc['median_abs']:.1f}",
            f"{pc['p90_abs']:.1f}", str(ho["calls"]), fmt(ho.get("dollars")),
            "-" if not ho["calls"] else f"{ho['per_call_input_median_abs']:.1f}",
            {True: "met", False: "NOT met", None: "no logged $"}[out["targets_met"][src]]
            + (" (in sample)" if src in out["in_sample"] else ""),
        )  # fmt: skip
    wide_console().print(tab)
    for src, r in out["sources"].items():  # where each prompt-size model comes from
        for fam, m in r["size_models"].items():
            terms = f"base {m['base']:.3f}, text {m['text']:.3f}, outputs {m['outputs']:.3f}, " \
                    f"{m['per_step']:.1f}/step, {m['offset']:.0f}/call"  # fmt: skip
            print(f"size {src}/{fam} ({m['estimator']}): {terms}; {m['origin']}")
        ac = r.get("after_compaction") or {}
        if ac.get("calls"):
            print(f"{src}: {ac['calls']:,} calls of {ac['runs']} runs after a compaction carry what it sent "
                  f"that the log lacks (median {ac['median_tokens']:,.0f} tokens), measured at its first "
                  "call from the logged size")  # fmt: skip
    if args.plot:
        print(f"plot: {out['plot']}")
    if args.prices_out:
        rates = ", ".join(f"{m} {e['cache_hit_rate']:.3f}" for m, e in out["prices_out"]["models"].items())
        print(f"prices with the logs' cache hit rates ({rates}): {args.prices_out} (pass it as --prices)")
    return 0
