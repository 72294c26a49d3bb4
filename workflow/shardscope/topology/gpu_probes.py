"""Accelerator probes tried in order by :func:`shardscope.topology.detect.detect`."""

PROBES: list = []
