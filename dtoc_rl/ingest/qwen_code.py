"""Qwen Code session files (``~/.qwen/projects/<project>/chats/<session id>.jsonl``).

Format (QwenLM/qwen-code, its chat recording service; read off real sessions of Qwen Code 0.24):
one JSON record per line, ``{"uuid", "parentUuid", "sessionId", "timestamp", "type", "cwd",
"version", ...}``.  ``type`` is ``user`` (the user's words), ``assistant`` (a model call: ``model``,
``usageMetadata`` in Gemini's shape), ``tool_result`` (the answers to a call's tools) or ``system``
(the CLI's own records: telemetry, snapshots, titles, and ``chat_compression``, whose
``systemPayload.compressedHistory`` replaced the model's history).  A subagent's transcript
(``subagents/<session>/agent-<id>.jsonl``: records with ``agentId`` and ``isSidechain``, the parent's
``sessionId``) writes a round's text and usage as one record and each of its calls as a record of its
own: they are read as one model call, and the trajectory is named after the agent.  The first three
hold the turn as a Gemini API content under ``message`` (``{"role": "user" | "model", "parts": [...]}``: text,
``functionCall`` and ``functionResponse`` parts).

Mapping: the records form a tree by ``parentUuid`` (a rewound or resumed session branches); the
session is the branch ending at the last record of the file, root first.  Its contents are read by
the Gemini reader (:func:`~dtoc_rl.ingest.gemini.contents_to_chat`, which pairs each response with
its call), each model call's usage and time kept with it.  A compression is a compaction event:
its summary (the text of the compressed history) is the next call's user text; the turns the
compression kept are already on the branch and are not read twice.  Each call's model is its
assistant record's, the run's the one most calls went to; the task the first user text; sessions
record no outcome (``success`` None).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import ContextEvent, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError
from dtoc_rl.ingest.common import finalize, lost_lines, read_records, run_model, tree_branch
from dtoc_rl.ingest.gemini import contents_to_chat, part_field
from dtoc_rl.ingest.openai_chat import chat_to_steps, drop_orphan_replies

__all__ = ["QwenCodeIngester"]

_TURNS = ("user", "assistant", "tool_result")  # a realtime_message record never reaches the model
# a record holding a Gemini content: Claude Code's transcripts look alike but hold "content"
_GEMINI_MESSAGE = re.compile(r'"message"\s*:\s*\{\s*"role"\s*:\s*"(?:user|model)"\s*,\s*"parts"\s*:')


class QwenCodeIngester(Ingester):
    name = "qwen-code"

    def detect(self, path: Path, head: str) -> bool:
        return (
            path.suffix == ".jsonl"
            and '"parentUuid"' in head
            and '"sessionId"' in head
            and _GEMINI_MESSAGE.search(head) is not None
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        numbered, bad = read_records(path)
        records = [rec for _, rec in numbered]
        branch, bridged = tree_branch(numbered, "uuid", "parentUuid", bridge=bool(bad))
        turns = [r for r in branch if r.get("type") in _TURNS and isinstance(r.get("message"), dict)]
        if not turns:
            raise IngestError("no user, assistant or tool_result record: not a Qwen Code session", path)
        contents: list[dict] = []
        cleared: list[tuple[int, set[str]]] = []  # (model turns before it, calls whose outputs it cleared)
        for r in branch:
            if r.get("type") == "system" and r.get("subtype") == "chat_compression":
                summary, emptied, kept = _compressed(r.get("systemPayload"), contents)
                if summary:  # the history replaced by a summary, and the latest calls kept
                    contents.append({"role": "user", "parts": [{"text": summary}], "dtoc_compaction": True,
                                     "dtoc_keeps_turns": kept})  # fmt: skip
                if emptied:  # the history kept, old outputs cleared (/compress-fast)
                    cleared.append((sum(c.get("role") == "model" for c in contents), emptied))
            elif r.get("type") in _TURNS and isinstance(r.get("message"), dict):
                content = dict(r["message"])
                prev = contents[-1] if contents else None
                if _call_only(r) and prev is not None and prev.get("role") == "model":
                    # a subagent's transcript writes each call of a round as a record of its own
                    prev["parts"] = [*prev.get("parts", []), *content.get("parts", [])]
                    continue
                if r.get("type") == "assistant":
                    if isinstance(r.get("usageMetadata"), dict):
                        content["usageMetadata"] = _output_once(r["usageMetadata"])
                    content["timestamp"] = r.get("timestamp")
                    content["model"] = r.get("model")
                contents.append(content)
        msgs = contents_to_chat(contents)
        orphans = drop_orphan_replies(msgs) if bad else 0  # their calls were on the lines lost
        cp = chat_to_steps(msgs, "records")
        for made_before, ids in cleared:
            hidden = [i for i, st in enumerate(cp.steps) if st.tool_call_id in ids]
            after = next((st for st in cp.steps if st.turn >= made_before), None)
            if after is not None and hidden:
                after.events.append(ContextEvent("mask", hidden, "outputs cleared by a compression"))
        if not cp.steps:
            raise IngestError("empty session: no model call", path)
        session = next(
            (r.get("sessionId") for r in records if isinstance(r.get("sessionId"), str)), path.stem
        )
        agent = next(
            (r["agentId"] for r in turns if isinstance(r.get("agentId"), str) and r.get("isSidechain")), None
        )
        model = run_model(
            cp.steps, next((r["model"] for r in turns if isinstance(r.get("model"), str) and r["model"]), "")
        )
        extra: dict[str, Any] = {"cwd": turns[0].get("cwd"), "version": turns[0].get("version")}
        if agent is not None:  # a subagent's transcript: its session id is the parent session's
            extra["parent_session"], extra["agent"] = session, turns[0].get("agentName")
        if len(branch) < len(records):
            extra["records_off_branch"] = len(records) - len(branch)
        extra.update(lost_lines(bad, bridged, orphans))
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}" + (f"/{agent}" if agent else ""),
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=str(session),
                task_text=cp.task,
                system_prompt=cp.system,
                success=None,
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )


def _call_only(record: dict) -> bool:
    """A subagent's assistant record holding function calls and nothing else, without usage of its
    own: one call of the round the record before it opened."""
    parts = record["message"].get("parts") or []
    return (
        record.get("type") == "assistant"
        and bool(record.get("isSidechain"))
        and not record.get("usageMetadata")
        and bool(parts)
        and all(isinstance(p, dict) and part_field(p, "functionCall") is not None for p in parts)
    )


def _compressed(payload: Any, before: list[dict]) -> tuple[str, set[str], int]:
    """What a compression changed in the model's history: the user text it put in place of what it
    dropped (a summary; the model's acknowledgement and the turns already on the branch are not new
    text), the calls whose outputs it kept but cleared (its fast mode keeps every turn), and how many
    of the branch's model turns it kept."""
    history = payload.get("compressedHistory") if isinstance(payload, dict) else None
    said = {p.get("text") for c in before for p in c.get("parts") or () if isinstance(p, dict)}
    answered = {
        fr["id"]: fr.get("response")
        for c in before
        for p in c.get("parts") or ()
        if isinstance(fr := part_field(p, "functionResponse"), dict) and isinstance(fr.get("id"), str)
    }
    turns = {json.dumps(c.get("parts"), sort_keys=True) for c in before if c.get("role") == "model"}
    texts, emptied, kept = [], set(), 0
    for c in history if isinstance(history, list) else ():
        for p in c.get("parts") or () if isinstance(c, dict) else ():
            if not isinstance(p, dict):
                continue
            fr = part_field(p, "functionResponse")
            rid = fr.get("id") if isinstance(fr, dict) else None
            if isinstance(rid, str) and rid in answered and fr.get("response") != answered[rid]:
                emptied.add(rid)
            elif c.get("role") == "user" and isinstance(p.get("text"), str) and p["text"] not in said:
                texts.append(p["text"])
        if (
            isinstance(c, dict)
            and c.get("role") == "model"
            and json.dumps(c.get("parts"), sort_keys=True) in turns
        ):
            kept += 1
    return "\n\n".join(texts), emptied, kept


def _output_once(usage: dict) -> dict:
    """Qwen Code's usage with its thinking counted once: the Gemini reader adds ``thoughtsTokenCount``
    to ``candidatesTokenCount``, as Gemini bills them, but Qwen Code's converters of OpenAI- and
    Anthropic-style answers put the completion (thinking included) in ``candidatesTokenCount`` too.
    The answer's own tokens are its total less its prompt, as Qwen Code counts them; without a total,
    thinking no larger than the candidates is taken to be in them."""
    total, prompt = usage.get("totalTokenCount"), usage.get("promptTokenCount")
    out, thoughts = usage.get("candidatesTokenCount") or 0, usage.get("thoughtsTokenCount") or 0
    tool = usage.get("toolUsePromptTokenCount") or 0  # a built-in tool's prompt: input, not output
    if isinstance(total, int) and isinstance(prompt, int) and total > prompt + tool:
        return {**usage, "candidatesTokenCount": total - prompt - tool, "thoughtsTokenCount": 0}
    if thoughts and out >= thoughts:
        return {**usage, "thoughtsTokenCount": 0}
    return usage
