"""What software and machine produced a result: recorded with every trained checkpoint and every
evaluation, training-sweep and benchmark report.

A training is deterministic on one machine and library set, and the same command and data can land
points apart on another; a figure says which it came from, so that a reader knows whether two figures
compare at all.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["environment", "source_commit"]

# The packages whose numerics or data reading can change a training's outcome.
_PACKAGES = ("dtoc-rl", "torch", "numpy", "pyarrow", "datasets", "gymnasium")


def environment() -> dict[str, str | int]:
    """Python, the machine (its processor's model, cores and, when torch is loaded, the vector
    instructions torch uses and its threads), the versions of the packages a training depends on
    ("missing" for one not installed) and, when the toolkit runs from a git checkout, its commit
    ("+" marks uncommitted changes): plain values for a report's JSON."""
    out: dict[str, str | int] = {
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpu": _cpu_model(),
        "cpus": os.cpu_count() or 0,
    }
    torch = sys.modules.get("torch")  # not imported for this: a benchmark of the core has no torch
    if torch is not None:
        out["torch_cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
        out["torch_threads"] = int(torch.get_num_threads())
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    commit = source_commit()
    if commit:
        out["commit"] = commit
    return out


def _cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def source_commit(where: Path | None = None) -> str | None:
    """The git commit of the checkout whose root holds this package (or of ``where``, a checkout's
    root), with "+" when its tracked files have uncommitted changes; None elsewhere or without git."""
    root = where or Path(__file__).resolve().parent.parent
    # -C names the checkout, not a caller's GIT_DIR or GIT_WORK_TREE; no optional locks, so that a
    # training never holds the index lock against the user's own git commands
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
            env=env,
        )
        return done.stdout.strip()

    try:
        # the checkout must be the package's own, not a repository it happens to be installed inside
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root.resolve():
            return None
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")
