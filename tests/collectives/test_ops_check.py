"""The data check behind ``--check`` and the report's ``#wrong`` column, in this process (gloo, 1 rank).

With one rank every collective is a copy or a sum of one input, so the expected values are
known; a collective that does not run at all must be counted wrong, element by element.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from shardscope.collectives import ops
from shardscope.contracts.names import OPS
from shardscope.collectives.sweep import make_buffers

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", [op for op in OPS if op != "sendrecv"])  # gloo cannot send to itself
def test_a_correct_collective_has_no_wrong_elements(one_rank: None, op: str, dtype: torch.dtype) -> None:
    buffers = make_buffers(op, 4096, 1, dtype, CPU)
    assert ops.count_wrong(op, buffers, 0, 1) == 0
    assert ops.check_result(op, buffers, 0, 1) is True


@pytest.mark.parametrize("op", ["all_gather", "all_to_all", "sendrecv"])
def test_a_collective_that_did_nothing_is_counted_wrong(one_rank: None, op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # These ops write a separate receive buffer: if the call does nothing, every element stays -1.
    monkeypatch.setattr(ops, "op_call", lambda *args: (lambda: None))
    buffers = make_buffers(op, 4096, 1, torch.float32, CPU)
    assert ops.count_wrong(op, buffers, 0, 1) == buffers.recv.numel() == 1024
    assert ops.check_result(op, buffers, 0, 1) is False


def test_a_partly_wrong_reduction_counts_only_the_wrong_elements(one_rank: None, monkeypatch: pytest.MonkeyPatch) -> None:
    buffers = make_buffers("all_reduce", 4096, 2, torch.float32, CPU)

    def half_reduced() -> None:  # as if a peer's contribution reached only the first 100 elements
        buffers.send[:100] += 2

    monkeypatch.setattr(ops, "op_call", lambda *args: half_reduced)
    # rank 0 of 2 ranks: expects 1 + 2 = 3 everywhere, has 3 in 100 elements and 1 in the other 924
    assert ops.count_wrong("all_reduce", buffers, 0, 2) == 924


def test_op_call_of_unknown_op_raises(one_rank: None) -> None:
    buffers = make_buffers("all_reduce", 64, 1, torch.float32, CPU)
    with pytest.raises(ValueError, match="unknown collective"):
        ops.op_call("gather", buffers, 0, 1)
