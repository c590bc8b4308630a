"""ReplayEnv: replay logged trajectories under a context-management policy."""

from __future__ import annotations

import warnings
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from dtoc_rl.core.actions import resolve
from dtoc_rl.data.models import family_id, normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.engine.features import (
    DEFAULT_MAX_ITEMS,
    GLOBAL_FEATURES,
    ITEM_FEATURES,
    action_space,
    check_action,
    check_mask,
    observation_space,
    price_vector,
)
from dtoc_rl.envs.arguments import check_counts, check_weights
from dtoc_rl.envs.data import load_episodes
from dtoc_rl.envs.selection import pick_index
from dtoc_rl.labels.words import WORDS_PER_OUTPUT
from dtoc_rl.sim.episode import Episode
from dtoc_rl.sim.simulator import CostConfig, Simulator, Totals, baseline_totals

__all__ = ["ReplayEnv"]

_add = np.add
try:  # the C function behind np.count_nonzero, without its Python-level dispatch (~0.6 µs a call)
    from numpy._core.multiarray import count_nonzero as _count
except ImportError:  # numpy < 2
    try:
        from numpy.core.multiarray import count_nonzero as _count
    except ImportError:
        _count = np.count_nonzero
_ONE, _ZERO = np.float32(1.0), np.float32(0.0)  # float32 scalars: cheaper to store into float32 arrays

_NF = len(ITEM_FEATURES)
_SIM_CACHE = 512  # simulators (and observation templates) kept for reuse, one per episode

_FEW = 8  # up to this many changed outputs, update the observation mirrors one by one


def _keep(cache: dict, key: Any, value: Any) -> None:
    """``cache[key] = value``, the oldest entry let go when the cache is full: an env over a big
    collection keeps what it reuses for the episodes it replayed last, not for every one it met."""
    if key not in cache and len(cache) >= _SIM_CACHE:
        del cache[next(iter(cache))]
    cache[key] = value


# Up to this many outputs in the window, an action is decoded by a Python pass over the window's slots;
# beyond it by boolean masks (about a dozen numpy calls, a fixed cost larger than such a pass over a few
# slots, but a small one per slot).
_LOOP_SLOTS = 48


def _with_fields(cfg: CostConfig | Mapping[str, Any] | None, **given: Any) -> CostConfig:
    """``cfg`` (a CostConfig, a dict of its fields, or None) with the fields ReplayEnv also takes as
    arguments (``miss``, ``overhead``, ...) set where the argument was given (not None).  A field set
    both ways, differently, is an error rather than one of them silently winning: in a dict, any key
    given; in a CostConfig, any field other than its default."""
    default = CostConfig()
    if isinstance(cfg, Mapping):
        named = set(cfg)
        try:
            cfg = CostConfig(**{k: tuple(v) if k == "need_kinds" else v for k, v in cfg.items()})
        except TypeError as e:
            raise ValueError(f"cost_config: {e} (the fields of dtoc_rl.sim.simulator.CostConfig)") from None
    else:
        cfg = cfg or default
        named = {k for k in given if _norm(getattr(cfg, k)) != _norm(getattr(default, k))}
    changes = {}
    for name, value in given.items():
        if value is None:
            continue
        if name in named and _norm(getattr(cfg, name)) != _norm(value):
            raise ValueError(
                f"{name}={value!r} and cost_config's {name}={getattr(cfg, name)!r}: give it once"
            )
        changes[name] = value
    return replace(cfg, **changes) if changes else cfg


def _norm(value: Any) -> Any:
    return frozenset(value) if isinstance(value, list | tuple) else value  # need kinds: a set


def _nonzero_bytes(a: np.ndarray) -> bytes:
    """One byte per entry of a checked action array, non-zero where the entry is (set)."""
    return a.tobytes() if a.itemsize == 1 else (a != 0).tobytes()


# columns of ITEM_FEATURES the observation builder touches
_C_AGE, _C_VIS, _C_NEED, _C_SINCE, _C_MOD, _C_ERR, _C_SUP, _C_REREAD, _C_TOGGLE, _C_TURNS = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10
)  # fmt: skip
_C_UNIQUE = np.array([11, 12], np.int64)  # unique_text, unique_names
assert ITEM_FEATURES[_C_SINCE] == "since_need" and ITEM_FEATURES[_C_TURNS] == "turns_after"
assert ITEM_FEATURES[11:13] == ("unique_text", "unique_names")


@dataclass
class _Template:
    """Per-episode arrays for the incremental observation, built once per episode and reused."""

    ep: Episode
    out_steps: np.ndarray  # step of each output ordinal
    out_list: list[int]
    ord_of_step: list[int]  # output ordinal of each step, -1 without output
    ord_np: np.ndarray  # the same as an array
    items0: np.ndarray  # (outputs, F) float32: item features when stored, time columns minus their reference
    tool_o: np.ndarray  # tool id per output ordinal
    tool_list: list[int]
    turn_list: list[int]  # user turns begun up to each step (user text arrives on a call's first step)
    ev_times: list[int]  # sorted times at which a modified / superseded flag turns on
    ev_rows: np.ndarray  # output ordinal of each event
    ev_cols: np.ndarray  # feature column of each event
    family: np.int64
    st64_init: np.ndarray  # (2, outputs + N): slot steps (-1) and tool ids (0), before anything is stored
    words_o: np.ndarray  # (outputs + N, WORDS_PER_OUTPUT): hashed call words per output ordinal, zero-padded
    un_times: list[int]  # sorted steps after which an output's unique shares shrink (Episode.unique)
    un_rows: np.ndarray  # output ordinal of each
    un_vals: np.ndarray  # (events, 2) the shares from then on

    @classmethod
    def build(cls, ep: Episode, n_slots: int) -> _Template:
        outs = ep.out_steps
        n_out = len(outs)
        f = np.zeros((n_out, _NF), np.float32)
        f[:, 0] = ep.est_tok[outs] / 1000.0
        # time-dependent columns hold minus their reference time, in model calls (the online tracker's
        # clock); _obs adds "now" (or the turn count)
        call_of = ep.call_of_step[outs]
        f[:, _C_AGE] = -call_of
        f[:, _C_VIS] = 1.0
        f[:, _C_SINCE] = -call_of
        f[:, _C_ERR] = ep.is_error[outs]
        f[:, _C_TURNS] = -ep.user_turn[outs]
        f[:, _C_UNIQUE] = 1.0
        un = ep.unique_shares()
        un = un[ord_of_step_of(ep, un[:, 1]) >= 0] if len(un) else un
        ord_of_step = np.full(ep.n, -1, np.int64)
        ord_of_step[outs] = np.arange(n_out)
        times = np.concatenate([ep.modified_at[outs], ep.superseded_at[outs]]).astype(np.int64)
        rows = np.concatenate([np.arange(n_out), np.arange(n_out)])
        cols = np.repeat(np.array([_C_MOD, _C_SUP], np.int64), n_out)
        keep = times < ep.n  # a flag whose time is never reached never turns on
        order = np.argsort(times[keep], kind="stable")
        st64 = np.zeros((2, n_out + n_slots), np.int64)
        st64[0] = -1
        words = np.zeros((n_out + n_slots, WORDS_PER_OUTPUT), np.int64)
        if ep.words is not None:
            words[:n_out] = ep.words[outs]
        words.flags.writeable = False  # observations are views of it
        return cls(
            ep=ep,
            out_steps=outs,
            out_list=outs.tolist(),
            ord_of_step=ord_of_step.tolist(),
            ord_np=ord_of_step,
            items0=f,
            tool_o=ep.tool_id[outs].astype(np.int64),
            tool_list=ep.tool_id[outs].tolist(),
            turn_list=ep.user_turn.tolist(),
            ev_times=times[keep][order].tolist(),
            ev_rows=rows[keep][order],
            ev_cols=cols[keep][order],
            family=np.int64(ep.family_id),
            st64_init=st64,
            words_o=words,
            un_times=un[:, 0].astype(np.int64).tolist(),
            un_rows=ord_of_step[un[:, 1].astype(np.int64)],
            un_vals=un[:, 2:4].astype(np.float32),
        )


def ord_of_step_of(ep: Episode, steps: np.ndarray) -> np.ndarray:
    """Output ordinal of each of ``steps`` (-1 for a step without an output)."""
    steps = steps.astype(np.int64)
    ok = (steps >= 0) & (steps < ep.n)
    out = np.full(len(steps), -1, np.int64)
    out[ok] = np.where(ep.has_out[steps[ok]], np.searchsorted(ep.out_steps, steps[ok]), -1)
    return out


class ReplayEnv(gym.Env):
    """Replays one logged agent trajectory per episode; the policy decides which past
    tool outputs the agent sees.

    ## Description
    The DTOC store is the state.  Each episode replays a real logged trajectory
    (from the bundled sample, a dataset made by ``dtoc-rl ingest``, or objects
    passed in).  At every step the logged agent makes its next model call,
    seeing the context as the policy has shaped it; the need labels say which
    earlier outputs that call used; the call's outputs are stored, visible; then
    the policy's enable/disable sets take effect before the next call.  A model
    call is one assistant turn: its parallel tool calls (logged steps sharing
    ``Step.turn``) are billed as one call and stored together, so an episode
    has one decision per model call, not per tool call.

    The logged agent cannot react to what it was not shown, so a needed output
    that is hidden is a **miss**, and so is an output hidden before any call read
    it (the answer to the call just made; ``Episode.call_reads``).  By default (``miss="reread"``, the paper's
    re-read metric) the agent re-reads it: one extra model call over the whole
    active context.  How the output comes back is ``CostConfig.recovery`` (pass a
    ``cost_config``): ``"append"`` (default) appends the re-run's copy just before
    the call that needed it, which later needs of it read (the original stays
    hidden, the cache unbroken); ``"restore"`` makes it visible again at its old
    position (re-writing the cached suffix after it); ``"cheaper"`` picks the
    cheaper of the two per miss.  With
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
      estimated tokens / 1000), ``age`` (model calls since the one that stored it),
      ``visible``, ``times_needed`` (needs on it so far), ``since_need`` (model
      calls since its last need, or its age), ``modified`` (what it read was modified later, so far),
      ``is_error``, ``superseded`` (a later step re-read the same resource, so
      far), ``rereads`` (misses it caused), ``toggles`` (visibility changes),
      ``turns_after`` (user turns begun after it), ``unique_text`` and ``unique_names``
      (the shares of its token windows and of its distinctive names that no newer output and
      none of the agent's own words hold so far: a later copy is attributed to the newest
      holder, so at zero in both nothing of it is needed from it any more).
    * ``item_tool`` ``Box(N,)`` int64: tool category id (``dtoc_rl.labels.vocabulary``).
    * ``item_words`` ``Box(N, W)`` int64: the hashed words of each output's call and first
      output lines, zero-padded (``dtoc_rl.labels.words``; a learned policy's content input).
    * ``item_mask``, ``enable_mask``, ``disable_mask``: ``MultiBinary(N)``.
    * ``globals`` ``Box(G,)`` float32: active tokens / 1000 (the context plus the
      user text that arrived for the coming call: the prompt it will pay for, as
      the online Orchestrator counts it), budget / 1000, step (model calls made),
      stored outputs, visible outputs, tokens saved now / 1000, misses so far,
      management calls so far, tokens if everything were visible / 1000.
    * ``family``: ``Discrete``, the model-family id (``dtoc_rl.data.models.FAMILIES``).
    * ``prices`` ``Box(4,)`` float32: the model's prices, USD per million tokens
      (``dtoc_rl.engine.features.PRICE_FEATURES``), the ones the episode is billed at.

    With ``text_view=True``, ``info["text"]`` holds the view an LLM policy reads:
    the store listing (key, tokens, timestamp, preview, visibility) and the recent
    reasoning.  Once a miss has been recovered by a re-run (``recovery="append"``),
    ``info["item_copied"]`` (bool per slot) marks the outputs whose copy the re-run
    put in the context: live, that copy would be an output of its own, in the window.
    ``info["cache_cold"]`` says whether the next call's cache has expired whatever its prompt
    (the logged gap between the two calls, which holds the tools' run time and the model's own
    latency, is longer than the provider keeps a prefix), so a change made now re-writes nothing
    that would not be written anyway; never with the ideal cache or ``overhead="agent"``. Live, the
    time since the model's last response tells the same (the Orchestrator, LiveEnv, ``/decide``'s
    ``idle_seconds``).  ``info["prices_per_call"]`` is True in a run whose calls go to models priced
    differently (a router, a /model switch): ``prices`` are then the next call's model's, and
    policies price each decision at them rather than at the run's.

    ## Rewards
    Per step ``t`` (the dollars of the calls this step caused, including misses'
    re-reads and, with ``overhead="agent"``, the manage_context call)::

        r_t = - cost_weight * dollars_t / D_all_visible
              - miss_weight * misses_t
              - over_budget_weight * max(0, active_tokens_t - budget) / budget   (budget > 0)

    plus at the end ``success_weight * 1[logged success and not failed]`` and
    ``- fail_penalty`` if a miss ended it (``miss="fail"``).

    A call costs ``cached * cache_read + written * cache_write + output * output_price``
    (USD per million tokens, ``dtoc_rl.sim.pricing``; unknown families priced as
    ``gpt-4o``).  ``cached`` is the prefix shared with the previous call's prompt
    up to the first output whose visibility changed since; the rest is written.
    **Normalisation:** dividing by ``D_all_visible``, the dollars of the same
    trajectory with every output visible, makes the cost part of the return equal
    ``-(policy dollars) / (no-management dollars)``: ``-1`` is the status quo,
    ``-0.5`` halves the bill, whatever the trajectory's length or model.  The
    first call (before any decision) is charged in the first step's reward.

    ## Episode End
    Terminated after the log's last model call (``n - 1`` steps for ``n`` calls), or at
    the first miss with ``miss="fail"``.  Never truncated.  The final ``info``
    holds ``totals`` (tokens, cache reads/writes, dollars, misses, re-reads,
    management calls, placeholder tokens, mean active tokens),
    ``all_visible`` (the same figures with everything visible), ``missed`` (the ``(model
    call, output step)`` of every miss, in order: which hidden output which call needed), and
    ``traj_id``.

    ## Arguments
    * ``dataset``: a dataset folder (from ``dtoc-rl ingest``), a ``datasets.Dataset`` of its rows, a list
      of ``Trajectory`` / ``Episode`` objects or rows, or None for the bundled sample.
    * ``trajectories``: ``Trajectory`` or compiled ``Episode`` objects instead (same as ``dataset``).
    * ``model_family``, ``source``: keep only these (a name or a list).
    * ``max_items`` (``dtoc_rl.engine.features.DEFAULT_MAX_ITEMS``, 128): slots N.
    * ``miss`` ("reread" | "fail" | "calibrated"; default "reread"), ``reread_prob`` (calibrated mode
      only; default ``dtoc_rl.sim.calibrated.CALIBRATED_REREAD_PROB``, fitted on really masked runs).
    * ``overhead`` ("orchestrator" | "agent"; default "orchestrator").
    * ``need_kinds``: need-label kinds that make a hidden output a miss (default provenance and
      reference; a re-access step is itself the agent's re-read, so it is not charged twice).
      These four default to ``CostConfig``'s (None: not given).
    * ``cost_config``: a ``dtoc_rl.sim.simulator.CostConfig`` (or a dict of its fields) for what the
      arguments above do not reach (the cache model, prices, recovery); ``miss``, ``overhead``,
      ``need_kinds`` and ``reread_prob`` given as well are set in it (set in both, differently: an
      error; a CostConfig's field counts as set when it is not the default).
    * ``budget_tokens`` (0 = none), and the reward weights ``cost_weight`` (1),
      ``miss_weight`` (0), ``success_weight`` (0), ``fail_penalty`` (1),
      ``over_budget_weight`` (0).
    * ``sequential`` (False): episodes in dataset order instead of sampled.
    * ``text_view`` (False): add ``info["text"]`` and ``info["keys"]`` (the DTOC key of each slot).
    * ``expose_episode`` (False): put the compiled episode in the reset ``info`` (for the hindsight
      oracle, which plans with the trace's future).
    * ``estimator`` ("chars"), ``render_mode`` (None or "ansi"; any other mode warns and renders nothing).
    * ``reset(options={"traj_id": ...})`` or ``{"index": i}`` picks an episode.

    ## Version History
    * v0: initial version.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        dataset: str | Path | Any = None,
        *,
        trajectories: Sequence[Trajectory] | Sequence[Episode] | None = None,
        model_family: str | Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        max_items: int = DEFAULT_MAX_ITEMS,
        miss: str | None = None,
        reread_prob: float | None = None,
        overhead: str | None = None,
        need_kinds: Sequence[str] | str | None = None,
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
        check_counts(max_items=(max_items, 1), budget_tokens=(budget_tokens, 0))
        if dataset is not None and trajectories is not None:
            raise ValueError("give dataset or trajectories, not both")
        if render_mode not in (None, "ansi"):
            # Vectorising helpers ask for a mode by default (SB3's make_vec_env: "rgb_array"); a
            # replayed log has no picture, so the env runs without rendering rather than refusing.
            warnings.warn(
                f"ReplayEnv renders only 'ansi' text; render_mode={render_mode!r} is ignored (no rendering)",
                stacklevel=2,
            )
            render_mode = None
        self.episodes = load_episodes(
            trajectories if trajectories is not None else dataset,
            model_family=model_family,
            source=source,
            estimator=estimator,
        )
        if need_kinds is not None:  # one kind as a string, not its letters
            need_kinds = (need_kinds,) if isinstance(need_kinds, str) else tuple(need_kinds)
        self.cfg = _with_fields(
            cost_config, miss=miss, overhead=overhead, need_kinds=need_kinds, reread_prob=reread_prob
        )
        check_weights(
            cost_weight=cost_weight, miss_weight=miss_weight, success_weight=success_weight,
            fail_penalty=fail_penalty, over_budget_weight=over_budget_weight,
        )  # fmt: skip
        self.N = int(max_items)
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
        self._zero_bytes = bytes(self.N)
        self._next = 0
        # by id(episode), each with its episode (two runs may share a trajectory id; an id is only
        # trusted while it is still that episode's)
        self._baselines: dict[int, tuple[Episode, Totals]] = {}
        self._templates: dict[int, _Template] = {}
        self._sims: dict[int, Simulator] = {}
        self._shift = np.zeros(_NF, np.float32)
        self.sim: Simulator | None = None

    # -- gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        idx, self._next = pick_index(
            options or {},
            key="traj_id",
            ids=self._ids,
            rng=self.np_random,
            sequential=self.sequential,
            counter=self._next,
        )
        ep = self.episodes[idx]
        if self.sim is not None and self.sim.ep is ep:
            self.sim.reset()
            self.sim.rng = self.np_random
        else:
            self.sim = self._simulator(idx, ep)
        self._base = self._baseline(ep)
        self._start(idx)
        self._rereads_seen, self._copied = 0, None  # the re-runs' copies, as of that many re-reads
        self._pending_dollars, _ = self.sim.call()
        obs = self._obs()
        info = self._info(obs)
        if self.expose_episode:
            info["episode"] = ep
            info["cost_config"] = self.cfg  # the oracle plans under the costs it is scored with
        return obs, info

    def step(self, action):
        sim = self.sim
        if sim is None:
            raise RuntimeError("call reset() before step()")
        if sim.done:
            raise RuntimeError("episode is over; call reset()")
        enable, disable = check_action(action, self.N, self.action_space)
        harness = action.get("harness") if isinstance(action, dict) else None
        if harness is not None:  # the run's own harness's share of the changes: no management call
            own = check_mask("harness", harness, self.N, self.action_space) != 0
            if own.any():
                enable, disable = np.asarray(enable) != 0, np.asarray(disable) != 0
                self._act_masks(enable & own, disable & own, managed=False)
                enable, disable = enable & ~own, disable & ~own
        if self._m <= _LOOP_SLOTS:
            # bytes: comparing, counting and iterating them are C loops, without numpy's per-call cost
            eb, db = _nonzero_bytes(enable), _nonzero_bytes(disable)
            mgmt = 0.0 if eb == db == self._zero_bytes else self._act_few(eb, db)
        else:
            set_any = _count(enable) or _count(disable)  # counts non-zero entries of any dtype
            mgmt = self._act_masks(enable, disable) if set_any else 0.0
        dollars = self._pending_dollars + mgmt
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
            info["missed"] = list(sim.missed)
            info["success"] = bool(sim.ep.success) and not sim.totals.failed
        return obs, float(reward), terminated, False, info

    # Applying an action.  Slots [0, m) hold the outputs of ordinals [lo, lo + m), the rest is padding.
    # An enabled hidden output is shown and a disabled visible one hidden; padding slots and slots in both
    # sets count as invalid; anything else does nothing.  Both return the management dollars.
    def _act_few(self, eb: bytes, db: bytes) -> float:
        """The action as ``_nonzero_bytes``, for a window of at most ``_LOOP_SLOTS`` outputs."""
        sim = self.sim
        log = sim.log
        if log:
            self._drain(log)  # the visibility mirror read below must be current
        m, lo, n = self._m, self._lo, self.N
        invalid = 2 * (n - m) - eb.count(0, m) - db.count(0, m)  # set padding slots
        en: list[int] = []  # output ordinals
        di: list[int] = []
        if m:
            for o, e, d, v in zip(range(lo, lo + m), eb, db, self._vis_st[lo : lo + m].tobytes()):
                if e:
                    if d:
                        invalid += 1
                    elif not v:
                        en.append(o)
                elif d and v:
                    di.append(o)
        sim.totals.invalid_actions += invalid
        if not en and not di:
            return 0.0
        out = self._tpl.out_list
        sim.log = None  # the mirrors are updated here, from the ordinals
        try:
            dollars = sim.apply_changes([out[o] for o in en], [out[o] for o in di])
        finally:
            sim.log = log
        vis_st, en_st, c_vis, c_tog = self._vis_st, self._en_st, self._c_vis, self._c_toggle
        if len(en) + len(di) <= _FEW:
            for o in en:
                vis_st[o], en_st[o], c_vis[o] = 1, 0, _ONE
                c_tog[o] += _ONE
            for o in di:
                vis_st[o], en_st[o], c_vis[o] = 0, 1, _ZERO
                c_tog[o] += _ONE
        else:
            vis_st[en], en_st[en], c_vis[en] = 1, 0, _ONE
            vis_st[di], en_st[di], c_vis[di] = 0, 1, _ZERO
            c_tog[en + di] += _ONE  # each ordinal once
        return dollars

    def _act_masks(self, enable: np.ndarray, disable: np.ndarray, managed: bool = True) -> float:
        """The checked action arrays, for a window of any size: the plain path, through the one rule
        (:func:`dtoc_rl.core.actions.resolve`); ``_act_few`` is pinned equal to it by a test.
        ``managed=False``: the changes of the run's own harness (``Simulator.apply_changes``)."""
        sim = self.sim
        log = sim.log
        if log:
            self._drain(log)
        m, lo = self._m, self._lo
        ch = resolve(enable, disable, self._vis_b[lo : lo + m])
        sim.totals.invalid_actions += ch.invalid
        if not len(ch.enable) and not len(ch.disable):
            return 0.0
        slots = self._slots[:m]
        sim.log = None  # the mirrors are updated below, from the slots
        try:
            dollars = sim.apply_changes(slots[ch.enable], slots[ch.disable], managed)
        finally:
            sim.log = log
        flip = np.concatenate([ch.enable, ch.disable]) + lo  # the ordinals toggled, each once
        w = self._st8[1:]  # the enable and visible rows
        w[:, flip] ^= 1
        self._c_vis[flip] = self._vis_st[flip]
        self._c_toggle[flip] += _ONE
        return dollars

    def render(self):
        if self.render_mode == "ansi" and self.sim is not None:
            return self.text()
        return None

    # -- helpers ------------------------------------------------------------------
    @property
    def episodes(self) -> list[Episode]:
        return self._episodes

    @episodes.setter
    def episodes(self, eps: Sequence[Episode]) -> None:
        # Evaluators swap the episodes between batches: the ids follow, and the per-episode caches
        # (by index, or by id of a run no longer here) are emptied rather than grown batch after batch
        self._episodes = list(eps)
        self._ids = [e.traj_id for e in self._episodes]
        for cache in ("_baselines", "_templates", "_sims"):
            getattr(self, cache, {}).clear()

    def _baseline(self, ep: Episode) -> Totals:
        held = self._baselines.get(id(ep))
        if held is None or held[0] is not ep:
            held = self._baselines[id(ep)] = (ep, baseline_totals(ep, self.cfg))
        return held[1]

    def _simulator(self, idx: int, ep: Episode) -> Simulator:
        """A fresh simulator for ``ep``: a cached one reset (its per-episode set-up is the costly part of a
        reset), or a new one.  Same state either way."""
        cfg = self.cfg
        sim = self._sims.get(idx)
        if sim is not None and sim.ep is ep and sim.cfg is cfg and sim.cfg_snapshot() == sim._cfg_snapshot:
            sim.reset()
            sim.rng = self.np_random
            return sim
        sim = Simulator(ep, cfg, rng=self.np_random)
        _keep(self._sims, idx, sim)
        return sim

    def _start(self, idx: int) -> None:
        """Per-episode observation state (the simulator has just been reset)."""
        tpl = self._templates.get(idx)
        if tpl is None or tpl.ep is not self.episodes[idx]:
            tpl = _Template.build(self.episodes[idx], self.N)
            _keep(self._templates, idx, tpl)
        self._tpl = tpl
        # the next call's model's prices: constant over an episode of one model
        self._prices = [price_vector(p) for p in self.sim.model_prices]
        ep = self.sim.ep
        # and its family: a run that changes models is observed as the model each call goes to
        self._families = [tpl.family] + [np.int64(family_id(normalize_family(m))) for m in ep.models[1:]]
        self._items = tpl.items0.copy()
        # By output ordinal, padded with N entries: filled as outputs are stored, so the window of slots
        # is always the slice [lo, lo + N) and its padding comes out right (-1, 0, not visible).
        # One block per dtype, so that each observation copies one slice for several arrays: rows slot and
        # tool (int64); item mask, enable mask (stored and hidden) and visible (int8).
        self._st64 = tpl.st64_init.copy()
        self._st8 = np.zeros((3, len(tpl.out_list) + self.N), np.int8)
        self._bind_views()
        self._ev = self._un = 0
        self._count = self._lo = self._m = 0
        self.sim.log = []

    def _bind_views(self) -> None:
        items = self._items
        # column views, for cheap 1-D writes
        self._c_vis, self._c_need, self._c_since = items[:, _C_VIS], items[:, _C_NEED], items[:, _C_SINCE]
        self._c_reread, self._c_toggle = items[:, _C_REREAD], items[:, _C_TOGGLE]
        st64, st8 = self._st64, self._st8
        self._slot_st, self._tool_st = st64[0], st64[1]
        self._mask_st, self._en_st, self._vis_st = st8[0], st8[1], st8[2]
        self._vis_b = self._vis_st.view(np.bool_)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # copy.deepcopy and pickle copy views as separate arrays: re-derive them from their bases
        self.__dict__.update(state)
        if self.__dict__.get("_items") is not None:
            self._bind_views()

    def _drain(self, log: list) -> None:
        """Bring the per-output mirrors up to date with the simulator's change log (see Simulator.log)."""
        sim, tpl = self.sim, self._tpl
        for entry in log:
            if type(entry) is int:  # an output a call needed: need count, last need, re-reads
                o = tpl.ord_of_step[entry]
                if o >= 0:
                    self._c_need[o] = sim.need_count[entry]
                    if sim.last_need[entry] >= 0:  # a miss before any call read it is not a need
                        self._c_since[o] = -sim.last_need[entry]
                    self._c_reread[o] = sim.rereads_of[entry]
                continue
            # a visibility change, each step toggled once: the first k shown, the rest hidden
            steps, k = entry
            if type(steps) is int:
                o = tpl.ord_of_step[steps]
                self._c_vis[o] = k
                self._vis_st[o] = k
                self._en_st[o] = 1 - k
            else:
                o = tpl.ord_np[steps]
                if k:
                    self._c_vis[o[:k]] = 1.0
                    self._vis_st[o[:k]] = 1
                    self._en_st[o[:k]] = 0
                if k < len(o):
                    self._c_vis[o[k:]] = 0.0
                    self._vis_st[o[k:]] = 0
                    self._en_st[o[k:]] = 1
            self._c_toggle[o] += 1.0
        log.clear()

    def _obs(self) -> dict[str, np.ndarray]:
        # Built incrementally: self._items holds every output's features by output ordinal, kept up to
        # date from the simulator's change log (and the actions), with the time-dependent columns stored
        # as minus their reference time, so one add of [0, now, 0, 0, now, 0, ..., turns_now] gives the
        # window's rows.  The other per-output arrays are padded with N entries and filled as outputs are
        # stored, so the window of slots is always the slice [lo, lo + N).
        sim, tpl, N = self.sim, self._tpl, self.N
        if sim.log:
            self._drain(sim.log)
        t = sim.t  # steps stored: the last stored step is t-1, the next call starts at step t
        count = sim.n_stored
        if count != self._count:
            for k in range(self._count, count):  # newly stored outputs (one per tool call)
                step = tpl.out_list[k]
                self._slot_st[k] = step
                self._tool_st[k] = tpl.tool_list[k]
                self._mask_st[k] = 1
                v = 1 if sim.visible[step] else 0
                self._vis_st[k] = v
                self._en_st[k] = 1 - v
            self._count = count
            self._lo = max(0, count - N)
            self._m = count - self._lo
        lo, m = self._lo, self._m
        calls = sim.c  # model calls done
        now = calls - 1  # the last call made, the clock of age and since_need
        ev = self._ev
        if ev < len(tpl.ev_times) and tpl.ev_times[ev] < t:  # modified / superseded flags turn on
            end = bisect_right(tpl.ev_times, t - 1, ev)
            self._items[tpl.ev_rows[ev:end], tpl.ev_cols[ev:end]] = 1.0
            self._ev = end
        un = self._un
        if un < len(tpl.un_times) and tpl.un_times[un] < t:  # what outputs alone hold shrinks
            end = bisect_right(tpl.un_times, t - 1, un)
            rows = tpl.un_rows[un:end]
            # an output's shares only shrink, so the smallest is the latest, whatever the order
            np.minimum.at(self._items, (rows[:, None], _C_UNIQUE[None, :]), tpl.un_vals[un:end])
            self._un = end
        # user turns begun up to the next call (a user message before call t counts)
        turns = tpl.turn_list
        self._turns_now = turns_now = turns[t] if t < len(turns) else turns[-1]
        hi = lo + N
        # (indexed rather than unpacked: unpacking an array iterates it until numpy raises IndexError)
        b64, b8 = self._st64[:, lo:hi].copy(), self._st8[:, lo:hi].copy()
        self._slots, item_tool = b64[0], b64[1]
        item_mask, enable_mask, disable_mask = b8[0], b8[1], b8[2]
        shift = self._shift  # only read by the add below
        shift[_C_AGE] = now
        shift[_C_SINCE] = now
        shift[_C_TURNS] = turns_now
        if m == N:
            feats = _add(self._items[lo:count], shift)
        else:
            feats = np.zeros((N, _NF), np.float32)
            if m:
                _add(self._items[lo:count], shift, feats[:m])
        # the prompt the next call will pay for before any change: the context and the user text that
        # arrived for it (as the online Orchestrator counts it when it decides)
        self._active = active = sim.ctx + sim.next_user_tokens
        g = np.array(
            [
                active / 1000.0,
                self.budget / 1000.0,
                calls,
                count,
                sim.n_visible,
                sim.saved / 1000.0,
                sim.totals.misses,
                sim.totals.mgmt_calls,
                (active + sim.saved) / 1000.0,
            ],
            np.float32,
        )
        if m == N:  # a view of the episode's read-only words: they never change, so nothing to copy
            words = tpl.words_o[lo:hi]
        else:  # the outputs not stored yet stay zero
            words = np.zeros((N, WORDS_PER_OUTPUT), np.int64)
            words[:m] = tpl.words_o[lo : lo + m]
        return {
            "items": feats,
            "item_tool": item_tool,
            "item_words": words,
            "item_mask": item_mask,
            "enable_mask": enable_mask,
            "disable_mask": disable_mask,
            "globals": g,
            "family": self._families[self.sim.model_of(self.sim.c)],
            # new data per observation (the env checker requires it)
            "prices": self._prices[self.sim.model_of(self.sim.c)].copy(),
        }

    def _info(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        sim = self.sim
        info: dict[str, Any] = {
            "traj_id": sim.ep.traj_id,
            "model_family": sim.ep.model_family,
            "step": sim.c,
            "action_mask": {"enable": obs["enable_mask"], "disable": obs["disable_mask"]},
            "slot_steps": self._slots,
            "active_tokens": self._active,
            "dollars": sim.totals.dollars,
            "misses": sim.totals.misses,
            "invalid_actions": sim.totals.invalid_actions,
            # the next call's cache has expired anyway: a change now costs no re-write (policies may act
            # at once instead of waiting for a batch that pays)
            "cache_cold": sim.cache_cold(),
        }
        if sim.per_call:  # calls to models priced differently: policies price each at its observation's
            info["prices_per_call"] = True
        if sim.totals.rereads != self._rereads_seen:  # a miss was recovered since: by a re-run's copy?
            self._rereads_seen = sim.totals.rereads
            self._copied = np.asarray(sim.copied, bool) if any(sim.copied) else None
        if self._copied is not None:  # a re-run put these outputs' copies in the context
            info["item_copied"] = self._copied[self._slots] & (self._slots >= 0)
        if self.text_view:
            info["text"] = self.text()
            info["keys"] = [sim.ep.keys[k] if k >= 0 else "" for k in self._slots]
        return info

    def text(self, recent: int = 3) -> str:
        """The store listing and recent reasoning, as an LLM policy would read them."""
        sim, ep = self.sim, self.sim.ep
        lines = [f"Active context: {self._active:,} tokens. Stored tool outputs (oldest first):"]
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
