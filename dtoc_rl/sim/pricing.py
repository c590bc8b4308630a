"""Token prices (USD per million tokens) per model version, with prompt caching.

``input`` is the uncached input price, ``cache_read`` the price of input read
from the prompt cache, ``cache_write`` the price of input written to it (equal
to ``input`` for providers that cache automatically with no surcharge), and
``output`` the completion price.  Each entry is the provider's published list
price for one model version, with where it was read and when (``as_of``):
prices change, and two snapshots of one family can differ (``gpt-4o-2024-05-13``
had no prompt caching and cost twice ``gpt-4o-2024-08-06``).  Check them before
quoting dollar figures, and override any of them with ``Prices(...)``.

:func:`prices_for` picks the version's prices from the raw model name
(:func:`dtoc_rl.data.models.model_version`); a name with no version entry is priced
as its family, and an unknown family as ``DEFAULT_FAMILY``, each with a warning
once per name, so that a silently wrong price cannot go unnoticed.  A user's own prices
(:func:`load_price_table`) come first wherever an episode is priced: :func:`model_prices` resolves a
model against them before falling back to :func:`prices_for`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from dtoc_rl.data.models import model_version, normalize_family, plain_name

__all__ = [
    "CACHE_RULES",
    "DEFAULT_FAMILY",
    "HOUR_CACHE",
    "OPENAI_30_MINUTES",
    "PRICES",
    "PRICE_HISTORY",
    "VERSION_PRICES",
    "CacheRules",
    "Prices",
    "at_list_prices",
    "cache_regime",
    "cache_rules_for",
    "has_list_price",
    "hour_ttl",
    "load_price_table",
    "logged_ttl",
    "model_prices",
    "price_entries",
    "price_table",
    "priced_by_user",
    "prices_for",
    "retained",
    "run_day",
    "user_prices",
]


@dataclass(frozen=True)
class Prices:
    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str = ""
    as_of: str = ""  # when the source was read (YYYY-MM-DD), or the price's own date
    # A long-context tier: a call whose prompt has more than ``long_above`` tokens (0: no tier) is billed
    # at ``long_input`` times the input, cache read and cache write prices and ``long_output`` times the
    # output price, on every token of the call (OpenAI's GPT-6 above 272K, Gemini Pro above 200K).
    long_above: Any = 0
    long_input: Any = 1.0
    long_output: Any = 1.0
    # The share of the rule-allowed cached prefix the provider really reads (CacheRules.hit_rate) for a
    # model priced so, as a user's bill check measured it on their own logs (``cache_hit_rate`` in a
    # prices file; ``dtoc-rl calibrate --cost --prices-out``); None: the provider's rules as stored.
    cache_hit_rate: float | None = None

    @classmethod
    def hit_rate_only(cls, rate: float, source: str) -> Prices:
        """A prices entry that gives only ``cache_hit_rate`` (:attr:`rate_only`)."""
        return cls(None, None, None, None, source=source, cache_hit_rate=rate)  # type: ignore[arg-type]

    @property
    def rate_only(self) -> bool:
        """A prices entry that gives only ``cache_hit_rate``: the model is billed at its list prices (of the
        run's day) read at that rate, resolved by :func:`user_prices`; never billed itself."""
        return self.input is None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def per_call(cls, table: list[Prices], which: Any) -> Prices:
        """One :class:`Prices` whose numeric fields are arrays, call ``i`` at ``table[which[i]]``'s
        (:meth:`bill` then bills arrays of calls element by element)."""
        arrays = {k: np.array([getattr(p, k) for p in table])[which] for k in _NUMERIC}
        return cls(**arrays, source=" + ".join(dict.fromkeys(p.source for p in table)))

    def at(self, calls: Any) -> Prices:
        """The prices of the calls ``calls`` of :meth:`per_call`'s arrays (itself when not arrays)."""
        if not np.ndim(self.input):
            return self
        return replace(self, **{k: getattr(self, k)[calls] for k in _NUMERIC if np.ndim(getattr(self, k))})

    def per_token(self, long: bool = False) -> tuple[float, float, float]:
        """(cache read, cache write, output) in USD per token: the factors :meth:`bill` multiplies by,
        for a hot loop that keeps them in locals and computes ``c * r + w * cw + o * out`` itself
        (bit-identical to :meth:`bill` with ``uncached=0``; ``tests/test_pricing.py`` pins it).
        ``long``: the long-context tier's factors (a prompt above ``long_above``)."""
        if long:
            m, mo = self.long_input, self.long_output
            return self.cache_read * m / 1e6, self.cache_write * m / 1e6, self.output * mo / 1e6
        return self.cache_read / 1e6, self.cache_write / 1e6, self.output / 1e6

    def is_long(self, prompt):
        """Whether a call of ``prompt`` tokens is billed at the long-context tier (scalars or arrays)."""
        above = self.long_above
        if np.ndim(above) == 0 and np.ndim(prompt) == 0:
            return bool(above) and prompt > above
        return (np.asarray(above) > 0) & (np.asarray(prompt) > above)

    def bill(self, cached, written, output, uncached=0, prompt=None):
        """USD of model calls: ``cached`` prompt tokens read from the cache, ``written`` written to it,
        ``uncached`` neither (billed at ``input``; a provider without caching bills every prompt token
        so, and a prompt cache prices them at ``cache_write``), and ``output`` completion tokens, at the
        long-context tier where the whole prompt (``prompt``; default the three parts) is above it.

        The one place the dollar formula lives: the simulator, its baseline, the oracle, LiveEnv and
        the bill check all price calls with it.  Scalars or numpy arrays (element-wise, one figure
        per call).
        """
        r, w, o = self.per_token()
        short = cached * r + written * w + output * o + uncached * (self.input / 1e6)
        if type(self.long_above) is int and not self.long_above:  # no tier (arrays: calls of models)
            return short
        long = self.is_long(cached + written + uncached if prompt is None else prompt)
        if not np.any(long):
            return short
        r, w, o = self.per_token(long=True)
        at_long = cached * r + written * w + output * o + uncached * (self.input * self.long_input / 1e6)
        return np.where(long, at_long, short) if np.ndim(long) else at_long


_NUMERIC = ("input", "output", "cache_read", "cache_write", "long_above", "long_input", "long_output")

_OPENAI = "openai.com/api/pricing"
_ANTHROPIC = "anthropic.com/pricing (cache write = 5-minute lifetime)"
_CLAUDE = "platform.claude.com/docs pricing (cache write = 5-minute lifetime)"
# Long-context tiers: OpenAI from GPT-5.4 on above 272K input tokens; Gemini Pro above 200K; Claude
# Sonnet 4 and 4.5 with the 1M-token window above 200K (platform.claude.com pricing, "Long context
# pricing": $6 / $22.50, cache prices scaled alike).
_GPT_LONG: dict[str, Any] = {"long_above": 272_000, "long_input": 2.0, "long_output": 1.5}
_GEMINI_LONG: dict[str, Any] = {"long_above": 200_000, "long_input": 2.0, "long_output": 1.5}
_SONNET_1M: dict[str, Any] = {"long_above": 200_000, "long_input": 2.0, "long_output": 1.5}

#: Prices per model version (the keys :func:`dtoc_rl.data.models.model_version` returns).
VERSION_PRICES: dict[str, Prices] = {
    # The 2024-05-13 snapshot predates prompt caching (introduced 2024-10-01 for gpt-4o-2024-08-06
    # and later): every input token at the full $5.
    "gpt-4o-2024-05-13": Prices(
        5.00, 15.00, 5.00, 5.00, f"{_OPENAI} (gpt-4o-2024-05-13, no caching)", "2024-10-01"
    ),
    "gpt-4o-2024-08-06": Prices(2.50, 10.00, 1.25, 2.50, f"{_OPENAI} (gpt-4o-2024-08-06)", "2024-10-01"),
    "gpt-4o-2024-11-20": Prices(2.50, 10.00, 1.25, 2.50, f"{_OPENAI} (gpt-4o-2024-11-20)", "2024-11-20"),
    "gpt-4o-mini-2024-07-18": Prices(
        0.15, 0.60, 0.075, 0.15, f"{_OPENAI} (gpt-4o-mini-2024-07-18)", "2024-10-01"
    ),
    # GPT-4 Turbo preview: no prompt caching ever existed for it.
    "gpt-4-0125-preview": Prices(10.00, 30.00, 10.00, 10.00, f"{_OPENAI} (gpt-4-0125-preview)", "2024-04-01"),
    # GPT-5.2 and GPT-5.2-Codex: $1.75 in / $14 out, cached input $0.175 (platform.openai.com model
    # page for gpt-5.2; github/docs data/tables/copilot/models-and-pricing.yml lists both at these
    # figures).  RepoLaunch's logged per-call cost_usd (azure/gpt-5.2-*) fits them exactly.
    "gpt-5.2": Prices(1.75, 14.00, 0.175, 1.75, f"{_OPENAI} (gpt-5.2, gpt-5.2-2025-12-11)", "2026-12-01"),
    "gpt-5.2-codex": Prices(1.75, 14.00, 0.175, 1.75, f"{_OPENAI} (gpt-5.2-codex)", "2026-12-01"),
    # Other OpenAI models agents run on (list prices per 1M tokens; cached input at the stated rate).
    "gpt-5": Prices(
        1.25, 10.00, 0.125, 1.25, f"{_OPENAI} (gpt-5, gpt-5-codex, gpt-5.1, gpt-5.1-codex-max)", "2025-11-19"
    ),
    "gpt-5-mini": Prices(0.25, 2.00, 0.025, 0.25, f"{_OPENAI} (gpt-5-mini-2025-08-07)", "2025-08-07"),
    "gpt-5-nano": Prices(0.05, 0.40, 0.005, 0.05, f"{_OPENAI} (gpt-5-nano-2025-08-07)", "2025-08-07"),
    "gpt-4.1": Prices(2.00, 8.00, 0.50, 2.00, f"{_OPENAI} (gpt-4.1-2025-04-14)", "2025-04-14"),
    "gpt-4.1-mini": Prices(0.40, 1.60, 0.10, 0.40, f"{_OPENAI} (gpt-4.1-mini-2025-04-14)", "2025-04-14"),
    "gpt-4.1-nano": Prices(0.10, 0.40, 0.025, 0.10, f"{_OPENAI} (gpt-4.1-nano-2025-04-14)", "2025-04-14"),
    "o3": Prices(
        2.00, 8.00, 0.50, 2.00, f"{_OPENAI} (o3-2025-04-16, after the 2025-06 price cut)", "2025-06-10"
    ),
    "o4-mini": Prices(1.10, 4.40, 0.275, 1.10, f"{_OPENAI} (o4-mini-2025-04-16)", "2025-04-16"),
    "o3-mini": Prices(1.10, 4.40, 0.55, 1.10, f"{_OPENAI} (o3-mini-2025-01-31, o1-mini)", "2025-01-31"),
    "o1": Prices(15.00, 60.00, 7.50, 15.00, f"{_OPENAI} (o1-2024-12-17)", "2024-12-17"),
    "gpt-5-codex-mini": Prices(
        0.25, 2.00, 0.025, 0.25, f"{_OPENAI} (gpt-5-codex-mini, gpt-5.1-codex-mini)", "2025-11-13"
    ),
    # Released in 2026 (read 2026-12-06).  From GPT-5.4 on, a request above 272K input tokens is billed
    # at twice the input and cache prices and 1.5 times the output price, the whole request; from
    # GPT-5.6 on a cache write costs 1.25 times the input price (kept 30 minutes from GPT-6.1 on:
    # OPENAI_30_MINUTES).  "3P": figures read from third parties (named) that
    # cite the official page, which was not in the searched copy; "O": read on the official page.
    "gpt-5.3-codex": Prices(
        1.75,
        14.00,
        0.175,
        1.75,
        "3P: github/docs Copilot models table, ShellPilot (gpt-5.3-codex)",
        "2026-12-06",
    ),
    "gpt-5.4": Prices(2.50, 15.00, 0.25, 2.50, "3P: Copilot table, wavespeed", "2026-12-06", **_GPT_LONG),
    "gpt-5.4-mini": Prices(
        0.75, 4.50, 0.075, 0.75, "3P: github/docs Copilot table (gpt-5.4-mini)", "2026-12-06", **_GPT_LONG
    ),
    "gpt-5.4-nano": Prices(
        0.20, 1.25, 0.02, 0.20, "O: developers.openai.com models/gpt-5.4-nano", "2026-12-06", **_GPT_LONG
    ),
    "gpt-5.5": Prices(
        5.00, 30.00, 0.50, 5.00, "3P: github/docs Copilot table, Vercel (gpt-5.5)", "2026-12-06", **_GPT_LONG
    ),
    # list price; the page offered $4 / $20 / $0.40 "at least until 21 Nov 2026"
    "gpt-5.6-sol": Prices(
        5.00, 30.00, 0.50, 6.25, "O: openai model page (list price)", "2026-12-06", **_GPT_LONG
    ),
    "gpt-5.6-terra": Prices(2.00, 12.00, 0.20, 2.50, "3P: laozhang, apiyi", "2026-07-30", **_GPT_LONG),
    "gpt-5.6-luna": Prices(
        0.20, 1.20, 0.02, 0.25, "O: developers.openai.com models/gpt-5.6-luna", "2026-07-30", **_GPT_LONG
    ),
    "gpt-6-astra": Prices(
        10.00, 50.00, 1.00, 12.50, "3P: litellm, codex-token-meter", "2026-09-03", **_GPT_LONG
    ),
    "gpt-6-sol": Prices(
        2.00, 10.00, 0.20, 2.50, "3P: codexometer, PromptFuel (gpt-6-sol)", "2026-09-22", **_GPT_LONG
    ),
    "gpt-6-luna": Prices(
        0.10, 0.50, 0.01, 0.125, "O: developers.openai.com models/gpt-6-luna", "2026-09-22", **_GPT_LONG
    ),
    "gpt-6.1-sol": Prices(
        2.00, 10.00, 0.10, 2.50, "3P: Codex-Manager, litellm (gpt-6.1-sol)", "2026-09-29", **_GPT_LONG
    ),
    "gpt-6.1-terra": Prices(
        1.00, 5.00, 0.05, 1.25, "O: developers.openai.com models/gpt-6.1-terra", "2026-10-26", **_GPT_LONG
    ),
    "gpt-6.2-sol": Prices(
        2.00, 10.00, 0.10, 2.50, "O: developers.openai.com models/gpt-6.2-sol", "2026-11-17", **_GPT_LONG
    ),
    # Google AI pricing, gemini-3-pro-preview: $2 / $12, cached $0.20 up to 200k prompt tokens, $4 / $18 /
    # $0.40 above; implicit caching, no write fee.
    "gemini-3-pro-preview": Prices(
        2.00, 12.00, 0.20, 2.00, "ai.google.dev/pricing (gemini-3-pro-preview)", "2025-11-18", **_GEMINI_LONG
    ),
    "gemini-3.1-pro-preview": Prices(
        2.00,
        12.00,
        0.20,
        2.00,
        "3P: github/docs Copilot table, inference.sh (gemini-3.1-pro-preview)",
        "2026-12-06",
        **_GEMINI_LONG,
    ),
    "gemini-3.8-flash": Prices(
        0.75,
        3.75,
        0.075,
        0.75,
        "3P: litellm #39357, apiyi (gemini-3.8-flash, $1.50 / $7.50 from 2027-01-01)",
        "2026-09-02",
    ),
    "gemini-4-neon": Prices(
        3.00, 15.00, 0.15, 3.00, "3P: iyulab/TokenMeter, apidog, laozhang (gemini-4-neon)", "2026-11-18"
    ),
    "gemini-4-carbon": Prices(
        4.00,
        20.00,
        0.20,
        4.00,
        "3P: cedr, litellm #50970, laozhang (gemini-4-carbon, from 2026-12-01)",
        "2026-12-01",
    ),
    "claude-sonnet-4-20250514": Prices(
        3.00, 15.00, 0.30, 3.75, f"{_ANTHROPIC} (Claude Sonnet 4)", "2025-05-22", **_SONNET_1M
    ),
    "claude-sonnet-4-5-20250929": Prices(
        3.00, 15.00, 0.30, 3.75, f"{_ANTHROPIC} (Claude Sonnet 4.5)", "2025-09-29", **_SONNET_1M
    ),
    "claude-opus-4-5-20251101": Prices(
        5.00, 25.00, 0.50, 6.25, f"{_ANTHROPIC} (Claude Opus 4.5)", "2025-11-24"
    ),
    "claude-opus-4-1-20250805": Prices(
        15.00, 75.00, 1.50, 18.75, f"{_ANTHROPIC} (Claude Opus 4.1, Opus 4)", "2025-08-05"
    ),
    "claude-3-7-sonnet-20250219": Prices(
        3.00, 15.00, 0.30, 3.75, f"{_ANTHROPIC} (Claude Sonnet 3.7)", "2025-02-24"
    ),
    "claude-haiku-4-5-20251001": Prices(
        1.00, 5.00, 0.10, 1.25, f"{_ANTHROPIC} (Claude Haiku 4.5)", "2025-10-15"
    ),
    "claude-3-5-haiku-20241022": Prices(
        0.80, 4.00, 0.08, 1.00, f"{_ANTHROPIC} (Claude Haiku 3.5)", "2024-11-04"
    ),
    "claude-3-haiku-20240307": Prices(0.25, 1.25, 0.03, 0.30, f"{_ANTHROPIC} (Claude Haiku 3)", "2024-08-14"),
    # Released in 2026 (read 2026-12-06 on platform.claude.com, its pricing page and each model's
    # overview, "O", else third parties, "3P"): flat across their 1M-token window but for Haiku 5.5 (a
    # prompt above 100K tokens pays five times every rate, output included).  Claude 4.7 and later use a
    # newer tokenizer (Haiku 5.5's page: about 30% more tokens than Haiku 4.5 for the same text).
    "claude-opus-4-6": Prices(5.00, 25.00, 0.50, 6.25, f"O: {_CLAUDE} (Claude Opus 4.6)", "2026-12-06"),
    "claude-opus-4-7": Prices(5.00, 25.00, 0.50, 6.25, f"O: {_CLAUDE} (Claude Opus 4.7)", "2026-12-06"),
    "claude-opus-4-8": Prices(5.00, 25.00, 0.50, 6.25, f"O: {_CLAUDE} (Claude Opus 4.8)", "2026-12-06"),
    "claude-opus-5": Prices(5.00, 25.00, 0.50, 6.25, f"O: {_CLAUDE} (Claude Opus 5)", "2026-12-06"),
    "claude-opus-5-5": Prices(4.00, 20.00, 0.20, 5.00, f"O: {_CLAUDE} (Claude Opus 5.5)", "2026-12-06"),
    "claude-sonnet-4-6": Prices(3.00, 15.00, 0.30, 3.75, f"O: {_CLAUDE} (Claude Sonnet 4.6)", "2026-12-06"),
    "claude-sonnet-5": Prices(2.00, 10.00, 0.20, 2.50, f"O: {_CLAUDE} (Claude Sonnet 5)", "2026-12-06"),
    # $0.20 cache reads at launch (O); cut to $0.10 from 2026-10-07 (3P: claudit, PromptFuel, claude-usage)
    "claude-sonnet-5-5": Prices(
        2.00, 10.00, 0.10, 2.50, f"O+3P: {_CLAUDE} (Claude Sonnet 5.5)", "2026-10-07"
    ),
    "claude-haiku-5-5": Prices(
        0.10,
        0.50,
        0.01,
        0.125,
        f"O: {_CLAUDE} (Claude Haiku 5.5; cache read 3P)",
        "2026-10-07",
        long_above=100_000,
        long_input=5.0,
        long_output=5.0,
    ),
    "claude-fable-5": Prices(
        10.00, 50.00, 1.00, 12.50, f"O: {_CLAUDE} (Claude Fable 5, Mythos 5)", "2026-12-06"
    ),
    "claude-fable-5-1": Prices(
        10.00, 50.00, 0.25, 12.50, f"O: {_CLAUDE} (Claude Fable 5.1, Mythos 5.1)", "2026-12-06"
    ),
    "claude-fable-5-2": Prices(
        8.00, 40.00, 0.20, 10.00, "3P: laozhang, claude-usage (Claude Fable 5.2)", "2026-12-01"
    ),
    # Google AI pricing for Gemini 2.5 as listed at mid-2025 (prompts <= 200k tokens; cached input at
    # a quarter of the input price, no write fee; storage per hour is not billed per call).  Google has
    # changed the cached rate since: give --prices for a bill to the cent.
    "gemini-2.5-pro": Prices(
        1.25,
        10.00,
        0.31,
        1.25,
        "ai.google.dev/pricing (gemini-2.5-pro, mid-2025)",
        "2025-06-17",
        **_GEMINI_LONG,
    ),
    "gemini-2.5-flash": Prices(
        0.30, 2.50, 0.075, 0.30, "ai.google.dev/pricing (gemini-2.5-flash, mid-2025)", "2025-06-17"
    ),
    "gemini-2.5-flash-lite": Prices(
        0.10, 0.40, 0.025, 0.10, "ai.google.dev/pricing (gemini-2.5-flash-lite, mid-2025)", "2025-07-22"
    ),
    # Google AI pricing, gemini-3-flash-preview (released 2025-12-17): output includes thinking tokens;
    # cached input at a tenth of the input price, no write fee.
    "gemini-3-flash-preview": Prices(
        0.50, 3.00, 0.05, 0.50, "ai.google.dev/gemini-api/docs/pricing (gemini-3-flash-preview)", "2025-12-17"
    ),
    # DeepSeek V2 API (2024-08): $0.14 / $0.28, disk cache hits $0.014, no write fee.
    "deepseek-chat-v2": Prices(
        0.14, 0.28, 0.014, 0.14, "api-docs.deepseek.com (deepseek-chat V2)", "2024-08-02"
    ),
    "deepseek-coder-v2": Prices(
        0.14, 0.28, 0.014, 0.14, "api-docs.deepseek.com (deepseek-coder V2)", "2024-08-02"
    ),
    # Volcengine Doubao-pro-128k: CNY 5 / 9 per million, at 7.2 CNY/USD; no caching.
    "doubao-pro-128k": Prices(
        0.70, 1.25, 0.70, 0.70, "volcengine.com pricing (Doubao-pro-128k, CNY->USD 7.2)", "2024-08-25"
    ),
    # Moonshot's list prices (platform.moonshot.ai/docs/pricing/chat, as archived 2026-03-26): automatic
    # context caching, hits at the cache-hit price, no write fee.
    "kimi-k2-0905-preview": Prices(
        0.60, 2.50, 0.15, 0.60, "platform.moonshot.ai pricing (kimi-k2-0905-preview)", "2026-03-26"
    ),
    "kimi-k2-0711-preview": Prices(
        0.60, 2.50, 0.15, 0.60, "platform.moonshot.ai pricing (kimi-k2-0711-preview)", "2026-03-26"
    ),
    "kimi-k2.5": Prices(0.60, 3.00, 0.10, 0.60, "platform.moonshot.ai pricing (kimi-k2.5)", "2026-03-26"),
    # Z.ai's international list prices for GLM-4.5, 4.6 and 4.7 (docs.z.ai pricing): cache hits at about a
    # fifth of the input price, cache storage free, so no write fee (docs.z.ai/help/faq).
    "glm-4.6": Prices(0.60, 2.20, 0.11, 0.60, "docs.z.ai pricing (glm-4.5, glm-4.6, glm-4.7)", "2025-09-30"),
    # xAI's list prices (docs.x.ai/docs/models; cached input at the stated rate, no write fee).
    "grok-code-fast-1": Prices(0.20, 1.50, 0.02, 0.20, "docs.x.ai models (grok-code-fast-1)", "2025-08-28"),
    "grok-4-1-fast": Prices(
        0.20, 0.50, 0.05, 0.20, "docs.x.ai models (grok-4-1-fast, reasoning and non-reasoning)", "2025-11-19"
    ),
    "grok-4": Prices(3.00, 15.00, 0.75, 3.00, "docs.x.ai models (grok-4-0709)", "2025-07-09"),
    "grok-3-fast": Prices(
        5.00, 25.00, 1.25, 5.00, "docs.x.ai models (grok-3-fast, as archived 2025-06-02)", "2025-06-02"
    ),
    "grok-3": Prices(
        3.00, 15.00, 0.75, 3.00, "docs.x.ai models (grok-3, as archived 2025-06-02)", "2025-06-02"
    ),
    "grok-3-mini": Prices(
        0.30, 0.50, 0.075, 0.30, "docs.x.ai models (grok-3-mini, as archived 2025-06-02)", "2025-06-02"
    ),
    # MiniMax's pay-as-you-go prices (platform.minimax.io/docs/guides/pricing-paygo): an explicit cache
    # with a write fee above the input price, as Anthropic's.
    "minimax-m2.5": Prices(
        0.30, 1.20, 0.03, 0.375, "platform.minimax.io pricing (MiniMax-M2.5)", "2026-02-12"
    ),
    "minimax-m2.7": Prices(
        0.30, 1.20, 0.06, 0.375, "platform.minimax.io pricing (MiniMax-M2.7)", "2026-04-01"
    ),
    # Mistral's La Plateforme list prices (mistral.ai/pricing); no cached-input discount published.
    "devstral-medium": Prices(0.40, 2.00, 0.40, 0.40, "mistral.ai pricing (devstral-medium)", "2025-07-10"),
    "devstral-small": Prices(0.10, 0.30, 0.10, 0.10, "mistral.ai pricing (devstral-small)", "2025-07-10"),
    "codestral": Prices(0.30, 0.90, 0.30, 0.30, "mistral.ai pricing (codestral)", "2025-07-30"),
    # gpt-oss is open-weight (OpenAI sells no API for it): priced as one host lists it, without a cache
    # discount (inference-docs.cerebras.ai, gpt-oss-120b).  An estimate: hosts differ several-fold.
    "gpt-oss-120b": Prices(
        0.35, 0.75, 0.35, 0.35, "estimate: inference-docs.cerebras.ai (gpt-oss-120b)", "2025-08-05"
    ),
}

#: Prices per family: the fallback for a name with no version entry (the family's usual version).
PRICES: dict[str, Prices] = {
    "gpt-4o": VERSION_PRICES["gpt-4o-2024-08-06"],
    "gpt-4o-mini": VERSION_PRICES["gpt-4o-mini-2024-07-18"],
    "gpt-4": VERSION_PRICES["gpt-4-0125-preview"],
    "gpt-5": VERSION_PRICES["gpt-5.2"],
    "gemini-3-pro": VERSION_PRICES["gemini-3-pro-preview"],
    "claude-sonnet": VERSION_PRICES["claude-sonnet-4-5-20250929"],
    "claude-opus": VERSION_PRICES["claude-opus-4-5-20251101"],
    # SWE-agent-LM-32B is self-hosted (a Qwen2.5-Coder-32B fine-tune); priced as hosted
    # Qwen2.5-Coder-32B-Instruct ($0.20 / $0.60, Together/OpenRouter list prices), cached input at
    # half price.  An estimate: the logs carry no real cost.
    "qwen-coder": Prices(
        0.20, 0.60, 0.10, 0.20, "estimate: hosted Qwen2.5-Coder-32B list prices", "2025-05-11"
    ),
    "gpt-4.1": VERSION_PRICES["gpt-4.1"],
    "openai-o": VERSION_PRICES["o3"],
    "claude-haiku": VERSION_PRICES["claude-haiku-4-5-20251001"],
    "gemini-2.5-pro": VERSION_PRICES["gemini-2.5-pro"],
    "gemini": VERSION_PRICES["gemini-2.5-flash"],
    "deepseek-chat": VERSION_PRICES["deepseek-chat-v2"],
    "deepseek-coder": VERSION_PRICES["deepseek-coder-v2"],
    "doubao-pro": VERSION_PRICES["doubao-pro-128k"],
    "kimi": VERSION_PRICES["kimi-k2-0905-preview"],
    "glm": VERSION_PRICES["glm-4.6"],
    "grok": VERSION_PRICES["grok-4"],
    "minimax": VERSION_PRICES["minimax-m2.5"],
    "mistral": VERSION_PRICES["devstral-medium"],
    "gpt-oss": VERSION_PRICES["gpt-oss-120b"],
    "gpt-6": VERSION_PRICES["gpt-6-sol"],
    "claude-fable": VERSION_PRICES["claude-fable-5-1"],
}

#: Earlier list prices of versions whose price changed: (the day the next prices took effect, the prices
#: before it), oldest first.  A run is billed at those of the day of its first call (:func:`run_day`);
#: a live session at today's (VERSION_PRICES).
PRICE_HISTORY: dict[str, tuple[tuple[str, Prices], ...]] = {
    # cache reads $0.20 at launch (its page), $0.10 from 2026-10-07 (3P: claudit, PromptFuel, claude-usage)
    "claude-sonnet-5-5": (
        (
            "2026-10-07",
            Prices(2.00, 10.00, 0.20, 2.50, f"O: {_CLAUDE} (Claude Sonnet 5.5, launch)", "2026-09-28"),
        ),
    ),
    # the launch prices, cut on 2026-07-30 (3P: laozhang, apiyi, splitrail #232)
    "gpt-5.6-terra": (
        (
            "2026-07-30",
            Prices(2.50, 15.00, 0.25, 3.125, "3P: laozhang, apiyi (launch)", "2026-07-09", **_GPT_LONG),
        ),
    ),
    "gpt-5.6-luna": (
        (
            "2026-07-30",
            Prices(1.00, 6.00, 0.10, 1.25, "3P: laozhang, apiyi (launch)", "2026-07-09", **_GPT_LONG),
        ),
    ),
    # $2 / $10 / $0.10 until 2026-11-30, $4 / $20 / $0.20 from 2026-12-01 (3P: cedr, litellm, laozhang)
    "gemini-4-carbon": (
        ("2026-12-01", Prices(2.00, 10.00, 0.10, 2.00, "3P: cedr, litellm (launch)", "2026-11-10")),
    ),
}

#: Unknown families are priced like this one (a mid-priced frontier model with caching).
DEFAULT_FAMILY = "gpt-4o"

_warned: set[str] = set()
# Model names come from logs and from clients of the service: the names warned about are kept (and
# warned about) up to this many, so that a client sending new names cannot grow memory or the log.
MAX_WARNED = 100


def warned() -> tuple[str, ...]:
    """The keys of the price warnings given so far in this process (for :func:`mark_warned`)."""
    return tuple(_warned)


def mark_warned(keys: Iterable[str]) -> None:
    """Count these price warnings as given: a worker process told what its parent already said."""
    for k in keys:
        if len(_warned) <= MAX_WARNED:
            _warned.add(k)


def _warn_once(key: str, message: str) -> None:
    if key in _warned or len(_warned) > MAX_WARNED:
        return
    _warned.add(key)
    if len(_warned) > MAX_WARNED:
        message = f"more than {MAX_WARNED} models without a price; the rest are priced without a warning"
    warnings.warn(message, stacklevel=3)


def has_list_price(model: str) -> bool:
    """Whether the price table prices ``model`` itself (its version, or its family's own undated name),
    not by falling back to its family's or the default's prices."""
    return _list_prices(normalize_family(model), model)[1] is None


def prices_for(family: str | None, model_raw: str | None = None, when: str | None = None) -> Prices:
    """Prices of the version ``model_raw`` names; else of ``family``; else of ``DEFAULT_FAMILY``.
    ``when``: the day a run was made (``YYYY-MM-DD``; :func:`run_day`), for a version whose price changed
    (:data:`PRICE_HISTORY`); None: today's list prices."""
    p, fallback = _list_prices(family, model_raw, when)
    if fallback is not None:
        _warn_once(*fallback)
    return p


def _list_prices(
    family: str | None, model_raw: str | None, when: str | None = None
) -> tuple[Prices, tuple[str, str] | None]:
    """:func:`prices_for` without its warning: the prices, and (key, message) when they are a fallback."""
    version = model_version(model_raw)
    if version in VERSION_PRICES:
        for changed, before in PRICE_HISTORY.get(version, ()) if when else ():
            if when < changed:
                return before, None
        return VERSION_PRICES[version], None
    # a name is shown as far as a reader needs it (a log or a client may send one of any length)
    shown = repr(model_raw if model_raw is None or len(model_raw) <= 100 else model_raw[:100] + "…")
    if family in PRICES:
        if not model_raw:
            return PRICES[family], None
        if family == plain_name(model_raw):
            # the family's own undated name (gpt-4o): priced as the version it names today, as an
            # undated name of any other model is, without a warning on every run that logs it
            return PRICES[family], None
        msg = f"no price for model version {shown}: priced as its family {family!r} ({PRICES[family].source})"
        return PRICES[family], (f"v:{model_raw}", msg)
    if not model_raw and family in (None, "other"):  # nothing named it yet (a session before its answer)
        msg = (
            f"a run names no model: priced as {DEFAULT_FAMILY} (ingest --model NAME names a log's model; a "
            "live session takes it from its first answer)"
        )
        return PRICES[DEFAULT_FAMILY], (f"f:{family}:{model_raw}", msg)
    named = shown if model_raw else repr(family)
    msg = f"no price for model {named} (family {family!r}): priced as {DEFAULT_FAMILY}"
    return PRICES[DEFAULT_FAMILY], (f"f:{family}:{model_raw}", msg)


def model_prices(
    model: str | None, family: str | None, table: Mapping[str, Prices] | None = None, when: str | None = None
) -> Prices:
    """The prices of ``model``: the user's ``table`` entry for its name (exact or case-insensitive, with or
    without a ``provider/`` prefix), else for its family, else the list prices of its version or family
    on the day ``when`` (:func:`prices_for`, which warns once when it falls back)."""
    return user_prices(model, family, table, when) or prices_for(family, model or None, when)


def run_day(timestamps: Any) -> str | None:
    """The day (``YYYY-MM-DD``, UTC) of the first known of a run's call timestamps (seconds since the
    epoch; NaN unknown), None when none is known: the day whose list prices bill the run."""
    if timestamps is None:
        return None
    ts = np.asarray(timestamps, np.float64)
    ts = ts[np.isfinite(ts) & (ts > 0)]
    if not len(ts):
        return None
    return datetime.fromtimestamp(float(ts.min()), tz=timezone.utc).date().isoformat()


def user_prices(
    model: str | None, family: str | None, table: Mapping[str, Prices] | None, when: str | None = None
) -> Prices | None:
    """The prices the user's ``table`` gives ``model`` (see :func:`model_prices`), or None: its entry, or
    for an entry that gives only a cache hit rate (:attr:`Prices.rate_only`) the model's list prices on
    the day ``when`` with that rate."""
    entry = _user_entry(model, family, table)
    return None if entry is None else at_list_prices(entry, model, family, when)


def at_list_prices(entry: Prices, model: str | None, family: str | None, when: str | None = None) -> Prices:
    """``entry`` itself, or for one that gives only a cache hit rate (:attr:`Prices.rate_only`) the
    model's list prices on the day ``when`` with that rate."""
    if not entry.rate_only:
        return entry
    listed = prices_for(family, model or None, when)
    return replace(listed, cache_hit_rate=entry.cache_hit_rate, source=f"{listed.source}; {entry.source}")


def priced_by_user(model: str | None, family: str | None, table: Mapping[str, Prices] | None) -> bool:
    """Whether the user's ``table`` prices ``model`` itself, not only its cache hit rate: what lets the
    service and the proxy serve a model of a family the policy never saw (its prices stand for it)."""
    entry = _user_entry(model, family, table)
    return entry is not None and not entry.rate_only


def _user_entry(model: str | None, family: str | None, table: Mapping[str, Prices] | None) -> Prices | None:
    # the entry for the model's name (exact, then any case), the name without a provider/ prefix, its family
    if not table:
        return None
    names = [n for n in (model, (model or "").rsplit("/", 1)[-1], family) if n]
    lower = {k.lower(): v for k, v in table.items()}
    for n in names:
        if n in table:
            return table[n]
        if n.lower() in lower:
            return lower[n.lower()]
    return None


def price_entries(table: Mapping[str, Prices]) -> dict[str, dict[str, float]]:
    """A table of :class:`Prices` by model as :func:`load_price_table` reads one back (USD per million
    tokens): what a checkpoint or a log keeps of the prices it was given."""
    keys = ("input", "output", "cache_read", "cache_write")
    out: dict[str, dict[str, float]] = {}
    for model, p in table.items():
        if p.rate_only:
            out[model] = {"cache_hit_rate": p.cache_hit_rate}
            continue
        out[model] = {k: getattr(p, k) for k in keys}
        if p.long_above:  # a tier only where there is one: older readers take the plain entries
            out[model].update({k: getattr(p, k) for k in _TIER})
        if p.cache_hit_rate is not None:
            out[model]["cache_hit_rate"] = p.cache_hit_rate
    return out


def load_price_table(source: str | Path) -> dict[str, Prices]:
    """A user's prices, ``{model: {input, output, cache_read, cache_write}}`` in USD per million
    tokens, from a JSON or YAML file or an inline JSON object.  ``cache_read`` and ``cache_write``
    default to ``input`` (no caching discount); a long-context tier is ``long_above`` (prompt tokens),
    ``long_input`` and ``long_output`` (the factors above it; see :class:`Prices`).  Errors are
    one-line ValueErrors naming the entry."""
    text = str(source)
    inline = text.lstrip()[:1] in ("{", "[")
    source = "(inline JSON)" if inline else source
    if not inline:
        path = Path(text)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(
                f"prices file {path}: cannot read it ({getattr(e, 'strerror', None) or e})"
            ) from None
    try:
        import yaml

        data = yaml.safe_load(text)  # JSON is YAML
    except Exception as e:
        raise ValueError(f"prices {source}: not JSON or YAML ({str(e).splitlines()[0]})") from None
    return price_table(data, str(source))


def price_table(data: Any, source: str) -> dict[str, Prices]:
    """A parsed price table (``{model: {input, output, cache_read, cache_write}}``) checked, as
    :func:`load_price_table` reads one; ``source`` names it in the one-line ValueErrors."""
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"prices {source}: expected an object {{model: {{input, output, cache_read, cache_write}}}}"
        )
    if all(k in _ENTRY_KEYS for k in data):  # one entry
        raise ValueError(
            f"prices {source}: a table by model name, {{model: {{input, output, ...}}}}, not one entry "
            f'(give it as {{"MODEL": {{...}}}})'
        )
    out = {str(model): _entry(entry, f"prices {source}: {model!r}", source) for model, entry in data.items()}
    _warn_uncached(
        f"prices {source}",
        [str(m) for m, e in data.items() if "cache_read" not in e and not out[str(m)].rate_only],
    )
    return out


def _entry(entry: Any, where: str, source: str) -> Prices:
    """One ``{input, output, cache_read, cache_write}`` entry checked (``where`` names it in the
    one-line ValueErrors); cache_read and cache_write default to input."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected an object with input, output, cache_read, cache_write")
    unknown = set(entry) - set(_ENTRY_KEYS)
    rate_only = set(entry) == {"cache_hit_rate"}
    if unknown or (not rate_only and ("input" not in entry or "output" not in entry)):
        raise ValueError(
            f"{where}: needs input and output (cache_read, cache_write, cache_hit_rate, "
            f"{', '.join(_TIER)} optional), or cache_hit_rate alone (list prices at that hit rate), got "
            f"{sorted(entry)}"
        )
    if rate_only:
        return Prices.hit_rate_only(_hit_rate(entry, where), f"user prices ({source})")
    vals: dict[str, Any] = {}
    for k in ("input", "output", "cache_read", "cache_write"):
        v = entry.get(k, entry["input"])
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(
                f"{where}: {k} must be a non-negative number of USD per million tokens, got {v!r}"
            )
        vals[k] = float(v)
    for k, default in _TIER.items():
        v = entry.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}: {k} must be a non-negative number ({_TIER_HELP[k]}), got {v!r}")
        vals[k] = int(v) if k == "long_above" else float(v)
    if vals["long_above"] != entry.get("long_above", 0):
        raise ValueError(f"{where}: long_above must be a whole number of tokens, got {entry['long_above']!r}")
    if "cache_hit_rate" in entry:
        vals["cache_hit_rate"] = _hit_rate(entry, where)
    return Prices(**vals, source=f"user prices ({source})")


def _hit_rate(entry: Mapping[str, Any], where: str) -> float:
    rate = entry["cache_hit_rate"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(
            f"{where}: cache_hit_rate must be a number from 0 to 1 (the share of the prefix its "
            f"provider's cache rules allow that the provider really reads), got {rate!r}"
        )
    return float(rate)


#: A price entry's long-context tier (Prices.long_above, long_input, long_output) and its defaults.
_TIER: dict[str, float] = {"long_above": 0, "long_input": 1.0, "long_output": 1.0}
_TIER_HELP = {
    "long_above": "prompt tokens above which a call is billed at the tier; 0: none",
    "long_input": "the factor of the input and cache prices above long_above",
    "long_output": "the factor of the output price above long_above",
}
#: The keys of a prices file's entry (one-entry tables are refused by them).
_ENTRY_KEYS = ("input", "output", "cache_read", "cache_write", *_TIER, "cache_hit_rate")


def _warn_uncached(where: str, models: list[str] | None = None) -> None:
    """Say that entries without cache_read bill cached tokens at the input price (``models``: the
    table's entries that lack it, none to say; None: one entry, named by ``where``)."""
    # said, not assumed: a provider that caches bills its reads far below the input price
    if models is not None and not models:
        return
    shown = ""
    if models:
        more = f" and {len(models) - 5} more" if len(models) > 5 else ""
        shown = " for " + ", ".join(repr(m) for m in models[:5]) + more
    warnings.warn(
        f"{where}: no cache_read{shown}: cached prompt tokens are billed at the input price (no "
        "caching discount); give cache_read if the provider caches prompts",
        stacklevel=3,
    )


def as_price_table(table: Mapping[str, Any], source: str) -> dict[str, Prices]:
    """A table of :class:`Prices` by model name, an entry given as a plain ``{input, output, cache_read,
    cache_write}`` mapping read as :func:`load_price_table` reads one (``source`` names the table in
    its one-line ValueErrors)."""
    if not isinstance(table, Mapping):
        raise ValueError(
            f"{source}: expected {{model: Prices or {{input, output, cache_read, cache_write}}}}, "
            f"got {type(table).__name__}"
        )
    out = {str(k): v for k, v in table.items() if isinstance(v, Prices)}
    plain = {k: v for k, v in table.items() if not isinstance(v, Prices)}
    if plain:
        if all(k in _ENTRY_KEYS for k in plain):  # one entry
            raise ValueError(
                f"{source}: a table by model name, {{model: {{input, output, ...}}}}, not one entry"
            )
        out.update(price_table(plain, source))
    return out


def as_prices(prices: Prices | Mapping[str, Any], source: str) -> Prices:
    """One model's :class:`Prices`, or a plain ``{input, output, cache_read, cache_write}`` mapping read
    as :func:`load_price_table` reads an entry."""
    if isinstance(prices, Prices):
        return prices
    if not isinstance(prices, Mapping):
        raise ValueError(f"{source}: expected Prices or {{input, output, cache_read, cache_write}}, got "
                         f"{type(prices).__name__}")  # fmt: skip
    out = _entry(prices, source, source)
    if out.rate_only:  # one set of prices for every run: no model's list prices to read it at
        raise ValueError(f"{source}: needs input and output, not cache_hit_rate alone")
    if "cache_read" not in prices:
        _warn_uncached(source)
    return out


#: The three cache regimes results are grouped by (families priced 50x apart must not be pooled).
CACHE_REGIMES = ("no caching", "discount, no write premium", "write premium")


def cache_regime(p: Prices) -> str:
    """Which of :data:`CACHE_REGIMES` a price table belongs to: no discount on cache reads; a read
    discount with writes at the input price (OpenAI, Gemini, DeepSeek); or a write premium
    (Anthropic), which makes every re-written suffix dearer than the uncached input."""
    if p.cache_read >= p.input:
        return CACHE_REGIMES[0]
    return CACHE_REGIMES[2] if p.cache_write > p.input else CACHE_REGIMES[1]


# -- prompt caching rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheRules:
    """When a provider really reads a prompt's prefix from its cache.

    The simulator's ideal cache reads, at every call, the whole prefix shared with the previous
    call.  Providers read less: nothing for prompts under ``min_prefix`` tokens, the shared prefix
    rounded down to ``step`` tokens, nothing once the cache sat idle longer than ``ttl`` seconds
    (measured between the logged call timestamps; unknown timestamps count as no wait), and, for
    implicit caches that do not guarantee a hit, only ``hit_rate`` of it on average (fitted on logs
    that report cached tokens: ``dtoc-rl calibrate --cost``).
    """

    provider: str
    min_prefix: int = 1024
    step: int = 1
    ttl: float = float("inf")
    hit_rate: float = 1.0
    source: str = ""

    def cached(self, ideal, prompt, idle):
        """Cached tokens the provider bills, from the ideal cached prefix, the prompt size and the
        seconds since the previous call (numpy arrays or scalars; an int for scalar input)."""
        c = np.asarray(ideal, np.float64)
        c = np.where((c >= self.min_prefix) & (np.asarray(prompt) >= self.min_prefix), c, 0.0)
        if self.step > 1:
            c = np.floor(c / self.step) * self.step
        c = np.where(np.asarray(idle, np.float64) > self.ttl, 0.0, c)  # NaN idle: no wait known
        if self.hit_rate != 1.0:
            c = np.round(c * self.hit_rate)
        return int(c) if c.ndim == 0 else c.astype(np.int64)

    def expired(self, idle: float) -> bool:
        """Whether a cache that sat ``idle`` seconds is gone (NaN, an unknown wait: no)."""
        return idle > self.ttl

    def cached_one(self, ideal: int, prompt: int, idle: float) -> int:
        """:meth:`cached` for one call, in plain Python (the simulator calls it per model call)."""
        if ideal < self.min_prefix or prompt < self.min_prefix or self.expired(idle):
            return 0
        c = ideal - ideal % self.step if self.step > 1 else ideal
        return c if self.hit_rate == 1.0 else round(c * self.hit_rate)

    def to_dict(self) -> dict:
        return asdict(self)


#: Per provider.  Figures read on 2026-12-01.
CACHE_RULES: dict[str, CacheRules] = {
    # Automatic caching from 1,024 tokens, hits in 128-token increments, cleared after 5-10 minutes
    # idle (platform.openai.com/docs/guides/prompt-caching); 5 minutes taken.  RepoLaunch's per-call
    # costs give cached counts of 1,024 + 128k tokens.
    "openai": CacheRules("openai", 1024, 128, 300.0, 1.0, "platform.openai.com/docs/guides/prompt-caching"),
    # Explicit breakpoints; minimum cacheable prompt 1,024 tokens (Sonnet/Opus), 5-minute lifetime
    # refreshed by each hit (docs.anthropic.com/en/docs/build-with-claude/prompt-caching).  The
    # 20-block look-back of a breakpoint is not modelled: agent harnesses put the breakpoint at
    # the end of the prompt, and changes further back than 20 blocks then miss entirely.
    "anthropic": CacheRules("anthropic", 1024, 1, 300.0, 1.0, "docs.anthropic.com prompt-caching"),
    # Implicit caching, minimum 4,096 tokens for Gemini 3 Pro Preview, no lifetime documented, hits
    # not guaranteed (ai.google.dev/gemini-api/docs/caching); hit_rate fitted on the mini-swe-agent
    # gemini-3-pro logs (dtoc_rl.sim.calibrated.CACHE_HIT_RATES).
    "google": CacheRules("google", 4096, 1, float("inf"), 1.0, "ai.google.dev/gemini-api/docs/caching"),
    # Disk cache in 64-token units, hours of lifetime (api-docs.deepseek.com/guides/kv_cache).
    "deepseek": CacheRules("deepseek", 64, 64, float("inf"), 1.0, "api-docs.deepseek.com/guides/kv_cache"),
    # No discount (cache_read == input): the rules change nothing but are kept for symmetry.
    "none": CacheRules("none", 0, 1, float("inf"), 1.0, "no prompt caching"),
}


#: Anthropic's extended cache lifetime (a breakpoint's ``"ttl": "1h"``; Claude Code writes every cache
#: so from 2.1.x): its writes cost ``HOUR_WRITE`` times the input price instead of 1.25 times
#: (docs.anthropic.com/en/docs/build-with-claude/prompt-caching, "1-hour cache duration").
HOUR_CACHE = 3600.0
HOUR_WRITE = 2.0


def logged_ttl(usages: Iterable[Any]) -> float | None:
    """The cache lifetime a run's logged usage says (``HOUR_CACHE`` when most of the tokens it wrote to
    the cache were Anthropic's 1-hour writes, ``Usage.cache_write_1h_tokens``), None when it says none
    (the provider's documented lifetime holds)."""
    writes = hour = 0
    for u in usages:
        if u is not None:
            writes += u.cache_write_tokens or 0
            hour += u.cache_write_1h_tokens or 0
    return hour_ttl(writes, hour)


def hour_ttl(writes: int, hour: int) -> float | None:
    """``HOUR_CACHE`` when most of the ``writes`` tokens written to a cache were 1-hour ones (``hour``),
    else None: :func:`logged_ttl` of running counts, for a live session that adds a response at a time."""
    return HOUR_CACHE if hour and 2 * hour >= writes else None


def retained(prices: Prices, ttl: float | None) -> Prices:
    """``prices`` for a run whose log says its cache is kept ``ttl`` seconds: with an hour's retention a
    provider that charges for writes (Anthropic: cache_write above input) charges ``HOUR_WRITE`` times
    the input price for them; anything else is priced as listed."""
    if ttl != HOUR_CACHE or not prices.cache_write > prices.input:
        return prices
    hour = HOUR_WRITE * prices.input
    return replace(prices, cache_write=hour, source=f"{prices.source}; 1-hour cache writes")


def cache_expired(
    idle: float | None, family: str | None, model_raw: str | None = None, ttl: float | None = None
) -> bool:
    """Whether a model's prompt cache is gone after ``idle`` seconds (None or NaN: a wait not known):
    ``ttl`` when given (a provider's extended retention), else its provider's documented lifetime.
    What a live caller tells a policy as ``info["cache_cold"]``."""
    if idle is None:
        return False
    return idle > ttl if ttl is not None else cache_rules_for(family, model_raw).expired(idle)


_PROVIDER_OF_FAMILY = (
    ("gpt", "openai"),
    ("openai", "openai"),
    ("claude", "anthropic"),
    ("gemini", "google"),
    ("deepseek", "deepseek"),
)


@lru_cache(maxsize=256)  # called for every episode the simulator is built for
def cache_rules_for(
    family: str | None, model_raw: str | None = None, ttl: float | None = None, hit_rate: float | None = None
) -> CacheRules:
    """The caching rules of the provider serving ``family`` (hit rates fitted where measured); ``ttl``:
    the lifetime a run's log says its cache has (Anthropic's 1-hour writes, :func:`logged_ttl`), which
    replaces the documented one for Anthropic's models, else as documented; ``hit_rate``: the user's
    own (``Prices.cache_hit_rate``), which replaces the stored one."""
    from dtoc_rl.sim.calibrated import CACHE_HIT_RATES

    fam = (family or "").lower()
    provider = next((prov for prefix, prov in _PROVIDER_OF_FAMILY if fam.startswith(prefix)), "openai")
    # the list prices' regime, without prices_for's warning: whoever bills the model resolves its prices
    # (a user's table first) and warns there if they fall back
    listed = _list_prices(family, model_raw)[0]
    if listed.cache_read >= listed.input:
        provider = "none"
    rules = CACHE_RULES[provider]
    rate = CACHE_HIT_RATES.get(model_version(model_raw) or "", CACHE_HIT_RATES.get(fam))
    if hit_rate is not None and rules.provider != "none":
        rules = replace(rules, hit_rate=hit_rate, source=f"{rules.source}; the user's hit rate")
    elif rate is not None:
        rules = replace(rules, hit_rate=rate)
    if ttl is not None and rules.provider == "anthropic":
        rules = replace(rules, ttl=ttl)
    elif rules.provider == "openai" and model_version(model_raw) in OPENAI_30_MINUTES:
        rules = replace(rules, ttl=1800.0, source=f"{rules.source}; 30-minute retention")
    return rules


#: OpenAI models whose listed cache write keeps a prefix 30 minutes (their model pages, read 2026-12-06:
#: "30-min" writes at 1.25 times the input price, 12-hour ones at 2.5 times): a longer wait than the
#: earlier models' 5-10 minutes before the cache is gone.
OPENAI_30_MINUTES = frozenset({"gpt-6.1-sol", "gpt-6.1-terra", "gpt-6.2-sol"})
