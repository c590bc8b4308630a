"""Where the bundled sample data lives (``data/`` beside the package in a clone), and which existing
folders an output may replace."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "bundled_dataset", "bundled_raw", "data_dir", "find_bundled_trace", "not_replaceable", "writable_file",
    "writable_folder", "write_text_atomic",
]  # fmt: skip


def write_text_atomic(
    path: str | Path, chunks: Iterable[str], encoding: str | None = None, *, private: bool = False
) -> None:
    """Write ``chunks`` to ``path`` through ``path.partial`` and a rename: a file cut short (a full disk,
    Ctrl-C) never stands under the name of a complete one.  A failure is raised as it came, the
    ``.partial`` file removed where it can be.  ``private``: the file is its owner's alone (mode 600)
    from its first byte, whatever the folder's mode and the umask."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        if private:
            # a new file only: a .partial left by a killed writer would keep its mode, and one another
            # user planted as a link would have its target emptied
            tmp.unlink(missing_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            opened = open(os.open(tmp, flags, 0o600), "w", newline="", encoding=encoding)
        else:
            opened = open(tmp, "w", newline="", encoding=encoding)
        with opened as fh:
            for c in chunks:
                fh.write(c)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a folder that is a file: the write's own error says more
            tmp.unlink(missing_ok=True)
        raise


def others_write_warning(folder: Path, what: str = "log folder") -> str | None:
    """What to say of a folder other users can write to (None: they cannot): files written there
    for their owner alone stay so, but a file another user puts there is read as one of the owner's."""
    mode = folder.stat().st_mode & 0o777 if os.name == "posix" else 0
    if not mode & 0o022:
        return None
    return (
        f"{what} {folder} can be written by other users (mode {mode:o}): a log put there would be "
        f"ingested as one of yours: chmod go-w {folder}"
    )


def writable_folder(path: str | Path, what: str = "folder", *, private: bool = False) -> Path:
    """``path`` as a folder files can be written to, made if missing; a ValueError naming ``what`` and
    why not.  For outputs checked before the work that makes them, not found unwritable after it.
    ``private``: a folder it makes is its owner's alone (0700: for logs of what an agent read)."""
    folder = Path(path)
    try:
        if private and not folder.exists():
            with contextlib.suppress(OSError):  # made meanwhile, or cannot be: the plain mkdir says why
                folder.parent.mkdir(parents=True, exist_ok=True)
                folder.mkdir(mode=0o700)
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".dtoc-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        why = "not a folder" if folder.exists() and not folder.is_dir() else (e.strerror or str(e))
        raise ValueError(f"{what} {folder}: {why}") from None
    return folder


def writable_file(path: str | Path) -> Path:
    """``path`` as a file that can be written (its folder made if missing); a ValueError saying why not."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: a folder, not a file")
    try:
        writable_folder(path.parent)
    except ValueError as e:
        raise ValueError(f"{path}: cannot be written ({e})") from None
    return path


def not_replaceable(path: Path, own: Callable[[str], bool], *, written_into: bool = False) -> str | None:
    """Why the existing ``path`` may not be replaced by an output whose files ``own`` recognises by name
    (None: it may): a file, the current folder or one holding it, or a folder holding other files.
    ``written_into``: the output's files are written into the folder, which is never removed, so the
    current folder may be it."""
    if not path.is_dir():
        return "is a file"
    if not written_into and Path.cwd().resolve().is_relative_to(path.resolve()):
        return "holds the current folder"
    others = sorted(p.name for p in path.iterdir() if not own(p.name))
    if others:
        return "holds " + ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return None


def data_dir() -> Path:
    """``$DTOC_DATA`` if set, else the repository's ``data/`` folder."""
    env = os.environ.get("DTOC_DATA")
    d = Path(env) if env else Path(__file__).resolve().parents[2] / "data"
    if not d.is_dir():
        raise FileNotFoundError(
            f"bundled data not found at {d}; install from a clone of the repository "
            "(pip install -e .) or set DTOC_DATA to its data/ folder"
        )
    return d


def bundled_raw() -> Path:
    """Raw sample logs (MIT-licensed sources, see data/README.md)."""
    return data_dir() / "raw"


def bundled_dataset() -> Path:
    """The sample as an ingested Parquet dataset."""
    return data_dir() / "sample"


def find_bundled_trace(name: str) -> Path:
    """A bundled raw log by file name or stem (e.g. ``django__django-11239``)."""
    hits = sorted(
        p
        for p in bundled_raw().rglob("*")
        if p.is_file() and (p.name == name or p.name.startswith(name + "."))
    )
    if not hits:
        raise FileNotFoundError(f"no bundled trace called {name!r} under {bundled_raw()}")
    return hits[0]
