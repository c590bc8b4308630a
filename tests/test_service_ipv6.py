"""The service on an IPv6 loopback address, which its Host check and its help name."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecisionService, serve_in_thread


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_the_service_listens_on_ipv6_loopback_and_answers_its_own_host_name():
    # "cannot listen on ::1: Address family for hostname not supported" before
    srv, thread = serve_in_thread(DecisionService(make_policy("last_n:n=1")), "::1", 0)
    try:
        port = srv.server_address[1]
        conn = http.client.HTTPConnection("::1", port, timeout=10)
        conn.request("GET", "/health")  # http.client sends Host: [::1]:port
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        items = [{"key": "t0000", "tokens": 900}, {"key": "t0001", "tokens": 50}]
        body = json.dumps({"model_family": "gpt-4o", "items": items})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"}
        conn.request("POST", "/decide", body, headers)
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["disable"] == ["t0000"]
        conn.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
