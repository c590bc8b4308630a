"""Walk log folders, ingest every recognised unit, label needs, summarise.

A *unit* is a file, or a directory that a directory-format ingester claims
(AutoCodeRover task dirs).  Every unit either yields trajectories or is
skipped with a reason; label and metadata files that ship beside logs are
counted as auxiliary, not skipped.  One bad file never stops the run.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import multiprocessing
import os
import stat
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtoc_rl.core.tokens import CharEstimator
from dtoc_rl.data.dataset import storable
from dtoc_rl.data.schema import NEED_KINDS, Trajectory
from dtoc_rl.ingest import (
    COMPRESSED_SUFFIXES,
    INGESTERS,
    MALFORMED,
    PARSE_FAILURES,
    IngestError,
    detect_format,
    failure_reason,
)
from dtoc_rl.ingest.atif import AtifIngester
from dtoc_rl.ingest.common import extra_of, name_model, set_extra, text_task_id
from dtoc_rl.ingest.continued import join_continued, part_key, parts_to_read
from dtoc_rl.ingest.goose import is_goose_db
from dtoc_rl.ingest.opencode import is_opencode_db
from dtoc_rl.ingest.run_store import SPILL_AFTER, RunStore
from dtoc_rl.ingest.same_session import drop_second_logs, runs_sharing_calls, session_key, sessions_to_read

__all__ = [
    "IngestResult",
    "IngestWarning",
    "Skip",
    "damaged",
    "discover",
    "display_path",
    "ingest_paths",
    "summarize",
]

LOG_SUFFIXES = {".json", ".jsonl", ".ndjson", ".traj", ".parquet", ".PARQUET", ".eval"}
# Files that travel with logs: label joins, eval reports, run metadata, docs.
AUXILIARY = [
    "*labels*.jsonl", "sessions_index.jsonl", "results.json", "result.json", "config.json", "report.json",
    "final_report.json",
    "stats.json", "meta.json", "cost.json", "*.report.json", "results_summary.*", "swe-bench_*.json",
    "eval_*.json", "metadata.yaml", "args.yaml", "*.yaml", "*.yml", "LICENSE*", "README*", "MANIFEST*",
    "*.csv", "*.txt", "*.diff", "*.patch", "*.log", "*.md", "tool_call_*.json", "agent_proxy_*.json",
    "debug_agent_*.json", "*.py", "*.png",
    "ui_messages.json", "task_metadata.json",  # a Cline task folder's: read beside its conversation
    "agent-*.meta.json",  # a Claude Code sub-agent's: read beside its transcript
]  # fmt: skip


class IngestWarning(UserWarning):
    """What ingest itself warns of (not a library it calls): ``dtoc-rl ingest`` shows it as it
    happens and keeps it in the dataset's summary."""


@dataclass
class Skip:
    path: str
    reason: str
    format: str | None = None


@dataclass
class IngestResult:
    #: the runs read, in order: a list, or a :class:`~dtoc_rl.ingest.run_store.RunStore` when there
    #: were more than ``spill_after`` bytes of them (read back from disk one at a time when iterated)
    trajectories: Sequence[Trajectory] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    auxiliary: int = 0
    #: the files passed over as notes, configs or labels (AUXILIARY), as found
    auxiliary_paths: list[str] = field(default_factory=list)
    units: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    formats: Counter = field(default_factory=Counter)
    #: runs logged in parts, joined into one (``"EARLY -> LATE"``; :mod:`dtoc_rl.ingest.continued`)
    joined: list[str] = field(default_factory=list)


def _is_aux(p: Path) -> bool:
    if p.suffix == ".json" and p.with_name(p.stem + ".messages.json").is_file():
        return True  # a Cline SDK session's metadata, read beside its messages
    if p.name == "base_state.json" and (p.parent / "events").is_dir():
        return True  # an OpenHands conversation's settings, read beside its events
    return any(fnmatch.fnmatch(p.name, pat) for pat in AUXILIARY)


def _compressed_log(p: Path) -> bool:
    """``run.jsonl.gz`` and the like: a log's name under a compression's (not a file logs travel
    with, nor a text log, which could be any program's)."""
    inner = p.with_name(p.stem)
    return (
        p.suffix.lower() in COMPRESSED_SUFFIXES
        and inner.suffix.lower() in {s.lower() for s in LOG_SUFFIXES}
        and not _is_aux(inner)
    )


def _dir_unit(d: Path) -> bool:
    return any(ing.wants_dirs and ing.detect(d, "") for ing in INGESTERS)


def _special(mode: int) -> str | None:
    """What kind of special file ``mode`` is (never opened: a FIFO would block a reader forever)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a regular file"


def _text_log(p: Path) -> bool:
    """Whether a ``.log`` file is an agent log some ingester reads (most are build output)."""
    try:
        return detect_format(p) is not None
    except OSError:
        return True  # let _process report why it cannot be read


def _unique(base: str, used: set[str]) -> str:
    """``base``, or ``base#k`` with the least k >= 2 not in ``used``."""
    k, name = 1, base
    while name in used:
        k += 1
        name = f"{base}#{k}"
    return name


def _prefix(short: list, long: list) -> bool:
    """Whether the steps ``short`` begin ``long`` (a run cut short is a prefix of its intact copy)."""
    return len(short) <= len(long) and long[: len(short)] == short


def _steps_digest(steps: list) -> int:
    """A number for a run's steps, from their texts alone: equal steps have equal texts, so two
    copies of one log always get the same number; many runs of one id are compared by it before two
    are compared step by step."""
    return hash(tuple((s.tool_name, s.tool_args, s.output, s.assistant_text, s.user_text) for s in steps))


def display_path(p: Path | str) -> str:
    """A path as text that any writer accepts: undecodable bytes of a file name become ``\\xNN``."""
    return os.fsencode(str(p)).decode("utf-8", errors="backslashreplace")


def discover(
    paths: Iterable[str | Path], skipped: list[Skip] | None = None
) -> Iterator[tuple[Path, bool, Path]]:
    """Yield ``(unit, is_candidate, root)``; non-candidates are auxiliary files.

    Symbolic links inside a folder are not followed (a link may point out of the folder, to a device,
    into a loop, or to a file that is ingested where it lies anyway) and special files are never
    opened; each is added to ``skipped`` with its reason.  A path named on the command line is
    followed once, even when it is a link; one that leads nowhere is skipped so, and names that do not
    exist at all are a FileNotFoundError naming them all, before anything is yielded.
    """
    skipped = skipped if skipped is not None else []
    paths = [Path(p) for p in paths]
    # a name that is nowhere is a typo: said before any work, every such name at once; a link to
    # nothing was found by a glob as often as typed, and is skipped with its reason like one in a folder
    missing = [display_path(p) for p in paths if not p.exists() and not p.is_symlink()]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    for root in paths:
        if not root.exists():
            skipped.append(Skip(display_path(root), _link_reason(root)))
            continue
        kind = _special(root.stat().st_mode)
        if kind is not None:
            skipped.append(Skip(display_path(root), f"{kind}: not read"))
            continue
        if root.is_file():
            yield root, True, root  # named explicitly: always tried, never auxiliary
            continue

        def unlisted(e: OSError, root: Path = root) -> None:
            skipped.append(Skip(display_path(e.filename or root), f"cannot list folder: {e.strerror or e}"))

        for dirpath, dirnames, filenames in os.walk(root, onerror=unlisted):
            d = Path(dirpath)
            keep = []
            for x in sorted(dirnames):
                if x.startswith("."):
                    continue
                if (d / x).is_symlink():
                    skipped.append(Skip(display_path(d / x), _link_reason(d / x)))
                else:
                    keep.append(x)
            dirnames[:] = keep
            if _dir_unit(d):
                dirnames[:] = []
                yield d, True, root
                continue
            if "events" in dirnames and "event_cache" in dirnames:  # an OpenHands session's file store
                skipped.append(Skip(display_path(d / "event_cache"), _EVENT_CACHE_REASON))
                dirnames.remove("event_cache")
            harbor = _harbor_agent_dir(d)
            if harbor:  # the agent's own logs repeat the run its ATIF file holds: read that one only
                for x in dirnames:
                    skipped.append(Skip(display_path(d / x), _HARBOR_REASON))
                dirnames[:] = []
            for name in sorted(filenames):
                p = d / name
                if name.startswith("."):
                    continue
                try:
                    mode = p.lstat().st_mode
                except OSError as e:
                    skipped.append(Skip(display_path(p), f"cannot read: {e.strerror or e}"))
                    continue
                if stat.S_ISLNK(mode):
                    skipped.append(Skip(display_path(p), _link_reason(p)))
                    continue
                kind = _special(mode)
                if kind is not None:
                    skipped.append(Skip(display_path(p), f"{kind}: not read"))
                    continue
                if harbor and not name.startswith("trajectory"):
                    if p.suffix in LOG_SUFFIXES:
                        skipped.append(Skip(display_path(p), _HARBOR_REASON))
                    else:
                        yield p, False, root
                elif name.endswith("_RESPONSE.md"):
                    yield p, True, root  # Claude Code stream-json wrapped in markdown
                elif p.suffix in LOG_SUFFIXES and not _is_aux(p):
                    yield p, True, root
                elif _compressed_log(p):
                    yield p, True, root  # a log kept compressed: read as a candidate, to say so
                elif is_goose_db(p) or is_opencode_db(p):
                    yield p, True, root  # Goose's or OpenCode's session database
                elif p.suffix == ".log" and _text_log(p):
                    yield p, True, root  # a text-log harness (RepoLaunch's setup.log)
                else:
                    yield p, False, root


_EVENT_CACHE_REASON = "OpenHands' pages of the events/ folder beside it: the run is read from there, once"
_HARBOR_REASON = "a Harbor trial's agent log: the run is read from its ATIF trajectory.json beside it"


def _harbor_agent_dir(d: Path) -> bool:
    """Whether ``d`` is a Harbor trial's ``agent/`` folder (its trial beside it holds ``result.json`` or
    ``config.json``) with a whole ATIF ``trajectory.json``: the agent's own logs in it (Claude Code
    sessions, Codex rollouts, ...) are the same run again.  A damaged ATIF file keeps them: they may
    be all there is of the run."""
    f = d / "trajectory.json"
    if d.name != "agent" or not f.is_file() or f.is_symlink():
        return False
    if not any((d.parent / name).is_file() for name in ("result.json", "config.json")):
        return False
    try:
        text = f.read_text(encoding="utf-8-sig")
        if not AtifIngester().detect(f, text[:65536]):
            return False
        root = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(root, dict) and isinstance(root.get("steps"), list)


def _link_reason(p: Path) -> str:
    try:
        target = p.resolve(strict=True)
    except RuntimeError:
        return "symbolic link in a loop: not followed"
    except OSError:
        return f"dangling symbolic link (to {display_path(os.readlink(p))}): not followed"
    return f"symbolic link (to {display_path(target)}): not followed; name the target to ingest it"


def _unit_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


def _process(
    unit: Path, label: bool, fmt: str | None = None
) -> tuple[list[Trajectory], list[Skip], str | None, int]:
    from dtoc_rl.ingest import compression_of, get_ingester, unknown_format_reason

    size = _unit_size(unit)
    where = display_path(unit)
    try:
        ing = get_ingester(fmt) if fmt else detect_format(unit)
    except OSError as e:
        return [], [Skip(where, failure_reason(e))], None, size
    if ing is None or (fmt and unit.is_file() and compression_of(unit)):  # no format reads it packed
        return [], [Skip(where, unknown_format_reason(unit))], None, size
    trajs: list[Trajectory] = []
    skips: list[Skip] = []
    forced = f"--format {fmt} cannot read it: " if fmt else ""
    try:
        for t in ing.parse(unit):
            if not t.steps:
                skips.append(Skip(f"{where}#{t.traj_id}", "empty trajectory: no steps", ing.name))
                continue
            trajs.append(t)
    except IngestError as e:
        skips.append(Skip(where, forced + e.reason, ing.name))
    except PARSE_FAILURES as e:  # e.g. a malformed file reached code that expected a well-formed one
        skips.append(Skip(where, (forced + failure_reason(e))[:500], ing.name))
    fit = []
    for t in trajs:  # a value no column can hold skips its run here, not the write of every run
        why = storable(t)
        if why is None:
            fit.append(t)
        else:
            skips.append(Skip(f"{where}#{display_path(t.traj_id)}", why, ing.name))
    trajs = fit
    if label and trajs:
        from dtoc_rl.labels import label_trajectory

        labelled = []
        for t in trajs:  # the labeller reads every text of the log: a surprise there skips one trajectory
            try:
                label_trajectory(t)
            except (*MALFORMED, RecursionError) as e:
                reason = f"need labelling failed: {type(e).__name__}: {e}".splitlines()[0][:500]
                skips.append(Skip(f"{where}#{t.traj_id}", reason, ing.name))
                continue
            labelled.append(t)
        trajs = labelled
    return trajs, skips, ing.name, size


def _worker_pool(workers: int) -> ProcessPoolExecutor:
    # forkserver, not fork: forking a process that has loaded torch can deadlock.
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("forkserver"))


#: Why a unit is skipped when the process reading it dies (the kernel's out-of-memory killer on a huge
#: log, a signal): the rest of the batch goes on.
DIED = "the process reading it died (killed: out of memory?): not read"


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Cancel the jobs that wait and end the processes reading now: an interrupted batch keeps nothing
    of theirs, and one big log still being read (minutes) would hold the exit, and a second Ctrl-C
    would then break into the pool's own wait with a traceback."""
    # the executor has no public way to end its processes before Python 3.14 (terminate_workers), and
    # its shutdown forgets them
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()


def _pools_start() -> bool:
    """Whether a reader process can start and answer at all (a job that reads nothing)."""
    try:
        with _worker_pool(1) as one:
            return one.submit(os.getpid).result(timeout=120) > 0
    except (BrokenProcessPool, OSError, FuturesTimeout):  # OSError: the process could not be made
        return False


def _read_here(units: list[Path], ready: dict[Path, Any], label: bool, fmt: str | None, take) -> None:
    """The rest of a batch read in this process, when reader processes cannot start (a sandbox that
    forbids them, a broken interpreter for the children): slower, but nothing is skipped for it."""
    warnings.warn(
        "reader processes cannot start here: reading the rest in this process", IngestWarning, stacklevel=2
    )
    for unit in units:
        take(ready.pop(unit) if unit in ready else _process(unit, label, fmt), unit)


def _in_workers(units: list[Path], label: bool, fmt: str | None, workers: int, take) -> None:
    """``take(_process(unit), unit)`` for every unit in order, read by ``workers`` processes.  When one
    dies, the pool is lost with the jobs it had not finished: those that had finished are kept, the
    first unfinished ones (those the dead process may have been reading) are read again one process
    each, a unit whose process dies again is skipped as such, and the rest go on in a new pool.  A
    pool that finishes nothing at all, where not even an empty job runs, means that no process can
    start here: the batch is then read in this process instead."""
    ready: dict[Path, Any] = {}  # results of a broken pool's finished jobs, taken in their turn
    todo = list(units)
    while todo:
        rest: list[Path] = []
        futures: dict[Path, Any] = {}
        with _worker_pool(workers) as pool:
            try:
                for u in todo:
                    if u not in ready:
                        futures[u] = pool.submit(_process, u, label, fmt)
            except (BrokenProcessPool, OSError):  # a process could not be made, or died at once
                rest = todo
            else:
                try:
                    for i, unit in enumerate(todo):
                        if unit in ready:
                            take(ready.pop(unit), unit)
                            continue
                        try:
                            out = futures[unit].result()
                        except BrokenProcessPool:
                            rest = todo[i:]
                            break
                        del futures[unit]  # the runs are the store's now, not held twice
                        take(out, unit)
                except BaseException:  # Ctrl-C, SIGTERM: stop now, the files being read now too
                    _stop_now(pool)
                    raise
        for unit in rest:
            f = futures.get(unit)
            if f is not None and f.done() and not f.cancelled() and f.exception() is None:
                ready[unit] = f.result()
        if rest and not ready and rest == todo and not _pools_start():
            _read_here(rest, ready, label, fmt, take)
            return
        unfinished = [u for u in rest if u not in ready]
        suspects = set(unfinished[: workers + 1])
        todo = []
        for unit in rest:  # in order: the suspects each alone, then the rest in a new pool
            if unit in suspects and not todo:
                try:
                    with _worker_pool(1) as one:
                        out = one.submit(_process, unit, label, fmt).result()
                except (BrokenProcessPool, OSError):
                    out = ([], [Skip(display_path(unit), DIED)], None, _unit_size(unit))
                take(out, unit)
            elif unit in ready and not todo:
                take(ready.pop(unit), unit)
            else:
                todo.append(unit)


def ingest_paths(
    paths: Iterable[str | Path],
    *,
    label: bool = True,
    workers: int = 1,
    progress: bool = True,
    fmt: str | None = None,
    model: str | None = None,
    task_from: str = "log",
    spill_after: int | None = SPILL_AFTER,
) -> IngestResult:
    """Ingest every unit under ``paths``; never raises for a bad unit.

    ``fmt`` forces one ingester (by name) instead of detecting each file's format; a file it cannot
    read is skipped with that reason.  ``model`` names the model of runs whose logs name none (a
    stream without it, a chat log without ``"model"``); a log that names its model keeps it.
    ``task_from``: ``"log"``, each run's task id as its log gives it, or ``"prompt"``, the task text it
    opens with (:func:`~dtoc_rl.ingest.common.text_task_id`; the log's kept as ``extra.log_task_id``; a
    run without one keeps the log's).  Task names are ``source/task_id``: one request run under two
    harnesses is two tasks still.  Past ``spill_after`` bytes of the runs' text (None: never), the
    further runs are kept compressed in a temporary file until the dataset is written
    (:mod:`dtoc_rl.ingest.run_store`), and ``trajectories`` reads them back when iterated.
    """
    if task_from not in ("log", "prompt"):
        raise ValueError(f"task_from must be 'log' or 'prompt', got {task_from!r}")
    # ValueError for a negative budget, before any work
    store = RunStore(spill_after, warn=lambda m: warnings.warn(m, IngestWarning, stacklevel=2))
    if fmt is not None:
        from dtoc_rl.ingest import get_ingester

        get_ingester(fmt)  # KeyError naming the known formats
    t0 = time.perf_counter()
    res = IngestResult()
    units = []
    rel: dict[Path, str] = {}
    found: set[str] = set()
    for unit, candidate, root in discover(paths, res.skipped):
        absolute = os.path.abspath(unit)
        if absolute in found:  # named twice (a folder and a file in it): read once
            continue
        found.add(absolute)
        if candidate:
            units.append(unit)
            # Portable provenance: the path below the folder that was named, led by its name (lexical:
            # a named link stays under its own name).
            base = os.path.dirname(os.path.abspath(root))
            rel[unit] = display_path(Path(os.path.relpath(absolute, base)).as_posix())
        else:
            res.auxiliary += 1
            res.auxiliary_paths.append(display_path(unit))
    res.units = len(units)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(units), unit="file", desc="ingest", disable=not progress, dynamic_ncols=True)
    # the id a log gave -> the positions in res.trajectories of the runs it named, and per position
    # the file it came from and whether that file had bad parts; every id in use
    named: dict[str, list[int]] = {}
    origin: list[tuple[str, bool]] = []
    used: set[str] = set()
    fmts: list[str | None] = []  # each stored run's format, counted once the parts are joined
    # what the passes over several logs' runs need to know of each stored run, by position: which
    # runs they must be given (read back from disk if need be)
    sessions: dict[int, tuple] = {}
    parts: dict[int, int] = {}

    def for_passes(p: int, t: Trajectory) -> None:
        sessions.pop(p, None)
        parts.pop(p, None)
        if (k := session_key(t)) is not None:
            sessions[p] = k
        if (k := part_key(t)) is not None:
            parts[p] = k

    # A kept run's steps as one number, made when a second run of its id comes: runs of one id
    # (a harness that names every run alike) are told apart without comparing their shared beginnings
    # step by step with every earlier one, which grew with the square of their count.
    digests: dict[int, int] = {}

    def digest(p: int) -> int:
        if p not in digests:
            digests[p] = _steps_digest(store[p].steps)
        return digests[p]

    def take(out, unit: Path) -> None:
        trajs, skips, fmt_name, size = out
        res.bytes_read += size
        res.skipped.extend(skips)
        damaged = bool(skips)
        where = display_path(unit)
        for t in trajs:
            t.traj_id = display_path(t.traj_id)
            t.source_path = rel[unit]
            if model and not t.model_raw:
                name_model(t, model)
            if task_from == "prompt" and t.task_text and t.task_text.strip():
                set_extra(t, "log_task_id", t.task_id)
                t.task_id = text_task_id(t.task_text, "prompt-")
            given = t.traj_id
            holders = named.get(given, [])
            # a damaged file's copy is replaced by a longer copy of the same run (an intact one, or one
            # cut later), and a damaged copy that another holds whole adds nothing: at most one copy
            # of a run stays, whatever the order the files are read in
            cut = next(
                (
                    p
                    for p in holders
                    if origin[p][1]
                    and (not damaged or len(t.steps) > len(store[p].steps))
                    and _prefix(store[p].steps, t.steps)
                ),
                None,
            )
            if cut is not None:
                why = f"duplicate trajectory id ({'intact' if not damaged else 'longer'} copy in {where})"
                res.skipped.append(Skip(f"{origin[cut][0]}#{given}", why, fmt_name))
                old_id = store[cut].traj_id
                t.traj_id = old_id if old_id == given else _unique(f"{given}@{rel[unit]}", used)
                used.add(t.traj_id)
                store[cut] = t
                for_passes(cut, t)
                digests.pop(cut, None)
                origin[cut] = (where, damaged)
                fmts[cut] = fmt_name
                continue
            mine = _steps_digest(t.steps) if holders else 0
            same = next((p for p in holders if digest(p) == mine and store[p].steps == t.steps), None)
            if same is not None:  # the same run copied twice: counted once
                why = f"duplicate trajectory id (identical in {origin[same][0]})"
                res.skipped.append(Skip(f"{where}#{given}", why, fmt_name))
                continue
            whole = next((p for p in holders if damaged and _prefix(t.steps, store[p].steps)), None)
            if whole is not None:  # a damaged file's copy of a run read (at least as far) already
                why = f"duplicate trajectory id (a longer copy in {origin[whole][0]})"
                res.skipped.append(Skip(f"{where}#{given}", why, fmt_name))
                continue
            if holders or given in used:
                # another run under the same id (a rerun in another folder, a second task's messages.json):
                # kept, its id made unique by its file, so that no run is lost to a naming convention
                t.traj_id = _unique(f"{given}@{rel[unit]}", used)
            named.setdefault(given, []).append(len(store))
            origin.append((where, damaged))
            used.add(t.traj_id)
            for_passes(len(store), t)
            store.append(t)
            fmts.append(fmt_name)
        bar.update(1)
        bar.set_postfix(trajs=len(store), skipped=len(res.skipped), refresh=False)

    if workers > 1 and len(units) > 1:
        _in_workers(units, label, fmt, workers, take)
    else:
        for unit in units:
            take(_process(unit, label, fmt), unit)
    bar.close()
    # the passes over several logs' runs, given the only runs they may drop or change, in order
    later = sorted(sessions_to_read(sessions) | parts_to_read(parts))
    read = [store[i] for i in later]  # objects, read back from disk or not
    at = {id(t): i for i, t in zip(later, read)}
    runs, twice = drop_second_logs(read)
    for d in twice:
        res.skipped.append(
            Skip(f"{d.dropped.source_path}#{d.dropped.traj_id}", d.why, fmts[at[id(d.dropped)]])
        )
    for earlier, fork, n in runs_sharing_calls(runs):
        warnings.warn(
            f"{fork.source_path or fork.traj_id} and {earlier.source_path or earlier.traj_id} both hold "
            f"the {n} calls before a fork (--fork-session) of one session: counted in each",
            IngestWarning,
            stacklevel=2,
        )
    runs, res.joined = join_continued(runs)
    for t in runs:  # what the passes changed, kept (a run read back from disk is a copy)
        if not store.is_live(at[id(t)]):
            store[at[id(t)]] = t
    kept = {id(t) for t in runs}
    gone = [i for i, t in zip(later, read) if id(t) not in kept]
    store.drop(gone)
    dropped = set(gone)
    res.formats = Counter(f for i, f in enumerate(fmts) if i not in dropped)
    res.trajectories = store if store.spilled else list(store)
    res.seconds = time.perf_counter() - t0
    return res


def damaged(t: Trajectory) -> bool:
    """Whether the run's log had lines it could not read (``extra.bad_lines``, a log cut off or still
    being written: ``extra.torn_last_line``): kept, as far as it could be read, but not whole."""
    return bool((e := extra_of(t.extra)).get("bad_lines") or e.get("torn_last_line"))


def summarize(trajs: Iterable[Trajectory], res: IngestResult | None = None) -> dict[str, Any]:
    """The summary table as data: per source and model family, then totals (one pass over
    ``trajs``)."""
    groups: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {
            "trajectories": 0, "steps": 0, "tool_steps": 0, "output_tokens": 0,
            "success_true": 0, "success_false": 0, "success_null": 0,
            **{f"needs_{k}": 0 for k in NEED_KINDS},
            "masked_steps": 0, "context_events": 0,
        }
    )  # fmt: skip
    contexts: dict[tuple[str, str], tuple[list[int], list[int], list[int]]] = defaultdict(
        lambda: ([], [], [])
    )
    runs = 0
    for t in trajs:
        runs += 1
        g = groups[(t.source, t.model_family)]
        g["trajectories"] += 1
        g["steps"] += len(t.steps)
        g["success_" + {True: "true", False: "false", None: "null"}[t.success]] += 1
        per_call, last, logged_last = contexts[(t.source, t.model_family)]
        calls = context_per_call(t)
        per_call.extend(calls)
        if calls:
            last.append(calls[-1])
        logged = [s.usage.input_tokens for s in t.steps if s.usage and s.usage.input_tokens is not None]
        if logged:
            logged_last.append(logged[-1])
        for s in t.steps:
            g["tool_steps"] += s.tool_name is not None
            g["output_tokens"] += s.output_tokens
            g["masked_steps"] += bool(s.masked_before)
            g["context_events"] += len(s.events)
            for n in s.needs:
                key = f"needs_{n.kind}"
                if key in g:
                    g[key] += 1
    rows = [
        {"source": s, "model_family": m, **v, **_context_stats(*contexts[(s, m)])}
        for (s, m), v in sorted(groups.items())
    ]
    total = {
        k: sum(r[k] for r in rows)
        for k in (rows[0] if rows else {})
        if k not in ("source", "model_family") and not k.startswith("context_")
    }
    total.update(_context_stats(*([x for v in contexts.values() for x in v[i]] for i in range(3))))
    out: dict[str, Any] = {"groups": rows, "total": total}
    if res is not None:
        reasons = Counter(s.reason.split(":")[0] for s in res.skipped)
        out.update(
            {
                "units": res.units,
                "auxiliary_files": res.auxiliary,
                "auxiliary_paths": res.auxiliary_paths,
                "skipped": [s.__dict__ for s in res.skipped],
                "skip_reasons": dict(reasons),
                "joined": list(res.joined),
                "formats": dict(res.formats),
                "seconds": round(res.seconds, 3),
                "megabytes": round(res.bytes_read / 1e6, 2),
                "trajectories_per_second": round(runs / res.seconds, 1) if res.seconds else None,
                "megabytes_per_second": round(res.bytes_read / 1e6 / res.seconds, 2) if res.seconds else None,
            }
        )
    return out


def context_per_call(t: Trajectory) -> list[int]:
    """Tokens of the prompt of each model call with every output visible, ``ceil(len/4)`` per text.

    What the log says the model was sent before any context management: system prompt, task, the
    prompt the log lacks (``unlogged_prompt_tokens``), then every earlier step's texts and outputs.
    It shows which regime a dataset is in (Anthropic's context editing acts from 100k tokens).
    """

    est = CharEstimator()  # the default estimator, as Step.output_tokens is counted

    def tok(text: str | None) -> int:
        return est.count(text) if text else 0

    total = tok(t.system_prompt) + tok(t.task_text) + int(t.unlogged_prompt_tokens or 0)
    out = []
    for k, s in enumerate(t.steps):
        total += tok(s.user_text)
        if k == 0 or s.turn != t.steps[k - 1].turn:
            out.append(total + tok(s.harness_text))
        total += tok(s.assistant_text) + tok(s.reasoning) + tok(s.tool_args) + s.output_tokens
    return out


def _context_stats(per_call: list[int], last: list[int], logged_last: list[int]) -> dict[str, int]:
    """Median / p90 / max over calls, the median at each trajectory's last call, and the same from
    the provider's logged input tokens where the log has them (0: none logged)."""
    import numpy as np

    def med(v: list[int]) -> int:
        return int(np.median(np.asarray(v))) if v else 0

    a = np.asarray(per_call or [0])
    return {
        "context_median": int(np.median(a)),
        "context_p90": int(np.quantile(a, 0.9)),
        "context_max": int(a.max()),
        "context_last_median": med(last),
        "context_logged_last_median": med(logged_last),
    }
