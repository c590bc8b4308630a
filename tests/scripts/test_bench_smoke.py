"""Smoke tests of the env, ingest and evaluation benchmarks on tiny settings (figures: full runs)."""

from __future__ import annotations

import json

from scripts import bench_env, bench_eval, bench_ingest, bench_live


def _run(capsys, main, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_env_small(capsys):
    r = _run(capsys, bench_env.main, ["--steps", "200", "--repeats", "1", "--episodes", "20",
                                      "--lengths", "40", "300", "--json"])  # fmt: skip
    t = r["throughput"]
    assert set(t["steps_per_s"]) == {
        "replay_random_pregen", "replay_random_sample", "replay_noop",
        "cartpole_random_pregen", "cartpole_random_sample",
    }  # fmt: skip
    assert all(v > 0 for v in t["steps_per_s"].values()) and t["vs_cartpole_pregen"] > 0
    assert t["dict_sample_us"] > 0 and set(t["met"]) == {"steps_per_s", "vs_cartpole"}
    # a like-for-like comparison: gymnasium.make's checker and order wrappers on both envs
    w = t["wrappers"]
    assert w["replay"] == ["OrderEnforcing", "PassiveEnvChecker"]
    assert w["cartpole"][-2:] == w["replay"]
    m = r["memory"]
    assert m["episodes"] == 20 and m["steps"] > 20 and m["rss_mb_after"] > 0
    rows = r["scaling"]["rows"]
    assert [x["length"] for x in rows] == [40, 300]
    # the long trajectory has steps with more stored outputs than slots (128)
    assert rows[1]["bins"][-1]["stored_from"] >= 128
    assert all(b["us_per_step"] > 0 for x in rows for b in x["bins"])


def test_bench_ingest_small(capsys, data_dir):
    r = _run(capsys, bench_ingest.main, ["--paths", str(data_dir / "raw"), "--repeats", "1", "--workers", "1",
                                         "--json"])  # fmt: skip
    assert [(x["label"], x["workers"]) for x in r["ingest"]] == [(False, 1), (True, 1)]
    assert all(x["trajectories"] > 0 and x["mb_per_s"] > 0 for x in r["ingest"])
    lab = r["labelling"]
    assert lab["steps"] > 0 and lab["us_per_step"] > 0


def test_bench_eval_small(capsys, data_dir):
    argv = ["--dataset", str(data_dir / "sample"), "--policies", "none", "oracle", "--workers", "1",
            "--repeats", "1", "--no-end-to-end", "--json"]  # fmt: skip
    r = _run(capsys, bench_eval.main, argv)
    assert [p["policy"] for p in r["policies"]] == ["none", "oracle"]
    assert all(p["one_process"]["steps_per_s"] > 0 and p["one_process"]["errors"] == 0 for p in r["policies"])
    assert r["meta"]["trajectories"] > 0 and r["end_to_end"] == []


def test_bench_live_small(capsys):
    r = _run(capsys, bench_live.main, ["--sizes", "20", "30", "--window", "10", "--log", "--json"])
    rows = r["rows"]
    assert [(x["path"], x["policy"], x["calls"]) for x in rows] == [
        ("orchestrator", "hide_big", 20), ("orchestrator", "hide_big", 30),
        ("orchestrator", "learned", 20), ("orchestrator", "learned", 30),
        ("service +log", "hide_big", 20), ("service +log", "hide_big", 30),
    ]  # fmt: skip
    assert all(x["p50_ms"] > 0 and x["p99_ms"] >= x["p50_ms"] and x["gc"] == "auto" for x in rows)
    assert 0 < rows[-2]["body_kb"] < rows[-1]["body_kb"]
