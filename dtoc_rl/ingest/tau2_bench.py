"""τ²-bench results files (``data/simulations/<name>.json`` of sierra-research/tau2-bench).

Format (``tau2.data_model.simulation.Results``): ``{"timestamp", "info": {"agent_info": {"llm"},
"environment_info": {"domain_name"}, ...}, "tasks": [...], "simulations": [...]}``; a simulation is
``{"id", "task_id", "trial", "messages", "reward_info": {"reward"}, "termination_reason"}``.  Its
messages are chat messages with τ²'s own field names: an assistant's ``tool_calls`` are ``{"id",
"name", "arguments", "requestor"}``, a tool reply names its call by ``id`` and flags ``error``, and
assistant and user messages each carry the ``usage`` of the model call that wrote them.

Mapping (through :func:`~dtoc_rl.ingest.openai_chat.chat_to_steps`): each simulation is one
trajectory; the agent's tool calls and their replies are its steps, the simulated user's messages
are user text (the first is the task; the environment's ``policy``, which the agent's system prompt
holds, is its system prompt).  In the telecom domain the user has tools too (``requestor:
"user"``): those calls and their replies happen on the user's side, out of the agent's context, and
are left out, as is the user simulator's usage.  The agent's opening greeting (τ² writes it without
a model call) is prompt text before the task.  ``success = reward == 1``; the model is
``info.agent_info.llm``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import finalize
from dtoc_rl.ingest.openai_chat import chat_to_steps

__all__ = ["Tau2BenchIngester"]


class Tau2BenchIngester(Ingester):
    name = "tau2-bench"

    def detect(self, path: Path, head: str) -> bool:
        # Results start with their "info" (the agent's and the environment's), the long task list after
        return (
            path.suffix == ".json"
            and head.lstrip().startswith("{")
            and all(re.search(rf'"{key}"\s*:', head) for key in ("agent_info", "environment_info"))
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        root = read_json(path)
        if not isinstance(root, dict) or not isinstance(root.get("simulations"), list):
            raise IngestError("not a τ²-bench results file: no 'simulations' list", path)
        info = root.get("info") if isinstance(root.get("info"), dict) else {}
        agent = info.get("agent_info") if isinstance(info.get("agent_info"), dict) else {}
        env = info.get("environment_info") if isinstance(info.get("environment_info"), dict) else {}
        model = str(agent.get("llm") or "")
        domain = str(env.get("domain_name") or "")
        policy = env.get("policy") if isinstance(env.get("policy"), str) else ""
        for i, sim in enumerate(root["simulations"]):
            w = f"simulations[{i}]"
            if not isinstance(sim, dict):
                raise IngestError(f"{w} is {type(sim).__name__}, expected object", path)
            messages = tau2_messages(sim.get("messages"), f"{w}.messages")
            if policy:  # the domain policy the agent's system prompt holds (the file keeps it once)
                messages.insert(0, {"role": "system", "content": policy})
            cp = chat_to_steps(messages, f"{w}.messages")
            if not cp.steps:
                continue  # a simulation that never reached the agent (an infrastructure error)
            reward_info = sim.get("reward_info") if isinstance(sim.get("reward_info"), dict) else {}
            reward = reward_info.get("reward")
            reward = (
                float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
            )
            task = str(sim.get("task_id", i))
            trial = sim.get("trial", 0)
            extra: dict[str, Any] = {"domain": domain, "trial": trial, "reward": reward}
            for key in ("termination_reason", "agent_cost"):
                if isinstance(sim.get(key), (str, int, float)):
                    extra[key] = sim[key]
            if cp.trailing_user:
                extra["trailing_user_text"] = cp.trailing_user
            yield finalize(
                Trajectory(
                    traj_id=f"{self.name}/{path.stem}/{sim.get('id') or f'{task}-{trial}'}",
                    source=self.name,
                    model_raw=model,
                    model_family=normalize_family(model),
                    task_id=f"{domain}/{task}" if domain else task,
                    task_text=cp.task,
                    system_prompt=cp.system,
                    success=None if reward is None else reward == 1.0,
                    outcome_source="" if reward is None else "reward",
                    source_path=str(path),
                    extra=json.dumps(extra),
                    steps=cp.steps,
                )
            )


def tau2_messages(messages: Any, where: str) -> list[dict]:
    """A simulation's messages as chat-completions messages: the agent's context only."""
    if not isinstance(messages, list):
        raise IngestError(f"{where} is {type(messages).__name__}, expected a list of messages")
    out: list[dict] = []
    for i, m in enumerate(messages):
        w = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise IngestError(f"{w} is {type(m).__name__}, expected object")
        role = m.get("role")
        if role == "tool":
            if m.get("requestor", "assistant") == "user":
                continue  # the user's own tool, run on the user's side
            out.append(
                {"role": "tool", "tool_call_id": m.get("id"), "content": m.get("content") or "",
                 "is_error": m.get("error") is True}
            )  # fmt: skip
        elif role == "assistant":
            if not out and not m.get("tool_calls") and not m.get("usage"):
                # τ²'s fixed greeting, written without a model call: prompt text before the task
                out.append({"role": "system", "content": m.get("content") or ""})
                continue
            calls = []
            raw = m.get("tool_calls") or []
            if not isinstance(raw, list):
                raise IngestError(f"{w}.tool_calls is {type(raw).__name__}, expected a list")
            for k, c in enumerate(raw):
                if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                    raise IngestError(f"{w}.tool_calls[{k}] must be an object with a 'name'")
                calls.append(
                    {"id": c.get("id"), "function": {"name": c["name"], "arguments": c.get("arguments")}}
                )
            msg = {"role": "assistant", "content": m.get("content") or "", "tool_calls": calls}
            if isinstance(m.get("usage"), dict):
                msg["usage"] = m["usage"]
            out.append(msg)
        elif role in ("user", "system"):
            if m.get("content"):  # a user message that only calls the user's own tools is not text
                out.append({"role": role, "content": m["content"]})
        else:
            raise IngestError(f"{w} has role {role!r}, expected system, user, assistant or tool")
    return out
