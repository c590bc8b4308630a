"""LiveEnv: a real agent loop on a real task, with the policy managing the agent's context."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from dtoc_rl.core.context import DTOCContext
from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME, openai_tool
from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.engine.features import (
    GLOBAL_FEATURES,
    ITEM_FEATURES,
    action_space,
    decode_action,
    observation_space,
)
from dtoc_rl.engine.session import Output, SessionCounts, SessionTracker
from dtoc_rl.envs.agents import AgentError, make_agent, normalize_response
from dtoc_rl.envs.arguments import check_counts, check_weights
from dtoc_rl.envs.coding_tasks import CheckResult, Task, TaskChecker, load_tasks
from dtoc_rl.envs.selection import pick_index
from dtoc_rl.envs.tools import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_TOOL_TIMEOUT,
    Toolbox,
    ToolResult,
    tool_specs,
)
from dtoc_rl.sim.pricing import Prices, at_list_prices, cache_rules_for, prices_for
from dtoc_rl.sim.simulator import CACHE_MODES

__all__ = ["DEFAULT_SYSTEM_PROMPT", "LiveEnv", "LiveTotals"]


def _checked_arguments(args: Any) -> tuple[Any, str | None]:
    """A call's arguments as the context can store them, or ``({}, why)`` when they cannot be:
    JSON text nested too deeply to parse, or values that are not JSON.  Such a call is
    answered with an error output instead of being run."""
    try:
        value = args
        if isinstance(args, str):
            try:
                value = json.loads(args)
            except json.JSONDecodeError:
                value = None  # kept as text: the context and the tools report it
        json.dumps(value, ensure_ascii=False)  # what the context does with it when counting tokens
    except RecursionError:
        return {}, "arguments are nested too deeply"
    except (TypeError, ValueError) as e:
        return {}, f"arguments are not JSON ({type(e).__name__}: {str(e)[:200]})"
    return args, None


DEFAULT_SYSTEM_PROMPT = (
    "You are an autonomous coding agent working in a small Python repository (your working directory). "
    "Use the tools to inspect files, edit them and run the tests; make one tool call at a time. "
    'Tool outputs come back as JSON envelopes {"tool_key", "tool_result", "estimated_tokens"}. '
    "To keep the context small, some earlier outputs may be hidden and shown only as placeholders "
    '{"tool_key", "hidden": true, ...}; if you need one again, run the tool again. '
    "When the task is done, call submit."
)
MANAGE_HINT = " You can also restore a hidden output with manage_context(enable=[tool_key])."
NUDGE = (
    "Your last message had no tool call. Use one of the tools (bash, read_file, write_file, "
    "str_replace), or call submit when the task is done."
)
COST_UNITS = ("ktokens", "task")


@dataclass
class LiveTotals(SessionCounts):
    """Episode totals (``info["totals"]``): :class:`~dtoc_rl.engine.session.SessionCounts` (management
    calls and changes, misses, invalid actions) and these."""

    calls: int = 0  # model calls that answered
    steps: int = 0  # env steps
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    active_token_sum: int = 0  # Σ prompt tokens (mean = / calls)
    tool_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    dropped_tool_calls: int = 0  # beyond max_calls_per_turn
    no_tool_turns: int = 0
    reported_input_tokens: int = 0  # what the agent's API/model reported, when it does
    reported_output_tokens: int = 0

    @property
    def mean_active_tokens(self) -> float:
        return self.active_token_sum / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["mean_active_tokens"] = self.mean_active_tokens
        return d


@dataclass
class _Shadow:
    """The same calls priced with every output visible (a counterfactual on the same actions)."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    dollars: float = 0.0
    prev_prompt: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "prev_prompt"}


@dataclass
class _Episode:
    task: Task
    workdir: Path
    ctx: DTOCContext
    tools: Toolbox
    unit_dollars: float
    totals: LiveTotals
    session: SessionTracker  # steps, outputs, features, labels (counting into totals)
    shadow: _Shadow = field(default_factory=_Shadow)
    static_tokens: dict[int, int] = field(default_factory=dict)
    prev_sigs: list[Any] = field(default_factory=list)
    last_call: float | None = None  # time.time() of the previous model call
    prev_tokens: list[int] = field(default_factory=list)
    end_reason: str | None = None  # submit | agent_error | max_steps
    agent_error: str | None = None
    check: CheckResult | None = None
    over: bool = False
    window: list[Output] = field(default_factory=list)  # the outputs in the slots of the last observation

    @property
    def key_step(self) -> dict[str, int]:
        return self.session.key_step


class LiveEnv(gym.Env):
    """A real agent solves a real coding task; the policy decides which of its past
    tool outputs it sees.

    ## Description
    Each episode copies one task repository (``envs/tasks/``: tiny Python
    repositories with one bug and a failing pytest test) into a temporary working
    directory and starts a DTOC session (:class:`dtoc_rl.DTOCContext`) with the
    task's prompt.  One env step is: the policy's enable/disable sets take effect
    (``manage_context`` run by the orchestrator, outside the model), then the agent
    makes its next model call on the assembled context (hidden outputs appear as
    placeholders), its tool calls run for real in the workdir (``bash``,
    ``read_file``, ``write_file``, ``str_replace``, ``submit``; see
    :mod:`dtoc_rl.envs.tools`), and their outputs are stored, visible.  The first
    model call happens in ``reset()``, so the first observation already holds its
    output.  A message without a tool call (an unparseable generation) gets a short
    user nudge and the loop continues.  The episode is tracked by the Orchestrator's
    :class:`~dtoc_rl.engine.session.SessionTracker`.  Needs are labelled online, a turn at a time,
    with :class:`dtoc_rl.labels.NeedLabeller` (the labels that
    :func:`dtoc_rl.labels.label_trajectory` gives the whole episode); a need on an
    output that was hidden when the call was made is a **miss** (the agent had to
    re-read it), and so is an output of the previous call hidden before this one
    read it (``Episode.call_reads``).  The reward and the observation count the miss
    kinds ReplayEnv counts (provenance and reference needs, and those unread
    outputs); ``totals["misses"]`` counts re-accesses of hidden outputs as well,
    whose re-read the bill already holds.

    ## Action Space
    ``Dict(enable=MultiBinary(N), disable=MultiBinary(N))`` over ``N = max_items``
    slots, exactly as in ReplayEnv: slot i holds the i-th oldest of the ``N`` most
    recently stored outputs (``obs["item_mask"]``; their keys are
    ``info["slot_keys"]``).  Setting a padding slot, enabling a visible or
    disabling a hidden output does nothing; padding slots and slots in both sets
    are counted in ``info["invalid_actions"]`` (as are unknown keys and keys in both
    lists of the agent's own ``manage_context`` calls: :mod:`dtoc_rl.core.actions`).
    An action of the wrong structure, shape or dtype raises ``ValueError`` naming the
    expected space.  After the agent has submitted (in ``reset()`` or mid-turn) the next
    action is not applied.

    ## Observation Space
    The shared spec of :mod:`dtoc_rl.engine.features` (the same ``Dict`` as ReplayEnv):
    per slot ``items`` (``est_tokens_k``, ``age`` in model calls, ``visible``,
    ``times_needed``, ``since_need``, ``modified``, ``is_error``, ``superseded``,
    ``rereads``, ``toggles``, ``turns_after``, ``unique_text``, ``unique_names``), ``item_tool``
    (tool category),
    ``item_mask``/``enable_mask``/``disable_mask``, ``globals`` (active tokens,
    budget, model calls, stored, visible, saved tokens, misses, management calls,
    all-visible tokens; tokens / 1000) and ``family``.  Labels are online: a feature
    only uses steps made so far.  ``text_view=True`` adds ``info["text"]``.

    ## Rewards
    Per step, with ``dollars_t`` the price of the model call(s) the step made::

        r_t = - cost_weight * dollars_t / unit
              - miss_weight * misses_t
              - over_budget_weight * max(0, active_tokens_t - budget) / budget   (budget > 0)

    plus ``success_weight * 1[checker passed]`` on the final step (terminated or
    truncated).  A call is priced with prompt caching as in the offline simulator:
    its prompt (the assembled context, counted with ``estimator``) is compared
    message by message with the previous call's; the common prefix, which ends at
    the first output whose visibility changed since, is read at ``cache_read``
    price, the rest is written at ``cache_write``, and the reply is billed at the
    ``output`` price (``dtoc_rl.sim.pricing.prices_for(model_family)``; the cache never
    expires; tool definitions are not counted).  **Normalisation** (``cost_unit``):
    ``"ktokens"`` (default) divides by the price of 1,000 uncached input tokens of
    the same model, so ``-1`` is one thousand fresh prompt tokens whatever the
    model; ``"task"`` divides by the task's ``reference_dollars`` (``task.json``);
    a number divides by that many dollars.  The reset call is charged in the first
    step's reward.  ``success_weight`` defaults to 10 (a solve is worth 10,000 fresh
    prompt tokens).

    ## Episode End
    Terminated when the agent calls ``submit``.  Truncated after ``max_steps``
    model calls (the reset call included) without a submit, or when the agent
    raises :class:`~dtoc_rl.envs.agents.AgentError` (an endpoint down after its
    retries; ``info["agent_error"]``).  Either way the task checker then restores
    the test files and runs the task's tests (``info["success"]``,
    ``info["check"]``).  The final ``info`` holds ``totals`` (tokens, cache
    reads/writes, dollars, model calls, env steps, tool calls/errors/timeouts,
    management calls and changes, misses, invalid actions), ``all_visible`` (the
    same calls priced with every output visible), ``end_reason``
    (``submit``/``max_steps``/``agent_error``) and ``task_id``.
    :meth:`trajectory` returns the episode in the canonical schema
    (see :class:`~dtoc_rl.envs.recorder.RecordTrajectory`).

    A seed picks the task; what the agent then sees is not reproducible (real tools print clocks and
    timings; a model samples), so ``dtoc_rl/Live-v0`` is registered ``nondeterministic`` and
    gymnasium's ``check_env`` skips its determinism checks.

    ## Arguments
    * ``agent``: an object with ``next_action(messages, tools)`` (see
      :mod:`dtoc_rl.envs.agents`) or a spec: ``"openai:MODEL"``,
      ``"anthropic:MODEL"``, ``"hf:/path/to/model"``; ``agent_kwargs`` go to its constructor.
    * ``tasks``: task ids or :class:`~dtoc_rl.envs.coding_tasks.Task` objects (default:
      all shipped); ``task_root``: a folder of task folders instead of the shipped ones.
    * ``max_items`` (64): slots N.  ``max_steps`` (30): model calls per episode.
    * ``tool_timeout`` (30 s), ``test_timeout`` (the task's), ``max_output_chars`` (10,000),
      ``max_calls_per_turn`` (8; further calls in one reply are dropped and counted).
    * ``model_family`` (default: from the agent's ``model_name``), ``prices``
      (a :class:`~dtoc_rl.sim.pricing.Prices` overriding the family's), ``cache``
      ("provider": the provider's caching rules, as the Simulator bills a logged run;
      "ideal": every shared prefix read back).
    * ``cost_unit`` ("ktokens" | "task" | dollars), ``cost_weight`` (1), ``success_weight`` (10),
      ``miss_weight`` (0), ``budget_tokens`` (0 = none), ``over_budget_weight`` (0).
    * ``system_prompt``: replaces ``DEFAULT_SYSTEM_PROMPT``.  ``agent_can_manage``
      (False): also offer the agent the ``manage_context`` tool.
    * ``estimator`` ("chars"), ``workdir_root`` (temporary folders' parent),
      ``keep_workdir`` (False: a workdir is removed at the next reset or close).
    * ``sequential`` (False): tasks in order instead of sampled with ``np_random``.
    * ``text_view`` (False), ``render_mode`` (None or "ansi").
    * ``reset(options={"task_id": ...})`` or ``{"index": i}`` picks a task.

    ## Version History
    * v0: initial version (needs labelled by relabelling the whole episode each step;
      the incremental labeller gives the same labels in time linear in the episode).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        agent: Any = None,
        *,
        agent_kwargs: dict[str, Any] | None = None,
        tasks: Sequence[str | Task] | None = None,
        task_root: str | Path | None = None,
        max_items: int = 64,
        max_steps: int = 30,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        test_timeout: float | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_calls_per_turn: int = 8,
        model_family: str | None = None,
        prices: Prices | None = None,
        cache: str = "provider",
        cost_unit: str | float = "ktokens",
        cost_weight: float = 1.0,
        success_weight: float = 10.0,
        miss_weight: float = 0.0,
        budget_tokens: int = 0,
        over_budget_weight: float = 0.0,
        system_prompt: str | None = None,
        agent_can_manage: bool = False,
        estimator: str = "chars",
        workdir_root: str | Path | None = None,
        keep_workdir: bool = False,
        sequential: bool = False,
        text_view: bool = False,
        render_mode: str | None = None,
    ):
        if agent is None:
            raise ValueError(
                "LiveEnv needs an agent: an object with next_action(messages, tools), or a spec such as "
                "'openai:gpt-4o-mini', 'anthropic:claude-sonnet-4-5' or 'hf:/path/to/model'"
            )
        check_counts(
            max_items=(max_items, 1), max_steps=(max_steps, 1), max_calls_per_turn=(max_calls_per_turn, 1),
            budget_tokens=(budget_tokens, 0),
        )  # fmt: skip
        check_weights(
            cost_weight=cost_weight, success_weight=success_weight, miss_weight=miss_weight,
            over_budget_weight=over_budget_weight,
        )  # fmt: skip
        max_items, max_steps, max_calls_per_turn = int(max_items), int(max_steps), int(max_calls_per_turn)
        if render_mode not in (None, "ansi"):
            # as ReplayEnv: vectorising helpers ask for "rgb_array" by default; there is no picture
            warnings.warn(
                f"LiveEnv renders only 'ansi' text; render_mode={render_mode!r} is ignored (no rendering)",
                stacklevel=2,
            )
            render_mode = None
        if isinstance(cost_unit, str):
            if cost_unit not in COST_UNITS:
                raise ValueError(f"cost_unit must be one of {COST_UNITS} or a number, got {cost_unit!r}")
        elif not float(cost_unit) > 0:
            raise ValueError(f"a numeric cost_unit must be > 0 dollars, got {cost_unit}")
        self.agent = make_agent(agent, **(agent_kwargs or {}))
        root_tasks = load_tasks(root=task_root) if task_root is not None else load_tasks()
        if tasks is None:
            self.tasks = root_tasks
        else:
            by_id = {t.id: t for t in root_tasks}
            self.tasks = []
            for t in tasks:
                if isinstance(t, Task):
                    self.tasks.append(t)
                elif t in by_id:
                    self.tasks.append(by_id[t])
                else:
                    raise KeyError(f"unknown task {t!r}; available: {sorted(by_id)}")
        if not self.tasks:
            raise ValueError("no tasks")
        for t in self.tasks:
            t.check_runnable()
        if cost_unit == "task":
            missing = [t.id for t in self.tasks if not t.reference_dollars]
            if missing:
                raise ValueError(
                    f"cost_unit='task' needs reference_dollars in task.json; missing for {missing}"
                )
        self.N = int(max_items)
        self.max_steps = int(max_steps)
        self.tool_timeout = float(tool_timeout)
        self.test_timeout = test_timeout
        self.max_output_chars = int(max_output_chars)
        self.max_calls_per_turn = int(max_calls_per_turn)
        self.model_name = str(getattr(self.agent, "model_name", "") or "")
        self.model_family = model_family or normalize_family(self.model_name)
        # a rate-only entry (a cache hit rate of the user's own) reads the model's list prices at it
        p = at_list_prices(prices, self.model_name, self.model_family) if prices else None
        p = p or prices_for(self.model_family, self.model_name or None)
        self.prices = p
        if cache not in CACHE_MODES:  # the Simulator's modes: a live run is billed as its replay is
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {cache!r}")
        # the rules the Simulator applies to the same model (simulator.CostConfig.rules_for)
        self.cache_rules = (
            cache_rules_for(self.model_family, self.model_name or None, None, p.cache_hit_rate)
            if cache == "provider"
            else None
        )
        self.cost_unit = cost_unit
        self.budget = int(budget_tokens)
        self.w = {
            "cost": float(cost_weight),
            "success": float(success_weight),
            "miss": float(miss_weight),
            "budget": float(over_budget_weight),
        }
        self.agent_can_manage = bool(agent_can_manage)
        prompt = system_prompt if system_prompt is not None else DEFAULT_SYSTEM_PROMPT
        if self.agent_can_manage and system_prompt is None:
            prompt += MANAGE_HINT
        self.system_prompt = prompt
        self.tool_defs = tool_specs() + ([openai_tool()] if self.agent_can_manage else [])
        self.estimator = estimator
        self.workdir_root = workdir_root
        self.keep_workdir = keep_workdir
        self.sequential = sequential
        self.text_view = text_view
        self.render_mode = render_mode
        self.observation_space = observation_space(self.N)
        self.action_space = action_space(self.N)
        self._next = 0
        self.ep: _Episode | None = None

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        idx, self._next = pick_index(
            options or {},
            key="task_id",
            ids=[t.id for t in self.tasks],
            rng=self.np_random,
            sequential=self.sequential,
            counter=self._next,
        )
        self._cleanup()
        task = self.tasks[idx]
        workdir = task.make_workdir(self.workdir_root)
        if self.cost_unit == "ktokens":
            unit = self.prices.input * 1000 / 1e6
        elif self.cost_unit == "task":
            unit = float(task.reference_dollars)
        else:
            unit = float(self.cost_unit)
        totals = LiveTotals()
        self.ep = _Episode(
            task=task,
            workdir=workdir,
            ctx=DTOCContext(query=task.prompt, system=self.system_prompt, estimator=self.estimator),
            tools=Toolbox(workdir, timeout=self.tool_timeout, max_output_chars=self.max_output_chars),
            unit_dollars=max(unit, 1e-12),
            totals=totals,
            session=SessionTracker(task.prompt, self.system_prompt, counts=totals, id_prefix="live"),
        )
        self.ep.ctx.store.listeners.append(self.ep.session.on_visibility)
        if hasattr(self.agent, "reset"):
            self.agent.reset()
        self._pending_dollars, self._pending_misses = self._turn()
        obs = self._obs()
        return obs, self._info(obs)

    def step(self, action):
        ep = self.ep
        if ep is None:
            raise RuntimeError("call reset() before step()")
        if ep.over:
            raise RuntimeError("episode is over; call reset()")
        enable, disable = decode_action(action, self.N, self.action_space)
        dollars, misses = self._pending_dollars, self._pending_misses
        self._pending_dollars, self._pending_misses = 0.0, 0
        if ep.end_reason is None and ep.totals.calls >= self.max_steps:
            ep.end_reason = "max_steps"  # only when max_steps=1: the reset call was the last
        if ep.end_reason is None:
            ep.session.apply(ep.ctx, enable, disable, ep.window)
            d, m = self._turn()
            dollars += d
            misses += m
            if ep.end_reason is None and ep.totals.calls >= self.max_steps:
                ep.end_reason = "max_steps"
        else:  # the agent already finished: the action has nothing left to act on
            ep.session.count_invalid(enable, disable, ep.window)
        ep.totals.steps += 1
        terminated = ep.end_reason == "submit"
        truncated = ep.end_reason is not None and not terminated
        reward = -self.w["cost"] * dollars / ep.unit_dollars - self.w["miss"] * misses
        if self.budget and self.w["budget"]:
            reward -= self.w["budget"] * max(0, ep.ctx.active_tokens - self.budget) / self.budget
        if terminated or truncated:
            ep.over = True
            checker = TaskChecker(ep.task, timeout=self.test_timeout)
            ep.check = checker.check(ep.workdir)
            if ep.check.success:
                reward += self.w["success"]
        obs = self._obs()
        info = self._info(obs)
        info["step_dollars"] = dollars
        info["step_misses"] = misses
        if ep.over:
            info["totals"] = ep.totals.to_dict()
            info["all_visible"] = ep.shadow.to_dict()
            info["success"] = bool(ep.check.success)
            info["check"] = ep.check.to_dict()
            info["end_reason"] = ep.end_reason
            if ep.agent_error:
                info["agent_error"] = ep.agent_error
        return obs, float(reward), terminated, truncated, info

    def render(self):
        if self.render_mode == "ansi" and self.ep is not None:
            return self.text()
        return None

    def close(self):
        self._cleanup()
        super().close()

    def __del__(self):
        try:
            self._cleanup()
        except Exception:
            pass

    # -- the agent loop -----------------------------------------------------------------------
    def _cleanup(self) -> None:
        ep = getattr(self, "ep", None)
        if ep is not None and not self.keep_workdir and ep.workdir.parent.exists():
            shutil.rmtree(ep.workdir.parent, ignore_errors=True)

    def _tokens_of(self, m: dict[str, Any]) -> int:
        est = self.ep.ctx.estimator
        n = est.count(m.get("content") or "")
        if m.get("reasoning"):
            n += est.count(m["reasoning"])
        for c in m.get("tool_calls") or []:
            n += est.count(c["name"] + json.dumps(c["arguments"], ensure_ascii=False))
        return n

    def _prompt(self) -> tuple[list[Any], list[int]]:
        """Per-message cache signatures and tokens of the context the next call sees."""
        ep = self.ep
        store = ep.ctx.store
        sigs, toks = [], []
        for i, m in enumerate(ep.ctx.assemble()):
            if m["role"] == "tool" and "tool_key" in m:
                rec = store.get(m["tool_key"])
                sigs.append((rec.tool_key, rec.visible))
                toks.append(rec.cost)
            else:
                n = ep.static_tokens.get(i)
                if n is None:
                    n = ep.static_tokens[i] = self._tokens_of(m)
                sigs.append(i)  # other messages are append-only
                toks.append(n)
        return sigs, toks

    def _bill(self, sigs: list[Any], toks: list[int], out_tokens: int, now: float) -> float:
        ep = self.ep
        prompt = int(sum(toks))
        same = 0
        for a, b in zip(sigs, ep.prev_sigs):
            if a != b:
                break
            same += 1
        cached = min(int(sum(toks[:same])), int(sum(ep.prev_tokens)))
        idle = now - ep.last_call if ep.last_call is not None else float("nan")
        ep.last_call = now
        rules = self.cache_rules
        if rules is not None:
            cached = rules.cached_one(cached, prompt, idle)
        written = prompt - cached
        dollars = float(self.prices.bill(cached, written, out_tokens))
        tot = ep.totals
        tot.calls += 1
        tot.input_tokens += prompt
        tot.cache_read_tokens += cached
        tot.cache_write_tokens += written
        tot.output_tokens += out_tokens
        tot.dollars += dollars
        tot.active_token_sum += prompt
        ep.prev_sigs, ep.prev_tokens = sigs, toks
        # the same call with every output visible: the previous prompt is always a prefix
        sh = ep.shadow
        full = prompt + ep.session.saved
        sh.input_tokens += full
        sh_cached = sh.prev_prompt if rules is None else rules.cached_one(sh.prev_prompt, full, idle)
        sh.cache_read_tokens += sh_cached
        sh.cache_write_tokens += full - sh_cached
        sh.dollars += float(self.prices.bill(sh_cached, full - sh_cached, out_tokens))
        sh.prev_prompt = full
        return dollars

    def _turn(self) -> tuple[float, int]:
        """One model call and its tool calls; returns (dollars, misses): the misses of the kinds
        ReplayEnv counts (the observation's ``misses``), not the re-accesses ``totals`` counts too."""
        ep = self.ep
        ctx = ep.ctx
        counted = ep.session.kind_misses
        masked = ep.session.masked_steps()
        sigs, toks = self._prompt()
        try:
            resp = normalize_response(self.agent.next_action(ctx.to_openai(), self.tool_defs))
        except AgentError as e:
            ep.agent_error = str(e)
            ep.end_reason = "agent_error"
            return 0.0, 0
        turn = ep.totals.calls
        calls = resp["tool_calls"]
        if len(calls) > self.max_calls_per_turn:
            ep.totals.dropped_tool_calls += len(calls) - self.max_calls_per_turn
            calls = calls[: self.max_calls_per_turn]
        bad: dict[str, str] = {}  # call id -> why its arguments cannot be used
        checked = []
        for c, cid in zip(calls, ep.session.call_ids([c["id"] for c in calls], turn)):
            args, why = _checked_arguments(c["arguments"])
            if why:
                bad[cid] = why
            checked.append({"id": cid, "name": c["name"], "arguments": args})
        ctx.add_assistant(resp["content"], tool_calls=checked)
        asst = ctx.store.messages[-1]
        # the call's time is the one its steps are recorded with, so a replay of the recorded log waits
        # the same seconds between calls (the cache's lifetime) as this bill does
        now = time.time()
        dollars = self._bill(sigs, toks, self._tokens_of(asst), now)
        usage = resp.get("usage") or {}
        ep.totals.reported_input_tokens += int(usage.get("input_tokens") or 0)
        ep.totals.reported_output_tokens += int(usage.get("output_tokens") or 0)
        steps = ep.session.add_turn(
            turn, resp["content"], asst.get("tool_calls") or [], masked=masked, now=now
        )
        if not asst.get("tool_calls"):
            ep.totals.no_tool_turns += 1
            ctx.add_user(NUDGE)
            ep.session.add_user(NUDGE)
        for step, call in zip(steps, asst.get("tool_calls") or []):
            ep.totals.tool_calls += 1
            if ep.end_reason is not None:
                text, is_error = "[not run: the episode ended at submit]", True
                rec = ctx.add_tool_result(text, call["id"], timestamp=now)
            elif call["id"] in bad:
                text, is_error = f"[error] {call['name'][:64]}: {bad[call['id']]}", True
                ep.totals.tool_errors += 1
                rec = ctx.add_tool_result(text, call["id"], timestamp=now)
            elif call["name"] == MANAGE_CONTEXT_NAME and self.agent_can_manage:
                try:
                    report = ctx.handle_manage_context_call(call["arguments"], call["id"])
                except Exception as e:  # the model's arguments must not end the episode
                    text, is_error = f"[error] {MANAGE_CONTEXT_NAME}: {type(e).__name__}: {e}", True
                    rec = ctx.add_tool_result(text, call["id"], timestamp=now)
                else:
                    text, is_error, rec = report.to_json(), not report.ok, None
                    ep.session.record_changes(report.enabled, report.disabled, report.invalid)
            else:
                try:
                    res = ep.tools.run(call["name"], call["arguments"])
                except Exception as e:  # Toolbox.run reports errors itself; this is the last guard
                    res = ToolResult(f"[error] {call['name'][:64]}: {type(e).__name__}: {e}", is_error=True)
                text, is_error = res.output, res.is_error
                ep.totals.tool_errors += int(res.is_error)
                ep.totals.tool_timeouts += int(res.timed_out)
                rec = ctx.add_tool_result(text, call["id"], timestamp=now)
                if res.submitted:
                    ep.end_reason = "submit"
            ep.session.set_output(step, text, is_error)
            if rec is not None:
                ep.session.track(rec, step, call=turn, is_error=is_error)
        ep.session.label()  # every result of the turn is in
        return dollars, ep.session.kind_misses - counted

    # -- views ------------------------------------------------------------------------------------------
    def _obs(self) -> dict[str, np.ndarray]:
        ep = self.ep
        obs, ep.window = ep.session.observe(
            self.N,
            now=ep.totals.calls - 1,
            active_tokens=ep.ctx.active_tokens,
            step=ep.totals.calls,
            model_family=self.model_family,
            prices=self.prices,
            budget_tokens=self.budget,
        )
        return obs

    def _info(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        ep = self.ep
        info: dict[str, Any] = {
            "task_id": ep.task.id,
            "model_family": self.model_family,
            "step": ep.totals.calls,
        }
        info.update(ep.session.slot_info(obs, ep.window, self.N))
        info["active_tokens"] = ep.ctx.active_tokens
        info["dollars"] = ep.totals.dollars
        info["invalid_actions"] = ep.totals.invalid_actions
        info["tool_timeouts"] = ep.totals.tool_timeouts
        # the provider's cache of the last call has expired by now: a change costs no re-write (as the
        # Orchestrator tells its policy)
        rules = self.cache_rules
        info["cache_cold"] = bool(
            rules is not None and ep.last_call is not None and rules.expired(time.time() - ep.last_call)
        )
        if self.text_view:
            info["text"] = self.text()
        return info

    def text(self, recent: int = 3) -> str:
        """The store listing and the agent's recent messages, as an LLM policy would read them."""
        ep = self.ep
        return (
            f"Task {ep.task.id}. Active context: {ep.ctx.active_tokens:,} tokens. Stored tool outputs:\n"
            f"{ep.session.listing(ep.window)}\nRecent agent messages:\n{ep.session.recent_reasoning(recent)}"
        )

    def trajectory(self) -> Trajectory:
        """The current (or just finished) episode in the canonical schema.

        Steps carry the tool name, arguments (JSON text), output and assistant
        text; ``masked_before`` lists the steps whose outputs were hidden when
        the step's model call was made; the policy's changes are
        ``ContextEvent(kind="enable"/"disable", targets=steps, detail=keys)`` on
        the first step made after them.  Need labels are the online ones.
        """
        ep = self.ep
        if ep is None:
            raise RuntimeError("no episode yet; call reset()")
        tot, check = ep.totals, ep.check
        extra = {"env": "dtoc_rl/Live-v0", "end_reason": ep.end_reason, "agent_error": ep.agent_error}
        extra.update(totals=tot.to_dict(), all_visible=ep.shadow.to_dict())
        extra["check_output"] = check.output if check else None
        return ep.session.trajectory(
            extra,
            traj_id=f"live/{ep.task.id}/{ep.ctx.store.session_id}",
            source="dtoc-live",
            model_raw=self.model_name,
            model_family=self.model_family,
            task_id=ep.task.id,
            success=check.success if check else None,
            outcome_source=f"LiveEnv TaskChecker: {ep.task.test_command}" if check else "",
            cost_usd=tot.dollars,
            tokens_in=tot.input_tokens,
            tokens_out=tot.output_tokens,
            api_calls=tot.calls,
        )

    @property
    def workdir(self) -> Path | None:
        """The current episode's working directory (a temporary copy of the task repo)."""
        return self.ep.workdir if self.ep is not None else None

    @property
    def item_feature_names(self) -> tuple[str, ...]:
        return ITEM_FEATURES

    @property
    def global_feature_names(self) -> tuple[str, ...]:
        return GLOBAL_FEATURES
