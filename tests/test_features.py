"""Observations built from ItemStates and from ItemColumns agree; decoding actions: errors name the
expected space; any non-zero integer counts as set."""

import numpy as np
import pytest

from dtoc_rl.engine.features import (
    ItemColumns,
    ItemState,
    action_space,
    build_observation,
    check_action,
    decode_action,
)
from dtoc_rl.labels.words import WORDS_PER_OUTPUT

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


# -- ItemColumns: the columnar twin of build_observation -------------------------------------


def _random_columns(rng: np.random.Generator, count: int, now: int, users: int):
    """Random outputs written into ItemColumns, and the same outputs as ItemStates built
    directly from the inputs (not read back from the columns)."""
    cols = ItemColumns(capacity=3)  # small: growing must keep the rows
    states = []
    visible = rng.random(count) < 0.6
    for i in range(count):
        tokens, tool = int(rng.integers(0, 20000)), int(rng.integers(0, 5))
        call, users_at = int(rng.integers(0, now + 1)), int(rng.integers(0, users + 1))
        err = rng.random() < 0.2
        # up to twice as many words as an output keeps: the columns keep the first WORDS_PER_OUTPUT
        words = tuple(
            int(w) for w in rng.integers(1, 2**31 - 1, int(rng.integers(0, 2 * WORDS_PER_OUTPUT + 1)))
        )
        cols.append(tokens, tool, call=call, users_at=users_at, is_error=bool(err), words=words)
        st = ItemState(est_tokens=tokens, age=now - call, visible=bool(visible[i]), tool_id=tool,
                       is_error=bool(err), turns_after=users - users_at,
                       words=words[:WORDS_PER_OUTPUT])  # fmt: skip
        for _ in range(int(rng.integers(0, 3))):
            name = str(rng.choice(["times_needed", "rereads", "toggles"]))
            cols.bump(i, name)
            setattr(st, name, getattr(st, name) + 1)
        if rng.random() < 0.3:
            name = str(rng.choice(["modified", "superseded"]))
            cols.flag(i, name)
            setattr(st, name, True)
        needs = [int(x) for x in rng.integers(0, now + 3, int(rng.integers(0, 3)))]
        for turn in needs:  # a need after "now" clamps since_need at 0
            cols.need(i, turn)
        st.since_need = max(0, now - max(needs)) if needs else None
        states.append(st)
    return cols, visible, states


@pytest.mark.parametrize("count,n", [(0, 8), (5, 8), (8, 8), (30, 8), (300, 128)])
def test_item_columns_match_build_observation(count, n):
    rng = np.random.default_rng(count * 31 + n)
    now, users = 40, 3
    cols, visible, states = _random_columns(rng, count, now, users)
    kw = dict(active_tokens=12345, step=now + 1, model_family="gpt-4o", budget_tokens=8000,
              saved_tokens=777, misses=2, mgmt_calls=5)  # fmt: skip
    ours = cols.observation(visible, n, now=now, users=users, **kw)
    theirs = build_observation(states, n, **kw)
    assert ours.keys() == theirs.keys()
    for k in ours:
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)
        assert np.asarray(ours[k]).dtype == np.asarray(theirs[k]).dtype, k
    # visibility kept in the columns gives the same observation
    for i, v in enumerate(visible):
        cols.set_visible(i, bool(v))
    kept = cols.observation(None, n, now=now, users=users, **kw)
    np.testing.assert_array_equal(kept["items"], ours["items"])
    # and state() reads back what was written
    assert [cols.state(i, bool(visible[i]), now=now, users=users) for i in range(count)] == states


def test_item_columns_reject_unknown_fields_and_wrong_visibility():
    cols = ItemColumns()
    cols.append(100, 0, call=0, users_at=0)
    with pytest.raises(KeyError, match="not a counter"):
        cols.bump(0, "modified")
    with pytest.raises(KeyError, match="not a flag"):
        cols.flag(0, "toggles")
    with pytest.raises(ValueError, match="visible has 2 entries for 1 outputs"):
        cols.observation(np.ones(2, bool), 4, now=0, users=0, active_tokens=0, step=0)
    with pytest.raises(TypeError, match=r"unknown \['steps'\], missing \['step'\]"):
        cols.observation(None, 4, now=0, users=0, active_tokens=0, steps=3)


def test_add_needs_counts_once_per_output_and_charges_hidden_ones():
    from dtoc_rl.data.schema import Need, Step

    cols = ItemColumns()
    for call in range(3):
        cols.append(1000, 0, call=call, users_at=0)
    row_of_step = {0: 0, 1: 1, 2: 2}  # step i stored row i
    steps = [
        Step(index=3, turn=3, masked_before=[0],
             needs=[Need(0, "provenance", "x"), Need(0, "reaccess", "f.py"), Need(1, "reference", "t1")]),
        Step(index=4, turn=4, needs=[Need(1, "provenance", "y"), Need(9, "provenance", "z")]),
    ]  # fmt: skip
    assert cols.add_needs(steps, row_of_step) == 1  # step 0 was hidden when step 3 needed it
    get = lambda row, name: cols.get(row, name)  # noqa: E731
    assert [get(r, "times_needed") for r in range(3)] == [1, 1, 0]  # once per output in a batch
    assert (get(0, "superseded"), get(0, "rereads"), get(1, "rereads")) == (1, 1, 0)
    states = [cols.state(r, True, now=5, users=0) for r in range(3)]
    assert [s.since_need for s in states] == [2, 2, None]  # the first need's turn (3) for both


def test_a_hidden_output_re_accessed_is_a_miss_but_not_a_counted_need():
    from dtoc_rl.data.schema import Need, Step

    cols = ItemColumns()
    cols.append(1000, 0, call=0, users_at=0)
    # call 1 read it; the step of call 2 re-accesses it hidden
    step = Step(index=1, turn=2, masked_before=[0], needs=[Need(0, "reaccess", "file:f.py")])
    assert cols.add_needs([step], {0: 0}) == 1  # live, the re-read is what the hiding cost
    # the features keep ReplayEnv's meaning: only MISS_KINDS are counted needs
    assert (cols.get(0, "times_needed"), cols.get(0, "rereads"), cols.get(0, "superseded")) == (0, 0, 1)
    assert cols.kind_misses == 0


@pytest.mark.parametrize("needed", [False, True])
def test_an_output_hidden_before_any_call_read_it_is_one_miss_not_a_need(needed):
    from dtoc_rl.data.schema import Need, Step

    cols = ItemColumns()
    cols.append(1000, 0, call=0, users_at=0)
    cols.append(1000, 0, call=1, users_at=0)
    # call 2 is the first to read output 1 (stored by call 1); output 0 was read by call 1
    assert cols.add_unread(2, [0, 1], {0: 0, 1: 1}) == 1  # as the turn is recorded, without labels
    needs = [Need(1, "provenance", "x")] if needed else []
    step = Step(index=2, turn=2, masked_before=[0, 1], needs=needs)
    assert cols.add_needs([step], {0: 0, 1: 1}) == 0  # its labels add no second miss
    assert (cols.get(1, "times_needed"), cols.get(1, "rereads")) == (float(needed), 1)
    assert (cols.get(0, "times_needed"), cols.get(0, "rereads")) == (0, 0)
    assert cols.kind_misses == 1  # charged once, as the simulator charges a call's read of an output
