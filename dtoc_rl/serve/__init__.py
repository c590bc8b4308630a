"""Plugging a policy back into a running agent: the Orchestrator, the /decide policy service and its
sessions' labels, and replaying a logged session through the context manager.

The top library layer: it may import every layer below (core, data, labels, ingest, sim,
engine) but never dtoc_rl.envs, dtoc_rl.policies or scripts (a policy is passed in, not imported);
only the CLI imports it (tests/test_layers.py checks this).
"""
