import json

import pytest

from dtoc_rl import DTOCContext, SQLiteStore


def _ctx():
    c = DTOCContext(query="Fix the bug in utils.py", system="You are a coding agent.")
    c.add_assistant(
        "Looking.",
        reasoning="start with ls",
        tool_calls=[
            {"name": "bash", "arguments": {"cmd": "ls"}, "id": "call_A"},
            {"name": "bash", "arguments": '{"cmd": "cat utils.py"}'},
        ],
    )
    c.add_tool_result("utils.py\ntests/\n")
    c.add_tool_result("def f():\n    return 1\n" * 200)
    return c


def test_assemble_shows_envelopes_and_placeholders_and_keeps_pairs():
    c = _ctx()
    c.manage_context(disable=["t0001"])
    msgs = c.assemble()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    ids = [tc["id"] for tc in msgs[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in msgs[3:]] == ids  # a hidden output still answers its call
    assert ids[0] == "call_A"
    shown, hidden = json.loads(msgs[3]["content"]), json.loads(msgs[4]["content"])
    assert set(shown) == {"tool_key", "tool_result", "estimated_tokens"}
    assert hidden["hidden"] is True and hidden["tool_key"] == "t0001" and "tool_result" not in hidden
    assert msgs[4]["hidden"] is True and msgs[3]["hidden"] is False
    assert msgs[2]["reasoning"] == "start with ls"


def test_active_tokens_o1_matches_recount_through_a_session():
    c = _ctx()
    assert c.active_tokens == c.recount()
    rep = c.manage_context(disable=["t0001"])
    assert rep.tokens_before - rep.tokens_after > 800
    assert c.active_tokens == c.recount() == rep.tokens_after
    c.add_user("any progress?")
    assert c.active_tokens == c.recount()


def test_model_made_manage_context_call_is_answered_with_status_report():
    c = _ctx()
    (cid,) = c.add_assistant(
        tool_calls=[{"name": "manage_context", "arguments": {"disable": ["t0001", "t0404"]}}]
    )
    rep = c.handle_manage_context_call('{"disable": ["t0001", "t0404"]}', cid)
    assert rep.disabled == ["t0001"] and "t0404" in rep.errors
    last = c.assemble()[-1]
    assert last["role"] == "tool" and last["tool_call_id"] == cid
    assert json.loads(last["content"])["delta"] == rep.delta
    assert c.active_tokens == c.recount()


def test_answering_without_pending_call_is_an_error():
    c = DTOCContext(query="q")
    with pytest.raises(ValueError, match="no pending tool call"):
        c.add_tool_result("out")
    c.add_assistant(tool_calls=[{"name": "x", "id": "a"}])
    with pytest.raises(ValueError, match="not a pending tool call"):
        c.add_tool_result("out", "b")


def test_sqlite_session_reopens_whole(tmp_path):
    db = tmp_path / "ctx.db"
    c = DTOCContext(query="task", store=SQLiteStore(db, session_id="s"))
    c.add_assistant(
        tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}, {"name": "bash", "arguments": {}}]
    )
    c.add_tool_result("a" * 400)
    c.manage_context(disable=["t0000"])
    before = c.assemble()
    c.store.close()
    r = DTOCContext(store=SQLiteStore(db, session_id="s"))
    assert r.assemble() == before
    assert r.pending_calls == ["call_0001"]
    r.add_tool_result("second")  # pairs with the call still pending before the restart
    assert r.active_tokens == r.recount()
