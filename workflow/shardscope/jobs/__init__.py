"""Job stage: run one job of ``plan.json`` by its id (``shardscope job run``), the one command every job rule runs.

The rule passes the plan, the job id and where the result and log go; the job's spec
(:mod:`shardscope.contracts.jobs`) says everything else, and :mod:`.run` hands it to the
collective or training launcher. Torch-free until a launcher starts.
"""
