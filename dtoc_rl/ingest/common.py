"""Helpers shared by the ingesters: label files, output capping, finalising."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Step, Trajectory, Usage
from dtoc_rl.ingest.base import MAX_OUTPUT_CHARS, IngestError, read_json

__all__ = [
    "cap_output",
    "count",
    "fill_unlogged_prompt",
    "finalize",
    "find_upwards",
    "load_selected_labels",
    "message_model",
    "message_usage",
    "name_model",
    "number",
    "run_model",
    "set_extra",
    "text_task_id",
    "usage_from",
]


def cap_output(text: Any) -> Any:
    """Keep head and tail of an output over ``MAX_OUTPUT_CHARS`` with a marker.  A value that is not
    text is returned as it is: the check of a run's steps names it with its step."""
    if not isinstance(text, str) or len(text) <= MAX_OUTPUT_CHARS:
        return text
    half = MAX_OUTPUT_CHARS // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[dtoc-rl: {cut} characters cut at ingest]\n{text[-half:]}"


def read_json_beside(path: Path) -> Any:
    """A log's side file (a task's metadata, a session's settings) as JSON, or None when it is missing
    or unreadable: the log alone is still a run, only what the side file adds is then unknown."""
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except IngestError:
        return None


def find_upwards(start: Path, name: str, levels: int = 4) -> Path | None:
    """The nearest file called ``name`` in ``start``'s folder or its parents."""
    here = start if start.is_dir() else start.parent
    for _ in range(levels + 1):
        cand = here / name
        if cand.is_file():
            return cand
        if here.parent == here:
            break
        here = here.parent
    return None


@lru_cache(maxsize=64)
def _read_jsonl(path: str, mtime: float) -> tuple[dict, ...]:
    rows = []
    with open(path, encoding="utf-8-sig") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return tuple(rows)


def load_selected_labels(start: Path) -> tuple[dict, ...]:
    """Rows of the nearest ``selected_labels.jsonl`` (the MANIFEST's derived join), or ()."""
    for sub in ("labels/selected_labels.jsonl", "selected_labels.jsonl"):
        here = start if start.is_dir() else start.parent
        for _ in range(4):
            cand = here / sub
            if cand.is_file():
                return _read_jsonl(str(cand), cand.stat().st_mtime)
            here = here.parent
    return ()


# Step fields the labeller reads as text and the dataset stores as strings: an ingester copies them
# from the log, so a log holding a number or an object there is refused here, naming the field.
_TEXT_FIELDS = ("user_text", "assistant_text", "reasoning", "tool_args", "harness_text")
_OPTIONAL_TEXT_FIELDS = ("tool_name", "tool_call_id", "output")


def _check_step_types(i: int, step: Step) -> None:
    for name in _TEXT_FIELDS + _OPTIONAL_TEXT_FIELDS:
        v = getattr(step, name)
        if not isinstance(v, str) and (v is not None or name in _TEXT_FIELDS):
            what = name.replace("_", " ").replace("tool args", "tool arguments")
            raise IngestError(f"step {i}: {what} is {type(v).__name__}, expected string")


def finalize(traj: Trajectory) -> Trajectory:
    """Renumber steps, fill default token estimates and the unlogged prompt; shared by every ingester."""
    for i, step in enumerate(traj.steps):
        _check_step_types(i, step)
        step.index = i
        step.output_tokens = math.ceil(len(step.output) / 4) if step.output else 0
    fill_unlogged_prompt(traj)
    return traj


def set_masking(
    steps: list[Step],
    masked: list[list[int] | None],
    label: str,
    dropped: list[list[int] | None] | None = None,
    texts: list[dict[int, str]] | None = None,
) -> None:
    """Record a harness's own hiding, as its log shows it: each step's ``masked_before``
    (``masked[i]``; None: the log does not say) and ``dropped_before``, a ``mask`` event where an
    output is hidden (``label``, and the placeholder it got at that step, ``texts[i][j]``) and an
    ``unmask`` event where it is shown again."""
    seen: set[int] = set()
    for i, (step, hid) in enumerate(zip(steps, masked)):
        if hid is None:
            continue
        step.masked_before = list(hid)
        if dropped is not None and dropped[i] is not None:
            step.dropped_before = list(dropped[i])
        for j in hid:
            if j not in seen:
                text = texts[i].get(j) if texts is not None else None
                detail = label if text is None else f"{label}: {text}"
                step.events.append(ContextEvent(kind="mask", targets=[j], detail=detail))
        for j in sorted(seen - set(hid)):
            step.events.append(ContextEvent(kind="unmask", targets=[j], detail=label))
        seen = set(hid)


def new_step(**kw) -> Step:
    return Step(index=0, **kw)


def count(d: dict, *keys: str) -> int | None:
    """:func:`number` as a whole count (tokens)."""
    return _int(number(d, *keys))


_DECIMAL = re.compile(r"\d{1,17}(?:\.\d{1,17})?(?:[eE][-+]?\d{1,3})?")  # as str() writes numbers


def number(d: dict, *keys: str) -> float | None:
    """The first of ``keys`` in ``d`` that holds a logged count or price: a finite number >= 0 (JSON
    readers turn 1e999 into inf, which is no figure), or one written as decimal text ("1234", as some
    loggers and OTLP's JSON write integers)."""
    for k in keys:
        v = d.get(k)
        if isinstance(v, str) and _DECIMAL.fullmatch(v.strip()):
            v = int(v) if v.strip().isdigit() else float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 10**15:
            continue  # no count or price is that large (and float() of 10**400 overflows)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
            return v
    return None


_GEMINI_COUNTS = {
    "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
    "prompt_token_count", "candidates_token_count", "thoughts_token_count",
}  # fmt: skip


def usage_from(raw: object) -> Usage | None:
    """A provider's usage object as :class:`~dtoc_rl.data.schema.Usage`, whichever API wrote it.

    OpenAI chat (``prompt_tokens``, ``prompt_tokens_details.cached_tokens``; OpenRouter adds ``cost``),
    OpenAI responses (``input_tokens``, ``input_tokens_details``; Codex CLI writes the cached part as
    ``cached_input_tokens`` beside them, inside ``input_tokens`` all the same), Anthropic
    (``input_tokens`` counts only the uncached part: the cache read and creation counts are added to
    it) and Gemini
    (``promptTokenCount``, ``cachedContentTokenCount``, ``candidatesTokenCount`` plus
    ``thoughtsTokenCount``, which Gemini bills as output too, and ``toolUsePromptTokenCount``, billed
    as input; the Python SDK writes them in snake case).  None when ``raw`` holds no token count.
    """
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details") or raw.get("input_tokens_details") or {}
    details = details if isinstance(details, dict) else {}
    cost = number(raw, "cost", "cost_usd", "total_cost")
    if "prompt_tokens" in raw or "completion_tokens" in raw:
        inp = number(raw, "prompt_tokens")
        return Usage(
            input_tokens=None if inp is None else int(inp),
            cached_tokens=count(details, "cached_tokens"),
            cache_write_tokens=count(details, "cache_write_tokens", "cache_creation_tokens"),
            output_tokens=count(raw, "completion_tokens"),
            cost_usd=cost,
            cache_write_1h_tokens=count(details, "cache_write_1h_tokens"),  # dtoc-rl's own logs keep it
        )
    if _GEMINI_COUNTS & raw.keys():
        # Gemini counts thinking apart from the answer and bills both as output
        out = count(raw, "candidatesTokenCount", "candidates_token_count")
        thoughts = count(raw, "thoughtsTokenCount", "thoughts_token_count")
        # the prompt of a built-in tool's use is billed as input too
        prompt = count(raw, "promptTokenCount", "prompt_token_count")
        tool = count(raw, "toolUsePromptTokenCount", "tool_use_prompt_token_count") or 0
        return Usage(
            input_tokens=None if prompt is None else prompt + tool,
            cached_tokens=count(raw, "cachedContentTokenCount", "cached_content_token_count") or 0,
            output_tokens=thoughts if out is None else out + (thoughts or 0),
            cost_usd=cost,
        )
    if "input_tokens" in raw or "output_tokens" in raw:
        inp = number(raw, "input_tokens")
        read = number(raw, "cache_read_input_tokens")
        write = number(raw, "cache_creation_input_tokens")
        if read is None and write is None:  # OpenAI responses: input_tokens already holds the cached part
            return Usage(
                input_tokens=_int(inp),
                cached_tokens=_int(
                    _first(number(details, "cached_tokens"), number(raw, "cached_input_tokens"))
                ),
                output_tokens=count(raw, "output_tokens"),
                cost_usd=cost,
            )
        total = None if inp is None else int(inp + (read or 0) + (write or 0))
        # Anthropic splits the writes by lifetime: an hour's cost twice the input price, 5 minutes' 1.25x
        hour = raw.get("cache_creation")
        hour = number(hour, "ephemeral_1h_input_tokens") if isinstance(hour, dict) else None
        return Usage(
            input_tokens=total,
            cached_tokens=_int(read),
            cache_write_tokens=_int(write),
            output_tokens=count(raw, "output_tokens"),
            cost_usd=cost,
            cache_write_1h_tokens=_int(hour),
        )
    return None


def cache_usage(
    prompt: float | None, read: float | None, write: float | None, *, uncached: bool = False, **kw: Any
) -> Usage:
    """A call's usage from a harness's prompt count and its cache reads and writes.  Harnesses differ
    in whether the prompt count holds the cached part (OpenAI's way) or only the rest (Anthropic's):
    ``uncached`` says it is the rest, and a count smaller than the cache's share can only be the rest
    either way, so then the three are added."""
    cached = (read or 0) + (write or 0)
    if prompt is not None and (uncached or prompt < cached):
        prompt += cached
    return Usage(
        input_tokens=None if prompt is None else int(prompt),
        cached_tokens=None if read is None else int(read),
        cache_write_tokens=None if write is None else int(write),
        **kw,
    )


def message_usage(message: dict) -> Usage | None:
    """The usage saved with one assistant message: its own ``usage`` (litellm, OpenRouter exports) or
    ``usage_metadata`` / ``usageMetadata`` (Gemini's SDK and REST responses), or that of the raw
    response kept in ``extra.response`` (mini-swe-agent)."""
    extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
    response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
    for raw in (message.get("usage"), message.get("usage_metadata"), message.get("usageMetadata")):
        if (u := usage_from(raw)) is not None:
            return u
    return usage_from(response.get("usage"))


def message_model(message: dict) -> str | None:
    """The model one assistant message names as the one that wrote it: its own ``model`` (a saved
    completion, a Gemini CLI record) or that of the raw response kept in ``extra.response``; None when
    it names none (the run's model, then)."""
    extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
    response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
    for raw in (message.get("model"), response.get("model")):
        if isinstance(raw, str) and raw.strip():
            return raw.strip()
    return None


def run_model(steps: list[Step], default: str) -> str:
    """A run's model: the one most of its calls went to (``Step.model``; on a tie the first named),
    else ``default`` (the model the log names for the run).  A router or a switch sends some calls to
    others; each keeps its own in ``Step.model``."""
    named = Counter(st.model for st in steps if st.model)
    return named.most_common(1)[0][0] if named else default


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def fill_unlogged_prompt(traj: Trajectory) -> None:
    """Set ``unlogged_prompt_tokens`` from the first call's logged input tokens, when a log has them.

    Logs rarely hold the whole prompt: tool definitions, a harness's system prompt (Claude Code) or a
    first message are sent but not written down.  The first call's prompt is the system prompt, the
    task and the first step's user and harness text, so the rest of its logged ``input_tokens`` is
    what the log lacks, counted with the model's tokenizer where one ships (else ``ceil(len/4)``).
    A value an ingester set already is left alone.  A log whose first calls were sent a prompt of
    their own (smolagents' plans: a planning request) names in ``extra.prompt_counted_from`` the step
    whose prompt is the agent's context; the steps before it count as held text.
    """
    if traj.unlogged_prompt_tokens or not traj.steps:
        return
    k = _counted_from(traj)
    usage = traj.steps[k].usage
    if usage is None or not usage.input_tokens:
        return
    from dtoc_rl.core.tokens import estimator_for_model

    est = estimator_for_model(traj.model_raw)
    call = traj.steps[k]
    texts = [traj.system_prompt, traj.task_text, call.user_text, call.harness_text]
    for st in traj.steps[:k]:
        texts += [st.user_text, st.assistant_text, st.output or ""]
    traj.unlogged_prompt_tokens = max(0, usage.input_tokens - sum(est.count(t) for t in texts if t))


def _counted_from(traj: Trajectory) -> int:
    try:
        k = json.loads(traj.extra).get("prompt_counted_from", 0) if traj.extra else 0
    except (ValueError, AttributeError):
        return 0
    return k if isinstance(k, int) and 0 <= k < len(traj.steps) else 0


def text_task_id(text: str, prefix: str, *, fold_space: bool = True) -> str:
    """A task id for runs that open with ``text``: ``prefix`` and 12 hex digits of its SHA-1, the same
    for the same text whatever its whitespace unless ``fold_space`` is off (the ids smolagents runs
    were given before, kept so that checkpoints' task lists still name them).  For logs whose task is
    a request, not a named task."""
    key = " ".join(text.split()) if fold_space else text
    return prefix + hashlib.sha1(key.encode("utf-8", "replace")).hexdigest()[:12]


def extra_of(text: str | None) -> dict[str, Any]:
    """A run's ``extra`` (JSON text) as a dict: empty where it is none, not JSON, or no object."""
    try:
        extra = json.loads(text or "{}")
    except ValueError:
        return {}
    return extra if isinstance(extra, dict) else {}


def set_extra(traj: Trajectory, key: str, value: Any, *, only_if_present: bool = False) -> None:
    """Set ``key`` of the run's ``extra`` (JSON text) to ``value``; ``only_if_present``: only when
    ``extra`` holds it already.  An ``extra`` that is no JSON object is left as it is."""
    try:
        extra = json.loads(traj.extra) if traj.extra else {}
    except ValueError:
        return
    if isinstance(extra, dict) and (key in extra or not only_if_present):
        extra[key] = value
        traj.extra = json.dumps(extra)


def name_model(traj: Trajectory, model: str) -> None:
    """Name the model of a run whose log names none, and count its unlogged prompt again with that
    model's tokenizer: ``finalize`` counted it before the model was known, as ``ceil(len/4)``, and
    ``fill_unlogged_prompt`` is the only thing that sets it, so the count it made is replaced."""
    traj.model_raw, traj.model_family = model, normalize_family(model)
    traj.unlogged_prompt_tokens = 0
    fill_unlogged_prompt(traj)
    from dtoc_rl.core.tokens import estimator_for_model

    estimator = repr(estimator_for_model(model))
    set_extra(traj, "unlogged_prompt_estimator", estimator, only_if_present=True)


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """A JSONL log's objects with their line numbers, and a one-line reason for each line that is
    not one (a torn line, a line of another kind): the rest are read all the same."""
    from dtoc_rl.ingest.openai_chat import iter_jsonl

    records, bad = [], []
    for lineno, rec, err in iter_jsonl(path):
        if err is None and isinstance(rec, dict):
            records.append((lineno, rec))
        else:
            bad.append(f"line {lineno}: {err or 'not an object'}")
    return records, bad


def lost_lines(bad: list[str], bridged: int, orphans: int) -> dict[str, Any]:
    """What a log's unreadable lines cost, for its ``extra``: the lines (the first five), the gaps its
    branch bridged and the replies dropped with their calls; nothing for a log read whole."""
    if not bad:
        return {}
    return {"bad_lines": "; ".join(bad[:5]), "bridged_gaps": bridged, "replies_without_call": orphans}


def tree_branch(
    records: list[tuple[int, dict]], id_key: str, parent_key: str, bridge: bool = True
) -> tuple[list[dict], int]:
    """The branch of a log written as a tree of records (each naming its parent) that ends at the
    file's last record, root first, as the harnesses that write them resume a session; and how many
    gaps were bridged.  With ``bridge`` (the file has unreadable lines), a record whose parent is not
    in the file goes on from the nearest readable record written before it, so one bad line costs that
    line only; without, the branch starts there."""
    index = {rec[id_key]: i for i, (_, rec) in enumerate(records) if isinstance(rec.get(id_key), str)}
    out: list[dict] = []
    seen: set[int] = set()
    bridged = 0
    i = len(records) - 1 if records else None
    while i is not None and i not in seen:
        seen.add(i)
        rec = records[i][1]
        out.append(rec)
        parent = rec.get(parent_key)
        if parent is None:
            break
        j = index.get(parent)
        if j is None:  # a parent on a line that could not be read
            if not bridge:
                break
            bridged += 1
            j = i - 1 if i > 0 else None
        i = j
    return out[::-1], bridged
