"""One session tracker: LiveEnv and the Orchestrator (and through it the ``/decide`` sessions) see the
same session the same way."""

import numpy as np

from dtoc_rl.envs import LiveEnv
from dtoc_rl.envs.agents import ScriptedAgent
from dtoc_rl.serve.orchestrator import Orchestrator

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
    from dtoc_rl.engine.features import GLOBAL_FEATURES

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


def _two_turns_citing_the_first_output(label_every: int, observe_each_turn: bool):
    """Four one-call turns; turns 1 and 2 cite output t0000 (a 'reference' need), which is hidden
    before turn 1.  Returns the Orchestrator after the last turn."""
    orch = Orchestrator(
        mode="agent", query="fix pager.py", model="gpt-4o-2024-08-06", label_every=label_every, max_items=N
    )
    for i, out in enumerate(["def page(n):\n    return n * SIZE\n", "ok1", "ok2", "ok3"]):
        if i == 1:
            orch.manage_context(disable=["t0000"])
        text = f"step {i}" + (", as t0000 showed" if i in (1, 2) else "")
        (c,) = orch.record_assistant(text, [{"name": "bash", "arguments": {"command": f"echo {i}"}}])
        orch.add_tool_result(c["id"], out)
        if observe_each_turn:
            orch.observation()
    return orch


def test_needs_are_counted_per_turn_whenever_the_turns_are_labelled():
    """times_needed, since_need and misses count each turn's needs once, as ReplayEnv counts each model
    call's: labelling two turns together (label_every=3, or no decision between them, as a /decide
    request carrying several turns) must not merge their needs into one."""
    from dtoc_rl.engine.features import ITEM_FEATURES
    from dtoc_rl.envs import ReplayEnv

    cols = [ITEM_FEATURES.index(k) for k in ("times_needed", "since_need", "rereads")]
    seen = []
    for label_every, each in ((1, True), (1, False), (3, False)):
        orch = _two_turns_citing_the_first_output(label_every, each)
        obs, _ = orch.observation()
        seen.append((obs["items"][0, cols].tolist(), orch.totals.misses))
    assert seen[0] == ([2.0, 1.0, 2.0], 2)  # needed at calls 1 and 2, seen at call 3; missed twice
    assert seen[1] == seen[0] and seen[2] == seen[0]
    # ReplayEnv on the session's log, under the same schedule (t0000 hidden before call 1)
    traj = orch.trajectory(True)
    env = ReplayEnv(trajectories=[traj], max_items=N)
    obs, _ = env.reset(seed=0)
    done, t = False, 0
    while not done:
        hide = _mask((0,) if t == 0 else ())
        obs, _, done, _, _ = env.step({"enable": np.zeros(N, np.int8), "disable": hide})
        t += 1
    assert obs["items"][0, cols[:2]].tolist() == seen[0][0][:2]


def test_observed_misses_count_the_kinds_replayenv_counts():
    """A hidden output the agent re-reads itself (a reaccess need) is a miss on the bill online, but the
    observation's ``misses`` counts only the need kinds ReplayEnv counts, so a policy sees online the
    feature it was trained on (issue 16: one meaning of every feature)."""
    import gymnasium as gym

    import dtoc_rl.envs  # noqa: F401
    from dtoc_rl.engine.features import GLOBAL_FEATURES
    from dtoc_rl.serve.orchestrator import Orchestrator
    from tests.crafted_trajs import reaccess_trajectory

    traj = reaccess_trajectory(echo=False)

    class HideFirst:
        def act(self, obs, info):
            return {
                "enable": np.zeros(4, np.int8),
                # once a call has read it (a second output is stored): hiding an unread output is a
                # miss of every kind
                "disable": np.array([1, 0, 0, 0], np.int8) * obs["disable_mask"] * obs["item_mask"][1],
            }

    g = GLOBAL_FEATURES.index("misses")
    env = gym.make("dtoc_rl/Replay-v0", dataset=[traj], max_items=4).unwrapped
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, _, done, _, info = env.step(HideFirst().act(obs, info))
    o = Orchestrator(HideFirst(), query=traj.task_text, model="gpt-4o", max_items=4)
    for i, s in enumerate(traj.steps):
        if i:
            o.decide(force=True)
        calls = [s] if s.tool_name else []
        ids = o.record_assistant(
            s.assistant_text, [{"name": c.tool_name, "arguments": c.tool_args} for c in calls]
        )
        for c, x in zip(ids, calls):
            o.add_tool_result(c["id"], x.output)
    assert [(n.step, n.kind) for n in o.trajectory().steps[2].needs] == [(0, "reaccess")]
    assert o.totals.misses == 1  # the bill: the agent re-ran `cat a.py` because it was hidden
    assert obs["globals"][g] == 0 and o.observation()[0]["globals"][g] == 0


def test_an_unread_output_hidden_is_a_miss_even_without_labelling():
    from dtoc_rl.serve.orchestrator import Orchestrator

    class HideNewest:
        def act(self, obs, info):
            m = obs["item_mask"].astype(np.int8)
            newest = np.zeros_like(m)
            newest[int(m.sum()) - 1] = 1
            return {"enable": np.zeros_like(m), "disable": newest * obs["disable_mask"]}

    for label_every in (0, 1):
        o = Orchestrator(HideNewest(), query="q", model="gpt-4o", max_items=4, label_every=label_every)
        for i in range(3):
            if i:
                o.decide(force=True)
            (cid,) = o.record_assistant("a", [{"name": "bash", "arguments": {"command": f"ls {i}"}}])
            o.add_tool_result(cid["id"], "x" * 400)
        # calls 1 and 2 were made with the previous call's output hidden
        assert o.totals.misses == 2, label_every


def test_the_steps_a_call_is_sent_hidden_are_those_of_the_hidden_outputs():
    # masked_steps reads a row -> step array (grown past its first 256 rows): pinned to the plain
    # reading of every output, with outputs of no step of the session among them
    import random

    rng = random.Random(0)
    orch = Orchestrator(mode="agent", query="task")
    for i in range(300):
        if i % 50 == 7:  # an output of no call of the session: no step
            orch._s.track(orch.store.add(f"note {i}", tool_name="note"), None, call=i, is_error=False)
            continue
        orch.record_assistant("", [{"name": "bash", "arguments": {"command": f"ls {i}"}, "id": f"c{i}"}])
        orch.add_tool_result(f"c{i}", f"out {i}")
    s, keys = orch._s, orch.store.keys()
    assert any(o.step < 0 for o in s.outputs)
    for _ in range(20):
        pick = rng.sample(keys, 40)
        orch.manage_context(enable=pick[:20], disable=pick[20:])
        plain = sorted(o.step for o in s.outputs if not o.rec.visible and o.step >= 0)
        assert s.masked_steps() == plain and all(type(x) is int for x in plain)
