"""LiveEnv tasks: tiny real repositories with one bug each, and the checker that runs their tests.

A task is a folder (the shipped ones are under ``envs/tasks/``)::

    tasks/pagination/
      task.json     # {"id", "prompt", "test_command", "test_files", "source_files"?, "timeout"?,
                    #  "reference_dollars"?}
      repo/         # the repository the agent works in (a temporary copy of it)

``task.json`` fields:

* ``id``: unique name; ``prompt``: the task text the agent gets;
* ``test_command``: an argv list (or a shell string) run in the workdir; success is
  exit status 0 within ``timeout`` seconds (default 60).  A leading ``python``
  is replaced by this interpreter (``sys.executable``);
* ``test_files``: files the checker restores from the pristine ``repo/`` before it
  runs the tests, so editing a test never passes a task;
* ``source_files``: where the bug is (informational);
* ``reference_dollars`` (optional): what one solve of the task is taken to cost,
  for LiveEnv's ``cost_unit="task"`` reward normalisation.

The task folders are data, not Python packages: no ``__init__.py`` in them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtoc_rl.envs.tools import run_command

__all__ = ["TASKS_DIR", "CheckResult", "Task", "TaskChecker", "load_task", "load_tasks"]

TASKS_DIR = Path(__file__).resolve().parent / "tasks"


@dataclass
class Task:
    id: str
    prompt: str
    test_command: list[str] | str
    repo: Path
    test_files: list[str] = field(default_factory=list)
    source_files: list[str] = field(default_factory=list)
    timeout: float = 60.0
    reference_dollars: float | None = None

    def make_workdir(self, parent: str | Path | None = None) -> Path:
        """A fresh temporary copy of the task repository (the caller removes it)."""
        tmp = Path(tempfile.mkdtemp(prefix=f"dtoc-live-{self.id}-", dir=parent))
        work = tmp / "repo"
        shutil.copytree(self.repo, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        return work

    def command(self) -> list[str] | str:
        cmd = self.test_command
        if isinstance(cmd, list) and cmd and cmd[0] in ("python", "python3"):
            return [sys.executable, *cmd[1:]]
        return cmd

    def check_runnable(self) -> None:
        """Raise a clear error now when the test command needs pytest and this Python has none
        (otherwise every episode would just fail, after the agent's whole run)."""
        cmd = self.command()
        if not isinstance(cmd, list) or not cmd:
            return  # a shell string: whatever it runs is found at run time
        if cmd[0] == sys.executable and cmd[1:3] == ["-m", "pytest"]:
            missing = importlib.util.find_spec("pytest") is None
        elif cmd[0] in ("pytest", "py.test"):
            missing = shutil.which(cmd[0]) is None
        else:
            return
        if missing:
            raise RuntimeError(
                f"task {self.id!r} is checked with pytest, which is not installed for {sys.executable}: "
                "pip install pytest  (or pip install -e '.[live]' in a checkout)"
            )


def load_task(folder: str | Path) -> Task:
    """One task folder (``task.json`` + ``repo/``)."""
    folder = Path(folder)
    meta_path = folder / "task.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} has no task.json")
    meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
    missing = [k for k in ("id", "prompt", "test_command") if k not in meta]
    if missing:
        raise ValueError(f"{meta_path}: missing field(s) {missing}")
    repo = folder / "repo"
    if not repo.is_dir():
        raise FileNotFoundError(f"{folder} has no repo/ folder")
    cmd = meta["test_command"]
    if not (isinstance(cmd, str) or (isinstance(cmd, list) and all(isinstance(c, str) for c in cmd))):
        raise ValueError(f"{meta_path}: test_command must be a string or a list of strings")
    for f in meta.get("test_files", []):
        if not (repo / f).is_file():
            raise FileNotFoundError(f"{meta_path}: test file {f!r} is not in repo/")
    return Task(
        id=str(meta["id"]),
        prompt=str(meta["prompt"]),
        test_command=cmd,
        repo=repo,
        test_files=list(meta.get("test_files", [])),
        source_files=list(meta.get("source_files", [])),
        timeout=float(meta.get("timeout", 60.0)),
        reference_dollars=meta.get("reference_dollars"),
    )


def load_tasks(names: Sequence[str] | str | None = None, root: str | Path | None = None) -> list[Task]:
    """Tasks under ``root`` (default: the shipped ``envs/tasks``), sorted by id;
    ``names`` keeps only those ids (in the order given)."""
    root = Path(root) if root is not None else TASKS_DIR
    found = {t.id: t for t in (load_task(d) for d in sorted(root.iterdir()) if (d / "task.json").is_file())}
    if not found:
        raise FileNotFoundError(f"no task folders (with task.json) under {root}")
    if names is None:
        return [found[k] for k in sorted(found)]
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in found]
    if unknown:
        raise KeyError(f"unknown task(s) {unknown}; available: {sorted(found)}")
    return [found[n] for n in names]


@dataclass
class CheckResult:
    success: bool
    returncode: int | None
    output: str
    timed_out: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class TaskChecker:
    """Decides success: restores the task's test files, runs its test command in the workdir.

    Success is exit status 0 within the task's timeout (``timeout`` overrides it).
    """

    def __init__(self, task: Task, timeout: float | None = None, max_output_chars: int = 4000):
        self.task = task
        self.timeout = float(timeout if timeout is not None else task.timeout)
        self.max_output_chars = max_output_chars

    def check(self, workdir: str | Path) -> CheckResult:
        workdir = Path(workdir)
        for f in self.task.test_files:
            dst = workdir / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.task.repo / f, dst)
        t0 = time.monotonic()
        res = run_command(self.task.command(), workdir, self.timeout, self.max_output_chars)
        return CheckResult(
            success=res.returncode == 0 and not res.timed_out,
            returncode=res.returncode,
            output=res.output,
            timed_out=res.timed_out,
            seconds=time.monotonic() - t0,
        )
