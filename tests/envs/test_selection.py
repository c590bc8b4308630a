import numpy as np
import pytest

from dtoc_rl.envs.selection import pick_index

IDS = ["a", "b", "c"]


def test_by_name_index_sequence_and_random():
    rng = np.random.default_rng(0)
    kw = dict(key="traj_id", ids=IDS, rng=rng, sequential=False, counter=5)
    assert pick_index({"traj_id": "c"}, **kw) == (2, 5)
    assert pick_index({"index": 4}, **kw) == (1, 5)
    assert pick_index({}, **{**kw, "sequential": True}) == (2, 6)  # 5 % 3, counter advances
    draws = [pick_index({}, **{**kw, "rng": np.random.default_rng(7)})[0] for _ in range(3)]
    assert len(set(draws)) == 1 and 0 <= draws[0] < 3  # same seed, same draw


def test_unknown_name_lists_what_exists():
    with pytest.raises(KeyError, match=r"no traj_id 'z'; available: \['a', 'b', 'c'\]"):
        pick_index({"traj_id": "z"}, key="traj_id", ids=IDS, rng=np.random.default_rng(0), sequential=False,
                   counter=0)  # fmt: skip
