"""A dataset folder is evaluated part by part: no process holds more than a part's episodes, and
the runs are those of evaluating every episode at once."""

from __future__ import annotations

import gc
import weakref

import pyarrow.parquet as pq
import pytest

import dtoc_rl.data.dataset as dataset_mod
import dtoc_rl.envs.data as envs_data
import dtoc_rl.policies.evaluate as ev
from dtoc_rl.data.dataset import (
    DatasetError,
    dataset_parts,
    iter_trajectories,
    load_trajectories,
    write_dataset,
)
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.envs.data import load_episodes

SPECS = ["hide_big:tokens=500", "last_n:n=2"]


@pytest.fixture
def small_groups(tmp_path, monkeypatch):
    """The sample written again in row groups of 4 runs (a fresh path: nothing of it is cached)."""
    monkeypatch.setattr(dataset_mod, "ROW_GROUP", 4)
    return write_dataset(load_trajectories(bundled_dataset()), tmp_path / "ds")


def _bills(runs):
    return [(r.policy, r.traj_id, r.dollars, r.misses, r.input_tokens, r.split) for r in runs]


def test_new_datasets_have_small_row_groups_and_parts_follow_them(small_groups):
    f = next(small_groups.glob("*.parquet"))
    groups = pq.ParquetFile(f).metadata.num_row_groups
    n = len(load_trajectories(small_groups))
    assert groups == -(-n // 4)
    parts = dataset_parts(small_groups, rows=4)
    assert len(parts) == groups and all(p.stop - p.start <= 4 for p in parts)
    assert [t.traj_id for p in parts for t in iter_trajectories(None, part=p)] == [
        t.traj_id for t in iter_trajectories(small_groups)
    ]


def test_a_big_row_group_is_cut_in_at_most_eight_parts_that_cover_it(tmp_path):
    # the sample as written before groups were small: one group of every run
    parts = dataset_parts(bundled_dataset(), rows=1)
    n = len(load_trajectories(bundled_dataset()))
    assert 1 < len(parts) <= 8 and parts[0].start == 0 and parts[-1].stop == n
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    ids = [t.traj_id for p in parts for t in iter_trajectories(None, part=p)]
    assert ids == [t.traj_id for t in iter_trajectories(bundled_dataset())]


def test_a_bad_row_in_a_later_group_is_named_by_its_place_in_the_shard(tmp_path):
    import pyarrow as pa

    cols = {
        c: [f"x{i}" for i in range(8)] for c in ("traj_id", "source", "model_raw", "model_family", "task_id")
    }
    bad = tmp_path / "bad.parquet"
    # eight runs of no step, in groups of four, but the third of the second group has a step that is none
    pq.write_table(
        pa.table({**cols, "steps": [[1] if i == 6 else [] for i in range(8)]}), bad, row_group_size=4
    )
    first, second = dataset_parts(bad, rows=4)
    assert len(list(iter_trajectories(None, part=first))) == 4
    with pytest.raises(DatasetError, match=r"bad.parquet: row 6 is not a trajectory"):
        list(iter_trajectories(None, part=second))


def test_part_by_part_gives_the_runs_of_all_at_once_in_one_process_and_a_pool(small_groups):
    whole = _bills(ev.evaluate(load_episodes(small_groups), SPECS, progress=False))
    assert _bills(ev.evaluate(small_groups, SPECS, progress=False)) == whole
    assert _bills(ev.evaluate(small_groups, SPECS, progress=False, workers=2)) == whole
    # filters as before: a source, and tasks
    src = ev.evaluate(small_groups, SPECS, source="tau-bench", progress=False, workers=2)
    assert _bills(src) == [b for b in whole if b[1] in {r.traj_id for r in src}] and src
    assert {r.source for r in src} == {"tau-bench"}


def test_one_process_holds_the_episodes_of_about_one_part(small_groups, monkeypatch):
    made: list[list[weakref.ref]] = []
    alive_before: list[int] = []
    real = envs_data.part_episodes

    def counted(part, **kw):
        gc.collect()
        # episodes of every part but the last two (the one running and the one being read) are gone
        alive_before.append(sum(r() is not None for refs in made[:-1] for r in refs))
        eps = real(part, **kw)
        made.append([weakref.ref(e) for e in eps])
        return eps

    monkeypatch.setattr(ev, "part_episodes", counted)
    runs = ev.evaluate(small_groups, SPECS, progress=False)
    assert len(made) >= 5 and len(runs) == 3 * sum(len(m) for m in made)
    assert alive_before == [0] * len(made)


def test_the_parent_of_a_pool_compiles_no_run(small_groups, monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("the parent compiled a run")

    monkeypatch.setattr(envs_data, "compile_episode", refuse)
    monkeypatch.setattr(ev, "part_episodes", refuse)
    runs = ev.evaluate(small_groups, SPECS, progress=False, workers=2)
    assert {r.policy for r in runs} == {*SPECS, "oracle"} and not any(r.error for r in runs)


def test_filters_that_keep_nothing_are_said_before_any_run_is_read(small_groups, monkeypatch):
    monkeypatch.setattr(ev, "part_episodes", lambda *a, **kw: pytest.fail("a part was read"))
    with pytest.raises(ValueError, match=r"no usable trajectory .*model_family=\['nope'\].*families present"):
        ev.evaluate(small_groups, SPECS, model_family="nope", progress=False)
    with pytest.raises(ValueError, match="no trajectory of the 1 selected tasks"):
        ev.evaluate(small_groups, SPECS, tasks={"x/y"}, progress=False)


def test_runs_too_short_to_run_leave_the_bar_and_none_left_is_an_error(tmp_path):
    from dtoc_rl.data.schema import Trajectory

    t = load_trajectories(bundled_dataset())[0]
    short = Trajectory.from_row({**t.to_row(), "steps": t.to_row()["steps"][:1]})
    assert short.steps and len(load_episodes([t])) == 1
    ds = write_dataset([short], tmp_path / "short")
    with pytest.raises(ValueError, match="none of the 1 selected has at least 2 model calls"):
        ev.evaluate(ds, SPECS, progress=False)


def test_swapping_an_envs_episodes_lets_the_old_ones_go():
    from dtoc_rl.core.tokens import get_estimator
    from dtoc_rl.envs import ReplayEnv
    from dtoc_rl.sim.episode import compile_episode

    trajs = load_trajectories(bundled_dataset())[:4]
    old = [compile_episode(t, get_estimator("chars")) for t in trajs[:3]]
    env = ReplayEnv(trajectories=old, expose_episode=True)
    for i in range(3):
        ev.start_episode(env, i)
    refs = [weakref.ref(e) for e in old]
    del old
    env.episodes = load_episodes(trajs[3:])
    ev.start_episode(env, 0)
    gc.collect()
    assert [r() for r in refs] == [None] * 3


def test_a_pool_gets_parts_small_enough_to_share_out():
    filters = {"model_family": None, "source": None}
    one, _, _ = ev._plan(None, filters, None)
    two, _, _ = ev._plan(None, filters, None, workers=2)
    n = len(load_trajectories(bundled_dataset()))
    assert len(one) == 1 and len(two) >= 4  # the sample's 34 runs: one part alone, parts of 8 in a pool
    assert all(len(w.keep) <= 8 for w in two) and sum(len(w.keep) for w in two) == n


def test_a_run_without_a_model_name_is_evaluated_in_a_pool_too(tmp_path):
    trajs = load_trajectories(bundled_dataset())
    trajs[0].model_raw = None  # a log that names no model: priced by its family
    ds = write_dataset(trajs, tmp_path / "nameless")
    one = _bills(ev.evaluate(ds, SPECS, progress=False))
    assert _bills(ev.evaluate(ds, SPECS, progress=False, workers=2)) == one
    assert len(one) == 3 * len(load_episodes(ds)) and not any(b[2] != b[2] for b in one)


def test_a_part_that_cannot_be_read_is_its_runs_in_error_and_the_rest_completes(small_groups, monkeypatch):
    real = ev.part_episodes
    bad = ev._plan(small_groups, {"model_family": None, "source": None}, None)[0][1].part

    def damaged(part, **kw):
        if part == bad:
            raise DatasetError(f"{part.file}: damaged Parquet data (ZSTD decompression failed)")
        return real(part, **kw)

    monkeypatch.setattr(ev, "part_episodes", damaged)
    runs = ev.evaluate(small_groups, SPECS, progress=False)
    failed = [r for r in runs if r.error]
    assert len(failed) == 3 * 4 and all("damaged Parquet data" in r.error for r in failed)
    assert {r.traj_id for r in failed} == {t.traj_id for t in iter_trajectories(None, part=bad)}
    assert len(runs) - len(failed) == 3 * (len(load_episodes(small_groups)) - 4)


def test_a_part_of_a_file_written_again_is_not_read_and_a_worker_says_so(small_groups):
    (work, *_), _, _ = ev._plan(small_groups, {"model_family": None, "source": None}, None)
    f = next(small_groups.glob("*.parquet"))
    f.write_bytes(f.read_bytes())  # the same bytes, written again: another file as far as a plan knows
    import os

    os.utime(f, ns=(work.part.stamp[1] + 10**9, work.part.stamp[1] + 10**9))
    with pytest.raises(DatasetError, match="written again since its parts were planned"):
        list(iter_trajectories(None, part=work.part))
    # replaced by another file of the same size and time (a folder swapped at once, within the clock's
    # granularity): the inode tells it
    (work, *_), _, _ = ev._plan(small_groups, {"model_family": None, "source": None}, None)
    st = os.stat(f)
    twin = f.with_name("twin.tmp")
    twin.write_bytes(f.read_bytes())
    os.utime(twin, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(twin, f)
    with pytest.raises(DatasetError, match="written again since its parts were planned"):
        list(iter_trajectories(None, part=work.part))
    ev._init_worker(SPECS + ["oracle"], ev.CostConfig(), 128)
    try:
        out = ev._work(work)
    finally:
        ev._W.clear()
    assert len(out) == 3 * len(work.keep)
    assert all("written again" in r.error for r in out)


def test_curves_compile_only_the_runs_they_draw(small_groups, monkeypatch):
    made = []
    real = envs_data.compile_episode
    monkeypatch.setattr(envs_data, "compile_episode", lambda t, est: made.append(t.traj_id) or real(t, est))
    ids = [t.traj_id for t in load_trajectories(small_groups)][5:7]
    curves = ev.token_curves(small_groups, ["last_n:n=2"], ids)
    assert made == ids and set(curves) == set(ids)


def test_filters_given_once_as_iterators_are_read_as_often_as_needed(small_groups):
    with pytest.raises(ValueError, match=r"model_family=\['nope'\]"):
        ev.evaluate(small_groups, SPECS, model_family=iter(["nope"]), progress=False)


def test_two_runs_sharing_an_id_are_each_billed_against_their_own_log():
    import copy

    from dtoc_rl.sim.simulator import CostConfig, baseline_totals

    t = next(x for x in load_trajectories(bundled_dataset()) if len(x.steps) > 6)
    cut = copy.deepcopy(t)
    cut.steps = cut.steps[:4]  # a hand-made dataset: a second, shorter run under the same id
    eps = load_episodes([t, cut])
    runs = ev.evaluate(eps, ["none"], progress=False)
    base = [baseline_totals(e, CostConfig()).dollars for e in eps]
    assert [r.base_dollars for r in runs if r.policy == "none"] == base and base[0] != base[1]


def test_a_dataset_no_part_of_which_can_be_read_is_one_error(small_groups, monkeypatch):
    def damaged(part, **kw):
        raise DatasetError(f"{part.file}: damaged Parquet data (ZSTD decompression failed)")

    monkeypatch.setattr(ev, "part_episodes", damaged)
    with pytest.raises(DatasetError, match="damaged Parquet data"):
        ev.evaluate(small_groups, SPECS, progress=False)


def test_only_the_kept_rows_of_a_part_become_runs_across_batches(tmp_path, monkeypatch):
    import copy

    from dtoc_rl.data.schema import Trajectory

    base = load_trajectories(bundled_dataset())
    trajs = []
    for k in range(4):  # 136 runs: a part spans three batches of 64
        for t in base:
            c = copy.deepcopy(t)
            c.traj_id = f"{t.traj_id}#{k}"
            trajs.append(c)
    ds = write_dataset(trajs, tmp_path / "many")
    (part,) = dataset_parts(ds, rows=200)
    ids = [t.traj_id for t in iter_trajectories(ds)]
    keep = [0, 63, 64, 100, 135]
    made = []
    real = Trajectory.from_row
    monkeypatch.setattr(Trajectory, "from_row", classmethod(lambda cls, row: made.append(1) or real(row)))
    assert [t.traj_id for t in iter_trajectories(None, part=part, keep=keep)] == [ids[j] for j in keep]
    assert len(made) == len(keep)  # the others were never made objects


def test_curves_leave_out_a_named_run_too_short_to_replay(tmp_path):
    from dtoc_rl.data.schema import Trajectory

    trajs = load_trajectories(bundled_dataset())
    long = next(t for t in trajs if len(t.steps) > 5)
    short = Trajectory.from_row({**long.to_row(), "traj_id": "short", "steps": long.to_row()["steps"][:1]})
    ds = write_dataset([short, long], tmp_path / "two")
    curves = ev.token_curves(ds, ["last_n:n=2"], ["short", long.traj_id])
    assert set(curves) == {long.traj_id}
    assert set(ev.token_curves([short, long], ["last_n:n=2"], ["short", long.traj_id])) == {long.traj_id}


def test_rows_to_keep_without_a_part_are_refused():
    with pytest.raises(ValueError, match="keep names rows of a part"):
        next(iter_trajectories(bundled_dataset(), keep=[0]))


def test_a_dataset_written_again_while_its_names_are_read_is_said(small_groups, monkeypatch):
    import dataclasses

    real = ev.dataset_parts

    def grown(where, rows):  # the parts of a file that gained runs after its names were read
        parts = real(where, rows=rows)
        last = parts[-1]
        return [*parts, dataclasses.replace(last, start=last.stop, stop=last.stop + 4)]

    monkeypatch.setattr(ev, "dataset_parts", grown)
    with pytest.raises(DatasetError, match="changed while its runs were listed"):
        ev.evaluate(small_groups, SPECS, progress=False)


def test_runs_too_short_to_manage_are_left_out_and_said(tmp_path):
    """A run of one model call (a sub-agent's lone call whose transcript is elsewhere) has nothing to
    manage; evaluate leaves it out, and says how many, so the run count adds up."""
    from dataclasses import replace

    trajs = load_trajectories(bundled_dataset())[:3]
    short = replace(trajs[0], traj_id=trajs[0].traj_id + "-one-call", steps=trajs[0].steps[:1])
    ds = write_dataset([*trajs, short], tmp_path / "ds")
    with pytest.warns(
        UserWarning, match=r"1 of the 4 selected runs have fewer than 2 model calls.*first: .*-one-call"
    ):
        runs = ev.evaluate(ds, ["none"])
    assert {r.traj_id for r in runs} == {t.traj_id for t in trajs}
