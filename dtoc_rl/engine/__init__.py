"""The session engine: what an action does (:mod:`~dtoc_rl.core.actions`) and one session as a policy
sees it (:mod:`~dtoc_rl.engine.session`), shared by the live Orchestrator, LiveEnv and the ``/decide``
service's sessions.

It may import dtoc_rl.core, dtoc_rl.data, dtoc_rl.labels and dtoc_rl.sim (the observation carries
the model's prices); never the serve layer, envs or policies (tests/test_layers.py checks this).
"""
