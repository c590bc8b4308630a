"""The runs an ingest has read so far, in memory up to a budget and on disk past it.

An ingest keeps every run it has read until the dataset is written: a later log may be a longer copy
of a run, or the same session written by another log kind, or the rest of a run a proxy logged in
parts.  Held as objects, a collection of a few GB of logs needs several GB of memory.  Past
``budget`` bytes of the runs' text, a :class:`RunStore` keeps each further run pickled and compressed
in an anonymous temporary file of this process (in ``TMPDIR``, on disk unless that is a tmpfs; gone
when the store is closed or dropped, or the process ends) and reads it back when asked for.  A run
read back from the file is a new copy each time, changed only by storing it again (``store[i] = t``).
The pickles are this process's own, written and read by it alone.
"""

from __future__ import annotations

import copy
import os
import pickle
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

from dtoc_rl.data.schema import Trajectory

__all__ = ["SPILL_AFTER", "RunStore", "text_bytes"]

#: Bytes of the runs' text held as objects before the rest are kept on disk (their objects take more):
#: a collection of ``../shared``'s size (184 MB of text) never reaches it.
SPILL_AFTER = 512 * 1024 * 1024

_LEVEL = 1  # zlib's fastest: a fifth of the pickle's size already (../shared's runs: 204 MB -> 38 MB)


def text_bytes(t: Trajectory) -> int:
    """About how many bytes of text a run holds (what its objects' size grows with)."""
    n = len(t.system_prompt or "") + len(t.task_text or "")
    for s in t.steps:
        for text in (s.output, s.tool_args, s.assistant_text, s.reasoning, s.user_text, s.harness_text):
            n += len(text) if text else 0
    return n


class RunStore(Sequence[Trajectory]):
    """Runs in the order stored; ``budget`` bytes of text as objects (None: all of them), the rest
    compressed in a temporary file.  When the file cannot be made or written (no space left, no
    writable TMPDIR), ``warn`` is told why once and every later run is held as an object: the runs
    already on disk stay readable, and nothing is lost."""

    def __init__(self, budget: int | None = SPILL_AFTER, warn: Callable[[str], None] | None = None):
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0 bytes or None, got {budget}")
        self.budget = budget
        self._warn = warn
        self._items: list[Trajectory | tuple[int, int]] = []  # a run, or (offset, length) in the file
        self._sizes: list[int] = []  # the text bytes of each run held as an object (0 for one on disk)
        self._held = 0
        self._fd = -1
        self._end = 0
        self._closer: weakref.finalize | None = None

    @property
    def spilled(self) -> int:
        """How many runs are on disk."""
        return sum(1 for x in self._items if type(x) is tuple)

    def _write(self, blob: bytes) -> None:
        if self._fd < 0:
            f = tempfile.TemporaryFile(prefix="dtoc-ingest-", buffering=0)
            self._fd = os.dup(f.fileno())
            f.close()  # the name is gone already; the descriptor kept is the only way to the file
            self._closer = weakref.finalize(self, os.close, self._fd)
        view, at = memoryview(blob), self._end
        try:
            while view:  # a write may take part of the bytes
                n = os.pwrite(self._fd, view, at)
                view, at = view[n:], at + n
        except OSError:
            os.ftruncate(self._fd, self._end)  # what was written of this run is not kept
            raise

    def _place(self, t: Trajectory) -> tuple[Trajectory | tuple[int, int], int]:
        size = text_bytes(t)
        if self.budget is None or self._held + size <= self.budget:
            self._held += size
            return t, size
        blob = zlib.compress(pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL), _LEVEL)
        try:
            self._write(blob)
        except OSError as e:
            self.budget = None
            if self._warn is not None:
                self._warn(
                    f"runs past the memory budget could not be kept in a temporary file ({e.strerror or e}; "
                    f"TMPDIR={tempfile.gettempdir()}): the rest are held in memory"
                )
            self._held += size
            return t, size
        at, self._end = self._end, self._end + len(blob)
        return (at, len(blob)), 0

    def append(self, t: Trajectory) -> None:
        """Store ``t`` last."""
        item, size = self._place(t)
        self._items.append(item)
        self._sizes.append(size)

    def __setitem__(self, i: int, t: Trajectory) -> None:
        """Store ``t`` in place of run ``i`` (one on disk leaves its old bytes in the file)."""
        self._held -= self._sizes[i]
        self._items[i], self._sizes[i] = self._place(t)

    def is_live(self, i: int) -> bool:
        """Whether run ``i`` is held as an object (changes to it are kept)."""
        return type(self._items[i]) is not tuple

    def _load(self, item: Trajectory | tuple[int, int]) -> Trajectory:
        if type(item) is not tuple:
            return item  # type: ignore[return-value]
        at, n = item
        parts, got = [], 0
        while got < n:  # a read may give part of the bytes
            chunk = os.pread(self._fd, n - got, at + got)
            if not chunk:
                raise OSError(f"the temporary file of ingested runs ends early ({got} of {n} bytes)")
            parts.append(chunk)
            got += len(chunk)
        return pickle.loads(zlib.decompress(b"".join(parts)))

    @overload
    def __getitem__(self, i: int) -> Trajectory: ...
    @overload
    def __getitem__(self, i: slice) -> list[Trajectory]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._load(x) for x in self._items[i]]
        return self._load(self._items[i])

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Trajectory]:
        for x in self._items:
            yield self._load(x)

    def __deepcopy__(self, memo: dict) -> list[Trajectory]:
        """A copy is a list of every run as an object (a file cannot be copied)."""
        return [copy.deepcopy(x, memo) if type(x) is not tuple else self._load(x) for x in self._items]

    def drop(self, positions: Iterable[int]) -> None:
        """Forget the runs at ``positions`` (the others keep their order)."""
        gone = set(positions)
        if not gone:
            return
        keep = [i for i in range(len(self._items)) if i not in gone]
        self._held -= sum(self._sizes[i] for i in gone)
        self._items = [self._items[i] for i in keep]
        self._sizes = [self._sizes[i] for i in keep]

    def close(self) -> None:
        """Delete the file now (the runs on disk can no longer be read); dropping the store does too."""
        if self._closer is not None:
            self._closer()
