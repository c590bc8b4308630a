"""Miss-model figures fitted on real runs that were masked (``dtoc-rl calibrate``).

Source: SWE-agent 1.0 with ``LastNObservations(n=5, polling=1)``, model
SWE-agent-LM-32B, SWE-bench Verified
(``../shared/traces/swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b``, both batches):
165 runs, of which 162 hid something (2,589 steps), every step's masking schedule logged.
Produced by::

    dtoc-rl ingest ../shared/traces/swe-agent-1.0_swebench-verified -o /tmp/swe1
    dtoc-rl calibrate /tmp/swe1 --json        # miss_model, k = 3, 2000 bootstrap resamples, seed 0

with the labeller of this version (refused edits write nothing; abbreviated
SWE-agent views read only the lines they show; token runs must add 12
characters beyond the agent's own words and never span a jump in line numbers;
``edit`` needs).  Miss episodes are opened by needs of the kinds the simulator
charges (:data:`dtoc_rl.data.schema.MISS_KINDS`: provenance and reference).  Definitions in
:mod:`dtoc_rl.sim.calibration`; discussion and limits in ``docs/validity.md``.
``tests/test_calibration.py`` recomputes these from the shared traces.

How to use them: ``CostConfig(miss="calibrated", reread_prob=CALIBRATED_REREAD_PROB)``
(``dtoc-rl evaluate --miss calibrated``, whose default ``--reread-prob`` is this figure).  They are *not*
the simulator's default, which charges every miss (``miss="reread"``, an upper bound on re-reads);
the figures come from one model and one harness (see ``docs/validity.md``).
"""

from __future__ import annotations

__all__ = [
    "CACHE_HIT_RATES",
    "CALIBRATED_ABSORBED_FRACTION",
    "CALIBRATED_DELAY_HIST",
    "CALIBRATED_EPISODES",
    "CALIBRATED_K",
    "CALIBRATED_NEED_ACTION_FAILED",
    "CALIBRATED_REREAD_PROB",
    "CALIBRATED_REREAD_PROB_CI",
    "CALIBRATED_REREAD_PROB_WILSON",
    "CALIBRATION_SOURCE",
    "PROMPT_SIZE_FACTORS",
    "SAME_HARNESS",
]

#: P(the agent re-reads | a need on a hidden output): 121 of 200 miss episodes.
CALIBRATED_REREAD_PROB = 121 / 200
#: 95% cluster-bootstrap interval over the 162 trajectories (2000 resamples, seed 0).
CALIBRATED_REREAD_PROB_CI = (0.51, 0.69)
#: 95% Wilson interval (treats the 200 episodes as independent).
CALIBRATED_REREAD_PROB_WILSON = (0.54, 0.67)
#: Needs on hidden outputs without a re-read within CALIBRATED_K steps (the agent carried on).
CALIBRATED_ABSORBED_FRACTION = 79 / 200
#: Steps from the need to the re-read, over the 121 re-reads: 107 re-read before using the output
#: (delay 0, the simulator's assumption), 14 one to three steps later.
CALIBRATED_DELAY_HIST = {0: 107, 1: 9, 2: 3, 3: 2}
#: Of the 93 episodes opened by a need on a hidden output, 28 were failed actions (an extra model
#: call the simulator does not charge).
CALIBRATED_NEED_ACTION_FAILED = 28 / 93
#: Miss episodes observed (107 direct re-reads + 93 opened by a need on a hidden output).
CALIBRATED_EPISODES = 200
#: The recovery window (steps).
CALIBRATED_K = 3
CALIBRATION_SOURCE = (
    "swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b: 162 trajectories, 2,589 steps, "
    "LastNObservations(n=5, polling=1); dtoc-rl calibrate, k=3"
)

#: Share of the rule-allowed cached prefix that providers with an implicit, best-effort cache really
#: hit, per model version or family, fitted by ``dtoc-rl calibrate --cost`` on logs that report cached
#: tokens (docs/billcheck.md).  Providers not listed hit every allowed token.
CACHE_HIT_RATES: dict[str, float] = {
    # mini-swe-agent, 130 runs, 4,624 calls with usage (OpenRouter): 50.4M of 62.4M prompt tokens read
    # from the cache; 589 calls had no hit at all.
    "gemini-3-pro-preview": 0.87,
    # RepoLaunch on Azure, the 1,299 calls (of 19,012) whose cost is logged: cached tokens implied by
    # the cost; many calls with a long unchanged prefix were billed with no hit at all.
    "gpt-5.2": 0.52,
    "gpt-5.2-codex": 0.52,
}

#: Provider prompt tokens from a log's text, per "source/model family", for the bill check
#: (``dtoc_rl.sim.billcheck.SizeModel``): tokens per ``estimator`` token of the system prompt and task
#: (``base``), of other step text (``text``) and of tool outputs (``outputs``), tokens per earlier step
#: (``per_step``) and per call (``offset``), and one overall ``ratio`` (what a harness with no entry of
#: its own borrows for the same model family).  Fitted on the fit half of each source's trajectories
#: (``billcheck.held_out`` false) by ``dtoc-rl calibrate --cost DATASET --fit --json``
#: (``sources.*.size_models``), on a fresh ingest of ../shared/traces; docs/billcheck.md gives the
#: errors on both halves.
PROMPT_SIZE_FACTORS: dict[str, dict[str, float | int | str]] = {
    "claude-code-stream/claude-opus": {
        "estimator": "o200k_base",
        "base": 1.0038,
        "text": 1.1137,
        "outputs": 1.0172,
        "per_step": 88.7775,
        "offset": 94.2425,
        "ratio": 1.0956,
        "calls": 65,
        "fitted_on": "../shared/traces fit half: 9 runs, 65 calls; 2026-12-01",
    },
    "claude-code-stream/claude-sonnet": {
        "estimator": "o200k_base",
        "base": 1.0081,
        "text": 1.2051,
        "outputs": 1.0812,
        "per_step": 103.8186,
        "offset": 0.0,
        "ratio": 1.1477,
        "calls": 123,
        "fitted_on": "../shared/traces fit half: 13 runs, 123 calls; 2026-12-01",
    },
    "mini-swe-agent/gemini-3-pro": {
        "estimator": "o200k_base",
        "base": 0.8102,
        "text": 1.1791,
        "outputs": 1.2068,
        "per_step": 8.1342,
        "offset": 384.9708,
        "ratio": 1.1769,
        "calls": 2590,
        "fitted_on": "../shared/traces fit half: 74 runs, 2,590 calls; 2026-12-01",
    },
    "repolaunch/gpt-5": {
        "estimator": "o200k_base",
        "base": 0.9988,
        "text": 0.9988,
        "outputs": 0.9988,
        "per_step": 0.0,
        "offset": 0.0,
        "ratio": 0.9988,
        "calls": 9767,
        "fitted_on": "../shared/traces fit half: 768 runs, 9,767 calls; 2026-12-01",
    },
}

#: Log formats of one harness, by ingest source: the prompts they describe are the same program's
#: requests, so the stored size model of the format a key names (its framing per step and call
#: included) sizes the key's format when that has none of its own.
#: Claude Code writes its session transcripts (``~/.claude/projects``) and prints its stream
#: (``--output-format stream-json``) from one conversation; on 20 public Claude Code 2.1.39 transcripts
#: (check only) the stream's whole Opus model errs -11.7% on the bill where its ratio alone erred
#: -13.4% (docs/results.md, "What those logs met, mended").
SAME_HARNESS: dict[str, str] = {"claude-code-transcript": "claude-code-stream"}
