"""The contracts between stages, torch-free: names every stage agrees on, model shapes, job specs.

- :mod:`~shardscope.contracts.names`: strategies, collective ops, fabric classes, outcomes, transports.
- :mod:`~shardscope.contracts.models`: the decoder's shape (:class:`ModelConfig`) and its presets.
- :mod:`~shardscope.contracts.jobs`: one typed, frozen spec per job kind, as ``plan.json`` lists them.

Nothing here imports torch, DeepSpeed, pandas or DuckDB, so planning, parsing, modeling,
storing and drawing can rely on it without paying for (or having) the heavy stacks.
"""
