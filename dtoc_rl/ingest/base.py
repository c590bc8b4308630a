"""What every ingester provides, and the errors they raise.

An ingester turns one log file (or folder, for layouts such as AutoCodeRover's
task directories) into :class:`~dtoc_rl.data.schema.Trajectory` objects.  It never
guesses: ``detect`` must be specific to the format, and anything it cannot
parse raises :class:`IngestError` with a reason a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from dtoc_rl.data.schema import Trajectory

__all__ = ["MAX_OUTPUT_CHARS", "IngestError", "Ingester", "one_json_value", "read_json", "read_text"]

# Outputs beyond this are kept head+tail with a marker, so one runaway log line
# cannot blow up a dataset; the original length is recorded in the step.
MAX_OUTPUT_CHARS = 1_000_000
MAX_FILE_BYTES = 200_000_000


class IngestError(Exception):
    """A file that could not be ingested; ``reason`` is shown in the summary."""

    def __init__(self, reason: str, path: Path | str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.path = str(path) if path is not None else None


def read_text(path: Path, *, lenient: bool = False) -> str:
    """Read UTF-8 text, naming the byte offset of the first invalid byte.

    ``lenient``: invalid bytes become U+FFFD and NULs are dropped instead (text logs that copied a
    terminal byte for byte; the model saw the text decoded that way)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise IngestError(f"file is {size / 1e6:.0f} MB, over the {MAX_FILE_BYTES / 1e6:.0f} MB limit", path)
    raw = path.read_bytes()
    if lenient:  # utf-8-sig: a byte-order mark some editors write first is no part of the log
        return raw.decode("utf-8-sig", errors="replace").replace("\x00", "")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # counted from after a byte-order mark: the file's own offset
        at = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        raise IngestError(f"invalid UTF-8 at byte {at}", path) from None


def json_error(e: json.JSONDecodeError, line: bool = True) -> str:
    """Where and why JSON failed, as one phrase ("Unterminated string starting at line 3 column 5"):
    some of the decoder's messages end in "at" already."""
    msg = e.msg[:-3] if e.msg.endswith(" at") else e.msg
    return f"{msg} at line {e.lineno} column {e.colno}" if line else f"{msg} at column {e.colno}"


def read_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise IngestError(f"invalid JSON: {json_error(e)}", path) from None
    except ValueError as e:  # valid JSON no reader takes: an integer of 4,300+ digits
        raise IngestError(f"JSON not readable: {str(e).split(';')[0]}", path) from None
    except RecursionError:
        raise IngestError("JSON nested too deeply to read", path) from None


def one_json_value(path: Path) -> bool:
    """Whether a file named as JSON lines (``.jsonl``, ``.ndjson``) holds one JSON value written over
    several lines instead: a pretty-printed session or run saved under a JSONL name (Gemini CLI
    sessions copied as ``full.jsonl``), to be read as the ``.json`` file it is.  Its first line is no
    JSON value by itself and the whole text is one object or list; a JSON-lines file whose first line
    is torn or bad is none (its lines are read, the bad one named).  Every reader that accepts both
    forms asks this before reading a ``.jsonl`` file line by line."""
    try:
        st = path.stat()
    except OSError:
        return False
    return _one_json_value(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)  # detection and parsing ask of the same file: read it once
def _one_json_value(path: str, mtime_ns: int, size: int) -> bool:
    if size > MAX_FILE_BYTES:
        return False
    with open(path, "rb") as fh:
        first = next((line for line in fh if line.strip()), b"")
    first = first.decode("utf-8-sig", errors="replace").strip()
    if first[:1] not in ("{", "["):
        return False
    try:
        json.loads(first)
        return False  # a value per line
    except (ValueError, RecursionError):
        pass
    try:
        with open(path, "rb") as fh:
            value = json.loads(fh.read().decode("utf-8-sig"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return isinstance(value, (dict, list))


@dataclass
class Ingester:
    """Base class: subclasses set ``name`` and implement ``detect`` and ``parse``."""

    name: ClassVar[str] = ""
    #: True when the unit of input is a directory (e.g. AutoCodeRover task dirs)
    wants_dirs: ClassVar[bool] = False

    def detect(self, path: Path, head: str) -> bool:  # pragma: no cover - interface
        """Whether ``path`` is in this format; ``head`` is its first 64 KiB as text."""
        raise NotImplementedError

    def parse(self, path: Path) -> Iterator[Trajectory]:  # pragma: no cover - interface
        raise NotImplementedError
