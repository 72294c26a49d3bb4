"""shardscope: which data-parallel strategy is fastest within memory on this machine, and why.

One subpackage per pipeline stage (topology, plan, collectives, training, results,
figures, paper); stages talk only through files and the DuckDB database.
"""

__version__ = "0.1.0"
