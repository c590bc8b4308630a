"""The bill check on hand-made logs whose token counts are worked out by hand (estimator: 4 chars a
token), and its command (`dtoc-rl calibrate --cost`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.billcheck import bill_check, log_calls, targets_met
from dtoc_rl.cli import main as cli
from dtoc_rl.dataset import write_dataset
from dtoc_rl.schema import Step, Trajectory, Usage
from dtoc_rl.tokens import get_estimator

GPT52 = "azure/gpt-5.2-20251211"  # $1.75 in, $0.175 cached, $14 out; 1,024-token minimum, 128-token steps


def _step(k: int, out_chars: int, usage: Usage | None, ts: float, **kw) -> Step:
    # assistant text 10 tokens + tool args 10 tokens; output out_chars / 4 tokens
    return Step(index=k, turn=k, timestamp=ts, assistant_text="a" * 40, tool_name="bash", tool_args="x" * 40,
                output="o" * out_chars, usage=usage, **kw)  # fmt: skip


def _usage(inp: int, cached: int, out: int = 20) -> Usage:
    return Usage(input_tokens=inp, cached_tokens=cached, output_tokens=out,
                 cost_usd=((inp - cached) * 1.75 + cached * 0.175 + out * 14) / 1e6)  # fmt: skip


def _traj(steps, tid="rl/1", source="repolaunch", unlogged=0) -> Trajectory:
    return Trajectory(traj_id=tid, source=source, model_raw=GPT52, model_family="gpt-5", task_id="t",
                      system_prompt="s" * 4000, unlogged_prompt_tokens=unlogged, steps=steps)  # fmt: skip


def _log():
    # base 1000; each step adds 20 (message) + its output.
    # call 0: 1000.  call 1: 1000 + 1020 = 2020, shares 1000 (< 1,024: nothing cached).
    # call 2: 2020 + 220 + 100 (harness text, this call only) = 2340, shares 2020 -> 1920 in 128s.
    # call 3: window dropped step 0: 2340 - 100 - 1020 + 40 = 1260, shares only the base 1000 -> 0.
    return _traj([
        _step(0, 4000, _usage(1000, 0), 0.0),
        _step(1, 800, _usage(2020, 0), 10.0),
        _step(2, 80, _usage(2340, 1920), 20.0, harness_text="h" * 400),
        _step(3, 80, _usage(1260, 0), 30.0, masked_before=[0], dropped_before=[0]),
    ])  # fmt: skip


def test_the_logged_context_is_rebuilt_call_by_call():
    calls = log_calls(_log(), get_estimator("chars"))
    assert [c.est_prompt for c in calls] == [1000, 2020, 2340, 1260]
    assert [c.est_shared for c in calls] == [0, 1000, 2020, 1000]
    assert [c.idle for c in calls][1:] == [10.0, 10.0, 10.0]


def test_a_log_that_matches_the_model_is_predicted_exactly():
    res = bill_check([_log()], "chars")
    s = res["sources"]["repolaunch"]
    assert s["factor"] == 1.0 and s["hit_rate"] == 1.0
    assert res["calls"]["repolaunch"]["pred_cached"] == [0, 0, 1920, 0]
    assert s["error_pct"]["dollars"] == pytest.approx(0, abs=1e-9)
    assert s["per_call_input_error_pct"]["median_abs"] == 0
    assert targets_met(res) == {"repolaunch": True}
    # the ideal cache reads every shared prefix: 1000 + 2020 + 1000 more than billed, so it is cheaper
    assert s["predicted"]["cached_tokens_ideal_cache"] == 0 + 1000 + 2020 + 1000
    assert s["error_pct"]["dollars_ideal_cache"] < -10


def test_factor_hit_rate_and_cost_implied_cache_are_fitted():
    # the provider counts 1.2 tokens per estimator token, has 500 unlogged tokens, and only the cost
    # is logged: the cached tokens are implied by it.
    t = _log()
    t.unlogged_prompt_tokens = 500
    for s, c in zip(t.steps, [0, 1000, 2020, 1000]):
        u = s.usage
        inp = round(1.2 * u.input_tokens) + 500
        cached = (round(1.2 * c) + 500) // 128 * 128 // 2 if c else 0  # half of what the rules allow
        s.usage = Usage(input_tokens=inp, output_tokens=20, cost_usd=_usage(inp, cached).cost_usd)
    res = bill_check([t], "chars")
    s = res["sources"]["repolaunch"]
    assert s["factor"] == pytest.approx(1.2, abs=1e-3)
    assert s["hit_rate"] == pytest.approx(0.5, abs=0.01)
    assert abs(s["error_pct"]["dollars"]) < 1 and s["per_call_input_error_pct"]["median_abs"] < 0.1


def test_cli_cost_json_plot_and_errors(tmp_path: Path, capsys):
    ds = write_dataset([_log()], tmp_path / "ds")
    calls = tmp_path / "calls.jsonl"
    args = [
        "calibrate",
        "--cost",
        str(ds),
        "--json",
        "--plot",
        str(tmp_path / "bill.png"),
        "--calls-out",
        str(calls),
    ]
    assert cli(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["targets_met"] == {"repolaunch": True}
    rows = [json.loads(x) for x in calls.read_text().splitlines()]
    assert [(r["step"], r["logged_in"], r["pred_in"], r["pred_cached"]) for r in rows] == [
        (0, 1000, 1000, 0), (1, 2020, 2020, 0), (2, 2340, 2340, 1920), (3, 1260, 1260, 0)
    ]  # fmt: skip
    assert out["calls_out"]["calls"] == 4
    assert (tmp_path / "bill.png").stat().st_size > 0
    assert cli(["calibrate", "--cost", str(ds)]) == 0
    assert "bill check" in capsys.readouterr().out
    bare = _log()
    for s in bare.steps:
        s.usage = None
    ds2 = write_dataset([bare], tmp_path / "bare")
    assert cli(["calibrate", "--cost", str(ds2)]) == 2
    err = capsys.readouterr().err
    assert "no trajectory with logged per-call usage" in err and len(err.strip().splitlines()) == 1


def test_unlogged_fixed_prompt_and_warm_first_calls_are_fitted():
    # Three runs of a harness whose every prompt also carries 5,000 tokens of tool definitions the
    # log lacks; each run's first call finds them cached by the run before.
    trajs = []
    for r in range(3):
        # outputs of 100 (k + r + 1) tokens; a provisional usage so that log_calls lists each call
        steps = [_step(k, 400 * (k + r + 1), _usage(1, 0), 10.0 * k) for k in range(4)]
        t = _traj(steps, tid=f"rl/{r}")
        t.system_prompt = "s" * (4000 + 2000 * r)  # tasks of different lengths
        for c in log_calls(t, get_estimator("chars")):
            inp = c.est_prompt + 5000
            cached = 5000 if c.first else (c.est_shared + 5000) // 128 * 128
            t.steps[c.step].usage = _usage(inp, cached)
        trajs.append(t)
    res = bill_check(trajs, "chars")
    s = res["sources"]["repolaunch"]
    assert s["offset_tokens"] == pytest.approx(5000, abs=1)
    assert s["first_call_warm_share"] == pytest.approx(1.0)
    assert s["per_call_input_error_pct"]["median_abs"] < 0.05
    assert abs(s["error_pct"]["dollars"]) < 0.5
