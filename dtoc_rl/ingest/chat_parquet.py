"""Trajectory datasets as Parquet shards: one chat run per row.

Published agent trajectories (nebius/SWE-agent-trajectories, nebius/SWE-rebench-openhands-trajectories,
nvidia/SWE-Zero-openhands-trajectories, SWE-smith's, ShareGPT-style tool datasets) are distributed as
Parquet files (a dataset's ``data/train-00000-of-00012.parquet`` from the Hugging Face Hub, or what
``Dataset.to_parquet`` writes).  A file is this format when it has a column of messages
(:data:`~dtoc_rl.ingest.chat_rows.MESSAGE_COLUMNS`); each row is then read as a generic chat run
(:mod:`dtoc_rl.ingest.openai_chat`, with :mod:`dtoc_rl.ingest.chat_rows`' renaming): the other
columns give the run's id, model, task and outcome, and go into ``extra``.

Rows are read a few at a time, so a shard of hundreds of megabytes never sits in memory whole.  A
row that cannot be read is named with its reason after the good rows are kept; a file Parquet cannot
open fails with the reader's one-line reason.  The dataset ``dtoc-rl ingest`` writes is Parquet too,
but has no message column, so it is never taken for a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.chat_rows import MESSAGE_COLUMNS
from dtoc_rl.ingest.openai_chat import OpenAIChatIngester, parse_rows

__all__ = ["ChatParquetIngester", "not_a_log_reason"]

ROWS_PER_BATCH = 16


def _columns(path: Path) -> list[str] | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError, ValueError):  # not Parquet, or damaged: not this format
        return None


def _reason(e: BaseException) -> str:
    # Arrow's messages can hold raw bytes of the damaged file: one printable line
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)[:200]


def _rows(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(row number, row, error)`` for every row, one row group at a time: a damaged group is one
    error naming its rows, and the groups after it are still read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise IngestError(f"unreadable Parquet: {_reason(e)}", path) from None
    cols = pf.schema_arrow.names
    if not any(c in cols for c in MESSAGE_COLUMNS):
        raise IngestError(_why_not(cols), path)  # --format chat-parquet on another table
    meta = pf.metadata
    if meta.num_rows == 0:
        raise IngestError("empty Parquet file: no rows", path)
    first = 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        done = 0
        try:
            for batch in pf.iter_batches(batch_size=ROWS_PER_BATCH, row_groups=[g]):
                for row in batch.to_pylist():
                    done += 1
                    yield first + done, row, None
        except (pa.ArrowException, OSError, ValueError) as e:
            lost = f"rows {first + done + 1}-{first + n}" if n - done > 1 else f"row {first + n}"
            yield first + done + 1, None, f"row group {g} ({lost}) unreadable: {_reason(e)}"
        first += n


def not_a_log_reason(path: Path) -> str:
    """Why a Parquet file no ingester claims is not read: one line for the skip list."""
    return _why_not(_columns(path))


def _why_not(cols: list[str] | None) -> str:
    if cols is None:
        return "unreadable Parquet: no valid footer (damaged or still being written)"
    if {"traj_id", "steps"} <= set(cols):
        return "a dtoc-rl dataset, ingested already: give its folder to --dataset"
    shown = ", ".join(cols[:8]) + (", ..." if len(cols) > 8 else "")
    return f"Parquet without a message column ({' / '.join(MESSAGE_COLUMNS)}); its columns: {shown}"


class ChatParquetIngester(OpenAIChatIngester):
    name = "chat-parquet"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix.lower() != ".parquet":
            return False
        cols = _columns(path)
        return cols is not None and any(c in cols for c in MESSAGE_COLUMNS)

    def file_key(self, path: Path) -> str:
        # Hub shards have generic names (train-00000-of-00001): the two folders above tell datasets apart
        # (a download's own folder, or the Hub cache's snapshot and data folders)
        return "/".join(p for p in (path.parent.parent.name, path.parent.name, path.stem) if p)

    def parse(self, path: Path) -> Iterator[Trajectory]:
        seen: dict[str, int] = {}
        yield from parse_rows(path, _rows(path), lambda r, n: self.run(path, r, n, seen, "row"), unit="row")
