import copy
import json
import pickle

import numpy as np
import pytest
import torch

from dtoc_rl.data.models import FAMILIES
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.policies.learned import (
    CheckpointError,
    LearnedPolicy,
    economics,
    family_price_vector,
    obs_to_tensors,
    recent_overlap,
)
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import own_splits, split_by_task

from .crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, epochs=3, dagger_rounds=0)


def _obs(env_kw=None):
    env = ReplayEnv(max_items=32, **(env_kw or {}))
    obs, info = env.reset(seed=0)
    for _ in range(4):
        obs, *_ = env.step({"enable": np.zeros(32, np.int8), "disable": np.zeros(32, np.int8)})
    return obs


@pytest.mark.parametrize(
    "bad,msg",
    [(dict(mode="ppo"), "mode must be"), (dict(d_model=10, n_heads=4), "divisible"),
     (dict(val_fraction=1.0), "val_fraction"), (dict(threshold=2.0), "threshold"),
     (dict(d_model=0), "d_model must be >= 1"), (dict(n_heads=0), "n_heads must be >= 1"),
     (dict(n_layers=-1), "n_layers must be >= 0")],
)  # fmt: skip
def test_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        LearnedPolicyConfig(**bad)


def test_untrained_policy_acts_on_any_number_of_items_and_batches_consistently():
    pol = LearnedPolicyConfig(**TINY).create()
    obs = _obs()
    a = pol.act(obs)
    assert a["enable"].shape == (32,) and not (a["enable"] & a["disable"]).any()
    assert not a["enable"][obs["item_mask"] == 0].any()
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    b = pol.act_batch(batch)
    assert (b["disable"][0] == a["disable"]).all() and (b["disable"][1] == a["disable"]).all()
    empty = {k: v.copy() for k, v in obs.items()}
    empty["item_mask"][:] = 0
    assert not pol.act(empty)["disable"].any()  # no stored output: nothing to do, no NaN


def test_read_only_words_are_copied_not_shared_with_torch():
    # ReplayEnv hands a full window's words as a read-only view; torch warns (once) on one
    obs = _random_obs(np.random.default_rng(2), 8, 8)
    obs["item_words"].flags.writeable = False
    for o in (obs, {k: np.stack([v, v]) for k, v in obs.items()}):
        if o is not obs:
            o["item_words"].flags.writeable = False
        t = obs_to_tensors(o)["words"]
        assert not np.shares_memory(t.numpy(), o["item_words"])
        np.testing.assert_array_equal(t.numpy().reshape(o["item_words"].shape), o["item_words"])
    obs["item_words"].flags.writeable = True
    assert np.shares_memory(obs_to_tensors(obs)["words"].numpy(), obs["item_words"])  # else no copy


def test_checkpoint_round_trip_is_exact_and_pickle_free(tmp_path):
    pol = LearnedPolicyConfig(**TINY, seed=3).create()
    path = pol.save(tmp_path / "ckpt")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    back = LearnedPolicy.load(path)
    obs = _obs()
    np.testing.assert_allclose(back.probs(obs), pol.probs(obs), rtol=0, atol=0)
    assert back.cfg == pol.cfg


def test_checkpoint_with_other_features_is_a_clear_error(tmp_path):
    path = LearnedPolicyConfig(**TINY).create().save(tmp_path / "ckpt")
    meta = json.loads((path / "config.json").read_text())
    meta["item_features"] = meta["item_features"][:-1] + ["something_else"]
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"different item features.*something_else"):
        LearnedPolicy.load(path)
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        LearnedPolicy.load(tmp_path)


def test_split_never_puts_a_task_on_both_sides():
    eps = load_episodes(None)
    train, val = split_by_task(eps, 0.3, seed=1)
    assert train and val
    assert not {(e.source, e.task_id) for e in train} & {(e.source, e.task_id) for e in val}
    assert split_by_task(eps, 0.3, seed=1)[1] == val  # deterministic


def test_fit_on_bundled_sample_learns_and_reports(tmp_path):
    pol = LearnedPolicyConfig(**{**TINY, "epochs": 6}).create()
    rep = pol.fit(None, progress=False)
    hist = rep["supervised"]["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert rep["train_decisions"] > 100 and rep["val_episodes"] > 0
    assert set(rep["val_metrics"]) == {"cost_ratio", "misses_per_100_steps"}
    back = LearnedPolicy.load(pol.save(tmp_path / "c"))
    assert back.meta["val_tasks"] == rep["val_tasks"]
    # the software that trained it travels with it: figures compare only within one environment
    assert back.meta["environment"] == rep["environment"]
    assert rep["environment"]["torch"] == torch.__version__ and rep["environment"]["numpy"] == np.__version__
    # a family the data lacks keeps its zero row: a model the network never saw is not moved at random
    rows = pol.net.family.weight.detach()
    train_eps = own_splits(pol, None, None)[0]  # only training runs send gradients to their rows
    seen = {FAMILIES.index(e.model_family) for e in train_eps}
    unseen = [i for i in range(len(FAMILIES)) if i not in seen]
    assert seen and len(unseen) >= 2
    assert all(rows[i].abs().sum() > 0 for i in seen) and all(rows[i].abs().sum() == 0 for i in unseen)
    obs = _obs()
    as_unseen = [pol.probs({**obs, "family": np.int64(i)}) for i in unseen[:2]]
    np.testing.assert_array_equal(as_unseen[0], as_unseen[1])
    assert not np.array_equal(as_unseen[0], pol.probs({**obs, "family": np.int64(min(seen))}))


def test_family_dropout_decides_the_chosen_observations_as_a_family_without_a_vector():
    from dtoc_rl.policies.learned_trainer import Sample, _loss

    pol = LearnedPolicyConfig(**TINY).create()
    torch.manual_seed(0)
    with torch.no_grad():
        pol.net.family.weight.normal_()  # every family moves the logits
    n, f, g = 3, pol.net.item_in[0].in_features, pol.net.glob_in[0].in_features

    def sample(family):
        items, glob = np.ones((n, f), np.float32), np.ones(g, np.float32)
        target = np.array([1, 0, 1], np.float32)
        words = np.zeros((n, 2), np.int64)
        return Sample(items, np.zeros(n, np.int64), words, glob, family, target, np.ones(n))

    pol.net.eval()
    batch, drop = [sample(2), sample(3)], np.array([True, False])
    with torch.no_grad():
        dropped, kept = float(_loss(pol.net, batch, drop_family=drop)), float(_loss(pol.net, batch))
        pol.net.family.weight[2] = 0.0  # a family no training run reached: what dropout stands for
        assert float(_loss(pol.net, batch)) == pytest.approx(dropped, rel=1e-5)
    assert abs(dropped - kept) > 1e-3
    with pytest.raises(ValueError, match="family_dropout"):
        LearnedPolicyConfig(family_dropout=1.0)
    with pytest.raises(ValueError, match="family_dropout needs family_conditioning"):
        LearnedPolicyConfig(family_dropout=0.2, family_conditioning=False)


def test_source_balance_scales_each_harness_by_its_share_of_the_loss_weights():
    from dtoc_rl.policies.learned_trainer import Sample, _loss, source_scales

    pol = LearnedPolicyConfig(**TINY).create()
    n, f, g = 2, pol.net.item_in[0].in_features, pol.net.glob_in[0].in_features

    def sample(source, weight, target):
        items = np.random.default_rng(len(source)).normal(size=(n, f)).astype(np.float32)
        return Sample(
            items, np.zeros(n, np.int64), np.zeros((n, 2), np.int64), np.ones(g, np.float32), 0,
            np.full(n, target, np.float32), np.full(n, weight, np.float32), source=source,
        )  # fmt: skip

    # "big" has nine times the weight mass of "small"
    batch = [sample("big", 3.0, 1.0), sample("big", 6.0, 1.0), sample("small", 1.0, 0.0)]
    assert source_scales(batch, 0.0) == {"big": 1.0, "small": 1.0}
    full = source_scales(batch, 1.0)  # equal masses after scaling
    assert full["big"] * 18.0 == pytest.approx(full["small"] * 2.0)
    half = source_scales(batch, 0.5)
    assert half["small"] / half["big"] == pytest.approx(3.0)
    for scales in (full, half):  # the total mass stays as it was
        assert 18.0 * scales["big"] + 2.0 * scales["small"] == pytest.approx(20.0)
    pol.net.eval()
    with torch.no_grad():
        plain, balanced = float(_loss(pol.net, batch)), float(_loss(pol.net, batch, scales=full))
        # a source the scales lack keeps its weights
        assert float(_loss(pol.net, batch, scales={"big": 1.0})) == pytest.approx(plain, rel=1e-6)
        per = [float(_loss(pol.net, [s])) for s in batch]
        # a batch of one source is scaled too, not normalised back to its plain loss
        one = float(_loss(pol.net, batch[:2], scales=full))
        assert one == pytest.approx(full["big"] * float(_loss(pol.net, batch[:2])), rel=1e-5)
    # balanced: the small source's loss counts as much as the big source's two samples together
    assert balanced == pytest.approx(0.5 * (3 * per[0] + 6 * per[1]) / 9 + 0.5 * per[2], rel=1e-5)
    assert abs(balanced - plain) > 1e-4
    with pytest.raises(ValueError, match="source_balance"):
        LearnedPolicyConfig(source_balance=1.5)
    for name, value in (("source_balance", 0.5), ("aux_need", 0.5)):  # PPO alone has no supervised loss
        with pytest.raises(ValueError, match=f"{name} acts in supervised training"):
            LearnedPolicyConfig(mode="rl", **{name: value})


@pytest.mark.parametrize("power", [0.0, 0.5])
def test_training_and_validation_losses_take_the_source_scales(monkeypatch, power):
    import dtoc_rl.policies.learned_trainer as lt

    seen, loss = [], lt._loss

    def spy(net, samples, *a, scales=None, **kw):
        seen.append(scales)
        return loss(net, samples, *a, scales=scales, **kw)

    monkeypatch.setattr(lt, "_loss", spy)
    LearnedPolicyConfig(**{**TINY, "epochs": 1, "source_balance": power}).create().fit(None, progress=False)
    assert seen
    if power:
        assert all(s is not None and len(s) >= 2 for s in seen)  # the sample has several harnesses
    else:
        assert all(s is None for s in seen)


def test_the_source_scales_come_from_the_training_decisions_alone(monkeypatch):
    # validation decisions would weigh the harnesses by the tune tasks' mass, which training never sees
    import dtoc_rl.policies.learned_trainer as lt

    collected, given, collect, scales = [], [], lt.collect, lt.source_scales

    def spy_collect(*a, **kw):
        out = collect(*a, **kw)
        collected.append(out)
        return out

    def spy_scales(samples, power):
        given.append(list(samples))
        return scales(samples, power)

    monkeypatch.setattr(lt, "collect", spy_collect)
    monkeypatch.setattr(lt, "source_scales", spy_scales)
    LearnedPolicyConfig(**{**TINY, "epochs": 1, "source_balance": 0.5}).create().fit(None, progress=False)
    train, val = collected[0], collected[1]  # collected in that order, before any training
    assert train and val and given
    assert all(len(g) == len(train) and all(x is y for x, y in zip(g, train)) for g in given)


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_training_drops_the_family_of_about_the_configured_share(monkeypatch, rate):
    import dtoc_rl.policies.learned_trainer as lt

    seen, loss, draws, default_rng = [], lt._loss, [], np.random.default_rng

    def spy(net, samples, drop_words=None, drop_family=None, aux_weight=0.0, **kw):
        if net.training:
            seen.append(drop_family)
        else:  # validation losses take no dropout
            assert drop_family is None
        return loss(net, samples, drop_words, drop_family, aux_weight, **kw)

    class Counted:  # the training's generator, counting its draws
        def __init__(self, seed):
            self.rng = default_rng(seed)

        def random(self, *a, **k):
            draws.append(a)
            return self.rng.random(*a, **k)

        def __getattr__(self, name):
            return getattr(self.rng, name)

    monkeypatch.setattr(lt, "_loss", spy)
    monkeypatch.setattr(lt.np.random, "default_rng", Counted)
    cfg = LearnedPolicyConfig(**{**TINY, "epochs": 2, "family_dropout": rate})
    rep = cfg.create().fit(None, progress=False)
    assert seen
    epochs = sum(len(v["history"]) for k, v in rep.items() if k == "supervised" or k.startswith("dagger"))
    if rate == 0.0:  # off: nothing drawn, so the batches are those of a training without the setting
        assert all(d is None for d in seen)
        assert len(draws) == epochs  # one draw per epoch: the batch order's jitter
    else:
        assert len(draws) == epochs + len(seen)
        share = np.concatenate(seen).mean()
        assert 0.3 < share < 0.7, share


def test_auxiliary_need_head_adds_its_loss_and_leaves_decisions_alone(tmp_path):
    from dtoc_rl.policies.learned import AUX_TARGETS
    from dtoc_rl.policies.learned_trainer import Sample, _batch, _loss

    plain = LearnedPolicyConfig(**TINY).create()
    aux = LearnedPolicyConfig(**TINY, aux_need=0.5).create()
    assert plain.net.aux is None and aux.net.aux is not None
    # the head is built last: every other layer starts as without it
    shared = plain.net.state_dict()
    extra = {k: v for k, v in aux.net.state_dict().items() if k not in shared}
    assert extra and all(k.startswith("aux.") for k in extra)
    assert all(torch.equal(v, aux.net.state_dict()[k]) for k, v in shared.items())
    with pytest.raises(ValueError, match="no auxiliary head"):
        plain.net.forward_aux(*[None] * 5)
    f, g = aux.net.item_in[0].in_features, aux.net.glob_in[0].in_features
    rng = np.random.default_rng(0)
    target = np.array([1, 0, 1], np.float32)
    aux_y = np.array([[1, 0], [0, 1], [0, 0]], np.float32)

    def sample(m):
        return Sample(
            rng.random((m, f), np.float32), np.zeros(m, np.int64), np.zeros((m, 2), np.int64),
            rng.random(g, np.float32), 1, target[:m], np.ones(m, np.float32), aux_y[:m],
        )  # fmt: skip

    batch = [sample(3), sample(2)]  # the second padded: its third slot must not count
    aux.net.eval()
    with torch.no_grad():
        main = float(_loss(aux.net, batch))
        both = float(_loss(aux.net, batch, aux_weight=0.5))
        _, al = aux.net.forward_aux(**_batch(batch)[0])
    assert al.shape == (2, 3, len(AUX_TARGETS))
    y = torch.from_numpy(np.concatenate([aux_y, aux_y[:2]]))
    by_hand = torch.nn.functional.binary_cross_entropy_with_logits(torch.cat([al[0], al[1, :2]]), y)
    assert both == pytest.approx(main + 0.5 * float(by_hand), rel=1e-5)
    none = lambda a: np.zeros((0,) + a.shape[1:], a.dtype)  # noqa: E731
    empty = [Sample(none(b.items), none(b.tool), none(b.words), b.glob, 1, none(b.target), none(b.weight),
                    none(b.aux)) for b in batch]  # fmt: skip
    with torch.no_grad():  # nothing stored yet in any of them: a finite loss, not NaN
        assert np.isfinite(float(_loss(aux.net, empty, aux_weight=0.5)))
    # and the decision never reads it: the same probabilities
    obs = _obs()
    assert np.array_equal(plain.probs(obs), aux.probs(obs))
    loaded = LearnedPolicy.load(aux.save(tmp_path / "aux"))  # the head travels with the checkpoint
    assert loaded.net.aux is not None and np.array_equal(loaded.probs(obs), aux.probs(obs))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="aux_need must be"):
            LearnedPolicyConfig(aux_need=bad)
    with pytest.raises(ValueError, match="mode rl"):
        LearnedPolicyConfig(aux_need=0.5, mode="rl")


def test_training_uses_the_auxiliary_head_and_validation_does_not(monkeypatch):
    import dtoc_rl.policies.learned_trainer as lt
    from dtoc_rl.policies.learned import ItemScorer

    calls, forward_aux, loss, batches = [], ItemScorer.forward_aux, lt._loss, []

    def spy(self, *a, **k):
        calls.append(self.training)
        return forward_aux(self, *a, **k)

    def loss_spy(net, samples, *a, parts=None, **k):
        out = loss(net, samples, *a, parts=parts, **k)
        if net.training:
            batches.append((len(samples), parts["main"], parts.get("aux"), float(out)))
        return out

    monkeypatch.setattr(ItemScorer, "forward_aux", spy)
    monkeypatch.setattr(lt, "_loss", loss_spy)
    pol = LearnedPolicyConfig(**{**TINY, "epochs": 1, "dagger_rounds": 0, "aux_need": 0.5}).create()
    rep = pol.fit(None, progress=False)
    assert calls and all(calls)  # training batches only: validation (early stopping) is the main loss
    # the logged training loss is the main loss, comparable with validation's; the head's is logged apart
    (row,) = rep["supervised"]["history"]
    n = sum(b[0] for b in batches)
    assert row["train_loss"] == pytest.approx(sum(b[0] * b[1] for b in batches) / n, rel=1e-6)
    assert row["aux_loss"] == pytest.approx(sum(b[0] * b[2] for b in batches) / n, rel=1e-6)
    assert all(b[3] == pytest.approx(b[1] + 0.5 * b[2], rel=1e-5) for b in batches)  # what was minimised
    calls.clear()
    rep = LearnedPolicyConfig(**{**TINY, "epochs": 1}).create().fit(None, progress=False)
    assert not calls and "aux_loss" not in rep["supervised"]["history"][0]


@pytest.mark.parametrize("weights", ["dollars", "need"])
def test_auxiliary_targets_are_the_calls_reads_and_later_needs(weights):
    from dtoc_rl.policies.learned_trainer import collect
    from tests.cost_episodes import make_episode

    # six calls, an output after each; call 3 needs output 0, call 5 needs outputs 1 and 0
    n = 6
    ep = make_episode(100, [10] * n, [10] * n, [800] * n, [40] * n, needs={3: [0], 5: [1, 0]})
    pol = LearnedPolicyConfig(**TINY, aux_need=1.0, loss_weights=weights).create()
    samples = collect(pol, [ep], mode="oracle")
    calls = [int(s.glob[GLOBAL_FEATURES.index("step")]) for s in samples]
    assert calls == list(range(1, n))  # a decision before each call with something stored
    last_need = {0: 5, 1: 5}
    for t, s in zip(calls, samples):
        slots = np.arange(len(s.target))  # output k in slot k: the window holds them all
        reads = np.isin(slots, ep.call_reads(t))  # its needs, and the output no call has read yet
        later = np.array([last_need.get(k, -1) > t for k in slots], bool)
        assert np.array_equal(s.aux[:, 0], reads), t
        assert np.array_equal(s.aux[:, 1], later), t
        assert (s.target[reads] > 0.5).all()  # a read is visible in the oracle's plan (else a miss)
    assert collect(LearnedPolicyConfig(**TINY).create(), [ep], mode="oracle")[0].aux is None


def test_bc_mode_needs_logged_masking():
    with pytest.raises(ValueError, match="logged masking schedule"):
        LearnedPolicyConfig(**TINY, mode="bc").create().fit(None, progress=False)


def test_bc_mode_clones_a_logged_schedule():
    trajs = []
    for i in range(6):
        t = crafted([4000] * 10)
        t.traj_id, t.task_id = f"bc/{i}", f"task{i}"
        for k, s in enumerate(t.steps):
            s.masked_before = list(range(max(0, k - 2)))  # a keep-last-2 log
        trajs.append(t)
    from dtoc_rl.sim.episode import compile_episode

    pol = LearnedPolicyConfig(**{**TINY, "epochs": 40, "mode": "bc", "lr": 5e-3}).create()
    rep = pol.fit(episodes=[compile_episode(t) for t in trajs], progress=False)
    assert rep["train_decisions"] > 0
    hist = rep["supervised"]["history"]
    assert hist[-1]["train_loss"] < 0.5 * hist[0]["train_loss"]


def test_rl_fine_tuning_runs():
    pol = LearnedPolicyConfig(**{**TINY, "epochs": 1, "rl_updates": 2, "rl_envs": 2}).create()
    rep = pol.fit(None, progress=False)
    assert len(rep["rl"]["rl_mean_return_last"]) == 1


# ------------------------------------------------------------------------------ inference path


def test_recent_overlap_counts_unknown_words_shared_with_newer_outputs():
    # slots oldest first, the fourth padding; r = 2 compares with the two newest (slots 2 and 1)
    words = torch.tensor([[[5, 6, 0, 0], [7, 8, 5, 0], [5, 9, 7, 0], [6, 7, 5, 0]]])
    mask = torch.tensor([[True, True, True, False]])
    got = recent_overlap(words, None, mask, 2)[0]
    # slot 0 shares 5 with slot 2 (the newest) and 5 with slot 1; slot 1 shares 7 and 5 with slot 2;
    # slot 2 has nothing newer; padding shares nothing though its words match
    assert got.tolist() == [[0.25, 0.25], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]
    known = (words == 5).long()  # word 5 is a vocabulary word (id 1) wherever it is
    got = recent_overlap(words, known, mask, 2)[0]
    assert got.tolist() == [[0.0, 0.0], [0.25, 0.25], [0.0, 0.0], [0.0, 0.0]]  # slot 1 shares only 7 now
    got = recent_overlap(words, None, mask, 3)[0]  # slot 0 also meets slot 1: its best is still one word
    assert got.tolist() == [[0.25, 0.25], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]
    words[0, 1, 1] = 6
    got = recent_overlap(words, None, mask, 2)[0]  # now slot 0 shares 6 and 5 with slot 1, only 5 with 2
    assert got[0].tolist() == [0.25, 0.5]
    one = recent_overlap(words[:, :1], None, mask[:, :1], 4)  # fewer outputs than r
    assert one.tolist() == [[[0.0, 0.0]]]
    assert recent_overlap(words[:, :0], None, mask[:, :0], 4).shape == (1, 0, 2)  # no outputs at all


def test_recent_words_move_the_decision_and_round_trip(tmp_path):
    def policy(r):  # no encoder layer: each output's probability depends on its own inputs only
        pol = LearnedPolicyConfig(**{**TINY, "n_layers": 0}, recent_words=r, seed=1).create()
        pol.net.set_vocabulary(VOCABULARY)
        return pol

    pol, one = policy(2), policy(1)
    plain = LearnedPolicyConfig(**{**TINY, "n_layers": 0}, seed=1).create().net.state_dict()
    assert all(torch.equal(v, pol.net.state_dict()[k]) for k, v in plain.items() if k != "word_hashes")
    assert {k for k in pol.net.state_dict() if k not in plain} == {"recent.weight", "recent.bias"}
    obs = _random_obs(np.random.default_rng(0), 8, 5)
    obs["items"][:, ITEM_FEATURES.index("age")] = np.arange(8, 0, -1)
    obs["item_words"][:] = 0
    obs["item_words"][:5, 0] = [150, 151, 152, 153, 154]  # all unknown, none shared
    before, before_one = pol.probs(obs), one.probs(obs)
    obs["item_words"][4, 1] = 150  # the newest output now names what the oldest named
    after = pol.probs(obs)
    assert after[0] != before[0] and np.array_equal(after[1:4], before[1:4])
    obs["item_words"][3, 1] = 151  # the second newest names what the second oldest named
    assert pol.probs(obs)[1] != before[1]  # within the newest two
    assert one.probs(obs)[1] == before_one[1]  # not the newest one
    obs["item_words"][3:5, 1] = 0
    obs["item_words"][0, 1] = 50
    alone = pol.probs(obs)[0]
    obs["item_words"][4, 1] = 50  # a vocabulary word shared with the newest: no relation
    assert pol.probs(obs)[0] == alone
    back = LearnedPolicy.load(pol.save(tmp_path / "ckpt"))
    assert back.cfg.recent_words == 2
    np.testing.assert_array_equal(back.probs(obs), pol.probs(obs))
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    del meta["config"]["recent_words"]  # without the field a checkpoint has no such layer
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="do not fit the config"):
        LearnedPolicy.load(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="recent_words must be in"):
        LearnedPolicyConfig(recent_words=17)


def test_a_checkpoint_from_before_recent_words_loads_without_them(tmp_path):
    pol = LearnedPolicyConfig(**TINY, seed=2).create()
    pol.net.set_vocabulary(VOCABULARY)
    path = pol.save(tmp_path / "old")
    meta = json.loads((path / "config.json").read_text())
    del meta["config"]["recent_words"]
    meta["config"]["word_vocab"] = pol.cfg.word_vocab
    (path / "config.json").write_text(json.dumps(meta))
    back = LearnedPolicy.load(path)
    assert back.cfg.recent_words == 0 and back.net.recent is None
    obs = _random_obs(np.random.default_rng(1), 16, 9)
    np.testing.assert_array_equal(back.probs(obs), pol.probs(obs))


def _random_obs(rng, n, count):
    """An observation with ``count`` of ``n`` slots filled with arbitrary (also extreme) features."""
    items = np.zeros((n, len(ITEM_FEATURES)), np.float32)
    scale = rng.choice([0.1, 3, 300], count)[:, None]
    items[:count] = rng.standard_normal((count, len(ITEM_FEATURES))) * scale
    items[:count, ITEM_FEATURES.index("visible")] = rng.integers(0, 2, count)
    mask = np.zeros(n, np.int8)
    mask[:count] = 1
    vis = items[:, ITEM_FEATURES.index("visible")] > 0.5
    return {
        "items": items,
        "item_tool": np.where(mask, rng.integers(0, len(TOOL_CATEGORIES), n), 0).astype(np.int64),
        "item_mask": mask,
        "enable_mask": (mask.astype(bool) & ~vis).astype(np.int8),
        "disable_mask": vis.astype(np.int8),
        "globals": (rng.standard_normal(len(GLOBAL_FEATURES)) * 50).astype(np.float32),
        "family": np.int64(rng.integers(0, len(FAMILIES))),
        # word hashes 1..199, some padding: those below 100 are in the vocabulary the tests give
        "item_words": np.where(mask[:, None] & (rng.random((n, 16)) < 0.7), rng.integers(1, 200, (n, 16)), 0),
    }


VOCABULARY = range(1, 100)


def _padded_probs(net, obs):
    """The pre-optimisation reference: every slot, padding masked, through the nn.Module path with
    grad on (so that torch uses its unfused attention, not the kernel the policy calls)."""
    batched = obs["items"].ndim == 3
    o = obs if batched else {k: np.asarray(v)[None] for k, v in obs.items()}
    prices = np.stack([family_price_vector(int(f)) for f in np.asarray(o["family"]).reshape(-1)])
    econ_items, econ_glob = economics(o["items"], o["item_mask"], o["globals"], prices)
    with torch.enable_grad():
        logits = net(
            torch.as_tensor(np.concatenate([o["items"], econ_items], -1)),
            torch.as_tensor(o["item_tool"]),
            torch.as_tensor(o["item_mask"].astype(bool)),
            torch.as_tensor(np.concatenate([o["globals"], econ_glob], -1)),
            torch.as_tensor(np.asarray(o["family"]).reshape(-1)),
            torch.as_tensor(o["item_words"]),
        )
    p = torch.sigmoid(logits).detach().numpy() * o["item_mask"]
    return p if batched else p[0]


@pytest.mark.parametrize(
    "cfg",
    [{}, dict(n_layers=0), dict(family_conditioning=False, n_layers=1), dict(d_model=16, n_heads=1),
     dict(d_model=32, n_heads=2, n_layers=3, dropout=0.1), dict(recent_words=4),
     dict(recent_words=1, word_vocab=0, n_layers=0)],
)  # fmt: skip
def test_inference_path_matches_the_padded_module_path_on_random_observations(cfg):
    rng = np.random.default_rng(7)
    pol = LearnedPolicyConfig(**cfg, seed=5, threshold=0.5, batching="off").create()
    pol.net.set_vocabulary(VOCABULARY)
    n = 128
    counts = [0, 1, 2, 5, 64, 127, 128]
    singles = [_random_obs(rng, n, c) for c in counts]
    for obs in singles:
        p = pol.probs(obs)
        assert p.shape == (n,) and p.dtype == np.float32
        if cfg.get("recent_words"):
            assert pol.net._plan  # the fast path computes what the module path does, so it is used
        ref = _padded_probs(pol.net, obs)
        np.testing.assert_allclose(p * obs["item_mask"], ref, rtol=0, atol=1e-5)  # padding: unspecified
        a = pol.act(obs)
        sure = np.abs(ref - pol.cfg.threshold) > 1e-5  # within rounding of the threshold: either way
        unread = obs["items"][:, ITEM_FEATURES.index("age")] < 1  # no call has read it: always visible
        hide, show = (ref < pol.cfg.threshold) & ~unread, (ref >= pol.cfg.threshold) | unread
        assert (a["disable"][sure] == obs["disable_mask"][sure] * hide[sure]).all()
        assert (a["enable"][sure] == obs["enable_mask"][sure] * show[sure]).all()
    batch = {k: np.stack([o[k] for o in singles]) for k in singles[0]}
    pb = pol.probs(batch) * batch["item_mask"]  # rows of different lengths: padded and masked
    np.testing.assert_allclose(pb, _padded_probs(pol.net, batch), rtol=0, atol=1e-5)
    np.testing.assert_allclose(pb, np.stack([pol.probs(o) * o["item_mask"] for o in singles]), atol=1e-5)
    ab = pol.act_batch(batch)
    for i, obs in enumerate(singles):
        ref = pb[i]
        sure = np.abs(ref - pol.cfg.threshold) > 1e-5
        for k in ("enable", "disable"):
            assert (ab[k][i][sure] == pol.act(obs)[k][sure]).all()


def test_inference_path_is_the_kernel_the_module_runs_in_eval_mode():
    rng = np.random.default_rng(3)
    pol = LearnedPolicyConfig(seed=1).create()
    pol.net.set_vocabulary(VOCABULARY)
    state = torch.get_rng_state()
    fast = [pol.probs(_random_obs(rng, 128, c)) for c in (3, 128)]
    assert pol.net._plan  # built on first use, for the default network
    assert torch.equal(torch.get_rng_state(), state)  # deciding never moves torch's RNG (training runs)
    pol.net._plan = False  # the nn.Module path: same kernels, so bit-identical
    rng = np.random.default_rng(3)
    slow = [pol.probs(_random_obs(rng, 128, c)) for c in (3, 128)]
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    # fast paths off (as the benchmark's comparison row does): the module path, same outputs
    pol.net._plan = None
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        rng = np.random.default_rng(3)
        off = [pol.probs(_random_obs(rng, 128, c)) for c in (3, 128)]
        assert pol.net._plan is None
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    for a, b in zip(fast, off):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_inference_plan_follows_new_weights(tmp_path):
    obs = _random_obs(np.random.default_rng(0), 128, 40)
    a, b = LearnedPolicyConfig(seed=1).create(), LearnedPolicyConfig(seed=2).create()
    pa, pb = a.probs(obs), b.probs(obs)
    assert not np.allclose(pa, pb)
    a.net.load_state_dict(b.net.state_dict())  # copies into the same tensors
    np.testing.assert_array_equal(a.probs(obs), pb)
    c = LearnedPolicyConfig(seed=3).create()
    c.probs(obs)
    c.net.load_state_dict({k: v.clone() for k, v in b.net.state_dict().items()}, assign=True)  # new tensors
    np.testing.assert_array_equal(c.probs(obs), pb)
    c.net.to(torch.float32)
    np.testing.assert_array_equal(c.probs(obs), pb)
    np.testing.assert_array_equal(LearnedPolicy.load(b.save(tmp_path / "ckpt")).probs(obs), pb)
    d = copy.deepcopy(b)  # its own plan, over its own parameters
    with torch.no_grad():
        d.net.item_in[0].weight.mul_(2)
    np.testing.assert_array_equal(b.probs(obs), pb)
    assert not np.allclose(d.probs(obs), pb)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(b)).probs(obs), pb)


def test_training_mode_never_takes_the_inference_path():
    pol = LearnedPolicyConfig(seed=1, d_model=16, n_heads=2).create()
    obs = _random_obs(np.random.default_rng(0), 16, 9)
    t = obs_to_tensors(obs)
    pol.net.train()
    out = pol.net(**t)
    assert out.requires_grad and pol.net._plan is None
    out.sum().backward()
    assert pol.net.item_in[0].weight.grad is not None
    pol.net.eval()
    with torch.no_grad():
        np.testing.assert_allclose(pol.net(**t).numpy(), out.detach().numpy(), rtol=0, atol=1e-5)


def test_a_fused_kernel_that_disagrees_is_never_used(monkeypatch):
    import dtoc_rl.policies.learned as learned

    obs = _random_obs(np.random.default_rng(0), 128, 40)
    want = LearnedPolicyConfig(seed=1).create().probs(obs)
    monkeypatch.setattr(learned, "_FUSED_LAYER", lambda h, *args: h * 0.5)  # as if torch changed it
    pol = LearnedPolicyConfig(seed=1).create()
    np.testing.assert_array_equal(pol.probs(obs), want)
    assert pol.net._plan is False


def test_dagger_rollouts_decide_at_thresholds_drawn_from_their_range(monkeypatch):
    # the states DAgger adds are those of the thresholds the policy will be used at, not those of an
    # untuned policy's 0.5
    from dtoc_rl.policies.learned_trainer import collect
    from tests.cost_episodes import make_episode

    eps = [make_episode(100, [10] * 5, [10] * 5, [800] * 5, [40] * 5, needs={3: [0]}) for _ in range(6)]

    def thresholds(**cfg):
        pol = LearnedPolicyConfig(**TINY, **cfg).create()
        seen: list[float] = []
        plain = pol.want_visible

        def spy(obs, probs, thr, *a, **kw):
            seen.append(float(thr))
            return plain(obs, probs, thr, *a, **kw)

        monkeypatch.setattr(pol, "want_visible", spy)
        collect(pol, eps, mode="oracle", actor="policy", seed=3)
        return seen

    drawn = thresholds(dagger_threshold=0.02, dagger_threshold_max=0.2)
    assert drawn and all(0.02 <= t <= 0.2 for t in drawn)
    assert len(set(drawn)) == len(eps)  # one per run
    assert set(thresholds(dagger_threshold=0.5, dagger_threshold_max=0.5)) == {0.5}
    assert set(thresholds(threshold=0.07)) == {0.07}  # a threshold the config fixes is kept
    with pytest.raises(ValueError, match="dagger_threshold"):
        LearnedPolicyConfig(dagger_threshold=0.3, dagger_threshold_max=0.2)


def test_a_checkpoint_saved_before_dagger_thresholds_says_it_rolled_out_at_one_half(tmp_path):
    # its config is written back by --retune and --init-from: it must say how that network was trained
    ranged = LearnedPolicyConfig(**TINY, dagger_threshold=0.02, dagger_threshold_max=0.2)
    path = ranged.create().save(tmp_path / "ck")
    assert LearnedPolicy.load(path).cfg.dagger_threshold == 0.02
    meta = json.loads((path / "config.json").read_text())
    del meta["config"]["dagger_threshold"], meta["config"]["dagger_threshold_max"]
    (path / "config.json").write_text(json.dumps(meta))
    cfg = LearnedPolicy.load(path).cfg
    assert (cfg.dagger_threshold, cfg.dagger_threshold_max) == (0.5, 0.5)


def test_each_dagger_collection_draws_its_thresholds_from_its_own_seed(monkeypatch):
    # the training and tune roll-outs of each round draw apart, and a training's seed moves them all
    import dtoc_rl.policies.learned_trainer as lt

    calls, collect = [], lt.collect

    def spy_collect(*a, **kw):
        if kw.get("actor") == "policy":
            calls.append(kw["seed"])
        return collect(*a, **kw)

    monkeypatch.setattr(lt, "collect", spy_collect)
    for seed in (0, 1):
        cfg = {**TINY, "epochs": 1, "dagger_rounds": 2, "seed": seed, "dagger_threshold": 0.02,
               "dagger_threshold_max": 0.2}  # fmt: skip
        LearnedPolicyConfig(**cfg).create().fit(None, progress=False)
    assert len(calls) == 8 and len(set(calls)) == 8  # 2 trainings x 2 rounds x (train, tune)


def test_training_leaves_the_callers_torch_threads_and_random_state_as_they_were():
    import torch

    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    before_threads = torch.get_num_threads()
    torch.set_num_threads(2 if before_threads != 2 else 3)
    want_threads = torch.get_num_threads()
    torch.manual_seed(1234)
    want = torch.rand(3)
    torch.manual_seed(1234)
    try:
        pol = LearnedPolicyConfig(
            n_layers=1, d_model=16, n_heads=2, epochs=1, dagger_rounds=0, threads=1
        ).create()
        pol.fit(progress=False)
        assert torch.get_num_threads() == want_threads
        assert torch.equal(torch.rand(3), want)  # the caller's stream goes on where it was
    finally:
        torch.set_num_threads(before_threads)


def test_fit_with_no_run_left_to_choose_thresholds_on_warns_its_caller():
    from dtoc_rl.data.dataset import load_trajectories
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.policies.learned_config import LearnedPolicyConfig

    one = load_trajectories(bundled_dataset())[:1]
    pol = LearnedPolicyConfig(n_layers=1, d_model=16, n_heads=2, epochs=1, dagger_rounds=0).create()
    with pytest.warns(UserWarning, match="no thresholds chosen: of 1 runs none was left"):
        report = pol.fit(one, progress=False)
    assert report["tune_episodes"] == 0 and "thresholds" not in report


def test_split_seed_keeps_the_tasks_and_seed_moves_the_weights():
    """--split-seed fixes which tasks are held out, so trainings at several --seed compare their
    initial weights alone; unset, the split follows --seed as before."""
    base = {**TINY, "epochs": 1, "dagger_rounds": 0}

    def run(**kw):
        pol = LearnedPolicyConfig(**{**base, **kw}).create()
        rep = pol.fit(None, progress=False)
        return rep, torch.cat([p.detach().flatten() for p in pol.net.parameters()])

    a, wa = run(seed=0)
    b, wb = run(seed=5, split_seed=0)
    c, _ = run(seed=5)
    for k in ("val_tasks", "tune_tasks", "train_tasks"):
        assert a[k] == b[k]
    assert (a["val_tasks"], a["tune_tasks"]) != (c["val_tasks"], c["tune_tasks"])
    assert not torch.equal(wa, wb)
    assert (
        LearnedPolicyConfig(seed=5).data_seed == 5
        and LearnedPolicyConfig(seed=5, split_seed=0).data_seed == 0
    )
