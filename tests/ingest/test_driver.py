"""The ingest driver on a batch of bad inputs: every skip has a reason, the rest continues."""

import json
import shutil
from pathlib import Path

import pytest

from dtoc_rl.cli import main
from dtoc_rl.data.dataset import DatasetError, load_trajectories, write_dataset
from dtoc_rl.ingest.driver import ingest_paths


@pytest.fixture
def batch(tmp_path, data_dir):
    d = tmp_path / "logs"
    d.mkdir()
    good = sorted((data_dir / "raw/mini-swe-agent_gemini-3-pro_swebench-verified/trajs").glob("*.traj.json"))[
        :2
    ]
    for g in good:
        shutil.copy(g, d / g.name)
    text = good[0].read_text()
    (d / "truncated.traj.json").write_text(text[: len(text) // 2])
    (d / "badutf8.traj.json").write_bytes(text.encode()[:100] + b"\xff\xfe" + text.encode()[100:])
    data = json.loads(text)
    data["messages"] = [m for m in data["messages"] if m["role"] != "assistant"]
    (d / "empty.traj.json").write_text(json.dumps(data))
    wrong = json.loads(text)
    wrong["messages"][3]["content"] = 12345
    (d / "wrongtypes.traj.json").write_text(json.dumps(wrong))
    (d / "mystery.json").write_text('{"what": "is this"}')
    (d / "blank.jsonl").write_text("\n  \n")
    (d / "permessage.jsonl").write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "ok"}\n'
    )
    huge = json.loads(text)
    huge["instance_id"] = "huge__output-1"
    huge["messages"][3]["content"] = "<returncode>0</returncode><output>" + "y" * 30_000_000 + "</output>"
    (d / "huge.traj.json").write_text(json.dumps(huge))
    return d


def test_bad_inputs_are_skipped_with_reasons_and_the_rest_continues(batch):
    res = ingest_paths([batch], progress=False)
    reasons = {s.path.rsplit("/", 1)[-1].split("#")[0]: s.reason for s in res.skipped}
    assert "invalid JSON" in reasons["truncated.traj.json"]
    assert "invalid UTF-8 at byte 100" in reasons["badutf8.traj.json"]
    assert "empty trajectory" in reasons["empty.traj.json"]
    assert "12345" in reasons["wrongtypes.traj.json"] or "int" in reasons["wrongtypes.traj.json"]
    assert "unknown format" in reasons["mystery.json"] and "--format NAME" in reasons["mystery.json"]
    assert reasons["blank.jsonl"] == "empty file: nothing to read"
    assert "permessage.jsonl" not in reasons  # a chat written a message per line: one run
    ids = {t.traj_id for t in res.trajectories}
    assert len(ids) == 4  # the two good files, the message-per-line chat and the huge one
    huge = next(t for t in res.trajectories if any(len(s.output or "") > 500_000 for s in t.steps))
    assert max(len(s.output or "") for s in huge.steps) < 1_100_000  # capped, marked, not dropped
    assert any("characters cut at ingest" in (s.output or "") for s in huge.steps)


def test_cli_exit_codes_strict_and_json(batch, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["ingest", str(batch), "-o", str(out), "--json", "--workers", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["total"]["trajectories"] == 4 and len(summary["skipped"]) == 6
    assert (out / "COMPLETE").is_file()
    assert main(["ingest", str(batch), "-o", str(out), "--quiet"]) == 2  # exists, no --overwrite
    assert main(["ingest", str(batch), "-o", str(tmp_path / "s"), "--strict", "--quiet"]) == 1
    assert not (tmp_path / "s").exists()
    empty = tmp_path / "nothing"
    empty.mkdir()
    (empty / "x.json").write_text("{}")
    assert main(["ingest", str(empty), "-o", str(tmp_path / "n"), "--quiet"]) == 1
    assert main(["ingest", str(tmp_path / "missing"), "-o", str(tmp_path / "m"), "--quiet"]) == 2


def test_overwrite_replaces_only_a_dataset_never_the_logs_or_other_files(data_dir, tmp_path, capsys):
    logs = tmp_path / "work" / "logs"
    logs.mkdir(parents=True)
    src = next((data_dir / "raw").rglob("*.traj.json"))
    (logs / src.name).write_bytes(src.read_bytes())
    (tmp_path / "work" / "notes.txt").write_text("precious")
    (tmp_path / "afile").write_text("x")
    ds = tmp_path / "ds"
    assert main(["ingest", str(logs), "-o", str(ds), "--quiet", "--workers", "1"]) == 0
    assert main(["ingest", str(logs), "-o", str(ds), "--quiet", "--workers", "1", "--overwrite"]) == 0
    capsys.readouterr()
    refused = {
        str(logs): "is being ingested",  # the logs themselves
        str(tmp_path / "work"): "is being ingested",  # a folder holding them
        str(tmp_path / "afile"): "is a file",
    }
    for out, why in refused.items():
        assert main(["ingest", str(logs), "-o", out, "--quiet", "--workers", "1", "--overwrite"]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.txt").write_text("mine")
    assert main(["ingest", str(logs), "-o", str(other), "--quiet", "--workers", "1", "--overwrite"]) == 2
    assert "holds thesis.txt: not a dataset folder to replace" in capsys.readouterr().err
    assert (logs / src.name).is_file() and (tmp_path / "work" / "notes.txt").read_text() == "precious"
    assert (other / "thesis.txt").read_text() == "mine" and (tmp_path / "afile").read_text() == "x"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # nothing half-written left


def test_interrupted_write_leaves_nothing_that_looks_complete(tmp_path, data_dir):
    trajs = load_trajectories(data_dir / "sample")[:3]

    def exploding():
        yield from trajs
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_dataset(exploding(), tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    assert not list(tmp_path.iterdir())  # the temporary folder is gone too
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(next((data_dir / "sample").glob("*.parquet")), partial)
    with pytest.raises(DatasetError, match="not completely written"):
        load_trajectories(partial)


def test_stats_prints_summary_and_writes_png(tmp_path, data_dir, capsys):
    png = tmp_path / "s.png"
    assert main(["stats", str(data_dir / "sample"), "--plot", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"]["trajectories"] == 34 and png.stat().st_size > 10_000
    assert main(["stats", str(tmp_path / "none")]) == 2


def test_read_first_names_what_was_wrong(tmp_path, data_dir):
    from dtoc_rl.ingest import IngestError, read_first

    log = next((data_dir / "raw" / "mini-swe-agent_gemini-3-pro_swebench-verified" / "trajs").glob("*.json"))
    ing, traj = read_first(log)
    assert ing.name == "mini-swe-agent" and traj.n_steps > 0
    junk = tmp_path / "notes.json"
    junk.write_text("{}")
    with pytest.raises(IngestError, match="not a recognised log format"):
        read_first(junk)


def test_a_log_that_opens_with_a_byte_order_mark_reads_as_without_it(data_dir, tmp_path):
    # some Windows editors and exporters write UTF-8 with a BOM; it is no part of the log
    raw = data_dir / "raw"
    logs = [
        next(raw.glob("mini-swe-agent*/trajs/*.traj.json")),
        next(raw.glob("tau-bench*/*.json")),
        next(raw.glob("openhands-sdk*/output*.jsonl")),
    ]
    for log in logs:
        plain, marked = tmp_path / "plain" / "logs" / log.name, tmp_path / "bom" / "logs" / log.name
        for p, prefix in ((plain, b""), (marked, b"\xef\xbb\xbf")):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(prefix + log.read_bytes())
        a, b = ingest_paths([plain], progress=False), ingest_paths([marked], progress=False)
        assert not b.skipped, b.skipped
        assert [(t.traj_id, len(t.steps), t.steps[0].output) for t in b.trajectories] == [
            (t.traj_id, len(t.steps), t.steps[0].output) for t in a.trajectories
        ]


def test_a_reader_process_that_dies_costs_its_file_only(data_dir, tmp_path, monkeypatch):
    # what a pool does when the kernel kills one of its processes (a huge log, out of memory): every
    # unfinished job fails; the dead one's file is skipped and named, the rest are read
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from dtoc_rl.ingest import driver

    src = sorted((data_dir / "raw").glob("mini-swe-agent*/trajs/*.traj.json"))[:6]
    logs = tmp_path / "logs"
    logs.mkdir()
    for i, f in enumerate(src):
        (logs / (f"a-poison-{f.name}" if i == 2 else f.name)).write_bytes(f.read_bytes())  # read first

    read: list[str] = []

    class DyingPool:  # runs jobs in this process; a poisoned one breaks the pool as a killed worker would
        def __init__(self, workers):
            self.broken, self.after = False, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            fut = Future()
            if not args:  # the check that a reader process can start at all: it can
                fut.set_result(fn())
                return fut
            unit = args[0]
            self.broken |= "poison" in unit.name
            self.after += self.broken
            # past the poison, every other job had finished before the pool broke (workers run ahead)
            if self.broken and self.after % 2 == 1:
                fut.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            else:
                read.append(unit.name)
                fut.set_result(fn(*args))
            return fut

    monkeypatch.setattr(driver, "_worker_pool", DyingPool)
    res = ingest_paths([logs], workers=2, progress=False)
    assert [s.reason for s in res.skipped] == [driver.DIED] and "poison" in res.skipped[0].path
    assert len(read) == len(set(read)) == len(src) - 1  # a job that had finished is not read again
    whole = ingest_paths([logs], workers=1, progress=False)
    kept = [t.traj_id for t in whole.trajectories if "poison" not in t.source_path]
    assert [t.traj_id for t in res.trajectories] == kept and len(kept) == len(src) - 1


def test_runs_that_name_no_model_are_named_by_model_and_said_otherwise(tmp_path, capsys):
    call = {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = [{"role": "user", "content": "fix"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "a", "content": "x.py\n" * 50},
            {"role": "assistant", "content": "ok"}]  # fmt: skip
    log = tmp_path / "runs.jsonl"
    log.write_text(
        json.dumps({"messages": msgs}) + "\n" + json.dumps({"messages": msgs, "model": "gpt-4o-mini"}) + "\n"
    )
    assert main(["ingest", str(log), "-o", str(tmp_path / "a"), "--quiet", "--workers", "1"]) == 0
    assert "1 of 2 trajectories name no model" in capsys.readouterr().err
    out = tmp_path / "b"
    assert (
        main(
            ["ingest", str(log), "-o", str(out), "--quiet", "--workers", "1", "--model", "claude-sonnet-4-5"]
        )
        == 0
    )
    assert "name no model" not in capsys.readouterr().err
    from dtoc_rl.data.dataset import load_trajectories

    got = sorted((t.model_raw, t.model_family) for t in load_trajectories(out))
    assert got == [
        ("claude-sonnet-4-5", "claude-sonnet"),
        ("gpt-4o-mini", "gpt-4o-mini"),
    ]  # a named one keeps its own
    assert "--model claude-sonnet-4-5" in (out / "README.md").read_text()  # how to remake it
    for blank in ("   ", "x\ny"):
        assert main(["ingest", str(log), "-o", str(tmp_path / "c"), "--quiet", "--model", blank]) == 2
        assert "--model must be a model's name" in capsys.readouterr().err


def test_a_model_named_at_ingest_counts_the_unlogged_prompt_with_its_tokenizer(tmp_path):
    from dtoc_rl.core.tokens import CharEstimator, estimator_for_model

    system = "hello world " * 200  # o200k: 401 tokens, ceil(len/4): 600
    call = {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "fix"},
            {"role": "assistant", "content": None, "tool_calls": [call],
             "usage": {"prompt_tokens": 3000, "completion_tokens": 5}},
            {"role": "tool", "tool_call_id": "a", "content": "x.py\n" * 50},
            {"role": "assistant", "content": "ok"}]  # fmt: skip
    log = tmp_path / "runs.jsonl"
    log.write_text(json.dumps({"messages": msgs}) + "\n")
    plain = ingest_paths([log], workers=1, progress=False, label=False).trajectories[0]
    named = ingest_paths([log], workers=1, progress=False, label=False, model="gpt-4o").trajectories[0]
    assert named.model_raw == "gpt-4o"
    gap = CharEstimator().count(system) - estimator_for_model("gpt-4o").count(system)
    assert gap > 100 and named.unlogged_prompt_tokens - plain.unlogged_prompt_tokens == gap


def test_reader_processes_that_cannot_start_cost_nothing(data_dir, tmp_path, monkeypatch, capsys):
    # a sandbox where no child process starts: every job of every pool fails as if its reader had
    # died, yet no file killed anything, so the batch is read in this process instead of skipped
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from dtoc_rl.ingest import driver

    logs = tmp_path / "logs"
    logs.mkdir()
    for f in sorted((data_dir / "raw").glob("mini-swe-agent*/trajs/*.traj.json"))[:4]:
        (logs / f.name).write_bytes(f.read_bytes())

    class DeadPool:
        def __init__(self, workers):
            self.calls = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            self.calls += 1
            if how == "refused" and self.calls > 1:  # the process is never made (3.11 forkserver)
                raise BlockingIOError("Resource temporarily unavailable")
            fut = Future()
            fut.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            return fut

    monkeypatch.setattr(driver, "_worker_pool", DeadPool)
    whole = ingest_paths([logs], workers=1, progress=False)
    for how in ("die at once", "refused"):
        with pytest.warns(driver.IngestWarning, match="cannot start"):
            res = ingest_paths([logs], workers=2, progress=False)
        assert not res.skipped and len(res.trajectories) == 4, how
        assert [t.traj_id for t in res.trajectories] == [t.traj_id for t in whole.trajectories]
    # the command's summary says so too (--json and the dataset card), not only stderr
    capsys.readouterr()
    assert main(["ingest", str(logs), "-o", str(tmp_path / "ds"), "--workers", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert any("cannot start" in w for w in summary["warnings"]) and summary["total"]["trajectories"] == 4
    # in the table mode it is shown once, as it happens, and not again after the table
    assert (
        main(["ingest", str(logs), "-o", str(tmp_path / "ds"), "--workers", "2", "--quiet", "--overwrite"])
        == 0
    )
    assert capsys.readouterr().err.count("cannot start") == 1


def test_naming_a_model_records_the_tokenizer_that_counted_the_unlogged_prompt():
    from dtoc_rl.data.schema import Trajectory
    from dtoc_rl.ingest.common import name_model

    t = Trajectory(traj_id="r", source="repolaunch", model_raw="", model_family="other", task_id="t")
    t.extra = json.dumps({"unlogged_prompt_estimator": "CharEstimator()", "kept": 1})
    name_model(t, "gpt-4o")
    extra = json.loads(t.extra)
    assert extra["kept"] == 1 and "CharEstimator" not in extra["unlogged_prompt_estimator"]
    assert (t.model_raw, t.model_family) == ("gpt-4o", "gpt-4o")


def test_sigterm_stops_a_command_as_ctrl_c_does_and_leaves_no_partial_output(tmp_path, data_dir, monkeypatch):
    """``timeout`` and schedulers end a job with SIGTERM: the dataset being written is removed, as on
    Ctrl-C, not left as a hidden half-written folder."""
    import os
    import signal

    import pyarrow.parquet as pq

    from dtoc_rl.cli import main as cli_main
    from dtoc_rl.cli.common import INTERRUPTED

    def killed(*a, **kw):  # the job is ended while it writes the dataset
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", killed)
    out = tmp_path / "out" / "ds"
    before = signal.getsignal(signal.SIGTERM)
    code = cli_main(
        [
            "ingest",
            str(data_dir / "raw" / "tau-bench_gpt-4o_airline"),
            "-o",
            str(out),
            "--quiet",
            "--workers",
            "1",
        ]
    )
    assert code == INTERRUPTED and not out.exists() and list(out.parent.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before  # put back once the command ends


def test_an_interrupt_cancels_the_files_not_yet_read_by_the_workers(tmp_path, data_dir, monkeypatch):
    """Ctrl-C or SIGTERM during ``--workers N`` stops after the files being read now: the rest of the
    batch is cancelled, not read and thrown away."""
    import shutil

    from dtoc_rl.ingest import driver

    calls = []
    real = driver._worker_pool

    def pool(workers):
        p = real(workers)
        shutdown = p.shutdown

        def spy(wait=True, *, cancel_futures=False):
            calls.append(cancel_futures)
            return shutdown(wait=wait, cancel_futures=cancel_futures)

        p.shutdown = spy
        return p

    monkeypatch.setattr(driver, "_worker_pool", pool)
    src = sorted((data_dir / "raw" / "tau-bench_gpt-4o_airline").rglob("*.json"))[0]
    units = []
    for i in range(6):
        units.append(tmp_path / f"{i}.json")
        shutil.copy(src, units[-1])

    def interrupted(out, unit):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        driver._in_workers(units, False, None, 2, interrupted)
    assert calls and calls[0] is True  # the pending jobs were cancelled before the pool was left


def test_a_dataset_another_process_wrote_meanwhile_is_not_replaced(tmp_path, data_dir):
    from dtoc_rl.data.dataset import DatasetError, load_trajectories, write_dataset

    trajs = load_trajectories(data_dir / "sample")
    out = tmp_path / "ds"

    def meanwhile():  # another ingest finishes its dataset at `out` while this one is writing
        write_dataset(trajs[:1], out)
        yield from trajs

    with pytest.raises(DatasetError, match="was written by another process while this one ran"):
        write_dataset(meanwhile(), out)
    assert len(load_trajectories(out)) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def _mini_run(folder, command: str):
    msgs = [
        {"role": "user", "content": "<pr_description>fix a.py</pr_description>"},
        {"role": "assistant", "content": f"THOUGHT: look\n\n```bash\n{command}\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nx = 1\n</output>"},
    ]
    folder.mkdir(parents=True)
    (folder / "i1.traj.json").write_text(
        json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": msgs})
    )


def test_two_runs_under_one_id_are_both_kept_and_a_copy_is_counted_once(tmp_path):
    # mini-swe-agent names a run by its instance alone: a rerun in another folder has the same id
    _mini_run(tmp_path / "run" / "i1", "cat a.py")
    _mini_run(tmp_path / "rerun" / "i1", "ls")
    _mini_run(tmp_path / "copy" / "i1", "cat a.py")
    res = ingest_paths([tmp_path], label=False, progress=False)
    ids = sorted(t.traj_id for t in res.trajectories)
    assert len(ids) == 2 and len(set(ids)) == 2
    assert sorted(t.steps[0].tool_args for t in res.trajectories) == ["cat a.py", "ls"]
    assert {t.task_id for t in res.trajectories} == {"i1"}  # still one task: a split keeps them together
    (skip,) = res.skipped
    assert "identical" in skip.reason


def test_a_folder_that_is_no_dataset_is_refused_as_such_not_sent_to_overwrite(tmp_path, capsys):
    _mini_run(tmp_path / "logs" / "i1", "ls")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["ingest", str(tmp_path / "logs"), "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a dataset folder to replace" in err and "--overwrite" not in err
    assert (out / "notes.txt").read_text() == "keep me"


def test_nothing_ingested_says_why_when_nothing_was_skipped(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "chat.md").write_text("# a chat history in markdown")
    assert main(["ingest", str(notes), "-o", str(tmp_path / "out"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "nothing was ingested: the 1 file(s) found are of kinds read as no log" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden.json").write_text("{}")
    assert main(["ingest", str(empty), "-o", str(tmp_path / "out2"), "--quiet"]) == 1
    assert "no files found there (hidden files" in capsys.readouterr().err


def test_a_different_run_does_not_displace_one_from_a_partly_unreadable_file(tmp_path):
    def run(command):
        fn = {"name": "bash", "arguments": json.dumps({"command": command})}
        call = {"id": "c1", "type": "function", "function": fn}
        msgs = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
        ]
        return json.dumps({"id": "x", "messages": msgs})

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "a" / "runs.jsonl").write_text(run("cat a.py") + "\n{broken\n")
    (tmp_path / "b" / "runs.jsonl").write_text(run("ls") + "\n")
    (tmp_path / "c" / "runs.jsonl").write_text(run("ls") + "\n")  # a copy of b's
    res = ingest_paths([tmp_path], label=False, progress=False)
    args = sorted(json.loads(t.steps[0].tool_args)["command"] for t in res.trajectories)
    assert args == ["cat a.py", "ls"]  # both runs kept, b's copy in c counted once
    assert len({t.traj_id for t in res.trajectories}) == 2
    reasons = [s.reason for s in res.skipped]
    assert any("identical in" in r for r in reasons) and not any("intact copy" in r for r in reasons)


def test_a_log_saved_as_log_or_txt_is_named_as_passed_over_and_read_when_named(tmp_path, capsys):
    from dtoc_rl.data.paths import bundled_raw

    src = next(
        (bundled_raw() / "mini-swe-agent_gemini-3-pro_swebench-verified" / "trajs").glob("*.traj.json")
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("run.log", "run.txt", "README.md"):
        (logs / name).write_bytes(src.read_bytes())
    assert main(["ingest", str(logs), "-o", str(tmp_path / "a"), "--quiet", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert sorted(Path(p).name for p in summary["auxiliary_paths"]) == ["README.md", "run.log", "run.txt"]
    assert main(["ingest", str(logs), "-o", str(tmp_path / "b")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"passed over by name as notes or metadata: {logs / 'run.log'}, {logs / 'run.txt'};" in out
    argv = [
        "ingest",
        str(logs / "run.log"),
        "-o",
        str(tmp_path / "c"),
        "--quiet",
        "--format",
        "mini-swe-agent",
    ]
    assert main(argv) == 0  # named itself, with its format: read


def test_a_model_name_dtoc_rl_does_not_know_is_said_at_ingest(tmp_path, capsys):
    from dtoc_rl.data.paths import bundled_raw

    trajs = bundled_raw() / "mini-swe-agent_gemini-3-pro_swebench-verified" / "trajs"
    src = next(trajs.glob("*.traj.json"))
    for model, warned in (("foo-bar-9", True), ("claude-sonnet-4-5", False)):
        out = tmp_path / model
        assert main(["ingest", str(src), "-o", str(out), "--quiet", "--model", model]) == 0
        err = capsys.readouterr().err
        assert (f"--model '{model}' is not a model dtoc-rl knows" in err) is warned


def _chat_runs(tmp_path: Path) -> Path:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}

    def run(rid: str, task: str) -> dict:
        return {"id": rid, "messages": [
            {"role": "user", "content": task}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": f"a.py {rid}"}]}  # fmt: skip

    f = tmp_path / "sessions.jsonl"
    rows = [run("s1", "Fix the failing test"), run("s2", "Fix the  failing\ntest"), run("s3", "Add a flag")]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return f


def test_runs_that_open_with_one_request_are_one_task_when_asked(tmp_path, capsys):
    from dtoc_rl.ingest.common import text_task_id

    f = _chat_runs(tmp_path)
    by_log = {t.traj_id[-2:]: t.task_id for t in ingest_paths([f], progress=False).trajectories}
    assert by_log == {"s1": "s1", "s2": "s2", "s3": "s3"}  # the log's ids: three tasks
    by_prompt = {
        t.traj_id[-2:]: t.task_id for t in ingest_paths([f], progress=False, task_from="prompt").trajectories
    }
    assert (
        by_prompt["s1"]
        == by_prompt["s2"]
        == text_task_id("Fix the failing test", "prompt-")
        != by_prompt["s3"]
    )
    runs = ingest_paths([f], progress=False, task_from="prompt").trajectories
    assert [json.loads(t.extra)["log_task_id"] for t in runs] == ["s1", "s2", "s3"]  # the log's own, kept
    assert main(["ingest", str(f), "-o", str(tmp_path / "d"), "--task-id", "prompt", "--quiet"]) == 0
    assert len({t.task_id for t in load_trajectories(tmp_path / "d")}) == 2
    assert "--task-id prompt" in (tmp_path / "d" / "README.md").read_text()  # the card says how to remake it
    with pytest.raises(ValueError, match="task_from must be"):
        ingest_paths([f], progress=False, task_from="session")


def test_an_interrupt_ends_the_reader_processes_at_once():
    """A big log still being read would hold an interrupted ingest's exit for as long as it takes (and a
    second Ctrl-C then broke into the pool's wait with a traceback): the readers are ended."""
    import time

    from dtoc_rl.ingest import driver

    pool = driver._worker_pool(1)
    job = pool.submit(time.sleep, 60)
    while not job.running():
        time.sleep(0.01)
    (proc,) = pool._processes.values()
    t0 = time.perf_counter()
    driver._stop_now(pool)
    pool.shutdown(wait=True)
    proc.join(10)
    assert not proc.is_alive() and time.perf_counter() - t0 < 10


def test_a_run_read_from_a_log_with_unreadable_lines_is_said(tmp_path, repo_root, capsys):
    """A pi session cut off mid-line keeps what could be read, and the command says so: the run is
    not whole, though no file was skipped."""
    from dtoc_rl.cli import main

    text = (repo_root / "tests" / "fixtures" / "pi" / "session.jsonl").read_bytes()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "whole.jsonl").write_bytes(text)
    assert main(["ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "a"), "--json", "--quiet"]) == 0
    assert "warnings" not in json.loads(capsys.readouterr().out)
    (tmp_path / "logs" / "whole.jsonl").write_bytes(text[: len(text) * 2 // 3])
    assert main(["ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "b"), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["skipped"] == [] and summary["total"]["trajectories"] == 1
    (said,) = [w for w in summary["warnings"] if "lines that could not be read" in w]
    assert said.startswith("1 of 1 trajectories")


def test_many_runs_of_one_id_are_not_compared_step_by_step_with_each_other(tmp_path, monkeypatch):
    from dtoc_rl.data.schema import Step

    def run(folder, last):  # thirty calls every run shares, then one of its own
        msgs = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "<pr_description>x</pr_description>"},
        ]
        for c in [f"cat f{i}.py" for i in range(30)] + [last]:
            msgs += [
                {"role": "assistant", "content": f"THOUGHT: go\n\n```bash\n{c}\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\nok\n</output>"},
            ]
        folder.mkdir(parents=True)
        (folder / "i1.traj.json").write_text(
            json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": msgs})
        )

    for k in range(40):
        run(tmp_path / f"r{k:02d}" / "i1", f"ls d{k}")
    run(tmp_path / "zcopy" / "i1", "ls d7")  # a copy of one of them
    compared = []
    real = Step.__eq__
    monkeypatch.setattr(Step, "__eq__", lambda a, b: compared.append(1) or real(a, b))
    res = ingest_paths([tmp_path], label=False, progress=False)
    assert len(res.trajectories) == 40 and len({t.traj_id for t in res.trajectories}) == 40
    assert [s.reason for s in res.skipped] == [
        "duplicate trajectory id (identical in " + str(tmp_path / "r07" / "i1" / "i1.traj.json") + ")"
    ]
    # the copy is confirmed step by step against the run it copies, no other pair is compared
    assert len(compared) <= 2 * 31


def test_a_file_named_twice_is_read_once(data_dir):
    """A folder and a file in it (``dtoc-rl ingest DIR DIR/sub/log.json``) name the file twice: it is
    read once, in a pool as in one process."""
    raw = data_dir / "raw"
    once = ingest_paths([raw], progress=False, workers=1)
    for workers in (1, 2):
        res = ingest_paths([raw, raw / "tau-bench_gpt-4o_airline"], progress=False, workers=workers)
        assert [t.traj_id for t in res.trajectories] == [t.traj_id for t in once.trajectories]
        assert res.units == once.units and res.skipped == once.skipped
