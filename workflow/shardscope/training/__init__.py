"""Training stage: one model trained under each data-parallel strategy, measured for speed and memory.

Data contract: one JSON file per job (see :mod:`shardscope.training.worker`) with the job,
its environment, per-step times, per-rank bytes held and an outcome.
"""
