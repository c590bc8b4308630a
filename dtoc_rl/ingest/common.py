"""Helpers shared by the ingesters: label files, output capping, finalising."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from dtoc_rl.ingest.base import MAX_OUTPUT_CHARS
from dtoc_rl.schema import Step, Trajectory

__all__ = ["cap_output", "finalize", "find_upwards", "load_selected_labels"]


def cap_output(text: str | None) -> str | None:
    """Keep head and tail of an output over ``MAX_OUTPUT_CHARS`` with a marker."""
    if text is None or len(text) <= MAX_OUTPUT_CHARS:
        return text
    half = MAX_OUTPUT_CHARS // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[dtoc-rl: {cut} characters cut at ingest]\n{text[-half:]}"


def find_upwards(start: Path, name: str, levels: int = 4) -> Path | None:
    """The nearest file called ``name`` in ``start``'s folder or its parents."""
    here = start if start.is_dir() else start.parent
    for _ in range(levels + 1):
        cand = here / name
        if cand.is_file():
            return cand
        if here.parent == here:
            break
        here = here.parent
    return None


@lru_cache(maxsize=64)
def _read_jsonl(path: str, mtime: float) -> tuple[dict, ...]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return tuple(rows)


def load_selected_labels(start: Path) -> tuple[dict, ...]:
    """Rows of the nearest ``selected_labels.jsonl`` (the MANIFEST's derived join), or ()."""
    for sub in ("labels/selected_labels.jsonl", "selected_labels.jsonl"):
        here = start if start.is_dir() else start.parent
        for _ in range(4):
            cand = here / sub
            if cand.is_file():
                return _read_jsonl(str(cand), cand.stat().st_mtime)
            here = here.parent
    return ()


def finalize(traj: Trajectory) -> Trajectory:
    """Renumber steps, fill default token estimates; shared by every ingester."""
    for i, step in enumerate(traj.steps):
        step.index = i
        step.output_tokens = math.ceil(len(step.output) / 4) if step.output else 0
    return traj


def new_step(**kw) -> Step:
    return Step(index=0, **kw)
