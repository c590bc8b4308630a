"""Walk log folders, ingest every recognised unit, label needs, summarise.

A *unit* is a file, or a directory that a directory-format ingester claims
(AutoCodeRover task dirs).  Every unit either yields trajectories or is
skipped with a reason; label and metadata files that ship beside logs are
counted as auxiliary, not skipped.  One bad file never stops the run.
"""

from __future__ import annotations

import fnmatch
import multiprocessing
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtoc_rl.ingest import INGESTERS, IngestError, detect_format
from dtoc_rl.schema import NEED_KINDS, Trajectory

__all__ = ["IngestResult", "Skip", "discover", "ingest_paths", "summarize"]

LOG_SUFFIXES = {".json", ".jsonl", ".traj"}
# Files that travel with logs: label joins, eval reports, run metadata, docs.
AUXILIARY = [
    "*labels*.jsonl", "sessions_index.jsonl", "results.json", "report.json", "final_report.json",
    "stats.json", "meta.json", "cost.json", "*.report.json", "results_summary.*", "swe-bench_*.json",
    "eval_*.json", "metadata.yaml", "args.yaml", "*.yaml", "*.yml", "LICENSE*", "README*", "MANIFEST*",
    "*.csv", "*.txt", "*.diff", "*.patch", "*.log", "*.md", "tool_call_*.json", "agent_proxy_*.json",
    "debug_agent_*.json", "*.py", "*.png",
]  # fmt: skip


@dataclass
class Skip:
    path: str
    reason: str
    format: str | None = None


@dataclass
class IngestResult:
    trajectories: list[Trajectory] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    auxiliary: int = 0
    units: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    formats: Counter = field(default_factory=Counter)


def _is_aux(p: Path) -> bool:
    return any(fnmatch.fnmatch(p.name, pat) for pat in AUXILIARY)


def _dir_unit(d: Path) -> bool:
    return any(ing.wants_dirs and ing.detect(d, "") for ing in INGESTERS)


def discover(paths: Iterable[str | Path]) -> Iterator[tuple[Path, bool, Path]]:
    """Yield ``(unit, is_candidate, root)``; non-candidates are auxiliary files."""
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"no such file or folder: {root}")
        if root.is_file():
            yield root, True, root  # named explicitly: always tried, never auxiliary
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            dirnames[:] = sorted(x for x in dirnames if not x.startswith("."))
            if _dir_unit(d):
                dirnames[:] = []
                yield d, True, root
                continue
            for name in sorted(filenames):
                p = d / name
                if name.startswith("."):
                    continue
                if name.endswith("_RESPONSE.md"):
                    yield p, True, root  # Claude Code stream-json wrapped in markdown
                elif p.suffix in LOG_SUFFIXES and not _is_aux(p):
                    yield p, True, root
                else:
                    yield p, False, root


def _unit_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _process(unit: Path, label: bool) -> tuple[list[Trajectory], list[Skip], str | None, int]:
    size = _unit_size(unit)
    try:
        ing = detect_format(unit)
    except OSError as e:
        return [], [Skip(str(unit), f"cannot read: {e.strerror or e}")], None, size
    if ing is None:
        return [], [Skip(str(unit), "unknown format: no ingester recognises this file")], None, size
    trajs: list[Trajectory] = []
    skips: list[Skip] = []
    try:
        for t in ing.parse(unit):
            if not t.steps:
                skips.append(Skip(f"{unit}#{t.traj_id}", "empty trajectory: no steps", ing.name))
                continue
            trajs.append(t)
    except IngestError as e:
        skips.append(Skip(str(unit), e.reason, ing.name))
    except (RecursionError, MemoryError) as e:
        skips.append(Skip(str(unit), f"too large or deep to parse: {type(e).__name__}", ing.name))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # A malformed file reached code that expected a well-formed one: say where.
        skips.append(Skip(str(unit), f"wrong types or missing fields: {type(e).__name__}: {e}", ing.name))
    if label and trajs:
        from dtoc_rl.labels import label_trajectory

        for t in trajs:
            label_trajectory(t)
    return trajs, skips, ing.name, size


def _process_star(args: tuple[Path, bool]):
    return _process(*args)


def ingest_paths(
    paths: Iterable[str | Path],
    *,
    label: bool = True,
    workers: int = 1,
    progress: bool = True,
) -> IngestResult:
    """Ingest every unit under ``paths``; never raises for a bad unit."""
    t0 = time.perf_counter()
    res = IngestResult()
    units = []
    rel: dict[Path, str] = {}
    for unit, candidate, root in discover(paths):
        if candidate:
            units.append(unit)
            # Portable provenance: the path below the folder that was named, led by its name.
            rel[unit] = unit.resolve().relative_to(root.parent.resolve()).as_posix()
        else:
            res.auxiliary += 1
    res.units = len(units)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(units), unit="file", desc="ingest", disable=not progress, dynamic_ncols=True)
    seen: dict[str, str] = {}

    def take(out, unit: Path) -> None:
        trajs, skips, fmt, size = out
        res.bytes_read += size
        res.skipped.extend(skips)
        for t in trajs:
            if t.traj_id in seen:
                res.skipped.append(
                    Skip(f"{unit}#{t.traj_id}", f"duplicate trajectory id (first in {seen[t.traj_id]})", fmt)
                )
                continue
            seen[t.traj_id] = str(unit)
            t.source_path = rel[unit]
            res.trajectories.append(t)
            res.formats[fmt] += 1
        bar.update(1)
        bar.set_postfix(trajs=len(res.trajectories), skipped=len(res.skipped), refresh=False)

    if workers > 1 and len(units) > 1:
        # forkserver, not fork: forking a process that has loaded torch can deadlock.
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("forkserver")
        ) as pool:
            for unit, out in zip(units, pool.map(_process_star, [(u, label) for u in units], chunksize=4)):
                take(out, unit)
    else:
        for unit in units:
            take(_process(unit, label), unit)
    bar.close()
    res.seconds = time.perf_counter() - t0
    return res


def summarize(trajs: list[Trajectory], res: IngestResult | None = None) -> dict[str, Any]:
    """The summary table as data: per source and model family, then totals."""
    groups: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {
            "trajectories": 0, "steps": 0, "tool_steps": 0, "output_tokens": 0,
            "success_true": 0, "success_false": 0, "success_null": 0,
            **{f"needs_{k}": 0 for k in NEED_KINDS},
            "masked_steps": 0, "context_events": 0,
        }
    )  # fmt: skip
    for t in trajs:
        g = groups[(t.source, t.model_family)]
        g["trajectories"] += 1
        g["steps"] += len(t.steps)
        g["success_" + {True: "true", False: "false", None: "null"}[t.success]] += 1
        for s in t.steps:
            g["tool_steps"] += s.tool_name is not None
            g["output_tokens"] += s.output_tokens
            g["masked_steps"] += bool(s.masked_before)
            g["context_events"] += len(s.events)
            for n in s.needs:
                key = f"needs_{n.kind}"
                if key in g:
                    g[key] += 1
    rows = [{"source": s, "model_family": m, **v} for (s, m), v in sorted(groups.items())]
    total = {
        k: sum(r[k] for r in rows) for k in (rows[0] if rows else {}) if k not in ("source", "model_family")
    }
    out: dict[str, Any] = {"groups": rows, "total": total}
    if res is not None:
        reasons = Counter(s.reason.split(":")[0] for s in res.skipped)
        out.update(
            {
                "units": res.units,
                "auxiliary_files": res.auxiliary,
                "skipped": [s.__dict__ for s in res.skipped],
                "skip_reasons": dict(reasons),
                "formats": dict(res.formats),
                "seconds": round(res.seconds, 3),
                "megabytes": round(res.bytes_read / 1e6, 2),
                "trajectories_per_second": round(len(trajs) / res.seconds, 1) if res.seconds else None,
                "megabytes_per_second": round(res.bytes_read / 1e6 / res.seconds, 2) if res.seconds else None,
            }
        )
    return out
