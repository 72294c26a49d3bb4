"""Topology stage: what GPUs this node has, how they are linked, and which fabric class it is.

Data contract: ``topology.json`` as produced by :meth:`shardscope.topology.model.Topology.to_dict`,
described by ``topology.schema.json`` (JSON Schema draft 2020-12, shipped in this package).
Other stages read it with :func:`shardscope.topology.document.load_topology`, which validates it.
"""
