"""The ``manage_context`` tool: its definitions, its StatusReport, applying it.

``manage_context(enable=[...], disable=[...])`` changes which stored outputs
the context shows in full.  Every key is judged on its own:

* unknown key → error for that key, nothing else is affected;
* a key in both lists → a conflict error for that key, its state untouched;
* a key already in the requested state → listed as ``unchanged``;
* a key repeated in one list → acted on once, listed in ``duplicates``.

Which keys change and which are invalid is decided by :func:`dtoc_rl.core.actions.resolve_keys`,
the rule a policy's slot masks follow too.  Nothing is ever deleted, so every operation can be
undone by the opposite one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from dtoc_rl.core.actions import resolve_keys
from dtoc_rl.core.store import Store

__all__ = [
    "MANAGE_CONTEXT_DESCRIPTION",
    "MANAGE_CONTEXT_NAME",
    "StatusReport",
    "anthropic_tool",
    "apply_manage_context",
    "openai_tool",
    "parse_arguments",
]

MANAGE_CONTEXT_NAME = "manage_context"
# Verbatim from the DTOC specification.
MANAGE_CONTEXT_DESCRIPTION = (
    "Use this tool when you feel the context limit is increasing and there are some tool outputs "
    "whose content is no longer relevant to the current reasoning step. One can disable such outputs "
    "to free up context space, and re-enable them later if needed."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "enable": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tool keys (e.g. t0007) whose full output should be shown again.",
        },
        "disable": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tool keys whose output should be hidden behind a short placeholder.",
        },
    },
    "required": [],
    "additionalProperties": False,
}


def openai_tool() -> dict[str, Any]:
    """The tool in OpenAI chat-completions ``tools=[...]`` format."""
    return {
        "type": "function",
        "function": {
            "name": MANAGE_CONTEXT_NAME,
            "description": MANAGE_CONTEXT_DESCRIPTION,
            "parameters": json.loads(json.dumps(_PARAMETERS)),
        },
    }


def anthropic_tool() -> dict[str, Any]:
    """The tool in Anthropic messages ``tools=[...]`` format."""
    return {
        "name": MANAGE_CONTEXT_NAME,
        "description": MANAGE_CONTEXT_DESCRIPTION,
        "input_schema": json.loads(json.dumps(_PARAMETERS)),
    }


@dataclass
class StatusReport:
    """What one manage_context call did.  ``delta = tokens_after - tokens_before``."""

    enabled: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    tokens_before: int = 0
    tokens_after: int = 0
    # entries naming no stored output (once per list) plus stored keys in both lists: the count a
    # policy's slot masks get (dtoc_rl.core.actions); kept out of the JSON the model reads
    invalid: int = 0

    @property
    def delta(self) -> int:
        return self.tokens_after - self.tokens_before

    @property
    def changed(self) -> list[str]:
        return self.enabled + self.disabled

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["invalid"]
        d["delta"] = self.delta
        return d

    def to_json(self) -> str:
        """The tool result the model sees."""
        return json.dumps(self.to_dict(), ensure_ascii=False)


def parse_arguments(arguments: str | dict[str, Any] | None) -> tuple[list[Any], list[Any], dict[str, str]]:
    """Read a model's tool-call arguments into (enable, disable, errors)."""
    errors: dict[str, str] = {}
    if arguments is None or arguments == "":
        return [], [], errors
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return [], [], {"<arguments>": f"arguments are not valid JSON: {e.msg}"}
    if not isinstance(arguments, dict):
        return [], [], {"<arguments>": f"arguments must be an object, got {type(arguments).__name__}"}
    out = []
    for name in ("enable", "disable"):
        v = arguments.get(name, [])
        if v is None:
            v = []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list):
            errors[f"<{name}>"] = f"'{name}' must be a list of keys, got {type(v).__name__}"
            v = []
        out.append(v)
    extra = set(arguments) - {"enable", "disable"}
    if extra:
        errors["<arguments>"] = f"unexpected argument(s): {', '.join(sorted(extra))}"
    return out[0], out[1], errors


def apply_manage_context(
    store: Store,
    enable: Iterable[Any] = (),
    disable: Iterable[Any] = (),
    *,
    total_tokens: Callable[[], int] | None = None,
) -> StatusReport:
    """Apply one manage_context call to ``store`` and report on it.

    ``total_tokens`` gives the context's total active tokens (defaults to the
    store's own), so the report's before/after cover the whole context.
    """
    count = total_tokens or (lambda: store.active_tokens)
    report = StatusReport(tokens_before=count())
    # one key given as a string is that key, not its characters; None is nothing
    enable, disable = ([x] if isinstance(x, str) else list(x or ()) for x in (enable, disable))
    ch = resolve_keys(enable, disable, lambda k: store.get(k).visible if k in store else None)
    report.duplicates = ch.duplicates
    report.unchanged = ch.unchanged
    report.invalid = ch.invalid
    for k in ch.conflicts:
        report.errors[k] = "key is in both enable and disable; left as it was"
    for k in ch.unknown:
        if isinstance(k, str):
            report.errors[k] = "unknown tool key; no such output is stored"
        else:
            name = "enable" if any(k is e for e in enable) else "disable"
            report.errors[repr(k)] = f"key in '{name}' must be a string, got {type(k).__name__}"
    report.enabled = store.set_visible(ch.enable, True)
    report.disabled = store.set_visible(ch.disable, False)
    report.tokens_after = count()
    return report
