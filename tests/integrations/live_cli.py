"""What the tests of real agent CLIs through ``dtoc-rl proxy`` share: a scripted API served on a local
port, a folder of files for the agent to read, and one task run twice, straight at the API and then
through the proxy under ``last_n:n=1`` (every output but the newest hidden), with the requests the
API received each time."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.proxy import ContextProxy, make_proxy_server

FILES = ("alpha.txt", "beta.txt", "gamma.txt")
ANSWER = "Read all three files."
#: What the scripted chat-completions API reports for every call.
CHAT_USAGE = {
    "prompt_tokens": 9000,
    "completion_tokens": 12,
    "prompt_tokens_details": {"cached_tokens": 8000},
}


def serve(server: ThreadingHTTPServer) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def repo(tmp_path: Path) -> Path:
    """A folder holding ``FILES``, 150 numbered lines each."""
    folder = tmp_path / "repo"
    folder.mkdir()
    for name in FILES:
        (folder / name).write_text(
            "".join(f"{name} line {j}: " + "lorem ipsum " * 8 + "\n" for j in range(150))
        )
    return folder


def fresh_home(home: Path) -> Path:
    """An empty home at the same path for each run: CLIs write its path into their prompts."""
    for _ in range(50):  # a CLI's daemon left from the run before (Cline's hub) may still write there
        shutil.rmtree(home, ignore_errors=True)
        try:
            home.mkdir(parents=True)
            return home
        except FileExistsError:
            time.sleep(0.1)
    raise RuntimeError(f"{home}: something keeps writing into it")


@dataclass
class Runs:
    direct: Any  # what the CLI printed, straight at the API
    via: Any  # ... and through the proxy
    straight: list[dict]  # the agent's own model calls the API received, straight
    through: list[dict]  # ... and through the proxy
    proxy: ContextProxy


def straight_and_through(
    api_handler: type[BaseHTTPRequestHandler],
    run: Callable[[str], Any],
    calls: Callable[[list[tuple[str, dict]]], list[dict]],
    logs: Path,
    **api_attrs: Any,
) -> Runs:
    """``run(base_url)`` once against the scripted API, once through a proxy in front of it (its logs
    in ``logs``); ``calls`` picks the agent's model calls out of the API's ``(path, body)`` list."""
    api = ThreadingHTTPServer(("127.0.0.1", 0), api_handler)
    api.seen = []
    for k, v in api_attrs.items():
        setattr(api, k, v)
    url = serve(api)
    try:
        direct = run(url)
        straight = calls(api.seen)
        api.seen.clear()
        proxy = ContextProxy(make_policy("last_n:n=1"), log_dir=logs)
        proxied = make_proxy_server(proxy, url, port=0)
        try:
            via = run(serve(proxied))
        finally:
            proxied.shutdown()
            proxied.server_close()
        return Runs(direct, via, straight, calls(api.seen), proxy)
    finally:
        api.shutdown()
        api.server_close()


def same_calls(runs: Runs, comparable: Callable[[dict], dict]) -> list[tuple[dict, dict]]:
    """Each model call made straight beside the same call made through the proxy, once checked that
    the task took one call per file and one to answer both times, and that each pair is alike but for
    what ``comparable`` leaves out (the outputs, ids that differ run to run)."""
    assert len(runs.straight) == len(runs.through) == len(FILES) + 1
    pairs = list(zip(runs.straight, runs.through, strict=True))
    for alone, proxied in pairs:
        assert comparable(proxied) == comparable(alone)
    return pairs


class ScriptedChat(BaseHTTPRequestHandler):
    """A chat-completions API that answers by calling ``tool`` with ``arguments(path)`` on the next
    file not yet read (an absolute path in ``server.folder``), then with ``ANSWER``, as streamed
    chunks with the usage last.  Subclasses name the agent's read tool."""

    tool = "read_file"

    def arguments(self, path: str) -> dict:
        return {"file_path": path}

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):  # the provider's model list
        out = b'{"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.seen.append((self.path, body))
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        head = {"id": f"c{done}", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
        if done < len(FILES):
            args = json.dumps(self.arguments(str(self.server.folder / FILES[done])))
            call = {"index": 0, "id": f"call_{done}", "type": "function",
                    "function": {"name": self.tool, "arguments": args}}  # fmt: skip
            asked = {"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": None}
            ended = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
            chunks = [{**head, "choices": [asked]}, {**head, "choices": [ended]}]
        else:
            delta = {"role": "assistant", "content": ANSWER}
            chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]}]
        chunks.append({**head, "choices": [], "usage": CHAT_USAGE})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def chat_calls(seen: list[tuple[str, dict]]) -> list[dict]:
    """The chat-completions requests among what the scripted API received."""
    return [body for path, body in seen if path.endswith("/chat/completions")]


def without_tool_contents(body: dict) -> dict:
    """A chat-completions request without its tool messages' contents."""
    msgs = [{**m, "content": None} if m.get("role") == "tool" else m for m in body["messages"]]
    return {**body, "messages": msgs}


def check_chat_run(runs: Runs, calls_alike: Callable[[dict], dict] = without_tool_contents) -> None:
    """For an agent on chat completions: each call through the proxy is the call made without it but
    for its earlier tool messages, each the store's placeholder (``last_n:n=1``: all but the newest)."""
    from dtoc_rl.core.record import POLICY_NOTE

    for alone, proxied in same_calls(runs, calls_alike):
        mine = [m["content"] for m in alone["messages"] if m["role"] == "tool"]
        theirs = [m["content"] for m in proxied["messages"] if m["role"] == "tool"]
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if k < len(mine) - 1:
                ph = json.loads(b)
                assert ph["hidden"] is True and POLICY_NOTE in b and ph["estimated_tokens"] > 500
            else:
                assert b == a
    assert runs.proxy.hidden_sent == sum(range(len(FILES)))


def check_own_log(own: Any, source: str, tool: str, folder: Path, path_of: Callable[[dict], str]) -> None:
    """The CLI's own log of the run read as that run: its reads of ``FILES`` in order, each output the
    whole file, each call with the scripted API's usage."""
    assert own.source == source and own.model_raw == "gpt-4o"
    reads = [s for s in own.steps if s.tool_name == tool]
    assert [path_of(json.loads(s.tool_args)) for s in reads] == [str(folder / n) for n in FILES]
    assert all(f"{n} line 149" in s.output for n, s in zip(FILES, reads, strict=True))
    assert all(s.usage.cached_tokens == CHAT_USAGE["prompt_tokens_details"]["cached_tokens"] for s in reads)


def calls_and_closing(traj) -> list:
    """The proxy log's steps before the agent's closing answer, after checking that it ends with that
    answer (``ANSWER``, which no request follows: logged when the proxy stopped) and its usage."""
    *steps, closing = traj.steps
    assert closing.tool_name is None and ANSWER in closing.assistant_text and closing.usage is not None
    return steps
