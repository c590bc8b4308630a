"""DTOC-RL: learn when an LLM agent should hide and restore its past tool outputs.

The core is DTOC (Dynamic Tool Output Compression): every tool output is kept
in a store under an orchestrator key; the active context shows visible outputs
in full (as envelopes) and hidden ones as short placeholders;
``manage_context(enable=[...], disable=[...])`` changes visibility and reports
the token delta.  Nothing is ever lost.

The subpackages are the layers, each importing only those before it: ``core`` (records,
stores, context, manage_context), ``data`` (schema, datasets), ``labels``, ``ingest``,
``sim`` (prices, simulator), ``engine`` (session tracker, features, actions), then
``dtoc_rl.envs``, ``dtoc_rl.policies``, ``serve`` (orchestrator, service) and the CLI.
The names below are re-exported from dtoc_rl.core so ``from dtoc_rl import DTOCContext``
keeps working.
"""

from dtoc_rl.core.context import DTOCContext
from dtoc_rl.core.manage import (
    MANAGE_CONTEXT_DESCRIPTION,
    StatusReport,
    anthropic_tool,
    apply_manage_context,
    openai_tool,
)
from dtoc_rl.core.record import ToolOutput
from dtoc_rl.core.render import to_anthropic, to_openai
from dtoc_rl.core.sqlite_store import SQLiteStore
from dtoc_rl.core.store import MemoryStore, SessionConflictError, Store, StoreFileError, UnknownKeyError
from dtoc_rl.core.tokens import CharEstimator, HFTokenizerEstimator, TiktokenEstimator, get_estimator

__version__ = "0.1.0"

__all__ = [
    "MANAGE_CONTEXT_DESCRIPTION",
    "CharEstimator",
    "DTOCContext",
    "HFTokenizerEstimator",
    "MemoryStore",
    "SQLiteStore",
    "SessionConflictError",
    "StatusReport",
    "Store",
    "StoreFileError",
    "TiktokenEstimator",
    "ToolOutput",
    "UnknownKeyError",
    "__version__",
    "anthropic_tool",
    "apply_manage_context",
    "get_estimator",
    "openai_tool",
    "to_anthropic",
    "to_openai",
]
