"""The copied-span index: which earlier tool output a span of an action was copied from.

Outputs are indexed as hashed windows of tokens (gutters of numbered views removed) and as
distinctive atoms (identifiers, paths, codes), each mapped to the latest step whose output holds
it; the agent's own words (task, system prompt, user messages, earlier actions) are indexed apart
and never count as a copy.  The rules and their tuning are in :mod:`dtoc_rl.labels`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

MIN_NOVEL = 12  # characters a token run must add beyond windows of the agent's own words

_TOKEN = re.compile(r"\w+|[^\w\s]")
_ATOM = re.compile(r"\w+(?:[./-]\w+)*")
_SPLIT_ATOM = re.compile(r"[./-]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_CODE_ID = re.compile(r"(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6,}")
_HAS_LETTER = re.compile(r"[A-Za-z]")
# Line-number gutters: ``cat -n``/``nl`` (tab), ``grep -n``/SWE-agent (colon), grep context (dash),
# Claude Code Read (arrow), OpenCode (pipe), ``grep -rn`` (path:line:).
_GUTTER = re.compile(r"(?m)^[ \t]*((?:[^\s:]+[:-])?)(\d+)(?:\t|:|→|\||-(?=\s))")
_BREAK = " \x00 "  # a token no action contains: windows never span it
# Python's builtin names (``ValueError``, ``NotImplementedError``, ...) are known to every model: never
# distinctive atoms, whatever their shape.  Listed, not read from the running interpreter (each version
# adds a few): the labels and the kept shares of a log are the same whichever Python ingests it.
_BUILTIN_NAMES = frozenset(
    """
    ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup BlockingIOError
    BrokenPipeError BufferError BytesWarning ChildProcessError ConnectionAbortedError
    ConnectionError ConnectionRefusedError ConnectionResetError DeprecationWarning EOFError Ellipsis
    EncodingWarning EnvironmentError Exception ExceptionGroup False FileExistsError
    FileNotFoundError FloatingPointError FutureWarning GeneratorExit IOError ImportError
    ImportWarning IndentationError IndexError InterruptedError IsADirectoryError KeyError
    KeyboardInterrupt LookupError MemoryError ModuleNotFoundError NameError None NotADirectoryError
    NotImplemented NotImplementedError OSError OverflowError PendingDeprecationWarning
    PermissionError ProcessLookupError PythonFinalizationError RecursionError ReferenceError
    ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration StopIteration SyntaxError
    SyntaxWarning SystemError SystemExit TabError TimeoutError True TypeError UnboundLocalError
    UnicodeDecodeError UnicodeEncodeError UnicodeError UnicodeTranslateError UnicodeWarning
    UserWarning ValueError Warning ZeroDivisionError abs aiter all anext any ascii bin bool
    breakpoint bytearray bytes callable chr classmethod compile complex copyright credits delattr
    dict dir divmod enumerate eval exec exit filter float format frozenset getattr globals hasattr
    hash help hex id input int isinstance issubclass iter len license list locals map max memoryview
    min next object oct open ord pow print property quit range repr reversed round set setattr slice
    sorted staticmethod str sum super tuple type vars zip
    """.split()
)


def _distinctive(a: str, min_atom: int) -> bool:
    if a in _BUILTIN_NAMES:
        return False
    if len(a) >= 6 and _CODE_ID.fullmatch(a):
        return True
    if len(a) < min_atom or not _HAS_LETTER.search(a):
        return False
    return "_" in a or "." in a or "/" in a or any(c.isdigit() for c in a) or bool(_CAMEL.search(a))


@lru_cache(maxsize=1 << 18)
def _atom_candidates(atom: str, min_atom: int) -> tuple[str, ...]:
    """The atom, its ``/`` suffixes and its components that are distinctive, longest first."""
    if len(atom) < 6:
        return ()
    if not _SPLIT_ATOM.search(atom):
        return (atom,) if _distinctive(atom, min_atom) else ()
    cands = [atom]
    if "/" in atom:
        parts = atom.split("/")
        cands.extend("/".join(parts[k:]) for k in range(1, len(parts)))
    cands.extend(_SPLIT_ATOM.split(atom))
    return tuple(c for c in dict.fromkeys(cands) if len(c) >= 6 and _distinctive(c, min_atom))


def _atoms(text: str) -> list[str]:
    """Atoms of ``text`` long enough to yield a candidate, in order of first appearance
    (a list, not a set: evidence ties must break the same way in every process)."""
    return list(dict.fromkeys(a for a in _ATOM.findall(text) if len(a) >= 6))


def _novel(strs: list[str], wins: list[int], own: set[int], a: int, b: int, k: int) -> int:
    """Characters of the tokens of windows ``a..b`` that no window of the agent's own words covers
    (runs are rare, so this is computed for them only)."""
    lo = max(0, a - k + 1)
    covered = bytearray(b + k - lo)
    for i in range(lo, min(b + k, len(wins))):
        if wins[i] in own:
            covered[i - lo : i - lo + k] = b"\x01" * k
    return sum(len(strs[t]) for t in range(a, b + k) if not covered[t - lo])


def _windows(tokens: list[str], k: int) -> Iterable[int]:
    if len(tokens) < k:
        return ()
    return map(hash, zip(*(tokens[i:] for i in range(k))))


def _strip_gutters(text: str) -> str:
    """Remove line-number gutters; where the numbering jumps (``grep -n`` hits, elided lines, another
    file) insert a break, so that no hashed window joins lines that are not adjacent in the file."""
    prev: list = [None, -2]

    def sub(m: re.Match) -> str:
        where, num = m.group(1)[:-1], int(m.group(2))  # file.py:12: and file.py-13- are one file
        adjacent = where == prev[0] and num == prev[1] + 1
        prev[0], prev[1] = where, num
        return " " if adjacent else _BREAK

    return _GUTTER.sub(sub, text)


def _nonspace(s: str) -> int:
    return len(s) - sum(1 for c in s if c.isspace())


class _SpanIndex:
    """Incremental index of token windows and atoms: outputs → latest step, other text → excluded."""

    def __init__(self, window: int, min_atom: int, track_unique: bool = False):
        self.k = window
        self.min_atom = min_atom
        self.out_win: dict[int, int] = {}
        self.out_atom: dict[str, int] = {}
        self.own_win: set[int] = set()
        self.own_atom: set[str] = set()
        # what each output still alone holds (track_unique): see unique()
        self.unique_tracked = track_unique
        self._held: tuple[Counter, Counter] = (Counter(), Counter())
        self._total: dict[int, tuple[int, int]] = {}
        self.changed: set[int] = set()  # outputs whose unique() moved since the owner last cleared it

    def add_own(self, text: str) -> None:
        if not text:
            return
        wins = set(_windows(_TOKEN.findall(text), self.k))
        atoms = {c for a in _atoms(text) for c in _atom_candidates(a, self.min_atom)}
        if self.unique_tracked:  # what the agent has now said itself no output alone holds any more
            self._release(wins - self.own_win, self.out_win, 0)
            self._release(atoms - self.own_atom, self.out_atom, 1)
        self.own_win.update(wins)
        self.own_atom.update(atoms)

    def add_output(self, text: str, step: int) -> None:
        if not text:
            return
        stripped = _strip_gutters(text) if "\n" in text or text[:1].isdigit() else text
        wins = dict.fromkeys(_windows(_TOKEN.findall(stripped), self.k), step)
        cands: dict[str, int] = {}
        for a in _atoms(text):
            for c in _atom_candidates(a, self.min_atom):
                cands[c] = step
        if self.unique_tracked:
            # the newest output holding a window or atom is the one a copy of it is attributed to: the
            # older holders lose it; what the agent's own words hold belongs to no output
            mine_w, mine_a = wins.keys() - self.own_win, cands.keys() - self.own_atom
            self._release(mine_w, self.out_win, 0)
            self._release(mine_a, self.out_atom, 1)
            self._held[0][step] += len(mine_w)
            self._held[1][step] += len(mine_a)
            self._total[step] = (len(wins), len(cands))
            self.changed.add(step)
        self.out_win.update(wins)
        self.out_atom.update(cands)

    def _release(self, keys: Iterable, owner: dict, which: int) -> None:
        held = self._held[which]
        for step, n in Counter(map(owner.get, keys)).items():
            if step is not None and held[step] > 0:
                held[step] -= n
                self.changed.add(step)

    def unique(self, step: int) -> tuple[float, float]:
        """The shares of output ``step``'s token windows and of its distinctive atoms that no newer
        output and none of the agent's own words hold (1, 1 for an output not indexed): what of it a
        later action can copy from it alone.  An output with a share of zero in both holds nothing a
        copy would be attributed to, however much of it a later action quotes."""
        total = self._total.get(step)
        if total is None:
            return (1.0, 1.0)
        return tuple(  # type: ignore[return-value]
            max(self._held[i][step], 0) / total[i] if total[i] else 0.0 for i in (0, 1)
        )

    def match(self, text: str, min_span: int) -> dict[int, str]:
        """Earlier step → the longest span of ``text`` copied from its output."""
        found: dict[int, str] = {}
        if not text:
            return found

        def keep(step: int, span: str) -> None:
            if len(span) > len(found.get(step, "")):
                found[step] = span

        # token runs
        k = self.k
        strs = _TOKEN.findall(text)
        if len(strs) >= k:
            own, out = self.own_win, self.out_win
            wins = list(_windows(strs, k))
            hits = [None if h in own else out.get(h) for h in wins]
            runs: list[tuple[int, int, int]] = []  # (step, first window, last window)
            for i, s in enumerate(hits):
                if s is None:
                    continue
                if runs and runs[-1][0] == s and runs[-1][2] == i - 1:
                    runs[-1] = (s, runs[-1][1], i)
                else:
                    runs.append((s, i, i))
            if runs:
                toks = list(_TOKEN.finditer(text))
                for s, a, b in runs:
                    span = text[toks[a].start() : toks[b + k - 1].end()]
                    if _nonspace(span) >= min_span and _novel(strs, wins, own, a, b, k) >= MIN_NOVEL:
                        keep(s, span)
        # distinctive atoms
        for a in _atoms(text):
            taken: list[str] = []
            for c in _atom_candidates(a, self.min_atom):
                if c in self.own_atom or any(c in t for t in taken):
                    continue
                s = self.out_atom.get(c)
                if s is not None:
                    taken.append(c)
                    keep(s, c)
        return found
