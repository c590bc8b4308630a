"""On-policy RL for learned policies: PPO on ReplayEnv's dollar reward.

The actor is the policy's own :class:`~dtoc_rl.policies.learned.ItemScorer`: one Bernoulli per stored
output on its logit ("visible at the next call"), so the action of a step is the visibility of every
valid slot and its log-probability is the sum over those slots (padding takes no part).  The
environments are ``gymnasium.vector.SyncVectorEnv`` of :class:`~dtoc_rl.envs.ReplayEnv` over the
training episodes; the reward is ReplayEnv's: minus each call's dollars (prompt caching, the
re-writes a change causes, a miss's re-read) relative to the run's dollars with everything visible,
so a whole run sums to minus its cost ratio (-1 is no management).

Why PPO rather than REINFORCE over whole runs: a run lasts up to hundreds of calls, and one return
per run gives every decision of it the same credit; a learned value and GAE give each decision the
dollars that followed it, and the clipped surrogate lets several epochs of minibatches reuse one
rollout without the policy moving far from the imitation it usually starts from.

The critic (:class:`Critic`) is a separate small MLP trained alongside and never saved, so
checkpoints keep their format.  It reads the global and economic global features plus a masked
mean and max of the per-output features: what is left to pay for in a run depends on how much is
in the prompt, how many calls it has lasted and the model's prices, which those summaries carry,
and keeping it apart from the scorer means a poor early value estimate cannot disturb the
imitation-trained representation the actor starts from.

The loop follows CleanRL's ppo.py: collect ``rl_steps`` steps from each of ``rl_envs`` envs, GAE
with ``rl_gamma`` / ``rl_gae_lambda``, then ``rl_epochs`` passes of ``rl_minibatches`` minibatches
of the clipped surrogate, value loss and entropy bonus, gradients clipped, an epoch loop stopped
early when the approximate KL to the rollout policy passes ``rl_target_kl``.

:func:`finetune` runs it on an existing checkpoint's training tasks and chooses its thresholds
again (``dtoc-rl train --init-from CKPT``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.baselines import to_action
from dtoc_rl.policies.cpu import torch_threads
from dtoc_rl.policies.learned import (
    ECON_GLOBAL_FEATURES,
    ECON_ITEM_FEATURES,
    LearnedPolicy,
    _squash,
    obs_to_tensors,
    unread,
)
from dtoc_rl.provenance import environment
from dtoc_rl.sim.episode import Episode

if TYPE_CHECKING:
    from dtoc_rl.policies.learned_trainer import Sample

__all__ = ["Critic", "finetune", "make_vector_env", "ppo"]

N_ITEM = len(ITEM_FEATURES) + len(ECON_ITEM_FEATURES)
N_GLOB = len(GLOBAL_FEATURES) + len(ECON_GLOBAL_FEATURES)


class Critic(nn.Module):
    """V(state): an MLP on the global features and the masked mean and max of the item features."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(N_GLOB + 2 * N_ITEM + 1, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, items, mask, glob) -> torch.Tensor:  # (B,)
        x = _squash(items)
        m = mask[..., None].float()
        count = m.sum(1)
        mean = (x * m).sum(1) / count.clamp_min(1.0)
        mx = torch.where(m > 0, x, torch.full_like(x, -1e4)).amax(1)
        mx = torch.where(count > 0, mx, torch.zeros_like(mx))
        return self.net(torch.cat([_squash(glob), mean, mx, torch.log1p(count)], -1)).squeeze(-1)


def make_vector_env(policy: LearnedPolicy, episodes: Sequence[Episode], n_envs: int, miss_weight: float):
    """``n_envs`` ReplayEnvs over ``episodes`` in one process.  Same-step autoreset: a step that ends a
    run returns the next run's first observation, so every stored step is a real decision (next-step
    autoreset would insert a step whose action is ignored, to be masked out of the loss)."""
    from dtoc_rl.policies.learned_trainer import _cost_config

    cost = _cost_config(policy)
    eps = list(episodes)

    def one():
        return ReplayEnv(
            trajectories=eps, max_items=policy.cfg.max_items, cost_config=cost, miss_weight=miss_weight
        )

    return gym.vector.SyncVectorEnv(
        [one for _ in range(n_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def _free(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """The slots whose bit the actor draws: every stored output some call has read.  One no call has
    read yet (:func:`~dtoc_rl.policies.learned.unread`) stays visible, as
    :meth:`LearnedPolicy.want_visible` keeps it, and its bit is no choice of the policy's, so no
    gradient flows through it."""
    return t["mask"] & ~unread(t["items"])


def _rows(t: dict[str, torch.Tensor], bits: torch.Tensor, free: torch.Tensor) -> list[Sample]:
    """A batch of model inputs and the visibility bits drawn for it, one Sample per row (the bits as
    its target, weight 1 on the slots the actor drew), trimmed to the row's own valid slots: minibatches
    are then padded by :func:`~dtoc_rl.policies.learned_trainer._batch`, as in supervised training."""
    from dtoc_rl.policies.learned_trainer import Sample

    out = []
    for i in range(t["mask"].shape[0]):
        m = int(t["mask"][i].sum())
        action = bits[i, :m].numpy()
        out.append(
            Sample(
                items=t["items"][i, :m].numpy(),
                tool=t["tool"][i, :m].numpy(),
                words=t["words"][i, :m].numpy().astype(np.int32),
                glob=t["glob"][i].numpy(),
                family=int(t["family"][i]),
                target=action,
                weight=free[i, :m].numpy().astype(np.float32),
            )
        )
    return out


def _dist_terms(logits, mask, action):
    """Summed log-probability and entropy of the slot bits of each row (padding excluded)."""
    dist = torch.distributions.Bernoulli(logits=logits)
    m = mask.float()
    return (dist.log_prob(action) * m).sum(1), (dist.entropy() * m).sum(1)


def ppo(
    policy: LearnedPolicy,
    episodes: Sequence[Episode],
    *,
    log=lambda *_a, **_k: None,
    progress: bool = False,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """Fine-tune ``policy.net`` in place with PPO on ``episodes``; returns the learning curve.

    ``max_seconds`` stops after the update that passes it (a wall-clock budget).  Runs on
    ``cfg.threads`` torch threads (more only spin on a busy machine) and restores the caller's count."""
    with torch_threads(max(1, policy.cfg.threads)):
        return _ppo(policy, episodes, log=log, progress=progress, max_seconds=max_seconds)


def _ppo(policy, episodes, *, log, progress, max_seconds) -> dict[str, Any]:
    from tqdm.auto import tqdm

    from dtoc_rl.policies.learned_trainer import _batch

    cfg = policy.cfg
    if not episodes:
        raise ValueError("no episodes to run RL on")
    net = policy.net
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        critic = Critic()
    opt = torch.optim.Adam([*net.parameters(), *critic.parameters()], lr=cfg.rl_lr, eps=1e-5)
    envs = make_vector_env(policy, episodes, cfg.rl_envs, cfg.rl_miss_weight)
    n_env, n_steps = cfg.rl_envs, cfg.rl_steps
    obs, _ = envs.reset(seed=cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    ep_return = np.zeros(n_env)
    history: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    bar = tqdm(range(cfg.rl_updates), desc="ppo", disable=not progress)
    for update in bar:
        # -- rollout: n_steps decisions of each env with the current policy ------------------------
        net.eval()
        rows, rewards, dones, values, logps = (
            [],
            np.zeros((n_steps, n_env)),
            np.zeros((n_steps, n_env)),
            [],
            [],
        )
        finished: list[float] = []
        for s in range(n_steps):
            x = obs_to_tensors(obs)
            with torch.no_grad():
                logits = net(**x)
                probs = torch.sigmoid(logits)
                free = _free(x)
                bits = torch.where(free > 0, torch.bernoulli(probs, generator=gen), x["mask"].float())
                lp, _ = _dist_terms(logits, free, bits)
                v = critic(x["items"], x["mask"], x["glob"])
            step_rows = _rows(x, bits, free)
            actions = {"enable": [], "disable": []}
            for i, r in enumerate(step_rows):
                m = len(r.tool)
                want = np.zeros(cfg.max_items, bool)
                want[:m] = r.target > 0.5
                a = to_action({"item_mask": obs["item_mask"][i], "items": obs["items"][i]}, want)
                actions["enable"].append(a["enable"])
                actions["disable"].append(a["disable"])
            rows.append(step_rows)
            values.append(v.numpy())
            logps.append(lp.numpy())
            obs, r, term, trunc, _ = envs.step({k: np.stack(a) for k, a in actions.items()})
            rewards[s], dones[s] = r, term | trunc
            ep_return += r
            for i in np.flatnonzero(dones[s]):
                finished.append(float(ep_return[i]))
                ep_return[i] = 0.0
        with torch.no_grad():
            x = obs_to_tensors(obs)
            next_value = critic(x["items"], x["mask"], x["glob"]).numpy()
        values_a, logps_a = np.stack(values), np.stack(logps)
        # -- GAE: a finished run bootstraps nothing (ReplayEnv never truncates) ---------------------
        adv = np.zeros((n_steps, n_env))
        last = np.zeros(n_env)
        for s in reversed(range(n_steps)):
            nv = next_value if s == n_steps - 1 else values_a[s + 1]
            live = 1.0 - dones[s]
            delta = rewards[s] + cfg.rl_gamma * nv * live - values_a[s]
            last = delta + cfg.rl_gamma * cfg.rl_gae_lambda * live * last
            adv[s] = last
        returns = adv + values_a
        flat = [r for step in rows for r in step]
        b_adv, b_ret = adv.reshape(-1), returns.reshape(-1)
        b_logp, b_val = logps_a.reshape(-1), values_a.reshape(-1)
        # -- PPO epochs over minibatches ----------------------------------------------------------------
        net.train()
        n = len(flat)
        mb = max(1, n // cfg.rl_minibatches)
        kls, clipfracs, pg_losses, v_losses, ents = [], [], [], [], []
        stop = False
        for _ in range(cfg.rl_epochs):
            order = rng.permutation(n)
            for j in range(0, n, mb):
                idx = order[j : j + mb]
                x, action, drawn, _ = _batch([flat[k] for k in idx])
                logits = net(**x)
                new_lp, ent = _dist_terms(logits, drawn, action)
                v = critic(x["items"], x["mask"], x["glob"])
                a = torch.as_tensor(b_adv[idx], dtype=torch.float32)
                if len(idx) > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                log_ratio = new_lp - torch.as_tensor(b_logp[idx], dtype=torch.float32)
                ratio = log_ratio.exp()
                with torch.no_grad():
                    kls.append(float(((ratio - 1) - log_ratio).mean()))
                    clipfracs.append(float(((ratio - 1).abs() > cfg.rl_clip).float().mean()))
                pg = torch.max(-a * ratio, -a * ratio.clamp(1 - cfg.rl_clip, 1 + cfg.rl_clip)).mean()
                ret = torch.as_tensor(b_ret[idx], dtype=torch.float32)
                old_v = torch.as_tensor(b_val[idx], dtype=torch.float32)
                v_clipped = old_v + (v - old_v).clamp(-cfg.rl_clip, cfg.rl_clip)
                v_loss = 0.5 * torch.max((v - ret) ** 2, (v_clipped - ret) ** 2).mean()
                n_valid = drawn.sum(1).clamp_min(1)
                ent_mean = (ent / n_valid).mean()  # per slot bit, so runs of any width weigh alike
                loss = pg + cfg.rl_vf_coef * v_loss - cfg.rl_entropy * ent_mean
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), cfg.rl_max_grad_norm)
                nn.utils.clip_grad_norm_(critic.parameters(), cfg.rl_max_grad_norm)
                opt.step()
                pg_losses.append(float(pg.detach()))
                v_losses.append(float(v_loss.detach()))
                ents.append(float(ent_mean.detach()))
            if cfg.rl_target_kl and np.mean(kls[-max(1, -(-n // mb)) :]) > cfg.rl_target_kl:
                stop = True
                break
        net.eval()
        row = {
            "update": update,
            "mean_return": float(np.mean(finished)) if finished else None,
            "runs_finished": len(finished),
            "mean_step_reward": float(rewards.mean()),
            "pg_loss": float(np.mean(pg_losses)),
            "value_loss": float(np.mean(v_losses)),
            "entropy_per_slot": float(np.mean(ents)),
            "approx_kl": float(np.mean(kls)),
            "clipfrac": float(np.mean(clipfracs)),
            "kl_stop": stop,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        history.append(row)
        log({f"rl/{k}": v for k, v in row.items() if v is not None and not isinstance(v, bool)})
        bar.set_postfix(ret=row["mean_return"], kl=f"{row['approx_kl']:.3f}", refresh=False)
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
    envs.close()
    done = [h["mean_return"] for h in history if h["mean_return"] is not None]
    return {
        "algorithm": "ppo",
        "vector_env": type(envs).__name__,
        "updates_run": len(history),
        "transitions": len(history) * n_env * n_steps,
        "seconds": round(time.perf_counter() - t0, 2),
        "rl_mean_return_first": done[:1],
        "rl_mean_return_last": done[-1:],
        "history": history,
    }


def finetune(
    policy: LearnedPolicy,
    dataset: Any = None,
    *,
    episodes: Sequence[Episode] | None = None,
    progress: bool = False,
    log=lambda *_a, **_k: None,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """PPO on a trained policy's own training tasks, then its thresholds chosen again on its tune tasks.

    The split is the one the policy was trained with (same data, filters and seed: the checkpoint's
    held-out tasks must come out the same, else this is not its data and a ValueError says so), so
    the held-out tasks stay unused.  ``policy.cfg``'s RL fields set the run.  Updates ``policy.meta``
    (``rl``, ``thresholds``, ``val_metrics``) and returns the report."""
    cfg = policy.cfg
    if cfg.rl_updates < 1:
        raise ValueError("fine-tuning needs rl_updates >= 1")
    with torch_threads(max(1, cfg.threads)), torch.random.fork_rng(devices=[]):  # the caller's, after
        return _finetune(policy, dataset, episodes, log=log, progress=progress, max_seconds=max_seconds)


def _finetune(policy, dataset, episodes, *, log, progress, max_seconds) -> dict[str, Any]:
    from dtoc_rl.policies.learned_trainer import _cost_config, _tune, evaluate_cost, own_splits

    t0 = time.perf_counter()
    _, train_eps, held_eps, tune_eps = own_splits(policy, dataset, episodes)
    if not train_eps:
        raise ValueError("no training episodes in this data")
    report: dict[str, Any] = {
        "train_episodes": len(train_eps),
        "val_episodes": len(held_eps),
        "tune_episodes": len(tune_eps),
    }
    report["rl"] = ppo(policy, train_eps, log=log, progress=progress, max_seconds=max_seconds)
    cost = _cost_config(policy)
    if tune_eps:
        report["thresholds"] = _tune(policy, tune_eps, cost, progress)
    report["val_metrics"] = evaluate_cost(policy, held_eps, cost) if held_eps else {}
    report["seconds"] = round(time.perf_counter() - t0, 2)
    rl_meta = {k: v for k, v in report["rl"].items() if k != "history"}
    rl_meta["mean_return_per_update"] = [h["mean_return"] for h in report["rl"]["history"]]
    rl_meta["environment"] = environment()  # the fine-tuning's software, not the first training's
    policy.meta = {**policy.meta, "rl": rl_meta, "val_metrics": report["val_metrics"]}
    if "thresholds" in report:
        policy.meta["thresholds"] = report["thresholds"]
    return report
