"""Decision latency of a learned policy with 300 stored outputs: in-process and over HTTP.

* **in-process**: ``Orchestrator.decide(force=True)`` with a learned policy (the
  default ``LearnedPolicyConfig`` network, untrained unless ``--checkpoint`` is
  given: latency does not depend on the weights) over a session holding
  ``--outputs`` stored outputs; the policy sees the ``--max-items`` most recent.
  A decision is: build the observation, run the policy, apply its changes; two
  rows split it (the orchestrator's observation alone, the policy's ``act``
  alone).  The same with 64 slots, with torch's multi-head-attention fast path
  off (the unfused nn.Module path: what the fused encoder-layer kernel saves),
  with ``last_n:n=5`` for scale, and the whole per-turn overhead of the
  orchestrator (record the assistant turn with online need labelling, store the
  output, decide, render the OpenAI request).
* **HTTP**: ``dtoc-rl serve`` with the same checkpoint (and with ``last_n:n=5``:
  transport, parsing and validation alone) in a child process on 127.0.0.1,
  ``POST /decide`` with the same 300 items (about 57 KB of JSON), one keep-alive
  connection, timed at the client; plus a new connection per request, and the
  service's own ``latency_ms`` (parse, validate, decide); and requests that each carry
  one new session turn (a tool call and its output, labelled by the service), as the
  OpenCode plugin sends them, after the session's first ``--outputs`` turns.

torch runs with ``--threads`` intra-op threads (default 1, as ``dtoc-rl serve``
does: for one small network per decision more threads only add synchronisation).
``--busy N`` adds two rows timed while N other processes keep the CPU busy, as an
agent's own builds and test runs do: the decision on the policy's own thread count
(``LearnedPolicy.threads``, ``--threads``) and on as many threads as the machine has cores (torch's default,
what a policy that left the caller's count alone would run on).

``--load``: the service under load instead: ``--clients`` client processes (default 8) each
send ``--load-requests`` requests (default 1,000) with the same 300 items over keep-alive
connections at once, after one client alone sent as many (the single-client figure); every
answer must be a 200 (errors are counted and listed), and the service's memory (RSS) is
read before and after.  Loopback only; bounded by the counts and by ``--load-seconds``.

Targets: p99 ≤ 2 ms in-process, ≤ 10 ms over HTTP.

    python -m scripts.bench_policy            # table
    python -m scripts.bench_policy --json     # machine-readable
    python -m scripts.bench_policy --load     # 8 clients x 1,000 requests of 300 items
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dtoc_rl.cli.common import at_least
from dtoc_rl.provenance import environment
from dtoc_rl.serve.orchestrator import Orchestrator

TOOLS = [
    ("bash", lambda i: {"command": f"cat src/module_{i % 40}.py"}),
    ("bash", lambda i: {"command": f"grep -rn func_{i % 17} src/"}),
    ("read_file", lambda i: {"path": f"src/module_{i % 40}.py"}),
    ("bash", lambda i: {"command": "python -m pytest -q"}),
    ("str_replace", lambda i: {"path": f"src/module_{i % 40}.py", "old_str": "a", "new_str": "b"}),
]


def _output(rng: random.Random, i: int) -> str:
    lines = rng.randint(5, 120)
    return "\n".join(
        f"{n:4d}  def func_{rng.randint(0, 999)}(x_{i}, y): return helper_{rng.randint(0, 99)}(x_{i}) + y"
        for n in range(lines)
    )


def fill(orch: Orchestrator, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for i in range(n):
        name, args = TOOLS[i % len(TOOLS)]
        (call,) = orch.record_assistant(
            f"step {i}", [{"id": f"call_{i}", "name": name, "arguments": args(i)}]
        )
        orch.add_tool_result(call["id"], _output(rng, i))


def stats(samples_ms: list[float], cpu_ms: list[float] | None = None) -> dict[str, float]:
    a = np.asarray(samples_ms)
    out = {
        "n": len(a),
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
        "max_ms": float(a.max()),
    }
    if cpu_ms:  # this thread's CPU time: the work itself, without waiting for a core
        c = np.asarray(cpu_ms)
        out["cpu_p50_ms"] = float(np.percentile(c, 50))
        out["cpu_p99_ms"] = float(np.percentile(c, 99))
    return out


def python_reference() -> int:
    """Fixed pure-Python work (about 0.25 ms here)."""
    return sum(i * i for i in range(4000))


def torch_reference(_x=[]) -> None:  # noqa: B006  (the operands, made once)
    """Fixed torch work of the decision's kind (16 small matmuls, about 0.1 ms here)."""
    import torch

    if not _x:
        g = torch.Generator().manual_seed(0)
        _x.extend([torch.randn(128, 64, generator=g), torch.randn(64, 64, generator=g) / 8])
    x, w = _x
    for _ in range(16):
        x = torch.mm(x, w)


def time_interleaved(fn, refs, repeat: int, warmup: int = 20):
    """``fn`` and each reference workload timed in turn, so that all see the same phases of
    the machine: the references' spread shows how much the machine's own speed varied
    (a virtual machine whose neighbours take its core's resources runs vector code slower,
    at times much slower, than interpreted Python).  Returns (wall, cpu, [ref wall ...])."""
    for _ in range(warmup):
        fn()
        for ref in refs:
            ref()
    wall, cpu, ref_ms = [], [], [[] for _ in refs]
    for _ in range(repeat):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        for ref, out in zip(refs, ref_ms):
            t0 = time.perf_counter()
            ref()
            out.append((time.perf_counter() - t0) * 1000)
    return wall, cpu, ref_ms


def time_calls(fn, repeat: int, warmup: int = 20) -> list[float]:
    return time_calls_cpu(fn, repeat, warmup)[0]


def time_calls_cpu(fn, repeat: int, warmup: int = 20) -> tuple[list[float], list[float]]:
    wall, cpu, _ = time_interleaved(fn, (), repeat, warmup)
    return wall, cpu


NETWORKS = ((64, 2, 4), (64, 2, 2), (48, 2, 2), (32, 2, 2), (64, 1, 2))  # (d_model, layers, heads)


def compare_networks(obs: dict, info: Any, repeat: int, rounds: int = 20) -> dict[str, list[float]]:
    """``act`` of fresh networks of several shapes on one observation, in alternating rounds
    (so that all see the same phases of the machine)."""
    import torch

    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    threads = torch.get_num_threads()  # a decision runs on its policy's threads: the bench's own
    pols = {
        f"d={d} L={n} h={h}": LearnedPolicyConfig(d_model=d, n_layers=n, n_heads=h).create()
        for d, n, h in NETWORKS
    }
    for pol in pols.values():
        pol.threads = threads
    out: dict[str, list[float]] = {k: [] for k in pols}
    per = max(1, repeat // rounds)
    for _ in range(rounds):
        for k, pol in pols.items():
            out[k].extend(time_calls(lambda pol=pol: pol.act(obs, info), per, warmup=3))
    return out


def payload(orch: Orchestrator) -> dict[str, Any]:
    """The store as a /decide request (what a non-Python agent would send)."""
    items = []
    for key, st in orch.item_states():
        rec = orch.store.get(key)
        items.append(
            {
                "key": key,
                "tokens": st.est_tokens,
                "visible": st.visible,
                "tool": rec.tool_name,
                "args": json.dumps(rec.tool_args),
                "age": st.age,
                "needs": st.times_needed,
                "superseded": st.superseded,
                "modified": st.modified,
            }
        )
    return {
        "model_family": orch.model_family,
        "items": items,
        "active_tokens": orch.active_tokens,
        "step": orch.totals.calls,
    }


def start_service(policy: str, max_items: int, threads: int) -> tuple[subprocess.Popen, str, int, dict]:
    """``dtoc-rl serve`` in a child process with a token of ours: (process, host, port, the
    headers a request sends)."""
    token = secrets.token_urlsafe(32)
    cmd = [
        sys.executable,
        "-c",
        "import sys; from dtoc_rl.cli import main; sys.exit(main())",
        "serve",
        "--policy",
        policy,
        "--port",
        "0",
        "--max-items",
        str(max_items),
        "--threads",
        str(threads),
        "--json",
    ]
    env = {**os.environ, "DTOC_TOKEN": token}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise RuntimeError(f"the service did not start (exit code {proc.returncode})")
    info = json.loads(line)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return proc, info["host"], info["port"], headers


def http_bench(
    host: str, port: int, body: bytes, repeat: int, headers: dict[str, str]
) -> tuple[list[float], list[float], list[float]]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    server: list[float] = []

    def keepalive() -> None:
        conn.request("POST", "/decide", body, headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        server.append(json.loads(data)["latency_ms"])

    def fresh() -> None:
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("POST", "/decide", body, headers)
        r = c.getresponse()
        r.read()
        c.close()

    ka = time_calls(keepalive, repeat)
    server_side = server[-repeat:]
    nc = time_calls(fresh, max(50, repeat // 4))
    conn.close()
    return ka, nc, server_side


def session_bench(
    host: str, port: int, outputs: int, repeat: int, headers: dict[str, str], seed: int = 0
) -> tuple[list[float], list[float]]:
    """``/decide`` requests that each carry one new session turn (a tool call and its output)
    after ``outputs`` turns were sent: what the OpenCode plugin sends per model call.  The
    items are the latest ``outputs`` keys.  Returns (round trip ms, service latency_ms)."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection(host, port, timeout=60)

    def turn(i: int) -> dict[str, Any]:
        name, args = TOOLS[i % len(TOOLS)]
        call = {"key": f"k{i}", "tool": name, "args": args(i), "output": _output(rng, i)}
        return {"index": i, "assistant_text": f"step {i}", "calls": [call]}

    tokens: dict[str, int] = {}

    def send(turns: list[dict[str, Any]], upto: int) -> float:
        for t in turns:
            tokens[t["calls"][0]["key"]] = len(t["calls"][0]["output"]) // 4
        keys = [f"k{j}" for j in range(max(0, upto - outputs), upto)]
        body = {"session": "bench", "task": "Fix the bug.", "model": "gpt-4o", "turns": turns,
                "items": [{"key": k, "tokens": tokens[k], "tool": "bash"} for k in keys]}  # fmt: skip
        conn.request("POST", "/decide", json.dumps(body).encode(), headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        return json.loads(data)["latency_ms"]

    for start in range(0, outputs, 50):  # the session's history, in a few requests
        send([turn(i) for i in range(start, min(outputs, start + 50))], min(outputs, start + 50))
    wall, server = [], []
    for i in range(outputs, outputs + repeat):
        t = turn(i)
        t0 = time.perf_counter()
        server.append(send([t], i + 1))
        wall.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return wall, server


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def load_client(host: str, port: int, headers: dict, body: bytes, n: int, until: float) -> tuple:
    """One load client (run in its own process): ``n`` requests on a keep-alive connection, or
    fewer if the monotonic clock passes ``until``.  Returns (latencies ms, errors)."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    wall: list[float] = []
    errors: list[str] = []
    for _ in range(n):
        if time.monotonic() > until:
            errors.append("stopped at the time limit")
            break
        t0 = time.perf_counter()
        try:
            conn.request("POST", "/decide", body, headers)
            r = conn.getresponse()
            data = r.read()
            if r.status != 200:
                errors.append(f"HTTP {r.status}: {data[:200]!r}")
        except (OSError, http.client.HTTPException) as e:
            errors.append(f"{type(e).__name__}: {e}")
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            continue
        wall.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return wall, errors


def load_bench(args: argparse.Namespace, policy: Any) -> dict[str, Any]:
    """The service under load: one client alone, then ``--clients`` at once (see the module doc)."""
    from concurrent.futures import ProcessPoolExecutor

    tmp = tempfile.TemporaryDirectory(prefix="dtoc-bench-")
    ckpt = Path(args.checkpoint) if args.checkpoint else policy.save(Path(tmp.name) / "ckpt")
    orch = Orchestrator(policy, query="Fix the bug.", model="gpt-4o", max_items=args.max_items, label_every=0)
    fill(orch, args.outputs)
    body = json.dumps(payload(orch)).encode()
    results: dict[str, Any] = {
        "mode": "load",
        "outputs": args.outputs,
        "http_body_bytes": len(body),
        "policy": policy.label,
        "clients": args.clients,
        "requests_per_client": args.load_requests,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "environment": environment(),
        "rows": {},
    }
    proc, host, port, headers = start_service(str(ckpt), args.max_items, args.threads)
    until = time.monotonic() + args.load_seconds
    try:
        load_client(host, port, headers, body, 20, until)  # warm-up
        results["service_rss_mb_before"] = _rss_mb(proc.pid)
        t0 = time.perf_counter()
        single, single_errors = load_client(host, port, headers, body, args.load_requests, until)
        single_s = time.perf_counter() - t0
        with ProcessPoolExecutor(args.clients) as pool:
            t0 = time.perf_counter()
            futures = [
                pool.submit(load_client, host, port, headers, body, args.load_requests, until)
                for _ in range(args.clients)
            ]
            done = [f.result() for f in futures]
            many_s = time.perf_counter() - t0
        results["service_rss_mb_after"] = _rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        tmp.cleanup()
    many = [ms for wall, _ in done for ms in wall]
    errors = [e for _, errs in done for e in errs]
    rows = results["rows"]
    if single:
        rows["HTTP /decide, 1 client, keep-alive"] = stats(single)
    if many:
        rows[f"HTTP /decide, {args.clients} clients at once, keep-alive"] = stats(many)
    results["requests"] = len(single) + len(many) + len(single_errors) + len(errors)
    results["errors"] = len(single_errors) + len(errors)
    results["error_samples"] = sorted(set(single_errors + errors))[:10]
    results["throughput_rps"] = {
        "1 client": len(single) / single_s,
        f"{args.clients} clients": len(many) / many_s,
    }
    return results


def learned_policy(args: argparse.Namespace):
    """The policy to time: ``--checkpoint``, or a fresh network of the asked shape (raises
    ValueError or CheckpointError with the reason)."""
    from dtoc_rl.policies.learned import LearnedPolicy
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    if args.checkpoint:
        return LearnedPolicy.load(args.checkpoint)
    shape = {"d_model": args.d_model, "n_layers": args.n_layers, "n_heads": args.n_heads}
    return LearnedPolicyConfig(**{k: v for k, v in shape.items() if v is not None}).create()


def run(args: argparse.Namespace, policy: Any) -> dict[str, Any]:
    from dtoc_rl.policies.cpu import torch_threads

    policy.threads = args.threads  # as `dtoc-rl serve --threads` sets it
    with torch_threads(args.threads):
        return _run(args, policy)


def _run(args: argparse.Namespace, policy: Any) -> dict[str, Any]:
    import torch

    from dtoc_rl.policies.registry import make_policy

    tmp = tempfile.TemporaryDirectory(prefix="dtoc-bench-")
    ckpt = Path(args.checkpoint) if args.checkpoint else policy.save(Path(tmp.name) / "ckpt")
    results: dict[str, Any] = {
        "outputs": args.outputs,
        "max_items": args.max_items,
        "policy": policy.label,
        "checkpoint": str(ckpt) if args.checkpoint else "fresh (untrained) default LearnedPolicyConfig",
        "network": {k: policy.cfg.to_dict()[k] for k in ("d_model", "n_layers", "n_heads")},
        "torch_threads": torch.get_num_threads(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}",
        "environment": environment(),
        "rows": {},
    }
    rows = results["rows"]

    def session(pol, max_items: int) -> Orchestrator:
        o = Orchestrator(pol, query="Fix the bug.", system="You are a coding agent.", model="gpt-4o",
                         max_items=max_items, label_every=0)  # fmt: skip
        fill(o, args.outputs)
        o.decide(force=True)
        return o

    orch = session(policy, args.max_items)
    wall, cpu, (ref_py, ref_torch) = time_interleaved(
        lambda: orch.decide(force=True), (python_reference, torch_reference), args.repeat
    )
    decide = rows[f"in-process decide, learned, {args.max_items} slots"] = stats(wall, cpu)
    jitter = {"python": stats(ref_py), "torch": stats(ref_torch)}
    rows["  reference, timed in between: fixed Python work"] = jitter["python"]
    rows["  reference, timed in between: fixed torch matmuls"] = jitter["torch"]
    results["machine_jitter"] = jitter
    results["decide_over_torch_reference"] = decide["p50_ms"] / max(1e-9, jitter["torch"]["p50_ms"])
    if args.busy:
        rows.update(busy_rows(args, orch, policy))
    if args.quick:
        tmp.cleanup()
        return results
    obs, info = orch.observation()
    rows["  of which the observation (orchestrator)"] = stats(*time_calls_cpu(orch.observation, args.repeat))
    rows["  of which policy.act (tensors, forward, action)"] = stats(
        *time_calls_cpu(lambda: policy.act(obs, info), args.repeat)
    )
    for shape, samples in compare_networks(obs, info, args.repeat).items():
        rows[f"  policy.act, fresh network {shape} (interleaved rounds)"] = stats(samples)
    small = session(policy, 64)
    rows["in-process decide, learned, 64 slots"] = stats(
        *time_calls_cpu(lambda: small.decide(force=True), args.repeat)
    )
    if hasattr(torch.backends, "mha"):  # what the masked attention fast path costs
        torch.backends.mha.set_fastpath_enabled(False)
        rows[f"in-process decide, learned, {args.max_items} slots, MHA fast path off"] = stats(
            *time_calls_cpu(lambda: orch.decide(force=True), args.repeat)
        )
        torch.backends.mha.set_fastpath_enabled(True)
    rule = session(make_policy("last_n:n=5"), args.max_items)
    rows["in-process decide, last_n:n=5"] = stats(
        *time_calls_cpu(lambda: rule.decide(force=True), args.repeat)
    )

    # the whole turn: record, store, label the turn's needs, decide, render
    turn_orch = Orchestrator(policy, query="Fix the bug.", model="gpt-4o", max_items=args.max_items)
    fill(turn_orch, args.outputs)
    turn_orch.decide(force=True)  # labels the turns fill() recorded
    rng = random.Random(1)
    turn_ms, label_ms = [], []
    for i in range(args.turns):
        k = args.outputs + i
        name, a = TOOLS[k % len(TOOLS)]
        before = turn_orch.totals.label_ms
        t0 = time.perf_counter()
        (c,) = turn_orch.record_assistant(f"step {k}", [{"id": f"call_{k}", "name": name, "arguments": a(k)}])
        turn_orch.add_tool_result(c["id"], _output(rng, k))
        turn_orch.openai_request()
        turn_ms.append((time.perf_counter() - t0) * 1000)
        label_ms.append(turn_orch.totals.label_ms - before)
    rows["in-process full turn (labels+store+decide+render)"] = stats(turn_ms)
    rows["  of which need labelling"] = stats(label_ms)

    body = json.dumps(payload(orch)).encode()
    results["http_body_bytes"] = len(body)
    for name, spec in (("learned", str(ckpt)), ("last_n:n=5", "last_n:n=5")):
        proc, host, port, headers = start_service(spec, args.max_items, args.threads)
        try:
            ka, nc, server_side = http_bench(host, port, body, args.repeat, headers)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        rows[f"HTTP /decide round trip, {name}, keep-alive"] = stats(ka)
        rows[f"HTTP /decide round trip, {name}, new connection"] = stats(nc)
        rows[f"HTTP service-side latency_ms, {name}"] = stats(server_side)
        if name == "learned":  # the OpenCode plugin's request: one new session turn labelled each time
            proc, host, port, headers = start_service(spec, args.max_items, args.threads)
            try:
                wall, server_side = session_bench(
                    host, port, args.outputs, max(50, args.repeat // 5), headers
                )
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            rows["HTTP /decide with one new session turn, learned, keep-alive"] = stats(wall)
            rows["HTTP service-side latency_ms, with one new session turn"] = stats(server_side)
    results["targets"] = {"in_process_p99_ms": 2.0, "http_p99_ms": 10.0}
    results["met"] = {
        "in_process": decide["p99_ms"] <= 2.0,
        "http": rows["HTTP /decide round trip, learned, keep-alive"]["p99_ms"] <= 10.0,
    }
    tmp.cleanup()
    return results


def busy_rows(args: argparse.Namespace, orch: Orchestrator, policy: Any) -> dict[str, dict[str, float]]:
    """The in-process decision while ``args.busy`` spinning processes keep the cores busy: on the
    policy's threads, and on one thread per core (torch's default)."""
    from dtoc_rl.policies.cpu import torch_threads

    spinners: list[subprocess.Popen] = []
    rows, own = {}, policy.threads
    cores = os.cpu_count() or 1
    try:
        for _ in range(args.busy):
            spinners.append(
                subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            )
        time.sleep(0.5)  # the spinners are running
        rows[f"in-process decide, {args.busy} busy processes, policy threads {own}"] = stats(
            *time_calls_cpu(lambda: orch.decide(force=True), args.repeat)
        )
        policy.threads = cores
        with torch_threads(cores):
            rows[f"in-process decide, {args.busy} busy processes, {cores} threads (torch's default)"] = stats(
                *time_calls_cpu(lambda: orch.decide(force=True), args.repeat)
            )
    finally:
        policy.threads = own
        for sp in spinners:  # all killed before any wait can raise
            sp.kill()
        for sp in spinners:
            sp.wait(timeout=30)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.bench_policy",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--outputs", type=at_least(1), default=300, help="stored outputs (default 300)")
    p.add_argument("--max-items", type=at_least(1), default=128, help="policy slots (default 128)")
    p.add_argument(
        "--repeat", type=at_least(1), default=500, help="timed decisions/requests per row (default 500)"
    )
    p.add_argument("--turns", type=at_least(1), default=50, help="timed full turns (default 50)")
    p.add_argument(
        "--threads", type=at_least(1), default=1, help="torch threads, here and in the service (default 1)"
    )
    p.add_argument(
        "--busy",
        type=at_least(0),
        default=0,
        help="also time the decision while this many other processes spin on the CPU (0: not), on the "
        "policy's threads and on torch's default of one per core",
    )
    p.add_argument("--checkpoint", help="a learned-policy checkpoint (default: a fresh default network)")
    net = p.add_argument_group("network of the fresh policy (without --checkpoint; default: the config's)")
    net.add_argument("--d-model", type=at_least(1), help="width")
    net.add_argument("--n-layers", type=int, help="encoder layers (0: none)")
    net.add_argument("--n-heads", type=at_least(1), help="attention heads")
    p.add_argument(
        "--quick",
        action="store_true",
        help="only the learned decision and the reference workloads (a few seconds): run it "
        "alternately in two checkouts to compare them, by the decision/torch-reference ratio",
    )
    load = p.add_argument_group("load test (--load)")
    load.add_argument("--load", action="store_true", help="time the service under concurrent clients instead")
    load.add_argument("--clients", type=at_least(1), default=8, help="client processes at once (default 8)")
    load.add_argument(
        "--load-requests", type=at_least(1), default=1000, help="requests per client (default 1000)"
    )
    load.add_argument(
        "--load-seconds",
        type=at_least(1),
        default=900,
        help="stop the clients after this many seconds (counted as errors; default 900)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    from dtoc_rl.policies.learned import CheckpointError

    try:
        policy = learned_policy(args)
    except (ValueError, CheckpointError) as e:
        p.error(str(e))
    if args.load:
        r = load_bench(args, policy)
        if args.json:
            print(json.dumps(r, indent=2))
            return 0 if r["errors"] == 0 else 1
        print(
            f"{r['clients']} clients x {r['requests_per_client']} requests of {r['outputs']} items "
            f"({r['http_body_bytes']:,} bytes), {r['policy']}; {r['machine']}"
        )
        print(f"{'':50} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'max ms':>8} {'n':>6}")
        for name, s in r["rows"].items():
            print(
                f"{name:50} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f} {s['mean_ms']:8.2f} {s['max_ms']:8.2f} "
                f"{s['n']:6d}"
            )
        print(
            "throughput: "
            + ", ".join(f"{k} {v:.0f} req/s" for k, v in r["throughput_rps"].items())
            + f"; errors {r['errors']} of {r['requests']}"
            + f"; service RSS {r['service_rss_mb_before'] or 0:.0f} MB before, "
            + f"{r['service_rss_mb_after'] or 0:.0f} MB after"
        )
        for e in r["error_samples"]:
            print(f"  error: {e}")
        return 0 if r["errors"] == 0 else 1
    r = run(args, policy)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(
        f"{r['outputs']} stored outputs, policy sees the last {r['max_items']}; {r['policy']} "
        f"{r['network']} ({r['checkpoint']}); torch threads {r['torch_threads']}; {r['machine']}"
    )
    print(f"{'':62} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'n':>5}  {'CPU p50/p99 ms':>15}")
    for name, s in r["rows"].items():
        cpu = f"{s['cpu_p50_ms']:.3f}/{s['cpu_p99_ms']:.3f}" if "cpu_p50_ms" in s else ""
        print(f"{name:62} {s['p50_ms']:8.3f} {s['p99_ms']:8.3f} {s['mean_ms']:8.3f} {s['n']:5d}  {cpu:>15}")
    print(f"decision / torch reference, p50: {r['decide_over_torch_reference']:.2f}")
    if "met" not in r:  # --quick
        return 0
    print(f"HTTP request body: {r['http_body_bytes']:,} bytes")
    j = r["machine_jitter"]
    print(
        "fixed reference work, p99/p50: "
        + ", ".join(f"{k} {v['p99_ms'] / v['p50_ms']:.2f}" for k, v in j.items())
        + " (1.0: a steady machine; higher: the machine itself slowed down during the run)"
    )
    met = r["met"]
    print(
        f"targets: in-process p99 ≤ 2 ms: {'met' if met['in_process'] else 'MISSED'}; "
        f"HTTP p99 ≤ 10 ms: {'met' if met['http'] else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
