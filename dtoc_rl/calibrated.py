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
charges (:data:`dtoc_rl.schema.MISS_KINDS`: provenance and reference).  Definitions in
:mod:`dtoc_rl.calibration`; discussion and limits in ``docs/validity.md``.
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
