"""The tools a LiveEnv agent can call, run for real in the task's working directory.

* ``bash(command)``: ``/bin/sh -c command`` in the workdir, stdin closed, stdout and
  stderr merged, killed (its whole process group) after ``timeout`` seconds.
  A non-zero exit appends ``[exit code N]``; a timeout appends ``[timed out after
  Ts: the command was killed]`` to whatever it printed.  Both are ordinary tool
  outputs (``is_error=True``): the episode goes on.  Background processes that still
  hold the output a second after the command exited (``server &``) are stopped with
  its process group, and the output says so: one call never outlives its command.
  The shell is **not** a sandbox: it runs with the permissions of this process.
  Its environment is built from an allow-list, so a credential under any name stays
  out of it: ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TERM``,
  ``COLUMNS``, ``LINES``, ``NO_COLOR``, ``TZ``, ``TMPDIR``/``TEMP``/``TMP``,
  ``VIRTUAL_ENV`` and ``PYTHON*`` (except ``PYTHONPATH``, which would put host code
  before the task's); a name that still looks like a credential (``KEY``, ``TOKEN``,
  ``SECRET``, ``PASSWORD``, ...) is dropped even there.  This Python's ``bin`` folder
  comes first on ``PATH`` so ``python`` and ``pytest`` are the ones running the env,
  and ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (the task tests need plain pytest; host
  plugins would add seconds per run and could change results).  Pass
  ``Toolbox(env_allow=[...])`` for more names a task needs.
* ``read_file(path, start_line?, end_line?)``: the file's text (1-based, inclusive line range).
* ``write_file(path, content)``: create or overwrite a file (parent folders are made).
* ``str_replace(path, old_str, new_str)``: replace the one occurrence of ``old_str``.
* ``submit(summary?)``: end the episode; the task checker then runs the tests.

File tools are confined to the workdir: a path that resolves (after ``..`` and
symlinks) outside it is rejected with an error output, and nothing is read or written.
They only touch regular files with one link: a hard link (``st_nlink > 1``) may be
a file outside the workdir under a name inside it, and a FIFO, device or socket
would block or never end, so these are refused (checked on the opened file, not
only its name).  Reads are bounded in bytes: a file over ``max_read_bytes``
(default 1 MiB) shows its head and tail with the number of bytes skipped; a line
range is found by scanning at most 64 MiB, and ``str_replace`` refuses files over
the limit (``bash`` tools such as ``sed`` handle those).

Arguments are checked before anything runs: ``start_line``/``end_line`` must be
whole numbers >= 1 (a string, ``1e999``, a negative or a bool is an error output).
No tool call, however malformed, raises out of :meth:`Toolbox.run`: anything
unexpected becomes an ``[error]`` output the model can read.

Every output longer than ``max_output_chars`` (default 10,000 characters, about
2,500 tokens) keeps its first and last halves around a ``[... N characters cut ...]``
marker, so one runaway command cannot flood the context.  A command's output is
also held in bounded memory while it runs (its first and last ``4 * max_output_chars``
bytes; beyond that the marker counts bytes), so printing gigabytes costs no more
than printing a page.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_TOOL_TIMEOUT",
    "ENV_ALLOW",
    "ENV_ALLOW_PREFIXES",
    "SUBMIT_NAMES",
    "TOOL_NAMES",
    "PathEscapeError",
    "ToolArgumentError",
    "ToolResult",
    "Toolbox",
    "resolve_in",
    "tool_specs",
    "truncate_output",
]

DEFAULT_MAX_OUTPUT_CHARS = 10_000
DEFAULT_MAX_READ_BYTES = 1 << 20
DEFAULT_TOOL_TIMEOUT = 30.0
TOOL_NAMES = ("bash", "read_file", "write_file", "str_replace", "submit")
SUBMIT_NAMES = ("submit", "finish")  # "finish" is accepted as an alias of submit
# The shell's environment: these names and prefixes only (see the module docstring).
ENV_ALLOW = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "VIRTUAL_ENV",
)
ENV_ALLOW_PREFIXES = ("LC_", "PYTHON")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD|CREDENTIAL|AUTH|COOKIE|PRIVATE", re.IGNORECASE)
_MAX_SCAN_BYTES = 64 << 20  # how far a line range is looked for
_CHUNK = 1 << 16


class PathEscapeError(ValueError):
    """A file-tool path that resolves outside the working directory."""


@dataclass
class ToolResult:
    """One tool call's outcome.  ``output`` is what the agent sees (and the store keeps)."""

    output: str
    is_error: bool = False
    timed_out: bool = False
    submitted: bool = False
    seconds: float = 0.0
    returncode: int | None = None  # bash only; None when killed by the timeout
    cut: bool = False  # already cut to size by the tool, with its own marker


def truncate_output(text: str, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> str:
    """Keep the first and last ``max_chars // 2`` characters around a marker."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    half = max_chars // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"


def resolve_in(workdir: str | Path, path: str) -> Path:
    """``path`` (relative to ``workdir``, or absolute) resolved; raises PathEscapeError
    when it lands outside ``workdir``."""
    if not isinstance(path, str) or not path.strip():
        raise PathEscapeError("path must be a non-empty string")
    if "\x00" in path:
        raise PathEscapeError("path contains a NUL character")
    root = Path(workdir).resolve()
    p = Path(path.strip())
    full = (p if p.is_absolute() else root / p).resolve()
    if full != root and root not in full.parents:
        raise PathEscapeError(f"path {path!r} escapes the working directory; use a path inside it")
    return full


def _allowed(name: str, extra: tuple[str, ...] = ()) -> bool:
    if name in extra:
        return True
    if name == "PYTHONPATH" or _SECRET.search(name):
        return False
    return name in ENV_ALLOW or name.startswith(ENV_ALLOW_PREFIXES)


def _safe_env(extra: tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if _allowed(k, extra)}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # task tests need plain pytest; plugins cost seconds
    return env


_BACKGROUND_GRACE = 1.0  # seconds a background child may keep a finished command's output open


def run_command(
    cmd: str | list[str],
    cwd: str | Path,
    timeout: float,
    max_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    *,
    env_allow: tuple[str, ...] = (),
) -> ToolResult:
    """Run ``cmd`` (a shell string, or an argv list) in ``cwd`` with a hard timeout.

    The command gets its own process group, which is killed on timeout, so
    children it spawned die with it.  Never raises for a failing command.
    """
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            shell=isinstance(cmd, str),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_safe_env(env_allow),
            start_new_session=True,
        )
    except OSError as e:
        return ToolResult(f"[could not start the command: {e}]", is_error=True, seconds=time.monotonic() - t0)
    keep = 4 * max(1, max_chars)  # bytes kept at each end: enough for max_chars characters of UTF-8
    sink = _OutputSink(keep)
    reader = threading.Thread(target=sink.drain, args=(proc.stdout,), daemon=True)
    reader.start()
    timed_out = lingering = False
    try:
        proc.wait(timeout=timeout)
        # The command exited; a child it left in the background (`server &`) may still hold the
        # output open.  Waiting for it would stall the agent until the timeout, so it gets a short
        # grace period for its last words and is then stopped with the command's process group.
        reader.join(min(_BACKGROUND_GRACE, max(0.0, timeout - (time.monotonic() - t0))))
        lingering = reader.is_alive()
    except subprocess.TimeoutExpired:
        timed_out = True
    if timed_out or lingering:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()
        reader.join(5)  # a grandchild in another session may still hold the pipe: keep what came
    seconds = time.monotonic() - t0
    if timed_out:
        suffix, is_error = f"[timed out after {timeout:g}s: the command was killed]", True
    elif proc.returncode != 0:
        suffix, is_error = f"[exit code {proc.returncode}]", True
    else:
        suffix, is_error = "", False
    if lingering:
        note = "[background processes that kept the output open were stopped when the command exited]"
        suffix = f"{suffix}\n{note}".lstrip("\n")
    text = sink.text(max_chars, suffix)
    return ToolResult(
        text,
        is_error=is_error,
        timed_out=timed_out,
        seconds=seconds,
        returncode=None if timed_out else proc.returncode,
    )


class _OutputSink:
    """A command's output kept in bounded memory: the first and last ``keep`` bytes and the
    total count, so a command printing gigabytes costs no more than one printing a page."""

    def __init__(self, keep: int):
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.lock = threading.Lock()

    def drain(self, stream) -> None:
        try:
            while True:
                chunk = stream.read1(_CHUNK) if hasattr(stream, "read1") else stream.read(_CHUNK)
                if not chunk:
                    break
                with self.lock:
                    self.total += len(chunk)
                    room = self.keep - len(self.head)
                    if room > 0:
                        self.head += chunk[:room]
                        chunk = chunk[room:]
                    if chunk:
                        self.tail += chunk
                        if len(self.tail) > 2 * self.keep:
                            del self.tail[: len(self.tail) - self.keep]
        except (OSError, ValueError):  # the pipe was closed under us after a kill
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def text(self, max_chars: int, suffix: str) -> str:
        """The output as the tool shows it: cut head+tail to ``max_chars`` like
        :func:`truncate_output`, with ``suffix`` (exit code, timeout) kept at the end."""
        with self.lock:
            head, tail, total = bytes(self.head), bytes(self.tail), self.total
        if total <= 2 * self.keep:  # all of it was kept (head and tail do not overlap)
            text = (head + tail).decode("utf-8", errors="backslashreplace")
            if suffix:
                text = f"{text}\n{suffix}".lstrip("\n")
            elif not text:
                text = "[no output]"
            return truncate_output(text, max_chars)
        half = max(1, max_chars // 2)
        start = head.decode("utf-8", errors="backslashreplace")[:half]
        end = tail[-self.keep :].decode("utf-8", errors="backslashreplace")
        end = (f"{end}\n{suffix}" if suffix else end)[-half:]
        skipped = total - len(start.encode("utf-8", errors="surrogateescape")) - len(end.encode())
        return f"{start}\n[... about {max(0, skipped)} bytes cut ...]\n{end}"


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def tool_specs() -> list[dict[str, Any]]:
    """The tools in OpenAI chat-completions ``tools=[...]`` format."""
    path = {"type": "string", "description": "File path relative to the repository root."}
    return [
        _fn(
            "bash",
            "Run a shell command in the repository root (e.g. `ls`, `grep -n foo *.py`, "
            "`python -m pytest -q`). Output is truncated if very long; long-running commands are killed.",
            {"command": {"type": "string", "description": "The shell command."}},
            ["command"],
        ),
        _fn(
            "read_file",
            "Read a text file, optionally only lines start_line..end_line (1-based, inclusive).",
            {
                "path": path,
                "start_line": {"type": "integer", "description": "First line (1-based)."},
                "end_line": {"type": "integer", "description": "Last line (inclusive)."},
            },
            ["path"],
        ),
        _fn(
            "write_file",
            "Create or overwrite a file with the given content.",
            {"path": path, "content": {"type": "string", "description": "The whole new file content."}},
            ["path", "content"],
        ),
        _fn(
            "str_replace",
            "Replace the single occurrence of old_str in a file with new_str (old_str must match exactly, "
            "including whitespace, and occur exactly once).",
            {
                "path": path,
                "old_str": {"type": "string", "description": "Exact text to replace."},
                "new_str": {"type": "string", "description": "Replacement text."},
            },
            ["path", "old_str", "new_str"],
        ),
        _fn(
            "submit",
            "Call this once the task is done; the task's tests are then run.",
            {"summary": {"type": "string", "description": "Optional one-line summary of the fix."}},
            [],
        ),
    ]


class ToolArgumentError(ValueError):
    """A tool call's argument that cannot be used (the message is shown to the model)."""


def _line_arg(args: dict[str, Any], name: str) -> int | None:
    """A 1-based line number argument: a whole JSON number >= 1, or absent."""
    v = args.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ToolArgumentError(f"{name!r} must be a whole number >= 1, got {type(v).__name__} {v!r:.40}")
    if isinstance(v, float) and (not math.isfinite(v) or not v.is_integer()):
        raise ToolArgumentError(f"{name!r} must be a whole number >= 1, got {v!r}")
    if v < 1:
        raise ToolArgumentError(f"{name!r} must be >= 1 (lines are numbered from 1), got {v!r}")
    return int(v)


def _open_regular(p: Path, flags: int) -> tuple[int, os.stat_result]:
    """Open ``p`` and check the opened file (not just its name) is a regular file with one link.

    ``O_NONBLOCK`` keeps a FIFO from blocking the open; ``O_NOFOLLOW`` refuses a symlink swapped
    in after the path was resolved."""
    fd = os.open(p, flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a folder"
                if stat.S_ISDIR(st.st_mode)
                else "not a regular file"
            )
            raise ToolArgumentError(f"{p.name} is {kind}; only regular files can be used")
        if st.st_nlink > 1:
            raise ToolArgumentError(
                f"{p.name} has {st.st_nlink} hard links (it may be a file outside the working directory); "
                "refused"
            )
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def _special(p: Path) -> str | None:
    """Why ``p`` (already resolved) cannot be opened safely, without opening it."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return f"{p.name} is not a regular file (a FIFO, device or socket); only regular files can be used"


def _read_range(f, first: int, last: int | None, keep: int) -> tuple[bytes, str]:
    """Lines ``first..last`` (1-based, inclusive; ``last`` None: to the end) of a binary file,
    keeping at most ``keep`` bytes and scanning at most ``_MAX_SCAN_BYTES``; returns the bytes
    and a note on why reading stopped early ("" when it did not)."""
    out = bytearray()
    line = 1  # the line the next byte belongs to
    scanned = 0
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return bytes(out), ""
        scanned += len(chunk)
        pos = 0
        while pos < len(chunk):
            nl = chunk.find(b"\n", pos)
            stop = len(chunk) if nl < 0 else nl + 1
            if line >= first and (last is None or line <= last):
                out += chunk[pos:stop]
                if len(out) > keep:
                    return bytes(out[:keep]), f"[... stopped after {keep} bytes of the requested lines ...]"
            if nl < 0:
                break
            line += 1
            pos = stop
            if last is not None and line > last:
                return bytes(out), ""
        if scanned >= _MAX_SCAN_BYTES:
            where = f"line {line}" if line >= first else f"line {first}"
            return bytes(out), f"[... stopped scanning at {scanned} bytes, before the end of {where} ...]"


class Toolbox:
    """Runs tool calls in ``workdir``.

    Args:
        workdir: the task's working directory (a temporary copy of its repository).
        timeout: seconds before a ``bash`` command is killed.
        max_output_chars: outputs are cut head+tail beyond this (see :func:`truncate_output`).
        max_read_bytes: the most a file tool reads of one file (see the module docstring).
        env_allow: more environment variable names passed to ``bash`` (beyond :data:`ENV_ALLOW`).
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        env_allow: tuple[str, ...] | list[str] = (),
    ):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_read_bytes < 1:
            raise ValueError(f"max_read_bytes must be >= 1, got {max_read_bytes}")
        self.workdir = Path(workdir).resolve()
        self.timeout = float(timeout)
        self.max_output_chars = int(max_output_chars)
        self.max_read_bytes = int(max_read_bytes)
        self.env_allow = tuple(env_allow)

    def run(self, name: str, arguments: Any) -> ToolResult:
        """Run one call.  Bad names, bad arguments and failing tools become error outputs;
        nothing raises (but KeyboardInterrupt and SystemExit)."""
        t0 = time.monotonic()
        if not isinstance(name, str):
            return ToolResult(f"[error] tool name must be a string, got {type(name).__name__}", is_error=True)
        label = name if len(name) <= 64 and name.isprintable() else repr(name[:64])
        try:
            args, err = _args_dict(arguments)
            if err:
                return ToolResult(f"[error] {label}: {err}", is_error=True)
            if name == "bash":
                cmd = args.get("command", args.get("cmd", args.get("input")))
                if not isinstance(cmd, str) or not cmd.strip():
                    return ToolResult("[error] bash: 'command' must be a non-empty string", is_error=True)
                if "\x00" in cmd:
                    return ToolResult("[error] bash: 'command' contains a NUL character", is_error=True)
                return run_command(
                    cmd, self.workdir, self.timeout, self.max_output_chars, env_allow=self.env_allow
                )
            if name == "read_file":
                res = self._read(args)
            elif name == "write_file":
                res = self._write(args)
            elif name == "str_replace":
                res = self._replace(args)
            elif name in SUBMIT_NAMES:
                summary = args.get("summary")
                text = "Submitted." + (f" Summary: {summary}" if isinstance(summary, str) and summary else "")
                res = ToolResult(text, submitted=True)
            else:
                res = ToolResult(
                    f"[error] unknown tool {name[:64]!r}; available tools: {', '.join(TOOL_NAMES)}",
                    is_error=True,
                )
        except (PathEscapeError, ToolArgumentError) as e:
            res = ToolResult(f"[error] {label}: {e}", is_error=True)
        except Exception as e:  # a model's call must never end the episode with a traceback
            res = ToolResult(f"[error] {label}: {type(e).__name__}: {e}", is_error=True)
        if not res.cut:
            res.output = truncate_output(res.output, self.max_output_chars)
        res.seconds = time.monotonic() - t0
        return res

    # -- file tools ---------------------------------------------------------------------
    def _path(self, args: dict[str, Any]) -> Path:
        path = args.get("path", args.get("file_path", args.get("file")))
        if not isinstance(path, str):
            raise PathEscapeError("'path' must be a string")
        return resolve_in(self.workdir, path)

    def _read(self, args: dict[str, Any]) -> ToolResult:
        start, end = _line_arg(args, "start_line"), _line_arg(args, "end_line")
        p = self._path(args)
        if not p.exists():
            return ToolResult(f"[error] read_file: no such file: {args.get('path')}", is_error=True)
        why = _special(p)
        if why:
            return ToolResult(f"[error] read_file: {why}", is_error=True)
        if p.is_dir():
            return ToolResult(f"[error] read_file: {args.get('path')} is a folder", is_error=True)
        fd, st = _open_regular(p, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            limit = self.max_read_bytes
            if st.st_size <= limit:
                text = f.read(limit + 1).decode("utf-8", errors="backslashreplace")
                if start is not None or end is not None:  # small: the same line splitting as str.splitlines
                    text = "".join(text.splitlines(keepends=True)[(start or 1) - 1 : end])
                return ToolResult(text if text else "[empty]")
            if start is None and end is None:
                return self._head_tail(f, st.st_size)
            data, note = _read_range(f, start or 1, end, limit)
        text = data.decode("utf-8", errors="backslashreplace")
        if note:
            room = self.max_output_chars - len(note) - 1 - 48  # 48: truncate_output's own marker
            text = truncate_output(text, max(2, room)) + "\n" + note
            return ToolResult(text, cut=True)
        return ToolResult(text if text else "[empty]")

    def _head_tail(self, f, size: int) -> ToolResult:
        """A large file's first and last characters around a marker; reads at most 4 bytes per
        character shown (the most UTF-8 needs), never the whole file."""
        half = max(1, self.max_output_chars // 2)
        head = f.read(4 * half).decode("utf-8", errors="backslashreplace")[:half]
        f.seek(max(0, size - 4 * half))
        tail = f.read(4 * half).decode("utf-8", errors="backslashreplace")[-half:]
        marker = (
            f"\n[... the file is {size} bytes; only its start and end are shown: "
            "use start_line/end_line or bash (grep -n, sed -n) for the rest ...]\n"
        )
        return ToolResult(head + marker + tail, cut=True)

    def _write(self, args: dict[str, Any]) -> ToolResult:
        p = self._path(args)
        content = args.get("content")
        if not isinstance(content, str):
            return ToolResult("[error] write_file: 'content' must be a string", is_error=True)
        if p.is_dir():
            return ToolResult(f"[error] write_file: {args.get('path')} is a directory", is_error=True)
        why = _special(p)  # before opening: a FIFO would block or fail obscurely
        if why:
            return ToolResult(f"[error] write_file: {why}", is_error=True)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        # Checked on the opened file, then truncated: a hard link is refused before it changes.
        fd, _ = _open_regular(p, os.O_WRONLY | os.O_CREAT)
        with os.fdopen(fd, "wb") as f:
            f.truncate(0)
            f.write(data)
        return ToolResult(f"Wrote {len(content)} characters to {p.relative_to(self.workdir)}.")

    def _replace(self, args: dict[str, Any]) -> ToolResult:
        p = self._path(args)
        old, new = args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old:
            return ToolResult("[error] str_replace: 'old_str' must be a non-empty string", is_error=True)
        if not isinstance(new, str):
            return ToolResult("[error] str_replace: 'new_str' must be a string", is_error=True)
        if not p.exists() or p.is_dir():
            return ToolResult(f"[error] str_replace: no such file: {args.get('path')}", is_error=True)
        why = _special(p)
        if why:
            return ToolResult(f"[error] str_replace: {why}", is_error=True)
        fd, st = _open_regular(p, os.O_RDWR)
        with os.fdopen(fd, "r+b") as f:
            if st.st_size > self.max_read_bytes:
                return ToolResult(
                    f"[error] str_replace: {args.get('path')} is {st.st_size} bytes, over the "
                    f"{self.max_read_bytes}-byte limit of the file tools; edit it with bash (e.g. sed)",
                    is_error=True,
                )
            text = f.read(self.max_read_bytes + 1).decode("utf-8")
            n = text.count(old)
            if n != 1:
                return ToolResult(
                    f"[error] str_replace: old_str occurs {n} times in {args.get('path')}; "
                    "it must occur exactly once",
                    is_error=True,
                )
            f.seek(0)
            f.truncate(0)
            f.write(text.replace(old, new, 1).encode("utf-8"))
        return ToolResult(f"Replaced 1 occurrence in {p.relative_to(self.workdir)}.")


def _args_dict(arguments: Any) -> tuple[dict[str, Any], str | None]:
    if arguments is None:
        return {}, None
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}, None
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return {}, f"arguments are not valid JSON ({e.msg})"
        except RecursionError:
            return {}, "arguments are nested too deeply"
    if not isinstance(arguments, dict):
        return {}, f"arguments must be a JSON object, got {type(arguments).__name__}"
    return arguments, None
