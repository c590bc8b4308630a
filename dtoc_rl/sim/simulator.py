"""The offline cost simulator behind ReplayEnv, the oracle and evaluation.

It replays a compiled :class:`~dtoc_rl.sim.episode.Episode` call by call under a
visibility schedule and prices every model call.  A model call is one assistant
turn: parallel tool calls of one turn (consecutive steps sharing ``Step.turn``)
are billed once, for a prompt that ends with the turn's user text, the output
tokens of all its tool calls, and the union of its steps' needs; then every
output of the turn joins the context.

* **Prompt caching.** A call's prompt is the whole active context.  The part
  that matches the previous call's prompt up to the first output whose
  visibility changed since then is read from the cache (``cache_read``
  price); the rest is written to it (``cache_write``).  So hiding or restoring
  output j re-writes everything after j once.  ``cache="provider"`` (default)
  then applies the provider's rules (:class:`~dtoc_rl.sim.pricing.CacheRules`:
  minimum cacheable prompt, granularity, lifetime between the logged call
  timestamps, fitted hit rate); ``cache="ideal"`` reads that whole prefix
  every time, never expiring.
* **Misses.** A call whose need labels point to a hidden output is a miss, and so is a call made
  while an output of the call before it is hidden (:meth:`Episode.call_reads`: no call has read
  that output yet, so the agent would get a placeholder for its own tool's answer).
  ``miss="reread"`` (the paper's re-read metric): the agent spends one extra
  model call over the whole active context to get the output again.
  ``miss="fail"``: the episode ends as a failure.  ``miss="calibrated"``: with
  probability ``reread_prob`` as ``reread``, otherwise the need is absorbed at
  no cost (the agent carries on without it), the figures fitted by
  ``dtoc-rl calibrate`` from logs that really were masked (a miss of an output no call had read
  is always re-read: those logs never made one).
* **Recovery** (how a re-read brings the output back).  ``recovery="append"``
  (default): what an agent under a masking rule it cannot override does (SWE-agent
  ``LastNObservations``, a token budget, Anthropic's clearing): it re-runs the
  tool, so the extra call's message and a fresh copy of the output are appended
  to the context just before the call that needed it; the original stays hidden
  where it was, the cache is not broken, and the copy meets later needs of that
  output (it has no slot of its own, so no policy hides it again).
  ``recovery="restore"``: the output is made visible again at its old position,
  which re-writes the cached suffix after it; only a policy that can re-enable
  an output (the orchestrator's ``manage_context``) recovers like that.
  ``recovery="cheaper"``: such a policy's choice per miss, whichever of the two
  costs less for the call that needed it plus the rest of the episode's reads
  of what each leaves in the context (the output's later visibility assumed
  unchanged).
* **Management overhead.** ``overhead="orchestrator"``: changes cost only
  their cache effect.  ``overhead="agent"`` (the paper's setting): every
  decision (before a model call) with a change is one manage_context tool call
  made by the model, an extra
  model call over the active context whose call and StatusReport tokens stay
  in the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import MISS_KINDS, NEED_KINDS
from dtoc_rl.sim.calibrated import CALIBRATED_REREAD_PROB
from dtoc_rl.sim.episode import Episode
from dtoc_rl.sim.pricing import (
    CacheRules,
    Prices,
    as_price_table,
    as_prices,
    cache_rules_for,
    model_prices,
    retained,
    run_day,
    user_prices,
)

__all__ = ["CostConfig", "Simulator", "Totals", "baseline_totals", "idle_seconds"]

MISS_MODES = ("reread", "fail", "calibrated")
RECOVERY_MODES = ("append", "restore", "cheaper")
CACHE_MODES = ("provider", "ideal")

_f64 = np.float64
OVERHEAD_MODES = ("orchestrator", "agent")
_FEW = 8  # up to this many outputs, set visibility element by element rather than by fancy indexing


@dataclass
class CostConfig:
    """How the simulator prices calls, misses and management."""

    miss: str = "reread"
    """What a miss costs: reread (default), fail, or calibrated."""
    recovery: str = "append"
    """How a re-read brings a missed output back: append (a re-run, default), restore (in place), or
    cheaper (per miss, whichever of the two costs less)."""
    overhead: str = "orchestrator"
    """Who pays for visibility changes: orchestrator (cache effect only) or agent (a tool call each)."""
    need_kinds: tuple[str, ...] = MISS_KINDS
    """Need-label kinds that count as needs (any of NEED_KINDS; default MISS_KINDS)."""
    reread_call_tokens: int = 30
    """Output tokens of the extra call that re-reads a missed output."""
    reread_prob: float = CALIBRATED_REREAD_PROB
    """calibrated mode: probability that a need on a hidden output leads to a re-read."""
    mgmt_call_tokens: int = 20
    """agent overhead: output tokens of a manage_context call, plus mgmt_tokens_per_key per key."""
    mgmt_tokens_per_key: int = 4
    report_tokens: int = 45
    """agent overhead: StatusReport tokens entering the context, plus report_tokens_per_key per key."""
    report_tokens_per_key: int = 6
    prices: Prices | None = None
    """Override the family's price table (USD per million tokens) for every episode."""
    price_table: Mapping[str, Prices] | None = None
    """The user's prices by model name or family (:func:`~dtoc_rl.sim.pricing.load_price_table`): an
    episode whose model has an entry is billed, planned and observed at it (see :meth:`prices_of`)."""
    cache: str = "provider"
    """Prompt cache: provider (the provider's rules) or ideal (the whole shared prefix, forever)."""
    cache_rules: CacheRules | None = None
    """Override the provider's caching rules (cache="provider" only)."""

    def __post_init__(self) -> None:
        if self.miss not in MISS_MODES:
            raise ValueError(f"miss must be one of {MISS_MODES}, got {self.miss!r}")
        if self.recovery not in RECOVERY_MODES:
            raise ValueError(f"recovery must be one of {RECOVERY_MODES}, got {self.recovery!r}")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {self.cache!r}")
        if self.overhead not in OVERHEAD_MODES:
            raise ValueError(f"overhead must be one of {OVERHEAD_MODES}, got {self.overhead!r}")
        bad = set(self.need_kinds) - set(NEED_KINDS)
        if bad:
            raise ValueError(f"unknown need kinds {sorted(bad)}; known: {NEED_KINDS}")
        if not 0.0 <= self.reread_prob <= 1.0:
            raise ValueError(f"reread_prob must be in [0, 1], got {self.reread_prob}")
        # a copy: a caller's later edit of its dict must not change what this config bills; entries
        # given as plain dicts are read as a prices file's
        self.price_table = as_price_table(self.price_table, "price_table") if self.price_table else None
        if self.prices is not None:
            self.prices = as_prices(self.prices, "prices")

    def kind_mask(self) -> np.ndarray:
        return np.array([k in self.need_kinds for k in NEED_KINDS])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["need_kinds"] = list(self.need_kinds)
        return d

    def prices_of(self, ep: Episode) -> Prices:
        """The prices that bill ``ep`` (anything with ``model_family`` and ``model_raw``): ``prices`` when
        set, else the ``price_table`` entry for its model name (any case, with or without a ``provider/``
        prefix) or family, else its version's or family's list prices (``prices_for``, which warns once),
        its cache writes priced for the lifetime its log says (:func:`~dtoc_rl.sim.pricing.retained`);
        list prices are those of the day of its first call (:func:`~dtoc_rl.sim.pricing.run_day`).
        The one place an episode's prices are resolved: the Simulator, the all-visible bill, the
        oracle, the rules and evaluation all ask it, so none of them can price an episode differently."""
        model = getattr(ep, "model_raw", None)
        day = run_day(getattr(ep, "timestamps", None))
        listed = self.prices or model_prices(model, ep.model_family, self.price_table, day)
        return retained(listed, getattr(ep, "cache_ttl", None))

    def model_prices(self, ep: Episode) -> list[Prices]:
        """The prices of each model ``ep``'s calls went to (``ep.models``; one entry, :meth:`prices_of`,
        for an episode of one model): the first is the run's, the others resolved as it is."""
        first = self.prices_of(ep)
        if getattr(ep, "call_model", None) is None:
            return [first]
        ttl, day = getattr(ep, "cache_ttl", None), run_day(getattr(ep, "timestamps", None))
        return [first] + [
            retained(self.prices or model_prices(m, normalize_family(m), self.price_table, day), ttl)
            for m in ep.models[1:]
        ]

    def priced_per_call(self, ep: Episode) -> bool:
        """Whether ``ep``'s calls go to models priced differently (no one price holds for the run)."""
        return not _priced_alike(self.model_prices(ep))

    def call_prices(self, ep: Episode) -> Prices:
        """The prices of each model call of ``ep``: :meth:`prices_of` when every call went to one model
        (or to models priced alike), else one :class:`Prices` whose fields are (n_calls,) arrays, each
        call at its own model's (``Prices.bill`` then bills arrays of calls element by element)."""
        table = self.model_prices(ep)
        if _priced_alike(table):
            return table[0]
        return Prices.per_call(table, ep.call_model)

    def rules_for(self, ep: Episode) -> CacheRules | None:
        """The caching rules applied to ``ep`` (None: the ideal cache)."""
        if self.cache == "ideal":
            return None
        return self.cache_rules or cache_rules_for(
            ep.model_family,
            ep.model_raw,
            getattr(ep, "cache_ttl", None),
            self.hit_rate(ep.model_raw, ep.model_family),
        )

    def hit_rate(self, model: str | None, family: str | None) -> float | None:
        """The cache hit rate the user's prices give ``model`` (``Prices.cache_hit_rate`` of ``prices`` or
        of its ``price_table`` entry), None: its provider's stored rules."""
        p = self.prices or user_prices(model, family, self.price_table)
        return p.cache_hit_rate if p is not None else None

    def model_rules(self, ep: Episode) -> list[CacheRules | None]:
        """The caching rules of each model ``ep``'s calls went to (``ep.models``; one entry,
        :meth:`rules_for`, for an episode of one model): each provider caches by its own rules."""
        first = self.rules_for(ep)
        models = ep.models if getattr(ep, "call_model", None) is not None else [ep.model_raw]
        if first is None or self.cache_rules is not None:  # the ideal cache, or the caller's rules
            return [first] * len(models)
        ttl = getattr(ep, "cache_ttl", None)
        return [first] + [
            cache_rules_for(normalize_family(m), m, ttl, self.hit_rate(m, normalize_family(m)))
            for m in models[1:]
        ]

    def provider_cached(
        self, ep: Episode, cached: np.ndarray, prompts: np.ndarray, calls: np.ndarray | None = None
    ) -> np.ndarray:
        """What each model call of ``ep`` reads from its provider's cache, of the ``cached`` tokens an
        ideal cache would give it (the shared prefix with its model's last prompt): each call under its
        model's rules (:meth:`model_rules`), its wait timed since that model's last call.  ``calls``:
        the indices of the calls ``cached`` and ``prompts`` are of (default: every call, in order)."""
        rules = self.model_rules(ep)
        if rules[0] is None:
            return cached
        idle = idle_seconds(ep)
        if calls is not None:
            idle = idle[calls]
        if len(rules) == 1 or all(r == rules[0] for r in rules[1:]):
            return rules[0].cached(cached, prompts, idle)
        out = np.asarray(cached, np.float64).copy()
        which = ep.call_model if calls is None else ep.call_model[calls]
        for m, r in enumerate(rules):
            at = which == m
            out[at] = r.cached(out[at], np.asarray(prompts)[at], idle[at])
        return out


def _priced_alike(table: list[Prices]) -> bool:
    return all(p == table[0] for p in table[1:])


def idle_seconds(ep: Episode) -> np.ndarray:
    """Seconds between each model call and the previous one to its model (``ep.prev_call``; NaN:
    unknown, or no such call), from the timestamps of the calls' first steps: how long the cache it
    could read has waited."""
    ts = ep.timestamps if ep.timestamps is not None else np.full(ep.n, np.nan)
    ts = ts[ep.starts[:-1]] if ep.n_calls != ep.n else ts
    if not ep.n:
        return np.zeros(0)
    prev = ep.prev_call
    return np.where(prev >= 0, ts - ts[np.maximum(prev, 0)], np.nan)


@dataclass
class Totals:
    calls: int = 0  # real calls of the log
    extra_calls: int = 0  # re-read and management calls
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    active_token_sum: int = 0  # Σ prompt tokens of the real calls (mean = / calls)
    placeholder_tokens: int = 0  # Σ placeholder tokens in the real calls' prompts
    misses: int = 0
    rereads: int = 0
    absorbed: int = 0
    appended_tokens: int = 0  # re-run calls and output copies appended by recovery="append"
    mgmt_calls: int = 0
    changes: int = 0
    invalid_actions: int = 0
    failed: bool = False

    @property
    def mean_active_tokens(self) -> float:
        return self.active_token_sum / self.calls if self.calls else 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["mean_active_tokens"] = self.mean_active_tokens
        return d


@dataclass
class Simulator:
    ep: Episode
    cfg: CostConfig = field(default_factory=CostConfig)
    rng: np.random.Generator | None = None

    def __post_init__(self) -> None:
        ep = self.ep
        table = self.cfg.model_prices(ep)
        self.prices = table[0]
        """The run's prices (its ``model_raw``'s); a call to model m is billed at ``model_prices[m]``."""
        self.model_prices = table
        self.per_call = not _priced_alike(table)
        """Whether its calls go to models priced differently (observations then price each call)."""
        # the biller's per-token factors in locals: _bill is the hot loop (Prices.bill, bit for bit)
        self._factors = [p.per_token() for p in table]
        # and above each model's long-context threshold (0: none), the tier's
        self._long = [(p.long_above, p.per_token(long=True)) for p in table]
        # each call's model (None: all the run's), and the cache state of the models not called last
        self._mc = ep.call_model.tolist() if ep.call_model is not None and ep.n_calls else None
        # the models not called last: (what each was sent last, the outputs changed an odd number of
        # times since: its changes); self._odd is the current model's
        self._others: dict[int, tuple[int, set[int]]] = {}
        self._kinds = self.cfg.kind_mask()
        self._all_kinds = bool(self._kinds.all())
        # Per-step and per-call scalars as Python lists: indexing a list is several times cheaper than a
        # numpy array.
        self._n = ep.n
        self._nc = ep.n_calls
        self._gap_l = ep.gap.tolist()
        self._hid_l = ep.hid_cost.tolist()
        self._ua = (ep.user_tok + ep.asst_tok).tolist()
        self._has_out = ep.has_out.tolist()
        self._vis_cost = ep.vis_cost.tolist()
        self._user = ep.per_call(ep.user_tok).tolist()  # per model call: its steps' user text
        self._asst = ep.per_call(ep.asst_tok).tolist()  # per model call: its steps' assistant tokens
        self._starts_l = ep.starts[:-1].tolist()  # per model call: its first step
        self._dropped = any(ep.logged_dropped)  # the log says some call was sent without some output
        self._end = ep.starts[1:].tolist()  # per model call: the step after its last
        # the need schedule restricted to the counted kinds (CSR: step t needs idx[ptr[t]:ptr[t+1]]), as
        # the sorted distinct steps each call needs (what ep.call_needs(c, kinds) lists), None for none
        if self._all_kinds:
            ptr, idx = ep.need_ptr.tolist(), ep.need_idx.tolist()
        else:
            keep = self._kinds[ep.need_kind]
            kept_before = np.concatenate([[0], np.cumsum(keep)])
            ptr, idx = kept_before[ep.need_ptr].tolist(), ep.need_idx[keep].tolist()
        if self._nc == self._n:
            self._needs = [sorted(set(idx[a:b])) if b > a else None for a, b in zip(ptr, ptr[1:])]
        else:  # a turn's needs on outputs stored before it (its own parallel outputs did not exist yet)
            st = ep.starts.tolist()
            self._needs = [
                sorted({j for j in idx[ptr[a] : ptr[b]] if j < a}) or None for a, b in zip(st, st[1:])
            ]
        self._base = int(ep.base_tokens)
        self._rules_of = self.cfg.model_rules(ep)  # per model; self._rules: the current model's
        self._idle = idle_seconds(ep).tolist()
        self._cfg_snapshot = self.cfg_snapshot()
        self._all_true = np.ones(ep.n, bool)  # reset() copies it (np.ones is slow in Python)
        self.log: list | None = None
        """When a list, every change of per-output state is appended to it, in order: ``(steps, k)`` for
        each visibility change (``steps`` an int array, or one int; each step toggled once; the first
        ``k`` made visible, the rest hidden), and the step (an int) of each output a call needed or
        missed (its need count, last need and re-reads may have changed).  ReplayEnv drains it to update its
        observation incrementally."""
        self.reset()

    def cfg_snapshot(self) -> tuple:
        """The settings read once at construction (prices, need kinds), to detect a changed config."""
        table = tuple(self.cfg.price_table.items()) if self.cfg.price_table else None
        return (self.cfg.prices, table, tuple(self.cfg.need_kinds), self.cfg.cache, self.cfg.cache_rules)

    # -- state -------------------------------------------------------------------
    def reset(self) -> None:
        ep = self.ep
        self.t = 0  # steps stored: the next call starts at step t
        self.c = 0  # model calls made: the next call is call c
        n = ep.n
        self.visible = self._all_true.copy()  # an array: policies and tools index it with arrays
        # Per-step counters as Python lists, not arrays: they are read and updated one element at a
        # time, several times per call, and a list element costs a fifth of a numpy one to update.
        self.seg = [0] * n  # U+A+O+extra of stored steps
        self.extra = [0] * n
        self.need_count = [0] * n
        self.last_need = [-1] * n
        self.rereads_of = [0] * n
        #: (model call, output step) of every miss, in order: where a policy hid what a call needed
        self.missed: list[tuple[int, int]] = []
        self.toggles = [0] * n
        self.pre = [0] * n  # tokens appended before call k's message (re-runs of missed outputs)
        self.copied = [False] * n  # a re-run appended a copy of this output: its needs are met
        self.ctx = int(ep.base_tokens)
        self.placeholders = 0  # Σ placeholder cost of stored hidden outputs
        self.saved = 0  # Σ (envelope - placeholder) of stored hidden outputs
        self.n_stored = 0  # stored outputs
        self.n_visible = 0  # stored outputs now visible
        self.prev_prompt = 0  # the prompt of the last call to the current model (what its cache holds)
        self._model = self._mc[0] if self._mc else 0  # the model whose cache prev_prompt, first_changed are
        self._p0, self._p1, self._p2 = self._factors[self._model]
        self._lt, self._lf = self._long[self._model]
        self._rules = self._rules_of[self._model]
        self._others = {}
        self._odd: set[int] = set()
        # seconds the cache waits before the next billed call: the log's wait before model call c, taken
        # by the first call billed after it (a re-run, the agent's manage_context call, or call c itself)
        self.idle = self._idle[0] if self._idle else float("nan")
        self.first_changed = ep.n
        self.totals = Totals()

    @property
    def done(self) -> bool:
        return self.t >= self._n or self.totals.failed

    @property
    def stored(self) -> int:
        """Steps stored so far (outputs of steps < t exist)."""
        return self.t

    def cache_cold(self) -> bool:
        """Whether the next model call finds its provider's cache expired whatever its prompt (the log
        waited longer before it than the cache keeps a prefix): a change made before it re-writes
        nothing that would not be written anyway.  Never with ``overhead="agent"``: there the
        manage_context call comes after the wait, takes the cold write, and the logged call after it
        re-writes what follows the change."""
        c = self.c
        if self._rules is None or self.cfg.overhead == "agent" or c >= len(self._idle):
            return False
        return self._rules_of[self.model_of(c)].expired(self._idle[c])

    def hidden_mask(self) -> np.ndarray:
        m = ~self.visible
        m[self.t :] = False
        return m & self.ep.has_out

    # -- billing -----------------------------------------------------------------
    def _cached_prefix(self) -> int:
        j = self.first_changed
        if j >= self._n:
            return self.prev_prompt
        t = self.t
        # base + Σ seg[:j], summing the shorter side: ctx == base + Σ seg[:t] always
        before = self._base + sum(self.seg[:j]) if 2 * j <= t else self.ctx - sum(self.seg[j:t])
        prefix = before + self._ua[j] + self.pre[j]
        return min(prefix, self.prev_prompt)

    def model_of(self, c: int) -> int:
        """The model call ``c`` goes to (an index into ``model_prices``; the last call's past the end)."""
        return self._mc[min(c, self._nc - 1)] if self._mc is not None else 0

    def _use_model(self, c: int) -> None:
        """Make the cache state and prices current those of call ``c``'s model: a provider keeps a cache
        per model, so a call reads what its own model was sent last, however many calls to others came
        between (and a model's first call reads nothing)."""
        m = self.model_of(c)
        if m != self._model:
            self._others[self._model] = (self.prev_prompt, self._odd)
            self.prev_prompt, self._odd = self._others.pop(m, (0, set()))
            self.first_changed = min(self._odd) if self._odd else self._n
            self._model = m
            self._p0, self._p1, self._p2 = self._factors[m]
            self._lt, self._lf = self._long[m]
            self._rules = self._rules_of[m]

    def _bill(self, prompt: int, out_tokens: int) -> float:
        if self._mc is not None:
            self._use_model(self.c)
        cached = self._cached_prefix()
        if self._rules is not None:
            cached = self._rules.cached_one(cached, prompt, self.idle)
        self.idle = 0.0  # a call right after this one (the logged call after a re-run) waits for none
        written = prompt - cached
        # Prices.bill inlined (Python floats are bit-identical to numpy's float64), typed np.float64
        if self._lt and prompt > self._lt:  # the long-context tier
            p0, p1, p2 = self._lf
            dollars = _f64(cached * p0 + written * p1 + out_tokens * p2)
        else:
            dollars = _f64(cached * self._p0 + written * self._p1 + out_tokens * self._p2)
        tot = self.totals
        tot.input_tokens += prompt
        tot.cache_read_tokens += cached
        tot.cache_write_tokens += written
        tot.output_tokens += out_tokens
        tot.dollars += dollars
        self.prev_prompt = prompt
        self.first_changed = self._n
        if self._mc is not None:
            self._odd.clear()
        return float(dollars)

    def _show(self, k: int) -> None:
        """Make hidden stored output ``k`` (a Python int) visible: a missed output that was re-read."""
        if not self.visible[k]:
            self._show_and_hide([k], [])

    def _show_and_hide(self, en, di) -> None:
        """Show stored outputs ``en`` and hide ``di`` (unique step indices, disjoint, each currently in
        the other state; integer arrays, or lists of Python ints)."""
        # Python ints: the change log's consumers tell a single step from an array by its type
        en = en if type(en) is list else np.asarray(en, np.int64).tolist()
        di = di if type(di) is list else np.asarray(di, np.int64).tolist()
        ne, n = len(en), len(en) + len(di)
        if not n:
            return
        gap, hid, seg, tog = self._gap_l, self._hid_l, self.seg, self.toggles
        lo = self.first_changed
        g_en = h_en = 0
        for k in en:
            g = gap[k]
            g_en += g
            h_en += hid[k]
            seg[k] += g
            tog[k] += 1
            if k < lo:
                lo = k
        g_di = h_di = 0
        for k in di:
            g = gap[k]
            g_di += g
            h_di += hid[k]
            seg[k] -= g
            tog[k] += 1
            if k < lo:
                lo = k
        vis = self.visible
        if n <= _FEW:
            for k in en:
                vis[k] = True
            for k in di:
                vis[k] = False
        else:
            vis[en] = True
            vis[di] = False
        self.placeholders += h_di - h_en
        self.saved += g_di - g_en
        self.n_visible += ne - len(di)
        self.ctx += g_en - g_di
        self.first_changed = lo
        if self._mc is not None:
            # a cache holds what its model was sent last: a change undone before that model's next
            # call changes nothing it holds (for every model, the one called last included)
            self._odd.symmetric_difference_update(en + di)
            self.first_changed = min(self._odd) if self._odd else self._n
            for _, odd in self._others.values():
                odd.symmetric_difference_update(en + di)
        log = self.log
        if log is not None:
            if n <= _FEW:
                log.extend([(k, 1) for k in en] + [(k, 0) for k in di])
            else:
                log.append((np.array(en + di, np.int64), ne))

    @property
    def next_user_tokens(self) -> int:
        """User text of the next model call (0 when none is left): part of the prompt it will pay for."""
        return self._user[self.c] if self.c < self._nc else 0

    def _restore_is_cheaper(self, j: int, c: int, pre: int) -> bool:
        """recovery="cheaper": restoring missed output ``j`` in place before call ``t`` against appending
        a re-run's copy.  Restoring re-writes the prompt after ``j`` now but carries only the output
        (its placeholder replaced); appending writes the call and the copy, which every later call
        reads on top of the placeholder."""
        added = self.cfg.reread_call_tokens + self._vis_cost[j]
        if self._mc is not None:
            self._use_model(c)
        read, write = self._p0, self._p1
        prompt_append = self.ctx + self._user[c] + pre
        prompt_restore = prompt_append + self._gap_l[j]
        first = self.first_changed
        self.first_changed = min(first, j)
        prefix = self._cached_prefix()  # what restoring leaves cached: everything before O_j
        self.first_changed = first
        cost_restore = prefix * read + (prompt_restore - prefix) * write
        cost_append = prompt_append * read + added * write
        later = (self._nc - c - 1) * read * (self._gap_l[j] - added)
        return cost_restore + later < cost_append

    def _reads_of(self, c: int) -> list[int]:
        """What model call ``c`` must see (``ep.call_reads(c, kinds)``, a test pins the two equal): its
        needs and the outputs of the call before it, which it reads first (hiding one is a miss, not a
        need).  Built per call, only when something is hidden."""
        needs = self._needs[c]
        if not c:
            return needs or []
        a, b = self._starts_l[c - 1], self._end[c - 1]
        if b == a + 1:  # one tool call (the usual case)
            fresh = [a] if self._has_out[a] else []
        else:
            fresh = [k for k in range(a, b) if self._has_out[k]]
        if fresh and self._dropped:  # one a compaction took away before call c read it: not read
            unseen = self.ep.logged_hidden(c, masked=False)
            if unseen:
                fresh = [k for k in fresh if k not in unseen]
        if not needs:
            return fresh
        return sorted(set(needs).union(fresh)) if fresh else needs

    # -- one model call of the log ---------------------------------------------
    def call(self) -> tuple[float, int]:
        """Run model call c, the steps from t on (after recovering any misses); returns (dollars, misses)."""
        t, c, tot = self.t, self.c, self.totals
        if t >= self._n or tot.failed:  # self.done
            raise RuntimeError("episode is over; reset() first")
        dollars = 0.0
        misses = 0
        pre = 0  # appended by re-runs before this call's message
        log = self.log
        for j in self._needs[c] or ():
            if log is not None:
                log.append(j)
            self.need_count[j] += 1
            self.last_need[j] = c
        # nothing hidden (n_visible == n_stored), nothing to miss: most calls of most policies
        for j in self._reads_of(c) if self.n_visible != self.n_stored else ():
            if self.visible[j] or self.copied[j]:
                continue
            if log is not None:  # its re-reads change (a need logged it already; twice is harmless)
                log.append(j)
            misses += 1
            tot.misses += 1
            self.missed.append((c, j))
            cfg = self.cfg
            if cfg.miss == "fail":
                tot.failed = True
                return dollars, misses
            # calibrated: reread_prob was fitted on needs; the answer to the agent's own last call (a
            # step of call c - 1; c >= 1 whenever something is stored) is always fetched again: the
            # masked logs never hid one, so nothing measures otherwise
            if cfg.miss == "calibrated" and cfg.reread_prob < 1.0 and j < self._starts_l[c - 1]:
                if self.rng is None:  # one seeded stream: a fresh generator per miss repeats its draw
                    self.rng = np.random.default_rng(0)
                if self.rng.random() >= cfg.reread_prob:
                    tot.absorbed += 1
                    continue
            dollars += self._bill(self.ctx + self._user[c] + pre, cfg.reread_call_tokens)
            tot.extra_calls += 1
            tot.rereads += 1
            self.rereads_of[j] += 1
            if cfg.recovery == "restore" or (
                cfg.recovery == "cheaper" and self._restore_is_cheaper(j, c, pre)
            ):
                self._show(j)
            else:
                added = cfg.reread_call_tokens + self._vis_cost[j]
                pre += added
                tot.appended_tokens += added
                self.copied[j] = True
        prompt = self.ctx + self._user[c] + pre
        dollars += self._bill(prompt, self._asst[c])
        tot.calls += 1
        tot.active_token_sum += prompt
        tot.placeholder_tokens += self.placeholders
        # the call's messages and outputs join the context (the re-runs' copies before its first step)
        self.pre[t] = pre
        end = self._end[c]
        if end == t + 1:  # one tool call (the usual case), without the loop below
            o = self._vis_cost[t] if self._has_out[t] else 0
            if o:
                self.n_stored += 1
                self.n_visible += 1
            seg = self._ua[t] + pre + o
            self.seg[t] = seg
            self.ctx += seg
        else:
            for k in range(t, end):
                o = self._vis_cost[k] if self._has_out[k] else 0
                if o:
                    self.n_stored += 1
                    self.n_visible += 1
                seg = self._ua[k] + pre + o
                pre = 0
                self.seg[k] = seg
                self.ctx += seg
        self.t = end
        self.c = c + 1
        self.idle = self._idle[c + 1] if c + 1 < len(self._idle) else float("nan")
        return dollars, misses

    # -- a policy's decision ---------------------------------------------------
    def apply(self, enable, disable) -> float:
        """Apply visibility changes to stored outputs (step indices).  Indices
        that are not stored outputs, or are in both sets, are counted as
        invalid and ignored (the rule of :mod:`dtoc_rl.core.actions`: a non-stored index once per
        set, a stored one in both sets once).  Returns the dollars of any management call."""
        enable = np.unique(np.asarray(enable, np.int64))
        disable = np.unique(np.asarray(disable, np.int64))
        en, bad_en = self._stored_only(enable)
        di, bad_di = self._stored_only(disable)
        both = np.intersect1d(en, di, assume_unique=True)
        if len(both):
            en = en[~np.isin(en, both)]
            di = di[~np.isin(di, both)]
        self.totals.invalid_actions += bad_en + bad_di + len(both)  # a conflicting key counts once
        return self.apply_changes(en[~self.visible[en]], di[self.visible[di]])

    def _stored_only(self, idx: np.ndarray) -> tuple[np.ndarray, int]:
        ok = (idx >= 0) & (idx < self.t)
        ok[ok] = self.ep.has_out[idx[ok]]
        return idx[ok], int((~ok).sum())

    def apply_changes(
        self, en: np.ndarray | list[int], di: np.ndarray | list[int], managed: bool = True
    ) -> float:
        """Fast path: ``en`` hidden stored outputs to show, ``di`` visible ones to
        hide (unique step indices, already validated; integer arrays, or lists of Python ints).
        Returns management dollars.  ``managed=False``: changes a run's own harness made (a window, a
        compaction, masking, as its log records them): no management call, no change of the policy's,
        only their effect on the prompt and its cache."""
        tot = self.totals
        n_changes = len(en) + len(di)
        if not n_changes:
            return 0.0
        if not managed:
            self._show_and_hide(en, di)
            return 0.0
        dollars = 0.0
        tot.mgmt_calls += 1
        if self.cfg.overhead == "agent":
            cfg = self.cfg
            call_tok = cfg.mgmt_call_tokens + cfg.mgmt_tokens_per_key * n_changes
            dollars = self._bill(self.ctx, call_tok)
            tot.extra_calls += 1
            added = call_tok + cfg.report_tokens + cfg.report_tokens_per_key * n_changes
            last = self.t - 1
            self.extra[last] += added
            self.seg[last] += added
            self.ctx += added
        self._show_and_hide(en, di)
        tot.changes += n_changes
        return dollars


def baseline_totals(ep: Episode, cfg: CostConfig | None = None) -> Totals:
    """Totals with every output visible and no management (vectorised; one bill per model call)."""
    cfg = cfg or CostConfig()
    p = cfg.call_prices(ep)
    seg = ep.user_tok + ep.asst_tok + np.where(ep.has_out, ep.vis_cost, 0)
    before = ep.base_tokens + np.concatenate([[0], np.cumsum(seg)])[ep.starts[:-1]]
    prompts = before + ep.per_call(ep.user_tok)
    prev = ep.prev_call  # what the same model was sent last (nothing before its first call)
    cached = np.where(prev >= 0, prompts[np.maximum(prev, 0)], 0)
    cached = cfg.provider_cached(ep, cached, prompts)
    written = prompts - cached
    out = ep.per_call(ep.asst_tok)
    tot = Totals(
        calls=ep.n_calls,
        input_tokens=int(prompts.sum()),
        cache_read_tokens=int(cached.sum()),
        cache_write_tokens=int(written.sum()),
        output_tokens=int(out.sum()),
        active_token_sum=int(prompts.sum()),
    )
    # per call and summed in call order, with the simulator's arithmetic, so that a run that changes
    # nothing costs exactly the baseline (savings exactly 0, not float noise around it)
    dollars = 0.0
    for d in p.bill(cached, written, out).tolist():
        dollars += d
    tot.dollars = dollars
    return tot
