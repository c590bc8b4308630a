"""PPO on ReplayEnv in one file, CleanRL style: every setting is a field of ``Args`` below.

    python -m scripts.ppo_replay --total-timesteps 20000
    python -m scripts.ppo_replay --dataset OUT --num-envs 8 --track --wandb-project dtoc-rl

The env is ``dtoc_rl/ReplayFlat-v0`` (``dtoc_rl.envs.wrappers``): one "visible" bit per slot as the
action, ReplayEnv's reward (minus the dollars of the calls, normalised so that -1 per episode is no
management).  The agent scores every slot with one small network shared across slots (the slot's
features, its tool, the global features) and samples each bit from a Bernoulli; padding slots take
no part in the log-probability.  The value is read from the mean of the slots' hidden states.
Prints one line per update (``--json``: one JSON summary at the end); ``--save`` writes the agent's
weights as safetensors, which :class:`PPOPolicy` loads as a policy for ``dtoc-rl evaluate``.  Nothing
is logged anywhere unless ``--track`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dtoc_rl.cli.dataclass_args import add_args_fields
from dtoc_rl.policies.base import Policy


@dataclass
class Args:
    dataset: str = ""
    """dataset folder from `dtoc-rl ingest` (default: the bundled sample)"""
    max_items: int = 32
    """env slots: the most recent stored outputs the agent sees and decides on"""
    seed: int = 1
    """seed of the envs, the network's initial weights and the action sampling"""
    total_timesteps: int = 20_000
    """env steps to train for, summed over the envs"""
    num_envs: int = 4
    """parallel envs (gymnasium.vector.SyncVectorEnv)"""
    num_steps: int = 128
    """steps per env per rollout"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 4
    """minibatches per rollout"""
    update_epochs: int = 4
    """passes over each rollout"""
    clip_coef: float = 0.2
    """PPO clipping of the probability ratio (and of the value)"""
    ent_coef: float = 0.001
    """entropy bonus (per slot bit)"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    hidden: int = 64
    """hidden width of the per-slot network"""
    init_visible_logit: float = 4.0
    """initial bias of each bit's logit: a fresh agent keeps most outputs visible (P = sigmoid of it)"""
    threads: int = 1
    """torch CPU threads (1 is fastest for this small network, and on a busy machine; 0: torch's default)"""
    track: bool = False
    """log the run to Weights & Biases (wandb decides online/offline from WANDB_MODE and your login)"""
    wandb_project: str = "dtoc-rl"
    """wandb project, with --track"""
    save: str = ""
    """write the trained agent's weights here (safetensors), if given"""
    json: bool = False
    """print one JSON summary instead of a line per update"""


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(
        prog="python -m scripts.ppo_replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_args_fields(p, Args)
    args = Args(**vars(p.parse_args(argv)))
    for name in ("max_items", "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if (args.num_envs * args.num_steps) % args.num_minibatches:
        p.error(
            f"--num-envs x --num-steps ({args.num_envs * args.num_steps}) must divide by --num-minibatches"
        )
    return args


def make_agent(n_tools: int, n_item: int, n_glob: int, n_fam: int, args: Args):
    import torch
    from torch import nn

    def squash(x):  # token counts and ages span orders of magnitude
        return torch.sign(x) * torch.log1p(x.abs())

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            h = args.hidden
            self.tool = nn.Embedding(n_tools, 8)
            self.family = nn.Embedding(n_fam, 8)
            self.slot = nn.Sequential(
                nn.Linear(n_item + 8 + n_glob + 8, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh()
            )
            self.logit = nn.Linear(h, 1)
            nn.init.zeros_(self.logit.weight)
            nn.init.constant_(self.logit.bias, args.init_visible_logit)
            self.value = nn.Sequential(nn.Linear(h + n_glob, h), nn.Tanh(), nn.Linear(h, 1))

        def forward(self, obs: dict[str, torch.Tensor]):
            items = squash(obs["item_features"])  # (B, N, F)
            b, n, _ = items.shape
            glob = squash(obs["globals"])
            ctx = torch.cat([glob, self.family(obs["family"].long())], -1)  # (B, G + 8)
            x = torch.cat([items, self.tool(obs["item_tool"].long()), ctx[:, None].expand(b, n, -1)], -1)
            hid = self.slot(x)
            mask = obs["item_mask"].float()
            pooled = (hid * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
            return self.logit(hid).squeeze(-1), self.value(torch.cat([pooled, glob], -1)).squeeze(-1)

        def act(self, obs, action=None):
            logits, value = self(obs)
            dist = torch.distributions.Bernoulli(logits=logits)
            if action is None:
                action = dist.sample()
            mask = obs["item_mask"].float()
            logp = (dist.log_prob(action) * mask).sum(-1)
            ent = (dist.entropy() * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            return action, logp, ent, value

    return Agent()


def train(args: Args) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch

    import dtoc_rl.envs  # noqa: F401  registers dtoc_rl/ReplayFlat-v0
    from dtoc_rl.data.models import FAMILIES
    from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
    from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    run = None
    if args.track:
        import wandb

        run = wandb.init(project=args.wandb_project, config=asdict(args), job_type="ppo_replay")

    kwargs = {"max_items": args.max_items, "dataset": args.dataset or None}
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("dtoc_rl/ReplayFlat-v0", **kwargs) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,  # an ended episode's next obs is a reset's
    )
    agent = make_agent(len(TOOL_CATEGORIES), len(ITEM_FEATURES), len(GLOBAL_FEATURES), len(FAMILIES), args)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    T, E, N = args.num_steps, args.num_envs, args.max_items
    batch_size = T * E
    minibatch = batch_size // args.num_minibatches
    iterations = max(1, args.total_timesteps // batch_size)
    if iterations * batch_size != args.total_timesteps:  # said, not silently another length
        print(
            f"python -m scripts.ppo_replay: note: {iterations * batch_size} steps, whole rollouts of "
            f"num_envs x num_steps = {batch_size} (--total-timesteps {args.total_timesteps})",
            file=sys.stderr,
        )
    space = envs.single_observation_space
    obs_buf = {k: torch.zeros((T, E, *space[k].shape)) for k in space.spaces}
    actions = torch.zeros((T, E, N))
    logprobs, rewards, dones, values = (torch.zeros((T, E)) for _ in range(4))

    def tensors(o):
        return {k: torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in o.items()}

    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = tensors(next_obs)
    next_done = torch.zeros(E)
    ep_return = np.zeros(E)
    finished: list[float] = []
    history: list[dict[str, float]] = []
    global_step, t0 = 0, time.time()
    for it in range(1, iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (it - 1) / iterations) * args.learning_rate
        for step in range(T):
            global_step += E
            for k in obs_buf:
                obs_buf[k][step] = next_obs[k]
            dones[step] = next_done
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            actions[step], logprobs[step], values[step] = action, logp, value
            o, r, term, trunc, _ = envs.step(action.numpy().astype(np.int8))
            done = np.logical_or(term, trunc)
            rewards[step] = torch.as_tensor(r, dtype=torch.float32)
            ep_return += r
            finished.extend(ep_return[done].tolist())
            ep_return[done] = 0.0
            next_obs, next_done = tensors(o), torch.as_tensor(done, dtype=torch.float32)

        with torch.no_grad():  # generalised advantage estimation
            _, next_value = agent(next_obs)
            adv = torch.zeros_like(rewards)
            last = torch.zeros(E)
            for t in reversed(range(T)):
                nonterminal = 1.0 - (next_done if t == T - 1 else dones[t + 1])
                nv = next_value if t == T - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * nv * nonterminal - values[t]
                adv[t] = last = delta + args.gamma * args.gae_lambda * nonterminal * last
            returns = adv + values

        b_obs = {k: v.reshape(batch_size, *v.shape[2:]) for k, v in obs_buf.items()}
        b_act, b_logp = actions.reshape(batch_size, N), logprobs.reshape(-1)
        b_adv, b_ret, b_val = adv.reshape(-1), returns.reshape(-1), values.reshape(-1)
        for _ in range(args.update_epochs):
            for idx in torch.randperm(batch_size).split(minibatch):
                mb = {k: v[idx] for k, v in b_obs.items()}
                _, logp, ent, value = agent.act(mb, b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                a = b_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8) if len(idx) > 1 else a
                clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(-a * ratio, -a * clipped).mean()
                v_clip = b_val[idx] + (value - b_val[idx]).clamp(-args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((value - b_ret[idx]) ** 2, (v_clip - b_ret[idx]) ** 2).mean()
                loss = pg_loss - args.ent_coef * ent.mean() + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        recent = finished[-20:]
        row = {
            "iteration": it,
            "global_step": global_step,
            "episodes": len(finished),
            "mean_return_last20": float(np.mean(recent)) if recent else float("nan"),
            "policy_loss": pg_loss.item(),
            "value_loss": v_loss.item(),
            "entropy": ent.mean().item(),
            "steps_per_s": global_step / max(time.time() - t0, 1e-9),
        }
        history.append(row)
        if run is not None:
            run.log(row, step=global_step)
        if not args.json:
            print(
                f"update {it}/{iterations}  step {global_step}  episodes {len(finished)}  "
                f"return(last 20) {row['mean_return_last20']:.3f}  pg {row['policy_loss']:.4f}  "
                f"v {row['value_loss']:.4f}  entropy {row['entropy']:.3f}  {row['steps_per_s']:.0f} steps/s"
            )
    envs.close()
    summary: dict[str, Any] = {"args": asdict(args), "history": history, "episode_returns": finished}
    if args.save:
        from safetensors.torch import save_file

        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        # the width in the file's metadata: PPOPolicy rebuilds the network from the file alone
        meta = {"format": SAVED_FORMAT, "hidden": str(args.hidden), "max_items": str(args.max_items)}
        save_file({k: v.contiguous() for k, v in agent.state_dict().items()}, args.save, metadata=meta)
        summary["saved"] = args.save
    if run is not None:
        run.finish()
    return summary


SAVED_FORMAT = "dtoc-rl scripts.ppo_replay agent"


class PPOPolicy(Policy):
    """A ``--save``d agent as a dtoc_rl policy, for ``dtoc-rl evaluate``, ``serve`` and the
    Orchestrator (run from the repository's root, where ``scripts`` is importable)::

        dtoc-rl evaluate -p "scripts.ppo_replay:PPOPolicy:path=agent.safetensors" last_n:n=5

    Each slot is kept visible when the agent's P(visible) >= ``threshold`` (0.5: its most likely
    bit; training samples the bits instead).  The network reads each slot alone, so any number of
    slots runs, with a warning when it is not the number trained on; ``item_words`` and ``prices``
    are not among its inputs."""

    name = "ppo_replay"

    def __init__(self, path: str, threshold: float = 0.5):
        from safetensors import safe_open

        from dtoc_rl.data.models import FAMILIES
        from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
        from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES

        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"no agent file {path!r} (python -m scripts.ppo_replay --save FILE)")
        with safe_open(path, "pt") as f:
            meta = f.metadata() or {}
            weights = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != SAVED_FORMAT:
            raise ValueError(f"{path}: not an agent saved by python -m scripts.ppo_replay --save")
        self.agent = make_agent(
            len(TOOL_CATEGORIES), len(ITEM_FEATURES), len(GLOBAL_FEATURES), len(FAMILIES),
            Args(hidden=int(meta["hidden"])),
        )  # fmt: skip
        self.agent.load_state_dict(weights)
        self.agent.eval()
        self.path, self.threshold = path, float(threshold)
        self.trained_slots = int(meta.get("max_items", 0)) or None
        self._said = False

    def act(self, obs, info=None):
        import warnings

        import numpy as np
        import torch

        from dtoc_rl.envs.wrappers import bits_to_action

        slots = len(obs["item_mask"])
        if self.trained_slots and slots != self.trained_slots and not self._said:
            self._said = True  # it runs (each slot is read alone), but sees other windows than in training
            warnings.warn(
                f"{self.path}: trained on {self.trained_slots} slots, deciding on {slots} "
                f"(give dtoc-rl evaluate --max-items {self.trained_slots} to match)",
                stacklevel=2,
            )

        x = {
            "item_features": obs["items"],
            **{k: obs[k] for k in ("item_tool", "item_mask", "globals", "family")},
        }
        with torch.no_grad():
            t = {k: torch.as_tensor(np.asarray(v), dtype=torch.float32)[None] for k, v in x.items()}
            p = torch.sigmoid(self.agent(t)[0])[0].numpy()
        return bits_to_action(p >= self.threshold, obs)

    def config(self) -> dict[str, Any]:
        return {"path": self.path, "threshold": self.threshold}


def main(argv: list[str] | None = None) -> int:
    from dtoc_rl.data.dataset import DatasetError

    args = parse_args(argv)
    try:
        summary = train(args)
    except (DatasetError, ValueError, FileNotFoundError) as e:  # a bad dataset: one line, no traceback
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
