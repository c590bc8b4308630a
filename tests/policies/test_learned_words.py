"""The learned policy's content input: its word vocabulary, the ids it maps words to, checkpoints,
and that it learns from words what size, age and tool cannot tell it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dtoc_rl.data.schema import Need
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.labels.words import output_words
from dtoc_rl.policies.learned import LearnedPolicy, LearnedPolicyConfig
from dtoc_rl.policies.learned_trainer import word_vocabulary
from dtoc_rl.sim.episode import compile_episode
from tests.policies.crafted import crafted

TINY = dict(d_model=16, n_heads=2, n_layers=1, dagger_rounds=0)


def _episodes(n_tasks: int, seed: int = 0):
    """Runs of 14 reads of the same size and tool: ``cat notes.md`` outputs are all needed by the last
    call, ``cat build.log`` outputs never; only their words tell them apart before that call."""
    rng = np.random.default_rng(seed)
    eps = []
    for t in range(n_tasks):
        kinds = rng.random(14) < 0.5
        tr = crafted([8000] * 14 + [40])
        for k, s in enumerate(tr.steps[:14]):
            s.tool_args = json.dumps({"command": "cat notes.md" if kinds[k] else "cat build.log"})
        tr.steps[14].needs = [Need(step=k, kind="provenance", evidence="x") for k in range(14) if kinds[k]]
        tr.traj_id, tr.task_id = f"w/{t}", f"task{t}"
        eps.append(compile_episode(tr))
    return eps


def test_the_vocabulary_keeps_words_of_enough_tasks_most_common_first():
    eps = _episodes(6)
    common = set(output_words("bash", json.dumps({"command": "cat notes.md"}), "x" * 8000))
    v = word_vocabulary(eps, 100, min_tasks=6)
    assert set(v.tolist()) >= common - {0}
    assert len(word_vocabulary(eps, 2, min_tasks=1)) == 2
    assert len(word_vocabulary(eps, 100, min_tasks=7)) == 0  # only six tasks
    assert word_vocabulary(eps, 0, min_tasks=1).size == 0
    np.testing.assert_array_equal(word_vocabulary(eps, 5, 1), word_vocabulary(list(reversed(eps)), 5, 1))


def test_word_ids_map_known_words_and_drop_the_rest():
    pol = LearnedPolicyConfig(**TINY, word_vocab=4).create()
    assert pol.net.set_vocabulary([30, 10, 20, 10, 0, 2**31 + 5]) == 3  # distinct valid hashes, in order
    ids = pol.net.word_ids(torch.tensor([[10, 20, 30, 0, 11, 2**31 + 30]]))
    assert ids.tolist() == [[2, 3, 1, 0, 0, 0]]
    assert pol.net.set_vocabulary(range(1, 100)) == 4  # capped at word_vocab
    # a word whose lookup slot a more common word holds is left out, not confused with it
    pol.net.set_vocabulary([7, 7 + 2**16, 9])
    probe = torch.tensor([[7, 7 + 2**16, 9, 9 + 2**16, 0]])
    assert pol.net.word_ids(probe).tolist() == [[1, 0, 3, 0, 0]]
    assert torch.equal(pol.net._word_ids_torch(probe), pol.net.word_ids(probe))  # the non-CPU path


def test_checkpoints_keep_the_vocabulary_and_old_ones_load_without_words(tmp_path):
    pol = LearnedPolicyConfig(**TINY, word_vocab=8).create()
    pol.net.set_vocabulary([5, 7, 9])
    back = LearnedPolicy.load(pol.save(tmp_path / "c"))
    assert torch.equal(back.net.word_hashes, pol.net.word_hashes)
    assert back.net.word_ids(torch.tensor([9, 5, 6])).tolist() == [3, 1, 0]  # the lookup is rebuilt
    old = LearnedPolicyConfig(**TINY, word_vocab=0).create()
    path = old.save(tmp_path / "old")
    meta = json.loads((path / "config.json").read_text())
    del meta["config"]["word_vocab"], meta["config"]["word_min_tasks"]  # as written before content words
    (path / "config.json").write_text(json.dumps(meta))
    assert LearnedPolicy.load(path).net.words is None


@pytest.mark.parametrize("vocab", [64, 0])
def test_words_tell_apart_what_size_age_and_tool_cannot(vocab):
    pol = LearnedPolicyConfig(**TINY, mode="need", epochs=25, lr=5e-3, word_vocab=vocab, word_min_tasks=2)
    pol = pol.create()
    pol.fit(episodes=_episodes(12), progress=False)
    env = ReplayEnv(trajectories=_episodes(6, seed=1), max_items=16)
    gaps = []
    for i in range(6):
        obs, info = env.reset(options={"index": i})
        for _ in range(13):
            obs, *_, info = env.step({"enable": np.zeros(16, np.int8), "disable": np.zeros(16, np.int8)})
        p = pol.probs(obs)
        m = int(obs["item_mask"].sum())
        word = output_words("notes", None, None)[0]
        notes = np.array([word in w for w in obs["item_words"][:m]])
        gaps.append(p[:m][notes].mean() - p[:m][~notes].mean())
    if vocab:
        assert min(gaps) > 0.3, gaps
    else:  # no systematic gap (one run's positions may still read differently to a tiny overfit network)
        assert abs(np.mean(gaps)) < 0.15, gaps


def test_a_checkpoint_says_how_many_words_per_output_it_was_trained_with(tmp_path):
    import warnings

    from dtoc_rl.labels.words import WORDS_PER_OUTPUT

    pol = LearnedPolicyConfig(**TINY).create()
    path = pol.save(tmp_path / "c")
    meta = json.loads((path / "config.json").read_text())
    assert meta["words_per_output"] == WORDS_PER_OUTPUT
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own count: no warning
        LearnedPolicy.load(path)
    del meta["words_per_output"]  # a checkpoint from when outputs kept sixteen
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="16 words per output"):
        old = LearnedPolicy.load(path)
    again = old.save(tmp_path / "resaved")  # e.g. by --retune: still what it was trained with
    assert json.loads((again / "config.json").read_text())["words_per_output"] == 16
    plain = LearnedPolicyConfig(**TINY, word_vocab=0).create().save(tmp_path / "plain")
    meta = json.loads((plain / "config.json").read_text())
    del meta["words_per_output"]
    (plain / "config.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without words the count does not matter
        LearnedPolicy.load(plain)


def test_word_dropout_shows_the_chosen_observations_without_words():
    from dtoc_rl.policies.learned_trainer import Sample, _loss

    pol = LearnedPolicyConfig(**TINY, word_vocab=8).create()
    pol.net.set_vocabulary(range(1, 9))
    torch.manual_seed(0)
    with torch.no_grad():
        pol.net.words.weight.normal_()  # words that move the logits

    def sample(words):
        n, f, g = 3, pol.net.item_in[0].in_features, pol.net.glob_in[0].in_features
        target = np.array([1, 0, 1], np.float32)
        items, glob = np.ones((n, f), np.float32), np.ones(g, np.float32)
        return Sample(items, np.zeros(n, np.int64), np.asarray(words, np.int64), glob, 0, target, np.ones(n))

    pol.net.eval()
    with_words = [sample(np.full((3, 2), 3)), sample(np.full((3, 2), 5))]
    without = [sample(np.zeros((3, 2))), sample(np.full((3, 2), 5))]
    drop = np.array([True, False])
    dropped, blank, kept = (
        float(_loss(pol.net, with_words, drop)),
        float(_loss(pol.net, without)),
        float(_loss(pol.net, with_words)),
    )
    assert dropped == pytest.approx(blank, rel=1e-4), (dropped, blank, kept)
    assert abs(dropped - kept) > 1e-3, (dropped, blank, kept)
    assert float(_loss(pol.net, with_words, np.zeros(2, bool))) == pytest.approx(kept, rel=1e-4)
    with pytest.raises(ValueError, match="word_dropout"):
        LearnedPolicyConfig(word_dropout=1.0)
