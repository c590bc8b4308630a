"""Model-name normalisation: raw provider names → a small set of families.

Learned policies are conditioned on the family, so names that differ only by
provider prefix, date or route (``openrouter/google/gemini-3-pro-preview``,
``gpt-4o-2024-08-06``) must map to one id.  Unknown names map to ``"other"``.
"""

from __future__ import annotations

import re

__all__ = ["FAMILIES", "family_id", "normalize_family"]

# Order matters: the first matching pattern wins (gpt-4o-mini before gpt-4o).
_RULES: list[tuple[str, str]] = [
    (r"gpt-?4o-?mini", "gpt-4o-mini"),
    (r"gpt-?4o", "gpt-4o"),
    (r"gpt-?4\.1", "gpt-4.1"),
    (r"gpt-?4", "gpt-4"),
    (r"gpt-?5", "gpt-5"),
    (r"\bo[134](-mini)?\b", "openai-o"),
    (r"gemini-?3[.-]?pro|gemini-3-pro", "gemini-3-pro"),
    (r"gemini-?2\.5-?pro", "gemini-2.5-pro"),
    (r"gemini", "gemini"),
    (r"claude.*opus|opus", "claude-opus"),
    (r"claude.*sonnet|sonnet", "claude-sonnet"),
    (r"claude.*haiku|haiku", "claude-haiku"),
    (r"swe-?agent-?lm|qwen.*coder|qwen3-coder", "qwen-coder"),
    (r"qwen", "qwen"),
    (r"deepseek-?coder", "deepseek-coder"),
    (r"deepseek", "deepseek-chat"),
    (r"doubao", "doubao-pro"),
    (r"llama", "llama"),
]

FAMILIES: tuple[str, ...] = ("other",) + tuple(dict.fromkeys(f for _, f in _RULES))


def normalize_family(raw: str | None) -> str:
    """Map a raw model name to its family (``"other"`` when unknown)."""
    if not raw:
        return "other"
    name = raw.lower()
    for pattern, family in _RULES:
        if re.search(pattern, name):
            return family
    return "other"


def family_id(family: str) -> int:
    """Stable small integer for a family, for embeddings; unknown → 0."""
    try:
        return FAMILIES.index(family)
    except ValueError:
        return 0
