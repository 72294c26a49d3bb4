"""The optimizer step's temporaries per AdamW implementation, tracked on a real model against the GPU memory model.

torch runs the same per-tensor loop, multi-tensor chain and fused kernel on CPU as on a GPU (only the default differs),
so the tensor tracker measures here what :func:`shardscope.costmodel.memory_peak.step_temporaries` models for a GPU:
the for-loop keeps two temporaries of the tensor it is stepping beside the previous tensor's denominator (so
three where two MLP weights of the largest size follow each other), foreach one per parameter, fused none. Two shapes no other test uses: one whose largest tensor is the embedding, one whose largest is an MLP
weight.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from shardscope.contracts.models import ModelConfig  # noqa: E402
from shardscope.costmodel.memory_peak import step_temporaries  # noqa: E402
from shardscope.training.kernel_traffic import TORCH_ADAMW_KWARGS  # noqa: E402
from shardscope.training.memtrack import TensorMemoryTracker  # noqa: E402
from shardscope.training.model import GPT  # noqa: E402

SHAPES = {
    "embedding largest": ModelConfig(n_layers=2, d_model=96, n_heads=4, n_kv_heads=4, d_ff=256, vocab_size=3001),
    "mlp largest": ModelConfig(n_layers=3, d_model=80, n_heads=5, n_kv_heads=5, d_ff=1200, vocab_size=700),
}


def _tracked_step_bytes(cfg: ModelConfig, implementation: str) -> int:
    """Bytes alive beyond parameters, gradients and optimizer state at the peak of the second AdamW step (the first
    allocates the moments)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, **TORCH_ADAMW_KWARGS[implementation])
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()
    held = [t.untyped_storage() for p in params
            for t in (p, p.grad, *(v for v in optimizer.state[p].values() if torch.is_tensor(v)))]
    tracker = TensorMemoryTracker()
    with tracker:
        tracker.set_state(held)
        tracker.phase("step")
        optimizer.step()
    return tracker.result().transient_peak_bytes


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("implementation", ["for-loop", "foreach", "fused"])
def test_each_adamw_keeps_the_temporaries_the_gpu_model_gives_it(shape: str, implementation: str) -> None:
    cfg = SHAPES[shape]
    modeled = step_temporaries("ddp", cfg, 1, "fp32", "gpu", adamw=implementation)
    # the for-loop's tensor before the embedding may be a norm: its denominator (h elements) beside the two
    assert 0 <= _tracked_step_bytes(cfg, implementation) - modeled <= 4 * cfg.d_model
    if implementation == "for-loop":  # a few of the largest tensor, however many others there are
        assert modeled == 4 * max(2 * cfg.vocab_size * cfg.d_model, 3 * cfg.d_model * cfg.d_ff)
        # torch has no foreach default on CPU: the CPU model's step is this loop's
        assert step_temporaries("ddp", cfg, 1, "fp32", "cpu") == modeled
        assert modeled < step_temporaries("ddp", cfg, 1, "fp32", "gpu", adamw="foreach")
