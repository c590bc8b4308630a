from __future__ import annotations

import os
import subprocess
from importlib import metadata

import numpy as np
import pytest
import torch

from dtoc_rl import provenance
from dtoc_rl.provenance import environment, source_commit

# a user's global git settings (a signing key, hooks) must not reach the test repositories
_GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo, *args) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=_GIT_ENV
    )
    return done.stdout.strip()


def test_environment_names_the_installed_versions_and_the_machine():
    env = environment()
    assert env["torch"] == torch.__version__ and env["numpy"] == np.__version__
    assert env["dtoc-rl"] == metadata.version("dtoc-rl") != "missing"
    assert env["python"].count(".") == 2 and env["cpus"] == os.cpu_count() and env["cpu"]
    assert env["torch_threads"] == torch.get_num_threads() and env["torch_cpu_capability"]
    assert all(isinstance(v, str | int) for v in env.values())


def test_a_package_not_installed_is_named_missing(monkeypatch):
    monkeypatch.setattr(provenance, "_PACKAGES", ("dtoc-rl", "no-such-package-here"))
    assert environment()["no-such-package-here"] == "missing"


def test_no_commit_without_git(monkeypatch):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert source_commit() is None and "commit" not in environment()


def test_the_commit_of_a_checkout_and_its_uncommitted_changes(tmp_path, monkeypatch):
    assert source_commit(tmp_path) is None  # not a checkout
    repo = tmp_path / "repo"
    repo.mkdir()
    try:
        _git(repo, "init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    assert source_commit(repo) is None  # a checkout without a commit
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert source_commit(repo) == head
    (repo / "a.txt").write_text("two\n")
    assert source_commit(repo) == head + "+"
    # a folder inside a checkout is not a checkout of its own (a package installed into a user's repo)
    (repo / "sub").mkdir()
    assert source_commit(repo / "sub") is None
    # a caller's GIT_DIR does not name another repository for it
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere" / ".git"))
    assert source_commit(repo) == head + "+"
