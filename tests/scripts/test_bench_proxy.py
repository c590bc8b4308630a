"""scripts/bench_proxy.py runs and reports the proxy beside its reference (a short conversation)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_the_proxy_benchmark_reports_each_policy_beside_the_reference(capsys, api):
    from scripts import bench_proxy

    bench_proxy.main(["--calls", "12", "--json", "--api", api])
    res = json.loads(capsys.readouterr().out)
    rows = res["rows"]
    assert set(rows) == {"reference (straight upstream)", "proxy, last_n:n=5", "proxy, learned"}
    assert rows["proxy, last_n:n=5"]["hidden_sent"] > 0  # the requests really went through a policy
    assert all(r["p50_ms"] > 0 for r in rows.values()) and res["calls"] == 12 and res["api"] == api
    assert rows["proxy, learned"]["decision_p99_ms"] > 0  # the policy's decision timed inside the proxy
