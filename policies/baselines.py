"""Faithful baselines: the context-management rules agents use today.

Each reimplements a published rule with its defaults, and names its source.
All read only the observation (``dtoc_rl.engine.features``): slot ``j`` holds the
``j``-th oldest of the most recent N stored outputs; ``globals`` carries the
env's token accounting (active tokens, tokens if everything were visible,
outputs stored so far).  Rules recompute the visibility they want at every
decision and emit only the changes, like the originals, which rebuild the
prompt from the full history before each model call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dtoc_rl.data.models import FAMILIES
from dtoc_rl.engine.decide_request import PLACEHOLDER_TOKENS
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.policies.base import Policy, reset_policy
from dtoc_rl.sim.pricing import Prices, prices_for
from dtoc_rl.sim.simulator import CostConfig

__all__ = [
    "AnthropicClearToolUses",
    "CacheAwareClear",
    "GeminiCliMasking",
    "HideBig",
    "LastNObservations",
    "LoggedVisibility",
    "NoManagement",
    "ObservationMasking",
    "OnHarness",
    "OpenCodePrune",
    "TokenBudget",
    "best_batch",
    "to_action",
]

_F = {name: i for i, name in enumerate(ITEM_FEATURES)}
_G = {name: i for i, name in enumerate(GLOBAL_FEATURES)}


def _items(obs: dict[str, np.ndarray]) -> np.ndarray:
    """The observation's per-output features; an observation of another shape is named."""
    if "items" not in obs:
        raise ValueError(
            f"a policy reads ReplayEnv's observation (items, item_mask, ...), got one with "
            f"{sorted(obs)[:6]}: the stock-RL wrapper's (dtoc_rl/ReplayFlat-v0) is for RL libraries; "
            "decide on dtoc_rl/Replay-v0"
        )
    return obs["items"]


def unread(items):
    """Which outputs no model call has read yet (age 0: the answer to the call just made), for numpy
    or torch item rows: hiding one is a miss (``Episode.call_reads``), so the learned policy and
    ``last_n`` never do."""
    return items[..., _F["age"]] < 1


def to_action(obs: dict[str, np.ndarray], want_visible: np.ndarray) -> dict[str, np.ndarray]:
    """Changes that take the slots from their current visibility to ``want_visible``."""
    mask = obs["item_mask"].astype(bool)
    vis = _items(obs)[:, _F["visible"]] > 0.5
    want = want_visible.astype(bool) & mask
    return {
        "enable": (mask & want & ~vis).astype(np.int8),
        "disable": (mask & ~want & vis).astype(np.int8),
    }


def _tool_categories(tools: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """``tools`` as a tuple, checked against ``TOOL_CATEGORIES``, and its mask over the tool ids."""
    bad = set(tools) - set(TOOL_CATEGORIES)
    if bad:
        raise ValueError(f"unknown tool categories {sorted(bad)}; known: {TOOL_CATEGORIES}")
    tools = tuple(tools)
    return tools, np.array([c in tools for c in TOOL_CATEGORIES])


def _ordinals(obs: dict[str, np.ndarray]) -> np.ndarray:
    """Ordinal of each slot's output among all outputs stored so far (-1 for padding)."""
    mask = obs["item_mask"].astype(bool)
    m = int(mask.sum())
    stored = int(obs["globals"][_G["stored"]])
    out = np.full(len(mask), -1, np.int64)
    out[:m] = np.arange(stored - m, stored)
    return out


class NoManagement(Policy):
    """Everything stays visible (the status quo of most agents)."""

    name = "none"
    reads_prices = False

    def act(self, obs, info=None):
        return to_action(obs, obs["item_mask"].astype(bool))


def _among(slot_steps: Any, steps: Any) -> np.ndarray:
    # which slots hold one of ``steps`` (a set): one lookup per slot, however many the log hid
    return np.fromiter((int(k) in steps for k in slot_steps), bool, len(slot_steps))


class OnHarness(Policy):
    """``inner`` on top of what the run's harness did (``dtoc-rl evaluate --on-harness``): before each
    model call the outputs the harness had hidden at that call (``Episode.harness_hidden``: a window or a
    compaction, ``LastNObservations``' masking) are hidden whatever ``inner`` wants; the rest are as
    ``inner`` decides.  So ``OnHarness(NoManagement())`` is the harness as it ran (``logged``), and
    what a policy saves over it is what it would save plugged into that harness.  ``inner`` is reset
    with ``info["harness_hidden"]`` (one set per call), so a hindsight plan can be made around it.  Its
    action's ``harness`` mask marks the harness's own changes, which ReplayEnv makes without a
    management call; a batch (``act_batch``, a vector env) keeps only ``enable``/``disable``, so it
    decides through ``act``.  (A need on what the harness took away is no miss for any policy:
    :func:`~dtoc_rl.sim.episode.drop_unseen_needs`.)"""

    needs_logged_run = True

    def __init__(self, inner: Policy):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.reads_prices = getattr(inner, "reads_prices", True)

    def reset(self, info=None):
        ep = (info or {}).get("episode")
        if ep is None:
            raise ValueError(f"{self.name}: needs info['episode'] (make ReplayEnv with expose_episode=True)")
        self._hidden = ep.harness_hidden()
        reset_policy(self.inner, {**(info or {}), "harness_hidden": self._hidden})

    def act(self, obs, info=None):
        action = self.inner.act(obs, info)
        c, last = int((info or {}).get("step", 0)), len(self._hidden) - 1
        now = self._hidden[min(c, last)] if last >= 0 else frozenset()
        before = self._hidden[min(c - 1, last)] if c >= 1 and last >= 0 else frozenset()
        if not now and not before:
            return action
        slots = info["slot_steps"]
        hidden = _among(slots, now)
        shown = (_items(obs)[:, _F["visible"]] > 0.5) & obs["item_mask"].astype(bool)
        # the policy's own action, less any showing of what the harness hides and with its hides added:
        # the rest of the action (a padding slot, a slot in both sets) stays, so the env counts it invalid
        out = {
            "enable": (np.asarray(action["enable"]) != 0) & ~hidden,
            "disable": (np.asarray(action["disable"]) != 0) & ~hidden | (hidden & shown),
        }
        # what the harness hides now or hid at the last call: a change there is its own, made without a
        # management call (a hide again after a miss restored one, a show when it lets one go)
        out["harness"] = _among(slots, now if now is before else now | before)
        return {k: v.astype(np.int8) for k, v in out.items()}

    def config(self):
        inner = self.inner
        return {"inner": inner.label if isinstance(inner, Policy) else repr(inner)}


class LoggedVisibility(OnHarness):
    """The visibility the log itself records, replayed: what its harness hid (the SWE-agent-LM runs
    masked by ``LastNObservations``, a window, a compaction) or what a policy plugged into the live
    agent hid (the logs an Orchestrator and ``dtoc-rl proxy --log-dir`` write carry it).  Before each
    model call every output the log says was hidden at that call is hidden and the others shown; a call
    the log says nothing of keeps what the log last hid (``Episode.harness_hidden``).  It is nothing done
    on top of the harness, ``OnHarness(NoManagement())``, so ``dtoc-rl evaluate -p logged none oracle``
    prices what was done live against doing nothing and against hindsight, and ``--on-harness`` takes
    it as each run's base.  Needs the episode (ReplayEnv ``expose_episode=True``, as ``dtoc-rl
    evaluate`` makes it)."""

    name = "logged"

    def __init__(self):
        super().__init__(NoManagement())
        self.name = "logged"

    def config(self):
        return {}


class LastNObservations(Policy):
    """SWE-agent's ``LastNObservations`` history processor.

    Source: SWE-agent/SWE-agent, ``sweagent/agent/history_processors.py``.
    Elides all but the last ``n`` observations; ``polling`` updates the cut
    only every ``polling`` observations, so the prompt prefix (and its cache)
    stays stable in between.  With ``L`` observations the elided ones are
    indices ``1 .. (L // polling) * polling - n - 1``: index 0, the instance
    template, is never elided.  In DTOC the instance template is the task
    message (observation 0) and stored output ``k`` is observation ``k + 1``, so
    the same arithmetic gives exactly SWE-agent's window.  ``n=5`` is the
    original paper's configuration (SWE-agent 0.7 config ``07.yaml``);
    "The Complexity Trap" (Lindenbauer et al., 2025) uses ``n=10``.  The
    processor's tag options (keep/remove by tag) have no DTOC equivalent.
    An output no model call has read yet (one of several parallel calls of
    the newest turn) is never elided: each SWE-agent call has one
    observation, so its window never reaches one, and eliding it would hide
    a tool's answer from the call made for it.
    """

    name = "last_n"
    reads_prices = False

    def __init__(self, n: int = 5, polling: int = 1):
        if n <= 0:
            raise ValueError(f"n must be a positive integer, got {n}")
        if polling <= 0:
            raise ValueError(f"polling must be a positive integer, got {polling}")
        self.n, self.polling = n, polling

    def act(self, obs, info=None):
        n_obs = 1 + int(obs["globals"][_G["stored"]])  # the task counts as observation 0
        last_removed = max(0, (n_obs // self.polling) * self.polling - self.n)
        # observations 1 .. last_removed-1 are elided = outputs 0 .. last_removed-2
        ords = _ordinals(obs)
        return to_action(obs, (ords >= last_removed - 1) | unread(_items(obs)))

    def config(self):
        return {"n": self.n, "polling": self.polling}


class ObservationMasking(Policy):
    """OpenHands' ``ObservationMaskingCondenser``.

    Source: OpenHands/OpenHands,
    ``openhands/memory/condenser/impl/observation_masking_condenser.py`` and
    ``openhands/core/config/condenser_config.py``.  An observation event is
    masked when it lies outside the ``attention_window`` most recent *events*
    of the view (``i < len(view) - attention_window``).  Events are actions,
    observations and messages, not only observations: in DTOC each step is one
    action event plus its observation, and every user message is one more
    event, so an output of age ``a`` steps has ``2a + turns_after`` events
    after it (steps without an output make this a slight over-count).
    Defaults differ between the class (``attention_window=5``) and the config
    (``100``); the default here is the config's, ``ObservationMasking.CLASS_DEFAULT``
    is the other.
    """

    name = "obs_mask"
    reads_prices = False
    CONFIG_DEFAULT = 100
    CLASS_DEFAULT = 5

    def __init__(self, attention_window: int = CONFIG_DEFAULT):
        if attention_window < 1:
            raise ValueError(f"attention_window must be >= 1, got {attention_window}")
        self.attention_window = attention_window

    def act(self, obs, info=None):
        items = _items(obs)
        events_after = 2 * items[:, _F["age"]] + items[:, _F["turns_after"]]
        return to_action(obs, events_after < self.attention_window)

    def config(self):
        return {"attention_window": self.attention_window}


class AnthropicClearToolUses(Policy):
    """Anthropic context editing, strategy ``clear_tool_uses_20250919``.

    Source: Anthropic's context-editing documentation
    (docs.claude.com, "Context editing") and the SDK type
    ``BetaClearToolUses20250919Edit`` (anthropic-sdk-python,
    ``types/beta/beta_clear_tool_uses_20250919_edit_param.py``).  The server
    edits every request from the client's full history: when the request's
    input tokens exceed ``trigger`` (default 100,000), it clears tool results
    oldest first, keeping the ``keep`` most recent tool uses (default 3) and
    every use of a tool in ``exclude_tools``; if fewer than ``clear_at_least``
    tokens would be cleared (default: no minimum) nothing is cleared.  The
    trigger is measured on the full history, i.e. the env's
    ``full_tokens_k`` (active tokens with every output visible).
    ``exclude_tools`` takes tool categories of ``dtoc_rl.labels.vocabulary``.
    """

    name = "anthropic_clear"
    reads_prices = False

    def __init__(
        self,
        trigger: int = 100_000,
        keep: int = 3,
        clear_at_least: int = 0,
        exclude_tools: Sequence[str] = (),
    ):
        self.exclude_tools, self._excluded = _tool_categories(exclude_tools)
        if keep < 0 or trigger < 0 or clear_at_least < 0:
            raise ValueError("trigger, keep and clear_at_least must be >= 0")
        self.trigger, self.keep, self.clear_at_least = trigger, keep, clear_at_least

    def act(self, obs, info=None):
        mask = obs["item_mask"].astype(bool)
        full = float(obs["globals"][_G["full_tokens_k"]]) * 1000
        if full <= self.trigger:
            return to_action(obs, mask)
        ords = _ordinals(obs)
        stored = int(obs["globals"][_G["stored"]])
        clear = mask & (ords < stored - self.keep) & ~self._excluded[obs["item_tool"]]
        tokens = _items(obs)[:, _F["est_tokens_k"]] * 1000
        if tokens[clear].sum() < self.clear_at_least:
            return to_action(obs, mask)
        return to_action(obs, mask & ~clear)

    def config(self):
        cfg: dict[str, Any] = {"trigger": self.trigger, "keep": self.keep}
        if self.clear_at_least:
            cfg["clear_at_least"] = self.clear_at_least
        if self.exclude_tools:
            cfg["exclude_tools"] = "+".join(self.exclude_tools)
        return cfg


class OpenCodePrune(Policy):
    """OpenCode's tool-output prune.

    Source: sst/opencode, ``packages/opencode/src/session/compaction.ts``
    (``prune``; ``PRUNE_PROTECT = 40_000``, ``PRUNE_MINIMUM = 20_000``,
    ``PRUNE_PROTECTED_TOOLS = ["skill"]``).  Walks back over the history,
    skipping everything in the last 2 user turns; stops at an output that is
    already pruned; adds up the estimated tokens of the other outputs and,
    once the total passes ``protect``, marks each further output for pruning;
    prunes them only if they add up to more than ``minimum``.  Pruned outputs
    stay pruned.  A single-prompt session never has 2 later user turns, so
    OpenCode never prunes it — faithfully, neither does this rule.
    ``protected_tools`` takes tool categories (OpenCode's ``skill`` has none).
    """

    name = "opencode_prune"
    reads_prices = False

    def __init__(
        self,
        protect: int = 40_000,
        minimum: int = 20_000,
        protect_turns: int = 2,
        protected_tools: Sequence[str] = (),
    ):
        self.protect, self.minimum, self.protect_turns = protect, minimum, protect_turns
        self.protected_tools = tuple(protected_tools)
        self._protected = np.array([c in self.protected_tools for c in TOOL_CATEGORIES])

    def act(self, obs, info=None):
        items = _items(obs)
        eligible = (items[:, _F["turns_after"]] >= self.protect_turns) & ~self._protected[obs["item_tool"]]
        return _prune_past(obs, eligible, self.protect, self.minimum, stop_at_hidden=True, at_least=False)

    def config(self):
        return {"protect": self.protect, "minimum": self.minimum}


class GeminiCliMasking(Policy):
    """Gemini CLI's tool output masking ("hybrid backward scanned FIFO").

    Source: google-gemini/gemini-cli, ``packages/core/src/context/toolOutputMaskingService.ts``
    (``DEFAULT_TOOL_PROTECTION_THRESHOLD = 50000``, ``DEFAULT_MIN_PRUNABLE_TOKENS_THRESHOLD = 30000``,
    ``DEFAULT_PROTECT_LATEST_TURN = true``), run before every model request
    (``packages/core/src/core/client.ts``).  Walks back over the tool outputs in the history,
    skipping those already masked; adds up the tokens of the others and, once the total passes
    ``protect``, marks that output and every older one; masks them only if they add up to at least
    ``minimum``.  Masked outputs stay masked (the CLI saves each to a file and leaves a preview).
    The outputs of the call just made are in the request, not yet in the history, so they are never
    masked: here, outputs no call has read (age 0).  Unlike OpenCode's prune it does not stop at the
    first masked output and protects no user turns.  An output is masked only when its preview is
    shorter (500 characters of head and tail, the marker and the file's path: ``min_tokens``, about
    175 tokens); a smaller one still counts towards both totals.  A shell output of at most 20 lines
    keeps all of them in its preview, so the CLI never masks it: the observation has no line counts,
    so here only its size decides.  Its exempt tools (``activate_skill``, ``ask_user``, plan-mode
    switches) have no category of their own here: none is exempt.
    """

    name = "gemini_mask"
    reads_prices = False

    def __init__(self, protect: int = 50_000, minimum: int = 30_000, min_tokens: int = 175):
        self.protect, self.minimum, self.min_tokens = protect, minimum, min_tokens

    def act(self, obs, info=None):
        eligible = ~unread(_items(obs))
        act = _prune_past(obs, eligible, self.protect, self.minimum, stop_at_hidden=False, at_least=True)
        act["disable"][_items(obs)[:, _F["est_tokens_k"]] * 1000 <= self.min_tokens] = 0
        return act

    def config(self):
        return {"protect": self.protect, "minimum": self.minimum, "min_tokens": self.min_tokens}


def _prune_past(
    obs: dict[str, np.ndarray],
    eligible: np.ndarray,
    protect: float,
    minimum: float,
    *,
    stop_at_hidden: bool,
    at_least: bool,
) -> dict[str, np.ndarray]:
    """The backward scan OpenCode's prune and Gemini CLI's masking share: newest first over the
    ``eligible`` outputs, the visible ones' tokens add up, and the output that takes the total past
    ``protect`` and every older visible one are hidden together when they hold more than ``minimum``
    tokens (``at_least``: or exactly as many).  A hidden output ends the scan (``stop_at_hidden``:
    OpenCode's "already compacted") or is passed over.  One-way: nothing is shown again."""
    items = _items(obs)
    mask = obs["item_mask"].astype(bool)
    vis = items[:, _F["visible"]] > 0.5
    tokens = items[:, _F["est_tokens_k"]] * 1000
    total = pruned = 0.0
    to_prune = []
    for j in range(int(mask.sum()) - 1, -1, -1):
        if not eligible[j]:
            continue
        if not vis[j]:
            if stop_at_hidden:
                break
            continue
        total += tokens[j]
        if total > protect:
            pruned += tokens[j]
            to_prune.append(j)
    disable = np.zeros(len(mask), np.int8)
    if pruned > minimum or (at_least and to_prune and pruned >= minimum):
        disable[to_prune] = 1
    return {"enable": np.zeros(len(mask), np.int8), "disable": disable}


class TokenBudget(Policy):
    """Keep the active context within ``budget`` tokens by recency.

    Outputs are kept visible newest first while the context (everything that
    is not an output, plus the visible outputs) fits in ``budget``; older ones
    are hidden, and hidden ones come back when they fit again.  Not a
    published rule: the simple budget baseline that LLM frameworks' "trim to
    fit" helpers implement.
    """

    name = "budget"
    reads_prices = False

    def __init__(self, budget: int = 32_000):
        if budget <= 0:
            raise ValueError(f"budget must be > 0, got {budget}")
        self.budget = budget

    def act(self, obs, info=None):
        items, mask = _items(obs), obs["item_mask"].astype(bool)
        vis = items[:, _F["visible"]] > 0.5
        tokens = items[:, _F["est_tokens_k"]] * 1000
        active = float(obs["globals"][_G["active_tokens_k"]]) * 1000
        fixed = active - tokens[mask & vis].sum()  # messages, task, placeholders (approx.)
        room = self.budget - fixed
        want = np.zeros(len(mask), bool)
        for j in range(int(mask.sum()) - 1, -1, -1):
            if tokens[j] <= room:
                want[j] = True
                room -= tokens[j]
            else:
                break
        return to_action(obs, want)

    def config(self):
        return {"budget": self.budget}


def needed_again(obs: dict[str, np.ndarray]) -> np.ndarray:
    """Slots whose output some call needed after the first call that saw it.

    The first call after an output is stored reads it (offset 0); "needed again" is a need at a later
    call.  The observation carries ``times_needed`` and ``since_need`` (calls since the last need), so
    the last need's offset is ``age - since_need - 1``: when that is >= 1 the output was needed again.
    Needs are counted whether or not the output was visible, so a need on a hidden output (a miss)
    counts too.  Only the last need's offset is exposed, but it can only grow, so the signal never
    switches off once on.
    """
    items = _items(obs)
    last_offset = items[:, _F["age"]] - items[:, _F["since_need"]] - 1
    return (items[:, _F["times_needed"]] > 0) & (last_offset >= 1) & obs["item_mask"].astype(bool)


class HideBig(Policy):
    """Hide every output of at least ``tokens`` tokens once ``age`` calls have seen it, and never hide
    one the agent has needed again.

    A big output is read by the call right after it and rarely after that, while it is paid for at
    every later call; small outputs cost little and are the ones an agent refers back to.  ``age``
    (default 1) is the number of calls that see an output before it is hidden: with 1, output k is
    visible to call k+1 and hidden from call k+2 on.  "Needed again" is :func:`needed_again` (the
    ``times_needed`` and ``since_need`` features): such an output is never hidden (again).  The rule
    only hides: an output needed while hidden is brought back by the miss itself (a re-run copy, or
    the restored original, per the simulator's recovery), so re-showing the original would pay a
    cache re-write for nothing.  Not a published rule: the ten-line baseline of issue 17.
    """

    name = "hide_big"
    reads_prices = False

    def __init__(self, tokens: int = 2_000, age: int = 1):
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        if age < 1:
            raise ValueError(f"age must be >= 1 (calls that see an output before it is hidden), got {age}")
        self.tokens, self.age = tokens, age

    def act(self, obs, info=None):
        items, mask = _items(obs), obs["item_mask"].astype(bool)
        vis = items[:, _F["visible"]] > 0.5
        hide = (
            mask
            & vis
            & (items[:, _F["est_tokens_k"]] * 1000 >= self.tokens)
            & (items[:, _F["age"]] >= self.age)
            & ~needed_again(obs)
        )
        return {"enable": np.zeros(len(mask), np.int8), "disable": hide.astype(np.int8)}

    def config(self):
        return {"tokens": self.tokens, "age": self.age}


def per_call(info: Any) -> bool:
    """Whether a decision's ``info`` says the run's calls go to models priced differently (a router, a
    /model switch; ``info["prices_per_call"]``, set by ReplayEnv and the Orchestrator): then no price
    holds for the whole run, and a policy prices each decision at its observation's ``prices``, those
    of the model the next call goes to."""
    return bool(info and info.get("prices_per_call"))


def episode_prices(info: dict[str, Any] | None) -> Prices | None:
    """The prices an episode is billed at, from what ``reset`` hands a policy: its cost config's
    resolution (:meth:`~dtoc_rl.sim.simulator.CostConfig.prices_of`: the config's prices, the user's
    entry for the model, else the logged model version's or the family's list prices); None when the
    info names no model (the caller then prices the observation's family id) or the episode's calls go
    to models priced differently (each observation carries its next call's prices: :func:`per_call`)."""
    info = info or {}
    cfg = info.get("cost_config")
    ep = info.get("episode")
    if ep is not None:
        return None if per_call(info) else (cfg if cfg is not None else CostConfig()).prices_of(ep)
    if cfg is not None and getattr(cfg, "prices", None) is not None:
        return cfg.prices
    if info.get("model_family"):
        return prices_for(info["model_family"])
    return None


def best_batch(
    cand: np.ndarray,
    freed: np.ndarray,
    prompt_from: np.ndarray,
    remaining: float,
    read: float,
    rewrite: float,
    *,
    at_least: float = 0.0,
    rewritten_anyway: float = 0.0,
) -> int:
    """The slot ``j`` from which hiding every candidate pays most, or -1 when no batch pays.

    Hiding the candidates from slot ``j`` on frees ``F(j)`` tokens that each of the ``remaining``
    calls would read from the cache at ``read`` per token, and breaks the cached prefix at ``j``: the
    prompt from ``j`` on (``prompt_from[j]``, as it stands) minus ``F(j)`` is written again at
    ``rewrite`` per token (the cache-write price less the cache-read one)::

        net(j) = F(j) * remaining * read - max(prompt_from[j] - F(j) - rewritten_anyway, 0) * rewrite

    ``rewritten_anyway``: tokens re-written by other changes at the same call (a restore earlier in
    the prompt), which the batch does not pay for twice.  Batches freeing less than ``at_least`` do
    not count.  Hiding more after ``j`` costs nothing more, so the batch is every candidate from
    ``j`` on.  One rule for every policy that times its hides by price (CacheAwareClear, the learned
    policy's batching).
    """
    cand = np.asarray(cand, bool)
    f = np.where(cand, np.asarray(freed, np.float64), 0.0)
    freed_from = np.cumsum(f[::-1])[::-1]
    cost = np.maximum(np.asarray(prompt_from, np.float64) - freed_from - rewritten_anyway, 0.0) * rewrite
    net = freed_from * remaining * read - cost
    net = np.where(cand & (freed_from >= at_least), net, -np.inf)
    if not cand.any():
        return -1
    j = int(np.argmax(net))
    return j if net[j] > 0 else -1


class CacheAwareClear(Policy):
    """Clear old tool outputs in batches, only when the clearing pays for its cache re-write.

    The idea behind Anthropic's context editing (``clear_tool_uses_20250919``, docs.claude.com
    "Context editing"): clearing invalidates the cached prompt prefix from the first cleared result
    on, so the documentation recommends clearing enough tokens at once to make that worthwhile, which
    its ``clear_at_least`` sets by hand.  Here the amount is priced instead.  Clearing a batch C
    whose earliest output is j saves every later call the cached read of the freed tokens, and costs
    the next call a re-write of the prompt after j::

        benefit = freed(C) * remaining * cache_read
        cost    = suffix_after(j) * (cache_write - cache_read)

    For each candidate j the batch is every candidate from j on (clearing more after j costs nothing
    more); the rule clears the batch of largest ``benefit - cost`` when that is positive, frees at
    least ``clear_at_least`` tokens, and the full history exceeds ``trigger`` tokens.

    * Candidates: visible outputs outside the ``keep`` most recent (Anthropic's default 3 tool uses),
      not of an ``exclude_tools`` category, freeing more than a placeholder, and not
      :func:`needed_again` (the agent came back to it once; clearing it again risks a re-read call).
    * ``remaining``: the run's calls so far (the ``step`` feature), capped at ``horizon``.  With no
      other knowledge of a run's length, a run that has gone on for t calls is as likely to be near
      its middle as anywhere, so t more is the median guess; the cap keeps one decision on a long run
      from counting on hundreds of calls that may not come.
    * ``suffix_after(j)``: tokens of the prompt from output j on, after the clearing.  The observation
      gives the whole history's size (``full_tokens_k``) but not where each output sits in it, so the
      rule records, when it first sees an output, the history size before it; the suffix is the
      history since then minus what hidden outputs from j on save.  One instance per episode stream:
      ``reset`` clears this record.
    * Prices: from ``reset``'s info (:func:`episode_prices`: the cost config's prices, the logged
      model version's, or the family's), else the observation's family id; ``prices`` (a
      :class:`~dtoc_rl.sim.pricing.Prices`) overrides them.  Cache lifetimes and minimum sizes are not
      modelled: the re-write is charged as if the cache were warm.
    * ``trigger`` defaults to 0 (Anthropic's default is 100,000 input tokens): the price test decides.
    """

    name = "cache_clear"

    def __init__(
        self,
        keep: int = 3,
        horizon: int = 50,
        clear_at_least: int = 0,
        trigger: int = 0,
        exclude_tools: Sequence[str] = (),
        prices: Prices | None = None,
    ):
        self.exclude_tools, self._excluded = _tool_categories(exclude_tools)
        if keep < 0 or horizon < 1 or clear_at_least < 0 or trigger < 0:
            raise ValueError(
                f"keep, clear_at_least and trigger must be >= 0 and horizon >= 1; got keep={keep}, "
                f"horizon={horizon}, clear_at_least={clear_at_least}, trigger={trigger}"
            )
        self.keep, self.horizon, self.clear_at_least, self.trigger = keep, horizon, clear_at_least, trigger
        self._fixed_prices = prices
        self.reset()

    def reset(self, info=None):
        self.prices = self._fixed_prices or episode_prices(info)
        self._per_call = self.prices is None and per_call(info)  # each decision at its call's model
        self._before: dict[int, float] = {}  # output ordinal -> history tokens before it

    def _prices(self, obs, info=None) -> Prices:
        if (self._per_call or per_call(info)) and obs.get("prices") is not None:
            return Prices(*(float(x) for x in np.asarray(obs["prices"]).reshape(-1)[:4]))
        if self.prices is None:
            fid = int(obs["family"])
            self.prices = prices_for(FAMILIES[fid] if 0 <= fid < len(FAMILIES) else None)
        return self.prices

    def act(self, obs, info=None):
        items, mask = _items(obs), obs["item_mask"].astype(bool)
        n = len(mask)
        nothing = {"enable": np.zeros(n, np.int8), "disable": np.zeros(n, np.int8)}
        m = int(mask.sum())
        g = obs["globals"]
        full = float(g[_G["full_tokens_k"]]) * 1000
        tokens = items[:, _F["est_tokens_k"]] * 1000
        ords = _ordinals(obs)
        # history size before each output not seen yet, newest first (messages between them ignored)
        running = full
        for j in range(m - 1, -1, -1):
            o = int(ords[j])
            if o in self._before:
                break
            running -= tokens[j]
            self._before[o] = running
        if m == 0 or full <= self.trigger:
            return nothing
        vis = items[:, _F["visible"]] > 0.5
        freed = np.maximum(tokens - PLACEHOLDER_TOKENS, 0.0)
        stored = int(g[_G["stored"]])
        cand = (
            mask
            & vis
            & (ords < stored - self.keep)
            & (freed > 0)
            & ~self._excluded[obs["item_tool"]]
            & ~needed_again(obs)
        )
        if not cand.any():
            return nothing
        p = self._prices(obs, info)
        remaining = min(max(int(g[_G["step"]]), 1), self.horizon)
        hidden_saving = np.where(mask & ~vis, freed, 0.0)
        saved_from = np.cumsum(hidden_saving[::-1])[::-1]  # what hidden outputs from slot j on save
        before = np.array([self._before.get(int(o), full) for o in ords], np.float64)
        best_j = best_batch(
            cand, freed, full - before - saved_from, remaining, p.cache_read,
            max(p.cache_write - p.cache_read, 0.0), at_least=self.clear_at_least,
        )  # fmt: skip
        if best_j < 0:
            return nothing
        clear = cand & (np.arange(n) >= best_j)
        return {"enable": nothing["enable"], "disable": clear.astype(np.int8)}

    def config(self):
        cfg: dict[str, Any] = {"keep": self.keep, "horizon": self.horizon}
        if self.clear_at_least:
            cfg["clear_at_least"] = self.clear_at_least
        if self.trigger:
            cfg["trigger"] = self.trigger
        if self.exclude_tools:
            cfg["exclude_tools"] = "+".join(self.exclude_tools)
        return cfg
