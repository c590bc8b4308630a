"""write_dataset writes a row group at a time and closes each shard when full: a large dataset's rows
are never all in memory."""

import pyarrow.parquet as pq
import pytest

from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.data.paths import bundled_dataset


def test_rows_are_written_a_row_group_at_a_time_and_each_shard_closed_when_full(tmp_path, monkeypatch):
    import dtoc_rl.data.dataset as dataset

    monkeypatch.setattr(dataset, "ROW_GROUP", 4)
    trajs = load_trajectories(bundled_dataset())
    drawn = 0

    def runs():
        nonlocal drawn
        for t in trajs:
            drawn += 1
            yield t

    groups: list[tuple[int, int]] = []  # (runs drawn, rows) when each row group was written
    write = pq.ParquetWriter.write_table

    def spy(self, table, *a, **kw):
        groups.append((drawn, table.num_rows))
        return write(self, table, *a, **kw)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", spy)
    out = write_dataset(runs(), tmp_path / "d", shard_bytes=200_000)
    shards = sorted(out.glob("*.parquet"))
    assert len(shards) >= 3 and len(trajs) > 12
    # each group written once its rows were drawn (or the run after them, which closed its shard):
    # the rows of at most one group are held at a time
    written = 0
    for at, rows in groups:
        written += rows
        assert 0 < rows <= 4 and at - written in (0, 1)
    assert written == len(trajs)
    # a shard's groups are full but its last
    for f in shards:
        meta = pq.ParquetFile(f).metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert all(n == 4 for n in sizes[:-1]) and 0 < sizes[-1] <= 4
    n = len(shards)
    assert [f.name for f in shards] == [f"data-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert [t.traj_id for t in load_trajectories(out)] == [t.traj_id for t in trajs]


def test_no_runs_is_one_empty_shard_as_before(tmp_path):
    out = write_dataset([], tmp_path / "d")
    assert [f.name for f in out.glob("*.parquet")] == ["data-00000-of-00001.parquet"]
    assert load_trajectories(out) == []


def test_a_row_group_ends_once_its_runs_hold_about_group_bytes_of_text(tmp_path, monkeypatch):
    """Long runs make small groups, so a reader that holds a group's runs at a time holds little."""
    import dtoc_rl.data.dataset as dataset

    trajs = load_trajectories(bundled_dataset())
    sizes = [dataset._row_bytes(t.to_row()) for t in trajs]
    monkeypatch.setattr(dataset, "GROUP_BYTES", 3 * max(sizes))
    out = write_dataset(trajs, tmp_path / "d")
    groups = []
    for f in sorted(out.glob("*.parquet")):
        meta = pq.ParquetFile(f).metadata
        groups += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert len(groups) > 3 and sum(groups) == len(trajs)
    at = 0
    for n in groups:  # each group as full as GROUP_BYTES lets it be: the next run would not fit
        held = sizes[at : at + n]
        assert sum(held) <= 3 * max(sizes) and (
            at + n == len(trajs) or sum(held) + sizes[at + n] > 3 * max(sizes)
        )
        at += n
    parts = dataset.dataset_parts(out)
    assert [p.stop - p.start for p in parts] == groups  # a part is a group
    assert [t.traj_id for t in load_trajectories(out)] == [t.traj_id for t in trajs]


def test_a_write_that_fails_closes_its_shard_and_leaves_nothing(tmp_path, monkeypatch):
    """The half-written shard is closed before its folder is removed (a file still open there would
    keep the folder on systems that cannot delete open files)."""
    import os
    import shutil

    import dtoc_rl.data.dataset as dataset

    trajs = load_trajectories(bundled_dataset())

    def runs():
        yield from trajs[:3]
        raise RuntimeError("the logs' reader failed")

    open_at_removal = []
    remove = shutil.rmtree

    def rmtree(path, *a, **kw):  # which files of the folder are open when it is removed
        for fd in os.listdir("/proc/self/fd"):
            try:
                if str(path) in os.readlink(f"/proc/self/fd/{fd}"):
                    open_at_removal.append(fd)
            except OSError:  # the listing's own descriptor, closed since
                pass
        return remove(path, *a, **kw)

    monkeypatch.setattr(dataset.shutil, "rmtree", rmtree)
    with pytest.raises(RuntimeError, match="reader failed"):
        write_dataset(runs(), tmp_path / "d")
    assert list(tmp_path.iterdir()) == [] and open_at_removal == []
