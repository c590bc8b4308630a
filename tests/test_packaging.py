"""The package layout promised in the README: one namespace, no stray top-level packages."""

import ast
import importlib.util
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    on_disk = set()
    for name, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if any(part in ("tasks", "node_modules") or part.startswith(".") for part in rel.parts):
                continue  # task repositories shipped as data are not packages
            on_disk.add(".".join([name, *rel.parts]) if rel.parts else name)
    # a sub-mapping (dtoc_rl.envs) also shows up under dtoc_rl only if a folder of that name exists
    assert on_disk == listed


def test_namespace_imports():
    import dtoc_rl.envs
    import dtoc_rl.policies

    assert Path(dtoc_rl.envs.__file__).parent.name == "envs"
    assert Path(dtoc_rl.policies.__file__).parent.name == "policies"


def test_no_top_level_envs_or_policies_installed():
    for name in ("envs", "policies"):
        spec = importlib.util.find_spec(name)
        # Only the repo's own folder (cwd on sys.path) may answer, never site-packages.
        assert spec is None or "site-packages" not in str(spec.origin), spec


def test_core_never_imports_envs_policies_or_scripts():
    offenders = []
    for py in (REPO / "dtoc_rl").rglob("*.py"):
        if "cli" in py.relative_to(REPO / "dtoc_rl").parts:
            continue  # the CLI is the application layer
        for node in ast.walk(ast.parse(py.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("envs", "policies", "scripts") or n.startswith(
                    ("dtoc_rl.envs", "dtoc_rl.policies")
                ):
                    offenders.append(f"{py.relative_to(REPO)}: {n}")
    assert not offenders
