"""RepoLaunch setup.log: conversations, actions, logged usage, the harness's window and prompt."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest

from dtoc_rl.core.tokens import get_estimator
from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.ingest.repolaunch import RepoLaunchIngester

FIX = Path(__file__).parents[1] / "fixtures" / "repolaunch"
LOG = FIX / "c" / "playground" / "acme__widget-1" / "setup.log"
SHARED = Path(__file__).parents[2].parent / "shared" / "traces" / "repolaunch_gpt-5.2"


def _parse(path: Path = LOG):
    return list(RepoLaunchIngester().parse(path))


def test_detected_and_one_trajectory_per_conversation():
    assert detect_format(LOG).name == "repolaunch"
    trajs = _parse()
    assert [t.traj_id for t in trajs] == [
        "repolaunch/c/acme__widget-1/setup-1",
        "repolaunch/c/acme__widget-1/verify-1",
        "repolaunch/c/acme__widget-1/setup-2",
        "repolaunch/c/acme__widget-1/verify-2",
    ]
    assert {t.model_raw for t in trajs} == {"azure/gpt-5.2-20251211"}
    assert {t.task_id for t in trajs} == {"acme__widget-1"}


def test_labels_come_from_the_verdicts_and_result_json():
    s1, v1, s2, v2 = _parse()
    assert (s1.success, v1.success) == (False, False)  # the first verification failed
    assert (s2.success, v2.success) == (True, True)  # the last pair takes result.json's `completed`
    assert s2.outcome_source == "result.json:completed"


def test_actions_outputs_and_format_reminders():
    s1, v1, _, v2 = _parse()
    assert [s.tool_name for s in s1.steps] == ["command", "command", None, "stop"]
    assert s1.steps[0].tool_args == "cat Makefile"
    assert s1.steps[0].output.startswith("cat Makefile\nall:")
    assert s1.steps[2].output is None  # no action: the harness's reminder is the next step's user text
    assert s1.steps[3].user_text.startswith("Observation:\nPlease using")
    assert s1.steps[3].output is None  # stop has no observation
    assert v1.steps[1].tool_name == "issue" and "zlib.h" in v1.steps[1].output
    assert v2.steps[0].output == ""


def test_a_command_that_exits_non_zero_is_an_error_output():
    """The shell tool ends each output with `exit code: N`: a failed build or test run is marked as
    an error (a feature the policy reads), whatever its length; other actions never are."""
    trajs = _parse()
    marked = [(s.output.rstrip().rsplit("exit code: ", 1)[-1], s.output_is_error)
              for t in trajs for s in t.steps if s.output and "exit code: " in s.output]  # fmt: skip
    assert ("0", False) in marked and ("2", True) in marked
    assert all(err == (code != "0") for code, err in marked)
    assert not any(s.output_is_error for t in trajs for s in t.steps if s.tool_name != "command")


def test_usage_per_call_and_nan_dollars_are_not_logged():
    s1 = _parse()[0]
    u = [s.usage for s in s1.steps]
    assert [x.input_tokens for x in u] == [5000, 5100, 5200, 5300]
    assert [x.output_tokens for x in u] == [20, 15, 8, 5]
    assert u[1].cost_usd is None and u[0].cost_usd == pytest.approx(0.009)
    assert s1.cost_usd is None  # one call has no dollars: no partial total
    assert s1.tokens_in == 5000 + 5100 + 5200 + 5300
    extra = json.loads(s1.extra)
    assert extra["other_calls"]["calls"] == 1 and extra["other_calls"]["input_tokens"] == 300


def test_unlogged_prompt_is_the_first_calls_input_less_what_the_log_holds():
    est = get_estimator("o200k_base")
    for t in _parse():
        first = t.steps[0]
        held = est.count(first.user_text) + est.count(first.harness_text)
        assert t.unlogged_prompt_tokens == first.usage.input_tokens - held


def test_setup_calls_carry_the_commands_run_so_far():
    s1, _, s2, _ = _parse()
    assert "[]" in s1.steps[0].harness_text
    assert "['cat Makefile', 'make all']" in s1.steps[3].harness_text
    # the second attempt's list starts with the first attempt's commands
    assert "['cat Makefile', 'make all']" in s2.steps[0].harness_text
    assert all(s.harness_text == "" for s in _parse()[1].steps)  # verification re-sends nothing


def _long_log(tmp_path: Path, calls: int) -> Path:
    ai = "=" * 34 + " Ai Message " + "=" * 34
    hu = "=" * 32 + " Human Message " + "=" * 33
    rows = ["2026-04-20 10:00:00,000 - ----------Start setup conversation----------"]
    for i in range(calls):
        rows.append(
            f"2026-04-20 10:{i // 60:02d}:{i % 60:02d},100 - \n{ai}\n\n"
            f"Action: <command>echo {i}</command>\n\n"
            f" -- <step_cost> input_tok: {1000 + i}, output_tok: 5, cost_usd: 0.001 </step_cost>\n"
        )
        rows.append(f"2026-04-20 10:{i // 60:02d}:{i % 60:02d},200 - \n{hu}\n\nObservation:\n{i}\n")
    rows.append("2026-04-20 11:00:00,000 - ----------End setup conversation----------")
    p = tmp_path / "setup.log"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_the_window_drops_whole_message_pairs_beyond_forty_messages(tmp_path):
    t = _parse(_long_log(tmp_path, 25))[0]
    assert len(t.steps) == 25
    assert t.steps[20].dropped_before == []  # 40 messages: all still in the prompt
    assert t.steps[21].dropped_before == [0]
    assert t.steps[24].dropped_before == [0, 1, 2, 3]
    assert t.steps[24].masked_before == t.steps[24].dropped_before
    assert t.success is None and t.model_raw == "unknown"  # no result.json, no config.json


def test_a_log_without_conversation_banners_is_one_conversation(tmp_path):
    text = _long_log(tmp_path, 3).read_text().splitlines()
    plain = tmp_path / "plain" / "setup.log"
    plain.parent.mkdir()
    plain.write_text("\n".join(line for line in text if "conversation---" not in line) + "\n")
    (t,) = _parse(plain)
    assert t.traj_id.endswith("/log-1") and len(t.steps) == 3
    assert t.steps[2].dropped_before is None and t.steps[2].harness_text == ""  # window unknown


def test_the_driver_takes_setup_logs_and_leaves_results_and_configs_as_metadata():
    res = ingest_paths([FIX], progress=False)
    assert len(res.trajectories) == 4 and not res.skipped
    assert res.auxiliary == 2  # config.json and result.json


def test_a_broken_result_json_keeps_the_log(tmp_path):
    d = tmp_path / "x" / "playground" / "i-1"
    d.mkdir(parents=True)
    (d / "setup.log").write_bytes(LOG.read_bytes())
    (d / "result.json").write_text('{"completed": tru')
    trajs = _parse(d / "setup.log")
    assert trajs[-1].success is True  # the verdict in the log, not result.json
    assert "result.json not used" in json.loads(trajs[-1].extra)["result_note"]


def _reproduced(t, est, per_message: int = 5) -> list[tuple[int, int]]:
    """(predicted, logged) input tokens of each call: the log's own context, as RepoLaunch built it."""
    cost = []
    for s in t.steps:
        a = est.count(s.assistant_text) + per_message
        o = est.count("Observation:\n" + s.output) + per_message if s.output is not None else 0
        u = est.count(s.user_text) + per_message if s.user_text else 0
        cost.append((a, o, u))
    out = []
    for k, s in enumerate(t.steps):
        if s.usage is None or k == 0:
            continue
        dropped = set(s.dropped_before or [])
        pred = t.unlogged_prompt_tokens + est.count(s.harness_text) + cost[k][2]
        pred += sum(cost[j][0] + cost[j][1] + (cost[j][2] if j else 0) for j in range(k) if j not in dropped)
        out.append((pred, s.usage.input_tokens))
    return out


@pytest.mark.shared
@pytest.mark.slow
def test_every_shared_log_ingests_and_replays_the_logged_input_tokens():
    if not SHARED.is_dir():
        pytest.skip("../shared/traces/repolaunch_gpt-5.2 is not here")
    logs = sorted(glob.glob(str(SHARED / "*" / "playground" / "*" / "setup.log")))
    assert len(logs) == 602
    res = ingest_paths([SHARED], label=False, progress=False)
    assert not res.skipped, res.skipped[:3]
    assert len({t.source_path for t in res.trajectories}) == 602
    est = get_estimator("o200k_base")
    errs = [
        abs(p - g) / g
        for t in res.trajectories[::7]  # a seventh of the conversations keeps this test fast
        for p, g in _reproduced(t, est)
    ]
    assert len(errs) > 1000
    assert float(np.median(errs)) < 0.02
