"""Run by ``test_zero_step_moments.py`` in a process of its own: DeepSpeed ZeRO-1/2/3 on one gloo rank (CPU), its
optimizer step under the tensor tracker, one JSON line per (strategy, dtype, shape).

DeepSpeed's reduce and all-gather buckets are cut to 100,000 elements and the inner optimizer is replaced by plain SGD
(no temporaries of its own), so what the tracker sees in the step is DeepSpeed's own step: its gradient norm and its
flattening (``stage_1_and_2.py``, ``stage3.py``), the moments :func:`shardscope.costmodel.memory_peak.zero_step_moments`
models. ``PROBE_SUB_GROUP`` in the environment sets ZeRO-3's ``sub_group_size``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import shardscope.training.strategies as strategies
from shardscope.contracts.models import ModelConfig
from shardscope.device import DistContext
from shardscope.training.memtrack import tracked_step
from shardscope.training.model import synthetic_batch

SHAPES = {
    # the embedding is most of the model, but its 8 B float64 copy is less than 6 B per parameter
    "embedding": ModelConfig(n_layers=2, d_model=64, n_heads=4, n_kv_heads=4, d_ff=128, vocab_size=60000, max_seq_len=64),
    # the embedding is nearly all of it: the norm's float64 copy is the step's moment in 16 bits
    "embedding-only": ModelConfig(n_layers=1, d_model=32, n_heads=4, n_kv_heads=4, d_ff=64, vocab_size=200000,
                                  max_seq_len=64, tie_embeddings=True),
    "blocks": ModelConfig(n_layers=6, d_model=256, n_heads=4, n_kv_heads=4, d_ff=1024, vocab_size=512, max_seq_len=64),
}
SMALL_BUCKET = 100_000


def small_buckets(config_of):
    def config(*args, **kwargs):
        out = config_of(*args, **kwargs)
        out["zero_optimization"].update(reduce_bucket_size=SMALL_BUCKET, allgather_bucket_size=SMALL_BUCKET)
        if os.environ.get("PROBE_SUB_GROUP"):
            out["zero_optimization"]["sub_group_size"] = int(os.environ["PROBE_SUB_GROUP"])
        return out
    return config


def main(runs: list[str]) -> None:
    import tempfile

    # DeepSpeed's rank variables for this process only: the test imports SHAPES from here and must not inherit them
    os.environ.update(DS_ACCELERATOR="cpu", LOCAL_RANK="0", RANK="0", WORLD_SIZE="1")

    rendezvous = Path(tempfile.mkdtemp()) / "pg"  # a file, not a port: nothing to collide with tests beside it
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    strategies.deepspeed_config = small_buckets(strategies.deepspeed_config)
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    for run in runs:
        strategy, dtype = run.split(":")
        for name, cfg in SHAPES.items():
            prepared = strategies.prepare(strategy, cfg, ctx, getattr(torch, dtype), 1)
            prepared.forward_backward(synthetic_batch(cfg, 1, 16, 0, 0, ctx.device))
            prepared.step()  # warm: the fp32 partition's optimizer exists
            inner = prepared.optimizer.optimizer
            prepared.optimizer.optimizer = torch.optim.SGD([{"params": g["params"]} for g in inner.param_groups],
                                                           lr=1e-4, foreach=False)
            tracked, _ = tracked_step(prepared, synthetic_batch(cfg, 1, 16, 1, 0, ctx.device))
            print(json.dumps({"strategy": strategy, "dtype": dtype, "shape": name, "tracked": tracked.to_dict()}),
                  flush=True)
    dist.destroy_process_group()
    os._exit(0)  # DeepSpeed sometimes aborts at exit after the work is done: the lines are written


if __name__ == "__main__":
    main(sys.argv[1:])
