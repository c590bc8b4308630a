"""OpenCode's own database (``opencode.db``, since OpenCode 1.x) and ``opencode export`` of the same
real session (tests/fixtures/opencode_db: OpenCode 1.18.33 reading three files against a scripted
API) read as one session, each call with the usage its step-finish part logged."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format, read_first
from dtoc_rl.ingest.base import IngestError

FIX = Path(__file__).parent.parent / "fixtures" / "opencode_db"


def _fields(t) -> list[tuple]:
    return [(s.turn, s.tool_name, s.tool_args, s.output, s.output_is_error, s.usage, s.timestamp, s.user_text,
             s.assistant_text) for s in t.steps]  # fmt: skip


def test_the_database_and_the_export_read_as_the_same_session():
    assert detect_format(FIX / "opencode.db").name == "opencode-db"
    assert detect_format(FIX / "export.json").name == "opencode"
    _, db = read_first(FIX / "opencode.db")
    _, export = read_first(FIX / "export.json")
    assert db.source == export.source == "opencode" and db.traj_id == export.traj_id
    assert _fields(db) == _fields(export) and db.task_text == export.task_text
    assert [s.tool_name for s in db.steps] == ["read"] * 3 + [None]
    assert [json.loads(s.tool_args)["filePath"].rsplit("/", 1)[1] for s in db.steps[:3]] == [
        "alpha.txt", "beta.txt", "gamma.txt"
    ]  # fmt: skip
    # each call's usage from its step-finish part: OpenCode logs the uncached rest as input
    assert all((s.usage.input_tokens, s.usage.cached_tokens, s.usage.output_tokens) == (9000, 8000, 12)
               for s in db.steps)  # fmt: skip
    assert all(s.usage.cost_usd is None for s in db.steps)  # OpenCode's 0 for a model it cannot price
    assert db.unlogged_prompt_tokens > 0  # counted from the first call's usage


def test_a_damaged_session_costs_its_own_session_only(tmp_path):
    db = tmp_path / "opencode.db"
    shutil.copy(FIX / "opencode.db", db)
    con = sqlite3.connect(db)
    (sid,) = con.execute("select id from session").fetchone()
    row = con.execute("select * from session").fetchone()
    cols = [r[1] for r in con.execute("pragma table_info(session)")]
    copy = dict(zip(cols, row), id="ses_second", title="Second")
    con.execute(
        f"insert into session ({','.join(cols)}) values ({','.join('?' * len(cols))})", list(copy.values())
    )
    bad = ("msg_bad", "ses_second", 1, 1, "{not json")
    con.execute(
        "insert into message (id, session_id, time_created, time_updated, data) values (?, ?, ?, ?, ?)", bad
    )
    con.commit()
    con.close()
    got = []
    with pytest.raises(IngestError) as e:
        for t in detect_format(db).parse(db):
            got.append(t.traj_id)
    assert got == [f"opencode/{sid}"]
    assert "1 of 2 sessions failed" in e.value.reason and "msg_bad" in e.value.reason


def test_an_undone_turn_is_out_of_the_session_and_parts_go_in_opencodes_order(tmp_path):
    db = tmp_path / "opencode.db"
    shutil.copy(FIX / "opencode.db", db)
    con = sqlite3.connect(db)
    (sid,) = con.execute("select id from session").fetchone()
    t0 = 1796466497000
    user = {"role": "user", "time": {"created": t0}, "agent": "build"}
    said = {"role": "assistant", "time": {"created": t0 + 10}, "modelID": "gpt-4o", "providerID": "local"}
    for mid, data, ts in (("msg_zz1", user, t0), ("msg_zz2", said, t0 + 10)):
        con.execute("insert into message values (?, ?, ?, ?, ?)", (mid, sid, ts, ts, json.dumps(data)))
    for pid, mid, text in (
        ("prt_zz1", "msg_zz1", "now delete alpha.txt"),
        ("prt_zz2", "msg_zz2", "Deleted."),
    ):
        part = json.dumps({"type": "text", "text": text})
        con.execute("insert into part values (?, ?, ?, ?, ?, ?)", (pid, mid, sid, t0, t0, part))
    # an /undo back to that prompt: the turn stays stored until the next prompt, out of the context
    con.execute("update session set revert = ? where id = ?", (json.dumps({"messageID": "msg_zz1"}), sid))
    # a part first written after the next one (OpenCode orders a message's parts by id)
    parts = con.execute("select id, data from part where session_id = ? order by id", (sid,)).fetchall()
    late = next(pid for pid, data in parts if json.loads(data)["type"] == "tool")
    con.execute("update part set time_created = time_created + 100000 where id = ?", (late,))
    con.commit()
    con.close()
    _, t = read_first(db)
    _, export = read_first(FIX / "export.json")
    assert _fields(t) == _fields(export)  # neither the undone turn nor the late write shows
    assert json.loads(t.extra)["undone_messages"] == 2


def test_an_empty_database_reads_as_nothing_and_an_undo_to_a_missing_part_keeps_its_message(tmp_path):
    from dtoc_rl.ingest.opencode import OpenCodeDatabaseIngester, _without_undone

    db = tmp_path / "opencode.db"
    shutil.copy(FIX / "opencode.db", db)
    con = sqlite3.connect(db)
    for table in ("part", "message", "session"):
        con.execute(f"delete from {table}")
    con.commit()
    con.close()
    assert list(OpenCodeDatabaseIngester().parse(db)) == []  # a store made before its first session
    msgs = [{"info": {"id": "m1"}, "parts": [{"id": "p1"}]}, {"info": {"id": "m2"}, "parts": [{"id": "p2"}]}]
    assert _without_undone(msgs, {"messageID": "m2", "partID": "gone"}) == (msgs, 0)
    assert _without_undone(msgs, {"messageID": "m2", "partID": "p2"}) == (
        [msgs[0], {**msgs[1], "parts": []}],
        0,
    )
    assert _without_undone(msgs, {"messageID": "m2"}) == ([msgs[0]], 1)


def test_a_folder_holding_the_database_reads_it_as_named_and_other_sqlite_files_stay_passed_over(
    tmp_path, capsys
):
    from dtoc_rl.cli import main
    from dtoc_rl.ingest.driver import ingest_paths

    other = tmp_path / "cache" / "cache.db"  # another program's SQLite file, as a data folder holds
    other.parent.mkdir()
    con = sqlite3.connect(other)
    con.execute("create table session (id text, data text)")
    con.close()
    assert main(["ingest", str(other.parent), "-o", str(tmp_path / "none"), "--quiet"]) == 1
    assert "nothing was ingested: the 1 file(s) found are of kinds read as no log" in capsys.readouterr().err
    share = tmp_path / "share" / "opencode"
    share.mkdir(parents=True)
    shutil.copy(FIX / "opencode.db", share / "opencode.db")
    shutil.copy(other, share / "cache.db")
    res = ingest_paths([tmp_path / "share"], progress=False)
    _, named = read_first(FIX / "opencode.db")
    (t,) = res.trajectories
    assert t.traj_id == named.traj_id and _fields(t) == _fields(named) and not res.skipped
    assert res.formats == {"opencode-db": 1} and [Path(p).name for p in res.auxiliary_paths] == ["cache.db"]
