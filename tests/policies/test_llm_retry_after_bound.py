"""A Retry-After longer than MAX_RETRY_AFTER_S fails the call at once with both backends.

The Anthropic SDK waits whatever a server asks (an hour here); the OpenAI SDK does not retry beyond
two minutes.  Against loopback fake servers; every wait is bounded by a join timeout.
"""

import threading

import pytest

from dtoc_rl.policies.llm_backends import AnthropicBackend, BackendError, OpenAIBackend
from tests.policies.fake_servers import FakeAnthropicServer, FakeOpenAIServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")


@pytest.mark.parametrize(
    ("flavour", "header"),
    [
        ("anthropic", {"retry-after": "3600"}),
        ("anthropic", {"retry-after-ms": "3600000"}),
        ("anthropic", {"retry-after": "Fri, 31 Dec 2100 23:59:59 GMT"}),
        ("openai", {"retry-after": "3600"}),
    ],
)
def test_a_retry_after_over_the_bound_is_not_waited_for(flavour, header):
    server = FakeAnthropicServer if flavour == "anthropic" else FakeOpenAIServer
    with server({"disable": ["t0000"]}, behaviour=["429", "tool"], error_headers=header) as srv:
        if flavour == "anthropic":
            be = AnthropicBackend("claude-sonnet-test", base_url=srv.url, api_key="ak", timeout=10.0)
        else:
            be = OpenAIBackend("gpt-4o-test", base_url=srv.url, api_key="sk", timeout=10.0)
        out: list = []

        def call() -> None:
            try:
                be.complete("system", "user")
            except BackendError as e:
                out.append(e)

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive(), f"still waiting on {header} after 30 s"
    assert len(srv.requests) == 1 and be.stats["http_429"] == 1
    (err,) = out
    assert err.kind == "backend_http" and err.attempts == 1


def test_a_retry_after_within_the_bound_is_still_waited_out():
    with FakeAnthropicServer(
        {"disable": ["t0000"]}, behaviour=["429", "tool"], error_headers={"retry-after": "1"}
    ) as srv:
        be = AnthropicBackend("claude-sonnet-test", base_url=srv.url, api_key="ak", timeout=10.0)
        assert be.complete("system", "user").attempts == 2
    first, second = srv.requests
    assert 0.9 <= second["time"] - first["time"] < 5.0
