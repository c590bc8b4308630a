"""Tool categories: an alias of :mod:`dtoc_rl.labels.vocabulary`, the one tool vocabulary (kept so
that code importing ``dtoc_rl.tools`` keeps working; new code imports the vocabulary)."""

from __future__ import annotations

from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES, base_tool_name, tool_category, tool_category_id

__all__ = ["TOOL_CATEGORIES", "base_tool_name", "tool_category", "tool_category_id"]
