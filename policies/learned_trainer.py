"""Training learned policies from logged trajectories.

Four ways, chosen by ``LearnedPolicyConfig.mode`` (and ``rl_updates``):

* **oracle** (default): supervised on the hindsight oracle's decisions.  The
  oracle is rolled out in ReplayEnv on the training episodes; at each decision
  the target of every stored output is the oracle's visibility at the next
  call.  ``dagger_rounds`` then re-collects states with the learned policy
  itself, labelled by the oracle (DAgger), so the policy also learns to
  recover from its own mistakes.
* **need**: supervised on whether some later call needs each output (a need
  that would be a miss), straight from the logs, with no oracle in between.
  P(visible) is then the chance that hiding it now is a miss, and *when* to
  hide is left to the policy's batching rule (``batching="pays"``).
* **bc**: behaviour cloning of context management found in the logs
  (``Step.masked_before``: SWE-agent 1.x ``LastNObservations`` runs, OpenCode
  prunes).  Only episodes with a logged schedule are used.
* **rl**: PPO on ReplayEnv's dollar reward over ``gymnasium.vector`` envs,
  sampling each output's visibility from the scorer (policies/learned_rl.py);
  after supervised training when ``rl_updates > 0``, or alone with ``mode="rl"``.

Validation holds out whole tasks (by task id), so no task is in both splits.
"""

from __future__ import annotations

import hashlib
import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from dtoc_rl.data.dataset import task_name
from dtoc_rl.data.models import family_id
from dtoc_rl.engine.features import ITEM_FEATURES, price_vector
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.labels.words import WORDS_PER_OUTPUT, common_words
from dtoc_rl.policies.baselines import episode_prices, to_action
from dtoc_rl.policies.cpu import torch_threads
from dtoc_rl.policies.evaluate import run_length
from dtoc_rl.policies.learned import LearnedPolicy, cold_of, economics
from dtoc_rl.policies.oracle import need_schedule, plan
from dtoc_rl.provenance import environment
from dtoc_rl.sim.episode import Episode
from dtoc_rl.sim.pricing import CACHE_REGIMES, cache_regime, load_price_table, price_entries
from dtoc_rl.sim.simulator import CostConfig

__all__ = [
    "REPRICE_FAMILIES",
    "REPRICE_VERSIONS",
    "THRESHOLD_GRID",
    "Sample",
    "adapt",
    "collect",
    "fit",
    "repriced",
    "retune",
    "split_by_task",
    "sweep_thresholds",
    "threshold_table",
]

#: Thresholds tried on validation for the per-family / per-regime table (0, abstaining, needs no run).
#: Dense at the low end, where the miss budget binds: on ../shared the misses per 100 calls double
#: between 0.05 and 0.1, and a table that can only pick one of the two stops well short of the budget.
THRESHOLD_GRID = (
    0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.7,
)  # fmt: skip


#: The models ``price_augment`` re-prices training runs as: one per provider's cache rules and price
#: regime (Anthropic's write premium at two price levels, Google's and DeepSeek's rules, OpenAI's at a
#: quarter and a tenth of the input price for reads, no caching at all).
REPRICE_FAMILIES = (
    "claude-sonnet", "claude-opus", "gemini-3-pro", "deepseek-chat", "gpt-4.1", "gpt-5", "gpt-4",
)  # fmt: skip
#: The version a copy of these families is named as: the one whose logs measured the family's cache hit
#: rate (dtoc_rl.sim.calibrated.CACHE_HIT_RATES), so that the copy's cache reads what such runs read, not
#: every token its rules allow (labels planned at full hits cost the network; docs/results.md).
REPRICE_VERSIONS = {"gpt-5": "gpt-5.2", "gemini-3-pro": "gemini-3-pro-preview"}


def repriced(
    episodes: Sequence[Episode], share: float, seed: int, exclude: str | None = None
) -> list[Episode]:
    """Copies of about ``share`` of ``episodes`` as if a model of another family had made them (one of
    :data:`REPRICE_FAMILIES` but ``exclude``, drawn by ``seed``): the same steps and needs, billed at
    that family's list prices and cache rules, as the version :data:`REPRICE_VERSIONS` names where one
    has a fitted hit rate (no logged cache lifetime).  A run whose calls went to several models is not
    copied: its prices are per call.
    ``exclude``: a family left out of training (its id and prices would leak in through the copies)."""
    if share <= 0.0:  # off: nothing drawn
        return []
    rng = np.random.default_rng(seed)
    out = []
    for ep in episodes:
        if ep.call_model is not None or rng.random() >= share:
            continue
        others = [f for f in REPRICE_FAMILIES if f not in (ep.model_family, exclude)]
        fam = others[int(rng.integers(len(others)))]
        out.append(
            replace(ep, traj_id=f"{ep.traj_id}@{fam}", model_family=fam, family_id=family_id(fam),
                    model_raw=REPRICE_VERSIONS.get(fam, ""), cache_ttl=None)
        )  # fmt: skip
    return out


@dataclass
class Sample:
    items: np.ndarray  # (m, F + E) the used slots only, economics appended
    tool: np.ndarray  # (m,)
    words: np.ndarray  # (m, K) hashed content words, int32 (they are < 2**31): half the memory
    glob: np.ndarray  # (G + E',)
    family: int
    target: np.ndarray  # (m,) 1 = visible at the next call
    weight: np.ndarray  # (m,) loss weights
    aux: np.ndarray | None = None  # (m, len(AUX_TARGETS)) the auxiliary head's targets; None: not collected
    source: str = ""  # the episode's source harness (for --source-balance)


def split_by_task(episodes: Sequence[Episode], val_fraction: float, seed: int) -> tuple[list, list]:
    """Deterministic split: a task's episodes all land on one side."""

    def score(task: str) -> float:
        h = hashlib.sha256(f"{seed}:{task}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64

    tasks = sorted({(e.source, e.task_id) for e in episodes})
    val_tasks = {t for t in tasks if score(f"{t[0]}/{t[1]}") < val_fraction}
    if not val_tasks and len(tasks) > 1:  # tiny datasets: hold out at least one task
        val_tasks = {min(tasks, key=lambda t: score(f"{t[0]}/{t[1]}"))}
    if len(val_tasks) == len(tasks):
        val_tasks = set(list(sorted(val_tasks))[:-1])
    train = [e for e in episodes if (e.source, e.task_id) not in val_tasks]
    val = [e for e in episodes if (e.source, e.task_id) in val_tasks]
    return train, val


ITEM_VISIBLE = ITEM_FEATURES.index("visible")


def _cost_config(policy: LearnedPolicy) -> CostConfig:
    """The costs training plans, weights, observes and tunes under, with the user's prices
    (``cfg.prices``, a file or inline JSON) read into its price table."""
    # a trained checkpoint's own prices (retune, fine-tuning) before the file it was given, which may
    # have moved or changed since
    table = policy.price_table or (load_price_table(policy.cfg.prices) if policy.cfg.prices else None)
    return CostConfig(miss=policy.cfg.miss, overhead=policy.cfg.overhead, price_table=table)


def _targets(ep: Episode, mode: str, cfg: CostConfig, cache: dict) -> np.ndarray | None:
    """V[t, k]: wanted visibility of output k at call t."""
    if mode == "bc":
        if not any(m is not None for m in ep.logged_masked):
            return None
        V = np.ones((ep.n, ep.n), bool)
        for t, masked in enumerate(ep.logged_masked):
            if masked:
                V[t, [k for k in masked if 0 <= k < ep.n]] = False
        return V
    V = cache.get(ep.traj_id)
    if V is None:
        if mode == "need":
            # visible while some call from this one on needs it, or has not read it yet (a miss either way);
            # a label of need, so an output smaller than its placeholder is labelled too
            V = need_schedule(ep, cfg, hide_small=True)
        else:
            V = plan(ep, cfg)
        cache[ep.traj_id] = V
    return V


def _ep_prices(ep: Episode, cfg: CostConfig) -> np.ndarray | None:
    """The run's prices as the policy's inputs, or None for a run priced per call (each observation's
    own ``prices`` then, as the policy reads them deciding)."""
    import warnings

    if cfg.priced_per_call(ep):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a version priced as its family: reported by evaluate, not here
        return price_vector(episode_prices({"episode": ep, "cost_config": cfg}))


def _n_calls(ep: Episode) -> int:
    # decisions are per model call (several parallel tool calls are one call) where episodes group them
    return int(getattr(ep, "n_calls", ep.n))


def _call_needs(ep: Episode, c: int, kinds: np.ndarray | None = None) -> np.ndarray:
    f = getattr(ep, "call_needs", None)
    return f(c, kinds) if f is not None else ep.needs_at(c, kinds)


def _call_reads(ep: Episode, c: int, kinds: np.ndarray | None = None) -> np.ndarray:
    # what a call must see (its needs and the outputs no call has read yet): hiding one is a miss
    f = getattr(ep, "call_reads", None)
    return f(c, kinds) if f is not None else _call_needs(ep, c, kinds)


def _last_need(ep: Episode, kinds: np.ndarray | None = None) -> np.ndarray:
    """The last model call that needs each output (-1: never needed), of the need ``kinds``."""
    last = np.full(ep.n, -1, np.int64)
    for t in range(_n_calls(ep)):
        k = np.asarray(_call_needs(ep, t, kinds), np.int64)
        k = k[(k >= 0) & (k < ep.n)]
        last[k] = t
    return last


def _needed_later(last_need: np.ndarray, slots: np.ndarray, t: int) -> np.ndarray:
    # slots past the logged outputs (copies a recovery appended) have no needs of their own
    inside = (slots >= 0) & (slots < len(last_need))
    return inside & (last_need[np.where(inside, slots, 0)] > t)


def dollar_weights(
    items: np.ndarray,
    econ: np.ndarray,
    prices: np.ndarray,
    target: np.ndarray,
    needed_now: np.ndarray,
    needed_later: np.ndarray,
    calls_left: int,
    need_weight: float,
) -> np.ndarray:
    """What deciding the opposite of ``target`` would cost for each output, relative to one
    full-price read of the prompt (so that runs and models of every size weigh alike).

    * kept visible by the target, needed at the next call: a miss, i.e. an extra call re-reading the
      prompt from the cache plus the output again at full price, ``need_weight`` times (misses are
      also budgeted);
    * kept visible, not needed next: the suffix re-write of the change, plus half a miss when a
      later call needs it;
    * hidden by the target: its cache reads over the calls actually left, plus the re-write when
      showing it again would be a change.
    """
    read_rel = prices[2] / max(prices[0], 1e-9)
    visible = items[:, ITEM_VISIBLE] > 0.5
    share, change = econ[:, 2], econ[:, 4]
    miss = need_weight * (read_rel + share)
    keep_wrong = np.where(needed_now, miss, change + np.where(needed_later, 0.5 * miss, 0.0))
    hide_wrong = share * calls_left * read_rel + np.where(visible, 0.0, change)
    return np.clip(np.where(target > 0.5, keep_wrong, hide_wrong), 0.02, 50.0).astype(np.float32)


def collect(
    policy: LearnedPolicy,
    episodes: Sequence[Episode],
    *,
    mode: str,
    actor: str = "target",
    cache: dict | None = None,
    progress: bool = False,
    seed: int = 0,
) -> list[Sample]:
    """Roll out ``actor`` ("target": play the targets; "policy": the learned policy)
    and record each decision with its targets.  The policy decides each run at a threshold drawn
    log-uniformly between ``cfg.dagger_threshold`` and ``cfg.dagger_threshold_max`` (by ``seed``),
    unless its config fixes one: no table is chosen yet, and the states worth learning are those of
    the thresholds it will be used at."""
    from tqdm.auto import tqdm

    cache = {} if cache is None else cache
    cfg = _cost_config(policy)
    out: list[Sample] = []
    n = policy.cfg.max_items
    dollars = policy.cfg.loss_weights == "dollars"
    aux = policy.cfg.aux_need > 0
    kinds = cfg.kind_mask()  # the needs that would be misses, as the simulator charges them
    pc = policy.cfg
    lo, hi = pc.dagger_threshold, pc.dagger_threshold_max
    draw = None  # the policy's thresholds, one per run: only a roll-out of the policy needs them
    if actor == "policy" and pc.threshold is None:
        draw = np.full(len(episodes), lo) if lo == hi else np.exp(
            np.random.default_rng(seed).uniform(np.log(lo), np.log(hi), len(episodes))
        )  # fmt: skip
    for k, ep in enumerate(tqdm(episodes, desc=f"collect ({actor})", disable=not progress, leave=False)):
        V = _targets(ep, mode, cfg, cache)
        if V is None:
            continue
        prices = _ep_prices(ep, cfg)
        last_need = _last_need(ep, kinds) if dollars or aux else None
        env = ReplayEnv(trajectories=[ep], max_items=n, cost_config=cfg, expose_episode=True)
        obs, info = env.reset(seed=0)
        if actor == "policy":
            policy.reset(info, threshold=None if draw is None else float(draw[k]))
        done = False
        while not done:
            t = int(obs["globals"][2])
            slots = info["slot_steps"]
            m = int(obs["item_mask"].sum())
            s = slots[:m]
            calls = _n_calls(ep)
            target = V[t, s] if t < min(calls, len(V)) else np.ones(m, bool)
            items = obs["items"][:m]
            own = obs["prices"] if prices is None else prices
            econ, econ_glob = economics(items, np.ones(m, bool), obs["globals"], own)
            needed = np.isin(s, _call_reads(ep, t, kinds)) if t < calls else np.zeros(m, bool)
            later = _needed_later(last_need, s, t) if last_need is not None else None
            if dollars:
                weight = dollar_weights(
                    items, econ, own, target, needed, later, max(calls - t, 1), policy.cfg.need_weight
                )
            else:
                weight = np.where(needed, np.float32(policy.cfg.need_weight), np.float32(1.0))
            out.append(
                Sample(
                    items=np.concatenate([items, econ], 1),
                    tool=obs["item_tool"][:m].copy(),
                    words=obs["item_words"][:m].astype(np.int32),
                    glob=np.concatenate([obs["globals"], econ_glob]),
                    family=int(obs["family"]),
                    target=target.astype(np.float32),
                    weight=weight.astype(np.float32),
                    aux=np.stack([needed, later], 1).astype(np.float32) if aux else None,
                    source=ep.source,
                )
            )
            want = np.zeros(n, bool)
            if actor == "target":
                want[:m] = target
                action = to_action(obs, want)
            else:
                action = policy.act(obs, info)  # as it acts when evaluated (info: the re-runs' copies)
            obs, _, done, _, info = env.step(action)
    return out


def _batch(samples: list[Sample], with_aux: bool = False) -> tuple[dict, torch.Tensor, torch.Tensor, Any]:
    """Samples padded to one width: the network's inputs, the targets, the loss weights, and (with
    ``with_aux``) the auxiliary targets ``(B, N, len(AUX_TARGETS))``, else None."""
    b = len(samples)
    width = max(1, max(len(s.target) for s in samples))
    F = samples[0].items.shape[1] if samples[0].items.ndim == 2 else 0
    items = np.zeros((b, width, F), np.float32)
    tool = np.zeros((b, width), np.int64)
    words = np.zeros((b, width, samples[0].words.shape[-1]), np.int64)
    mask = np.zeros((b, width), bool)
    target = np.zeros((b, width), np.float32)
    weight = np.zeros((b, width), np.float32)
    aux = np.zeros((b, width, samples[0].aux.shape[1]), np.float32) if with_aux else None
    for i, s in enumerate(samples):
        m = len(s.target)
        items[i, :m], tool[i, :m], words[i, :m], mask[i, :m] = s.items, s.tool, s.words, True
        target[i, :m], weight[i, :m] = s.target, s.weight
        if aux is not None:
            aux[i, :m] = s.aux
    x = {
        "items": torch.from_numpy(items),
        "tool": torch.from_numpy(tool),
        "mask": torch.from_numpy(mask),
        "glob": torch.from_numpy(np.stack([s.glob for s in samples])),
        "family": torch.tensor([s.family for s in samples]),
        "words": torch.from_numpy(words),
    }
    aux_y = None if aux is None else torch.from_numpy(aux)
    return x, torch.from_numpy(target), torch.from_numpy(weight), aux_y


def source_scales(samples: Sequence[Sample], power: float) -> dict[str, float]:
    """Per source harness, the factor on its loss weights that --source-balance asks for:
    ``(mean mass / its mass) ** power``, a source's mass being the sum of its samples' weights,
    scaled together so that the total mass stays as it was (the loss keeps its size)."""
    mass: dict[str, float] = {}
    for s in samples:
        mass[s.source] = mass.get(s.source, 0.0) + float(s.weight.sum())
    if not power or not mass:
        return {k: 1.0 for k in mass}
    mean = sum(mass.values()) / len(mass)
    raw = {k: (mean / max(v, 1e-9)) ** power for k, v in mass.items()}
    keep = sum(mass.values()) / max(sum(mass[k] * raw[k] for k in mass), 1e-9)
    return {k: r * keep for k, r in raw.items()}


def _loss(
    net: nn.Module,
    samples: list[Sample],
    drop_words: np.ndarray | None = None,
    drop_family: np.ndarray | None = None,
    aux_weight: float = 0.0,
    parts: dict[str, float] | None = None,
    scales: dict[str, float] | None = None,
) -> torch.Tensor:
    """The dollar-weighted loss of the visibility target, plus ``aux_weight`` times the auxiliary
    head's mean loss over the used slots (0: the main loss alone, as validation measures it).
    ``parts``, if given, receives the two apart (``main``, ``aux``), for the training log."""
    with_aux = bool(aux_weight) and samples[0].aux is not None
    x, y, w, aux_y = _batch(samples, with_aux)
    # --source-balance: a source's weights scaled as a whole (one it lacks stays as it is), over the
    # unscaled total, so that a batch of one source is scaled too rather than normalised back
    norm = w.sum().clamp_min(1.0)
    if scales:
        w = w * torch.tensor([scales.get(s.source, 1.0) for s in samples], dtype=w.dtype)[:, None]
    if drop_words is not None and drop_words.any():  # these observations seen without their words
        x["words"][torch.from_numpy(drop_words)] = 0
    if drop_family is not None and drop_family.any():  # and these without their family's vector
        x["no_family"] = torch.from_numpy(drop_family)
    if with_aux:
        logits, aux_logits = net.forward_aux(**x)
    else:
        logits, aux_logits = net(**x), None
    ll = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
    loss = (ll * w).sum() / norm
    if parts is not None:
        parts["main"] = float(loss.detach())
    if aux_logits is not None:
        used = x["mask"][..., None].expand_as(aux_logits)
        aux_ll = nn.functional.binary_cross_entropy_with_logits(aux_logits, aux_y, reduction="none")
        # a batch of observations with nothing stored yet has no used slot: nothing to add, not NaN
        aux_loss = aux_ll[used].sum() / max(int(used.sum()), 1)
        if parts is not None:
            parts["aux"] = float(aux_loss.detach())
        loss = loss + aux_weight * aux_loss
    return loss


def _train_supervised(
    policy, train, val, *, log, progress, label: str, epochs: int | None = None
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    cfg = policy.cfg
    net = policy.net
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    best, best_state, bad, history = math.inf, None, 0, []
    bar = tqdm(range(epochs or cfg.epochs), desc=label, disable=not progress)
    val_sorted = sorted(val, key=lambda x: len(x.target))
    scales = source_scales(train, cfg.source_balance) if cfg.source_balance else None
    widths = np.array([len(x.target) for x in train])
    for epoch in bar:
        net.train()
        # Batches of similar width (sorted with random jitter), in random order: little padding.
        order = np.argsort(widths + rng.random(len(train)) * 4, kind="stable")
        batches = [order[i : i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
        total, total_aux = 0.0, 0.0
        for b in rng.permutation(len(batches)):
            batch = [train[j] for j in batches[b]]
            drop = rng.random(len(batch)) < cfg.word_dropout if cfg.word_dropout else None
            # drawn only when on, so that the default draws the same batches as without the setting
            drop_fam = rng.random(len(batch)) < cfg.family_dropout if cfg.family_dropout else None
            parts: dict[str, float] = {}
            loss = _loss(net, batch, drop, drop_fam, cfg.aux_need, parts=parts, scales=scales)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            # the main loss, comparable with the validation loss; the auxiliary head's apart
            total += parts["main"] * len(batch)
            total_aux += parts.get("aux", 0.0) * len(batch)
        net.eval()
        with torch.no_grad():
            vl = (
                sum(
                    float(_loss(net, val_sorted[i : i + 256], scales=scales)) * len(val_sorted[i : i + 256])
                    for i in range(0, len(val_sorted), 256)
                )
                / len(val)
                if val
                else total / max(1, len(train))
            )
        tl = total / max(1, len(train))
        history.append({"epoch": epoch, "train_loss": tl, "val_loss": vl})
        if cfg.aux_need:
            history[-1]["aux_loss"] = total_aux / max(1, len(train))
        log({f"{label}/{k}": v for k, v in history[-1].items() if k != "epoch"} | {"epoch": epoch})
        bar.set_postfix(train=f"{tl:.4f}", val=f"{vl:.4f}", refresh=False)
        if vl < best - 1e-5:
            best, bad = vl, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return {"best_val_loss": best, "epochs_run": len(history), "history": history}


def _replay(policy, ep: Episode, cfg: CostConfig, max_items: int) -> dict[str, Any]:
    """The last step's info of ``policy`` replayed over ``ep`` (its ``totals`` and ``all_visible``)."""
    env = ReplayEnv(trajectories=[ep], max_items=max_items, cost_config=cfg, expose_episode=True)
    obs, info = env.reset(seed=0)
    policy.reset(info)
    done = False
    while not done:
        obs, _, done, _, info = env.step(policy.act(obs, info))
    return info


def evaluate_cost(policy, episodes: Sequence[Episode], cfg: CostConfig) -> dict[str, float]:
    """Mean cost ratio against all-visible, and misses per 100 steps."""
    ratios, misses, steps = [], 0, 0
    for ep in episodes:
        info = _replay(policy, ep, cfg, policy.cfg.max_items)
        ratios.append(info["totals"]["dollars"] / max(info["all_visible"]["dollars"], 1e-12))
        misses += info["totals"]["misses"]
        steps += _n_calls(ep)
    return {
        "cost_ratio": float(np.mean(ratios)) if ratios else float("nan"),
        "misses_per_100_steps": 100.0 * misses / max(1, steps),
    }


def sweep_thresholds(
    policy: LearnedPolicy,
    episodes: Iterable[Episode],
    cfg: CostConfig,
    grid: Sequence[float] = THRESHOLD_GRID,
) -> list[dict[str, Any]]:
    """Each episode replayed at every threshold of ``grid`` in lockstep (one batched network call per
    decision for all thresholds): per episode its family, source, price regime, steps, no-management
    dollars and run length (``evaluate.run_length``), and per threshold the dollars and misses."""
    n = policy.cfg.max_items
    rows = []
    for ep in episodes:
        envs = [ReplayEnv(trajectories=[ep], max_items=n, cost_config=cfg) for _ in grid]
        steps = [env.reset(seed=0) for env in envs]
        prices = _ep_prices(ep, cfg)
        done = [False] * len(envs)  # a bolder threshold's run can end first (miss="fail")
        while not all(done):
            batch = {k: np.stack([st[0][k] for st in steps]) for k in steps[0][0]}
            probs = policy.probs(batch, prices)
            for i, st in enumerate(steps):
                if done[i]:
                    continue
                row = {k: v[i] for k, v in batch.items()}
                # as act() decides in evaluation: outputs a re-run put back are not restored
                info = st[-1]
                want = policy.want_visible(
                    row, probs[i], grid[i], prices, info.get("item_copied"), cold_of(info)
                )
                steps[i] = envs[i].step(to_action(row, want))
                done[i] = steps[i][2]
        rows.append(_sweep_row(ep, cfg, [st[-1] for st in steps]))
    return rows


def _sweep_row(ep: Episode, cfg: CostConfig, infos: list[dict[str, Any]]) -> dict[str, Any]:
    """One episode's row of a sweep: what groups it, and per option its dollars and misses."""
    unmanaged = infos[0]["all_visible"]
    return {
        "family": ep.model_family,
        "source": ep.source,
        "task": _task_name(ep),
        "regime": cache_regime(episode_prices({"episode": ep, "cost_config": cfg})),
        "steps": _n_calls(ep),
        "base": float(unmanaged["dollars"]),
        "length": run_length(unmanaged["input_tokens"], unmanaged["calls"]),
        "dollars": [float(i["totals"]["dollars"]) for i in infos],
        "misses": [int(i["totals"]["misses"]) for i in infos],
    }


#: A threshold's misses are judged by this quantile of their bootstrap distribution over the tune tasks
#: rather than by their mean: the runs a threshold is chosen on are few (a family may have ten), and a
#: threshold chosen at its mean overshot the budget on held-out tasks (docs/results.md).
MISS_QUANTILE = 0.8
_BOOTSTRAP = 200


def _choose(
    rows: list[dict[str, Any]], grid: Sequence[float], budget: float, quantile: float = MISS_QUANTILE
) -> dict[str, Any]:
    """The threshold saving the most dollars with its misses within the budget (at ``quantile`` of
    their bootstrap over tasks); 0 (abstain) when none saves.  The bootstrap draws tasks, not runs:
    runs of one task miss alike, and held-out runs are of other tasks."""
    base = sum(r["base"] for r in rows)
    steps = np.array([r["steps"] for r in rows], np.float64)
    miss = np.array([r["misses"] for r in rows], np.float64).reshape(len(rows), len(grid))
    # per task (a row without one is a task of its own): its runs' misses and calls, summed
    _, task = np.unique([str(r.get("task", i)) for i, r in enumerate(rows)], return_inverse=True)
    n_tasks = int(task.max()) + 1 if len(rows) else 0
    t_miss = np.zeros((n_tasks, len(grid)))
    np.add.at(t_miss, task, miss)
    t_steps = np.bincount(task, weights=steps, minlength=n_tasks)
    idx = np.random.default_rng(0).integers(0, n_tasks, (_BOOTSTRAP, n_tasks))
    boot = 100.0 * t_miss[idx].sum(1) / np.maximum(t_steps[idx].sum(1), 1.0)[:, None]
    high = np.quantile(boot, quantile, axis=0)
    options = []
    for i, t in enumerate(grid):
        saved = base - sum(r["dollars"][i] for r in rows)
        misses = 100.0 * float(miss[:, i].sum()) / max(1.0, float(steps.sum()))
        options.append(
            {"threshold": t, "saved": saved, "misses_per_100": misses, "misses_high": float(high[i])}
        )
    ok = [o for o in options if o["misses_high"] <= budget and o["saved"] > 0]
    best = max(ok, key=lambda o: o["saved"]) if ok else None
    return {
        "threshold": best["threshold"] if best else 0.0,
        "saved_fraction": (best["saved"] / base if best and base > 0 else 0.0),
        "misses_per_100": best["misses_per_100"] if best else 0.0,
        "trajectories": len(rows),
        "options": options,
    }


def _choose_everywhere(
    rows: list[dict[str, Any]], grid: Sequence[float], budget: float, quantile: float, min_source: int
) -> dict[str, Any]:
    """:func:`_choose` on ``rows``, lowered to the most cautious of its choices on each source harness
    with at least ``min_source`` of them (0: no such check): a threshold that held on every harness
    it was tuned on is the one to trust on a harness it was not.  A harness where no threshold saves
    money within the budget (its own choice is to abstain, whether every threshold loses money or
    every one that saves misses too often) has no say: else one such harness (qwen-coder's runs on
    ../shared) makes every entry that pools it abstain, the per-family entries being where such a
    model is held back."""
    entry = _choose(rows, grid, budget, quantile)
    if min_source <= 0:
        return entry
    by_source = {}
    for src in sorted({str(r.get("source")) for r in rows}):
        sub = [r for r in rows if str(r.get("source")) == src]
        if len(sub) >= min_source:
            by_source[src] = _choose(sub, grid, budget, quantile)["threshold"]
    entry["by_source"] = by_source
    lowest = min((t for t in by_source.values() if t > 0), default=entry["threshold"])
    if lowest < entry["threshold"]:
        entry["lowered_from"] = entry["threshold"]
        entry["threshold"] = lowest
        # the figures of the threshold it now has, on all of the entry's tune runs
        opt = next(o for o in entry["options"] if o["threshold"] == lowest)
        base = sum(r["base"] for r in rows)
        entry["saved_fraction"] = opt["saved"] / base if base > 0 else 0.0
        entry["misses_per_100"] = opt["misses_per_100"]
    return entry


def threshold_table(
    rows: list[dict[str, Any]],
    grid: Sequence[float],
    budget: float,
    min_family: int,
    quantile: float = MISS_QUANTILE,
    min_source: int = 0,
    min_regime: int | None = None,
) -> dict[str, Any]:
    """Per family (with at least ``min_family`` validation runs), per price regime and pooled: the
    threshold of :func:`_choose`.  A family without an entry uses its regime's at run time.

    With ``min_source`` > 0 each entry is held to every source harness with at least that many of its
    runs (:func:`_choose_everywhere`): thresholds chosen on a pool that one harness dominates were
    too bold on harnesses left out of training (docs/results.md, leave-one-harness-out).

    A regime with fewer than ``min_regime`` (default ``min_family``) runs may be more cautious than the
    pooled threshold, never bolder: a few runs without a miss cannot show the misses a bolder threshold
    causes (their bootstrap is all zeros), while a loss on them is evidence enough to abstain."""
    min_regime = min_family if min_regime is None else min_regime
    fams = sorted({r["family"] for r in rows})
    family = {}
    detail: dict[str, Any] = {"family": {}, "regime": {}}
    for f in fams:
        sub = [r for r in rows if r["family"] == f]
        if len(sub) >= min_family:
            detail["family"][f] = _choose_everywhere(sub, grid, budget, quantile, min_source)
            family[f] = detail["family"][f]["threshold"]
    pooled = _choose_everywhere(rows, grid, budget, quantile, min_source) if rows else None
    regime = {}
    for g in CACHE_REGIMES:
        sub = [r for r in rows if r["regime"] == g]
        if sub:
            entry = detail["regime"][g] = _choose_everywhere(sub, grid, budget, quantile, min_source)
            if len(sub) < min_regime and pooled is not None and entry["threshold"] > pooled["threshold"]:
                entry["capped_at_pooled"] = entry["threshold"]
                entry["threshold"] = pooled["threshold"]
            regime[g] = entry["threshold"]
    return {
        "budget_misses_per_100": budget,
        "family": family,
        "regime": regime,
        "default": pooled["threshold"] if pooled else None,
        "validation": {**detail, "pooled": pooled},
    }


#: ``hide_big`` settings (tokens, age) an abstaining table entry may fall back to, from the most
#: cautious (few, big, old outputs hidden) to the boldest, so that the most cautious of several
#: harnesses' choices is the lowest rung (:func:`fallback_table`).
FALLBACK_LADDER: tuple[tuple[int, int], ...] = (
    (8000, 12), (4000, 12), (2000, 12), (1000, 12), (1000, 8), (1000, 4), (2000, 1), (1000, 1),
)  # fmt: skip


def sweep_rules(
    episodes: Iterable[Episode],
    cfg: CostConfig,
    max_items: int,
    ladder: Sequence[tuple[int, int]] = FALLBACK_LADDER,
) -> list[dict[str, Any]]:
    """:func:`sweep_thresholds`'s rows for the ``hide_big`` rule at each rung of ``ladder``."""
    from dtoc_rl.policies.baselines import HideBig

    rules = [HideBig(tokens, age) for tokens, age in ladder]
    return [_sweep_row(ep, cfg, [_replay(rule, ep, cfg, max_items) for rule in rules]) for ep in episodes]


def fallback_table(
    table: dict[str, Any],
    rule_rows: list[dict[str, Any]],
    budget: float,
    quantile: float = MISS_QUANTILE,
    min_source: int = 0,
    ladder: Sequence[tuple[int, int]] = FALLBACK_LADDER,
    min_runs: int = 1,
) -> dict[str, Any]:
    """For each entry of ``table`` that abstains, the rung of ``ladder`` chosen the way thresholds are
    (:func:`_choose_everywhere` on the entry's tune runs, ``rule_rows`` of :func:`sweep_rules`): the
    ``hide_big`` rule saving the most within the budget, held to every harness; none when none saves.
    Where no threshold of the network pays, a fixed rule on big old outputs still may (on ../shared:
    qwen-coder, and families or harnesses the network was not trained on).  An entry with fewer than
    ``min_runs`` tune runs gets none: a rule picked on a handful of runs of one harness lost 3.1% on a
    harness left out of training (docs/results.md), where abstaining loses nothing."""
    rungs = list(range(1, len(ladder) + 1))  # 0 is "no rule", as a threshold of 0 abstains

    def pick(rows: list[dict[str, Any]]) -> dict[str, int] | None:
        if len(rows) < max(1, min_runs):
            return None
        rung = int(_choose_everywhere(rows, rungs, budget, quantile, min_source)["threshold"])
        return dict(zip(("tokens", "age"), ladder[rung - 1])) if rung else None

    out: dict[str, Any] = {"family": {}, "regime": {}, "default": None}
    for section in ("family", "regime"):  # a row's family / regime names the entry it falls under
        for key, t in table[section].items():
            if t == 0 and (rule := pick([r for r in rule_rows if r[section] == key])):
                out[section][key] = rule
    if table["default"] == 0:
        out["default"] = pick(rule_rows)
    return out


def _tune(
    policy: LearnedPolicy, tune_eps: Sequence[Episode], cost_cfg: CostConfig, progress: bool = False
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    cfg = policy.cfg
    # minutes on long runs (RepoLaunch: about 90 s for 700 of them), where a bar says it is moving
    eps = tqdm(tune_eps, desc="thresholds", unit="run", disable=not progress, leave=False)
    rows = sweep_thresholds(policy, eps, cost_cfg)
    table = threshold_table(
        rows, THRESHOLD_GRID, cfg.miss_budget, cfg.min_family_val, min_source=cfg.min_source_val
    )
    if cfg.fallback_rule:
        eps = tqdm(tune_eps, desc="fallback rules", unit="run", disable=not progress, leave=False)
        rule_rows = sweep_rules(eps, cost_cfg, cfg.max_items)
        table["fallback"] = fallback_table(
            table, rule_rows, cfg.miss_budget, min_source=cfg.min_source_val, min_runs=cfg.min_family_val
        )
    policy.set_threshold_table(table)
    return policy.meta["thresholds"]


def retune(
    policy: LearnedPolicy,
    dataset: Any = None,
    *,
    episodes: Sequence[Episode] | None = None,
    progress: bool = False,
) -> dict:
    """Choose a trained policy's threshold table again (e.g. with another ``cfg.miss_budget``) on the
    tune half of the validation tasks it was trained with: the same split from the same data, filters
    and seed, so its held-out tasks stay unused.  Returns the table, also set on the policy."""
    _, _, _, tune_eps = own_splits(policy, dataset, episodes)
    if not tune_eps:
        raise ValueError("no validation tasks to choose thresholds on")
    with torch_threads(max(1, policy.cfg.threads)):  # as fit(): a small network, more threads only spin
        table = _tune(policy, tune_eps, _cost_config(policy), progress)
    policy.meta["retune_environment"] = environment()  # thresholds chosen again, maybe elsewhere
    policy.meta.pop("val_metrics", None)  # the old table's figures; the new one's are in meta.thresholds
    return table


#: Added to a checkpoint's seed for the split of the data it is adapted to: training's own splits hash
#: ``seed`` and ``seed + 1``, and the same hash would put every validation task of the training that
#: reappears in the new data on the held-out side.
ADAPT_SPLIT_SALT = 7919


def adapt(
    policy: LearnedPolicy,
    dataset: Any = None,
    *,
    holdout: float = 0.5,
    episodes: Sequence[Episode] | None = None,
    skip_trained: bool = True,
    progress: bool = False,
) -> dict:
    """Choose a trained policy's threshold table on other logs than it was trained on: a harness, a
    model or tasks of the user's own, whose outputs the network may score higher or lower than those of
    its training data, so that thresholds chosen on its own tune runs do not carry (docs/results.md: with
    a harness left out of training they went over the miss budget on SWE-agent 1.x and took a fifth to
    a third of the oracle's savings on RepoLaunch).  No success labels are needed: the oracle's plans
    and the misses come from the logs' own re-reads.

    With ``skip_trained``, runs of the tasks it trained on are left out (by source and task id, whatever
    the model: the network has seen those tasks' outputs), which needs a checkpoint that lists them.  A
    ``holdout`` share of the other tasks is kept out of the choice and recorded as held out
    (``meta.val_tasks``), so that ``evaluate --holdout-from`` measures the adapted table on runs it was
    not chosen on; 0 chooses on every task.  Tasks the checkpoint chose its own thresholds on are never
    held out (the original table would be judged on the runs it was chosen on).  Returns the table, also
    set on the policy; ``meta`` records the runs chosen on, held out and skipped."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"the held-out share must be in [0, 1), got {holdout}")
    meta = policy.meta
    if skip_trained and meta.get("train_tasks") is None:
        raise ValueError(
            "it lists no training tasks (a checkpoint from before they were recorded), so the runs it "
            "trained on cannot be told apart: retrain it"
        )
    eps = list(episodes) if episodes is not None else load_episodes(dataset)
    trained = set(meta.get("train_tasks") or ()) if skip_trained else set()
    kept = [e for e in eps if _task_name(e) not in trained]
    if not kept:
        raise ValueError("every task of this data is one the checkpoint trained on: nothing to adapt to")
    old_tune = set(meta.get("tune_tasks") or ())
    tune_eps = [e for e in kept if _task_name(e) in old_tune]
    rest = [e for e in kept if _task_name(e) not in old_tune]
    held_eps: list[Episode] = []
    meta["adapt_split_tasks"] = len(_task_names(rest))  # fewer than two: nothing can be held out
    if holdout > 0 and rest:
        # keeps one task on each side when there are two or more, and a single one to choose on
        chosen, held_eps = split_by_task(rest, holdout, policy.cfg.data_seed + ADAPT_SPLIT_SALT)
        tune_eps += chosen
    else:
        tune_eps += rest
    with torch_threads(max(1, policy.cfg.threads)):  # as fit()
        table = _tune(policy, tune_eps, _cost_config(policy), progress)
    chosen_on = _task_names(tune_eps)
    meta["tune_tasks"] = sorted(old_tune | chosen_on)
    meta["val_tasks"] = sorted((set(meta.get("val_tasks") or ()) | _task_names(held_eps)) - chosen_on)
    meta["adapted_on"] = str(dataset) if dataset is not None else "objects"
    meta["adapt_runs"], meta["adapt_held_out_runs"] = len(tune_eps), len(held_eps)
    meta["adapt_skipped_runs"] = len(eps) - len(kept)
    meta["retune_environment"] = environment()
    meta.pop("val_metrics", None)  # the old table's figures
    return table


def _task_name(ep: Episode) -> str:
    return task_name(ep.source, ep.task_id)


def _task_names(episodes: Sequence[Episode]) -> set[str]:
    return {_task_name(e) for e in episodes}


def word_vocabulary(episodes: Sequence[Episode], size: int, min_tasks: int) -> np.ndarray:
    """The policy's vocabulary (:func:`dtoc_rl.labels.words.common_words`) of these episodes' outputs."""
    return common_words(
        (
            ((ep.source, ep.task_id), row)
            for ep in episodes
            if ep.words is not None
            for row in ep.words[ep.has_out]
        ),
        size,
        min_tasks,
    )


def own_splits(policy: LearnedPolicy, dataset: Any, episodes: Any) -> tuple[list, list, list, list]:
    """:func:`_splits` for a trained policy, which must give back its own held-out tasks
    (``meta.val_tasks``): else the data is not what it was trained on, and a ValueError says so.  An
    adapted checkpoint (:func:`adapt`) has no such split any more: its thresholds and held-out tasks are
    the other data's, and choosing them again on its old tune tasks would drop the adaptation unsaid."""
    if policy.meta.get("adapted_on"):
        raise ValueError(
            f"its thresholds were adapted to {policy.meta['adapted_on']}, not chosen on its own tune tasks: "
            "adapt it again (--adapt), or start from the checkpoint it was adapted from"
        )
    split = _splits(policy.cfg, dataset, episodes)
    held = sorted(_task_names(split[2]))
    if policy.meta.get("val_tasks") is not None and held != sorted(policy.meta["val_tasks"]):
        raise ValueError(
            "this data does not split into the checkpoint's held-out tasks: not the data it was trained on "
            "(give the same --dataset and data filters)"
        )
    return split


def episode_group(ep: Episode, by: str) -> str:
    """An episode's model family (``by="family"``) or source harness (``"source"``): what a
    leave-one-out training can exclude."""
    return ep.model_family if by == "family" else ep.source


def _splits(cfg, dataset: Any, episodes: Any, progress: bool = False) -> tuple[list, list, list, list]:
    """All, training, held-out and tune episodes for ``cfg``: fit() and retune() must split alike.

    The validation tasks are halved: one half stops training and chooses the thresholds (tune), the
    other is never used for any choice, so that figures on it (val_tasks, `evaluate --holdout-from`)
    are not inflated by picking the best of several thresholds on the same runs."""
    eps = (
        list(episodes)
        if episodes is not None
        else load_episodes(dataset, model_family=cfg.model_family, source=cfg.source, progress=progress)
    )
    for what, value in (("family", cfg.exclude_family), ("source", cfg.exclude_source)):
        if value:
            present = {episode_group(e, what) for e in eps}
            # a mistyped name would train on everything under a config that says otherwise; episodes
            # handed in (scripts.lofo) may come without the excluded ones already
            if episodes is None and value not in present:
                where = f"after its filters; present: {sorted(present)}"
                raise ValueError(f"exclude_{what} {value!r} is not in the data ({where})")
            eps = [e for e in eps if episode_group(e, what) != value]
            if not eps:
                raise ValueError(f"no episodes left after excluding {what} {value!r}")
    train_eps, val_eps = split_by_task(eps, cfg.val_fraction, cfg.data_seed)
    held_eps, tune_eps = split_by_task(val_eps, 0.5, cfg.data_seed + 1) if val_eps else ([], [])
    return eps, train_eps, held_eps, tune_eps or held_eps  # a single validation task has to do both


def fit(
    policy: LearnedPolicy,
    dataset: Any = None,
    *,
    progress: bool = True,
    episodes: Sequence[Episode] | None = None,
    wandb_run: Any = None,
) -> dict[str, Any]:
    """Train ``policy`` in place; returns a report (also stored in ``policy.meta``).

    Losses and validation metrics go to ``wandb_run`` when given (the caller finishes it, e.g.
    after logging the saved checkpoint), else to a run of its own when ``cfg.wandb`` is set, which
    is finished here, with a non-zero exit code when training fails.
    """
    own = wandb_run is None and policy.cfg.wandb
    if own:
        from dtoc_rl.tracking import start_run

        wandb_run = start_run(project=policy.cfg.wandb_project, config=policy.cfg.to_dict(), job_type="train")
    try:
        # the caller's torch threads and RNG as they were after: training seeds and sizes its own
        with torch_threads(max(1, policy.cfg.threads)), torch.random.fork_rng(devices=[]):
            report = _fit(policy, dataset, progress=progress, episodes=episodes, run=wandb_run)
    except BaseException:
        if own:
            wandb_run.finish(exit_code=1)
        raise
    if own:
        wandb_run.finish()
    return report


def _fit(
    policy: LearnedPolicy,
    dataset: Any,
    *,
    progress: bool,
    episodes: Sequence[Episode] | None,
    run: Any,
) -> dict[str, Any]:
    cfg = policy.cfg
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    eps, train_eps, held_eps, tune_eps = _splits(cfg, dataset, episodes, progress)
    policy.meta.pop("prices", None)  # a new training is priced by its config
    log = run.log if run is not None else (lambda *_a, **_k: None)
    report: dict[str, Any] = {
        "mode": cfg.mode,
        "episodes": len(eps),
        "train_episodes": len(train_eps),
        "val_episodes": len(held_eps),
        "val_tasks": sorted(_task_names(held_eps)),
        # what it trained on: a task in none of the three lists was never seen (evaluate --holdout-from)
        "train_tasks": sorted(_task_names(train_eps)),
        "tune_episodes": len(tune_eps),
        "tune_tasks": sorted(_task_names(tune_eps)),
        "families": sorted({e.model_family for e in eps}),
        # figures of one training compare only with those of the same software (dtoc_rl.provenance)
        "environment": environment(),
    }
    policy.words_per_output = WORDS_PER_OUTPUT  # a new network, trained on this version's words
    report["word_vocab"] = policy.net.set_vocabulary(
        word_vocabulary(train_eps, cfg.word_vocab, cfg.word_min_tasks)
    )
    cache: dict = {}
    # supervised phases only: the thresholds are chosen, and PPO rewarded, on the runs as billed
    learn_eps = list(train_eps) + repriced(train_eps, cfg.price_augment, cfg.seed, exclude=cfg.exclude_family)
    report["repriced_episodes"] = len(learn_eps) - len(train_eps)
    if cfg.mode in ("oracle", "bc", "need"):
        train = collect(policy, learn_eps, mode=cfg.mode, cache=cache, progress=progress)
        val = collect(policy, tune_eps, mode=cfg.mode, cache=cache, progress=progress)
        if not train:
            raise ValueError(
                f"no training decisions for mode={cfg.mode!r}"
                + (
                    ": no episode has a logged masking schedule (Step.masked_before)"
                    if cfg.mode == "bc"
                    else ""
                )
            )
        report["train_decisions"], report["val_decisions"] = len(train), len(val)
        report["supervised"] = _train_supervised(
            policy, train, val, log=log, progress=progress, label="train"
        )
        for r in range(cfg.dagger_rounds if cfg.mode in ("oracle", "need") else 0):
            for eps, into, part in ((learn_eps, train, 0), (tune_eps, val, 1)):
                into += collect(
                    policy, eps, mode=cfg.mode, actor="policy", cache=cache, progress=progress,
                    seed=cfg.seed * 1000 + 10 * r + part,
                )  # fmt: skip
            # fine-tune from the current weights: a third of the epochs is enough
            report[f"dagger_{r + 1}"] = _train_supervised(
                policy, train, val, log=log, progress=progress, label=f"dagger{r + 1}",
                epochs=max(3, cfg.epochs // 3),
            )  # fmt: skip
    if cfg.mode == "rl" or cfg.rl_updates:
        if cfg.mode == "rl" and not cfg.rl_updates:
            cfg.rl_updates = 50
        from dtoc_rl.policies.learned_rl import ppo  # it imports this module

        report["rl"] = ppo(policy, train_eps, log=log, progress=progress)
    cost_cfg = _cost_config(policy)
    if tune_eps:
        t1 = time.perf_counter()
        report["thresholds"] = _tune(policy, tune_eps, cost_cfg, progress)
        report["threshold_seconds"] = round(time.perf_counter() - t1, 2)
    elif cfg.threshold is None:  # said here, so that a caller of fit() hears it as the command does
        warnings.warn(
            f"no thresholds chosen: of {report['episodes']} runs none was left to choose them on "
            "(training keeps tasks apart for that), so the checkpoint decides at its untuned default "
            "threshold; give it more logs (a few dozen runs of several tasks), or a threshold "
            "(learned:path=CKPT,threshold=T)",
            stacklevel=3,
        )
    report["val_metrics"] = evaluate_cost(policy, held_eps, cost_cfg) if held_eps else {}
    report["train_metrics"] = evaluate_cost(policy, train_eps[:50], cost_cfg)
    report["seconds"] = round(time.perf_counter() - t0, 2)
    log({f"val/{k}": v for k, v in report["val_metrics"].items()})
    policy.meta = {
        "trained_on": str(dataset) if dataset is not None else "objects",
        "model_family": cfg.model_family,
        "source": cfg.source,
        **{k: v for k, v in report.items() if k not in ("supervised",) and not k.startswith("dagger")},
    }
    if cost_cfg.price_table:  # the prices themselves, not the file they came from: served where it is not
        policy.meta["prices"] = price_entries(cost_cfg.price_table)
    return report
