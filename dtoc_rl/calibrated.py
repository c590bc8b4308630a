"""Miss-model figures fitted on real runs that were masked (``dtoc-rl calibrate``).

Source: SWE-agent 1.0 with ``LastNObservations(n=5, polling=1)``, model
SWE-agent-LM-32B, SWE-bench Verified
(``../shared/traces/swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b``):
44 trajectories, 537 steps, every step's masking schedule logged.  Produced by::

    dtoc-rl ingest ../shared/traces/swe-agent-1.0_swebench-verified -o /tmp/swe1
    dtoc-rl calibrate /tmp/swe1 --json        # miss_model, k = 3, 2000 bootstrap resamples, seed 0

with the labeller of this version (refused edits write nothing; abbreviated
SWE-agent views read only the lines they show; token runs must add 12
characters beyond the agent's own words and never span a jump in line numbers;
``edit`` needs).  Miss episodes are opened by needs of the kinds the simulator
charges (:data:`dtoc_rl.simulator.MISS_KINDS`: provenance and reference).  Definitions in
:mod:`dtoc_rl.calibration`; discussion and limits in ``docs/validity.md``.
``tests/test_calibration.py`` recomputes these from the shared traces.

How to use them: ``CostConfig(miss="calibrated", reread_prob=CALIBRATED_REREAD_PROB)``
(``dtoc-rl evaluate --miss calibrated``, whose default ``--reread-prob`` is this figure).  They are *not*
the simulator's default: 14 miss episodes of one model and one harness, with
an interval from 0.20 to 0.85, are too few to replace the deterministic
``miss="reread"`` upper bound (see ``docs/validity.md``).
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

#: P(the agent re-reads | a need on a hidden output): 8 of 14 miss episodes.
CALIBRATED_REREAD_PROB = 8 / 14
#: 95% cluster-bootstrap interval over the 44 trajectories (2000 resamples, seed 0).
CALIBRATED_REREAD_PROB_CI = (0.20, 0.85)
#: 95% Wilson interval (treats the 14 episodes as independent).
CALIBRATED_REREAD_PROB_WILSON = (0.33, 0.79)
#: Needs on hidden outputs without a re-read within CALIBRATED_K steps (the agent carried on).
CALIBRATED_ABSORBED_FRACTION = 6 / 14
#: Steps from the need to the re-read, over the 8 re-reads: 6 re-read before using the output
#: (delay 0, the simulator's assumption), 2 two steps after a failed edit written from memory.
CALIBRATED_DELAY_HIST = {0: 6, 1: 0, 2: 2, 3: 0}
#: Of the 8 episodes opened by a provenance need on a hidden output, 2 were failed actions
#: (an extra model call the simulator does not charge).
CALIBRATED_NEED_ACTION_FAILED = 0.25
#: Miss episodes observed (6 direct re-reads + 8 opened by a provenance need on a hidden output).
CALIBRATED_EPISODES = 14
#: The recovery window (steps).
CALIBRATED_K = 3
CALIBRATION_SOURCE = (
    "swe-agent-1.0_swebench-verified/20250511_sweagent_lm_32b: 44 trajectories, 537 steps, "
    "LastNObservations(n=5, polling=1); dtoc-rl calibrate, k=3"
)

#: Share of the rule-allowed cached prefix that providers with an implicit, best-effort cache really
#: hit, per model version or family, fitted by ``dtoc-rl billcheck`` on logs that report cached
#: tokens (docs/billcheck.md).  Providers not listed hit every allowed token.
CACHE_HIT_RATES: dict[str, float] = {}
