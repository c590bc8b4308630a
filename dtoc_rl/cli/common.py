"""Small helpers shared by the subcommands: JSON output and error exits."""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["CLIError", "emit_json", "fail"]


class CLIError(Exception):
    """An error the user can fix; printed without a traceback, exit code 2."""


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def fail(message: str, code: int = 2) -> int:
    print(f"dtoc-rl: error: {message}", file=sys.stderr)
    return code
