"""Run by ``test_zero3_reuse.py`` in a process of its own: DeepSpeed ZeRO-3 on one gloo rank (CPU), the parameter
elements it holds when forward ends and when the last block's backward begins (gathered, or prefetched and still in
flight: memory either way), one JSON line per ``reuse distance:live limit:prefetch bucket:checkpointing`` argument.

Each run takes four steps; DeepSpeed records its module trace in the first and fetches and releases by it from the
second on, so the count is read in the third.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

import shardscope.training.strategies as strategies
from shardscope.contracts.models import ModelConfig
from shardscope.device import DistContext
from shardscope.training.checkpointing import apply_checkpointing
from shardscope.training.model import synthetic_batch

SHAPE = ModelConfig(n_layers=8, d_model=128, n_heads=4, n_kv_heads=4, d_ff=512, vocab_size=512, max_seq_len=64)


def main(runs: list[str]) -> None:
    # DeepSpeed's rank variables for this process only: the test imports SHAPE from here
    os.environ.update(DS_ACCELERATOR="cpu", LOCAL_RANK="0", RANK="0", WORLD_SIZE="1")
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    rendezvous = Path(tempfile.mkdtemp()) / "pg"
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"),
                      backend="gloo")
    config_of = strategies.deepspeed_config
    for run in runs:
        reuse, live, prefetch, checkpointing = run.split(":")

        def config(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = config_of(*args, **kwargs)
            out["zero_optimization"].update(stage3_max_reuse_distance=int(reuse), stage3_max_live_parameters=int(live),
                                            stage3_prefetch_bucket_size=int(prefetch))
            return out

        strategies.deepspeed_config = config
        prepared = strategies.prepare("zero3", SHAPE, ctx, torch.float32, 1)
        model = prepared.model
        apply_checkpointing(model, checkpointing)
        seen: list[int] = []
        first_block_backward: list[int] = []

        def held() -> int:
            return sum(p.ds_numel for p in model.parameters() if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)

        model.register_forward_hook(lambda module, inputs, output: seen.append(held()))
        model.blocks[-1].register_full_backward_pre_hook(
            lambda module, grad_output: first_block_backward.append(held()))
        for step in range(4):
            prepared.forward_backward(synthetic_batch(SHAPE, 1, 16, step, 0, ctx.device))
            prepared.step()
        print(json.dumps({"run": run, "gathered_after_forward": seen, "first_block_backward": first_block_backward}),
              flush=True)
    dist.destroy_process_group()
    os._exit(0)  # DeepSpeed sometimes aborts at exit after the work is done: the lines are written


if __name__ == "__main__":
    main(sys.argv[1:])
