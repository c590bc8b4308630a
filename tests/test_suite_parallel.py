"""The suite's own process settings (tests/conftest.py): workers only where xdist is there and wanted."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import PARALLEL, pytest_cmdline_main


def _config(args=(), xdist=True, numprocesses=None, dist="no", worker=False):
    config = SimpleNamespace(
        pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "xdist"),
        option=SimpleNamespace(numprocesses=numprocesses, maxprocesses=None, dist=dist),
        args=list(args),
    )
    if worker:
        config.workerinput = {}
    return config


def _parallel(config) -> bool:
    return all(getattr(config.option, k) == v for k, v in PARALLEL.items())


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
        _config(worker=True),
        _config(numprocesses=0),
        _config(numprocesses=3),
        _config(dist="load"),
    ]
    for config in cases:
        before = dict(vars(config.option))
        pytest_cmdline_main(config)
        assert vars(config.option) == before
