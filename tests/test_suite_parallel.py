"""The suite's own process settings (tests/conftest.py): workers only where xdist is there and wanted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import PARALLEL, pytest_cmdline_main


def _config(args=(), xdist=True, numprocesses=None, dist="no", worker=False):
    config = SimpleNamespace(
        pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "xdist"),
        option=SimpleNamespace(numprocesses=numprocesses, maxprocesses=None, dist=dist),
        args=list(args),
    )
    if worker:
        config.workerinput = {} if worker is True else {"dtoc_dist": worker}
    return config


def _parallel(config) -> bool:
    return all(getattr(config.option, k) == v for k, v in PARALLEL.items())


def test_a_worker_schedules_by_group_as_its_controller_was_told():
    for told, grouped in (("loadgroup", True), ("load", False), (True, False)):
        config = _config(worker=told)
        pytest_cmdline_main(config)
        assert config.option.loadgroup is grouped and config.option.numprocesses is None, told


def test_the_whole_suite_and_a_folder_run_on_workers():
    for args in ((), ("tests/engine",), ("tests/engine/test_session.py::test_a", "tests/cli")):
        config = _config(args)
        pytest_cmdline_main(config)
        assert _parallel(config), args


def test_single_tests_without_xdist_on_a_worker_or_with_n_given_stay_as_they_are():
    cases = [
        _config(["tests/engine/test_session.py::test_a"]),
        _config(["tests/a.py::t", "tests/b.py::T::t"]),
        _config(xdist=False),
        _config(numprocesses=0),
        _config(numprocesses=3),
        _config(dist="load"),
    ]
    for config in cases:
        before = dict(vars(config.option))
        pytest_cmdline_main(config)
        assert vars(config.option) == before


@pytest.mark.xdist_group("pair")
def test_grouped_first():
    """One of two tests of a group, run by the test below in a pytest of its own."""


@pytest.mark.xdist_group("pair")
def test_grouped_second():
    """The other."""


def test_the_tests_of_a_group_run_as_the_group_on_workers(repo_root):
    """The workers read a command line that names no --dist: without the controller's setting passed on,
    their test ids carried no group and the Ray tests were spread over workers."""
    import subprocess
    import sys

    pytest.importorskip("xdist")
    cmd = [sys.executable, "-m", "pytest", "tests/test_suite_parallel.py", "-k", "grouped", "-v",
           "-p", "no:cacheprovider"]  # fmt: skip
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    ran = [line for line in done.stdout.splitlines() if "PASSED" in line and "grouped" in line]
    assert len(ran) == 2 and all("@pair" in line for line in ran), done.stdout[-2000:]
    assert len({line.split("]")[0] for line in ran}) == 1  # one worker
