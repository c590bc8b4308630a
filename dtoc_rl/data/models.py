"""Model-name normalisation: raw provider names → a small set of families.

Learned policies are conditioned on the family, so names that differ only by
provider prefix, date or route (``openrouter/google/gemini-3-pro-preview``,
``gpt-4o-2024-08-06``) must map to one id.  Unknown names map to ``"other"``.

Prices differ within a family (snapshots of one model), so :func:`model_version`
also maps a raw name to a priced version key of :data:`dtoc_rl.sim.pricing.VERSION_PRICES`.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["FAMILIES", "family_id", "model_index", "model_version", "normalize_family", "same_model"]

# Order matters: the first matching pattern wins (gpt-4o-mini before gpt-4o).
_RULES: list[tuple[str, str]] = [
    (r"gpt-oss", "gpt-oss"),  # OpenAI's open-weight models, served by many hosts: not a gpt-4/5 family
    (r"gpt-?4o-?mini", "gpt-4o-mini"),
    (r"gpt-?4o", "gpt-4o"),
    (r"gpt-?4\.1", "gpt-4.1"),
    (r"gpt-?4", "gpt-4"),
    (r"gpt-?5", "gpt-5"),
    (r"gpt-?6\b", "gpt-6"),
    (r"\bo[134](-mini)?\b", "openai-o"),
    (r"gemini-?3(\.\d+)?[.-]?pro", "gemini-3-pro"),  # 3.1 Pro is priced and cached as 3 Pro
    (r"gemini-?2\.5-?pro", "gemini-2.5-pro"),
    (r"gemini", "gemini"),
    (r"claude.*(fable|mythos)", "claude-fable"),
    (r"claude.*opus|opus", "claude-opus"),
    (r"claude.*sonnet|sonnet", "claude-sonnet"),
    (r"claude.*haiku|haiku", "claude-haiku"),
    (r"swe-?agent-?lm|qwen.*coder|qwen3-coder", "qwen-coder"),
    (r"qwen", "qwen"),
    (r"deepseek-?coder", "deepseek-coder"),
    (r"deepseek", "deepseek-chat"),
    (r"doubao", "doubao-pro"),
    (r"llama", "llama"),
    # open-weight and other vendors' models agent benchmarks run on (Terminal-Bench, SWE-bench)
    (r"kimi|moonshot", "kimi"),
    (r"\bglm|chatglm|zai-org|z-ai/", "glm"),
    (r"grok", "grok"),
    (r"minimax", "minimax"),
    (r"mistral|mixtral|devstral|codestral|magistral", "mistral"),
]

#: Every family's id is its position here: ids are inputs of trained policies (their family
#: embedding), so this tuple only grows: a new family goes at the end, whatever the order of _RULES,
#: and a checkpoint trained on a shorter tuple still loads (its unknown families read as "other").
FAMILIES: tuple[str, ...] = (
    "other", "gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-4", "gpt-5", "openai-o", "gemini-3-pro",
    "gemini-2.5-pro", "gemini", "claude-opus", "claude-sonnet", "claude-haiku", "qwen-coder", "qwen",
    "deepseek-coder", "deepseek-chat", "doubao-pro", "llama", "gpt-oss", "kimi", "glm", "grok", "minimax",
    "mistral", "gpt-6", "claude-fable",
)  # fmt: skip


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


# raw name (lower case, provider route removed) -> version key of dtoc_rl.sim.pricing.VERSION_PRICES;
# the first matching pattern wins.  Bare aliases ("gpt-4o") name no version: they moved over time.
_VERSIONS: list[tuple[str, str]] = [
    (r"gpt-?4o-?mini-2024-07-18", "gpt-4o-mini-2024-07-18"),
    (r"gpt-?4o-2024-05-13", "gpt-4o-2024-05-13"),
    (r"gpt-?4o-2024-08-06", "gpt-4o-2024-08-06"),
    (r"gpt-?4o-2024-11-20", "gpt-4o-2024-11-20"),
    (r"gpt-?4-0125(-preview)?$", "gpt-4-0125-preview"),
    (r"gpt-?6\.2-sol(-\d{4}-?\d{2}-?\d{2})?$", "gpt-6.2-sol"),
    (r"gpt-?6\.1-terra(-\d{4}-?\d{2}-?\d{2})?$", "gpt-6.1-terra"),
    (r"gpt-?6\.1-sol(-\d{4}-?\d{2}-?\d{2})?$", "gpt-6.1-sol"),
    (r"gpt-?6-(astra|sol|luna)(-\d{4}-?\d{2}-?\d{2})?$", r"gpt-6-\1"),
    (r"gpt-?5\.6-(sol|terra|luna)(-\d{4}-?\d{2}-?\d{2})?$", r"gpt-5.6-\1"),
    (r"gpt-?5\.6(-\d{4}-?\d{2}-?\d{2})?$", "gpt-5.6-sol"),  # the alias routes to Sol
    (r"gpt-?5\.5(-\d{4}-?\d{2}-?\d{2})?$", "gpt-5.5"),
    (r"gpt-?5\.4-(mini|nano)(-\d{4}-?\d{2}-?\d{2})?$", r"gpt-5.4-\1"),
    (r"gpt-?5\.4(-\d{4}-?\d{2}-?\d{2})?$", "gpt-5.4"),
    (r"gpt-?5\.3-codex(-\d{4}-?\d{2}-?\d{2})?$", "gpt-5.3-codex"),
    (r"gpt-?5\.2-codex(-\d{8})?$", "gpt-5.2-codex"),
    (r"gpt-?5\.2(-\d{4}-?\d{2}-?\d{2})?$", "gpt-5.2"),
    (r"gpt-?5(\.1)?-codex-mini(-\d{4}-\d{2}-\d{2})?$", "gpt-5-codex-mini"),
    (r"gpt-?5-mini(-\d{4}-\d{2}-\d{2})?$", "gpt-5-mini"),
    (r"gpt-?5-nano(-\d{4}-\d{2}-\d{2})?$", "gpt-5-nano"),
    # GPT-5.1-Codex-Max is priced as GPT-5.1; a log may spell 5.1 as "5-1" (a route's name)
    (r"gpt-?5([.-]1)?(-codex(-max)?)?(-\d{4}-\d{2}-\d{2})?$", "gpt-5"),
    (r"gpt-?4\.1-mini(-\d{4}-\d{2}-\d{2})?$", "gpt-4.1-mini"),
    (r"gpt-?4\.1-nano(-\d{4}-\d{2}-\d{2})?$", "gpt-4.1-nano"),
    (r"gpt-?4\.1(-\d{4}-\d{2}-\d{2})?$", "gpt-4.1"),
    (r"o3(-\d{4}-\d{2}-\d{2})?$", "o3"),
    (r"o(1|3)-mini(-\d{4}-\d{2}-\d{2})?$", "o3-mini"),
    (r"o1(-\d{4}-\d{2}-\d{2})?$", "o1"),
    (r"o4-mini(-\d{4}-\d{2}-\d{2})?$", "o4-mini"),
    (r"gemini-3-pro-preview(-[\w-]+)?$", "gemini-3-pro-preview"),
    (r"gemini-3-flash-preview(-\d{2}-\d{2})?$", "gemini-3-flash-preview"),
    (r"gemini-3\.1-pro-preview(-customtools)?$", "gemini-3.1-pro-preview"),
    (r"gemini-3\.8-flash(-preview)?$", "gemini-3.8-flash"),
    (r"gemini-4-(neon|carbon)$", r"gemini-4-\1"),
    (
        r"claude-(opus-4-[678]|opus-5-5|opus-5|sonnet-4-6|sonnet-5-5|sonnet-5|haiku-5-5|fable-5-[12]|fable-5)"
        r"(-\d{8}|-latest)?(-thinking)?$",
        r"claude-\1",
    ),
    (r"claude-mythos-5-1(-\d{8})?$", "claude-fable-5-1"),  # Mythos is priced as Fable
    (r"claude-mythos-5(-\d{8})?$", "claude-fable-5"),
    (r"claude-(sonnet-4|4-sonnet)-20250514$", "claude-sonnet-4-20250514"),
    (r"claude-sonnet-4-5(-20250929)?$", "claude-sonnet-4-5-20250929"),
    (r"claude-opus-4-5(-20251101)?$", "claude-opus-4-5-20251101"),
    (r"claude-(opus-4-1|opus-4|4-opus)(-0)?(-2025\d{4})?(-thinking)?$", "claude-opus-4-1-20250805"),
    (r"claude-(3-7-sonnet|sonnet-3-7)(-20250219)?(-thinking)?$", "claude-3-7-sonnet-20250219"),
    (r"claude-haiku-4-5(-20251001)?$", "claude-haiku-4-5-20251001"),
    (r"claude-3-5-haiku(-20241022)?$", "claude-3-5-haiku-20241022"),
    (r"claude-3-haiku(-20240307)?$", "claude-3-haiku-20240307"),
    (r"gemini-2\.5-pro(-preview-\d{2}-\d{2}|-exp-\d{2}-\d{2})?$", "gemini-2.5-pro"),
    (r"gemini-2\.5-flash(-preview-\d{2}-\d{2}|-preview-\d{2}-\d{4}|-\d{2}-\d{4})?$", "gemini-2.5-flash"),
    (r"gemini-2\.5-flash-lite(-preview-\d{2}-\d{2}|-preview-\d{2}-\d{4})?$", "gemini-2.5-flash-lite"),
    (r"deepseek-chat-v2$", "deepseek-chat-v2"),
    (r"deepseek-coder-v2$", "deepseek-coder-v2"),
    (r"doubao-pro-128k$", "doubao-pro-128k"),
    (r"kimi-k2-0905(-preview)?$", "kimi-k2-0905-preview"),
    (r"kimi-k2-0711(-preview)?$", "kimi-k2-0711-preview"),
    (r"kimi-k2\.5$", "kimi-k2.5"),
    (r"glm-4\.[567](-fp8)?$", "glm-4.6"),
    (r"grok-code-fast(-1)?(-\d{4})?$", "grok-code-fast-1"),
    (r"grok-4([.-]1)?-fast(-reasoning|-non-reasoning)?(-latest)?$", "grok-4-1-fast"),
    (r"grok-4(-0709|-latest)?$", "grok-4"),
    (r"grok-3-mini(-beta|-latest)?$", "grok-3-mini"),
    (r"grok-3-fast(-beta|-latest)?$", "grok-3-fast"),
    (r"grok-3(-beta|-latest)?$", "grok-3"),
    (r"minimax-m2\.5$", "minimax-m2.5"),
    (r"minimax-m2\.7$", "minimax-m2.7"),
    (r"devstral-medium(-\d{4}|-latest)?$", "devstral-medium"),
    (r"devstral-small(-\d{4}|-latest)?$", "devstral-small"),
    (r"codestral(-\d{4}|-latest)?$", "codestral"),
    (r"gpt-oss-120b$", "gpt-oss-120b"),
]


def model_version(raw: str | None) -> str | None:
    """The priced version a raw model name denotes (None: the name pins no known version)."""
    if not raw:
        return None
    # a pure function of the name, asked several times a decision: remembered, but not for a name as long
    # as a request may send (a proxy's body may name any string)
    return _version(raw) if len(raw) <= 200 else _version.__wrapped__(raw)


@lru_cache(maxsize=4096)
def _version(raw: str) -> str | None:
    name = plain_name(raw)
    for pattern, version in _VERSIONS:
        m = re.fullmatch(pattern, name)
        if m:
            return m.expand(version)
    return None


def plain_name(raw: str) -> str:
    """A model name without case, ``provider/`` prefix or a cloud's spelling of it."""
    name = raw.lower().strip().lstrip("@").rsplit("/", 1)[-1]
    # Bedrock's "(us.|global.)anthropic.claude-...-v1(:0)" and Vertex's "claude-...@20250805" name the same
    # version, and so does Claude Code's "claude-sonnet-4-5[1m]" (the 1M-token window of one model);
    # "@default" is Vertex's alias of the newest snapshot
    bedrock = re.match(r"(?:[a-z]+\.)?anthropic\.", name)
    if bedrock:  # its "-v1" suffix, ":0" or not (a "-v2" elsewhere is a model's own name: deepseek-chat-v2)
        name = re.sub(r"-v\d+(?::\d+)?$", "", name[bedrock.end() :])
    name = re.sub(r"(?:-v\d+:\d+|\[1m\]|@default)$", "", name)
    # a dotted Claude version (OpenRouter's "claude-haiku-5.5") is the dashed one
    name = re.sub(r"^(claude-[a-z]+-\d+)\.(\d+)", r"\1-\2", name)
    return name.replace("@", "-")


def same_model(a: str | None, b: str | None) -> bool:
    """Whether two names denote one model, whose calls share a provider's cache: the same priced
    version when both name one (``gpt-4o-2024-05-13`` and ``gpt-4o-2024-08-06`` are two; a preview's
    or a cloud's name of a version is that version), else the same name without case, ``provider/``
    prefix, or a date or ``-latest`` at its end (``gpt-4o`` is ``gpt-4o-2024-08-06``)."""
    va, vb = model_version(a), model_version(b)
    if va and vb:
        return va == vb
    return _undated(a) == _undated(b)


def _undated(raw: str | None) -> str:
    return re.sub(r"-(?:\d{4}-?\d{2}-?\d{2}|latest)$", "", plain_name(raw or ""))


def model_index(name: str | None, models: list[str]) -> int:
    """Where the model ``name`` denotes stands in ``models`` (a run's, its own model first), added at
    the end when it is none of them (:func:`same_model`); a call that names none went to the run's
    model (0)."""
    if not name:
        return 0
    k = next((i for i, m in enumerate(models) if same_model(name, m)), None)
    if k is None:
        models.append(name)
        return len(models) - 1
    return k
