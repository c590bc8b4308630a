"""Offline evaluation on Ray, for datasets too large for one machine.

``ray.data.read_parquet`` reads the dataset's Parquet shards; ``map_batches``
hands batches of trajectory rows to a pool of long-lived actors (a class-based
UDF under ``ActorPoolStrategy``), each of which builds its policies from the
specs once, in ``__init__``, and keeps one :class:`~dtoc_rl.envs.ReplayEnv`.
Every trajectory gives one :class:`~dtoc_rl.policies.evaluate.Run` per policy,
exactly as :func:`dtoc_rl.policies.evaluate.evaluate` makes them (same
compilation, filters, env settings and :func:`run_policy_on_episode`), in the
same order; :func:`~dtoc_rl.policies.evaluate.aggregate` then works unchanged.

Ray is an optional extra (``pip install 'dtoc-rl[ray]'``) and is imported only
when this path runs.  With no Ray instance running, :func:`evaluate_ray` starts
a local one (``RAY_ADDRESS`` or ``address=`` selects a cluster) and stops it at
the end; a running one (``ray.init(...)`` done by the caller) is used and left
running.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
from dtoc_rl.policies.evaluate import ORACLE, EpisodeRunner, Run, mark_split
from dtoc_rl.sim.simulator import CostConfig

__all__ = ["RAY_INSTALL_HINT", "RayNotAvailable", "evaluate_ray"]

RAY_INSTALL_HINT = "pip install 'dtoc-rl[ray]'"


class RayNotAvailable(ImportError):
    """Ray (with ray.data) is not installed."""


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise RayNotAvailable(
            f"the Ray backend needs Ray with Ray Data, which is not installed: {RAY_INSTALL_HINT}"
        ) from e
    return ray


class _EvalActor:
    """Ray Data UDF: one per worker, alive for the whole run."""

    def __init__(
        self,
        specs: Sequence[str],
        model_family: Any,
        source: Any,
        cost_config: CostConfig,
        max_items: int,
    ):
        from dtoc_rl.policies.registry import make_policy

        self.filters = {"model_family": model_family, "source": source}
        self.runner = EpisodeRunner([(s, make_policy(s)) for s in specs], cost_config, max_items)

    def _episodes(self, table) -> list:
        from dtoc_rl.data.schema import Trajectory
        from dtoc_rl.envs.data import load_episodes, select_episodes

        trajs = [Trajectory.from_row(row) for row in table.to_pylist()]
        # the same compilation and filters as the local path; a batch may keep none
        return select_episodes(load_episodes(trajs, min_steps=0), **self.filters) if trajs else []

    def __call__(self, table):
        import pyarrow as pa

        runs = list(self.runner.runs(self._episodes(table)))
        blobs = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in runs]
        return pa.table({"run": pa.array(blobs, pa.binary())})


def _dataset_files(dataset: Any) -> list[str]:
    from dtoc_rl.data.dataset import _shards

    if dataset is None:
        from dtoc_rl.data.paths import bundled_dataset

        dataset = bundled_dataset()
    if not isinstance(dataset, str | os.PathLike):
        raise TypeError("the Ray backend reads a dataset folder (Parquet shards), not objects in memory")
    return [str(f.resolve()) for f in _shards(Path(dataset))]


def evaluate_ray(
    dataset: str | os.PathLike | None,
    specs: Sequence[str],
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    cost_config: CostConfig | None = None,
    max_items: int = DEFAULT_MAX_ITEMS,
    workers: int | None = None,
    batch_size: int = 8,
    address: str | None = None,
    progress: bool = True,
    holdout_tasks: set[str] | None = None,
    left_out: Mapping[str, Any] | None = None,
    tune_tasks: set[str] | None = None,
    adapted: bool = False,
) -> list[Run]:
    """Run every policy spec (plus the oracle) over every trajectory of ``dataset`` on Ray.

    ``dataset``: a dataset folder (None: the bundled sample).  ``workers``: actors (default: the
    cluster's CPUs); ``batch_size``: trajectories per batch; ``holdout_tasks``, ``left_out``,
    ``tune_tasks`` and ``adapted`` as in :func:`~dtoc_rl.policies.evaluate.evaluate`.  Returns the
    same runs, in the same order, as :func:`~dtoc_rl.policies.evaluate.evaluate`.
    """
    ray = _import_ray()
    import pyarrow.parquet as pq

    from dtoc_rl.policies.registry import expand_specs, make_policy

    cost_config = cost_config or CostConfig()
    # sweeps (key=a|b) as on the command line
    specs = list(dict.fromkeys([*expand_specs(list(specs)), ORACLE]))
    for s in specs:  # a bad spec fails here in one line, not as an actor that died after Ray started
        make_policy(s)
    files = _dataset_files(dataset)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    # Ray's driver threads print to stdout (worker-pool warnings such as "(raylet) WARNING: 8 PYTHON
    # worker processes have been started", even with log_to_driver off): while Ray runs, stdout is
    # stderr, so that a caller's stdout (`dtoc-rl evaluate --json`) holds only what it prints itself.
    with contextlib.redirect_stdout(sys.stderr):
        runs = _run_on_ray(ray, files, rows, specs, model_family, source, cost_config, max_items, workers,
                           batch_size, progress, address)  # fmt: skip
    if not runs:
        raise ValueError(
            f"no usable trajectory in {dataset or 'the bundled sample'} for "
            f"model_family={model_family or 'any'}, source={source or 'any'}, at least 2 steps"
        )
    mark_split(runs, holdout_tasks, left_out, tune_tasks, adapted)
    return runs


def _run_on_ray(ray, files, rows, specs, model_family, source, cost_config, max_items, workers, batch_size,
                progress, address) -> list[Run]:  # fmt: skip
    # evaluate_ray's work on the cluster (started here and shut down again unless the caller runs one)
    from tqdm.auto import tqdm

    started = False
    # ray.init puts in a SIGTERM handler of its own, which outlives ray.shutdown: the caller's (the
    # command line's, which turns SIGTERM into a clean stop) is put back when Ray stops
    main_thread = threading.current_thread() is threading.main_thread()
    on_sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=progress)
        started = True
    runs: list[Run] = []
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
    try:
        ctx.execution_options.preserve_order = True  # runs in dataset order, like the local path
        ctx.enable_progress_bars = progress
        cpus = float(ray.cluster_resources().get("CPU", 1))
        n_actors = workers or max(1, int(cpus))
        # Leave one CPU for the read tasks: a pool holding every CPU would wait forever for its input.
        actor_cpus = max(0.0, min(1.0, (cpus - 1) / n_actors))
        ds = ray.data.read_parquet(files)
        try:  # blocks of batch_size rows, so that every actor gets work (a shard is one block)
            ds = ds.repartition(target_num_rows_per_block=batch_size)
        except TypeError:  # older Ray without streaming repartition: split into blocks of batch_size
            ds = ds.repartition(max(1, -(-rows // batch_size)))
        ds = ds.map_batches(
            _EvalActor,
            fn_constructor_kwargs={
                "specs": specs,
                "model_family": model_family,
                "source": source,
                "cost_config": cost_config,
                "max_items": max_items,
            },
            batch_size=batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=n_actors),
            num_cpus=actor_cpus,
        )
        with tqdm(total=rows * len(specs), desc="evaluate (ray)", unit="run", disable=not progress) as bar:
            for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                for blob in batch.column("run").to_pylist():
                    runs.append(pickle.loads(blob))
                    bar.update(1)
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
        if started:
            ray.shutdown()
            if on_sigterm is not None:
                signal.signal(signal.SIGTERM, on_sigterm)
    return runs
