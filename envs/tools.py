"""The tools a LiveEnv agent can call, run for real in the task's working directory.

* ``bash(command)``: ``/bin/sh -c command`` in the workdir, stdin closed, stdout and
  stderr merged, killed (its whole process group) after ``timeout`` seconds.
  A non-zero exit appends ``[exit code N]``; a timeout appends ``[timed out after
  Ts: the command was killed]`` to whatever it printed.  Both are ordinary tool
  outputs (``is_error=True``): the episode goes on.  The shell is **not** a sandbox:
  it runs with the permissions of this process.  Its environment is this process's
  minus variables whose names look like credentials (``*KEY*``, ``*TOKEN*``,
  ``*SECRET*``, ``*PASSWORD*``), with this Python's ``bin`` folder first on
  ``PATH`` so ``python`` and ``pytest`` are the ones running the env, and
  ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (the task tests need plain pytest; host
  plugins would add seconds per run and could change results).
* ``read_file(path, start_line?, end_line?)``: the file's text (1-based, inclusive line range).
* ``write_file(path, content)``: create or overwrite a file (parent folders are made).
* ``str_replace(path, old_str, new_str)``: replace the one occurrence of ``old_str``.
* ``submit(summary?)``: end the episode; the task checker then runs the tests.

File tools are confined to the workdir: a path that resolves (after ``..`` and
symlinks) outside it is rejected with an error output, and nothing is read or written.

Every output longer than ``max_output_chars`` (default 10,000 characters, about
2,500 tokens) keeps its first and last halves around a ``[... N characters cut ...]``
marker, so one runaway command cannot flood the context.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TOOL_TIMEOUT",
    "SUBMIT_NAMES",
    "TOOL_NAMES",
    "PathEscapeError",
    "ToolResult",
    "Toolbox",
    "resolve_in",
    "tool_specs",
    "truncate_output",
]

DEFAULT_MAX_OUTPUT_CHARS = 10_000
DEFAULT_TOOL_TIMEOUT = 30.0
TOOL_NAMES = ("bash", "read_file", "write_file", "str_replace", "submit")
SUBMIT_NAMES = ("submit", "finish")  # "finish" is accepted as an alias of submit
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


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


def _safe_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # task tests need plain pytest; plugins cost seconds
    env.pop("PYTHONPATH", None)
    return env


def run_command(
    cmd: str | list[str], cwd: str | Path, timeout: float, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS
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
            env=_safe_env(),
            start_new_session=True,
        )
    except OSError as e:
        return ToolResult(f"[could not start the command: {e}]", is_error=True, seconds=time.monotonic() - t0)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild holds the pipe open
            out = b""
    text = (out or b"").decode("utf-8", errors="backslashreplace")
    seconds = time.monotonic() - t0
    if timed_out:
        text = f"{text}\n[timed out after {timeout:g}s: the command was killed]".lstrip("\n")
        return ToolResult(truncate_output(text, max_chars), is_error=True, timed_out=True, seconds=seconds)
    if proc.returncode != 0:
        text = f"{text}\n[exit code {proc.returncode}]".lstrip("\n")
    elif not text:
        text = "[no output]"
    return ToolResult(
        truncate_output(text, max_chars),
        is_error=proc.returncode != 0,
        seconds=seconds,
        returncode=proc.returncode,
    )


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


class Toolbox:
    """Runs tool calls in ``workdir``.

    Args:
        workdir: the task's working directory (a temporary copy of its repository).
        timeout: seconds before a ``bash`` command is killed.
        max_output_chars: outputs are cut head+tail beyond this (see :func:`truncate_output`).
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.workdir = Path(workdir).resolve()
        self.timeout = float(timeout)
        self.max_output_chars = int(max_output_chars)

    def run(self, name: str, arguments: Any) -> ToolResult:
        """Run one call.  Bad names, bad arguments and failing tools become error outputs."""
        t0 = time.monotonic()
        args, err = _args_dict(arguments)
        if err:
            return ToolResult(f"[error] {name}: {err}", is_error=True)
        try:
            if name == "bash":
                cmd = args.get("command", args.get("cmd", args.get("input")))
                if not isinstance(cmd, str) or not cmd.strip():
                    return ToolResult("[error] bash: 'command' must be a non-empty string", is_error=True)
                return run_command(cmd, self.workdir, self.timeout, self.max_output_chars)
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
                    f"[error] unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}", is_error=True
                )
        except PathEscapeError as e:
            res = ToolResult(f"[error] {name}: {e}", is_error=True)
        except (OSError, UnicodeError, ValueError, TypeError) as e:
            res = ToolResult(f"[error] {name}: {type(e).__name__}: {e}", is_error=True)
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
        p = self._path(args)
        if not p.is_file():
            return ToolResult(f"[error] read_file: no such file: {args.get('path')}", is_error=True)
        text = p.read_text(encoding="utf-8", errors="backslashreplace")
        start, end = args.get("start_line"), args.get("end_line")
        if start is not None or end is not None:
            lines = text.splitlines(keepends=True)
            a = max(1, int(start or 1))
            b = len(lines) if end is None else int(end)
            text = "".join(lines[a - 1 : b])
        return ToolResult(text if text else "[empty]")

    def _write(self, args: dict[str, Any]) -> ToolResult:
        p = self._path(args)
        content = args.get("content")
        if not isinstance(content, str):
            return ToolResult("[error] write_file: 'content' must be a string", is_error=True)
        if p.is_dir():
            return ToolResult(f"[error] write_file: {args.get('path')} is a directory", is_error=True)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")
        return ToolResult(f"Wrote {len(content)} characters to {p.relative_to(self.workdir)}.")

    def _replace(self, args: dict[str, Any]) -> ToolResult:
        p = self._path(args)
        old, new = args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old:
            return ToolResult("[error] str_replace: 'old_str' must be a non-empty string", is_error=True)
        if not isinstance(new, str):
            return ToolResult("[error] str_replace: 'new_str' must be a string", is_error=True)
        if not p.is_file():
            return ToolResult(f"[error] str_replace: no such file: {args.get('path')}", is_error=True)
        text = p.read_text(encoding="utf-8")
        n = text.count(old)
        if n != 1:
            return ToolResult(
                f"[error] str_replace: old_str occurs {n} times in {args.get('path')}; "
                "it must occur exactly once",
                is_error=True,
            )
        p.write_text(text.replace(old, new, 1), encoding="utf-8")
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
    if not isinstance(arguments, dict):
        return {}, f"arguments must be a JSON object, got {type(arguments).__name__}"
    return arguments, None
