"""The session engine: what an action does (:mod:`~dtoc_rl.engine.actions`) and one session as a policy
sees it (:mod:`~dtoc_rl.engine.session`), shared by the live Orchestrator, LiveEnv and the ``/decide``
service's sessions."""
