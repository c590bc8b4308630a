"""dtoc-rl proxy: a policy in front of an agent that only changes its API's base URL.

A fake upstream API records what reaches it; the tests check that hidden outputs arrive as the
store's placeholders and every other byte as the agent sent it, that the proxy decides as an
Orchestrator fed the same conversation, and that it never stops an agent (unserved models,
unreadable bodies, a rewritten history, a dead upstream)."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.orchestrator import Orchestrator
from dtoc_rl.serve.proxy import ContextProxy, make_proxy_server
from tests.chat_turns import HEAD, MODEL, turn

_CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-2024-08-06"}
_DELTAS = [
    {**_CHUNK, "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]} for c in "ok"
]
SSE = [b"data: " + json.dumps(d).encode() + b"\n\n" for d in _DELTAS] + [b"data: [DONE]\n\n"]


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        if body is not None and body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in SSE:
                self.wfile.write(chunk)
                self.wfile.flush()
            self.close_connection = True
            return
        if body is None:
            out, status = b'{"error": {"message": "bad json"}}', 400
        elif "enerateContent" in self.path:  # generateContent and streamGenerateContent
            candidate = {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
            out, status = json.dumps({"candidates": [candidate], "usageMetadata": USAGE_G}).encode(), 200
            if "alt=sse" in self.path:  # one event, sent with its length
                out = b"data: " + out + b"\r\n\r\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                return
        elif self.path.endswith("/messages"):
            text = [{"type": "text", "text": "ok"}]
            answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                      "content": text, "stop_reason": "end_turn", "usage": USAGE_A}  # fmt: skip
            out, status = json.dumps(answer).encode(), 200
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            answer = {**_CHUNK, "object": "chat.completion", "choices": [choice], "usage": USAGE_O}
            out, status = json.dumps(answer).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


USAGE_O = {"prompt_tokens": 1200, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1024}}
USAGE_G = {"promptTokenCount": 1500, "cachedContentTokenCount": 1200, "candidatesTokenCount": 25,
           "thoughtsTokenCount": 5}  # fmt: skip
USAGE_A = {"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 100,
           "output_tokens": 20}  # fmt: skip


def _serving(handler):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.seen = []
    srv.headers_seen = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def upstream():
    yield from _serving(_Upstream)


def _start(proxy: ContextProxy, upstream) -> tuple[str, object]:
    srv = make_proxy_server(proxy, f"http://127.0.0.1:{upstream.server_address[1]}", port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}", srv


def _post(
    url: str, body, *, raw: bytes | None = None, agent: str | None = None, extra: dict | None = None
) -> tuple[int, bytes]:
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-test", **(extra or {})}
    if agent is not None:
        headers["User-Agent"] = agent
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _openai_turn(k: int, lines: int = 300) -> list[dict]:
    out = f"# f{k}.py\n" + "".join(f"value_{k}_{i} = {i}\n" for i in range(lines))
    return turn(k, out, arguments=json.dumps({"command": f"cat f{k}.py"}), text=f"Reading f{k}.py.")


def test_hidden_outputs_go_upstream_as_placeholders_and_the_rest_as_the_agent_sent_it(upstream):
    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    msgs = list(HEAD)
    for k in range(4):
        body = {
            "model": "gpt-4o-2024-08-06",
            "messages": msgs,
            "tools": [{"type": "function"}],
            "temperature": 0,
        }
        status, answer = _post(url + "/v1/chat/completions", body)
        assert status == 200 and json.loads(answer)["usage"] == USAGE_O
        path, headers, raw = upstream.seen[-1]
        sent = json.loads(raw)
        assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer sk-test"
        assert {k2: v for k2, v in sent.items() if k2 != "messages"} == {
            k2: v for k2, v in body.items() if k2 != "messages"
        }
        tools = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
        for i, (mine, theirs) in enumerate(zip(msgs, sent["messages"], strict=True)):
            if i in tools[:-1]:  # last_n:n=1: every output but the newest hidden
                ph = json.loads(theirs["content"])
                assert (
                    ph["hidden"] is True and ph["tool_key"].startswith("t") and ph["estimated_tokens"] > 500
                )
                assert {**theirs, "content": mine["content"]} == mine
            else:
                assert theirs == mine
        msgs = msgs + _openai_turn(k)
    srv.shutdown()
    assert proxy.hidden_sent == 0 + 0 + 1 + 2


def test_the_proxy_decides_as_an_orchestrator_fed_the_same_conversation(upstream, tmp_path):
    from dtoc_rl.policies.learned import LearnedPolicyConfig

    # an untrained network of this seed hides and shows outputs again over these calls
    ckpt = LearnedPolicyConfig(n_layers=1, d_model=32, threshold=0.5, seed=2).create().save(tmp_path / "ck")
    proxy = ContextProxy(make_policy(str(ckpt)))
    url, srv = _start(proxy, upstream)
    model = "gpt-4o-2024-08-06"
    direct = Orchestrator(
        make_policy(str(ckpt)), query="Fix the bug.", system="You are an agent.", model=model
    )
    msgs, keys = list(HEAD), {}
    counts = []
    for k in range(12):
        _post(url + "/v1/chat/completions", {"model": model, "messages": msgs})
        sent = json.loads(upstream.seen[-1][2])["messages"]
        via_proxy = {
            m["tool_call_id"] for m in sent if m["role"] == "tool" and m["content"].startswith('{"tool_key"')
        }
        direct.decide()
        hidden = set(direct.store.hidden_keys())
        assert via_proxy == {cid for cid, key in keys.items() if key in hidden}
        counts.append(len(hidden))
        turn = _openai_turn(k, lines=40 + 37 * k)
        msgs = msgs + turn
        call = turn[0]["tool_calls"][0]
        asked = {"id": call["id"], "name": "bash", "arguments": call["function"]["arguments"]}
        (made,) = direct.record_assistant(turn[0]["content"], [asked])
        keys[call["id"]] = direct.add_tool_result(made["id"], turn[1]["content"])
    srv.shutdown()
    # the comparison saw hides and restores, not only a policy that keeps everything
    assert max(counts) > 0 and any(b < a for a, b in zip(counts, counts[1:], strict=False))


def test_anthropic_tool_results_are_hidden_inside_their_blocks_and_cache_control_is_kept(upstream):
    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    msgs: list[dict] = [{"role": "user", "content": "Fix the bug."}]
    for k in range(3):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "system": "You are an agent.",
            "messages": msgs,
        }
        status, _ = _post(url + "/v1/messages", body)
        assert status == 200
        sent = json.loads(upstream.seen[-1][2])
        assert sent["system"] == body["system"] and len(sent["messages"]) == len(msgs)
        results = [(i, m) for i, m in enumerate(sent["messages"]) if isinstance(m["content"], list)
                   and m["content"][0].get("type") == "tool_result"]  # fmt: skip
        for n, (i, m) in enumerate(results):
            block = m["content"][0]
            if n < len(results) - 1:
                assert json.loads(block["content"])["hidden"] is True
                assert (
                    block["cache_control"] == {"type": "ephemeral"}
                    and m["content"][1] == msgs[i]["content"][1]
                )
            else:
                assert m == msgs[i]
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "bash", "input": {"command": f"cat f{k}.py"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": "x = 1\n" * 400,
                  "cache_control": {"type": "ephemeral"}}  # fmt: skip
        msgs = msgs + [{"role": "assistant", "content": [{"type": "text", "text": "Look."}, use]},
                       {"role": "user", "content": [result, {"type": "text", "text": "go on"}]}]  # fmt: skip
    srv.shutdown()
    assert proxy.hidden_sent == 1


def _gemini_turn(k: int, ids: bool = True) -> list[dict]:
    """A model turn of two parallel calls, and the user turn answering both, in order."""
    calls, responses = [], []
    for half in "ab":
        call = {"name": "read_file", "args": {"file_path": f"src/m{k}{half}.py"}}
        response = {"name": "read_file", "response": {"output": f"# module {k}{half}\n" + "x = 1\n" * 300}}
        if ids:
            call["id"] = response["id"] = f"read_file_{k}{half}"
        calls.append({"functionCall": call, "thoughtSignature": "s"})
        responses.append({"functionResponse": response})
    return [{"role": "model", "parts": [{"text": "Look."}, *calls]}, {"role": "user", "parts": responses}]


@pytest.mark.parametrize("ids", [True, False])
def test_gemini_function_responses_are_hidden_in_their_parts_and_the_model_read_from_the_path(
    upstream, tmp_path, ids
):
    from dtoc_rl.ingest import read_first

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    url, srv = _start(proxy, upstream)
    contents: list[dict] = [{"role": "user", "parts": [{"text": "Fix the bug."}]}]
    settings = {"systemInstruction": {"parts": [{"text": "You are an agent."}]}, "generationConfig": {},
                "tools": [{"functionDeclarations": [{"name": "read_file"}]}]}  # fmt: skip
    for k in range(4):
        body = {"contents": contents, **settings}
        route = ":generateContent" if k % 2 == 0 else ":streamGenerateContent?alt=sse"
        status, answer = _post(url + "/v1beta/models/gemini-2.5-pro" + route, body)
        assert status == 200 and b'"usageMetadata"' in answer
        path, _, raw = upstream.seen[-1]
        sent = json.loads(raw)
        assert path == "/v1beta/models/gemini-2.5-pro" + route
        assert {key: v for key, v in sent.items() if key != "contents"} == settings
        places = [
            (i, j)
            for i, c in enumerate(contents)
            for j, p in enumerate(c["parts"])
            if "functionResponse" in p
        ]
        assert len(sent["contents"]) == len(contents)
        for i, (mine, theirs) in enumerate(zip(contents, sent["contents"], strict=True)):
            for j, (a, b) in enumerate(zip(mine["parts"], theirs["parts"], strict=True)):
                # last_n:n=1: every output hidden but the newest turn's two, which no call has read
                if (i, j) in places[:-2]:
                    ph = json.loads(b["functionResponse"]["response"]["output"])
                    assert ph["hidden"] is True and ph["estimated_tokens"] > 300
                    assert {**b["functionResponse"], "response": None} == {
                        **a["functionResponse"],
                        "response": None,
                    }
                else:
                    assert b == a
        contents = contents + _gemini_turn(k, ids)
    srv.shutdown()
    assert proxy.hidden_sent == 0 + 0 + 2 + 4
    (log,) = (tmp_path / "logs").glob("*.jsonl")
    _, traj = read_first(log)
    assert traj.model_raw == "gemini-2.5-pro"
    # each output with its own call, parallel calls without ids answered in order
    *calls, closing = traj.steps
    paths = [json.loads(s.tool_args)["file_path"] for s in calls]
    assert paths == [f"src/m{k}{half}.py" for k in range(3) for half in "ab"]
    assert [s.output.splitlines()[0] for s in calls] == [f"# module {k}{h}" for k in range(3) for h in "ab"]
    # the answer to the last request, which no request followed, logged when the proxy stopped
    assert closing.tool_name is None and closing.assistant_text == "ok"
    # Gemini's usage, answered whole or streamed, thinking counted as output as Gemini bills it
    usage = [s.usage for s in traj.steps if s.usage is not None]
    assert len(usage) == 4 and all(
        (u.input_tokens, u.cached_tokens, u.output_tokens) == (1500, 1200, 30) for u in usage
    )


def test_a_streamed_answer_arrives_as_the_upstream_sent_it(upstream):
    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), upstream)
    status, data = _post(url + "/v1/chat/completions", {"model": MODEL, "messages": HEAD, "stream": True})
    srv.shutdown()
    assert status == 200 and data == b"".join(SSE)


def test_unserved_models_and_unreadable_bodies_go_upstream_byte_for_byte(upstream):
    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), upstream)
    msgs = HEAD + _openai_turn(0) + _openai_turn(1) + _openai_turn(2)
    raw = json.dumps({"model": "acme-7", "messages": msgs}, indent=1).encode()
    assert _post(url + "/v1/chat/completions", None, raw=raw)[0] == 200
    assert upstream.seen[-1][2] == raw  # family 'other', no --prices: not managed
    bad = b'{"model": MODEL, "messages": ['
    status, answer = _post(url + "/v1/chat/completions", None, raw=bad)
    assert (status, upstream.seen[-1][2]) == (400, bad) and b"bad json" in answer  # the API's own error
    priced = ContextProxy(make_policy("last_n:n=1"), prices={"acme-7": _price()})
    url2, srv2 = _start(priced, upstream)
    _post(url2 + "/v1/chat/completions", {"model": "acme-7", "messages": msgs})
    assert priced.hidden_sent == 2  # priced by the user: managed
    srv.shutdown()
    srv2.shutdown()


def _price():
    from dtoc_rl.sim.pricing import Prices

    return Prices(1.0, 2.0, 0.1, 1.0)


def test_a_rewritten_history_starts_a_fresh_conversation_and_twins_stay_apart(upstream):
    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    a = HEAD + _openai_turn(0) + _openai_turn(1) + _openai_turn(2)
    _post(url + "/v1/chat/completions", {"model": MODEL, "messages": a})
    b = HEAD + _openai_turn(5) + _openai_turn(6)  # the same task, another run
    _post(url + "/v1/chat/completions", {"model": MODEL, "messages": b})
    assert len(proxy.mirrors) == 2
    _post(url + "/v1/chat/completions", {"model": MODEL, "messages": a + _openai_turn(3)})
    assert len(proxy.mirrors) == 2  # a continued
    compacted = HEAD + [{"role": "user", "content": "Summary of the work so far."}] + _openai_turn(4)
    status, _ = _post(url + "/v1/chat/completions", {"model": MODEL, "messages": compacted})
    srv.shutdown()
    assert status == 200 and len(proxy.mirrors) == 3


def test_two_runs_with_the_same_call_ids_but_other_outputs_stay_apart(upstream, tmp_path):
    """A task run twice with deterministic call ids sends the same messages up to the first output
    that differs; told apart by call ids alone, the second run would go on in the first's mirror."""
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    url, srv = _start(proxy, upstream)

    def run(tag: str, k: int) -> list[dict]:
        msgs = list(HEAD)
        for j in range(k):
            turn = _openai_turn(j)
            turn[1] = {**turn[1], "content": f"run {tag}\n" + turn[1]["content"]}
            msgs += turn
        return msgs

    for k in range(4):  # the two runs interleaved, call by call
        for tag in "ab":
            assert _post(url + "/v1/chat/completions", {"model": MODEL, "messages": run(tag, k)})[0] == 200
    srv.shutdown()
    assert len(proxy.mirrors) == 2
    logs = [log.read_text() for log in (tmp_path / "logs").glob("*.jsonl")]
    # one log a run, each with its own outputs only
    assert sorted(("run a" in t, "run b" in t) for t in logs) == [(False, True), (True, False)]

    # in any order of the two runs' calls, once each has sent an output it keeps its own conversation
    for order in ("abababab", "ababbaba", "aaaabbbb", "aabbbbaa", "abbbbaaa"):
        proxy = ContextProxy(make_policy("last_n:n=1"))
        sent = {"a": 0, "b": 0}
        names: dict[str, list[str]] = {"a": [], "b": []}
        for tag in order:
            rw = proxy.rewrite("openai", {"model": MODEL, "messages": run(tag, sent[tag])})
            names[tag].append(rw.conversation)
            sent[tag] += 1
        assert len(set(names["a"][1:])) == len(set(names["b"][1:])) == 1, order
        assert set(names["a"][1:]) != set(names["b"][1:]), order


def test_runs_the_agent_names_stay_apart_from_their_first_request_even_with_the_same_outputs(upstream):
    """The same task started twice with deterministic tools sends the same messages, call ids and
    outputs: only the run the agent names (X-DTOC-Session, Claude Code's session header, the body's
    prompt_cache_key or Anthropic metadata) tells them apart, and then from the first request."""
    from dtoc_rl.serve.proxy import session_of

    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    msgs = list(HEAD)
    names: dict[str, set] = {"a": set(), "b": set()}
    for k in range(4):
        for tag in "ab":
            _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs},
                  extra={"X-DTOC-Session": f"run-{tag}"})  # fmt: skip
            assert "x-dtoc-session" not in upstream.seen[-1][1]
            names[tag].add(next(reversed(proxy.mirrors)))
        msgs = msgs + _openai_turn(k)
    srv.shutdown()
    assert len(proxy.mirrors) == 2 and len(names["a"]) == len(names["b"]) == 1 and names["a"] != names["b"]
    # unnamed, such twins are one conversation until their outputs differ
    unnamed = ContextProxy(make_policy("last_n:n=1"))
    for body in ({"model": MODEL, "messages": HEAD}, {"model": MODEL, "messages": HEAD}):
        unnamed.rewrite("openai", body)
    assert len(unnamed.mirrors) == 1

    # what agents send: Codex's thread id as prompt_cache_key, Claude Code's session in its metadata,
    # each read as the same name its session header gives
    def header(value):
        return session_of("openai", {}, value)

    assert session_of("responses", {"prompt_cache_key": "019a-thread"}) == header("019a-thread")
    claude = {"metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s1"}'}}
    assert session_of("anthropic", claude) == header("s1")
    assert session_of("anthropic", {"metadata": {"user_id": "user_ab12_account_c3_session_s2"}}) == header(
        "s2"
    )
    assert session_of("anthropic", {"metadata": {"user_id": "u-42"}}) == header("u-42")
    assert session_of("anthropic", {"metadata": {"user_id": "{not json"}}) == header("{not json")
    assert session_of("anthropic", claude, "from-header") == header("from-header")
    assert session_of("openai", {"prompt_cache_key": 7}) is session_of("gemini", {}) is None
    assert header("x" * 300 + "a") != header("x" * 300 + "b")  # a long name is kept whole
    twins = ContextProxy(make_policy("last_n:n=1"))
    for key in ("a", "b", "a"):
        twins.rewrite("responses", {"model": "gpt-5", "prompt_cache_key": key, "input": "Fix the bug."})
    assert len(twins.mirrors) == 2


@pytest.mark.parametrize("keys", [(None, "s", "s", "s"), ("s", "s", None, "s"), ("s", None, None, "s")])
def test_a_run_that_names_itself_on_some_requests_only_stays_one_conversation(keys):
    """A request naming no run is matched by its messages, as without names, and a mirror takes the
    first name a request gives it: one run never splits into two conversations."""
    proxy = ContextProxy(make_policy("last_n:n=1"))
    msgs, names = list(HEAD), set()
    for k, key in enumerate(keys):
        names.add(proxy.rewrite("openai", {"model": MODEL, "messages": msgs}, session=key).conversation)
        msgs = msgs + _openai_turn(k)
    assert len(names) == 1 and len(proxy.mirrors) == 1
    # the mirror took the run's name: a twin at the same point, named otherwise, is not taken for it
    other = proxy.rewrite("openai", {"model": MODEL, "messages": msgs}, session="t").conversation
    assert other not in names


def test_claude_codes_session_header_names_the_run_and_ours_wins(upstream):
    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    body = {"model": MODEL, "messages": HEAD}
    for headers in ({"X-Claude-Code-Session-Id": "c1"}, {"X-Claude-Code-Session-Id": "c2"},
                    {"X-Claude-Code-Session-Id": "c1", "X-DTOC-Session": "ours"}):  # fmt: skip
        _post(url + "/v1/chat/completions", body, extra=headers)
    srv.shutdown()
    assert len(proxy.mirrors) == 3  # c1, c2, and "ours" (not c1: the header of our own comes first)
    assert upstream.seen[-1][1].get("x-claude-code-session-id") == "c1"  # the agent's own goes on


@pytest.mark.parametrize("keep", [1, 2])
def test_a_harness_that_clears_its_old_outputs_stays_one_conversation(keep):
    """Older results are the harness's to clear (Claude Code's microcompact, SWE-agent's last-n), at any
    request: only the newest results' text tells another run apart."""
    proxy = ContextProxy(make_policy("last_n:n=5"))

    def request(k: int) -> list[dict]:
        msgs = list(HEAD)
        for j in range(k):
            turn = _openai_turn(j)
            if j < k - keep:
                turn[1] = {**turn[1], "content": "[Old tool result content cleared]"}
            msgs += turn
        return msgs

    names = {
        proxy.rewrite("openai", {"model": MODEL, "messages": request(k)}).conversation for k in range(1, 6)
    }
    assert len(names) == 1 and len(proxy.mirrors) == 1
    # a mirror made mid-run (the proxy restarted) holds every result; clearing old ones goes on in it
    proxy = ContextProxy(make_policy("last_n:n=5"))
    whole = [m for k in range(4) for m in _openai_turn(k)]
    first = proxy.rewrite("openai", {"model": MODEL, "messages": HEAD + whole})
    later = HEAD + [m if m["role"] != "tool" else {**m, "content": "[cleared]"} for m in _openai_turn(0)]
    later += [m for k in range(1, 5) for m in _openai_turn(k)]
    assert proxy.rewrite("openai", {"model": MODEL, "messages": later}).conversation == first.conversation


def test_each_agents_logs_ingest_under_its_own_source(upstream, tmp_path):
    """Two agents logged into one folder: `evaluate --by source` tells their runs apart."""
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.serve.proxy import agent_source

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    url, srv = _start(proxy, upstream)
    for agent, task in (
        ("claude-cli/2.1.332 (external, cli)", "Fix the bug."),
        ("OpenAI/Python 1.99.0", "Go."),
    ):
        msgs = [HEAD[0], {"role": "user", "content": task}]
        for k in range(3):
            _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs}, agent=agent)
            msgs = msgs + _openai_turn(k)
    # two agents on one SDK name themselves with the proxy's header, which goes no further
    msgs = [HEAD[0], {"role": "user", "content": "Review."}]
    for k in range(2):
        _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs}, agent="OpenAI/Python 1.99.0",
              extra={"X-DTOC-Agent": "reviewer"})  # fmt: skip
        assert "x-dtoc-agent" not in upstream.seen[-1][1]
        msgs = msgs + _openai_turn(k)
    srv.shutdown()
    runs = ingest_paths([tmp_path / "logs"], progress=False).trajectories
    assert sorted(t.source for t in runs) == ["proxy:claude-cli", "proxy:openai", "proxy:reviewer"]
    assert agent_source(None) == agent_source("  /1.0") == "proxy"
    assert agent_source("GeminiCLI-tui/0.61.0/gemini-3 (linux; x64)") == "proxy:geminicli-tui"
    assert agent_source("My Agent!!/2") == "proxy:my"
    assert agent_source("a" * 39 + "-b/1") == "proxy:" + "a" * 39  # cut, then no dangling dash


def test_an_unreachable_upstream_is_a_502_naming_it():
    proxy = ContextProxy(make_policy("last_n:n=1"))
    srv = make_proxy_server(proxy, "http://127.0.0.1:9", port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    status, data = _post(f"http://127.0.0.1:{srv.server_address[1]}/v1/chat/completions",
                         {"model": MODEL, "messages": HEAD})  # fmt: skip
    srv.shutdown()
    err = json.loads(data)["error"]
    assert (
        status == 502 and err["type"] == "dtoc_proxy_upstream" and "127.0.0.1:9 not reached" in err["message"]
    )


def test_the_log_dir_holds_an_ingestible_log_with_the_usage_the_api_reported(upstream, tmp_path):
    from dtoc_rl.ingest import read_first

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    url, srv = _start(proxy, upstream)
    msgs = list(HEAD)
    for k in range(4):
        _post(url + "/v1/chat/completions", {"model": "gpt-4o-2024-08-06", "messages": msgs})
        msgs = msgs + _openai_turn(k)
    srv.shutdown()
    (log,) = (tmp_path / "logs").glob("*.jsonl")
    assert not list((tmp_path / "logs").glob("*.partial"))
    _, traj = read_first(log)
    # the fourth request's answer too, which no request followed: logged when the proxy stopped
    assert [s.tool_name for s in traj.steps] == ["bash"] * 3 + [None] and traj.task_text == "Fix the bug."
    assert traj.steps[-1].assistant_text == "ok"
    # the answers' usage: each call the proxy saw answered carries what the API reported for it
    usage = [s.usage for s in traj.steps if s.usage is not None]
    assert len(usage) == 4 and all(u.input_tokens == 1200 and u.cached_tokens == 1024 for u in usage)
    assert any(s.masked_before for s in traj.steps)  # what was hidden before each call, replayable


def test_a_log_folder_that_cannot_be_written_is_refused_at_start(tmp_path, capsys):
    """Found only at the first request, it would lose the whole session's logs with a warning."""
    from dtoc_rl.cli import main

    afile = tmp_path / "afile"
    afile.write_text("mine")
    for log_dir, why in ((afile, "not a folder"), (afile / "sub", "Not a directory")):
        argv = [
            "proxy",
            "--policy",
            "last_n:n=5",
            "--upstream",
            "http://127.0.0.1:9",
            "--log-dir",
            str(log_dir),
        ]
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"dtoc-rl: error: --log-dir: log folder {log_dir}: {why}"
    assert afile.read_text() == "mine"
    made = tmp_path / "new" / "logs"
    warned: list[str] = []
    ContextProxy(make_policy("none"), log_dir=made, warn=warned.append)
    assert made.is_dir() and not any(made.iterdir())  # made, and the probe file gone
    assert made.stat().st_mode & 0o077 == 0 and not warned  # the agent's outputs are its owner's to read


def test_logs_are_their_owners_alone_in_any_folder_and_one_others_can_write_to_is_said(tmp_path):
    import os

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    warned: list[str] = []
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=shared, warn=warned.append)
    (shared / "old.jsonl.partial").write_text("torn")  # a killed writer's, under a log's name below
    os.chmod(shared / "old.jsonl.partial", 0o644)
    old = os.umask(0)
    try:
        msgs = list(HEAD)
        for k in range(3):
            rw = proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
            proxy.answered(rw.conversation, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
            msgs = msgs + turn(k, f"out {k}\n" * 50)
        proxy.close_conversations()
        proxy.flush_logs()
        from dtoc_rl.data.paths import write_text_atomic

        write_text_atomic(shared / "old.jsonl", ["{}\n"], private=True)
        # a link planted under a log's .partial name (a folder others could write to) empties nothing
        victim = tmp_path / "victim.txt"
        victim.write_text("keep me")
        (shared / "planted.jsonl.partial").symlink_to(victim)
        write_text_atomic(shared / "planted.jsonl", ["{}\n"], private=True)
    finally:
        os.umask(old)
    assert victim.read_text() == "keep me" and victim.stat().st_mode & 0o777 != 0o600
    assert not (shared / "planted.jsonl").is_symlink()
    logs = sorted(shared.glob("*.jsonl"))
    assert len(logs) == 3 and all(p.stat().st_mode & 0o777 == 0o600 for p in logs)
    assert not warned and shared.stat().st_mode & 0o777 == 0o755  # the user's folder, left as it was
    shared.chmod(0o777)
    ContextProxy(make_policy("none"), log_dir=shared, warn=warned.append)
    assert warned == [
        f"log folder {shared} can be written by other users (mode 777): a log put there would be ingested "
        f"as one of yours: chmod go-w {shared}"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--upstream", "api.openai.com"], "--upstream must be an http:// or https:// URL"),
     (["--upstream", "https://api.openai.com", "--host", "0.0.0.0"], "not a loopback address"),
     (["--upstream", "https://a.b", "--max-conversations", "0"], "--max-conversations: must be at least 1"),
     (["--upstream", "https://a.b", "--timeout", "inf"], "--timeout: must be in (0, 604800]"),
     (["--upstream", "http://"], "URL with a host"),
     (["--upstream", "https://me:hunter2pw@api.openai.com"], "must not carry credentials"),
     (["--upstream", "http://127.0.0.1:99999"], "its port is no port number")],
)  # fmt: skip
def test_the_command_refuses_bad_settings_in_one_line(argv, message, capsys):
    from dtoc_rl.cli import main

    try:  # options of the wrong kind stop at argparse (SystemExit), the rest are refused by run()
        code = main(["proxy", "--policy", "last_n:n=5", *argv])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "hunter2pw" not in err  # a secret is never echoed


def test_a_model_call_over_the_cap_is_refused_another_request_is_not_and_a_silent_client_is_let_go(
    echo, monkeypatch
):
    import socket

    from dtoc_rl.serve import proxy as px

    monkeypatch.setattr(px, "MAX_BODY_BYTES", 64)
    monkeypatch.setattr(px, "CLIENT_IDLE_S", 0.5)
    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), echo)
    body = json.dumps({"model": MODEL, "messages": HEAD, "pad": "x" * 100}).encode()
    c = _conn(url)
    c.request("POST", "/v1/chat/completions", body=body)
    assert c.getresponse().status == 413
    c = _conn(url)
    c.request("POST", "/v1/files", body=body)  # an upload: not rewritten, so not capped
    r = c.getresponse()
    assert r.status == 200 and echo.seen[-1][3] == body
    host, port = url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n")  # and then nothing
        t0 = time.perf_counter()
        assert s.recv(1024) == b"" and time.perf_counter() - t0 < 4  # closed, not held
    srv.shutdown()


def _raw(url: str, request: bytes) -> bytes:
    import socket

    host, port = url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: s.recv(65536), b""))


def test_hostile_requests_get_a_status_and_reach_nothing_upstream(echo):
    from dtoc_rl.serve.proxy import MAX_BODY_BYTES

    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), echo)
    assert srv.request_queue_size >= 1024  # a burst of connections waits in the kernel
    before = len(echo.seen)
    call = b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n"
    huge = call + b"Content-Length: %d\r\n\r\n{}" % (MAX_BODY_BYTES + 1)
    assert _raw(url, huge).startswith(b"HTTP/1.1 413 ")  # a model call refused from its header, unread
    chunked = call + b"Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFF\r\n"
    assert _raw(url, chunked).startswith(b"HTTP/1.1 413 ")
    two = b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 30\r\n\r\n{}"
    two += b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
    assert _raw(url, two).startswith(b"HTTP/1.1 400 ")
    for target, said in (
        (b"http://evil.example/v1/chat/completions", b"a path, not a URL"),
        (b"/v1/../../admin", b". or .. segments"),
        (b"/v1/%2e%2e/admin", b". or .. segments"),
    ):
        got = _raw(url, b"POST " + target + b" HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
        assert got.startswith(b"HTTP/1.1 400 ") and said in got, target
    assert len(echo.seen) == before  # none of them went upstream
    same = b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"
    assert _raw(url, same).startswith(b"HTTP/1.1 200 ")  # the same length twice frames one body
    c = _conn(url)
    c.request(
        "POST", "/v1/x", body=b"{}", headers={"Connection": "keep-alive, X-Hop-Only", "X-Hop-Only": "s"}
    )
    c.getresponse().read()
    assert echo.headers_seen[-1].get("X-Hop-Only") is None  # named by Connection: this hop's only
    c = _conn(url)
    c.request("GET", "/hop")
    r = c.getresponse()
    r.read()
    assert r.getheader("X-Internal") is None
    # an integer no JSON reader takes (4,300+ digits): the request goes on as it came, not dropped
    body = (
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "seed": ' + b"9" * 5000 + b"}"
    )
    c = _conn(url)
    c.request("POST", "/v1/chat/completions", body=body)
    assert c.getresponse().status == 200 and echo.seen[-1][3] == body
    srv.shutdown()


def test_responses_requests_hide_call_outputs_and_leave_reasoning_items_as_they_are(upstream):
    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}
    ]
    for k in range(3):
        body = {"model": "gpt-5.2", "instructions": "You are Codex.", "input": items, "store": False}
        assert _post(url + "/v1/responses", body)[0] == 200
        sent = json.loads(upstream.seen[-1][2])
        outs = [(i, it) for i, it in enumerate(sent["input"]) if it["type"] == "function_call_output"]
        for n, (i, it) in enumerate(outs):
            hidden = n < len(outs) - 1
            assert (json.loads(it["output"])["hidden"] if hidden else it["output"]) == (
                True if hidden else items[i]["output"]
            )
        assert [it for it in sent["input"] if it["type"] != "function_call_output"] == [
            it for it in items if it["type"] != "function_call_output"
        ]  # reasoning (its encrypted content too), calls and messages as the agent sent them
        reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look"}],
                     "encrypted_content": f"gAAA{k}"}  # fmt: skip
        call = {"type": "function_call", "call_id": f"c{k}", "name": "shell", "arguments": '{"cmd": ["ls"]}'}
        items = items + [
            reasoning,
            call,
            {"type": "function_call_output", "call_id": f"c{k}", "output": "a\n" * 500},
        ]
    stateful = {"model": "gpt-5.2", "previous_response_id": "resp_1", "input": items[-1:]}
    raw = json.dumps(stateful).encode()
    _post(url + "/v1/responses", None, raw=raw)
    srv.shutdown()
    assert upstream.seen[-1][2] == raw and proxy.hidden_sent == 1


def test_a_streamed_answers_usage_is_read_as_it_passes_whatever_the_chunking():
    from dtoc_rl.serve.api_messages import StreamAnswer

    first = {"input_tokens": 40, "cache_read_input_tokens": 900, "output_tokens": 1}
    start = {"type": "message_start", "message": {"usage": first}}
    delta = {"type": "message_delta", "usage": {"output_tokens": 77}}
    stream = b"".join(b"event: x\ndata: " + json.dumps(e).encode() + b"\n\n" for e in (start, delta))
    for cut in (1, 7, 50, len(stream)):
        sniff = StreamAnswer()
        for i in range(0, len(stream), cut):
            sniff.feed(stream[i : i + cut])
        assert sniff.usage == {"input_tokens": 40, "cache_read_input_tokens": 900, "output_tokens": 77}
    chat = StreamAnswer()
    chat.feed(
        b'data: {"choices": [], "usage": null}\n\ndata: {"choices": [], "usage": {"prompt_tokens": 9}}\n\n'
    )
    chat.feed(b"data: [DONE]\n\n")
    assert chat.usage == {"prompt_tokens": 9}
    # Gemini's chunks each count the answer so far (CRLF between events), the last one all of it
    gemini = StreamAnswer()
    for n in (3, 9):
        chunk = {"candidates": [], "usageMetadata": {"promptTokenCount": 500, "candidatesTokenCount": n}}
        gemini.feed(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
    assert gemini.usage == {"promptTokenCount": 500, "candidatesTokenCount": 9} and not gemini.done
    last = {"candidates": [{"finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 500}}
    gemini.feed(b"data: " + json.dumps(last).encode() + b"\r\n\r\n")
    assert gemini.done  # its last chunk: the usage goes in before the agent has it


def test_the_openai_and_anthropic_sdks_work_through_it_unchanged(upstream):
    import anthropic
    import openai

    proxy = ContextProxy(make_policy("last_n:n=1"))
    url, srv = _start(proxy, upstream)
    oa = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    msgs = HEAD + _openai_turn(0) + _openai_turn(1)
    reply = oa.chat.completions.create(model=MODEL, messages=msgs)
    assert reply.choices[0].message.content == "ok" and reply.usage.prompt_tokens == 1200
    parts = [
        c.choices[0].delta.content
        for c in oa.chat.completions.create(model=MODEL, messages=msgs, stream=True)
    ]
    assert parts == ["o", "k"]
    sent = json.loads(upstream.seen[-1][2])["messages"]
    assert json.loads(sent[3]["content"])["hidden"] is True and sent[5] == msgs[5]
    an = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)

    def turn(k, text):
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "bash", "input": {"command": f"cat f{k}"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": text * 300}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    ask = [{"role": "user", "content": "Fix the bug."}, *turn(1, "a\n"), *turn(2, "b\n")]
    msg = an.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=ask)
    srv.shutdown()
    headers = upstream.seen[-1][1]
    assert msg.content[0].text == "ok" and "sk-ant-test" in headers.get(
        "x-api-key", headers.get("authorization")
    )
    sent = json.loads(upstream.seen[-1][2])["messages"]
    assert json.loads(sent[2]["content"][0]["content"])["hidden"] is True and sent[4] == ask[4]


def test_a_placeholder_tells_the_model_what_it_can_do_without_manage_context(repo_root):
    from dtoc_rl.core.record import POLICY_NOTE

    proxy = ContextProxy(make_policy("last_n:n=1"))
    body = {"model": MODEL, "messages": HEAD + _openai_turn(0) + _openai_turn(1)}
    sent = proxy.rewrite("openai", body).body["messages"]
    assert json.loads(sent[3]["content"])["note"] == POLICY_NOTE
    # the OpenCode plugin's placeholders say the same
    assert f'const NOTE = "{POLICY_NOTE}";' in (repo_root / "integrations/opencode/dtoc.js").read_text()


# ----------------------------------------------------------------------------- HTTP beyond the happy path


class _Echo(BaseHTTPRequestHandler):
    """Answers every method with what it received; a few paths misbehave on purpose."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.seen.append((self.command, self.path, self.headers.get_all("anthropic-beta"), body))
        self.server.headers_seen.append(self.headers)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/stolen")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/ndjson":
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in (b'{"a": 1}\n', b'{"b": 2}\n'):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.3)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/hop":  # a header this hop alone is to see, named by Connection
            self.send_response(200)
            self.send_header("Connection", "X-Internal")
            self.send_header("X-Internal", "upstream-only")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        if self.path == "/hints":  # an interim answer first, then the real one
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            self.wfile.flush()
        if self.path.startswith("/cut"):
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b'{"partial":')
            self.close_connection = True
            return
        out = json.dumps({"method": self.command, "type": self.headers.get("Content-Type")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _any


@pytest.fixture
def echo():
    yield from _serving(_Echo)


def _conn(url: str):
    import http.client

    return http.client.HTTPConnection(url.split("//", 1)[1], timeout=10)


def test_every_method_a_body_on_any_of_them_and_redirects_pass_as_they_come(echo):
    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), echo)
    c = _conn(url)  # one keep-alive connection for all of them
    for method in ("GET", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"):
        body = b'{"a": 1}' if method in ("GET", "DELETE", "PATCH") else None
        c.request(method, "/v1/files/x?q=1", body=body)
        r = c.getresponse()
        data = r.read()
        assert r.status == 200 and echo.seen[-1][:2] == (method, "/v1/files/x?q=1")
        assert echo.seen[-1][3] == (body or b"") and (
            data == b"" if method == "HEAD" else b'"method"' in data
        )
    c.request("POST", "/redirect", body=b"{}")
    r = c.getresponse()
    r.read()
    assert r.status == 302 and r.getheader("Location") == "http://127.0.0.1:9/stolen"
    assert [s[1] for s in echo.seen].count("/stolen") == 0  # not followed: the caller's keys stay home
    c.request("GET", "/health")
    assert b'"method": "GET"' in c.getresponse().read()  # the upstream's own /health
    c.request("GET", "/dtoc-proxy/health")
    assert json.loads(c.getresponse().read())["status"] == "ok"
    srv.shutdown()


def test_headers_repeated_or_absent_go_as_they_came_and_unknown_length_answers_stream(echo):
    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), echo)
    c = _conn(url)
    c.putrequest("POST", "/v1/x", skip_accept_encoding=True)
    for beta in ("prompt-caching-2024-07-31", "interleaved-thinking-2025-05-14"):
        c.putheader("anthropic-beta", beta)
    c.putheader("Content-Length", "2")
    c.endheaders(b"{}")
    answer = json.loads(c.getresponse().read())
    assert echo.seen[-1][2] == ["prompt-caching-2024-07-31", "interleaved-thinking-2025-05-14"]
    assert answer["type"] is None  # no Content-Type made up on the way
    c.request("GET", "/ndjson")
    r = c.getresponse()
    t0 = time.perf_counter()
    first = r.read1(100)
    assert first == b'{"a": 1}\n' and time.perf_counter() - t0 < 0.25  # as it arrives, not when it ends
    assert r.read() == b'{"b": 2}\n'
    c.request("GET", "/cut")  # passed on as it arrives: the agent sees it cut, as it would directly
    r = c.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    c = _conn(url)
    chat = json.dumps({"model": MODEL, "messages": HEAD}).encode()
    c.request("POST", "/cut/v1/chat/completions", body=chat)  # read whole for its usage: a 502 when cut
    r = c.getresponse()
    assert r.status == 502 and b"cut short" in r.read()
    old = _conn(url)
    old._http_vsn, old._http_vsn_str = 10, "HTTP/1.0"
    old.request("GET", "/ndjson")
    r = old.getresponse()
    assert r.getheader("Transfer-Encoding") is None and r.read() == b'{"a": 1}\n{"b": 2}\n'
    srv.shutdown()


class _Slow:
    """last_n:n=1, slowly: two requests of one conversation meet inside the decision."""

    label = "slow"

    def __init__(self):
        self.inner = make_policy("last_n:n=1")

    def act(self, obs, info):
        time.sleep(0.3)
        return self.inner.act(obs, info)


def test_two_requests_branching_from_one_history_at_once_each_hide_their_own_outputs(upstream):
    import math

    proxy = ContextProxy(_Slow())
    url, srv = _start(proxy, upstream)
    shared = HEAD + _openai_turn(0) + _openai_turn(1)
    chat = url + "/v1/chat/completions"
    branches = [shared + _openai_turn(3) + _openai_turn(4), shared + _openai_turn(9, lines=100)]
    first = threading.Thread(target=_post, args=(chat, {"model": MODEL, "messages": shared}))
    first.start()
    time.sleep(0.1)  # both branches arrive while the shared history's own call is being decided
    threads = [threading.Thread(target=_post, args=(chat, {"model": MODEL, "messages": b})) for b in branches]
    for t in threads:
        t.start()
    for t in [first, *threads]:
        t.join()
    srv.shutdown()
    for _, _, raw in upstream.seen[1:]:
        sent = json.loads(raw)["messages"]
        mine = next(b for b in branches if len(b) == len(sent))
        for theirs, original in zip(sent, mine, strict=True):
            if theirs.get("role") == "tool" and theirs["content"] != original["content"]:
                ph = json.loads(theirs["content"])  # the placeholder of this very output
                assert ph["estimated_tokens"] == math.ceil(len(original["content"]) / 4)
        assert sent[-1] == mine[-1]  # the newest output, unread, is never hidden


def test_text_no_utf_8_holds_and_a_log_that_cannot_be_written_cost_the_log_not_the_hiding(upstream, tmp_path):
    warned = []
    gone = tmp_path / "gone"
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=gone, warn=warned.append)
    gone.rmdir()  # writable at start (checked then), a file by the time the first answer is logged
    gone.write_text("x")
    url, srv = _start(proxy, upstream)
    turns = _openai_turn(0) + _openai_turn(1)
    turns[1]["content"] += "\ud800"  # a lone surrogate, as a JSON escape from the agent
    raw = json.dumps({"model": MODEL, "messages": HEAD + turns + _openai_turn(2)}).encode()
    assert _post(url + "/v1/chat/completions", None, raw=raw)[0] == 200
    sent = json.loads(upstream.seen[-1][2])["messages"]
    assert json.loads(sent[3]["content"])["hidden"] is True and proxy.hidden_sent == 2
    proxy.flush_logs()
    assert len(warned) == 1 and "not logged" in warned[0]
    ok = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    ok.rewrite("openai", json.loads(raw))
    ok.flush_logs()
    (log,) = (tmp_path / "logs").iterdir()  # the mirror's copy has U+FFFD for it: a log any reader reads
    assert log.suffix == ".jsonl" and "\ufffd" in json.loads(log.read_text())["messages"][3]["content"]
    srv.shutdown()


def test_conversations_are_followed_through_dropped_reasoning_empty_requests_and_reused_ids(
    upstream, tmp_path
):
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    assert proxy.rewrite("openai", {"model": MODEL, "messages": []}).passed == "no messages"
    turns = _openai_turn(0) + _openai_turn(1)
    turns[0]["reasoning_content"] = "thinking about f0"
    proxy.rewrite("openai", {"model": MODEL, "messages": HEAD + turns})
    turns[0] = {k: v for k, v in turns[0].items() if k != "reasoning_content"}  # dropped, as DeepSeek asks
    proxy.rewrite("openai", {"model": MODEL, "messages": HEAD + turns + _openai_turn(2)})
    assert len(proxy.mirrors) == 1
    # the same id called twice, the first never answered: the result is the second call's
    call = _openai_turn(5)[0]
    again = [
        call,
        {"role": "user", "content": "go on"},
        call,
        {"role": "tool", "tool_call_id": "call_5", "content": "x"},
    ]
    proxy.rewrite("openai", {"model": MODEL, "messages": HEAD + [{"role": "user", "content": "b"}] + again})
    (orch,) = [m.orch for m in proxy.mirrors.values() if m.orch.task_id != next(iter(proxy.mirrors))]
    steps = orch.trajectory().steps
    assert [s.output for s in steps] == [None, "x"] and orch.trajectory().task_text == "Fix the bug."
    # a restarted proxy never writes over the logs of this one
    again_proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    again_proxy.started = "later"
    again_proxy.rewrite("openai", {"model": MODEL, "messages": HEAD + _openai_turn(0)})
    assert proxy.flush_logs() and again_proxy.flush_logs()
    assert len(list(tmp_path.glob("*.jsonl"))) == 3


def test_the_command_serves_and_stops_on_sigterm(upstream, tmp_path):
    import signal
    import subprocess
    import sys

    up = f"http://127.0.0.1:{upstream.server_address[1]}"
    cmd = [sys.executable, "-c", "import sys; from dtoc_rl.cli import main; sys.exit(main())", "proxy",
           "--policy", "last_n:n=1", "--port", "0", "--json", "--upstream", up,
           "--log-dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        msgs = HEAD + _openai_turn(0) + _openai_turn(1)
        assert _post(info["url"] + "/v1/chat/completions", {"model": MODEL, "messages": msgs})[0] == 200
        assert json.loads(json.loads(upstream.seen[-1][2])["messages"][3]["content"])["hidden"] is True
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert len(list(tmp_path.glob("*.jsonl"))) == 1


def test_a_checkpoint_of_one_family_manages_that_family_only_and_a_broken_policy_fails_at_start(tmp_path):
    from dtoc_rl.cli import main
    from dtoc_rl.cli.serve import trained_families
    from dtoc_rl.policies.learned import LearnedPolicyConfig

    ckpt = LearnedPolicyConfig(n_layers=1, d_model=32, threshold=0.99, model_family="claude-sonnet").create()
    proxy = ContextProxy(ckpt, families=trained_families(ckpt))
    msgs = HEAD + _openai_turn(0) + _openai_turn(1) + _openai_turn(2)
    assert proxy.rewrite("openai", {"model": MODEL, "messages": msgs}).passed.startswith("model 'gpt-4o")
    assert proxy.rewrite("openai", {"model": "claude-sonnet-4-5", "messages": msgs}).passed is None
    proxy.check()  # a working policy passes, and leaves no conversation behind
    assert len(proxy.mirrors) == 1

    class Broken:
        def act(self, obs, info):
            raise RuntimeError("weights missing")

    with pytest.raises(RuntimeError, match="weights missing"):
        ContextProxy(Broken()).check()
    (tmp_path / "mod.py").write_text(
        "class Broken:\n    def act(self, obs, info):\n        raise KeyError('w')\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["proxy", "--policy", "mod:Broken", "--upstream", "http://127.0.0.1:9"]) == 2
    finally:
        sys.path.remove(str(tmp_path))


def test_a_tool_named_manage_context_is_the_orchestrators_and_shifts_no_other_output(upstream):
    proxy = ContextProxy(make_policy("last_n:n=5"))
    mc = {
        "id": "m1",
        "type": "function",
        "function": {"name": "manage_context", "arguments": '{"enable": []}'},
    }
    bash = {"id": "b1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = HEAD + [{"role": "assistant", "content": "", "tool_calls": [mc, bash]},
                   {"role": "tool", "tool_call_id": "m1", "content": '{"ok": true}'},
                   {"role": "tool", "tool_call_id": "b1", "content": "a.py"}]  # fmt: skip
    proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
    (mirror,) = proxy.mirrors.values()
    assert [s.output for s in mirror.orch.trajectory().steps if s.tool_name == "bash"] == ["a.py"]


def test_usage_of_a_streamed_or_unsized_answer_reaches_the_log_before_the_next_call(tmp_path):
    class Chunky(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            stream = body.get("stream")
            self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            n = len(body["messages"])
            if stream:
                usage = {"prompt_tokens": 100 * n, "completion_tokens": 1}
                parts = [b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n",
                         b"data: [DONE]\n\n"]  # fmt: skip
            else:
                parts = [json.dumps({"choices": [], "usage": {"prompt_tokens": 100 * n}}).encode()]
            for part in parts:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")

    gen = _serving(Chunky)
    up = next(gen)
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path)
    url, srv = _start(proxy, up)
    msgs = list(HEAD)
    for k in range(4):
        _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs, "stream": k % 2 == 1})
        msgs = msgs + _openai_turn(k)
    srv.shutdown()
    (log,) = tmp_path.glob("*.jsonl")
    from dtoc_rl.ingest import read_first

    _, traj = read_first(log)
    assert [s.usage.input_tokens for s in traj.steps] == [200, 400, 600]  # each call's own, streamed or not
    next(gen, None)


def test_a_forward_proxy_from_the_environment_gets_the_whole_url_and_its_credentials(monkeypatch):
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.server.seen.append((self.requestline, self.headers.get("Proxy-Authorization")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    gen = _serving(Forward)
    fwd = next(gen)
    for var in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://me:s%40cret@127.0.0.1:{fwd.server_address[1]}")
    proxy = ContextProxy(make_policy("last_n:n=1"))
    srv = make_proxy_server(proxy, "http://api.example.invalid:8000/base", port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    c = _conn(f"http://127.0.0.1:{srv.server_address[1]}")
    c.request("GET", "/v1/models")
    assert c.getresponse().status == 200
    srv.shutdown()
    line, auth = fwd.seen[-1]
    assert line == "GET http://api.example.invalid:8000/base/v1/models HTTP/1.1"
    import base64

    assert auth == "Basic " + base64.b64encode(b"me:s@cret").decode()
    next(gen, None)


def test_what_the_proxy_hid_live_is_priced_from_its_log_as_the_same_policy_offline(tmp_path):
    """A conversation through the proxy under last_n:n=2, logged; the log ingested and replayed with
    `logged` (its own visibility) bills as last_n:n=2 run offline on it, and saves against `none`."""
    from dtoc_rl.ingest.driver import ingest_paths
    from dtoc_rl.policies.evaluate import evaluate

    proxy = ContextProxy(make_policy("last_n:n=2"), log_dir=tmp_path / "logs")
    msgs = list(HEAD)
    for k in range(7):
        proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
        msgs = msgs + _openai_turn(k, lines=60 + 40 * k)
    proxy.rewrite("openai", {"model": MODEL, "messages": msgs})
    proxy.flush_logs()
    res = ingest_paths([tmp_path / "logs"], progress=False)
    (traj,) = res.trajectories
    assert sum(bool(s.masked_before) for s in traj.steps) >= 4  # the log says what was hidden at each call
    runs = {r.policy: r for r in evaluate([traj], ["logged", "last_n:n=2", "none"], progress=False)}
    live, offline, nothing = runs["logged"], runs["last_n:n=2"], runs["none"]
    assert (live.dollars, live.misses, live.input_tokens) == (
        offline.dollars,
        offline.misses,
        offline.input_tokens,
    )
    assert live.dollars < nothing.dollars


def test_interim_answers_bad_bodies_and_bare_proxy_settings(echo, monkeypatch, tmp_path):
    from dtoc_rl.policies.learned import LearnedPolicyConfig
    from dtoc_rl.serve.api_messages import StreamAnswer
    from dtoc_rl.serve.proxy import _Upstream

    url, srv = _start(ContextProxy(make_policy("last_n:n=1")), echo)
    c = _conn(url)
    for path in ("/hints", "/v1/after"):  # the 103 is passed over, and the next answer is the next one's
        c.request("POST", path, body=b"{}")
        r = c.getresponse()
        assert (r.status, json.loads(r.read())["method"]) == (200, "POST")
    assert [x[1] for x in echo.seen[-2:]] == ["/hints", "/v1/after"]
    before = len(echo.seen)
    for head in (b"Content-Length: 1000\r\n\r\n" + b"x" * 40, b"Content-Length: abc\r\n\r\n",
                 b"Content-Length: \xb2\r\n\r\n", b"Transfer-Encoding: chunked\r\n\r\n-1\r\n",
                 b"Transfer-Encoding: chunked\r\n\r\n5\r\nBBBBB"):  # fmt: skip
        import socket

        sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)
        sock.sendall(b"PUT /v1/x HTTP/1.1\r\nHost: x\r\n" + head)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):  # the proxy closes the connection after it
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 400") and b"dtoc_proxy_request" in answer
    assert len(echo.seen) == before  # nothing of a cut body went upstream
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)
    sock.sendall(b"GET /v1/files?name=caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while sock.recv(4096):
        pass
    sock.close()
    assert echo.seen[-1][1] == "/v1/files?name=caf%C3%A9"  # a raw byte in the target, sent encoded
    srv.shutdown()
    monkeypatch.setenv("HTTPS_PROXY", "proxy.corp:3128")  # no scheme, as curl and requests take it
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    up = _Upstream("https://api.example.invalid", 5.0)
    assert (up.via.hostname, up.via.port) == ("proxy.corp", 3128)
    # a checkpoint of a family whose name is no model name still starts
    ContextProxy(LearnedPolicyConfig(n_layers=1, d_model=32, model_family="openai-o").create(),
                 families={"openai-o"}).check()  # fmt: skip
    sniff = StreamAnswer()
    sniff.feed(b'data: {"type": "response.incomplete", "response": {"usage": {"input_tokens": 7}}}\n\n')
    assert sniff.done and sniff.usage == {"input_tokens": 7}


def test_which_requests_are_model_calls_of_which_api():
    from dtoc_rl.serve.proxy import _api_of

    vertex = (
        "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    )
    assert _api_of("POST", vertex + "?alt=sse") == "gemini"
    assert _api_of("POST", "/v1beta/models/gemini-2.5-flash:generateContent") == "gemini"
    for other in (":countTokens", ":embedContent", ":batchEmbedContents"):  # no model call to manage
        assert _api_of("POST", "/v1beta/models/gemini-2.5-pro" + other) is None
    assert _api_of("GET", "/v1beta/models/gemini-2.5-pro:generateContent") is None
    assert (
        _api_of("POST", "/v1/messages/count_tokens") is None
        and _api_of("POST", "/v1/messages") == "anthropic"
    )
    assert (
        _api_of("POST", "/v1/responses") == "responses"
        and _api_of("POST", "/v1/chat/completions") == "openai"
    )


def test_gemini_conversations_without_call_ids_stay_apart_and_odd_spellings_are_managed(upstream):
    """Call ids the proxy made up (gemini-call-N) name no call outside their conversation: two runs of
    one task, calls alike and outputs not, are two conversations.  The proto's snake_case spelling is
    managed and written back as it came; a hidden response's own parts (an image) go with it."""
    warned: list[str] = []
    proxy = ContextProxy(make_policy("last_n:n=1"), warn=warned.append)
    url, srv = _start(proxy, upstream)

    def run(tag: str, snake: bool = False):
        """Posts the run's first request, then (when resumed) its second; yields what went upstream."""
        contents: list[dict] = [{"role": "user", "parts": [{"text": "Fix the bug."}]}]
        for k in range(3):
            for c in _gemini_turn(k, ids=False):
                contents.append(json.loads(json.dumps(c).replace("# module", f"# {tag} module")))
        contents[2]["parts"][0]["functionResponse"]["parts"] = [{"inlineData": {"data": "A" * 5000}}]

        def spelled(body: dict) -> dict:
            text = json.dumps(body)
            if snake:  # the proto's field names, which the API takes too
                text = text.replace('"functionCall"', '"function_call"')
                text = text.replace('"functionResponse"', '"function_response"')
            return json.loads(text)

        _post(url + "/v1beta/models/gemini-2.5-pro:generateContent", spelled({"contents": contents}))
        yield json.loads(upstream.seen[-1][2])
        contents.append({"role": "model", "parts": [{"text": "ok"}]})
        contents.append({"role": "user", "parts": [{"text": "go on"}]})
        _post(url + "/v1beta/models/gemini-2.5-pro:generateContent", spelled({"contents": contents}))
        yield json.loads(upstream.seen[-1][2])

    a, b = run("A"), run("B")
    next(a), next(b)  # the two runs' first requests alike but for the outputs' text, then each goes on
    next(a)
    sent = next(b)
    assert len(proxy.mirrors) == 2  # not one conversation fed both runs' outputs
    stored = [m.orch.store.get(k).tool_result for m in proxy.mirrors.values() for k in m.orch.store.keys()]
    assert sum("# A module" in t for t in stored) == sum("# B module" in t for t in stored) == 6
    hidden = [p["functionResponse"] for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    assert all("# B module" not in json.dumps(h) for h in hidden[:-1])  # B's own outputs, hidden
    assert all(json.loads(h["response"]["output"])["hidden"] for h in hidden[:-1])  # the image's too
    assert "parts" not in hidden[0] and "AAAA" not in json.dumps(sent)
    *_, snake = run("C", snake=True)
    parts = [p for c in snake["contents"] for p in c["parts"]]
    assert not any("functionResponse" in p for p in parts)  # written back in the spelling it came in
    answers = [p["function_response"]["response"]["output"] for p in parts if "function_response" in p]
    assert [a.startswith('{"tool_key"') for a in answers] == [True] * 5 + [False]
    assert not warned
    status, _ = _post(
        url + "/v1beta/models/gemini-2.5-pro:generateContent", {"contents": [{"role": "system"}]}
    )
    srv.shutdown()
    assert status == 200 and len(warned) == 1 and "contents were not read" in warned[0]  # said, and sent on


def test_a_side_question_about_the_conversation_does_not_split_it(upstream, tmp_path):
    """A harness may ask a model about its conversation (Gemini CLI's next-speaker and loop checks:
    the history and one more user text), then go on without that text: the conversation goes on in
    the same mirror and the same log, its outputs still hidden, not shown again in a new one."""
    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    url, srv = _start(proxy, upstream)
    msgs = list(HEAD)
    for k in range(3):
        msgs = msgs + _openai_turn(k)
        _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs})
    msgs = msgs + [{"role": "assistant", "content": "The tests pass now."}]
    side = msgs + [{"role": "user", "content": "Who speaks next? Answer as JSON."}]
    _post(url + "/v1/chat/completions", {"model": MODEL, "messages": side})
    for k in range(3, 5):
        msgs = msgs + ([{"role": "user", "content": "Please continue."}] if k == 3 else []) + _openai_turn(k)
        _post(url + "/v1/chat/completions", {"model": MODEL, "messages": msgs})
    srv.shutdown()
    assert len(proxy.mirrors) == 1 and len(list((tmp_path / "logs").glob("*.jsonl"))) == 1
    sent = json.loads(upstream.seen[-1][2])["messages"]
    outputs = [m["content"] for m in sent if m["role"] == "tool"]
    assert len(outputs) == 5 and all(json.loads(o)["hidden"] for o in outputs[:-1])
    assert proxy.hidden_sent == 0 + 1 + 2 + 2 + 3 + 4


def test_a_hidden_gemini_failure_stays_one_and_a_json_list_stream_gives_its_usage(tmp_path):
    from dtoc_rl.ingest import read_first
    from dtoc_rl.serve.api_messages import gemini_events

    proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=tmp_path / "logs")
    contents: list[dict] = [{"role": "user", "parts": [{"text": "Fix the bug."}]}]
    turns = [_gemini_turn(k) for k in range(2)]
    turns[0][1]["parts"][0]["functionResponse"]["response"] = {"error": "Traceback ...\n" * 200}
    for gemini_turn in turns:
        contents += gemini_turn
    rw = proxy.rewrite("gemini", {"contents": contents}, "gemini-2.5-pro")
    failed = rw.body["contents"][2]["parts"][0]["functionResponse"]["response"]
    assert list(failed) == ["error"] and json.loads(failed["error"])["hidden"] is True
    assert next(e.is_error for e in gemini_events(rw.body) if e.kind == "tool") is True
    # Gemini's stream without alt=sse is one JSON list of chunks: the last counts the whole answer
    chunks = [{"candidates": [], "usageMetadata": {"promptTokenCount": 700, "candidatesTokenCount": n}}
              for n in (2, 11)]  # fmt: skip
    proxy.answered(rw.conversation, chunks)
    contents += [{"role": "model", "parts": [{"text": "Done."}]}, {"role": "user", "parts": [{"text": "ok"}]}]
    proxy.rewrite("gemini", {"contents": contents}, "gemini-2.5-pro")
    proxy.flush_logs()
    (log,) = (tmp_path / "logs").glob("*.jsonl")
    _, traj = read_first(log)
    assert traj.steps[-1].usage.input_tokens == 700 and traj.steps[-1].usage.output_tokens == 11


def test_an_upstream_that_refuses_a_body_before_reading_it_has_its_answer_passed_on(monkeypatch):
    # a server that answers 413 on the headers alone and closes: the proxy's send of the body breaks,
    # and the answer already on the socket is what the agent gets (not a 502)
    import socket

    from dtoc_rl.serve import proxy as proxy_module

    refusal = b'{"error": {"type": "request_too_large", "message": "too big"}}'

    def refuse(listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            head = b""
            while b"\r\n\r\n" not in head and (chunk := conn.recv(65536)):
                head += chunk
            head = b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\n"
            conn.sendall(
                head + b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(refusal), refusal)
            )
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.2)
            conn.close()  # the body unread

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    threading.Thread(target=refuse, args=(listener,), daemon=True).start()
    early = []
    plain = proxy_module._ProxyHandler._early_answer

    def spy(self):
        answer = plain(self)
        early.append(answer is not None)
        return answer

    monkeypatch.setattr(proxy_module._ProxyHandler, "_early_answer", spy)
    srv = make_proxy_server(
        ContextProxy(make_policy("last_n:n=1")), f"http://127.0.0.1:{listener.getsockname()[1]}", port=0
    )
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    huge = {"model": MODEL, "messages": [*HEAD, {"role": "user", "content": "x" * 24_000_000}]}
    for _ in range(2):  # and the proxy still answers after it
        status, data = _post(f"http://127.0.0.1:{srv.server_address[1]}/v1/chat/completions", huge)
        assert (status, data) == (413, refusal)
    srv.shutdown()
    listener.close()
    assert early == [True, True]


def test_a_model_not_served_is_said_once_and_counted_and_managed_requests_are_logged(upstream):
    warned, logged = [], []
    proxy = ContextProxy(make_policy("last_n:n=5"), warn=warned.append, log=logged.append)
    url, srv = _start(proxy, upstream)
    for _ in range(2):
        body = {"model": "my-company-llm", "messages": HEAD + _openai_turn(0)}
        assert _post(url + "/v1/chat/completions", body)[0] == 200
    assert warned == [
        "requests of model 'my-company-llm' (family 'other') is not served: give --prices for it; "
        "they are passed on unmanaged"
    ]
    assert _post(url + "/v1/chat/completions", {"model": MODEL, "messages": HEAD + _openai_turn(0)})[0] == 200
    # a managed request with nothing to hide is logged too: it was managed, not passed on
    assert re.fullmatch(r"\S+-c\d+-\w+: 1 outputs, 0 sent hidden, decided in [\d.]+ ms", logged[-1]), logged
    c = _conn(url)
    c.request("GET", "/dtoc-proxy/health")
    assert json.loads(c.getresponse().read())["unmanaged"] == 2
    srv.shutdown()


def test_an_upstream_that_ends_in_its_api_version_is_said():
    from dtoc_rl.serve.proxy import versioned_upstream

    said = versioned_upstream("https://openrouter.ai/api/v1/")
    assert said and "would get /api/v1/v1/...; the usual form is https://openrouter.ai/api" in said
    assert versioned_upstream("https://api.openai.com") is None
    assert versioned_upstream("https://openrouter.ai/api") is None


def test_the_proxy_and_the_service_take_only_what_can_decide_live():
    from dtoc_rl.policies.baselines import NoManagement
    from dtoc_rl.serve.service import DecisionService

    for make in (ContextProxy, DecisionService):
        with pytest.raises(ValueError, match="decides from the whole logged run"):
            make(make_policy("oracle"))
        with pytest.raises(TypeError, match="NoManagement is a class"):
            make(NoManagement)
    with pytest.raises(ValueError, match="decides from the whole logged run"):
        DecisionService(make_policy("none"), fallback=make_policy("logged"))


def test_a_rule_that_reads_no_prices_manages_and_logs_a_model_of_no_known_price(tmp_path):
    """`--policy none` logs the runs to compare against, whatever their model; a policy that prices
    its decisions still needs the model's prices."""
    from dtoc_rl.cli.serve import trained_families
    from dtoc_rl.ingest.driver import ingest_paths

    assert trained_families(make_policy("cache_clear")) is None
    for spec in ("none", "last_n:n=1", "hide_big:tokens=100"):
        families = trained_families(make_policy(spec))
        assert "other" in families, spec
    proxy = ContextProxy(
        make_policy("last_n:n=1"), families=trained_families(make_policy("none")), log_dir=tmp_path
    )
    msgs = list(HEAD)
    for k in range(3):
        rw = proxy.rewrite("openai", {"model": "acme-coder-2", "messages": msgs})
        assert rw.passed is None
        proxy.answered(rw.conversation, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
        msgs = msgs + turn(k, f"out {k}\n" * 50)
    proxy.close_conversations()
    proxy.flush_logs()
    (t,) = ingest_paths([tmp_path], progress=False).trajectories
    assert t.model_raw == "acme-coder-2" and t.model_family == "other"
    assert [s.tool_name for s in t.steps] == ["bash", "bash", None] and t.steps[2].masked_before == [0]


def test_the_prices_a_proxy_was_given_are_in_its_logs_and_bill_them(tmp_path, capsys):
    """A model of no known price, priced by the proxy's --prices: evaluate bills its logged runs at
    those prices without being told them again (--prices still overrides)."""
    from dtoc_rl.cli import main
    from dtoc_rl.sim.pricing import Prices

    mine = Prices(input=2.0, output=8.0, cache_read=0.2, cache_write=2.5)
    proxy = ContextProxy(make_policy("last_n:n=1"), prices={"acme-coder-2": mine}, log_dir=tmp_path / "logs")
    msgs = list(HEAD)
    for k in range(4):
        rw = proxy.rewrite("openai", {"model": "acme-coder-2", "messages": msgs})
        proxy.answered(rw.conversation, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
        msgs = msgs + turn(k, f"out {k}\n" * 200)
    proxy.close_conversations()
    proxy.flush_logs()
    # a model the price table prices keeps its list prices: another run of its name in the dataset
    # may not have been decided at what one log gives
    listed = ContextProxy(make_policy("none"), prices={MODEL: mine}, log_dir=tmp_path / "logs" / "other")
    rw = listed.rewrite("openai", {"model": MODEL, "messages": HEAD + turn(0, "x\n" * 50)})
    listed.answered(rw.conversation, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
    listed.close_conversations()
    listed.flush_logs()
    assert main(["ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "d"), "--quiet"]) == 0
    capsys.readouterr()
    from dtoc_rl.cli.evaluate import logged_prices

    assert set(logged_prices(tmp_path / "d", quiet=True)) == {"acme-coder-2"}

    def billed(*extra):
        argv = ["evaluate", "--dataset", str(tmp_path / "d"), "-p", "none", "--json", "--quiet",
                "--by", "model_family", *extra]  # fmt: skip
        assert main(argv) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        return next(r["dollars"] for r in rows if r["policy"] == "none" and r["group"] == "other")

    entry = json.dumps({"acme-coder-2": {"input": 2.0, "output": 8.0, "cache_read": 0.2, "cache_write": 2.5}})
    assert billed() == pytest.approx(billed("--prices", entry))
    tenfold = json.dumps({"acme-coder-2": {"input": 20, "output": 80, "cache_read": 2, "cache_write": 25}})
    assert billed("--prices", tenfold) == pytest.approx(10 * billed())


def test_the_proxy_answers_without_nagles_delay(upstream, monkeypatch):
    """Each answer goes out in several writes; with Nagle's algorithm on, a kept-alive client's delayed
    ACK held each request back about 40 ms (measured on loopback), so the proxy's sockets send at once."""
    import socket

    from dtoc_rl.serve import proxy as proxy_module

    flags = []
    setup = proxy_module._ProxyHandler.setup

    def recorded(self):
        setup(self)
        flags.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    monkeypatch.setattr(proxy_module._ProxyHandler, "setup", recorded)
    url, srv = _start(ContextProxy(policy=make_policy("none")), upstream)
    try:
        status, _ = _post(url + "/v1/chat/completions", {"model": MODEL, "messages": _openai_turn(0)})
        assert status == 200 and flags and all(flags)
    finally:
        srv.shutdown()
        srv.server_close()
