"""Goose's session database: sessions as trajectories, the ledger's usage per call, compaction."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dtoc_rl.ingest import detect_format
from dtoc_rl.ingest.base import IngestError
from dtoc_rl.ingest.goose import GooseSessionsIngester, is_goose_db

GOOSE = GooseSessionsIngester()
# The columns of Goose's schema version 17 that the reader uses (session_manager.rs), and some it does not.
SCHEMA = """
create table sessions (id text primary key, name text not null default '',
  description text not null default '', session_type text not null default 'user',
  working_dir text not null, created_at timestamp default current_timestamp,
  provider_name text, model_config_json text, accumulated_total_tokens integer);
create table messages (id integer primary key autoincrement, message_id text, session_id text not null,
  role text not null, content_json text not null, created_timestamp integer not null, metadata_json text);
create table usage_ledger (id integer primary key autoincrement, session_id text not null,
  created_timestamp integer not null, model text, input_tokens integer, output_tokens integer,
  total_tokens integer, cache_read_tokens integer, cache_write_tokens integer, cost real,
  cost_source text, is_compaction integer default 0);
"""


def _text(t):
    return {"type": "text", "text": t}


def _request(i, command):
    value = {"name": "developer__shell", "arguments": {"command": command}}
    return {"type": "toolRequest", "id": i, "toolCall": {"status": "success", "value": value}}


def _response(i, text):
    value = {"content": [{"type": "text", "text": text}], "isError": False}
    return {"type": "toolResponse", "id": i, "toolResult": {"status": "success", "value": value}}


def _db(path: Path, sessions: dict[str, list[tuple]], ledger: dict[str, list[tuple]] | None = None) -> Path:
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    for k, (sid, msgs) in enumerate(sessions.items()):
        config = json.dumps({"model_name": "claude-sonnet-4-5", "context_limit": 200000})
        con.execute(
            "insert into sessions (id, name, working_dir, created_at, provider_name, model_config_json) "
            "values (?, ?, '/w', ?, 'anthropic', ?)",
            (sid, f"session {sid}", f"2026-01-0{k + 1} 10:00:00", config),
        )
        for n, (role, blocks, meta) in enumerate(msgs):
            con.execute(
                "insert into messages (session_id, role, content_json, created_timestamp, metadata_json) "
                "values (?, ?, ?, ?, ?)",
                (sid, role, json.dumps(blocks), 1767000000 + 10 * n, json.dumps(meta) if meta else None),
            )
    for sid, rows in (ledger or {}).items():
        for n, (inp, out, read, write, cost, compaction) in enumerate(rows):
            con.execute(
                "insert into usage_ledger (session_id, created_timestamp, input_tokens, output_tokens, "
                "cache_read_tokens, cache_write_tokens, cost, cost_source, is_compaction) "
                "values (?, ?, ?, ?, ?, ?, ?, 'provider_reported', ?)",
                (sid, 1767000000 + 10 * n, inp, out, read, write, cost, compaction),
            )
    con.commit()
    con.close()
    return path


def _run(k: int, turns: int) -> list[tuple]:
    msgs = [("user", [_text(f"task {k}: list the files")], None)]
    for t in range(turns):
        msgs.append(("assistant", [_text(f"Step {t}."), _request(f"r{k}{t}", f"ls dir{t}")], None))
        msgs.append(("user", [_response(f"r{k}{t}", f"file_{t}.py\n" * (t + 1))], None))
    msgs.append(("assistant", [_text("Done.")], None))
    return msgs


def test_each_session_is_a_trajectory_with_the_ledgers_usage_per_call(tmp_path):
    db = _db(tmp_path / "sessions.db", {"20260101_1": _run(1, 2), "20260102_1": _run(2, 1)},
             ledger={"20260101_1": [(1200, 30, 1000, 150, 0.004, 0), (1300, 40, 1150, 100, 0.005, 0),
                                    (1400, 10, 1250, 0, 0.002, 0), (5000, 500, 0, 0, 0.02, 1)]})  # fmt: skip
    assert is_goose_db(db) and isinstance(detect_format(db), GooseSessionsIngester)
    a, b = GOOSE.parse(db)
    assert (a.source, a.traj_id, a.task_id) == ("goose", "goose/sessions/20260101_1", "20260101_1")
    assert a.model_raw == "claude-sonnet-4-5" and a.model_family == "claude-sonnet"
    assert a.task_text == "task 1: list the files"
    assert [(s.tool_name, s.output) for s in a.steps] == [
        ("developer__shell", "file_0.py\n"), ("developer__shell", "file_1.py\nfile_1.py\n"), (None, None)
    ]  # fmt: skip
    # the compaction's summary call is no call of the conversation: three replies, three calls
    used = [(s.usage.input_tokens, s.usage.cached_tokens, s.usage.cache_write_tokens) for s in a.steps]
    assert used == [(1200, 1000, 150), (1300, 1150, 100), (1400, 1250, 0)]
    assert [s.timestamp for s in a.steps] == [1767000010, 1767000030, 1767000050]  # the closing answer too
    assert json.loads(a.extra)["working_dir"] == "/w"
    assert all(s.usage is None for s in b.steps)  # no ledger rows: no usage, and nothing said
    assert "usage_note" not in json.loads(b.extra)


def test_a_compacted_session_keeps_what_the_model_saw_and_marks_the_compaction(tmp_path):
    old = {"userVisible": True, "agentVisible": False}
    msgs = [(role, blocks, old) for role, blocks, _ in _run(1, 2)[:-1]]
    msgs += [
        ("user", [_text("Summary: listed dir0 and dir1.")], {"userVisible": False, "agentVisible": True}),
        ("assistant", [_text("The conversation continues.")], {"userVisible": False, "agentVisible": True}),
        ("user", [_text("task 1: list the files")], {"userVisible": False, "agentVisible": False}),
        ("assistant", [_request("r9", "ls dir9")], None),
        ("user", [_response("r9", "nine.py")], None),
        ("assistant", [_text("Done.")], None),
    ]
    db = _db(tmp_path / "sessions.db", {"s1": msgs}, ledger={"s1": [(100, 1, 0, 0, None, 0)]})
    (t,) = GOOSE.parse(db)
    assert [s.output for s in t.steps] == ["file_0.py\n", "file_1.py\nfile_1.py\n", "nine.py", None]
    third = t.steps[2]
    assert "Summary: listed dir0 and dir1." in third.user_text and "continues" not in third.assistant_text
    (event,) = [e for s in t.steps for e in s.events]
    assert (event.kind, event.targets) == ("compaction", [0, 1]) and event in third.events
    assert json.loads(t.extra)["usage_note"] == "1 calls in usage_ledger against 4 replies: left out"


def test_an_older_schema_without_metadata_or_ledger_is_read(tmp_path):
    db = tmp_path / "sessions.db"
    con = sqlite3.connect(db)
    con.executescript(
        "create table sessions (id text primary key, description text, working_dir text not null);"
        "create table messages (id integer primary key autoincrement, session_id text not null,"
        " role text not null, content_json text not null, created_timestamp integer not null);"
    )
    con.execute("insert into sessions values ('old', 'an old one', '/w')")
    for n, (role, blocks, _) in enumerate(_run(3, 1)):
        row = ("old", role, json.dumps(blocks), 1700000000 + n)
        con.execute(
            "insert into messages (session_id, role, content_json, created_timestamp) values (?, ?, ?, ?)",
            row,
        )
    con.commit()
    con.close()
    (t,) = GOOSE.parse(db)
    assert t.model_raw == "" and [s.output for s in t.steps] == ["file_0.py\n", None]


def test_a_bad_session_is_named_and_the_others_are_read(tmp_path):
    db = _db(tmp_path / "sessions.db", {"good": _run(1, 1), "bad": _run(2, 1)})
    con = sqlite3.connect(db)
    con.execute("update messages set content_json = '{not json' where session_id = 'bad' and id = 5")
    con.commit()
    con.close()
    got = []
    with pytest.raises(IngestError, match=r"1 of 2 sessions failed: session 2: session bad: message 0"):
        for t in GOOSE.parse(db):
            got.append(t.task_id)
    assert got == ["good"]


def test_other_sqlite_files_are_not_read_as_goose_and_a_folder_ingests_the_database(tmp_path):
    from dtoc_rl.core.sqlite_store import SQLiteStore
    from dtoc_rl.ingest.driver import ingest_paths

    (tmp_path / "logs").mkdir()
    store = SQLiteStore(tmp_path / "logs" / "dtoc_sessions.sqlite", session_id="x")
    store.close()
    assert not is_goose_db(tmp_path / "logs" / "dtoc_sessions.sqlite")
    _db(tmp_path / "logs" / "sessions.db", {"s": _run(1, 2)})
    res = ingest_paths([tmp_path / "logs"], progress=False)
    assert [t.traj_id for t in res.trajectories] == ["goose/sessions/s"] and not res.skipped
    assert [s.output is not None for s in res.trajectories[0].steps] == [True, True, False]


def test_a_failed_tools_error_reads_as_the_text_goose_sends_the_model(tmp_path):
    # the shape a real Goose 1.48 store keeps for a tool that failed (MCP's ErrorData)
    def failed(i, error):
        return {"type": "toolResponse", "id": i, "toolResult": {"status": "error", "error": error}}

    value = {"resultType": "complete", "content": [_text("ok")], "isError": False}
    done = {"type": "toolResponse", "id": "c3", "toolResult": {"status": "success", "value": value}}
    path = _db(tmp_path / "sessions.db", {"s1": [
        ("user", [_text("lint it")], None),
        ("assistant", [_request("c1", "lint .")], None),
        ("user", [failed("c1", {"code": -32603, "message": "command not found: lint"})], None),
        ("assistant", [_request("c2", "lint --x")], None),
        ("user", [failed("c2", {"code": -32602, "message": "bad", "data": {"k": 1}})], None),
        ("assistant", [_request("c3", "make")], None),
        ("user", [done], None),
        ("assistant", [_text("done")], None),
    ]})  # fmt: skip
    (t,) = GOOSE.parse(path)
    outs = [(s.output, s.output_is_error) for s in t.steps if s.tool_name]
    assert outs == [("-32603: command not found: lint", True), ('-32602: bad({"k":1})', True), ("ok", False)]
