"""Policy spec parameters are checked against the rule's own defaults, and a bad one is named."""

import pytest

from dtoc_rl.policies.registry import PolicySpecError, make_policy


@pytest.mark.parametrize(
    "spec, words",
    [
        ("last_n:n=abc", ["n must be an integer", "'abc'"]),
        ("last_n:n=2.5", ["n must be an integer", "2.5"]),
        ("last_n:n=nan", ["n must be an integer"]),
        ("hide_big:tokens=inf", ["tokens must be an integer"]),
        ("last_n:m=3", ["unknown parameter 'm'", "n, polling"]),
        ("last_n:n=0", ["n must be a positive integer"]),
        ("budget:budget=true", ["budget must be an integer"]),
        ("oracle:foo=1", ["unknown parameter 'foo'", "exact_max_outputs, restores"]),
        ("oracle:exact_max_outputs=x", ["exact_max_outputs must be an integer"]),
        ("oracle:restores=2", ["restores must be true or false (1 or 0), got 2"]),
        ("last_n:n=5,n=6", ["n is given twice (a sweep is n=a|b)"]),
    ],
)
def test_bad_parameter_is_named_in_one_line(spec, words):
    with pytest.raises(PolicySpecError) as e:
        make_policy(spec)
    msg = str(e.value)
    assert "\n" not in msg and spec in msg
    for w in words:
        assert w in msg


def test_good_parameters_keep_their_types():
    p = make_policy("last_n:n=7,polling=2")
    assert (p.n, p.polling) == (7, 2) and type(p.n) is int
    p = make_policy("anthropic_clear:exclude_tools=read+search")
    assert list(p.exclude_tools) == ["read", "search"] or set(p.exclude_tools) == {"read", "search"}
    p = make_policy("anthropic_clear:exclude_tools=read")
    assert list(p.exclude_tools) == ["read"] or set(p.exclude_tools) == {"read"}


def test_the_oracles_parameters_are_typed_like_a_rules():
    p = make_policy("oracle:restores=0,exact_max_outputs=4")
    assert p.restores is False and p.exact_max_outputs == 4
    assert make_policy("oracle:restores=true").restores is True


def test_a_folder_that_holds_a_checkpoint_says_where_it_is(tmp_path):
    from dtoc_rl.policies.learned import CheckpointError
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    LearnedPolicyConfig(n_layers=1, d_model=16, n_heads=2).create().save(tmp_path / "demo" / "policy")
    with pytest.raises(CheckpointError, match=r"it holds one: .*demo/policy$"):
        make_policy(str(tmp_path / "demo"))


def test_an_empty_spec_is_named_not_read_as_the_current_folder():
    with pytest.raises(PolicySpecError, match="an empty policy spec"):
        make_policy(" ")
