"""Diagnosis: is this bandwidth normal, and if not, why?

- :mod:`.sweep_summary` — plateau busbw, size to 90% of it, latency floor and run-to-run
  variation of one sweep (instead of nccl-tests' "Avg bus bandwidth").
- :mod:`.verdicts` — the busbw the detected links should give (the cost model) and a verdict
  per row and per sweep: ``ok``, ``low``, ``suspicious`` or ``unknown``.
- :mod:`.nccl_log` — what NCCL actually did, read from its ``NCCL_DEBUG=INFO`` log.
- :mod:`.doctor` — node checks (ACS, IOMMU, PCIe links, NCCL variables, NUMA binding,
  virtualisation), each tied to the shortfall it explains.
"""
