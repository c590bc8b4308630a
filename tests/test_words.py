"""Content words (dtoc_rl.labels.words): what they read, and that one output gets the same words in
ReplayEnv, the live Orchestrator and ``/decide``, so a policy sees in service what it trained on."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from dtoc_rl.engine.features import ItemState, build_observation, observation_space
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.labels.words import WORDS_PER_OUTPUT, output_words, words_array
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.serve.service import DecisionService
from tests.test_orchestrator import read_loop
from tests.test_prices_obs import Spy


def _h(w: str) -> int:
    return zlib.crc32(w.encode()) & 0x7FFFFFFF


def test_words_are_the_calls_and_the_first_lines_hashed_in_order_once_each():
    got = output_words("bash", '{"cmd": "cat a.py"}', "Traceback here\nx 2\ny 3\nFOURTH line")
    want = ["bash", "cmd", "cat", "py", "traceback", "here"]
    assert got == tuple(_h(w) for w in want)  # one-letter words and digits are not words
    assert len(want) < WORDS_PER_OUTPUT  # so the fourth line is left out for being the fourth
    full = output_words("bash", '{"command": "cat src/a.py"}', "Traceback here\nline two\nthree four")
    assert len(full) == WORDS_PER_OUTPUT and full[-1] == _h("line") and _h("two") not in full


def test_a_command_line_has_the_same_words_as_the_object_a_live_context_keeps_it_as():
    line = 'grep -n "def foo" src/a.py'
    assert output_words("bash", json.dumps({"input": line}), "x") == output_words("bash", line, "x")
    assert _h("input") in output_words("bash", json.dumps({"input": line, "timeout": 5}), "x")


def test_words_are_capped_and_padded():
    many = " ".join(f"w{i}" for i in range(40))
    got = output_words("t", many, None)
    assert len(got) == WORDS_PER_OUTPUT and got[0] == _h("w0")
    assert output_words(None, None, None) == ()
    row = words_array((5, 6))
    assert row.tolist() == [5, 6] + [0] * (WORDS_PER_OUTPUT - 2)


def test_replay_env_shows_each_outputs_words_and_nothing_of_outputs_not_stored_yet():
    ep = load_episodes(None)[0]
    env = ReplayEnv(trajectories=[ep], max_items=8)
    obs, info = env.reset(options={"index": 0})
    noop = {"enable": np.zeros(8, np.int8), "disable": np.zeros(8, np.int8)}
    seen = 0
    for _ in range(min(12, ep.n)):
        assert observation_space(8).contains(obs)
        m = int(obs["item_mask"].sum())
        assert not obs["item_words"][m:].any()
        for slot, step in enumerate(info["slot_steps"][:m]):
            s = step
            assert obs["item_words"][slot].tolist() == ep.words[s].tolist()
            seen += bool(ep.words[s].any())
        obs, _, term, trunc, info = env.step(noop)
        if term or trunc:
            break
    assert seen > 0


def test_the_orchestrator_and_decide_see_the_words_replay_computes():
    spy = Spy()
    orch = Orchestrator(spy, query="task", model="gpt-4o")
    read_loop(orch, 3)
    orch.decide(force=True)
    want = output_words("bash", '{"command": "cat f0.py"}', orch.store.get(orch.store.keys()[0]).tool_result)
    assert spy.obs["item_words"][0].tolist() == list(want) + [0] * (WORDS_PER_OUTPUT - len(want))
    # /decide: the same call and the output's head give the same words
    spy2 = Spy()
    head = orch.store.get(orch.store.keys()[0]).tool_result
    first = {"key": "a", "tokens": 500, "tool": "bash", "args": {"command": "cat f0.py"}, "head": head}
    others = [{"key": f"k{i}", "tokens": 500} for i in range(3)]
    DecisionService(spy2).decide({"items": [first, *others], "model": "gpt-4o"})
    assert spy2.obs["item_words"][0].tolist() == spy.obs["item_words"][0].tolist()
    # and an ItemState carries them through build_observation
    obs = build_observation([ItemState(est_tokens=10, age=0, visible=True, words=want)], 4,
                            active_tokens=10, step=1)  # fmt: skip
    assert obs["item_words"][0].tolist() == spy.obs["item_words"][0].tolist()
    assert not obs["item_words"][1:].any()


def test_a_command_with_non_ascii_letters_has_the_same_words_escaped_or_not():
    raw = {"file_path": "/home/josé/src/módulo.py"}
    escaped, plain = json.dumps(raw), json.dumps(raw, ensure_ascii=False)  # loggers differ
    assert escaped != plain
    assert output_words("Read", escaped, "x") == output_words("Read", plain, "x")
    assert _h("u00e9") not in output_words("Read", escaped, "x")
    # an emoji is a surrogate pair when escaped: one character either way, so the 300-character cut of
    # the arguments lands at the same word
    long = {"command": "\U0001f600" * 40 + " " + "w" * 20 + " pytest_module tail"}
    a, b = json.dumps(long), json.dumps(long, ensure_ascii=False)
    assert output_words("bash", a, None) == output_words("bash", b, None)


def test_decide_refuses_bad_words():
    from dtoc_rl.engine.decide_request import MAX_CLIENT_WORDS
    from dtoc_rl.serve.service import DecideError

    for bad in ([0], [2**31], [1.5], list(range(1, MAX_CLIENT_WORDS + 2))):
        item = {"key": "a", "tokens": 10, "words": bad}
        with pytest.raises(DecideError, match="words"):
            DecisionService(Spy()).decide({"items": [item], "model": "gpt-4o"})


def test_decide_reads_the_first_words_of_a_client_that_sends_more():
    spies = Spy(), Spy()
    many = list(range(1, 2 * WORDS_PER_OUTPUT + 1))
    for spy, words in zip(spies, (many, many[:WORDS_PER_OUTPUT])):
        item = {"key": "a", "tokens": 10, "words": words}
        DecisionService(spy).decide({"items": [item], "model": "gpt-4o"})
    assert spies[0].obs["item_words"][0].tolist() == many[:WORDS_PER_OUTPUT]
    np.testing.assert_array_equal(spies[0].obs["item_words"], spies[1].obs["item_words"])


def test_the_words_a_replayed_log_gives_are_the_ones_the_orchestrator_observed():
    from dtoc_rl.sim.episode import compile_episode

    spy = Spy()
    orch = Orchestrator(spy, query="task", model="gpt-4o")
    read_loop(orch, 4)
    orch.decide(force=True)
    ep = compile_episode(orch.trajectory())
    m = int(spy.obs["item_mask"].sum())
    assert m == 4
    np.testing.assert_array_equal(spy.obs["item_words"][:m], ep.words[ep.has_out])


def test_remote_policy_sends_each_outputs_words():
    from dtoc_rl.serve.service import RemotePolicy, serve_in_thread

    local, served = Spy(), Spy()
    srv, _ = serve_in_thread(DecisionService(served), "127.0.0.1", 0)
    try:
        orch = Orchestrator(local, query="task", model="gpt-4o", max_items=8, label_every=0)
        read_loop(orch, 5)
        orch.decide(force=True)
        remote = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token=srv.token)
        remote.act(local.obs, {"model_family": "gpt-4o"})
    finally:
        srv.shutdown()
        srv.server_close()
    m = int(local.obs["item_mask"].sum())
    assert local.obs["item_words"][:m].any()
    np.testing.assert_array_equal(served.obs["item_words"][:m], local.obs["item_words"][:m])
