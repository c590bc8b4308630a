"""Conversation logs written off the request path.

A conversation's log is one JSONL row holding the whole conversation (what ``dtoc-rl ingest`` reads),
rewritten after every request.  On a long run that row is megabytes: encoding and writing it takes
tens of milliseconds, which the agent would wait for before its request goes upstream.
:class:`LogWriter` takes the row and writes it on a thread of its own, a message at a time, pausing
while any request is being read, rewritten and sent (:meth:`LogWriter.busy`; for at most
:data:`MAX_WAIT_S` per row): encoding holds Python's interpreter lock, and a request waiting for it
would wait as long as if it wrote the log itself.  So a log is written while the models answer.  While
a file's row waits, a newer row of the same file replaces it: the file ends up holding what writing
every row would have left, in fewer writes.

A process that exits writes what is pending first, for at most :data:`STOP_WAIT_S` (a disk that hangs
must not hang the exit; what is left is reported as not written).  ``flush()`` waits for the rows put
before it (a test reading a log, a server stopping).  Where no thread can be started, the caller
writes the rows itself.
"""

from __future__ import annotations

import atexit
import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.paths import write_text_atomic
from dtoc_rl.serve.orchestrator import log_pieces

__all__ = ["MAX_WAIT_S", "STOP_WAIT_S", "FailedOnce", "LogWriter", "Row", "StopsCleanly"]

#: A row waits at most this long in all for moments without a request in the proxy's hands (an agent
#: fleet's requests may overlap all the time; a log must not fall behind them for good).
MAX_WAIT_S = 1.0
#: How long a stop (or the process's exit) waits for the logs of the requests passed on.
STOP_WAIT_S = 60.0


class StopsCleanly:
    """A server mixin (before the server class) for a clean stop.  A stopped server's logs hold every
    request it answered, however it was stopped (``shutdown()`` or ``server_close()``: both end with
    ``_write_logs()``).  ``server_close()`` also ends the kept-alive connections, whose handler
    threads would otherwise answer their clients' next requests from a server that was closed, in a
    process that goes on; a request whose body was read is still answered (only the connection's
    reading side is shut)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[Any] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def _write_logs(self) -> None:
        raise NotImplementedError

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)  # type: ignore[misc]

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)  # type: ignore[misc]

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[misc]
        self._write_logs()

    def server_close(self) -> None:
        super().server_close()  # type: ignore[misc]
        with self._connections_lock:
            open_now = list(self._connections)
        for conn in open_now:
            with contextlib.suppress(OSError):  # closed by its handler meanwhile
                conn.shutdown(socket.SHUT_RD)
        self._write_logs()


class FailedOnce:
    """A :class:`LogWriter`'s ``on_error`` for logs named by a conversation (or session): each one that
    cannot be written is said once (``warn``) and is in this set afterwards, so that its owner stops
    putting it: a log that cannot be written costs the log, never the request."""

    def __init__(self, warn: Callable[[str], None], what: str = "conversation"):
        self.warn, self.what = warn, what
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __call__(self, path: Path, e: BaseException) -> None:
        name = path.name.removesuffix(".jsonl")
        with self._lock:
            if name in self._names:
                return
            self._names.add(name)
        self.warn(f"{self.what} {name}: not logged ({type(e).__name__}: {e})")


#: What :meth:`LogWriter.put` takes: a log row, or a function that makes it when it is written.
Row = dict[str, Any] | Callable[[], dict[str, Any]]


class LogWriter:
    """Writes ``put(path, row)`` rows, each file through a ``.partial`` file and a rename (never seen
    half written), on one thread started when there is work and ended when there is none.

    Args:
        on_error: called with the path and the error of a row that could not be written (a full disk,
            a folder gone, text no file can hold, the process exiting first); the writer goes on with
            the other files.
    """

    def __init__(self, on_error: Callable[[Path, BaseException], None]):
        self.on_error = on_error
        self.written = 0  # rows written (a row replaced while it waited is not counted)
        self._pending: dict[Path, tuple[int, Row]] = {}  # path -> (its put's number, row)
        self._writing: dict[Path, int] = {}  # the row being written now: path -> its number
        # path -> the number of the last row written or failed, kept only while a flush waits
        self._done: dict[Path, int] = {}
        self._flushing = 0
        self._puts = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = 0
        # one row written at a time, in the order put (the thread, or a caller that could start none)
        self._write_lock = threading.Lock()
        # a daemon thread (whoever puts: a server's request threads are daemons) that the exit waits
        # for, up to STOP_WAIT_S, rather than a thread the exit would wait for without end
        ref = weakref.ref(self)
        atexit.register(lambda: (w := ref()) is not None and w._at_exit())

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """While inside, rows being written pause between messages, for at most :data:`MAX_WAIT_S` per
        row in all: a request being read, rewritten and sent."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def put(self, path: Path, row: Row) -> None:
        """Queue ``row`` as the whole of ``path``.  ``row`` is written later from another thread: it must
        share no mutable object with anything that changes meanwhile (a fresh ``log_row()`` shares
        none).  Or ``row`` is a function that makes it, called when the row is written: a log of a long
        session takes its time to make (100 ms at 2,000 calls), so it is made off the request's path and
        only for the newest row of a file (it must hold its own locks; an error it raises is reported
        as a write's)."""
        with self._cond:
            self._puts += 1
            self._pending[path] = (self._puts, row)
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="dtoc-rl log writer", daemon=True)
            try:
                self._thread.start()
                return
            except RuntimeError:  # no thread to be had (a limit reached, the interpreter ending)
                self._thread = None
        # here, then, without pauses (the caller may be the request they would wait for)
        while self._write_next(paced=False):
            pass

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until each file a row was put for holds that row or a newer one (written, or its error
        reported); rows put meanwhile are not waited for.  False if ``timeout`` ran out first."""
        with self._cond:
            want = {**self._writing, **{path: n for path, (n, _) in self._pending.items()}}
            self._flushing += 1
            try:
                return self._cond.wait_for(
                    lambda: all(self._done.get(path, 0) >= n for path, n in want.items()), timeout
                )
            finally:
                self._flushing -= 1
                if not self._flushing:
                    self._done.clear()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._writing)

    def _at_exit(self) -> None:
        if self.flush(STOP_WAIT_S):
            return
        with self._cond:
            left = list(self._pending) + list(self._writing)
        for path in left:
            self._report(path, TimeoutError(f"not written within {STOP_WAIT_S:g} s of the process's exit"))

    def _run(self) -> None:
        ended = False
        try:
            while True:
                with self._cond:
                    if not self._pending:  # let go in the same hold: a put after it starts a new thread
                        self._thread, ended = None, True
                        self._cond.notify_all()
                        return
                self._write_next()
        finally:
            if not ended:  # killed by what no write should raise: the next put starts another
                with self._cond:
                    self._thread = None
                    self._cond.notify_all()

    def _write_next(self, paced: bool = True) -> bool:
        """Write the oldest waiting row; False if none waited."""
        with self._write_lock:
            with self._cond:
                if not self._pending:
                    return False
                path = next(iter(self._pending))
                n, row = self._pending.pop(path)
                self._writing[path] = n
            try:
                if callable(row):
                    if paced:  # made between requests: it holds the interpreter, and its session's lock
                        self._idle(MAX_WAIT_S)
                    row = row()
                pieces = log_pieces(row)
                chunks = self._paced(pieces) if paced else pieces
                write_text_atomic(path, chunks, encoding="utf-8", private=True)
                self.written += 1
            except Exception as e:  # a full disk, no permission, text no file can hold, no memory left
                self._report(path, e)
            finally:
                with self._cond:
                    del self._writing[path]
                    if self._flushing:
                        self._done[path] = n
                    self._cond.notify_all()
        return True

    def _idle(self, budget: float) -> float:
        """Wait while a request is in hand, at most ``budget`` seconds; returns the budget left."""
        if not self._busy or budget <= 0:  # read without the lock: a stale read costs one wait
            return budget
        t0 = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: self._busy == 0, budget)
        return budget - (time.monotonic() - t0)

    def _paced(self, pieces: Iterable[str]) -> Iterator[str]:
        """``pieces`` as they come, waiting between them while a request is in the proxy's hands."""
        budget = MAX_WAIT_S
        for piece in pieces:
            budget = self._idle(budget)
            yield piece

    def _report(self, path: Path, e: BaseException) -> None:
        try:
            self.on_error(path, e)
        except Exception:  # a failing report must not stop the other files' logs
            pass
