"""The data layer: the trajectory schema, model families, datasets on disk (Parquet / Hugging Face),
chat-log conversion and the bundled sample's paths.

It may import dtoc_rl.core and nothing above it: ingesters, labels, the simulator, the engine,
envs and policies all read and write these types (tests/test_layers.py checks this).
"""
