import json

import pytest

from dtoc_rl import MemoryStore, apply_manage_context
from dtoc_rl.core.manage import MANAGE_CONTEXT_DESCRIPTION, anthropic_tool, openai_tool, parse_arguments

VERBATIM = (
    "Use this tool when you feel the context limit is increasing and there are some tool outputs whose "
    "content is no longer relevant to the current reasoning step. One can disable such outputs to free up "
    "context space, and re-enable them later if needed."
)


@pytest.fixture
def store():
    s = MemoryStore()
    for n in (100, 2000, 8000):
        s.add("z" * n)
    return s


def test_tool_definitions_carry_the_verbatim_description():
    assert MANAGE_CONTEXT_DESCRIPTION == VERBATIM
    o, a = openai_tool(), anthropic_tool()
    assert o["function"]["description"] == VERBATIM and a["description"] == VERBATIM
    assert o["function"]["name"] == a["name"] == "manage_context"
    for params in (o["function"]["parameters"], a["input_schema"]):
        assert set(params["properties"]) == {"enable", "disable"}


def test_disable_then_enable_is_reversible(store):
    before = store.active_tokens
    r1 = apply_manage_context(store, disable=["t0001", "t0002"])
    assert r1.disabled == ["t0001", "t0002"] and r1.ok
    assert r1.delta < 0 and r1.tokens_after == store.recount()
    r2 = apply_manage_context(store, enable=["t0001", "t0002"])
    assert r2.enabled == ["t0001", "t0002"] and r2.delta == -r1.delta
    assert store.active_tokens == before


def test_delta_equals_difference_of_full_recounts(store):
    r0 = store.recount()
    rep = apply_manage_context(store, disable=["t0002"], enable=["t0000"])
    assert rep.delta == store.recount() - r0


def test_unknown_duplicate_conflicting_and_already_set(store):
    store.set_visible(["t0000"], False)
    rep = apply_manage_context(
        store,
        enable=["t0000", "t0000", "t0001", "t0099"],
        disable=["t0001", "t0002", "t0002", 7],
    )
    assert rep.enabled == ["t0000"]
    assert rep.disabled == ["t0002"]
    assert rep.duplicates == ["t0000", "t0002"]
    assert "both enable and disable" in rep.errors["t0001"]
    assert "unknown tool key" in rep.errors["t0099"]
    assert "must be a string" in rep.errors["7"]
    assert store.get("t0001").visible  # the conflicting key was left alone
    rep2 = apply_manage_context(store, disable=["t0002"])
    assert rep2.unchanged == ["t0002"] and rep2.delta == 0


def test_report_json_is_what_the_model_reads(store):
    rep = apply_manage_context(store, disable=["t0002"])
    d = json.loads(rep.to_json())
    assert d["disabled"] == ["t0002"] and d["delta"] == rep.delta
    assert {"tokens_before", "tokens_after", "errors", "unchanged"} <= set(d)


@pytest.mark.parametrize(
    "args,err",
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be an object"),
        ({"enable": 3}, "must be a list"),
        ({"hide": ["t1"]}, "unexpected argument"),
    ],
)
def test_bad_arguments_become_errors_not_exceptions(args, err):
    _, _, errors = parse_arguments(args)
    assert any(err in v for v in errors.values())


def test_single_string_is_accepted_as_one_key():
    assert parse_arguments({"disable": "t0001"})[1] == ["t0001"]


def test_applying_one_key_as_a_string_is_that_key_not_its_characters(store):
    rep = apply_manage_context(store, disable="t0001")
    assert rep.disabled == ["t0001"] and rep.ok and not rep.errors
    assert apply_manage_context(store, enable="t0001", disable=None).enabled == ["t0001"]
