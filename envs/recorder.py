"""RecordTrajectory: write every finished episode as a trajectory, so live runs become datasets.

Three formats (``format=``):

* ``"chat"`` (default): generic OpenAI chat-completions JSONL, one line per
  episode, ``{"id", "model", "task_id", "success", "messages": [...], ...}``, the
  format :class:`~dtoc_rl.ingest.openai_chat.OpenAIChatIngester` reads, so
  ``dtoc-rl ingest recorded.jsonl -o DATASET`` turns it into a need-labelled
  dataset.  Tool replies carry the raw outputs (not envelopes).  The context
  management is kept as the scalar ``dtoc_visibility`` (JSON text: per step
  ``masked_before`` and the enable/disable events), which the ingester keeps in the
  trajectory's ``extra``; other scalars: ``source_env``, ``end_reason``,
  ``cost_usd``, ``tokens_in``, ``tokens_out``, ``api_calls``.
* ``"rows"``: canonical rows JSONL, ``json.dumps(Trajectory.to_row())`` per line,
  exactly the schema of :mod:`dtoc_rl.data.schema` with ``events`` and
  ``masked_before``; read back with :func:`read_rows`.
* ``"dataset"``: a Parquet dataset folder (:func:`dtoc_rl.data.dataset.write_dataset`),
  rewritten atomically after every episode; it loads with
  :func:`dtoc_rl.data.dataset.load_trajectories` and replays in ReplayEnv.

Envs: LiveEnv (anything whose ``unwrapped`` has ``trajectory()``), and ReplayEnv,
whose replayed log is written with the policy's schedule: ``masked_before`` of
every replayed step, and ``ContextEvent(kind="enable"/"disable")`` on the step
whose call first saw the change.  ReplayEnv keeps only compiled episodes, so the
recorder looks the logged trajectory up by ``traj_id`` in ``source`` (a dataset
folder, or Trajectory objects; default the bundled sample).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from dtoc_rl.core.actions import resolve
from dtoc_rl.data.chatlog import trajectory_to_chat, visibility
from dtoc_rl.data.schema import ContextEvent, Trajectory
from dtoc_rl.engine.features import check_action

__all__ = ["FORMATS", "RecordTrajectory", "read_rows", "trajectory_to_chat"]

FORMATS = ("chat", "rows", "dataset")


def _chat_row(traj: Trajectory) -> dict[str, Any]:
    extra = traj.extra_dict()
    row: dict[str, Any] = {
        "id": traj.traj_id,
        "model": traj.model_raw,
        "task_id": traj.task_id,
        "success": traj.success,
        "source_env": extra.get("env", traj.source),
        "end_reason": extra.get("end_reason"),
        "cost_usd": traj.cost_usd,
        "tokens_in": traj.tokens_in,
        "tokens_out": traj.tokens_out,
        "api_calls": traj.api_calls,
        "dtoc_visibility": json.dumps(visibility(traj)),
        "messages": trajectory_to_chat(traj),
    }
    return row


def read_rows(path: str | Path) -> list[Trajectory]:
    """Trajectories from a ``format="rows"`` file."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(Trajectory.from_row(json.loads(line)))
    return out


class RecordTrajectory(gym.Wrapper):
    """Writes every finished episode of the wrapped env (see the module docstring).

    Args:
        env: a LiveEnv or ReplayEnv (possibly wrapped).
        path: the output file (``chat``/``rows``: JSONL, appended to) or folder (``dataset``).
        format: ``"chat"`` (default), ``"rows"`` or ``"dataset"``.
        source: ReplayEnv only: where its logged trajectories come from (a dataset
            folder or Trajectory objects; default the bundled sample).
        overwrite: start ``path`` afresh instead of appending (``dataset`` always rewrites
            the folder it made, and refuses an existing folder unless ``overwrite``).

    ``recorded`` holds the trajectories written so far.
    """

    def __init__(
        self,
        env: gym.Env,
        path: str | Path,
        *,
        format: str = "chat",
        source: str | Path | Sequence[Trajectory] | None = None,
        overwrite: bool = False,
    ):
        super().__init__(env)
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.path = Path(path)
        self.format = format
        self.recorded: list[Trajectory] = []
        base = env.unwrapped
        self._live = callable(getattr(base, "trajectory", None))
        self._replay = hasattr(base, "sim") and hasattr(base, "episodes")
        if not (self._live or self._replay):
            raise TypeError(
                f"RecordTrajectory records LiveEnv (an env with trajectory()) or ReplayEnv; "
                f"got {type(base).__name__}"
            )
        self._source = source
        self._logged: dict[str, Trajectory] | None = None
        if format == "dataset":
            if self.path.exists() and not overwrite:
                raise FileExistsError(f"{self.path} already exists; pass overwrite=True to replace it")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if overwrite or not self.path.exists():
                self.path.write_text("", encoding="utf-8")
        self._info: dict[str, Any] | None = None
        self._schedule: dict[int, tuple[list[int], list[ContextEvent]]] = {}

    # -- gymnasium ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._info = info
        self._schedule = {}
        return obs, info

    def step(self, action):
        if self._replay and not self._live:
            self._note_replay_action(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._info = info
        if terminated or truncated:
            self.write(self.episode_trajectory(info))
        return obs, reward, terminated, truncated, info

    # -- building ------------------------------------------------------------------------
    def episode_trajectory(self, info: dict[str, Any] | None = None) -> Trajectory:
        """The current episode as a Trajectory (the finished one, after the last step)."""
        base = self.env.unwrapped
        if self._live:
            return base.trajectory()
        return self._replay_trajectory(info or {})

    def _note_replay_action(self, action) -> None:
        base = self.env.unwrapped
        sim = base.sim
        if sim is None or sim.done or self._info is None:
            return
        try:
            en, di = check_action(action, base.N, base.action_space)
        except ValueError:
            return  # the env raises its own error
        slots = np.asarray(self._info["slot_steps"])
        filled = slots[slots >= 0]  # the window's outputs fill the first slots
        ch = resolve(en, di, sim.visible[filled])
        enabled = sorted(int(k) for k in filled[ch.enable])
        disabled = sorted(int(k) for k in filled[ch.disable])
        t = sim.t
        visible = sim.visible.copy()
        visible[enabled] = True
        visible[disabled] = False
        stored = np.flatnonzero(sim.ep.has_out[:t])
        masked = [int(k) for k in stored if not visible[k]]
        harness = action.get("harness") if isinstance(action, dict) else None
        if harness is not None:  # the run's own harness's changes (OnHarness): in what was masked, no event
            own = {int(k) for k, h in zip(filled, np.asarray(harness)[: len(filled)]) if h}
            enabled, disabled = [k for k in enabled if k not in own], [k for k in disabled if k not in own]
        events = [ContextEvent(kind="enable", targets=enabled)] if enabled else []
        if disabled:
            events.append(ContextEvent(kind="disable", targets=disabled))
        self._schedule[t] = (masked, events)

    def _logged_trajectory(self, traj_id: str) -> Trajectory:
        if self._logged is None:
            src = self._source
            if src is None or isinstance(src, str | Path):
                from dtoc_rl.data.dataset import load_trajectories

                if src is None:
                    from dtoc_rl.data.paths import bundled_dataset

                    src = bundled_dataset()
                trajs: Iterable[Trajectory] = load_trajectories(src)
            else:
                trajs = src
            self._logged = {t.traj_id: t for t in trajs}
        if traj_id not in self._logged:
            raise KeyError(f"trajectory {traj_id!r} is not in the recorder's source; pass source=")
        return self._logged[traj_id]

    def _replay_trajectory(self, info: dict[str, Any]) -> Trajectory:
        sim = self.env.unwrapped.sim
        traj = copy.deepcopy(self._logged_trajectory(sim.ep.traj_id))
        traj.steps = traj.steps[: sim.t]
        first = sim.ep.starts[sim.ep.call_of_step].tolist()  # the step each step's model call starts at
        for s in traj.steps:
            masked, events = self._schedule.get(s.index, ([], []))
            if first[s.index] != s.index:  # a later tool call of the same model call saw the same context
                masked = list(self._schedule.get(first[s.index], ([], []))[0])
            s.masked_before = masked
            s.events = [e for e in s.events if e.kind not in ("enable", "disable")] + events
        extra = traj.extra_dict()
        extra["replay"] = {
            "env": "dtoc_rl/Replay-v0",
            "totals": info.get("totals"),
            "all_visible": info.get("all_visible"),
        }
        traj.extra = json.dumps(extra, default=str)
        traj.traj_id = f"replay/{traj.traj_id}/{len(self.recorded)}"
        return traj

    # -- writing -----------------------------------------------------------------------
    def write(self, traj: Trajectory) -> None:
        self.recorded.append(traj)
        if self.format == "dataset":
            from dtoc_rl.data.dataset import write_dataset

            write_dataset(
                self.recorded, self.path, overwrite=True, summary={"recorded_by": "RecordTrajectory"}
            )
            return
        row = _chat_row(traj) if self.format == "chat" else traj.to_row()
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
