"""mini-swe-agent ``.traj.json`` (``trajectory_format: "mini-swe-agent-1"``).

Format (mini-swe-agent 1.x, ``minisweagent/run/utils/save.py``): ``messages``
alternates assistant turns holding exactly one ```` ```bash ```` block with
user messages holding ``<returncode>…</returncode><output>…</output>``.  The
first user message is the task; ``info.model_stats`` has cost and call count.
Labels come from the nearest ``selected_labels.jsonl`` (``resolved``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cap_output, finalize, load_selected_labels, message_usage, new_step
from dtoc_rl.ingest.text_actions import bash_block  # its action regex: a ```python block is no action


def _content(msg: dict, i: int) -> str:
    c = msg.get("content", "")
    if isinstance(c, list):  # content blocks
        return "".join(b.get("text", "") for b in c if isinstance(b, dict))
    if not isinstance(c, str):
        raise IngestError(f"messages[{i}].content is {type(c).__name__}, expected string or list")
    return c


class MiniSweAgentIngester(Ingester):
    name = "mini-swe-agent"

    def detect(self, path: Path, head: str) -> bool:
        if not head.lstrip().startswith("{"):
            return False
        return re.search(r'"trajectory_format"\s*:\s*"mini-swe-agent', head) is not None or (
            path.name.endswith(".traj.json") and '"messages"' in head
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise IngestError("expected an object with a 'messages' list (mini-swe-agent .traj.json)", path)
        msgs = data["messages"]
        info = data.get("info") or {}
        instance_id = data.get("instance_id") or path.name.removesuffix(".traj.json")
        if not isinstance(info, dict):
            raise IngestError(f"'info' is {type(info).__name__}, expected object", path)
        model_raw = (((info.get("config") or {}).get("model") or {}).get("model_name")) or ""
        if not isinstance(model_raw, str):
            raise IngestError(
                f"info.config.model.model_name is {type(model_raw).__name__}, expected string", path
            )
        system = ""
        task = ""
        steps = []
        pending_user = ""
        turn = 0
        for i, msg in enumerate(msgs):
            if not isinstance(msg, dict):
                raise IngestError(f"messages[{i}] is {type(msg).__name__}, expected object", path)
            role = msg.get("role")
            text = _content(msg, i)
            if role == "system":
                system = text
            elif role == "user":
                if not task and not steps:
                    task = text
                elif steps and steps[-1].tool_name and steps[-1].output is None:
                    steps[-1].output = cap_output(text)
                else:
                    pending_user += text
            elif role == "assistant":
                # no action (zero or several bash blocks): the harness answers with its format error
                # and keeps the whole reply in every later prompt, code blocks included
                cmd, thought = bash_block(text)
                steps.append(
                    new_step(
                        turn=turn,
                        user_text=pending_user,
                        assistant_text=thought,
                        tool_name="bash" if cmd is not None else None,
                        tool_args=cmd or "",
                        usage=message_usage(msg),
                    )
                )
                pending_user = ""
                turn += 1
        if not steps:
            raise IngestError("empty trajectory: no assistant turns", path)
        label = next((r for r in load_selected_labels(path) if r.get("instance_id") == instance_id), None)
        stats = info.get("model_stats") or {}
        traj = Trajectory(
            traj_id=f"{self.name}/{instance_id}",
            source=self.name,
            model_raw=model_raw,
            model_family=normalize_family(model_raw),
            task_id=instance_id,
            task_text=task,
            system_prompt=system,
            success=None if label is None else bool(label.get("resolved")),
            outcome_source="selected_labels.jsonl:resolved" if label is not None else "",
            cost_usd=stats.get("instance_cost"),
            api_calls=stats.get("api_calls"),
            source_path=str(path),
            extra=json.dumps(
                {"exit_status": info.get("exit_status"), "mini_version": info.get("mini_version")}
            ),
            steps=steps,
        )
        yield finalize(traj)
