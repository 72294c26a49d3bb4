"""Topology stage: what GPUs this node has, how they are linked, and which fabric class it is.

Data contract: ``topology.json`` as produced by :meth:`shardscope.topology.model.Topology.to_dict`.
"""
