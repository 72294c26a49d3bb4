"""Plan stage: which collective and training jobs to run, derived from topology and config.

Data contract: ``plan.json`` as produced by :func:`shardscope.plan.planner.make_plan`.
"""
