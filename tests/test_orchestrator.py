"""The Orchestrator in a live loop: three modes, both providers, SQLite restarts, asyncio, logs."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest
from pydantic import TypeAdapter

from dtoc_rl.cli import main as cli_main
from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES, build_observation
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.sim.simulator import MISS_KINDS

openai_types = pytest.importorskip("openai.types.chat")
anthropic_types = pytest.importorskip("anthropic.types")

OPENAI_MESSAGES = TypeAdapter(list[openai_types.ChatCompletionMessageParam])
OPENAI_TOOLS = TypeAdapter(list[openai_types.ChatCompletionToolParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[anthropic_types.MessageParam])
ANTHROPIC_TOOLS = TypeAdapter(list[anthropic_types.ToolParam])

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
FILES = {f"f{i}.py": f"def function_number_{i}(argument_{i}):\n    return compute_{i}(argument_{i})\n" * 12
         for i in range(6)}  # fmt: skip


def oa_response(content, calls=(), model="gpt-4o-2024-08-06"):
    """A chat-completions response dict: calls are (id, name, arguments)."""
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": msg}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def an_response(text, calls=(), model="claude-sonnet-4-5"):
    content = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def run_tool(name, args):
    if name == "bash" and args["command"].startswith("cat "):
        return FILES[args["command"].split()[1]]
    return f"ran {args}"


def read_loop(orch, n, start=0):
    """n turns of `cat fK.py`, each answered; returns the requests sent."""
    sent = []
    for t in range(start, start + n):
        req = orch.openai_request([BASH])
        sent.append(req)
        calls = orch.record_openai_response(
            oa_response(f"turn {t}", [(f"call_{t}", "bash", {"command": f"cat f{t % 6}.py"})])
        )
        for c in calls:
            orch.add_tool_result(c["id"], run_tool(c["name"], c["arguments"]))
    return sent


def hidden(msgs):
    return [
        json.loads(m["content"])["tool_key"]
        for m in msgs
        if m["role"] == "tool" and '"hidden": true' in m["content"]
    ]


# ------------------------------------------------------------------------------ policy mode


def test_policy_mode_hides_before_each_call_and_requests_validate():
    orch = Orchestrator(make_policy("last_n:n=2"), query="Fix the bug", system="You are a coding agent.")
    assert orch.mode == "policy"
    sent = read_loop(orch, 5)
    req = orch.openai_request([BASH])
    OPENAI_MESSAGES.validate_python(req["messages"])
    OPENAI_TOOLS.validate_python(req["tools"])
    assert [t["function"]["name"] for t in req["tools"]] == ["bash"]  # the model never sees manage_context
    assert hidden(req["messages"]) == ["t0000", "t0001", "t0002"]
    assert hidden(sent[3]["messages"]) == ["t0000"]  # decided before the 4th call
    assert orch.model == "gpt-4o-2024-08-06" and orch.model_family == "gpt-4o"  # read from the response
    assert orch.totals.calls == 5 and orch.totals.input_tokens == 500
    # re-reading f0.py at turn 0+6 would need t0000; here turn 5 reads f5 -> no miss yet
    traj = orch.trajectory()
    assert [s.masked_before for s in traj.steps] == [[], [], [], [0], [0, 1]]
    assert traj.steps[3].events[0].kind == "disable" and traj.steps[3].events[0].detail == "t0000"
    assert traj.model_family == "gpt-4o" and traj.api_calls == 5


def test_sdk_objects_are_accepted_and_a_hidden_output_needed_again_is_a_miss():
    from openai.types.chat import ChatCompletion

    orch = Orchestrator(make_policy("last_n:n=1"), query="task")
    for t in range(3):
        orch.openai_messages()
        resp = ChatCompletion.model_validate(
            oa_response("", [(f"c{t}", "bash", {"command": f"cat f{t}.py"})])
        )
        (c,) = orch.record_openai_response(resp)
        assert c["arguments"] == {"command": f"cat f{t}.py"}
        orch.add_tool_result(c["id"], run_tool("bash", c["arguments"]))
    assert hidden(orch.openai_messages()) == ["t0000", "t0001"]
    # the model reads f0.py again: a re-access need on t0000, hidden when the call was made
    (c,) = orch.record_openai_response(oa_response("again", [("c3", "bash", {"command": "cat f0.py"})]))
    orch.add_tool_result(c["id"], FILES["f0.py"])
    assert orch.totals.misses == 1
    obs, info = orch.observation()
    slot = info["keys"].index("t0000")
    f = {n: obs["items"][slot, i] for i, n in enumerate(ITEM_FEATURES)}
    # a miss in the totals, but a re-access is not a need kind the features count (as in ReplayEnv)
    assert f["times_needed"] == 0 and f["rereads"] == 0 and f["superseded"] == 1 and f["toggles"] == 1
    assert f["age"] == 3 and f["visible"] == 0
    # item_states() is the same knowledge as ItemStates (what a /decide request carries)
    states = dict(orch.item_states())
    assert list(states) == ["t0000", "t0001", "t0002", "t0003"]
    st = states["t0000"]
    assert (st.times_needed, st.rereads, st.superseded, st.toggles, st.age, st.visible) == (
        0,
        0,
        True,
        1,
        3,
        False,
    )
    assert st.since_need is None and st.est_tokens == orch.store.get("t0000").estimated_tokens
    rebuilt = build_observation(
        [s for _, s in orch.item_states()], len(obs["item_mask"]), active_tokens=0, step=0
    )
    np.testing.assert_array_equal(rebuilt["items"], obs["items"])


def test_visibility_changed_on_ctx_directly_reaches_the_policy():
    orch = Orchestrator(make_policy("none"), query="task")
    read_loop(orch, 3)
    vis = ITEM_FEATURES.index("visible")
    gain = orch.store.get("t0001").visible_cost - orch.store.get("t0001").hidden_cost
    orch.ctx.manage_context(disable=["t0001"])  # not through the orchestrator
    obs, _ = orch.observation()
    g = dict(zip(GLOBAL_FEATURES, obs["globals"]))
    assert list(obs["items"][:3, vis]) == [1, 0, 1] and list(obs["enable_mask"][:3]) == [0, 1, 0]
    assert g["visible"] == 2 and g["saved_tokens_k"] == pytest.approx(gain / 1000)
    orch.ctx.manage_context(enable=["t0001"])
    obs, _ = orch.observation()
    assert obs["items"][1, vis] == 1 and obs["globals"][GLOBAL_FEATURES.index("saved_tokens_k")] == 0


def test_observation_and_info_for_policies():
    seen = {}

    class Spy:
        label = "spy"

        def act(self, obs, info):
            seen["obs"], seen["info"] = obs, info
            seen["text"] = info["text"]  # computed on demand
            n = len(obs["item_mask"])
            action = {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}
            keys = list(info["keys"])
            if info["step"] >= 6:  # t0001 has left the window by now: asking for it does nothing
                action["disable"][:] = 0
            elif "t0003" in keys:
                action["disable"][keys.index("t0003")] = 1
            return action

    orch = Orchestrator(Spy(), query="task", max_items=4, model="claude-sonnet-4-5", budget_tokens=5000)
    read_loop(orch, 6)
    msgs = orch.openai_messages()
    obs, info = seen["obs"], seen["info"]
    assert obs["items"].shape == (4, len(ITEM_FEATURES)) and obs["globals"].shape == (len(GLOBAL_FEATURES),)
    assert list(info["keys"]) == ["t0002", "t0003", "t0004", "t0005"]  # the 4 most recent, oldest first
    assert list(info["slot_steps"]) == [2, 3, 4, 5]
    g = dict(zip(GLOBAL_FEATURES, obs["globals"]))
    assert g["stored"] == 6 and g["step"] == 6 and g["budget_k"] == 5.0
    assert info["model_family"] == "claude-sonnet" and info["active_tokens"] == orch.active_tokens
    assert seen["text"].startswith("Active context:") and "- t0005 [visible] step 5, bash" in seen["text"]
    assert "Recent reasoning:" in seen["text"]
    assert hidden(msgs) == ["t0003"]


def test_learned_checkpoint_plugs_in(tmp_path):
    ckpt = LearnedPolicyConfig(n_layers=1, d_model=32).create().save(tmp_path / "ckpt")
    orch = Orchestrator(make_policy(str(ckpt)), query="task", max_items=8)
    read_loop(orch, 10)
    d = orch.decide(force=True)
    assert d.ran and d.latency_ms > 0
    obs, info = orch.observation()
    assert obs["item_mask"].sum() == 8 and info["keys"][-1] == "t0009"
    OPENAI_MESSAGES.validate_python(orch.openai_messages())


# ------------------------------------------------------------------------------ agent and hybrid


def test_agent_mode_answers_manage_context_itself():
    orch = Orchestrator(query="task", system="sys")
    assert orch.mode == "agent" and orch.policy is None
    read_loop(orch, 2)
    req = orch.openai_request([BASH])
    assert [t["function"]["name"] for t in req["tools"]] == ["bash", "manage_context"]
    OPENAI_TOOLS.validate_python(req["tools"])
    calls = orch.record_openai_response(
        oa_response("freeing space", [("m1", "manage_context", {"disable": ["t0000", "t9999"]})])
    )
    assert calls == []  # answered by the orchestrator, never returned to the loop
    msgs = orch.openai_messages()
    OPENAI_MESSAGES.validate_python(msgs)
    report = json.loads(next(m["content"] for m in msgs if m.get("tool_call_id") == "m1"))
    assert report["disabled"] == ["t0000"] and "t9999" in report["errors"] and report["delta"] < 0
    assert hidden(msgs) == ["t0000"]
    # parallel calls: one real tool and one manage_context; only the real one comes back
    calls = orch.record_openai_response(
        oa_response("", [("m2", "manage_context", {"enable": ["t0000"]}), ("c9", "bash", {"command": "ls"})])
    )
    assert [c["id"] for c in calls] == ["c9"]
    orch.add_tool_result("c9", "f0.py f1.py")
    msgs = orch.openai_messages()
    OPENAI_MESSAGES.validate_python(msgs)
    env = json.loads(next(m["content"] for m in msgs if m.get("tool_call_id") == "call_0"))
    assert env["tool_result"] == FILES["f0.py"]  # restored byte for byte
    assert orch.totals.model_mgmt_calls == 2 and orch.totals.changes == 2
    assert not orch.decide(force=True).ran  # no policy in agent mode


def test_hybrid_model_overrides_are_pinned_against_the_policy():
    orch = Orchestrator(make_policy("last_n:n=1"), mode="hybrid", query="task")
    read_loop(orch, 3)
    req = orch.openai_request([BASH])
    assert "manage_context" in [t["function"]["name"] for t in req["tools"]]
    assert hidden(req["messages"]) == ["t0000", "t0001"]
    orch.record_openai_response(
        oa_response("", [("m1", "manage_context", {"enable": ["t0000"], "disable": ["t0002"]})])
    )
    msgs = orch.openai_messages()
    d = orch.last_decision
    assert sorted(d.blocked) == ["t0000", "t0002"]  # the policy wanted t0000 hidden and t0002 shown
    assert hidden(msgs) == ["t0001", "t0002"]
    read_loop(orch, 1, start=3)  # t0003 arrives; the policy hides the rest but not the pinned t0000
    assert hidden(orch.openai_messages()) == ["t0001", "t0002"] or "t0000" not in hidden(
        orch.openai_messages()
    )


def test_policy_mode_refuses_a_stray_manage_context_call():
    orch = Orchestrator(make_policy("none"), query="task")
    orch.openai_messages()
    calls = orch.record_openai_response(oa_response("", [("m", "manage_context", {"disable": ["t0000"]})]))
    assert calls == []
    msgs = orch.openai_messages()
    assert "not available" in msgs[-1]["content"]


# ------------------------------------------------------------------------------ anthropic


def test_anthropic_requests_validate_and_tool_use_ids_pair():
    orch = Orchestrator(make_policy("last_n:n=1"), mode="hybrid", query="task", system="be brief")
    for t in range(3):
        req = orch.anthropic_request([BASH])
        calls = orch.record_anthropic_response(
            an_response(
                f"t{t}",
                [
                    (f"toolu_{t}a", "bash", {"command": f"cat f{t}.py"}),
                    (f"toolu_{t}b", "bash", {"command": "ls"}),
                ],
            )
        )
        assert [c["id"] for c in calls] == [f"toolu_{t}a", f"toolu_{t}b"]
        for c in reversed(calls):  # answered out of order
            orch.add_tool_result(c["id"], run_tool(c["name"], c["arguments"]))
    req = orch.anthropic_request([BASH])
    ANTHROPIC_MESSAGES.validate_python(req["messages"])
    ANTHROPIC_TOOLS.validate_python(req["tools"])
    assert req["system"] == "be brief"
    assert [t["name"] for t in req["tools"]] == ["bash", "manage_context"]
    roles = [m["role"] for m in req["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:]))
    uses = [b["id"] for m in req["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in req["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert sorted(uses) == sorted(b["tool_use_id"] for b in results)
    # last_n:n=1 of 6: all but the newest turn's two, which no call has read yet
    assert sum('"hidden": true' in b["content"] for b in results) == 4
    assert orch.model_family == "claude-sonnet"


def test_sdk_message_object_and_pending_calls_are_checked():
    from anthropic.types import Message

    orch = Orchestrator(make_policy("none"), query="task")
    orch.anthropic_request()
    (c,) = orch.record_anthropic_response(
        Message.model_validate(an_response("", [("toolu_1", "bash", {"command": "ls"})]))
    )
    with pytest.raises(ValueError, match="no result yet"):
        orch.anthropic_request()
    orch.add_tool_result(c["id"], b"bytes \xff ok")
    assert orch.anthropic_request()["messages"][-1]["content"][0]["type"] == "tool_result"


# ------------------------------------------------------------------------------ persistence


def test_sqlite_session_survives_a_restart(tmp_path):
    db = tmp_path / "sessions.sqlite"
    orch = Orchestrator(
        make_policy("last_n:n=2"), query="task", system="sys", session_path=db, session_id="s1"
    )
    read_loop(orch, 4)
    before = orch.openai_messages()
    assert hidden(before) == ["t0000", "t0001"]
    orch.close()

    again = Orchestrator(
        make_policy("last_n:n=2"), query="task", system="sys", session_path=db, session_id="s1"
    )
    assert again.resumed and again.session_id == "s1"
    after = again.openai_messages()
    assert after == before
    # the resumed policy view starts from the stored visibility
    obs, info = again.observation()
    g = dict(zip(GLOBAL_FEATURES, obs["globals"]))
    assert g["visible"] == 2 and list(obs["items"][:4, ITEM_FEATURES.index("visible")]) == [0, 0, 1, 1]
    gain = sum(again.store.get(k).visible_cost - again.store.get(k).hidden_cost for k in ("t0000", "t0001"))
    assert g["saved_tokens_k"] == pytest.approx(gain / 1000)
    assert again.totals.calls == 4 and len(again.store) == 4
    # the labels came back: turn 3... read f3; continue the loop where it stopped
    read_loop(again, 3, start=4)
    assert hidden(again.openai_messages()) == ["t0000", "t0001", "t0002", "t0003", "t0004"]
    traj = again.trajectory()
    assert traj.n_steps == 7 and traj.steps[0].output == FILES["f0.py"]
    assert traj.task_text == "task" and traj.system_prompt == "sys"
    # t0000 was re-read at turn 6 (cat f0.py): a need on a hidden output, labelled online
    assert any(n.step == 0 and n.kind == "reaccess" for n in traj.steps[6].needs)
    again.close()


def test_session_id_alone_uses_the_default_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DTOC_SESSION_DB", str(tmp_path / "default.sqlite"))
    with Orchestrator(make_policy("none"), query="q", session_id="abc") as orch:
        read_loop(orch, 1)
    assert (tmp_path / "default.sqlite").is_file()


# ------------------------------------------------------------------------------ asyncio


def test_async_api_does_not_block_the_event_loop():
    class SlowPolicy:
        label = "slow"

        def act(self, obs, info):
            time.sleep(0.05)
            n = len(obs["item_mask"])
            return {"enable": np.zeros(n, np.int8), "disable": obs["disable_mask"].copy() * 0}

    async def main():
        orch = Orchestrator(SlowPolicy(), query="task")
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        tick_task = asyncio.create_task(ticker())
        for t in range(3):
            req = await orch.aopenai_request([BASH])
            OPENAI_MESSAGES.validate_python(req["messages"])
            calls = await orch.arecord_openai_response(
                oa_response("", [(f"c{t}", "bash", {"command": "ls"})])
            )
            await orch.aadd_tool_result(calls[0]["id"], "out")
        areq = await orch.aanthropic_request()
        d = await orch.adecide(force=True)
        stop.set()
        await tick_task
        return orch, ticks, areq, d

    orch, ticks, areq, d = asyncio.run(main())
    assert orch.totals.decisions >= 4 and d.ran
    assert ticks >= 10  # the loop kept running while the policy slept in a thread
    ANTHROPIC_MESSAGES.validate_python(areq["messages"])


def test_threads_share_one_orchestrator():
    orch = Orchestrator(make_policy("last_n:n=3"), query="task")
    read_loop(orch, 5)
    errors = []

    def worker():
        try:
            for _ in range(20):
                orch.decide(force=True)
                orch.observation()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and hidden(orch.openai_messages()) == ["t0000", "t0001"]


# ------------------------------------------------------------------------------ logs


def test_log_is_reingested_by_dtoc_rl_ingest(tmp_path):
    orch = Orchestrator(make_policy("last_n:n=2"), query="Fix f0", system="sys", task_id="demo-task")
    read_loop(orch, 4)
    orch.add_user("please also check f1")
    read_loop(orch, 1, start=6)  # cat f0.py again
    orch.openai_messages()
    orch.record_openai_response(oa_response("All done."))
    orch.success = True
    log = orch.save_log(tmp_path / "run.jsonl")
    row = json.loads(log.read_text())
    assert row["messages"][0] == {"role": "system", "content": "sys"}
    assert all('"tool_key"' not in m.get("content", "") for m in row["messages"] if m["role"] == "tool")

    out = tmp_path / "ds"
    assert cli_main(["ingest", str(log), "-o", str(out), "--workers", "1", "--quiet", "--json"]) == 0
    (t,) = load_trajectories(out)
    mine = orch.trajectory()
    assert t.task_id == "demo-task" and t.success is True and t.model_family == "gpt-4o"
    assert [(s.tool_name, s.output) for s in t.steps] == [(s.tool_name, s.output) for s in mine.steps]
    assert t.steps[4].user_text == "please also check f1"
    assert t.steps[-1].tool_name is None and t.steps[-1].assistant_text == "All done."
    extra = t.extra_dict()
    vis = json.loads(extra["dtoc_visibility"])
    assert vis["3"]["masked_before"] == [0] and extra["dtoc_policy"].startswith("last_n")
    assert [(s.masked_before, s.events) for s in t.steps] == [(s.masked_before, s.events) for s in mine.steps]
    assert t.steps[3].masked_before == [0] and t.steps[3].events[0].kind == "disable"
    # the ingester's hindsight labels agree with the online ones on the re-read
    assert any(n.step == 0 and n.kind == "reaccess" for n in t.steps[4].needs)
    assert _labels(t) == _labels(mine)
    # each call's usage and time come back as recorded
    assert [(s.usage, s.timestamp) for s in t.steps] == [(s.usage, s.timestamp) for s in mine.steps]
    assert t.steps[0].usage.input_tokens == 100 and t.steps[0].timestamp > 0


def test_a_calls_cache_counts_are_kept_in_either_providers_shape(tmp_path):
    # what the provider billed, as its API reports it: the log keeps it, and the totals count every
    # prompt token (Anthropic's input_tokens leaves out the cache reads and writes)
    o = Orchestrator(query="task")
    oa = oa_response("", [("c1", "bash", {"command": "ls"})])
    oa["usage"] = {
        "prompt_tokens": 5000,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 4096},
    }
    o.record_openai_response(oa)
    o.add_tool_result("c1", "f0.py")
    an = an_response("done")
    an["usage"] = {"input_tokens": 300, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 200,
                   "output_tokens": 12}  # fmt: skip
    o.record_anthropic_response(an)
    assert (o.totals.input_tokens, o.totals.output_tokens) == (5000 + 5500, 52)
    o.save_log(tmp_path / "run.jsonl")
    assert (
        cli_main(["ingest", str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "ds"), "--quiet", "--json"])
        == 0
    )
    (t,) = load_trajectories(tmp_path / "ds")
    u0, u1 = t.steps[0].usage, t.steps[1].usage
    assert (u0.input_tokens, u0.cached_tokens, u0.output_tokens) == (5000, 4096, 40)
    assert (u1.input_tokens, u1.cached_tokens, u1.cache_write_tokens, u1.output_tokens) == (
        5500,
        5000,
        200,
        12,
    )


def test_labelling_every_k_turns_and_off():
    a = Orchestrator(make_policy("none"), query="t", label_every=3)
    read_loop(a, 7)  # f0 read at turns 0 and 6
    assert a.totals.misses == 0
    assert any(n.step == 0 for n in a.trajectory().steps[6].needs)  # trajectory() labels what is left
    b = Orchestrator(make_policy("none"), query="t", label_every=0)
    read_loop(b, 7)
    assert all(not s.needs for s in b.trajectory().steps)


def test_bad_arguments_and_bad_policies():
    with pytest.raises(ValueError, match="needs a policy"):
        Orchestrator(mode="policy")
    with pytest.raises(ValueError, match="mode must be"):
        Orchestrator(make_policy("none"), mode="auto")
    with pytest.raises(TypeError, match="act"):
        Orchestrator(object(), mode="policy")

    class Wrong:
        def act(self, obs, info):
            return {"enable": np.zeros(3), "disable": np.zeros(3)}

    orch = Orchestrator(Wrong(), query="t")
    with pytest.raises(ValueError, match="shapes"):
        orch.openai_messages()
    with pytest.raises(TypeError, match="SDK object"):
        orch.record_openai_response(42)


def _labels(traj):
    return [
        (s.read_resource, s.write_resources, [(n.step, n.kind, n.evidence) for n in s.needs])
        for s in traj.steps
    ]


def _replay(orch, traj):
    """Drive ``orch`` with a logged trajectory's turns, deciding before each model call."""
    by_turn: dict[int, list] = {}
    for s in traj.steps:
        by_turn.setdefault(s.turn, []).append(s)
    for steps in by_turn.values():
        orch.openai_request([BASH])
        if steps[0].user_text:
            orch.add_user(steps[0].user_text)
        calls = [s for s in steps if s.tool_name]
        ids = orch.record_assistant(
            steps[0].assistant_text or "",
            [{"name": s.tool_name, "arguments": s.tool_args or "{}"} for s in calls],
        )
        for c, s in zip(ids, calls):
            orch.add_tool_result(c["id"], s.output or "", is_error=s.output_is_error)


def test_online_labels_are_label_trajectory_of_the_log(data_dir, tmp_path):
    import copy

    from dtoc_rl.labels import label_trajectory

    trajs = [t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 3]
    compared = needs = 0
    logged = {}
    for t in trajs[:12]:
        o = Orchestrator(
            make_policy("last_n:n=3"),
            query=t.task_text,
            system=t.system_prompt,
            model="gpt-4o",
            task_id=t.traj_id,
        )
        _replay(o, t)
        online = o.trajectory()
        o.save_log(tmp_path / "runs.jsonl", append=True)
        logged[t.traj_id] = _labels(online)
        offline = copy.deepcopy(online)
        label_trajectory(offline, keys=json.loads(online.extra)["keys"])
        assert _labels(online) == _labels(offline), t.traj_id
        # the policy's features came from the same needs
        counts = {}
        for s in online.steps:
            for n in s.needs:
                if n.kind in MISS_KINDS:  # the kinds ReplayEnv counts (CostConfig.need_kinds)
                    counts[n.step] = counts.get(n.step, 0) + 1
        key_step = json.loads(online.extra)["keys"]
        feats = {key_step[k]: st.times_needed for k, st in o.item_states()}
        assert {k: v for k, v in feats.items() if v} == counts, t.traj_id
        compared += 1
        needs += sum(len(s.needs) for s in online.steps)
    assert compared >= 8 and needs > 20
    # and they are what `dtoc-rl ingest` labels in the saved logs
    out = tmp_path / "ds"
    assert (
        cli_main(
            ["ingest", str(tmp_path / "runs.jsonl"), "-o", str(out), "--workers", "1", "--quiet", "--json"]
        )
        == 0
    )
    assert {t.task_id: _labels(t) for t in load_trajectories(out)} == logged


def test_times_needed_counts_the_need_kinds_replayenv_counts():
    """Regression: online feature columns counted every need kind, ReplayEnv only ``need_kinds``, so a
    policy trained on one meaning of times_needed/since_need was served the other."""
    import gymnasium as gym

    import dtoc_rl.envs  # noqa: F401
    from dtoc_rl.engine.features import ITEM_FEATURES
    from tests.crafted_trajs import reaccess_trajectory

    traj = reaccess_trajectory()
    o = Orchestrator(make_policy("none"), query=traj.task_text, model="gpt-4o")
    _replay(o, traj)
    online = o.trajectory()
    assert [(n.step, n.kind) for n in online.steps[3].needs] == [(0, "reaccess")]
    online_needed = {k: st.times_needed for k, st in o.item_states()}

    env = gym.make("dtoc_rl/Replay-v0", dataset=[online], max_items=8)
    obs, info = env.reset(seed=0)
    col = ITEM_FEATURES.index("times_needed")
    for _ in range(4):  # the decision before the final call: calls 0..3 have run
        obs, *_ = env.step({"enable": np.zeros(8, np.int8), "disable": np.zeros(8, np.int8)})
    offline_needed = int(obs["items"][0, col])
    assert offline_needed == 0  # a re-access is not a need ReplayEnv counts
    assert online_needed["t0000"] == offline_needed


def test_a_turn_is_labelled_with_its_tool_results():
    # a refused edit writes nothing, which only its output tells: the file's read stays current
    o = Orchestrator(make_policy("none"), query="t")
    read_loop(o, 1)
    edit = {"command": "str_replace", "path": "f0.py", "old_str": "nope", "new_str": "x"}
    (c,) = o.record_assistant("", [{"name": "str_replace_editor", "arguments": edit}])
    o.add_tool_result(
        c["id"], "No replacement was performed, old_str `nope` did not appear verbatim in f0.py."
    )
    read_loop(o, 1, start=6)  # cat f0.py again
    steps = o.trajectory().steps
    assert steps[1].write_resources == [] and [(n.step, n.kind) for n in steps[1].needs] == [(0, "edit")]
    assert dict(o.item_states())["t0000"].modified == 0


def _offline(orch):
    import copy

    from dtoc_rl.labels import label_trajectory

    online = orch.trajectory()
    offline = copy.deepcopy(online)
    label_trajectory(offline, keys=json.loads(online.extra)["keys"])
    return _labels(online), _labels(offline)


def test_a_turn_waits_for_all_its_tool_results():
    o = Orchestrator(make_policy("none"), query="t")
    read_loop(o, 1)
    a, b = o.record_assistant("", [{"name": "bash", "arguments": {"command": "cat a.py"}}] * 2)
    o.add_tool_result(b["id"], "x = 1\n")
    assert o.totals.calls == 2  # e.g. a monitor thread: must not label the turn with one result missing
    with pytest.raises(ValueError, match="no result yet"):
        o.openai_request()  # nor may a request made too early
    assert o.trajectory().steps[1].needs == [] and o.trajectory().steps[1].read_resource is None
    o.add_tool_result(a["id"], "x = 1\n")
    read_loop(o, 1, start=1)
    (c,) = o.record_assistant("", [{"name": "bash", "arguments": {"command": "cat a.py"}}])
    o.add_tool_result(c["id"], "x = 1\n")
    online, offline = _offline(o)
    assert online == offline and [(n[0], n[1]) for n in online[4][2]] == [(2, "reaccess")]


def test_a_resumed_session_can_switch_labelling_on(tmp_path):
    db = tmp_path / "s.sqlite"
    o = Orchestrator(make_policy("none"), query="t", session_path=db, session_id="s", label_every=0)
    read_loop(o, 2)
    o.close()
    again = Orchestrator(make_policy("none"), query="t", session_path=db, session_id="s", label_every=0)
    again.label_every = 1
    read_loop(again, 6, start=2)  # turn 6 reads f0.py again
    online, offline = _offline(again)
    assert again.label_errors == [] and online == offline
    assert [(n[0], n[1]) for n in online[6][2]] == [(0, "reaccess")]
    # what was hidden before the restart is not stored: unknown in the log, not "nothing"
    again.save_log(tmp_path / "run.jsonl")
    assert (
        cli_main(["ingest", str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "ds"), "--quiet", "--json"])
        == 0
    )
    (t,) = load_trajectories(tmp_path / "ds")
    assert [s.masked_before for s in t.steps] == [None, None, [], [], [], [], [], []]


def test_key_references_survive_the_log_when_results_come_out_of_order(tmp_path):
    o = Orchestrator(query="t")  # agent mode: the model manages its context itself
    first, second = o.record_assistant(
        "", [{"name": "bash", "arguments": {"command": f"cat f{i}.py"}} for i in (1, 2)]
    )
    o.add_tool_result(second["id"], FILES["f2.py"])  # stored first: t0000 is step 1
    o.add_tool_result(first["id"], FILES["f1.py"])
    o.openai_request([BASH])
    o.record_openai_response(
        oa_response("t0000 is not needed", [("m1", "manage_context", {"disable": ["t0000"]})])
    )
    o.openai_request([BASH])
    read_loop(o, 1, start=3)
    online, offline = _offline(o)
    assert online == offline and ("t0000" in str(online[2][2])) and online[2][2][0][:2] == (1, "reference")
    o.save_log(tmp_path / "run.jsonl")
    assert (
        cli_main(["ingest", str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "ds"), "--quiet", "--json"])
        == 0
    )
    (t,) = load_trajectories(tmp_path / "ds")
    assert _labels(t) == online


def test_a_turn_the_labeller_fails_on_keeps_no_labels_but_its_outputs_count(monkeypatch):
    from dtoc_rl import labels

    real = labels._SpanIndex.match

    def match(self, text, min_span):
        if "new_text_here" in text:  # the edit: fails after its resources were written
            raise RuntimeError("labeller bug")
        return real(self, text, min_span)

    monkeypatch.setattr(labels._SpanIndex, "match", match)
    o = Orchestrator(make_policy("none"), query="t")
    read_loop(o, 1)
    edit = {"command": "str_replace", "path": "f0.py", "old_str": "x", "new_str": "new_text_here"}
    (c,) = o.record_assistant("", [{"name": "str_replace_editor", "arguments": edit}])
    o.add_tool_result(c["id"], "The file f0.py has been edited: distinctive_marker_42 appears.")
    with pytest.warns(UserWarning, match="labeller bug"):
        o.decide(force=True)
    (c,) = o.record_assistant(
        "", [{"name": "bash", "arguments": {"command": "grep distinctive_marker_42 f0.py"}}]
    )
    o.add_tool_result(c["id"], "")
    steps = o.trajectory().steps
    assert o.label_errors == ["RuntimeError: labeller bug"]
    assert steps[1].write_resources == [] and steps[1].needs == []  # no half-made labels
    assert dict(o.item_states())["t0000"].modified == 0
    assert [(n.step, n.kind) for n in steps[2].needs] == [(1, "provenance")]  # its output still counts


def test_each_output_is_indexed_once_however_long_the_session(monkeypatch):
    from dtoc_rl import labels

    indexed = []
    real = labels._SpanIndex.add_output
    monkeypatch.setattr(
        labels._SpanIndex,
        "add_output",
        lambda self, text, step: indexed.append(step) or real(self, text, step),
    )
    o = Orchestrator(make_policy("last_n:n=2"), query="t")
    read_loop(o, 40)
    o.trajectory()
    assert indexed == list(range(40))  # re-labelling a window per turn would index each many times


def test_what_each_call_was_sent_hidden_is_not_walked_by_the_garbage_collector():
    """Every step keeps the list of outputs hidden from its call, so a long session holds a number of
    entries quadratic in its length: kept as tuples of ints, which Python's collector stops tracking,
    a full collection does not walk them (as lists, 40 ms a collection at 3,000 calls)."""
    import gc

    o = Orchestrator(make_policy("last_n:n=2"), query="t")
    read_loop(o, 40)
    gc.collect()
    held = [s.masked_before for s in o._s.steps if s.masked_before]
    assert len(held) >= 30 and not any(gc.is_tracked(m) for m in held)
    # what the session is exported as keeps the schema's lists
    assert [type(s.masked_before) for s in o.trajectory().steps if s.masked_before] == [list] * len(held)
    assert o.trajectory().steps[-1].masked_before == list(range(37))


def test_an_output_that_arrives_after_its_turn_was_labelled_is_still_found():
    o = Orchestrator(make_policy("none"), query="t")
    (c,) = o.record_assistant("", [{"name": "bash", "arguments": {"command": "cat f3.py"}}])
    o.decide(force=True)  # labels turn 0 before its output exists
    o.add_tool_result(c["id"], FILES["f3.py"])
    (c2,) = o.record_assistant(
        "calling compute_3 with argument_3",
        [{"name": "bash", "arguments": {"command": "python -c 'compute_3(argument_3)'"}}],
    )
    o.add_tool_result(c2["id"], "ok")
    steps = o.trajectory().steps
    assert [(n.step, n.kind) for n in steps[1].needs] == [(0, "provenance")]


def test_item_states_include_the_needs_of_the_last_turn():
    o = Orchestrator(make_policy("none"), query="t")
    read_loop(o, 7)  # turn 6 reads f0.py again: a re-access need on t0000
    st = dict(o.item_states())["t0000"]
    assert st.superseded and st.times_needed == 0  # re-accesses supersede; they are not counted needs


def test_a_labelling_failure_never_stops_the_loop(monkeypatch):
    from dtoc_rl.labels import NeedLabeller

    real = NeedLabeller.label_turn
    calls = []

    def flaky(self, steps):
        calls.append(steps[0].index)
        if len(calls) == 3:
            raise RuntimeError("labeller bug")
        return real(self, steps)

    monkeypatch.setattr(NeedLabeller, "label_turn", flaky)
    orch = Orchestrator(make_policy("last_n:n=2"), query="t")
    with pytest.warns(UserWarning, match="labeller bug"):
        read_loop(orch, 7)
        orch.openai_messages()
    assert orch.label_errors == ["RuntimeError: labeller bug"]
    steps = orch.trajectory().steps
    assert steps[2].needs == []  # the turn it failed on
    assert any(n.step == 0 and n.kind == "reaccess" for n in steps[6].needs)  # and labelling goes on
    assert hidden(orch.openai_messages())[:1] == ["t0000"]


def test_close_detaches_the_orchestrator_from_its_store():
    from dtoc_rl.core.store import MemoryStore

    store = MemoryStore()
    o = Orchestrator(make_policy("none"), query="t", store=store)
    assert len(store.listeners) == 2  # the context's and the orchestrator's
    o.close()
    assert store.listeners == []


def test_missing_and_reused_call_ids_get_fresh_ones():
    orch = Orchestrator(make_policy("none"), query="q")
    calls = orch.record_assistant("", [{"id": "x", "name": "a"}, {"id": "x", "name": "b"}, {"name": "c"}])
    assert calls[0]["id"] == "x" and len({c["id"] for c in calls}) == 3
    for c in calls:
        orch.add_tool_result(c["id"], "ok")
    (again,) = orch.record_assistant("", [{"id": "x", "name": "a"}])  # tau-bench style id reuse
    assert again["id"] != "x"
    orch.add_tool_result(None, "answers the oldest pending call")
    OPENAI_MESSAGES.validate_python(orch.openai_messages())


def test_invalid_policy_actions_are_counted_as_in_the_envs():
    """Padding slots and slots set in both masks are invalid actions, counted as LiveEnv and ReplayEnv
    count them (the Orchestrator used to drop them silently)."""

    class Sloppy:
        def act(self, obs, info):
            n = len(obs["item_mask"])
            en, di = np.zeros(n, np.int8), np.zeros(n, np.int8)
            en[n - 1] = 1  # a padding slot while the session holds fewer outputs
            en[0] = di[0] = 1  # an output in both sets: left as it is
            return {"enable": en, "disable": di}

    o = Orchestrator(Sloppy(), query="t", max_items=8)
    read_loop(o, 3)
    o.decide(force=True)
    # before turn 0 slot 0 is padding too (set in both: once per set); then three decisions at 2 each
    assert o.totals.decisions == 4
    assert o.totals.invalid_actions == 3 + 3 * 2 and o.totals.changes == 0
    assert all(o.store.get(k).visible for k in o.store.keys())


def test_model_manage_context_keys_count_as_invalid_the_same_way():
    o = Orchestrator(query="t")  # agent mode
    read_loop(o, 1)
    args = {"enable": ["t0000", "t0404"], "disable": ["t0000"]}
    o.record_assistant("", [{"name": "manage_context", "arguments": args}])
    # t0404 names nothing (1); t0000 is in both lists (1)
    assert o.totals.invalid_actions == 2 and o.totals.model_mgmt_calls == 1


def test_an_output_read_and_then_written_within_one_labelling_batch_is_modified():
    """``modified`` follows the offline rule (a later step's write, its own batch of turns included):
    with label_every=2 the read and the write are labelled together, and the read used to stay unflagged."""
    o = Orchestrator(make_policy("none"), query="t", label_every=2)
    read_loop(o, 1)  # turn 0: cat f0.py
    edit = {"command": "sed -i 's/x/y/' f0.py"}
    (c,) = o.record_assistant("", [{"name": "bash", "arguments": edit}])
    o.add_tool_result(c["id"], "")
    st = dict(o.item_states())
    assert st["t0000"].modified


def test_labelling_time_is_counted_in_the_totals():
    o = Orchestrator(make_policy("none"), query="t")
    read_loop(o, 3)
    assert o.totals.label_ms > 0  # what bench_policy reports as the full turn's need labelling


def test_the_policy_is_told_when_the_last_requests_cache_has_expired(monkeypatch):
    seen = []

    class Spy(type(make_policy("none"))):
        def act(self, obs, info=None):
            seen.append(info["cache_cold"])
            return super().act(obs, info)

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    orch = Orchestrator(Spy(), query="task", model="gpt-5.2")  # OpenAI: a prompt cache kept 5 minutes
    orch.decide(force=True)
    assert seen == [False]  # no request yet: nothing to expire
    (c,) = orch.record_assistant("", [{"name": "bash", "arguments": {"command": "make"}}])
    clock[0] += 120.0  # a two-minute build
    orch.add_tool_result(c["id"], "ok")
    orch.decide(force=True)
    (c,) = orch.record_assistant("", [{"name": "bash", "arguments": {"command": "make test"}}])
    clock[0] += 301.0  # longer than the provider keeps the prefix
    orch.add_tool_result(c["id"], "ok")
    orch.decide(force=True)
    assert seen == [False, False, True]
    forever = Orchestrator(Spy(), query="task", model="gemini-3-pro-preview")  # no documented lifetime
    (c,) = forever.record_assistant("", [{"name": "bash", "arguments": {"command": "make"}}])
    clock[0] += 3600.0
    forever.add_tool_result(c["id"], "ok")
    forever.decide(force=True)
    assert seen[-1] is False

    longer = Orchestrator(Spy(), query="task", model="gpt-5.2", cache_ttl=3600.0)  # extended retention
    (c,) = longer.record_assistant("", [{"name": "bash", "arguments": {"command": "make"}}])
    clock[0] += 600.0
    longer.add_tool_result(c["id"], "ok")
    longer.decide(force=True)
    assert seen[-1] is False
    with pytest.raises(ValueError, match="cache_ttl must be > 0"):
        Orchestrator(Spy(), query="task", cache_ttl=0)


def test_what_cannot_decide_a_live_agent_is_refused_when_the_orchestrator_is_made():
    from dtoc_rl.policies.baselines import NoManagement

    with pytest.raises(ValueError, match="decides from the whole logged run"):
        Orchestrator(make_policy("oracle"))
    with pytest.raises(TypeError, match="NoManagement is a class: give an instance"):
        Orchestrator(NoManagement)

    class Nothing:
        pass

    with pytest.raises(TypeError, match="a policy needs an act\\(obs, info\\) method; Nothing has none"):
        Orchestrator(Nothing())


def test_an_answer_of_the_other_api_is_refused_not_recorded_as_an_empty_turn():
    orch = Orchestrator(make_policy("none"))
    chat = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    message = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "x"}]}
    with pytest.raises(ValueError, match="record it with record_openai_response"):
        orch.record_anthropic_response(chat)
    with pytest.raises(ValueError, match="record it with record_anthropic_response"):
        orch.record_openai_response(message)
    with pytest.raises(ValueError, match="not a chat-completions answer"):
        orch.record_openai_response({"id": "x"})
    assert not [m for m in orch.openai_messages() if m.get("role") == "assistant"]


def test_a_log_saved_to_a_folder_says_so(tmp_path):
    orch = Orchestrator(make_policy("none"))
    with pytest.raises(IsADirectoryError, match="is a folder; give the log file's path"):
        orch.save_log(tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half written beside it


def test_tools_that_are_not_tool_definitions_are_named_before_the_provider_would():
    orch = Orchestrator(make_policy("none"))
    with pytest.raises(ValueError, match="tools must be a list of tool definitions, got str"):
        orch.openai_request(tools="bash")
    with pytest.raises(ValueError, match=r"tools\[1\] is not a tool definition"):
        orch.anthropic_request(tools=[{"name": "bash", "input_schema": {}}, {"x": 1}])
    fn = {"type": "function", "function": {"name": "bash", "parameters": {}}}
    assert orch.openai_request(tools=[fn])["tools"] == [fn]
    assert orch.openai_request(tools=(t for t in [fn]))["tools"] == [fn]  # any iterable
    from openai.types.chat import ChatCompletionFunctionTool  # the SDK's own tool objects

    sdk = ChatCompletionFunctionTool(type="function", function={"name": "bash", "parameters": {}})
    assert orch.openai_request(tools=[sdk])["tools"][0]["function"]["name"] == "bash"
