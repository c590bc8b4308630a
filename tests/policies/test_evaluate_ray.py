"""The Ray evaluation path gives exactly the local path's runs and metrics (needs the ``ray`` extra)."""

from __future__ import annotations

import builtins
import math
from dataclasses import asdict

import pytest

from dtoc_rl.cli import main
from dtoc_rl.policies.evaluate import aggregate, evaluate

# one xdist worker runs every test that starts Ray: two Ray clusters on one machine compete for it
pytestmark = pytest.mark.xdist_group("ray")

SPECS = ["none", "last_n:n=3", "obs_mask", "anthropic_clear", "opencode_prune", "budget:budget=8000"]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    import signal

    on_sigterm = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    signal.signal(signal.SIGTERM, on_sigterm)  # Ray's own handler outlives it: later tests send SIGTERM


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.slow
def test_ray_matches_local_path_on_bundled_sample(local_ray):
    from dtoc_rl.policies.evaluate_ray import evaluate_ray

    local = evaluate(None, SPECS, progress=False)
    remote = evaluate_ray(None, SPECS, workers=2, batch_size=8, progress=False)
    assert len(remote) == len(local) > 0
    assert {r.policy for r in remote} == {*SPECS, "oracle"}
    assert not any(r.error for r in remote)
    # per-run records: identical, field by field and in the same order
    assert [asdict(r) for r in remote] == [asdict(r) for r in local]
    # aggregated rows (point estimates and bootstrap CIs): identical
    rows_l, rows_r = aggregate(local), aggregate(remote)
    assert len(rows_l) == len(rows_r) > 0
    for a, b in zip(rows_l, rows_r):
        assert a.keys() == b.keys()
        assert all(_same(a[k], b[k]) for k in a), (a, b)
    # a running Ray instance is left running for the caller
    assert local_ray.is_initialized()


@pytest.mark.slow
def test_ray_applies_the_local_filters(local_ray):
    from dtoc_rl.policies.evaluate_ray import evaluate_ray

    local = evaluate(None, ["last_n"], source="tau-bench", progress=False)
    remote = evaluate_ray(None, ["last_n"], source="tau-bench", workers=2, progress=False)
    assert [asdict(r) for r in remote] == [asdict(r) for r in local]
    assert {r.source for r in remote} == {"tau-bench"}


def test_ray_backend_without_ray_says_how_to_install(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    assert main(["evaluate", "--backend", "ray", "-p", "none", "--quiet"]) == 2
    assert "pip install 'dtoc-rl[ray]'" in capsys.readouterr().err


def test_what_ray_prints_goes_to_stderr_not_to_a_json_callers_stdout(monkeypatch, capsys):
    """Ray's driver threads print worker-pool warnings to stdout; `dtoc-rl evaluate --json --backend
    ray` once wrote one before its JSON under load."""
    pytest.importorskip("ray")
    from dtoc_rl.policies import evaluate_ray as er

    def noisy(*args, **kwargs):
        print("(raylet) WARNING: 8 PYTHON worker processes have been started on node")
        return evaluate(None, ["none"], model_family="gpt-4o", progress=False)

    monkeypatch.setattr(er, "_run_on_ray", noisy)
    runs = er.evaluate_ray(None, ["none"], progress=False)
    out, err = capsys.readouterr()
    assert runs and out == "" and "(raylet) WARNING" in err


def test_the_sigterm_handler_ray_puts_in_is_taken_out_when_the_ray_it_started_stops():
    """``ray.init`` sets a SIGTERM handler that outlives ``ray.shutdown``; the caller's (the command
    line's clean stop) is put back, even when the work on the cluster fails."""
    import signal
    from types import SimpleNamespace

    from dtoc_rl.policies.evaluate_ray import _run_on_ray

    ctx = SimpleNamespace(execution_options=SimpleNamespace(preserve_order=False), enable_progress_bars=True)

    class _Ray:
        data = SimpleNamespace(DataContext=SimpleNamespace(get_current=lambda: ctx))
        stopped = False

        def is_initialized(self):
            return False

        def init(self, **kwargs):
            signal.signal(signal.SIGTERM, lambda *a: None)

        def shutdown(self):
            self.stopped = True

        def cluster_resources(self):
            raise RuntimeError("the cluster went away")

    ours = signal.getsignal(signal.SIGTERM)
    ray = _Ray()
    with pytest.raises(RuntimeError, match="went away"):
        _run_on_ray(ray, [], 0, ["none"], None, None, None, 0, 1, 8, False, None)
    assert ray.stopped and signal.getsignal(signal.SIGTERM) is ours
