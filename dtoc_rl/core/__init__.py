"""The core: tool-output records, stores (memory and SQLite), token estimators, context assembly,
manage_context, what an enable/disable action does, and the provider renderers.

The bottom layer: it imports nothing else of dtoc_rl (only the top-level helpers such as
dtoc_rl.optional), so the context manager can be used on its own. Data flows one way: logs ->
ingest -> datasets -> env -> policies -> evaluate -> orchestrator; every layer imports only
the layers below it (tests/test_layers.py checks this).
"""
