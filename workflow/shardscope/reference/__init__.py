"""The reference stage: the bundled public nccl-tests logs, loaded into their own database.

Nobody on this project measured these runs (``figures/reference/SOURCES.md`` names each file's
origin). The stage runs the same commands a user runs on their own logs, one Snakemake rule
each (``workflow/rules/reference.smk``): ``collectives import --reference`` per log, ``verdict``
per imported run against the topology ``runs.json`` names for it, ``predict collectives`` per
modeled fabric, and one ``collect`` into ``results/reference/reference.duckdb``, the stage's
declared output. Figures and the report attach that database; they never build it.

:mod:`shardscope.reference.steps` spells each command once (the rules and
:func:`shardscope.reference.build.build_reference_db` both use it); :mod:`shardscope.reference.documents`
shapes one log as a reference import document.
"""
