"""A need classifier as a policy: how much of what ``scripts.need_ceiling`` hides survives replay in dollars.

``scripts.need_ceiling`` counts token-steps hidden by a need classifier at a grid of ages, with changes
free.  This script makes the same kind of classifier a policy and replays it in ReplayEnv, where every
hide re-writes the cached prompt after the output and a miss costs a re-run:

* a gradient-boosted classifier (scikit-learn) learns P(a call from the next one on needs the output)
  from the training split of ``dtoc-rl train --seed S`` (the same held-out tasks as that checkpoint),
  on what the observation shows of each output whatever was hidden before: size, age, needs so far,
  calls since the last need, modified, error, superseded, user turns after it, its tool category, the
  run's calls, stored outputs and full prompt, the model family and its cache prices, and its words
  (the learned policy's vocabulary, reduced to 32 dimensions);
* the policy keeps an output visible while ``P >= t * V ** alpha`` (``V``: its tokens times the calls
  so far, capped at 50, over 20,000, as ``need_ceiling --alpha``), and always while no call has read it;
  once hidden it stays hidden (a need is a miss; ReplayEnv's re-run brings a copy back);
* its hides are timed by the learned policy's batching rule (``--batching pays``: together, and only
  when the cache reads they save beat the re-write) or made at once (``off``);
* with ``--checkpoint C`` (trained with the same seed) it also replays "both": an output is hidden only
  when the network would hide it too (``P(visible) < t1``).

It prints, per policy, the dollars saved and misses per 100 calls on the held-out tasks, overall and
for long and short runs, with the share of the hindsight oracle's savings.  Nothing is saved: the
classifier lives for one run (a checkpoint of it would need a pickle).

    python -m scripts.need_policy --dataset D --seed 0 --thresholds 0.02 0.04 --alpha 0 0.5
    python -m scripts.need_policy --dataset D --seed 0 --checkpoint C --both 0.2:0.08 0.3:0.15
    python -m scripts.need_policy --dataset D --leave-out mini-swe-agent --thresholds 0.01 0.02
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from dtoc_rl.cli.common import at_least, number_in
from dtoc_rl.data.dataset import DatasetError, task_name
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES, price_vector
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.optional import require
from dtoc_rl.policies import learned_trainer as lt
from dtoc_rl.policies.base import Policy
from dtoc_rl.policies.baselines import episode_prices, to_action
from dtoc_rl.policies.evaluate import ORACLE, aggregate, evaluate
from dtoc_rl.policies.learned import CheckpointError, LearnedPolicy, _prices_of, economics
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from scripts.need_ceiling import check_weights, hide_worth, need_classifier

_I = {n: i for i, n in enumerate(ITEM_FEATURES)}
_G = {n: i for i, n in enumerate(GLOBAL_FEATURES)}
# what the observation shows of an output whatever the policy hid before (visibility, toggles, misses
# and the active prompt depend on it, so a classifier fitted under one behaviour would read them wrong)
ITEM_COLUMNS = ("est_tokens_k", "age", "times_needed", "since_need", "modified", "is_error", "superseded",
                "turns_after")  # fmt: skip
# (not full_tokens_k: a re-run's copy after a miss adds to it)
GLOBAL_COLUMNS = ("step", "stored")
_IC = [_I[n] for n in ITEM_COLUMNS]
_GC = [_G[n] for n in GLOBAL_COLUMNS]
SVD_DIMS = 32


@dataclass
class NeedClassifier:
    """P(a call from the next one on needs each output) from an observation's outputs."""

    clf: Any
    svd: Any
    vocab: dict[int, int]

    @staticmethod
    def _columns(items, tool, glob, family: int, rel_prices: np.ndarray) -> np.ndarray:
        m = len(items)
        return np.hstack([
            items[:, _IC], tool[:, None], np.repeat(glob[None, _GC], m, 0), np.full((m, 1), family),
            np.repeat(rel_prices[None], m, 0),
        ]).astype(np.float32)  # fmt: skip

    def _bag(self, words: np.ndarray) -> Any:
        sparse = require("scipy.sparse", "scripts.need_policy", "analysis")
        rows, cols = [], []
        for i, ws in enumerate(np.asarray(words).tolist()):
            for w in ws:
                j = self.vocab.get(w)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
        return sparse.csr_matrix(
            (np.ones(len(rows)), (rows, cols)), shape=(len(words), max(1, len(self.vocab)))
        )

    def features(self, items, tool, words, glob, family: int, rel_prices: np.ndarray) -> np.ndarray:
        x = self._columns(items, tool, glob, family, rel_prices)
        if self.svd is None:
            return x
        return np.hstack([x, self.svd.transform(self._bag(words)).astype(np.float32)])

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.clf.predict_proba(x)[:, 1]

    @classmethod
    def fit(cls, samples: list[lt.Sample], vocab: np.ndarray, seed: int = 0) -> NeedClassifier:
        """Fitted on need-target samples (``learned_trainer.collect(mode="need")``): every output a call
        has read (age >= 1) at every call, labelled by whether that call or a later one needs it."""
        decomposition = require("sklearn.decomposition", "scripts.need_policy", "analysis")
        n_items, n_glob = len(ITEM_FEATURES), len(GLOBAL_FEATURES)
        self = cls(None, None, {int(w): i for i, w in enumerate(np.asarray(vocab).tolist())})
        xs, ws, ys = [], [], []
        for s in samples:
            keep = s.items[:, _I["age"]] >= 1
            if keep.any():
                rel = s.glob[n_glob : n_glob + 2]  # ECON_GLOBAL_FEATURES: cache read and write / input
                xs.append(
                    self._columns(s.items[keep, :n_items], s.tool[keep], s.glob[:n_glob], s.family, rel)
                )
                ws.append(s.words[keep])
                ys.append(s.target[keep] > 0.5)
        if not xs:
            raise ValueError("no decision on an output a call has read: nothing to fit")
        x = np.vstack(xs)
        if len(self.vocab) >= 2:  # else no words (a vocabulary needs words of many training tasks)
            bag = self._bag(np.concatenate(ws))
            self.svd = decomposition.TruncatedSVD(min(SVD_DIMS, len(self.vocab) - 1), random_state=seed).fit(
                bag
            )
            x = np.hstack([x, self.svd.transform(bag).astype(np.float32)])
        y = np.concatenate(ys)
        if y.all() or not y.any():
            raise ValueError("the training decisions have one label only: nothing to tell apart")
        categorical = np.zeros(x.shape[1], bool)
        categorical[[len(_IC), len(_IC) + 1 + len(_GC)]] = True  # tool category, model family
        self.clf = need_classifier(categorical, seed, "scripts.need_policy").fit(x, y)
        return self


class NeedPolicy(Policy):
    """Hide what the need classifier rates below ``threshold * V ** alpha`` (and, with ``net``, what the
    network would hide too), timed by the learned policy's batching rule; hidden stays hidden."""

    name = "need_gbm"

    def __init__(
        self,
        need: NeedClassifier,
        threshold: float,
        alpha: float = 0.5,
        batching: str = "pays",
        net: LearnedPolicy | None = None,
        net_threshold: float | None = None,
    ):
        self.need, self.thr, self.alpha = need, float(threshold), float(alpha)
        self.net, self.t1 = net, net_threshold
        # the batching rule and the unread rule are the learned policy's (LearnedPolicy.want_visible), on a
        # policy of their own: the network's may scale its threshold (size_weight, miss_governor)
        self.rule = LearnedPolicyConfig(batching=batching).create()
        self.batching = batching
        self._prices: np.ndarray | None = None

    def config(self) -> dict[str, Any]:
        c = {"threshold": self.thr, "alpha": self.alpha, "batching": self.batching}
        return {**c, "net_threshold": self.t1} if self.net is not None else c

    def reset(self, info: dict[str, Any] | None = None) -> None:
        p = episode_prices(info)
        self._prices = price_vector(p) if p is not None else None
        if self.net is not None:
            self.net.reset(info)

    def act(self, obs, info=None):
        mask = np.asarray(obs["item_mask"]).astype(bool)
        m = int(mask.sum())
        items = np.asarray(obs["items"], np.float32)
        glob = np.asarray(obs["globals"], np.float32).reshape(-1)
        prices = _prices_of(obs, self._prices, None)
        score = np.ones(len(mask), np.float32)
        if m:
            rel = economics(items[:m], mask[:m], glob, prices)[1][:2]  # cache read, write / input, as trained
            fam = int(np.asarray(obs["family"]).reshape(-1)[0])
            tool, words = np.asarray(obs["item_tool"])[:m], np.asarray(obs["item_words"])[:m]
            x = self.need.features(items[:m], tool, words, glob, fam, rel)
            # the calls so far stand for need_ceiling's steps (one call a step in most harnesses)
            worth = hide_worth(items[:m, _I["est_tokens_k"]] * 1000.0, max(float(glob[_G["step"]]), 1.0))
            score[:m] = self.need.predict(x) / np.maximum(worth, 1e-9) ** self.alpha
        hide = score < self.thr
        if self.net is not None:
            hide &= self.net.probs(obs, self._prices) < self.t1
        hide |= mask & (items[:, _I["visible"]] < 0.5)  # hidden stays hidden
        copied = info.get("item_copied") if info else None
        want = self.rule.want_visible(obs, np.where(hide, 0.0, 1.0), 0.5, self._prices, copied)
        return to_action(obs, want)


_positive = number_in(0, float("inf"), open_low=True, open_high=True)


def _both(text: str) -> tuple[float, float]:
    parts = text.split(":")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not T1:T2 (e.g. 0.2:0.08)")
    t1, t2 = (_positive(v) for v in parts)
    if t1 > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: T1 is a probability, at most 1")
    return t1, t2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.need_policy",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dataset", required=True, help="an ingested dataset folder (dtoc-rl ingest)")
    ap.add_argument(
        "--seed",
        type=at_least(0),
        help="the task split of `dtoc-rl train --seed` (or its --split-seed; default 0, or the checkpoint's)",
    )
    ap.add_argument(
        "--thresholds",
        nargs="+",
        type=_positive,
        default=[0.02, 0.04],
        help="t: an output stays visible while P(needed) >= t * V ** alpha; one policy each",
    )
    ap.add_argument("--alpha", nargs="+", type=float, default=[0.5], help="value weights, one policy each")
    ap.add_argument("--batching", choices=("pays", "off"), default="pays", help="how hides are timed")
    ap.add_argument(
        "--checkpoint",
        help="a learned checkpoint, for --both; its split (seed, harness left out, data filters) and "
        "vocabulary settings are used",
    )
    ap.add_argument(
        "--both",
        nargs="+",
        type=_both,
        default=[],
        metavar="T1:T2",
        help="also replay hides both agree on: the network's P(visible) < T1 and the classifier's rule at T2 "
        "(the first --alpha); needs --checkpoint",
    )
    ap.add_argument(
        "--leave-out",
        metavar="SOURCE",
        help="fit on the training split of every other source harness (as `dtoc-rl train --exclude-source "
        "SOURCE`) and replay on every run of SOURCE: a harness the classifier never saw",
    )
    ap.add_argument("--threads", type=at_least(1), default=1, help="OpenMP threads of the classifier")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    check_weights(ap, args.alpha)
    if args.both and not args.checkpoint:
        ap.error("--both needs --checkpoint")
    net = None
    try:
        if args.checkpoint:
            net = LearnedPolicy.load(args.checkpoint)
            for flag, ours, theirs in (
                ("--seed", args.seed, net.cfg.data_seed),
                ("--leave-out", args.leave_out, net.cfg.exclude_source),
            ):
                if ours is not None and ours != theirs:
                    ap.error(f"{flag} {ours!r}: --checkpoint was trained with {theirs!r}")
            cfg = net.cfg
        else:
            cfg = LearnedPolicyConfig(seed=args.seed or 0, exclude_source=args.leave_out)
        _, train_eps, held_eps, _ = lt._splits(cfg, args.dataset, None)
        if cfg.exclude_source:
            held_eps = [e for e in load_episodes(args.dataset) if e.source == cfg.exclude_source]
        if not held_eps:
            raise ValueError("the split holds no task out")
        limits = require("threadpoolctl", "scripts.need_policy", "analysis").threadpool_limits
        with limits(args.threads):
            samples = lt.collect(cfg.create(), train_eps, mode="need", progress=not args.json)
            vocab = lt.word_vocabulary(train_eps, cfg.word_vocab, cfg.word_min_tasks)
            need = NeedClassifier.fit(samples, vocab, cfg.data_seed)
            pols: dict[str, Policy] = {}
            for a in args.alpha:
                for t in args.thresholds:
                    pols[f"need:t={t:g},alpha={a:g}"] = NeedPolicy(need, t, a, args.batching)
            for t1, t2 in args.both:
                pols[f"both:t1={t1:g},t2={t2:g},alpha={args.alpha[0]:g}"] = NeedPolicy(
                    need, t2, args.alpha[0], args.batching, net=net, net_threshold=t1
                )
            tasks = {task_name(e.source, e.task_id) for e in held_eps}
            runs = evaluate(
                args.dataset,
                [],
                policies=pols,
                tasks=tasks,
                source=cfg.exclude_source,
                progress=not args.json,
            )
    except (ValueError, FileNotFoundError, DatasetError, CheckpointError) as e:
        print(f"need_policy: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    rows = aggregate(runs, by=["overall", "length"], n_boot=200)
    oracle = {r["group"]: r["savings"] for r in rows if r["policy"] == ORACLE}
    for r in rows:
        o = oracle.get(r["group"])
        r["oracle_share"] = r["savings"] / o if o else None
    if args.json:
        print(json.dumps({"held_out": len(held_eps), "rows": rows}, indent=2, default=str))
        return 0
    runs_of = f"runs of {cfg.exclude_source}" if cfg.exclude_source else "held-out runs"
    print(
        f"{len(held_eps)} {runs_of} (split seed {cfg.data_seed}); "
        "$ saved / misses per 100 calls (share of the oracle)"
    )
    groups = [g for g in ("all", "long", "short") if g in oracle]
    print(f"{'policy':40} " + "".join(f"{g:>24}" for g in groups))
    for pol in dict.fromkeys(r["policy"] for r in rows):
        by = {r["group"]: r for r in rows if r["policy"] == pol}
        cells = []
        for g in groups:
            r = by.get(g)
            share = f"{r['oracle_share']:.0%}" if r and r["oracle_share"] is not None else "-"
            cells.append(f"{100 * r['savings']:+6.2f}% / {r['misses_per_100']:4.2f} ({share})" if r else "-")
        print(f"{pol:40} " + "".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
