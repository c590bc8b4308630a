"""The ToolOutput record, its envelope, and its placeholder.

A tool output enters the context either as its **envelope**, a JSON object
with exactly ``tool_key``, ``tool_result`` and ``estimated_tokens``, or, when
hidden, as a **placeholder** that keeps only the key, the timestamp, the
estimated tokens and a hidden indicator (30–50 tokens under the default
estimator, whatever the size of the original).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from dtoc_rl.core.tokens import TokenEstimator

__all__ = ["HIDDEN_NOTE", "POLICY_NOTE", "ToolOutput", "envelope", "format_key", "iso_time", "placeholder"]

# The hidden indicator: says the output still exists and how to bring it back.
HIDDEN_NOTE = "kept in full; manage_context enable restores it"
#: The note where the model has no manage_context tool and a policy decides alone (an Orchestrator in
#: ``policy`` mode, ``dtoc-rl proxy``, the OpenCode plugin, which writes the same words): the policy shows
#: it again, or the agent re-runs the tool.  As long as HIDDEN_NOTE, so that a placeholder costs the same
#: tokens whichever it carries (a test holds them equal).
POLICY_NOTE = "kept in full; shown again when needed or re-run"


def format_key(n: int) -> str:
    """The n-th orchestrator key of a session: ``t0000``, ``t0001``, … (``t10000`` after ``t9999``)."""
    return f"t{n:04d}"


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def envelope(key: str, result: str, estimated_tokens: int) -> str:
    return json.dumps(
        {"tool_key": key, "tool_result": result, "estimated_tokens": estimated_tokens}, ensure_ascii=False
    )


def placeholder(key: str, timestamp: float, estimated_tokens: int, note: str = HIDDEN_NOTE) -> str:
    return json.dumps(
        {
            "tool_key": key,
            "hidden": True,
            "timestamp": iso_time(timestamp),
            "estimated_tokens": estimated_tokens,
            "note": note,
        },
        ensure_ascii=False,
    )


@dataclass(slots=True)
class ToolOutput:
    """One stored tool output.

    ``tool_key`` is assigned by the orchestrator (short, stable, unique in the
    session); ``call_id`` is the provider's tool-call id, kept only to pair the
    output with its call.  ``visible_cost``/``hidden_cost`` are the token costs
    of the envelope and of the placeholder, computed once when stored.
    """

    tool_key: str
    tool_result: str
    estimated_tokens: int
    timestamp: float
    visible: bool = True
    tool_name: str = ""
    tool_args: Any = None
    step: int = 0
    call_id: str | None = None
    visible_cost: int = 0
    hidden_cost: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    # Rendered texts, made once: assembling a context must not re-serialise every output.
    _envelope: str | None = field(default=None, repr=False, compare=False)
    _placeholder: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        key: str,
        result: str,
        estimator: TokenEstimator,
        *,
        timestamp: float,
        visible: bool = True,
        tool_name: str = "",
        tool_args: Any = None,
        step: int = 0,
        call_id: str | None = None,
    ) -> ToolOutput:
        est = estimator.count(result)
        env = envelope(key, result, est)
        ph = placeholder(key, timestamp, est)
        return cls(
            tool_key=key,
            tool_result=result,
            estimated_tokens=est,
            timestamp=timestamp,
            visible=visible,
            tool_name=tool_name,
            tool_args=tool_args,
            step=step,
            call_id=call_id,
            visible_cost=estimator.count(env),
            hidden_cost=estimator.count(ph),
            _envelope=env,
            _placeholder=ph,
        )

    @property
    def cost(self) -> int:
        """Tokens this output occupies in the active context now."""
        return self.visible_cost if self.visible else self.hidden_cost

    def envelope(self) -> str:
        if self._envelope is None:
            self._envelope = envelope(self.tool_key, self.tool_result, self.estimated_tokens)
        return self._envelope

    def placeholder(self, note: str = HIDDEN_NOTE) -> str:
        """What stands for it hidden; ``note``: what the placeholder tells the model (the default's text
        is kept, another's made each time)."""
        if note != HIDDEN_NOTE:
            return placeholder(self.tool_key, self.timestamp, self.estimated_tokens, note)
        if self._placeholder is None:
            self._placeholder = placeholder(self.tool_key, self.timestamp, self.estimated_tokens)
        return self._placeholder

    def render(self) -> str:
        """What the context shows for this output now."""
        return self.envelope() if self.visible else self.placeholder()

    def preview(self, chars: int = 80) -> str:
        text = " ".join(self.tool_result[: chars * 2].split())
        return text[:chars] + ("…" if len(self.tool_result) > chars else "")
