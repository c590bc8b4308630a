from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

from dtoc_rl.provenance import environment, source_commit


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_environment_names_the_installed_versions():
    env = environment()
    assert env["torch"] == torch.__version__ and env["numpy"] == np.__version__
    assert env["python"].count(".") == 2 and env["dtoc-rl"]
    assert all(isinstance(v, str) for v in env.values())


def test_the_commit_of_a_checkout_and_its_uncommitted_changes(tmp_path):
    assert source_commit(tmp_path) is None  # not a checkout
    repo = tmp_path / "repo"
    repo.mkdir()
    try:
        _git(repo, "init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert source_commit(repo) == head
    (repo / "a.txt").write_text("two\n")
    assert source_commit(repo) == head + "+"
    # a folder inside a checkout is not a checkout of its own (a package installed into a user's repo)
    (repo / "sub").mkdir()
    assert source_commit(repo / "sub") is None
