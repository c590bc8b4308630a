"""Model families only grow: ids never move, and a checkpoint trained on fewer still loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dtoc_rl.data.models import _RULES, FAMILIES, family_id
from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy, obs_to_tensors
from dtoc_rl.policies.learned_config import LearnedPolicyConfig

# The ids checkpoints were trained with: appending is fine, moving any of these is not.
PINNED = (
    "other", "gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-4", "gpt-5", "openai-o", "gemini-3-pro",
    "gemini-2.5-pro", "gemini", "claude-opus", "claude-sonnet", "claude-haiku", "qwen-coder", "qwen",
    "deepseek-coder", "deepseek-chat", "doubao-pro", "llama", "gpt-oss", "kimi", "glm", "grok", "minimax",
    "mistral",
)  # fmt: skip


def test_family_ids_never_move_and_every_rule_has_one():
    assert FAMILIES[: len(PINNED)] == PINNED
    assert len(set(FAMILIES)) == len(FAMILIES)
    assert {f for _, f in _RULES} <= set(FAMILIES)
    assert family_id("gpt-4o") == 2 and family_id("nonsense") == 0


def _policy(n_families: int) -> LearnedPolicy:
    return LearnedPolicy(
        LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, seed=3), n_families=n_families
    )


def test_a_checkpoint_trained_on_fewer_families_loads_and_reads_new_ones_as_other(tmp_path):
    old = _policy(len(FAMILIES) - 1)
    old.save(tmp_path / "ck")
    meta = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert meta["families"] == list(FAMILIES[:-1])
    policy = LearnedPolicy.load(tmp_path / "ck")  # would be a shape mismatch if ids were fixed-size
    assert policy.net.n_families == len(FAMILIES) - 1
    from dtoc_rl.engine.features import observation_space

    obs = observation_space(8).sample()
    probs = {}
    for fid in (0, len(FAMILIES) - 1):
        obs["family"] = np.int64(fid)
        with torch.inference_mode():
            probs[fid] = policy.net(*obs_to_tensors(obs).values()).numpy()
    np.testing.assert_array_equal(probs[0], probs[len(FAMILIES) - 1])
    policy.save(tmp_path / "again")  # saving keeps the count it has
    assert json.loads((tmp_path / "again" / "config.json").read_text())["families"] == list(FAMILIES[:-1])


def test_families_in_another_order_are_still_refused(tmp_path):
    _policy(len(FAMILIES)).save(tmp_path / "ck")
    cfg = tmp_path / "ck" / "config.json"
    meta = json.loads(cfg.read_text())
    meta["families"] = list(reversed(meta["families"]))
    cfg.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="different families"):
        LearnedPolicy.load(tmp_path / "ck")


@pytest.mark.parametrize(
    ("name", "family"),
    [("gpt-oss-120b", "gpt-oss"), ("openai/gpt-oss-20b", "gpt-oss"), ("kimi-k2-0905-preview", "kimi"),
     ("moonshotai/Kimi-K2-Instruct", "kimi"), ("glm-4.6", "glm"), ("zai-org/GLM-4.5-Air", "glm"),
     ("grok-code-fast-1", "grok"), ("MiniMax-M2", "minimax"), ("mistralai/Devstral-Small-2505", "mistral"),
     ("gpt-4o", "gpt-4o"), ("algorithm-x", "other")],
)  # fmt: skip
def test_models_agent_benchmarks_run_on_have_a_family_of_their_own(name, family):
    from dtoc_rl.data.models import normalize_family

    assert normalize_family(name) == family


def test_a_kimi_model_is_billed_at_moonshots_prices_with_its_cache_discount():
    from dtoc_rl.sim.pricing import cache_regime, prices_for

    p = prices_for("kimi", "kimi-k2-0905-preview")
    assert (p.input, p.cache_read, p.output) == (0.60, 0.15, 2.50)
    assert cache_regime(p) == "discount, no write premium"


@pytest.mark.parametrize(
    ("family", "name", "expected", "regime"),
    [("glm", "zai-org/GLM-4.6", (0.60, 0.11, 2.20), "discount, no write premium"),
     ("grok", "x-ai/grok-code-fast-1", (0.20, 0.02, 1.50), "discount, no write premium"),
     ("grok", "grok-4.1-fast-reasoning", (0.20, 0.05, 0.50), "discount, no write premium"),
     ("grok", "x-ai/grok-4-0709", (3.00, 0.75, 15.00), "discount, no write premium"),
     ("grok", "grok-4-fast-non-reasoning", (0.20, 0.05, 0.50), "discount, no write premium"),
     ("minimax", "MiniMax-M2.5", (0.30, 0.03, 1.20), "write premium"),
     ("mistral", "mistralai/devstral-small-2507", (0.10, 0.10, 0.30), "no caching"),
     ("gpt-oss", "openai/gpt-oss-120b", (0.35, 0.35, 0.75), "no caching")],
)  # fmt: skip
def test_the_new_families_are_billed_at_their_own_list_prices_not_gpt_4os(family, name, expected, regime):
    from dtoc_rl.data.models import normalize_family
    from dtoc_rl.sim.pricing import PRICES, cache_regime, prices_for

    assert normalize_family(name) == family and family in PRICES  # a version without an entry: its family's
    p = prices_for(family, name)
    assert (p.input, p.cache_read, p.output) == expected
    assert cache_regime(p) == regime


def test_a_new_family_leaves_every_other_initial_weight_as_it_was():
    """Families added since the first trainings must not change what a seed trains: every layer but the
    family table starts at the same weights whatever its size, and the table at zero."""
    small, grown = _policy(len(PINNED)).net.state_dict(), _policy(len(PINNED) + 7).net.state_dict()
    assert [k for k in small if k != "family.weight" and not torch.equal(small[k], grown[k])] == []
    assert not grown["family.weight"].any() and grown["family.weight"].shape[0] == len(PINNED) + 7
    # and the weights the first trainings' seeds started at (measured at 12c427c, torch 2.13 on CPU)
    assert float(grown["head.3.weight"].double().sum()) == pytest.approx(-0.48654207587242126, abs=1e-7)
    assert float(grown["item_in.0.weight"][0, 0]) == pytest.approx(-0.23369242250919342, abs=1e-7)
