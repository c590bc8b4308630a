from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
SHARED_TRACES = Path(os.environ.get("DTOC_SHARED_TRACES", REPO.parent / "shared" / "traces"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput["dtoc_dist"] = node.config.option.dist


# The suite's processes when pytest-xdist is there and the command names none: up to four, the tests that
# share a resource (Ray) kept in one by their xdist_group.  Set here rather than in addopts so that
# `pytest -p no:xdist` and a machine without the test extras still run the suite (in one process), and a
# run of single tests (`file::test`) does not start workers it cannot use.
PARALLEL = {"numprocesses": "auto", "maxprocesses": 4, "dist": "loadgroup"}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    if hasattr(config, "workerinput"):
        # a worker reads the command line, which names no --dist: the groups its test ids carry
        # (name@group, what loadgroup schedules by) come from what the controller was told
        config.option.loadgroup = config.workerinput.get("dtoc_dist") == "loadgroup"
        return
    if config.option.numprocesses is not None or config.option.dist != "no":
        return
    if config.args and all("::" in arg for arg in config.args):
        return
    for name, value in PARALLEL.items():
        setattr(config.option, name, value)


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
    import shutil
    import tempfile

    # Ray's sockets live under its temp folder and a socket's path may not pass 107 bytes, which a
    # pytest base folder with an xdist worker's name in it does: Ray gets a short folder of its own.
    ray_dir = tempfile.mkdtemp(prefix="ray-")
    base = tmp_path_factory.mktemp("tmp")
    old_env, old_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    old_ray = os.environ.get("RAY_TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(base), str(base)
    os.environ["RAY_TMPDIR"] = ray_dir
    yield
    tempfile.tempdir = old_dir
    for name, value in (("TMPDIR", old_env), ("RAY_TMPDIR", old_ray)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(ray_dir, ignore_errors=True)
