"""Simulation: prices and the biller, compiled episodes, the Simulator (misses, re-reads, dollars),
the bill check against logged usage and the calibration of the miss model.

It may import dtoc_rl.core, dtoc_rl.data, dtoc_rl.labels and dtoc_rl.ingest; never the engine
(which imports prices from here), the serve layer, envs or policies (tests/test_layers.py checks
this).
"""
