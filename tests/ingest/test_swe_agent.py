"""SWE-agent ``.traj`` ingester: real 0.x / 1.x files from ../shared, plus small synthetic cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.swe_agent import ACI_COMMANDS, SweAgentIngester

ING = SweAgentIngester()

FOLDERS = {
    # folder: (source, {model family}, number of trajectories)
    "swe-agent-0.x_multi-swe-bench-java": (
        "swe-agent-0.x",
        {"gpt-4o", "gpt-4o-mini", "deepseek-chat", "deepseek-coder", "doubao-pro"},
        100,
    ),
    "swe-agent-0.x_gpt-4-0125_swebench-lite": ("swe-agent-0.x", {"gpt-4"}, 63),
    # MANIFEST section 4: 165 SWE-agent-LM-32B runs (44 first batch + 121 second) and 8 Claude-4 runs
    "swe-agent-1.0_swebench-verified": ("swe-agent-1.x", {"qwen-coder", "claude-sonnet"}, 173),
}


def _parse(path: Path) -> Trajectory:
    (traj,) = list(ING.parse(path))
    return traj


def _labels(folder: Path) -> dict[Path, bool | None]:
    rows = [json.loads(x) for x in (folder / "selected_labels.jsonl").read_text().splitlines() if x.strip()]
    return {(folder / r["traj"]).resolve(): r["resolved"] for r in rows}


# ----------------------------------------------------------------------------- real files


@pytest.mark.shared
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_every_trajectory_round_trips_with_labels(shared_traces, folder):
    source, families, n_expected = FOLDERS[folder]
    root = shared_traces / folder
    labels = _labels(root)
    files = sorted(root.rglob("*.traj"))
    assert len(files) == n_expected
    ids = set()
    for f in files:
        assert detect_format(f).name == ING.name, f
        t = _parse(f)
        raw = json.loads(f.read_text())
        assert t.source == source
        assert t.model_family in families, (f, t.model_raw)
        assert t.task_id == f.stem
        assert t.n_steps == len(raw["trajectory"])
        assert t.success == labels[f.resolve()]
        assert t.outcome_source == f"{folder}/selected_labels.jsonl:resolved"
        assert t.api_calls == raw["info"]["model_stats"]["api_calls"]
        assert t.task_text and "INSTRUCTIONS" not in t.task_text and "<pr_description>" not in t.task_text
        for s, e in zip(t.steps, raw["trajectory"]):
            assert s.assistant_text == (e.get("thought") or "")
            if s.tool_name is not None:
                assert s.output == e["observation"]
        assert Trajectory.from_row(t.to_row()) == t
        ids.add(t.traj_id)
    assert len(ids) == n_expected  # instance ids repeat across submissions; traj ids must not


@pytest.mark.shared
def test_label_counts_match_manifest(shared_traces):
    got = {}
    for folder in FOLDERS:
        ts = [_parse(f) for f in sorted((shared_traces / folder).rglob("*.traj"))]
        got[folder] = (
            sum(t.success is True for t in ts),
            sum(t.success is False for t in ts),
            sum(t.success is None for t in ts),
        )
    # MANIFEST: java 24 T / 65 F / 11 unknown; lite 33 T / 30 F; 1.0: LM-32B 103 T / 62 F + Claude 6 T / 2 F
    assert got["swe-agent-0.x_multi-swe-bench-java"] == (24, 65, 11)
    assert got["swe-agent-0.x_gpt-4-0125_swebench-lite"] == (33, 30, 0)
    assert got["swe-agent-1.0_swebench-verified"] == (109, 64, 0)


@pytest.mark.shared
def test_0x_tool_names_and_no_masking_claims(shared_traces):
    f = shared_traces / "swe-agent-0.x_gpt-4-0125_swebench-lite/trajs/django__django-13933.traj"
    t = _parse(f)
    assert (t.model_raw, t.model_family) == ("gpt4-0125", "gpt-4")
    assert [s.tool_name for s in t.steps[:4]] == ["bash", "open", "scroll_down", "goto"]
    assert t.steps[1].read_resource == "/django__django/django/forms/forms.py"
    assert t.steps[17].tool_name == "edit" and t.steps[17].write_resources == [
        "/django__django/django/forms/models.py"
    ]
    # the last entry is the harness's exit_cost, not a model action
    assert t.steps[-1].tool_name is None and t.steps[-1].output is None
    assert t.extra_dict()["harness_exit"]["action"] == "exit_cost"
    for f in (shared_traces / "swe-agent-0.x_multi-swe-bench-java").rglob("*.traj"):
        for s in _parse(f).steps:
            assert s.masked_before is None  # 0.x history keeps every output; processors left no trace
            assert s.tool_name is None or s.tool_name == "bash" or s.tool_name in ACI_COMMANDS


@pytest.mark.shared
def test_lm32b_masking_counted_by_hand(shared_traces):
    f = (
        shared_traces
        / "swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b/trajs/sympy__sympy-16886.traj"
    )
    t = _parse(f)
    assert (t.model_raw, t.model_family, t.source) == ("SWE-agent-LM-32B", "qwen-coder", "swe-agent-1.x")
    assert t.success is True  # selected_labels.jsonl
    # By hand from the file: entry i's action was produced from entry i-1's `messages`.
    # messages[5] shows observation 0 as "Old environment output: (5 lines omitted)",
    # messages[6] also observation 1 "(332 lines omitted)"; nothing earlier is masked.
    assert [s.masked_before for s in t.steps] == [[], [], [], [], [], [], [0], [0, 1]]
    events = [(s.index, e.kind, e.targets, e.detail) for s in t.steps for e in s.events]
    assert events == [
        (6, "mask", [0], "LastNObservations(n=5): Old environment output: (5 lines omitted)"),
        (7, "mask", [1], "LastNObservations(n=5): Old environment output: (332 lines omitted)"),
    ]
    s = t.steps[2]
    assert s.tool_name == "str_replace_editor" and s.tool_call_id is None
    assert json.loads(s.tool_args) == {
        "command": "view",
        "path": "/testbed/sympy/crypto/crypto.py",
        "view_range": [1520, 1530],
    }
    assert s.read_resource == "/testbed/sympy/crypto/crypto.py"
    assert t.steps[-1].tool_name == "submit"


@pytest.mark.shared
def test_lm32b_masks_grow_as_last_5_observations(shared_traces):
    files = sorted(
        (shared_traces / "swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b/trajs").glob("*.traj")
    )
    assert len(files) == 165  # MANIFEST section 4: both batches
    for f in files:
        t = _parse(f)
        n = json.loads(json.loads(f.read_text())["replay_config"])["agent"]["history_processors"][0]["n"]
        assert n == 5
        # at step i the context holds the instance prompt plus the outputs of the earlier steps that
        # reached the history; all but the last n of them are replaced.  Harness exits (an
        # "Exit due to context window" entry) add no output, so they do not advance the window.
        outs = [k for k, s in enumerate(t.steps) if s.output is not None]
        want = [[k for k in outs if k < i][: max(0, sum(k < i for k in outs) - n)] for i in range(t.n_steps)]
        assert [s.masked_before for s in t.steps] == want, f
        new = [e.targets[0] for s in t.steps for e in s.events if e.kind == "mask"]
        assert new == want[-1]


@pytest.mark.shared
def test_claude_function_calls_requery_and_no_masking(shared_traces):
    claude = "swe-agent-1.0_swebench-verified/20250522_sweagent_claude-4-sonnet-20250514"
    f = shared_traces / claude / "trajs/django__django-15731.traj"
    t = _parse(f)
    assert (t.model_raw, t.model_family) == ("claude-4-sonnet-20250514", "claude-sonnet")
    assert t.n_steps == 24
    s0 = t.steps[0]
    assert s0.tool_name == "str_replace_editor" and s0.tool_call_id.startswith("toolu_")
    assert json.loads(s0.tool_args)["command"] == "view"
    # entry 19 answered without a tool call; the harness re-queried and kept it out of history
    assert t.steps[19].tool_name is None and t.extra_dict()["requery_steps"] == [19]
    assert t.steps[20].user_text.startswith("Your last output did not use any tool calls!")
    assert all(s.masked_before == [] for s in t.steps)  # cache_control only, no LastNObservations


# ----------------------------------------------------------------------------- synthetic


def _write(tmp_path: Path, name: str, data) -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_truncated_json_is_an_ingest_error(tmp_path):
    p = _write(tmp_path, "x.traj", '{"trajectory": [{"action": "ls", "observation": "a')
    assert ING.detect(p, p.read_text())
    with pytest.raises(IngestError, match=r"invalid JSON: .* at line 1 column"):
        list(ING.parse(p))


def test_empty_trajectory_is_an_ingest_error(tmp_path):
    p = _write(tmp_path, "x.traj", {"environment": "swe_main", "trajectory": [], "history": [], "info": {}})
    with pytest.raises(IngestError, match="empty trajectory"):
        list(ING.parse(p))


def test_wrong_shape_is_an_ingest_error(tmp_path):
    p = _write(tmp_path, "x.traj", {"trajectory": ["ls"], "history": []})
    with pytest.raises(IngestError, match=r"trajectory\[0\] is str"):
        list(ING.parse(p))


def _obs(text):
    return {"role": "user", "content": text, "message_type": "observation"}


def _act(action):
    return {"role": "assistant", "content": f"t {action}", "action": action, "message_type": "action"}


def test_synthetic_1x_post_step_messages_masking(tmp_path):
    """1.0.x: entry i's `messages` are its post-step view, so they are the input of entry i+1."""
    actions = ["ls", "cat a", "cat b", "submit"]
    masked_after = {2: [0], 3: [0, 1]}  # n=1: at entry k's post view outputs < k are replaced
    traj, history = [], [{"role": "system", "content": "sys", "message_type": "system_prompt"}]
    history.append(_obs("<pr_description>\nfix it\n</pr_description>"))
    for k, a in enumerate(actions):
        history += [_act(a), _obs(f"OBSERVATION:\nout{k}")]
        msgs = []
        for m in history:
            if m.get("content", "").startswith("OBSERVATION:\nout"):
                j = int(m["content"][-1])
                if j in masked_after.get(k, []):
                    m = {**m, "content": "Old environment output: (1 lines omitted)"}
            msgs.append(m)
        fn = f"<function=bash>\n<parameter=command>{a}</parameter>\n</function>"
        traj.append({"action": a, "observation": f"out{k}", "thought": "t", "response": fn, "messages": msgs})
    data = {"trajectory": traj, "history": history, "info": {"swe_agent_version": "1.0.1", "model_stats": {}}}
    t = _parse(_write(tmp_path, "inst-1.traj", data))
    assert t.source == "swe-agent-1.x" and t.task_text == "fix it"
    assert [s.masked_before for s in t.steps] == [[], [], [], [0]]
    assert [(s.index, e.targets) for s in t.steps for e in s.events] == [(3, [0])]
    assert [s.tool_name for s in t.steps] == ["bash", "bash", "bash", "bash"]
    assert json.loads(t.steps[1].tool_args) == {"command": "cat a"}


def test_synthetic_1x_inconsistent_context_is_unknown(tmp_path):
    """A context whose actions do not match the trajectory leaves masked_before at None."""
    history = [_obs("task"), _act("ls"), _obs("OBSERVATION:\nx"), _act("pwd"), _obs("OBSERVATION:\ny")]
    query1 = [_obs("task"), _act("something else"), _obs("OBSERVATION:\nx")]
    traj = [
        {"action": "ls", "observation": "x", "thought": "", "response": "", "query": history[:1]},
        {"action": "pwd", "observation": "y", "thought": "", "response": "", "query": query1},
    ]
    data = {"trajectory": traj, "history": history, "info": {"swe_agent_version": "1.1.0"}}
    t = _parse(_write(tmp_path, "inst-2.traj", data))
    assert [s.masked_before for s in t.steps] == [[], None]
    assert t.extra_dict()["masking_unknown_steps"] == [1]


@pytest.mark.shared
def test_0x_demonstrations_stay_in_the_prompt(shared_traces):
    """The is_demo messages are sent with every call: the system prompt keeps them (docs/schema.md)."""
    from dtoc_rl.sim.episode import compile_episode

    java = sorted((shared_traces / "swe-agent-0.x_multi-swe-bench-java").rglob("*.traj"))
    sent = replayed_without = replayed_with = 0
    for f in java:
        raw = json.loads(f.read_text())
        demos = [m["content"] for m in raw["history"] if m.get("is_demo")]
        t = _parse(f)
        assert demos and all(d in t.system_prompt for d in demos), f
        assert t.system_prompt.startswith(raw["history"][0]["content"])  # the system message first
        assert t.extra_dict()["demonstration_chars"] == sum(len(d) for d in demos)
        ep = compile_episode(t)
        calls = raw["info"]["model_stats"]["api_calls"]
        sent += raw["info"]["model_stats"]["tokens_sent"]
        replayed_with += ep.base_tokens * calls
        replayed_without += (ep.base_tokens - -(-sum(len(d) for d in demos) // 4)) * calls
    # the fixed prompt part alone: with the demonstration it is a large share of what was sent
    assert replayed_with > 1.5 * replayed_without
    assert replayed_with < sent
    lite = sorted((shared_traces / "swe-agent-0.x_gpt-4-0125_swebench-lite").rglob("*.traj"))[0]
    assert "demonstration" not in _parse(lite).system_prompt  # runs without demonstrations keep none


def test_a_real_swe_agent_1_1_run_reads_its_calls_and_outputs():
    # tests/fixtures/swe_agent_v1_1: the real SWE-agent 1.1.0 (3ea751c0), its default function-calling
    # config, the local deployment, a scripted chat-completions API (make_fixtures.py there)
    from dtoc_rl.ingest import detect_format, read_first

    path = Path(__file__).parent.parent / "fixtures" / "swe_agent_v1_1" / "run.traj"
    assert detect_format(path).name == "swe-agent"
    _, t = read_first(path)
    assert t.source == "swe-agent-1.x" and t.model_raw == "openai/gpt-4o"
    assert [s.tool_name for s in t.steps] == ["bash", "str_replace_editor", "bash", "submit", "submit"]
    assert "alpha line 40" in t.steps[0].output and "beta line 40" in t.steps[1].output
    assert "No such file or directory" in t.steps[2].output
    assert "Thank you for your work on this issue" in t.steps[3].output  # the review asks once
    # its default history processor only marks the cache: every call saw every output
    assert all(s.masked_before == [] for s in t.steps)
    extra = json.loads(t.extra)
    assert extra["swe_agent_version"] == "1.1.0" and extra["history_processors"] == ["cache_control"]
