"""Inspect AI logs: real ones (tests/fixtures/inspect_ai, written by inspect_ai 0.3.285's own react agent
and scorer against its scripted mockllm model; make_fixtures.py there), and the shapes older Inspect
versions wrote (deflate members, no message ids, whole ``input`` lists) and damaged ones built from
them."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_one
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.ingest.inspect_logs import InspectIngester, inspect_usage

HERE = Path(__file__).parent.parent / "fixtures" / "inspect_ai"
READ_EVAL, READ_JSON, EDIT_EVAL = HERE / "read.eval", HERE / "read.json", HERE / "edit.eval"


def _all(path: Path) -> list:
    return list(InspectIngester().parse(path))


def _view(t) -> list[tuple]:
    return [
        (
            s.turn,
            s.tool_name,
            s.tool_args,
            s.output,
            s.output_is_error,
            s.usage,
            s.masked_before,
            s.dropped_before,
        )
        for s in t.steps
    ]


def test_a_real_eval_archive_reads_each_sample_as_a_run():
    assert detect_format(READ_EVAL).name == "inspect"
    right, wrong = _all(READ_EVAL)
    assert (right.task_id, right.success, wrong.task_id, wrong.success) == (
        "read/mul3",
        True,
        "read/mul5",
        False,
    )
    assert right.model_raw == "mockllm/model" and right.task_text == "Which functions multiply by 3?"
    assert "helpful assistant" in right.system_prompt
    # a failed call reads as Inspect sends it; two calls of one turn share it and its usage
    assert [s.tool_name for s in right.steps] == ["read_file"] * 3 + [None]
    assert right.steps[0].output == "Error: no such file: src/missing.py" and right.steps[0].output_is_error
    assert right.steps[1].turn == right.steps[2].turn == 1 and right.steps[2].usage is None
    assert right.steps[1].output.startswith("def f0_0(x):") and right.steps[2].output.startswith(
        "def f1_0(x):"
    )
    # Inspect's input_tokens leaves the cached part out; the prompt is the whole of it
    usage = [
        (s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) for s in right.steps if s.usage
    ]
    assert usage == [(900, 0, 40), (1000, 880, 40), (1700, 980, 40)]
    assert (right.tokens_in, right.tokens_out, right.api_calls) == (3600, 120, 3)
    stamps = [s.timestamp for s in right.steps]
    assert None not in stamps and stamps == sorted(stamps)
    # every call's input is in the log: nothing was hidden, and that is known
    assert all(s.masked_before == [] for s in right.steps)
    extra = json.loads(right.extra)
    assert extra["scores"] == {"includes": "C"} and extra["status"] == "success"


def test_a_json_log_reads_as_the_same_runs():
    assert detect_format(READ_JSON).name == "inspect"
    assert [_view(t) for t in _all(READ_JSON)] == [_view(t) for t in _all(READ_EVAL)]


def test_outputs_inspect_cleared_are_hidden_from_the_calls_that_did_not_see_them():
    (t,) = _all(EDIT_EVAL)
    assert [s.masked_before for s in t.steps] == [[], [], [0], [0, 1], [0, 1, 2]]
    assert [s.dropped_before for s in t.steps] == [[]] * 5  # the calls stayed, their results went
    masks = [(e.kind, e.targets, e.detail) for s in t.steps for e in s.events]
    assert masks == [("mask", [j], "CompactionEdit: (Tool result removed)") for j in (0, 1, 2)]


def test_a_folder_of_logs_ingests_every_sample():
    res = ingest_paths([HERE], label=False)
    tasks = sorted(t.task_id for t in res.trajectories)
    reads = ["read/mul3"] * 3 + ["read/mul5"] * 3  # .eval, .json and the older .eval
    assert tasks == [
        "bridge/bridge",
        "edit/all3",
        "nested/nested",
        "nested/nested/checker",
        "nested/nested/reader",
        *reads,
        "scaffolds/elide",
        "scaffolds/image",
        "served/search",
        "team/handoff",
        "team/handoff/reader",
        "truncate/long",
    ]
    assert {t.source for t in res.trajectories} == {"inspect"}


def _rezip(src: Path, dst: Path, edit=None, compression=zipfile.ZIP_DEFLATED) -> Path:
    """``src``'s members written again (through ``edit(name, obj)`` when given) with ``compression``."""
    from dtoc_rl.ingest.inspect_logs import _member_json

    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", compression) as out:
        for info in z.infolist():
            name = info.filename
            obj = _member_json(z, src, info)
            if edit is not None:
                obj = edit(name, obj)
            out.writestr(name, obj if isinstance(obj, (str, bytes)) else json.dumps(obj))
    return dst


def test_deflate_archives_as_older_inspect_wrote_them(tmp_path):
    old = _rezip(READ_EVAL, tmp_path / "old.eval")
    assert [_view(t) for t in _all(old)] == [_view(t) for t in _all(READ_EVAL)]


def _old_style(name: str, obj):
    # before events_data: each model event holds its whole input, and messages may have no ids
    if not name.startswith("samples/"):
        return obj
    pool = obj.pop("events_data")["messages"]
    for e in obj["events"]:
        if e["event"] == "model":
            e["input"] = [pool[i] for a, b in e.pop("input_refs") for i in range(a, b)]
            e["output"]["choices"][0]["message"].pop("id", None)
    for m in obj["messages"]:
        m.pop("id", None)
    return obj


def test_logs_without_message_ids_or_input_refs_match_calls_in_order(tmp_path):
    for src in (READ_EVAL, EDIT_EVAL):
        old = _rezip(src, tmp_path / src.name, _old_style)
        assert [_view(t) for t in _all(old)] == [_view(t) for t in _all(src)]


def test_a_call_left_out_with_its_output_is_dropped(tmp_path):
    def trim(name, obj):  # the last call's input without the first turn's call and result
        if name.startswith("samples/"):
            pool = obj["events_data"]["messages"]
            last = [e for e in obj["events"] if e["event"] == "model"][-1]
            kept = [i for a, b in last["input_refs"] for i in range(a, b)]
            first_call = next(i for i in kept if pool[i].get("tool_calls"))
            gone = {first_call, first_call + 1}
            last["input_refs"] = [[i, i + 1] for i in kept if i not in gone]
        return obj

    (t,) = _all(_rezip(EDIT_EVAL, tmp_path / "trim.eval", trim))
    assert t.steps[-1].masked_before == [0, 1, 2] and t.steps[-1].dropped_before == [0]


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # Anthropic through Inspect: uncached input, cache reads and writes apart, total of all
        (
            {
                "input_tokens": 10,
                "input_tokens_cache_read": 900,
                "input_tokens_cache_write": 90,
                "output_tokens": 5,
                "total_tokens": 1005,
            },
            (1000, 900, 90, 5),
        ),
        # OpenAI in logs before Inspect left the cached part out of input_tokens
        (
            {"input_tokens": 1000, "input_tokens_cache_read": 800, "output_tokens": 5, "total_tokens": 1005},
            (1000, 800, 0, 5),
        ),
        # no total: the parts
        ({"input_tokens": 200, "input_tokens_cache_read": 800, "output_tokens": 5}, (1000, 800, 0, 5)),
    ],
)
def test_inspect_usage_counts_the_whole_prompt(raw, want):
    u = inspect_usage(raw)
    got = (
        u["prompt_tokens"],
        u["prompt_tokens_details"]["cached_tokens"],
        u["prompt_tokens_details"]["cache_write_tokens"],
        u["completion_tokens"],
    )
    assert got == want


def test_damaged_logs_name_what_is_wrong(tmp_path):
    cut = tmp_path / "cut.eval"
    cut.write_bytes(READ_EVAL.read_bytes()[:4000])
    with pytest.raises(IngestError, match=r"not a readable \.eval archive"):
        _all(cut)

    def bad_sample(name, obj):
        return "{not json" if name == "samples/mul5_epoch_1.json" else obj

    with pytest.raises(IngestError, match=r"samples/mul5_epoch_1.json: invalid JSON"):
        _all(_rezip(READ_EVAL, tmp_path / "bad.eval", bad_sample))

    header_only = json.loads(READ_JSON.read_text())
    del header_only["samples"]
    (tmp_path / "h.json").write_text(json.dumps(header_only, indent=2))
    with pytest.raises(IngestError, match="holds no samples"):
        _all(tmp_path / "h.json")

    role = json.loads(READ_JSON.read_text())
    role["samples"][1]["messages"][3]["role"] = "robot"
    (tmp_path / "r.json").write_text(json.dumps(role, indent=2))
    with pytest.raises(IngestError, match=r"1 of 2 samples failed: sample 1: messages\[3\] has role 'robot'"):
        _all(tmp_path / "r.json")


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="Python 3.14 reads zstd members itself")
def test_without_zstandard_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(IngestError, match="pip install zstandard"):
        read_one(READ_EVAL)


def test_an_archive_of_an_older_inspect_reads_as_the_same_runs():
    # inspect_ai 0.3.110: deflate members, each call's whole input in its event, no events_data
    old = HERE / "read_0.3.110.eval"
    with zipfile.ZipFile(old) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    then, now = _all(old), _all(READ_EVAL)
    assert [t.success for t in then] == [True, False]
    # that version named the missing file as None in its error: the one output that differs
    assert then[0].steps[0].output == "Error: File 'None' was not found." and then[0].steps[0].output_is_error
    then[0].steps[0].output = now[0].steps[0].output
    assert [_view(t) for t in then] == [_view(t) for t in now]


SCAFFOLDS, BRIDGE = HERE / "scaffolds.eval", HERE / "bridge.eval"


def _samples(path: Path) -> tuple[list, str | None]:
    """The runs a log yields and the error it ends with, if any."""
    got = []
    try:
        for t in InspectIngester().parse(path):
            got.append(t)
    except IngestError as e:
        return got, e.reason
    return got, None


def test_outputs_an_agent_edited_in_its_own_history_are_read_as_the_tool_gave_them():
    (elide, image), failed = _samples(SCAFFOLDS)
    # the on_continue hook left placeholders in the messages: the outputs are the tools' own
    assert all(s.output.startswith(f"def f{i}_0(x):") for i, s in enumerate(elide.steps[:3]))
    assert [s.masked_before for s in elide.steps] == [[], [], [0], [0, 1]]
    assert "[output elided]" in elide.steps[2].events[0].detail
    # an image Inspect moved out of the tool result was seen; the placeholder later was not
    assert image.steps[0].output == "screenshot s1:\n[image]"
    assert [s.masked_before for s in image.steps] == [[], [], [0]]
    assert image.steps[0].reasoning == "I should look at it."  # the summary, not the signature
    # a sample whose first call failed costs only itself
    assert failed.startswith("1 of 3 samples failed: sample fails_epoch_1: no model turn")


def test_a_bridged_agent_gets_every_calls_usage_and_its_outputs_as_first_sent():
    (t,), _ = _samples(BRIDGE)
    assert [s.usage.input_tokens for s in t.steps] == [900, 1200, 1500, 1900]
    assert all(s.output.startswith(f"def f{i}_0(x):") for i, s in enumerate(t.steps[:3]))
    assert [s.masked_before for s in t.steps] == [[], [], [0], [0, 1]]


def test_a_folder_with_a_failed_sample_keeps_the_others(tmp_path):
    res = ingest_paths([SCAFFOLDS], label=False)
    assert sorted(t.task_id for t in res.trajectories) == ["scaffolds/elide", "scaffolds/image"]
    assert any("fails_epoch_1" in s.reason for s in res.skipped)


def test_cached_answers_invalidated_samples_and_rewritten_members(tmp_path):
    def edit(name, obj):
        if name == "samples/mul3_epoch_1.json":
            for e in obj["events"]:
                if e["event"] == "model":
                    e["cache"] = "read"  # answered from Inspect's cache: no provider call
            obj["invalidation"] = {"reason": "scorer bug"}
        return obj

    log = _rezip(READ_EVAL, tmp_path / "x.eval", edit)
    with zipfile.ZipFile(log, "a") as z:  # Inspect replaces a sample by writing it again
        again = json.loads(z.read("samples/mul5_epoch_1.json"))
        again["scores"]["includes"]["value"] = "C"
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("samples/mul5_epoch_1.json", json.dumps(again))
    right, wrong = _all(log)
    assert all(s.usage is None for s in right.steps) and right.success is None
    assert json.loads(right.extra)["cache_answered_calls"] == 3 and json.loads(right.extra)["invalidated"]
    assert wrong.success is True  # the member written last


def test_a_member_pointing_past_the_archive_is_an_ingest_error(tmp_path):
    raw = bytearray(READ_EVAL.read_bytes())
    # the member's entry in the central directory: its name follows a 46-byte header
    entry = raw.index(b"samples/mul3_epoch_1.json", raw.index(b"PK\x01\x02")) - 46
    raw[entry + 42 : entry + 46] = (len(raw) - 10).to_bytes(4, "little")  # its local header offset
    (tmp_path / "d.eval").write_bytes(bytes(raw))
    got, failed = _samples(tmp_path / "d.eval")
    assert [t.task_id for t in got] == ["read/mul5"] and "mul3_epoch_1" in failed


def test_turns_truncation_dropped_from_the_messages_are_read_from_the_calls():
    (t,), _ = _samples(HERE / "truncate.eval")
    # eight calls: five reads, the answer that overflowed, a read and the answer; the messages kept
    # only the last five
    assert [s.tool_name for s in t.steps] == ["read_file"] * 5 + [None, "read_file", "submit"]
    assert [s.usage.input_tokens for s in t.steps] == [900, 1250, 1600, 1950, 2300, 128000, 900, 1300]
    assert t.steps[6].masked_before == t.steps[6].dropped_before == [0, 1]
    assert json.loads(t.extra)["rebuilt_from_calls"] is True


def test_a_sub_agent_handed_off_to_is_a_run_of_its_own():
    (parent, reader), _ = _samples(HERE / "team.eval")
    # the parent made three calls; the sub-agent's turns it was shown are text, not its calls
    assert [s.tool_name for s in parent.steps] == ["read_file", "transfer_to_reader", None]
    assert [s.usage.input_tokens for s in parent.steps] == [900, 1300, 2600]
    # the sub-agent: its own two calls, the parent's history it was sent as text before them
    assert [s.tool_name for s in reader.steps] == ["read_file", "submit"]
    assert reader.steps[0].output.startswith("def f2_0(x):")
    assert "Parent reads mod0." in reader.steps[0].user_text
    assert json.loads(reader.extra)["parent"] == parent.traj_id and reader.task_id == "team/handoff/reader"


def test_a_sub_agents_calls_are_counted_in_its_run_not_again_in_its_parents():
    (parent, reader), _ = _samples(HERE / "team.eval")
    calls = [s.usage for t in (parent, reader) for s in t.steps if s.usage]
    # the sample's usage holds all five calls; each run holds its own
    assert parent.tokens_in + reader.tokens_in == sum(u.input_tokens for u in calls)
    assert reader.tokens_in == sum(s.usage.input_tokens for s in reader.steps if s.usage)


def test_results_of_the_providers_own_tools_in_a_turn_are_outputs_compaction_clears():
    (t,), _ = _samples(HERE / "served.eval")
    # each turn: a web search the provider ran (its result in the turn), then a read_file call
    assert [s.tool_name for s in t.steps] == [
        "web_search",
        "read_file",
        "web_search",
        "read_file",
        "read_file",
        None,
    ]
    assert (
        t.steps[0].output.startswith("RESULTS: python multiply docs") and t.steps[0].turn == t.steps[1].turn
    )
    assert t.steps[0].assistant_text == "Searching python multiply."  # the search is a call, not text
    # CompactionEdit cleared the searches' results as it cleared the files'
    assert [s.masked_before for s in t.steps] == [[], [], [1], [1], [0, 1, 3], [0, 1, 2, 3]]


def test_a_sub_agent_that_calls_more_than_its_parent_does_not_take_over_the_run(tmp_path):
    def busier(name, obj):  # two more answers of the sub-agent, given back to the parent as text
        if name.startswith("samples/"):
            events = obj["events"]
            sub = [i for i, e in enumerate(events) if e["event"] == "model"][3]  # the sub-agent's second call
            for n in (2, 1):
                e = json.loads(json.dumps(events[sub]))
                message = e["output"]["choices"][0]["message"]
                message.update(id=f"EXTRA{n}", tool_calls=None, content=f"more reading {n}")
                events.insert(sub + 1, e)
                obj["messages"].insert(
                    7, {"role": "assistant", "id": f"EXTRA{n}", "content": f"[reader] more {n}"}
                )
        return obj

    parent, reader = _all(_rezip(HERE / "team.eval", tmp_path / "busy.eval", busier))
    assert [s.tool_name for s in parent.steps] == ["read_file", "transfer_to_reader", None]
    assert [s.tool_name for s in reader.steps] == ["read_file", "submit", None, None]


def test_a_tool_result_of_one_content_part_reads_as_its_text(tmp_path):
    def one_part(name, obj):  # Inspect's ToolResult may be a bare ContentText
        if name.startswith("samples/"):
            for e in obj["events"]:
                if e["event"] == "tool" and isinstance(e.get("result"), str) and not e.get("error"):
                    e["result"] = {"type": "text", "text": e["result"]}
        return obj

    before = _all(READ_EVAL)
    after = _all(_rezip(READ_EVAL, tmp_path / "one.eval", one_part))
    assert [_view(t) for t in after] == [_view(t) for t in before]


@pytest.mark.parametrize(
    ("part", "kind", "path", "reads"),
    [
        # an id the reader matches by, or a range: the sample still reads, matched another way
        ("events", "model", ("output", "choices", 0, "message", "id"), True),
        ("events", "model", ("input_refs",), True),
        ("events", "span_begin", ("id",), True),
        ("messages", "assistant", ("id",), True),
        ("events_data", None, ("messages", 2, "tool_calls"), True),
        # a reply whose call id is no id answers the oldest open call, as any reply without one
        ("messages", "tool", ("tool_call_id",), True),
    ],
)
def test_ids_and_lists_of_the_wrong_type_cost_at_most_their_sample(tmp_path, part, kind, path, reads):
    def odd(name, obj):
        if not name.startswith("samples/"):
            return obj
        if part == "events_data":
            target = obj["events_data"]
        else:
            target = next(
                x for x in obj[part] if (x.get("event") if part == "events" else x.get("role")) == kind
            )
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = [["not", "an", "id"]] if path[-1] != "tool_calls" else 7
        return obj

    log = _rezip(HERE / "team.eval", tmp_path / "odd.eval", odd)
    if reads:
        parent = _all(log)[0]
        assert [s.tool_name for s in parent.steps][:2] == ["read_file", "transfer_to_reader"]
    else:
        with pytest.raises(IngestError, match="1 of 1 samples failed"):
            _all(log)


def test_a_sub_agent_given_a_model_of_its_own_is_a_run_of_that_model(tmp_path):
    def own_model(name, obj):  # the handoff sub-agent's two calls to another model (react(model=...))
        if name.startswith("samples/"):
            calls = [e for e in obj["events"] if e["event"] == "model"]
            for e in calls[2:4]:
                e["model"] = "mockllm/reader"
        return obj

    parent, reader = _all(_rezip(HERE / "team.eval", tmp_path / "own.eval", own_model))
    assert (parent.model_raw, reader.model_raw) == ("mockllm/model", "mockllm/reader")
    assert {s.model for s in reader.steps if s.model} == {"mockllm/reader"}
    assert {s.model for s in parent.steps if s.model} == {"mockllm/model"}


def test_a_model_graded_scorers_calls_are_not_counted_as_the_agents(tmp_path):
    def graded(name, obj):  # a scorer that asks a model (model_graded_fact, say): in the sample's totals
        if name.startswith("samples/"):
            obj["events"] += [
                {"event": "span_begin", "id": "scorer-span", "type": "scorers", "name": "scorers"},
                {"event": "model", "span_id": "scorer-span", "model": "mockllm/model", "output": {
                    "usage": {"input_tokens": 500, "output_tokens": 20, "total_tokens": 520}}},
            ]  # fmt: skip
            usage = next(iter(obj["model_usage"].values()))
            for k, v in (("input_tokens", 500), ("output_tokens", 20), ("total_tokens", 520)):
                usage[k] = (usage.get(k) or 0) + v
        return obj

    plain = {t.traj_id: t for t in _all(READ_EVAL)}
    for t in _all(_rezip(READ_EVAL, tmp_path / "graded.eval", graded)):
        assert (t.tokens_in, t.tokens_out) == (plain[t.traj_id].tokens_in, plain[t.traj_id].tokens_out)
        assert json.loads(t.extra)["scorer_calls"] == 1


def test_a_sub_agent_of_a_sub_agent_and_a_model_graded_score_from_a_real_log():
    """inspect_ai 0.3.285 (make_fixtures.py's ``nested``): the parent hands off to a reader, which hands
    off to a checker; model_graded_qa grades the answer with a call of its own."""
    parent, reader, checker = _all(HERE / "nested.eval")
    assert [s.tool_name for s in parent.steps] == ["read_file", "transfer_to_reader", None]
    assert [s.tool_name for s in reader.steps] == ["read_file", "transfer_to_checker", "submit"]
    assert [s.tool_name for s in checker.steps] == ["read_file", "submit"]
    assert [json.loads(t.extra).get("agent") for t in (reader, checker)] == ["reader", "checker"]
    assert "f3_0" in checker.steps[0].output and "f2_0" in reader.steps[0].output
    # each run's own prompts, as the scripted model answered them; the grader's 700 in none of them
    assert (parent.tokens_in, reader.tokens_in, checker.tokens_in) == (
        900 + 1300 + 3400,
        1500 + 2100 + 2900,
        1900 + 2500,
    )
    assert json.loads(parent.extra)["scorer_calls"] == 1 and parent.success is True
