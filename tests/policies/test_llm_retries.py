"""LLM policy backends retry like the SDKs do: Retry-After honoured, 408/409/429/5xx retried.

Against loopback fake servers (tests/policies/fake_servers.py); every wait is bounded.
"""

import email.utils
import time

import pytest

from dtoc_rl.policies.llm_backends import AnthropicBackend, BackendError, OpenAIBackend
from tests.policies.fake_servers import FakeAnthropicServer, FakeOpenAIServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")


def _backend(flavour, srv, **kw):
    kw.setdefault("timeout", 10.0)
    kw.setdefault("max_retries", 2)
    if flavour == "openai":
        return OpenAIBackend("gpt-4o-test", base_url=srv.url, api_key="sk-test", **kw)
    return AnthropicBackend("claude-sonnet-test", base_url=srv.url, api_key="ak-test", **kw)


SERVERS = {"openai": FakeOpenAIServer, "anthropic": FakeAnthropicServer}


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_429_with_retry_after_seconds_is_waited_out(flavour):
    # the old hand-made loop retried a 'retry-after: 2' after 1 s (its own backoff), whatever the server said
    with SERVERS[flavour](
        {"disable": ["t0000"]}, behaviour=["429", "tool"], error_headers={"retry-after": "2"}
    ) as srv:
        be = _backend(flavour, srv)
        reply = be.complete("system", "user")
    first, second = srv.requests
    wait = second["time"] - first["time"]
    assert 1.9 <= wait < 5.0, wait
    assert reply.attempts == 2 and be.stats["http_429"] == 1 and be.stats["retries"] == 1


def test_a_retry_after_http_date_is_honoured():
    with FakeOpenAIServer({"disable": ["t0000"]}, behaviour=["503", "tool"]) as srv:
        be = _backend("openai", srv)  # first: making the SDK client can take seconds on a busy machine
        srv.error_headers = {"retry-after": email.utils.formatdate(time.time() + 3, usegmt=True)}
        be.complete("system", "user")  # the date has whole seconds: a wait of 2-3 s
    first, second = srv.requests
    assert 1.5 <= second["time"] - first["time"] < 5.0


@pytest.mark.parametrize("status", ["408", "409", "429", "500", "502", "503"])
def test_transient_statuses_are_retried(status):
    with FakeOpenAIServer({"disable": ["t0000"]}, behaviour=[status, "tool"]) as srv:
        be = _backend("openai", srv)
        assert be.complete("s", "u").attempts == 2
    assert len(srv.requests) == 2 and be.stats[f"http_{status}"] == 1


@pytest.mark.parametrize("status", ["401", "403", "404"])
def test_other_errors_are_not_retried(status):
    with FakeOpenAIServer(behaviour=status) as srv:
        be = _backend("openai", srv)
        with pytest.raises(BackendError) as err:
            be.complete("s", "u")
    assert len(srv.requests) == 1 and err.value.kind == "backend_http" and err.value.attempts == 1


def test_without_retry_after_the_backoff_is_exponential_with_jitter_and_bounded():
    with FakeOpenAIServer(behaviour="500", error_headers={}) as srv:
        be = _backend("openai", srv, max_retries=2)
        t0 = time.monotonic()
        with pytest.raises(BackendError, match="after 3 attempts"):
            be.complete("s", "u")
        elapsed = time.monotonic() - t0
    t = [r["time"] for r in srv.requests]
    gaps = [b - a for a, b in zip(t, t[1:])]
    # 0.5 s then 1 s, each shortened by up to 25% (jitter), never longer (plus a busy machine's latency)
    assert 0.37 <= gaps[0] <= 0.8 and 0.74 <= gaps[1] <= 1.4, gaps
    assert elapsed < 5.0 and be.stats["attempts"] == 3 and be.stats["http_500"] == 3
