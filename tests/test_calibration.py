"""Calibration against logged masking (dtoc_rl.sim.calibration, dtoc-rl calibrate): crafted trajectories with
known masked schedules pin every statistic; the real SWE-agent-LM-32B traces check the figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import write_dataset
from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.labels import label_trajectory
from dtoc_rl.sim.calibration import (
    NO_MASKED_DATA,
    NoMaskedData,
    age_hazard,
    calibrate,
    masked_trajectories,
    ratio_ci,
    traj_counts,
    wilson,
)

CODE = """\
def compute_total_price(self, items, discount_rate):
    subtotal = sum(item.unit_price * item.quantity for item in items)
    return subtotal * (1 - discount_rate)
"""
OTHER = "alpha beta gamma delta\n" * 3


def view(path: str, output: str, rng: list[int] | None = None) -> dict:
    args = {"command": "view", "path": path} | ({"view_range": rng} if rng else {})
    return {"tool_name": "str_replace_editor", "tool_args": json.dumps(args), "output": output}


def bash(cmd: str, output: str = "ok") -> dict:
    return {"tool_name": "bash", "tool_args": json.dumps({"command": cmd}), "output": output}


def edit(path: str, old: str, output: str = "The file has been edited.") -> dict:
    args = {"command": "str_replace", "path": path, "old_str": old, "new_str": "x = 1"}
    return {"tool_name": "str_replace_editor", "tool_args": json.dumps(args), "output": output}


def last_n(n_steps: int, n: int) -> list[list[int]]:
    """SWE-agent LastNObservations(n, polling=1): step t sees outputs t-n..t-1."""
    return [list(range(max(0, t - n))) for t in range(n_steps)]


def make(steps: list[dict], masked: list[list[int] | None] | None, tid: str = "t/x") -> Trajectory:
    t = Trajectory(
        traj_id=tid,
        source="swe-agent-1.x",
        model_raw="m",
        model_family="other",
        task_id=tid,
        task_text="Fix the price bug.",
        steps=[Step(index=i, turn=i, **kw) for i, kw in enumerate(steps)],
    )
    for s, m in zip(t.steps, masked or [None] * len(steps)):
        s.masked_before = m
    return label_trajectory(t)


def miss_then_reread(tid: str = "t/a") -> Trajectory:
    """View a.py (0), four unrelated steps, a failed edit copying from the now hidden view (5: a provenance
    need on a hidden output), then the agent re-reads a.py (6) and edits it (7)."""
    steps = [
        view("/r/a.py", CODE),
        bash("ls", "x.py"),
        bash("echo 1", OTHER),
        bash("echo 2", "two"),
        bash("echo 3", "three"),
        edit(
            "/r/a.py",
            "subtotal = sum(item.unit_price * item.quantity for item in items)",
            "No replacement was performed, old_str `...` did not appear verbatim in /r/a.py.",
        ),
        view("/r/a.py", CODE),
        edit("/r/a.py", "return subtotal * (1 - discount_rate)"),
    ]
    return make(steps, last_n(len(steps), 4), tid)


def direct_reread(tid: str = "t/b") -> Trajectory:
    """b.py viewed at 0, re-viewed while hidden at 4 (a direct re-read, delay 0); c.py viewed at 1 and
    re-viewed at 2 while visible."""
    steps = [
        view("/r/b.py", CODE),
        view("/r/c.py", OTHER),
        view("/r/c.py", OTHER),
        bash("echo 1", "one"),
        view("/r/b.py", CODE),
    ]
    return make(steps, last_n(len(steps), 3), tid)


def test_masked_trajectories_and_the_no_data_error():
    t = miss_then_reread()
    plain = make([view("/r/a.py", CODE), bash("ls")], None, "t/plain")
    nothing_hidden = make([view("/r/a.py", CODE), bash("ls")], [[], []], "t/empty")
    assert masked_trajectories([t, plain, nothing_hidden]) == [t]
    with pytest.raises(NoMaskedData) as e:
        calibrate([plain, nothing_hidden])
    assert str(e.value) == NO_MASKED_DATA
    assert "masked_before" in NO_MASKED_DATA and "LastNObservations" in NO_MASKED_DATA


def test_counts_of_a_miss_followed_by_a_reread():
    t = miss_then_reread()
    assert t.steps[5].write_resources == []  # refused edit
    assert {(n.step, n.kind) for n in t.steps[5].needs} == {(0, "provenance"), (0, "edit")}
    assert {(n.step, n.kind) for n in t.steps[6].needs} == {(0, "reaccess")}
    c = traj_counts(t, k=3).counts
    assert c["steps"] == c["decision_steps"] == 8
    # step t hides outputs 0..t-5: pairs (i, t) hidden: (0,5) (0,6) (1,6) (0,7) (1,7) (2,7) = 6
    assert c["use_m_n"] == 6 and c["use_m_k"] == 1 and c["use_m_failed"] == 1
    assert c["use_v_n"] == sum(min(t_, 4) for t_ in range(8))  # 22 visible pairs
    # re-access hazard of output 0 (the only one re-accessed): hidden at 5 (no), 6 (yes); after that gone
    assert (c["reacc_m_k"], c["reread_m_k"]) == (1, 1)
    assert c["reacc_needs_masked"] == 1 and c["reread_needs_masked"] == 1
    # lift: (0, 5) has the need and a re-read follows at 6; no other hidden pair is followed by one
    assert (c["lift_x_n"], c["lift_x_k"]) == (1, 1)
    assert c["lift_nx_k"] == 0
    assert (c["liftm_x_n"], c["liftm_x_k"], c["liftm_nx_k"]) == (1, 1, 0)  # provenance is a miss kind
    # one miss episode, opened by the need at 5 and re-read at 6 (delay 1)
    assert (c["ep"], c["ep_x"], c["ep_x_reread"], c["ep_direct"], c["ep_absorbed"]) == (1, 1, 1, 0, 0)
    assert c["ep_x_failed"] == 1
    assert traj_counts(t).delays == [1]


def test_counts_of_a_direct_reread_and_a_visible_reaccess():
    t = direct_reread()
    c = traj_counts(t).counts
    assert (c["reacc_m_k"], c["reacc_v_k"]) == (1, 1)
    assert (c["reread_m_k"], c["reread_v_k"]) == (1, 1)
    assert (c["ep"], c["ep_direct"], c["ep_reread"]) == (1, 1, 1)
    assert traj_counts(t).delays == [0]
    # LastN(3): only step 4 hides anything (output 0), so the one hidden pair is (0, 4), the re-read
    assert (c["reacc_m_n"], c["use_m_n"]) == (1, 1)
    assert c["use_m_k"] == 0


def test_absorbed_need_and_modified_resource():
    """A successful edit copying from a hidden view is absorbed (no re-read, and the file changed)."""
    steps = [
        view("/r/a.py", CODE),
        bash("echo 1", OTHER),
        bash("echo 2", "two"),
        edit("/r/a.py", "subtotal = sum(item.unit_price * item.quantity for item in items)"),
        view("/r/a.py", CODE),  # a re-read after the change: not a re-read of unchanged text
    ]
    t = make(steps, last_n(len(steps), 2))
    c = traj_counts(t, k=3).counts
    assert c["use_m_k"] == 1 and c["use_m_failed"] == 0
    assert (c["ep"], c["ep_absorbed"], c["ep_reread"]) == (1, 1, 0)
    assert c["reacc_needs_masked"] == 1 and c["reread_needs_masked"] == 0
    assert c["reacc_m_k"] == 1 and c["reread_m_k"] == 0
    assert c["ep_censored"] == 1  # the log ended within k steps of the need


def test_unknown_schedule_steps_are_skipped():
    t = miss_then_reread()
    t.steps[5].masked_before = None
    c = traj_counts(t).counts
    assert c["decision_steps"] == 7 and c["use_m_k"] == 0


def test_report_rates_lift_and_miss_model():
    trajs = [miss_then_reread("t/a"), direct_reread("t/b"), make([view("/r/a.py", CODE)], None, "t/p")]
    cal = calibrate(trajs, k=3, n_boot=200)
    assert cal.trajectories == 2 and cal.traj_ids == ["t/a", "t/b"]
    r = cal.rates
    assert (r["need_masked"].k, r["need_masked"].n) == (1, 6 + 1)
    assert r["need_masked_failed"].rate == 1.0
    assert r["reread_after_need"].k == 1 and r["reread_after_need"].n == 1
    assert cal.ratios["lift"]["ratio"] == math.inf or cal.ratios["lift"]["ratio"] > 1
    mm = cal.miss_model
    assert mm["episodes"] == 2 and mm["reread_prob"]["rate"] == 1.0 and mm["absorbed_fraction"]["rate"] == 0
    assert mm["delay_hist"] == {"0": 1, "1": 1, "2": 0, "3": 0}
    assert cal.per_100["rereads_masked_unmodified"].k == 2
    assert cal.per_100["rereads_masked_unmodified"].rate == pytest.approx(100 * 2 / 13)
    d = cal.to_dict()
    json.dumps(d)  # JSON-able
    ages = {(row["age"], row["status"]) for row in d["by_age"]}
    assert ("1", "visible") in ages and any(s == "masked" for _, s in ages)
    with pytest.raises(ValueError):
        calibrate(trajs, k=0)


def test_intervals():
    lo, hi = wilson(8, 16)
    assert lo == pytest.approx(0.28, abs=0.005) and hi == pytest.approx(0.72, abs=0.005)
    assert all(math.isnan(x) for x in wilson(0, 0))
    point, lo, hi = ratio_ci([1, 1, 1, 1], [2, 2, 2, 2], n_boot=100)
    assert point == lo == hi == 0.5  # every resample gives the same ratio
    point, lo, hi = ratio_ci([0, 4], [4, 4], scale=100, n_boot=500)
    assert point == 50 and lo == 0 and hi == 100


def test_age_hazard_control_does_not_modify_its_input():
    t = direct_reread("t/c")
    for s in t.steps:
        s.masked_before = None
    rows = age_hazard([t], n_boot=50)
    assert {r["status"] for r in rows} == {"visible"}
    assert all(s.masked_before is None for s in t.steps)


# -- the command ---------------------------------------------------------------------------------


def test_cli_on_a_crafted_dataset(tmp_path: Path, capsys):
    ds = write_dataset([miss_then_reread("t/a"), direct_reread("t/b")], tmp_path / "ds")
    ctrl = write_dataset([make([view("/r/a.py", CODE), view("/r/a.py", CODE)], None, "t/c")], tmp_path / "c")
    png = tmp_path / "cal.png"
    rc = cli(["calibrate", str(ds), "--json", "--bootstrap", "100", "--seeds", "3", "--plot", str(png),
              "--policy", "last_n:n=4,polling=1", "--control", str(ctrl)])  # fmt: skip
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trajectories"] == 2 and png.stat().st_size > 10_000
    sim = out["simulator"]
    # the logged schedule of t/a is LastN(4); t/b's is LastN(3), so some steps differ
    assert 0 < sim["schedule_agreement"]["equal"] < sim["schedule_agreement"]["steps"] == 13
    assert sim["reread"]["misses"]["count"] >= 1
    assert sim["calibrated"]["reread_prob"] == 1.0
    rows = {r["row"]: r for r in out["comparison"]}
    assert rows["observed: re-reads of hidden unchanged outputs"]["count"] == 2
    assert out["control"]["trajectories"] == 1
    # the rich report runs too
    assert cli(["calibrate", str(ds), "--bootstrap", "50", "--seeds", "1"]) == 0
    assert "lift" in capsys.readouterr().out


def test_cli_errors(tmp_path: Path, capsys):
    ds = write_dataset([make([view("/r/a.py", CODE), bash("ls")], None)], tmp_path / "plain")
    assert cli(["calibrate", str(ds)]) == 2
    err = capsys.readouterr().err
    assert NO_MASKED_DATA in err
    assert cli(["calibrate", str(tmp_path / "missing")]) == 2
    assert "no dataset" in capsys.readouterr().err
    masked = write_dataset([miss_then_reread()], tmp_path / "m")
    assert cli(["calibrate", str(masked), "--policy", "nonsense", "--bootstrap", "10"]) == 2
    assert "unknown policy" in capsys.readouterr().err


# -- the real masked runs ------------------------------------------------------------------------


@pytest.mark.shared
def test_real_swe_agent_lm_32b_runs(shared_traces: Path):
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.sim import calibrated

    folder = shared_traces / "swe-agent-1.0_swebench-verified" / "20250511_sweagent_lm_32b"
    trajs = ingest_paths([folder], progress=False).trajectories
    cal = calibrate(trajs, k=calibrated.CALIBRATED_K, n_boot=2000, seed=0)
    assert cal.trajectories == 162 and cal.steps == 2589  # MANIFEST section 4: both batches
    r = cal.rates
    # hidden outputs are re-accessed and copied from far less than visible ones (age confounds this)
    assert 0.002 < r["reaccess_masked"].rate < r["reaccess_visible"].rate < 0.2
    assert 0.002 < r["need_masked"].rate < r["need_visible"].rate < 0.2
    assert cal.ratios["need_masked_vs_visible"]["hi"] < 0.5
    # the fitted miss model is what dtoc_rl.sim.calibrated records
    mm = cal.miss_model
    stale = "labels or ingester changed: rerun `dtoc-rl calibrate` and update dtoc_rl/sim/calibrated.py"
    assert mm["episodes"] == calibrated.CALIBRATED_EPISODES, stale
    assert mm["reread_prob"]["rate"] == pytest.approx(calibrated.CALIBRATED_REREAD_PROB), stale
    assert (mm["reread_prob"]["lo"], mm["reread_prob"]["hi"]) == pytest.approx(
        calibrated.CALIBRATED_REREAD_PROB_CI, abs=0.01
    )
    assert mm["absorbed_fraction"]["rate"] == pytest.approx(calibrated.CALIBRATED_ABSORBED_FRACTION)
    assert {int(k): v for k, v in mm["delay_hist"].items()} == calibrated.CALIBRATED_DELAY_HIST
    assert mm["need_action_failed"]["rate"] == pytest.approx(calibrated.CALIBRATED_NEED_ACTION_FAILED)
    # observed re-reads of hidden unchanged outputs per 100 steps: a few, not dozens
    assert 0.3 < cal.per_100["rereads_masked_unmodified"].rate < 5
    assert np.isfinite(cal.ratios["lift"]["ratio"])
    # with all 165 runs the lift's interval excludes 1 (docs/validity.md)
    assert cal.ratios["lift"]["lo"] > 1
    # how the agents got hidden outputs back: same command, narrower view, other re-access, went on
    rec = {name: int(v["k"]) for name, v in mm["recovery"].items()}
    assert list(rec.values()) == [41, 61, 19, 79] and sum(rec.values()) == mm["episodes"]


def test_recovery_kinds_of_a_reread():
    from dtoc_rl.sim.calibration import recovery_kind

    def v(path, rng=None, cmd="view"):
        args = {"command": cmd, "path": path, **({"view_range": rng} if rng else {})}
        return Step(index=0, tool_name="str_replace_editor", tool_args=json.dumps(args), output="x")

    assert recovery_kind(v("/a.py", [1, 50]), v("/a.py", [1, 50])) == "rec_same"
    assert recovery_kind(v("/a.py", [1, 50]), v("/a.py", [10, 20])) == "rec_narrower"
    assert recovery_kind(v("/a.py"), v("/a.py", [10, 20])) == "rec_narrower"  # whole file, then a range
    assert recovery_kind(v("/a.py", [10, 20]), v("/a.py", [1, 50])) == "rec_other"  # wider
    bash = Step(index=0, tool_name="bash", tool_args="grep -n foo /a.py", output="x")
    assert recovery_kind(v("/a.py"), bash) == "rec_other"
    assert recovery_kind(
        bash, Step(index=1, tool_name="bash", tool_args="grep  -n foo /a.py", output="y")
    ) == ("rec_same")


@pytest.mark.shared
def test_the_masking_these_runs_logged_bills_as_our_last_n_of_five(shared_traces: Path):
    """`logged` replays the visibility a log records; on the SWE-agent-LM runs really masked by
    SWE-agent's LastNObservations(n=5) it bills as our reimplementation, run by run: the rule is
    faithful where it is priced (all 162 runs agree; 40 here, for the suite's time)."""
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.policies.evaluate import evaluate

    folder = shared_traces / "swe-agent-1.0_swebench-verified" / "20250511_sweagent_lm_32b"
    trajs = [
        t
        for t in ingest_paths([folder], progress=False).trajectories
        if any(s.masked_before for s in t.steps)
    ]
    runs = evaluate(trajs[:40], ["logged", "last_n:n=5"], progress=False)
    by = {(r.policy, r.traj_id): r for r in runs}
    for t in trajs[:40]:
        a, b = by["logged", t.traj_id], by["last_n:n=5", t.traj_id]
        assert (a.dollars, a.misses, a.input_tokens) == (b.dollars, b.misses, b.input_tokens), t.traj_id
    hid = sum(by["logged", t.traj_id].placeholder_tokens for t in trajs[:40])
    assert hid == sum(by["last_n:n=5", t.traj_id].placeholder_tokens for t in trajs[:40]) > 0  # it did hide
    # the harness's own masking: no change of a policy's, no management call; the rule's are
    assert sum(by["logged", t.traj_id].changes + by["logged", t.traj_id].mgmt_calls for t in trajs[:40]) == 0
    assert sum(by["last_n:n=5", t.traj_id].changes for t in trajs[:40]) > 100
