"""Parity of the bill: LiveEnv's dollars equal the Simulator's on the episode LiveEnv recorded.

A scripted agent fixes a shipped task in LiveEnv under a fixed visibility schedule (a policy that
hides and restores outputs by DTOC key); RecordTrajectory writes the episode as a chat log;
``dtoc-rl ingest``'s driver reads it back; ReplayEnv replays it under the same schedule (by key)
and bills it with the Simulator.  Both must give the same dollars, with the schedule and with
everything visible.
"""

from __future__ import annotations

import numpy as np
import pytest

from dtoc_rl.envs import LiveEnv, ReplayEnv
from dtoc_rl.envs.agents import ScriptedAgent
from dtoc_rl.envs.recorder import RecordTrajectory
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.sim.simulator import CostConfig

N = 8
PYTEST = "python -m pytest -q"
SCRIPT = [
    {"name": "read_file", "arguments": {"path": "pager.py"}},
    {"name": "bash", "arguments": {"command": "ls"}},
    {"name": "bash", "arguments": {"command": "grep -n per_page pager.py"}},
    {"name": "bash", "arguments": {"command": PYTEST}},
    {
        "name": "str_replace",
        "arguments": {
            "path": "pager.py",
            "old_str": "start = page * per_page",
            "new_str": "start = (page - 1) * per_page",
        },
    },
    {"name": "bash", "arguments": {"command": PYTEST}},
    {"name": "read_file", "arguments": {"path": "pager.py"}},
    {"name": "submit", "arguments": {"summary": "fixed the slice start"}},
]
# decision -> (keys to hide, keys to show)
SCHEDULE = {
    1: ({"t0000"}, set()),
    2: ({"t0001"}, set()),
    3: ({"t0002"}, set()),  # not at 2: no call had read it then (a miss, which a scripted agent ignores)
    4: (set(), {"t0001"}),
    5: ({"t0003"}, set()),
}


class ByKey:
    """Hides and shows outputs by DTOC key at given decisions (whatever slots they are in)."""

    def __init__(self, schedule=SCHEDULE, n=N):
        self.schedule, self.n, self.decision = schedule, n, 0

    def act(self, obs, info):
        hide, show = self.schedule.get(self.decision, (set(), set()))
        self.decision += 1
        keys = list(info.get("keys", info.get("slot_keys")))
        en = np.array([k in show for k in keys] + [False] * (self.n - len(keys)), np.int8)[: self.n]
        di = np.array([k in hide for k in keys] + [False] * (self.n - len(keys)), np.int8)[: self.n]
        return {"enable": en, "disable": di}


def _run(env, policy):
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(policy.act(obs, info))
        done = term or trunc
    return info


def live_and_replayed(tmp_path, schedule=SCHEDULE, cache="provider"):
    rec = tmp_path / "live.jsonl"
    env = RecordTrajectory(
        LiveEnv(ScriptedAgent(SCRIPT, model_name="gpt-4o-2024-08-06"), tasks=["pagination"], max_items=N,
                cache=cache, text_view=True),
        rec,
    )  # fmt: skip
    live = _run(env, ByKey(schedule))
    env.close()
    res = ingest_paths([rec], label=True, progress=False)
    assert not res.skipped, res.skipped
    (traj,) = res.trajectories
    cfg = CostConfig(cache=cache)
    replay = _run(
        ReplayEnv(trajectories=[traj], max_items=N, text_view=True, cost_config=cfg), ByKey(schedule)
    )
    return live, replay, traj


def _check(live, replay):
    assert live["success"] and live["totals"]["changes"] > 0  # the schedule did hide outputs
    assert replay["totals"]["calls"] == live["totals"]["calls"] == len(SCRIPT)
    for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"):
        assert replay["totals"][k] == live["totals"][k], k
    assert replay["all_visible"]["dollars"] == pytest.approx(live["all_visible"]["dollars"], rel=1e-9)
    assert replay["totals"]["dollars"] == pytest.approx(live["totals"]["dollars"], rel=1e-9)


@pytest.mark.slow
def test_liveenv_dollars_equal_the_simulators_with_the_ideal_cache(tmp_path):
    """The same prompts, the same cached prefixes (every shared prefix read back), the same dollars."""
    live, replay, _ = live_and_replayed(tmp_path, cache="ideal")
    _check(live, replay)


@pytest.mark.slow
def test_liveenv_dollars_equal_the_simulators_under_the_providers_cache_rules(tmp_path):
    """LiveEnv applies the provider's CacheRules as the Simulator does (OpenAI: nothing cached under
    1,024 tokens, so this short episode reads nothing from the cache on either path)."""
    live, replay, _ = live_and_replayed(tmp_path)
    _check(live, replay)
