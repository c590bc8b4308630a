"""Small helpers shared by the subcommands: JSON output and error exits."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from dtoc_rl.data.paths import write_text_atomic  # the commands' outputs are written through it

__all__ = ["INTERRUPTED", "CLIError", "at_least", "emit_json", "fail", "number_in", "write_text_atomic"]

#: A command's exit status when the user stops it with Ctrl-C (the shell's 128 + SIGINT).
INTERRUPTED = 130


class CLIError(Exception):
    """An error the user can fix; printed without a traceback, exit code 2."""


def finite_json(obj: Any) -> Any:
    """``obj`` with NaN and infinities as null: strict JSON has no such numbers, and ``--json`` output is
    read by other tools (jq, JSON.parse) that refuse Python's ``NaN``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if hasattr(obj, "dtype") and getattr(obj, "shape", None) == ():  # numpy scalars
        return finite_json(obj.item())
    return obj


def emit_json(obj: Any) -> None:
    json.dump(finite_json(obj), sys.stdout, indent=2, default=str, allow_nan=False)
    sys.stdout.write("\n")


def warn(message: str, file: Any = None) -> None:
    """A warning for the user on one line of stderr: what happened, not the line of code that said it."""
    text = " ".join(str(message).split())
    print(f"dtoc-rl: warning: {text}", file=file or sys.stderr)


def note_unkept_shares(dataset: Any) -> None:
    """Say on stderr when a dataset folder's runs lack the outputs' own shares the labeller keeps
    (ingested before schema 1.4): every replay then computes them, about half of an evaluation's
    time.  Said, not fixed: the logs are re-ingested to keep them.  Silent where it cannot tell."""
    from dtoc_rl.data.dataset import DatasetError, dataset_columns

    if dataset is None:
        return
    try:
        digests = dataset_columns(dataset, ["unique_digest"])["unique_digest"]
    except DatasetError:  # no such column (an older dataset), or one the command will say is broken
        try:
            digests = [None] * len(dataset_columns(dataset, ["traj_id"])["traj_id"])
        except (DatasetError, OSError):
            return
    except OSError:
        return
    missing = sum(d is None for d in digests)
    if missing:
        print(
            f"dtoc-rl: note: {missing} of {len(digests)} runs of {dataset} were ingested without their "
            "outputs' own shares (before dtoc-rl's schema 1.4, or without labels): each replay computes "
            "them; `dtoc-rl ingest LOGS -o NEW` again keeps them, and replays are faster",
            file=sys.stderr,
        )


def fail(message: str, code: int = 2) -> int:
    print(f"dtoc-rl: error: {message}", file=sys.stderr)
    return code


def at_least(low: int, high: int | None = None):
    """An argparse ``type`` for an integer option of at least ``low`` (and at most ``high``): another
    is refused when the command line is read, before any work, not after it."""
    if high is not None and high < low:
        raise ValueError(f"at_least: high {high} is below low {low}")

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if n < low or (high is not None and n > high):
            span = f"at least {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {n}")
        return n

    parse.__name__ = f"integer >= {low}" if high is None else f"integer in {low}..{high}"
    return parse


def number_in(low: float, high: float, *, open_low: bool = False, open_high: bool = False):
    """An argparse ``type`` for a number within ``low``..``high`` (each end closed unless ``open_*``);
    NaN and anything else are refused when the command line is read."""
    span = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not ((x > low if open_low else x >= low) and (x < high if open_high else x <= high)):
            raise argparse.ArgumentTypeError(f"must be in {span}, got {text}")
        return x

    parse.__name__ = f"number in {span}"
    return parse


def serve_until_stopped(server) -> None:
    """Run an HTTP server until Ctrl-C or SIGTERM (which leaves ``serve_forever`` as Ctrl-C does),
    then close it; the process collects garbage at :data:`GC_THRESHOLDS` meanwhile."""
    import gc
    import signal

    from dtoc_rl.serve.orchestrator import GC_THRESHOLDS

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        gc.set_threshold(*old)  # a caller in the same process (a test, a notebook) keeps its own
        server.server_close()


def price_option(source: str | None) -> dict | None:
    """The user's price table a ``--prices FILE|JSON`` option names (None without one); a bad one is a
    one-line CLIError naming the entry."""
    if not source:
        return None
    from dtoc_rl.sim.pricing import load_price_table

    try:
        return load_price_table(source)
    except ValueError as e:
        raise CLIError(f"--prices: {e}") from None
