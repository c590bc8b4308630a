"""The scripts' command lines: a bad value is a one-line usage error before any work, each usage line
names the module as it is run, and ``--json`` keeps stdout for the JSON."""

from __future__ import annotations

import json
import socket

import pytest

from scripts import (
    bench_core,
    bench_env,
    bench_eval,
    bench_ingest,
    bench_live,
    bench_proxy,
    cross_model,
    label_report,
    live_example,
    lofo,
    minari_export,
    need_ceiling,
    replicate_complexity_trap,
)

MAINS = {
    "bench_core": bench_core.main,
    "bench_env": bench_env.main,
    "bench_eval": bench_eval.main,
    "bench_ingest": bench_ingest.main,
    "bench_live": bench_live.main,
    "bench_proxy": bench_proxy.main,
    "cross_model": cross_model.main,
    "label_report": label_report.main,
    "live_example": live_example.main,
    "lofo": lofo.main,
    "minari_export": minari_export.main,
    "need_ceiling": need_ceiling.main,
    "replicate_complexity_trap": replicate_complexity_trap.main,
}


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [
        ("bench_core", ["--sizes", "0"], "argument --sizes: must be at least 1, got 0"),
        ("bench_core", ["--sizes", "-5"], "argument --sizes: must be at least 1, got -5"),
        ("bench_core", ["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        ("bench_core", ["--sqlite-sync", "FOO"], "argument --sqlite-sync: invalid choice: 'FOO'"),
        ("bench_env", ["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        ("bench_env", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        ("bench_env", ["--episodes", "0"], "argument --episodes: must be at least 1, got 0"),
        ("bench_env", ["--lengths", "0"], "argument --lengths: must be at least 2, got 0"),
        ("bench_env", ["--lengths", "1"], "argument --lengths: must be at least 2, got 1"),
        ("bench_env", ["--max-items", "0"], "argument --max-items: must be at least 1, got 0"),
        ("bench_eval", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        ("bench_eval", ["--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (
            "bench_eval",
            ["--dataset", "/nonexist", "--policies", "none"],
            "--dataset: no dataset at /nonexist",
        ),
        ("bench_eval", ["--dataset", "data/sample", "--policies", "bogus"], "unknown policy 'bogus'"),
        (
            "bench_eval",
            ["--dataset", "data/sample", "--policies", "none", "--checkpoint", "/nonexistent"],
            "no checkpoint folder at '/nonexistent'",
        ),
        ("bench_ingest", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        ("bench_ingest", ["--workers", "0"], "argument --workers: must be at least 1, got 0"),
        ("bench_ingest", ["--workers", "-1"], "argument --workers: must be at least 1, got -1"),
        ("bench_live", ["--sizes", "5"], "argument --sizes: must be at least 10, got 5"),
        ("bench_live", ["--window", "0"], "argument --window: must be at least 10, got 0"),
        ("bench_live", ["--answer-ms", "-1"], "argument --answer-ms: must be at least 0, got -1"),
        ("bench_live", ["--policies", "bogus"], "argument --policies: unknown policy 'bogus'"),
        ("bench_proxy", ["--calls", "0"], "argument --calls: must be at least 1, got 0"),
        ("bench_proxy", ["--calls", "-5"], "argument --calls: must be at least 1, got -5"),
        ("bench_proxy", ["--threads", "0"], "argument --threads: must be at least 1, got 0"),
        ("bench_proxy", ["--checkpoint", "/nonexistent"], "--checkpoint: /nonexistent is not a checkpoint"),
        (
            "cross_model",
            ["--dataset", "data/sample", "--epochs", "0"],
            "argument --epochs: must be at least 1",
        ),
        (
            "cross_model",
            ["--dataset", "data/sample", "--val-fraction", "1"],
            "--val-fraction: must be in (0, 1), got 1",
        ),
        ("cross_model", ["--dataset", "data/sample", "--threshold", "2"], "--threshold: must be in [0, 1]"),
        ("label_report", ["data/raw", "--limit", "0"], "argument --limit: must be at least 1, got 0"),
        ("label_report", ["data/raw", "--limit", "-1"], "argument --limit: must be at least 1, got -1"),
        (
            "live_example",
            ["--scripted", "--max-items", "0"],
            "argument --max-items: must be at least 1, got 0",
        ),
        (
            "live_example",
            ["--scripted", "--tool-timeout", "0"],
            "must be in (0, inf), got 0",
        ),
        ("live_example", ["--scripted", "--max-steps", "-1"], "argument --max-steps: must be at least 0"),
        ("lofo", ["--bootstrap", "0"], "argument --bootstrap: must be at least 1, got 0"),
        ("lofo", ["--miss-budget", "-1"], "--miss-budget must be >= 0, got -1.0"),
        ("lofo", ["--miss-budget", "nan"], "--miss-budget must be >= 0, got nan"),
        ("minari_export", ["--dataset-id", "badid"], "expected namespace/name-vN"),
        ("minari_export", ["--dataset-id", "noversion/x"], "expected namespace/name-vN"),
        (
            "minari_export",
            ["--dataset-id", "dtoc_rl/b-v0", "--episodes", "0"],
            "argument --episodes: must be at least",
        ),
        (
            "need_ceiling",
            ["--dataset", "data/sample", "--min-tasks", "0"],
            "argument --min-tasks: must be at",
        ),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(script, argv, says, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        MAINS[script](
            [
                *argv,
                *(
                    ["--out", str(tmp_path)]
                    if script in ("lofo", "cross_model", "live_example", "minari_export")
                    else []
                ),
            ]
        )
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"python -m scripts.{script}: ")
    assert not (tmp_path / "dataset").exists()


@pytest.mark.parametrize("script", sorted(MAINS))
def test_usage_names_the_module_as_it_is_run(script, capsys):
    with pytest.raises(SystemExit) as e:
        MAINS[script](["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m scripts.{script} ")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--dataset", "/nonexist"], "error: no dataset at /nonexist"),
        (["--rules", "bogus"], "error: unknown policy 'bogus'"),
        (["--rules", "last_n:n=0|x"], "error: policy 'last_n:n=0'"),
        (["--thresholds", "2"], "error: --thresholds: threshold must be in [0, 1], got 2.0"),
    ],
)
def test_lofo_checks_the_dataset_and_every_policy_before_any_training(
    argv, says, tmp_path, capsys, monkeypatch
):
    from dtoc_rl.policies.learned import LearnedPolicy

    def no_training(*a, **k):
        raise AssertionError("a fold started training")

    monkeypatch.setattr(LearnedPolicy, "fit", no_training)
    assert lofo.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_lofo_rule_sweeps_are_expanded():
    assert lofo.check_policies(["none", "last_n:n=2|4"], [0.1]) == ["none", "last_n:n=2", "last_n:n=4"]


def test_cross_model_json_is_all_of_stdout(tmp_path, capsys, monkeypatch):
    from dtoc_rl.policies.learned import LearnedPolicy

    # the untrained network decides as well as a trained one for this test: only the output is checked
    monkeypatch.setattr(LearnedPolicy, "fit", lambda self, episodes=None, progress=True, **k: {})
    argv = ["--dataset", "data/sample", "--families", "gpt-4o", "--out", str(tmp_path), "--json"]
    assert cross_model.main(argv) == 0
    cap = capsys.readouterr()
    r = json.loads(cap.out)  # nothing but the JSON
    assert r["families"] == ["gpt-4o"] and "== train on gpt-4o" in cap.err


def test_bench_eval_counts_the_policies_evaluate_ran(capsys):
    from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS

    argv = ["--dataset", "data/sample", "--policies", "none", "--workers", "1", "--repeats", "1"]
    assert bench_eval.main(argv) == 0
    out = capsys.readouterr().out
    assert f"({DEFAULT_MAX_ITEMS} slots)" in out
    # evaluate() adds the oracle to the one policy asked for
    assert "end to end, evaluate(2 policies, workers=1)" in out


def test_bench_eval_measures_the_checkpoint_beside_the_policies(tmp_path, capsys):
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    ckpt = LearnedPolicyConfig(n_layers=1, d_model=32).create().save(tmp_path / "ckpt")
    argv = ["--dataset", "data/sample", "--policies", "none", "--checkpoint", str(ckpt), "--workers", "1",
            "--repeats", "1", "--no-end-to-end", "--json"]  # fmt: skip
    assert bench_eval.main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in r["policies"]] == ["none", "learned"]
    assert r["meta"]["max_items"] == 128


def test_need_ceiling_says_which_option_lowers_the_bar():
    with pytest.raises(
        SystemExit, match=r"words in >= 500 training tasks \(of \d+\): lower the bar with --min-tasks N"
    ):
        need_ceiling.main(["--dataset", "data/sample", "--min-tasks", "500", "--text", "words"])


def test_need_ceilings_default_bar_scales_down_on_a_small_dataset():
    assert need_ceiling.default_min_tasks(22) == 4  # the bundled sample's training tasks
    assert need_ceiling.default_min_tasks(3) == 2
    assert (
        need_ceiling.default_min_tasks(100) == need_ceiling.default_min_tasks(5000) == need_ceiling.MIN_TASKS
    )


def test_need_ceiling_runs_words_on_the_sample_without_min_tasks(capsys, monkeypatch):
    pytest.importorskip("sklearn")
    import numpy as np

    # the classifier is not what is checked here: a constant guess keeps the test fast
    monkeypatch.setattr(
        need_ceiling, "fit_predict", lambda x, y, test, train: (np.full(int(test.sum()), 0.5), 0.5)
    )
    assert need_ceiling.main(["--dataset", "data/sample", "--text", "words", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["min_tasks"] == 4 and set(r["by_text"]) == {"words"}


def test_replicate_complexity_trap_names_the_sources_it_needs(capsys):
    assert replicate_complexity_trap.main(["--dataset", "data/sample"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "swe-agent-0.x or swe-agent-1.x" in err and "mini-swe-agent" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_live_example_fails_when_the_service_never_answered(tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens
    with pytest.warns(RuntimeWarning):
        code = live_example.main(["--replay", "django__django-11239", "--service", url, "--max-steps", "4",
                                  "--out", str(tmp_path)])  # fmt: skip
    cap = capsys.readouterr()
    assert code == 1
    assert f"decisions: 0 of 4 from the service at {url}, 4 from the fallback (on_error=show_all)" in cap.out
    assert "error: all 4 decisions came from the fallback" in cap.err


def test_live_example_counts_the_fallback_decisions_of_a_refused_token(tmp_path, capsys, monkeypatch):
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.service import DecisionService, serve_in_thread

    srv, _ = serve_in_thread(DecisionService(make_policy("last_n:n=5")), "127.0.0.1", 0)
    monkeypatch.setenv("DTOC_TOKEN", "x" * len(srv.token))  # not the service's
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with pytest.warns(RuntimeWarning):
            argv = ["--replay", "django__django-11239", "--service", url, "--max-steps", "3"]
            code = live_example.main([*argv, "--out", str(tmp_path), "--json"])
    finally:
        srv.shutdown()
        srv.server_close()
    cap = capsys.readouterr()
    r = json.loads(cap.out)
    assert code == 1 and r["decisions"] == r["fallback_decisions"] == 3 and r["service"] == url


def test_live_example_warns_when_some_decisions_came_from_the_fallback(tmp_path, capsys, monkeypatch):
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.service import DecideError, DecisionService, serve_in_thread

    class Flaky(DecisionService):  # answers every other decision, refuses the rest
        asked = 0

        def decide(self, req, client=""):
            Flaky.asked += 1
            if Flaky.asked % 2 == 0:
                raise DecideError(503, "busy", "")
            return super().decide(req, client)

    srv, _ = serve_in_thread(Flaky(make_policy("last_n:n=5")), "127.0.0.1", 0)
    monkeypatch.setenv("DTOC_TOKEN", srv.token)
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with pytest.warns(RuntimeWarning):
            argv = ["--replay", "django__django-11239", "--service", url, "--max-steps", "4"]
            code = live_example.main([*argv, "--out", str(tmp_path), "--json"])
    finally:
        srv.shutdown()
        srv.server_close()
    cap = capsys.readouterr()
    r = json.loads(cap.out)
    assert code == 0 and r["decisions"] == 4 and r["fallback_decisions"] == 2  # the run went on
    assert cap.err.strip().splitlines()[-1] == (
        f"python -m scripts.live_example: warning: 2 of 4 decisions came from the fallback "
        f"(on_error=show_all): the service at {url} did not answer them"
    )
