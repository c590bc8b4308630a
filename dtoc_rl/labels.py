"""Hindsight need labels: which earlier tool outputs each step of a logged trajectory used.

:func:`label_trajectory` fills, for every :class:`~dtoc_rl.schema.Step`, the
fields ``read_resource``, ``write_resources`` and ``needs``.  A need
``Need(step=i, kind, evidence)`` on step ``j`` says that step ``j`` used the
output of the earlier step ``i``.  Needs only point to steps of an **earlier
turn** that **have an output** (parallel calls of one turn cannot see each
other's outputs), and a step carries at most one need per ``(step, kind)``.

Four kinds
----------
``provenance``
    A span of the step's action (its ``tool_args`` — JSON string values when the
    args are JSON — and its ``assistant_text``) occurs in an earlier output and
    is **not** in the task text, the system prompt, the user/environment
    messages, or the agent's own earlier messages and actions: those are in
    context whatever happens to the outputs, so a span found there is the
    agent's own words, not a copy.  The span is attributed to the **most recent**
    earlier output that contains it (a long span whose parts occur in different
    outputs is split between them).  Evidence is the copied span (the longest
    one per earlier step, cut to ``EVIDENCE_CHARS``).  Spans are found two ways:

    * *token runs*: texts are split into tokens (``\\w+`` words and single
      punctuation characters; whitespace ignored, so re-indented or re-wrapped
      code still matches) and every window of ``window`` consecutive tokens is
      hashed.  Consecutive matching windows attributed to the same step merge
      into a span, which counts when it has at least ``min_span`` non-space
      characters.  Line-number gutters of outputs (``cat -n``, ``nl``, ``grep -n``,
      SWE-agent's ``12:``, Claude Code's ``12→``) are removed before indexing so
      an ``old_str`` copied from a numbered view matches across lines; where the
      numbering jumps (``grep -n`` hits, elided lines) no window spans the gap,
      so a run never joins lines that are not adjacent in the file.  A run must
      also add ``MIN_NOVEL`` (12) characters beyond the tokens covered by
      windows of the excluded text: a window that straddles the agent's own
      words and one or two tokens of an output is a boundary, not a copy.
    * *distinctive atoms*: identifiers, dotted names and paths
      (``\\w+([./-]\\w+)*``, plus their ``/`` suffixes and their ``\\w+``
      components) of at least ``min_atom`` characters that contain ``_``, ``.``,
      ``/``, a digit or a camelCase hump, and upper-case alphanumeric codes of at
      least 6 characters with a digit (booking references such as ``NO6JO3``).
      Python's builtin names (``ValueError``, ``ImportError``) are never distinctive.

    Defaults (``window=6``, ``min_span=24``, ``min_atom=10``) were tuned on the
    130 mini-swe-agent traces in ``../shared/traces``.  Loosening them to
    ``window=4, min_span=14, min_atom=8`` adds 330 needs (+23 %) that are mostly
    boilerplate — ``__init__``, ``setup.py``, ``def __init__(self,``,
    ``raise TypeError("`` — while the shortest spans kept at the defaults are
    still specific statements, paths and messages (``tzname =
    self.get_tzname()``, ``django/contrib/auth/forms.py``, ``Fig: (0.0, 0.0,
    400.0, 400.0)``); atoms of 10+ characters are mostly project identifiers
    (``CombinedExpression``, ``_get_edited_object_pks``).  With the defaults
    about one mini-swe-agent step in four carries a provenance need.

``reaccess``
    The step reads the same resource as an earlier step: the same file with an
    overlapping line range (a whole-file read overlaps every range), the same
    search (pattern and scope), the same directory listing, the same shell
    command, or the same read-only tool call with the same arguments.  The need
    points to the most recent earlier step for each distinct earlier resource
    string.  Evidence is the earlier step's resource string.  A resource
    modified in between is still labelled; :func:`modified_between` tells the
    cases apart.

``edit``
    The step edits a file in place by matching its current text or line
    numbers — an editor's ``str_replace``/``insert`` (SWE-agent, OpenHands,
    Anthropic's text editor), SWE-agent 0.x ``edit N:M``, Claude Code
    ``Edit``/``MultiEdit``, OpenCode ``edit``, ``sed -i`` — whether or not the
    editor accepted it.  The need points to every earlier step that read the
    file and whose text of it is still current (no write to the file since);
    to the latest read when the file was rewritten after all of them; and only
    to those of them the action copied from (a ``provenance`` need), when
    there are such.  Evidence is ``file:PATH``.  A refused edit after a hidden
    view is the typical real miss (``docs/validity.md``); the simulator does
    not charge ``edit`` needs by default (:data:`dtoc_rl.schema.MISS_KINDS`).

``reference``
    The action names a DTOC tool key (``t0007``) or the provider tool-call id of
    an earlier step.  Keys map to steps through ``keys`` when given, else
    through the map a DTOC orchestrator saved with its log (``extra["dtoc_keys"]``),
    else through ``"tool_key": "tNNNN"`` envelopes found in outputs, else by ordinal
    (the n-th step with an output has key ``format_key(n)``, as the store
    assigns them).  Evidence is the key or id.

Resources
---------
``read_resource`` holds one resource per line, each ``kind:payload``:

* ``file:PATH`` (whole file), ``file:PATH#L10-50``, ``file:PATH#L10-`` (to the
  end), ``file:PATH#tail20``
* ``search:TOOL:PATTERN@SCOPE`` (``grep``, ``rg``, ``find``, ``glob``,
  ``search_file``, ``search_dir``, ``find_file``, ...)
* ``list:DIR``
* ``cmd:COMMAND`` (any other shell command that is not only a write; the whole
  command, whitespace collapsed)
* ``call:NAME(ARGS)`` (read-only tools such as tau-bench ``get_*`` and
  AutoCodeRover ``search_*``; ARGS is canonical JSON)

``write_resources`` lists modified file paths, ``*`` when a command may
modify unknown files (``git checkout .``, ``git apply``, ``patch``), and
``state:NAME(ARGS)`` for state-changing tool calls (tau-bench ``update_*``).
An edit the editor refused (``No replacement was performed``, SWE-agent 0.x's
lint rejection, Claude Code's ``<tool_use_error>``, any error output of an
editor tool) writes nothing.  An abbreviated whole-file view (SWE-agent 1.x's
outline of a large file, bodies replaced by ``... eliding lines A-B ...``)
reads only the line ranges it shows, so a later view of elided lines is a
first read, not a re-access.

Cost
----
Labelling keeps incremental indexes (hashed token windows and atoms of the
outputs → latest step; hashed windows and atoms of non-output text for the
exclusion; resources → latest step; keys and call ids → step).  Each step
costs time linear in its own action and output text, so a trajectory costs
time linear in its total text, never a scan of every earlier output.
:class:`NeedLabeller` keeps those indexes between calls, so a running agent's
turns are labelled one at a time with the same result.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import shlex
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from dtoc_rl.record import format_key
from dtoc_rl.schema import NEED_KINDS, Need, Step, Trajectory
from dtoc_rl.tools import base_tool_name

__all__ = [
    "DEFAULT_MIN_ATOM",
    "DEFAULT_MIN_SPAN",
    "DEFAULT_WINDOW",
    "EVIDENCE_CHARS",
    "NeedLabeller",
    "Resource",
    "first_modified",
    "label_stats",
    "label_trajectory",
    "modified_between",
    "modified_by",
    "parse_resource",
    "read_resources",
    "real_rereads",
]

DEFAULT_WINDOW = 6
DEFAULT_MIN_SPAN = 24
DEFAULT_MIN_ATOM = 10
MIN_NOVEL = 12  # characters a token run must add beyond windows of the agent's own words
EVIDENCE_CHARS = 200

# --------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------

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
_KEY = re.compile(r"\bt\d{4,5}\b")
_ENVELOPE_KEY = re.compile(r'"tool_key"\s*:\s*"(t\d{4,5})"')
_IDLIKE = re.compile(r"[\w-]{8,}")
_WS = re.compile(r"\s+")
# Python's builtin names (``ValueError``, ``NotImplementedError``, ...) are known to every model: never
# distinctive atoms, whatever their shape.
_BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))


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


# --------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------


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


_SHELL_TOOLS = {
    "bash",
    "sh",
    "shell",
    "execute_bash",
    "executebash",
    "terminal",
    "run_shell_command",
    "execute_command",
    "run_command",
    "local_shell",
    "cmd",
    "command",
    "run",
    "exec",
}
_EDITOR_TOOLS = {"str_replace_editor", "file_editor", "str_replace_based_edit_tool", "text_editor", "editor"}
_READ_TOOLS = {"read", "read_file", "view_file", "readfile", "view", "cat", "open_file"}
_GREP_TOOLS = {"grep", "search", "rg", "ripgrep", "search_files", "grep_search", "codebase_search"}
_GLOB_TOOLS = {"glob", "find", "file_search", "find_files"}
_LIST_TOOLS = {"ls", "list", "list_dir", "list_directory", "list_files"}
_WRITE_TOOLS = {
    "edit",
    "multiedit",
    "write",
    "create",
    "notebookedit",
    "write_file",
    "edit_file",
    "create_file",
    "replace",
    "str_replace",
    "insert",
    "apply_patch",
    "patch",
    "delete_file",
}
# Edits that must match the file's current text or line numbers (str_replace's old_str, an insert
# line, SWE-agent 0.x `edit N:M`, Claude Code/OpenCode Edit), unlike whole-file writes and creates.
_INPLACE_COMMANDS = {"str_replace", "insert"}
_INPLACE_TOOLS = {"edit", "multiedit", "edit_file", "replace", "str_replace", "insert"}
_READ_PREFIXES = (
    "get",
    "search",
    "list",
    "find",
    "read",
    "view",
    "fetch",
    "lookup",
    "show",
    "query",
    "check",
)
_WRITE_PREFIXES = (
    "book",
    "cancel",
    "update",
    "modify",
    "exchange",
    "return",
    "send",
    "create",
    "delete",
    "remove",
    "set",
    "add",
    "write",
    "edit",
    "insert",
    "post",
    "put",
    "patch",
    "transfer",
)
_ACI_COMMANDS = {
    "open",
    "goto",
    "scroll_down",
    "scroll_up",
    "search_file",
    "search_dir",
    "find_file",
    "create",
    "edit",
    "submit",
}
_NAV_ONLY = {"cd", "pushd", "popd", "export", "source", ".", "set", "unset", "true", "false", "clear", ":"}
_WRITE_CMDS = {"rm", "mv", "cp", "touch", "mkdir", "rmdir", "tee", "ln", "chmod", "truncate", "dd", "patch"}
_WRAPPERS = {"sudo", "time", "nohup", "env", "command", "builtin", "exec", "stdbuf", "xargs"}
_PY_WRITE = re.compile(
    r"""open\(\s*(?:r|f)?(['"])([^'"\n]+)\1\s*,\s*(?:mode\s*=\s*)?(['"])[^'"]*[wax+][^'"]*\3"""
    r"""|Path\(\s*(['"])([^'"\n]+)\4\s*\)\.write_(?:text|bytes)"""
)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")
_DEVNULL = re.compile(r"\d*>&\d+|&>\s*/dev/null|\d*>>?\s*/dev/null")
_SED_RANGE = re.compile(r"^\s*(\d+)\s*(?:,\s*(\d+|\$))?\s*\{?\s*p\s*;?\s*\}?\s*;?\s*(?:q)?\s*$")
_AWK_RANGE = re.compile(r"NR\s*>=\s*(\d+)\s*&&\s*NR\s*<=\s*(\d+)|NR\s*==\s*(\d+)\s*,\s*NR\s*==\s*(\d+)")
_LINE_NUM_OUT = re.compile(r"(?m)^[ \t]*(\d+)(?:\t|:|→|\|)")
_FILE_HEADER = re.compile(r"\[File: ([^\n]+?) \(\d+ lines total\)\]")


@dataclass
class _State:
    """What a resource parser must remember across steps (SWE-agent's open file, scripts)."""

    current_file: str | None = None
    output: str = ""  # the output of the step being parsed (SWE-agent views carry their range)
    window: tuple[int, int] | None = None
    scripts: dict[str, set[str]] | None = None
    # files the step being parsed edits in place by matching their current text or line numbers
    edits: list[str] = field(default_factory=list)

    def script_writes(self) -> dict[str, set[str]]:
        if self.scripts is None:
            self.scripts = {}
        return self.scripts


_PY_WRITE_ANY = re.compile(
    r"""open\([^)\n]*,\s*(?:mode\s*=\s*)?['"][^'"]*[wa+]|\.write_(?:text|bytes)\(|shutil\.(?:copy|move)"""
)
_PY_PATH_LITERAL = re.compile(
    r"""['"]((?:[\w.-]+/)*[\w.-]+\.(?:py|pyx|pyi|txt|cfg|toml|ini|json|ya?ml|rst|md|c|h|cc|cpp|hpp"""
    r"""|js|ts|tsx|jsx|java|kt|go|rs|rb|php|html|css|xml|sh|sql|csv))['"]"""
)


def _py_writes(code: str, cwd: str | None) -> set[str]:
    """Files a Python snippet writes: ``open('f', 'w')`` targets, else, when it opens something
    for writing through a variable, every path-like string literal in it (a heuristic)."""
    out = set()
    for m in _PY_WRITE.finditer(code):
        p = m.group(2) or m.group(5)
        if p and "{" not in p:
            out.add(_norm_path(p, cwd))
    if not out and _PY_WRITE_ANY.search(code):
        for m in _PY_PATH_LITERAL.finditer(code):
            out.add(_norm_path(m.group(1), cwd))
    return out


def _extract_heredocs(cmd: str) -> tuple[str, list[str]]:
    """Cut heredoc bodies out of ``cmd``; markers become ``<< __HDn__``."""
    if "<<" not in cmd:
        return cmd, []
    lines = cmd.split("\n")
    out: list[str] = []
    bodies: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        delims: list[tuple[str, bool]] = []

        def repl(m: re.Match, delims=delims) -> str:
            if m.group(0).startswith("<<<"):
                return m.group(0)
            delims.append((m.group(2), m.group(0).startswith("<<-")))
            return f"<< __HD{len(bodies) + len(delims) - 1}__"

        line = re.sub(r"<<<|" + _HEREDOC.pattern, repl, line)
        out.append(line)
        i += 1
        for delim, dash in delims:
            body = []
            while i < len(lines):
                cur = lines[i].lstrip("\t") if dash else lines[i]
                i += 1
                if cur.strip() == delim:
                    break
                body.append(lines[i - 1])
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


_LEX = re.compile(
    r"""(?P<comment>(?:(?<=[\s;&|()])|^)\#[^\n]*)"""
    r"""|(?P<op>&&|\|\||;;|&>>?|>>|>&|>\||<<<|<<-?|[;&|()\n<>])"""
    r"""|(?P<word>(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s;&|()<>'"\\])+)"""
    r"""|(?P<bad>['"])"""
)
_UNQUOTE = re.compile(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|\\(.)""")
_DQ_ESCAPE = re.compile(r'\\([\\"$`])')


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word and "\\" not in word:
        return word

    def repl(m: re.Match) -> str:
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is not None:
            return _DQ_ESCAPE.sub(r"\1", m.group(2))
        return m.group(3)

    return _UNQUOTE.sub(repl, word)


def _shell_tokens(cmd: str) -> list[str]:
    """Split a command line into words (quotes removed) and operators, like a POSIX shell."""
    out = []
    for m in _LEX.finditer(cmd):
        if m.group("comment"):
            continue
        if m.group("op"):
            out.append(m.group("op"))
        elif m.group("word"):
            out.append(_unquote(m.group("word")))
        else:  # an unbalanced quote: keep the rest as plain words
            out.extend(cmd[m.end() :].split())
            break
    return out


def _split_commands(tokens: list[str]) -> list[list[list[str]]]:
    """Token stream → list of pipelines, each a list of argv lists (redirections kept inline)."""
    pipelines: list[list[list[str]]] = []
    pipe: list[list[str]] = []
    argv: list[str] = []
    for tok in tokens:
        if tok and all(c in ";&\n()" for c in tok) and tok not in ("&>",):
            if argv:
                pipe.append(argv)
            if pipe:
                pipelines.append(pipe)
            pipe, argv = [], []
        elif tok and all(c in "|" for c in tok):
            if tok == "|":
                if argv:
                    pipe.append(argv)
                argv = []
            else:  # ||
                if argv:
                    pipe.append(argv)
                if pipe:
                    pipelines.append(pipe)
                pipe, argv = [], []
        else:
            argv.append(tok)
    if argv:
        pipe.append(argv)
    if pipe:
        pipelines.append(pipe)
    return pipelines


def _strip_redirs(
    argv: list[str], cwd: str | None, bodies: list[str]
) -> tuple[list[str], list[str], str | None]:
    """Remove redirections: returns (argv, files written, heredoc body on stdin)."""
    out: list[str] = []
    writes: list[str] = []
    stdin_body = None
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in (">", ">>", ">|", "&>", ">&", "&>>"):
            if i + 1 < len(argv):
                target = argv[i + 1]
                if not target.isdigit() and target not in ("/dev/null", "-"):
                    writes.append(_norm_path(target, cwd))
            i += 2
            continue
        if tok in ("<<", "<<-", "<<<", "<"):
            if i + 1 < len(argv):
                m = re.fullmatch(r"__HD(\d+)__", argv[i + 1])
                if tok == "<<" and m and int(m.group(1)) < len(bodies):
                    stdin_body = bodies[int(m.group(1))]
            i += 2
            continue
        if tok and all(c in "<>&" for c in tok):
            i += 1
            continue
        out.append(tok)
        i += 1
    return out, writes, stdin_body


def _opts_and_args(argv: list[str], takes_value: set[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    args: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            args.extend(argv[i + 1 :])
            break
        if a.startswith("--") and "=" in a:
            k, _, v = a.partition("=")
            opts[k] = v
        elif a.startswith("-") and len(a) > 1 and not a[1:].isdigit():
            if a in takes_value and i + 1 < len(argv):
                opts[a] = argv[i + 1]
                i += 1
            elif len(a) > 2 and a[:2] in takes_value and not a.startswith("--"):
                opts[a[:2]] = a[2:]
            else:
                opts[a] = ""
        else:
            args.append(a)
        i += 1
    return opts, args


_GREP_VALUE_OPTS = {
    "-e",
    "-f",
    "-A",
    "-B",
    "-C",
    "-m",
    "--include",
    "--exclude",
    "--exclude-dir",
    "-g",
    "--glob",
    "-t",
    "--type",
    "--max-count",
    "--context",
}


def _grep_resource(argv: list[str], cwd: str | None, tool: str) -> Resource | None:
    opts, args = _opts_and_args(argv, _GREP_VALUE_OPTS)
    pattern = opts.get("-e")
    if pattern is None:
        if not args:
            return None
        pattern, args = args[0], args[1:]
    paths = [_norm_path(a, cwd) for a in args]
    scope = ",".join(sorted(paths)) if paths else (cwd or "-")
    incl = opts.get("--include") or opts.get("-g") or opts.get("--glob")
    if incl:
        scope += f"[{incl}]"
    return Resource("search", f"{tool}:{pattern}@{scope}")


def _sed_range(script: str) -> tuple[int | None, int | None] | None:
    spans = []
    for part in re.split(r"[;\n]", script):
        part = part.strip()
        if not part:
            continue
        m = _SED_RANGE.match(part)
        if not m:
            if part in ("q",) or re.fullmatch(r"\d+q", part):
                continue
            return None
        a = int(m.group(1))
        b = m.group(2)
        spans.append((a, None if b == "$" else int(b) if b else a))
    if not spans:
        return None
    start = min(s for s, _ in spans)
    ends = [e for _, e in spans]
    end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    return start, end


def _head_tail_n(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the -n value, file args) of a head/tail command."""
    n = None
    files = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-n", "--lines", "-c", "--bytes") and i + 1 < len(argv):
            n = argv[i + 1] if a in ("-n", "--lines") else n
            i += 2
            continue
        if a.startswith("--lines="):
            n = a.split("=", 1)[1]
        elif re.fullmatch(r"-n[+-]?\d+", a):
            n = a[2:]
        elif re.fullmatch(r"-\d+", a):
            n = a[1:]
        elif a.startswith("-") and a != "-":
            pass
        else:
            files.append(a)
        i += 1
    return n, files


def _shell(cmd: str, state: _State) -> tuple[list[Resource], list[str]]:
    """Reads and writes of one shell command line (bash, SWE-agent ACI, editor CLIs).

    Each pipeline's first command names what is read (``cat``/``nl``/``head``/
    ``tail``/``sed -n``/``awk`` → file, ``grep``/``rg``/``find -name`` → search,
    ``ls``/``find``/``tree`` → listing); later ``| sed -n``, ``| head``,
    ``| tail`` narrow a file's line range and ``| grep`` turns it into a search.
    When nothing structured is read and some command is more than navigation
    or a pure write, the whole command line is the resource (``cmd:``).
    """
    reads: list[Resource] = []
    writes: list[str] = []
    raw = cmd
    cmd = cmd.replace("\\\n", " ")
    cmd, bodies = _extract_heredocs(cmd)
    cmd = _DEVNULL.sub(" ", cmd)
    first = cmd.strip().split(None, 1)[0] if cmd.strip() else ""
    if (first in _ACI_COMMANDS or first == "str_replace_editor") and _aci(raw, state, reads, writes):
        return reads, writes
    cwd: str | None = None
    runs_something = False  # some command is neither navigation nor a pure write
    for pipe in _split_commands(_shell_tokens(cmd)):
        base: list[Resource] = []  # what the pipeline reads so far (narrowed by later stages)

        for pos, argv0 in enumerate(pipe):
            argv, redir_writes, stdin_body = _strip_redirs(argv0, cwd, bodies)
            writes.extend(redir_writes)
            argv = _strip_wrappers(argv)
            if not argv:
                continue
            name = os.path.basename(argv[0])
            if name == "cd":
                cwd = _norm_path(argv[1], cwd) if len(argv) > 1 else None
                continue
            if name in _NAV_ONLY or (name in ("echo", "printf") and redir_writes):
                continue
            if name in ("cat", "nl", "less", "more", "bat", "batcat", "awk", "gawk"):
                rng = None
                if name in ("awk", "gawk"):
                    _, args = _opts_and_args(argv, {"-F", "-v", "-f"})
                    files = args[1:]
                    m = _AWK_RANGE.search(args[0]) if args else None
                    rng = (int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))) if m else None
                else:
                    _, files = _opts_and_args(
                        argv, {"-w", "-s", "-v", "-i", "-b", "-n"} if name == "nl" else set()
                    )
                files = [f for f in files if f != "-"]
                if files and pos == 0:
                    lo, hi = rng or (None, None)
                    base = _swap(
                        reads, [], [Resource("file", _norm_path(f, cwd), start=lo, end=hi) for f in files]
                    )
                elif not (stdin_body is not None and redir_writes) and not (pos > 0 and base):
                    runs_something = True  # cat <<EOF > f is a pure write; cat of a pipe adds nothing
                continue
            if name in ("head", "tail"):
                n, files = _head_tail_n(argv)
                if files and pos == 0:
                    base = _swap(
                        reads,
                        [],
                        [_narrow_head_tail(Resource("file", _norm_path(f, cwd)), name, n) for f in files],
                    )
                elif pos > 0 and base:
                    base = _swap(reads, base, [_narrow_head_tail(r, name, n) for r in base])
                else:
                    runs_something = True
                continue
            if name == "sed":
                opts, args = _opts_and_args(argv, {"-e", "-f"})
                short = "".join(k[1:] for k in opts if k.startswith("-") and not k.startswith("--"))
                script = opts.get("-e")
                if script is None and args:
                    script, args = args[0], args[1:]
                files = [_norm_path(a, cwd) for a in args]
                if "i" in short or any(k.startswith("--in-place") for k in opts):
                    writes.extend(files)
                    state.edits.extend(files)
                    continue
                quiet = "n" in short or "--quiet" in opts or "--silent" in opts
                rng = _sed_range(script or "") if quiet else None
                if files and pos == 0:
                    base = _swap(
                        reads,
                        [],
                        [
                            Resource("file", f, start=rng[0], end=rng[1]) if rng else Resource("file", f)
                            for f in files
                        ],
                    )
                elif pos > 0 and base and rng:
                    base = _swap(reads, base, [_narrow_range(r, rng) for r in base])
                elif not (pos > 0 and base):
                    runs_something = True
                continue
            if name in ("grep", "egrep", "fgrep", "rg", "ag", "ack") or (
                name == "git" and argv[1:2] == ["grep"]
            ):
                tool = "git-grep" if name == "git" else "grep"
                res = _grep_resource(argv[1:] if name == "git" else argv, cwd, tool)
                if res is None:
                    runs_something = True
                elif pos == 0:
                    base = _swap(reads, [], [res])
                elif base:  # cat f | grep p, find | xargs grep p: a search of p within what came before
                    pattern = res.key.split(":", 1)[1].rsplit("@", 1)[0]
                    scope = ",".join(sorted(r.key if r.kind == "file" else str(r) for r in base))
                    base = _swap(reads, base, [Resource("search", f"{tool}:{pattern}@{scope}")])
                continue
            if name == "find":
                paths = []
                k = 1
                while k < len(argv) and not argv[k].startswith("-") and argv[k] not in ("(", "!"):
                    paths.append(_norm_path(argv[k], cwd))
                    k += 1
                expr = argv[k:]
                scope = ",".join(sorted(paths)) if paths else (cwd or ".")
                if "-delete" in expr or ("-exec" in expr and any(x in expr for x in ("rm", "sed", "mv"))):
                    writes.append("*")
                tests = [
                    f"{expr[x]} {expr[x + 1]}"
                    for x in range(len(expr) - 1)
                    if expr[x] in ("-name", "-iname", "-path", "-ipath", "-regex", "-wholename")
                ]
                if pos == 0:
                    if tests:
                        res = Resource("search", f"find:{' '.join(tests)}@{scope}")
                    else:
                        res = Resource("list", f"{scope} {' '.join(expr)}" if expr else scope)
                    base = _swap(reads, [], [res])
                continue
            if name in ("ls", "tree", "dir"):
                _, args = _opts_and_args(argv, {"-I", "-L", "-P", "--ignore"})
                if pos == 0:
                    targets = [_norm_path(a, cwd) for a in args] or [cwd or "."]
                    base = _swap(reads, [], [Resource("list", t) for t in targets])
                continue
            if name in _WRITE_CMDS:
                _, args = _opts_and_args(argv, {"-t", "-m", "--target-directory", "-s", "-o"})
                if name == "patch":
                    writes.append("*")
                elif name in ("cp", "ln") and args:
                    writes.append(_norm_path(args[-1], cwd))
                elif name not in ("mkdir", "chmod"):
                    writes.extend(_norm_path(a, cwd) for a in args)
                continue
            if name == "git":
                sub = argv[1] if len(argv) > 1 else ""
                if sub in ("checkout", "restore", "reset", "stash", "apply", "am", "merge", "rebase", "pull"):
                    _, args = _opts_and_args(argv[1:], set())
                    files = (
                        [a for a in args if "/" in a or "." in a] if sub in ("checkout", "restore") else []
                    )
                    writes.extend([_norm_path(a, cwd) for a in files] or ["*"])
                else:
                    runs_something = True
                continue
            runs_something = True
            if name.startswith("python") or name in ("pytest", "py.test"):
                code = stdin_body or ""
                if "-c" in argv:
                    k = argv.index("-c")
                    code = argv[k + 1] if k + 1 < len(argv) else code
                if code:
                    writes.extend(sorted(_py_writes(code, cwd)))  # sets: order by name, not by hash
                else:
                    script = next((a for a in argv[1:] if a.endswith(".py")), None)
                    if script is not None:
                        writes.extend(sorted(state.script_writes().get(_norm_path(script, cwd), ())))
    # a script written by a heredoc: remember what it writes, for when it is run
    if bodies:
        for w in writes:
            if w.endswith(".py"):
                found = set().union(*(_py_writes(b, cwd) for b in bodies))
                if found:
                    state.script_writes()[w] = found
    if not reads and runs_something:
        reads.append(Resource("cmd", _WS.sub(" ", raw).strip()))
    return reads, writes


def _swap(reads: list[Resource], old: list[Resource], new: list[Resource]) -> list[Resource]:
    """Replace a pipeline's resources ``old`` by their narrowed form ``new`` in ``reads``."""
    for r in old:
        if r in reads:
            reads.remove(r)
    reads.extend(new)
    return new


def _strip_wrappers(argv: list[str]) -> list[str]:
    """Drop ``sudo``, ``timeout 30``, ``VAR=x`` and similar prefixes."""
    while argv:
        if argv[0] in _WRAPPERS or re.fullmatch(r"\w+=.*", argv[0]):
            argv = argv[1:]
        elif argv[0] == "timeout":
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", argv[0])):
                argv = argv[1:]
        else:
            break
    return argv


def _narrow_head_tail(r: Resource, name: str, n: str | None) -> Resource:
    if r.kind != "file":
        return r
    if n is None:
        n = "10"
    try:
        plus = n.startswith("+")
        k = int(n.lstrip("+-"))
    except ValueError:
        return r
    start0 = r.start or 1
    if name == "head":
        end = start0 + k - 1
        if r.end is not None:
            end = min(end, r.end)
        return Resource("file", r.key, start=start0, end=end)
    if plus:  # tail -n +K: from line K on
        return Resource("file", r.key, start=start0 + k - 1, end=r.end)
    if r.end is not None:
        return Resource("file", r.key, start=max(start0, r.end - k + 1), end=r.end)
    if r.start is not None:
        return r  # the last k lines of a range that runs to the end: unknown, keep the range
    return Resource("file", r.key, tail=k)


def _narrow_range(r: Resource, rng: tuple[int, int | None]) -> Resource:
    """``r`` piped through ``sed -n 'a,bp'`` (line numbers relative to what ``r`` prints)."""
    if r.kind != "file" or r.tail is not None:
        return r
    off = (r.start or 1) - 1
    a = rng[0] + off
    b = None if rng[1] is None else rng[1] + off
    if r.end is not None:
        b = r.end if b is None else min(b, r.end)
    return Resource("file", r.key, start=a, end=b)


def _output_range(output: str | None) -> tuple[int, int] | None:
    """First and last numbered line of a windowed view (SWE-agent ``12:``, ``cat -n``)."""
    if not output:
        return None
    head = output[:4000]
    tail = output[-4000:]
    a = _LINE_NUM_OUT.search(head)
    if not a:
        return None
    last = None
    for m in _LINE_NUM_OUT.finditer(tail):
        last = m
    if last is None:
        return None
    lo, hi = int(a.group(1)), int(last.group(1))
    return (lo, hi) if hi >= lo else None


def _aci(cmd: str, state: _State, reads: list[Resource], writes: list[str]) -> bool:
    """SWE-agent ACI commands and the ``str_replace_editor`` CLI; False when not one of them."""
    first_line = cmd.strip().split("\n", 1)[0]
    try:
        parts = shlex.split(first_line)
    except ValueError:
        parts = first_line.split()
    if not parts:
        return False
    name = parts[0]
    out = state.output
    header = _FILE_HEADER.search(out[:2000]) if out else None
    if name == "str_replace_editor":
        if len(parts) < 3:
            return False
        sub, path = parts[1], _norm_path(parts[2])
        if sub in _INPLACE_COMMANDS:
            state.edits.append(path)
        if sub == "view":
            rng = None
            if "--view_range" in parts:
                k = parts.index("--view_range")
                try:
                    a, b = int(parts[k + 1]), int(parts[k + 2])
                    rng = (a, None if b == -1 else b)
                except (IndexError, ValueError):
                    rng = None
            reads.append(Resource("file", path, start=rng[0], end=rng[1]) if rng else Resource("file", path))
        else:
            writes.append(path)
        return True
    if name in ("open", "goto", "scroll_down", "scroll_up"):
        if name == "open":
            if len(parts) < 2:
                return False
            state.current_file = _norm_path(parts[1])
        if header:
            hdr = _norm_path(header.group(1))
            if state.current_file is None or not same_path(hdr, state.current_file):
                state.current_file = hdr
        if state.current_file is None:
            return True
        rng = _output_range(out)
        if rng is None:
            line = None
            if name == "open" and len(parts) > 2 and parts[2].isdigit():
                line = int(parts[2])
            elif name == "goto" and len(parts) > 1 and parts[1].isdigit():
                line = int(parts[1])
            if line is not None:
                rng = (max(1, line - 50), line + 50)
            elif state.window is not None and name.startswith("scroll"):
                a, b = state.window
                d = b - a + 1
                rng = (b + 1, b + d) if name == "scroll_down" else (max(1, a - d), a - 1)
        state.window = rng
        if rng:
            reads.append(Resource("file", state.current_file, start=rng[0], end=rng[1]))
        else:
            reads.append(Resource("file", state.current_file))
        return True
    if name in ("search_file", "search_dir", "find_file"):
        if len(parts) < 2:
            return False
        default = (state.current_file or "-") if name == "search_file" else "."
        scope = _norm_path(parts[2]) if len(parts) > 2 else default
        reads.append(Resource("search", f"{name}:{parts[1]}@{scope}"))
        return True
    if name == "create":
        if len(parts) < 2:
            return False
        state.current_file = _norm_path(parts[1])
        writes.append(state.current_file)
        return True
    if name == "edit":
        if not re.fullmatch(r"\d+:\d+", parts[1] if len(parts) > 1 else ""):
            return False
        if header:
            state.current_file = _norm_path(header.group(1))
        if state.current_file:
            writes.append(state.current_file)
            state.edits.append(state.current_file)  # `edit N:M` addresses lines of the open file
        return True
    if name == "submit":
        return True
    return False


def _call_resource(name: str, args) -> Resource:
    payload = _canon_json(args) if not isinstance(args, str) else _WS.sub(" ", args).strip()
    return Resource("call", f"{name}({payload})")


# Editors that refused an edit (nothing was written): SWE-agent 1.x / OpenHands str_replace_editor,
# SWE-agent 0.x's linting ``edit``, Claude Code's ``<tool_use_error>``.
_EDIT_REFUSED = re.compile(
    r"\s*(?:ERROR:\s*)?(?:No replacement was performed|File already exists at"
    r"|Your proposed edit has introduced new syntax error|<tool_use_error>)"
)
# SWE-agent 1.x str_replace_editor shows a large file as an outline with elided bodies.
_ABBREVIATED = "This file is too large to display entirely. Showing abbreviated version."
_NUMBERED_LINE = re.compile(r"(?m)^[ \t]*(\d+)(?:[ \t]+(.*))?$")


def _edit_refused(step: Step) -> bool:
    """An editor/write tool call whose output says nothing was written.  Claude Code's "File has been
    unexpectedly modified" refusal still counts as a write: the file did change, by someone else."""
    name = (step.tool_name or "").strip().lower()
    if name not in _EDITOR_TOOLS and name not in _WRITE_TOOLS and name not in _ACI_COMMANDS:
        return False
    head = (step.output or "")[:300]
    if "unexpectedly modified" in head:
        return False
    return step.output_is_error or bool(_EDIT_REFUSED.match(head))


def _shown_ranges(path: str, output: str) -> list[Resource]:
    """The line ranges an abbreviated view really shows: runs of consecutive numbered lines, without
    the ``N ... eliding lines A-B ...`` markers."""
    runs: list[list[int]] = []
    for m in _NUMBERED_LINE.finditer(output):
        if (m.group(2) or "").startswith("... eliding lines"):
            continue
        x = int(m.group(1))
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        elif not (runs and runs[-1][0] <= x <= runs[-1][1]):
            runs.append([x, x])
    return [Resource("file", path, start=a, end=b) for a, b in runs]


def _step_resources(step: Step, state: _State) -> tuple[list[Resource], list[str]]:
    """What ``step`` reads and writes, from its tool name and arguments, corrected by its output:
    an edit the editor refused writes nothing, and an abbreviated whole-file view reads only the
    lines it shows (a later view of elided lines is a first read, not a re-access)."""
    reads, writes = _tool_resources(step, state)
    if writes and _edit_refused(step):
        writes = []
    if len(reads) == 1 and reads[0].whole and step.output and _ABBREVIATED in step.output[:1000]:
        reads = _shown_ranges(reads[0].key, step.output) or reads
    return reads, writes


def _tool_resources(step: Step, state: _State) -> tuple[list[Resource], list[str]]:
    """What ``step`` reads and writes, from its tool name and arguments."""
    state.output = step.output or ""
    state.edits = []
    if step.tool_name is None and not step.tool_args:
        return [], []
    name = (step.tool_name or "").strip()
    lname = base_tool_name(name)  # mcp__server__read_file, server.read_file -> read_file
    args = _json_args(step.tool_args)
    if args is None:
        text = step.tool_args or ""
        if lname in _EDITOR_TOOLS and text.strip() and not text.lstrip().startswith("str_replace_editor"):
            text = "str_replace_editor " + text
        m = re.fullmatch(r"\s*(\w+)\((.*)\)\s*", text, re.DOTALL)
        if m and (lname not in _SHELL_TOOLS) and m.group(1) not in ("echo",):
            fname = m.group(1)
            if fname.lower().startswith(_READ_PREFIXES):
                return [_call_resource(fname, m.group(2).replace("'", '"'))], []
        if not text.strip():
            return [], []
        if lname and lname not in _SHELL_TOOLS and lname not in _EDITOR_TOOLS and lname not in _ACI_COMMANDS:
            if lname.startswith(_READ_PREFIXES):
                return [_call_resource(name, text)], []
        return _shell(text, state)
    # JSON arguments
    cmd = args.get("command")
    if lname in _EDITOR_TOOLS or (isinstance(cmd, str) and "path" in args and cmd in ("view", "create")):
        path = args.get("path") or args.get("file_path")
        if not isinstance(path, str):
            return [], []
        path = _norm_path(path)
        if cmd == "view":
            vr = args.get("view_range")
            if isinstance(vr, list) and len(vr) == 2 and all(isinstance(x, int) for x in vr):
                return [Resource("file", path, start=vr[0], end=None if vr[1] == -1 else vr[1])], []
            return [Resource("file", path)], []
        if cmd in _INPLACE_COMMANDS:
            state.edits.append(path)
        return [], [path]
    if isinstance(cmd, str) and (lname in _SHELL_TOOLS or lname == "" or "bash" in lname or "shell" in lname):
        return _shell(cmd, state)
    if isinstance(args.get("cmd"), str) and lname in _SHELL_TOOLS:
        return _shell(args["cmd"], state)
    path = args.get("file_path") or args.get("filePath") or args.get("path") or args.get("notebook_path")
    if lname in _READ_TOOLS and isinstance(path, str):
        off = args.get("offset")
        lim = args.get("limit")
        zero_based = "filePath" in args  # OpenCode counts lines from 0
        start = None
        if isinstance(off, int):
            start = off + 1 if zero_based else max(1, off)
        end = None
        if isinstance(lim, int):
            end = (start or 1) + lim - 1
        return [Resource("file", _norm_path(path), start=start, end=end)], []
    if lname in _GREP_TOOLS and isinstance(args.get("pattern") or args.get("query"), str):
        pattern = args.get("pattern") or args.get("query")
        scope = _norm_path(path) if isinstance(path, str) else "."
        extra = args.get("glob") or args.get("include") or args.get("type")
        if extra:
            scope += f"[{extra}]"
        return [Resource("search", f"grep:{pattern}@{scope}")], []
    if lname in _GLOB_TOOLS and isinstance(args.get("pattern"), str):
        scope = _norm_path(path) if isinstance(path, str) else "."
        return [Resource("search", f"glob:{args['pattern']}@{scope}")], []
    if lname in _LIST_TOOLS:
        return [Resource("list", _norm_path(path) if isinstance(path, str) else ".")], []
    if lname in _WRITE_TOOLS:
        if isinstance(path, str):
            if lname in _INPLACE_TOOLS:
                state.edits.append(_norm_path(path))
            return [], [_norm_path(path)]
        return [], ["*"]
    return _generic_resources(name, lname, args)


# Argument names that hold what a tool reads or writes, whatever the tool (MCP servers, agent SDKs).
_PATH_KEYS = {
    "path", "file_path", "filepath", "target_file", "notebook_path", "relative_path", "absolute_path",
}  # fmt: skip
# Names that hold a path only sometimes (``destination`` is also an airport code): their value counts
# when it looks like one.
_MAYBE_PATH_KEYS = {"file", "filename", "file_name", "source", "destination", "dest", "directory", "dir"}
_LOOKS_LIKE_PATH = re.compile(r"[/\\]|^~|\.[A-Za-z0-9]{1,8}$")
_PATH_LIST_KEYS = {"paths", "files", "file_paths", "filenames"}
# A path next to one of these names a file somewhere else (a repository, a bucket, a remote host):
# it is that call's resource, not a local file another tool could read.
_SCOPE_KEYS = {
    "owner", "repo", "repository", "bucket", "project", "branch", "ref", "sha", "commit", "host",
    "server", "container", "namespace", "database", "org", "organization", "remote", "drive_id",
}  # fmt: skip
_URL_KEYS = {"url", "uri", "href", "link", "page_url"}
_SQL_KEYS = ("sql", "query", "statement")
_SQL_WRITE = re.compile(
    r"^\s*(insert|update|delete|create|drop|alter|replace|truncate|merge|upsert|grant|revoke)\b", re.I
)
_SQL_ANY = re.compile(r"^\s*(select|with|show|describe|explain|pragma)\b", re.I)
_WRITE_VERBS = {
    *_WRITE_PREFIXES, "upload", "push", "merge", "commit", "move", "rename", "append", "replace", "click",
    "type", "fill", "press", "drag", "hover", "select", "upsert", "save", "store", "put", "run_migration",
}  # fmt: skip
_READ_VERBS = {
    *_READ_PREFIXES, "navigate", "open", "snapshot", "screenshot", "download", "retrieve", "browse",
    "inspect", "describe", "count", "cat", "head", "tail", "stat", "info", "load", "scrape", "crawl",
}  # fmt: skip
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Tools that read and change nothing outside the conversation: thoughts, plans, answers, hand-offs.
_NO_RESOURCE = {
    "think", "submit", "finish", "done", "final_answer", "answer", "respond", "reply", "todowrite",
    "todoread", "todo_write", "todo_read", "task", "plan", "exit", "stop", "issue", "manage_context",
    "attempt_completion", "ask_followup_question", "send_message_to_user",
}  # fmt: skip


_SEARCH_VERBS = {"search", "find", "grep", "query", "lookup", "count", "list", "check", "filter", "match"}


def _verb(name: str) -> str | None:
    """``read``, ``search`` or ``write`` from the first verb in a tool's name (``create_or_update_file``:
    write; ``search_method_in_file``: search; ``browser_navigate``: read), None when it names none."""
    base = base_tool_name(_HUMP.sub("_", name.split("__")[-1]))
    for word in base.split("_"):
        if word in _WRITE_VERBS:
            return "write"
        if word in _SEARCH_VERBS:
            return "search"
        if word in _READ_VERBS:
            return "read"
    return None


def _generic_resources(name: str, lname: str, args: dict) -> tuple[list[Resource], list[str]]:
    """Any other tool, from its arguments: the same tool with the same arguments reads the same resource
    (``call:NAME(ARGS)``); a path argument is also that file, a URL that page, so another tool reading
    or writing it agrees; a write-like name (or an SQL statement that changes data) modifies them."""
    if lname in _NO_RESOURCE:
        return [], []
    files: list[str] = []
    urls: list[str] = []
    for key, value in args.items():
        k = key.lower()
        maybe = k in _MAYBE_PATH_KEYS and isinstance(value, str) and _LOOKS_LIKE_PATH.search(value)
        if (k in _PATH_KEYS or maybe) and isinstance(value, str) and value.strip():
            (urls if "://" in value and not value.startswith("file://") else files).append(value)
        elif k in _PATH_LIST_KEYS and isinstance(value, list):
            files += [v for v in value if isinstance(v, str) and v.strip()]
        elif k in _URL_KEYS and isinstance(value, str) and value.strip():
            (files if value.startswith("file://") else urls).append(value)
    kind = _verb(name)
    if kind == "search" or any(k.lower() in _SCOPE_KEYS for k in args):
        files = []  # a search's path is where it looks, not a file it reads whole
    files = [_norm_path(f.removeprefix("file://")) for f in files]
    sql = next((args[k] for k in _SQL_KEYS if isinstance(args.get(k), str)), None)
    if sql is not None and _SQL_WRITE.match(sql):
        kind = "write"
    elif sql is not None and _SQL_ANY.match(sql):
        kind = "read"
    if kind == "write":
        return [], files or [f"state:{name}({_canon_json(args)})"]
    reads = [_call_resource(name, args)]
    reads += [Resource("file", f) for f in files]
    reads += [Resource("call", f"url({u.strip()})") for u in urls]
    return reads, []


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
    if not writes:
        return False
    res = read_resources(step)
    if not res:
        return True
    return any(r.kind in ("cmd", "call") or _file_written(r, writes) for r in res)


def first_modified(traj: Trajectory, i: int) -> int | None:
    """The first step ``t > i`` with ``modified_between(traj, i, t)``, or None when nothing later changes
    what step ``i`` read (a binary search: the test is monotone in ``t``)."""
    steps = traj.steps
    n = len(steps)
    if not any(steps[k].write_resources for k in range(i + 1, n)) or not modified_between(traj, i, n - 1):
        return None
    lo, hi = i + 1, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if modified_between(traj, i, mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------------------------
# Labelling
# --------------------------------------------------------------------------------------------


class _SpanIndex:
    """Incremental index of token windows and atoms: outputs → latest step, other text → excluded."""

    def __init__(self, window: int, min_atom: int):
        self.k = window
        self.min_atom = min_atom
        self.out_win: dict[int, int] = {}
        self.out_atom: dict[str, int] = {}
        self.own_win: set[int] = set()
        self.own_atom: set[str] = set()

    def add_own(self, text: str) -> None:
        if not text:
            return
        self.own_win.update(_windows(_TOKEN.findall(text), self.k))
        for a in _atoms(text):
            self.own_atom.update(_atom_candidates(a, self.min_atom))

    def add_output(self, text: str, step: int) -> None:
        if not text:
            return
        stripped = _strip_gutters(text) if "\n" in text or text[:1].isdigit() else text
        self.out_win.update(dict.fromkeys(_windows(_TOKEN.findall(stripped), self.k), step))
        cands: dict[str, int] = {}
        for a in _atoms(text):
            for c in _atom_candidates(a, self.min_atom):
                cands[c] = step
        self.out_atom.update(cands)

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


def _edit_sources(
    res_by_base: dict[str, dict[Resource, int]],
    writes_by_base: dict[str, dict[str, int]],
    any_write: int,
    path: str,
    visible: set[int],
) -> set[int]:
    """The visible steps that read file ``path`` and whose text of it is still current (no write since).

    An in-place edit must match text somewhere in the file and the action rarely says where, so every
    current read is a source; when the agent has rewritten the file since every read, the latest read.
    """
    base = os.path.basename(path)
    written = max([any_write, *(w for p, w in writes_by_base.get(base, {}).items() if same_path(p, path))])
    reads = {src for r, src in res_by_base.get(base, {}).items() if src in visible and same_path(r.key, path)}
    current = {src for src in reads if src > written}
    return current or ({max(reads)} if reads else set())


def _turn_groups(steps: list[Step]) -> list[list[Step]]:
    if not steps:
        return []
    turns = [s.turn for s in steps]
    informative = len(set(turns)) > 1 or len(steps) == 1
    groups: list[list[Step]] = []
    for s in steps:
        if informative and groups and groups[-1][0].turn == s.turn:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _recorded_keys(traj: Trajectory) -> dict[str, int] | None:
    """The key -> step map a DTOC orchestrator saved with its log (``extra["dtoc_keys"]``)."""
    try:
        raw = traj.extra_dict().get("dtoc_keys")
        keys = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, AttributeError):
        return None
    if not isinstance(keys, dict):
        return None
    n = len(traj.steps)
    return {k: v for k, v in keys.items() if isinstance(k, str) and type(v) is int and 0 <= v < n}


def _key_map(traj: Trajectory, keys: dict[str, int] | None) -> dict[str, int]:
    if keys is not None:
        return dict(keys)
    recorded = _recorded_keys(traj)
    if recorded:
        return recorded
    found: dict[str, int] = {}
    for s in traj.steps:
        if s.output and '"tool_key"' in s.output:
            m = _ENVELOPE_KEY.search(s.output)
            if m:
                found.setdefault(m.group(1), s.index)
    if found:
        return found
    ordinal = {}
    n = 0
    for s in traj.steps:
        if s.output is not None:
            ordinal[format_key(n)] = s.index
            n += 1
    return ordinal


class NeedLabeller:
    """:func:`label_trajectory` one turn at a time, for agents that are still running.

    Feed the turns in order with :meth:`label_turn` (the steps of one assistant message, numbered
    on from the previous turn's): it fills their ``read_resource``, ``write_resources`` and
    ``needs`` as :func:`label_trajectory` does on the whole trajectory, provided each step's
    ``output`` is set when its turn is fed.  (One exception: in a trajectory whose steps all
    share one turn number, :func:`label_trajectory` takes each step as a turn of its own, since
    some logs carry no turn numbers; so a session of one turn with several calls differs.)  The
    indexes persist, so a turn costs time linear in its own text, whatever the length of the
    session.  An output that arrives after its turn was fed can still be added
    (:meth:`add_output`): later turns may need it, its own step's labels stay as they were.

    ``keys`` maps DTOC tool keys to step indices (it may be a live mapping that grows with the
    session; a key is only ever resolved to a step already fed).  The other arguments are
    :func:`label_trajectory`'s.
    """

    def __init__(
        self,
        task_text: str = "",
        system_prompt: str = "",
        *,
        keys: Mapping[str, int] | None = None,
        min_span: int = DEFAULT_MIN_SPAN,
        window: int = DEFAULT_WINDOW,
        min_atom: int = DEFAULT_MIN_ATOM,
        include_reasoning: bool = False,
        exclude_agent_text: bool = True,
    ):
        self.min_span = min_span
        self.include_reasoning = include_reasoning
        self.exclude_agent_text = exclude_agent_text
        self.keys: Mapping[str, int] = keys if keys is not None else {}
        self.steps_fed = 0
        self._idx = _SpanIndex(window, min_atom)
        self._idx.add_own(task_text)
        self._idx.add_own(system_prompt)
        self._state = _State()
        self._call_ids: dict[str, int] = {}
        self._visible: set[int] = set()  # steps of earlier turns that have an output
        # resource string -> latest earlier step; files also by basename for path-suffix matching
        self._res_latest: dict[str, int] = {}
        self._res_by_base: dict[str, dict[Resource, int]] = defaultdict(dict)
        # file path -> latest step that wrote it (by basename), and the latest unknown write (``*``)
        self._writes_by_base: dict[str, dict[str, int]] = defaultdict(dict)
        self._any_write = -1
        self._reads_waiting: dict[int, list[Resource]] = {}  # steps fed without an output

    def label_turn(self, steps: Sequence[Step]) -> None:
        """Label the steps of one turn (in place); then their outputs become visible to later turns."""
        for i, s in enumerate(steps):
            if s.index != self.steps_fed + i:
                raise ValueError(
                    f"step {s.index} fed as step {self.steps_fed + i}: turns must be fed in order "
                    "and steps numbered 0..n-1"
                )
        idx, state, visible = self._idx, self._state, self._visible
        for s in steps:
            idx.add_own(s.user_text)
        labelled: list[tuple[Step, list[Resource]]] = []
        for s in steps:
            reads, writes = _step_resources(s, state)
            reads = list(dict.fromkeys(reads))
            s.read_resource = "\n".join(str(r) for r in reads) or None
            s.write_resources = list(dict.fromkeys(writes))
            needs: dict[tuple[int, str], str] = {}
            # provenance
            texts = [_args_text(s)]
            if s is steps[0] or s.assistant_text:
                texts.append(s.assistant_text)
            if self.include_reasoning:
                texts.append(s.reasoning)
            for text in texts:
                for src, span in idx.match(text, self.min_span).items():
                    if src in visible:
                        prev = needs.get((src, "provenance"), "")
                        if len(span) > len(prev):
                            needs[(src, "provenance")] = span
            # re-access
            for r in reads:
                if r.kind == "file":
                    for prev, src in self._res_by_base.get(os.path.basename(r.key), {}).items():
                        if src in visible and r.overlaps(prev):
                            needs.setdefault((src, "reaccess"), str(prev))
                else:
                    src = self._res_latest.get(str(r))
                    if src is not None and src in visible:
                        needs.setdefault((src, "reaccess"), str(r))
            # in-place edits must match text that the file's current reads showed
            for path in dict.fromkeys(state.edits):
                sources = _edit_sources(
                    self._res_by_base, self._writes_by_base, self._any_write, path, visible
                )
                # an edit whose text was copied from some of these reads came from them
                copied = {src for src in sources if (src, "provenance") in needs}
                for src in copied or sources:
                    needs.setdefault((src, "edit"), f"file:{path}")
            # references
            action = "\n".join(t for t in texts if t)
            for m in _KEY.finditer(action):
                src = self.keys.get(m.group(0))
                if src is not None and src in visible:
                    needs.setdefault((src, "reference"), m.group(0))
            if self._call_ids:
                for m in _IDLIKE.finditer(action):
                    src = self._call_ids.get(m.group(0))
                    if src is not None and src in visible:
                        needs.setdefault((src, "reference"), m.group(0))
            s.needs = [
                Need(step=st, kind=kind, evidence=ev[:EVIDENCE_CHARS])
                for (st, kind), ev in sorted(needs.items())
            ]
            labelled.append((s, reads))
        self.steps_fed += len(steps)
        # the turn is over: its words become "own words", its outputs become visible
        for s in steps if self.exclude_agent_text else ():
            idx.add_own(s.assistant_text)
            idx.add_own(s.tool_args)
            args_text = _args_text(s)
            if args_text != s.tool_args:
                idx.add_own(args_text)
            if self.include_reasoning:
                idx.add_own(s.reasoning)
        for s, reads in labelled:
            for w in s.write_resources:
                if w == "*":
                    self._any_write = s.index
                elif not w.startswith("state:"):
                    self._writes_by_base[os.path.basename(w)][w] = s.index
            if s.output is None:
                self._reads_waiting[s.index] = reads
            else:
                self._show(s, reads)

    def skip_turn(self, steps: Sequence[Step]) -> None:
        """Pass over a turn without labelling it (e.g. one that :meth:`label_turn` failed on):
        its steps keep no resources or needs, and their outputs become visible to later turns."""
        for s in steps:
            s.read_resource, s.write_resources, s.needs = None, [], []
        if steps:
            self.steps_fed = steps[-1].index + 1
        for s in steps:
            if s.output is None:
                self._reads_waiting[s.index] = []
            else:
                self._show(s, [])

    def add_output(self, step: Step) -> None:
        """A step fed without an output has one now: later turns may need it.  (Its own
        resources and needs stay as labelled: an abbreviated view or a refused edit is only
        seen in its output.)  A step not fed yet, or already shown, is ignored."""
        reads = self._reads_waiting.pop(step.index, None)
        if reads is not None and step.output is not None:
            self._show(step, reads)

    def _show(self, s: Step, reads: list[Resource]) -> None:
        self._idx.add_output(s.output, s.index)
        self._visible.add(s.index)
        if s.tool_call_id:
            self._call_ids[s.tool_call_id] = s.index
        for r in reads:
            self._res_latest[str(r)] = s.index
            if r.kind == "file":
                self._res_by_base[os.path.basename(r.key)][r] = s.index


def label_trajectory(
    traj: Trajectory,
    *,
    min_span: int = DEFAULT_MIN_SPAN,
    window: int = DEFAULT_WINDOW,
    min_atom: int = DEFAULT_MIN_ATOM,
    include_reasoning: bool = False,
    keys: dict[str, int] | None = None,
    exclude_agent_text: bool = True,
) -> Trajectory:
    """Fill ``read_resource``, ``write_resources`` and ``needs`` of every step (in place).

    ``min_span``: fewest non-space characters of a copied token run;
    ``window``: tokens per hashed window (the shortest run); ``min_atom``: the
    shortest distinctive identifier/path; ``include_reasoning``: also treat
    ``step.reasoning`` as action text (and as own words); ``keys``: DTOC tool
    key → step index, when known; ``exclude_agent_text=False`` drops the
    agent's own earlier messages and actions from the exclusion (task, system
    prompt and user messages stay excluded) — for sensitivity analysis only,
    it counts re-quotes of the agent's own words as copies.  See the module
    docstring for the rules.  Existing labels are replaced.  Returns ``traj``.
    A running agent labels turn by turn with :class:`NeedLabeller` (the same labels).
    """
    for i, s in enumerate(traj.steps):
        if s.index != i:
            raise ValueError(f"step {i} has index {s.index}; steps must be numbered 0..n-1")
    labeller = NeedLabeller(
        traj.task_text,
        traj.system_prompt,
        keys=_key_map(traj, keys),
        min_span=min_span,
        window=window,
        min_atom=min_atom,
        include_reasoning=include_reasoning,
        exclude_agent_text=exclude_agent_text,
    )
    for group in _turn_groups(traj.steps):
        labeller.label_turn(group)
    return traj


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------

AGE_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, None))


def _bucket(age: int) -> str:
    for lo, hi in AGE_BUCKETS:
        if age >= lo and (hi is None or age <= hi):
            return f"{lo}-{hi}" if hi != lo and hi is not None else (f"{lo}" if hi == lo else f">{lo - 1}")
    return "?"


def real_rereads(traj: Trajectory) -> list[tuple[int, int]]:
    """(original step, re-reading step) for every re-access need not modified in between."""
    out = []
    for s in traj.steps:
        for n in s.needs:
            if n.kind == "reaccess" and not modified_between(traj, n.step, s.index):
                out.append((n.step, s.index))
    return out


def label_stats(trajs: Iterable[Trajectory]) -> dict:
    """Summary of the need labels of (already labelled) trajectories.

    Keys: ``trajectories``, ``steps``; ``needs_by_kind``; ``provenance_step_fraction``
    (steps with ≥ 1 provenance need / all steps); ``age`` per kind (mean,
    median, p90 of ``step.index - need.step``) and ``age_hist`` (provenance,
    by bucket); ``provenance_over_10_fraction`` (provenance needs reaching back
    more than 10 steps / all provenance needs); ``reaccess_steps`` (steps
    with ≥ 1 re-access need); ``real_rereads`` (re-access needs whose resource
    was not modified in between, see :func:`modified_between`) and
    ``modified_rereads``;

    ``anticipation``: for each real re-read — a re-access need of step ``j`` on
    step ``i`` with ``not modified_between(traj, i, j)`` — it is *anticipated*
    when some step ``k`` with ``i < k <= j`` has a provenance need on ``i``
    (the agent demonstrably used output ``i`` again after first reading it, up
    to and including the re-read).  ``anticipation_rate`` = anticipated / real
    re-reads (None when there are none).  ``anticipated_strict`` counts
    ``i < k < j`` only (labelled strictly before the re-read).
    """
    n_traj = n_steps = 0
    kinds: Counter = Counter()
    prov_steps = 0
    reacc_steps = 0
    ages: dict[str, list[int]] = defaultdict(list)
    hist: Counter = Counter()
    real = modified = anticipated = anticipated_strict = 0
    for t in trajs:
        n_traj += 1
        n_steps += len(t.steps)
        prov_by_src: dict[int, list[int]] = defaultdict(list)
        for s in t.steps:
            has_p = has_r = False
            for n in s.needs:
                kinds[n.kind] += 1
                age = s.index - n.step
                ages[n.kind].append(age)
                if n.kind == "provenance":
                    has_p = True
                    hist[_bucket(age)] += 1
                    prov_by_src[n.step].append(s.index)
                elif n.kind == "reaccess":
                    has_r = True
            prov_steps += has_p
            reacc_steps += has_r
        for s in t.steps:
            for n in s.needs:
                if n.kind != "reaccess":
                    continue
                if modified_between(t, n.step, s.index):
                    modified += 1
                    continue
                real += 1
                users = prov_by_src.get(n.step, ())
                if any(n.step < k <= s.index for k in users):
                    anticipated += 1
                if any(n.step < k < s.index for k in users):
                    anticipated_strict += 1

    def summary(xs: list[int]) -> dict:
        if not xs:
            return {"n": 0}
        xs = sorted(xs)
        return {
            "n": len(xs),
            "mean": round(sum(xs) / len(xs), 2),
            "median": statistics.median(xs),
            "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))],
            "max": xs[-1],
        }

    prov = ages.get("provenance", [])
    order = [_bucket(lo) for lo, _ in AGE_BUCKETS]
    return {
        "trajectories": n_traj,
        "steps": n_steps,
        "needs_by_kind": {k: kinds.get(k, 0) for k in NEED_KINDS},
        "provenance_step_fraction": prov_steps / n_steps if n_steps else None,
        "provenance_over_10_fraction": (sum(a > 10 for a in prov) / len(prov)) if prov else None,
        "age": {k: summary(ages.get(k, [])) for k in NEED_KINDS},
        "age_hist": {b: hist.get(b, 0) for b in order},
        "reaccess_steps": reacc_steps,
        "real_rereads": real,
        "modified_rereads": modified,
        "anticipated": anticipated,
        "anticipated_strict": anticipated_strict,
        "anticipation_rate": anticipated / real if real else None,
        "anticipation_rate_strict": anticipated_strict / real if real else None,
    }
