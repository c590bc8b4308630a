"""The bill check: the cost model against what providers billed.

For every trajectory whose log keeps per-call usage (``Step.usage``), each logged model call is
re-priced from the log's own context, the one the harness really sent: the system prompt and task,
then every earlier step's message, assistant text and raw output as logged (not DTOC envelopes),
outputs the harness masked as a short placeholder, steps it dropped (``dropped_before``) left out,
plus the call's own ``harness_text`` and the prompt tokens the log lacks
(``Trajectory.unlogged_prompt_tokens``; after a compaction, also what its first call shows the log
lacks of what the harness sent after its summary).  The prompt's size in provider tokens is a
:class:`SizeModel` of the estimator's counts (o200k by default) plus the unlogged tokens: provider
tokens per estimator token of the task, the step text and the outputs, tokens per step and per
call.  It is per (source, model family): the one stored in ``dtoc_rl.sim.calibrated`` for it, else the
stored ratio of the same family in another harness, else fitted on the fit half of these logs
(:func:`held_out` splits the trajectories by a hash of their id), and every summary reports the
errors on both halves and where its size model came from.

The cached part is the simulator's: the prefix shared with the previous call (up to the first
earlier step whose visibility changed, and never the previous call's harness text, which is
re-rendered at the end of every prompt), then the provider's :class:`~dtoc_rl.sim.pricing.CacheRules`
(minimum size, granularity, lifetime between the logged timestamps).  For providers whose cache
hits are best effort, ``hit_rate`` is fitted per source as logged / rule-allowed cached tokens
(on the fit half).
Dollars use the version's list prices (:func:`dtoc_rl.sim.pricing.prices_for`) and the logged output
tokens, so what is checked is the input side: prompt size, cache and prices.

Logged figures: ``usage.input_tokens`` (all prompt tokens), ``usage.cached_tokens`` (or, when a log
gives only the call's cost, the cached tokens that cost implies at list prices) and
``usage.cost_usd`` (or the logged tokens at list prices).
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dtoc_rl.core.tokens import TokenEstimator, get_estimator
from dtoc_rl.data.models import model_index, normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.sim.episode import harness_dropped
from dtoc_rl.sim.pricing import (
    HOUR_CACHE,
    CacheRules,
    Prices,
    cache_rules_for,
    has_list_price,
    logged_ttl,
    prices_for,
    retained,
    run_day,
)

__all__ = [
    "DEFAULT_ESTIMATOR",
    "CallCheck",
    "SizeModel",
    "bill_check",
    "fitted_prices",
    "held_out",
    "in_sample",
    "log_calls",
    "plot_bill_check",
    "targets_met",
    "write_calls",
]

#: Placeholder a masking harness leaves for a hidden output (SWE-agent: "Old environment output:
#: (N lines omitted)"), in estimator tokens.
MASKED_PLACEHOLDER_TOKENS = 10
#: What the logged text is counted with.  A BPE tokenizer follows any provider's own across prose,
#: code and logs far better than characters do (on the gemini-3-pro runs, provider tokens per 4
#: characters span 1.08-1.35 between the 10th and 90th percentile of calls, per o200k token
#: 1.13-1.23), so a factor fitted on some logs of a source holds on its other logs.
DEFAULT_ESTIMATOR = "o200k_base"
#: Calls a (source, model family) needs in its fit half to be fitted there, not on all its calls.
MIN_FIT_CALLS = 20


@dataclass
class CallCheck:
    """One logged model call: the context the log says it was sent, and the logged usage."""

    traj_id: str
    source: str
    step: int
    est_prompt: int  # estimator tokens of the logged context (without the unlogged tokens)
    est_shared: int  # estimator tokens shared with the previous call's prompt (ideal cache)
    est_outputs: int  # of est_prompt, the tool outputs (tokenizers split code and logs differently)
    est_base: int  # of est_prompt, the system prompt and task (often prose, tokenized apart from code)
    n_steps: int  # earlier steps in the prompt (each brings the chat format's and harness's framing)
    unlogged: int  # provider tokens the log lacks (in every prompt, at its start)
    idle: float  # seconds since the previous call (NaN: unknown or first)
    first: bool  # the trajectory's first logged call to its model (nothing of it cached yet)
    logged_in: float
    logged_cached: float  # NaN: unknown
    logged_out: float
    logged_dollars: float  # NaN: unknown
    prices: Prices
    rules: CacheRules
    family: str = ""  # the call's model family (a session may switch): size models are per (source, family)
    segment: int = 0  # compactions before this call that its log does not describe (harness_dropped)
    model: int = 0  # which of the run's models it went to (0: the run's): a cache is per model
    model_name: str = ""  # that model's name as logged ("": none named)
    pred: dict[str, float] = field(default_factory=dict)


def _turn_starts(traj: Trajectory) -> list[int]:
    """For each step, the first step of its turn (the model call that produced it).  Steps that all
    carry Step's default turn 0 recorded no turns: each is its own call, as compile_episode reads them."""
    if not any(s.turn for s in traj.steps):
        return list(range(len(traj.steps)))
    starts, first = [], 0
    for k, s in enumerate(traj.steps):
        if k == 0 or s.turn != traj.steps[k - 1].turn:
            first = k
        starts.append(first)
    return starts


def log_calls(traj: Trajectory, est: TokenEstimator) -> list[CallCheck]:
    """The logged calls of ``traj`` with the context the log says each one was sent."""
    steps = traj.steps
    usage_at = [k for k, s in enumerate(steps) if s.usage is not None and s.usage.input_tokens]
    if not usage_at:
        return []
    starts = _turn_starts(traj)
    seg_u = [est.count(s.user_text) if s.user_text else 0 for s in steps]
    seg_a = [
        est.count(s.assistant_text) + est.count(s.reasoning) + (est.count(s.tool_args) if s.tool_name else 0)
        for s in steps
    ]
    seg_o = [est.count(s.output) if s.output is not None else 0 for s in steps]
    base = est.count(traj.system_prompt or "") + est.count(traj.task_text or "")
    ttl = logged_ttl(s.usage for s in steps)
    day = run_day([s.timestamp for s in steps if s.timestamp is not None])  # the list prices of that day
    run_listed = prices_for(traj.model_family, traj.model_raw, day)
    run_prices = retained(run_listed, ttl)
    run_rules = cache_rules_for(traj.model_family, traj.model_raw, ttl)
    out: list[CallCheck] = []
    # per model (a cache is per model): (segment sizes, timestamp, first step) of its last call
    models: list[str] = [traj.model_raw]
    last: dict[int, tuple[list[int], float | None, int]] = {}
    gone = harness_dropped(traj)  # a window's and a compaction's: gone from the prompt with their messages
    # the steps whose call is the first after a compaction: a call's ``segment`` counts those up to it
    compacted_at = [
        j
        for j, st in enumerate(steps)
        if any(e.kind == "compaction" and j not in e.targets for e in st.events)
    ]
    for k in usage_at:
        s = steps[k]
        m = model_index(s.model, models)
        listed = prices_for(normalize_family(s.model), s.model, day) if m else run_listed
        p = retained(listed, ttl) if m else run_prices
        rules = cache_rules_for(normalize_family(s.model), s.model, ttl) if m else run_rules
        prev = last.get(m)
        start = starts[k]
        masked = set(s.masked_before or ())
        dropped = gone[k] or set()
        segs = []
        outs = 0  # the outputs' share of the prompt, as they were shown
        for j in range(start):
            if j in dropped:
                segs.append(0)
                continue
            o = MASKED_PLACEHOLDER_TOKENS if (j in masked and steps[j].output is not None) else seg_o[j]
            outs += o
            segs.append(seg_u[j] + seg_a[j] + o)
        harness = est.count(s.harness_text) if s.harness_text else 0
        prompt = base + sum(segs) + seg_u[start] + harness
        if prev is None:
            shared, idle = 0, float("nan")
        else:
            psegs, pts, pstart = prev
            first_diff = next((j for j in range(len(psegs)) if segs[j] != psegs[j]), len(psegs))
            shared = base + sum(segs[:first_diff])
            if first_diff == len(psegs) and pstart < start and pstart not in dropped:
                shared += seg_u[pstart]  # the previous call's own message, still in place
            idle = (s.timestamp - pts) if (s.timestamp is not None and pts is not None) else float("nan")
        u = s.usage
        cached = float(u.cached_tokens) if u.cached_tokens is not None else float("nan")
        out_tok = float(u.output_tokens) if u.output_tokens is not None else float(seg_a[k])
        dollars = float(u.cost_usd) if u.cost_usd is not None else float("nan")
        if math.isnan(cached) and not math.isnan(dollars) and p.input > p.cache_read:
            # a log that gives only the cost: the cached tokens that cost implies at list prices (each
            # cached token costs input - cache_read less than the same call with nothing cached)
            size = u.input_tokens  # the call's tier, for every part of it
            uncached_bill = p.bill(0, 0, out_tok, uncached=size)
            implied = (uncached_bill - dollars) / (
                p.bill(0, 0, 0, uncached=1, prompt=size) - p.bill(1, 0, 0, prompt=size)
            )
            cached = float(min(max(round(implied), 0), u.input_tokens))
        if math.isnan(dollars) and (not math.isnan(cached) or p.cache_read >= p.input):
            write = float(u.cache_write_tokens or 0)
            hour = float(min(u.cache_write_1h_tokens or 0, write))
            c = 0.0 if math.isnan(cached) else cached
            # each write at its lifetime's price: an hour's at twice the input, 5 minutes' as listed
            dollars = float(
                listed.bill(
                    c, write - hour, out_tok, uncached=u.input_tokens - c - write, prompt=u.input_tokens
                )
                + retained(listed, HOUR_CACHE).bill(0, hour, 0, prompt=u.input_tokens)
            )
        out.append(
            CallCheck(
                traj_id=traj.traj_id,
                source=traj.source,
                step=k,
                est_prompt=prompt,
                est_shared=shared,
                est_outputs=outs,
                est_base=base,
                n_steps=sum(1 for j in range(start) if j not in dropped),
                unlogged=int(traj.unlogged_prompt_tokens or 0),
                idle=idle,
                first=prev is None,
                logged_in=float(u.input_tokens),
                logged_cached=cached,
                logged_out=out_tok,
                logged_dollars=dollars,
                prices=p,
                rules=rules,
                family=(normalize_family(s.model) if m else traj.model_family) or "",
                segment=bisect_right(compacted_at, k) if gone[k] is not None else 0,
                model=m,
                model_name=(s.model if m else traj.model_raw) or "",
            )
        )
        last[m] = (segs, s.timestamp, start)
    return out


def _fit_size(calls: list[CallCheck]) -> tuple[float, float, float, float, float]:
    """The provider's prompt size from the log's: provider tokens per estimator token of the system
    prompt and task (``f``), of tool outputs (``c``) and of the other step text (``a``), tokens per
    earlier step (``d``: the chat format's message framing and any template text the harness wraps
    each step in that the log strips), and a constant per call (``b``: text every call carries that
    the log lacks and the ingester could not size, e.g. tool definitions):
    logged - unlogged = f * base + a * rest + c * outputs + d * steps + b, by least squares on
    relative errors, all coefficients non-negative (one ratio if a factor would be zero)."""
    e = np.array([c.est_prompt for c in calls], float)
    o = np.array([c.est_outputs for c in calls], float)
    g = np.array([c.est_base for c in calls], float)
    n = np.array([c.n_steps for c in calls], float)
    y = np.array([c.logged_in - c.unlogged for c in calls], float)
    if len(e) >= 5 and np.ptp(e) > 0:
        # relative errors of the whole prompt: a long call must not outweigh many short ones
        w = 1.0 / np.maximum([c.logged_in for c in calls], 1.0)
        X = np.vstack([g, e - o - g, o, n, np.ones_like(e)]).T * w[:, None]
        cols = list(range(5))
        while cols:  # non-negative least squares by dropping the most negative coefficient
            coef = np.linalg.lstsq(X[:, cols], y * w, rcond=None)[0]
            if (coef >= 0).all():
                out = np.zeros(5)
                out[cols] = coef
                if min(out[:3]) > 0:
                    return tuple(float(x) for x in out)  # type: ignore[return-value]
                break
            cols.pop(int(np.argmin(coef)))
    r = _fit_ratio(calls)
    return r, r, r, 0.0, 0.0


def _fit_ratio(calls: list[CallCheck]) -> float:
    """One provider-tokens-per-estimator-token ratio: the median over calls of logged (less the
    unlogged tokens) / estimated.  A median, because some logs' unlogged count is off for a few calls
    (a RepoLaunch conversation whose first logged call is larger than later ones leaves nothing, or
    less than nothing, to scale) and a least-squares ratio follows those calls."""
    r = [(c.logged_in - c.unlogged) / c.est_prompt for c in calls if c.est_prompt > 0]
    r = [x for x in r if x > 0]
    return float(np.median(r)) if r else 1.0


def held_out(traj_id: str) -> bool:
    """Whether a trajectory belongs to the check half.  Size models, hit rates and warm shares are
    fitted on the other half only, so the check half's figures are out of sample.  The split is a
    hash of the id: the same on every machine and for every subset of a dataset."""
    return hashlib.sha1(traj_id.encode("utf-8")).digest()[0] & 1 == 1


@dataclass(frozen=True)
class SizeModel:
    """Provider prompt tokens from a logged call's estimator counts (the terms of :func:`_fit_size`)."""

    estimator: str
    base: float = 1.0  # per estimator token of the system prompt and task
    text: float = 1.0  # per estimator token of the other step text (messages, assistant text, args)
    outputs: float = 1.0  # per estimator token of tool outputs
    per_step: float = 0.0  # tokens per earlier step
    offset: float = 0.0  # tokens per call
    origin: str = "none"  # where the figures come from, said in the output
    in_sample: bool = False  # fitted on every call it sizes (too few for a held-out half)

    def predict(self, c: CallCheck) -> int:
        rest = c.est_prompt - c.est_outputs - c.est_base
        size = self.base * c.est_base + self.text * rest + self.outputs * c.est_outputs
        return round(size + self.per_step * c.n_steps + self.offset) + c.unlogged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fitted(calls: list[CallCheck], est: str, origin: str, in_sample: bool = False) -> SizeModel:
    f, a, c, d, b = _fit_size(calls)
    return SizeModel(est, f, a, c, d, b, origin, in_sample)


def _size_model(key: str, calls: list[CallCheck], est: str, mode: str) -> tuple[SizeModel, list[CallCheck]]:
    """The size model for one (source, model family) and the calls it was fitted on (none if stored).

    ``mode``: ``"none"`` (estimator tokens as counted), ``"fit"`` (fitted on the fit half of
    ``calls``, or on all of them when that half is too small) or ``"stored"``: the factors
    ``dtoc_rl.sim.calibrated.PROMPT_SIZE_FACTORS`` holds for ``key`` and this estimator, or for the same
    harness's other log format (``SAME_HARNESS``); else, for the same model family in another harness,
    that entry's single tokens-per-estimator-token ratio (the tokenizer carries over, the harness's
    framing does not); else fitted as for ``"fit"``.
    """
    from dtoc_rl.sim.calibrated import PROMPT_SIZE_FACTORS, SAME_HARNESS

    if mode == "none":
        return SizeModel(est, origin="none: estimator tokens as counted"), []
    if mode == "stored":
        source, family = key.split("/", 1)
        for k in (key, *([f"{SAME_HARNESS[source]}/{family}"] if source in SAME_HARNESS else [])):
            entry = PROMPT_SIZE_FACTORS.get(k)
            if entry is not None and entry["estimator"] == est:
                terms = {f: float(entry[f]) for f in ("base", "text", "outputs", "per_step", "offset")}
                also = "" if k == key else f"; the same harness's other log format, for {key}"
                return SizeModel(est, **terms, origin=f"stored for {k} ({entry['fitted_on']}{also})"), []
        kin = [
            (int(v["calls"]), k)
            for k, v in PROMPT_SIZE_FACTORS.items()
            if k.split("/", 1)[1] == family and v["estimator"] == est
        ]
        if kin:
            other = PROMPT_SIZE_FACTORS[max(kin)[1]]
            r = float(other["ratio"])
            origin = f"stored ratio of {max(kin)[1]} (no factors for {key}; same model family)"
            return SizeModel(est, r, r, r, 0.0, 0.0, origin), []
    fit = [c for c in calls if not held_out(c.traj_id)]
    if len(fit) >= MIN_FIT_CALLS:
        why = "" if mode == "fit" else f"; no stored factors for {key}"
        return _fitted(fit, est, f"fitted on the fit half of these logs ({len(fit)} calls{why})"), fit
    if len(calls) >= 2:
        why = "" if mode == "fit" else f"; no stored factors for {key}"
        origin = f"fitted on all {len(calls)} calls of these logs (in sample{why})"
        return _fitted(calls, est, origin, in_sample=True), calls
    return SizeModel(est, origin=f"none: too few calls to fit ({len(calls)}) and no stored factors"), []


def _pct(pred: float, logged: float) -> float:
    return 100.0 * (pred / logged - 1.0) if logged else float("nan")


def _dollars(calls: list[CallCheck], cached: np.ndarray, pred_in: np.ndarray) -> np.ndarray:
    """Predicted dollars per call: ``cached`` prompt tokens read, the rest written (the simulator's
    rule), the logged output tokens."""
    return np.array([c.prices.bill(ch, pin - ch, c.logged_out) for c, ch, pin in zip(calls, cached, pred_in)])


def _errors(pred_in, logged_in, pred_cached, logged_cached, pred_usd, logged_usd, billed) -> dict[str, Any]:
    rel = 100.0 * (pred_in / logged_in - 1.0)
    abs_rel = np.abs(rel)
    if not len(rel):
        return {"calls": 0}
    known = ~np.isnan(logged_cached)
    return {
        "calls": len(rel),
        "input_tokens": _pct(pred_in.sum(), logged_in.sum()),
        "cached_tokens": _pct(pred_cached[known].sum(), logged_cached[known].sum()) if known.any() else None,
        "dollars": _pct(pred_usd[billed].sum(), logged_usd[billed].sum()) if billed.any() else None,
        "per_call_input_median_abs": float(np.median(abs_rel)),
        "per_call_input_p90_abs": float(np.percentile(abs_rel, 90)),
    }


def _compaction_unlogged(calls: list[CallCheck], pred_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per call, the provider tokens a compaction before it sent that its log does not hold, and the part
    of them new to its model's cache.  A harness that compacts sends, after its summary, what its log
    may not record (Claude Code 2.1.39: 2-13k tokens no record explains): measured at the first call
    after the compaction as a run's first call measures its unlogged prompt, the logged size less the
    predicted one (both in the provider's tokens), it opens every later prompt until the next
    compaction, and is new at the first call of each model after it.  ``calls``: each run's in order."""
    extra, fresh = np.zeros(len(calls)), np.zeros(len(calls))
    runs: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(calls):
        runs[c.traj_id].append(i)
    for idx in runs.values():
        measured: dict[int, float] = {}
        seen: dict[int, int] = {}  # model -> the segment its cache last saw
        for i in idx:
            c = calls[i]
            if c.segment:
                if c.segment not in measured:
                    measured[c.segment] = max(0.0, c.logged_in - float(pred_in[i]))
                extra[i] = measured[c.segment]
                if seen.get(c.model) != c.segment:
                    fresh[i] = extra[i]
            seen[c.model] = c.segment
    return extra, fresh


def bill_check(
    trajs: list[Trajectory],
    estimator: TokenEstimator | str | None = None,
    *,
    size: str = "stored",
    fit_hit_rate: bool = True,
) -> dict[str, Any]:
    """Predicted against logged input tokens, cached tokens and dollars, per source and per call.

    ``estimator`` counts the logged text (default :data:`DEFAULT_ESTIMATOR`); ``size`` says where
    the provider-tokens-per-estimator-token model of each (source, model family) comes from
    (``"stored"``, ``"fit"`` or ``"none"``, see :func:`_size_model`); with ``fit_hit_rate`` the
    cache hit rate and the first-call warm share are fitted per source on the fit half of its
    trajectories (:func:`held_out`), else the configured rules apply.

    Returns ``{"sources": {source: summary}, "calls": {source: {"logged_in", "pred_in", ...}}}``;
    a summary holds the size models used (``size_models``, each with its ``origin``) and the
    fitted ``hit_rate``, the logged and predicted totals with their errors in percent (provider
    rules and, for comparison, the ideal cache), the per-call input-token error distribution
    (percent; median of absolute errors, percentiles), and the same errors on each half
    (``halves``: ``fit`` and ``held_out``).
    """
    if size not in ("stored", "fit", "none"):
        raise ValueError(f"size must be 'stored', 'fit' or 'none', got {size!r}")
    est = get_estimator(DEFAULT_ESTIMATOR if estimator is None else estimator)
    by_source: dict[str, list[CallCheck]] = defaultdict(list)
    trajs_of: dict[str, set[str]] = defaultdict(set)
    for t in trajs:
        for c in log_calls(t, est):
            by_source[c.source].append(c)
            trajs_of[c.source].add(t.traj_id)
    sources: dict[str, Any] = {}
    calls_out: dict[str, Any] = {}
    for src, calls in sorted(by_source.items()):
        models: dict[str, Any] = {}
        pred_in = np.zeros(len(calls))
        offset = np.zeros(len(calls))
        for fam in sorted({c.family for c in calls}):
            idx = [i for i, c in enumerate(calls) if c.family == fam]
            # fitted on calls before any compaction: after one, the prompt holds what no record does
            sized = [calls[i] for i in idx if not calls[i].segment] or [calls[i] for i in idx]
            sm, fit_on = _size_model(f"{src}/{fam}", sized, est.name, size)
            models[fam] = {
                **sm.to_dict(),
                "calls": len(idx),
                "fit_calls": len(fit_on),
                "ratio": _fit_ratio(fit_on) if fit_on else None,
            }
            for i in idx:
                pred_in[i] = sm.predict(calls[i])
                offset[i] = sm.offset
        # the fixed part (offset, unlogged tokens) opens every prompt, shared but for what is new in it
        # (``fresh``); the rest of the shared prefix is sized at the prompt's own mix of outputs and
        # other text
        extra, fresh = _compaction_unlogged(calls, pred_in)
        measured = fresh > 0  # each compaction's first call of each model: where what it added is new
        pred_in = pred_in + extra
        fixed = offset + np.array([c.unlogged for c in calls]) + extra
        ratio = np.array([0.0 if c.first else c.est_shared / max(c.est_prompt, 1) for c in calls])
        shared = np.minimum(np.round(fixed - fresh + (pred_in - fixed) * ratio), pred_in)
        first = np.array([c.first for c in calls])
        allowed = np.array(
            [
                replace(c.rules, hit_rate=1.0).cached_one(int(s), int(pin), c.idle)
                for c, s, pin in zip(calls, shared, pred_in)
            ],
            float,
        )
        logged_cached = np.array([c.logged_cached for c in calls])
        known = ~np.isnan(logged_cached)
        check = np.array([held_out(c.traj_id) for c in calls])
        # hit rates are fitted on the fit half, or on every call when that half has no logged cache
        fit_on = known & ~check if (known & ~check).any() else known
        # A run's first call may find the harness's fixed prefix (system prompt, tools) still cached
        # by the run before it: the share of that prefix read on first calls is fitted per source.
        # Both are measured against what the rules allow at the logged prompt's size: a size model that
        # is a tenth short on some runs would otherwise read as a tenth more hits, and a tenth too long
        # as a tenth of misses, which every other run's calls would then pay as cache writes.
        logged_size = np.array([c.logged_in for c in calls])
        at_logged = allowed * logged_size / np.maximum(pred_in, 1.0)
        kf = fit_on & first
        warm = 0.0
        if fit_hit_rate and kf.any() and at_logged[kf].sum() > 0:
            warm = float(min(1.0, logged_cached[kf].sum() / at_logged[kf].sum()))
        allowed[first] = np.round(allowed[first] * warm)
        rate = 1.0
        kl = fit_on & ~first
        if fit_hit_rate and kl.any() and at_logged[kl].sum() > 0:
            rate = float(logged_cached[kl].sum() / at_logged[kl].sum())
        elif not fit_hit_rate:
            rate = None
        # the same ratio per model (what `calibrate --cost --prices-out` writes), its sums kept so that
        # a model several sources call is pooled over them
        by_model: dict[str, dict[str, float]] = {}
        names = np.array([c.model_name for c in calls])
        for name in sorted(set(names.tolist()) - {""}):
            km = kl & (names == name)
            if km.any() and at_logged[km].sum() > 0:
                by_model[name] = {
                    "calls": int(km.sum()),
                    "logged_cached": float(logged_cached[km].sum()),
                    "allowed": float(at_logged[km].sum()),
                }
        if rate is None:  # the providers' rules as configured (hit rates from dtoc_rl.sim.calibrated)
            cached = np.array(
                [c.rules.cached_one(int(s), int(pin), c.idle) for c, s, pin in zip(calls, shared, pred_in)],
                float,
            )
            cached[first] = 0.0
            rate_out = None
        else:
            cached = np.where(first, allowed, np.round(allowed * min(rate, 1.0)))
            rate_out = rate
        logged_in = np.array([c.logged_in for c in calls])
        logged_usd = np.array([c.logged_dollars for c in calls])
        billed = ~np.isnan(logged_usd)  # calls whose bill the log gives (cost, or cached tokens)
        pred_usd = _dollars(calls, cached, pred_in)
        shared = np.where(first, 0.0, shared)  # the ideal cache: nothing before a run's first call
        ideal_usd = _dollars(calls, shared, pred_in)
        rel = 100.0 * (pred_in / logged_in - 1.0)
        abs_rel = np.abs(rel)
        sources[src] = {
            "trajectories": len(trajs_of[src]),
            "calls": len(calls),
            "models": sorted({c.prices.source for c in calls}),
            "estimator": est.name,
            "size_models": models,
            "first_call_warm_share": warm,
            "hit_rate": rate_out,
            "hit_rate_by_model": by_model,
            # what compactions sent that their logs lack, taken from the logged sizes themselves (as a
            # run's first call gives its unlogged prompt): how many calls were completed so
            "after_compaction": {
                "calls": int((extra > 0).sum()),
                "runs": len({calls[i].traj_id for i in np.flatnonzero(extra > 0)}),
                "median_tokens": float(np.median(extra[measured])) if measured.any() else 0.0,
            },
            "calls_billed": int(billed.sum()),
            "logged": {
                "input_tokens": float(logged_in.sum()),
                "cached_tokens": float(logged_cached[known].sum()) if known.any() else None,
                "dollars": float(logged_usd[billed].sum()),
            },
            "predicted": {
                "input_tokens": float(pred_in.sum()),
                "cached_tokens": float(cached[known].sum()) if known.any() else float(cached.sum()),
                "dollars": float(pred_usd[billed].sum()),
                "dollars_ideal_cache": float(ideal_usd[billed].sum()),
                "cached_tokens_ideal_cache": float(shared[known].sum())
                if known.any()
                else float(shared.sum()),
            },
            "error_pct": {
                "input_tokens": _pct(pred_in.sum(), logged_in.sum()),
                "cached_tokens": _pct(cached[known].sum(), logged_cached[known].sum())
                if known.any()
                else None,
                "dollars": _pct(pred_usd[billed].sum(), logged_usd[billed].sum()),
                "dollars_ideal_cache": _pct(ideal_usd[billed].sum(), logged_usd[billed].sum()),
            },
            "per_call_input_error_pct": {
                "median_abs": float(np.median(abs_rel)),
                "p90_abs": float(np.percentile(abs_rel, 90)),
                "p10": float(np.percentile(rel, 10)),
                "median": float(np.median(rel)),
                "p90": float(np.percentile(rel, 90)),
                "within_5pct": float((abs_rel <= 5).mean()),
            },
            "halves": {
                name: _errors(
                    *(x[m] for x in (pred_in, logged_in, cached, logged_cached, pred_usd)),
                    logged_usd[m],
                    billed[m],
                )
                for name, m in (("fit", ~check), ("held_out", check))
            },
            "calls_with_logged_cache": int(known.sum()),
            "calls_without_cache_hit_logged": int((logged_cached[known] == 0).sum()),
        }
        calls_out[src] = {
            "traj_id": [c.traj_id for c in calls],
            "step": [c.step for c in calls],
            "logged_in": logged_in.tolist(),
            "pred_in": pred_in.tolist(),
            "logged_cached": [None if math.isnan(x) else x for x in logged_cached.tolist()],
            "pred_cached": cached.tolist(),
            "logged_dollars": [None if math.isnan(x) else x for x in logged_usd.tolist()],
            "pred_dollars": pred_usd.tolist(),
        }
    return {"sources": sources, "calls": calls_out}


def fitted_prices(result: dict[str, Any]) -> tuple[dict[str, Prices], list[str]]:
    """A prices table (:func:`~dtoc_rl.sim.pricing.load_price_table`'s) of the models a
    :func:`bill_check` result measured a cache hit rate for, each entry ``cache_hit_rate`` alone (the
    model's list prices of each run's day, read at that rate): logged / rule-allowed cached tokens on
    the fit half of its calls, pooled over the sources that call it by the same name, at most 1.  Keyed
    by the name as logged (a router's or a deployment's cache may hit otherwise than the provider's
    own), and by the name without its ``provider/`` prefix too when only one such name was logged.
    Models whose list price has no cache discount are left out (nothing to hit).  Also the names the
    price list does not know: billed at a fallback's prices unless their entries get input and
    output."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for src in result["sources"].values():
        for name, m in src.get("hit_rate_by_model", {}).items():
            sums[name][0] += m["logged_cached"]
            sums[name][1] += m["allowed"]
    table: dict[str, Prices] = {}
    unknown: list[str] = []
    for name, (logged, allowed) in sorted(sums.items()):
        if has_list_price(name):
            listed = prices_for(normalize_family(name), name)
            if listed.cache_read >= listed.input:
                continue
        else:
            unknown.append(name)
        table[name] = Prices.hit_rate_only(round(min(1.0, logged / allowed), 3), "its logs' bill check")
    routed = defaultdict(list)
    for name in table:
        routed[name.rsplit("/", 1)[-1]].append(name)
    for bare, names in routed.items():
        if len(names) == 1 and bare not in table:
            table[bare] = table[names[0]]
    return table, unknown


def targets_met(summary: dict[str, Any], tol_pct: float = 5.0) -> dict[str, bool | None]:
    """Per source: total dollars within ±tol and per-call input tokens within ±tol (median abs error).
    None for a source whose logs give no call's bill (neither its cost nor its cached tokens), where
    the dollars cannot be checked."""
    out: dict[str, bool | None] = {}
    for src, s in summary["sources"].items():
        if not s["calls_billed"]:
            out[src] = None
            continue
        out[src] = bool(
            abs(s["error_pct"]["dollars"]) <= tol_pct
            and s["per_call_input_error_pct"]["median_abs"] <= tol_pct
        )
    return out


def in_sample(source: dict[str, Any]) -> bool:
    """Whether most of a source's calls were sized by a model fitted on all of them (too few for a
    held-out half): its errors then say how well that model fits, not how well it predicts."""
    models = source["size_models"].values()
    fitted = sum(m["calls"] for m in models if m["in_sample"])
    return 2 * fitted > sum(m["calls"] for m in models)


def plot_bill_check(result: dict[str, Any], path) -> str:
    """Predicted against logged input tokens per call, and the per-call error distribution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for src, c in result["calls"].items():
        li, pi = np.asarray(c["logged_in"]), np.asarray(c["pred_in"])
        ax1.scatter(li, pi, s=4, alpha=0.4, label=src)
        ax2.hist(np.clip(100 * (pi / li - 1), -50, 50), bins=100, histtype="step", density=True, label=src)
    lim = [1, max(max(c["logged_in"] + c["pred_in"]) for c in result["calls"].values())]
    ax1.plot(lim, lim, "k--", lw=0.8)
    ax1.set(xscale="log", yscale="log", xlabel="logged input tokens per call", ylabel="predicted")
    ax2.axvline(-5, color="k", lw=0.5)
    ax2.axvline(5, color="k", lw=0.5)
    ax2.set(xlabel="per-call input error, % (clipped to ±50)", ylabel="share of the source's calls")
    ax1.legend(fontsize=7, markerscale=3)
    fig.suptitle("bill check: the cost model against logged usage")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return str(path)


def write_calls(result: dict[str, Any], path) -> int:
    """Write one JSON line per checked call (source, trajectory, step, logged and predicted input
    tokens, cached tokens and dollars); returns the number of lines."""
    import json

    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for src, c in result["calls"].items():
            keys = [k for k in c if k not in ("traj_id", "step")]
            for i, (tid, step) in enumerate(zip(c["traj_id"], c["step"])):
                row = {"source": src, "traj_id": tid, "step": step, **{k: c[k][i] for k in keys}}
                f.write(json.dumps(row) + "\n")
                n += 1
    return n
