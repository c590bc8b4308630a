"""Need labels the service keeps per client session (``dtoc_rl.serve.session_labels``)."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.serve.service import DecideError, DecisionService, serve_in_thread
from dtoc_rl.serve.session_labels import Sessions


def _turns(traj):
    """A logged trajectory as the turns an HTTP client would send, with its item keys."""
    by_turn: dict[int, list] = {}
    for s in traj.steps:
        by_turn.setdefault(s.turn, []).append(s)
    turns, n = [], 0
    for i, steps in enumerate(by_turn.values()):
        calls = []
        for s in steps:
            if s.tool_name:
                calls.append(
                    {"key": f"k{n}", "tool": s.tool_name, "args": s.tool_args, "output": s.output or ""}
                )
                n += 1
        turns.append({"index": i, "assistant_text": steps[0].assistant_text, "user_text": steps[0].user_text,
                      "calls": calls})  # fmt: skip
    return turns


def _items(turns, upto):
    return [{"key": c["key"], "tokens": len(c["output"]) // 4 + 1, "tool": c["tool"]}
            for t in turns[:upto] for c in t["calls"]]  # fmt: skip


def test_a_session_gets_the_labels_an_orchestrator_gives_the_same_run(data_dir):
    svc = DecisionService(make_policy("none"))
    trajs = [t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 5][:4]
    needed_somewhere = 0
    for t in trajs:
        turns = _turns(t)
        orch = Orchestrator(mode="agent", query=t.task_text, system=t.system_prompt or None)
        ours: dict[str, str] = {}
        for i, turn in enumerate(turns):
            # the client sends each turn once, with the next request after it
            req = {"session": t.traj_id, "task": t.task_text, "system": t.system_prompt,
                   "turns": [turn], "items": _items(turns, i + 1)}  # fmt: skip
            resp = svc.decide(req)
            if turn["user_text"]:
                orch.add_user(turn["user_text"])
            calls = orch.record_assistant(
                turn["assistant_text"], [{"name": c["tool"], "arguments": c["args"]} for c in turn["calls"]]
            )
            for c, r in zip(turn["calls"], calls):
                ours[c["key"]] = orch.add_tool_result(r["id"], c["output"])
            states = dict(orch.item_states())
            expect = {k: states[o].times_needed for k, o in ours.items() if states[o].times_needed}
            assert resp["session"] == {"turns": i + 1, "needed": expect}, (t.traj_id, i)
            # and the policy saw them
            p = svc.parse({"session": t.traj_id, "items": _items(turns, i + 1)})
            assert [s.times_needed for s in p["states"]] == [states[ours[k]].times_needed for k in p["keys"]]
        needed_somewhere += bool(expect)
    assert needed_somewhere >= 3


def test_turns_are_sent_once_in_order_and_a_clients_own_needs_win():
    svc = DecisionService(make_policy("none"))
    cat = {
        "tool": "bash",
        "args": {"command": "cat f.py"},
        "output": "def function_number_one(x): pass\n" * 5,
    }
    t0 = {"index": 0, "calls": [{"key": "a", **cat}]}
    # copies a line of a's output: a provenance need on "a" (a plain re-read is not a counted kind)
    grep = {"tool": "bash", "args": {"command": "grep -n 'def function_number_one(x): pass' g.py"}}
    t1 = {"index": 1, "calls": [{"key": "b", **grep, "output": "no match"}]}
    items = [{"key": "a", "tokens": 40}, {"key": "b", "tokens": 40}]
    assert svc.decide({"session": "s", "turns": [t0], "items": items[:1]})["session"]["needed"] == {}
    r = svc.decide({"session": "s", "turns": [t0, t1], "items": items})  # t0 again: a retry, skipped
    assert r["session"] == {"turns": 2, "needed": {"a": 1}}
    p = svc.parse({"session": "s", "items": [{"key": "a", "tokens": 40, "needs": 7}, items[1]]})
    assert [s.times_needed for s in p["states"]] == [7, 0]
    with pytest.raises(DecideError) as e:
        svc.decide({"session": "s", "turns": [{"index": 5}], "items": items})
    assert (
        e.value.status == 409
        and e.value.field == "turns[0].index"
        and "came before turn 2" in e.value.message
    )
    with pytest.raises(DecideError) as e:
        svc.decide({"turns": [t0], "items": items})
    assert e.value.status == 422 and e.value.field == "turns"


def test_least_recently_used_sessions_are_dropped():
    sessions = Sessions(max_sessions=2)
    svc = DecisionService(make_policy("none"))
    svc.sessions = sessions
    t0 = {"index": 0, "calls": [{"key": "a", "tool": "bash", "output": "x"}]}
    for sid in ("s1", "s2", "s1", "s3"):  # s2 is the least recently used when s3 arrives
        svc.decide({"session": sid, "turns": [t0], "items": [{"key": "a", "tokens": 1}]})
    assert len(sessions) == 2
    assert (
        svc.decide({"session": "s1", "turns": [{"index": 1}], "items": []})["session"]["turns"] == 2
    )  # kept
    with pytest.raises(DecideError, match="came before turn 0"):  # s2 was dropped: it starts afresh
        svc.decide({"session": "s2", "turns": [{"index": 1}], "items": []})


def test_sessions_over_http():
    import http.client

    srv, _ = serve_in_thread(DecisionService(make_policy("none")), "127.0.0.1", 0)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
        body = {"session": "h", "turns": [{"index": 3}], "items": []}
        headers = {"content-type": "application/json", "authorization": f"Bearer {srv.token}"}
        conn.request("POST", "/decide", json.dumps(body), headers)
        res = conn.getresponse()
        err = json.loads(res.read())
        assert res.status == 409 and err["field"] == "turns[0].index"
        conn.request("GET", "/version", headers=headers)
        schema = json.loads(conn.getresponse().read())["request_schema"]
        assert "turns" in json.dumps(schema) and "session" in json.dumps(schema)
    finally:
        srv.shutdown()


def test_key_references_resolve_in_the_clients_numbering():
    svc = DecisionService(make_policy("none"))
    out = {"tool": "bash", "output": "ok"}
    turns = [
        {"index": 0, "calls": [{"key": "t0005", **out}, {"key": "t0006", **out}]},
        {"index": 1, "assistant_text": "t0006 is what I need; t0000 is not a key here", "calls": []},
    ]
    items = [{"key": "t0005", "tokens": 1}, {"key": "t0006", "tokens": 1}]
    r = svc.decide({"session": "keys", "turns": turns, "items": items})
    assert r["session"]["needed"] == {"t0006": 1}


def test_refused_turns_leave_no_trace():
    svc = DecisionService(make_policy("none"))
    svc.sessions = Sessions(max_chars=1000)
    with pytest.raises(DecideError) as e:  # an unknown session that does not start at turn 0
        svc.decide({"session": "late", "turns": [{"index": 3}], "items": []})
    assert e.value.status == 409 and "unknown session" in e.value.message and len(svc.sessions) == 0
    with pytest.raises(DecideError) as e:
        svc.decide(
            {"session": "s", "turns": [{"index": 0, "calls": [{"key": "a", "tool": "", "output": ""}]}]}
        )
    assert e.value.status == 422 and e.value.field.startswith("turns[0].calls[0].tool")
    big = {"index": 0, "user_text": "hello", "calls": [{"key": "a", "tool": "bash", "output": "x" * 2000}]}
    with pytest.raises(DecideError) as e:
        svc.decide({"session": "s", "turns": [big], "items": []})
    assert e.value.status == 413 and "more than 1,000 characters" in e.value.message
    small = {"index": 0, "calls": [{"key": "a", "tool": "bash", "output": "fine"}]}
    r = svc.decide({"session": "s", "turns": [small], "items": [{"key": "a", "tokens": 1}]})
    assert r["session"]["turns"] == 1  # the refused turn left nothing behind (no user text either)
    assert svc.sessions.get("s").orch.trajectory().steps[0].user_text == ""


def test_a_session_is_made_by_its_first_turn_with_its_task():
    svc = DecisionService(make_policy("none"))
    svc.sessions = Sessions(max_sessions=1)
    svc.decide({"session": "real", "task": "Fix pager.py", "turns": [{"index": 0}], "items": []})
    r = svc.decide({"session": "probe", "items": []})  # names a session but sends no turn
    assert r["session"] == {"turns": 0, "needed": {}} and len(svc.sessions) == 1  # no slot taken
    assert svc.sessions.get("real").orch.trajectory().task_text == "Fix pager.py"


def test_sessions_are_kept_per_client():
    svc = DecisionService(make_policy("none"))
    t0 = {"index": 0, "calls": [{"key": "t0000", "tool": "bash", "output": "x"}]}
    svc.decide({"session": "same-name", "turns": [t0], "items": []}, client="alice")
    with pytest.raises(DecideError) as e:  # another client's turn 1 does not reach alice's session
        svc.decide({"session": "same-name", "turns": [{"index": 1, "assistant_text": "t0000"}], "items": []},
                   client="mallory")  # fmt: skip
    assert e.value.status == 409 and svc.sessions.get("same-name", "mallory") is None
    r = svc.decide({"session": "same-name", "turns": [{"index": 1}], "items": []}, client="alice")
    assert r["session"]["turns"] == 2 and svc.sessions.get("same-name", "alice").turns == 2
    assert svc.sessions.get("same-name") is None  # nor in the in-process (no client) namespace


def test_a_later_turn_naming_a_calls_id_needs_its_output():
    """A harness that saves a long output under its call's id (Claude Code's tool-results/<id>.txt) is
    read back by that id: with the call's ``id`` sent, the session labels the need the log has."""
    svc = DecisionService(make_policy("none"))
    out = "line one of a long listing\n" * 40
    saved = "/home/u/.claude/tool-results/toolu_01AbCdEfGhIjKlMn.txt"
    turns = [
        {"index": 0, "calls": [{"key": "k0", "tool": "bash", "args": {"command": "ls -R"}, "output": out,
                                "id": "toolu_01AbCdEfGhIjKlMn"}]},
        {"index": 1, "calls": [{"key": "k1", "tool": "Read", "output": "(the same listing)",
                                "args": {"file_path": saved}}]},
    ]  # fmt: skip
    needed = {}
    for with_id in (True, False):
        sent = json.loads(json.dumps(turns))
        if not with_id:
            del sent[0]["calls"][0]["id"]
        items = [{"key": "k0", "tokens": 300, "tool": "bash"}, {"key": "k1", "tokens": 5, "tool": "Read"}]
        resp = svc.decide({"session": f"s{with_id}", "task": "t", "turns": sent, "items": items})
        needed[with_id] = resp["session"]["needed"].get("k0", 0)
    assert needed == {True: 1, False: 0}


def test_a_refused_request_makes_no_session_and_pushes_none_out():
    svc = DecisionService(make_policy("none"))
    svc.sessions = Sessions(max_sessions=1, max_chars=1000)
    t0 = {"index": 0, "assistant_text": "look", "calls": [{"key": "t0000", "tool": "bash", "output": "A"}]}
    svc.decide({"session": "victim", "turns": [t0], "items": [{"key": "t0000", "tokens": 10}]})
    bad_item = {"key": "t0000", "tokens": 10, "tool_category": "bogus"}
    too_big = {"index": 0, "calls": [{"key": "t0000", "tool": "bash", "output": "x" * 2000}]}
    for req, status in (
        ({"session": "junk", "turns": [t0], "items": [bad_item]}, 422),  # an item refused
        ({"session": "junk", "turns": [too_big], "items": []}, 413),  # its first turn refused
        ({"session": "junk", "turns": [t0, {"index": 1, "user_text": "x" * 2000}], "items": []}, 413),
    ):
        with pytest.raises(DecideError) as e:
            svc.decide(req)
        assert e.value.status == status
        assert len(svc.sessions) == 1 and svc.sessions.get("junk") is None
    r = svc.decide({"session": "victim", "turns": [{"index": 1, "assistant_text": "t0000 again"}],
                    "items": [{"key": "t0000", "tokens": 10}]})  # fmt: skip
    assert r["session"] == {"turns": 2, "needed": {"t0000": 1}}


def test_a_turn_sent_with_a_refused_item_is_not_kept():
    svc = DecisionService(make_policy("none"))
    wrong = {"index": 0, "assistant_text": "WRONG", "calls": []}
    with pytest.raises(DecideError) as e:
        svc.decide(
            {"session": "r", "turns": [wrong], "items": [{"key": "a", "tokens": 1, "tool_category": "x"}]}
        )
    assert e.value.field == "items[0].tool_category" and svc.sessions.get("r") is None
    t0 = {"index": 0, "calls": [{"key": "t0000", "tool": "bash", "output": "A"}]}
    t1 = {"index": 1, "assistant_text": "see t0000"}
    r = svc.decide({"session": "r", "turns": [t0, t1], "items": [{"key": "t0000", "tokens": 1}]})
    assert r["session"] == {"turns": 2, "needed": {"t0000": 1}}  # the corrected turn 0 was labelled


def test_a_key_given_to_two_calls_is_refused():
    svc = DecisionService(make_policy("none"))
    call = {"key": "t0000", "tool": "bash", "output": "A"}
    with pytest.raises(DecideError) as e:  # twice in one turn
        svc.decide({"session": "d", "turns": [{"index": 0, "calls": [call, call]}], "items": []})
    assert (e.value.status, e.value.field) == (422, "turns[0].calls[1].key")
    assert "duplicate key 't0000'" in e.value.message and svc.sessions.get("d") is None
    svc.decide({"session": "d", "turns": [{"index": 0, "calls": [call]}], "items": []})
    with pytest.raises(DecideError) as e:  # again in a later turn
        svc.decide({"session": "d", "turns": [{"index": 1, "calls": [{**call, "output": "B"}]}], "items": []})
    assert e.value.field == "turns[0].calls[0].key" and svc.sessions.get("d").turns == 1


def test_a_session_another_request_joined_is_kept_when_its_makers_request_fails(monkeypatch):
    from dtoc_rl.engine.decide_request import to_request
    from dtoc_rl.serve.session_labels import SessionLabels

    sessions = Sessions()
    t0 = {"index": 0, "calls": [{"key": "t0000", "tool": "bash", "output": "A"}]}
    maker = to_request({"session": "s", "turns": [t0, {"index": 1}], "items": []})
    joiner = to_request({"session": "s", "turns": [t0], "items": []})
    real_add = SessionLabels.add

    def add(self, turns, *args):  # while the maker's turns are fed, another request uses it
        if len(turns) == 1:  # the joiner's
            return real_add(self, turns, *args)
        real_add(self, turns[:1], *args)
        self.lock.release()
        try:
            assert sessions.feed(joiner).turns == 1  # answered: it counts on the session
        finally:
            self.lock.acquire()
        raise DecideError(413, "turns[1]: too long", "turns[1]")

    monkeypatch.setattr(SessionLabels, "add", add)
    with pytest.raises(DecideError):
        sessions.feed(maker)
    assert sessions.get("s") is not None and sessions.get("s").turns == 1


def test_a_logged_session_says_what_each_call_was_sent_hidden(data_dir, tmp_path):
    """`dtoc-rl serve --log-dir`: a client (the OpenCode plugin) applies the answers; the session's log
    ingests as the run, each call with what the client sent hidden, so `logged` prices what it did."""

    t = next(t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 5)
    turns = _turns(t)
    run, sent, logs = _client_session(t, turns, tmp_path / "logs")
    (log,) = logs
    assert log.name.startswith("ses_1_x-") and log.stat().st_mode & 0o777 == 0o600
    assert _check_sent(run, turns, sent) == []
    extra = json.loads(run.extra)
    assert (extra["dtoc_policy"], run.model_raw) == (make_policy("last_n:n=1").label, t.model_raw)


def test_a_session_sent_anew_after_a_restart_is_logged_apart_and_ingests_as_one_run(data_dir, tmp_path):
    """After a restart (or the session dropped from the table) the client sends every turn again: the
    new session's log opens with that history as not seen, in a file of its own, and ingest joins the
    two as the run the client made, each call with what it was sent hidden."""
    t = next(t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 7)
    turns = _turns(t)
    run, sent, logs = _client_session(t, turns, tmp_path / "logs", restart_at=4)
    assert len(logs) == 2 and len(run.steps) == len(t.steps)
    assert len(json.loads(run.extra)["joined"]) == 1
    assert _check_sent(run, turns, sent) == []
    # sent again in parts of three turns (the plugin caps a request): the calls made while the parts
    # were sent are not known, every other one is, and the two logs are still one run
    t = next(t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 14)
    turns = _turns(t)
    for step in (True, False):  # the newest turn told by the step the request names, or by its items
        run, sent, logs = _client_session(
            t, turns, tmp_path / f"parts{step}", restart_at=6, chunk=2, step=step
        )
        assert len(logs) == 2 and len(run.steps) == len(t.steps)
        # calls 0-5 from the first log, 6 from its row of the call in flight; 7-10 answered while the
        # parts were sent (request 6 brought turns 0-1, ... request 11 turns 10-11 and was whole again)
        assert _check_sent(run, turns, sent) == [7, 8, 9, 10], step


def test_a_request_that_leaves_out_a_turn_without_outputs_says_so_by_its_step(tmp_path):
    """A turn that stores no output names no item, so only the request's step shows that the client
    left it out (its size cap): the turns the request brings are then history, not the newest call."""
    from dtoc_rl.ingest.driver import ingest_paths

    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path)
    call = {"tool": "bash", "args": {"command": "ls"}}
    turns = [{"index": i, "calls": [{"key": f"k{i}", **call, "output": f"{i}\n" * 40}]} for i in range(3)]
    items = [{"key": f"k{i}", "tokens": 20} for i in range(3)]
    svc.decide({"session": "s", "turns": turns[:1], "items": items[:1], "step": 1}, client="c")
    svc.decide({"session": "s", "turns": turns[1:2], "items": items[:2], "step": 2}, client="c")
    # turn 3 calls no tool (it was left out); the client shows k0 again, at call 4
    shown = [{**items[0], "visible": True}, {**items[1], "visible": False}, items[2]]
    svc.decide({"session": "s", "turns": turns[2:3], "items": shown, "step": 4}, client="c")
    assert svc.flush_logs(10)
    (run,) = ingest_paths([tmp_path], progress=False).trajectories
    assert [s.masked_before for s in run.steps] == [[], [], None]


def test_what_the_client_sent_is_logged_when_it_did_not_apply_an_answer(data_dir, tmp_path):
    """A client that timed out (and showed everything) or kept an answer unapplied sent its call
    otherwise than the service answered: its next request's items say how, and the log says that."""
    t = next(t for t in load_trajectories(data_dir / "sample") if len({s.turn for s in t.steps}) > 7)
    turns = _turns(t)
    run, sent, _ = _client_session(t, turns, tmp_path / "logs", ignore={3, 5}, timeout={4, 6})
    assert _check_sent(run, turns, sent) == []
    assert sent[4] == set() and sent[3] != sent[5]  # the cases happened


def _client_session(t, turns, log_dir, restart_at=None, chunk=None, ignore=(), timeout=(), step=True):
    """A client (as the OpenCode plugin) running ``turns`` against a service with ``log_dir``: each
    request brings the turns not sent yet (``chunk`` at most, as the plugin caps a request) and its
    items as the client shows them; the answer is applied, but at the requests in ``ignore`` (kept as
    it was) and in ``timeout`` (everything shown, as the plugin does when the service does not answer
    in time).  With ``restart_at`` the service restarts before that request and the client sends the
    session again from its first turn.  ``step``: each request says the model calls so far, as the
    plugin does (else the service tells the newest turn by the items)."""
    from dtoc_rl.ingest.driver import ingest_paths

    svc = DecisionService(make_policy("last_n:n=1"), log_dir=log_dir)
    visible: dict[str, bool] = {}
    sent: list[set[str]] = []  # what each request's call was sent hidden, after the answer
    done = 0  # turns the service has
    for i, turn in enumerate(turns):
        for c in turn["calls"]:
            visible[c["key"]] = True
        items = [{**it, "visible": visible[it["key"]]} for it in _items(turns, i + 1)]
        if i == restart_at:
            assert svc.flush_logs(10)
            svc = DecisionService(make_policy("last_n:n=1"), log_dir=log_dir)
            done = 0
        send = turns[done : i + 1][:chunk]
        done += len(send)
        req = {"session": "ses/1 x", "task": t.task_text, "system": t.system_prompt, "model": t.model_raw,
               "turns": send, "items": items, **({"step": i + 1} if step else {})}  # fmt: skip
        resp = svc.decide(req, client="c1")
        if i in timeout:
            visible = dict.fromkeys(visible, True)
        elif i not in ignore:
            for k in resp["disable"]:
                visible[k] = False
            for k in resp["enable"]:
                visible[k] = True
        sent.append({k for k, v in visible.items() if not v})
    assert svc.flush_logs(10)
    (run,) = ingest_paths([log_dir], progress=False).trajectories
    return run, sent, sorted(log_dir.iterdir())


def _check_sent(run, turns, sent) -> list[int]:
    """Every call the log knows the visibility of was sent what the log says; the calls it says it
    does not know, returned."""
    keys = [c["key"] for turn in turns for c in turn["calls"]]
    step_of = {k: s.index for k, s in zip(keys, [s for s in run.steps if s.tool_name])}
    by_turn: dict[int, list] = {}
    for s in run.steps:
        by_turn.setdefault(s.turn, []).append(s)
    hidden_somewhere, unknown = 0, []
    for c, steps in enumerate(by_turn.values()):
        # call c was sent as the request before it left it (the first call: nothing stored yet)
        want = sorted(step_of[k] for k in sent[c - 1]) if c else []
        if steps[0].masked_before is None:
            unknown.append(c)
            continue
        assert steps[0].masked_before == want, c
        hidden_somewhere += bool(want)
    assert hidden_somewhere >= 3
    return unknown


def test_every_session_name_is_a_log_ingest_reads(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths

    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path)
    names = [".hidden", "../x", "a/b", "x" * 150, "ünï", "..."]
    for name in names:
        turn = {"index": 0, "calls": [{"key": "a", "tool": "bash", "args": {}, "output": "x\n" * 40}]}
        svc.decide({"session": name, "turns": [turn], "items": [{"key": "a", "tokens": 20}]}, client="c")
    assert svc.flush_logs(10)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == len(names) and not any(f.startswith(".") for f in files)
    res = ingest_paths([tmp_path], progress=False)
    assert len(res.trajectories) == len(names) and res.skipped == []


def test_a_log_folder_others_can_write_to_is_said(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    warned: list[str] = []
    DecisionService(make_policy("none"), log_dir=folder, warn=warned.append)
    assert warned == [
        f"log folder {folder} can be written by other users (mode 777): a log put there would be ingested "
        f"as one of yours: chmod go-w {folder}"
    ]
    folder.chmod(0o755)
    DecisionService(make_policy("none"), log_dir=folder, warn=warned.append)
    assert len(warned) == 1


def test_the_user_turns_after_an_output_come_from_the_session_unless_the_client_sends_them():
    svc = DecisionService(make_policy("none"))
    call = {"tool": "bash", "args": {"command": "ls"}}
    a, b = {"key": "a", **call, "output": "a.py\n" * 30}, {"key": "b", **call, "output": "b\n" * 30}
    turns = [{"index": 0, "user_text": "", "calls": [a]},
             {"index": 1, "user_text": "Now the other one.", "calls": [b]},
             {"index": 2, "user_text": "And again.", "calls": []}]  # fmt: skip
    items = [{"key": "a", "tokens": 40}, {"key": "b", "tokens": 20}]
    svc.decide({"session": "s", "turns": turns, "items": items}, client="c")
    p = svc.parse({"session": "s", "items": items}, client="c")
    assert [s.turns_after for s in p["states"]] == [2, 1]
    p = svc.parse({"session": "s", "items": [{**items[0], "turns_after": 0}, items[1]]}, client="c")
    assert [s.turns_after for s in p["states"]] == [0, 1]


def test_a_session_logs_the_prices_its_model_was_served_at(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.sim.pricing import Prices

    mine = Prices(input=2.0, output=8.0, cache_read=0.2, cache_write=2.5)
    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path / "logs", prices={"acme-coder-2": mine})
    call = {"tool": "bash", "args": {"command": "ls"}}
    for i in range(3):
        turn = {"index": i, "calls": [{"key": f"k{i}", **call, "output": "x\n" * 40}]}
        items = [{"key": f"k{j}", "tokens": 20} for j in range(i + 1)]
        svc.decide({"session": "s", "model": "acme-coder-2", "turns": [turn], "items": items}, client="c")
    assert svc.flush_logs(10)
    (run,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert json.loads(json.loads(run.extra)["dtoc_prices"]) == {
        "acme-coder-2": {"input": 2.0, "output": 8.0, "cache_read": 0.2, "cache_write": 2.5}
    }


def test_a_stopped_service_has_written_every_session_log(tmp_path, monkeypatch):
    from dtoc_rl.serve.service import make_server
    from tests.slow_writes import slow_log_writes

    slow_log_writes(monkeypatch, 0.3)
    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path)
    server = make_server(svc, port=0)
    turn = {"index": 0, "calls": [{"key": "a", "tool": "bash", "args": {}, "output": "x\n" * 40}]}
    svc.decide({"session": "s", "turns": [turn], "items": [{"key": "a", "tokens": 20}]}, client="c")
    assert not list(tmp_path.glob("*.jsonl"))  # still being written
    server.server_close()
    assert len(list(tmp_path.glob("*.jsonl"))) == 1


def test_each_call_is_logged_with_the_model_its_request_names_if_only_by_family(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths

    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    call = {"tool": "bash", "args": {"command": "ls"}}
    named = [{"model": "gpt-4o-2024-08-06"}, {"model_family": "claude-sonnet"}, {}, {"model": "gpt-4o"},
             {"model_family": "gpt-4o"}]  # fmt: skip
    for i, model in enumerate(named + [{}]):
        turn = {"index": i, "calls": [{"key": f"k{i}", **call, "output": "x\n" * 40}]}
        items = [{"key": f"k{j}", "tokens": 20} for j in range(i + 1)]
        svc.decide({"session": "s", "turns": [turn], "items": items, **model}, client="c")
    assert svc.flush_logs(10)
    (run,) = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert run.model_raw == "gpt-4o-2024-08-06"
    # a request decides the call whose turn the next request brings; the first turn's call was decided
    # by no request, one naming no model is the session's model, not what the one before it named, and
    # one naming the session model's family only is the session's model, named more exactly
    assert [s.model or run.model_raw for s in run.steps if s.tool_name] == [
        "gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "claude-sonnet", "gpt-4o-2024-08-06", "gpt-4o",
        "gpt-4o-2024-08-06",
    ]  # fmt: skip


def test_user_words_told_before_their_turn_count_at_the_call_they_open_and_are_not_kept():
    """A client that sends the user's words the call being decided is sent (``pending_user_text``)
    gets the outputs before them a user turn older at that decision, as a replay of the log sees
    them (tests/test_parity.py's ``service_plugin`` path); the turn that brings them counts them, and
    words told and then taken back (an undo) leave nothing."""
    svc = DecisionService(make_policy("none"))
    call = {"tool": "bash", "args": {"command": "ls"}}
    a, b = {"key": "a", **call, "output": "a.py\n" * 30}, {"key": "b", **call, "output": "b\n" * 30}
    ia, ib = {"key": "a", "tokens": 40}, {"key": "b", "tokens": 20}

    def ask(step, turns, items, **more):
        body = {"session": "s", "step": step, "turns": turns, "items": items, **more}
        return [st.turns_after for st in svc.parse(body, client="c")["states"]]

    assert ask(1, [{"index": 0, "calls": [a]}], [ia]) == [0]
    # the user speaks: the call about to be made is sent the words (told twice, as a retry would)
    assert ask(1, [], [ia], pending_user_text="Now the other one.") == [1]
    assert ask(1, [], [ia], pending_user_text="Now the other one.") == [1]
    assert ask(1, [], [ia]) == [0]  # taken back
    # the turn that call answered with brings them: one user turn
    turn = {"index": 1, "user_text": "Now the other one.", "calls": [b]}
    assert ask(2, [turn], [ia, ib]) == [1, 0]
    # words told before a turn the session lacks (a request cut short) come after it: not read yet
    assert ask(3, [], [ia, ib], pending_user_text="Later words.") == [1, 0]
    assert ask(3, [{"index": 2, "user_text": "Later words.", "calls": []}], [ia, ib]) == [2, 1]
    (s,) = svc.sessions._sessions.values()
    assert s.chars == len("Now the other one.") + len("Later words.") + len(a["output"]) + len(
        b["output"]
    ) + 2 * len('{"command": "ls"}')  # what is told is not kept: only the turns' texts count


def test_a_sessions_log_is_made_by_the_log_writer_not_the_request(tmp_path, monkeypatch):
    """With ``log_dir``, a request only marks its session's log to be written: the row (the whole
    session, 100 ms at 2,000 calls) is made on the writer's thread, and holds the newest state."""
    import threading

    from dtoc_rl.ingest.driver import ingest_paths

    where = []
    real = Orchestrator.log_row
    monkeypatch.setattr(
        Orchestrator,
        "log_row",
        lambda self, *a, **kw: where.append(threading.current_thread()) or real(self, *a, **kw),
    )
    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path)
    call = {"tool": "bash", "args": {"command": "ls"}}
    items = []
    for i in range(4):
        items.append({"key": f"k{i}", "tokens": 20})
        turn = {"index": i, "calls": [{"key": f"k{i}", **call, "output": f"{i}\n" * 40}]}
        svc.decide({"session": "s", "turns": [turn], "items": items, "step": i + 1}, client="c")
    assert svc.flush_logs(10)
    assert where and threading.current_thread() not in where
    (run,) = ingest_paths([tmp_path], progress=False).trajectories
    assert [s.output for s in run.steps] == [f"{i}\n" * 40 for i in range(4)]


def test_two_sessions_logged_where_no_writer_thread_can_start_do_not_wait_on_each_other(
    tmp_path, monkeypatch
):
    """With no thread to be had, a request writes every waiting log row itself, each made under its own
    session's lock: it must not hold its own session's lock meanwhile, or two such requests deadlock."""
    import threading
    import time

    real_start, real_row = threading.Thread.start, Orchestrator.log_row

    def start(self):
        if self.name == "dtoc-rl log writer":
            raise RuntimeError("can't start new thread")
        real_start(self)

    def slow_row(self, *a, **kw):
        time.sleep(0.3)
        return real_row(self, *a, **kw)

    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(Orchestrator, "log_row", slow_row)
    svc = DecisionService(make_policy("last_n:n=1"), log_dir=tmp_path)
    call = {"key": "k0", "tool": "bash", "args": {"command": "ls"}, "output": "x\n" * 40}

    def request(name):
        turns = [{"index": 0, "calls": [call]}]
        svc.decide(
            {"session": name, "turns": turns, "items": [{"key": "k0", "tokens": 20}], "step": 1}, client="c"
        )

    threads = [threading.Thread(target=request, args=(name,), daemon=True) for name in "AB"]
    real_start(threads[0])
    time.sleep(0.1)
    real_start(threads[1])
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert len(list(tmp_path.glob("*.jsonl"))) == 2


def test_a_requests_visibility_reaches_the_store_as_told_whatever_changed_it_before():
    # _show compares the request with the store in set operations: pinned to the plain rule (every
    # output the session has shows as the client says; outputs the request leaves out, and keys the
    # session does not have, change nothing), also after the store changed by another route
    import random

    from dtoc_rl.engine.decide_request import to_request
    from dtoc_rl.serve.session_labels import SessionLabels

    rng = random.Random(3)
    s = SessionLabels("task")
    turns = [{"index": i, "assistant_text": f"call {i}",
              "calls": [{"key": f"k{i}", "tool": "bash", "args": {"command": f"cat f{i}.py"},
                         "output": f"def f{i}(): return {i}\n" * 20}]} for i in range(40)]  # fmt: skip
    s.add(to_request({"items": [], "turns": turns}).turns, {})
    store, ours = s.orch.store, {f"k{i}": s._keys[f"k{i}"] for i in range(40)}
    for round_ in range(200):
        if round_ % 7 == 3:  # another route: the orchestrator changed visibility itself
            pick = rng.sample(sorted(ours.values()), 5)
            s.orch.manage_context(enable=pick[:2], disable=pick[2:])
        before = {o: store.get(o).visible for o in ours.values()}
        told = {k: rng.random() < 0.5 for k in rng.sample(sorted(ours), rng.randint(0, 40))}
        told.update({f"new{j}": rng.random() < 0.5 for j in range(rng.randint(0, 3))})
        s.sent(told)
        for k, o in ours.items():
            assert store.get(o).visible == told.get(k, before[o]), (round_, k)
        assert s._hidden == {k for k, o in ours.items() if not store.get(o).visible}
