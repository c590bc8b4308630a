"""Every ``dtoc-rl COMMAND --flag`` the README, the docs and the docstrings show exists.

A reader copies these lines; a command or flag renamed in the code and not in the text fails here
rather than in the reader's shell.  (docs/results.md is left out while it is being rewritten.)
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from dtoc_rl.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
SKIP = {ROOT / "docs" / "results.md"}
_SPAN = re.compile(r"``?([^`\n]+)``?")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_CALL = re.compile(r"(?<![\w/-])dtoc-rl ([a-z][\w-]*)(.*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def _texts() -> list[Path]:
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("integrations/*/*.md")),
    ]
    for pkg in ("dtoc_rl", "envs", "policies", "scripts"):
        files += sorted((ROOT / pkg).rglob("*.py"))
    return [f for f in files if f not in SKIP]


def _commands(path: Path) -> list[tuple[int, str]]:
    """(line, text from ``dtoc-rl`` on) of every command shown as code in ``path``."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in _FENCE.finditer(text) if path.suffix == ".md" else ():
        block = m.group(1).replace("\\\n", " ")  # continued lines are one command
        line0 = text.count("\n", 0, m.start(1)) + 1
        for k, line in enumerate(block.splitlines()):
            found += [(line0 + k, c.group(0)) for c in _CALL.finditer(line)]
    prose = _FENCE.sub(lambda b: "\n" * b.group(0).count("\n"), text) if path.suffix == ".md" else text
    for m in _SPAN.finditer(prose):
        line = prose.count("\n", 0, m.start()) + 1
        found += [(line, c.group(0)) for c in _CALL.finditer(m.group(1))]
    return sorted(found)


def _options(command: str) -> set[str]:
    p = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(p)
    return {o for a in p._actions for o in a.option_strings}


def _problems(path: Path, root: Path = ROOT) -> list[str]:
    out = []
    for line, shown in _commands(path):
        cmd, rest = _CALL.match(shown).groups()
        where = f"{path.relative_to(root)}:{line}: {shown.strip()[:80]!r}"
        if cmd not in COMMANDS:
            out.append(f"{where}: no command {cmd!r}")
            continue
        rest = re.split(r"\s(?:#|\||;|&&)", rest)[0]  # a comment or the next command ends it
        out += [f"{where}: {cmd} has no {flag}" for flag in _FLAG.findall(rest) if flag not in _options(cmd)]
    return out


def test_the_scan_finds_wrong_commands_and_flags(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "Run `dtoc-rl ingest LOGS -o OUT --workers 2` then `dtoc-rl billcheck DATA`.\n\n"
        "```bash\ndtoc-rl evaluate -p oracle \\\n    --no-such-flag   # --comment-flag\n```\n"
    )
    problems = _problems(doc, tmp_path)
    assert len(problems) == 2, problems
    assert "no command 'billcheck'" in problems[0] and "x.md:1" in problems[0]
    assert "evaluate has no --no-such-flag" in problems[1] and "x.md:4" in problems[1]


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shown_commands_and_flags_exist(path):
    assert not _problems(path)


def test_the_schema_names_every_ingesters_source():
    # the `source` row of docs/schema.md lists what a trajectory's source can be; an ingester added
    # without it there leaves a reader unable to filter its runs (`--source`)
    from dtoc_rl.ingest import INGESTERS

    row = next(
        x for x in (ROOT / "docs" / "schema.md").read_text().splitlines() if x.startswith("| `source` |")
    )
    named = set(re.findall(r"`([\w.-]+)`", row))
    # SWE-agent's trajectories take their version as source (swe-agent-0.x, swe-agent-1.x)
    missing = [i.name for i in INGESTERS if i.name not in named and i.name != "swe-agent"]
    assert not missing, f"docs/schema.md's source row lacks {missing}"
    assert {"swe-agent-0.x", "swe-agent-1.x"} <= named
