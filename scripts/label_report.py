"""Label logged trajectories with hindsight needs and print their statistics per source.

    python -m scripts.label_report PATH... [--json] [--limit N]

Each PATH is a trajectory file or a folder, walked recursively; every file or
folder that :func:`dtoc_rl.ingest.detect_format` recognises is ingested (files
it does not recognise are skipped and counted).  Trajectories are labelled by
:func:`dtoc_rl.labels.label_trajectory` and summarised by
:func:`dtoc_rl.labels.label_stats`, one table row per ``source``, plus the
labelling time per step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from dtoc_rl.cli.common import at_least
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import IngestError, detect_format
from dtoc_rl.labels import label_stats, label_trajectory

SKIP_NAMES = {"selected_labels.jsonl", "sessions_index.jsonl", "MANIFEST.md", "LICENSE", "LICENSE.md"}


def _units(path: Path) -> Iterator[Path]:
    """Files and folders to try, in a stable order (a recognised folder is not descended)."""
    if path.is_file():
        yield path
        return
    if not path.is_dir():
        return
    if detect_format(path) is not None:
        yield path
        return
    for child in sorted(path.iterdir()):
        if child.name.startswith(".") or child.name in SKIP_NAMES:
            continue
        yield from _units(child)


def ingest(paths: list[Path], limit: int | None = None) -> tuple[dict[str, list[Trajectory]], dict]:
    by_source: dict[str, list[Trajectory]] = defaultdict(list)
    skipped = errors = 0
    error_samples: list[str] = []
    for root in paths:
        for unit in _units(root):
            ing = detect_format(unit)
            if ing is None:
                skipped += 1
                continue
            try:
                for traj in ing.parse(unit):
                    if limit is None or len(by_source[traj.source]) < limit:
                        by_source[traj.source].append(traj)
            except (IngestError, ValueError, KeyError, TypeError) as e:
                errors += 1
                if len(error_samples) < 5:
                    error_samples.append(f"{unit}: {e}")
    return by_source, {"skipped": skipped, "errors": errors, "error_samples": error_samples}


def run(paths: list[Path], limit: int | None = None) -> dict:
    by_source, info = ingest(paths, limit)
    report: dict = {"sources": {}, **info}
    for source, trajs in sorted(by_source.items()):
        t0 = time.perf_counter()
        for t in trajs:
            label_trajectory(t)
        dt = time.perf_counter() - t0
        stats = label_stats(trajs)
        n = stats["steps"]
        chars = sum(
            len(s.output or "") + len(s.tool_args) + len(s.assistant_text) for t in trajs for s in t.steps
        )
        stats["label_seconds"] = round(dt, 3)
        stats["us_per_step"] = round(1e6 * dt / n, 1) if n else None
        stats["us_per_kchar"] = round(1e9 * dt / chars, 1) if chars else None
        report["sources"][source] = stats
    return report


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def print_table(report: dict) -> None:
    cols = [
        ("source", 22),
        ("trajs", 5),
        ("steps", 6),
        ("prov", 6),
        ("prov-step%", 10),
        (">10%", 6),
        ("age-med", 7),
        ("reacc", 6),
        ("real", 5),
        ("modif", 5),
        ("antic%", 6),
        ("ref", 4),
        ("edit", 5),
        ("µs/step", 8),
    ]
    print("  ".join(name.rjust(w) if i else name.ljust(w) for i, (name, w) in enumerate(cols)))
    for source, s in report["sources"].items():
        k = s["needs_by_kind"]
        row = [
            source[:22],
            s["trajectories"],
            s["steps"],
            k["provenance"],
            _pct(s["provenance_step_fraction"]),
            _pct(s["provenance_over_10_fraction"]),
            s["age"]["provenance"].get("median", "-"),
            k["reaccess"],
            s["real_rereads"],
            s["modified_rereads"],
            _pct(s["anticipation_rate"]),
            k["reference"],
            k.get("edit", 0),
            s["us_per_step"],
        ]
        print(
            "  ".join(
                str(v).rjust(w) if i else str(v).ljust(w) for i, (v, (_, w)) in enumerate(zip(row, cols))
            )
        )
    print()
    print("provenance age histogram (steps back):")
    for source, s in report["sources"].items():
        hist = "  ".join(f"{b}:{n}" for b, n in s["age_hist"].items())
        print(f"  {source[:22]:22}  {hist}")
    print(f"\nskipped (unrecognised): {report['skipped']}   ingest errors: {report['errors']}")
    for e in report["error_samples"]:
        print(f"  {e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.label_report", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", type=Path, help="log files or folders (e.g. ../shared/traces)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--limit", type=at_least(1), default=None, help="at most N trajectories per source")
    args = p.parse_args(argv)
    missing = [str(x) for x in args.paths if not x.exists()]
    if missing:
        p.error(f"no such file or folder: {', '.join(missing)}")
    report = run(args.paths, args.limit)
    if args.json:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
