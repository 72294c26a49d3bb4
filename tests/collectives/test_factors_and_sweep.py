"""Bus-bandwidth factors and message-size sweeps, against nccl-tests' own definitions.

The expected factors are written out as numbers from nccl-tests doc/PERFORMANCE.md
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce and
send/recv 1), not recomputed with the module's formula.
"""

from __future__ import annotations

import pytest
import torch

from shardscope.contracts.factors import OPS, algbw_gbps, busbw_factor, busbw_gbps
from shardscope.collectives.sweep import DTYPES, make_buffers, message_sizes

# factor for n = 1, 2, 8 ranks, from doc/PERFORMANCE.md
PERFORMANCE_MD = {
    "all_reduce": {1: 0.0, 2: 1.0, 8: 1.75},
    "all_gather": {1: 0.0, 2: 0.5, 8: 0.875},
    "reduce_scatter": {1: 0.0, 2: 0.5, 8: 0.875},
    "all_to_all": {1: 0.0, 2: 0.5, 8: 0.875},
    "broadcast": {1: 1.0, 2: 1.0, 8: 1.0},
    "reduce": {1: 1.0, 2: 1.0, 8: 1.0},
    "sendrecv": {1: 1.0, 2: 1.0, 8: 1.0},
}

SPLIT_OPS = {"all_gather", "reduce_scatter", "all_to_all"}  # size = total over ranks
CPU = torch.device("cpu")


# --------------------------------------------------------------------------- factors


def test_every_op_has_a_documented_factor() -> None:
    assert set(OPS) == set(PERFORMANCE_MD)


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("op", sorted(PERFORMANCE_MD))
def test_busbw_factor_matches_performance_md(op: str, n: int) -> None:
    assert busbw_factor(op, n) == pytest.approx(PERFORMANCE_MD[op][n], abs=1e-12)


def test_all_reduce_factor_approaches_two_for_many_ranks() -> None:
    assert busbw_factor("all_reduce", 1024) == pytest.approx(2 * 1023 / 1024)
    assert busbw_factor("all_gather", 1024) == pytest.approx(1023 / 1024)


@pytest.mark.parametrize("op", ["allreduce", "all-reduce", "", "alltoall", "gather"])
def test_unknown_op_raises_naming_it(op: str) -> None:
    with pytest.raises(ValueError, match="unknown collective") as info:
        busbw_factor(op, 4)
    assert repr(op) in str(info.value)


@pytest.mark.parametrize("n", [0, -1, -8])
def test_world_size_below_one_raises(n: int) -> None:
    with pytest.raises(ValueError, match="world size"):
        busbw_factor("all_reduce", n)


def test_algbw_is_bytes_per_second_in_units_of_1e9() -> None:
    assert algbw_gbps(1e9, 1.0) == pytest.approx(1.0)
    assert algbw_gbps(4 * 2**20, 1e-3) == pytest.approx(4.194304)
    with pytest.raises(ValueError):
        algbw_gbps(1024, 0.0)
    with pytest.raises(ValueError):
        algbw_gbps(1024, -1e-6)


@pytest.mark.parametrize("op", sorted(PERFORMANCE_MD))
def test_busbw_is_algbw_times_factor(op: str) -> None:
    size, t = 8 * 2**20, 2.5e-4
    assert busbw_gbps(op, 8, size, t) == pytest.approx(size / t / 1e9 * PERFORMANCE_MD[op][8])


# --------------------------------------------------------------------------- message sizes


@pytest.mark.parametrize(
    ("b", "e", "f", "expected"),
    [
        (1024, 65536, 8, [1024, 8192, 65536]),  # max reached exactly: included
        (1024, 60000, 8, [1024, 8192]),  # max not reached: stops below it
        (1024, 1024, 2, [1024]),
        (8, 128, 2, [8, 16, 32, 64, 128]),
        (3, 100, 3, [3, 9, 27, 81]),
        (1024, 4194304, 4, [1024 * 4**k for k in range(7)]),  # the cpu sweep of config.yaml
    ],
)
def test_message_sizes_follow_nccl_tests_b_e_f(b: int, e: int, f: int, expected: list[int]) -> None:
    assert message_sizes(b, e, f) == expected


def test_gpu_sweep_of_config_ends_at_one_gib() -> None:
    sizes = message_sizes(1024, 1073741824, 4)
    assert sizes[0] == 1024 and sizes[-1] == 2**30 and len(sizes) == 11


@pytest.mark.parametrize(
    ("b", "e", "f"),
    [(0, 1024, 2), (-4, 1024, 2), (2048, 1024, 2), (1024, 65536, 1), (1024, 65536, 0), (1024, 65536, -2)],
)
def test_bad_sweeps_raise(b: int, e: int, f: int) -> None:
    with pytest.raises(ValueError, match="bad sweep"):
        message_sizes(b, e, f)


# --------------------------------------------------------------------------- buffers


@pytest.mark.parametrize("ws", [2, 4])
def test_all_gather_receives_the_total_and_sends_one_share(ws: int) -> None:
    buf = make_buffers("all_gather", 4096, ws, torch.float32, CPU)
    assert buf.size_bytes == 4096
    assert buf.recv.numel() * 4 == 4096  # the gathered buffer is the size nccl-tests prints
    assert buf.send.numel() * ws == buf.recv.numel()
    assert buf.count == buf.recv.numel()


@pytest.mark.parametrize("ws", [2, 4])
def test_reduce_scatter_sends_the_total_and_receives_one_share(ws: int) -> None:
    buf = make_buffers("reduce_scatter", 4096, ws, torch.float32, CPU)
    assert buf.size_bytes == 4096
    assert buf.send.numel() * 4 == 4096
    assert buf.recv.numel() * ws == buf.send.numel()


def test_all_to_all_sends_and_receives_the_total_in_separate_buffers() -> None:
    buf = make_buffers("all_to_all", 4096, 4, torch.float32, CPU)
    assert buf.send.numel() == buf.recv.numel() == 1024
    assert buf.send.untyped_storage().data_ptr() != buf.recv.untyped_storage().data_ptr()


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "reduce"])
def test_in_place_ops_use_one_whole_buffer(op: str) -> None:
    buf = make_buffers(op, 4096, 4, torch.float32, CPU)
    assert buf.send is buf.recv
    assert buf.send.numel() == 1024 and buf.size_bytes == 4096


def test_sendrecv_has_distinct_whole_buffers() -> None:
    buf = make_buffers("sendrecv", 4096, 2, torch.float32, CPU)
    assert buf.send.numel() == buf.recv.numel() == 1024
    assert buf.send is not buf.recv


@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
def test_buffers_have_the_requested_dtype_and_element_size(dtype_name: str) -> None:
    dtype = DTYPES[dtype_name]
    elem = torch.tensor([], dtype=dtype).element_size()
    for op in OPS:
        buf = make_buffers(op, 4096, 2, dtype, CPU)
        assert buf.send.dtype == buf.recv.dtype == dtype
        assert buf.size_bytes == 4096 and buf.count == 4096 // elem


def test_sizes_round_down_to_elements_divisible_by_world_size() -> None:
    # 1000 B of float32 on 3 ranks: 83 elements per rank -> 249 elements, 996 B
    buf = make_buffers("all_gather", 1000, 3, torch.float32, CPU)
    assert (buf.count, buf.size_bytes, buf.send.numel()) == (249, 996, 83)
    # a whole-buffer op only rounds to whole elements
    buf = make_buffers("all_reduce", 1001, 3, torch.float32, CPU)
    assert (buf.count, buf.size_bytes) == (250, 1000)


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("op", OPS)
def test_rounding_invariants_over_many_sizes(op: str, ws: int) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        elem = torch.tensor([], dtype=dtype).element_size()
        granule = elem * (ws if op in SPLIT_OPS else 1)
        for requested in [1, 2, 3, 5, 63, 64, 100, 1000, 1023, 1024, 4097, 65535, 65536]:
            buf = make_buffers(op, requested, ws, dtype, CPU)
            assert buf.size_bytes == buf.count * elem
            assert buf.count >= 1
            if op in SPLIT_OPS:
                assert buf.count % ws == 0, (op, ws, requested)
                assert max(buf.send.numel(), buf.recv.numel()) == buf.count
                assert min(buf.send.numel(), buf.recv.numel()) * (ws if op != "all_to_all" else 1) == buf.count
            else:
                assert buf.send.numel() == buf.count
            if requested >= granule:  # rounded down, by less than one granule
                assert requested - granule < buf.size_bytes <= requested, (op, ws, requested)
            else:  # never an empty buffer: one element per rank
                assert buf.size_bytes == granule
