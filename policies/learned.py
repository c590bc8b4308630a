"""Learned, model-specific policies: a per-item scorer over the DTOC store.

:class:`ItemScorer` embeds every stored output (its features, tool category)
and the global state (tokens, step, model family), runs a small transformer
encoder over the set of outputs, and returns one logit per output: should it
be visible at the next call.  It handles any number of outputs.

:class:`LearnedPolicy` is the thin user-facing object (d3rlpy style)::

    policy = LearnedPolicyConfig(mode="oracle").create()
    policy.fit("data/sample")            # trains; see learned_trainer.py
    policy.save("ckpt/")                 # model.safetensors + config.json
    policy = LearnedPolicy.load("ckpt/") # never unpickles

It is a :class:`~dtoc_rl.policies.base.Policy`, so it runs in ReplayEnv,
LiveEnv and the live Orchestrator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dtoc_rl.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.models import FAMILIES
from dtoc_rl.policies.base import Policy
from dtoc_rl.policies.baselines import to_action
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.tools import TOOL_CATEGORIES

__all__ = ["CheckpointError", "ItemScorer", "LearnedPolicy"]

CHECKPOINT_VERSION = 1
_VIS = ITEM_FEATURES.index("visible")


class CheckpointError(Exception):
    """A checkpoint that cannot be used here, with the reason."""


def _squash(x: torch.Tensor) -> torch.Tensor:
    # Counts and token sizes span orders of magnitude; log1p keeps them in range.
    return torch.sign(x) * torch.log1p(x.abs())


class ItemScorer(nn.Module):
    def __init__(self, cfg: LearnedPolicyConfig):
        super().__init__()
        d = cfg.d_model
        self.item_in = nn.Sequential(nn.Linear(len(ITEM_FEATURES), d), nn.GELU(), nn.Linear(d, d))
        self.tool = nn.Embedding(len(TOOL_CATEGORIES), d)
        self.glob_in = nn.Sequential(nn.Linear(len(GLOBAL_FEATURES), d), nn.GELU(), nn.Linear(d, d))
        self.family = nn.Embedding(len(FAMILIES), d) if cfg.family_conditioning else None
        self.encoder = (
            nn.TransformerEncoder(
                nn.TransformerEncoderLayer(
                    d,
                    cfg.n_heads,
                    dim_feedforward=2 * d,
                    dropout=cfg.dropout,
                    batch_first=True,
                    norm_first=True,
                ),
                cfg.n_layers,
                enable_nested_tensor=False,
            )
            if cfg.n_layers
            else None
        )
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))

    def forward(
        self,
        items: torch.Tensor,  # (B, N, F)
        tool: torch.Tensor,  # (B, N)
        mask: torch.Tensor,  # (B, N) bool
        glob: torch.Tensor,  # (B, G)
        family: torch.Tensor,  # (B,)
    ) -> torch.Tensor:  # (B, N) logits of "visible at the next call"
        g = self.glob_in(_squash(glob))
        if self.family is not None:
            g = g + self.family(family)
        h = self.item_in(_squash(items)) + self.tool(tool) + g[:, None, :]
        if self.encoder is not None:
            if bool(mask.all()):
                # No padding: the unmasked attention path is about twice as fast on CPU.
                h = self.encoder(h)
            else:
                # A row with no items would make attention NaN: give it one dummy key.
                safe = mask.clone()
                safe[:, 0] |= ~mask.any(dim=1)
                h = self.encoder(h, src_key_padding_mask=~safe)
        return self.head(h).squeeze(-1)


def obs_to_tensors(obs: dict[str, np.ndarray], device: str = "cpu") -> dict[str, torch.Tensor]:
    """A (possibly batched) observation as model inputs; trims padding columns."""
    batched = obs["items"].ndim == 3
    o = obs if batched else {k: np.asarray(v)[None] for k, v in obs.items()}
    mask = np.asarray(o["item_mask"]).astype(bool)
    width = max(1, int(mask.sum(axis=1).max()))  # slots fill from the left
    return {
        "items": torch.as_tensor(np.asarray(o["items"])[:, :width], dtype=torch.float32, device=device),
        "tool": torch.as_tensor(np.asarray(o["item_tool"])[:, :width], dtype=torch.long, device=device),
        "mask": torch.as_tensor(mask[:, :width], device=device),
        "glob": torch.as_tensor(np.asarray(o["globals"]), dtype=torch.float32, device=device),
        "family": torch.as_tensor(np.asarray(o["family"]).reshape(-1), dtype=torch.long, device=device),
    }


class LearnedPolicy(Policy):
    """A trained ItemScorer used as a policy (threshold on P(visible))."""

    name = "learned"

    def __init__(self, config: LearnedPolicyConfig | None = None):
        self.cfg = config or LearnedPolicyConfig()
        # Small per-decision forwards: more threads only add synchronisation (and spin badly when
        # the machine is busy), so the policy sets torch's thread count from its config.
        torch.set_num_threads(max(1, self.cfg.threads))
        torch.manual_seed(self.cfg.seed)
        self.net = ItemScorer(self.cfg)
        self.net.eval()
        self.meta: dict[str, Any] = {}

    # -- acting ------------------------------------------------------------------
    @torch.inference_mode()
    def probs(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """P(visible at the next call) per slot, shape like ``obs["item_mask"]``."""
        t = obs_to_tensors(obs)
        p = torch.sigmoid(self.net(**t)).numpy()
        n = obs["item_mask"].shape[-1]
        out = np.zeros((p.shape[0], n), np.float32)
        out[:, : p.shape[1]] = p
        return out if obs["items"].ndim == 3 else out[0]

    def act(self, obs, info=None):
        return to_action(obs, self.probs(obs) >= self.cfg.threshold)

    def act_batch(self, obs, infos=None):
        p = self.probs(obs)
        acts = [
            to_action({k: v[i] for k, v in obs.items()}, p[i] >= self.cfg.threshold) for i in range(len(p))
        ]
        return {k: np.stack([a[k] for a in acts]) for k in ("enable", "disable")}

    def config(self):
        c = {"threshold": self.cfg.threshold}
        if self.meta.get("model_family"):
            c["family"] = self.meta["model_family"]
        return c

    # -- training ----------------------------------------------------------------
    def fit(self, dataset: Any = None, **kw: Any) -> dict[str, Any]:
        """Train on a dataset folder (or trajectories/episodes); see learned_trainer.fit."""
        from dtoc_rl.policies.learned_trainer import fit

        return fit(self, dataset, **kw)

    # -- checkpoints -------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """``path/model.safetensors`` + ``path/config.json`` (written atomically)."""
        from safetensors.torch import save_file

        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in self.net.state_dict().items()}, str(tmp / "model.safetensors")
        )
        meta = {
            "checkpoint_version": CHECKPOINT_VERSION,
            "kind": "dtoc_rl.learned",
            "config": self.cfg.to_dict(),
            "item_features": list(ITEM_FEATURES),
            "global_features": list(GLOBAL_FEATURES),
            "families": list(FAMILIES),
            "tool_categories": list(TOOL_CATEGORIES),
            "meta": self.meta,
        }
        (tmp / "config.json").write_text(json.dumps(meta, indent=2, default=str))
        if path.exists():
            import shutil

            shutil.rmtree(path)
        tmp.rename(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LearnedPolicy:
        """Load a checkpoint; a mismatch with this version's features is a clear error."""
        from safetensors.torch import load_file

        path = Path(path)
        cfg_file, weights = path / "config.json", path / "model.safetensors"
        if not cfg_file.is_file() or not weights.is_file():
            raise CheckpointError(f"{path} is not a checkpoint: expected config.json and model.safetensors")
        try:
            meta = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{cfg_file}: invalid JSON ({e.msg})") from None
        if meta.get("kind") != "dtoc_rl.learned":
            raise CheckpointError(f"{cfg_file}: not a dtoc_rl learned-policy checkpoint")
        for key, ours in (
            ("item_features", ITEM_FEATURES),
            ("global_features", GLOBAL_FEATURES),
            ("families", FAMILIES),
            ("tool_categories", TOOL_CATEGORIES),
        ):
            theirs = tuple(meta.get(key, ()))
            if theirs != tuple(ours):
                missing = [x for x in ours if x not in theirs]
                extra = [x for x in theirs if x not in ours]
                raise CheckpointError(
                    f"{path}: checkpoint was trained with different {key.replace('_', ' ')} "
                    f"(missing here: {extra or 'none'}; new here: {missing or 'none'}; "
                    f"or a different order). Retrain it with this version."
                )
        known = set(LearnedPolicyConfig.__dataclass_fields__)
        cfg = LearnedPolicyConfig(**{k: v for k, v in meta["config"].items() if k in known})
        policy = cls(cfg)
        try:
            policy.net.load_state_dict(load_file(str(weights)))
        except RuntimeError as e:
            raise CheckpointError(f"{weights}: weights do not fit the config: {e}") from None
        policy.net.eval()
        policy.meta = meta.get("meta", {})
        return policy
