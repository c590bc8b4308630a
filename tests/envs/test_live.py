import importlib
import json
import time

import gymnasium as gym
import httpx
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import SyncVectorEnv

import dtoc_rl.envs  # noqa: F401  registers the ids
from dtoc_rl.engine.features import ITEM_FEATURES
from dtoc_rl.envs import LiveEnv
from dtoc_rl.envs.agents import (
    AgentError,
    AnthropicAgent,
    OpenAIChatAgent,
    ScriptedAgent,
    TransformersAgent,
    parse_tool_calls,
)
from dtoc_rl.envs.coding_tasks import TASKS_DIR, TaskChecker, load_tasks
from dtoc_rl.envs.tools import Toolbox, tool_specs, truncate_output

N = 8
PYTEST = "python -m pytest -q"
# One correct fix per shipped task: (file, old, new).
FIXES = {
    "pagination": ("pager.py", "start = page * per_page", "start = (page - 1) * per_page"),
    "date_parsing": ("dates.py", '"%Y-%d-%m"', '"%Y-%m-%d"'),
    "html_escape": (
        "markup.py",
        "for char, entity in _REPLACEMENTS:",
        'for char, entity in sorted(_REPLACEMENTS, key=lambda r: r[0] != "&"):',
    ),
}


def _noop(n=N):
    return {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def fix_call(task_id):
    path, old, new = FIXES[task_id]
    return call("str_replace", path=path, old_str=old, new_str=new)


def run_episode(env, policy=None, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(policy(obs, info) if policy else _noop(env.N))
        total += r
        done = term or trunc
    return total, term, trunc, info


# -------------------------------------------------------------------------------- tasks


def test_shipped_tasks_are_data_with_a_failing_test_and_a_fix(tmp_path):
    tasks = load_tasks()
    assert {t.id for t in tasks} >= set(FIXES)
    assert not (TASKS_DIR / "__init__.py").exists()
    for t in tasks:
        assert not list((TASKS_DIR / t.id).rglob("__init__.py"))
        work = t.make_workdir(tmp_path)
        checker = TaskChecker(t)
        before = checker.check(work)
        assert not before.success and before.returncode not in (0, None), before.output
        path, old, new = FIXES[t.id]
        res = Toolbox(work).run("str_replace", {"path": path, "old_str": old, "new_str": new})
        assert not res.is_error, res.output
        assert checker.check(work).success


# -------------------------------------------------------------------------------- the env


def test_tasks_checked_with_pytest_need_it_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a)
    )
    with pytest.raises(RuntimeError, match=r"with pytest, which is not installed.*pip install pytest"):
        LiveEnv(ScriptedAgent([]), tasks=["pagination"], max_items=N)


def test_an_endpoint_url_without_a_scheme_is_refused():
    pytest.importorskip("openai")
    with pytest.raises(ValueError, match="must start with http:// or https://, got 'localhost:8000/v1'"):
        OpenAIChatAgent("m", base_url="localhost:8000/v1")


def test_check_env_and_registered_id():
    agent = ScriptedAgent([call("bash", command="ls"), call("read_file", path="pager.py")] * 5)
    env = gym.make("dtoc_rl/Live-v0", agent=agent, tasks=["pagination", "html_escape"], max_items=N)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert info["slot_keys"][0] == "t0000"
    env.close()


def test_check_env_passes_when_tool_outputs_differ_between_runs():
    """A tool whose output changes run to run (a random count here; clocks and test timings in practice) makes
    two seeded resets differ: the registered id says the env is nondeterministic, so check_env
    judges the rest and skips the determinism checks."""
    cmd = "python -c 'import random; print(\"x \" * random.randrange(1, 400))'"
    agent = ScriptedAgent([call("bash", command=cmd)] * 6)
    env = gym.make("dtoc_rl/Live-v0", agent=agent, tasks=["pagination"], max_items=N)
    assert env.spec.nondeterministic
    check_env(env.unwrapped)
    env.close()


def test_seeding_picks_the_same_task():
    env = LiveEnv(ScriptedAgent([call("bash", command="ls")]), max_items=N)
    picks = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3, 1, 2, 3)]
    assert picks[:3] == picks[3:]
    env.close()


def test_scripted_agent_fixes_the_task_end_to_end():
    script = [
        call("read_file", path="pager.py"),
        fix_call("pagination"),
        call("bash", command=PYTEST),
        call("submit", summary="fixed the slice start"),
    ]
    # the ideal cache: these prompts are under every provider's minimum cacheable size
    env = LiveEnv(
        ScriptedAgent(script), tasks=["pagination"], max_items=N, success_weight=10.0, cache="ideal"
    )
    total, term, trunc, info = run_episode(env)
    assert term and not trunc
    assert info["success"] and info["end_reason"] == "submit"
    steps = env.trajectory().steps
    assert "4 passed" in steps[2].output
    assert [s.tool_name for s in steps] == ["read_file", "str_replace", "bash", "submit"]
    tot = info["totals"]
    assert tot["calls"] == 4 and tot["steps"] == 3 and tot["tool_calls"] == 4
    assert tot["tool_errors"] == 0 and tot["tool_timeouts"] == 0 and tot["changes"] == 0
    # no management: the cost equals the all-visible counterfactual, and the return is
    # the success bonus minus the dollars in units of 1,000 fresh input tokens
    assert tot["dollars"] == pytest.approx(info["all_visible"]["dollars"])
    unit = env.prices.input * 1000 / 1e6
    assert total == pytest.approx(10.0 - tot["dollars"] / unit)
    # prompt caching: each call reads the previous prompt from the cache
    assert tot["cache_read_tokens"] > 0 and tot["input_tokens"] == tot["active_token_sum"]
    env.close()


def test_dollars_come_from_the_one_biller():
    """LiveEnv prices its calls and their all-visible counterfactual with ``Prices.bill``, the biller
    the simulator uses: a change to its rules reaches LiveEnv too."""
    from dtoc_rl.sim.pricing import Prices, prices_for

    class Doubled(Prices):
        def bill(self, cached, written, output, uncached=0):
            return 2 * super().bill(cached, written, output, uncached)

    script = [call("read_file", path="pager.py"), call("bash", command="ls"), call("submit")]
    base = prices_for("gpt-4o")
    runs = {}
    for name, prices in (("plain", base), ("doubled", Doubled(**base.to_dict()))):
        env = LiveEnv(ScriptedAgent(list(script)), tasks=["pagination"], max_items=N, prices=prices)
        *_, info = run_episode(env)
        runs[name] = (info["totals"]["dollars"], info["all_visible"]["dollars"])
        env.close()
    assert runs["plain"][0] > 0
    assert runs["doubled"] == pytest.approx((2 * runs["plain"][0], 2 * runs["plain"][1]))


def test_online_labels_are_label_trajectory_of_the_episode():
    import copy

    from dtoc_rl.labels import label_trajectory

    script = [
        call("read_file", path="pager.py"),
        call("bash", command="grep -n per_page pager.py"),
        call("bash", command='python -c "from pager import page_count; print(page_count(7, 3))"'),
        call("str_replace", path="pager.py", old_str="no such text", new_str="x"),  # refused
        fix_call("pagination"),
        call("read_file", path="pager.py"),
        call("bash", command=PYTEST),
        call("submit", summary="done"),
    ]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N)
    run_episode(env)
    online = env.trajectory()
    offline = copy.deepcopy(online)
    label_trajectory(offline, keys=dict(env.ep.key_step))
    labels = lambda t: [(s.read_resource, s.write_resources, s.needs) for s in t.steps]  # noqa: E731
    assert labels(online) == labels(offline)
    kinds = {n.kind for s in online.steps for n in s.needs}
    assert {"provenance", "reaccess", "edit"} <= kinds  # the script exercises the labeller
    env.close()


def test_wrong_fix_and_edited_tests_fail():
    script = [
        call("str_replace", path="pager.py", old_str="start = page * per_page", new_str="start = page"),
        call("write_file", path="test_pager.py", content="def test_ok():\n    assert True\n"),
        call("submit"),
    ]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N)
    total, term, _, info = run_episode(env)
    assert term and info["success"] is False
    assert "failed" in info["check"]["output"]  # the checker restored test_pager.py first
    assert total < 0
    env.close()


def test_hanging_command_is_cut_and_the_episode_goes_on():
    script = [call("bash", command="echo started; sleep 60"), call("bash", command="echo alive")]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N, tool_timeout=1, max_steps=2)
    t0 = time.monotonic()
    _, term, trunc, info = run_episode(env)
    assert time.monotonic() - t0 < 20
    assert trunc and not term and info["end_reason"] == "max_steps"
    steps = env.trajectory().steps
    assert "started" in steps[0].output and "timed out after 1s" in steps[0].output
    assert steps[0].output_is_error
    assert steps[1].output.strip() == "alive"
    assert info["totals"]["tool_timeouts"] == 1 and info["tool_timeouts"] == 1
    env.close()


def test_failing_command_and_bad_tool_calls_are_outputs():
    script = [
        call("bash", command="exit 3"),
        call("nope"),
        {"name": "read_file", "arguments": "{not json"},
        call("read_file", path="missing.py"),
    ]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N, max_steps=4)
    run_episode(env)
    out = [s.output for s in env.trajectory().steps]
    assert "[exit code 3]" in out[0]
    assert "unknown tool 'nope'" in out[1]
    assert out[2].startswith("[error] read_file")
    assert "no such file" in out[3]
    env.close()


def test_path_escape_is_rejected(tmp_path):
    outside = tmp_path / "outside.txt"
    script = [
        call("read_file", path="../../../../etc/passwd"),
        call("write_file", path=str(outside), content="x"),
        call("str_replace", path="../repo/../../x.py", old_str="a", new_str="b"),
    ]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N, max_steps=3)
    run_episode(env)
    out = [s.output for s in env.trajectory().steps]
    assert all("escapes the working directory" in o for o in out), out
    assert not outside.exists()
    env.close()
    # symlinks pointing out are followed before the check
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(tmp_path)
    res = Toolbox(work).run("write_file", {"path": "link/evil.txt", "content": "x"})
    assert res.is_error and "escapes" in res.output and not (tmp_path / "evil.txt").exists()


def test_disable_takes_effect_in_the_next_agent_call():
    script = [
        call("read_file", path="pager.py"),
        call("bash", command="ls"),
        # copies a line of the hidden output: a provenance need, the kind the simulator charges
        call(
            "str_replace",
            path="pager.py",
            old_str='raise ValueError("pages are numbered from 1")',
            new_str='raise ValueError("page numbers start at 1")',
        ),
    ]
    agent = ScriptedAgent(script)
    env = LiveEnv(agent, tasks=["pagination"], max_items=N, max_steps=3)
    obs, info = env.reset(seed=0)
    assert info["slot_keys"][0] == "t0000" and obs["disable_mask"][0] == 1
    a = _noop()
    a["disable"][0] = 1
    obs, _, _, _, info = env.step(a)
    seen = agent.seen[-1]  # the messages of the call this step made
    tool_msg = json.loads(next(m for m in seen if m["role"] == "tool")["content"])
    assert tool_msg["tool_key"] == "t0000" and tool_msg["hidden"] is True and "tool_result" not in tool_msg
    assert obs["items"][0][2] == 0 and obs["enable_mask"][0] == 1
    # no call had read t0000: the agent got a placeholder for its own read, a miss (Episode.call_reads)
    assert info["step_misses"] == 1
    # copying from the hidden output is a miss again, and the output it needed counts a re-read
    obs, _, _, _, info = env.step(_noop())
    assert info["step_misses"] == 1 and info["misses"] == 2
    steps = env.trajectory().steps
    assert steps[1].events[0].kind == "disable" and steps[1].events[0].targets == [0]
    assert steps[1].masked_before == [0] and steps[0].masked_before == []
    assert info["totals"]["changes"] == 1 and info["totals"]["mgmt_calls"] == 1
    # hiding made later prompts smaller but re-wrote the cache after t0000 once
    assert info["totals"]["input_tokens"] < info["all_visible"]["input_tokens"]
    env.close()


def test_bad_actions_raise_or_are_counted():
    env = LiveEnv(ScriptedAgent([call("bash", command="ls")] * 4), tasks=["pagination"], max_items=N)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="expected \\(8,\\)"):
        env.step({"enable": np.zeros(3, np.int8), "disable": np.zeros(N, np.int8)})
    with pytest.raises(ValueError, match="MultiBinary"):
        env.step({"enable": np.zeros(N, np.float32), "disable": np.zeros(N, np.int8)})
    with pytest.raises(ValueError, match="keys 'enable' and 'disable'"):
        env.step(np.zeros(N))
    a = _noop()
    a["enable"][5] = 1  # a padding slot
    a["enable"][0] = a["disable"][0] = 1  # a conflict
    _, _, _, _, info = env.step(a)
    assert info["invalid_actions"] == 2
    assert env.ep.ctx.store.get("t0000").visible
    env.close()


def test_agent_error_truncates_and_checks():
    def boom(messages, tools):
        raise AgentError("endpoint down")

    env = LiveEnv(ScriptedAgent([call("bash", command="ls"), boom]), tasks=["pagination"], max_items=N)
    _, term, trunc, info = run_episode(env)
    assert trunc and not term and info["end_reason"] == "agent_error"
    assert "endpoint down" in info["agent_error"] and info["success"] is False
    env.close()


def test_message_without_tool_call_gets_a_nudge():
    agent = ScriptedAgent(["I am thinking.", call("submit")])
    env = LiveEnv(agent, tasks=["pagination"], max_items=N)
    _, term, _, info = run_episode(env)
    assert term and info["totals"]["no_tool_turns"] == 1
    assert agent.seen[1][-1]["role"] == "user" and "no tool call" in agent.seen[1][-1]["content"]
    steps = env.trajectory().steps
    assert steps[0].tool_name is None and steps[0].assistant_text == "I am thinking."
    assert "no tool call" in steps[1].user_text
    env.close()


def test_vector_env():
    def make():
        return LiveEnv(ScriptedAgent([call("bash", command="ls")] * 5), max_items=N, max_steps=20)

    venv = SyncVectorEnv([make, make])
    obs, infos = venv.reset(seed=0)
    assert obs["items"].shape == (2, N, len(ITEM_FEATURES)) and obs["item_mask"].sum() == 2
    acts = {"enable": np.zeros((2, N), np.int8), "disable": np.zeros((2, N), np.int8)}
    acts["disable"][:, 0] = 1
    obs, rew, term, trunc, infos = venv.step(acts)
    assert rew.shape == (2,) and not term.any() and not trunc.any()
    assert (obs["item_mask"].sum(axis=1) == 2).all() and (obs["items"][:, 0, 2] == 0).all()
    venv.close()


# -------------------------------------------------------------------------------- agents


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A randomly initialised 1-layer GPT-2 and a byte-level BPE tokenizer built here."""
    pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(
        ['{"name": "bash", "arguments": {"command": "ls"}}', "def f(x): return x"] * 8, trainer
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=len(fast), n_positions=256,
        bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("tiny-gpt2")
    GPT2LMHeadModel(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def test_tiny_random_transformers_model_survives_to_max_steps(tiny_lm):
    agent = TransformersAgent(tiny_lm, max_new_tokens=24, max_time=20)
    assert agent.max_prompt_tokens == 256 - 24
    env = LiveEnv(agent, tasks=["html_escape"], max_items=N, max_steps=3, tool_timeout=5)
    _, term, trunc, info = run_episode(env)
    assert trunc and not term and info["end_reason"] == "max_steps"
    assert info["totals"]["calls"] == 3 and info["totals"]["reported_output_tokens"] > 0
    assert info["success"] is False
    env.close()


def test_chat_template_is_used_and_falls_back_when_it_rejects_tool_messages(tiny_lm):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm, local_files_only=True)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
        "<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    )
    agent = TransformersAgent(GPT2LMHeadModelStub(), tok, max_new_tokens=4)
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "README"},
    ]  # fmt: skip
    prompt = agent.build_prompt(msgs, tool_specs())
    assert prompt.startswith("<system>sys") and prompt.endswith("<assistant>")
    assert '{"name": "bash", "arguments": {"command": "ls"}}' in prompt and "[tool result c1]" in prompt
    agent.use_chat_template = False
    assert agent.build_prompt(msgs, tool_specs()).endswith("### Assistant\n")


class GPT2LMHeadModelStub:
    """Just enough of a model for prompt building."""

    class config:
        n_positions = 64
        name_or_path = "stub"

    def eval(self):
        return self


def test_agent_specs():
    from dtoc_rl.envs.agents import make_agent

    with pytest.raises(ValueError, match="openai:MODEL"):
        make_agent("gpt-4o")
    with pytest.raises(TypeError, match="next_action"):
        make_agent(object())
    with pytest.raises(ValueError, match="needs an agent"):
        LiveEnv()


def test_parse_tool_calls_styles():
    _, calls = parse_tool_calls('I will look.\n{"name": "read_file", "arguments": {"path": "a.py"}}')
    assert calls == [{"id": None, "name": "read_file", "arguments": {"path": "a.py"}}]
    _, calls = parse_tool_calls(
        '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
    )
    assert calls[0]["arguments"] == {"command": "ls"}
    _, calls = parse_tool_calls("Run it:\n```bash\npython -m pytest -q\n```")
    assert calls == [{"id": None, "name": "bash", "arguments": {"command": "python -m pytest -q"}}]
    content, calls = parse_tool_calls("}{ garbage {{ ```")
    assert calls == [] and content == "}{ garbage {{ ```"


def _http(sdk):
    """The HTTP package an SDK is built on (newer anthropic releases use ``httpx2``)."""
    base = importlib.import_module(f"{sdk}._base_client")
    return getattr(base, "httpx2", None) or httpx


def _mock_client(sdk, handler):
    """A real SDK client whose HTTP goes to ``handler`` (no network)."""
    http = _http(sdk)
    client = http.Client(transport=http.MockTransport(handler))
    if sdk == "openai":
        import openai

        return openai.OpenAI(api_key="test", base_url="http://mock/v1", http_client=client, max_retries=0)
    import anthropic

    return anthropic.Anthropic(api_key="test", base_url="http://mock", http_client=client, max_retries=0)


def test_openai_agent_against_a_mock_endpoint():
    requests = []

    def handler(request):
        body = json.loads(request.content)
        requests.append(body)
        n = len(requests)
        calls = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ]
        if n == 2:
            calls = [{"id": "call_2", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]
        msg = {"role": "assistant", "content": "ok", "tool_calls": calls}
        return _http("openai").Response(200, json={
            "id": f"c{n}", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107},
        })  # fmt: skip

    agent = OpenAIChatAgent("gpt-4o-mini", client=_mock_client("openai", handler))
    env = LiveEnv(agent, tasks=["pagination"], max_items=N)
    assert env.model_family == "gpt-4o-mini"
    _, term, _, info = run_episode(env)
    assert term and info["totals"]["reported_input_tokens"] == 200
    assert requests[0]["tools"][0]["function"]["name"] == "bash"
    second = requests[1]["messages"]
    assert second[-1]["role"] == "tool" and json.loads(second[-1]["content"])["tool_key"] == "t0000"
    assert second[-2]["tool_calls"][0]["id"] == "call_1"
    env.close()

    def down(request):
        return _http("openai").Response(503, json={"error": {"message": "overloaded"}})

    with pytest.raises(AgentError, match=r"503|overloaded|Unavailable"):
        OpenAIChatAgent("gpt-4o", client=_mock_client("openai", down)).next_action(second, tool_specs())


def test_anthropic_agent_against_a_mock_endpoint():
    requests = []

    def handler(request):
        requests.append(json.loads(request.content))
        return _http("anthropic").Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-test",
            "content": [{"type": "text", "text": "Looking."},
                        {"type": "tool_use", "id": f"toolu_{len(requests)}", "name": "bash",
                         "input": {"command": "ls"}}],
            "stop_reason": "tool_use", "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": 9},
        })  # fmt: skip

    agent = AnthropicAgent("claude-sonnet-test", client=_mock_client("anthropic", handler))
    env = LiveEnv(agent, tasks=["pagination"], max_items=N, max_steps=2)
    assert env.model_family == "claude-sonnet"
    _, _, trunc, info = run_episode(env)
    assert trunc and info["totals"]["tool_calls"] == 2
    req = requests[1]
    assert req["system"].startswith("You are") and req["tools"][0]["input_schema"]["required"] == ["command"]
    blocks = req["messages"][-1]["content"]
    assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == "toolu_1"
    env.close()


def test_truncate_output_keeps_head_and_tail():
    text = "a" * 100 + "b" * 100
    out = truncate_output(text, 50)
    assert out.startswith("a" * 25) and out.endswith("b" * 25) and "150 characters cut" in out


def test_provider_cache_rules_apply_to_live_calls():
    """Prompts under the provider's minimum cacheable size read nothing from the cache (the rule the
    Simulator applies to a logged run); the ideal cache reads every shared prefix back."""
    script = [call("bash", command="ls"), call("bash", command="ls -a"), call("submit", summary="done")]
    got = {}
    for cache in ("provider", "ideal"):
        agent = ScriptedAgent(script, model_name="gpt-4o-2024-08-06")
        env = LiveEnv(agent, tasks=["pagination"], max_items=N, cache=cache)
        env.reset(seed=0)
        done, keep = False, {"enable": np.zeros(N, np.int8), "disable": np.zeros(N, np.int8)}
        while not done:
            _, _, term, trunc, info = env.step(keep)
            done = term or trunc
        got[cache] = info["totals"]
        env.close()
    assert got["provider"]["cache_read_tokens"] == 0 and got["ideal"]["cache_read_tokens"] > 0
    assert got["provider"]["input_tokens"] == got["ideal"]["input_tokens"]
    assert got["provider"]["dollars"] > got["ideal"]["dollars"]
    with pytest.raises(ValueError, match="cache must be"):
        LiveEnv(ScriptedAgent(script), tasks=["pagination"], cache="perfect")


def test_the_policy_is_told_when_the_cache_of_the_last_call_has_expired(monkeypatch):
    import time

    env = LiveEnv(ScriptedAgent([call("bash", command="ls")] * 3), tasks=["pagination"], max_items=N)
    _, info = env.reset(seed=0)
    assert info["cache_cold"] is False  # the first call just ran
    clock = time.time()
    monkeypatch.setattr(time, "time", lambda: clock + 400.0)  # a tool that ran longer than the cache lasts
    assert env._info(env._obs())["cache_cold"] is True
    env.cache_rules = None  # the ideal cache never expires
    assert env._info(env._obs())["cache_cold"] is False
    env.close()


def test_a_re_access_of_a_hidden_output_is_billed_but_not_a_miss_as_in_replay():
    """Reading a hidden file again is the agent's own re-read, already in the bill: the reward and the
    observation count the kinds ReplayEnv counts, totals every need on a hidden output."""
    script = [
        call("read_file", path="pager.py"),
        call("bash", command="ls"),
        call("read_file", path="pager.py"),
    ]
    env = LiveEnv(ScriptedAgent(script), tasks=["pagination"], max_items=N, max_steps=3, miss_weight=5.0)
    env.reset(seed=0)
    env.step(_noop())  # the call that reads t0000
    a = _noop()
    a["disable"][0] = 1
    obs, reward, _, _, info = env.step(a)  # hidden, then read again
    assert info["totals"]["misses"] == 1 and info["step_misses"] == 0 and obs["globals"][6] == 0
    assert reward == -info["step_dollars"] / env.ep.unit_dollars
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [({"max_items": 2.5}, "max_items must be an integer >= 1, got 2.5"),
     ({"max_steps": 0}, "max_steps must be an integer >= 1"),
     ({"budget_tokens": -10}, "budget_tokens must be an integer >= 0"),
     ({"miss_weight": float("nan")}, "miss_weight must be a finite number")],
)  # fmt: skip
def test_bad_settings_are_refused_not_truncated_or_turned(kwargs, says):
    with pytest.raises(ValueError, match=says):
        LiveEnv(ScriptedAgent([]), tasks=["pagination"], **kwargs)


def test_a_picture_render_mode_is_ignored_with_a_warning_as_in_replay():
    with pytest.warns(UserWarning, match="render_mode='rgb_array' is ignored"):
        env = LiveEnv(ScriptedAgent([]), tasks=["pagination"], max_items=np.int64(N), render_mode="rgb_array")
    assert env.render_mode is None and env.N == N
    env.close()


def test_a_live_run_priced_with_a_hit_rate_reads_its_cache_at_it():
    from dtoc_rl.sim.pricing import load_price_table

    prices = load_price_table(
        '{"m": {"input": 2.5, "output": 10, "cache_read": 1.25, "cache_hit_rate": 0.4}}'
    )["m"]
    env = LiveEnv(
        ScriptedAgent([call("bash", command="ls")]), tasks=["pagination"], max_items=N, prices=prices
    )
    assert env.cache_rules.hit_rate == 0.4  # the rules the replay of its log is billed by (CostConfig)
    env.close()


def test_a_live_run_priced_with_a_hit_rate_alone_reads_its_models_list_prices_at_it():
    from dtoc_rl.sim.pricing import load_price_table, prices_for

    prices = load_price_table('{"claude-sonnet": {"cache_hit_rate": 0.4}}')["claude-sonnet"]
    env = LiveEnv(
        ScriptedAgent([call("bash", command="ls")]), tasks=["pagination"], max_items=N, prices=prices,
        model_family="claude-sonnet",
    )  # fmt: skip
    listed = prices_for("claude-sonnet")
    assert (env.prices.input, env.prices.cache_write) == (listed.input, listed.cache_write)
    assert env.prices.cache_hit_rate == 0.4 and env.cache_rules.hit_rate == 0.4
    env.close()
