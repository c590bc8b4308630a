import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtoc_rl import MemoryStore, SQLiteStore, UnknownKeyError


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    s = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    yield s
    s.close()


def test_add_assigns_sequential_keys_never_provider_ids(store):
    a = store.add("one", call_id="call_abc", tool_name="bash")
    b = store.add("two")
    assert (a.tool_key, b.tool_key) == ("t0000", "t0001")
    assert a.call_id == "call_abc" and a.tool_key != a.call_id
    assert store.by_call_id("call_abc") is a
    assert len(store) == 2 and "t0001" in store and "t9999" not in store


def test_active_tokens_tracks_every_change(store):
    recs = [store.add("x" * n) for n in (10, 400, 4000)]
    assert store.active_tokens == store.recount() == sum(r.visible_cost for r in recs)
    store.set_visible(["t0002"], False)
    assert store.active_tokens == store.recount()
    assert store.hidden_keys() == ["t0002"]
    store.set_visible(["t0002"], True)
    assert store.active_tokens == sum(r.visible_cost for r in recs)


def test_unknown_key_changes_nothing(store):
    store.add("a")
    before = store.active_tokens
    with pytest.raises(UnknownKeyError, match="t0099"):
        store.set_visible(["t0000", "t0099"], False)
    assert store.get("t0000").visible and store.active_tokens == before


def test_duplicate_call_id_rejected(store):
    store.add("a", call_id="c1")
    with pytest.raises(ValueError, match="already answered"):
        store.add("b", call_id="c1")


def test_bytes_are_decoded_without_loss_of_valid_text(store):
    rec = store.add(b"ok \xff\xfe end")
    assert rec.tool_result == "ok \\xff\\xfe end"


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=30),
    ops=st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 29), max_size=6)), max_size=20),
)
def test_running_total_equals_full_recount_after_any_sequence(sizes, ops):
    s = MemoryStore()
    for n in sizes:
        s.add("y" * n)
    for visible, idx in ops:
        keys = [f"t{i:04d}" for i in idx if i < len(sizes)]
        s.set_visible(keys, visible)
        assert s.active_tokens == s.recount()
