"""Runs past ingest's memory budget wait on disk: the dataset is the one an ingest holding every run
in memory writes, and the passes over several logs' runs still see theirs."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from dtoc_rl.data.dataset import load_trajectories, read_summary
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.driver import ingest_paths
from dtoc_rl.ingest.run_store import RunStore, text_bytes
from tests.crafted_trajs import bash
from tests.ingest.test_continued import _in_parts

ROOT = Path(__file__).resolve().parents[2]


def _runs(n: int) -> list[Trajectory]:
    return [
        Trajectory(
            f"r{k}",
            "openai-chat",
            "gpt-4o",
            "gpt-4o",
            f"t{k}",
            task_text="look",
            steps=[bash(i, f"cat {i}.py", f"output {k} " * 50) for i in range(3)],
        )
        for k in range(n)
    ]


def test_runs_past_the_budget_are_on_disk_and_read_back_equal_in_order():
    runs = _runs(6)
    size = text_bytes(runs[0])
    assert size > 0
    store = RunStore(budget=2 * size + size // 2)  # room for two
    for t in runs:
        store.append(t)
    assert [store.is_live(i) for i in range(6)] == [True, True, False, False, False, False]
    assert store.spilled == 4 and len(store) == 6
    assert [dataclasses.asdict(t) for t in store] == [dataclasses.asdict(t) for t in runs]
    assert store[0] is runs[0] and store[2] is not runs[2]  # a run from disk is a copy
    assert [t.traj_id for t in store[1:4]] == ["r1", "r2", "r3"]
    copied = copy.deepcopy(store)  # a list of every run, none of them the store's
    assert [dataclasses.asdict(t) for t in copied] == [dataclasses.asdict(t) for t in runs]
    assert copied[0] is not runs[0]
    # replacing a run on disk, and forgetting runs, keep the others' order
    store[2] = runs[0]
    store.drop([0, 3])
    assert [t.traj_id for t in store] == ["r1", "r0", "r4", "r5"]
    store.close()
    with pytest.raises(OSError):
        store[1]


def test_no_budget_keeps_every_run_and_a_negative_one_is_refused():
    store = RunStore(budget=None)
    for t in _runs(3):
        store.append(t)
    assert store.spilled == 0
    with pytest.raises(ValueError, match="budget must be >= 0"):
        RunStore(budget=-1)
    with pytest.raises(ValueError, match="budget must be >= 0"):
        ingest_paths([ROOT / "data" / "raw"], progress=False, spill_after=-5)


def test_a_temporary_file_that_cannot_be_made_keeps_the_runs_in_memory(monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    said: list[str] = []
    store = RunStore(budget=0, warn=said.append)
    runs = _runs(3)
    for t in runs:
        store.append(t)
    assert store.spilled == 0 and [t.traj_id for t in store] == ["r0", "r1", "r2"]
    (line,) = said
    assert "No space left on device" in line and "held in memory" in line


def test_a_disk_that_fills_up_keeps_the_runs_written_readable_and_the_rest_in_memory(monkeypatch):
    from dtoc_rl.ingest import run_store

    writes, real = [], os.pwrite

    def pwrite(fd, data, at):  # the second run's bytes: half written, then the disk is full
        writes.append(len(data))
        if len(writes) == 2:
            return real(fd, bytes(data[: len(data) // 2]), at)
        if len(writes) == 3:
            raise OSError(28, "No space left on device")
        return real(fd, data, at)

    monkeypatch.setattr(run_store.os, "pwrite", pwrite)
    said: list[str] = []
    store = RunStore(budget=0, warn=said.append)
    runs = _runs(4)
    for t in runs:
        store.append(t)
    assert [store.is_live(i) for i in range(4)] == [False, True, True, True] and len(said) == 1
    assert [dataclasses.asdict(t) for t in store] == [dataclasses.asdict(t) for t in runs]
    assert os.fstat(store._fd).st_size == writes[0]  # the part written of the second run, taken back


def _collection(tmp: Path) -> Path:
    """Logs of many formats, a run copied twice, a copy cut short, a session in its stream and its
    transcript, and a proxy's run logged in three parts."""
    logs = tmp / "logs"
    shutil.copytree(ROOT / "data" / "raw", logs / "raw")
    fixtures = ROOT / "tests" / "fixtures"
    for name in ("repolaunch", "mini_swe_agent_v2", "swe_agent_v1_1", "openhands_sdk", "opencode"):
        shutil.copytree(fixtures / name, logs / name)
    shutil.copytree(fixtures / "claude_code_subagent" / "transcripts", logs / "cc" / "projects")
    shutil.copy(fixtures / "claude_code_subagent" / "stream.jsonl", logs / "cc" / "kept.jsonl")
    oh = logs / "raw" / "openhands-sdk_gpt-4o_openagentsafety" / "output.critic_attempt_1.jsonl"
    for name in ("same", "cut", "zcut"):  # a run's id holds its folder's name and its file's
        (logs / name / oh.parent.name).mkdir(parents=True)
    shutil.copy(oh, logs / "same" / oh.parent.name / oh.name)  # the same runs again: counted once
    lines = oh.read_text().splitlines(keepends=True)
    cut = "".join(lines[:2]) + lines[2][: len(lines[2]) // 2]  # a copy cut off while written,
    for name in ("cut", "zcut"):  # read before the intact copy, and after it
        (logs / name / oh.parent.name / oh.name).write_text(cut)
    _in_parts(logs / "proxy", [3, 5])
    return logs


def test_an_ingest_that_keeps_runs_on_disk_gives_what_one_in_memory_gives(tmp_path):
    logs = _collection(tmp_path)
    held = ingest_paths([logs], progress=False, spill_after=None, workers=1)
    disk = ingest_paths([logs], progress=False, spill_after=0, workers=2)
    assert isinstance(held.trajectories, list)
    assert disk.trajectories.spilled == len(disk.trajectories)  # Claude Code's and the proxy's runs too
    assert [dataclasses.asdict(t) for t in disk.trajectories] == [
        dataclasses.asdict(t) for t in held.trajectories
    ]
    assert disk.skipped == held.skipped and disk.formats == held.formats and disk.joined == held.joined
    # what this collection holds was met: copies, a cut copy, a session read twice, a run in parts
    reasons = " | ".join(s.reason for s in held.skipped)
    for why in ("identical in", "intact copy in", "the same session as"):
        assert why in reasons
    assert len(held.joined) == 2


def test_the_command_with_no_memory_writes_the_dataset_it_writes_by_default(tmp_path, capsys):
    from dtoc_rl.cli import main

    logs = _collection(tmp_path)
    for name, extra in (("default", []), ("disk", ["--memory", "0"])):
        assert (
            main(["ingest", str(logs), "-o", str(tmp_path / name), "--json", "--workers", "1", *extra]) == 0
        )
        summary = json.loads(capsys.readouterr().out)
        assert summary["total"]["trajectories"] == len(load_trajectories(tmp_path / name))
    a, b = load_trajectories(tmp_path / "default"), load_trajectories(tmp_path / "disk")
    assert [dataclasses.asdict(t) for t in a] == [dataclasses.asdict(t) for t in b]
    sa, sb = read_summary(tmp_path / "default"), read_summary(tmp_path / "disk")
    for s in (sa, sb):
        for key in ("seconds", "trajectories_per_second", "megabytes_per_second", "out"):
            s.pop(key, None)
    assert sa == sb
    with pytest.raises(SystemExit) as e:
        main(["ingest", str(logs), "-o", str(tmp_path / "x"), "--memory", "-1"])
    assert e.value.code == 2 and "argument --memory: must be at least 0" in capsys.readouterr().err
