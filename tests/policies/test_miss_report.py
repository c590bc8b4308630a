"""Where a policy's misses come from: ReplayEnv's ``info["missed"]``, evaluate's per-miss rows and
``dtoc-rl evaluate --misses-out``."""

from __future__ import annotations

import json

from dtoc_rl.cli import main as cli
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import LastNObservations
from dtoc_rl.policies.evaluate import miss_rows, run_policy_on_episode
from tests.policies.crafted import crafted


def _run(traj, policy):
    env = ReplayEnv(trajectories=[traj], max_items=16)
    return run_policy_on_episode(policy, env, 0, "p")


def test_each_miss_names_the_call_and_the_hidden_output_it_needed():
    # step 5 copies from step 0; keep-last-1 has hidden step 0 by then
    traj = crafted([400] * 7, needs={5: [0]})
    run = _run(traj, LastNObservations(n=1))
    assert run.misses == 1
    (m,) = run.extra["missed"]
    assert (m["call"], m["step"], m["age"], m["need"]) == (5, 0, 5, "provenance")
    assert m["tool"] == "bash" and m["tokens"] > 0 and m["preview"].startswith("x")
    (row,) = miss_rows([run])
    assert row["traj_id"] == traj.traj_id and row["policy"] == "p" and row["step"] == 0


def test_a_run_without_misses_lists_none_and_everything_visible_never_misses():
    traj = crafted([400] * 7, needs={5: [0]})
    assert "missed" not in _run(traj, LastNObservations(n=10)).extra
    assert miss_rows([_run(traj, LastNObservations(n=10))]) == []


def test_misses_out_has_one_line_per_counted_miss(tmp_path):
    out, runs = tmp_path / "m" / "misses.jsonl", tmp_path / "runs.jsonl"
    code = cli(["evaluate", "-p", "last_n:n=2", "--misses-out", str(out), "--runs-out", str(runs), "--quiet",
                "--json"])  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    counted = sum(json.loads(line)["misses"] for line in runs.read_text().splitlines())
    assert counted > 0 and len(rows) == counted
    assert all(r["age"] >= 1 and r["need"] for r in rows)
    assert not list(out.parent.glob("*.partial"))


class _HideAll:
    """Hides every visible output at every decision (the answer to the call just made included)."""

    def reset(self, info=None):
        pass

    def act(self, obs, info=None):
        import numpy as np

        return {"enable": np.zeros_like(obs["item_mask"]), "disable": obs["disable_mask"].copy()}


def test_a_miss_on_the_answer_no_call_has_read_says_unread_and_uncounted_kinds_are_not_named():
    from dtoc_rl.data.schema import Need

    traj = crafted([400] * 4)
    traj.steps[3].needs = [Need(step=2, kind="reaccess", evidence="f2")]  # not a counted kind
    run = _run(traj, _HideAll())
    assert run.misses == len(run.extra["missed"]) > 0
    assert all(m["need"] == "unread" and m["age"] == 1 for m in run.extra["missed"])
