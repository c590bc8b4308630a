"""What software produced a result: recorded with every trained checkpoint.

A training is deterministic on one machine and library set, but not across them: the same command and
data gave figures 2-5 points of the oracle's savings apart per seed in two fresh installs of the same
commit (docs/results.md, 2026-12-03).  A checkpoint that says which versions trained it tells a reader
whether two figures can be compared at all.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["environment"]

# The packages whose numerics or data reading can change a training's outcome.
_PACKAGES = ("dtoc-rl", "torch", "numpy", "pyarrow", "datasets", "gymnasium")


def environment() -> dict[str, str]:
    """Python, the machine, the versions of the packages a training depends on ("missing" for one not
    installed) and, when the toolkit runs from a git checkout, its commit ("+" marks uncommitted
    changes), as plain strings for a checkpoint's JSON."""
    out = {"python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}"}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    commit = source_commit()
    if commit:
        out["commit"] = commit
    return out


def source_commit(where: Path | None = None) -> str | None:
    """The git commit of the checkout whose root holds this package (or of ``where``, a checkout's
    root), with "+" when its tracked files have uncommitted changes; None elsewhere or without git."""
    root = where or Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
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
