"""The agent CLIs the integration tests drive for real, installed at the versions they were checked with.

    python -m scripts.real_clis --dir ~/.cache/dtoc-clis          # npm install, then print the exports
    python -m scripts.real_clis --dir ~/.cache/dtoc-clis --run    # ... and run tests/integrations with them

`tests/integrations/` runs Claude Code, Codex, the Gemini CLI, Cline, Qwen Code, pi and OpenCode
through `dtoc-rl proxy` (or the OpenCode plugin) against a scripted API, and is skipped for each CLI
whose binary is not named in its environment variable (CLAUDE_BIN, ...). This puts them in one folder
(about 2 GB, 1-2 minutes from the npm registry; a folder that holds them already is used as it is) and
names them. The versions are the ones the tests and the fixtures were made with: a newer CLI may send
its requests differently, which is what the tests are there to notice, so --latest installs the newest
instead, to try. The suite itself (`python -m pytest`) does not install them: CI stays offline and
within its five minutes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cli:
    env: str  # the variable tests/integrations reads
    package: str
    version: str
    binary: str  # under node_modules/.bin


CLIS = (
    Cli("CLAUDE_BIN", "@anthropic-ai/claude-code", "2.1.332", "claude"),
    Cli("CODEX_BIN", "@openai/codex", "0.171.0", "codex"),
    Cli("GEMINI_BIN", "@google/gemini-cli", "0.61.0", "gemini"),
    Cli("CLINE_BIN", "cline", "3.0.65", "cline"),
    Cli("QWEN_BIN", "@qwen-code/qwen-code", "0.24.4", "qwen"),
    Cli("PI_BIN", "@mariozechner/pi-coding-agent", "0.73.1", "pi"),
    Cli("OPENCODE_BIN", "opencode-ai", "1.18.33", "opencode"),
)


def installed(folder: Path, clis=CLIS) -> dict[str, str]:
    """The environment variables of the CLIs whose binaries ``folder`` holds."""
    out = {}
    for c in clis:
        path = folder / "node_modules" / ".bin" / c.binary
        if path.is_file() and os.access(path, os.X_OK):
            out[c.env] = str(path.absolute())
    return out


def install(folder: Path, clis=CLIS, latest: bool = False) -> None:
    """npm install the CLIs into ``folder`` (its own package.json); raises SystemExit with one line."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("real_clis: npm is not installed (Node.js 20 or later brings it)")
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "package.json").is_file():
        (folder / "package.json").write_text('{"name": "dtoc-real-clis", "private": true}\n')
    specs = [c.package if latest else f"{c.package}@{c.version}" for c in clis]
    cmd = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), *specs]
    print("real_clis: " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"real_clis: npm install failed ({done.returncode}): {last}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.real_clis",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", type=Path, required=True, help="the folder to install the CLIs into")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="ENV",
        choices=[c.env for c in CLIS],
        help="these CLIs only, by their variables (default: all seven)",
    )
    p.add_argument("--latest", action="store_true", help="the newest versions instead of the checked ones")
    p.add_argument("--no-install", action="store_true", help="install nothing: use what --dir holds")
    p.add_argument("--run", action="store_true", help="then run pytest tests/integrations with them")
    p.add_argument("--json", action="store_true", help="print the variables as one JSON object")
    args = p.parse_args(argv)
    clis = [c for c in CLIS if not args.only or c.env in args.only]
    have = installed(args.dir, clis)
    if not args.no_install and (args.latest or len(have) < len(clis)):
        install(args.dir, clis, args.latest)
        have = installed(args.dir, clis)
    missing = [c.env for c in clis if c.env not in have]
    if missing:
        print(
            f"real_clis: not in {args.dir}: {', '.join(missing)} (their tests are skipped)", file=sys.stderr
        )
    if args.json:
        print(json.dumps(have))
    else:
        for k, v in have.items():
            print(f"export {k}={v}")
    if not args.run:
        return 0 if have else 1
    tests = Path(__file__).resolve().parents[1] / "tests" / "integrations"
    return subprocess.call([sys.executable, "-m", "pytest", "-q", str(tests)], env={**os.environ, **have})


if __name__ == "__main__":
    sys.exit(main())
