"""RemotePolicy says once when the service refuses it (a wrong token) instead of silently showing all."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dtoc_rl.data.models import family_id
from dtoc_rl.engine.features import observation_space
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.serve.service import DecisionService, RemotePolicy, serve_in_thread


def _obs():
    space = observation_space(8)
    space.seed(0)
    obs = space.sample()
    obs["item_mask"] = np.ones(8, np.int8)
    # a priced family: a random one may be unpriced, and its price warning is not what this tests
    obs["family"] = np.int64(family_id("gpt-4o"))
    return obs


def test_a_wrong_token_is_warned_about_once_and_everything_is_shown():
    srv, thread = serve_in_thread(DecisionService(make_policy("last_n:n=1")), "127.0.0.1", 0)
    try:
        pol = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token="not-the-token")
        obs = _obs()
        with pytest.warns(RuntimeWarning, match="HTTP 401"):
            action = pol.act(obs)
        np.testing.assert_array_equal(action["enable"], np.asarray(obs["enable_mask"], np.int8))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same failure again: counted, not warned again
            pol.act(obs)
        assert pol.errors == 2
        pol.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def test_the_right_token_gets_answers_and_no_warning():
    srv, thread = serve_in_thread(DecisionService(make_policy("last_n:n=1")), "127.0.0.1", 0)
    try:
        pol = RemotePolicy(f"http://127.0.0.1:{srv.server_address[1]}", token=srv.token)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pol.act(_obs())
        assert pol.errors == 0 and pol.last is not None
        pol.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
