"""One tool vocabulary: what a harness's tool call does, read by both the policy's features and the labeller.

Harnesses name their tools differently (``bash``, ``execute_bash``, ``Read``, ``read_file``,
``str_replace_editor``, ``mcp__filesystem__read_file``...).  This module maps each tool name to
what the call does (:data:`TOOL_KINDS`: a shell, a file editor, a file read, a search...), and
each shell command word to what the command does (:data:`COMMAND_KINDS`).  Two readers use it:

* the **tool category** a policy sees per stored output (:func:`tool_category`, an id into
  :data:`TOOL_CATEGORIES`), so one policy can serve harnesses whose tools are named differently;
* the **need labeller's resource rules** (:mod:`dtoc_rl.labels.calls` and the shell parser
  :mod:`dtoc_rl.labels.shell`), which turn the same call into the files and searches it reads
  and writes.

Both read the same tables, so a tool the labeller treats as a file read is a ``read`` for the
policy, and a name added here reaches both.
"""

from __future__ import annotations

import json
import re
import shlex

from dtoc_rl.labels.shell_words import shell_tokens

__all__ = [
    "ACI_COMMANDS",
    "COMMAND_KINDS",
    "READ_PREFIXES",
    "TOOL_CATEGORIES",
    "TOOL_KINDS",
    "WRITE_PREFIXES",
    "base_tool_name",
    "command_category",
    "shell_command",
    "tool_category",
    "tool_category_id",
    "tool_kind",
]

#: The categories a policy sees, by id.  Checkpoints hold these ids: only ever append.
TOOL_CATEGORIES: tuple[str, ...] = (
    "none", "read", "list", "search", "edit", "run", "test", "api_read", "api_write", "submit", "think",
    "other",
)  # fmt: skip

# --------------------------------------------------------------------------------------------
# Tools, by name (lower snake case, without the MCP server: base_tool_name)
# --------------------------------------------------------------------------------------------

#: Tool name -> what the call does.  The kinds, with the labeller's rule for each:
#:
#: ``shell``   its ``command``/``cmd`` argument (or its text) is a shell command line
#:             (:mod:`dtoc_rl.labels.shell`);
#: ``editor``  a file editor: ``command`` is view, create, str_replace or insert, on ``path``;
#: ``read``    reads the file ``path`` (lines ``offset``.. ``offset+limit``);
#: ``grep``    searches file contents for ``pattern`` (or ``query``) under ``path``;
#: ``glob``    finds files by a name ``pattern`` under ``path``;
#: ``list``    lists the folder ``path``;
#: ``write``   writes the file ``path`` whole (a create or overwrite);
#: ``edit``    edits the file ``path`` in place by matching its current text, so it needs a read;
#: ``none``    reads and changes nothing outside the conversation (thoughts, plans, answers).
#:
#: A tool not named here is read from its arguments (:func:`dtoc_rl.labels.calls.generic_resources`).
_TOOLS_BY_KIND: dict[str, tuple[str, ...]] = {
    "shell": (
        "bash", "sh", "shell", "execute_bash", "executebash", "executebashaction", "terminal",
        "run_shell_command", "execute_command", "run_command", "local_shell", "cmd", "command", "run", "exec",
        "exec_command", "bash_command",
    ),
    "editor": ("str_replace_editor", "file_editor", "str_replace_based_edit_tool", "text_editor", "editor"),
    "read": ("read", "read_file", "view_file", "readfile", "view", "cat", "open_file"),
    "grep": (
        "grep", "search", "rg", "ripgrep", "search_files", "grep_search", "codebase_search",
        "search_file_content",
    ),
    "glob": ("glob", "find", "file_search", "find_files"),
    "list": ("ls", "list", "list_dir", "list_directory", "list_files"),
    "write": (
        "write", "create", "notebookedit", "write_file", "create_file", "apply_patch", "patch", "delete_file",
        "write_to_file", "new_rule",  # Cline's
    ),
    "edit": (
        "edit", "multiedit", "edit_file", "replace", "str_replace", "insert",
        "replace_in_file", "apply_diff", "insert_content", "search_and_replace",  # Cline's and Roo Code's
    ),
    "none": (
        "think", "submit", "finish", "done", "final_answer", "answer", "respond", "reply", "todowrite",
        "todoread", "todo_write", "todo_read", "task", "plan", "exit", "stop", "issue", "manage_context",
        "attempt_completion", "ask_followup_question", "send_message_to_user", "update_plan",
        "mark_task_complete",
        # Gemini CLI's (packages/core/src/tools/definitions/base-declarations.ts)
        "write_todos", "complete_task", "enter_plan_mode", "exit_plan_mode", "update_topic",
        # Cline's and Roo Code's (cline/cline src/core/prompts; RooCodeInc/Roo-Code src/shared/tools.ts)
        "plan_mode_respond", "new_task", "switch_mode", "fetch_instructions", "load_mcp_documentation",
        "condense", "summarize_task", "report_bug", "update_todo_list",
        # Trae Agent's (bytedance/trae-agent trae_agent/tools) and the OpenHands SDK's task list
        "task_done", "sequentialthinking", "task_tracker",
        # the Continue CLI's task list and question to the user
        "checklist", "askquestion",
    ),
}  # fmt: skip
TOOL_KINDS: dict[str, str] = {name: kind for kind, names in _TOOLS_BY_KIND.items() for name in names}

#: The category of each kind of tool (a shell's comes from its command: :func:`command_category`).
KIND_CATEGORIES: dict[str, str] = {
    "editor": "edit", "read": "read", "grep": "search", "glob": "list", "list": "list", "write": "edit",
    "edit": "edit", "none": "other",
}  # fmt: skip

#: Categories of tools the labeller reads from their arguments (or, for ACI commands, from their
#: command line), and of ``none`` tools that are a thought or a final answer.
NAMED_CATEGORIES: dict[str, str] = {
    # SWE-agent's ACI (as tool names; as command words see ACI_COMMANDS)
    "open": "read", "goto": "read", "scroll_down": "read", "scroll_up": "read", "find_file": "list",
    "search_dir": "search", "search_file": "search",
    # Claude Code, MCP filesystem server, web tools
    "notebookread": "read", "webfetch": "read", "read_text_file": "read", "read_multiple_files": "read",
    "directory_tree": "list", "websearch": "search",
    # Cline: the definitions of a folder's files
    "list_code_definition_names": "list",
    # AutoCodeRover
    "search_code": "search", "search_class": "search", "search_method": "search",
    "search_method_in_file": "search", "search_method_in_class": "search", "search_class_in_file": "search",
    "search_code_in_file": "search", "search_for_bug_location": "search",
    # none-kind tools that end the episode or are the agent's own notes
    "submit": "submit", "finish": "submit", "think": "think", "todowrite": "think",
    # Gemini CLI's: its task list, the end of a subagent's task, its own reads and web tools
    "write_todos": "think", "complete_task": "submit", "read_many_files": "read", "web_fetch": "read",
    "google_web_search": "search",
    # Trae Agent's end of the task and its thinking tool; the OpenHands SDK's task list
    "task_done": "submit", "sequentialthinking": "think", "task_tracker": "think", "checklist": "think",
    # tau-bench's calculator; a code interpreter (its code is not a shell command)
    "calculate": "api_read", "python": "run",
}  # fmt: skip

#: SWE-agent 0.x ACI commands: command words a harness runs for the agent, parsed with their output
#: (the open file's window), as command lines or as tool names.  ``str_replace_editor`` is also a
#: command word there (SWE-agent 1.x).
ACI_COMMANDS: frozenset[str] = frozenset(
    {"open", "goto", "scroll_down", "scroll_up", "search_file", "search_dir", "find_file", "create", "edit",
     "submit"}
)  # fmt: skip
_ACI_CATEGORIES = {"create": "edit", "edit": "edit", "str_replace_editor": "edit"}

# Function-calling tools (tau-bench, MCP servers) name their effect with a verb.  A name that starts
# with one of READ_PREFIXES reads (``get_user_details``); with one of WRITE_PREFIXES it changes state.
READ_PREFIXES: tuple[str, ...] = (
    "get", "search", "list", "find", "read", "view", "fetch", "lookup", "show", "query", "check",
)  # fmt: skip
WRITE_PREFIXES: tuple[str, ...] = (
    "book", "cancel", "update", "modify", "exchange", "return", "send", "create", "delete", "remove", "set",
    "add", "write", "edit", "insert", "post", "put", "patch", "transfer",
)  # fmt: skip
# Verbs anywhere in a tool's name (the first one found decides): see dtoc_rl.labels.calls.verb.
WRITE_VERBS: frozenset[str] = frozenset({
    *WRITE_PREFIXES, "upload", "push", "merge", "commit", "move", "rename", "append", "replace", "click",
    "type", "fill", "press", "drag", "hover", "select", "upsert", "save", "store", "put", "run_migration",
})  # fmt: skip
READ_VERBS: frozenset[str] = frozenset({
    *READ_PREFIXES, "navigate", "open", "snapshot", "screenshot", "download", "retrieve", "browse",
    "inspect", "describe", "count", "cat", "head", "tail", "stat", "info", "load", "scrape", "crawl",
})  # fmt: skip
SEARCH_VERBS: frozenset[str] = frozenset(
    {"search", "find", "grep", "query", "lookup", "count", "list", "check", "filter", "match"}
)
_API_READ = tuple(p + "_" for p in READ_PREFIXES)
_API_WRITE = tuple(p + "_" for p in WRITE_PREFIXES)

# --------------------------------------------------------------------------------------------
# Shell command words (the first word of a command, after sudo/timeout/VAR=x)
# --------------------------------------------------------------------------------------------

#: Command word -> what the command does: ``read`` (prints a file or its lines), ``search``
#: (searches contents), ``list`` (lists or finds files), ``write`` (only changes files), ``nav``
#: (changes the shell's state, reads nothing).  Any other word runs something (``run``).
#: The shell parser has one handler per word (:data:`dtoc_rl.labels.shell.COMMANDS`).
_COMMANDS_BY_KIND: dict[str, tuple[str, ...]] = {
    "read": ("cat", "nl", "less", "more", "bat", "batcat", "awk", "gawk", "head", "tail", "sed"),
    "search": ("grep", "egrep", "fgrep", "rg", "ag", "ack"),
    "list": ("find", "ls", "tree", "dir"),
    "write": (
        "rm",
        "mv",
        "cp",
        "touch",
        "mkdir",
        "rmdir",
        "tee",
        "ln",
        "chmod",
        "truncate",
        "dd",
        "patch",
        "apply_patch",
    ),
    "nav": ("cd", "pushd", "popd", "export", "source", ".", "set", "unset", "true", "false", "clear", ":"),
}
COMMAND_KINDS: dict[str, str] = {name: kind for kind, names in _COMMANDS_BY_KIND.items() for name in names}
#: Prefixes that run the command after them (``sudo cat f`` reads ``f``).
WRAPPERS: frozenset[str] = frozenset(
    {"sudo", "time", "nohup", "env", "command", "builtin", "exec", "stdbuf", "xargs"}
)
_CATEGORY_OF_COMMAND = {"read": "read", "search": "search", "list": "list", "write": "edit", "nav": "run"}
_SED_INPLACE = re.compile(r"sed\s+(?:-[^\s|;&]*\s+)*?(?:-\w*i|--in-place)")
# cat <<EOF > f, echo x >> f: the command line writes a file (the heredoc body may say anything)
_WRITES_FILE = re.compile(r"(?:cat|echo|printf)\b[^\n|;&>]*?(?<![0-9&])>>?\s*(?!/dev/null|&)[^\s&;|]")
_TEST_RE = re.compile(r"\b(pytest|tox|unittest|mvn test|gradle test|npm test|go test|cargo test|runtests)\b")


def words(table: dict[str, str], kind: str) -> frozenset[str]:
    """The names in ``table`` (TOOL_KINDS or COMMAND_KINDS) of one kind."""
    return frozenset(k for k, v in table.items() if v == kind)


def base_tool_name(name: str | None) -> str:
    """A tool's own name, lower snake case, without the MCP server it came through.

    ``mcp__filesystem__read_file`` (Claude Code), ``developer__shell`` (Goose's extensions),
    ``filesystem.read_file``, ``github/get_file_contents`` and ``read-file`` name the tools
    ``read_file``, ``shell`` and ``get_file_contents``: harnesses prefix tools with their server.
    CamelCase is only lowered (``NotebookEdit`` stays ``notebookedit``).
    """
    if not name:
        return ""
    n = name.strip()
    if "__" in n.strip("_"):
        n = n.split("__")[-1]
    n = re.split(r"[./:]", n)[-1]
    return re.sub(r"[-\s]+", "_", n).lower()


def shell_like(lname: str) -> bool:
    """Whether a tool (by its base name) runs shell commands: a ``shell`` kind, or any name with
    ``bash`` or ``shell`` in it (``ExecuteBashTool``, ``run_in_shell``)."""
    return TOOL_KINDS.get(lname) == "shell" or "bash" in lname or "shell" in lname


def tool_kind(name: str | None) -> str | None:
    """What a tool call does, by its name (a :data:`TOOL_KINDS` value), or None for a tool read from
    its arguments."""
    return TOOL_KINDS.get(base_tool_name(name)) if name else None


#: Where a shell tool's JSON arguments hold its command line (``input``: a DTOC context keeps
#: arguments that are not JSON, as mini-swe-agent's raw command text, as ``{"input": text}``;
#: ``keystrokes``: Terminus 2's ``bash_command`` types them into a terminal).
COMMAND_KEYS: tuple[str, ...] = ("command", "cmd", "code", "input", "keystrokes")


def shell_command(args: dict) -> str | None:
    """A shell tool's command line, from its JSON arguments (None when they hold none).  A command
    given as an argv list (Codex CLI's ``["bash", "-lc", "pytest -q"]``) is the script a shell runs,
    or else the words joined as a shell would read them."""
    for k in COMMAND_KEYS:
        v = args.get(k)
        if isinstance(v, str):
            return v
        if isinstance(v, list) and v and all(isinstance(w, str) for w in v):
            script = shell_script(v)
            return script if script is not None else shlex.join(v)
    return None


_SHELLS = frozenset(("bash", "sh", "zsh", "dash", "ksh"))


def _script_at(argv: list[str]) -> int | None:
    # where the script of `bash -lc SCRIPT` is in argv (any of _SHELLS, options up to -c, -lc, -ic, ...)
    if len(argv) < 3 or argv[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    for j, opt in enumerate(argv[1:-1], 1):
        if opt.startswith("--"):
            continue
        if not opt.startswith("-"):
            return None
        if opt.endswith("c"):
            return j + 1
    return None


def shell_script(argv: list[str]) -> str | None:
    """The script of a shell run as ``bash -lc SCRIPT`` (any of :data:`_SHELLS`, its options up to
    ``-c``, ``-lc``, ``-ic``, ...), as an argv list; None for any other command."""
    at = _script_at(argv)
    return None if at is None else argv[at]


def unwrap_shell(cmd: str) -> str:
    """The script of a command line that only runs a shell on one (``bash -lc 'cat a.py'``, as Codex
    and other harnesses write every command), else the line itself: what the labeller parses and the
    policy's tool category reads.  Anything after the script (a redirection, another command) keeps
    the line whole."""
    line = cmd.strip()
    if not line.startswith((*_SHELLS, "/")):  # cheap: most lines run no shell
        return cmd
    argv = shell_tokens(line)
    at = _script_at(argv)
    return argv[at] if at is not None and at == len(argv) - 1 else cmd


def _command(args: str) -> str:
    try:
        obj = json.loads(args)
    except (ValueError, TypeError):
        return args
    if isinstance(obj, dict):
        line = shell_command(obj)
        if line is not None:
            return line
    return args if isinstance(args, str) else ""


def command_category(cmd: str) -> str:
    """Category of a shell command line: a test run, else by its first word (:data:`COMMAND_KINDS`,
    an ACI command), else ``run``."""
    cmd = unwrap_shell(cmd.strip()).strip()
    if _TEST_RE.search(cmd):
        return "test"
    first = cmd.split(None, 1)[0] if cmd else ""
    kind = COMMAND_KINDS.get(first)
    if (first == "sed" and _SED_INPLACE.match(cmd)) or _WRITES_FILE.match(cmd):
        return "edit"
    if kind is not None and kind != "nav":
        return _CATEGORY_OF_COMMAND[kind]
    if cmd.startswith("git grep"):
        return "search"
    if first in ACI_COMMANDS or first == "str_replace_editor":
        if first == "str_replace_editor":
            return "read" if cmd.split()[1:2] == ["view"] else "edit"
        return _ACI_CATEGORIES.get(first) or NAMED_CATEGORIES[first]
    if "cat >" in cmd or "<<" in cmd:
        return "edit"
    return "run"


def tool_category(name: str | None, args: str = "") -> str:
    """Category of one tool call (by tool name, then by shell command or the name's verb)."""
    if not name:
        return "none"
    n = name.lower()
    if n not in TOOL_KINDS and n not in NAMED_CATEGORIES:
        n = base_tool_name(name)
    if n in NAMED_CATEGORIES:
        return NAMED_CATEGORIES[n]
    kind = TOOL_KINDS.get(n)
    if kind == "editor":
        return "read" if '"view"' in args else "edit"
    if shell_like(n):
        return command_category(_command(args))
    if kind is not None:
        return KIND_CATEGORIES[kind]
    if n.startswith(_API_READ):
        return "api_read"
    if n.startswith(_API_WRITE):
        return "api_write"
    return "other"


def tool_category_id(name: str | None, args: str = "") -> int:
    return TOOL_CATEGORIES.index(tool_category(name, args))
