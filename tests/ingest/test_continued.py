"""A run the proxy logged in parts (it restarted mid-run, or met again a conversation it had dropped
from memory) ingests as one run, billed as if one proxy had seen it all; twin runs and runs that
differ stay apart."""

from __future__ import annotations

import json
from dataclasses import fields

from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.policies.evaluate import evaluate
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.proxy import ContextProxy
from tests.chat_turns import HEAD, MODEL, tool_call, turn


def _call(k: int) -> dict:
    return tool_call(f"call_{k}", f'{{"n": {k}}}')


def _turn(k: int, text: str = "file") -> list[dict]:
    return turn(k, f"{text}_{k}.py\n" * 300, arguments=f'{{"n": {k}}}')


def _run(proxy: ContextProxy, msgs: list[dict], ks, session: str | None = None, text: str = "file") -> list:
    for k in ks:
        rw = proxy.rewrite("openai", {"model": MODEL, "messages": msgs}, session=session)
        message = {"role": "assistant", "content": f"Step {k}.", "tool_calls": [_call(k)]}
        usage = {"prompt_tokens": 900 + 300 * k, "completion_tokens": 40}
        proxy.answered(rw.conversation, {"choices": [{"message": message}], "usage": usage})
        msgs = msgs + _turn(k, text)
    return msgs


def _proxy(folder, n: int, **kw) -> ContextProxy:
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=folder, **kw)
    proxy.started += f"-p{n}"  # another process's names, as a restarted proxy's are
    return proxy


def _stop(proxy: ContextProxy) -> None:
    proxy.close_conversations()
    proxy.flush_logs()


def _in_parts(folder, cuts: list[int], calls: int = 8) -> None:
    msgs, start = list(HEAD), 0
    for n, end in enumerate([*cuts, calls]):
        proxy = _proxy(folder, n)
        msgs = _run(proxy, msgs, range(start, end))
        _stop(proxy)
        start = end


def _same_run(a, b) -> None:
    assert len(a.steps) == len(b.steps)
    for sa, sb in zip(a.steps, b.steps):
        for f in fields(sa):
            if f.name != "timestamp":
                assert getattr(sa, f.name) == getattr(sb, f.name), (sa.index, f.name)
    assert a.unlogged_prompt_tokens == b.unlogged_prompt_tokens and a.task_text == b.task_text
    bills = [{r.policy: r.dollars for r in evaluate([t], ["logged", "none"], progress=False)} for t in (a, b)]
    assert bills[0] == bills[1]


def test_a_run_through_a_restarted_proxy_ingests_as_the_run_one_proxy_saw(tmp_path):
    _in_parts(tmp_path / "one", [])
    _in_parts(tmp_path / "two", [4])
    (whole,) = ingest_paths([tmp_path / "one"], progress=False).trajectories
    res = ingest_paths([tmp_path / "two"], progress=False)
    (joined,) = res.trajectories
    _same_run(whole, joined)
    assert len(res.joined) == 1 and not res.skipped
    assert any(s.masked_before for s in joined.steps[:4])  # the first proxy's hides, kept
    # the row's copies of the visibility and the tokens are the joined run's
    extra, ref = json.loads(joined.extra), json.loads(whole.extra)
    assert (extra["dtoc_visibility"], extra["tokens_in"], extra["tokens_out"]) == (
        ref["dtoc_visibility"], ref["tokens_in"], ref["tokens_out"])  # fmt: skip
    # named as its first part: the first proxy's log
    (first,) = json.loads(joined.extra)["joined"]
    assert res.joined == [f"{first} -> {joined.traj_id}"] and "-p0-" in first and "-p0-" in joined.task_id


def test_three_parts_join_into_one_and_the_command_says_so(tmp_path, capsys):
    from dtoc_rl.cli import main

    _in_parts(tmp_path / "one", [])
    _in_parts(tmp_path / "three", [3, 5])
    (whole,) = ingest_paths([tmp_path / "one"], progress=False).trajectories
    (joined,) = ingest_paths([tmp_path / "three"], progress=False).trajectories
    _same_run(whole, joined)
    assert len(json.loads(joined.extra)["joined"]) == 2
    assert main(["ingest", str(tmp_path / "three"), "-o", str(tmp_path / "ds"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["joined"]) == 2 and summary["total"]["trajectories"] == 1
    assert sum(summary["formats"].values()) == 1  # runs of each format, not the parts read
    assert any("joined into one" in w for w in summary["warnings"])


def test_a_conversation_dropped_from_memory_and_met_again_is_one_run(tmp_path):
    proxy = _proxy(tmp_path, 0, max_conversations=1)
    msgs = _run(proxy, list(HEAD), range(3))
    other = [HEAD[0], {"role": "user", "content": "Another task."}]
    _run(proxy, other, range(2))  # drops the first conversation, which logs its last answer
    _run(proxy, msgs, range(3, 6))  # and meets it again
    _stop(proxy)
    runs = ingest_paths([tmp_path], progress=False).trajectories
    assert sorted(len(t.steps) for t in runs) == [2, 6]
    (run,) = [t for t in runs if len(t.steps) == 6]
    assert [s.usage.input_tokens for s in run.steps] == [900 + 300 * k for k in range(6)]
    assert all(s.masked_before is not None for s in run.steps)


def test_twin_runs_and_runs_that_differ_stay_apart(tmp_path):
    # the same task run twice at once, each named (seen from its first request): two runs
    proxy = _proxy(tmp_path / "twins", 0)
    _run(proxy, list(HEAD), range(4), session="a")
    _run(proxy, list(HEAD), range(8), session="b")
    _stop(proxy)
    assert sorted(len(t.steps) for t in ingest_paths([tmp_path / "twins"], progress=False).trajectories) == [
        4,
        8,
    ]
    # a later log whose first request holds other outputs than the earlier log: not its continuation
    first = _proxy(tmp_path / "differ", 0)
    _run(first, list(HEAD), range(4))
    _stop(first)
    msgs = list(HEAD)
    for k in range(4):
        msgs += _turn(k, "other")
    second = _proxy(tmp_path / "differ", 1)
    _run(second, msgs, range(4, 6))
    _stop(second)
    runs = ingest_paths([tmp_path / "differ"], progress=False)
    assert sorted(len(t.steps) for t in runs.trajectories) == [4, 6] and not runs.joined


def test_a_run_forked_from_an_earlier_call_is_not_the_earlier_runs_continuation(tmp_path):
    # the same calls made again from the second one on (a session rewound and run again): the later
    # log saw them itself, so they are not the earlier log's calls
    first = _proxy(tmp_path, 0)
    msgs = _run(first, list(HEAD), range(4))
    _stop(first)
    second = _proxy(tmp_path, 1)
    _run(second, msgs[: len(HEAD) + 4], range(2, 6))
    _stop(second)
    runs = ingest_paths([tmp_path], progress=False)
    assert sorted(len(t.steps) for t in runs.trajectories) == [4, 6] and not runs.joined


def test_history_a_proxy_did_not_see_is_logged_as_not_known(tmp_path):
    msgs = list(HEAD)
    for k in range(3):
        msgs += _turn(k)
    proxy = _proxy(tmp_path, 0)
    _run(proxy, msgs, range(3, 5))
    _stop(proxy)
    (run,) = ingest_paths([tmp_path], progress=False).trajectories
    assert [s.masked_before is None for s in run.steps] == [True] * 3 + [False] * 2
    assert [s.usage is None for s in run.steps] == [True] * 3 + [False] * 2


def _traj(task: str, steps: int, seen_from: int, orchestrated: bool = True):
    from dtoc_rl.data.schema import Step, Trajectory

    extra = json.dumps({"dtoc_session": "s"} if orchestrated else {})
    made = [
        Step(index=k, tool_name="bash", tool_args=f'{{"n": {k}}}', output=f"out {k}",
             masked_before=None if k < seen_from else [])
        for k in range(steps)
    ]  # fmt: skip
    return Trajectory(traj_id=f"{task}/{steps}", source="proxy", model_raw=MODEL, model_family="gpt-4o",
                      task_id=f"{task}-{steps}", task_text=task, extra=extra, steps=made)  # fmt: skip


def test_only_an_orchestrators_parts_of_one_task_are_joined():
    from dtoc_rl.ingest.continued import join_continued

    # another task's run with the same calls, longer than the run's own first part: not a part of it
    early, other, late = _traj("fix a", 3, 3), _traj("fix b", 4, 4), _traj("fix a", 6, 4)
    kept, joined = join_continued([early, other, late])
    assert joined == ["fix a/3 -> fix a/6"] and kept == [other, late] and late.task_id == "fix a-3"
    # logs of other harnesses whose visibility is not known are never taken for parts of one run
    plain = [_traj("fix a", 3, 3, orchestrated=False), _traj("fix a", 6, 6, orchestrated=False)]
    assert join_continued(list(plain)) == (plain, [])


def test_a_restart_after_a_side_question_the_run_left_out_joins(tmp_path):
    # Gemini CLI asks who speaks next after an answer; the proxy stops on that question's answer
    first = _proxy(tmp_path, 0)
    msgs = _run(first, list(HEAD), range(4))
    side = [*msgs, {"role": "user", "content": "Who speaks next? Answer in JSON."}]
    rw = first.rewrite("openai", {"model": MODEL, "messages": side})
    first.answered(
        rw.conversation, {"choices": [{"message": {"role": "assistant", "content": '{"next": "model"}'}}]}
    )
    _stop(first)
    second = _proxy(tmp_path, 1)
    _run(second, [*msgs, {"role": "user", "content": "Please continue."}], range(4, 8))
    _stop(second)
    res = ingest_paths([tmp_path], progress=False)
    (run,) = res.trajectories
    assert len(res.joined) == 1 and [s.tool_name for s in run.steps] == ["bash"] * 8
    assert all(s.usage is not None and s.masked_before is not None for s in run.steps)


def test_the_part_that_saw_the_calls_is_joined_whatever_the_order_and_only_within_a_policy(tmp_path):
    # a proxy that met the run again and was stopped before its first answer saw none of its calls
    first = _proxy(tmp_path / "a", 0)
    msgs = _run(first, list(HEAD), range(4))
    _stop(first)
    blind = _proxy(tmp_path / "b", 1)
    blind.rewrite("openai", {"model": MODEL, "messages": msgs})
    _stop(blind)
    third = _proxy(tmp_path / "c", 2)
    _run(third, msgs, range(4, 8))
    _stop(third)
    for order in ("abc", "bac", "cba"):
        (run,) = ingest_paths([tmp_path / x for x in order], progress=False).trajectories
        assert all(s.usage is not None and s.masked_before is not None for s in run.steps), order
    # the same calls run under another policy are another run
    other = ContextProxy(make_policy("last_n:n=3"), log_dir=tmp_path / "d")
    _run(other, list(HEAD), range(4))
    _stop(other)
    for order in ("adc", "dac"):
        runs = ingest_paths([tmp_path / x for x in order], progress=False).trajectories
        (joined,) = [t for t in runs if len(t.steps) == 8]
        assert len(runs) == 2 and [s.masked_before for s in joined.steps[:4]] == [[], [], [0], [0, 1]]


def test_the_call_a_killed_proxy_was_cut_off_in_is_joined_as_it_was_sent(tmp_path):
    _in_parts(tmp_path / "one", [])
    first = _proxy(tmp_path / "two", 0)
    msgs = _run(first, list(HEAD), range(3))
    first.rewrite("openai", {"model": MODEL, "messages": msgs})  # the fourth call, sent; then killed
    first.flush_logs()
    msgs += _turn(3)
    second = _proxy(tmp_path / "two", 1)
    _run(second, msgs, range(4, 8))
    _stop(second)
    (whole,) = ingest_paths([tmp_path / "one"], progress=False).trajectories
    (joined,) = ingest_paths([tmp_path / "two"], progress=False).trajectories
    assert [s.masked_before for s in joined.steps] == [s.masked_before for s in whole.steps]
    changes = [[(e.kind, e.targets) for e in s.events] for s in whole.steps]  # the keys they named aside
    assert [[(e.kind, e.targets) for e in s.events] for s in joined.steps] == changes
    assert joined.steps[3].usage is None  # its answer went through no proxy that lived to log it
