"""Per-family token prices (USD per million tokens) with prompt caching.

``input`` is the uncached input price, ``cache_read`` the price of input read
from the prompt cache, ``cache_write`` the price of input written to it (equal
to ``input`` for providers that cache automatically with no surcharge), and
``output`` the completion price.  Figures are the providers' published list
prices for the model versions in ``../shared/traces``; check them before quoting
dollar figures, and override any of them with ``Prices(...)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["DEFAULT_FAMILY", "PRICES", "Prices", "prices_for"]


@dataclass(frozen=True)
class Prices:
    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


PRICES: dict[str, Prices] = {
    # OpenAI pricing page (openai.com/api/pricing): gpt-4o-2024-08-06 $2.50 in / $10 out,
    # cached input $1.25; automatic caching, no write surcharge.
    "gpt-4o": Prices(2.50, 10.00, 1.25, 2.50, "openai.com/api/pricing (gpt-4o-2024-08-06)"),
    # gpt-4o-mini-2024-07-18: $0.15 / $0.60, cached $0.075.
    "gpt-4o-mini": Prices(0.15, 0.60, 0.075, 0.15, "openai.com/api/pricing (gpt-4o-mini)"),
    # gpt-4-0125-preview (GPT-4 Turbo): $10 / $30; no prompt caching existed for it.
    "gpt-4": Prices(10.00, 30.00, 10.00, 10.00, "openai.com/api/pricing (gpt-4-turbo / 0125-preview)"),
    # Google AI pricing (ai.google.dev/pricing): gemini-3-pro-preview, prompts <= 200k:
    # $2.00 in / $12.00 out, context-cache reads $0.20 (implicit caching, no write surcharge).
    "gemini-3-pro": Prices(2.00, 12.00, 0.20, 2.00, "ai.google.dev/pricing (gemini-3-pro-preview, <=200k)"),
    # Anthropic pricing (anthropic.com/pricing): Sonnet 4 / 4.5 $3 / $15, cache write (5 min) $3.75,
    # cache read $0.30.
    "claude-sonnet": Prices(3.00, 15.00, 0.30, 3.75, "anthropic.com/pricing (Claude Sonnet 4/4.5)"),
    # Opus 4.5: $5 / $25, cache write $6.25, read $0.50.
    "claude-opus": Prices(5.00, 25.00, 0.50, 6.25, "anthropic.com/pricing (Claude Opus 4.5)"),
    # SWE-agent-LM-32B is self-hosted (Qwen2.5-Coder-32B fine-tune); we price it as a hosted
    # Qwen-Coder-class model: Qwen2.5-Coder-32B-Instruct at $0.20 / $0.60 (Together/OpenRouter list
    # prices), cached input at half price. An estimate; the logs carry no real cost.
    "qwen-coder": Prices(0.20, 0.60, 0.10, 0.20, "estimate: hosted Qwen2.5-Coder-32B list prices"),
    # DeepSeek API pricing (api-docs.deepseek.com, 2024 for V2): $0.14 in / $0.28 out,
    # cache hit $0.014, no write surcharge.
    "deepseek-chat": Prices(0.14, 0.28, 0.014, 0.14, "api-docs.deepseek.com (deepseek-chat V2, 2024)"),
    "deepseek-coder": Prices(0.14, 0.28, 0.014, 0.14, "api-docs.deepseek.com (deepseek-coder V2, 2024)"),
    # Volcengine Doubao-pro-128k: CNY 5 / 9 per million tokens, about $0.70 / $1.25 at 7.2 CNY/USD;
    # no caching assumed.
    "doubao-pro": Prices(0.70, 1.25, 0.70, 0.70, "volcengine.com pricing (Doubao-pro-128k, CNY→USD 7.2)"),
}

#: Unknown families are priced like this one (a mid-priced frontier model with caching).
DEFAULT_FAMILY = "gpt-4o"


def prices_for(family: str | None) -> Prices:
    """Prices of ``family``; unknown families fall back to ``DEFAULT_FAMILY``."""
    return PRICES.get(family or "", PRICES[DEFAULT_FAMILY])
