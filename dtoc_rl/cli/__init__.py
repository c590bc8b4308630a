"""The ``dtoc-rl`` command line: one subcommand per module in this package.

Subcommand modules are imported lazily so ``dtoc-rl --help`` stays fast and a
broken optional dependency only affects the command that needs it.  This
package is the application layer: it may import ``dtoc_rl.envs`` and
``dtoc_rl.policies``; the core modules never do.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings
from typing import NoReturn

__all__ = ["main"]

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "replay": ("dtoc_rl.cli.replay", "drive the DTOC orchestrator over one logged trace"),
    "ingest": ("dtoc_rl.cli.ingest", "convert agent logs into a trajectory dataset"),
    "stats": ("dtoc_rl.cli.stats", "summarise an existing trajectory dataset"),
    "train": ("dtoc_rl.cli.train", "train a learned policy from logged trajectories"),
    "evaluate": ("dtoc_rl.cli.evaluate", "evaluate policies offline on logged trajectories"),
    "demo": ("dtoc_rl.cli.demo", "the main job: ingest, train, evaluate against baselines and the oracle"),
    "calibrate": ("dtoc_rl.cli.calibrate", "check need labels and the miss model against really masked logs"),
    "serve": ("dtoc_rl.cli.serve", "serve a policy over HTTP (POST /decide) for agents in any language"),
    "proxy": (
        "dtoc_rl.cli.proxy",
        "a policy in front of any agent: an OpenAI/Anthropic/Gemini-compatible proxy",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dtoc-rl",
        description="DTOC-RL: learn when an LLM agent should hide and restore its past tool outputs.",
    )
    from dtoc_rl import __version__

    parser.add_argument("--version", action="version", version=f"dtoc-rl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_module, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    parser.epilog = "Run 'dtoc-rl COMMAND --help' for a command's options."
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    from dtoc_rl.cli.common import warn

    warn(message, file)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Only import the chosen subcommand when one is named (fast --help per command).
    if argv and argv[0] in COMMANDS:
        with warnings.catch_warnings():  # the caller's way of showing warnings comes back after
            warnings.showwarning = _one_line_warning
            return _run(argv)
    # Top-level help lists commands without importing them.
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return main([args.command, *argv[1:]])


class _CommandParser(argparse.ArgumentParser):
    """A command's parser whose usage errors are short: the error, the nearest option to a mistyped
    one, and where the options are listed (argparse prints the whole usage block, dozens of lines
    for train, above the one line that matters)."""

    def error(self, message: str) -> NoReturn:
        import difflib

        hint = ""
        if message.startswith("unrecognized arguments:"):
            known = [o for o in self._option_string_actions if o.startswith("--")]
            for word in message.split(":", 1)[1].split():
                near = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.7)
                if word.startswith("-") and near:
                    hint = f" (did you mean {near[0]}?)"
                    break
        self.exit(2, f"{self.prog}: error: {message}{hint}; '{self.prog} --help' lists the options\n")


def _run(argv: list[str]) -> int:
    module = importlib.import_module(COMMANDS[argv[0]][0])
    p = _CommandParser(prog=f"dtoc-rl {argv[0]}", description=COMMANDS[argv[0]][1])
    module.add_arguments(p)
    args = p.parse_args(argv[1:])
    before = _on_sigterm_interrupt()
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        # the reader went away (`dtoc-rl ... --json | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the user knows why; a traceback would only hide the prompt
        from dtoc_rl.cli.common import INTERRUPTED

        print(f"dtoc-rl: {argv[0]} interrupted", file=sys.stderr)
        return INTERRUPTED
    except OSError as e:
        # a path that cannot be read or written (an output under a file, a missing mount, no
        # permission, a full disk) that no check of the command named: one line, no traceback
        where = f"{os.fsdecode(e.filename)}: " if e.filename else ""
        print(f"dtoc-rl: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _on_sigterm_interrupt():
    """Make SIGTERM (``timeout``, ``kill``, a scheduler ending a job) stop a command as Ctrl-C does, so
    that it cleans up as it does then (no half-written output left): the handler it replaced, or None
    when it left it alone (not the main thread, or a handler someone else set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:
        return None
    signal.signal(signal.SIGTERM, _interrupt)
    return before
