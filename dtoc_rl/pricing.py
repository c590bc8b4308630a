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
(:func:`dtoc_rl.models.model_version`); a name with no version entry is priced
as its family, and an unknown family as ``DEFAULT_FAMILY``, each with a warning
once per name, so that a silently wrong price cannot go unnoticed.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

from dtoc_rl.models import model_version

__all__ = ["DEFAULT_FAMILY", "PRICES", "VERSION_PRICES", "Prices", "prices_for"]


@dataclass(frozen=True)
class Prices:
    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str = ""
    as_of: str = ""  # when the source was read (YYYY-MM-DD), or the price's own date

    def to_dict(self) -> dict:
        return asdict(self)


_OPENAI = "openai.com/api/pricing"
_ANTHROPIC = "anthropic.com/pricing (cache write = 5-minute lifetime)"

#: Prices per model version (the keys :func:`dtoc_rl.models.model_version` returns).
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
    # Google AI pricing, gemini-3-pro-preview, prompts <= 200k tokens; implicit caching, no write fee.
    "gemini-3-pro-preview": Prices(
        2.00, 12.00, 0.20, 2.00, "ai.google.dev/pricing (gemini-3-pro-preview, <=200k)", "2025-11-18"
    ),
    "claude-sonnet-4-20250514": Prices(
        3.00, 15.00, 0.30, 3.75, f"{_ANTHROPIC} (Claude Sonnet 4)", "2025-05-22"
    ),
    "claude-sonnet-4-5-20250929": Prices(
        3.00, 15.00, 0.30, 3.75, f"{_ANTHROPIC} (Claude Sonnet 4.5, <=200k)", "2025-09-29"
    ),
    "claude-opus-4-5-20251101": Prices(
        5.00, 25.00, 0.50, 6.25, f"{_ANTHROPIC} (Claude Opus 4.5)", "2025-11-24"
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
    "deepseek-chat": VERSION_PRICES["deepseek-chat-v2"],
    "deepseek-coder": VERSION_PRICES["deepseek-coder-v2"],
    "doubao-pro": VERSION_PRICES["doubao-pro-128k"],
}

#: Unknown families are priced like this one (a mid-priced frontier model with caching).
DEFAULT_FAMILY = "gpt-4o"

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def prices_for(family: str | None, model_raw: str | None = None) -> Prices:
    """Prices of the version ``model_raw`` names; else of ``family``; else of ``DEFAULT_FAMILY``."""
    version = model_version(model_raw)
    if version in VERSION_PRICES:
        return VERSION_PRICES[version]
    if family in PRICES:
        if model_raw:
            _warn_once(
                f"v:{model_raw}",
                f"no price for model version {model_raw!r}: priced as its family {family!r} "
                f"({PRICES[family].source})",
            )
        return PRICES[family]
    _warn_once(
        f"f:{family}:{model_raw}",
        f"no price for model {model_raw or family!r} (family {family!r}): priced as {DEFAULT_FAMILY}",
    )
    return PRICES[DEFAULT_FAMILY]
