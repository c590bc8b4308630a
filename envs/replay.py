"""ReplayEnv: replay logged trajectories under a context-management policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from dtoc_rl.envs.data import load_episodes
from dtoc_rl.episode import Episode
from dtoc_rl.features import GLOBAL_FEATURES, ITEM_FEATURES, action_space, observation_space
from dtoc_rl.schema import NEED_KINDS, Trajectory
from dtoc_rl.simulator import CostConfig, Simulator, Totals, baseline_totals

__all__ = ["ReplayEnv"]


class ReplayEnv(gym.Env):
    """Replays one logged agent trajectory per episode; the policy decides which past
    tool outputs the agent sees.

    ## Description
    The DTOC store is the state.  Each episode replays a real logged trajectory
    (from the bundled sample, a dataset made by ``dtoc-rl ingest``, or objects
    passed in).  At every step the logged agent makes its next model call,
    seeing the context as the policy has shaped it; the need labels say which
    earlier outputs that call used; the call's output is stored, visible; then
    the policy's enable/disable sets take effect before the next call.

    The logged agent cannot react to what it was not shown, so a needed output
    that is hidden is a **miss**.  By default (``miss="reread"``, the paper's
    re-read metric) the agent re-reads it: one extra model call over the whole
    active context, after which the output is visible again (it re-enters the
    context, so the prompt cache is re-written from its position).  With
    ``miss="fail"`` a miss ends the episode as a failure; ``miss="calibrated"``
    re-reads with probability ``reread_prob`` and otherwise absorbs the need.
    A policy that re-enables an output before it is needed avoids the miss.

    ## Action Space
    ``Dict(enable=MultiBinary(N), disable=MultiBinary(N))`` over ``N = max_items``
    slots.  Slot i holds the i-th oldest of the ``N`` most recently stored
    outputs (``obs["item_mask"]``); older outputs keep their visibility.  Setting
    a padding slot, enabling a visible or disabling a hidden output does
    nothing; padding slots and slots in both sets are counted in
    ``info["invalid_actions"]``.  The valid moves are ``obs["enable_mask"]`` (hidden
    outputs) and ``obs["disable_mask"]`` (visible ones), also in ``info``.

    ## Observation Space
    A ``Dict``:

    * ``items`` ``Box(N, F)`` float32, per slot: ``est_tokens_k`` (the output's
      estimated tokens / 1000), ``age`` (steps since stored), ``visible``,
      ``times_needed`` (needs on it so far), ``since_need`` (steps since its last
      need, or its age), ``modified`` (what it read was modified later, so far),
      ``is_error``, ``superseded`` (a later step re-read the same resource, so
      far), ``rereads`` (misses it caused), ``toggles`` (visibility changes),
      ``turns_after`` (user turns begun after it).
    * ``item_tool`` ``Box(N,)`` int64: tool category id (``dtoc_rl.tools``).
    * ``item_mask``, ``enable_mask``, ``disable_mask``: ``MultiBinary(N)``.
    * ``globals`` ``Box(G,)`` float32: active tokens / 1000, budget / 1000, step,
      stored outputs, visible outputs, tokens saved now / 1000, misses so far,
      management calls so far, tokens if everything were visible / 1000.
    * ``family``: ``Discrete``, the model-family id (``dtoc_rl.models.FAMILIES``).

    With ``text_view=True``, ``info["text"]`` holds the view an LLM policy reads:
    the store listing (key, tokens, timestamp, preview, visibility) and the recent
    reasoning.

    ## Rewards
    Per step ``t`` (the dollars of the calls this step caused, including misses'
    re-reads and, with ``overhead="agent"``, the manage_context call)::

        r_t = - cost_weight * dollars_t / D_all_visible
              - miss_weight * misses_t
              - over_budget_weight * max(0, active_tokens_t - budget) / budget   (budget > 0)

    plus at the end ``success_weight * 1[logged success and not failed]`` and
    ``- fail_penalty`` if a miss ended it (``miss="fail"``).

    A call costs ``cached * cache_read + written * cache_write + output * output_price``
    (USD per million tokens, ``dtoc_rl.pricing``; unknown families priced as
    ``gpt-4o``).  ``cached`` is the prefix shared with the previous call's prompt
    up to the first output whose visibility changed since; the rest is written.
    **Normalisation:** dividing by ``D_all_visible``, the dollars of the same
    trajectory with every output visible, makes the cost part of the return equal
    ``-(policy dollars) / (no-management dollars)``: ``-1`` is the status quo,
    ``-0.5`` halves the bill, whatever the trajectory's length or model.  The
    first call (before any decision) is charged in the first step's reward.

    ## Episode End
    Terminated after the log's last call (``n - 1`` steps for ``n`` calls), or at
    the first miss with ``miss="fail"``.  Never truncated.  The final ``info``
    holds ``totals`` (tokens, cache reads/writes, dollars, misses, re-reads,
    management calls, placeholder tokens, mean active tokens) and
    ``all_visible`` (the same figures with everything visible), and ``traj_id``.

    ## Arguments
    * ``dataset``: a dataset folder, or None for the bundled sample.
    * ``trajectories``: ``Trajectory`` or compiled ``Episode`` objects instead.
    * ``model_family``, ``source``: keep only these (a name or a list).
    * ``max_items`` (128): slots N.
    * ``miss`` ("reread" | "fail" | "calibrated"), ``reread_prob`` (1.0).
    * ``overhead`` ("orchestrator" | "agent").
    * ``need_kinds``: need-label kinds that count (default all three).
    * ``budget_tokens`` (0 = none), and the reward weights ``cost_weight`` (1),
      ``miss_weight`` (0), ``success_weight`` (0), ``fail_penalty`` (1),
      ``over_budget_weight`` (0).
    * ``sequential`` (False): episodes in dataset order instead of sampled.
    * ``text_view`` (False): add ``info["text"]`` and ``info["keys"]`` (the DTOC key of each slot).
    * ``expose_episode`` (False): put the compiled episode in the reset ``info`` (for the hindsight
      oracle, which plans with the trace's future).
    * ``estimator`` ("chars"), ``render_mode`` (None or "ansi").
    * ``reset(options={"traj_id": ...})`` or ``{"index": i}`` picks an episode.

    ## Version History
    * v0: initial version.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        dataset: str | Path | None = None,
        *,
        trajectories: Sequence[Trajectory] | Sequence[Episode] | None = None,
        model_family: str | Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        max_items: int = 128,
        miss: str = "reread",
        reread_prob: float = 1.0,
        overhead: str = "orchestrator",
        need_kinds: Sequence[str] = NEED_KINDS,
        budget_tokens: int = 0,
        cost_weight: float = 1.0,
        miss_weight: float = 0.0,
        success_weight: float = 0.0,
        fail_penalty: float = 1.0,
        over_budget_weight: float = 0.0,
        sequential: bool = False,
        text_view: bool = False,
        expose_episode: bool = False,
        estimator: str = "chars",
        cost_config: CostConfig | None = None,
        render_mode: str | None = None,
    ):
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.episodes = load_episodes(
            trajectories if trajectories is not None else dataset,
            model_family=model_family,
            source=source,
            estimator=estimator,
        )
        self.cfg = cost_config or CostConfig(
            miss=miss, overhead=overhead, need_kinds=tuple(need_kinds), reread_prob=reread_prob
        )
        self.N = max_items
        self.budget = int(budget_tokens)
        self.w = {
            "cost": cost_weight,
            "miss": miss_weight,
            "success": success_weight,
            "fail": fail_penalty,
            "budget": over_budget_weight,
        }
        self.sequential = sequential
        self.text_view = text_view
        self.expose_episode = expose_episode
        self.render_mode = render_mode
        self.observation_space = observation_space(self.N)
        self.action_space = action_space(self.N)
        self._next = 0
        self._baselines: dict[str, Totals] = {}
        self.sim: Simulator | None = None

    # -- gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "traj_id" in options:
            idx = next((i for i, e in enumerate(self.episodes) if e.traj_id == options["traj_id"]), None)
            if idx is None:
                raise KeyError(f"no episode with traj_id {options['traj_id']!r}")
        elif "index" in options:
            idx = int(options["index"]) % len(self.episodes)
        elif self.sequential:
            idx = self._next % len(self.episodes)
            self._next += 1
        else:
            idx = int(self.np_random.integers(len(self.episodes)))
        ep = self.episodes[idx]
        if self.sim is not None and self.sim.ep is ep:
            self.sim.reset()
            self.sim.rng = self.np_random
        else:
            self.sim = Simulator(ep, self.cfg, rng=self.np_random)
        self._base = self._baseline(ep)
        outs = ep.out_steps
        static = np.zeros((len(outs), len(ITEM_FEATURES)), np.float32)
        static[:, 0] = ep.est_tok[outs] / 1000.0
        static[:, 6] = ep.is_error[outs]
        self._static = static
        self._modified_o = ep.modified_at[outs]
        self._superseded_o = ep.superseded_at[outs]
        self._tool_o = ep.tool_id[outs]
        self._turn_o = ep.user_turn[outs]
        self._pending_dollars, _ = self.sim.call()
        obs = self._obs()
        info = self._info(obs)
        if self.expose_episode:
            info["episode"] = ep
        return obs, info

    def step(self, action):
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        if self.sim.done:
            raise RuntimeError("episode is over; call reset()")
        enable, disable = self._decode(action)
        sim = self.sim
        slots = self._slots
        valid = slots >= 0
        vis = self._slot_visible
        conflict = enable & disable
        en = slots[enable & valid & ~conflict & ~vis]
        di = slots[disable & valid & ~conflict & vis]
        sim.totals.invalid_actions += int(
            np.count_nonzero(enable & ~valid)
            + np.count_nonzero(disable & ~valid)
            + np.count_nonzero(conflict & valid)
        )
        dollars = self._pending_dollars + sim.apply_changes(en, di)
        self._pending_dollars = 0.0
        d, misses = sim.call()
        dollars += d
        terminated = sim.done
        reward = -self.w["cost"] * dollars / max(self._base.dollars, 1e-12) - self.w["miss"] * misses
        if self.budget and self.w["budget"]:
            reward -= self.w["budget"] * max(0, sim.ctx - self.budget) / self.budget
        if terminated:
            if sim.totals.failed:
                reward -= self.w["fail"]
            elif sim.ep.success:
                reward += self.w["success"]
        obs = self._obs()
        info = self._info(obs)
        info["step_dollars"] = dollars
        info["step_misses"] = misses
        if terminated:
            info["totals"] = sim.totals.to_dict()
            info["all_visible"] = self._base.to_dict()
            info["success"] = bool(sim.ep.success) and not sim.totals.failed
        return obs, float(reward), terminated, False, info

    def render(self):
        if self.render_mode == "ansi" and self.sim is not None:
            return self.text()
        return None

    # -- helpers ------------------------------------------------------------------
    def _baseline(self, ep: Episode) -> Totals:
        b = self._baselines.get(ep.traj_id)
        if b is None:
            b = self._baselines[ep.traj_id] = baseline_totals(ep, self.cfg)
        return b

    def _decode(self, action) -> tuple[np.ndarray, np.ndarray]:
        try:
            en, di = action["enable"], action["disable"]
        except (TypeError, KeyError, IndexError):
            raise ValueError(
                f"action must be a dict with keys 'enable' and 'disable' matching {self.action_space}; "
                f"got {type(action).__name__}"
                + (f" with keys {sorted(action)}" if isinstance(action, dict) else "")
            ) from None
        out = []
        for name, a in (("enable", en), ("disable", di)):
            a = np.asarray(a)
            if a.shape != (self.N,):
                raise ValueError(
                    f"action[{name!r}] has shape {a.shape}; expected ({self.N},) for {self.action_space}"
                )
            if a.dtype != np.bool_:
                if a.dtype.kind not in "iu":
                    raise ValueError(
                        f"action[{name!r}] has dtype {a.dtype}; "
                        f"expected integers or bools, MultiBinary({self.N})"
                    )
                a = a != 0
            out.append(a)
        return out[0], out[1]

    def _obs(self) -> dict[str, np.ndarray]:
        sim, ep, N = self.sim, self.sim.ep, self.N
        t = sim.t  # calls done; the last stored step is t-1
        count = sim.n_stored
        lo = max(0, count - N)
        window = ep.out_steps[lo:count]
        m = count - lo
        slots = np.full(N, -1, np.int64)
        slots[:m] = window
        self._slots = slots
        now = t - 1
        # user turns begun up to the next call (a user message before call t counts)
        self._turns_now = int(ep.user_turn[t]) if t < ep.n else int(ep.user_turn[-1])
        vis = sim.visible[window]
        slot_vis = np.zeros(N, bool)
        slot_vis[:m] = vis
        self._slot_visible = slot_vis
        age = now - window
        last = sim.last_need[window]
        feats = np.zeros((N, len(ITEM_FEATURES)), np.float32)
        f = feats[:m]
        f[:] = self._static[lo:count]  # est_tokens_k and is_error, by output ordinal
        f[:, 1] = age
        f[:, 2] = vis
        f[:, 3] = sim.need_count[window]
        f[:, 4] = np.where(last >= 0, now - last, age)
        f[:, 5] = self._modified_o[lo:count] <= now
        f[:, 7] = self._superseded_o[lo:count] <= now
        f[:, 8] = sim.rereads_of[window]
        f[:, 9] = sim.toggles[window]
        f[:, 10] = self._turns_now - self._turn_o[lo:count]
        tool = np.zeros(N, np.int64)
        tool[:m] = self._tool_o[lo:count]
        item_mask = np.zeros(N, np.int8)
        item_mask[:m] = 1
        enable_mask = (item_mask & ~slot_vis).astype(np.int8)
        disable_mask = slot_vis.astype(np.int8)
        g = np.array(
            [
                sim.ctx / 1000.0,
                self.budget / 1000.0,
                t,
                count,
                sim.n_visible,
                sim.saved / 1000.0,
                sim.totals.misses,
                sim.totals.mgmt_calls,
                (sim.ctx + sim.saved) / 1000.0,
            ],
            np.float32,
        )
        return {
            "items": feats,
            "item_tool": tool,
            "item_mask": item_mask,
            "enable_mask": enable_mask,
            "disable_mask": disable_mask,
            "globals": g,
            "family": np.int64(ep.family_id),
        }

    def _info(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        sim = self.sim
        info: dict[str, Any] = {
            "traj_id": sim.ep.traj_id,
            "model_family": sim.ep.model_family,
            "step": sim.t,
            "action_mask": {"enable": obs["enable_mask"], "disable": obs["disable_mask"]},
            "slot_steps": self._slots,
            "active_tokens": sim.ctx,
            "dollars": sim.totals.dollars,
            "misses": sim.totals.misses,
            "invalid_actions": sim.totals.invalid_actions,
        }
        if self.text_view:
            info["text"] = self.text()
            info["keys"] = [sim.ep.keys[k] if k >= 0 else "" for k in self._slots]
        return info

    def text(self, recent: int = 3) -> str:
        """The store listing and recent reasoning, as an LLM policy would read them."""
        sim, ep = self.sim, self.sim.ep
        lines = [f"Active context: {sim.ctx:,} tokens. Stored tool outputs (oldest first):"]
        for k in self._slots[self._slots >= 0]:
            state = "visible" if sim.visible[k] else "HIDDEN"
            lines.append(
                f"- {ep.keys[k]} [{state}] step {k}, {ep.tool_names[k]}, ~{int(ep.est_tok[k]):,} tokens: "
                f"{ep.previews[k]}"
            )
        lines.append("Recent reasoning:")
        for k in range(max(0, sim.t - recent), sim.t):
            if ep.thoughts[k]:
                lines.append(f"[step {k}] {ep.thoughts[k]}")
        return "\n".join(lines)

    @property
    def item_feature_names(self) -> tuple[str, ...]:
        return ITEM_FEATURES

    @property
    def global_feature_names(self) -> tuple[str, ...]:
        return GLOBAL_FEATURES
