"""A step's tool call -> the resources it reads and writes, by the tool's kind in the vocabulary.

Shell tools go to the shell parser (:mod:`dtoc_rl.labels.shell`), file editors, readers, searches,
listings and writers are read from their arguments by kind (:data:`~dtoc_rl.labels.vocabulary.TOOL_KINDS`),
and any other tool from its arguments alone (paths, URLs, SQL, the verb in its name); the output then
corrects what the call did (a refused edit writes nothing, an abbreviated view reads what it shows).
"""

from __future__ import annotations

import re

from dtoc_rl.data.schema import Step
from dtoc_rl.labels.resources import _WS, Resource, _canon_json, _json_args, _norm_path
from dtoc_rl.labels.shell import _INPLACE_COMMANDS, _shell, _State, patch_paths
from dtoc_rl.labels.vocabulary import (
    ACI_COMMANDS,
    READ_PREFIXES,
    READ_VERBS,
    SEARCH_VERBS,
    TOOL_KINDS,
    WRITE_VERBS,
    base_tool_name,
    shell_command,
    shell_like,
    words,
)

# The labeller's rule per kind of tool (see TOOL_KINDS)
_SHELL_TOOLS = words(TOOL_KINDS, "shell")
_EDITOR_TOOLS = words(TOOL_KINDS, "editor")
_READ_TOOLS = words(TOOL_KINDS, "read")
_GREP_TOOLS = words(TOOL_KINDS, "grep")
_GLOB_TOOLS = words(TOOL_KINDS, "glob")
_LIST_TOOLS = words(TOOL_KINDS, "list")
# Edits that must match the file's current text or line numbers (str_replace's old_str, an insert
# line, Claude Code/OpenCode Edit), unlike whole-file writes and creates.
_INPLACE_TOOLS = words(TOOL_KINDS, "edit")
_WRITE_TOOLS = words(TOOL_KINDS, "write") | _INPLACE_TOOLS
_NO_RESOURCE = words(TOOL_KINDS, "none")  # thoughts, plans, answers, hand-offs


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
    if name not in _EDITOR_TOOLS and name not in _WRITE_TOOLS and name not in ACI_COMMANDS:
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
    text = step.tool_args or ""
    if args is not None and len(args) == 1 and isinstance(args.get("input"), str):
        # a DTOC context keeps arguments that are not JSON (a raw command line) as {"input": text}
        args, text = None, args["input"]
    if args is None:
        if lname in _WRITE_TOOLS and text.lstrip().startswith("*** Begin Patch"):
            return [], patch_paths(text, state)
        if lname in _EDITOR_TOOLS and text.strip() and not text.lstrip().startswith("str_replace_editor"):
            text = "str_replace_editor " + text
        m = re.fullmatch(r"\s*(\w+)\((.*)\)\s*", text, re.DOTALL)
        if m and (lname not in _SHELL_TOOLS) and m.group(1) not in ("echo",):
            fname = m.group(1)
            if fname.lower().startswith(READ_PREFIXES):
                return [_call_resource(fname, m.group(2).replace("'", '"'))], []
        if not text.strip():
            return [], []
        if lname and lname not in _SHELL_TOOLS and lname not in _EDITOR_TOOLS and lname not in ACI_COMMANDS:
            if lname.startswith(READ_PREFIXES):
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
    if isinstance(cmd, str) and (lname == "" or shell_like(lname)):
        return _shell(cmd, state)
    if shell_like(lname):
        line = shell_command(args)
        if line is not None:
            return _shell(line, state)
    # (absolute_path: Gemini CLI's read_file before file_path; dir_path: its grep_search, glob and ls)
    path = (
        args.get("file_path") or args.get("filePath") or args.get("path") or args.get("notebook_path")
        or args.get("absolute_path") or args.get("dir_path")
    )  # fmt: skip
    if lname in _READ_TOOLS and isinstance(path, str):
        off = args.get("offset")
        lim = args.get("limit")
        # OpenCode counts lines from 0, and so did Gemini CLI's read_file before its 1-based start_line
        # and end_line (2026-02), first beside an absolute_path, then a file_path
        # (google-gemini/gemini-cli, packages/core/src/tools/read-file.ts)
        gemini = lname == "read_file" and ("absolute_path" in args or "file_path" in args)
        zero_based = "filePath" in args or gemini
        start = None
        if isinstance(off, int):
            start = off + 1 if zero_based else max(1, off)
        end = None
        if isinstance(lim, int):
            end = (start or 1) + lim - 1
        first, last = args.get("start_line"), args.get("end_line")  # LiveEnv's read_file (1-based)
        if start is None and end is None and (type(first) is int or type(last) is int):
            start = max(1, first) if type(first) is int else None
            end = last if type(last) is int and last >= (start or 1) else None
        return [Resource("file", _norm_path(path), start=start, end=end)], []
    # (regex and file_pattern: Cline's search_files)
    if lname in _GREP_TOOLS and isinstance(
        args.get("pattern") or args.get("query") or args.get("regex"), str
    ):
        pattern = args.get("pattern") or args.get("query") or args.get("regex")
        scope = _norm_path(path) if isinstance(path, str) else "."
        extra = (
            args.get("glob") or args.get("include") or args.get("include_pattern") or args.get("type")
            or args.get("file_pattern")
        )  # fmt: skip
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
    "dir_path",
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
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _verb(name: str) -> str | None:
    """``read``, ``search`` or ``write`` from the first verb in a tool's name (``create_or_update_file``:
    write; ``search_method_in_file``: search; ``browser_navigate``: read), None when it names none."""
    base = base_tool_name(_HUMP.sub("_", name.split("__")[-1]))
    for word in base.split("_"):
        if word in WRITE_VERBS:
            return "write"
        if word in SEARCH_VERBS:
            return "search"
        if word in READ_VERBS:
            return "read"
    return None


#: Arguments in which a tool of several operations names the one a call does (one word: a command
#: line in a ``command`` argument is no operation's name).
_OPERATION_KEYS = ("operation", "command", "action")
_OPERATION = re.compile(r"[A-Za-z][\w-]*")


def _generic_resources(name: str, lname: str, args: dict) -> tuple[list[Resource], list[str]]:
    """Any other tool, from its arguments: the same tool with the same arguments reads the same resource
    (``call:NAME(ARGS)``); a path argument is also that file, a URL that page, so another tool reading
    or writing it agrees; a write-like operation or name (or an SQL statement that changes data)
    modifies them."""
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
    # a tool of several operations names the one it does in an argument (Trae's json_edit_tool
    # {"operation": "view"}, its ckg {"command": "search_function"}): that verb before the name's
    said = next((args[k] for k in _OPERATION_KEYS if isinstance(args.get(k), str)), "")
    kind = (_verb(said) if _OPERATION.fullmatch(said) else None) or _verb(name)
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
