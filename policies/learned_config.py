"""Configuration of learned (torch) policies: ``LearnedPolicyConfig(...).create()``.

Every field carries help text; ``dtoc-rl train`` turns them into CLI flags.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["LearnedPolicyConfig"]


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


def _is(value: Any, kind: str) -> bool:
    # a field's value against its annotation (int, float, bool, str); numpy's numbers count as numbers
    if kind in ("int", "float"):
        want = numbers.Integral if kind == "int" else numbers.Real
        return isinstance(value, want) and not isinstance(value, bool)
    return isinstance(value, {"bool": (bool, np.bool_), "str": str}.get(kind, object))


@dataclass
class LearnedPolicyConfig:
    # -- network ---------------------------------------------------------------
    d_model: int = _f(64, "width of the per-item embeddings and the encoder")
    n_layers: int = _f(
        2,
        "transformer encoder layers over the stored outputs (0: per-item MLP only); 1 decides about an "
        "eighth faster and saved as much on held-out tasks, but less on most families and harnesses "
        "left out of training (docs/results.md)",
    )
    n_heads: int = _f(
        2,
        "attention heads (2 did as well as 4 on held-out tasks over three seeds, docs/results.md, and "
        "decides faster, docs/benchmarks.md; an odd count loses the fused inference kernel)",
    )
    dropout: float = _f(
        0.0,
        "dropout in the encoder (training only); 0.1 saved as much within the miss budget on held-out "
        "tasks over three seeds, less on long runs, and trained longer (docs/results.md)",
    )
    family_conditioning: bool = _f(
        True,
        "condition on the model family (one network serves several models; what a model's agents did in "
        "the harnesses it was trained on carried to another harness with the same model); a family the "
        "training data lacks adds nothing (a model the name table does not know reads as the `other` row, "
        "which runs of unknown models train). Without it, as good on held-out tasks but worse on two of "
        "the four harnesses left out of training that were tried (docs/results.md)",
    )
    family_dropout: float = _f(
        0.0,
        "share of supervised training observations shown without their family (its vector left out), so "
        "that the network learns to decide a model it has no trained family vector for (a family the "
        "training data lacks; a model the name table does not know, when no training run is of one) "
        "from its prices and its run. 0.2 saved as much on held-out tasks, less at two seeds on the "
        "harnesses left out whose model another harness teaches (the family vector carries across), "
        "and its gains elsewhere were within one training's draw (docs/results.md), so it is off. "
        "Needs the family input",
    )
    aux_need: float = _f(
        0.0,
        "weight of an auxiliary loss in supervised training: a second head on the encoder predicts, for "
        "each output, whether the call being decided reads it and whether any later call needs it, "
        "which the oracle's visibility target only implies; the decision does not use the head. At 0.5 "
        "the best share of the oracle's savings within the miss budget on held-out tasks was the "
        "default's (three seeds) and the stored thresholds overshot the budget more (docs/results.md), "
        "so it is off (0)",
    )
    word_vocab: int = _f(
        1024,
        "content words the network embeds (the hashed words of each output's call and first lines, "
        "dtoc_rl.labels.words): the most frequent of those seen in at least --word-min-tasks training "
        "tasks; 0: no content input (size, age, tool and prices only)",
    )
    word_min_tasks: int = _f(
        20,
        "training tasks a word must appear in to be embedded: a word from a few tasks (a file name) would "
        "be learned by heart and mislead on other tasks",
    )
    recent_words: int = _f(
        0,
        "R: the network also reads how many of each output's words outside the vocabulary (this task's "
        "file, function and test names) it shares with the newest output and, the most, with any of the "
        "newest R, i.e. whether it is about what the agent is working on now (an observation trained "
        "without its words, --word-dropout, is without these too). At 4 the best share of the oracle's "
        "savings within the miss budget on held-out tasks was the default's (three seeds), and a training "
        "step and a decision take longer (docs/results.md), so it is off (0)",
    )
    word_dropout: float = _f(
        0.0,
        "share of training observations shown without their words, so that the network also learns to "
        "decide from sizes, ages and needs alone, as it must on a harness whose words it never saw",
    )
    threshold: float | None = _f(
        None,
        "keep an output visible when P(visible) >= threshold (lower: fewer misses); unset: the threshold "
        "chosen on validation for the model's family or price regime (0 = abstain), stored in the checkpoint",
    )
    size_weight: float = _f(
        0.0,
        "alpha: an output of T tokens is kept visible when P(visible) >= threshold * (T / 2000) ** alpha "
        "(T / 2000 held to 0.1..10): the miss budget counts misses whatever their size, so a miss risked "
        "on a large output buys more savings than one risked on a small one; 0: one threshold for all. "
        "The stored thresholds are chosen with it: change it on a trained checkpoint with --retune",
    )
    miss_budget: float = _f(
        1.0,
        "misses per 100 steps a validation threshold may cost; the one saving the most dollars within it "
        "is kept per family / price regime, and where none saves money the policy abstains",
    )
    miss_governor: float = _f(
        1.0,
        "each miss of the run so far beyond miss_budget per 100 of its calls multiplies the threshold by "
        "this factor (0 < F <= 1): a run whose needs the network misjudges, as on a model or harness it "
        "never saw, grows more cautious as it goes and bolder again as its calls catch up; 1: off. A "
        "lower threshold also brings back hidden outputs the network is now less sure of. It reads the "
        "observation's misses and step (a /decide client must send them), and a fallback rule that "
        "decides for an abstaining table entry ignores it. The stored thresholds are chosen with it: "
        "change it on a trained checkpoint with --retune",
    )
    batching: str = _f(
        "pays",
        "pays: hide the outputs the network would hide together, only when the cache reads saved over the "
        "calls expected to remain beat the cache re-write (as the cache_clear rule); off: act on every "
        "threshold crossing at once",
    )
    cold_hides: bool = _f(
        True,
        "with --batching pays: before a call whose prompt cache has expired anyway (info['cache_cold'] "
        "from ReplayEnv, LiveEnv, the Orchestrator or /decide's idle_seconds: the time since the model's "
        "last response outlasted the provider's cache), make the hides the network asks for at once "
        "rather than wait for a batch that pays: the whole prompt is written again then, so a hide costs "
        "no re-write. On ../shared it lifted the best share of the oracle's savings within the budget "
        "from 48 to 56 per cent (three seeds; only logs that time their calls gain, docs/results.md). A "
        "checkpoint saved without the field loads with it off: its thresholds were chosen without it",
    )
    cold_scale: float = _f(
        1.0,
        "before a call whose prompt cache has expired anyway (as cold_hides), an output is hidden when "
        "P(visible) < threshold * cold_scale: a hide then re-writes nothing, so only the risk of a miss "
        "weighs against the reads it saves over the calls left, where a warm hide also pays the re-write "
        "the threshold was chosen against; 1: one threshold for both. Only logs that time their calls "
        "have cold calls. On the five default checkpoints' held-out runs, 3 took +2.1 points of the "
        "oracle's savings within the budget on long runs, +0.2 overall and -1.4 on short runs, none more "
        "than 1.4 standard errors of the seeds' spread (docs/results.md), so off by default. The stored "
        "thresholds are chosen with it: change it on a trained checkpoint with --retune, as measured; "
        "given to a training, DAgger's roll-outs decide with it too (not measured)",
    )
    min_family_val: int = _f(
        10,
        "validation trajectories a family needs for a threshold of its own (else its price regime's); a "
        "regime with fewer may be more cautious than the pooled threshold, never bolder",
    )
    fallback_rule: bool = _f(
        True,
        "where the threshold table abstains (no threshold of the network saves money within the budget "
        "on the tune runs), run the hide_big rule whose settings do, chosen on the same runs the same "
        "way (learned_trainer.FALLBACK_LADDER) on at least --min-family-val of them; without one, "
        "abstaining keeps everything visible",
    )
    min_source_val: int = _f(
        5,
        "validation trajectories a source harness needs for a say in each threshold: a family's, a "
        "regime's and the pooled threshold are each the most cautious of those chosen on every harness "
        "with that many of their runs, so that they carry to a harness not trained on (0: chosen on "
        "the pooled runs only)",
    )
    loss_weights: str = _f(
        "dollars",
        "per-output loss weights. dollars: what a wrong decision would cost (a miss re-reads the prompt, a "
        "wrongly visible output is read on the calls left, a change re-writes the suffix), relative to one "
        "read of the prompt; need: need_weight on outputs needed at the next call, 1 elsewhere",
    )
    source_balance: float = _f(
        0.0,
        "power p: each source harness's supervised loss weights are scaled by (mean mass / its mass) ** p, "
        "its mass being the sum of its training decisions' loss weights, so that the harnesses with the "
        "most (and longest) runs do not decide alone what an output's words and age mean; 0: as collected. "
        "At 0.5 (five seeds on ../shared) its stored thresholds kept the miss budget at all five, the "
        "default's at three, but its best threshold saved less (49.7 per cent of the oracle's savings "
        "against 52.0); at 0.25 it saved more (54.2) but with mini-swe-agent left out of training its "
        "stored thresholds lost money (-2.5 per cent), so it is off (docs/results.md)",
    )
    price_augment: float = _f(
        0.0,
        "share of the training runs of one model also played as if another provider's model had made "
        "them (a family drawn from learned_trainer.REPRICE_FAMILIES, its list prices and cache rules): "
        "planned, weighted and observed at those prices in the supervised and DAgger phases, so that the "
        "network sees each price regime on every harness, where the logs give each harness one or two "
        "models (a write premium on a few dozen runs); the thresholds are still chosen, and PPO "
        "rewarded, on the runs as billed. At 0.5 (five seeds on ../shared) short runs "
        "took 9.1 points more of the oracle's savings within the budget, overall and long runs about the "
        "same (+0.1, +0.4), and it hid less on Claude Code sessions from outside ../shared, so it is off "
        "(docs/results.md)",
    )
    # -- data ------------------------------------------------------------------
    model_family: str | None = _f(None, "train only on this model family (a per-family policy)")
    exclude_family: str | None = _f(
        None, "train without this model family (leave-one-family-out: evaluate on it afterwards)"
    )
    source: str | None = _f(None, "train only on this source harness")
    exclude_source: str | None = _f(
        None, "train without this source harness (leave-one-harness-out: evaluate on it afterwards)"
    )
    max_items: int = _f(128, "env slots (the most recent outputs the policy sees)")
    val_fraction: float = _f(
        0.2,
        "fraction of tasks held out (split by task id): half of them stop training and choose the "
        "thresholds, the other half (the checkpoint's val_tasks) is used for nothing but reporting",
    )
    # -- training --------------------------------------------------------------
    mode: str = _f(
        "oracle",
        "oracle: imitate the hindsight oracle's visibility; need: predict whether a later call needs each "
        "output (the hides are then timed by --batching pays); bc: clone logged masking; rl: PPO alone, "
        "from a fresh network",
    )
    epochs: int = _f(
        30,
        "max supervised epochs (early stopping on validation loss); each DAgger round then trains up to "
        "max(3, epochs / 3) more on the states it collected",
    )
    patience: int = _f(5, "epochs without validation improvement before stopping")
    batch_size: int = _f(64, "decisions per gradient step")
    lr: float = _f(2e-3, "supervised learning rate (AdamW)")
    weight_decay: float = _f(1e-4, "AdamW weight decay")
    need_weight: float = _f(
        4.0,
        "loss weight of outputs needed at the next call (hiding them is a miss). 5, 6 and 8 took 52.9, "
        "52.5 and 53.9 per cent of the oracle's savings within the budget on held-out tasks against 51.4 "
        "(five seeds each), but with a harness left out of training each took less of it there "
        "(SWE-agent 1.x), its stored thresholds bolder the heavier the weight, and at 5 both "
        "mini-swe-agent folds lost money; so 4 stays (docs/results.md)",
    )
    dagger_rounds: int = _f(
        1, "re-collect states with the learned policy, labelled by the targets of --mode (plan or needs)"
    )
    dagger_threshold: float = _f(
        0.5,
        "lowest threshold the DAgger roll-outs decide with, each run's drawn log-uniformly from this to "
        "--dagger-threshold-max (no table is chosen yet); 0.5 for both: the states of the untuned policy. "
        "0.02 to 0.2, the range the miss budget holds the trained policy to, took 53.4 per cent of the "
        "oracle's savings within the budget on held-out tasks against 52.1 (five seeds; long runs 53.5 "
        "against 50.7, higher at all five), but with mini-swe-agent left out of training its stored "
        "thresholds lost money (-1.2 per cent, CI below zero) or went over the budget (1.8 misses per 100 "
        "calls), so 0.5 stays (docs/results.md)",
    )
    dagger_threshold_max: float = _f(0.5, "highest threshold the DAgger roll-outs decide with")
    rl_updates: int = _f(
        0,
        "PPO updates in ReplayEnv after supervised training (policies/learned_rl.py); 0: none, except "
        "mode rl, which runs 50. Each update is rl_envs x rl_steps decisions",
    )
    rl_envs: int = _f(
        4,
        "ReplayEnvs in the gymnasium.vector.SyncVectorEnv: 4 runs at a time give each network call a "
        "batch of 4 and each rollout several runs, while staying in one process (on 2 cores the network, "
        "not the envs, is the cost: AsyncVectorEnv's processes only add pickling)",
    )
    rl_steps: int = _f(
        64,
        "decisions each env takes per rollout: 64 x 4 envs is long enough for GAE to see a hide pay back "
        "over the calls after it, and short enough for an update every few seconds on 2 cores",
    )
    rl_epochs: int = _f(4, "passes over each rollout (CleanRL's default; the KL stop ends them earlier)")
    rl_minibatches: int = _f(4, "minibatches per pass over a rollout (64 decisions each with the defaults)")
    rl_lr: float = _f(
        1e-4,
        "PPO learning rate (Adam, actor and critic): lower than a fresh agent's 3e-4 because RL usually "
        "starts from the imitation-trained network, which it should refine, not overwrite",
    )
    rl_entropy: float = _f(
        0.001,
        "entropy bonus per output bit: small, since each step draws one bit per stored output and a "
        "random toggle costs a cache re-write",
    )
    rl_clip: float = _f(0.2, "PPO clip of the probability ratio and of the value change (the usual 0.2)")
    rl_gamma: float = _f(
        0.99,
        "discount: 0.99 reaches about 100 calls ahead, which covers most runs and the calls over which a "
        "hide must pay back its re-write, with less variance than no discount on runs of hundreds of calls",
    )
    rl_gae_lambda: float = _f(0.95, "GAE lambda (the usual 0.95: variance against bias of the advantage)")
    rl_vf_coef: float = _f(0.5, "weight of the critic's value loss (the critic has its own parameters)")
    rl_max_grad_norm: float = _f(
        0.5, "gradient norm clip, actor and critic each (CleanRL's 0.5: one bad rollout cannot jump far)"
    )
    rl_target_kl: float = _f(
        0.05,
        "stop an update's epochs once the approximate KL to the rollout policy passes this (per "
        "decision, summed over its output bits; 0: never): keeps fine-tuning near the imitation it "
        "starts from",
    )
    rl_miss_weight: float = _f(
        0.25,
        "reward subtracted per miss on top of its re-read dollars, in units of the run's bill with "
        "everything visible: priced in dollars alone a miss is cheap, so PPO hides past any threshold "
        "that keeps 1 miss per 100 calls; 0.25 keeps it within that budget (docs/results.md)",
    )
    miss: str = _f("reread", "ReplayEnv miss model for oracle planning and RL: reread | fail | calibrated")
    overhead: str = _f("orchestrator", "who pays for management: orchestrator | agent")
    prices: str | None = _f(
        None,
        "your prices for models the price table lacks (or to override it): a JSON or YAML file, or inline "
        "JSON, {model: {input, output, cache_read, cache_write}} in USD per million tokens (cache_read "
        "and cache_write default to input: no caching, with a warning); a trajectory "
        "whose model name (or family) has an entry is planned, weighted, observed and given its threshold "
        "at them, its cache read at the entry's cache_hit_rate if it has one (calibrate --cost --prices-out) "
        "(otherwise an unknown model is trained at its family's or a default's prices). Recorded as given",
    )
    seed: int = _f(0, "random seed: initial weights, sampling, and the task split unless --split-seed")
    split_seed: int | None = _f(
        None,
        "seed of the task split alone (unset: --seed's): trainings at several --seed with one "
        "--split-seed differ only in initial weights and sampling, on the same held-out tasks",
    )
    threads: int = _f(1, "torch CPU threads (1 is fastest for this small model, and on a busy machine)")
    wandb: bool = _f(
        False, "log to Weights & Biases (online or offline as wandb decides: WANDB_MODE, `wandb login`)"
    )
    wandb_project: str = _f("dtoc-rl", "wandb project")

    @property
    def data_seed(self) -> int:
        """The seed the task split hashes: ``split_seed`` if set, else ``seed``."""
        return self.seed if self.split_seed is None else self.split_seed

    def __post_init__(self) -> None:
        for name, f in self.__dataclass_fields__.items():  # a config read from a file may hold anything
            kinds = str(f.type).replace(" ", "").split("|")
            v = getattr(self, name)
            if not ((v is None and "None" in kinds) or any(_is(v, k) for k in kinds if k != "None")):
                raise ValueError(f"{name} must be {f.type}, got {type(v).__name__} {v!r}"[:200])
        if self.mode not in ("oracle", "need", "bc", "rl"):
            raise ValueError(f"mode must be oracle, need, bc or rl, got {self.mode!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        for name, low in (("d_model", 1), ("n_heads", 1), ("n_layers", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not (0.0 <= self.family_dropout < 1.0):
            raise ValueError(f"family_dropout must be in [0, 1), got {self.family_dropout}")
        if self.family_dropout and not self.family_conditioning:
            raise ValueError("family_dropout needs family_conditioning: without it there is nothing to drop")
        if not (0.0 <= self.aux_need < float("inf")):
            raise ValueError(f"aux_need must be a finite weight >= 0, got {self.aux_need}")
        for name in ("aux_need", "source_balance", "price_augment"):
            if getattr(self, name) and self.mode == "rl":
                raise ValueError(f"{name} acts in supervised training, which mode rl does not run")
        if not 0 <= self.recent_words <= 16:
            raise ValueError(f"recent_words must be in [0, 16], got {self.recent_words}")
        if not (0.0 <= self.word_dropout < 1.0):
            raise ValueError(f"word_dropout must be in [0, 1), got {self.word_dropout}")
        if not (0.0 <= self.size_weight <= 2.0):
            raise ValueError(f"size_weight must be in [0, 2], got {self.size_weight}")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        if not (1.0 <= self.cold_scale <= 100.0):
            raise ValueError(f"cold_scale must be in [1, 100], got {self.cold_scale}")
        if not (0.0 < self.miss_governor <= 1.0):
            raise ValueError(f"miss_governor must be in (0, 1], got {self.miss_governor}")
        if not self.miss_budget >= 0.0:
            raise ValueError(f"miss_budget must be >= 0, got {self.miss_budget}")
        for name in ("max_items", "threads", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.min_family_val < 1:
            raise ValueError(f"min_family_val must be >= 1, got {self.min_family_val}")
        if self.min_source_val < 0:
            raise ValueError(f"min_source_val must be >= 0, got {self.min_source_val}")
        if not 0 <= self.word_vocab <= 4096 or self.word_min_tasks < 1:
            # the network's word lookup table has 65,536 entries: more words would collide too often
            raise ValueError(
                f"word_vocab must be in [0, 4096] and word_min_tasks >= 1, got {self.word_vocab}, "
                f"{self.word_min_tasks}"
            )
        if self.batching not in ("pays", "off"):
            raise ValueError(f"batching must be pays or off, got {self.batching!r}")
        if not 0.0 <= self.price_augment <= 1.0:
            raise ValueError(f"price_augment must be in [0, 1], got {self.price_augment}")
        if self.price_augment and self.model_family:
            raise ValueError(
                "price_augment trains on other families' prices, a --model-family policy on its own prices"
            )
        if not 0.0 <= self.source_balance <= 1.0:
            raise ValueError(f"source_balance must be in [0, 1], got {self.source_balance}")
        if self.loss_weights not in ("dollars", "need"):
            raise ValueError(f"loss_weights must be dollars or need, got {self.loss_weights!r}")
        for name in ("rl_updates", "rl_envs", "rl_steps", "rl_epochs", "rl_minibatches"):
            if getattr(self, name) < (0 if name == "rl_updates" else 1):
                raise ValueError(
                    f"{name} must be >= {0 if name == 'rl_updates' else 1}, got {getattr(self, name)}"
                )
        for name in ("rl_gamma", "rl_gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.dagger_threshold <= self.dagger_threshold_max <= 1.0:
            raise ValueError(
                "dagger_threshold and dagger_threshold_max must satisfy 0 < low <= high <= 1, got "
                f"{self.dagger_threshold} and {self.dagger_threshold_max} (one fixed threshold: set both)"
            )
        if not self.rl_clip > 0.0:
            raise ValueError(f"rl_clip must be > 0, got {self.rl_clip}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def create(self):
        """A fresh, untrained :class:`~dtoc_rl.policies.learned.LearnedPolicy`."""
        from dtoc_rl.policies.learned import LearnedPolicy

        return LearnedPolicy(self)
