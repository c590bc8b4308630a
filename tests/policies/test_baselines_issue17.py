"""hide_big and cache_clear pinned to their decisions on hand-made observations and tiny episodes."""

import numpy as np
import pytest

from dtoc_rl.engine.features import ItemState, build_observation
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import CacheAwareClear, HideBig, episode_prices, needed_again
from dtoc_rl.policies.registry import make_policy
from dtoc_rl.sim.pricing import PRICES, Prices
from dtoc_rl.sim.simulator import CostConfig

from .crafted import crafted
from .test_baselines import visible_sets

N = 16
# Anthropic-like ratios: a cached read costs 0.1, a cache write 1.25 of an uncached input token
CACHED = Prices(input=1.0, output=1.0, cache_read=0.1, cache_write=1.25)
UNCACHED = Prices(input=1.0, output=1.0, cache_read=1.0, cache_write=1.0)


def obs_of(items, base=0, step=None, family="other"):
    """An observation over ``items`` (oldest first) whose history is ``base`` tokens plus the outputs."""
    active = base + sum(it.est_tokens if it.visible else 40 for it in items)
    saved = sum(it.est_tokens - 40 for it in items if not it.visible)
    return build_observation(
        items, N, active_tokens=active, saved_tokens=saved, step=len(items) if step is None else step,
        model_family=family,
    )  # fmt: skip


def hidden_slots(action):
    assert not action["enable"].any()  # neither rule ever re-shows an output
    return np.flatnonzero(action["disable"]).tolist()


# -- needed again --------------------------------------------------------------------------------------


def test_needed_again_is_a_need_after_the_first_call_that_saw_the_output():
    items = [
        ItemState(5000, age=3, visible=True, times_needed=1, since_need=2),  # need at offset 0 only
        ItemState(5000, age=3, visible=True, times_needed=1, since_need=1),  # need at offset 1
        ItemState(5000, age=3, visible=False, times_needed=2, since_need=0),  # needed while hidden
        ItemState(5000, age=3, visible=True),  # never needed: since_need is its age
    ]
    assert needed_again(obs_of(items))[:4].tolist() == [False, True, True, False]


# -- hide_big ------------------------------------------------------------------------------------------


def test_hide_big_hides_outputs_of_at_least_t_tokens_once_age_calls_saw_them():
    items = [
        ItemState(2000, age=5, visible=True),  # exactly T: hidden
        ItemState(1999, age=5, visible=True),  # below T: kept
        ItemState(9000, age=1, visible=True),  # seen by one call: hidden
        ItemState(9000, age=0, visible=True),  # not seen yet: kept
        ItemState(9000, age=4, visible=False),  # already hidden: nothing to do
        ItemState(9000, age=4, visible=True, times_needed=1, since_need=1),  # needed again: kept
    ]
    assert hidden_slots(HideBig().act(obs_of(items))) == [0, 2]
    assert hidden_slots(HideBig(tokens=8000).act(obs_of(items))) == [2]
    assert hidden_slots(HideBig(age=2).act(obs_of(items))) == [0]


def test_hide_big_on_an_episode_big_outputs_are_seen_by_one_call():
    # 8,000 chars = 2,000 tokens; 7,996 = 1,999; 400 = 100
    seen, info = visible_sets(HideBig(), crafted([8000, 400, 7996, 8000, 400, 8000, 400]))
    # call i (i >= 1) sees output i-1 whatever its size; a big one is gone from call i+1 on
    assert seen == [[0], [1], [1, 2], [1, 2, 3], [1, 2, 4], [1, 2, 4, 5]]
    assert info["totals"]["misses"] == 0
    seen, _ = visible_sets(HideBig(age=2), crafted([8000, 400, 8000, 8000, 400]))
    assert seen == [[0], [0, 1], [1, 2], [1, 2, 3]]


def test_hide_big_keeps_an_output_visible_for_good_once_needed_again():
    sizes = [8000] * 7
    # call 3 needs output 0 (hidden since call 2): a miss; restored in place, it is never hidden again
    seen, info = visible_sets(
        HideBig(), crafted(sizes, needs={3: [0]}), cost_config=CostConfig(recovery="restore")
    )
    assert info["totals"]["misses"] == 1
    assert [0 in v for v in seen] == [True, False, True, True, True, True]
    # a need by the call right after the output is its first read, not "again": hidden as usual
    seen, info = visible_sets(
        HideBig(), crafted(sizes, needs={1: [0]}), cost_config=CostConfig(recovery="restore")
    )
    assert info["totals"]["misses"] == 0
    assert [0 in v for v in seen] == [True, False, False, False, False, False]


def test_hide_big_parameters_and_registry():
    with pytest.raises(ValueError, match="age must be >= 1"):
        HideBig(age=0)
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        HideBig(tokens=-1)
    pol = make_policy("hide_big:tokens=8000,age=2")
    assert isinstance(pol, HideBig) and (pol.tokens, pol.age) == (8000, 2)
    assert pol.label == "hide_big(tokens=8000,age=2)"


# -- cache_clear ---------------------------------------------------------------------------------------


def test_cache_clear_clears_old_outputs_when_the_freed_tokens_pay_for_the_rewrite():
    # a 10,000-token output and a small one, 1,000 tokens of prompt before them, three recent outputs
    items = [ItemState(10_000, age=4, visible=True), ItemState(200, age=3, visible=True)]
    items += [ItemState(200, age=a, visible=True) for a in (2, 1, 0)]
    pol = CacheAwareClear(prices=CACHED)
    # from output 0: frees 9,960 + 160 = 10,120 tokens x 5 calls x 0.1 = 5,060 > the re-write of the
    # 600 tokens after it x (1.25 - 0.1) = 690; the three newest (keep=3) stay
    assert hidden_slots(pol.act(obs_of(items, base=1000))) == [0, 1]


def test_cache_clear_waits_while_the_rewrite_costs_more_than_the_freed_tokens_save():
    # old small outputs under 30,000 tokens of newer ones: frees 820 tokens, the re-write is ~30,000
    items = [ItemState(600, age=4, visible=True), ItemState(300, age=3, visible=True)]
    items += [ItemState(10_000, age=a, visible=True) for a in (2, 1, 0)]
    obs = obs_of(items, base=1000, step=100)
    # 820 x min(100, 50) x 0.1 = 4,100 < 30,000 x 1.15: nothing
    assert hidden_slots(CacheAwareClear(prices=CACHED).act(obs)) == []
    # after 1,000 calls the estimate is still capped at horizon=50 calls
    assert hidden_slots(CacheAwareClear(prices=CACHED).act(obs_of(items, base=1000, step=1000))) == []
    # counting on 100 remaining calls is still short (8,200); on 1,000 it pays (82,000 > 34,500)
    assert hidden_slots(CacheAwareClear(prices=CACHED, horizon=1000).act(obs)) == []
    obs = obs_of(items, base=1000, step=1000)
    assert hidden_slots(CacheAwareClear(prices=CACHED, horizon=1000).act(obs)) == [0, 1]
    # without a cache discount a re-write costs nothing extra: clear at once
    assert hidden_slots(CacheAwareClear(prices=UNCACHED).act(obs_of(items, base=1000, step=5))) == [0, 1]
    # clear_at_least is a floor on the tokens freed
    assert (
        hidden_slots(CacheAwareClear(prices=UNCACHED, clear_at_least=1000).act(obs_of(items, step=5))) == []
    )


def test_cache_clear_starts_the_batch_after_an_output_it_must_not_clear():
    # output 1 was needed again (kept); clearing output 0 too would re-write its 10,000 tokens
    items = [
        ItemState(300, age=5, visible=True),
        ItemState(10_000, age=4, visible=True, times_needed=1, since_need=1),
        ItemState(8000, age=3, visible=True),
    ]
    items += [ItemState(200, age=a, visible=True) for a in (2, 1, 0)]
    assert hidden_slots(CacheAwareClear(prices=CACHED).act(obs_of(items, base=1000))) == [2]


def test_cache_clear_counts_hidden_outputs_in_the_suffix_at_their_placeholder():
    # the 20,000-token output after output 0 is already hidden: the re-write is 680 tokens, not 20,640
    items = [ItemState(2000, age=4, visible=True), ItemState(20_000, age=3, visible=False)]
    items += [ItemState(200, age=a, visible=True) for a in (2, 1, 0)]
    # 1,960 x 5 x 0.1 = 980 > 680 x 1.15 = 782
    assert hidden_slots(CacheAwareClear(prices=CACHED).act(obs_of(items, base=1000, step=5))) == [0]


def test_cache_clear_picks_the_batch_of_largest_net_saving():
    # clearing from output 0 pays (frees 9,920 x 5 x 0.1 = 4,960 against 3,680 x 1.15 = 4,232), but
    # starting after the kept output 1 pays more (3,980 against 640 x 1.15 = 736)
    items = [
        ItemState(2000, age=5, visible=True),
        ItemState(3000, age=4, visible=True, times_needed=1, since_need=1),
        ItemState(8000, age=3, visible=True),
    ]
    items += [ItemState(200, age=a, visible=True) for a in (2, 1, 0)]
    assert hidden_slots(CacheAwareClear(prices=CACHED).act(obs_of(items, base=1000, step=5))) == [2]


def test_cache_clear_prices_the_episode_from_reset_info():
    items = [ItemState(600, age=4, visible=True), ItemState(300, age=3, visible=True)]
    items += [ItemState(10_000, age=a, visible=True) for a in (2, 1, 0)]
    obs = obs_of(items, base=1000, step=5)
    pol = CacheAwareClear()
    pol.reset({"model_family": "gpt-4"})  # GPT-4 Turbo has no prompt caching: clearing pays at once
    assert pol.prices == PRICES["gpt-4"] and hidden_slots(pol.act(obs)) == [0, 1]
    pol.reset({"model_family": "claude-sonnet"})  # a cached model: the re-write does not pay
    assert hidden_slots(pol.act(obs)) == []
    # a cost config's own prices come first; with no info the observation's family id is priced
    assert episode_prices({"cost_config": CostConfig(prices=UNCACHED), "model_family": "gpt-5"}) == UNCACHED
    pol.reset(None)
    assert hidden_slots(pol.act(obs_of(items, base=1000, step=5, family="gpt-4"))) == [0, 1]


def test_cache_clear_on_an_episode_clears_in_batches_and_keeps_the_newest():
    # 30 outputs of 2,000 tokens on a cached model: clearing waits until enough has piled up
    env = ReplayEnv(trajectories=[crafted([8000] * 30)], max_items=N, expose_episode=True)
    obs, info = env.reset(seed=0)
    pol = make_policy("cache_clear")
    pol.reset(info)
    done = False
    while not done:
        act = pol.act(obs, info)
        newest = np.flatnonzero(obs["item_mask"])[-3:]
        assert not act["disable"][newest].any()
        obs, _, done, _, info = env.step(act)
    t = info["totals"]
    assert t["changes"] > 2 * t["mgmt_calls"] > 0  # several outputs per cache re-write
    assert t["dollars"] < info["all_visible"]["dollars"]


def test_cache_clear_parameters():
    with pytest.raises(ValueError, match="horizon"):
        CacheAwareClear(horizon=0)
    with pytest.raises(ValueError, match="unknown tool categories"):
        CacheAwareClear(exclude_tools=["skill"])
    assert make_policy("cache_clear:keep=5,horizon=20").label == "cache_clear(keep=5,horizon=20)"
