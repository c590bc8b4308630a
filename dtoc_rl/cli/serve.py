"""``dtoc-rl serve --policy SPEC_OR_CHECKPOINT``: a policy as an HTTP JSON service.

Endpoints: GET /health, GET /version, POST /decide (the client sends its
store's metadata, the policy answers which keys to enable and disable; see
dtoc_rl.serve.service for the request fields).  Binds to 127.0.0.1 by default.
A client that cannot label needs itself may name a session and send each model
call's text once ("session", "turns"): the service labels them and fills the
need features (--max-sessions sessions are kept in memory).

--policy takes a policy spec (last_n:n=5, budget:budget=32000, ...) or a
learned-policy checkpoint folder.  The policy is loaded and run once on a
sample request before the port opens: a checkpoint that fails to load stops
the service with a clear message and exit code 2.

Model families: requests from a family the policy does not serve (an unknown
model, i.e. family 'other'; or, for a checkpoint trained on one family, any
other family) get the --fallback policy: 'none' (default) keeps everything
visible; 'self' uses the main policy for every family; or any policy spec.
A rule that reads no prices (none, last_n, hide_big, ...: all but cache_clear)
serves every family, and the fallback is then never used.

Access: every endpoint but GET /health needs the header
'Authorization: Bearer TOKEN'.  The token is --token, else the DTOC_TOKEN
environment variable, else a random one made at start and printed once to
stderr (give that to the clients: the OpenCode plugin and RemotePolicy read
DTOC_TOKEN).  A request whose Host header is not this service's address
(127.0.0.1, localhost, [::1] or the bound host, with the port; more with
--allow-host) is refused with 421, so a web page cannot reach the service
through a DNS name of its own; POST /decide takes only application/json.
A client's sessions are kept under its token: clients that must not see each
other's sessions get one token each (--token repeated).

WARNING: --host other than a loopback address exposes the service to the
network.  It is refused unless a token is given (--token or DTOC_TOKEN); the
traffic is plain HTTP, so anyone on the path can read the token: put a TLS
proxy in front, or keep to loopback.

Stop it with Ctrl-C or SIGTERM (exit code 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dtoc_rl.cli.common import CLIError, at_least, fail, price_option, serve_until_stopped, warn

_SAMPLE = {
    "model_family": "gpt-4o",
    "items": [
        {"key": "t0000", "tokens": 900, "visible": True, "tool": "bash", "args": '{"command": "cat a.py"}'},
        {"key": "t0001", "tokens": 50, "visible": False, "tool": "bash", "args": '{"command": "ls"}'},
        {"key": "t0002", "tokens": 300, "visible": True, "tool": "read_file", "needs": 1},
    ],
    "step": 3,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dtoc_rl.serve.service import DEFAULT_HOST, DEFAULT_MAX_BODY, DEFAULT_PORT
    from dtoc_rl.serve.session_labels import (
        DEFAULT_MAX_SESSION_CHARS,
        DEFAULT_MAX_SESSIONS,
        DEFAULT_MAX_TOTAL_CHARS,
    )

    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--policy",
        required=True,
        help="policy spec, learned-policy checkpoint folder, or module:Class for your own",
    )
    p.add_argument(
        "--fallback",
        default="none",
        help="policy for unserved model families: none (everything visible, default), self, or a spec "
        "(a --policy rule that reads no prices serves every family: no fallback is used)",
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to bind (default {DEFAULT_HOST}); WARNING: anything but loopback exposes the "
        "service to the network and is refused without --token or DTOC_TOKEN",
    )
    p.add_argument(
        "--token",
        action="append",
        metavar="TOKEN",
        help="the secret clients send as 'Authorization: Bearer TOKEN' (repeat it to give each client "
        "a token, and so sessions, of its own); default: $DTOC_TOKEN, else a random one printed "
        "to stderr.  A command line is visible to the machine's other users: prefer DTOC_TOKEN",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name clients reach the service by, accepted in the Host header (the loopback "
        "names and the bound host always are; with a wildcard --host such as 0.0.0.0, name each "
        "address the clients use)",
    )
    p.add_argument(
        "--port",
        type=at_least(0, 65535),
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free)",
    )
    p.add_argument(
        "--max-items",
        type=at_least(1),
        default=None,
        help="observation slots (default: the checkpoint's max_items, else 128, features.DEFAULT_MAX_ITEMS)",
    )
    p.add_argument(
        "--max-body",
        type=at_least(1024),
        default=DEFAULT_MAX_BODY,
        help=f"request body limit in bytes, at least 1024 ({DEFAULT_MAX_BODY})",
    )
    p.add_argument(
        "--max-sessions",
        type=at_least(1),
        default=DEFAULT_MAX_SESSIONS,
        help=f"client sessions whose need labels are kept in memory (beyond it, the least recently used "
        f"of the client holding the most is dropped; "
        f"{DEFAULT_MAX_SESSIONS})",
    )
    p.add_argument(
        "--max-session-chars",
        type=at_least(1),
        default=DEFAULT_MAX_SESSION_CHARS,
        help=f"text one session may hold (its turns' outputs, messages and arguments); beyond it the "
        f"client gets 413 and sends no more texts, so its later outputs get no need labels "
        f"({DEFAULT_MAX_SESSION_CHARS:,})",
    )
    p.add_argument(
        "--max-total-chars",
        type=at_least(1),
        default=DEFAULT_MAX_TOTAL_CHARS,
        help=f"text all sessions may hold together, 8-9 bytes of memory a character of real output (up "
        f"to ~30 where every word is new); beyond it "
        f"idle sessions are dropped, else requests adding text get 429 ({DEFAULT_MAX_TOTAL_CHARS:,})",
    )
    p.add_argument(
        "--threads",
        type=at_least(1),
        default=1,
        help="torch intra-op threads for learned policies (default 1: lowest latency for one small network)",
    )
    p.add_argument(
        "--prices",
        metavar="FILE|JSON",
        help="your prices for models the price table lacks: a JSON or YAML file (or inline JSON) "
        "{model: {input, output, cache_read, cache_write}} in USD per million tokens (cache_read and "
        "cache_write default to input, i.e. no caching, with a warning); the policy sees "
        "them for requests naming that model (and serves it even if its family is unknown), instead of "
        "its family's list prices",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="write each session (requests naming a session and sending its turns, as the OpenCode "
        "plugin does) there after every request, as a JSONL log with what each call was sent hidden, "
        "for dtoc-rl ingest and 'evaluate -p logged none'; each log is yours alone (mode 600)",
    )
    p.add_argument("--log", action="store_true", help="log every request to stderr")
    p.add_argument("--json", action="store_true", help="print the startup info as one JSON line")


def _load(spec: str, what: str):
    from dtoc_rl.policies.registry import make_policy

    path = Path(spec)
    if path.exists() and not path.is_dir():
        raise CLIError(
            f"{what} {spec!r} is a file; a checkpoint is a folder with config.json and model.safetensors"
        )
    looks_like_path = ":" not in spec and ("/" in spec or "\\" in spec or spec.startswith("."))
    if looks_like_path and not path.exists():
        raise CLIError(f"{what} {spec!r}: no such checkpoint folder")
    try:
        policy = make_policy(spec)
    except Exception as e:  # PolicySpecError, CheckpointError (kept lazy: no torch for rule policies), ...
        raise CLIError(f"cannot load {what} {spec!r}: {e}") from None
    from dtoc_rl.engine.contract import check_policy

    try:
        check_policy(policy, live=True)
    except (TypeError, ValueError) as e:
        raise CLIError(f"{what} {spec!r}: {e}") from None
    if getattr(policy, "abstains_everywhere", False):
        warn(
            f"{what} {spec!r} abstains everywhere: its thresholds, chosen on too few runs, hide nothing "
            "on any model, so everything stays visible (give one: "
            "learned:path=CKPT,threshold=T, or train on more logs)"
        )
    return policy


def decide_on_threads(n: int, *policies) -> None:
    """Torch's intra-op threads, and each learned policy's own count, set to ``n`` (a served policy
    decides one request at a time with one small network: few threads are fastest)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    for p in policies:
        if isinstance(getattr(p, "threads", None), int):  # a learned policy decides on its own count
            p.threads = n


def trained_families(policy) -> set[str] | None:
    """The model families a policy serves: a checkpoint trained on one family, only that one; a policy
    that reads no prices, every family, a model of none too (None: every known family)."""
    from dtoc_rl.data.models import FAMILIES, normalize_family

    if not getattr(policy, "reads_prices", True):
        return set(FAMILIES)
    trained_on = getattr(getattr(policy, "cfg", None), "model_family", None)
    if not trained_on:
        return None
    return {trained_on if trained_on in FAMILIES else normalize_family(trained_on)}


def run(args: argparse.Namespace) -> int:
    import os

    from dtoc_rl.data.models import FAMILIES
    from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
    from dtoc_rl.serve.service import TOKEN_ENV, DecisionService, check_token, is_loopback, make_server

    try:
        tokens = args.token or ([os.environ[TOKEN_ENV]] if os.environ.get(TOKEN_ENV) else None)
        for t in tokens or ():
            try:
                check_token(t)
            except ValueError as e:
                raise CLIError(f"{'--token' if args.token else TOKEN_ENV}: {e}") from None
        if tokens is None and not is_loopback(args.host):
            raise CLIError(
                f"--host {args.host} is not a loopback address: the service would be reachable from the "
                f"network; give a token explicitly (--token or {TOKEN_ENV}) to allow it"
            )
        prices = price_option(args.prices)
        policy = _load(args.policy, "policy")
        families = trained_families(policy)
        fallback = None
        fallback_label = None
        fb = args.fallback.strip()
        if fb == "self":  # every family, "other" too, goes to the policy itself
            families, fallback_label = set(FAMILIES), "self"
        elif fb != "none":
            fallback = _load(fb, "fallback policy")
            if not getattr(policy, "reads_prices", True):
                print(
                    f"dtoc-rl serve: warning: --fallback {fb} is not used: {args.policy} reads no prices "
                    "and serves every model family, an unknown one too",
                    file=sys.stderr,
                    flush=True,
                )
        decide_on_threads(args.threads, policy, fallback)
        if args.log_dir is not None:  # a log folder that cannot be written: now, not after the sessions
            from dtoc_rl.data.paths import writable_folder

            try:
                writable_folder(args.log_dir, "log folder", private=True)
            except ValueError as e:
                raise CLIError(f"--log-dir: {e}") from None
        service = DecisionService(
            policy,
            fallback=fallback,
            fallback_label=fallback_label,
            families=families,
            max_items=args.max_items
            or getattr(getattr(policy, "cfg", None), "max_items", None)
            or DEFAULT_MAX_ITEMS,
            max_body=args.max_body,
            max_sessions=args.max_sessions,
            max_session_chars=args.max_session_chars,
            max_total_chars=args.max_total_chars,
            prices=prices,
            log_dir=args.log_dir,
        )
        try:  # run the policy once now: a broken checkpoint fails here, not at the first request
            service.decide(_SAMPLE)
        except Exception as e:
            raise CLIError(
                f"policy {service.label} failed on a sample request: {type(e).__name__}: {e}"
            ) from None
        try:
            log = (
                (lambda line: print(f"dtoc-rl serve: {line}", file=sys.stderr, flush=True))
                if args.log
                else None
            )
            server = make_server(
                service, args.host, args.port, log=log, token=tokens, allow_hosts=args.allow_host
            )
        except OSError as e:
            raise CLIError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    except CLIError as e:
        return fail(str(e))

    host, port = server.server_address[:2]
    info = {
        "url": f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}",
        "host": host,
        "port": port,
        "policy": service.label,
        "fallback": service.fallback_label,
        "families": sorted(service.families),
        "max_items": service.max_items,
        "version": service.version()["version"],
        "token": "generated (printed to stderr)" if tokens is None else "given",
    }
    if args.json:
        print(json.dumps(info), flush=True)
    else:
        print(
            f"dtoc-rl serve: {service.label} on {info['url']} "
            f"(fallback {service.fallback_label}; POST /decide, GET /health, GET /version)",
            flush=True,
        )
    if tokens is None:  # printed once: the operator hands it to the clients
        print(
            f"dtoc-rl serve: token: {server.token}  (clients send 'Authorization: Bearer <token>'; "
            f"set {TOKEN_ENV} to it for the OpenCode plugin and RemotePolicy)",
            file=sys.stderr,
            flush=True,
        )
    if not is_loopback(host):
        print(
            f"dtoc-rl serve: warning: listening on {host}, reachable from the network over plain HTTP",
            file=sys.stderr,
            flush=True,
        )

    serve_until_stopped(server)
    if not args.json:
        print("dtoc-rl serve: stopped", file=sys.stderr)
    return 0
