"""Modeled time of the optimizer's update once per optimizer step, on the GPU or offloaded to the host.

The forward and backward passes scale with the tokens of a step; the optimizer's update does not: it touches
every parameter the rank updates once per optimizer step, whatever the batch. It is memory-bound (Adam does a
few FLOPs per byte), so its time is bytes over bandwidth, and a strategy that shards the optimizer state
updates only its ``1/N`` of the parameters. Two consequences the step model would otherwise miss: a larger
micro-batch (or more accumulation) spreads one update over more tokens, and ZeRO-1/2/3 and FSDP update ``N``
times fewer parameters per GPU than DDP.

- **On the GPU** (AdamW, fp32 master weights and moments): DeepSpeed's FusedAdam reads the fp32 parameter, its
  gradient and both moments and writes the parameter and both moments back in one kernel
  (:data:`ADAM_BYTES_PER_PARAM`, 28 B); torch's AdamW at its default on a GPU (``foreach``) runs the update as a
  chain of multi-tensor kernels, each streaming its operands (:data:`FOREACH_ADAM_BYTES_PER_PARAM`, 84 B). The
  gradient-norm clipping every framework applies by default reads the gradient for the norm and scales it in place
  (:data:`CLIP_BYTES_PER_PARAM`), and where DeepSpeed keeps the model's weights in 16 bits beside its fp32 master
  copy it writes that copy too (:data:`HALF_COPY_BYTES`). The bandwidth is the GPU's datasheet figure times
  :data:`STREAM_SHARE`.
- **Offloaded to the host** (``offload_optimizer="cpu"``): the update runs on the CPU, at DeepSpeed's CPU-Adam
  rate for ZeRO, whose OpenMP threads span the host's cores so that every rank of a host shares them, and at
  torch's CPU AdamW rate for FSDP, one thread per rank (torchrun starts each rank with ``OMP_NUM_THREADS=1``), so
  that a host's ranks update side by side (:data:`CPU_ADAM_PARAMS_PER_S`), and the rank's gradients cross PCIe to
  the host and its updated parameters back (:func:`shardscope.costmodel.hardware.pcie_effective_gbps`). FSDP's CPU
  offload (``CPUOffload``, ``CPUOffloadPolicy``) keeps the sharded parameters on the host as well, so every
  all-gather first copies the rank's fp32 shard to the GPU, in forward and again in backward. The copies are counted as exposed: DeepSpeed
  and FSDP overlap part of them, so this is the slow side of the truth (stated, not measured here).

Every number is modeled. On a CPU machine the step model leaves the update to the measured calibration (the
update's time is inside the measured steps it is fitted to), so this term applies to GPUs only.
"""

from __future__ import annotations

from shardscope.contracts.models import ModelConfig
from shardscope.contracts.strategies import OFFLOAD_HOLDS, PER_MICRO_BATCH, SHARDED, uses_deepspeed
from shardscope.costmodel.hardware import GpuSpec, pcie_effective_gbps

#: Bytes a fused AdamW kernel moves per updated parameter with fp32 master weights and moments: reads of the
#: parameter, its gradient and the two moments, writes of the parameter and the two moments (7 x 4 B; DeepSpeed's
#: FusedAdam, what its ``"type": "AdamW"`` builds on a GPU, ``csrc/adam/multi_tensor_adam.cu``; torch's
#: ``fused=True``, traced as 28 B with :class:`~torch.utils._python_dispatch.TorchDispatchMode`).
ADAM_BYTES_PER_PARAM = 28
#: Bytes torch.optim.AdamW moves per updated parameter at its default on a GPU (``foreach``, since torch 2.0): the
#: decoupled weight decay (``_foreach_mul_``: 8), the first moment's ``lerp_`` (12), the second's ``mul_`` and
#: ``addcmul_`` (8 + 16), the denominator's ``sqrt``, ``div_`` and ``add_`` (8 + 8 + 8) and the parameter's
#: ``addcdiv_`` (16), each kernel reading its operands and writing its result: 84 B, traced on torch 2.13 by
#: counting every op's operands and in-place results (the per-tensor loop, ``foreach=False``, moves the same 84 B).
FOREACH_ADAM_BYTES_PER_PARAM = 84
#: AdamW implementations a run may name: ``fused`` (one kernel: DeepSpeed's FusedAdam, torch's ``fused=True``),
#: ``foreach`` (torch's multi-tensor chain, its default on a GPU since PyTorch 2.0), ``for-loop`` (one parameter
#: tensor at a time: ``foreach=False``, torch's only path on a GPU before 2.0, and the Hugging Face Trainer's own
#: ``adamw_hf``; the same bytes as ``foreach``, far fewer temporaries), and ``default``, the framework's own:
#: DeepSpeed's FusedAdam under ZeRO, torch's ``foreach`` under DDP and FSDP.
ADAMW_IMPLEMENTATIONS = ("default", "fused", "foreach", "for-loop")


def check_adamw(implementation: str) -> str:
    """``implementation`` if it is one of :data:`ADAMW_IMPLEMENTATIONS`, else ValueError in one sentence."""
    if implementation not in ADAMW_IMPLEMENTATIONS:
        raise ValueError(f"AdamW implementation must be one of {', '.join(ADAMW_IMPLEMENTATIONS)}, "
                         f"got {implementation!r}")
    return implementation


def adamw_implementation(strategy: str, implementation: str = "default") -> str:
    """``fused``, ``foreach`` or ``for-loop``: the AdamW ``strategy``'s run steps with, ``implementation`` resolved to
    its framework's default (DeepSpeed's fused kernel under ZeRO, torch's ``foreach`` under DDP and FSDP)."""
    if check_adamw(implementation) != "default":
        return implementation
    return "fused" if uses_deepspeed(strategy) else "foreach"


#: Bytes of gradient-norm clipping per updated parameter: the norm reads the gradient (4) and the scale by the
#: clamped coefficient, applied whether or not it clips, reads and writes it (8): torch's ``clip_grad_norm_``
#: (traced: ``_foreach_norm`` and ``_foreach_mul_``), DeepSpeed's ``gradient_clipping`` (unscale and clip in one
#: multiply), the Hugging Face Trainer's ``max_grad_norm=1.0`` default.
CLIP_BYTES_PER_PARAM = 12
#: Bytes per updated parameter of writing the 16-bit model weights from DeepSpeed's fp32 master partition after the
#: update (its ``_update_model_bf16_weights`` / fp16 copy); torch autocast and FSDP2 keep one fp32 copy and cast at
#: use, so they write none.
HALF_COPY_BYTES = 2
#: Share of the datasheet memory bandwidth an element-wise multi-tensor kernel sustains: an assumption, of the order
#: a STREAM triad reaches on HBM GPUs (about 0.9 of the datasheet figure) less the launch gaps of a multi-tensor
#: update over many parameter tensors.
STREAM_SHARE = 0.8
#: Parameters per second one process updates with the optimizer offloaded: DeepSpeed's CPU-Adam took 8.2 s and
#: torch's CPU Adam 56 s for the optimizer step of an 11.6B-parameter GPT-2 (deepspeedai/DeepSpeed#735, 2021-02).
#: That is read as one process stepping all 11.6B (ZeRO-Offload's own tutorial trains a 10B GPT-2 on one V100);
#: shared by 16 ranks, torch's update would run at 13M parameters/s per rank, far below one core's rate. A
#: second source agrees on torch's per-process rate: a per-parameter fp32 AdamW loop updated 536.9M elements in
#: 1.93 s on one thread and 1.81 s on two, 278M/s and 297M/s (ISEEKYAN/Megatron-LM#188, 2026-08: memory-bound, so
#: more threads barely help, while eight ranks time-sharing two cores took 17.2 s each). torch.optim.AdamW on one
#: core of this project's build machine (AMD EPYC): 515M/s as the default per-tensor loop, 267M/s with
#: ``foreach=True`` (100 tensors of 1M fp32 elements). DeepSpeed's CPU-Adam spreads one process's update over the
#: host's cores (OpenMP), so a host's ranks share its rate; torch's runs on one thread per rank (torchrun's
#: ``OMP_NUM_THREADS=1``), so a host's ranks each get it (:func:`offload_update_s`).
CPU_ADAM_PARAMS_PER_S = {"deepspeed": 11.6e9 / 8.2, "torch": 11.6e9 / 56.0}


def updated_params(strategy: str, cfg: ModelConfig, gpus: int, trainable_fraction: float = 1.0,
                   shard_group: int | None = None) -> float:
    """Parameters one rank's optimizer updates: the trainable ones, divided by the ranks that shard the optimizer
    state (all ``gpus``; HSDP's shard group), all of them where the state is replicated (DDP, ZeRO-0)."""
    trainable = cfg.param_count() * trainable_fraction
    if not SHARDED[strategy][2]:
        return trainable
    return trainable / max(1, shard_group if strategy == "hsdp" and shard_group else gpus)


def gpu_update_s(strategy: str, params: float, gpu: GpuSpec, dtype: str, adamw: str = "default") -> float:
    """Seconds of one AdamW update of ``params`` parameters on ``gpu`` (memory-bound, :data:`STREAM_SHARE` of its
    datasheet bandwidth; 0 where the table has no bandwidth for it), in the ``adamw`` implementation
    (:func:`adamw_implementation`: by default DeepSpeed's fused kernel under ZeRO, torch's ``foreach`` under DDP and
    FSDP)."""
    bandwidth = gpu.memory_bandwidth_gbps
    if not bandwidth:
        return 0.0
    deepspeed = uses_deepspeed(strategy)
    fused = adamw_implementation(strategy, adamw) == "fused"
    per_param = (ADAM_BYTES_PER_PARAM if fused else FOREACH_ADAM_BYTES_PER_PARAM) + CLIP_BYTES_PER_PARAM
    if deepspeed and dtype != "float32":
        per_param += HALF_COPY_BYTES
    return params * per_param / (bandwidth * 1e9 * STREAM_SHARE)


def offload_update_s(strategy: str, params: float, gpu: GpuSpec, ranks_per_host: int, grad_bytes: int,
                     param_bytes: int, micro_batches: int) -> float:
    """Seconds the offloaded update adds to one optimizer step of one rank: the CPU update
    (:data:`CPU_ADAM_PARAMS_PER_S`), of every rank on the host under DeepSpeed (its CPU-Adam's threads share the host's
    cores) and of the rank's own parameters under torch (one thread per rank, the ranks side by side), the rank's
    gradients to the host and its parameters back over its PCIe link, and, where the parameters live on the host
    (the strategy's ``offload_holds``), their copy to the GPU before each all-gather and the gradients' copy back in
    every micro-batch."""
    deepspeed = uses_deepspeed(strategy)
    rate = CPU_ADAM_PARAMS_PER_S["deepspeed" if deepspeed else "torch"]
    cpu = params * (max(1, ranks_per_host) if deepspeed else 1) / rate
    pcie = pcie_effective_gbps(gpu.pcie_generation) * 1e9
    if OFFLOAD_HOLDS[strategy][0]:
        gathers = 1 if strategy == "fsdp_grad_op" else 2
        copies = micro_batches * params * (4 * gathers + 4)
    else:  # ZeRO-2/3 move each micro-batch's gradients to the host as they are reduced, ZeRO-1 once per step
        copies = params * (grad_bytes * (micro_batches if PER_MICRO_BATCH[strategy][0] else 1) + param_bytes)
    return cpu + copies / pcie


def optimizer_step_s(strategy: str, cfg: ModelConfig, gpus: int, gpu: GpuSpec | None, *, dtype: str,
                     trainable_fraction: float = 1.0, offload: str = "none", ranks_per_host: int | None = None,
                     grad_bytes: int = 2, param_bytes: int = 2, micro_batches: int = 1,
                     shard_group: int | None = None, adamw: str = "default") -> float:
    """Seconds of the optimizer's update in one optimizer step of ``strategy`` on ``gpus`` GPUs (0 on a CPU machine
    or without a GPU spec: see the module docstring). ``ranks_per_host``: the job's ranks on one host, which share its
    CPU when the update is offloaded (default: all ``gpus``). ``adamw``: the GPU update's implementation
    (:data:`ADAMW_IMPLEMENTATIONS`)."""
    if gpu is None or gpu.is_cpu:
        return 0.0
    params = updated_params(strategy, cfg, gpus, trainable_fraction, shard_group)
    if offload == "cpu":
        return offload_update_s(strategy, params, gpu, ranks_per_host or gpus, grad_bytes, param_bytes, micro_batches)
    return gpu_update_s(strategy, params, gpu, dtype, adamw)
