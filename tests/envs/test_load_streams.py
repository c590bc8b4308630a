"""Loading a dataset's episodes holds the episodes, not every run besides them."""

from __future__ import annotations

import gc
import weakref

import dtoc_rl.envs.data as envs_data
from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.data.paths import bundled_dataset


def test_each_run_is_let_go_once_compiled(tmp_path, monkeypatch):
    ds = write_dataset(load_trajectories(bundled_dataset()), tmp_path / "ds")  # a path not cached yet
    seen: list[weakref.ref] = []
    alive: list[int] = []
    real = envs_data.compile_episode

    def counted(t, est):
        gc.collect()
        alive.append(sum(r() is not None for r in seen))
        seen.append(weakref.ref(t))
        return real(t, est)

    monkeypatch.setattr(envs_data, "compile_episode", counted)
    eps = envs_data.load_episodes(ds, min_steps=0)
    assert len(eps) == len(seen) > 20
    # the sample's shares were kept at ingest: an episode holds nothing of its run
    assert all(e.unique is not None for e in eps)
    assert max(alive) <= 1, alive


def test_a_load_shows_its_progress_once_and_is_kept(tmp_path, capsys):
    ds = write_dataset(load_trajectories(bundled_dataset()), tmp_path / "ds")
    first = envs_data.load_episodes(ds, min_steps=0, progress=True)
    err = capsys.readouterr().err
    assert "load:" in err and f"/{len(first)} " in err
    again = envs_data.load_episodes(ds, min_steps=0, progress=True)
    assert capsys.readouterr().err == "" and all(a is b for a, b in zip(first, again))
