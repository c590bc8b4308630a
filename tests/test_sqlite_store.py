import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dtoc_rl import SQLiteStore
from dtoc_rl.core.sqlite_store import list_sessions


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_session_reopens_in_a_new_process(tmp_path):
    db = tmp_path / "ext.db"
    proc = _run(
        f"""
        from dtoc_rl import SQLiteStore
        s = SQLiteStore({str(db)!r}, session_id="sess1")
        for i in range(5):
            s.add("output %d " % i * 50, tool_name="bash",
                  tool_args={{"cmd": "echo %d" % i}}, call_id="c%d" % i)
        s.set_visible(["t0001", "t0003"], False)
        s.append_message({{"role": "user", "content": "hi"}})
        print(s.active_tokens)
        """
    )
    assert proc.returncode == 0, proc.stderr
    s = SQLiteStore(db, session_id="sess1")
    assert len(s) == 5
    assert s.hidden_keys() == ["t0001", "t0003"]
    assert s.get("t0004").tool_result == "output 4 " * 50
    assert s.get("t0002").tool_args == {"cmd": "echo 2"}
    assert s.by_call_id("c3").tool_key == "t0003"
    assert s.messages == [{"role": "user", "content": "hi"}]
    assert s.active_tokens == int(proc.stdout) == s.recount()
    assert s.next_key() == "t0005"
    assert list_sessions(db)[0]["outputs"] == 5


def test_sigkill_right_after_storing_loses_nothing(tmp_path):
    db = tmp_path / "kill.db"
    n = 200
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from dtoc_rl import SQLiteStore
                s = SQLiteStore({str(db)!r}, session_id="k")
                for i in range({n}):
                    s.add("payload-%d " % i * 20)
                print("stored", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "stored"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    s = SQLiteStore(db, session_id="k")
    assert len(s) == n
    assert s.get(f"t{n - 1:04d}").tool_result == f"payload-{n - 1} " * 20


@pytest.mark.parametrize(
    "content", ["\x00nul\x00", "\udcff\udc80 surrogates", "ünï 日本 🎉", "x" * 1_000_000]
)
def test_any_python_string_round_trips(tmp_path, content):
    db = tmp_path / "rt.db"
    s = SQLiteStore(db, session_id="a")
    s.add(content)
    s.append_message({"role": "assistant", "content": content[:100]})
    s.close()
    r = SQLiteStore(db, session_id="a")
    assert r.get("t0000").tool_result == content
    assert r.messages[0]["content"] == content[:100]


def test_reopen_with_other_estimator_is_an_error(tmp_path):
    SQLiteStore(tmp_path / "e.db", session_id="a").add("hello")
    with pytest.raises(ValueError, match="created with estimator 'chars'"):
        SQLiteStore(tmp_path / "e.db", session_id="a", estimator="cl100k_base")


def test_reopen_missing_session_without_create(tmp_path):
    SQLiteStore(tmp_path / "m.db", session_id="a")
    with pytest.raises(KeyError, match="no session 'b'"):
        SQLiteStore(tmp_path / "m.db", session_id="b", create=False)


def test_sessions_are_isolated(tmp_path):
    a = SQLiteStore(tmp_path / "i.db", session_id="a")
    b = SQLiteStore(tmp_path / "i.db", session_id="b")
    a.add("aaa")
    b.add("bbb")
    b.add("ccc")
    assert len(SQLiteStore(tmp_path / "i.db", session_id="a")) == 1
    assert len(SQLiteStore(tmp_path / "i.db", session_id="b")) == 2


# -- one transaction per logical change ---------------------------------------------------------


def _session_with_call(db, sid="s"):
    from dtoc_rl import DTOCContext

    ctx = DTOCContext(query="task", store=SQLiteStore(db, session_id=sid))
    ctx.add_assistant("run it", tool_calls=[{"id": "call_1", "name": "bash", "arguments": {"command": "ls"}}])
    return ctx


def test_a_failed_tool_message_takes_its_output_back(tmp_path, monkeypatch):
    from dtoc_rl import DTOCContext

    db = tmp_path / "t.db"
    ctx = _session_with_call(db)
    store = ctx.store

    def boom(message):
        raise OSError("disk full")

    monkeypatch.setattr(store, "_persist_message", boom)
    with pytest.raises(OSError, match="disk full"):
        ctx.add_tool_result("README.md\n", "call_1")
    # nothing of the failed change is left, in memory or on disk, and the call can be answered
    assert len(store) == 0 and store.by_call_id("call_1") is None
    assert ctx.pending_calls == ["call_1"]
    assert ctx.active_tokens == ctx.recount()
    assert len(SQLiteStore(db, session_id="s")) == 0
    monkeypatch.undo()
    rec = ctx.add_tool_result("README.md\n", "call_1")
    assert rec.tool_key == "t0000"
    assert [m["role"] for m in ctx.assemble()] == ["user", "assistant", "tool"]
    again = DTOCContext(store=SQLiteStore(db, session_id="s"))
    assert again.pending_calls == [] and again.assemble()[-1]["tool_key"] == "t0000"


def test_memory_store_transaction_rolls_back_in_memory():
    from dtoc_rl import MemoryStore

    s = MemoryStore()
    s.add("kept")
    heard = []
    s.listeners.append(lambda keys, vis: heard.append((keys, vis)))
    with pytest.raises(RuntimeError), s.transaction():
        s.add("dropped", call_id="c")
        s.set_visible(["t0000"], False)
        s.append_message({"role": "user", "content": "x"})
        raise RuntimeError("stop")
    assert s.keys() == ["t0000"] and s.get("t0000").visible and s.messages == []
    assert s.by_call_id("c") is None and s.active_tokens == s.recount()
    assert heard == [(["t0000"], False), (["t0000"], True)]  # views are told of the undo


def test_sigkill_between_output_and_message_leaves_a_session_that_continues(tmp_path):
    """The child dies (SIGKILL) inside the tool message's write, after the output's insert."""
    db = tmp_path / "k.db"
    proc = _run(
        f"""
        import os, signal
        from dtoc_rl import DTOCContext, SQLiteStore
        ctx = DTOCContext(query="task", store=SQLiteStore({str(db)!r}, session_id="s"))
        ctx.add_assistant("", tool_calls=[{{"id": "call_1", "name": "bash", "arguments": {{}}}}])
        real = ctx.store._persist_message
        def die(message):
            real(message)
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.store._persist_message = die
        ctx.add_tool_result("out", "call_1")
        """
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    from dtoc_rl.serve.orchestrator import Orchestrator

    orch = Orchestrator(session_path=db, session_id="s")
    assert len(orch.store) == 0 and orch.ctx.pending_calls == ["call_1"]
    assert orch.add_tool_result("call_1", "out again") == "t0000"
    orch.openai_request()
    orch.record_assistant("", [{"id": "call_2", "name": "bash", "arguments": {}}])
    assert orch.add_tool_result("call_2", "next") == "t0001"


def test_an_output_without_its_message_is_repaired_on_reopen(tmp_path):
    """Files written when the two were separate commits can hold such an output."""
    from dtoc_rl.serve.orchestrator import Orchestrator

    db = tmp_path / "old.db"
    s = SQLiteStore(db, session_id="s")
    s.append_message({"role": "user", "content": "task"})
    s.append_message(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "name": "bash", "arguments": {}}],
        }
    )
    s.add("out", tool_name="bash", call_id="call_1")
    s.close()
    orch = Orchestrator(session_path=db, session_id="s")
    assert orch.ctx.pending_calls == []
    msgs = orch.openai_request()["messages"]
    assert msgs[-1]["role"] == "tool" and msgs[-1]["tool_call_id"] == "call_1"
    orch.record_assistant("", [{"id": "call_2", "name": "bash", "arguments": {}}])
    assert orch.add_tool_result("call_2", "next") == "t0001"


# -- two writers ------------------------------------------------------------------------------------


def test_a_second_writer_gets_a_clear_error_not_an_integrity_error(tmp_path):
    from dtoc_rl.core.store import SessionConflictError

    db = tmp_path / "w.db"
    a = SQLiteStore(db, session_id="s")
    b = SQLiteStore(db, session_id="s")
    a.add("from a")
    with pytest.raises(SessionConflictError, match="changed by another writer") as e:
        b.add("from b")
    assert str(db) in str(e.value) and "\n" not in str(e.value)
    assert len(b) == 0  # nothing half-applied
    with pytest.raises(SessionConflictError):
        b.append_message({"role": "user", "content": "x"})
    b = SQLiteStore(db, session_id="s")  # reopened: sees a's output and may write
    assert b.add("from b").tool_key == "t0001"
    with pytest.raises(SessionConflictError):
        a.set_visible(["t0000"], False)
    assert SQLiteStore(db, session_id="s").get("t0000").visible


def test_two_processes_writing_one_session_never_raise_integrity_errors(tmp_path):
    db = tmp_path / "two.db"
    SQLiteStore(db, session_id="s").close()
    code = f"""
        import sys
        from dtoc_rl import SQLiteStore
        from dtoc_rl.core.store import SessionConflictError
        kept = conflicts = 0
        s = SQLiteStore({str(db)!r}, session_id="s")
        for i in range(150):
            try:
                s.add("x%d" % i)
                kept += 1
            except SessionConflictError:
                conflicts += 1
                s = SQLiteStore({str(db)!r}, session_id="s")
        print(kept, conflicts)
        """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    kept = sum(int(out.split()[0]) for out, _ in outs)
    s = SQLiteStore(db, session_id="s")
    assert len(s) == kept  # every acknowledged add is there, keys have no gaps
    assert s.keys() == [f"t{i:04d}" for i in range(kept)]


# -- files that are not a session store ----------------------------------------------------------------


def _damage(db, sql, *params):
    import sqlite3

    con = sqlite3.connect(db)
    con.execute(sql, params)
    con.commit()
    con.close()


def _good(tmp_path):
    db = tmp_path / "good.db"
    s = SQLiteStore(db, session_id="s")
    s.add("output", tool_args={"a": 1})
    s.append_message({"role": "user", "content": "hi"})
    s.close()
    return db


@pytest.mark.parametrize(
    "make",
    [
        "empty",
        "text",
        "random",
        "truncated",
        "foreign",
        "folder",
        "bad_json_message",
        "bad_json_args",
        "bad_utf8",
        "message_not_a_dict",
    ],
)
def test_a_file_that_is_no_session_store_is_a_one_line_error_naming_it(tmp_path, make):
    import sqlite3

    from dtoc_rl.core.store import StoreFileError

    db = tmp_path / "x.db"
    if make == "empty":
        db.write_bytes(b"")
    elif make == "text":
        db.write_text("just some notes\n" * 100)
    elif make == "random":
        db.write_bytes(os.urandom(8192))
    elif make == "truncated":
        good = _good(tmp_path)
        db.write_bytes(good.read_bytes()[:5000])
    elif make == "foreign":
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE people (name TEXT)")
        con.commit()
        con.close()
    elif make == "folder":
        db.mkdir()
    else:
        db = _good(tmp_path)
        if make == "bad_json_message":
            _damage(db, "UPDATE messages SET body='{not json'")
        elif make == "bad_json_args":
            _damage(db, "UPDATE outputs SET tool_args='{not json'")
        elif make == "bad_utf8":
            _damage(db, "UPDATE outputs SET tool_result=?", b"\xff\xfe\xfa")
        elif make == "message_not_a_dict":
            _damage(db, "UPDATE messages SET body='[1, 2]'")
    before = db.read_bytes() if db.is_file() else None
    with pytest.raises(StoreFileError) as e:
        SQLiteStore(db, session_id="s")
    msg = str(e.value)
    assert msg.startswith(str(db)) and "\n" not in msg
    if before is not None:
        assert db.read_bytes() == before  # refused without writing anything into it
    if make in ("empty", "foreign", "folder", "text"):
        with pytest.raises(StoreFileError):
            list_sessions(db)


def test_a_context_over_a_malformed_message_log_is_a_clear_error(tmp_path):
    from dtoc_rl import DTOCContext

    db = _good(tmp_path)
    _damage(db, "UPDATE messages SET body=?", '{"role": "tool", "tool_call_id": "c", "tool_key": "t0099"}')
    with pytest.raises(ValueError, match=f"session 's' in {db}: a stored message is malformed"):
        DTOCContext(store=SQLiteStore(db, session_id="s"))


def test_a_new_store_file_is_complete_from_the_start(tmp_path):
    db = tmp_path / "new.db"
    s = SQLiteStore(db, session_id="s")
    assert db.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("new.db")) == []
    s.close()
    assert list_sessions(db)[0]["session_id"] == "s"


def test_a_store_without_write_versions_is_upgraded(tmp_path):
    import sqlite3

    db = tmp_path / "v0.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, created REAL NOT NULL, estimator TEXT NOT NULL);"
        "CREATE TABLE outputs (session_id TEXT NOT NULL, seq INTEGER NOT NULL, tool_key TEXT NOT NULL,"
        " tool_result BLOB NOT NULL, estimated_tokens INTEGER NOT NULL, visible_cost INTEGER NOT NULL,"
        " hidden_cost INTEGER NOT NULL, timestamp REAL NOT NULL, visible INTEGER NOT NULL,"
        " tool_name TEXT NOT NULL, tool_args TEXT, step INTEGER NOT NULL, call_id TEXT,"
        " PRIMARY KEY (session_id, tool_key));"
        "CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,"
        " PRIMARY KEY (session_id, seq));"
    )
    con.close()
    s = SQLiteStore(db, session_id="s")
    s.add("x")
    assert SQLiteStore(db, session_id="s").get("t0000").tool_result == "x"


def test_sqlites_memory_name_makes_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = SQLiteStore(":memory:", session_id="m")
    s.add("x")
    assert len(s) == 1 and list(tmp_path.iterdir()) == []


def test_a_reader_opening_during_writes_sees_a_consistent_session(tmp_path):
    """Outputs and messages are read from one snapshot: a turn committed between the two reads
    would otherwise show a tool message whose output was not loaded."""
    import time

    from dtoc_rl import DTOCContext

    db = tmp_path / "rw.db"
    DTOCContext(query="task", store=SQLiteStore(db, session_id="s", synchronous="OFF")).store.close()
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time
                from dtoc_rl import DTOCContext, SQLiteStore
                ctx = DTOCContext(store=SQLiteStore({str(db)!r}, session_id="s", synchronous="OFF"))
                end = time.monotonic() + 20
                n = 0
                print("go", flush=True)
                while time.monotonic() < end:
                    ctx.add_assistant("", tool_calls=[{{"id": "c%d" % n, "name": "bash", "arguments": {{}}}}])
                    ctx.add_tool_result("x" * (n % 500), "c%d" % n)
                    n += 1
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "go"
        opened, t0 = 0, time.monotonic()
        while opened < 25 and time.monotonic() - t0 < 5:
            ctx = DTOCContext(store=SQLiteStore(db, session_id="s"))  # raised on a torn read
            assert len(ctx.pending_calls) <= 1 and ctx.active_tokens == ctx.recount()
            ctx.store.close()
            opened += 1
        assert opened >= 5
    finally:
        writer.kill()
        writer.wait()
