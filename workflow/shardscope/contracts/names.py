"""The vocabulary every stage shares: strategies, collective ops, fabric classes, outcomes, transports."""

from __future__ import annotations

#: Data-parallel strategies: torch DDP, FSDP2 (full shard / no reshard after forward), DeepSpeed ZeRO-0..3,
#: HSDP (FSDP2 on a 2-D mesh: shard inside a group of ranks, replicate across the groups) and ZeRO-3 with
#: hpZ (ZeRO++ hierarchical partitioning: a second copy of the parameters sharded inside a group of ranks,
#: so backward's all-gather stays inside the group).
STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero0", "zero1", "zero2", "zero3", "hsdp", "zero3_hpz")
#: Strategies whose job names a group of consecutive ranks (``shard_size``, cut from the NVLink islands):
#: HSDP's shard group, and hpZ's secondary partition (DeepSpeed's ``zero_hpz_partition_size``).
GROUPED_STRATEGIES = ("hsdp", "zero3_hpz")
#: Every collective the benchmark knows (nccl-tests has a binary for each).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
#: Fabric classes of a node's GPUs, in the order a reader would rank them (see docs/design.md).
FABRICS = ("nvswitch", "nvlink_mesh", "nvlink_partial", "nvlink_islands", "pcie", "single", "cpu")
#: How a training job ended: it ran, ran out of memory, peaked above the budget, or failed otherwise.
OUTCOMES = ("ok", "oom", "over_budget", "failed")
#: Statuses of a doctor finding: ``ok``: nothing wrong; ``info``: worth knowing, no action; ``warn``: may cost
#: bandwidth; ``fail``: costs bandwidth or correctness; ``skipped``: the check could not run (says why).
FINDING_STATUSES = ("ok", "info", "warn", "fail", "skipped")
#: Transports a collective job compares: NCCL's choice, or NVLink switched off (PCIe / shared memory).
TRANSPORTS = ("default", "pcie")
#: dtypes a training job may train in (fp16 is left out: DeepSpeed on CPU refuses it, and bf16 covers GPUs).
TRAINING_DTYPES = ("bfloat16", "float32")
#: dtypes of collective buffers.
COLLECTIVE_DTYPES = ("float32", "bfloat16", "float16")

#: Gradient-reduction dtypes a training job may ask for (``auto``: the training dtype).
REDUCE_DTYPES = ("auto", "float32", "bfloat16")
#: Bucket policies: each framework's own sizes, or DDP's bucket bytes for every framework.
BUCKET_POLICIES = ("default", "equal")
#: Activation checkpointing a training job may run with: none, every block recomputed in backward (full), or
#: torchtitan's selective modes: each block keeps its attention output and every other matmul's (selective_op), or
#: every second block recomputed (selective_layer). :mod:`shardscope.training.checkpointing` says how.
CHECKPOINTING_MODES = ("none", "full", "selective_op", "selective_layer")
#: ``selective_layer`` checkpoints one block in this many, the second, fourth, ... (torchtitan's default
#: ``selective_ac_option`` "2").
SELECTIVE_LAYER_EVERY = 2
#: Optimizer-state variants the training worker runs (``adamw_bf16_states``: DeepSpeed's bf16 master and moments).
WORKER_OPTIMIZERS = ("adamw", "adamw_bf16_states")
#: The two models of the model states a modeled whole peak is built on, as figure 3 names them.
MEMORY_MODELS = ("ZeRO paper", "implementation")
#: Added to a training job's placement for the run of a strategy at its own best micro-batch (after the
#: micro-batch search, gradient accumulation to one global batch), so figures and report tell those runs apart.
BEST_MICROBATCH_SUFFIX = "@best_microbatch"
