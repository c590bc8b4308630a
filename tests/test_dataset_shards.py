"""write_dataset writes each shard as soon as it is full: a large dataset's rows are never all in memory."""

import pyarrow.parquet as pq

from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.data.paths import bundled_dataset


def test_each_shard_is_written_before_the_runs_of_the_next_are_read(tmp_path, monkeypatch):
    trajs = load_trajectories(bundled_dataset())
    drawn = 0

    def runs():
        nonlocal drawn
        for t in trajs:
            drawn += 1
            yield t

    at_write: list[int] = []  # how many runs had been drawn when each shard was written
    write = pq.write_table

    def spy(table, where, **kw):
        at_write.append(drawn)
        return write(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", spy)
    out = write_dataset(runs(), tmp_path / "d", shard_bytes=200_000)
    shards = sorted(out.glob("*.parquet"))
    assert len(shards) >= 3 and len(at_write) == len(shards)
    # a shard written while the runs were still being drawn, each one before the next shard's rows
    rows = [pq.ParquetFile(f).metadata.num_rows for f in shards]
    assert at_write[:-1] == [sum(rows[: i + 1]) + 1 for i in range(len(rows) - 1)]
    n = len(shards)
    assert [f.name for f in shards] == [f"data-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert [t.traj_id for t in load_trajectories(out)] == [t.traj_id for t in trajs]


def test_no_runs_is_one_empty_shard_as_before(tmp_path):
    out = write_dataset([], tmp_path / "d")
    assert [f.name for f in out.glob("*.parquet")] == ["data-00000-of-00001.parquet"]
    assert load_trajectories(out) == []
