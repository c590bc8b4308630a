import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dtoc_rl import SQLiteStore
from dtoc_rl.sqlite_store import list_sessions


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
