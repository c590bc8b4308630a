"""The layers of README's "Layout": every import in dtoc_rl, envs/ and policies/ points down, never up.

A module may import its own layer and the layers of lower rank, never a higher one (two layers of
one rank may not import each other either). Imports inside functions count too: a lazy import is
still a dependency. dtoc_rl below the CLI also never imports envs/ or policies/
(tests/test_packaging.py), so serve ranks above them without importing them.
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# import name -> folder, as pyproject's package-dir installs them
PACKAGE_DIRS = {"dtoc_rl": "dtoc_rl", "dtoc_rl.envs": "envs", "dtoc_rl.policies": "policies"}

RANK = {
    "util": 0,  # dtoc_rl.optional, .tracking, .plots, .provenance: helpers that import no other layer
    "core": 1,  # the root package dtoc_rl re-exports the core, so importing it counts as core
    "data": 2,
    "labels": 3,
    "ingest": 4,
    "sim": 5,
    "engine": 6,  # the observation carries the model's prices (engine.features -> sim.pricing)
    "envs": 7,
    "policies": 8,
    "serve": 9,
    "cli": 10,
}
TOP_LEVEL_HELPERS = {"optional", "tracking", "plots", "provenance"}

# Imports that break the layering today, each with why it is there. The test fails if one disappears
# (shrink this list) or a new one appears, so the list is always the exact set of exceptions.
KNOWN: set[str] = set()


def modules(root: Path) -> dict[str, Path]:
    """Every module under the package folders: dotted name -> file."""
    found = {}
    for name, folder in PACKAGE_DIRS.items():
        base = root / folder
        for py in base.rglob("*.py"):
            rel = py.relative_to(base)
            if any(part in ("tasks", "node_modules", "__pycache__") for part in rel.parts):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = py
    return found


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "dtoc_rl":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1] in TOP_LEVEL_HELPERS:
        return "util"
    return parts[1] if parts[1] in RANK else None


def imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported dtoc_rl module) for every import in the file, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for a in node.names:
                # `from dtoc_rl.sim import simulator` imports the module dtoc_rl.sim.simulator
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub if sub in known else target))
    return [(line, name) for line, name in out if name == "dtoc_rl" or name.startswith("dtoc_rl.")]


def violations(root: Path) -> dict[str, str]:
    """`file: imported module` -> the message, for every import that is not downwards."""
    found = modules(root)
    known = set(found)
    bad = {}
    for module, path in sorted(found.items()):
        own = layer_of(module)
        where = path.relative_to(root)
        if own is None:
            bad[f"{where}"] = f"{where}: {module} has no layer (put it in a layer's subpackage)"
            continue
        for line, target in imports(module, path, known):
            theirs = layer_of(target)
            if theirs is not None and theirs != own and RANK[theirs] >= RANK[own]:
                why = f"{own} imports {target} ({theirs}, above or beside it)"
                bad[f"{where}: {target}"] = f"{where}:{line}: {why}"
    return bad


def test_no_layer_imports_a_layer_above_it():
    bad = violations(REPO)
    new = [msg for key, msg in bad.items() if key not in KNOWN]
    assert not new, "\n".join(new)
    assert KNOWN <= set(bad), f"fixed, remove from KNOWN: {sorted(KNOWN - set(bad))}"


def test_the_check_finds_upward_side_and_unplaced_imports(tmp_path):
    def write(rel, text=""):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    for pkg in ("dtoc_rl", "dtoc_rl/core", "dtoc_rl/sim", "dtoc_rl/engine", "dtoc_rl/serve"):
        write(f"{pkg}/__init__.py")
    write("envs/__init__.py")
    write("dtoc_rl/serve/orchestrator.py", "from dtoc_rl.core import store\nfrom ..sim import pricing\n")
    write("dtoc_rl/core/store.py", "def f():\n    from dtoc_rl.serve import orchestrator\n")
    write("dtoc_rl/sim/pricing.py", "from dtoc_rl import plots\nfrom ..engine.features import X\n")
    write("dtoc_rl/engine/features.py", "import dtoc_rl\nfrom dtoc_rl.sim.pricing import Prices\n")
    write("dtoc_rl/plots.py")
    write("dtoc_rl/flat.py")
    write("envs/live.py", "from dtoc_rl.serve.orchestrator import O\nfrom dtoc_rl.sim import pricing\n")
    assert list(violations(tmp_path).values()) == [
        "dtoc_rl/core/store.py:2: core imports dtoc_rl.serve.orchestrator (serve, above or beside it)",
        "envs/live.py:1: envs imports dtoc_rl.serve.orchestrator (serve, above or beside it)",
        "dtoc_rl/flat.py: dtoc_rl.flat has no layer (put it in a layer's subpackage)",
        "dtoc_rl/sim/pricing.py:2: sim imports dtoc_rl.engine.features (engine, above or beside it)",
    ]
