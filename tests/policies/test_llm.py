"""PromptedLLMPolicy: prompts, answer parsing, backends against loopback fakes and a tiny local LM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dtoc_rl.core.manage import MANAGE_CONTEXT_DESCRIPTION
from dtoc_rl.engine.features import ItemState, build_observation
from dtoc_rl.policies.llm import (
    ANSWER_FORMAT_TEXT,
    ANSWER_FORMAT_TOOLS,
    ERROR_KINDS,
    PACKAGE_PROMPT_DIR,
    PLACEHOLDERS,
    PromptedLLMPolicy,
    available_prompts,
    find_prompt,
    load_prompt,
    parse_text_answer,
)
from dtoc_rl.policies.llm_backends import (
    AnthropicBackend,
    BackendError,
    LLMBackend,
    OpenAIBackend,
    Reply,
    ToolCall,
    backend_from_spec,
)
from tests.policies.fake_servers import FakeAnthropicServer, FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
N = 8
KEYS = ["t0000", "t0001", "t0002", "t0003"]
VISIBLE = [True, True, False, True]  # t0002 is hidden


@pytest.fixture(autouse=True)
def _no_proxies_no_env_keys(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def _obs(visible=VISIBLE, step=5):
    items = [
        ItemState(est_tokens=1000 * (i + 1), age=len(visible) - 1 - i, visible=v, tool_id=1)
        for i, v in enumerate(visible)
    ]
    active = 500 + sum(it.est_tokens for it in items if it.visible)
    return build_observation(items, N, active_tokens=active, step=step, model_family="claude-sonnet")


def _info(**extra):
    info = {"keys": [*KEYS, "", "", "", ""], "recent_reasoning": "[step 4] now edit foo.py", **extra}
    return info


def _masks(act):
    return [int(i) for i in np.flatnonzero(act["enable"])], [int(i) for i in np.flatnonzero(act["disable"])]


class ScriptedBackend(LLMBackend):
    """Answers from a script: a Reply, an exception to raise, or a callable (system, user) -> Reply."""

    name = "scripted"

    def __init__(self, *replies, supports_tools=True, model="scripted-model"):
        super().__init__()
        self.replies = list(replies)
        self.supports_tools = supports_tools
        self.model = model
        self.prompts: list[tuple[str, str]] = []

    def complete(self, system, user):
        self.prompts.append((system, user))
        r = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(r, BaseException):
            raise r
        return r(system, user) if callable(r) else r


def _call(args, name="manage_context"):
    return Reply(tool_calls=[ToolCall(name, args)])


# -- prompt files -----------------------------------------------------------------------------------------
def test_packaged_prompts_are_versioned_and_use_known_placeholders():
    found = available_prompts()
    assert {"default", "claude-sonnet", "gpt-4o"} <= set(found)
    for name, path in found.items():
        tpl = load_prompt(path, "package")
        assert tpl.version != "unversioned", name
        assert tpl.system and tpl.user, name
        assert not tpl.unknown_placeholders, (name, tpl.unknown_placeholders)
        assert {"store_listing", "recent_reasoning", "active_tokens", "answer_format"} <= tpl.placeholders
        assert "tool_description" in tpl.placeholders


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet.md"),
        ("anthropic/claude-3-7-sonnet", "claude-sonnet.md"),
        ("gpt-4o-2024-08-06", "gpt-4o.md"),
        ("gpt-4o-mini", "gpt-4o.md"),  # gpt-4o-mini → gpt-4o → default
        ("claude-opus-4", "default.md"),
        ("my-local-model", "default.md"),
    ],
)
def test_prompt_selected_by_the_backend_model_family(model, expected):
    pol = PromptedLLMPolicy(ScriptedBackend(_call({}), model=model))
    assert pol.prompt.name == expected
    cfg = pol.config()
    assert cfg["prompt"] == expected and cfg["prompt_source"] == "package"
    assert cfg["prompt_version"] == pol.prompt.version != "unversioned"
    assert Path(cfg["prompt_path"]) == PACKAGE_PROMPT_DIR / expected
    assert f"prompt={expected}@{pol.prompt.version}" in pol.label


def test_explicit_family_and_none():
    assert PromptedLLMPolicy(ScriptedBackend(_call({})), prompt_family="gpt-4o").prompt.name == "gpt-4o.md"
    assert PromptedLLMPolicy(ScriptedBackend(_call({})), prompt_family=None).prompt.name == "default.md"


def test_user_prompt_dir_shadows_the_package(tmp_path):
    (tmp_path / "default.md").write_text(
        "---\nversion: 9.9-test\n---\nMINE {store_listing}\n{answer_format}\n"
    )
    (tmp_path / "claude.md").write_text(
        "---\nversion: 2.0\n---\n<!-- system -->\nS {tool_description}\n<!-- user -->\nU {store_listing}\n"
    )
    pol = PromptedLLMPolicy(ScriptedBackend(_call({}), model="claude-opus-4"), prompt_dir=tmp_path)
    assert (pol.prompt.name, pol.prompt.version, pol.prompt.source) == ("claude.md", "2.0", "user")
    # the user's default beats a packaged family variant
    pol = PromptedLLMPolicy(ScriptedBackend(_call({}), model="gpt-4o"), prompt_dir=tmp_path)
    assert (pol.prompt.name, pol.prompt.version) == ("default.md", "9.9-test")
    assert pol.config()["prompt_path"] == str((tmp_path / "default.md").resolve())
    pol.act(_obs(), _info())
    system, user = pol.backend.prompts[-1]
    assert system == "" and user.startswith("MINE - t0000")
    with pytest.raises(FileNotFoundError):
        find_prompt("x", tmp_path / "missing")


def test_prompt_file_rendering_leaves_other_braces_alone(tmp_path):
    p = tmp_path / "p.md"
    p.write_text(
        '---\nversion: "3"\nauthor: me\n---\n<!-- user -->\n'
        'Example: {"enable": [], "disable": ["t0001"]} {unknown} {active_tokens} {budget_line}\n'
    )
    tpl = load_prompt(p)
    assert tpl.version == "3" and tpl.meta["author"] == "me" and tpl.system == ""
    assert tpl.unknown_placeholders == {"unknown"}
    _, user = tpl.render({"active_tokens": "1,234", "budget_line": "No token budget is set."})
    assert user == 'Example: {"enable": [], "disable": ["t0001"]} {unknown} 1,234 No token budget is set.'
    pol = PromptedLLMPolicy(ScriptedBackend(_call({})), prompt_file=p)
    assert pol.config()["prompt_source"] == "file" and pol.config()["prompt_version"] == "3"


def test_bad_prompt_files(tmp_path):
    (tmp_path / "open.md").write_text("---\nversion: 1\nno closing line\n")
    with pytest.raises(ValueError, match="never closed"):
        load_prompt(tmp_path / "open.md")
    (tmp_path / "nouser.md").write_text("<!-- system -->\nonly a system part\n")
    with pytest.raises(ValueError, match="no user part"):
        load_prompt(tmp_path / "nouser.md")
    (tmp_path / "plain.md").write_text("just a user prompt {store_listing}\n")
    assert load_prompt(tmp_path / "plain.md").version == "unversioned"


def test_placeholders_documented():
    pol = PromptedLLMPolicy(ScriptedBackend(_call({})))
    values = pol._values(_obs(), _info(), [*KEYS, None, None, None, None], 3000)
    assert set(values) == set(PLACEHOLDERS)


# -- text answers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "enable", "disable"),
    [
        ('manage_context(enable=["t0002"], disable=["t0000", "t0001"])', ["t0002"], ["t0000", "t0001"]),
        ("manage_context(disable=['t0000'])", None, ["t0000"]),
        ("manage_context(enable=[t0002], disable=[t0000, t0001])", ["t0002"], ["t0000", "t0001"]),
        ("manage_context(disable=t0003)", None, ["t0003"]),
        ('manage_context({"disable": ["t0001"]})', None, ["t0001"]),
        ("manage_context()", None, None),
        ('Sure.\n```json\n{"enable": [], "disable": ["t0001"]}\n```', [], ["t0001"]),
        (
            '<tool_call>\n{"name": "manage_context", "arguments": {"disable": ["t0003"]}}\n</tool_call>',
            None,
            ["t0003"],
        ),
        (
            '{"type": "function", "function": {"name": "manage_context", "parameters": {"enable": ["t2"]}}}',
            ["t2"],
            None,
        ),
        (  # the last answer wins; <think> drafts are ignored
            '<think>maybe manage_context(disable=["t0000"])</think>First: {"disable": ["t0001"]}. '
            'Final: manage_context(disable=["t0003"])',
            None,
            ["t0003"],
        ),
    ],
)
def test_parse_text_answer(text, enable, disable):
    tc = parse_text_answer(text)
    assert tc is not None and tc.name == "manage_context"
    assert isinstance(tc.arguments, dict)
    assert tc.arguments.get("enable") == enable
    assert tc.arguments.get("disable") == disable


@pytest.mark.parametrize("text", ["", "no call here", "{not json}", "<think>manage_context(disable=['t1'])"])
def test_parse_text_answer_nothing(text):
    assert parse_text_answer(text) is None


def test_parse_text_answer_unreadable_arguments_are_kept_raw():
    tc = parse_text_answer("manage_context(please hide the old ones)")
    assert tc is not None and tc.arguments == "please hide the old ones"


# -- the policy with a scripted backend -------------------------------------------------------------------
def test_keys_map_to_slots_and_prompt_content():
    be = ScriptedBackend(_call({"enable": ["t0002"], "disable": ["t0000", "t0003"]}))
    pol = PromptedLLMPolicy(be)
    act = pol.act(_obs(), _info(budget_tokens=10_000))
    assert _masks(act) == ([2], [0, 3])
    assert act["enable"].dtype == np.int8 and act["enable"].shape == (N,)
    assert not pol.errors and pol.stats["answers_ok"] == 1
    assert (pol.stats["enabled"], pol.stats["disabled"]) == (1, 3 - 1)
    system, user = be.prompts[0]
    prompt = system + user
    assert MANAGE_CONTEXT_DESCRIPTION in prompt
    assert ANSWER_FORMAT_TOOLS in prompt and ANSWER_FORMAT_TEXT not in prompt
    assert "7,500" in prompt  # active tokens: 500 + 1000 + 2000 + 4000
    assert "Token budget: 10,000 tokens" in prompt
    assert "now edit foo.py" in prompt
    for k in KEYS:
        assert f"- {k} [" in prompt
    assert "- t0002 [HIDDEN]" in prompt and "~3,000 tokens" in prompt
    assert pol.last is not None and pol.last.enable == ["t0002"] and pol.last.key_source == "info"


def test_text_mode_prompt_asks_for_a_line():
    be = ScriptedBackend(Reply(text='manage_context(enable=[], disable=["t0001"])'), supports_tools=False)
    pol = PromptedLLMPolicy(be)
    assert pol.mode == "text"
    assert _masks(pol.act(_obs(), _info())) == ([], [1])
    assert ANSWER_FORMAT_TEXT in be.prompts[0][1]


def test_invalid_parts_are_dropped_and_counted():
    args = {"enable": ["t0002", "t9999", 7], "disable": ["t0000", "t0001", "t0001", "t0002"], "why": "x"}
    pol = PromptedLLMPolicy(ScriptedBackend(_call(args)))
    act = pol.act(_obs(), _info())
    # t0002 is in both lists: left alone; t9999 unknown; 7 not a string; t0001 acted on once
    assert _masks(act) == ([], [0, 1])
    assert pol.errors == {"unknown_key": 1, "bad_key": 1, "conflict": 1, "extra_arguments": 1}
    assert pol.stats["duplicates"] == 1
    assert {e["kind"] for e in pol.error_log} == set(pol.errors)
    assert set(pol.errors) <= set(ERROR_KINDS)


def test_on_invalid_noop():
    pol = PromptedLLMPolicy(ScriptedBackend(_call({"disable": ["t0000", "nope"]})), on_invalid="noop")
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert pol.errors == {"unknown_key": 1} and pol.stats["noop_invalid"] == 1


def test_requests_that_change_nothing_are_not_errors():
    pol = PromptedLLMPolicy(ScriptedBackend(_call({"enable": ["t0000"], "disable": ["t0002"]})))
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert not pol.errors and pol.stats["unchanged"] == 2 and pol.stats["noop_answers"] == 1


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply(text="I think everything is fine."), "no_tool_call"),
        (Reply(), "no_tool_call"),
        (_call('{"disable": ["t0000"'), "bad_json"),
        (_call("[1, 2]"), "bad_arguments"),
        (_call({"disable": "t0000 t0001"}, name="other_tool"), "wrong_tool"),
        (_call({"disable": {"t0000": 1}}), "bad_arguments"),
        (BackendError("backend_timeout", "timed out", 3), "backend_timeout"),
        (RuntimeError("backend bug"), "backend_error"),
    ],
)
def test_unusable_answers_are_counted_noops(reply, kind):
    pol = PromptedLLMPolicy(ScriptedBackend(reply))
    act = pol.act(_obs(), _info())
    assert _masks(act) == ([], [])
    assert pol.errors == {kind: 1}
    assert pol.last is not None and pol.last.errors[0][0] == kind


def test_several_calls_use_the_first():
    reply = Reply(
        tool_calls=[ToolCall("manage_context", {"disable": ["t0000"]}), ToolCall("manage_context", {})]
    )
    pol = PromptedLLMPolicy(ScriptedBackend(reply))
    assert _masks(pol.act(_obs(), _info())) == ([], [0])
    assert pol.errors == {"extra_calls": 1}


def test_namespaced_tool_name_accepted():
    pol = PromptedLLMPolicy(ScriptedBackend(_call({"disable": ["t0001"]}, name="functions.manage_context")))
    assert _masks(pol.act(_obs(), _info())) == ([], [1])


REPLAY_TEXT = """Active context: 7,500 tokens. Stored tool outputs (oldest first):
- t0000 [visible] step 0, bash, ~1,000 tokens: ls output
- t0001 [visible] step 2, bash, ~2,000 tokens: cat foo.py
- t0002 [HIDDEN] step 3, bash, ~3,000 tokens: pytest log
- t0003 [visible] step 4, bash, ~4,000 tokens: grep bar
Recent reasoning:
[step 4] Fix the failing test in foo.py"""


def test_keys_from_the_replay_text_view():
    be = ScriptedBackend(_call({"enable": ["t0002"], "disable": ["t0000"]}))
    pol = PromptedLLMPolicy(be)
    act = pol.act(_obs(), {"text": REPLAY_TEXT, "active_tokens": 7500})
    assert _masks(act) == ([2], [0]) and pol.last.key_source == "text"
    user = be.prompts[0][1]
    assert "- t0001 [visible] step 2, bash, ~2,000 tokens: cat foo.py" in user
    assert "Fix the failing test in foo.py" in user
    assert "Active context: 7,500 tokens. Stored" not in user  # header replaced by the template's own


def test_text_view_that_does_not_match_the_slots_is_a_counted_noop():
    be = ScriptedBackend(_call({"disable": ["t0000"]}))
    pol = PromptedLLMPolicy(be)
    text = "\n".join(ln for ln in REPLAY_TEXT.splitlines() if "t0003" not in ln)
    assert _masks(pol.act(_obs(), {"text": text})) == ([], [])
    assert pol.errors == {"no_key_map": 1} and not be.prompts  # the LLM was not even asked


def test_bare_observation_gets_synthetic_keys_and_its_own_listing():
    be = ScriptedBackend(_call({"disable": ["s001"], "enable": ["s002"]}))
    pol = PromptedLLMPolicy(be)
    act = pol.act(_obs(), {"slot_steps": np.array([0, 2, 3, 4, -1, -1, -1, -1])})
    assert _masks(act) == ([2], [1]) and pol.last.key_source == "synthetic"
    user = be.prompts[0][1]
    assert "- s002 [HIDDEN] step 3, age 1, read, ~3,000 tokens" in user
    assert "(none)" in user  # no reasoning available


def test_every_and_min_active_tokens_skip_without_asking():
    be = ScriptedBackend(_call({"disable": ["t0000"]}))
    pol = PromptedLLMPolicy(be, every=2)
    pol.reset()
    results = [_masks(pol.act(_obs(), _info())) for _ in range(4)]
    assert results == [([], [0]), ([], []), ([], [0]), ([], [])]
    assert len(be.prompts) == 2 and pol.stats["skipped"] == 2
    assert "every=2" in pol.label
    pol = PromptedLLMPolicy(be, min_active_tokens=8000)
    assert _masks(pol.act(_obs(), _info())) == ([], []) and pol.stats["skipped"] == 1
    empty = build_observation([], N, active_tokens=100, step=0)
    assert _masks(pol.act(empty, {})) == ([], [])  # nothing stored: nothing to ask


def test_act_batch_and_history():
    be = ScriptedBackend(_call({"disable": ["t0001"]}))
    pol = PromptedLLMPolicy(be, keep_history=True)
    obs = {k: np.stack([v, v]) for k, v in _obs().items()}
    act = pol.act_batch(obs, [_info(), _info()])
    assert act["disable"].shape == (2, N) and act["disable"][:, 1].tolist() == [1, 1]
    assert len(pol.history) == 2 and pol.history[0].user


def test_runs_a_replay_episode_through_the_text_view():
    from dtoc_rl.data.schema import Step, Trajectory
    from dtoc_rl.envs import ReplayEnv

    steps = [
        Step(
            index=k,
            assistant_text=f"thinking {k}",
            tool_name="bash",
            tool_args=f"cat f{k}",
            output="x" * 4000,
        )
        for k in range(6)
    ]
    traj = Trajectory(
        traj_id="llm/1", source="test", model_raw="gpt-4o", model_family="gpt-4o", task_id="t",
        task_text="do it", success=True, steps=steps,
    )  # fmt: skip

    def keep_newest(system, user):  # hide every visible output but the newest
        import re

        vis = re.findall(r"^- (\S+) \[visible\]", user, re.M)
        return _call({"disable": vis[:-1]})

    env = ReplayEnv(trajectories=[traj], max_items=N, text_view=True)
    pol = PromptedLLMPolicy(ScriptedBackend(keep_newest))
    obs, info = env.reset(seed=0)
    pol.reset(info)
    done = False
    while not done:
        obs, _, done, _, info = env.step(pol.act(obs, info))
    assert not pol.errors
    assert pol.stats["disabled"] == 4 and info["totals"]["changes"] >= 4
    assert info["totals"]["dollars"] < info["all_visible"]["dollars"]


# -- OpenAI-compatible endpoint ---------------------------------------------------------------------------
def _openai(srv, **kw):
    kw.setdefault("timeout", 5.0)
    kw.setdefault("max_retries", 1)
    return OpenAIBackend("gpt-4o-test", base_url=srv.url, api_key="sk-test", **kw)


def test_openai_tool_call_becomes_slot_masks():
    with FakeOpenAIServer({"enable": ["t0002"], "disable": ["t0001"]}) as srv:
        pol = PromptedLLMPolicy(_openai(srv))
        act = pol.act(_obs(), _info())
    assert _masks(act) == ([2], [1]) and not pol.errors
    assert pol.prompt.name == "gpt-4o.md"
    (req,) = srv.requests
    assert req["path"].endswith("/chat/completions")
    assert req["headers"]["authorization"] == "Bearer sk-test"
    body = req["body"]
    assert body["model"] == "gpt-4o-test" and body["temperature"] == 0 and body["max_tokens"] == 512
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "manage_context"
    assert tool["function"]["description"] == MANAGE_CONTEXT_DESCRIPTION
    assert body["tool_choice"] == {"type": "function", "function": {"name": "manage_context"}}
    system, user = body["messages"]
    assert system["role"] == "system" and MANAGE_CONTEXT_DESCRIPTION in system["content"]
    assert user["role"] == "user" and "- t0002 [HIDDEN]" in user["content"] and "7,500" in user["content"]
    assert pol.stats["input_tokens"] == 100 and pol.stats["output_tokens"] == 10


def test_openai_text_content_is_parsed_when_there_is_no_tool_call():
    with FakeOpenAIServer(behaviour="text", text='Here: manage_context(disable=["t0003"])') as srv:
        pol = PromptedLLMPolicy(_openai(srv))
        assert _masks(pol.act(_obs(), _info())) == ([], [3])


@pytest.mark.parametrize(
    ("behaviour", "kind", "requests"),
    [
        ("garbage", "backend_bad_response", 1),
        ("wrong_shape", "backend_bad_response", 1),
        ("500", "backend_http", 3),
        ("429", "backend_http", 3),
        ("400", "backend_http", 1),  # not retried
        ("bad_args", "bad_json", 1),
        ("other_tool", "wrong_tool", 1),
        ("text", "no_tool_call", 1),
    ],
)
def test_openai_failures_are_counted_noops(behaviour, kind, requests):
    with FakeOpenAIServer({"disable": ["t0000"]}, behaviour=behaviour) as srv:
        be = _openai(srv, max_retries=2)
        pol = PromptedLLMPolicy(be)
        act = pol.act(_obs(), _info())
    assert _masks(act) == ([], [])
    assert pol.errors == {kind: 1}
    assert len(srv.requests) == requests
    assert be.stats["retries"] == requests - 1 and be.stats["attempts"] == requests


def test_openai_retry_then_success():
    with FakeOpenAIServer({"disable": ["t0000"]}, behaviour=["500", "tool"]) as srv:
        be = _openai(srv, max_retries=3)
        pol = PromptedLLMPolicy(be)
        assert _masks(pol.act(_obs(), _info())) == ([], [0])
    assert not pol.errors and len(srv.requests) == 2
    assert be.stats["retries"] == 1 and be.stats["http_500"] == 1 and pol.last.reply.attempts == 2
    assert not be.stats["backend_http"]  # the call did not fail


def test_openai_hang_times_out_with_bounded_retries():
    with FakeOpenAIServer({"disable": ["t0000"]}, behaviour="hang") as srv:
        be = _openai(srv, timeout=0.3, max_retries=1)
        pol = PromptedLLMPolicy(be)
        t0 = time.monotonic()
        act = pol.act(_obs(), _info())
        elapsed = time.monotonic() - t0
    assert _masks(act) == ([], [])
    assert pol.errors == {"backend_timeout": 1}
    assert be.stats["backend_timeout"] == 1 and be.stats["retries"] == 1 and len(srv.requests) == 2
    assert elapsed < 3.0


def test_openai_tool_choice_fallback_when_the_server_rejects_it():
    def behaviour(req):
        return "400_tool_choice" if isinstance(req["body"].get("tool_choice"), dict) else "tool"

    with FakeOpenAIServer({"disable": ["t0001"]}, behaviour=behaviour) as srv:
        be = _openai(srv)
        pol = PromptedLLMPolicy(be)
        assert _masks(pol.act(_obs(), _info())) == ([], [1])
        assert _masks(pol.act(_obs(), _info())) == ([], [1])
    assert [r["body"].get("tool_choice") for r in srv.requests][1:] == ["required", "required"]
    assert be.stats["tool_choice_fallbacks"] == 1 and be.tool_choice == "required"
    assert be.config()["tool_choice"] == "required"


def test_openai_settings_from_the_environment(monkeypatch):
    with FakeOpenAIServer({"disable": ["t0003"]}) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        be = backend_from_spec("openai:gpt-4o", timeout=5, max_retries=0)
        assert isinstance(be, OpenAIBackend) and be.base_url == srv.url
        pol = PromptedLLMPolicy(be)
        assert _masks(pol.act(_obs(), _info())) == ([], [3])
    assert srv.requests[0]["headers"]["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in json.dumps(pol.config()) + json.dumps(be.config())


def test_remote_backends_need_a_key_or_a_url():
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIBackend("gpt-4o")
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicBackend("claude-sonnet-test")
    with pytest.raises(ValueError, match="tool_choice"):
        OpenAIBackend("gpt-4o", api_key="x", tool_choice="always")
    with pytest.raises(ValueError, match="must start with http:// or https://, got 'localhost:8000/v1'"):
        OpenAIBackend("gpt-4o", base_url="localhost:8000/v1")
    with pytest.raises(ValueError, match="backend spec"):
        backend_from_spec("gpt-4o")


# -- Anthropic messages endpoint --------------------------------------------------------------------------
def _anthropic_key(req):
    h = req["headers"]  # x-api-key, or a bearer token in newer SDKs
    return h.get("x-api-key") or h.get("authorization", "").removeprefix("Bearer ")


def _anthropic(srv, **kw):
    kw.setdefault("timeout", 5.0)
    kw.setdefault("max_retries", 1)
    return AnthropicBackend("claude-sonnet-test", base_url=srv.url, api_key="ak-test", **kw)


def test_anthropic_tool_use_becomes_slot_masks():
    with FakeAnthropicServer({"enable": ["t0002"], "disable": ["t0000", "t0003"]}) as srv:
        pol = PromptedLLMPolicy(_anthropic(srv))
        act = pol.act(_obs(), _info())
    assert _masks(act) == ([2], [0, 3]) and not pol.errors
    assert pol.prompt.name == "claude-sonnet.md"
    (req,) = srv.requests
    assert req["path"] == "/v1/messages" and _anthropic_key(req) == "ak-test"
    body = req["body"]
    (tool,) = body["tools"]
    assert tool["name"] == "manage_context" and tool["description"] == MANAGE_CONTEXT_DESCRIPTION
    assert tool["input_schema"]["properties"].keys() == {"enable", "disable"}
    assert body["tool_choice"] == {"type": "tool", "name": "manage_context"}
    assert (
        MANAGE_CONTEXT_DESCRIPTION in body["system"] and "<stored_outputs" in body["messages"][0]["content"]
    )
    assert body["max_tokens"] == 1024 and "temperature" not in body


@pytest.mark.parametrize(
    ("behaviour", "kind", "requests"),
    [
        ("garbage", "backend_bad_response", 1),
        ("500", "backend_http", 2),
        ("bad_args", "bad_arguments", 1),
        ("text", "no_tool_call", 1),
    ],
)
def test_anthropic_failures_are_counted_noops(behaviour, kind, requests):
    with FakeAnthropicServer({"disable": ["t0000"]}, behaviour=behaviour) as srv:
        be = _anthropic(srv)
        pol = PromptedLLMPolicy(be)
        assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert pol.errors == {kind: 1} and len(srv.requests) == requests
    assert be.stats["retries"] == requests - 1


def test_anthropic_hang_times_out_with_bounded_retries():
    with FakeAnthropicServer(behaviour="hang") as srv:
        be = _anthropic(srv, timeout=0.3, max_retries=1)
        pol = PromptedLLMPolicy(be)
        t0 = time.monotonic()
        assert _masks(pol.act(_obs(), _info())) == ([], [])
        elapsed = time.monotonic() - t0
    assert pol.errors == {"backend_timeout": 1} and be.stats["attempts"] == 2 and elapsed < 3.0


def test_anthropic_env_and_temperature(monkeypatch):
    with FakeAnthropicServer({"disable": ["t0001"]}) as srv:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-env")
        be = backend_from_spec("anthropic:claude-sonnet-test", temperature=0.0, max_retries=0, timeout=5)
        assert _masks(PromptedLLMPolicy(be).act(_obs(), _info())) == ([], [1])
    assert _anthropic_key(srv.requests[0]) == "ak-env" and srv.requests[0]["body"]["temperature"] == 0


def test_fake_server_runs_as_a_subprocess():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.policies.fake_servers", "openai", "--answer", '{"disable": ["t0000"]}'],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        pol = PromptedLLMPolicy(OpenAIBackend("gpt-4o", base_url=url, api_key="x", timeout=5, max_retries=0))
        assert _masks(pol.act(_obs(), _info())) == ([], [0])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- a tiny local transformers model ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A randomly initialised 1-layer GPT-2 and a BPE tokenizer trained here: no downloads."""
    torch = pytest.importorskip("torch")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([REPLAY_TEXT, 'manage_context(enable=[], disable=["t0001"])'] * 5, trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, n_positions=256, vocab_size=len(hf_tok),
        bos_token_id=hf_tok.eos_token_id, eos_token_id=hf_tok.eos_token_id,
    )  # fmt: skip
    model = GPT2LMHeadModel(cfg)
    path = tmp_path_factory.mktemp("tiny_lm")
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    chat = tmp_path_factory.mktemp("tiny_lm_chat")
    model.save_pretrained(chat)
    hf_tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    hf_tok.save_pretrained(chat)
    return {"path": path, "chat": chat, "model": model, "tokenizer": hf_tok}


@pytest.mark.slow
def test_tiny_local_model_by_path_garbage_is_a_counted_noop(tiny_lm):
    from dtoc_rl.policies.llm_backends import TransformersBackend

    be = TransformersBackend(tiny_lm["path"], max_new_tokens=12, local_files_only=True)
    assert not be.use_chat_template and not be.supports_tools
    pol = PromptedLLMPolicy(be)
    assert pol.mode == "text"
    for _ in range(2):
        act = pol.act(_obs(), {"text": REPLAY_TEXT})
        assert _masks(act) == ([], [])
    assert pol.stats["llm_calls"] == 2
    # random weights write garbage: counted, never raised (whatever the garbage parses as)
    assert sum(pol.errors.values()) >= 2 or pol.stats["noop_answers"] == 2
    assert set(pol.errors) <= set(ERROR_KINDS)
    assert be.stats["truncated_prompts"] == 2  # the prompt is longer than 256 positions
    assert be.stats["output_tokens"] <= 24


@pytest.mark.slow
def test_tiny_local_model_with_chat_template_and_in_memory(tiny_lm):
    from dtoc_rl.policies.llm_backends import TransformersBackend

    be = TransformersBackend(tiny_lm["chat"], max_new_tokens=8, local_files_only=True)
    assert be.use_chat_template
    text = be.prompt_text("SYS", "USER")
    assert text.startswith("<system>SYS\n<user>USER\n") and text.endswith("<assistant>")
    pol = PromptedLLMPolicy(be)
    pol.act(_obs(), _info())
    assert pol.stats["llm_calls"] == 1 and be.stats["calls"] == 1

    mem = TransformersBackend(tiny_lm["model"], tiny_lm["tokenizer"], max_new_tokens=4, model_name="tiny")
    assert mem.model == "tiny"
    pol = PromptedLLMPolicy(mem, on_invalid="noop")
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    with pytest.raises(ValueError, match="tokenizer"):
        TransformersBackend(tiny_lm["model"])


@pytest.mark.slow
def test_local_generation_failure_is_a_counted_noop(tiny_lm, monkeypatch):
    from dtoc_rl.policies.llm_backends import TransformersBackend

    be = TransformersBackend(tiny_lm["model"], tiny_lm["tokenizer"], max_new_tokens=4)

    def boom(*a, **k):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(be.lm, "generate", boom)
    pol = PromptedLLMPolicy(be)
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert pol.errors == {"backend_error": 1} and be.stats["failures"] == 1


def test_registry_spec_builds_the_policy():
    from dtoc_rl.policies.registry import make_policy

    with FakeOpenAIServer({"disable": ["t0002"], "enable": []}) as srv:
        pol = make_policy(f"llm:model=gpt-4o,base_url={srv.url},api_key=x,every=2,timeout=5,max_retries=0")
        assert isinstance(pol, PromptedLLMPolicy) and pol.every == 2 and pol.backend.timeout == 5
        assert pol.prompt.name == "gpt-4o.md" and pol.label.startswith("llm(openai:gpt-4o,")
        assert _masks(pol.act(_obs(), _info())) == ([], [])  # t0002 is hidden already
    with FakeAnthropicServer() as srv:
        pol = make_policy(f"llm:backend=anthropic,model=claude-haiku,base_url={srv.url},prompt_family=none")
        assert pol.backend.name == "anthropic" and pol.prompt.name == "default.md"
    from dtoc_rl.policies.registry import PolicySpecError

    for bad in ("llm:backend=openai", "llm:model=gpt-4o,api_key=x,colour=red", "llm:backend=nope,model=x"):
        with pytest.raises(PolicySpecError):
            make_policy(bad)


def test_unforeseen_reply_shapes_never_crash():
    weird = Reply(text=["not", "a", "string"])  # type: ignore[arg-type]
    pol = PromptedLLMPolicy(ScriptedBackend(weird))
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert pol.errors == {"internal_error": 1}


def test_openai_content_parts_list_is_read_as_text():
    from types import SimpleNamespace as NS

    from dtoc_rl.policies.llm_backends import OpenAIBackend as OB

    be = OB("m", api_key="x", max_retries=0)
    msg = NS(content=[{"type": "text", "text": 'manage_context(disable=["t0001"])'}], tool_calls=None)
    reply = be._read(NS(choices=[NS(message=msg, finish_reason="stop")], usage=None))
    pol = PromptedLLMPolicy(ScriptedBackend(reply))
    assert _masks(pol.act(_obs(), _info())) == ([], [1])


def test_copying_the_answer_template_literally_is_harmless():
    pol = PromptedLLMPolicy(ScriptedBackend(Reply(text="manage_context(enable=[...], disable=[...])")))
    assert _masks(pol.act(_obs(), _info())) == ([], [])
    assert pol.errors == {"bad_key": 2}


def test_a_model_name_not_on_this_machine_is_an_error_not_a_download(tmp_path, monkeypatch):
    from dtoc_rl.policies.llm_backends import TransformersBackend

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # a request would fail, not hang
    with pytest.raises(ValueError, match="'some-org/some-model' is not a local model folder"):
        TransformersBackend("some-org/some-model")
