"""``dtoc-rl proxy --policy SPEC_OR_CHECKPOINT --upstream URL``: a policy in front of any agent.

An OpenAI-, Anthropic- and Gemini-compatible HTTP proxy: point the agent's base URL at it and, before each
model call, the policy decides which of the conversation's tool outputs the model sees; the ones it
hides go upstream as short DTOC placeholders, everything else as the agent sent it, with the agent's
own credentials.  No change to the agent's code:

  dtoc-rl proxy --policy CKPT --upstream https://api.openai.com
  OPENAI_BASE_URL=http://127.0.0.1:8766/v1 your-agent ...

  dtoc-rl proxy --policy CKPT --upstream https://api.anthropic.com
  ANTHROPIC_BASE_URL=http://127.0.0.1:8766 your-agent ...

  dtoc-rl proxy --policy CKPT --upstream https://generativelanguage.googleapis.com
  GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8766 gemini ...

POST .../chat/completions, .../responses (Codex; not with previous_response_id, where the API keeps
the history), .../messages and Gemini's .../models/M:generateContent and :streamGenerateContent are
managed (streamed answers are passed on as they arrive); every
other request is passed through.  Each conversation is mirrored in memory (the
--max-conversations most recent); with --log-dir each is also written as a log `dtoc-rl ingest`
reads, with the usage the API reported, so `dtoc-rl evaluate` can price what the policy did (a log
is written at each request, while the model answers, and what is pending before the proxy exits,
for up to a minute; the closing answer, which no request follows, is added when the proxy stops or
drops the conversation).  A model
of a family the policy does not serve (an unknown name: give its prices with --prices; a checkpoint
trained on one family serves that one only) and a request the proxy cannot read go upstream
unchanged: the proxy never stops an agent.  The policy is tried on a sample conversation at start.

Binds to 127.0.0.1; another address must be allowed with --allow-remote (the proxy relays whatever
credentials its callers send).  Redirects go back to the agent, never followed; HTTPS_PROXY and
HTTP_PROXY are used to reach the upstream.  GET /dtoc-proxy/health counts requests, conversations
and outputs sent hidden.  Stop it with Ctrl-C or SIGTERM (exit code 0).
"""

from __future__ import annotations

import argparse
import json
import sys

from dtoc_rl.cli.common import CLIError, at_least, fail, number_in, price_option, serve_until_stopped, warn


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dtoc_rl.serve.proxy import DEFAULT_MAX_CONVERSATIONS, DEFAULT_PROXY_PORT

    p.description = __doc__.split("\n\n", 1)[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--policy", required=True, help="policy spec, learned-policy checkpoint folder, or module:Class"
    )
    p.add_argument(
        "--upstream",
        required=True,
        help="the API the requests go on to, without the path the agent sends (https://api.openai.com, "
        "https://api.anthropic.com, http://localhost:8000 for a local server)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=at_least(0, 65535),
        default=DEFAULT_PROXY_PORT,
        help=f"port (default {DEFAULT_PROXY_PORT}; 0: any free)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback: anyone who reaches it can relay requests upstream",
    )
    p.add_argument(
        "--prices",
        metavar="FILE|JSON",
        help="your prices {model: {input, output, cache_read, cache_write}} (USD per million tokens), "
        "for models the price table lacks: the policy sees them, and manages such a model even when "
        "its family is unknown",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="write each conversation there (one JSONL log per conversation, rewritten after every "
        "call) for dtoc-rl ingest and evaluate; the logs hold every tool output the agent read, so each "
        "is yours alone (mode 600), as is a folder it makes (700); one others can write to is warned of",
    )
    p.add_argument(
        "--max-conversations",
        type=at_least(1),
        default=DEFAULT_MAX_CONVERSATIONS,
        help=f"conversations mirrored at once; the least recently used is dropped beyond it "
        f"({DEFAULT_MAX_CONVERSATIONS})",
    )
    p.add_argument(
        "--max-items",
        type=at_least(1),
        default=None,
        help="observation slots (default: the checkpoint's max_items, else 128)",
    )
    p.add_argument(
        "--timeout",
        type=number_in(0, 7 * 86400, open_low=True),
        default=600.0,
        help="seconds to wait for the upstream API, at most a week (600)",
    )
    p.add_argument(
        "--threads",
        type=at_least(1),
        default=1,
        help="torch intra-op threads for learned policies (default 1: lowest latency for one small network)",
    )
    p.add_argument("--log", action="store_true", help="log every managed request to stderr")
    p.add_argument("--json", action="store_true", help="print the startup info as one JSON line")
    p.add_argument("--quiet", action="store_true", help="print nothing at start and stop")


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.cli.serve import _load, decide_on_threads, trained_families
    from dtoc_rl.serve.proxy import (
        ContextProxy,
        check_upstream,
        make_proxy_server,
        versioned_upstream,
    )
    from dtoc_rl.serve.service import is_loopback

    try:
        try:
            check_upstream(args.upstream)
        except ValueError as e:
            raise CLIError(f"--{e}") from None
        if msg := versioned_upstream(args.upstream):
            warn(msg)
        if not is_loopback(args.host) and not args.allow_remote:
            raise CLIError(
                f"--host {args.host} is not a loopback address: anyone reaching it could relay requests "
                "to the upstream API; add --allow-remote to allow it"
            )
        prices = price_option(args.prices)
        policy = _load(args.policy, "policy")
        decide_on_threads(args.threads, policy)

        def log(line: str) -> None:
            print(f"dtoc-rl proxy: {line}", file=sys.stderr, flush=True)

        try:
            proxy = ContextProxy(
                policy,
                prices=prices,
                max_conversations=args.max_conversations,
                log_dir=args.log_dir,
                orchestrator={"max_items": args.max_items} if args.max_items else None,
                families=trained_families(policy),
                log=log if args.log else None,
            )
        except ValueError as e:  # a log folder that cannot be written: now, not after the session
            raise CLIError(f"--log-dir: {e}") from None
        try:  # run the policy once now: a broken checkpoint fails here, not at the agent's first call
            proxy.check()
        except Exception as e:
            raise CLIError(f"policy {args.policy} failed on a sample conversation: {e}") from None
        try:
            server = make_proxy_server(proxy, args.upstream, args.host, args.port, timeout_s=args.timeout)
        except OSError as e:
            raise CLIError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    except CLIError as e:
        return fail(str(e))
    host, port = server.server_address[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    label = str(getattr(policy, "label", None) or type(policy).__name__)
    info = {"url": url, "host": host, "port": port, "policy": label, "upstream": server.upstream.url}
    if args.json:
        print(json.dumps(info), flush=True)
    elif not args.quiet:
        print(
            f"dtoc-rl proxy: {label} on {url}, passing on to {server.upstream.url}\n"
            f"  OpenAI-style agents: OPENAI_BASE_URL={url}/v1    Anthropic-style: ANTHROPIC_BASE_URL={url}\n"
            f"  Gemini-style: GOOGLE_GEMINI_BASE_URL={url}",
            flush=True,
        )

    serve_until_stopped(server)
    if not (args.json or args.quiet):
        print(
            f"dtoc-rl proxy: stopped after {proxy.requests} requests; {proxy.hidden_sent} outputs sent "
            "hidden",
            file=sys.stderr,
        )
    return 0
