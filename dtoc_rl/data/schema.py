"""The canonical trajectory schema (version ``SCHEMA_VERSION``).

One row per trajectory; its steps are a nested list.  Every ingester produces
:class:`Trajectory` objects, every dataset is a Parquet file of their rows, and
the env replays them.  The full field reference lives in ``docs/schema.md``;
bump ``SCHEMA_VERSION`` (and that document) whenever a field changes meaning.

A *step* is one tool call and its output, or an agent turn with no tool call
(a final answer, a message to the user).  Parallel tool calls in one assistant
turn become consecutive steps sharing ``turn``; the assistant text is carried
on the first of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

__all__ = [
    "MISS_KINDS",
    "NEED_KINDS",
    "SCHEMA_VERSION",
    "ContextEvent",
    "Need",
    "Step",
    "Trajectory",
    "Usage",
    "hf_features",
]

SCHEMA_VERSION = "1.5"  # 1.1: need kind `edit`; 1.2: logged usage, unlogged prompt, dropped messages;
# 1.3: the model of each call; 1.4: the outputs' own shares kept with the labels; 1.5: the cache writes
# of Anthropic's 1-hour lifetime

NEED_KINDS = ("provenance", "reaccess", "reference", "edit")
#: Need kinds that make a hidden output a miss.  Re-access needs are left out: the logged step that
#: carries one is itself the agent re-reading the resource, so charging a re-read for it would count
#: that re-read twice (docs/validity.md measured this on really masked runs).
MISS_KINDS = ("provenance", "reference")
EVENT_KINDS = ("mask", "unmask", "enable", "disable", "compaction", "truncate")


@dataclass
class Need:
    """Hindsight label: the step that carries it used the output of ``step``."""

    step: int
    kind: str  # one of NEED_KINDS
    evidence: str  # the copied span, the matched resource, or the named key


@dataclass
class ContextEvent:
    """A context-management event found in the log itself (not inferred)."""

    kind: str  # one of EVENT_KINDS
    targets: list[int] = field(default_factory=list)  # step indices affected
    detail: str = ""


@dataclass
class Usage:
    """What the provider reported for one model call, as the log has it (None: not logged).

    ``input_tokens`` counts every prompt token, cached ones included (OpenAI's ``prompt_tokens``;
    for Anthropic, ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``), so
    ``cached_tokens`` and ``cache_write_tokens`` are parts of it, and ``cache_write_1h_tokens`` is the
    part of the writes Anthropic keeps for an hour (``usage.cache_creation.ephemeral_1h_input_tokens``;
    billed at twice the input price where a 5-minute write is billed at 1.25 times).  ``cost_usd`` is the
    provider's or the harness's own figure for the call, never one this toolkit computed.
    """

    input_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    cache_write_1h_tokens: int | None = None


@dataclass
class Step:
    index: int
    turn: int = 0
    timestamp: float | None = None  # seconds since the epoch, when the log has it
    user_text: str = ""  # user / environment text that arrived before this step's action
    assistant_text: str = ""
    reasoning: str = ""
    tool_name: str | None = None
    tool_args: str = ""  # JSON text, or the raw command string for text-action harnesses
    tool_call_id: str | None = None  # the provider's id, never a DTOC key
    output: str | None = None
    output_is_error: bool = False
    output_tokens: int = 0  # ceil(len(output)/4), the default estimator
    read_resource: str | None = None  # what this step reads (re-access labels)
    write_resources: list[str] = field(default_factory=list)  # what it modifies
    needs: list[Need] = field(default_factory=list)
    events: list[ContextEvent] = field(default_factory=list)
    # Steps whose outputs were hidden in the context that produced this action,
    # when the log lets us know (None: unknown, [] known nothing hidden).  A live session's tracker
    # holds them as tuples (its trajectory() gives lists).
    masked_before: list[int] | tuple[int, ...] | None = None
    # Of those, the steps whose assistant message was removed as well (a harness that keeps only the
    # last N messages drops whole pairs rather than placing a placeholder).
    dropped_before: list[int] | None = None
    # Text the harness sent with this call only, re-rendered every call rather than appended (e.g.
    # RepoLaunch's list of the commands run so far); counted in this call's prompt, not carried on.
    harness_text: str = ""
    # The provider's usage for the model call this step starts (on the first step of a turn).
    usage: Usage | None = None
    # The model that call was sent to, as the log names it per call (on the first step of a turn; None:
    # not named, i.e. the run's ``model_raw``).  A run can change models between calls (a router, a
    # /model switch): each call is billed at its own model's prices, and reads no other model's cache.
    model: str | None = None

    @property
    def has_output(self) -> bool:
        return self.output is not None


@dataclass
class Trajectory:
    traj_id: str
    source: str  # harness: mini-swe-agent, swe-agent-0.x, swe-agent-1.x, openhands-sdk, ...
    model_raw: str
    model_family: str
    task_id: str
    task_text: str = ""
    system_prompt: str = ""
    success: bool | None = None
    outcome_source: str = ""  # where ``success`` came from (file and rule)
    cost_usd: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    api_calls: int | None = None
    # Prompt tokens every call was sent that the log does not hold (a system prompt or first message
    # it does not record), in the provider's tokens: replaying the log adds them to each call.
    unlogged_prompt_tokens: int = 0
    source_path: str = ""
    schema_version: str = SCHEMA_VERSION
    extra: str = "{}"  # JSON text for format-specific leftovers
    # What each output alone holds as the run goes on, kept by the labeller (labels.unique_events:
    # [step fed, output step, window share, atom share] rows) with the digest of what it read
    # (labels.unique_digest); None: not kept, computed when the run is first replayed.
    unique_events: list[list[float]] | None = None
    unique_digest: int | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def to_row(self) -> dict[str, Any]:
        """The row written to the dataset: ``dataclasses.asdict`` (:func:`_plain`, pinned equal to it
        by a test and about a third faster on a run's thousands of values) and ``n_steps``."""
        row = _plain(self)
        row["n_steps"] = len(self.steps)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        kw = {f.name: row[f.name] for f in fields(cls) if f.name in row and f.name != "steps"}
        steps = []
        for s in row.get("steps") or []:
            sk = {f.name: s[f.name] for f in fields(Step) if f.name in s}
            sk["needs"] = [Need(**n) for n in s.get("needs") or []]
            sk["events"] = [ContextEvent(**e) for e in s.get("events") or []]
            sk["write_resources"] = list(s.get("write_resources") or [])
            for name in ("masked_before", "dropped_before"):
                if sk.get(name) is not None:
                    sk[name] = list(sk[name])
            if sk.get("usage") is not None:
                sk["usage"] = Usage(**sk["usage"])
            steps.append(Step(**sk))
        return cls(**kw, steps=steps)

    def extra_dict(self) -> dict[str, Any]:
        return json.loads(self.extra or "{}")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(v: Any) -> Any:
    """``dataclasses.asdict`` of the schema's dataclasses: nested dataclasses as dicts, lists and
    dicts rebuilt, every other value as it is (the schema holds no mutable value but those)."""
    if is_dataclass(v) and not isinstance(v, type):
        names = _FIELD_NAMES.get(type(v))
        if names is None:
            names = _FIELD_NAMES[type(v)] = tuple(f.name for f in fields(v))
        return {n: _plain(getattr(v, n)) for n in names}
    if isinstance(v, list | tuple):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def hf_features():  # -> datasets.Features; imported lazily so core stays light
    """The Hugging Face ``datasets`` features of one trajectory row."""
    from datasets import Features, Sequence, Value

    need = {"step": Value("int32"), "kind": Value("string"), "evidence": Value("string")}
    event = {"kind": Value("string"), "targets": Sequence(Value("int32")), "detail": Value("string")}
    step = {
        "index": Value("int32"),
        "turn": Value("int32"),
        "timestamp": Value("float64"),
        "user_text": Value("string"),
        "assistant_text": Value("string"),
        "reasoning": Value("string"),
        "tool_name": Value("string"),
        "tool_args": Value("string"),
        "tool_call_id": Value("string"),
        "output": Value("string"),
        "output_is_error": Value("bool"),
        "output_tokens": Value("int64"),
        "read_resource": Value("string"),
        "write_resources": Sequence(Value("string")),
        "needs": [need],
        "events": [event],
        "masked_before": Sequence(Value("int32")),
        "dropped_before": Sequence(Value("int32")),
        "harness_text": Value("string"),
        "model": Value("string"),
        "usage": {
            "input_tokens": Value("int64"),
            "cached_tokens": Value("int64"),
            "cache_write_tokens": Value("int64"),
            "output_tokens": Value("int64"),
            "cost_usd": Value("float64"),
            "cache_write_1h_tokens": Value("int64"),
        },
    }
    return Features(
        {
            "traj_id": Value("string"),
            "source": Value("string"),
            "model_raw": Value("string"),
            "model_family": Value("string"),
            "task_id": Value("string"),
            "task_text": Value("string"),
            "system_prompt": Value("string"),
            "success": Value("bool"),
            "outcome_source": Value("string"),
            "cost_usd": Value("float64"),
            "tokens_in": Value("int64"),
            "tokens_out": Value("int64"),
            "api_calls": Value("int64"),
            "unlogged_prompt_tokens": Value("int64"),
            "source_path": Value("string"),
            "schema_version": Value("string"),
            "extra": Value("string"),
            "unique_events": Sequence(Sequence(Value("float64"))),
            "unique_digest": Value("int64"),
            "n_steps": Value("int32"),
            "steps": [step],
        }
    )
