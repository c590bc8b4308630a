"""Trajectory datasets on disk: Parquet shards written atomically, and loaders.

A dataset is a folder::

    OUT/
      data-00000-of-00002.parquet   # rows of the canonical schema (dtoc_rl.schema)
      data-00001-of-00002.parquet
      summary.json                  # what `dtoc-rl ingest` reported, incl. skips
      COMPLETE                      # written last: a folder without it is not a dataset

It loads with ``datasets.load_dataset("parquet", data_files="OUT/*.parquet")``
or in one line with :func:`load_trajectories`.  Writing goes to a temporary
sibling folder that is renamed into place only when every shard is written, so
an interrupted run never leaves a folder that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.schema import SCHEMA_VERSION, Trajectory

__all__ = [
    "DatasetError",
    "iter_trajectories",
    "load_hf_dataset",
    "load_trajectories",
    "write_dataset",
]

SHARD_BYTES = 128 * 1024 * 1024
MARKER = "COMPLETE"


class DatasetError(Exception):
    pass


def _row_bytes(row: dict[str, Any]) -> int:
    return sum(len(s.get("output") or "") + len(s.get("assistant_text") or "") for s in row["steps"]) + 1024


def write_dataset(
    trajs: Iterable[Trajectory],
    out: str | Path,
    *,
    summary: dict[str, Any] | None = None,
    overwrite: bool = False,
    shard_bytes: int = SHARD_BYTES,
) -> Path:
    """Write trajectories as Parquet shards into ``out`` (atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dtoc_rl.schema import hf_features

    out = Path(out)
    if out.exists() and not overwrite:
        raise DatasetError(f"{out} already exists; pass overwrite=True (--overwrite) to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        schema = hf_features().arrow_schema
        shards: list[list[dict[str, Any]]] = [[]]
        size = 0
        for t in trajs:
            row = t.to_row()
            b = _row_bytes(row)
            if shards[-1] and size + b > shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append(row)
            size += b
        n = len(shards)
        for i, rows in enumerate(shards):
            table = pa.Table.from_pylist(rows, schema=schema)
            pq.write_table(table, tmp / f"data-{i:05d}-of-{n:05d}.parquet", compression="zstd")
        meta = {"schema_version": SCHEMA_VERSION, "trajectories": sum(len(s) for s in shards), "shards": n}
        meta.update(summary or {})
        (tmp / "summary.json").write_text(json.dumps(meta, indent=2, default=str))
        (tmp / MARKER).write_text(SCHEMA_VERSION + "\n")
        if out.exists():
            trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _shards(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_file() and path.suffix == ".parquet":
        return [path]
    if not path.is_dir():
        raise DatasetError(f"no dataset at {path}: not a folder or a .parquet file")
    if not (path / MARKER).is_file() and any(path.glob("*.parquet")):
        raise DatasetError(f"{path} has no {MARKER} marker: it was not completely written")
    files = sorted(path.glob("*.parquet"))
    if not files:
        raise DatasetError(f"no .parquet files in {path}; make one with `dtoc-rl ingest LOGS -o {path}`")
    return files


def iter_trajectories(path: str | Path, *, columns: list[str] | None = None) -> Iterator[Trajectory]:
    """Stream trajectories shard by shard."""
    import pyarrow.parquet as pq

    for f in _shards(Path(path)):
        pf = pq.ParquetFile(f)
        for batch in pf.iter_batches(batch_size=64, columns=columns):
            for row in batch.to_pylist():
                yield Trajectory.from_row(row)


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """``load_trajectories("OUT")``: every trajectory of a dataset, as objects."""
    return list(iter_trajectories(path))


def load_hf_dataset(path: str | Path):
    """The dataset as a Hugging Face ``datasets.Dataset`` (split ``train``)."""
    import datasets

    files = [str(f) for f in _shards(Path(path))]
    return datasets.load_dataset("parquet", data_files=files, split="train")


def read_summary(path: str | Path) -> dict[str, Any]:
    p = Path(path) / "summary.json"
    return json.loads(p.read_text()) if p.is_file() else {}
