"""The words of a tool call a policy sees: what the call was and how its output begins.

Size, age and tool category say little about whether an agent will need an output again; what
the call asked for does (``pytest``, ``grep -n``, ``view``, ``ls``, ``Traceback``, ``PASSED``).
:func:`output_words` reduces a call to the first :data:`WORDS_PER_OUTPUT` distinct words of its
tool name, its arguments and the first lines of its output, each as a stable 31-bit hash, so an
observation carries them as a small integer array and no text.  A learned policy maps the hashes
it was trained on to its own word embeddings and ignores the rest (a word outside its vocabulary
carries no signal rather than noise).

A hash, not a string, keeps the observation a fixed-shape array, and ``zlib.crc32`` (not Python's
``hash``) keeps it the same in every process.  Computed once per output when it is stored, so a
decision costs nothing extra.  On ../shared they predict "needed again" as well as a MiniLM
sentence embedding of the same text does, at a small fraction of its cost (docs/results.md).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Hashable, Iterable

import numpy as np

__all__ = ["WORDS_PER_OUTPUT", "call_text", "common_words", "output_words", "text_words", "words_array"]

#: Distinct words kept per output.  Eight predicted "needed again" as well as sixteen on ../shared
#: (the need classifier's AUC 0.861 against 0.864, the learned policy's savings within the miss budget
#: the same over three seeds: docs/results.md) at half the cost in a decision and in an observation.
WORDS_PER_OUTPUT = 8

# ASCII words: longer runs (hashes, base64) are no words, and a non-ASCII letter separates words the
# same way whether a log escaped it (\u00e9) or not
_WORD = re.compile(r"\b[a-z_][a-z0-9_]{1,30}\b", re.ASCII)
_ESCAPES = re.compile(r"(?:\\u[0-9a-fA-F]{4})+")  # a run of them: a surrogate pair is one character
_ARGS_CHARS = 300  # of the tool name and arguments
_HEAD_LINES = 3  # of the output
_HEAD_CHARS = 300


def _hash(word: str) -> int:
    return (zlib.crc32(word.encode()) & 0x7FFFFFFF) or 1  # 0 is the padding id


def _plain(args: str) -> str:
    # A text-action harness's command line, which a live context keeps as {"input": text} (it stores
    # arguments as objects): the same words either way, so a policy sees online what it trained on.
    if args.startswith('{"input"'):
        try:
            v = json.loads(args)
        except ValueError:
            return args
        if isinstance(v, dict) and len(v) == 1 and isinstance(v.get("input"), str):
            return v["input"]
    return args


def call_text(tool_name: str | None, tool_args: str | None, output: str | None) -> str:
    """The text :func:`output_words` reads (at most about 650 characters): the tool name, the start of
    the arguments (JSON escapes of non-ASCII characters decoded: loggers differ in escaping them) and
    the output's first lines."""
    args = _plain(tool_args or "")
    if "\\u" in args:  # at most 12 characters an escaped one: decode only what can reach the cut
        args = _ESCAPES.sub(_decoded, args[: _ARGS_CHARS * 12 + 12])
    text = (tool_name or "") + " " + args[:_ARGS_CHARS]
    if output:
        first = output[: _HEAD_CHARS * 4].split("\n", _HEAD_LINES)[:_HEAD_LINES]
        text += "\n" + "\n".join(first)[:_HEAD_CHARS]
    return text


def _decoded(m: re.Match) -> str:
    return json.loads(f'"{m.group(0)}"')  # JSON's own decoding joins surrogate pairs


def text_words(text: str) -> tuple[int, ...]:
    """The hashed words of ``text`` (at most :data:`WORDS_PER_OUTPUT`, first occurrence order, each in
    ``1 .. 2**31-1``)."""
    seen: dict[int, None] = {}
    for w in _WORD.findall(text.lower()):
        seen.setdefault(_hash(w))
        if len(seen) == WORDS_PER_OUTPUT:
            break
    return tuple(seen)


def output_words(tool_name: str | None, tool_args: str | None, output: str | None) -> tuple[int, ...]:
    """The hashed words of a call's tool name and arguments and its output's first lines."""
    return text_words(call_text(tool_name, tool_args, output))


def common_words(docs: Iterable[tuple[Hashable, Iterable[int]]], size: int, min_tasks: int) -> np.ndarray:
    """The ``size`` words found in the most tasks, of those found in at least ``min_tasks``, most
    common first (ties by hash, so the same documents always give the same list).  ``docs``: (task,
    hashed words) pairs, a task any number of times.  A learned policy's vocabulary, so that it
    embeds words seen across tasks, not a file name of a few."""
    if size <= 0:
        return np.zeros(0, np.int64)
    tasks: dict[int, set[Hashable]] = {}
    for task, words in docs:
        for w in words:
            if w:
                tasks.setdefault(int(w), set()).add(task)
    if not tasks:
        return np.zeros(0, np.int64)
    words = np.fromiter(tasks, np.int64, len(tasks))
    counts = np.fromiter((len(t) for t in tasks.values()), np.int64, len(tasks))
    keep = counts >= min_tasks
    words, counts = words[keep], counts[keep]
    return words[np.lexsort((words, -counts))[:size]]


def words_array(words: tuple[int, ...] | list[int], out: np.ndarray | None = None) -> np.ndarray:
    """``words`` as one ``(WORDS_PER_OUTPUT,)`` int64 row, zero-padded (into ``out`` if given)."""
    row = np.zeros(WORDS_PER_OUTPUT, np.int64) if out is None else out
    k = min(len(words), WORDS_PER_OUTPUT)
    row[:k] = words[:k]
    row[k:] = 0
    return row
