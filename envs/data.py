"""Loading episodes for the envs: bundled sample, a dataset path, or objects."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from dtoc_rl.dataset import load_trajectories
from dtoc_rl.episode import Episode, compile_episode
from dtoc_rl.schema import Trajectory
from dtoc_rl.tokens import get_estimator

__all__ = ["load_episodes"]


@lru_cache(maxsize=8)
def _compiled(path: str, mtime: float, estimator: str) -> tuple[Episode, ...]:
    est = get_estimator(estimator)
    return tuple(compile_episode(t, est) for t in load_trajectories(path))


def _bundled() -> Path:
    from dtoc_rl.paths import bundled_dataset

    return bundled_dataset()


def load_episodes(
    dataset: str | Path | Sequence[Trajectory] | Sequence[Episode] | None = None,
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    estimator: str = "chars",
    min_steps: int = 2,
) -> list[Episode]:
    """Episodes from the bundled sample (None), a dataset folder, or objects;
    filtered by model family and source.  Raises ValueError when nothing is left."""
    if dataset is None:
        dataset = _bundled()
    if isinstance(dataset, str | Path):
        p = Path(dataset)
        marker = p / "COMPLETE"
        mtime = marker.stat().st_mtime if marker.exists() else (p.stat().st_mtime if p.exists() else 0.0)
        eps = list(_compiled(str(p.resolve()), mtime, estimator))
        where = str(p)
    else:
        items = list(dataset)
        est = get_estimator(estimator)
        eps = [x if isinstance(x, Episode) else compile_episode(x, est) for x in items]
        where = f"{len(items)} objects"
    fams = {model_family} if isinstance(model_family, str) else set(model_family or ())
    srcs = {source} if isinstance(source, str) else set(source or ())
    kept = [
        e
        for e in eps
        if (not fams or e.model_family in fams) and (not srcs or e.source in srcs) and e.n >= min_steps
    ]
    if not kept:
        have_f = sorted({e.model_family for e in eps})
        have_s = sorted({e.source for e in eps})
        raise ValueError(
            f"no usable trajectory in {where} (of {len(eps)}) for model_family={sorted(fams) or 'any'}, "
            f"source={sorted(srcs) or 'any'}, at least {min_steps} steps; "
            f"families present: {have_f}; sources present: {have_s}"
        )
    return kept
