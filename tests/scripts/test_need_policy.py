"""scripts.need_policy: a need classifier replayed as a policy, on the bundled sample."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dtoc_rl.envs.replay import ReplayEnv
from dtoc_rl.policies import learned_trainer as lt
from dtoc_rl.policies.baselines import to_action
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from scripts import need_ceiling, need_policy

pytest.importorskip("sklearn")  # the analysis extra; in the test extra too, so CI runs this


@pytest.fixture(scope="module")
def fitted():
    cfg = LearnedPolicyConfig(seed=0, word_min_tasks=2)
    _, train, held, _ = lt._splits(cfg, "data/sample", None)
    samples = lt.collect(cfg.create(), train, mode="need")
    vocab = lt.word_vocabulary(train, cfg.word_vocab, cfg.word_min_tasks)
    return need_policy.NeedClassifier.fit(samples, vocab), samples, held


def test_the_classifier_reads_the_outputs_words_and_rates_needs(fitted):
    need, samples, _ = fitted
    assert need.svd is not None and len(need.vocab) >= 2  # words of two or more tasks are in
    s = next(s for s in samples if (s.items[:, 1] >= 1).sum() >= 2)
    keep = s.items[:, 1] >= 1
    n_items, n_glob = len(need_policy.ITEM_FEATURES), len(need_policy.GLOBAL_FEATURES)
    rel = s.glob[n_glob : n_glob + 2]
    x = need.features(s.items[keep, :n_items], s.tool[keep], s.words[keep], s.glob[:n_glob], s.family, rel)
    width = len(need_policy.ITEM_COLUMNS) + 2 + len(need_policy.GLOBAL_COLUMNS) + 2 + need.svd.n_components
    assert x.shape == (int(keep.sum()), width)
    p = need.predict(x)
    assert ((0 <= p) & (p <= 1)).all()


def _replay(policy, ep):
    env = ReplayEnv(trajectories=[ep], expose_episode=True)
    obs, info = env.reset(seed=0)
    policy.reset(info)
    hidden_ever, reshown, done = set(), 0, False
    while not done:
        act = policy.act(obs, info)
        slots = info["slot_steps"]
        vis = obs["items"][:, 2] > 0.5
        for j in np.flatnonzero(np.asarray(act["disable"]).astype(bool)):
            assert obs["items"][j, 1] >= 1  # never an output no call has read
            hidden_ever.add(int(slots[j]))
        reshown += int((np.asarray(act["enable"]).astype(bool) & ~vis & obs["item_mask"].astype(bool)).sum())
        obs, _, done, _, info = env.step(act)
    return hidden_ever, reshown


def test_the_policy_hides_read_outputs_only_keeps_them_hidden_and_zero_hides_nothing(fitted):
    need, _, held = fitted
    bold = need_policy.NeedPolicy(need, threshold=10.0, alpha=0.0, batching="off")
    eps = [e for e in held if len(e.out_steps) >= 3]
    hidden, reshown = zip(*(_replay(bold, e) for e in eps))
    assert sum(map(len, hidden)) > 0 and sum(reshown) == 0  # hides, and never shows one again
    never = need_policy.NeedPolicy(need, threshold=1e-12, alpha=0.0, batching="off")
    assert all(not h for h, _ in (_replay(never, e) for e in eps))


class _Flat:
    """A classifier that rates every output alike: what the policy decides then is its own rule's."""

    def features(self, items, *_):
        return np.zeros((len(items), 1))

    def predict(self, x):
        return np.full(len(x), 0.05)


def _mid_run(fitted):
    _, _, held = fitted
    ep = max(held, key=lambda e: len(e.out_steps))
    env = ReplayEnv(trajectories=[ep], expose_episode=True)
    obs, info = env.reset(seed=0)
    for _ in range(min(6, len(ep.out_steps))):
        obs, _, done, _, info = env.step(
            {"enable": np.zeros(128, np.int8), "disable": np.zeros(128, np.int8)}
        )
        assert not done
    return obs, info


def test_a_value_weight_hides_the_outputs_worth_more_at_the_same_probability(fitted):
    obs, info = _mid_run(fitted)
    read = obs["item_mask"].astype(bool) & (obs["items"][:, 1] >= 1)
    tokens = obs["items"][:, 0] * 1000
    assert read.sum() >= 2 and len(set(tokens[read])) >= 2
    step = min(float(obs["globals"][2]), 50.0)
    cut = np.median(tokens[read])
    t = 0.05 / (cut * step / need_ceiling.V_REF)  # P / worth ** 1 < t exactly for outputs above the median
    pol = need_policy.NeedPolicy(_Flat(), threshold=t, alpha=1.0, batching="off")
    pol.reset(info)
    hidden = np.asarray(pol.act(obs, info)["disable"]).astype(bool)
    np.testing.assert_array_equal(hidden, read & (tokens > cut))
    flat = need_policy.NeedPolicy(_Flat(), threshold=t, alpha=0.0, batching="off")
    flat.reset(info)
    flat_hidden = np.asarray(flat.act(obs, info)["disable"]).astype(bool)
    np.testing.assert_array_equal(flat_hidden, read & (0.05 < t))  # one bar for every size: all or none


def test_a_hidden_output_stays_hidden_whatever_the_classifier_says(fitted):
    obs, info = _mid_run(fitted)
    read = np.flatnonzero(obs["item_mask"].astype(bool) & (obs["items"][:, 1] >= 1))
    obs = {k: np.array(v) for k, v in obs.items()}
    obs["items"][read[0], 2] = 0.0  # hidden before
    pol = need_policy.NeedPolicy(_Flat(), threshold=1e-9, alpha=0.0, batching="off")  # would show all
    pol.reset(info)
    act = pol.act(obs, info)
    assert not np.asarray(act["enable"]).any() and not np.asarray(act["disable"]).any()


def test_the_script_reports_the_held_out_runs(capsys):
    argv = ["--dataset", "data/sample", "--thresholds", "0.02", "5", "--alpha", "0", "--json"]
    assert need_policy.main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    by = {(x["policy"], x["group"]): x for x in r["rows"]}
    assert r["held_out"] > 0 and ("oracle", "all") in by
    bold, shy = by[("need:t=5,alpha=0", "all")], by[("need:t=0.02,alpha=0", "all")]
    assert bold["oracle_share"] is not None and by[("oracle", "all")]["oracle_share"] == pytest.approx(1.0)
    # a threshold above every P hides what has been read: placeholders stand in the prompt
    assert bold["placeholder_overhead"] > 0 and shy["n"] == bold["n"] == r["held_out"]


@pytest.mark.parametrize(
    "bad, says",
    [
        (["--both", "0.2:0.1"], "--both needs --checkpoint"),
        (["--alpha", "7"], "--alpha"),
        (["--thresholds", "0"], "--thresholds: must be in (0, inf), got 0"),
        (["--thresholds", "abc"], "--thresholds: not a number: 'abc'"),
        (["--checkpoint", "x", "--both", "0.2"], "is not T1:T2"),
        (["--checkpoint", "x", "--both", "0.2:inf"], "--both: must be in (0, inf), got inf"),
        (["--checkpoint", "x", "--both", "2:0.1"], "at most 1"),
        (["--seed", "-1"], "--seed: must be at least 0, got -1"),
        (["--threads", "0"], "--threads: must be at least 1, got 0"),
    ],
)
def test_bad_arguments_are_one_line_errors(bad, says, capsys):
    with pytest.raises(SystemExit):
        need_policy.main(["--dataset", "data/sample", *bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m scripts.need_policy: error:") and says in err[-1]


def test_a_missing_dataset_is_one_line(capsys):
    assert need_policy.main(["--dataset", "/nonexistent/dtoc-data", "--json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("need_policy: ")


def test_leave_out_replays_every_run_of_a_harness_the_classifier_never_saw(capsys):
    argv = ["--dataset", "data/sample", "--leave-out", "tau-bench", "--thresholds", "0.05", "--json"]
    assert need_policy.main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    runs = [e for e in need_policy.load_episodes("data/sample") if e.source == "tau-bench"]
    assert r["held_out"] == len(runs) > 0
    assert {x["n"] for x in r["rows"] if x["group"] == "all"} == {len(runs)}  # every run of it, no other
    assert need_policy.main(["--dataset", "data/sample", "--leave-out", "nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exclude_source 'nope' is not in the data" in err[0]


def test_features_at_decision_are_the_features_trained_on(fitted):
    """Train/serve parity: replaying the need targets as collect() does, the columns the policy builds
    from each raw observation equal those fitted from that decision's training sample."""
    need, _, _ = fitted
    cfg = LearnedPolicyConfig(seed=0, word_min_tasks=2)
    _, train, _, _ = lt._splits(cfg, "data/sample", None)
    ep = max(train, key=lambda e: len(e.out_steps))
    samples = lt.collect(cfg.create(), [ep], mode="need")
    seen = []

    class Spy(need_policy.NeedClassifier):
        def features(self, *args):
            seen.append(args)
            return need_policy.NeedClassifier.features(self, *args)

    pol = need_policy.NeedPolicy(Spy(need.clf, need.svd, need.vocab), 0.02)
    env = ReplayEnv(trajectories=[ep], expose_episode=True, cost_config=lt._cost_config(cfg.create()))
    obs, info = env.reset(seed=0)
    pol.reset(info)
    n_items, n_glob = len(need_policy.ITEM_FEATURES), len(need_policy.GLOBAL_FEATURES)
    checked = 0
    for s in samples:
        pol.act(obs, info)
        if s.items.shape[0]:
            live = need_policy.NeedClassifier._columns(*[a for i, a in enumerate(seen[-1]) if i != 2])
            trained = need_policy.NeedClassifier._columns(
                s.items[:, :n_items], s.tool, s.glob[:n_glob], s.family, s.glob[n_glob : n_glob + 2]
            )
            np.testing.assert_allclose(live, trained, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(seen[-1][2], s.words)
            checked += 1
        want = np.zeros(len(obs["item_mask"]), bool)
        want[: len(s.target)] = s.target > 0.5
        obs, _, done, _, info = env.step(to_action(obs, want))
        if done:
            break
    assert checked >= 5


def test_both_hides_only_what_the_network_would_hide_too(fitted, tmp_path):
    """--both end to end: with the network's bar at 0 nothing is hidden, whatever the classifier says;
    with the bar above every probability it hides what the classifier alone hides."""
    need, _, held = fitted
    net = LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, word_vocab=0).create()
    ep = max(held, key=lambda e: len(e.out_steps))
    never, _ = _replay(need_policy.NeedPolicy(need, 10.0, 0.0, "off", net=net, net_threshold=1e-12), ep)
    assert not never
    alone, _ = _replay(need_policy.NeedPolicy(need, 10.0, 0.0, "off"), ep)
    both, _ = _replay(need_policy.NeedPolicy(need, 10.0, 0.0, "off", net=net, net_threshold=1.0 + 1e-6), ep)
    assert alone and both == alone
    net.save(tmp_path / "ckpt")
    argv = ["--dataset", "data/sample", "--checkpoint", str(tmp_path / "ckpt"), "--thresholds", "0.05"]
    assert need_policy.main([*argv, "--both", "0.5:0.05", "--json"]) == 0
    with pytest.raises(SystemExit):  # another split than the checkpoint's
        need_policy.main([*argv, "--seed", "3"])


def test_batched_hides_wait_until_they_pay(fitted):
    """batching=pays times the same hides by the learned policy's rule: never more hidden than at once."""
    need, _, held = fitted
    for ep in [e for e in held if len(e.out_steps) >= 3]:
        at_once, _ = _replay(need_policy.NeedPolicy(need, 10.0, 0.0, "off"), ep)
        paid, _ = _replay(need_policy.NeedPolicy(need, 10.0, 0.0, "pays"), ep)
        assert paid <= at_once
