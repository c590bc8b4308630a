"""Trajectory datasets on disk: Parquet shards written atomically, and loaders.

A dataset is a folder::

    OUT/
      data-00000-of-00002.parquet   # rows of the canonical schema (dtoc_rl.data.schema), in
                                    # row groups of at most ROW_GROUP runs and GROUP_BYTES of
                                    # their text (read a part at a time)
      data-00001-of-00002.parquet
      summary.json                  # what `dtoc-rl ingest` reported, incl. skips
      COMPLETE                      # written last: a folder without it is not a dataset

It loads with ``datasets.load_dataset("parquet", data_files="OUT/*.parquet")``
or in one line with :func:`load_trajectories`.  Writing goes to a temporary
sibling folder that is renamed into place only when every shard is written, so
an interrupted run never leaves a folder that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any

from dtoc_rl.data.paths import not_replaceable
from dtoc_rl.data.schema import SCHEMA_VERSION, Trajectory

__all__ = [
    "DatasetError",
    "Part",
    "check_dataset_target",
    "dataset_columns",
    "dataset_parts",
    "dataset_tasks",
    "iter_trajectories",
    "load_hf_dataset",
    "load_trajectories",
    "storable",
    "task_name",
    "write_dataset",
]

SHARD_BYTES = 128 * 1024 * 1024
#: A row group holds at most ROW_GROUP runs and at most GROUP_BYTES of their outputs' and answers' text
#: (or one run over it): a reader holds a group's runs (or a part of one) at a time, so long runs (a
#: session log of many MB) make smaller groups.
ROW_GROUP = 256
GROUP_BYTES = 32 * 1024 * 1024
MARKER = "COMPLETE"


class DatasetError(Exception):
    pass


_SURROGATE = re.compile("[\ud800-\udfff]")


def _mended(text: str) -> str:
    # ASCII first: nearly every text is, and then no search is needed
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


def _mend_text(obj: Any) -> None:
    """Replace lone UTF-16 surrogates (a JSON string a JavaScript harness cut inside an emoji) by
    U+FFFD in every text of a trajectory, in place: Parquet holds UTF-8, which has no such character."""
    for name, v in vars(obj).items():
        if isinstance(v, str):
            if (m := _mended(v)) is not v:  # set only when mended: most texts are left alone
                setattr(obj, name, m)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, str):
                    if (m := _mended(x)) is not x:
                        v[i] = m
                elif is_dataclass(x):
                    _mend_text(x)
        elif is_dataclass(v):
            _mend_text(v)


@functools.cache
def _slim_schema() -> tuple[Any, frozenset[str], frozenset[str]]:
    """The dataset's schema without its text columns (and the names of those, at the top and in a
    step): text is checked as Python strings, so that the check never copies a run's outputs."""
    import pyarrow as pa

    from dtoc_rl.data.schema import hf_features

    schema = hf_features().arrow_schema
    step_type = schema.field("steps").type.value_type
    texts = frozenset(f.name for f in schema if pa.types.is_string(f.type))
    step_texts = frozenset(f.name for f in step_type if pa.types.is_string(f.type))
    slim_step = pa.struct([f for f in step_type if f.name not in step_texts])
    fields_ = [f for f in schema if f.name not in texts and f.name != "steps"]
    return pa.schema([*fields_, pa.field("steps", pa.list_(slim_step))]), texts, step_texts


def storable(t: Trajectory) -> str | None:
    """None when the trajectory fits the dataset's columns, else why not (the column, and the step,
    whose value does not fit: a count beyond 64 bits, text where a number goes); its lone surrogates
    are mended first (:func:`_mend_text`).  Checked per trajectory, so that one bad run is skipped by
    name instead of failing the write of every other."""
    import pyarrow as pa

    _mend_text(t)
    row = t.to_row()
    schema, texts, step_texts = _slim_schema()
    for name in texts:
        if not isinstance(row.get(name), str | None):
            return f"{name}: {row.get(name)!r:.60} is not text"
    for i, step in enumerate(row["steps"]):
        for name in step_texts:
            if not isinstance(step.get(name), str | None):
                return f"step {i} {name}: {step.get(name)!r:.60} is not text"
    slim = {f.name: row.get(f.name) for f in schema if f.name != "steps"}
    slim["steps"] = [{k: v for k, v in step.items() if k not in step_texts} for step in row["steps"]]
    errors = (pa.ArrowException, OverflowError, TypeError, ValueError)
    try:
        pa.Table.from_pylist([slim], schema=schema)
        return None
    except errors as e:
        why = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    for field in schema:  # which value: one column, one step at a time
        if field.name == "steps":
            for i, step in enumerate(slim["steps"]):
                for sub in field.type.value_type:
                    try:
                        pa.array([step.get(sub.name)], type=sub.type)
                    except errors:
                        value = f"{step.get(sub.name)!r:.60}"
                        return f"step {i} {sub.name}: {value} does not fit the dataset ({why})"
            continue
        try:
            pa.array([slim.get(field.name)], type=field.type)
        except errors:
            return f"{field.name}: {slim.get(field.name)!r:.60} does not fit the dataset ({why})"
    return f"does not fit the dataset ({why})"


def _row_bytes(row: dict[str, Any]) -> int:
    return sum(len(s.get("output") or "") + len(s.get("assistant_text") or "") for s in row["steps"]) + 1024


_LICENCE_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "LICENCE.md", "COPYING", "COPYING.md")
# (name, phrases that must all appear in the licence file's first 4 KB, case-insensitive)
_LICENCE_NAMES = (
    ("MIT", ("permission is hereby granted, free of charge",)),
    ("Apache-2.0", ("apache license", "version 2.0")),
    ("GPL-3.0", ("gnu general public license", "version 3")),
    ("GPL-2.0", ("gnu general public license", "version 2")),
    ("BSD-3-Clause", ("redistribution and use in source and binary forms", "neither the name")),
    ("BSD-2-Clause", ("redistribution and use in source and binary forms",)),
    ("CC-BY-4.0", ("creative commons attribution 4.0",)),
)


def _licence_name(path: Path) -> str:
    try:
        head = path.read_text(errors="replace")[:4096].lower()
    except OSError:
        return "unreadable"
    head = " ".join(head.split())
    for name, phrases in _LICENCE_NAMES:
        if all(p in head for p in phrases):
            return name
    return "see file"


class _Card:
    """Counts and licences gathered while the shards are written, rendered as README.md."""

    def __init__(self, inputs: Iterable[str | Path] | None):
        # an ingested path's name leads every source_path found under it (dtoc_rl.ingest.driver)
        self.roots = {Path(p).name: Path(p).resolve() for p in inputs} if inputs is not None else None
        self.groups: dict[tuple[str, str], list[int]] = {}
        self.folders: dict[str, set[str]] = {}
        self.licences: dict[str, set[str]] = {}
        self._dir_licence: dict[Path, str | None] = {}

    def add(self, t: Trajectory) -> None:
        g = self.groups.setdefault((t.source, t.model_family or "unknown"), [0, 0, 0, 0, 0])
        g[0] += 1
        g[1] += len(t.steps)
        g[2 if t.success is True else 3 if t.success is False else 4] += 1
        rel = Path(t.source_path or "")
        folder = rel.parts[0] if len(rel.parts) > 1 else str(rel)
        if len(rel.parts) > 2:
            folder = f"{rel.parts[0]}/{rel.parts[1]}"
        self.folders.setdefault(t.source, set()).add(folder or "unknown")
        self.licences.setdefault(t.source, set()).add(self._licence(rel))

    def _licence(self, rel: Path) -> str:
        if self.roots is None:
            return "unknown (inputs not given)"
        root = self.roots.get(rel.parts[0]) if rel.parts else None
        if root is None:
            return "unknown"
        top = root if root.is_dir() else root.parent
        d = (root.parent / rel).parent
        found = None
        for _ in range(8):  # logs sit a few folders below their licence at most
            if d not in self._dir_licence:
                hit = next((d / n for n in _LICENCE_FILES if (d / n).is_file()), None)
                self._dir_licence[d] = (
                    f"{_licence_name(hit)} ({hit.relative_to(root.parent).as_posix()})" if hit else None
                )
            found = self._dir_licence[d]
            if found or d == top or top not in d.parents:
                break
            d = d.parent
        return found or "unknown"

    def render(self, name: str, meta: dict[str, Any], command: str | None) -> str:
        import shlex
        import sys

        from dtoc_rl import __version__
        from dtoc_rl.data.schema import hf_features

        if command is None:
            command = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "unknown"
        lines = [
            f"# {name}",
            "",
            f"A DTOC-RL trajectory dataset: **schema version {SCHEMA_VERSION}** (`dtoc_rl.data.schema`), "
            f"written by dtoc-rl {__version__}.",
            "",
            f"Made with: `{command}`",
            "",
            "## Counts",
            "",
            "| source | model family | trajectories | steps | success | failure | unknown outcome |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        tot = [0] * 5
        for (src, fam), g in sorted(self.groups.items()):
            lines.append(f"| {src} | {fam} | " + " | ".join(str(v) for v in g) + " |")
            tot = [a + b for a, b in zip(tot, g)]
        lines.append("| **total** | | " + " | ".join(f"**{v}**" for v in tot) + " |")
        skipped = meta.get("skipped")
        if isinstance(skipped, list):
            lines += [
                "",
                f"Files skipped at ingest: {len(skipped)} (each with its reason in `summary.json`).",
            ]
        lines += [
            "",
            "## Sources and licences",
            "",
            "| source | folders | licence |",
            "|---|---|---|",
        ]
        for src in sorted(self.folders):
            folders = ", ".join(f"`{f}`" for f in sorted(self.folders[src]))
            lines.append(f"| {src} | {folders} | {'; '.join(sorted(self.licences[src]))} |")
        lines += [
            "",
            "Licences are read from the LICENSE/COPYING files found next to the logs, up to the folder "
            'that was ingested; "unknown" means none was found there, so check the upstream terms '
            "before sharing this dataset.",
            "",
            "## Schema",
            "",
            f"Parquet shards (`data-*.parquet`), one row per trajectory; `summary.json` has the ingest "
            f"report and `{MARKER}` marks a completely written folder.  Load it with "
            "`dtoc_rl.data.dataset.load_trajectories(PATH)` or "
            '`datasets.load_dataset("parquet", data_files="PATH/*.parquet")`.',
            "",
        ]
        feats = hf_features()
        for col, ftype in feats.items():
            if col == "steps":
                step = getattr(ftype, "feature", ftype)
                keys = ", ".join(f"`{k}`" for k in step) if isinstance(step, dict) else str(step)
                lines.append(f"- `steps`: one entry per model call, with {keys}")
            else:
                lines.append(f"- `{col}`: {getattr(ftype, 'dtype', type(ftype).__name__)}")
        return "\n".join(lines) + "\n"


def _shard_name(i: int, n: int) -> str:
    return f"data-{i:05d}-of-{n:05d}.parquet"


_SHARD = re.compile(r"data-(\d{5})-of-(\d{5})\.parquet")  # _shard_name's names, read back


class _Shard:
    """Shard ``i`` written to ``folder`` under a provisional name (the count of shards is not known
    yet) a row group at a time: the rows of one group are in memory, not those of the shard (a row
    copies its run's steps into dicts, and a shard holds 128 MB of their text)."""

    def __init__(self, schema: Any, folder: Path, i: int):
        import pyarrow.parquet as pq

        self.path = folder / f"part-{i:05d}.parquet"
        self.schema = schema
        self.writer = pq.ParquetWriter(self.path, schema, compression="zstd")
        self.rows: list[dict[str, Any]] = []
        self.bytes = 0
        self.group_bytes = 0
        self.groups = 0

    def add(self, row: dict[str, Any], size: int) -> None:
        if self.rows and self.group_bytes + size > GROUP_BYTES:  # a group holds one run over it at most
            self._flush()
        self.rows.append(row)
        self.bytes += size
        self.group_bytes += size
        if len(self.rows) == ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        # small row groups: a worker reads a few runs without decoding the rest of the shard
        # (dataset_parts); files grow about 2%
        self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema), row_group_size=ROW_GROUP)
        self.rows = []
        self.group_bytes = 0
        self.groups += 1

    def close(self) -> Path:
        if self.rows or not self.groups:  # the last group (a shard of no run: one empty group)
            self._flush()
        self.writer.close()
        return self.path

    def abort(self) -> None:
        """Close the file without its last group (a write that failed): its folder can be removed."""
        with contextlib.suppress(Exception):
            self.writer.close()


def write_dataset(
    trajs: Iterable[Trajectory],
    out: str | Path,
    *,
    summary: dict[str, Any] | None = None,
    overwrite: bool = False,
    shard_bytes: int = SHARD_BYTES,
    inputs: Iterable[str | Path] | None = None,
    command: str | None = None,
) -> Path:
    """Write trajectories as Parquet shards into ``out`` (atomically), with a dataset card.

    The card (``README.md``) states the schema version, the sources with the licences found next
    to the logs, the counts and the command, so that a dataset folder shared on its own still says
    what it holds and under which terms.  ``inputs`` are the paths that were ingested (the
    trajectories' ``source_path`` is relative to them; without them licences are not looked up);
    ``command`` defaults to this process's command line.
    """
    from dtoc_rl.data.schema import hf_features

    out = Path(out)
    inputs = list(inputs) if inputs is not None else None  # read twice: the check and the card
    if out.exists() and not overwrite:
        raise DatasetError(f"{out} already exists; pass overwrite=True (--overwrite) to replace it")
    check_dataset_target(out, inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    shard: _Shard | None = None
    try:
        schema = hf_features().arrow_schema
        # each shard is written a row group at a time and closed when full; the shards are named
        # data-i-of-n once n is known
        parts: list[Path] = []
        shard = _Shard(schema, tmp, 0)
        count = 0
        card = _Card(inputs)
        for t in trajs:
            card.add(t)
            row = t.to_row()
            b = _row_bytes(row)
            if shard.bytes and shard.bytes + b > shard_bytes:
                parts.append(shard.close())
                shard = _Shard(schema, tmp, len(parts))
            shard.add(row, b)
            count += 1
        parts.append(shard.close())  # the last (an empty one for no run)
        shard = None
        n = len(parts)
        for i, part in enumerate(parts):
            os.replace(part, tmp / _shard_name(i, n))
        meta = {"schema_version": SCHEMA_VERSION, "trajectories": count, "shards": n}
        meta.update(summary or {})
        (tmp / "summary.json").write_text(json.dumps(meta, indent=2, default=str))
        (tmp / "README.md").write_text(card.render(out.name, meta, command))
        (tmp / MARKER).write_text(SCHEMA_VERSION + "\n")
        if out.exists() and overwrite:
            trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.replace(tmp, out)  # onto a folder that holds anything, refused by the system: no overwrite
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise DatasetError(
                f"{out} was written by another process while this one ran; this dataset was not written "
                "(--overwrite to replace it)"
            ) from None
    except BaseException:
        if shard is not None:
            shard.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def check_dataset_target(out: str | Path, inputs: Iterable[str | Path] | None = None) -> None:
    """A DatasetError unless writing a dataset to ``out`` deletes only an earlier dataset: ``out`` new
    or a dataset folder (shards, summary, card, marker and nothing else), holding none of ``inputs``
    (the logs being read) and not the current folder."""
    out = Path(out).absolute()

    try:
        os.stat(out)
    except OSError as e:  # the system names a loop on every Python (resolve() raises on one before 3.13)
        if e.errno == errno.ELOOP:
            raise DatasetError(f"{out}: cannot follow its symbolic links (a loop)") from None
    target = out.resolve()
    if out.is_symlink() and not out.exists():
        raise DatasetError(f"{out} is a symbolic link to nothing: name a folder to write the dataset to")
    for parent in target.parents:  # the folder it goes in must be one, or be makeable as one
        if parent.exists():
            if not parent.is_dir():
                raise DatasetError(f"{out}: {parent} is a file, not a folder")
            break
    for p in inputs or ():
        try:
            source = Path(p).absolute().resolve()
        except (RuntimeError, OSError):  # a link loop holds no logs: ingest skipped it by name
            continue
        if source.is_relative_to(target):
            raise DatasetError(f"{out} holds {p}, which is being ingested: write the dataset elsewhere")
    if not out.exists():
        return
    own = {MARKER, "summary.json", "README.md"}
    why = not_replaceable(out, lambda name: name in own or name.endswith(".parquet"))
    if why is not None:
        raise DatasetError(f"{out} {why}: not a dataset folder to replace; write the dataset elsewhere")


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
        if any(p for p in path.iterdir() if not p.name.startswith(".")):  # e.g. the logs themselves
            raise DatasetError(
                f"no .parquet files in {path}, which is not a dataset; if it holds agent logs, "
                f"`dtoc-rl ingest {path} -o DATASET` makes one from them"
            )
        raise DatasetError(f"no .parquet files in {path}; make one with `dtoc-rl ingest LOGS -o {path}`")
    if (path / MARKER).is_file():
        _check_shards(path, files)
    return files


def _check_shards(path: Path, files: list[Path]) -> None:
    # A dataset this package wrote holds shards data-i-of-n for every i < n and the rows its summary
    # counts; a shard lost, added or copied in later would change the data without a word.
    import pyarrow.parquet as pq

    named = [_SHARD.fullmatch(f.name) for f in files]
    stray = [f.name for f, m in zip(files, named) if m is None]
    if stray:
        raise DatasetError(f"{path}: {stray[0]} is not one of its shards (added since it was written)")
    counts = {int(m.group(2)) for m in named if m}
    have = sorted(int(m.group(1)) for m in named if m)
    if len(counts) != 1 or have != list(range(next(iter(counts)))):
        raise DatasetError(
            f"{path}: shards {', '.join(f.name for f in files)} are not one whole dataset (missing or mixed)"
        )
    try:
        want = json.loads((path / "summary.json").read_text()).get("trajectories")
    except (OSError, ValueError, AttributeError):
        return  # no summary to hold the rows to
    try:
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # a damaged shard: the reader names it when it gets there
        return
    if isinstance(want, int) and rows != want:
        raise DatasetError(f"{path}: its shards hold {rows} trajectories, its summary.json says {want}")


# Columns every trajectory row has; a Parquet file without them was written by something else.
_REQUIRED_COLUMNS = ("traj_id", "source", "model_raw", "model_family", "task_id", "steps")


@dataclass(frozen=True)
class Part:
    """A slice of a dataset's rows, read on its own (:func:`dataset_parts`): rows ``start`` to ``stop``
    of row group ``row_group`` of the shard ``file``.  Small enough that a worker holding one part's
    episodes holds little, and picklable, so a pool is sent parts rather than episodes."""

    file: str
    row_group: int
    start: int
    stop: int
    #: the file's size, modification time and inode when the part was cut (empty: not checked); the
    #: inode tells a file replaced at once (as ingest --overwrite does) within the clock's granularity
    stamp: tuple[int, ...] = ()


_BATCH = 64  # rows converted to Python at a time: a shard's rows are never all objects at once


def _open(f: Path, columns: list[str] | None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{f}: not a readable Parquet file ({' '.join(str(e).split())[:200]})") from None
    missing = [
        c for c in _REQUIRED_COLUMNS if c not in pf.schema_arrow.names and (columns is None or c in columns)
    ]
    if missing:
        raise DatasetError(
            f"{f}: not a DTOC-RL trajectory dataset (no column {', '.join(missing)}); "
            "make one with `dtoc-rl ingest LOGS -o DATASET`"
        )
    return pf


def _same_file(f: Path, part: Part | None) -> None:
    """Refuse a part whose file was written again since it was cut (an ingest --overwrite meanwhile):
    its rows would be other runs."""
    if part is not None and part.stamp and _stamp(f) != part.stamp:
        raise DatasetError(f"{f}: written again since its parts were planned; nothing of this part was read")


def _rows(
    f: Path, columns: list[str] | None, part: Part | None = None, keep: Iterable[int] | None = None
) -> Iterator[Trajectory]:
    """The trajectories of shard ``f`` (or of ``part`` of it; ``keep``: only these rows of the part,
    offsets in it), a row that is none a DatasetError."""
    import pyarrow as pa

    _same_file(f, part)
    pf = _open(f, columns)
    _same_file(f, part)  # and once it is open: what was opened is the file the part was cut from
    groups = None if part is None else [part.row_group]
    first, stop = (0, None) if part is None else (part.start, part.stop)
    # rows are named by their place in the shard, whichever part reads them
    base = 0 if part is None else sum(pf.metadata.row_group(g).num_rows for g in range(part.row_group))
    wanted = None if keep is None else set(keep)
    try:
        at = 0  # the row of the shard (of the part's row group) the batch begins at
        for batch in pf.iter_batches(batch_size=_BATCH, columns=columns, row_groups=groups):
            if stop is not None and at >= stop:
                break
            if at + batch.num_rows > first:  # batches before the part are decoded, never made objects
                lo = max(first - at, 0)
                hi = batch.num_rows if stop is None else min(stop - at, batch.num_rows)
                if wanted is None:
                    rows = enumerate(batch.slice(lo, hi - lo).to_pylist(), base + at + lo)
                else:  # only the rows kept become objects (a filter that keeps few reads little)
                    idx = [i for i in range(lo, hi) if at + i - first in wanted]
                    rows = zip((base + at + i for i in idx), batch.take(idx).to_pylist() if idx else [])
                for j, row in rows:
                    try:
                        yield Trajectory.from_row(row)
                    except (TypeError, KeyError, ValueError, AttributeError) as e:
                        raise DatasetError(
                            f"{f}: row {j} is not a trajectory of this schema ({type(e).__name__}: {e})"
                        ) from None
            at += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{f}: damaged Parquet data ({' '.join(str(e).split())[:200]})") from None


def iter_trajectories(
    path: str | Path,
    *,
    columns: list[str] | None = None,
    part: Part | None = None,
    keep: Iterable[int] | None = None,
) -> Iterator[Trajectory]:
    """Stream trajectories shard by shard (or those of one ``part``, :func:`dataset_parts`; ``keep``:
    only these of its rows, offsets in the part).  A file that is not Parquet, Parquet without the
    trajectory columns, or a row that is no trajectory is a DatasetError naming the file."""
    if part is not None:
        yield from _rows(Path(part.file), columns, part, keep)
        return
    if keep is not None:
        raise ValueError("keep names rows of a part: give the part too")
    for f in _shards(Path(path)):
        yield from _rows(f, columns)


def _stamp(f: Path) -> tuple[int, ...]:
    try:
        st = os.stat(f)
    except OSError:
        return (-1,)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def dataset_parts(path: str | Path, rows: int = ROW_GROUP) -> list[Part]:
    """The dataset cut into parts of about ``rows`` rows, in row order, none across a row group
    (:func:`iter_trajectories` reads one without the rest of its shard as objects).  A row group
    larger than that (a dataset written before groups were small, or by another writer) is cut in
    at most eight: reading a part decodes the rows of its group before it, so more, smaller parts
    would decode the group many times over."""
    import pyarrow as pa

    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    out: list[Part] = []
    for f in _shards(Path(path)):
        stamp = _stamp(f)  # before the metadata: a file written again meanwhile fails the check later
        try:
            meta = _open(f, None).metadata
        except pa.ArrowException as e:
            raise DatasetError(f"{f}: damaged Parquet data ({' '.join(str(e).split())[:200]})") from None
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            size = max(rows, -(-n // 8))
            out += [Part(str(f.resolve()), g, a, min(a + size, n), stamp) for a in range(0, n, size)]
    return out


def task_name(source: str, task_id: str) -> str:
    """How a checkpoint's splits name a task (``train_tasks``, ``val_tasks``...): ``source/task_id``,
    whatever the model (runs of one task by two models share what the network learns of it)."""
    return f"{source}/{task_id}"


def name_set(names: str | Iterable[str] | None) -> set[str] | None:
    """Names given as one string (one name, not its letters) or any collection of them, as a set;
    None stays None (no filter, where a filter's caller reads an empty set as none too)."""
    if names is None:
        return None
    return {names} if isinstance(names, str) else set(names)


def dataset_tasks(path: str | Path) -> set[str]:
    """Every task of a dataset as ``source/task_id`` (the names a checkpoint's splits use), read from
    those two columns alone."""
    cols = dataset_columns(path, ["source", "task_id"])
    return {task_name(s, t) for s, t in zip(cols["source"], cols["task_id"])}


def dataset_column(path: str | Path, name: str) -> list[Any]:
    """One column of every row of a dataset (e.g. ``extra``), read from that column alone."""
    return dataset_columns(path, [name])[name]


def dataset_columns(path: str | Path, names: list[str]) -> dict[str, list[Any]]:
    """Some columns of every row of a dataset, in row order, read from those columns alone (what a
    run is, without its steps: a few bytes a run however long the runs)."""
    import pyarrow as pa

    out: dict[str, list[Any]] = {n: [] for n in names}
    for f in _shards(Path(path)):
        pf = _open(f, None)
        try:
            table = pf.read(columns=names)
            for n in names:
                out[n] += table.column(n).to_pylist()
        except (pa.ArrowException, OSError, KeyError) as e:
            what = ", ".join(names) + (" columns" if len(names) > 1 else " column")
            raise DatasetError(f"{f}: no readable {what} ({' '.join(str(e).split())[:200]})") from None
    return out


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
