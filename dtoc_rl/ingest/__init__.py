"""Log ingesters: one per harness format, auto-detected.

``detect_format(path)`` names the ingester for a file or directory (or None),
and ``INGESTERS`` lists them in detection order.  The driver that walks
folders, labels needs and writes datasets is :mod:`dtoc_rl.ingest.driver`.

It may import dtoc_rl.core, dtoc_rl.data and dtoc_rl.labels; never sim, engine, serve, envs or
policies (tests/test_layers.py checks this).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.atif import AtifIngester
from dtoc_rl.ingest.autocoderover import AutoCodeRoverIngester
from dtoc_rl.ingest.base import Ingester, IngestError, one_json_value
from dtoc_rl.ingest.chat_parquet import ChatParquetIngester
from dtoc_rl.ingest.claude_code import ClaudeCodeStreamIngester, ClaudeCodeTranscriptIngester
from dtoc_rl.ingest.cline import ClineIngester
from dtoc_rl.ingest.codex import CodexRolloutIngester
from dtoc_rl.ingest.continue_sessions import ContinueSessionIngester
from dtoc_rl.ingest.gemini import GeminiApiIngester, GeminiCliIngester
from dtoc_rl.ingest.goose import GooseSessionsIngester
from dtoc_rl.ingest.inspect_logs import InspectIngester
from dtoc_rl.ingest.mini_swe_agent import MiniSweAgentIngester
from dtoc_rl.ingest.openai_chat import OpenAIChatIngester
from dtoc_rl.ingest.opencode import OpenCodeDatabaseIngester, OpenCodeIngester
from dtoc_rl.ingest.openhands import (
    OpenHandsConversationIngester,
    OpenHandsEventsIngester,
    OpenHandsHistoryIngester,
    OpenHandsSDKIngester,
)
from dtoc_rl.ingest.otel_genai import OtelGenAIIngester
from dtoc_rl.ingest.pi_agent import PiAgentIngester
from dtoc_rl.ingest.qwen_code import QwenCodeIngester
from dtoc_rl.ingest.repolaunch import RepoLaunchIngester
from dtoc_rl.ingest.smolagents import SmolagentsIngester
from dtoc_rl.ingest.swe_agent import SweAgentIngester
from dtoc_rl.ingest.tau2_bench import Tau2BenchIngester
from dtoc_rl.ingest.tau_bench import TauBenchIngester
from dtoc_rl.ingest.trae_agent import TraeAgentIngester

__all__ = [
    "INGESTERS",
    "MALFORMED",
    "PARSE_FAILURES",
    "IngestError",
    "Ingester",
    "detect_format",
    "failure_reason",
    "get_ingester",
    "malformed_reason",
    "read_first",
    "read_one",
    "unknown_format_reason",
]

# What an ingester raises when a malformed file reaches code that expected a well-formed one
# (1e999 is inf in JSON, and int() of it overflows).
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError)


def malformed_reason(e: BaseException) -> str:
    """One line saying what went wrong in a malformed file."""
    return f"wrong types or missing fields: {type(e).__name__}: {e}".splitlines()[0][:500]


#: Everything short of an IngestError that reading one log can raise and a batch survives.
PARSE_FAILURES = (OSError, RecursionError, MemoryError, *MALFORMED)


def failure_reason(e: BaseException) -> str:
    """One line for an exception in :data:`PARSE_FAILURES`: the reason a log was not read."""
    if isinstance(e, OSError):
        return f"cannot read: {e.strerror or e}"
    if isinstance(e, (RecursionError, MemoryError)):
        return f"too large or deep to parse: {type(e).__name__}"
    return malformed_reason(e)


# Specific formats first; the generic OpenAI chat JSONL last.
INGESTERS: list[Ingester] = [
    AutoCodeRoverIngester(),
    OpenHandsEventsIngester(),
    OpenHandsConversationIngester(),
    AtifIngester(),
    InspectIngester(),
    OtelGenAIIngester(),
    TraeAgentIngester(),
    ContinueSessionIngester(),
    MiniSweAgentIngester(),
    SweAgentIngester(),
    OpenHandsSDKIngester(),
    OpenHandsHistoryIngester(),
    TauBenchIngester(),
    Tau2BenchIngester(),
    ClaudeCodeStreamIngester(),
    QwenCodeIngester(),  # before Claude Code's transcripts, whose records look alike
    PiAgentIngester(),
    ClaudeCodeTranscriptIngester(),
    GeminiCliIngester(),
    GeminiApiIngester(),
    OpenCodeIngester(),
    RepoLaunchIngester(),
    CodexRolloutIngester(),
    ClineIngester(),
    GooseSessionsIngester(),
    OpenCodeDatabaseIngester(),
    SmolagentsIngester(),
    ChatParquetIngester(),
    OpenAIChatIngester(),
]

HEAD_BYTES = 65536


def _head(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8-sig", errors="replace")  # without a byte-order mark


def detect_format(path: Path) -> Ingester | None:
    """The ingester that recognises ``path``, or None when none does."""
    path = Path(path)
    if path.is_dir():
        for ing in INGESTERS:
            if ing.wants_dirs and ing.detect(path, ""):
                return ing
        return None
    head = _head(path)
    for ing in INGESTERS:
        if not ing.wants_dirs and ing.detect(path, head):
            return ing
    return None


#: The first bytes of the compressed files logs are kept in, by the tool that reads them.
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
#: The name endings of those files (a log kept as ``run.jsonl.gz``).
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bzip2", ".xz": "xz"}


def compression_of(path: Path) -> str | None:
    """The compression ``path`` is in, by its first bytes (so ``run.jsonl`` that is gzip data is
    named), or None."""
    try:
        with open(path, "rb") as fh:
            start = fh.read(6)
    except OSError:
        return None
    return next((name for magic, name in _MAGIC.items() if start.startswith(magic)), None)


def _broken_json(path: Path, limit: int = 64 << 20) -> str | None:
    """Where a ``.json`` file or a ``.jsonl`` line stops being JSON ("line 3 is not valid JSON"), or
    None: a log cut off says so rather than only that its format is unknown (and that it may be cut
    off or still being written where the break is at its end).  JSON lines are read one at a time;
    a ``.json`` file over ``limit`` bytes is not read whole for it."""
    import json

    cut = " (cut off, or still being written?)"
    suffix = path.suffix.lower()
    if suffix == ".json":
        if path.stat().st_size > limit:
            return None
        text = path.read_bytes().decode("utf-8-sig", errors="replace")
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            return f"it is not valid JSON ({e})" + (cut if e.pos >= len(text.rstrip()) else "")
        except (ValueError, RecursionError) as e:
            return f"it is not valid JSON ({e})"
        return None
    if suffix not in (".jsonl", ".ndjson") or one_json_value(path):  # one value over several lines: whole
        return None
    bad = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):  # lines end at b"\n" only, as JSON lines do
            if not raw.strip():
                continue
            if bad:  # a line follows the broken one: a hole, not an end
                return f"line {bad} is not valid JSON"
            try:
                json.loads(raw)
            except (ValueError, RecursionError):
                bad = n
    return f"line {bad} is not valid JSON{cut}" if bad else None


def unknown_format_reason(path: Path) -> str:
    """Why no ingester recognises ``path``, as one line: the commonest causes named, else the general
    reason and where the formats are listed."""
    path = Path(path)
    if path.is_dir():
        return "a folder no folder-reading format recognises (a log file is read one at a time here)"
    if path.suffix.lower() == ".parquet":
        from dtoc_rl.ingest.chat_parquet import not_a_log_reason

        return not_a_log_reason(path)
    packed = compression_of(path)
    if packed:
        return f"{packed}-compressed: decompress it to read it (its log is inside, unread)"
    head = _head(path)
    if not head.strip():
        return "empty file: nothing to read"
    broken = _broken_json(path)
    if broken:
        return f"unknown format, and {broken}"
    first = head.lstrip().split("\n", 1)[0]
    if path.suffix.lower() in (".jsonl", ".ndjson") and re.match(r'\{\s*"(role|from)"\s*:', first):
        return (
            "chat messages one per line, but not every line is one (a header of the run's own fields "
            'may only come first; or write a run per line, {"messages": [...]})'
        )
    return (
        "unknown format: no ingester recognises this file (README, 'Log formats'; --format NAME forces one)"
    )


def read_first(path: Path | str) -> tuple[Ingester, Trajectory]:
    """The ingester of one log (file or folder) and its first trajectory; :class:`IngestError` names
    what was wrong."""
    ing, traj, _ = read_one(path)
    return ing, traj


def read_one(path: Path | str, pick: str | int | None = None) -> tuple[Ingester, Trajectory, list[str]]:
    """The ingester of one log, the trajectory ``pick`` (its index in the log, or its ``traj_id``) and
    the ids of all the log's trajectories (one log may hold many: RepoLaunch conversations, tau-bench
    tasks, chat JSONL lines).  ``pick=None``: the first trajectory, read without parsing the rest of
    the log, so the ids list then holds its id alone.  :class:`IngestError` names what was wrong."""
    path = Path(path)
    try:
        if not stat.S_ISREG(mode := path.stat().st_mode) and not stat.S_ISDIR(mode):
            # never opened: reading a FIFO waits for a writer forever
            raise IngestError("not a regular file or folder (a FIFO, device or socket): not read", path)
        ing = detect_format(path)
        if ing is None:
            why = re.sub(r"^unknown format(: |, and )", "", unknown_format_reason(path))
            raise IngestError(f"not a recognised log format: {why}", path)
        if pick is None:  # only the first: a long log need not be parsed to the end
            for traj in ing.parse(path):
                return ing, traj, [traj.traj_id]
            raise IngestError("no trajectory in it", path)
        trajs = list(ing.parse(path))
    except PARSE_FAILURES as e:
        raise IngestError(failure_reason(e), path) from None
    ids = [t.traj_id for t in trajs]
    if not trajs:
        raise IngestError("no trajectory in it", path)
    if isinstance(pick, int) or (isinstance(pick, str) and pick.isdigit() and pick not in ids):
        i = int(pick)
        if not 0 <= i < len(trajs):
            raise IngestError(f"no trajectory {i}: the log holds {len(trajs)} (0..{len(trajs) - 1})", path)
        return ing, trajs[i], ids
    if pick in ids:
        return ing, trajs[ids.index(pick)], ids
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    raise IngestError(f"no trajectory {pick!r}; it holds {len(ids)}: {shown}", path)


def get_ingester(name: str) -> Ingester:
    for ing in INGESTERS:
        if ing.name == name:
            return ing
    names = ", ".join(i.name for i in INGESTERS)
    raise KeyError(f"unknown format {name!r}; known formats: {names}")
