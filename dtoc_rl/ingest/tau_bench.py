"""tau-bench result files (``historical_trajectories/<model>-<domain>.json``).

Format (sierra-research/tau-bench, ``run.py`` → ``EnvRunResult``): a JSON list
of ``{"task_id", "trial", "reward", "info", "traj"}``.  ``traj`` is the OpenAI
chat of the tool-calling agent: system policy, then the simulated user's
messages (an LLM), assistant turns with ``tool_calls`` and ``role: "tool"``
replies.  tau-bench reuses ``tool_call_id`` values within one conversation
(once the earlier call is answered), so replies are matched to the oldest
still-unanswered call with that id (see
:func:`dtoc_rl.ingest.openai_chat.chat_to_steps`).

* task: the first user message (what the agent saw); the hidden user
  ``instruction`` and the ground-truth actions stay in ``extra``.
* a tool output starting with ``"Error:"`` is an error (tau-bench's
  ``Env.step`` wraps tool exceptions as ``f"Error: {e}"``).
* the simulated user's closing message (usually ``###STOP###``) comes after the
  last step, so it is kept as ``extra.trailing_user_text``.
* label: ``success = reward == 1`` (``outcome_source = "reward"``).
* model: ``info.model`` when present, else the file name minus the domain
  suffix (``gpt-4o-airline.json`` → ``gpt-4o``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import finalize
from dtoc_rl.ingest.openai_chat import chat_to_steps, parse_rows

_DOMAIN = re.compile(r"^(?P<model>.+?)[-_](?P<domain>airline|retail|telecom)$")
_HEAD = re.compile(r"^\s*\[\s*\{")


def _is_error(text: str) -> bool:
    return text.startswith("Error:")


class TauBenchIngester(Ingester):
    name = "tau-bench"

    def detect(self, path: Path, head: str) -> bool:
        return (
            path.suffix == ".json"
            and _HEAD.match(head) is not None
            and all(f'"{k}"' in head for k in ("task_id", "traj", "reward"))
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        data = read_json(path)
        if not isinstance(data, list):
            raise IngestError(f"expected a JSON list of tau-bench results, got {type(data).__name__}", path)
        m = _DOMAIN.match(path.stem)
        file_model = m.group("model") if m else path.stem
        domain = m.group("domain") if m else ""
        seen: set[str] = set()

        def one(item: object, number: int) -> Trajectory:
            if not isinstance(item, dict):
                raise IngestError(f"is {type(item).__name__}, expected object")
            for key, typ in (("task_id", (int, str)), ("traj", list), ("info", dict)):
                if not isinstance(item.get(key), typ) or isinstance(item.get(key), bool):
                    raise IngestError(f"'{key}' is missing or has type {type(item.get(key)).__name__}")
            reward = item.get("reward")
            if not isinstance(reward, (int, float)) or isinstance(reward, bool):
                raise IngestError(f"'reward' is {type(reward).__name__}, expected a number")
            trial = item.get("trial", 0)
            info = item["info"]
            cp = chat_to_steps(item["traj"], where="traj", is_error=_is_error)
            if not cp.steps:
                raise IngestError("empty trajectory: 'traj' has no assistant turns")
            model = info.get("model") if isinstance(info.get("model"), str) else file_model
            task_id = f"{domain}/{item['task_id']}" if domain else str(item["task_id"])
            key = f"{item['task_id']}/trial{trial}"
            if key in seen:
                key = f"{key}#{number}"
            seen.add(key)
            task = info.get("task") if isinstance(info.get("task"), dict) else {}
            extra = {
                "trial": trial,
                "reward": reward,
                "domain": domain,
                "user_instruction": task.get("instruction"),
                "user_id": task.get("user_id"),
                "gt_actions": task.get("actions"),
                "gt_outputs": task.get("outputs"),
                "reward_info": info.get("reward_info"),
                "user_cost": info.get("user_cost"),
                "trailing_user_text": cp.trailing_user,
            }
            return finalize(
                Trajectory(
                    traj_id=f"{self.name}/{path.stem}/{key}",
                    source=self.name,
                    model_raw=model,
                    model_family=normalize_family(model),
                    task_id=task_id,
                    task_text=cp.task,
                    system_prompt=cp.system,
                    success=reward == 1,
                    outcome_source="reward",
                    source_path=str(path),
                    extra=json.dumps(extra),
                    steps=cp.steps,
                )
            )

        rows = ((i, item, None) for i, item in enumerate(data))
        yield from parse_rows(path, rows, one, unit="item")
