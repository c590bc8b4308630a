"""Loading episodes for the envs: bundled sample, a dataset path, or objects."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dtoc_rl.core.tokens import get_estimator
from dtoc_rl.data.dataset import Part, dataset_parts, iter_trajectories, name_set
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.sim.episode import Episode, compile_episode

__all__ = ["load_episodes", "named_episodes", "nothing_usable", "part_episodes", "select_episodes"]


_COMPILED: OrderedDict[tuple[str, float, str], tuple[Episode, ...]] = OrderedDict()
_KEEP = 8  # datasets whose episodes stay compiled in this process (training reads its data twice)


def _compiled(path: str, mtime: float, estimator: str, progress: bool = False) -> tuple[Episode, ...]:
    key = (path, mtime, estimator)
    if key in _COMPILED:
        _COMPILED.move_to_end(key)
        return _COMPILED[key]
    from tqdm.auto import tqdm

    est = get_estimator(estimator)
    # streamed: a run read is compiled and let go (an episode whose shares were kept at ingest holds
    # nothing of it), so the peak is the episodes, not every run as objects besides them
    runs = tqdm(
        iter_trajectories(path),
        total=sum(p.stop - p.start for p in dataset_parts(path)) if progress else None,
        desc="load",
        unit="run",
        disable=not progress,
        leave=False,
    )
    _COMPILED[key] = eps = tuple(compile_episode(t, est) for t in runs)
    while len(_COMPILED) > _KEEP:
        _COMPILED.popitem(last=False)
    return eps


def _bundled() -> Path:
    from dtoc_rl.data.paths import bundled_dataset

    return bundled_dataset()


def _as_items(dataset: Any) -> list[Any]:
    """The rows or objects of an in-memory dataset: a ``datasets.Dataset`` (or a DatasetDict with one
    split), or any iterable of trajectories, episodes or rows."""
    if hasattr(dataset, "column_names") and hasattr(dataset, "to_list"):  # datasets.Dataset
        return dataset.to_list()
    if hasattr(dataset, "num_rows") and hasattr(dataset, "keys"):  # datasets.DatasetDict
        splits = list(dataset.keys())
        if len(splits) != 1:
            raise ValueError(
                f"dataset is a DatasetDict with splits {splits}: pass one, e.g. dataset['train']"
            )
        return dataset[splits[0]].to_list()
    if isinstance(dataset, dict | bytes) or not isinstance(dataset, Iterable):
        raise TypeError(
            f"dataset must be a folder path, a datasets.Dataset or a list of trajectories, episodes or "
            f"rows; got {type(dataset).__name__}"
        )
    return list(dataset)


def _episode(x: Any, i: int, est: Any) -> Episode:
    if isinstance(x, Episode):
        return x
    if isinstance(x, Trajectory):
        return compile_episode(x, est)
    if isinstance(x, dict):  # a row of the canonical schema (a Parquet or datasets row)
        try:
            return compile_episode(Trajectory.from_row(x), est)
        except (KeyError, TypeError) as e:
            raise ValueError(f"dataset item {i}: not a trajectory row of dtoc_rl.data.schema ({e})") from None
    raise TypeError(
        f"dataset item {i}: expected a Trajectory, an Episode or a row dict, got {type(x).__name__}"
    )


def select_episodes(
    eps: Iterable[Episode],
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    min_steps: int = 2,
) -> list[Episode]:
    """The episodes of these families and sources with at least ``min_steps`` model calls (none
    may be left: :func:`load_episodes` is the loader that refuses an empty result)."""
    fams, srcs = name_set(model_family), name_set(source)  # None or empty: no filter
    return [
        e
        for e in eps
        if (not fams or e.model_family in fams) and (not srcs or e.source in srcs) and e.n_calls >= min_steps
    ]


def nothing_usable(
    where: str,
    count: int,
    families: Iterable[str],
    sources: Iterable[str],
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    min_steps: int = 2,
) -> ValueError:
    """The error for a selection that leaves no episode, saying what the data holds instead."""
    fams = sorted(name_set(model_family) or ()) or "any"
    return ValueError(
        f"no usable trajectory in {where} (of {count}) for model_family={fams}, "
        f"source={sorted(name_set(source) or ()) or 'any'}, at least {min_steps} model calls; "
        f"families present: {sorted(set(families))}; sources present: {sorted(set(sources))}"
    )


def named_episodes(dataset: Any, traj_ids: Iterable[str], estimator: str = "chars") -> list[Episode]:
    """The episodes of these trajectory ids that have at least two model calls, in the dataset's order:
    of a dataset folder, only those runs are compiled (a plot of three runs of a big collection does
    not hold all of it)."""
    wanted = set(traj_ids)
    if dataset is None or isinstance(dataset, str | os.PathLike):
        est = get_estimator(estimator)
        runs = iter_trajectories(dataset if dataset is not None else _bundled())
        eps = [compile_episode(t, est) for t in runs if t.traj_id in wanted]
    else:
        eps = [e for e in load_episodes(dataset, min_steps=0) if e.traj_id in wanted]
    return select_episodes(eps)  # what a ReplayEnv replays: runs of fewer than two calls are not


def part_episodes(
    part: Part, *, keep: Iterable[int] | None = None, estimator: str = "chars"
) -> list[Episode]:
    """The episodes of one part of a dataset (:func:`dtoc_rl.data.dataset.dataset_parts`), compiled
    here and not kept: a process that goes part by part holds one part's episodes at a time.
    ``keep``: the part's rows (offsets in it) to compile, the others not made objects."""
    est = get_estimator(estimator)
    return [compile_episode(t, est) for t in iter_trajectories(None, part=part, keep=keep)]


def load_episodes(
    dataset: Any = None,
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    estimator: str = "chars",
    min_steps: int = 2,
    progress: bool = False,
) -> list[Episode]:
    """Episodes from the bundled sample (None), a dataset folder or Parquet file, a ``datasets.Dataset``,
    or a list of ``Trajectory`` / ``Episode`` objects or canonical rows; filtered by model family and
    source.  Raises ValueError when nothing is left.  ``progress``: a bar while a dataset folder's
    runs are read and compiled (a big collection takes minutes; the episodes are then kept for this
    process, and a second load is immediate)."""
    if dataset is None:
        dataset = _bundled()
    if isinstance(dataset, str | Path):
        p = Path(dataset)
        marker = p / "COMPLETE"
        mtime = marker.stat().st_mtime if marker.exists() else (p.stat().st_mtime if p.exists() else 0.0)
        eps = list(_compiled(str(p.resolve()), mtime, estimator, progress))
        where = str(p)
    else:
        items = _as_items(dataset)
        est = get_estimator(estimator)
        eps = [_episode(x, i, est) for i, x in enumerate(items)]
        where = f"{len(items)} objects"
    filters = {"model_family": model_family, "source": source, "min_steps": min_steps}
    kept = select_episodes(eps, **filters)
    if not kept:
        raise nothing_usable(
            where, len(eps), (e.model_family for e in eps), (e.source for e in eps), **filters
        )
    return kept
