"""Weights & Biases runs for ``dtoc-rl train``, ``evaluate`` and ``demo``.

wandb decides itself whether a run is online or offline (``WANDB_MODE``, ``wandb login`` or
``WANDB_API_KEY``), as it does for any other project: nothing here overrides that.  A run that
cannot start (for example, online with no credentials) is a one-line :class:`WandbError`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "WandbError",
    "add_wandb_arguments",
    "finish_run",
    "log_checkpoint",
    "log_evaluation",
    "start_cli_run",
    "start_run",
    "unused_run_options",
]


class WandbError(Exception):
    """A wandb run could not be started or written."""


def add_wandb_arguments(p: argparse.ArgumentParser, *, switch: bool = True) -> None:
    """``--wandb-name/--wandb-tags/--wandb-group`` (and ``--wandb``/``--wandb-project`` with ``switch``)."""
    g = p.add_argument_group(
        "Weights & Biases", "online or offline as wandb itself decides (WANDB_MODE, `wandb login`)"
    )
    if switch:
        g.add_argument("--wandb", action="store_true", help="log the results and plots as a wandb run")
        g.add_argument("--wandb-project", default="dtoc-rl", help="wandb project (default: dtoc-rl)")
    g.add_argument("--wandb-name", help="wandb run name (default: wandb's generated name)")
    g.add_argument("--wandb-tags", nargs="+", metavar="TAG", help="wandb run tags")
    g.add_argument("--wandb-group", help="wandb run group (e.g. one per sweep or seed set)")


def unused_run_options(args: argparse.Namespace, enabled: bool) -> str | None:
    """The error for run options given without ``--wandb`` (they would be silently dropped), or None."""
    given = [f"--wandb-{k}" for k in ("name", "tags", "group") if getattr(args, f"wandb_{k}", None)]
    if given and not enabled:
        return f"{', '.join(given)} only apply to a wandb run: add --wandb"
    return None


def start_run(
    *,
    project: str,
    name: str | None = None,
    tags: Iterable[str] | None = None,
    group: str | None = None,
    config: dict[str, Any] | None = None,
    job_type: str | None = None,
):
    """``wandb.init`` with the run's name, tags and group; wandb picks the mode."""
    import wandb

    try:
        return wandb.init(
            project=project,
            name=name,
            tags=list(tags) if tags else None,
            group=group,
            config=config,
            job_type=job_type,
        )
    except Exception as e:  # wandb.errors.UsageError (no credentials), CommError, ...
        msg = " ".join(str(e).split()) or type(e).__name__
        raise WandbError(
            f"wandb: cannot start a run: {msg} (`wandb login`, or WANDB_MODE=offline to keep it on disk)"
        ) from e


def start_cli_run(args: argparse.Namespace, job_type: str):
    """:func:`start_run` from a command's ``--wandb-*`` options, its arguments as the run's config."""
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "func"}
    return start_run(
        project=args.wandb_project,
        name=args.wandb_name,
        tags=args.wandb_tags,
        group=args.wandb_group,
        config=config,
        job_type=job_type,
    )


def finish_run(run, exit_code: int = 0) -> None:
    """Close ``run`` (None: nothing to do); a non-zero ``exit_code`` marks it failed."""
    if run is not None:
        run.finish(exit_code=exit_code)


def log_checkpoint(run, folder: str | Path, *, name: str = "policy", metadata: dict | None = None) -> None:
    """The checkpoint folder (model.safetensors + config.json) as a ``model`` artifact."""
    import wandb

    art = wandb.Artifact(name, type="model", metadata=metadata or {})
    art.add_dir(str(folder))
    run.log_artifact(art)


def log_evaluation(
    run,
    rows: Sequence[dict[str, Any]],
    *,
    failed: Sequence[dict[str, Any]] = (),
    plots: Sequence[str | Path] = (),
    files: Sequence[str | Path] = (),
) -> None:
    """The metric rows (and failed runs) as tables, PNG plots as images, every plot and file as an
    ``evaluation`` artifact (PDF and SVG have no wandb image type, the artifact keeps them)."""
    import wandb

    if rows:
        cols = list(rows[0])
        run.log(
            {"evaluation/metrics": wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows])}
        )
        for r in rows:
            if r.get("group_by") == "overall":
                run.summary[f"savings/{r['policy']}"] = r.get("savings")
                run.summary[f"misses_per_100/{r['policy']}"] = r.get("misses_per_100")
    if failed:
        cols = ["policy", "traj_id", "error"]
        run.log(
            {"evaluation/failed_runs": wandb.Table(columns=cols, data=[[f[c] for c in cols] for f in failed])}
        )
    images = {f"plots/{Path(p).stem}": wandb.Image(str(p)) for p in plots if Path(p).suffix == ".png"}
    if images:
        run.log(images)
    kept = [Path(p) for p in [*plots, *files] if Path(p).is_file()]
    if kept:
        art = wandb.Artifact("evaluation", type="evaluation")
        for p in kept:
            art.add_file(str(p))
        run.log_artifact(art)
