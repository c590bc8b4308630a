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


def test_the_proxy_benchmark_logs_on_request_and_waits_for_the_upstream_it_was_told(capsys):
    from scripts import bench_proxy

    bench_proxy.main(["--calls", "6", "--json", "--log", "--answer-ms", "30", "--scale", "2"])
    res = json.loads(capsys.readouterr().out)
    assert res["logged"] is True and res["answer_ms"] == 30 and res["output_scale"] == 2
    assert res["rows"]["reference (straight upstream)"]["p50_ms"] >= 30  # the fake model's wait is real
    assert all(r["p50_ms"] >= 30 for r in res["rows"].values())
    assert all(r["logs_written"] >= 1 for k, r in res["rows"].items() if k.startswith("proxy"))


def test_the_proxy_benchmark_outputs_grow_with_the_scale():
    from scripts.bench_proxy import conversation

    one, two = conversation(5)[-1], conversation(5, scale=2)[-1]
    tool = [(a["content"], b["content"]) for a, b in zip(one, two, strict=True) if a["role"] == "tool"]
    assert tool and all(b == a * 2 for a, b in tool)


def test_the_proxy_benchmark_refuses_a_wait_out_of_range(capsys):
    from scripts import bench_proxy

    with pytest.raises(SystemExit):
        bench_proxy.main(["--answer-ms", "-1"])
    assert "--answer-ms must be between 0 and 60000, got -1" in capsys.readouterr().err
