"""Console tables shared by ingest and stats."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["print_summary", "wide_console"]

_COLS = [
    ("trajectories", "trajs"),
    ("steps", "steps"),
    ("tool_steps", "tool steps"),
    ("output_tokens", "tool out tok"),
    ("success_true", "✓"),
    ("success_false", "✗"),
    ("success_null", "?"),
    ("needs_provenance", "prov."),
    ("needs_reaccess", "re-acc."),
    ("needs_reference", "ref."),
    ("needs_edit", "edit"),
    ("masked_steps", "masked"),
    # the prompt per model call with every output visible (ceil(len/4) tokens): which regime this is
    ("context_median", "ctx med"),
    ("context_p90", "ctx p90"),
    ("context_max", "ctx max"),
    ("context_last_median", "last call med"),
    ("context_logged_last_median", "logged last med"),
]


LEGEND = (
    "tool out tok: tokens of the tools' outputs (what a policy can hide; not the model's output); "
    "✓ ✗ ?: runs that succeeded, failed, or say not; prov. re-acc. ref. edit: hindsight needs of each kind "
    "(a later call copies from the output, reads its resource again, names its key, or edits the text "
    "it shows); masked: steps the logged harness hid "
    "outputs before; ctx: tokens of the prompt per call with every output visible (median, 90th "
    "percentile, largest; at the last call), logged: as the provider counted it at the last call"
)


def wide_console() -> Console:
    """A console that does not squeeze tables when piped: a file or a pager gets every cell whole (a
    table is as wide as its cells; only a terminal's width cuts it).  No emoji codes: a policy named
    ``module:Boom`` or a path with ``:smile:`` in it is printed as written."""
    return Console(emoji=False) if sys.stdout.isatty() else Console(width=1000, emoji=False)


def _maybe_logs(paths: list[str]) -> list[str]:
    """The files passed over by name that could hold a log all the same (a run's output saved as .log or
    .txt), not a README, a licence, a label file, a picture or a patch."""
    return [p for p in paths if p.rsplit(".", 1)[-1].lower() in ("log", "txt")]


def print_summary(summary: dict[str, Any], title: str, console: Console | None = None) -> None:
    console = console or wide_console()
    table = Table(title=title, show_footer=True, caption=LEGEND, caption_justify="left")
    table.add_column("source", footer="total")
    table.add_column("model family")
    total = summary["total"]
    for key, label in _COLS:
        table.add_column(label, justify="right", footer=f"{total.get(key, 0):,}")
    for g in summary["groups"]:
        table.add_row(g["source"], g["model_family"], *(f"{g[k]:,}" for k, _ in _COLS))
    console.print(table)
    if "units" in summary:
        console.print(
            f"{summary['units']} log files/dirs read ({summary['megabytes']} MB in {summary['seconds']} s, "
            f"{summary['trajectories_per_second']} trajectories/s), "
            f"{summary['auxiliary_files']} label/metadata files beside them."
        )
        if passed := _maybe_logs(summary.get("auxiliary_paths") or []):
            shown = ", ".join(passed[:3]) + (f" and {len(passed) - 3} more" if len(passed) > 3 else "")
            console.print(
                f"passed over by name as notes or metadata: {shown}; a log among them is read when named "
                "on the command line itself, with --format NAME where its format is not detected "
                "(dtoc_rl.ingest.driver.AUXILIARY lists the names passed over)"
            )
        skipped = summary["skipped"]
        if skipped:
            st = Table(title=f"{len(skipped)} skipped", title_justify="left")
            st.add_column("file")
            st.add_column("format")
            st.add_column("reason")
            for s in skipped[:50]:
                st.add_row(s["path"], s["format"] or "—", s["reason"])
            console.print(st)
            if len(skipped) > 50:
                console.print(f"… and {len(skipped) - 50} more (see --json or summary.json)")
        else:
            console.print("nothing skipped.")
