"""Resources: what a step reads (files and their line ranges, searches, listings, commands, calls),
the paths they name, and whether later writes change them.

``read_resource`` and ``write_resources`` of a labelled :class:`~dtoc_rl.data.schema.Step` hold these
as text (the format is in :mod:`dtoc_rl.labels`); :func:`parse_resource` reads them back.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dtoc_rl.data.schema import Step, Trajectory

_WS = re.compile(r"\s+")


def _flatten_json(value, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten_json(v, out)
    elif isinstance(value, list):
        for v in value:
            _flatten_json(v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))


def _json_args(text: str):
    """``tool_args`` decoded when it is a JSON object, else None."""
    t = text.strip() if text else ""
    if not t or t[0] != "{":
        return None
    try:
        value = json.loads(t)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _args_text(step: Step) -> str:
    """The tool arguments as plain text: JSON string values joined by newlines, else the raw args."""
    args = _json_args(step.tool_args)
    if args is None:
        return step.tool_args or ""
    parts: list[str] = []
    _flatten_json(args, parts)
    return "\n".join(parts)


@dataclass(frozen=True)
class Resource:
    """One thing a step reads: ``kind`` is file, search, list, cmd or call."""

    kind: str
    key: str
    start: int | None = None  # file: first line (1-based)
    end: int | None = None  # file: last line (inclusive); None = to the end
    tail: int | None = None  # file: last N lines

    def __str__(self) -> str:
        if self.kind != "file":
            return f"{self.kind}:{self.key}"
        if self.tail is not None:
            return f"file:{self.key}#tail{self.tail}"
        if self.start is None and self.end is None:
            return f"file:{self.key}"
        return f"file:{self.key}#L{self.start or 1}-{'' if self.end is None else self.end}"

    @property
    def whole(self) -> bool:
        return self.kind == "file" and self.tail is None and self.start is None and self.end is None

    def overlaps(self, other: Resource) -> bool:
        """Same resource, and for files the same path with overlapping lines."""
        if self.kind != other.kind:
            return False
        if self.kind != "file":
            return self.key == other.key
        if not same_path(self.key, other.key):
            return False
        if self.whole or other.whole:
            return True
        if self.tail is not None or other.tail is not None:
            return True  # a tail's line numbers are unknown without the file length
        a0, a1 = self.start or 1, self.end if self.end is not None else float("inf")
        b0, b1 = other.start or 1, other.end if other.end is not None else float("inf")
        return a0 <= b1 and b0 <= a1


_RES = re.compile(r"^file:(?P<path>.*?)(?:#L(?P<a>\d+)-(?P<b>\d*)|#tail(?P<t>\d+))?$", re.DOTALL)


def parse_resource(text: str) -> Resource:
    """Inverse of ``str(Resource)``."""
    if text.startswith("file:"):
        m = _RES.match(text)
        assert m is not None
        a, b, t = m.group("a"), m.group("b"), m.group("t")
        return Resource(
            "file",
            m.group("path"),
            start=int(a) if a else None,
            end=int(b) if b else None,
            tail=int(t) if t else None,
        )
    kind, _, key = text.partition(":")
    return Resource(kind, key)


def read_resources(step: Step) -> list[Resource]:
    """The resources a labelled step reads (its ``read_resource`` split into lines)."""
    if not step.read_resource:
        return []
    return [parse_resource(line) for line in step.read_resource.split("\n") if line]


_DRIVE = re.compile(r"^([A-Za-z]):[\\/]")


def _norm_path(p: str, cwd: str | None = None) -> str:
    """Normalised path: ``./`` and ``..`` resolved, Windows drives as ``/c/...``, ``/`` separators."""
    p = p.strip().strip("'\"")
    if not p:
        return p
    if "\\" in p and (_DRIVE.match(p) or "/" not in p):
        p = p.replace("\\", "/")
    m = _DRIVE.match(p)
    if m:
        p = f"/{m.group(1).lower()}/{p[3:]}"
    if cwd and not p.startswith("/") and not p.startswith("~"):
        p = cwd.rstrip("/") + "/" + p
    p = os.path.normpath(p)
    if p.startswith("./"):
        p = p[2:]
    return p


def same_path(a: str, b: str) -> bool:
    """Equal paths, or an absolute path ending with the other (relative) one."""
    if a == b:
        return True
    if a.startswith("/") == b.startswith("/"):
        return False
    long, short = (a, b) if a.startswith("/") else (b, a)
    return short not in (".", "") and long.endswith("/" + short)


def _under(path: str, folder: str) -> bool:
    if folder in (".", "", "/"):
        return True
    if same_path(path, folder):
        return True
    f = folder.rstrip("/") + "/"
    if path.startswith(f):
        return True
    # relative/absolute mix: /testbed/a/b.py under a, or a/b.py under /testbed/a
    if path.startswith("/") != folder.startswith("/"):
        if path.startswith("/"):
            return ("/" + f) in path
        return folder.endswith("/" + path.split("/")[0]) or ("/" + f) in ("/" + path)
    return False


def _canon_json(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _file_written(res: Resource, writes: Iterable[str]) -> bool:
    for w in writes:
        if w == "*":
            return True
        if w.startswith("state:"):
            continue
        if res.kind == "file" and same_path(res.key, w):
            return True
        if res.kind == "list" and _under(w, res.key.split(" ", 1)[0]):
            return True
        if res.kind == "search":
            return True
    return False


def modified_between(traj: Trajectory, i: int, j: int) -> bool:
    """Whether what step ``i`` read may have changed by the time step ``j`` (> i) ran.

    Looks at ``write_resources`` of steps ``i+1 .. j`` (step ``j`` included: a
    ``sed -i ... && cat f`` re-read sees the new text).  Files: a write of the
    same path (or ``*``).  Searches: any file write.  Listings: a write under
    the folder.  Shell commands and tool calls: any write at all (a test run
    depends on every file; a ``get_*`` call on any state change).  A step
    without a read resource counts as modified when anything was written.
    Unknown writes (a Python script whose target we could not see) are missed.
    """
    if j <= i:
        return False
    steps = traj.steps
    return modified_by(
        steps[i], [w for k in range(i + 1, min(j, len(steps) - 1) + 1) for w in steps[k].write_resources]
    )


def modified_by(step: Step, writes: list[str]) -> bool:
    """Whether these writes (``write_resources`` of later steps) may change what ``step`` read;
    the rules of :func:`modified_between`."""
    return _changes(read_resources(step), writes)


def _changes(res: list[Resource], writes: list[str]) -> bool:
    if not writes:
        return False
    if not res:
        return True
    return any(r.kind in ("cmd", "call") or _file_written(r, writes) for r in res)


def writing_steps(traj: Trajectory) -> list[int]:
    """The indices of ``traj``'s steps that write (``write_resources``), in order: what
    :func:`first_modified` scans."""
    return [k for k, s in enumerate(traj.steps) if s.write_resources]


def first_modified(traj: Trajectory, i: int, writers: list[int] | None = None) -> int | None:
    """The first step ``t > i`` with ``modified_between(traj, i, t)``, or None when nothing later changes
    what step ``i`` read.

    The rules ask of each written path alone, so the first such step is the first later one whose own
    writes change what ``i`` read: a scan of the steps that write, not of every span.  ``writers``, the
    indices of the steps with ``write_resources`` in order (:func:`writing_steps`), may be given when
    asking for many ``i``."""
    steps = traj.steps
    if writers is None:
        writers = writing_steps(traj)
    res = read_resources(steps[i])
    for at in range(bisect.bisect_right(writers, i), len(writers)):
        k = writers[at]
        if _changes(res, steps[k].write_resources):
            return k
    return None
