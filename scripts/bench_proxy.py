"""What `dtoc-rl proxy` adds to a model call, measured beside the same calls sent straight upstream.

A local fake upstream, in a process of its own as an API is, answers at once (a real model call takes
seconds: what is timed here is the proxy alone; ``--answer-ms`` makes it wait, as a model does while
the proxy writes its logs).  One agent's conversation of ``--calls`` model calls, each adding one tool
output of 200-8,000 characters (``--scale`` times as long), is replayed twice per policy, call by
call and interleaved: each request sent straight to the upstream (the reference), then through the
proxy.  Rows: the reference, and the
proxy with ``last_n:n=5`` (mirroring, labelling and transport: the proxy's own cost) and with a
learned policy (the default network, untrained unless ``--checkpoint``: latency does not depend on
the weights).  Columns: per-request wall time at the client (p50, p99, over all calls and over the
last tenth, where the conversation is longest), the proxy's overhead (its p50 minus the reference's)
and the policy's decision inside it.  Target: p99 overhead <= 25 ms on a 200-call conversation (a
model call takes 1-30 s).

    python -m scripts.bench_proxy             # table
    python -m scripts.bench_proxy --json      # machine-readable
    python -m scripts.bench_proxy --api gemini   # the same conversation as Gemini requests
    python -m scripts.bench_proxy --scale 8 --log --answer-ms 100  # a long run's megabytes, logged
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import random
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from dtoc_rl.cli.common import at_least
from dtoc_rl.provenance import environment
from dtoc_rl.serve.orchestrator import GC_THRESHOLDS
from dtoc_rl.serve.proxy import ContextProxy, make_proxy_server

TARGET_P99_OVERHEAD_MS = 25.0


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answer_s = 0.0  # how long the model "thinks" before answering

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.answer_s)
        out = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "usage": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def _serve_upstream(answer_s: float, ready: Any) -> None:
    up = ThreadingHTTPServer(("127.0.0.1", 0), type("_Slow", (_Upstream,), {"answer_s": answer_s}))
    ready.send(up.server_address[1])
    up.serve_forever()


@contextlib.contextmanager
def _upstream(answer_ms: float) -> Iterator[int]:
    """The fake upstream's port, served from a process of its own, as an API is: the proxy's threads
    (its log writer's) never share an interpreter lock with it."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_serve_upstream, args=(answer_ms / 1000, send), daemon=True)
    proc.start()
    try:
        if not recv.poll(120):
            raise RuntimeError("the fake upstream did not start within 120 s")
        yield recv.recv()
    finally:
        proc.terminate()
        proc.join(10)


def conversation(calls: int, seed: int = 0, scale: int = 1) -> list[list[dict[str, Any]]]:
    """The message list of each of ``calls`` requests of one agent run; ``scale``: each tool output that
    many times as long."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in utils.py."},
    ]
    out = []
    for i in range(calls):
        out.append(list(msgs))
        cid = f"call_{i}"
        args = json.dumps({"command": f"cat src/module_{i % 40}.py"})
        text = (
            "\n".join(
                f"{n:4d}  def func_{rng.randint(0, 999)}(x_{i}): return helper_{rng.randint(0, 99)}(x_{i})"
                for n in range(rng.randint(4, 160))
            )
            * scale
        )
        msgs += [
            {"role": "assistant", "content": f"Step {i}.", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "bash", "arguments": args}}]},
            {"role": "tool", "tool_call_id": cid, "content": text},
        ]  # fmt: skip
    return out


def as_gemini(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """The same request as the Gemini API takes it: the system prompt apart, each call a
    ``functionCall`` part, each output a ``functionResponse`` part."""
    contents: list[dict[str, Any]] = []
    body: dict[str, Any] = {"contents": contents}
    for m in msgs:
        if m["role"] == "system":
            body["systemInstruction"] = {"parts": [{"text": m["content"]}]}
        elif m["role"] == "user":
            contents.append({"role": "user", "parts": [{"text": m["content"]}]})
        elif m["role"] == "assistant":
            calls = [{"functionCall": {"id": c["id"], "name": c["function"]["name"],
                                       "args": json.loads(c["function"]["arguments"])}}
                     for c in m.get("tool_calls") or []]  # fmt: skip
            contents.append({"role": "model", "parts": [{"text": m["content"]}, *calls]})
        else:
            answer = {"id": m["tool_call_id"], "name": "bash", "response": {"output": m["content"]}}
            contents.append({"role": "user", "parts": [{"functionResponse": answer}]})
    return body


#: Where each API's model calls go, and the request body of one conversation's messages.
_APIS = {
    "openai": ("/v1/chat/completions", lambda m: {"model": "gpt-4o-2024-08-06", "messages": m}),
    "gemini": ("/v1beta/models/gemini-2.5-pro:generateContent", as_gemini),
}


def _post(url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return (time.perf_counter() - t0) * 1000


def _stats(ms: list[float]) -> dict[str, float]:
    a, tail = np.asarray(ms), np.asarray(ms[-max(1, len(ms) // 10) :])
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "last_tenth_p50_ms": float(np.percentile(tail, 50)),
        "last_tenth_p99_ms": float(np.percentile(tail, 99)),
    }


def _measure(
    calls: int, checkpoint: str | None, api: str, scale: int = 1, log: bool = False, answer_ms: float = 0.0
) -> tuple[dict[str, Any], list[float]]:
    """Each policy's row and the reference's times: one conversation, straight and through a proxy."""
    from dtoc_rl.policies.learned import LearnedPolicyConfig
    from dtoc_rl.policies.registry import make_policy

    route, request = _APIS[api]
    with _upstream(answer_ms) as port, tempfile.TemporaryDirectory() as tmp:
        direct = f"http://127.0.0.1:{port}{route}"
        ckpt = checkpoint or str(LearnedPolicyConfig().create().save(f"{tmp}/ck"))
        policies = {"last_n:n=5": make_policy("last_n:n=5"), "learned": make_policy(ckpt)}
        bodies = [json.dumps(request(m)).encode() for m in conversation(calls, scale=scale)]
        rows: dict[str, Any] = {}
        reference: list[float] = []
        for name, policy in policies.items():
            proxy = ContextProxy(policy, log_dir=f"{tmp}/logs-{len(rows)}" if log else None)
            srv = make_proxy_server(proxy, f"http://127.0.0.1:{port}", port=0)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            via = f"http://127.0.0.1:{srv.server_address[1]}{route}"
            ms, ref, decide = [], [], []
            for body in bodies:  # the reference and the proxy in turn: the same phases of the machine
                ref.append(_post(direct, body))
                ms.append(_post(via, body))
                (orch,) = [m.orch for m in proxy.mirrors.values()]
                decide.append(orch.last_decision.latency_ms)
            srv.shutdown()
            srv.server_close()
            reference += ref
            s = _stats(ms)
            r = _stats(ref)
            s["overhead_p50_ms"] = s["p50_ms"] - r["p50_ms"]
            s["overhead_p99_ms"] = s["p99_ms"] - r["p99_ms"]
            s["decision_p50_ms"] = float(np.percentile(decide, 50))
            s["decision_p99_ms"] = float(np.percentile(decide, 99))
            s["hidden_sent"] = proxy.hidden_sent
            if log:  # the stop above waited for them
                s["logs_written"] = proxy.logs_written
            rows[f"proxy, {name}"] = s
    return rows, reference


def run(
    calls: int,
    checkpoint: str | None,
    threads: int,
    api: str = "openai",
    python_gc: bool = False,
    scale: int = 1,
    log: bool = False,
    answer_ms: float = 0.0,
) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    old_gc = gc.get_threshold()
    if not python_gc:  # as `dtoc-rl proxy` runs
        gc.set_threshold(*GC_THRESHOLDS)
    try:
        rows, reference = _measure(calls, checkpoint, api, scale, log, answer_ms)
    finally:
        gc.set_threshold(*old_gc)
    out = {"reference (straight upstream)": _stats(reference), **rows}
    worst = max(r["overhead_p99_ms"] for k, r in out.items() if k.startswith("proxy"))
    return {
        "calls": calls,
        "api": api,
        "output_scale": scale,
        "logged": log,
        "answer_ms": answer_ms,
        "gc_thresholds": list(old_gc if python_gc else GC_THRESHOLDS),
        "rows": out,
        "target_p99_overhead_ms": TARGET_P99_OVERHEAD_MS,
        "worst_p99_overhead_ms": worst,
        "ok": worst <= TARGET_P99_OVERHEAD_MS,
        "checkpoint": checkpoint or "untrained default LearnedPolicyConfig",
        "environment": environment(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.bench_proxy", description=__doc__.split("\n\n", 1)[0]
    )
    ap.add_argument("--calls", type=at_least(1), default=200, help="model calls in the conversation (200)")
    ap.add_argument(
        "--checkpoint", help="a learned-policy checkpoint (default: an untrained default network)"
    )
    ap.add_argument("--threads", type=at_least(1), default=1, help="torch threads (1, as dtoc-rl proxy uses)")
    ap.add_argument(
        "--api",
        choices=sorted(_APIS),
        default="openai",
        help="the API the conversation speaks: chat completions (openai) or the Gemini API",
    )
    ap.add_argument(
        "--python-gc",
        action="store_true",
        help="keep Python's default garbage-collector thresholds instead of the proxy's own",
    )
    ap.add_argument(
        "--scale",
        type=at_least(1),
        default=1,
        help="each tool output this many times as long (1: about 0.8 MB of outputs over 200 calls; 8: a "
        "long run's megabytes)",
    )
    ap.add_argument(
        "--log",
        action="store_true",
        help="the proxy logs each conversation into a temporary folder (dtoc-rl proxy --log-dir)",
    )
    ap.add_argument(
        "--answer-ms",
        type=float,
        default=0.0,
        help="the fake upstream waits this long before each answer (0: at once; a model takes seconds, "
        "and the proxy writes its logs meanwhile: with --log and 0 the writing overlaps the next "
        "requests, the reference's included, and the overhead reads low)",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    if args.checkpoint:  # a wrong path is told before the servers start, not as a traceback inside them
        from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy

        try:
            LearnedPolicy.load(args.checkpoint)
        except (CheckpointError, ValueError, OSError) as e:
            ap.error(f"--checkpoint: {' '.join(str(e).split())}")
    if not 0 <= args.answer_ms <= 60_000:
        ap.error(f"--answer-ms must be between 0 and 60000, got {args.answer_ms}")
    a = args
    res = run(a.calls, a.checkpoint, a.threads, a.api, a.python_gc, a.scale, a.log, a.answer_ms)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0 if res["ok"] else 1
    cols = ("p50_ms", "p99_ms", "last_tenth_p99_ms", "overhead_p50_ms", "overhead_p99_ms", "decision_p99_ms")
    logged = ", logged" if args.log else ""
    if args.answer_ms:
        logged += f", answers after {args.answer_ms:g} ms"
    print(
        f"{args.calls} calls of one conversation ({args.api} API, outputs x{args.scale}{logged}); ms per "
        "request at the client\n"
    )
    print(f"{'':32s}" + "".join(f"{c:>20s}" for c in cols))
    for name, r in res["rows"].items():
        print(f"{name:32s}" + "".join(f"{r[c]:20.2f}" if c in r else f"{'':>20s}" for c in cols))
    verdict = "met" if res["ok"] else "NOT met"
    worst = res["worst_p99_overhead_ms"]
    print(f"\ntarget p99 overhead <= {TARGET_P99_OVERHEAD_MS} ms: {verdict} ({worst:.2f} ms)")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
