from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
SHARED_TRACES = Path(os.environ.get("DTOC_SHARED_TRACES", REPO.parent / "shared" / "traces"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """``../shared/traces`` when present; tests using it are skipped on a bare clone."""
    if not (SHARED_TRACES / "MANIFEST.md").is_file():
        pytest.skip("../shared/traces not present")
    return SHARED_TRACES


@pytest.fixture(autouse=True, scope="session")
def _temp_files_under_pytest(tmp_path_factory):
    """Everything the code under test puts in the temp folder (LiveEnv work folders, the SB3 logger's
    folders, child processes' TMPDIR) goes into pytest's own base folder, which pytest prunes: a test
    that leaves one behind does not fill the machine's /tmp run after run."""
    import tempfile

    base = tmp_path_factory.mktemp("tmp")
    old_env, old_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(base), str(base)
    yield
    tempfile.tempdir = old_dir
    if old_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old_env
