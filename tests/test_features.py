"""Decoding actions: errors name the expected space; any non-zero integer counts as set."""

import numpy as np
import pytest

from dtoc_rl.features import action_space, check_action, decode_action

N = 8
SPACE = action_space(N)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.bool_])
def test_non_zero_entries_are_set(dtype):
    e = np.array([0, 1, 0, 0, 1, 0, 0, 1]).astype(dtype)
    d = np.zeros(N, dtype)
    if dtype in (np.int8, np.int64):
        e[1] = -3
    en, di = decode_action({"enable": e, "disable": d}, N, SPACE)
    assert en.dtype == di.dtype == np.bool_
    assert en.tolist() == [False, True, False, False, True, False, False, True] and not di.any()
    ce, cd = check_action({"enable": e, "disable": d}, N, SPACE)
    assert ce is e and cd is d  # checked, not converted


def test_lists_are_accepted():
    en, di = decode_action({"enable": [0] * N, "disable": [1] + [0] * (N - 1)}, N, SPACE)
    assert di.tolist() == [True] + [False] * (N - 1) and not en.any()


@pytest.mark.parametrize(
    "action,msg",
    [
        ({"enable": np.zeros(3, np.int8), "disable": np.zeros(N, np.int8)}, r"'enable'\] has shape \(3,\)"),
        ({"enable": np.zeros(N, np.int8), "disable": np.zeros((N, 1), np.int8)}, r"'disable'\] has shape"),
        ({"enable": np.zeros(N, np.float32), "disable": np.zeros(N, np.int8)}, "has dtype float32"),
        ({"enable": np.zeros(N, object), "disable": np.zeros(N, np.int8)}, "has dtype object"),
        ({"enable": np.zeros(N, np.int8)}, "dict with keys 'enable' and 'disable'.*with keys \\['enable'\\]"),
        (np.zeros(N), "dict with keys 'enable' and 'disable'.*got ndarray"),
        (None, "got NoneType"),
    ],
)
def test_errors_name_the_expected_space(action, msg):
    for fn in (decode_action, check_action):
        with pytest.raises(ValueError, match=msg) as e:
            fn(action, N, SPACE)
        assert "MultiBinary" in str(e.value)
