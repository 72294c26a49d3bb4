"""What each database column means, by column name: the text of every column comment, of ``db schema`` and of the
Parquet export's field metadata (:func:`shardscope.results.ddl.column_docs`).

A column means the same in every table that has it, so its meaning is written once, here; a column whose meaning
in one table differs says so in that table's pandera field (``pa.Field(description=...)``), which wins. Units are
not repeated: the DDL adds the unit a column's name announces (``_bytes``, ``_s``, ``_gbps``).
``tests/results/test_column_docs.py`` fails when a column of any table or view has no meaning.
"""

from __future__ import annotations

_RUN = "the document this row belongs to (runs.run_id)"

MEANINGS: dict[str, str] = {
    # who, where, when
    "run_id": _RUN, "measured_run_id": "the measured training run a modeled row describes (runs.run_id; null on rows collect computed before the predictions stage did)",
    "judged_run_id": "the measured run a verdict judges (runs.run_id)",
    "kind": "document kind: collectives, training, collectives_import, search, predictions, verdicts or doctor",
    "source": "measured (our workers), nccl-tests, reference (bundled logs), modeled (the cost model) or diagnosed",
    "job_id": "the job's name in plan.json (or the imported log's)", "host": "host name of the machine",
    "hosts": "host names the pooled results come from",
    "measured_at": "when the job ran (the document's ISO 8601 time, in UTC)",
    "created_at": "when the calibration was made (UTC)", "checked_at": "when the doctor check ran (UTC)",
    "label": "user label of the run (config), if any", "origin_db": "the database a merged row was first loaded into",
    "source_file": "the file the row was loaded from", "content_digest": "sha256 of the document as collect compares it",
    "config_hash": "hash of the config the job was planned from", "git_rev": "git revision of shardscope that ran it",
    "env_json": "the job's environment (versions, devices, variables) as JSON",
    "topology_hash": "the machine's topology (topologies.topology_hash: its hardware, not the probe time)",
    # software and hardware
    "backend": "torch.distributed backend (nccl, gloo)", "device_type": "cuda or cpu", "devices": "device names",
    "torch_version": "torch version", "comm_library": "collective library and version", "nccl_version": "NCCL version",
    "cuda_version": "CUDA version torch was built with", "deepspeed_version": "DeepSpeed version, where imported",
    "fabric": "fabric class: nvswitch, nvlink_mesh, nvlink_partial, nvlink_islands, pcie, single or cpu",
    "accelerator": "nvidia, amd or none", "gpu_count": "GPUs of the node", "island_count": "NVLink islands",
    "numa_node_count": "NUMA nodes", "source_method": "how the topology was read (nvml, nvidia-smi, rocm-smi, os)",
    "source_json": "the topology's provenance (method, host, probe time, files) as JSON",
    "topology_json": "the whole topology.json document", "gpu_index": "GPU index on the node", "name": "GPU model name",
    "memory_bytes": "GPU memory", "pci_bus_id": "PCI bus id of the GPU", "numa_node": "NUMA node of the GPU",
    "cpu_affinity": "CPUs near the GPU (nvidia-smi's CPU affinity)", "pcie_generation": "PCIe link generation",
    "pcie_width": "PCIe link width (lanes)", "island": "index of the GPU's NVLink island",
    "gpu_a": "one GPU of the pair", "gpu_b": "the other GPU of the pair",
    "code": "link code of the topology matrix (NV18, PIX, PXB, NODE, SYS)", "nvlinks": "NVLinks between the two GPUs",
    # the job's shape
    "world_size": "ranks (processes, one per GPU) of the job", "gpus": "GPUs the row is for", "nodes": "nodes used",
    "placement": "which GPUs the job ran on (local, a GPU list, or a named placement)",
    "transport": "transport the job's environment selected (default, or pcie with NVLink off)",
    "op": "collective operation (all_reduce, all_gather, reduce_scatter, ...)", "dtype": "element type",
    "strategy": "data-parallel strategy (ddp, fsdp, fsdp_grad_op, hsdp, zero0..zero3, zero3_hpz)",
    "model": "model preset or name", "param_count": "parameters of the model", "n_params": "parameters of the model",
    "micro_batch": "sequences per rank per micro-step", "seq_len": "tokens per sequence",
    "grad_accum": "micro-batches per optimizer step (null: 1, older runs)", "repeats": "timed windows (or pooled repeats)",
    "global_batch": "sequences per optimizer step over every rank", "step": "timed step index (0 = first timed step)",
    "repeat": "timed window the step belongs to", "rank": "rank of the process",
    "activation_checkpointing": "activation checkpointing mode (none, full, selective_op, selective_layer)", "checkpointing": "activation checkpointing",
    "device": "cpu or gpu", "attention": "attention implementation assumed (sdpa, eager)",
    # collectives
    "size_bytes": "message size per rank", "time_s": "time of one collective (mean over iterations, slowest rank)",
    "time_max_s": "slowest rank's time of one collective", "algbw_gbps": "algorithm bandwidth: size / time",
    "busbw_gbps": "bus bandwidth: algbw times the op's nccl-tests factor", "in_place": "output buffer is the input",
    "check_ok": "the result was checked correct", "wrong": "wrong elements summed over ranks (nccl-tests #wrong)",
    "calls": "collective calls in one step", "volume_bytes": "bytes the collectives of one step moved per rank",
    "algorithm": "modeled algorithm (ring, tree, ...)", "protocol": "modeled protocol: NCCL's LL, LL128 or Simple, or tcp",
    "bottleneck": "the link that limits the modeled time: nvlink, pcie, net or cpu",
    # training outcome and speed
    "outcome": "ok, oom, over_budget or failed", "error": "why the job did not finish ok (one sentence), else null",
    "median_step_time_s": "median step time over the timed windows (slowest rank per step)",
    "step_time_s": "step time (slowest rank)", "loss": "training loss of the step",
    "tokens_per_s": "tokens per second over all ranks", "tokens_per_step": "tokens per optimizer step over all ranks",
    "mfu": "model FLOPs utilisation: achieved FLOP/s over the GPUs' peak (null where the peak is unknown)",
    "ci95_low_step_time_s": "95% interval of the median step time, low end", "ci95_high_step_time_s": "high end",
    "ci95_low_tokens_per_s": "95% interval of tokens/s, low end", "ci95_high_tokens_per_s": "high end",
    "deepspeed_config": "DeepSpeed's config of the job as JSON", "settings_json": "the fair-comparison settings as JSON",
    "reduce_dtype": "dtype gradients were reduced in", "overlap_comm": "communication overlapped with compute",
    "bucket_policy": "bucket sizes: each framework's default, or equal (DDP's 25 MiB)",
    "comm_volume_bytes": "bytes the step's collectives moved per rank (measured)",
    "comm_modeled_volume_bytes": "the ZeRO paper's volume per rank (modeled)",
    "comm_implementation_volume_bytes": "the volume as the framework implements it (modeled)",
    "comm_time_share": "share of a profiled step spent in communication (0..1)",
    "host_calls_per_step": "Python calls per step recorded by the host-call counter",
    # memory, measured
    "param_bytes": "parameter bytes per rank", "grad_bytes": "gradient bytes per rank",
    "optim_bytes": "optimizer state per rank (fp32 masters included where only the optimizer holds them)",
    "activation_bytes": "activations alive at the peak", "buffer_bytes": "buffers alive at the peak (gathered "
    "parameters, buckets, temporaries)", "activation_peak_bytes": "largest activations alive at any moment",
    "tracked_peak_bytes": "the tensor tracker's peak: held state plus the largest activations + buffers",
    "tracked_peak_phase": "phase of the tracked peak (forward, backward, step)",
    "peak_memory_bytes": "measured peak: CUDA's max_memory_allocated on a GPU, the RSS high-water mark on CPU",
    "peak_memory_method": "how peak_memory_bytes was measured (cuda_max_allocated, rss_peak)",
    "peak_memory_reserved_bytes": "CUDA's max_memory_reserved (allocator cache included); null on CPU",
    "reserved_minus_allocated_bytes": "CUDA reserved minus allocated after the tracked step (allocator slack)",
    "max_reserved_bytes": "CUDA's peak reserved bytes after the tracked step", "num_alloc_retries": "CUDA allocator "
    "retries (cache flushes)", "num_ooms": "CUDA out-of-memory events caught by the allocator",
    # memory, modeled
    "total_bytes": "modeled bytes per GPU (the sum of the terms)", "overhead_bytes": "modeled allocator overhead: its "
    "reserve, and on a GPU of known memory the freed blocks it keeps cached in the room left", "peak_bytes": "modeled whole peak per GPU", "peak_phase": "phase of the modeled peak (forward, backward, backward_blocks, backward_end, step)",
    "memory_model": "which memory model made the row: the ZeRO paper's or the implementation's", "memory_case": "named memory case (a published configuration)",
    "capacity_bytes": "GPU memory of the case", "gpu_memory_bytes": "GPU memory assumed",
    "master_weights": "fp32 master weights kept", "assumption": "what the case assumes, in words",
    "memory_total_bytes": "modeled bytes per GPU", "memory_available_bytes": "GPU memory available to the job",
    "fits": "the modeled peak fits the GPU's memory", "method": "how the row was made: modeled or measured",
    # step model
    "compute_time_s": "modeled compute time of a step", "comm_time_s": "modeled communication time of a step",
    "exposed_comm_time_s": "modeled communication not hidden behind compute",
    "calibration_id": "the calibration this row belongs to", "effective_flops_per_s": "fitted compute rate",
    "overlap": "fitted share of communication hidden behind compute (0..1)",
    "call_overhead_s": "fitted fixed cost per collective call", "host_call_s": "fitted cost per recorded Python call",
    "measured_s": "measured median step time", "measured_ci95_low_s": "95% interval of the measured step, low end",
    "measured_ci95_high_s": "high end", "modeled_s": "modeled step time with the calibration",
    "held_out_s": "modeled step time fitted without this run", "wire_source": "where the wire bandwidth came from",
    "ranking_agree": "strategy pairs the model orders as measured", "ranking_pairs": "strategy pairs ranked",
    "ranking_within_noise": "pairs whose measured gap is within the noise", "ranking_noise": "noise threshold (relative)",
    "ranking_disagree": "the pairs the model orders differently, in words",
    "calibrated_on": "the sweep the collective model was fitted on", "op_group": "ops checked together",
    "pairs": "measured points compared", "median_ratio": "median modeled/measured", "median_error": "median |error|",
    "worst_error": "largest |error|", "worst_ratio": "modeled/measured at the largest error",
    # verdicts and doctor
    "sweep_index": "index of the sweep in the verdicts document", "sweep_kind": "what the sweep is: collectives (our worker) or nccl-tests",
    "sweep_files": "result files pooled in the sweep (repeats of one job)",
    "plateau_busbw_gbps": "bus bandwidth of the large-message plateau", "plateau_ci95_low_gbps": "95% interval, low",
    "plateau_ci95_high_gbps": "95% interval, high", "plateau_runs": "runs the interval is over",
    "max_busbw_gbps": "largest bus bandwidth seen", "size_to_90pct_bytes": "smallest size reaching 90% of the plateau",
    "latency_floor_us": "time of the smallest messages", "latency_floor_is_latency": "the floor is latency, not noise",
    "expected_busbw_gbps": "bus bandwidth expected of this fabric", "ceiling_busbw_gbps": "the fabric's ceiling",
    "percent_of_expected": "measured over expected, in percent", "verdict": "the judgement: ok, low, suspicious or unknown",
    "reason": "why, in one sentence", "hints_json": "what to check next, as JSON", "notes_json": "notes as JSON",
    "nccl_env_json": "NCCL variables of the run as JSON", "nccl_flags_json": "NCCL flags seen, as JSON",
    "nccl_log_json": "what NCCL's log said (transports, channels), as JSON",
    "measured_busbw_gbps": "median bus bandwidth over the repeats", "busbw_mean_gbps": "mean bus bandwidth",
    "busbw_stdev_gbps": "standard deviation of the bus bandwidth", "busbw_ci95_low_gbps": "95% interval, low end",
    "busbw_ci95_high_gbps": "95% interval, high end", "time_min_us": "fastest time", "region": "size region of the row: bandwidth or latency",
    "check_name": "the doctor check", "status": "the check's status: ok, info, warn, fail or skipped", "read": "what was read",
    "concluded": "what it concludes", "action": "what to do", "explains": "what a finding may explain",
    "details_json": "the check's details as JSON",
    # decision map
    "panel": "fabric panel of the map", "title": "panel title", "order_source": "what ordered the strategies",
    "ranking": "strategies in modeled order", "gpu_memory_gb": "GPU memory of the cell (GB)",
    "preset": "model preset, if the shape is one", "pick": "the strategy the rule picks, in words",
    "tied": "strategies within the tie margin", "tie_spread": "spread of the tied strategies' times (relative)",
    "tie_margin": "relative gap below which strategies tie", "rule": "which step of the decision rule decided",
    "per_gpu_bytes": "modeled whole peak per GPU of the pick", "ddp_per_gpu_bytes": "DDP's modeled peak per GPU",
    "usable_fraction": "share of GPU memory a peak may use",
    # micro-batch search
    "search_job_id": "the planned job whose micro-batch was searched", "trial_job_id": "the trial's job id",
    "trial_order": "0 for the first trial", "memory_budget_bytes": "memory budget of the search",
    "is_best": "the largest micro-batch that fitted", "result_file": "the trial's result file",
}
