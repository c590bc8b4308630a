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
LiveEnv and the live Orchestrator.  Deciding (eval mode, no grad) runs
ItemScorer through ``_InferencePlan``, the same computation without the
nn.Module overhead, on the valid slots only (``obs_to_tensors`` trims padding):
one decision is a latency target (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dtoc_rl.data.models import FAMILIES
from dtoc_rl.data.paths import not_replaceable
from dtoc_rl.engine.decide_request import PLACEHOLDER_TOKENS
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES, family_prices, price_vector
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.labels.words import WORDS_PER_OUTPUT
from dtoc_rl.policies.base import Policy, batch_infos
from dtoc_rl.policies.baselines import HideBig, best_batch, episode_prices, per_call, to_action, unread
from dtoc_rl.policies.cpu import flushed_denormals, torch_threads
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.sim.pricing import Prices, cache_regime, price_table, prices_for

__all__ = [
    "ECON_GLOBAL_FEATURES",
    "ECON_ITEM_FEATURES",
    "RECENT_FEATURES",
    "CheckpointError",
    "ItemScorer",
    "LearnedPolicy",
    "economics",
    "recent_overlap",
    "table_threshold",
    "timed_hides",
]

CHECKPOINT_VERSION = 2
#: What a checkpoint's config.json names itself, so that loading tells ours from another's.
CHECKPOINT_KIND = "dtoc_rl.learned"
_VIS = ITEM_FEATURES.index("visible")
_TOK = ITEM_FEATURES.index("est_tokens_k")
_AGE = ITEM_FEATURES.index("age")
_G_ACTIVE = GLOBAL_FEATURES.index("active_tokens_k")
_G_STEP = GLOBAL_FEATURES.index("step")
_G_MISSES = GLOBAL_FEATURES.index("misses")

#: What a change to each output costs and what keeping it saves, computed inside the policy from the
#: observation and the model's prices (appended to ITEM_FEATURES), so that one network can price a
#: model it never saw:  the tokens after it in the prompt (what hiding or restoring it re-writes),
#: that suffix's and the output's share of the prompt, the cache reads of keeping it visible for the
#: calls expected to remain, and the re-write a change costs, both relative to one full-price read of
#: the prompt.
ECON_ITEM_FEATURES: tuple[str, ...] = (
    "suffix_k",
    "suffix_share",
    "prompt_share",
    "keep_cost_rel",
    "change_cost_rel",
)
#: The model's prices relative to its input price (and the input price's log, $ per million tokens),
#: and the calls expected to remain (the calls so far, capped: a run that has lasted n calls is likely
#: to last about as many more).
ECON_GLOBAL_FEATURES: tuple[str, ...] = (
    "cache_read_rel",
    "cache_write_rel",
    "output_rel",
    "log_input_price",
    "horizon",
)
HORIZON_CAP = 50.0
#: What the network reads of each output's relation to the newest ones (``LearnedPolicyConfig.recent_words``
#: = r): the words it shares with the newest output and, the most, with any one of the newest r, each
#: over WORDS_PER_OUTPUT.  Only words outside the network's vocabulary count (those of a few tasks: a
#: file, function or test name; the vocabulary keeps the words common across tasks, which say what
#: kind of call it was, not what it was about), and only outputs newer than it: an output about what
#: the agent is working on now is likely to be needed again soon.
RECENT_FEATURES: tuple[str, ...] = ("shared_newest", "shared_recent")
#: What the auxiliary head (``LearnedPolicyConfig.aux_need``) predicts for each output: the call being
#: decided reads it (hiding it is a miss), and a later call needs it.
AUX_TARGETS: tuple[str, ...] = ("read_now", "needed_later")
# The output size at which cfg.size_weight leaves the threshold as it is.
SIZE_REF_TOKENS = 2000.0
# Entries of the word lookup table (a power of two; 64 times the default vocabulary, so few collide).
_WORD_SLOTS = 2**16


def misses_over_budget(glob: np.ndarray, budget: float) -> int:
    """The run's misses so far beyond ``budget`` per 100 of the calls it has made, rounded up (0 when
    within): how many times ``miss_governor`` scales the threshold down."""
    glob = np.asarray(glob, np.float64).reshape(-1)
    over = float(glob[_G_MISSES]) - budget * float(glob[_G_STEP]) / 100.0
    return math.ceil(over - 1e-9) if over > 0 else 0


def family_price_vector(fid: int) -> np.ndarray:
    """Prices of a family id from the observation (an id outside FAMILIES: the default family's, by
    design and without a warning)."""
    return family_prices(FAMILIES[fid] if 0 <= fid < len(FAMILIES) else None, warn=False)


def suffix_tokens(items: np.ndarray, mask: np.ndarray, glob: np.ndarray) -> np.ndarray:
    """The tokens after each output in the prompt (what hiding or restoring it re-writes), shape of
    ``mask``: the visible outputs after it plus the rest of the prompt (messages, system prompt) spread
    evenly over the calls so far, of which ``age`` came after it."""
    tok = items[..., _TOK] * 1000.0
    vis_tok = np.where(mask & (items[..., _VIS] > 0.5), tok, 0.0)
    active = np.maximum(glob[..., _G_ACTIVE] * 1000.0, 1.0)
    step = np.maximum(glob[..., _G_STEP], 1.0)
    after = np.cumsum(vis_tok[..., ::-1], axis=-1)[..., ::-1] - vis_tok
    other = np.maximum(active - vis_tok.sum(-1), 0.0) / step
    return after + np.maximum(items[..., _AGE], 0.0) * other[..., None]


def timed_hides(obs: dict[str, np.ndarray], want: np.ndarray, price: np.ndarray | None = None) -> np.ndarray:
    """``want`` (the visibility asked for one observation) with its hides timed by price: each hide
    breaks the cached prefix at the output, so the visible outputs ``want`` would hide are hidden
    together, from the slot where the cache reads they save over the calls expected to remain (the
    calls so far, capped at HORIZON_CAP) beat the re-write (:func:`best_batch`), and kept visible for
    now when no batch pays.  Restores stay, and the hides after the first one share its re-write.
    ``price``: :func:`price_vector` of the model (None: the observation's own, else its family's).  The
    learned policy's batching (``batching="pays"``), and ``oracle:schedule=rule``, which times a perfect
    knowledge of need with it.  List prices, as if the cache read every token its rules allow, also
    where a best-effort cache reads fewer (``CACHE_HIT_RATES``): priced at the hit rate the hides come
    earlier, which a perfect knowledge of need would turn into savings, and the network's into misses
    (docs/results.md)."""
    mask = np.asarray(obs["item_mask"]).astype(bool)
    items = np.asarray(obs["items"], np.float32)
    vis = items[:, _VIS] > 0.5
    cand = mask & vis & ~want
    if not cand.any():
        return want
    price = _prices_of(obs, price, None)
    inp = max(float(price[0]), 1e-9)
    read, rewrite = float(price[2]) / inp, max(float(price[3]) - float(price[2]), 0.0) / inp
    glob = np.asarray(obs["globals"], np.float32).reshape(-1)
    tokens = items[:, _TOK] * 1000.0
    shown = np.where(vis, tokens, float(PLACEHOLDER_TOKENS))
    prompt_from = suffix_tokens(items, mask, glob) + shown  # this output and every token after it
    restores = np.flatnonzero(mask & ~vis & want)
    anyway = float(prompt_from[restores[0]]) if len(restores) else 0.0
    remaining = min(max(float(glob[_G_STEP]), 1.0), HORIZON_CAP)
    j = best_batch(
        cand, np.maximum(tokens - PLACEHOLDER_TOKENS, 0.0), prompt_from, remaining, read, rewrite,
        rewritten_anyway=anyway,
    )  # fmt: skip
    keep = cand if j < 0 else cand & (np.arange(len(mask)) < j)
    return want | keep


def economics(
    items: np.ndarray, mask: np.ndarray, glob: np.ndarray, prices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ECON_ITEM_FEATURES (``(..., n, 5)``) and ECON_GLOBAL_FEATURES (``(..., 5)``) of observations.

    ``items`` ``(..., n, F)`` in slot order (oldest first), ``mask`` ``(..., n)``, ``glob``
    ``(..., G)``, ``prices`` ``(..., 4)`` as :func:`price_vector`.  The tokens after an output are the
    visible outputs after it plus the rest of the prompt (messages, system prompt) spread evenly over
    the calls so far, of which ``age`` came after it.
    """
    items = np.asarray(items, np.float32)
    mask = np.asarray(mask).astype(bool)
    glob = np.asarray(glob, np.float32)
    prices = np.asarray(prices, np.float32)
    tok = items[..., _TOK] * 1000.0
    suffix = suffix_tokens(items, mask, glob)
    active = np.maximum(glob[..., _G_ACTIVE] * 1000.0, 1.0)
    step = np.maximum(glob[..., _G_STEP], 1.0)
    inp = np.maximum(prices[..., 0], 1e-9)
    out_rel, read_rel, write_rel = (prices[..., i] / inp for i in (1, 2, 3))
    horizon = np.minimum(step, HORIZON_CAP)
    a = active[..., None]
    per_item = np.stack(
        [
            suffix / 1000.0,
            suffix / a,
            tok / a,
            tok * (horizon * read_rel)[..., None] / a,
            suffix * np.maximum(write_rel - read_rel, 0.0)[..., None] / a,
        ],
        axis=-1,
    )
    per_item = np.where(mask[..., None], per_item, 0.0).astype(np.float32)
    per_call = np.stack([read_rel, write_rel, out_rel, np.log(inp), horizon], axis=-1).astype(np.float32)
    return per_item, per_call


def _table_entry(
    table: dict[str, Any], family: str | None, prices: Prices | None, regime: str | None
) -> tuple[str, str | None] | None:
    """Which entry of a threshold table decides for a model: ("family", f), ("regime", g) or
    ("default", None); None when the table has none for it."""
    if family in (table.get("family") or {}):
        return "family", family
    if regime is None and prices is not None:
        regime = cache_regime(prices)
    if regime is not None and (table.get("regime") or {}).get(regime) is not None:
        return "regime", regime
    return ("default", None) if table.get("default") is not None else None


def table_threshold(
    table: dict[str, Any] | None, family: str | None, prices: Prices | None, regime: str | None = None
) -> float | None:
    """The threshold a checkpoint's validation table gives a model: its family's entry, else its price
    regime's (``regime``, or that of ``prices``), else the pooled one; None without a table.  0 means
    abstain (nothing is ever hidden, unless the entry has a fallback rule: :func:`table_fallback`)."""
    entry = _table_entry(table, family, prices, regime) if table else None
    if entry is None:
        return None
    section, key = entry
    return float(table[section] if key is None else table[section][key])


def table_fallback(
    table: dict[str, Any] | None, family: str | None, prices: Prices | None, regime: str | None = None
) -> dict[str, int] | None:
    """The ``hide_big`` settings (``{"tokens", "age"}``) a table gives a model whose entry abstains,
    chosen on the same tune runs (``learned_trainer.fallback_table``); None when the entry does not
    abstain or has none."""
    entry = _table_entry(table, family, prices, regime) if table else None
    if entry is None:
        return None
    section, key = entry
    if float(table[section] if key is None else table[section][key]) != 0.0:
        return None
    rules = (table.get("fallback") or {}).get(section)
    return rules if key is None else (rules or {}).get(key)


class CheckpointError(Exception):
    """A checkpoint that cannot be used here, with the reason."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _squash(x: torch.Tensor) -> torch.Tensor:
    # Counts and token sizes span orders of magnitude; log1p keeps them in range.
    return torch.sign(x) * torch.log1p(x.abs())


# torch's fused encoder layer: what TransformerEncoderLayer itself runs in eval mode without grad.
# Private, so looked up once; without it inference takes the module path.
_FUSED_LAYER = getattr(torch, "_transformer_encoder_layer_fwd", None)


#: Families the network's family table had when its initial weights were first drawn (FAMILIES then).
_FAMILY_ROWS_DRAWN = 25


class ItemScorer(nn.Module):
    def __init__(self, cfg: LearnedPolicyConfig, n_families: int = len(FAMILIES)):
        super().__init__()
        # families this network has an embedding for: a checkpoint keeps the count it was trained with
        # (FAMILIES only grows), and a family added since reads as "other" (id 0)
        self.n_families = n_families
        d = cfg.d_model
        n_items, n_glob = (
            len(ITEM_FEATURES) + len(ECON_ITEM_FEATURES),
            len(GLOBAL_FEATURES) + len(ECON_GLOBAL_FEATURES),
        )
        self.item_in = nn.Sequential(nn.Linear(n_items, d), nn.GELU(), nn.Linear(d, d))
        self.tool = nn.Embedding(len(TOOL_CATEGORIES), d)
        self.glob_in = nn.Sequential(nn.Linear(n_glob, d), nn.GELU(), nn.Linear(d, d))
        self.family = None
        if cfg.family_conditioning:
            # Zero, so that a family without training data (no gradient ever reaches its row) adds
            # nothing: a random initial row would move every decision for a model the network never
            # saw, by more than the call's whole context does (docs/results.md).  The random draws of
            # the table the first trainings had are still taken, so that the layers built after it
            # draw the same initial weights however many families FAMILIES has grown to.
            torch.empty(_FAMILY_ROWS_DRAWN, d).normal_()
            self.family = nn.Embedding(n_families, d, _weight=torch.zeros(n_families, d))
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
        # content words (built last, so the other layers draw the same initial weights with or without
        # them): the vocabulary (word hashes, most common first, set at fit time by set_vocabulary) is a
        # buffer saved and loaded with the weights (0: unused); _word_slots, rebuilt from it, looks words up
        self.words = nn.Embedding(cfg.word_vocab + 1, d, padding_idx=0) if cfg.word_vocab else None
        if cfg.word_vocab:
            self.register_buffer("word_hashes", torch.zeros(cfg.word_vocab, dtype=torch.int64))
            self.register_buffer("_word_slots", torch.zeros(_WORD_SLOTS, dtype=torch.int64), persistent=False)
            self._word_slots_np = self._word_slots.numpy()
        # the auxiliary need head (training only; built after the rest for the same initial weights)
        self.aux = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, len(AUX_TARGETS))) if cfg.aux_need else None
        # the relation to the newest outputs (built after the rest, for the same initial weights)
        self.recent_words = cfg.recent_words
        self.recent = nn.Linear(len(RECENT_FEATURES), d) if cfg.recent_words else None
        self._plan: _InferencePlan | bool | None = None  # None: not built yet; False: not applicable

    def set_vocabulary(self, hashes: Any) -> int:
        """Embed these word hashes, most important first (the first ``cfg.word_vocab`` distinct valid
        ones; the rest are dropped); returns how many."""
        if self.words is None:
            return 0
        seen: dict[int, None] = {}
        for h in np.asarray(list(hashes), np.int64).reshape(-1).tolist():
            if 0 < h < 2**31 and len(seen) < len(self.word_hashes):
                seen.setdefault(h)
        table = torch.zeros(len(self.word_hashes), dtype=torch.int64)
        table[: len(seen)] = torch.tensor(list(seen), dtype=torch.int64)
        self.word_hashes.copy_(table)
        self._build_word_slots()
        return len(seen)

    def _build_word_slots(self) -> None:
        # An open table indexed by a hash's low bits, each entry ``hash << 16 | id``: one gather and a
        # compare find a word's id (a binary search over the vocabulary cost a tenth of a decision).  A
        # word whose slot a more common one took is left out (about 1% of a 1,024-word vocabulary).
        slots = torch.zeros(_WORD_SLOTS, dtype=torch.int64)
        for i, h in enumerate(self.word_hashes.tolist()):
            if h > 0 and slots[h & (_WORD_SLOTS - 1)] == 0:
                slots[h & (_WORD_SLOTS - 1)] = (h << 16) | (i + 1)
        self._word_slots_np = slots.numpy()
        self._word_slots = slots.to(self.word_hashes.device)
        self._plan = None

    def word_ids(self, words: torch.Tensor) -> torch.Tensor:
        """Hashed words ``(..., K)`` as embedding ids: 1 + their place in the vocabulary, 0 for padding
        and for words outside it.  On the CPU in numpy, whose few operations cost a fifth of torch's
        here (a decision is a latency target); elsewhere :meth:`_word_ids_torch`, the same lookup."""
        if words.device.type != "cpu":
            return self._word_ids_torch(words)
        w = words.numpy()
        entry = self._word_slots_np.take(w & (_WORD_SLOTS - 1))
        ids = entry & 0xFFFF
        ids[(entry >> 16) != w] = 0
        return torch.from_numpy(ids)

    def _word_ids_torch(self, words: torch.Tensor) -> torch.Tensor:
        entry = self._word_slots[words & (_WORD_SLOTS - 1)]
        return torch.where((entry >> 16) == words, entry & 0xFFFF, 0)

    def forward(
        self,
        items: torch.Tensor,  # (B, N, F + E): ITEM_FEATURES then ECON_ITEM_FEATURES
        tool: torch.Tensor,  # (B, N)
        mask: torch.Tensor,  # (B, N) bool
        glob: torch.Tensor,  # (B, G + E'): GLOBAL_FEATURES then ECON_GLOBAL_FEATURES
        family: torch.Tensor,  # (B,)
        words: torch.Tensor | None = None,  # (B, N, K) hashed words (dtoc_rl.labels.words); None: none
        no_family: torch.Tensor | None = None,  # (B,) bool: decided without the family vector (training)
    ) -> torch.Tensor:  # (B, N) logits of "visible at the next call"
        if no_family is not None:
            return self._module_forward(items, tool, mask, glob, family, words, no_family)
        if (
            not self.training
            and not torch.is_grad_enabled()
            and torch.backends.mha.get_fastpath_enabled()
            and not torch.is_autocast_enabled()
        ):
            plan = self._plan
            if plan is None:
                plan = self._plan = _InferencePlan.build(self) or False
            if plan:
                return plan(items, tool, mask, glob, family, words)
        return self._module_forward(items, tool, mask, glob, family, words)

    def _module_forward(self, items, tool, mask, glob, family, words=None, no_family=None) -> torch.Tensor:
        return self.head(self._encode(items, tool, mask, glob, family, words, no_family)).squeeze(-1)

    def forward_aux(self, items, tool, mask, glob, family, words=None, no_family=None):
        """Training's forward with the auxiliary head: ``(logits (B, N), aux logits (B, N, A))``, A
        one per entry of :data:`AUX_TARGETS`."""
        if self.aux is None:
            raise ValueError("this network has no auxiliary head (LearnedPolicyConfig.aux_need = 0)")
        h = self._encode(items, tool, mask, glob, family, words, no_family)
        return self.head(h).squeeze(-1), self.aux(h)

    def _encode(self, items, tool, mask, glob, family, words=None, no_family=None) -> torch.Tensor:
        g = self.glob_in(_squash(glob))
        if self.family is not None:
            f = self.family(torch.where(family < self.n_families, family, 0))
            # family dropout: these rows as a model without a family vector (a family no training run
            # reached keeps a zero row), so that the network learns to decide one
            g = g + (f if no_family is None else f * ~no_family[:, None])
        h = self.item_in(_squash(items)) + self.tool(tool) + g[:, None, :]
        ids = None
        if self.words is not None and words is not None:
            ids = self.word_ids(words)
            h = h + _mean_of_words(ids, self.words.weight)
        if self.recent is not None and words is not None:
            h = h + self.recent(recent_overlap(words, ids, mask, self.recent_words))
        if self.encoder is not None:
            if bool(mask.all()):
                # No padding: the unmasked attention path is about twice as fast on CPU.
                h = self.encoder(h)
            else:
                h = self.encoder(h, src_key_padding_mask=~_safe_mask(mask))
        return h

    # The plan holds references to the parameters: anything that may swap them drops it,
    # and copies (deepcopy, pickling to worker processes) rebuild their own.
    def _apply(self, fn, *args, **kwargs):
        self._plan = None
        return super()._apply(fn, *args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        self._plan = None
        out = super().load_state_dict(*args, **kwargs)
        if self.words is not None:
            self._build_word_slots()
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_plan"] = None
        return state


def _safe_mask(mask: torch.Tensor) -> torch.Tensor:
    # A row with no items would make attention NaN: give it one dummy key.
    safe = mask.clone()
    safe[:, 0] |= ~mask.any(dim=1)
    return safe


def _mean_of_words(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # The mean embedding of each output's known words (ids (..., K), 0: none), zero without any; an
    # embedding and a sum, half the time of embedding_bag's mean on the CPU.
    count = (ids > 0).sum(-1, keepdim=True).clamp_(min=1)
    return F.embedding(ids, weight, padding_idx=0).sum(-2) / count


def recent_overlap(words: torch.Tensor, ids: torch.Tensor | None, mask: torch.Tensor, r: int) -> torch.Tensor:
    """The :data:`RECENT_FEATURES` ``(B, N, 2)`` of hashed words ``(B, N, K)`` (0: padding), with valid
    slots ``mask`` ``(B, N)`` filled from the left (oldest first), comparing each output with the newest
    ``r``.  ``ids``: the words' vocabulary ids (:meth:`ItemScorer.word_ids`, 0 outside it), so that only
    words outside the vocabulary count; None: every word counts (a network without a vocabulary)."""
    b, n, k = words.shape
    if n == 0 or r == 0:
        return torch.zeros(b, n, len(RECENT_FEATURES), device=words.device)
    own = words > 0 if ids is None else (words > 0) & (ids == 0)
    # the newest r slots (negative: fewer outputs than r) and their words as they are: a word matches
    # only one of its own kind (the vocabulary is a set of hashes), and padding (0) no word of ``mine``
    newest = mask.sum(1, keepdim=True) - 1 - torch.arange(r, device=words.device)  # (B, r)
    theirs = words.gather(1, newest.clamp(min=0)[:, :, None].expand(b, r, k))
    mine = torch.where(own, words, -1)
    shared = (mine[:, :, None, :, None] == theirs[:, None, :, None, :]).any(-1).sum(-1)  # (B, N, r)
    # only newer outputs count (a missing one's slot is negative: never newer)
    shared = shared * (newest[:, None, :] > torch.arange(n, device=words.device)[None, :, None])
    return torch.stack([shared[..., 0], shared.max(-1).values], -1).to(torch.float32) / k


def _mlp(x: torch.Tensor, p: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, p[0], p[1])), p[2], p[3])


class _InferencePlan:
    """ItemScorer's eval-mode forward without nn.Module dispatch.

    The same functions on the same parameters, and the same fused encoder-layer kernel
    that ``nn.TransformerEncoderLayer`` calls in eval mode without grad, so the outputs
    are bit-identical; what it skips is the Python around them (module calls, the
    encoder's per-call eligibility checks: a quarter or more of a decision on CPU).
    """

    def __init__(self, net: ItemScorer, layers: list[tuple[Any, ...]]):
        seq = lambda s: (s[0].weight, s[0].bias, s[2].weight, s[2].bias)  # noqa: E731
        self.item = seq(net.item_in)
        self.glob = seq(net.glob_in)
        self.tool = net.tool.weight
        self.family = net.family.weight if net.family is not None else None
        self.words = net.words.weight if net.words is not None else None
        self.word_ids = net.word_ids
        self.recent = (net.recent.weight, net.recent.bias) if net.recent is not None else None
        self.recent_words = net.recent_words
        norm, lin1, lin2 = net.head[0], net.head[1], net.head[3]
        self.norm = (norm.normalized_shape, norm.weight, norm.bias, norm.eps)
        self.out = (lin1.weight, lin1.bias, lin2.weight, lin2.bias)
        self.layers = layers

    @classmethod
    def build(cls, net: ItemScorer) -> _InferencePlan | None:
        """None when the module path would not take the fused kernel either (e.g. an odd
        number of heads, hooks), or when the plan disagrees with it on a probe input: both
        paths must compute the same function whatever torch's private kernel does."""
        if any(m._forward_hooks or m._forward_pre_hooks for m in net.modules()):
            return None
        layers = []
        for layer in net.encoder.layers if net.encoder is not None else ():
            sa = layer.self_attn
            if (
                _FUSED_LAYER is None
                or not sa.batch_first
                or sa.in_proj_bias is None
                or not sa._qkv_same_embed_dim
                or not layer.activation_relu_or_gelu
                or layer.norm1.eps != layer.norm2.eps
                or sa.num_heads % 2 == 1
            ):
                return None
            layers.append(
                (
                    sa.embed_dim,
                    sa.num_heads,
                    sa.in_proj_weight,
                    sa.in_proj_bias,
                    sa.out_proj.weight,
                    sa.out_proj.bias,
                    layer.activation_relu_or_gelu == 2,
                    layer.norm_first,
                    layer.norm1.eps,
                    layer.norm1.weight,
                    layer.norm1.bias,
                    layer.norm2.weight,
                    layer.norm2.bias,
                    layer.linear1.weight,
                    layer.linear1.bias,
                    layer.linear2.weight,
                    layer.linear2.bias,
                )
            )
        plan = cls(net, layers)
        return plan if plan._agrees_with(net) else None

    def _agrees_with(self, net: ItemScorer) -> bool:
        # Deterministic probe (drawing it would move torch's global RNG): two rows, one padded.
        n_items, n_glob = net.item_in[0].in_features, net.glob_in[0].in_features
        items = torch.linspace(-30, 30, 2 * 3 * n_items).reshape(2, 3, n_items)
        tool = torch.arange(6).reshape(2, 3) % net.tool.num_embeddings
        mask = torch.tensor([[True, True, True], [True, True, False]])
        glob = torch.linspace(-5, 500, 2 * n_glob).reshape(2, n_glob)
        family = torch.arange(2) % (net.family.num_embeddings if net.family is not None else 1)
        words = None
        if net.words is not None or net.recent is not None:  # known words, unknown ones and padding
            hashes = net.word_hashes if net.words is not None else torch.arange(1, 9)
            known = hashes[torch.arange(2 * 3 * 4) % len(hashes)]
            words = torch.where(torch.arange(2 * 3 * 4) % 3 == 0, 0, known).reshape(2, 3, 4)
            words[0, 1, 1] = words[0, 2, 2] = 12345  # an unknown word two outputs share
        try:
            with torch.no_grad():
                ours = self(items, tool, mask, glob, family, words)
                theirs = net._module_forward(items, tool, mask, glob, family, words)
        except (RuntimeError, TypeError):
            return False
        return bool(torch.allclose(ours[mask], theirs[mask], rtol=0, atol=1e-6))

    def __call__(self, items, tool, mask, glob, family, words=None) -> torch.Tensor:
        g = _mlp(_squash(glob), self.glob)
        if self.family is not None:
            g = g + F.embedding(torch.where(family < self.family.shape[0], family, 0), self.family)
        h = _mlp(_squash(items), self.item) + F.embedding(tool, self.tool) + g[:, None, :]
        ids = None
        if self.words is not None and words is not None:
            ids = self.word_ids(words)
            h = h + _mean_of_words(ids, self.words)
        if self.recent is not None and words is not None:
            h = h + F.linear(recent_overlap(words, ids, mask, self.recent_words), *self.recent)
        if self.layers:
            pad, kind = None, None
            if not bool(mask.all()):
                # As TransformerEncoder passes a boolean key-padding mask to the kernel:
                # additive float, kind 1.
                pad = torch.zeros(mask.shape, dtype=h.dtype, device=h.device)
                pad.masked_fill_(~_safe_mask(mask), float("-inf"))
                kind = 1
            for args in self.layers:
                h = _FUSED_LAYER(h, *args, pad, kind)
        return _mlp(F.layer_norm(h, *self.norm), self.out).squeeze(-1)


def _prices_of(obs: dict[str, np.ndarray], prices: np.ndarray | None, batch: int | None) -> np.ndarray:
    # The caller's prices (from the episode), else the observation's own, else its family's.
    if prices is None:
        prices = obs.get("prices")
    if prices is None:
        fam = np.asarray(obs["family"]).reshape(-1)
        rows = [family_price_vector(int(f)) for f in fam]
        return rows[0] if batch is None else np.stack(rows)
    prices = np.asarray(prices, np.float32)
    if batch is not None and prices.ndim == 1:
        prices = np.broadcast_to(prices, (batch, prices.shape[0]))
    return prices


def obs_to_tensors(
    obs: dict[str, np.ndarray], device: str = "cpu", prices: np.ndarray | None = None
) -> dict[str, torch.Tensor]:
    """A (possibly batched) observation as model inputs, with its economics (:func:`economics`)
    appended; trims padding columns.  ``prices`` (:func:`price_vector`, one row or one per
    observation) defaults to ``obs["prices"]``, else the family's list prices."""
    if obs["items"].ndim == 2:
        one = _one_obs_to_tensors(obs, _prices_of(obs, prices, None))
        return one if device == "cpu" else {k: v.to(device) for k, v in one.items()}
    mask = np.asarray(obs["item_mask"]).astype(bool)
    width = max(1, int(mask.sum(axis=1).max()))  # slots fill from the left
    items, glob = np.asarray(obs["items"])[:, :width], np.asarray(obs["globals"], np.float32)
    econ_items, econ_glob = economics(items, mask[:, :width], glob, _prices_of(obs, prices, len(mask)))
    return {
        "items": torch.as_tensor(np.concatenate([items, econ_items], -1), dtype=torch.float32, device=device),
        "tool": torch.as_tensor(np.asarray(obs["item_tool"])[:, :width], dtype=torch.long, device=device),
        "mask": torch.as_tensor(mask[:, :width], device=device),
        "glob": torch.as_tensor(np.concatenate([glob, econ_glob], -1), dtype=torch.float32, device=device),
        "family": torch.as_tensor(np.asarray(obs["family"]).reshape(-1), dtype=torch.long, device=device),
        **_words_tensor(obs, width, device),
    }


def _words_tensor(obs: dict[str, np.ndarray], width: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    # An observation from before content words (or a caller that builds its own) has none.
    w = obs.get("item_words")
    if w is None:
        return {}
    w = np.asarray(w)[..., :width, :]
    if not w.flags.writeable:  # a view of ReplayEnv's read-only words (a full window): torch warns on one
        w = w.copy()
    return {"words": torch.as_tensor(w, dtype=torch.long, device=device)}


def _one_obs_to_tensors(obs: dict[str, np.ndarray], prices: np.ndarray) -> dict[str, torch.Tensor]:
    # One decision (the live path): the leading valid slots only.
    mask = np.asarray(obs["item_mask"])
    width = max(1, int(np.count_nonzero(mask)))  # slots fill from the left
    items = np.asarray(obs["items"][:width], np.float32)
    m = mask[:width].astype(bool)
    glob = np.asarray(obs["globals"], np.float32).reshape(-1)
    econ_items, econ_glob = economics(items, m, glob, prices)
    tool = np.ascontiguousarray(obs["item_tool"][:width], np.int64)
    return {
        "items": torch.from_numpy(np.concatenate([items, econ_items], -1))[None],
        "tool": torch.from_numpy(tool)[None],
        "mask": torch.from_numpy(m)[None],
        "glob": torch.from_numpy(np.concatenate([glob, econ_glob]))[None],
        "family": torch.from_numpy(np.asarray(obs["family"], np.int64).reshape(1)),
        **{k: v[None] for k, v in _words_tensor(obs, width).items()},
    }


class LearnedPolicy(Policy):
    """A trained ItemScorer used as a policy (threshold on P(visible))."""

    name = "learned"

    def __init__(self, config: LearnedPolicyConfig | None = None, n_families: int = len(FAMILIES)):
        self.cfg = config or LearnedPolicyConfig()
        # The initial weights follow cfg.seed, drawn from a forked generator: building or loading a
        # policy leaves the caller's torch RNG and thread count as they were (fit() and
        # `dtoc-rl serve --threads` set threads where the user asked for them).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.cfg.seed)
            self.net = ItemScorer(self.cfg, n_families)
        self.net.eval()
        #: torch intra-op threads for one decision (``probs`` of one observation), restored after: a
        #: setting of the process that decides, not of the model, so it is not saved.  One is fastest
        #: for this small network, and on a machine the agent's own builds and tests keep busy more
        #: threads wait on each other for milliseconds (docs/benchmarks.md); None: the caller's count.
        self.threads: int | None = 1
        self.meta: dict[str, Any] = {}
        self._prices: np.ndarray | None = None  # the current episode's (reset), else the family's
        self._thr: float | None = None
        self._rule: Policy | None = None  # the fallback rule of the current episode's abstaining entry
        self._thr_cache: dict[Any, tuple[float, Policy | None]] = {}
        self._price_table: tuple[Any, dict[str, Prices]] | None = None  # (meta["prices"], parsed)
        # words per output its network was trained on (a loaded checkpoint's own; training sets it)
        self.words_per_output = WORDS_PER_OUTPUT

    # -- acting ------------------------------------------------------------------
    def reset(self, info: dict[str, Any] | None = None, threshold: float | None = None) -> None:
        """Take the episode's prices and model (what ReplayEnv hands policies at reset) for the
        economics features and the threshold; without them both come from the observation.
        ``threshold`` decides this episode at that threshold, with no fallback rule, whatever the
        table says (training's DAgger roll-outs, before any table is chosen); a threshold fixed in the
        config still comes first."""
        p = episode_prices(info)
        self._prices = price_vector(p) if p is not None else None
        info = info or {}
        ep = info.get("episode")
        family = getattr(ep, "model_family", None) or info.get("model_family")
        if threshold is not None:
            self._thr, self._rule = float(threshold), None
        elif p is None and per_call(info):  # models priced differently: each decision at its call's
            self._thr, self._rule = None, None
        else:
            self._thr, self._rule = self._choice(family, p) if family or p is not None else (None, None)

    def threshold_for(self, family: str | None, prices: Prices | None = None) -> float:
        """The threshold used for a model: ``cfg.threshold`` when set, else the checkpoint's
        validation table (:func:`table_threshold`), else 0.5."""
        if self.cfg.threshold is not None:
            return float(self.cfg.threshold)
        t = table_threshold(self.meta.get("thresholds"), family, _priced(family, prices))
        return 0.5 if t is None else t

    def fallback_for(self, family: str | None, prices: Prices | None = None) -> Policy | None:
        """The rule the policy runs for a model whose table entry abstains (:func:`table_fallback`),
        or None: then an abstaining policy keeps everything visible.  None with a fixed threshold."""
        if self.cfg.threshold is not None:
            return None
        rule = table_fallback(self.meta.get("thresholds"), family, _priced(family, prices))
        return None if rule is None else HideBig(int(rule["tokens"]), int(rule["age"]))

    def _choice(self, family: str | None, prices: Prices | None) -> tuple[float, Policy | None]:
        return self.threshold_for(family, prices), self.fallback_for(family, prices)

    def _obs_choice(self, obs: dict[str, np.ndarray]) -> tuple[float, Policy | None]:
        """The threshold and fallback rule for an observation's model (cached by family and prices)."""
        if self.cfg.threshold is not None:
            return float(self.cfg.threshold), None
        # the family id and the observation's prices (a model the family table lacks is priced by
        # the caller), else the family's list prices, pick the table entry
        fid = int(np.asarray(obs["family"]).reshape(-1)[0])
        own = obs.get("prices")
        key = (fid, None if own is None else tuple(np.asarray(own, np.float64).reshape(-1)[:4]))
        t = self._thr_cache.get(key)
        if t is None:
            family = FAMILIES[fid] if 0 < fid < len(FAMILIES) else None
            prices = family_price_vector(fid) if own is None else key[1]
            p = Prices(*(float(x) for x in prices))
            t = self._thr_cache[key] = self._choice(family, p)
        return t

    @torch.inference_mode()
    def probs(self, obs: dict[str, np.ndarray], prices: np.ndarray | None = None) -> np.ndarray:
        """P(visible at the next call) per slot, shape like ``obs["item_mask"]``."""
        t = obs_to_tensors(obs, prices=prices)
        # one observation (the live path) on the policy's own threads; a batch (training, evaluation)
        # on whatever its caller chose
        threads = self.threads if obs["items"].ndim == 2 else None
        with flushed_denormals(), torch_threads(threads):
            p = torch.sigmoid(self.net(**t)).numpy()
        n = obs["item_mask"].shape[-1]
        out = np.zeros((p.shape[0], n), np.float32)
        out[:, : p.shape[1]] = p
        return out if obs["items"].ndim == 3 else out[0]

    @property
    def price_table(self) -> dict[str, Prices] | None:
        """The prices it was trained with (``dtoc-rl train --prices``), by model name, or None: a live
        agent or the service prices a model they name as training did (unless given other prices)."""
        table = self.meta.get("prices")
        if not table:
            return None
        if self._price_table is None or self._price_table[0] is not table:  # checked once, not per request
            self._price_table = (table, price_table(table, "in the checkpoint"))
        return self._price_table[1]

    @property
    def abstains_everywhere(self) -> bool:
        """True when it hides nothing on any model: no threshold given, and its stored table abstains
        for every family and price regime with no rule taking over (a table chosen on too few runs)."""
        if self.cfg.threshold is not None:
            return self.cfg.threshold <= 0.0
        return table_abstains(self.meta.get("thresholds"))

    def set_threshold_table(self, table: dict[str, Any] | None) -> None:
        """Install a validation threshold table (saved with the checkpoint's meta)."""
        self.meta["thresholds"] = table
        self._thr_cache.clear()
        self._thr, self._rule = None, None

    def act(self, obs, info=None):
        # a call to another model than the run's (a router, a /model switch): priced as the observation
        # says, the threshold chosen for those prices
        priced = None if per_call(info) else self._prices
        if self.cfg.threshold is not None:
            thr, rule = float(self.cfg.threshold), None
        elif self._thr is not None and priced is self._prices:
            thr, rule = self._thr, self._rule
        else:
            thr, rule = self._obs_choice(obs)
        if thr <= 0.0 and rule is not None:  # abstain with a fallback rule: the rule decides
            return rule.act(obs)
        copied = info.get("item_copied") if info else None
        probs = self.probs(obs, priced) if thr > 0.0 else None  # abstaining needs no network
        return to_action(obs, self.want_visible(obs, probs, thr, priced, copied, cold_of(info)))

    def act_batch(self, obs, infos=None):
        # rows may come from different episodes: prices and thresholds from each row's family
        p = self.probs(obs)
        infos = batch_infos(infos, len(p))
        acts = []
        for i in range(len(p)):
            row = {k: v[i] for k, v in obs.items()}
            thr, rule = self._obs_choice(row)
            if thr <= 0.0 and rule is not None:
                acts.append(rule.act(row))
                continue
            info = infos[i]
            copied = (info or {}).get("item_copied")
            acts.append(to_action(row, self.want_visible(row, p[i], thr, copied=copied, cold=cold_of(info))))
        return {k: np.stack([a[k] for a in acts]) for k in ("enable", "disable")}

    def want_visible(
        self,
        obs: dict[str, np.ndarray],
        probs: np.ndarray | None,
        thr: float,
        prices: np.ndarray | None = None,
        copied: np.ndarray | None = None,
        cold: bool = False,
    ) -> np.ndarray:
        """The visibility the policy asks for, from the network's P(visible) of one observation.

        An output is wanted visible when P(visible) >= ``thr`` (0: abstain, everything visible), and
        always while no call has read it (age 0: hiding the answer to the call just made is a miss,
        ``Episode.call_reads``; the network learns that from the oracle's targets, and the rule makes
        sure of it).  With ``cfg.batching == "pays"`` the hides are then timed by price
        (:func:`best_batch`, CacheAwareClear's rule): each hide breaks the cached prefix at the output,
        so the outputs the network would hide are hidden together, from the slot where the cache reads
        they save over the calls expected to remain beat the re-write, and kept visible for now when no
        batch pays.  Restores are kept (a restore the network asks for costs a re-write too, which the
        hides after it share), except of an output ``copied`` marks (ReplayEnv's
        ``info["item_copied"]``: a re-run after its miss put a copy of it in the context), abstaining
        too.  Live, the agent's re-run is an output of its own, which the policy
        sees, and a restore the agent asks for must stay possible, so nothing there sets ``copied``.
        ``cold`` (``info["cache_cold"]``: the next call's cache has expired anyway) makes the hides at
        once, with ``cfg.cold_hides``: a change then re-writes nothing that would not be written; and at
        ``thr * cfg.cold_scale``, since a miss is then the only price of a hide."""
        mask = np.asarray(obs["item_mask"]).astype(bool)
        items = np.asarray(obs["items"], np.float32)
        vis = items[:, _VIS] > 0.5
        # a hidden output whose miss was recovered by running its call again has a copy in the context
        # after it: restoring the original as well would pay for its tokens twice
        kept_hidden = ~vis & np.asarray(copied, bool) if copied is not None else np.zeros_like(mask)
        if thr <= 0.0:  # abstain: everything else stays, or comes back, visible
            return mask & ~kept_hidden
        if self.cfg.miss_governor < 1.0:
            thr = thr * self.cfg.miss_governor ** misses_over_budget(obs["globals"], self.cfg.miss_budget)
        if cold and self.cfg.cold_scale != 1.0:  # a hide before a cold call costs no re-write
            thr = thr * self.cfg.cold_scale
        if self.cfg.size_weight:
            thr = (
                thr * np.clip(items[:, _TOK] * (1000.0 / SIZE_REF_TOKENS), 0.1, 10.0) ** self.cfg.size_weight
            )
        # an output no call has read yet (age 0: the answer to the call just made) stays: hidden now, the
        # agent would get a placeholder for its own tool call (a miss)
        want = ((np.asarray(probs) >= thr) | unread(items)) & mask & ~kept_hidden
        if self.cfg.batching == "off" or (cold and self.cfg.cold_hides):
            return want
        return timed_hides(obs, want, prices)  # a row of act_batch carries its own prices

    def config(self):
        c: dict[str, Any] = {"threshold": self.cfg.threshold if self.cfg.threshold is not None else "table"}
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

        path = check_checkpoint_target(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in self.net.state_dict().items()}, str(tmp / "model.safetensors")
        )
        meta = {
            "checkpoint_version": CHECKPOINT_VERSION,
            "kind": CHECKPOINT_KIND,
            "config": self.cfg.to_dict(),
            "item_features": list(ITEM_FEATURES),
            "global_features": list(GLOBAL_FEATURES),
            "econ_item_features": list(ECON_ITEM_FEATURES),
            "econ_global_features": list(ECON_GLOBAL_FEATURES),
            "families": list(FAMILIES[: self.net.n_families]),
            "tool_categories": list(TOOL_CATEGORIES),
            "words_per_output": self.words_per_output,
            "meta": self.meta,
        }
        (tmp / "config.json").write_text(json.dumps(meta, indent=2, default=str))
        if path.exists():  # a checkpoint of its own (check_checkpoint_target): replaced whole
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
            inside = sorted(
                d.name
                for d in (path.iterdir() if path.is_dir() else ())
                if (d / "config.json").is_file() and (d / "model.safetensors").is_file()
            )
            hint = f"; it holds one: {path / inside[0]}" if inside else ""  # the demo keeps it in policy/
            raise CheckpointError(
                f"{path} is not a checkpoint: expected config.json and model.safetensors{hint}"
            )
        meta = read_checkpoint_config(cfg_file, kind=CHECKPOINT_KIND)
        if "config" not in meta:
            raise CheckpointError(f"{cfg_file}: no 'config' object (a damaged checkpoint)")
        version = meta.get("checkpoint_version", 1)
        if not isinstance(version, int) or version > CHECKPOINT_VERSION:
            raise CheckpointError(
                f"{cfg_file}: checkpoint_version {version!r}, and this dtoc-rl reads up to "
                f"{CHECKPOINT_VERSION}: written by a newer dtoc-rl (upgrade it) or damaged"
            )
        unknown = sorted(set(meta["config"]) - set(LearnedPolicyConfig.__dataclass_fields__))
        if unknown:  # a misspelt or newer setting is not applied: say so rather than decide otherwise unsaid
            import warnings

            warnings.warn(
                f"{cfg_file}: settings this dtoc-rl does not know are ignored: {', '.join(unknown[:5])}",
                stacklevel=2,
            )
        for key, ours in (
            ("item_features", ITEM_FEATURES),
            ("global_features", GLOBAL_FEATURES),
            ("econ_item_features", ECON_ITEM_FEATURES),
            ("econ_global_features", ECON_GLOBAL_FEATURES),
            ("families", FAMILIES),
            ("tool_categories", TOOL_CATEGORIES),
        ):
            raw = meta.get(key, ())
            if not isinstance(raw, list | tuple) or not all(isinstance(x, str) for x in raw):
                raise CheckpointError(f"{cfg_file}: '{key}' is not a list of names (a damaged checkpoint)")
            theirs = tuple(raw)
            if key == "families" and theirs and tuple(ours[: len(theirs)]) == theirs:
                continue  # families only grow: the ones added since read as "other"
            if theirs != tuple(ours):
                missing = [x for x in ours if x not in theirs]
                extra = [x for x in theirs if x not in ours]
                raise CheckpointError(
                    f"{path}: checkpoint was trained with different {key.replace('_', ' ')} "
                    f"(missing here: {extra or 'none'}; new here: {missing or 'none'}; "
                    f"or a different order). Retrain it with this version."
                )
        try:
            cfg = LearnedPolicyConfig(**saved_settings(meta["config"]))
            _sizes_fit(cfg, cfg_file, weights)
            policy = cls(cfg, n_families=len(meta.get("families") or FAMILIES))
        except (TypeError, ValueError, RuntimeError) as e:  # settings the network cannot be built with
            raise CheckpointError(f"{cfg_file}: unusable config ({_one_line(e)})") from None
        try:
            state = load_file(str(weights))
        except Exception as e:  # safetensors' own error type for a damaged or foreign file
            raise CheckpointError(f"{weights}: not readable safetensors weights ({_one_line(e)})") from None
        broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if broken:  # a damaged file (or a training that diverged): every decision would be noise
            raise CheckpointError(f"{weights}: non-finite weights (NaN or inf) in {', '.join(broken[:3])}")
        try:
            policy.net.load_state_dict(state)
        except RuntimeError as e:
            raise CheckpointError(f"{weights}: weights do not fit the config: {_one_line(e)}") from None
        policy.net.eval()
        policy.meta = meta.get("meta", {})
        if not isinstance(policy.meta.get("trained_on", ""), str | None):
            raise CheckpointError(f"{cfg_file}: 'meta.trained_on' is not a dataset path")
        try:
            policy.price_table  # noqa: B018  (validated here, not at the first decision)
        except ValueError as e:
            raise CheckpointError(f"{cfg_file}: 'meta.prices': {e}") from None
        table = policy.meta.get("thresholds")
        if table is not None and not _valid_table(table):
            raise CheckpointError(
                f"{cfg_file}: 'meta.thresholds' is not a threshold table (a damaged checkpoint)"
            )
        # A checkpoint trained when outputs kept another number of words sees the first
        # WORDS_PER_OUTPUT of each (first-seen order): it works, but not as it was measured.  Before the
        # field existed outputs kept sixteen.
        known = meta.get("words_per_output")
        policy.words_per_output = int(known) if isinstance(known, int) else 16
        if (cfg.word_vocab > 0 or cfg.recent_words > 0) and policy.words_per_output != WORDS_PER_OUTPUT:
            import warnings

            how = "trained with" if known is not None else "trained before words per output were recorded:"
            warnings.warn(
                f"{path}: {how} {policy.words_per_output} words per output, this version keeps "
                f"{WORDS_PER_OUTPUT}: it decides on other words than it was measured on (retrain it)",
                stacklevel=2,
            )
        return policy


#: The most observation slots a checkpoint may ask for: each decision allocates arrays of this many rows.
MAX_SLOTS = 65_536


def _sizes_fit(cfg: LearnedPolicyConfig, cfg_file: Path, weights: Path) -> None:
    """The network's sizes in the config against the shapes the weights file holds (its header only),
    before anything is built: a damaged config asking for a billion layers would otherwise fill the
    memory and be killed without a word, instead of being refused."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), "pt") as f:
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:  # safetensors' own error type for a damaged or foreign file
        raise CheckpointError(f"{weights}: not readable safetensors weights ({_one_line(e)})") from None
    layers = {k.split(".")[2] for k in shapes if k.startswith("encoder.layers.")}
    held = {
        "n_layers": len(layers),
        "d_model": (shapes.get("item_in.2.weight") or [None])[0],
        "word_vocab": (shapes["words.weight"][0] - 1) if "words.weight" in shapes else 0,
    }
    for name, have in held.items():
        if getattr(cfg, name) != have:
            raise CheckpointError(
                f"{cfg_file}: {name} {getattr(cfg, name)!r} does not fit the weights, which hold {have!r} "
                f"(a damaged checkpoint)"
            )
    if not 1 <= cfg.max_items <= MAX_SLOTS:
        raise CheckpointError(f"{cfg_file}: max_items {cfg.max_items!r} is not in [1, {MAX_SLOTS}]")


def saved_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's stored config as the settings it decides with: the fields this version knows,
    and for a field saved before it existed the value that checkpoint was trained and tuned with (not
    today's default)."""
    known = set(LearnedPolicyConfig.__dataclass_fields__)
    saved = {k: v for k, v in config.items() if k in known}
    # a checkpoint from before batched hides had its thresholds chosen without them
    saved.setdefault("batching", "off")
    saved.setdefault("word_vocab", 0)  # nor content words
    saved.setdefault("recent_words", 0)  # nor their relation to the newest outputs
    saved.setdefault("cold_hides", False)  # nor hides made at once before a cold call
    saved.setdefault("cold_scale", 1.0)  # nor a bolder threshold before one
    saved.setdefault("dagger_threshold", 0.5)  # its DAgger rolled out at the untuned 0.5
    saved.setdefault("dagger_threshold_max", 0.5)
    if isinstance(saved.get("threads"), int) and saved["threads"] < 1:
        saved["threads"] = 1  # older trainings stored 0 and ran on one; no weight depends on it
    return saved


def read_checkpoint_config(cfg_file: Path, kind: str | None = None) -> dict[str, Any]:
    """A checkpoint's ``config.json``: a JSON object (whose ``kind`` is ``kind``, when given) whose
    ``config`` and ``meta``, where present, are objects and whose task lists (``meta.val_tasks``,
    ``tune_tasks``, ``train_tasks``) are lists of names.  Anything else is a one-line CheckpointError
    naming the file.  What it does not check is the caller's: loading needs the weights' settings,
    ``evaluate --holdout-from`` only the task lists (and reads configs written without ``kind``)."""
    try:
        meta = json.loads(cfg_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{cfg_file}: no such file (not a checkpoint folder)") from None
    except json.JSONDecodeError as e:
        from dtoc_rl.ingest.base import json_error  # where JSON breaks, said as ingest says it

        raise CheckpointError(f"{cfg_file}: invalid JSON ({json_error(e)})") from None
    # ValueError: an integer too long to convert; RecursionError: nesting too deep to decode
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{cfg_file}: cannot be read ({_one_line(e)})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{cfg_file}: not a dtoc_rl learned-policy checkpoint (not a JSON object)")
    if kind is not None and meta.get("kind") != kind:  # someone else's config: not "damaged"
        raise CheckpointError(f"{cfg_file}: not a dtoc_rl learned-policy checkpoint")
    if not isinstance(meta.get("config", {}), dict) or not isinstance(meta.get("meta", {}), dict):
        raise CheckpointError(f"{cfg_file}: 'config' and 'meta' must be objects (a damaged checkpoint)")
    info = meta.get("meta", {})
    for key in ("val_tasks", "tune_tasks", "train_tasks"):
        tasks = info.get(key)
        if tasks is not None and not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
            raise CheckpointError(f"{cfg_file}: 'meta.{key}' is not a list of task names")
    return meta


#: What a checkpoint folder holds; saving replaces a folder holding nothing else, never another one.
CHECKPOINT_FILES = frozenset({"model.safetensors", "config.json"})


def check_checkpoint_target(path: str | Path) -> Path:
    """``path`` as a checkpoint may be written there: new, or a checkpoint folder (which saving replaces
    whole).  Anything else (a file, a folder with other contents, such as ``.`` or a dataset) is a
    ValueError, so that no save deletes what it did not write."""
    path = Path(path).absolute()
    if not path.name or path.name in (".", ".."):
        path = path.resolve()
    if not path.exists():
        return path
    why = not_replaceable(path, lambda name: name in CHECKPOINT_FILES)
    if why is not None:
        raise ValueError(f"{path} {why}: not a checkpoint folder to replace; give a new folder")
    return path


def cold_of(info: dict[str, Any] | None) -> bool:
    """Whether the caller says the next call's prompt cache has expired anyway (``info["cache_cold"]``)."""
    return bool(info.get("cache_cold")) if info else False


def _priced(family: str | None, prices: Prices | None) -> Prices | None:
    # a model named only by its family: the family's list prices pick its regime entry (quietly: the
    # caller named no model version to warn about)
    if prices is None and family:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return prices_for(family)
    return prices


def _sections_ok(table: Any, ok: Any) -> bool:
    """A table of ``family`` and ``regime`` dicts and a ``default`` (or None) whose values pass ``ok``."""
    if not isinstance(table, dict):
        return False
    for key in ("family", "regime"):
        sub = table.get(key, {})
        if not isinstance(sub, dict) or not all(ok(v) for v in sub.values()):
            return False
    return table.get("default") is None or ok(table["default"])


def _valid_table(table: Any) -> bool:
    def threshold(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0

    def rule(x: Any) -> bool:  # hide_big's settings: integers HideBig itself accepts
        if not (isinstance(x, dict) and all(type(x.get(k)) is int for k in ("tokens", "age"))):
            return False
        try:
            HideBig(x["tokens"], x["age"])
        except ValueError:
            return False
        return True

    fallback = table.get("fallback") if isinstance(table, dict) else None
    return _sections_ok(table, threshold) and (fallback is None or _sections_ok(fallback, rule))


def table_abstains(table: dict[str, Any] | None) -> bool:
    """Whether a stored threshold table hides nothing anywhere: every entry abstains (0) and no
    fallback rule takes over.  A checkpoint without a table decides at its default threshold."""
    if not table or table.get("default") is None:  # no pooled entry: unlisted models at the default
        return False
    fb = table.get("fallback") or {}
    entries = [*(table.get("family") or {}).values(), *(table.get("regime") or {}).values()]
    chosen = [table.get("default"), *entries]
    return not any(chosen) and not (fb.get("default") or fb.get("family") or fb.get("regime"))
