"""The shell parser: what a command line reads and writes (files, line ranges, searches, listings).

A command line is split like a POSIX shell does (quotes, operators, heredocs, redirections) into
pipelines of commands; each command word has a handler (:data:`COMMANDS`, a dispatch table keyed
by the words of :data:`dtoc_rl.labels.vocabulary.COMMAND_KINDS`) that adds what it reads and
writes.  SWE-agent's ACI commands and the ``str_replace_editor`` CLI are parsed with their output
(the open file's window).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from dtoc_rl.labels.resources import _WS, Resource, _norm_path, same_path
from dtoc_rl.labels.shell_words import shell_tokens as _shell_tokens
from dtoc_rl.labels.vocabulary import ACI_COMMANDS, COMMAND_KINDS, WRAPPERS, unwrap_shell, words

_INPLACE_COMMANDS = {"str_replace", "insert"}  # editor commands that match the file's current text

_PY_WRITE = re.compile(
    r"""open\(\s*(?:r|f)?(['"])([^'"\n]+)\1\s*,\s*(?:mode\s*=\s*)?(['"])[^'"]*[wax+][^'"]*\3"""
    r"""|Path\(\s*(['"])([^'"\n]+)\4\s*\)\.write_(?:text|bytes)"""
)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")
# (?<!\d): a match starts where a run of digits starts, else a long run of digits is scanned
# once from every one of its positions (quadratic: seconds for a 20k-digit argument)
_DEVNULL = re.compile(r"(?<!\d)\d*>&\d+|&>\s*/dev/null|(?<!\d)\d*>>?\s*/dev/null")
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


@dataclass
class _Line:
    """What the parse of one command line has found so far; the command handlers update it."""

    state: _State
    bodies: list[str]  # heredoc bodies, by marker number
    reads: list[Resource] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    cwd: str | None = None
    runs_something: bool = False  # some command is neither navigation nor a pure write
    # what the current pipeline reads so far (narrowed by its later stages)
    base: list[Resource] = field(default_factory=list)

    def swap(self, new: list[Resource]) -> None:
        """The pipeline now reads ``new`` instead of what it read so far."""
        self.base = _swap(self.reads, self.base, new)


@dataclass
class _Cmd:
    """One command of a pipeline, redirections and wrappers removed."""

    argv: list[str]
    name: str  # the command word, without its folder
    pos: int  # place in the pipeline (0: the first command)
    redir_writes: list[str]  # files its redirections write
    stdin_body: str | None  # the heredoc it reads, if any


_Handler = Callable[[_Line, _Cmd], None]
#: Command word -> its handler.  Each handler is registered under the COMMAND_KINDS kind of its words,
#: so the parser and the tool categories cannot disagree on what a command word does.
COMMANDS: dict[str, _Handler] = {}
HANDLER_KINDS: dict[str, str] = {}  # command word -> the kind its handler was registered for


def _handles(kind: str, *names: str) -> Callable[[_Handler], _Handler]:
    def register(fn: _Handler) -> _Handler:
        for n in names:
            COMMANDS[n] = fn
            HANDLER_KINDS[n] = kind
        return fn

    return register


@_handles("nav", *words(COMMAND_KINDS, "nav"))
def _nav(line: _Line, c: _Cmd) -> None:
    if c.name == "cd":
        line.cwd = _norm_path(c.argv[1], line.cwd) if len(c.argv) > 1 else None


@_handles("run", "echo", "printf")
def _echo(line: _Line, c: _Cmd) -> None:
    if not c.redir_writes:  # echo x > f only writes f
        _run(line, c)


@_handles("read", "cat", "nl", "less", "more", "bat", "batcat", "awk", "gawk")
def _cat(line: _Line, c: _Cmd) -> None:
    argv, rng = c.argv, None
    if c.name in ("awk", "gawk"):
        _, args = _opts_and_args(argv, {"-F", "-v", "-f"})
        files = args[1:]
        m = _AWK_RANGE.search(args[0]) if args else None
        rng = (int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))) if m else None
    else:
        _, files = _opts_and_args(argv, {"-w", "-s", "-v", "-i", "-b", "-n"} if c.name == "nl" else set())
    files = [f for f in files if f != "-"]
    if files and c.pos == 0:
        lo, hi = rng or (None, None)
        line.swap([Resource("file", _norm_path(f, line.cwd), start=lo, end=hi) for f in files])
    elif not (c.stdin_body is not None and c.redir_writes) and not (c.pos > 0 and line.base):
        line.runs_something = True  # cat <<EOF > f is a pure write; cat of a pipe adds nothing


@_handles("read", "head", "tail")
def _head_tail(line: _Line, c: _Cmd) -> None:
    n, files = _head_tail_n(c.argv)
    if files and c.pos == 0:
        line.swap([_narrow_head_tail(Resource("file", _norm_path(f, line.cwd)), c.name, n) for f in files])
    elif c.pos > 0 and line.base:
        line.swap([_narrow_head_tail(r, c.name, n) for r in line.base])
    else:
        line.runs_something = True


# The files a patch in the apply_patch format (OpenAI's Codex CLI) adds, updates, deletes or moves to.
_PATCH_FILE = re.compile(r"(?m)^\*\*\* (Update File|Add File|Delete File|Move to): (.+?)\s*$")


def patch_paths(text: str, state: _State, cwd: str | None = None) -> list[str]:
    """What an apply_patch patch writes (every file it names; ``*`` when it names none), noting the
    files it updates in place in ``state.edits`` (an update must match their current text)."""
    paths = []
    # a log that kept the command on one line writes its newlines as \n: the patch's lines all the same
    for m in _PATCH_FILE.finditer((text or "").replace("\\n", "\n")):
        path = _norm_path(m.group(2), cwd)
        if m.group(1) == "Update File":
            state.edits.append(path)
        paths.append(path)
    return paths or ["*"]


@_handles("read", "sed")
def _sed(line: _Line, c: _Cmd) -> None:
    opts, args = _opts_and_args(c.argv, {"-e", "-f"})
    short = "".join(k[1:] for k in opts if k.startswith("-") and not k.startswith("--"))
    script = opts.get("-e")
    if script is None and args:
        script, args = args[0], args[1:]
    files = [_norm_path(a, line.cwd) for a in args]
    if "i" in short or any(k.startswith("--in-place") for k in opts):
        line.writes.extend(files)
        line.state.edits.extend(files)
        return
    quiet = "n" in short or "--quiet" in opts or "--silent" in opts
    rng = _sed_range(script or "") if quiet else None
    if files and c.pos == 0:
        line.swap(
            [Resource("file", f, start=rng[0], end=rng[1]) if rng else Resource("file", f) for f in files]
        )
    elif c.pos > 0 and line.base and rng:
        line.swap([_narrow_range(r, rng) for r in line.base])
    elif not (c.pos > 0 and line.base):
        line.runs_something = True


@_handles("search", *words(COMMAND_KINDS, "search"))
def _grep(line: _Line, c: _Cmd) -> None:
    tool = "git-grep" if c.name == "git" else "grep"
    res = _grep_resource(c.argv[1:] if c.name == "git" else c.argv, line.cwd, tool)
    if res is None:
        line.runs_something = True
    elif c.pos == 0:
        line.swap([res])
    elif line.base:  # cat f | grep p, find | xargs grep p: a search of p within what came before
        pattern = res.key.split(":", 1)[1].rsplit("@", 1)[0]
        scope = ",".join(sorted(r.key if r.kind == "file" else str(r) for r in line.base))
        line.swap([Resource("search", f"{tool}:{pattern}@{scope}")])


@_handles("list", "find")
def _find(line: _Line, c: _Cmd) -> None:
    argv, paths, k = c.argv, [], 1
    while k < len(argv) and not argv[k].startswith("-") and argv[k] not in ("(", "!"):
        paths.append(_norm_path(argv[k], line.cwd))
        k += 1
    expr = argv[k:]
    scope = ",".join(sorted(paths)) if paths else (line.cwd or ".")
    if "-delete" in expr or ("-exec" in expr and any(x in expr for x in ("rm", "sed", "mv"))):
        line.writes.append("*")
    tests = [
        f"{expr[x]} {expr[x + 1]}"
        for x in range(len(expr) - 1)
        if expr[x] in ("-name", "-iname", "-path", "-ipath", "-regex", "-wholename")
    ]
    if c.pos == 0:
        if tests:
            res = Resource("search", f"find:{' '.join(tests)}@{scope}")
        else:
            res = Resource("list", f"{scope} {' '.join(expr)}" if expr else scope)
        line.swap([res])


@_handles("list", "ls", "tree", "dir")
def _ls(line: _Line, c: _Cmd) -> None:
    _, args = _opts_and_args(c.argv, {"-I", "-L", "-P", "--ignore"})
    if c.pos == 0:
        line.swap([Resource("list", t) for t in [_norm_path(a, line.cwd) for a in args] or [line.cwd or "."]])


@_handles("write", *words(COMMAND_KINDS, "write"))
def _write(line: _Line, c: _Cmd) -> None:
    _, args = _opts_and_args(c.argv, {"-t", "-m", "--target-directory", "-s", "-o"})
    if c.name == "apply_patch":  # Codex runs it as a command: the patch an argument or a heredoc
        line.writes.extend(patch_paths(c.stdin_body or " ".join(c.argv[1:]), line.state, line.cwd))
    elif c.name == "patch":
        line.writes.append("*")
    elif c.name in ("cp", "ln") and args:
        line.writes.append(_norm_path(args[-1], line.cwd))
    elif c.name not in ("mkdir", "chmod"):
        line.writes.extend(_norm_path(a, line.cwd) for a in args)


@_handles("run", "git")
def _git(line: _Line, c: _Cmd) -> None:
    sub = c.argv[1] if len(c.argv) > 1 else ""
    if sub == "grep":
        _grep(line, c)
    elif sub in ("checkout", "restore", "reset", "stash", "apply", "am", "merge", "rebase", "pull"):
        _, args = _opts_and_args(c.argv[1:], set())
        files = [a for a in args if "/" in a or "." in a] if sub in ("checkout", "restore") else []
        line.writes.extend([_norm_path(a, line.cwd) for a in files] or ["*"])
    else:
        line.runs_something = True


def _run(line: _Line, c: _Cmd) -> None:
    """Any other command runs something; a Python snippet or a script written earlier may write files."""
    line.runs_something = True
    argv = c.argv
    if c.name.startswith("python") or c.name in ("pytest", "py.test"):
        code = c.stdin_body or ""
        if "-c" in argv:
            k = argv.index("-c")
            code = argv[k + 1] if k + 1 < len(argv) else code
        if code:
            line.writes.extend(sorted(_py_writes(code, line.cwd)))  # sets: order by name, not by hash
        else:
            script = next((a for a in argv[1:] if a.endswith(".py")), None)
            if script is not None:
                line.writes.extend(sorted(line.state.script_writes().get(_norm_path(script, line.cwd), ())))


def _shell(cmd: str, state: _State) -> tuple[list[Resource], list[str]]:
    """Reads and writes of one shell command line (bash, SWE-agent ACI, editor CLIs).

    Each pipeline's first command names what is read (``cat``/``nl``/``head``/
    ``tail``/``sed -n``/``awk`` → file, ``grep``/``rg``/``find -name`` → search,
    ``ls``/``find``/``tree`` → listing); later ``| sed -n``, ``| head``,
    ``| tail`` narrow a file's line range and ``| grep`` turns it into a search.
    When nothing structured is read and some command is more than navigation
    or a pure write, the whole command line is the resource (``cmd:``).
    Each command word has its handler in :data:`COMMANDS`; any other word runs something.
    """
    script = unwrap_shell(cmd)
    if script is not cmd:  # `bash -lc 'cat a.py'`: what the script reads and writes
        return _shell(script, state)
    raw = cmd
    if raw.lstrip().startswith("apply_patch") and "*** Begin Patch" in raw:
        # Codex's patch command, the patch as an argument or a heredoc: read the patch itself, which a
        # shell parse would split into words
        return [], patch_paths(raw, state)
    cmd = cmd.replace("\\\n", " ")
    cmd, bodies = _extract_heredocs(cmd)
    cmd = _DEVNULL.sub(" ", cmd)
    first = cmd.strip().split(None, 1)[0] if cmd.strip() else ""
    line = _Line(state, bodies)
    if (first in ACI_COMMANDS or first == "str_replace_editor") and _aci(raw, state, line.reads, line.writes):
        return line.reads, line.writes
    for pipe in _split_commands(_shell_tokens(cmd)):
        line.base = []
        for pos, argv0 in enumerate(pipe):
            argv, redir_writes, stdin_body = _strip_redirs(argv0, line.cwd, bodies)
            line.writes.extend(redir_writes)
            argv = _strip_wrappers(argv)
            if argv:
                name = os.path.basename(argv[0])
                COMMANDS.get(name, _run)(line, _Cmd(argv, name, pos, redir_writes, stdin_body))
    # a script written by a heredoc: remember what it writes, for when it is run
    if bodies:
        for w in line.writes:
            if w.endswith(".py"):
                found = set().union(*(_py_writes(b, line.cwd) for b in bodies))
                if found:
                    state.script_writes()[w] = found
    if not line.reads and line.runs_something:
        line.reads.append(Resource("cmd", _WS.sub(" ", raw).strip()))
    return line.reads, line.writes


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
        if argv[0] in WRAPPERS or re.fullmatch(r"\w+=.*", argv[0]):
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
