"""Offline evaluation of policies on logged trajectories.

Every policy runs over every trajectory in ReplayEnv (one process, or a pool
of worker processes); each run gives one :class:`Run` record.  The hindsight
oracle always runs too, as the reference for "fraction of the oracle's
savings".  :func:`aggregate` turns runs into metrics per policy, overall and
per model family, source, cost regime and run length (or a crossing of them,
``split+length``), with 95% bootstrap confidence intervals over trajectories
(ratios of sums, resampled in pairs with the oracle).  :func:`done_when` reads
the issue-17 targets off those rows: per group, the best non-rule policy within
a miss budget against the oracle and every rule.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
import traceback
import warnings
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from dtoc_rl.data.dataset import (
    ROW_GROUP,
    DatasetError,
    Part,
    dataset_columns,
    dataset_parts,
    name_set,
    task_name,
)
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.data.schema import MISS_KINDS, NEED_KINDS
from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes, named_episodes, nothing_usable, part_episodes, select_episodes
from dtoc_rl.plots import policy_family
from dtoc_rl.policies.base import Policy, reset_policy
from dtoc_rl.policies.baselines import LoggedVisibility, NoManagement, OnHarness
from dtoc_rl.policies.cpu import torch_threads
from dtoc_rl.policies.registry import BASELINES, _line, expand_specs, make_policy
from dtoc_rl.sim import pricing
from dtoc_rl.sim.episode import Episode, drop_unseen_needs
from dtoc_rl.sim.pricing import Prices, cache_regime
from dtoc_rl.sim.simulator import CostConfig, baseline_totals

__all__ = [
    "GROUPINGS",
    "LONG_RUN_TOKENS",
    "METRICS",
    "Run",
    "aggregate",
    "done_when",
    "evaluate",
    "miss_rows",
    "missed_outputs",
    "run_policy_on_episode",
    "token_curves",
    "torch_threads",
]

ORACLE = "oracle"

#: A run is "long" when its mean prompt per model call, with nothing hidden, is at least this many
#: tokens.  Long runs are where the bill is (every call re-reads the whole context), and a cache
#: changes more there, so they are reported apart; the mean of the unmanaged prompt depends only on the
#: log, never on the policy, so every policy's run of a trajectory falls on the same side.
LONG_RUN_TOKENS = 20_000

#: What :func:`aggregate` can group by; ``a+b`` crosses two of them (``split+length``).
GROUPINGS = ("overall", "model_family", "source", "split", "regime", "length")


def run_length(base_input_tokens: float, calls: int) -> str:
    """``"long"`` or ``"short"`` (see :data:`LONG_RUN_TOKENS`)."""
    return "long" if calls and base_input_tokens / calls >= LONG_RUN_TOKENS else "short"


@dataclass
class Run:
    policy: str
    traj_id: str
    model_family: str
    source: str
    task_id: str
    calls: int = 0
    dollars: float = 0.0
    base_dollars: float = 0.0
    input_tokens: int = 0
    base_input_tokens: int = 0
    active_token_sum: int = 0
    misses: int = 0
    rereads: int = 0
    mgmt_calls: int = 0
    changes: int = 0
    placeholder_tokens: int = 0
    invalid_actions: int = 0
    split: str = "all"  # "train" / "tune" / "held-out" / "left out" against a policy's training
    regime: str = ""  # pricing.cache_regime() of the run's model version
    length: str = ""  # "short" / "long": run_length() of the unmanaged prompt per call
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def start_episode(env: ReplayEnv, index: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``env.reset`` on episode ``index``, seeded by its trajectory id: what the simulator draws
    (whether a miss under ``miss="calibrated"`` re-reads) is the same random stream for every policy
    and every evaluation of that run, whichever worker or order runs it."""
    return env.reset(seed=zlib.crc32(env.episodes[index].traj_id.encode()), options={"index": index})


def run_policy_on_episode(policy, env: ReplayEnv, index: int, label: str) -> Run:
    """One episode of ``policy`` (:func:`start_episode`); an exception becomes ``Run.error`` with the
    trajectory id."""
    ep = env.episodes[index]
    run = Run(label, ep.traj_id, ep.model_family, ep.source, ep.task_id)
    run.regime = cache_regime(env.cfg.prices_of(ep))
    if any(ep.logged_dropped):  # a window or a compaction dropped something (a window may keep all)
        run.extra["harness_dropped"] = True  # the log's, whatever the policy does
    try:
        obs, info = start_episode(env, index)
        reset_policy(policy, info)
        done = False
        while not done:
            obs, _, done, _, info = env.step(policy.act(obs, info))
        t, b = info["totals"], info["all_visible"]
        run.calls = t["calls"]
        run.dollars, run.base_dollars = t["dollars"], b["dollars"]
        run.input_tokens, run.base_input_tokens = t["input_tokens"], b["input_tokens"]
        run.active_token_sum = t["active_token_sum"]
        for k in ("misses", "rereads", "mgmt_calls", "changes", "placeholder_tokens", "invalid_actions"):
            setattr(run, k, t[k])
        if info.get("missed"):
            run.extra["missed"] = missed_outputs(ep, info["missed"], env.cfg.need_kinds)
        errors = getattr(policy, "errors", None)
        if errors:
            run.extra["policy_errors"] = dict(errors)
        run.length = run_length(run.base_input_tokens, run.calls)
    except Exception as e:  # a policy that raises on one trajectory must not stop the rest
        run.error = _line(e)  # one line; the traceback keeps the rest
        run.extra["traceback"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):  # the length is the log's, whatever the policy did
            base = baseline_totals(ep, env.cfg)
            run.length = run_length(base.input_tokens, base.calls)
    return run


def missed_outputs(
    ep: Episode, missed: Sequence[tuple[int, int]], counted: Sequence[str] = MISS_KINDS
) -> list[dict[str, Any]]:
    """What each miss of a run was (ReplayEnv's final ``info["missed"]``): the model ``call`` that
    needed the hidden output, the output's ``step``, its ``age`` in calls, its tool and estimated
    tokens, why the call needed it (``need``: the kinds of its need labels the simulator counts,
    ``counted``, and ``unread`` for the answer to the call before, which no call had read) and the
    start of its text (``preview``)."""
    call_of, starts = ep.call_of_step, ep.starts
    out = []
    for c, j in missed:
        a, b = int(ep.need_ptr[int(starts[c])]), int(ep.need_ptr[int(starts[c + 1])])
        kinds = {
            NEED_KINDS[int(k)]
            for i, k in zip(ep.need_idx[a:b], ep.need_kind[a:b])
            if int(i) == j and NEED_KINDS[int(k)] in counted
        }
        if c >= 1 and call_of[j] == c - 1:
            kinds.add("unread")
        out.append(
            {
                "call": int(c),
                "step": int(j),
                "age": int(c - call_of[j]),
                "tool": ep.tool_names[j] if j < len(ep.tool_names) else "",
                "tokens": int(ep.est_tok[j]),
                "need": "+".join(sorted(kinds)),
                "preview": ep.previews[j][:120] if j < len(ep.previews) else "",
            }
        )
    return out


def miss_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per miss of ``runs`` (``evaluate --misses-out``): the run's policy, trajectory, source,
    model family and split, then :func:`missed_outputs`' fields."""
    return [
        {"policy": r.policy, "traj_id": r.traj_id, "source": r.source, "model_family": r.model_family,
         "split": r.split, **m}
        for r in runs
        for m in r.extra.get("missed", ())
    ]  # fmt: skip


# -- parts of a dataset, and the worker pool --------------------------------------
class EpisodeRunner:
    """Every policy over batch after batch of episodes, in one ReplayEnv kept across batches (its
    caches are per batch): a process that goes part by part holds one part's episodes at a time.
    The local evaluator, its workers and the Ray actors all run episodes through it."""

    def __init__(
        self,
        policies: Sequence[tuple[str, Any]],
        cost_config: CostConfig,
        max_items: int,
        on_harness: bool = False,
    ):
        self.policies = list(policies)
        self.cost_config = cost_config
        self.max_items = max_items
        self.env: ReplayEnv | None = None
        # on the harness: each policy over what the run's harness hid, and the harness as it ran (the
        # rule that adds nothing to it) as the run's base; runs whose log hid nothing are as without
        self.on_harness = on_harness
        self._over = [(label, OnHarness(pol)) for label, pol in self.policies] if on_harness else []
        self._harness = LoggedVisibility() if on_harness else None

    def runs(self, eps: Sequence[Episode]) -> Iterator[Run]:
        """One run per episode and policy, episode by episode, policies in their order."""
        if not eps:
            return
        if self.on_harness:  # the log is the base: what its agent did about a masked output is in it too
            eps = [drop_unseen_needs(e, masked=True) for e in eps]
        if self.env is None:
            self.env = ReplayEnv(
                trajectories=eps, max_items=self.max_items, cost_config=self.cost_config, expose_episode=True
            )
        else:
            self.env.episodes = eps
        for i, ep in enumerate(eps):
            if not (self.on_harness and (any(ep.logged_masked) or any(ep.logged_dropped))):
                for label, pol in self.policies:
                    yield run_policy_on_episode(pol, self.env, i, label)
                continue
            base = run_policy_on_episode(self._harness, self.env, i, "harness")
            for label, pol in self._over:
                run = run_policy_on_episode(pol, self.env, i, label)
                run.extra["on_harness"] = True
                if base.error is None and run.error is None:  # its length stays the log's, unmanaged
                    run.base_dollars, run.base_input_tokens = base.dollars, base.input_tokens
                elif run.error is None:
                    run.error = f"the harness as it ran: {base.error}"
                yield run


@dataclass(frozen=True)
class _Work:
    """A part of a dataset folder, the rows of it (offsets in the part) the filters keep, and their
    names (traj_id, model_family, source, task_id): a part that cannot be read is runs in error."""

    part: Part
    keep: tuple[int, ...]
    names: tuple[tuple[str, str, str, str], ...] = ()


_NAME_COLUMNS = ["source", "task_id", "model_family", "model_raw", "traj_id"]


def _unread(work: _Work, labels: Sequence[str], error: Exception) -> list[Run]:
    """The runs of a part that could not be read (damaged, or written again meanwhile), one per kept
    row and policy, in error: the parts before and after it are still evaluated."""
    why = _line(error)
    return [
        Run(label, *names, error=why, extra={"unread": str(error)})
        for names in work.names
        for label in labels
    ]


def _plan(
    dataset, filters: dict[str, Any], tasks: set[str] | None, workers: int = 1
) -> tuple[list[_Work], set[str], set[tuple[str, str]]]:
    """The work of evaluating a dataset folder, from the runs' names alone (no run is read or
    compiled here): its parts with the rows of each the filters keep (parts keeping none left out),
    the task names and the (family, model) pairs of the kept rows.  The filters' errors are
    load_episodes' (runs with too few calls are only known when a part is compiled).  For a pool of
    ``workers``, parts are cut to about four a worker when the runs kept are few (at least 8 runs a
    part): a worker left alone with a last big part would be the whole pool's wait."""
    where = dataset if dataset is not None else bundled_dataset()
    cols = dataset_columns(where, _NAME_COLUMNS)
    fams, srcs = filters["model_family"], filters["source"]  # sets, or None: evaluate made them so
    rows = list(zip(*(cols[c] for c in _NAME_COLUMNS)))
    ok = [(not fams or f in fams) and (not srcs or s in srcs) for s, _, f, _, _ in rows]
    if not any(ok):
        raise nothing_usable(str(where), len(rows), cols["model_family"], cols["source"], **filters)
    if tasks is not None:
        ok = [k and task_name(s, t) in tasks for k, (s, t, _, _, _) in zip(ok, rows)]
        if not any(ok):
            raise _no_task(tasks)
    kept_rows = sum(ok)
    size = ROW_GROUP if workers <= 1 else min(ROW_GROUP, max(8, -(-kept_rows // (4 * workers))))
    parts = dataset_parts(where, rows=size)
    if sum(p.stop - p.start for p in parts) != len(rows):  # written again while its names were read
        raise DatasetError(f"{where} changed while its runs were listed (written again?); evaluate it again")
    work: list[_Work] = []
    at = 0
    for part in parts:
        size = part.stop - part.start
        keep = tuple(j for j in range(size) if ok[at + j])
        if keep:
            names = tuple((i, f or "", s, t) for s, t, f, _, i in (rows[at + j] for j in keep))
            work.append(_Work(part, keep, names))
        at += size
    kept = [r for r, k in zip(rows, ok) if k]
    # a run without a model name is priced by its family, as its episode is (model_raw "")
    return work, {task_name(s, t) for s, t, _, _, _ in kept}, {(f or "", m or "") for _, _, f, m, _ in kept}


def _no_task(tasks: set[str]) -> ValueError:
    return ValueError(f"no trajectory of the {len(tasks)} selected tasks in the dataset")


def _episodes_of(work: _Work) -> list[Episode]:
    """The kept rows of a part as episodes, those with too few model calls left out."""
    return select_episodes(part_episodes(work.part, keep=work.keep))


def _load(dataset, filters: dict[str, Any], tasks: set[str] | None) -> list[Episode]:
    eps = load_episodes(dataset, **filters)
    if tasks is not None:
        eps = [e for e in eps if task_name(e.source, e.task_id) in tasks]
        if not eps:
            raise _no_task(tasks)
    return eps


_W: dict[str, Any] = {}


def _init_worker(specs, cost_cfg, max_items, threads=None, warned=(), show=None, on_harness=False):
    # the parent's way of showing a warning (the CLI's one line), and the prices it has warned about
    # already: a worker repeats neither the source line nor the parent's warnings
    if show is not None:
        warnings.showwarning = show
    pricing.mark_warned(warned)
    try:
        _W["runner"] = EpisodeRunner([(s, make_policy(s)) for s in specs], cost_cfg, max_items, on_harness)
    except Exception as e:  # a bad spec: raised by the first task, so the caller gets it as it was raised
        _W["failed"] = e
        return
    if threads and "torch" in sys.modules:  # the worker is this module's own process
        sys.modules["torch"].set_num_threads(threads)


def _shown() -> Callable[..., None] | None:
    """``warnings.showwarning`` if a worker can be sent it (a module's function, as the CLI's is)."""
    try:
        pickle.dumps(warnings.showwarning)
    except Exception:  # a lambda or a bound method of the caller's: the worker keeps Python's own
        return None
    return warnings.showwarning


def _part_runs(runner: EpisodeRunner, work: _Work) -> Iterator[Run]:
    """A part's runs as they are made (fewer than its kept rows' when some have too few calls), or,
    when it cannot be read, one in error per kept row and policy."""
    try:
        eps = _episodes_of(work)
    except DatasetError as e:
        yield from _unread(work, [label for label, _ in runner.policies], e)
        return
    yield from runner.runs(eps)


def _work(work: _Work) -> list[Run]:
    """A pool worker's task: :func:`_part_runs` of one part."""
    if "failed" in _W:  # the worker could not start (an initializer's error would break the whole pool)
        raise _W["failed"].with_traceback(None)  # the same error each time, not a longer trace
    return list(_part_runs(_W["runner"], work))


def _split_objects(
    specs: Sequence[str | Policy], policies: dict[str, Any] | None
) -> tuple[list[str], dict[str, Any]]:
    """Spec strings, and ready policy objects by label (objects in ``specs`` are labelled by their
    ``label``, made unique with ``#2``, ``#3``...)."""
    strs: list[str] = []
    objs: dict[str, Any] = dict(policies or {})
    for s in specs:
        if isinstance(s, str):
            strs.append(s)
            continue
        pol = make_policy(s)  # checks it is a policy
        base = str(getattr(pol, "label", None) or type(pol).__name__)
        label, k = base, 1
        while label in objs or label in strs or label == ORACLE:  # "oracle" is the reference's row
            k += 1
            label = f"{base}#{k}"
        objs[label] = pol
    return strs, objs


def evaluate(
    dataset: Any,
    specs: Sequence[str | Policy],
    *,
    model_family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    cost_config: CostConfig | None = None,
    max_items: int = DEFAULT_MAX_ITEMS,
    workers: int = 1,
    progress: bool = True,
    policies: dict[str, Any] | None = None,
    holdout_tasks: set[str] | None = None,
    left_out: Mapping[str, Any] | None = None,
    tune_tasks: set[str] | None = None,
    adapted: bool = False,
    threads: int | None = 1,
    prices: Mapping[str, Prices] | None = None,
    tasks: set[str] | None = None,
    on_harness: bool = False,
) -> list[Run]:
    """Run every policy (plus the oracle) over every trajectory of ``dataset``.

    ``specs`` holds policy spec strings (``dtoc_rl.policies.registry``, including ``module:Class``
    for a user's own policy) and/or ready policy objects; ``policies`` may also map labels to
    objects.  Objects run in this process only.  ``dataset`` is anything ReplayEnv takes (a folder,
    a ``datasets.Dataset``, a list of trajectories).  ``holdout_tasks`` (``"source/task_id"``
    strings, e.g. a learned policy's validation tasks) marks each run's ``split`` as ``held-out``
    or ``train``, ``tune`` for ``tune_tasks`` (its thresholds were chosen on them; ``adapted``: by
    ``dtoc-rl train --adapt``), or ``left out`` for the source or family it was trained without
    (``left_out``, :func:`mark_split`).  ``threads``: torch CPU threads while evaluating (restored
    after; one decision of a small network is fastest on one, and several spin badly on a busy
    machine); None leaves them.
    ``prices``: the user's prices by model name (:func:`dtoc_rl.sim.pricing.load_price_table`); a
    trajectory whose model (or family) has an entry is billed, planned and observed at those prices
    (they join ``cost_config.price_table``, over its entries of the same name, and travel with it to
    the worker pool).  ``tasks``
    (``"source/task_id"`` strings): evaluate only their trajectories.  ``on_harness``: every policy
    on top of what each run's harness hid (its window, compactions, masking; :class:`OnHarness`), its
    savings against the harness as it ran rather than against keeping everything (runs whose log hid
    nothing: the same either way).
    """
    from tqdm.auto import tqdm

    # one spec or task given as a string is one, not its characters; task sets as any collection
    specs = [specs] if isinstance(specs, str | Policy) else specs
    tasks, holdout_tasks, tune_tasks = (name_set(x) for x in (tasks, holdout_tasks, tune_tasks))
    cost_config = cost_config or CostConfig()
    if prices:
        cost_config = replace(cost_config, price_table={**(cost_config.price_table or {}), **prices})
    # as sets, read as often as needed (a generator would be empty the second time)
    filters = {"model_family": name_set(model_family), "source": name_set(source)}
    specs, policies = _split_objects(specs, policies)
    specs = list(dict.fromkeys([*expand_specs(specs), ORACLE]))  # sweeps (key=a|b) as on the command line
    labels = len(specs) + len(policies)
    # A dataset folder is read part by part (its runs' names first, for the filters and the bar):
    # this process, or each worker, holds one part's episodes at a time, whatever the dataset's size.
    # Objects in memory are one batch.
    by_parts = dataset is None or isinstance(dataset, str | os.PathLike)
    in_pool = by_parts and workers > 1 and not policies
    if by_parts:
        plan, names, models = _plan(dataset, filters, tasks, workers if in_pool else 1)
        n = sum(len(w.keep) for w in plan)
    else:
        eps = _load(dataset, filters, tasks)
        names = {task_name(e.source, e.task_id) for e in eps}
        n = len(eps)
    if holdout_tasks and not any("/" in t for t in holdout_tasks) and not names & holdout_tasks:
        # bare ids would mark every run "train" without a word
        warnings.warn(
            "no holdout task names a task of these runs: task names are 'source/task_id' (e.g. "
            f"{min(names)!r}), not the task id alone",
            stacklevel=2,
        )
    runs: list[Run] = []
    bar = tqdm(total=n * labels, desc="evaluate", unit="run", disable=not progress)

    def done(work: _Work, made: int) -> None:  # runs with too few model calls: out of the bar's total
        if made < len(work.keep) * labels:
            bar.total -= len(work.keep) * labels - made
            bar.refresh()

    try:
        # Workers build the env and policies from the specs, and read their parts (nothing big is pickled).
        if in_pool:
            # price each model here first: its warning, if any, is given once, and the workers are told
            for fam, raw in sorted(models):
                cost_config.prices_of(SimpleNamespace(model_family=fam, model_raw=raw))
            # forkserver, not fork: a forked child of a process with torch's thread pools can deadlock.
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("forkserver"),
                initializer=_init_worker,
                initargs=(specs, cost_config, max_items, threads, pricing.warned(), _shown(), on_harness),
            ) as pool:
                for work, out in zip(plan, pool.map(_work, plan)):
                    runs.extend(out)
                    bar.update(len(out))
                    done(work, len(out))
        else:
            runner = EpisodeRunner(
                [(s, make_policy(s)) for s in specs] + list(policies.items()),
                cost_config,
                max_items,
                on_harness,
            )
            with torch_threads(threads):
                for work in plan if by_parts else [None]:
                    made = len(runs)
                    for run in runner.runs(eps) if work is None else _part_runs(runner, work):
                        runs.append(run)
                        bar.update(1)
                    if work is not None:
                        done(work, len(runs) - made)
    finally:  # also when a worker or a policy raises: no bar left drawn over the error
        bar.close()
    if runs and all("unread" in r.extra for r in runs):  # no part could be read: the data's error
        raise DatasetError(runs[0].extra["unread"])
    if not runs:  # every kept run had too few model calls (known once compiled)
        raise ValueError(
            f"no usable trajectory in {dataset or 'the bundled sample'}: none of the {n} selected has "
            "at least 2 model calls"
        )
    if (few := n - len(made := {r.traj_id for r in runs})) > 0:  # said: a run count must add up
        named = [w[0] for work in plan for w in work.names if w[0] not in made] if by_parts else []
        first = f" (first: {', '.join(named[:3])})" if named else ""
        warnings.warn(
            f"{few} of the {n} selected runs have fewer than 2 model calls (no output is ever in a later "
            f"prompt: nothing to manage) and are left out{first}",
            stacklevel=2,
        )
    mark_split(runs, holdout_tasks, left_out, tune_tasks, adapted)
    return runs


def mark_split(
    runs: Sequence[Run],
    holdout_tasks: set[str] | None,
    left_out: Mapping[str, Any] | None,
    tune_tasks: set[str] | None = None,
    adapted: bool = False,
) -> None:
    """Each run's ``split`` against a learned policy's training; unchanged without ``holdout_tasks``:

    * ``left out``: the source or model family it was trained without (``left_out`` as
      ``{"source": ..., "family": ...}``);
    * ``held-out``: ``holdout_tasks``, the tasks it neither trained on nor chose anything on (a single
      validation task that had to do both stays held-out);
    * ``tune``: ``tune_tasks``, not trained on but its training stopped and its thresholds were
      chosen on them: neither unseen nor trained on;
    * ``train``: the rest.

    In that order, except that an ``adapted`` checkpoint's tune tasks come first: it chose its
    thresholds on every run of those tasks, a left-out harness's or family's included (training drops
    the left-out runs before its tune split, so an unadapted checkpoint's never were)."""
    if holdout_tasks is None:
        return
    src, fam = (left_out or {}).get("source"), (left_out or {}).get("family")
    tune = (tune_tasks or set()) - holdout_tasks
    for r in runs:
        name = task_name(r.source, r.task_id)
        if adapted and name in tune:
            r.split = "tune"
        elif (src and r.source == src) or (fam and r.model_family == fam):
            r.split = "left out"
        elif name in holdout_tasks:
            r.split = "held-out"
        else:
            r.split = "tune" if name in tune else "train"


def token_curves(
    dataset: Any,
    specs: Sequence[str | Policy],
    traj_ids: Sequence[str],
    *,
    cost_config: CostConfig | None = None,
    max_items: int = DEFAULT_MAX_ITEMS,
    policies: dict[str, Any] | None = None,
    threads: int | None = 1,
) -> dict[str, dict[str, list[int]]]:
    """Active tokens at every call, per trajectory and policy (for the curve plot); ``threads`` as in
    :func:`evaluate`."""
    specs, policies = _split_objects(specs, policies)
    eps = named_episodes(dataset, traj_ids)
    env = ReplayEnv(trajectories=eps, max_items=max_items, cost_config=cost_config, expose_episode=True)
    objs = [(s, make_policy(s)) for s in dict.fromkeys([*specs, ORACLE])] + list((policies or {}).items())
    out: dict[str, dict[str, list[int]]] = {}
    with torch_threads(threads):
        for i, ep in enumerate(eps):
            out[ep.traj_id] = {}
            for label, pol in objs:
                obs, info = start_episode(env, i)
                reset_policy(pol, info)
                curve, done = [], False
                while not done:
                    obs, _, done, _, info = env.step(pol.act(obs, info))
                    curve.append(int(env.sim.prev_prompt))
                out[ep.traj_id][label] = curve
    return out


# -- aggregation -------------------------------------------------------------------
METRICS = (
    "savings",
    "token_savings",
    "mean_active_tokens",
    "input_tokens",
    "dollars",
    "misses_per_100",
    "rereads",
    "mgmt_calls",
    "placeholder_overhead",
    "oracle_fraction",
)


#: Below this share of the bill the oracle saved nothing a share of it can be measured against: the
#: ratio of two near-zero savings is noise (a policy losing 0.5% where the oracle saves 0.03% is
#: "-1666% of the oracle"), so the share is NaN there and the 60% target is not judged.
MIN_ORACLE_SAVINGS = 1e-3


def _stats(a: dict[str, np.ndarray], o: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics for resample index sets ``idx`` (R, n): one value per resample."""

    def s(x):
        return x[idx].sum(axis=-1)

    base = s(a["base_dollars"])
    savings = 1 - s(a["dollars"]) / np.maximum(base, 1e-12)
    oracle_sav = 1 - s(o["dollars"]) / np.maximum(s(o["base_dollars"]), 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(oracle_sav >= MIN_ORACLE_SAVINGS, savings / oracle_sav, np.nan)
    calls = np.maximum(s(a["calls"]), 1)
    return {
        "savings": savings,
        "token_savings": 1 - s(a["input_tokens"]) / np.maximum(s(a["base_input_tokens"]), 1),
        "mean_active_tokens": s(a["active_token_sum"]) / calls,
        "input_tokens": s(a["input_tokens"]),
        "dollars": s(a["dollars"]),
        "misses_per_100": 100 * s(a["misses"]) / calls,
        "rereads": s(a["rereads"]),
        "mgmt_calls": s(a["mgmt_calls"]),
        "placeholder_overhead": s(a["placeholder_tokens"]) / np.maximum(s(a["input_tokens"]), 1),
        "oracle_fraction": frac,
    }


#: Indices drawn at a time for :func:`_bootstrap`: memory bounded whatever the group's size.
BOOT_BLOCK = 1 << 22


def _bootstrap(a: dict[str, np.ndarray], o: dict[str, np.ndarray], rng: np.random.Generator, n_boot: int):
    """:func:`_stats` of ``n_boot`` resamples of the ``n`` runs, drawn a block of resamples at a time
    (at most :data:`BOOT_BLOCK` indices): a ``Generator`` continues one stream across calls, so the
    draws, and the figures, are those of one ``(n_boot, n)`` draw, without that array (and a copy
    of it per metric) in memory at once."""
    n = len(a["dollars"])
    step = max(1, BOOT_BLOCK // n)
    blocks = [
        _stats(a, o, rng.integers(0, n, size=(min(step, n_boot - i), n))) for i in range(0, n_boot, step)
    ] or [_stats(a, o, np.zeros((0, n), np.int64))]  # no resample: empty, so no interval
    return {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}


def _group_key(dim: str) -> Callable[[Run], str]:
    """The group of a run under ``dim``: one of :data:`GROUPINGS`, or several joined by ``+``."""
    parts = dim.split("+")
    bad = [d for d in parts if d not in GROUPINGS]
    if bad:
        raise ValueError(
            f"cannot group by {dim!r}: {', '.join(map(repr, bad))} is not one of {', '.join(GROUPINGS)}"
        )
    if parts == ["overall"]:
        return lambda r: "all"
    if len(parts) == 1:
        return lambda r: getattr(r, dim)
    return lambda r: " | ".join("all" if d == "overall" else str(getattr(r, d)) for d in parts)


def aggregate(
    runs: Sequence[Run],
    *,
    by: Sequence[str] = ("overall", "model_family", "source"),
    n_boot: int = 1000,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Rows ``{policy, group_by, group, n, errors, first_error, <metric>, <metric>_lo, <metric>_hi}``.

    ``by``: groupings of :data:`GROUPINGS`, or crossings such as ``split+length`` (groups named
    ``"held-out | long"``); an unknown one is a ValueError before any work.

    ``errors`` counts the policy's failed runs in the group and ``first_error`` quotes one; a policy
    with no run to measure in a group (its own failed, or no oracle run completed on the same
    trajectories: ``errors`` 0) still gets its row, with ``n = 0`` and NaN metrics.  ``progress``:
    a bar over the groupings (the resampling of a big collection's groups takes a while)."""
    from tqdm.auto import tqdm

    by = [by] if isinstance(by, str) else by  # one grouping, not its letters
    keys = {dim: _group_key(dim) for dim in by}
    policies = list(dict.fromkeys(r.policy for r in runs))
    oracle = {r.traj_id: r for r in runs if r.error is None and r.policy == ORACLE}
    fields_ = ("calls", "dollars", "base_dollars", "input_tokens", "base_input_tokens", "active_token_sum",
               "misses", "rereads", "mgmt_calls", "placeholder_tokens")  # fmt: skip
    rows = []
    for dim in tqdm(by, desc="bootstrap", unit="grouping", disable=not progress):
        keyf = keys[dim]
        # each run's group once, its runs by (group, policy): not a pass over every run per pair
        done: dict[tuple[str, str], list[Run]] = defaultdict(list)
        broke: dict[tuple[str, str], list[Run]] = defaultdict(list)
        for r in runs:
            (done if r.error is None else broke)[(keyf(r), r.policy)].append(r)
        groups = sorted({g for g, _ in done} | {g for g, _ in broke}, key=str)
        for g in groups:
            for p in policies:
                fails = broke.get((g, p), [])
                sel = sorted(
                    (r for r in done.get((g, p), ()) if r.traj_id in oracle), key=lambda r: r.traj_id
                )
                if not sel:
                    # its own runs failed, or the oracle's did: a row says so
                    if fails or done.get((g, p)):
                        row = {"policy": p, "group_by": dim, "group": g, "n": 0, "errors": len(fails),
                               "first_error": fails[0].error if fails else ""}  # fmt: skip
                        for k in METRICS:
                            row[k] = row[f"{k}_lo"] = row[f"{k}_hi"] = float("nan")
                        rows.append(row)
                    continue
                a = {f: np.array([getattr(r, f) for r in sel], float) for f in fields_}
                o = {f: np.array([getattr(oracle[r.traj_id], f) for r in sel], float) for f in fields_}
                n = len(sel)
                point = {k: float(v[0]) for k, v in _stats(a, o, np.arange(n)[None, :]).items()}
                # drawn from the group's runs themselves: one set of runs gets one interval whichever
                # grouping names it (overall, a family, a source that hold the same runs), and two
                # policies on the same runs are resampled alike
                ids = "\n".join(r.traj_id for r in sel).encode()
                boot = _bootstrap(a, o, np.random.default_rng([seed, zlib.crc32(ids)]), n_boot)
                row = {"policy": p, "group_by": dim, "group": g, "n": n, "errors": len(fails),
                       "first_error": fails[0].error if fails else ""}  # fmt: skip
                for k in METRICS:
                    row[k] = point[k]
                    lo, hi = (  # no interval around a value that is not one (a share of nothing)
                        np.nanpercentile(boot[k], [2.5, 97.5])
                        if np.isfinite(boot[k]).any() and point[k] == point[k]
                        else (np.nan,) * 2
                    )
                    row[f"{k}_lo"], row[f"{k}_hi"] = float(lo), float(hi)
                rows.append(row)
    return rows


def _is_oracle(policy: str) -> bool:
    """The oracle or a hindsight variant of it, by spec (``oracle:restores=0``) or by label
    (``oracle(restores=False)``, ``oracle#2``)."""
    return policy_family(policy) == ORACLE


def is_rule(policy: str) -> bool:
    """A spec or label of one of the rule baselines (:data:`~dtoc_rl.policies.registry.BASELINES`):
    ``hide_big:tokens=8000`` and a rule object's label ``hide_big(tokens=8000,age=1)`` alike."""
    return policy_family(policy) in BASELINES


def _sweep_of(policy: str) -> str:
    """A policy spec without its ``threshold``: the points of one threshold sweep share it."""
    name, sep, params = policy.partition(":")
    kept = [kv for kv in params.split(",") if kv and not kv.startswith("threshold=")]
    return f"{name}{sep}{','.join(kept)}"


#: Rule baselines that are references rather than rivals in :func:`done_when`.
_REFERENCES = frozenset({NoManagement.name, LoggedVisibility.name})


def done_when(
    rows: Sequence[dict[str, Any]], *, max_misses: float = 1.0, target: float = 0.6, min_n: int = 10
) -> list[dict[str, Any]]:
    """Issue 17's targets per group of :func:`aggregate`'s ``rows``.

    Per group: the policy that is neither a rule (:data:`~dtoc_rl.policies.registry.BASELINES`) nor the
    oracle and saves the most within ``max_misses`` per 100 steps (e.g. the best threshold of a learned
    policy's sweep), with its savings and 95% CI, the oracle's savings and the fraction of them it
    reaches; and the rule that saves the most at equal or fewer misses than that pick (``best_rule``).
    Three checks: ``reaches`` (fraction >= ``target``; None where the oracle saved less than
    :data:`MIN_ORACLE_SAVINGS`, a share of nothing), ``no_loss`` (upper end of the CI >= 0; None for
    groups under ``min_n`` trajectories, too few to judge) and ``beats_rules``.

    ``beats_rules`` is judged at each rule's own miss rate: every rule that saves money within the
    budget must be out-saved by a point of the pick's own sweep (its spec with any ``threshold``) with
    equal or fewer misses, and the pick must save more than ``best_rule`` (or, where that rule saves
    nothing, as much).
    Judged only against ``best_rule``, a rule that saves nearly as much with far fewer misses would pass
    unchallenged, and a user who cares about misses would rather run it.  The rules that no row beats so
    are listed in ``unbeaten`` (so ``beats_rules`` depends on which thresholds were swept: sweep low
    ones to meet a rule that never misses).  A group where no such policy stays within the budget gets
    ``policy`` None and False checks.

    Every policy is measured on the runs the oracle completed (:func:`aggregate`); one that failed on
    some of those is measured on fewer: it is neither picked nor a rival, and is listed in ``failed``
    (a rule so listed fails ``beats_rules``: it was not beaten, only not measured).  A run every
    policy failed on, the oracle included, leaves the rest comparable and is only left out; a group
    where the oracle completed no run at all gets a row of failed checks with ``oracle_failed`` True."""
    out = []
    for key in dict.fromkeys((r["group_by"], r["group"]) for r in rows):
        group = [r for r in rows if (r["group_by"], r["group"]) == key]
        sel = [r for r in group if r["n"]]
        oracle = next((r for r in sel if r["policy"] == ORACLE), None)
        # a hindsight variant (oracle:restores=0) is a reference like the oracle, not a policy to pick
        if not any(not _is_oracle(r["policy"]) and not is_rule(r["policy"]) for r in group):
            continue
        if oracle is None:  # nothing to measure against: said, not skipped
            if any(r["policy"] == ORACLE for r in group):
                out.append(_unjudged(key, [r for r in group if not _is_oracle(r["policy"])]))
            continue
        failed = sorted({r["policy"] for r in group if not _is_oracle(r["policy"]) and r["n"] < oracle["n"]})
        sel = [r for r in sel if r["policy"] not in failed]
        cands = [r for r in sel if not _is_oracle(r["policy"]) and not is_rule(r["policy"])]
        ok = [r for r in cands if r["misses_per_100"] <= max_misses]
        best = max(ok, key=lambda r: r["savings"]) if ok else None
        miss = best["misses_per_100"] if best else max_misses
        # a rule whose savings are NaN (no baseline dollars) can be neither beaten nor beat anything;
        # keeping everything (`none`) is what savings are measured from, not a rival: a policy that
        # abstains ties it, and beats every rule that loses money; nor is what the log itself hid
        # (`logged`): the live run of a policy, often the one judged, not a rule one could run instead
        all_rules = [
            r
            for r in sel
            if is_rule(r["policy"]) and r["policy"] not in _REFERENCES and r["savings"] == r["savings"]
        ]
        rules = [r for r in all_rules if r["misses_per_100"] <= miss + 1e-9]
        rule = max(rules, key=lambda r: r["savings"]) if rules else None
        # the pick's own sweep (its spec but the threshold): another checkpoint's points are not its
        sweep = [c for c in ok if _sweep_of(c["policy"]) == _sweep_of(best["policy"])] if best else ok
        unbeaten = [
            {"policy": r["policy"], "savings": r["savings"], "misses_per_100": r["misses_per_100"]}
            for r in all_rules
            if r["savings"] > 0
            and r["misses_per_100"] <= max_misses
            and not any(
                c["misses_per_100"] <= r["misses_per_100"] + 1e-9 and c["savings"] > r["savings"]
                for c in sweep
            )
        ]
        n = oracle["n"]
        row = {
            "group_by": key[0], "group": key[1], "n": n,
            "policy": best["policy"] if best else None,
            "savings": best["savings"] if best else None,
            "savings_lo": best["savings_lo"] if best else None,
            "savings_hi": best["savings_hi"] if best else None,
            "misses_per_100": best["misses_per_100"] if best else None,
            "oracle_savings": oracle["savings"],
            "oracle_fraction": best["oracle_fraction"] if best else None,
            "best_rule": rule["policy"] if rule else None,
            "best_rule_savings": rule["savings"] if rule else None,
            "best_rule_misses_per_100": rule["misses_per_100"] if rule else None,
            "unbeaten": sorted(unbeaten, key=lambda r: (r["misses_per_100"], -r["savings"])),
            "failed": failed,
            "oracle_failed": False,
        }  # fmt: skip
        frac = row["oracle_fraction"]
        row["reaches"] = bool(best) and frac is not None and frac == frac and frac >= target
        if best and oracle["savings"] < MIN_ORACLE_SAVINGS:
            row["reaches"] = None  # nothing to reach: the oracle saved (next to) nothing here
        row["no_loss"] = (bool(best) and best["savings_hi"] >= 0) if n >= min_n else None
        # and the pick must not trail the best rule at its misses.  A tie passes only where that rule
        # saves nothing: one that saves money and is beaten at its own misses (not in unbeaten) was
        # beaten by a point within the budget, so it is below the pick as well
        row["beats_rules"] = (
            bool(best)
            and (rule is None or best["savings"] >= rule["savings"])
            and not unbeaten
            and not any(is_rule(f) and f not in _REFERENCES for f in failed)
        )
        out.append(row)
    return out


def _unjudged(key: tuple[str, str], rivals: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A done-when row for a group whose every oracle run failed: no savings to measure against, so
    every check fails and ``failed`` names the policies that failed there too."""
    nan = float("nan")
    return {
        "group_by": key[0], "group": key[1], "n": 0, "policy": None, "savings": None,
        "savings_lo": None, "savings_hi": None, "misses_per_100": None, "oracle_savings": nan,
        "oracle_fraction": None, "best_rule": None, "best_rule_savings": None,
        "best_rule_misses_per_100": None, "unbeaten": [],
        "failed": sorted({r["policy"] for r in rivals if r.get("errors")}),
        "oracle_failed": True, "reaches": False, "no_loss": None, "beats_rules": False,
    }  # fmt: skip


def runs_to_dicts(runs: Sequence[Run]) -> list[dict[str, Any]]:
    return [asdict(r) for r in runs]


def episode_index(episodes: Sequence[Episode]) -> dict[str, int]:
    return {e.traj_id: i for i, e in enumerate(episodes)}
