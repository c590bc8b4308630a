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
