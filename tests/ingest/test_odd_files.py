"""Ingest walks folders with links, special files and odd names without losing the good files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.ingest.driver import ingest_paths


def _chat(task: str) -> str:
    msgs = [
        {"role": "user", "content": task},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "print('hello')"},
        {"role": "assistant", "content": "done"},
    ]  # fmt: skip
    return json.dumps({"id": task, "messages": msgs}) + "\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_links_fifos_devices_and_undecodable_names_are_listed_and_good_files_kept(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    (root / "good.jsonl").write_text(_chat("task-good"))
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(_chat("task-outside"))
    (root / "inside_link.jsonl").symlink_to(root / "good.jsonl")
    (root / "outside_link.jsonl").symlink_to(outside)
    (root / "dangling.jsonl").symlink_to(tmp_path / "missing.jsonl")
    (root / "loop_a.jsonl").symlink_to(root / "loop_b.jsonl")
    (root / "loop_b.jsonl").symlink_to(root / "loop_a.jsonl")
    (root / "zero.json").symlink_to("/dev/zero")
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "p.json")
    odd = os.path.join(os.fsencode(root), b"caf\xe9.jsonl")
    with open(odd, "wb") as fh:
        fh.write(_chat("task-odd").encode())

    res = ingest_paths([root], progress=False)  # must return: the FIFO is never opened

    assert sorted(t.task_id for t in res.trajectories) == ["task-good", "task-odd"]
    reasons = {Path(s.path).name: s.reason for s in res.skipped}
    assert "not followed" in reasons["inside_link.jsonl"]
    assert "not followed" in reasons["outside_link.jsonl"]
    assert reasons["dangling.jsonl"].startswith("dangling symbolic link")
    assert reasons["loop_a.jsonl"].startswith("symbolic link in a loop")
    assert "not followed" in reasons["zero.json"]
    assert "not followed" in reasons["dirlink"]
    assert reasons["p.json"] == "a FIFO: not read"
    assert all("\n" not in r for r in reasons.values())

    out = tmp_path / "ds"
    write_dataset(res.trajectories, out)  # an undecodable file name must not break the writer
    paths = sorted(t.source_path for t in load_trajectories(out))
    assert paths == ["logs/caf\\xe9.jsonl", "logs/good.jsonl"]


def test_a_link_named_on_the_command_line_is_followed(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_text(_chat("task-real"))
    link = tmp_path / "named.jsonl"
    link.symlink_to(real)
    res = ingest_paths([link], progress=False)
    assert [t.task_id for t in res.trajectories] == ["task-real"]
    assert res.trajectories[0].source_path == "named.jsonl"


def test_an_intact_copy_displaces_a_damaged_one_with_the_same_id(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    good = _chat("task-1")
    (root / "a").mkdir()
    (root / "b").mkdir()
    # walked first: a copy of the same log with a line that does not parse
    (root / "a" / "run.jsonl").write_text(good + '{"messages": [\n')
    (root / "b" / "run.jsonl").write_text(good)
    res = ingest_paths([root], progress=False)
    assert len(res.trajectories) == 1
    assert res.trajectories[0].source_path == "logs/b/run.jsonl"
    assert any("intact copy in" in s.reason for s in res.skipped)


def test_a_link_to_nothing_named_as_input_is_skipped_and_an_output_one_is_a_one_line_error(tmp_path):
    from dtoc_rl.data.dataset import DatasetError, check_dataset_target

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    log = tmp_path / "run.jsonl"
    log.write_text(_chat("task-a"))
    # a glob picks up links to nothing as often as a user types them: skipped, the rest read
    res = ingest_paths([tmp_path / "a", tmp_path / "gone.jsonl", log], progress=False)
    assert len(res.trajectories) == 1
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in res.skipped}
    assert reasons == {
        "a": "symbolic link in a loop: not followed",
        "gone.jsonl": f"dangling symbolic link (to {tmp_path / 'nowhere.jsonl'}): not followed",
    }
    # names that are nowhere are typos: every one said at once, before anything is read
    with pytest.raises(FileNotFoundError, match=r"^no such file or folder: \S*nope1, \S*nope2$"):
        ingest_paths([log, tmp_path / "nope1", tmp_path / "gone.jsonl", tmp_path / "nope2"], progress=False)
    with pytest.raises(DatasetError, match="cannot follow its symbolic links"):
        check_dataset_target(tmp_path / "a")
    check_dataset_target(tmp_path / "new", inputs=[tmp_path / "a"])  # a loop holds no logs: no error
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatasetError, match="file is a file, not a folder"):
        check_dataset_target(tmp_path / "file" / "ds")  # found before any log is read
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="is a symbolic link to nothing"):
        check_dataset_target(tmp_path / "dangling")


def test_where_json_breaks_is_said_once():
    from dtoc_rl.ingest.base import json_error

    cases = (
        ('{"a": "b', "Unterminated string starting at line 1 column 7"),
        ('{"a": 1,}', "Expecting property name enclosed in double quotes at line 1 column 9"),
    )
    for text, said in cases:
        with pytest.raises(json.JSONDecodeError) as e:
            json.loads(text)
        assert json_error(e.value) == said and " at at " not in json_error(e.value, line=False)


def test_a_damaged_copy_read_after_the_intact_one_is_not_a_second_run(tmp_path, monkeypatch):
    import copy

    from dtoc_rl.ingest import driver
    from dtoc_rl.ingest.driver import Skip
    from tests.policies.crafted import crafted

    run = crafted([100, 200, 300, 400])
    cut = copy.deepcopy(run)
    cut.steps = cut.steps[:2]  # what a reader kept of a file cut short
    root = tmp_path / "logs"
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        (root / d / "run.jsonl").write_text("{}")

    def process(unit, label, fmt):  # a (walked first) intact, b damaged
        if unit.parent.name == "a":
            return [copy.deepcopy(run)], [], "openai-chat", 2
        return [copy.deepcopy(cut)], [Skip(str(unit), "line 3: invalid JSON")], "openai-chat", 2

    monkeypatch.setattr(driver, "_process", process)
    res = ingest_paths([root], progress=False, workers=1)
    assert len(res.trajectories) == 1 and res.trajectories[0].source_path == "logs/a/run.jsonl"
    assert len(res.trajectories[0].steps) == 4
    assert any("a longer copy in" in s.reason for s in res.skipped)


@pytest.mark.parametrize("order", [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b"), ("b", "a", "c")])
def test_copies_cut_at_different_points_leave_one_run_whatever_the_order(tmp_path, monkeypatch, order):
    import copy

    from dtoc_rl.ingest import driver
    from dtoc_rl.ingest.driver import Skip
    from tests.policies.crafted import crafted

    run = crafted([100, 200, 300, 400, 500])
    kept = {"a": 5, "b": 2, "c": 3}  # a intact; b and c damaged files cut after 2 and 3 steps
    root = tmp_path / "logs"
    for name, folder in zip(order, ("f1", "f2", "f3")):  # walked in folder order
        (root / folder).mkdir(parents=True)
        (root / folder / f"{name}.jsonl").write_text("{}")

    def process(unit, label, fmt):
        name = unit.stem
        t = copy.deepcopy(run)
        t.steps = t.steps[: kept[name]]
        skips = [] if name == "a" else [Skip(str(unit), "line 9: invalid JSON")]
        return [t], skips, "openai-chat", 2

    monkeypatch.setattr(driver, "_process", process)
    res = ingest_paths([root], progress=False, workers=1)
    assert [len(t.steps) for t in res.trajectories] == [5]
    assert res.trajectories[0].source_path.endswith("/a.jsonl") and res.trajectories[0].traj_id == run.traj_id


def test_a_compressed_or_cut_off_log_is_skipped_saying_so_not_only_as_an_unknown_format(tmp_path):
    import gzip

    good = _chat("task-a")
    (tmp_path / "run.jsonl.gz").write_bytes(gzip.compress(good.encode()))  # kept compressed
    (tmp_path / "gzip_data.jsonl").write_bytes(gzip.compress(good.encode()))  # renamed, still gzip
    (tmp_path / "RUN2.JSONL.GZ").write_bytes(gzip.compress(good.encode()))
    for aside in ("notes.txt.gz", "build.log.gz", "results.json.gz"):  # not a log's name: aside
        (tmp_path / aside).write_bytes(gzip.compress(b"not a log"))
    (tmp_path / "torn.jsonl").write_text('{"kind": "unknown record"}\n{"b": ')
    (tmp_path / "hole.jsonl").write_text('{"kind": "unknown record"}\n{"b": \n{"kind": "unknown record"}\n')
    (tmp_path / "fine.jsonl").write_text(good)
    res = ingest_paths([tmp_path], progress=False)
    assert len(res.trajectories) == 1
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in res.skipped}
    packed = "gzip-compressed: decompress it to read it (its log is inside, unread)"
    assert reasons == {
        "run.jsonl.gz": packed,
        "RUN2.JSONL.GZ": packed,
        "gzip_data.jsonl": packed,
        "torn.jsonl": "unknown format, and line 2 is not valid JSON (cut off, or still being written?)",
        "hole.jsonl": "unknown format, and line 2 is not valid JSON",
    }
    assert sorted(res.auxiliary_paths) == [
        f"{tmp_path}/{n}" for n in ("build.log.gz", "notes.txt.gz", "results.json.gz")
    ]
    # a format named on the command line cannot read it packed either: said so, not as bad text
    res = ingest_paths([tmp_path / "gzip_data.jsonl"], progress=False, fmt="openai-chat")
    assert [s.reason for s in res.skipped] == [packed]
    # a line with a character JSON allows raw (U+2028) is one line of JSON, not a break
    (tmp_path / "sep.jsonl").write_text('{"kind": "line\u2028sep"}\n')
    from dtoc_rl.ingest import unknown_format_reason

    assert unknown_format_reason(tmp_path / "sep.jsonl").startswith("unknown format: no ingester")
