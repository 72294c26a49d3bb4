"""Collectives stage: nccl-tests-grade timing of the collectives each strategy depends on.

Data contract: one JSON file per job (see :mod:`shardscope.collectives.worker`), rows of raw
bytes, seconds and world size; bandwidths are derived by :mod:`shardscope.contracts.factors`.
"""
