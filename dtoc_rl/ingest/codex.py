"""OpenAI Codex CLI session rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One file is one session, one JSON object per line: ``{"timestamp", "type", "payload"}`` with
``type`` one of ``session_meta`` (the session id, working folder, CLI version), ``turn_context``
(the model, per user turn), ``response_item`` (a Responses API item: messages, reasoning, tool
calls and their outputs), ``event_msg`` (UI events; ``token_count`` ones carry the provider's usage
of the latest model call in ``info.last_token_usage``) and ``compacted`` (a summary that replaced the
history).  Rollouts written before the ``payload`` envelope (CLI versions of mid-2025) hold a
``{"id", "timestamp", "instructions"}`` first line and the items themselves on the other lines;
both are read.

Mapping: the items go through :func:`~dtoc_rl.ingest.responses.responses_to_messages` and
:func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`, so a tool call is a step exactly as in a
chat-completions log.  The user messages Codex injects before the task (``<environment_context>``,
``<user_instructions>``, ``AGENTS.md`` instructions) are harness text, read as system prompt, so the
task is the first message the user typed.  Each ``token_count`` event with a new running total gives
its ``last_token_usage`` (``input_tokens`` including ``cached_input_tokens``, ``output_tokens``
including reasoning, as the Responses API counts them) to the model call it follows; repeated events
with an unchanged total are the same call reported twice and are skipped.  The model is the first
``turn_context``'s (a session that switched models names the others in ``extra.models``).

A last line cut short (a session still being written) is left out and marked
``extra.torn_last_line``; a bad line anywhere else fails the file, naming the line.

Rollouts carry no outcome: ``success`` is None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError
from dtoc_rl.ingest.common import finalize
from dtoc_rl.ingest.openai_chat import chat_to_steps, content_text, iter_jsonl
from dtoc_rl.ingest.responses import ITEM_TYPES, responses_to_messages

__all__ = ["CodexRolloutIngester"]

_META = re.compile(r'^\s*\{[^\n]*"type"\s*:\s*"session_meta"[^\n]*"payload"\s*:')
_LEGACY_META = re.compile(r'^\s*\{\s*"id"\s*:\s*"[^"\n]*"\s*,\s*"timestamp"\s*:[^\n]*"instructions"\s*:')
# user messages Codex writes itself, before or between the user's own
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")


class CodexRolloutIngester(Ingester):
    name = "codex"

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix != ".jsonl":
            return False
        if _META.match(head):
            return True
        if _LEGACY_META.match(head):  # an older rollout: items follow the first line
            second = head.split("\n", 2)[1] if head.count("\n") >= 1 else ""
            return re.search(r'"(?:type|record_type)"\s*:', second) is not None
        return False

    def parse(self, path: Path) -> Iterator[Trajectory]:
        items: list[dict] = []
        meta: dict[str, Any] = {}
        models: list[str] = []
        last_total: Any = None
        bad: list[str] = []
        torn: str | None = None  # the last unreadable line, if it turns out to be the file's last
        for lineno, rec, err in iter_jsonl(path):
            if torn:  # the unreadable line was not the last one after all
                bad.append(torn)
                torn = None
            if err is not None:  # forgiven only as the last line: a session still being written
                torn = f"line {lineno}: {err}"
                continue
            if not isinstance(rec, dict):
                bad.append(f"line {lineno}: not an object")
                continue
            kind, payload = rec.get("type"), rec.get("payload")
            if "payload" not in rec:  # a rollout without the envelope
                if lineno == 1 and "instructions" in rec:
                    meta = rec
                elif isinstance(kind, str) and kind in ITEM_TYPES:
                    items.append(_harness_text(rec))
                continue
            if not isinstance(payload, dict):
                bad.append(f"line {lineno}: payload is {type(payload).__name__}, expected object")
                continue
            if kind == "session_meta":
                meta = payload
            elif kind == "turn_context":
                model = payload.get("model")
                if isinstance(model, str) and model and model not in models:
                    models.append(model)
            elif kind == "response_item":
                items.append(_harness_text(payload))
            elif kind == "compacted":
                items.append({"type": "dtoc_compaction", "text": payload.get("message")})
            elif kind == "event_msg" and payload.get("type") == "token_count":
                info = payload.get("info")
                if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
                    continue  # rate limits only, no usage yet
                total = info.get("total_token_usage")
                if total is not None and total == last_total:
                    continue  # the same call reported again
                last_total = total
                items.append({"type": "dtoc_usage", "usage": info["last_token_usage"]})
        if bad:
            shown = "; ".join(bad[:5]) + (f"; … {len(bad) - 5} more" if len(bad) > 5 else "")
            raise IngestError(f"{len(bad)} bad lines: {shown}", path)
        if not items:
            raise IngestError("no response items: an empty session", path)
        rp = responses_to_messages(items, "response_items")
        cp = chat_to_steps(rp.messages, "response_items")
        if not cp.steps:
            raise IngestError("empty trajectory: no assistant turns", path)
        session = str(meta.get("id") or path.stem)
        model = models[0] if models else str(meta.get("model") or "")
        extra = {
            k: meta[k]
            for k in ("cwd", "cli_version", "originator", "model_provider", "source")
            if isinstance(meta.get(k), (str, int, float, bool))
        }
        if len(models) > 1:
            extra["models"] = ",".join(models)
        if rp.skipped:
            extra["skipped_items"] = json.dumps(dict(sorted(rp.skipped.items())))
        if torn:
            extra["torn_last_line"] = True
        if rp.unattached_usage:
            extra["unattached_usage_events"] = rp.unattached_usage
        if cp.trailing_user:
            extra["trailing_user_text"] = cp.trailing_user
        yield finalize(
            Trajectory(
                traj_id=f"{self.name}/{session}",
                source=self.name,
                model_raw=model,
                model_family=normalize_family(model),
                task_id=session,
                task_text=cp.task,
                system_prompt="\n\n".join(t for t in (str(meta.get("instructions") or ""), cp.system) if t),
                success=None,
                outcome_source="",
                source_path=str(path),
                extra=json.dumps(extra),
                steps=cp.steps,
            )
        )


def _harness_text(item: dict) -> dict:
    # Codex's own user messages become developer messages: chat_to_steps reads them as system prompt
    # (before the task) or as text sent with the next call, never as the task.
    if item.get("type") == "message" and item.get("role") == "user":
        text = content_text(item.get("content"), "message.content").lstrip()
        if text.startswith(_INJECTED):
            return {**item, "role": "developer"}
    return item
