"""Tool categories: many harness tool names → a small fixed vocabulary.

Policies see a tool category id per stored output.  Categories are by what
the call does (read a file, search, edit, run tests...), so one policy can
serve harnesses whose tools are named differently.
"""

from __future__ import annotations

import json
import re

__all__ = ["TOOL_CATEGORIES", "base_tool_name", "tool_category", "tool_category_id"]

TOOL_CATEGORIES: tuple[str, ...] = (
    "none", "read", "list", "search", "edit", "run", "test", "api_read", "api_write", "submit", "think",
    "other",
)  # fmt: skip

_BY_NAME = {
    "read": "read", "view": "read", "open": "read", "goto": "read", "scroll_down": "read",
    "scroll_up": "read", "cat": "read", "notebookread": "read", "webfetch": "read",
    "ls": "list", "glob": "list", "list": "list", "find_file": "list", "list_files": "list",
    "grep": "search", "search_dir": "search", "search_file": "search", "search_code": "search",
    "search_class": "search", "search_method": "search", "search_method_in_file": "search",
    "search_method_in_class": "search", "search_class_in_file": "search", "search_code_in_file": "search",
    "search_for_bug_location": "search", "websearch": "search", "codebase_search": "search",
    "edit": "edit", "write": "edit", "create": "edit", "multiedit": "edit", "notebookedit": "edit",
    "str_replace_editor": "edit", "file_editor": "edit", "apply_patch": "edit", "patch": "edit",
    "submit": "submit", "finish": "submit", "think": "think", "todowrite": "think", "task": "other",
    # LiveEnv's own tools and the MCP filesystem server's
    "read_file": "read", "read_text_file": "read", "read_multiple_files": "read", "readfile": "read",
    "write_file": "edit", "edit_file": "edit", "create_file": "edit", "str_replace": "edit",
    "list_directory": "list", "directory_tree": "list", "list_dir": "list", "search_files": "search",
}  # fmt: skip
_READ_CMDS = {"cat", "head", "tail", "sed", "nl", "less", "more", "view"}
_LIST_CMDS = {"ls", "find", "tree"}
_SEARCH_CMDS = {"grep", "rg", "ag", "git grep", "ack"}
_TEST_RE = re.compile(r"\b(pytest|tox|unittest|mvn test|gradle test|npm test|go test|cargo test|runtests)\b")
_RUN = {"bash", "execute_bash", "executebashaction", "run", "shell", "terminal", "cmd", "python", "exec"}


def base_tool_name(name: str | None) -> str:
    """A tool's own name, lower snake case, without the MCP server it came through.

    ``mcp__filesystem__read_file`` (Claude Code), ``filesystem.read_file``, ``github/get_file_contents``
    and ``read-file`` name the tools ``read_file`` and ``get_file_contents``: harnesses prefix tools
    with their server.  CamelCase is only lowered (``NotebookEdit`` stays ``notebookedit``).
    """
    if not name:
        return ""
    n = name.strip()
    if n.startswith("mcp__"):
        n = n.split("__")[-1]
    n = re.split(r"[./:]", n)[-1]
    return re.sub(r"[-\s]+", "_", n).lower()


def _command(args: str) -> str:
    try:
        obj = json.loads(args)
    except (ValueError, TypeError):
        return args
    if isinstance(obj, dict):
        for k in ("command", "cmd", "code", "input"):
            if isinstance(obj.get(k), str):
                return obj[k]
    return args if isinstance(args, str) else ""


def tool_category(name: str | None, args: str = "") -> str:
    """Category of one tool call (by tool name, then by shell command)."""
    if not name:
        return "none"
    n = name.lower()
    if n not in _BY_NAME:
        n = base_tool_name(name)
    if n in ("str_replace_editor", "file_editor"):
        return "read" if '"view"' in args else "edit"
    if n in _BY_NAME:
        return _BY_NAME[n]
    if n in _RUN or n.endswith("bash"):
        cmd = _command(args).strip()
        if _TEST_RE.search(cmd):
            return "test"
        first = cmd.split(None, 1)[0] if cmd else ""
        if first in _READ_CMDS and " -i" not in cmd:
            return "read"
        if first in _LIST_CMDS:
            return "list"
        if first in _SEARCH_CMDS or cmd.startswith("git grep"):
            return "search"
        if first in ("sed", "patch") or "cat >" in cmd or "<<" in cmd:
            return "edit"
        return "run"
    if n.startswith(("get_", "search_", "list_", "find_", "calculate")):
        return "api_read"
    if n.startswith(("update_", "book_", "cancel_", "send_", "transfer_", "create_", "modify_", "exchange_")):
        return "api_write"
    return "other"


def tool_category_id(name: str | None, args: str = "") -> int:
    return TOOL_CATEGORIES.index(tool_category(name, args))
