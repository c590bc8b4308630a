"""One session tracker: LiveEnv and the Orchestrator (and through it the ``/decide`` sessions) see the
same session the same way."""

import numpy as np

from dtoc_rl.envs import LiveEnv
from dtoc_rl.envs.agents import ScriptedAgent
from dtoc_rl.orchestrator import Orchestrator

N = 8
_SCRIPT = [
    {"name": "read_file", "arguments": {"path": "pager.py"}},
    {"name": "bash", "arguments": {"command": "grep -n per_page pager.py"}},
    {
        "name": "str_replace",
        "arguments": {
            "path": "pager.py",
            "old_str": 'raise ValueError("pages are numbered from 1")',
            "new_str": 'raise ValueError("page numbers start at 1")',
        },
    },
    {"name": "read_file", "arguments": {"path": "pager.py"}},
    {"name": "bash", "arguments": {"command": "ls"}},
    {"name": "submit", "arguments": {"summary": "done"}},
]
# what the policy does before each model call after the first: (slots to enable, slots to disable)
_ACTIONS = [((), (0,)), ((), (1,)), ((0,), ()), ((), ()), ((5, 1), (1, 7))]
_ITEM_KEYS = ("items", "item_tool", "item_mask", "enable_mask", "disable_mask")
_GLOBALS = ("step", "stored", "visible", "saved_tokens_k", "misses", "mgmt_calls")


def _mask(slots):
    m = np.zeros(N, np.int8)
    m[list(slots)] = 1
    return m


def _view(obs):
    from dtoc_rl.features import GLOBAL_FEATURES

    g = [float(obs["globals"][GLOBAL_FEATURES.index(k)]) for k in _GLOBALS]
    return {k: np.asarray(obs[k]).tolist() for k in _ITEM_KEYS} | {"globals": g}


def test_liveenv_and_the_orchestrator_track_a_session_alike():
    """The same turns and the same actions give the same item features, visibility, misses and invalid
    counts in LiveEnv and in an Orchestrator fed the episode turn by turn."""
    env = LiveEnv(ScriptedAgent([dict(c) for c in _SCRIPT]), tasks=["pagination"], max_items=N)
    obs, _ = env.reset(seed=0)
    live = [_view(obs)]
    for en, di in _ACTIONS:
        obs, _, term, trunc, info = env.step({"enable": _mask(en), "disable": _mask(di)})
        live.append(_view(obs))
    assert term
    traj = env.trajectory()
    live_totals = info["totals"]
    env.close()

    class Replayed:  # the same actions, as a policy: nothing before the first call
        def __init__(self):
            self.actions = [((), ())] + list(_ACTIONS)
            self.seen = []

        def act(self, obs, info):
            self.seen.append(_view(obs))
            en, di = self.actions[len(self.seen) - 1]
            return {"enable": _mask(en), "disable": _mask(di)}

    policy = Replayed()
    orch = Orchestrator(policy, query=traj.task_text, system=traj.system_prompt, max_items=N)
    for step in traj.steps:
        orch.openai_messages()  # decides
        (c,) = orch.record_assistant(
            step.assistant_text, [{"name": step.tool_name, "arguments": step.tool_args}]
        )
        orch.add_tool_result(c["id"], step.output, is_error=step.output_is_error)
    online = policy.seen[1:] + [_view(orch.observation()[0])]
    assert len(online) == len(live) == 6
    for t, (a, b) in enumerate(zip(live, online)):
        assert a == b, f"after model call {t}"
    tot = orch.totals
    assert tot.invalid_actions == live_totals["invalid_actions"] > 0
    assert live_totals["misses"] > 0 and live_totals["changes"] > 0
    assert (tot.misses, tot.changes, tot.mgmt_calls) == (
        live_totals["misses"],
        live_totals["changes"],
        live_totals["mgmt_calls"],
    )
    assert [s.masked_before for s in orch.trajectory().steps] == [s.masked_before for s in traj.steps]
