"""shardscope: which data-parallel strategy is fastest within memory on this machine, and why.

One subpackage per pipeline stage: topology, plan, jobs (run one planned job), collectives,
training, emulated (fabrics in network namespaces), cluster (jobs across Slurm nodes),
costmodel (predictions), diagnose (verdicts, doctor), results (the database and its shared
views), reference (the bundled public runs, loaded into their own database), figures and paper. ``contracts`` holds what they share, torch-free: names, model shapes, typed job specs.
Stages talk only through files -- ``plan.json`` above all -- and the DuckDB database
(docs/design.md).
"""

__version__ = "0.1.0"
