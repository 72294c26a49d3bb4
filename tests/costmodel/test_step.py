"""Step model: communication volumes per strategy, overlap, compute and memory."""

from __future__ import annotations

import pytest
from shardscope.costmodel.step import (
    Message,
    RecordedCollective,
    StepAssumptions,
    messages_for,
    predict_step,
    recorded_messages,
    whole_peak_bytes,
    unit_params,
)
from shardscope.training.model import PRESETS

CFG = PRESETS["llama-1b"]
PSI = CFG.param_count()


def _volume(strategy: str, op: str, a: StepAssumptions | None = None) -> int:
    a = a or StepAssumptions(reduce_bytes=2)  # the paper counts every strategy's gradients in one dtype
    return sum(m.size_bytes * m.count for m in messages_for(strategy, CFG, a) if m.op == op)


def test_units_cover_every_parameter() -> None:
    units = unit_params(CFG)
    assert sum(units) == PSI and len(units) == CFG.n_layers + 1


@pytest.mark.parametrize(("strategy", "all_reduce", "reduce_scatter", "all_gather"), [
    ("ddp", 1, 0, 0), ("zero0", 1, 0, 0), ("zero1", 0, 1, 1), ("zero2", 0, 1, 1),
    ("zero3", 0, 1, 2), ("fsdp", 0, 1, 2), ("fsdp_grad_op", 0, 1, 1), ("zero3_hpz", 0, 1, 2),
    ("hsdp", 0, 1, 2)])
def test_zero_paper_volumes(strategy: str, all_reduce: int, reduce_scatter: int, all_gather: int) -> None:
    """DDP: one all-reduce of Ψ (2Ψ moved); ZeRO-1/2: RS + AG of Ψ; ZeRO-3/FSDP: 2 AG + 1 RS (3Ψ)."""
    e = StepAssumptions().comm_bytes
    assert _volume(strategy, "all_reduce") == all_reduce * PSI * e
    assert _volume(strategy, "reduce_scatter") == reduce_scatter * PSI * e
    assert _volume(strategy, "all_gather") == all_gather * PSI * e


def test_each_framework_reduces_in_its_own_default_dtype_unless_the_run_names_one() -> None:
    """torch DDP all-reduces ``.grad``, fp32 under autocast (the parameters' dtype): twice the bytes of DeepSpeed's and
    FSDP's reductions in the 16-bit training dtype. Frozen 16-bit weights make DDP's block a bf16 one (its trainable
    adapters' gradients in bf16 too); a float32 run reduces 4 bytes everywhere; a named reduce dtype applies to all."""
    from dataclasses import replace

    from shardscope.costmodel.step import gradient_wire_bytes

    bf16 = StepAssumptions()
    assert _volume("ddp", "all_reduce", bf16) == 2 * _volume("ddp", "all_reduce") == PSI * 4
    assert _volume("zero2", "reduce_scatter", bf16) == _volume("zero2", "reduce_scatter") == PSI * 2
    assert _volume("fsdp", "reduce_scatter", bf16) == PSI * 2
    assert gradient_wire_bytes("ddp", replace(bf16, trainable_fraction=0.01)) == 2
    fp32 = StepAssumptions(dtype="float32", comm_bytes=4)
    assert {gradient_wire_bytes(s, fp32) for s in ("ddp", "zero2", "fsdp")} == {4}
    assert {gradient_wire_bytes(s, replace(bf16, reduce_bytes=4)) for s in ("ddp", "zero2", "fsdp")} == {4}


def test_ddp_buckets_and_fsdp_per_layer_messages() -> None:
    ddp = messages_for("ddp", CFG, StepAssumptions())
    assert ddp[0].size_bytes == 25 * 2**20 and all(m.phase == "backward" for m in ddp)
    fsdp = messages_for("fsdp", CFG, StepAssumptions())
    assert {m.phase for m in fsdp if m.op == "all_gather"} == {"forward", "backward"}
    assert {m.phase for m in messages_for("zero2", CFG, StepAssumptions()) if m.op == "all_gather"} == {"after_step"}


def _step(strategy: str, overlap: float, seconds_per_call: float = 0.01, gpus: int = 8, memory: int | None = 80 * 10**9):
    return predict_step(strategy, "llama-1b", CFG, gpus, 1e15, lambda op, size: seconds_per_call, memory,
                        StepAssumptions(overlap=overlap, seq_len=2048))


def test_hpz_gathers_inside_the_island_in_backward_and_holds_its_secondary_partition() -> None:
    """zero3_hpz: ZeRO-3's messages, its backward all-gather inside one island, timed by the island's timer."""
    hpz, zero3 = messages_for("zero3_hpz", CFG, StepAssumptions()), messages_for("zero3", CFG, StepAssumptions())
    assert [(m.op, m.size_bytes, m.phase) for m in hpz] == [(m.op, m.size_bytes, m.phase) for m in zero3]
    assert {(m.op, m.phase) for m in hpz if m.island} == {("all_gather", "backward")}
    a = StepAssumptions(overlap=0.0, seq_len=2048)
    world = predict_step("zero3_hpz", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.01, 80 * 10**9, a, shard_group=2)
    island = predict_step("zero3_hpz", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.01, 80 * 10**9, a,
                          island_time=lambda op, size: 0.001, shard_group=2)
    gathers = sum(m.count for m in hpz if m.island)
    assert world.comm_time_s - island.comm_time_s == pytest.approx(gathers * 0.009)
    plain = predict_step("zero3", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.01, 80 * 10**9, a)
    assert world.comm_time_s == pytest.approx(plain.comm_time_s)  # without an island timer: ZeRO-3's, an upper bound
    secondary = 2 * PSI // 2  # bf16 parameters over the 2 GPUs of an island
    # on the reserved basis the allocator's reserve and cache grow with the secondary partition too
    from shardscope.costmodel.memory_peak import ALLOCATOR_CACHE_FRACTION

    assert world.memory_allocated_bytes - plain.memory_allocated_bytes == secondary
    grown = secondary * (1 + ALLOCATOR_CACHE_FRACTION)  # the GPU has room: its cache grows with what is allocated
    assert world.memory_total_bytes - plain.memory_total_bytes == pytest.approx(grown, rel=1e-6)


def test_hsdp_gathers_again_in_backward_inside_its_shard_group_and_all_reduces_across_groups() -> None:
    """FSDP2 on a 2-D mesh: FSDP's per-unit messages inside the shard group, plus each unit's gradient shard
    (Ψ_unit / shard group, padded up) all-reduced across the replica groups in backward."""
    a = StepAssumptions(reduce_bytes=4)
    units = unit_params(CFG)
    hsdp = messages_for("hsdp", CFG, a, gpus=8, shard_group=2)
    backward_gathers = [m for m in hsdp if m.op == "all_gather" and m.phase == "backward"]
    assert [m.size_bytes for m in backward_gathers] == [p * a.comm_bytes for p in units]
    assert all(m.island for m in hsdp if m.op in ("all_gather", "reduce_scatter"))
    reduces = [m for m in hsdp if m.op == "all_reduce"]
    assert [m.size_bytes for m in reduces] == [-(-p // 2) * 4 for p in units]
    assert all(m.replicas and not m.island and m.phase == "backward" for m in reduces)
    fsdp = messages_for("fsdp", CFG, a)
    assert [(m.op, m.size_bytes, m.phase) for m in hsdp if not m.replicas] == [(m.op, m.size_bytes, m.phase) for m in fsdp]
    # one shard group holding every rank: FSDP's messages, nothing across groups
    assert not [m for m in messages_for("hsdp", CFG, a, gpus=8, shard_group=8) if m.replicas]
    with pytest.raises(ValueError, match="not both"):
        Message("all_reduce", 8, 1, "backward", island=True, replicas=True)


def test_hsdp_times_each_group_of_messages_with_its_own_timer() -> None:
    a = StepAssumptions(overlap=0.0, seq_len=2048)
    step = predict_step("hsdp", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.01, 80 * 10**9, a, shard_group=2,
                        island_time=lambda op, size: 0.001, replica_time=lambda op, size: 0.1)
    inside = sum(m.count for m in step.messages if m.island)
    across = sum(m.count for m in step.messages if m.replicas)
    assert inside == 3 * len(unit_params(CFG)) and across == len(unit_params(CFG))
    assert step.comm_time_s == pytest.approx(inside * 0.001 + across * 0.1)


def test_recorded_hsdp_all_reduce_is_issued_across_the_groups() -> None:
    recorded = [RecordedCollective("all_reduce", 17, 1000), RecordedCollective("all_gather", 34, 4000)]
    out = recorded_messages("hsdp", CFG, StepAssumptions(), recorded, gpus=8, shard_group=2)
    assert {(m.op, m.replicas, m.island) for m in out} == {("all_reduce", True, False), ("all_gather", False, True)}


def test_compute_from_flops_per_token() -> None:
    """A given MFU is used as it is (the default is the curve of achieved_mfu, tested below)."""
    pred = predict_step("ddp", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.01, None,
                        StepAssumptions(overlap=0.5, seq_len=2048, mfu=0.45))
    assert pred.compute_time_s == pytest.approx(CFG.flops_per_token(2048) * 2048 / (1e15 * 0.45))
    assert pred.tokens_per_step == 2048 * 8 and pred.mfu == 0.45


@pytest.mark.parametrize("arch", ["ampere", "hopper"])
def test_compute_curve_passes_through_its_published_run_and_rises_with_the_work(arch: str) -> None:
    """The published run (llm-foundry's MPT-7B at micro-batch 6, bf16 FSDP) is reproduced whole: its matmuls on the
    curve plus its non-matmul traffic at the bandwidth take what its MFU says. More tokens per micro-batch run closer
    to the peak up to the ridge point and no further (the roofline, its loads beside its math from Ampere on); a
    narrower model streams more bytes per FLOP, and autocast (DDP: fp32 residual stream, weight casts) more than a
    model held in bf16."""
    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.hardware import GpuSpec
    from dataclasses import replace

    from shardscope.costmodel.step import MPT_7B, PUBLISHED_EFFICIENCY, achieved_mfu

    p = PUBLISHED_EFFICIENCY[arch]
    # a GPU of the class the table has no bandwidth for streams at the published GPU's ratio: its own, at its peak
    gpu = GpuSpec(family="published run's GPU", arch=arch, pcie_generation=4, memory_bytes=None,
                  reference_name=None, nic_gbps=200.0)
    assert achieved_mfu(MPT_7B, p.tokens, p.seq_len, p.peak_flops, gpu) == pytest.approx(p.mfu)
    mistral = PRESETS["mistral-7b"]
    below_ridge = [achieved_mfu(mistral, t, 16, p.peak_flops, gpu) for t in (16, 64, 256)]
    assert below_ridge == sorted(below_ridge) and below_ridge[0] < 0.5 * below_ridge[-1]
    above_ridge = [achieved_mfu(mistral, t, 512, p.peak_flops, gpu) for t in (2048, 8192, 32768)]
    assert above_ridge == pytest.approx([above_ridge[0]] * 3, rel=1e-3)
    narrow = replace(mistral, d_model=768, n_heads=12, n_kv_heads=12, d_ff=2048)
    assert achieved_mfu(narrow, 4096, 512, p.peak_flops, gpu) < achieved_mfu(mistral, 4096, 512, p.peak_flops, gpu)
    assert achieved_mfu(mistral, 4096, 512, p.peak_flops, gpu, strategy="ddp") < achieved_mfu(mistral, 4096, 512,
                                                                                               p.peak_flops, gpu)


def test_the_roofline_is_bound_by_the_bytes_below_the_ridge_point_and_by_the_math_above_it() -> None:
    """``min(1, I / R)``: a matmul whose intensity is half the ridge point runs at half the peak, one at or above it at
    the whole (its loads beside its math), on a V100 as on an A100; the width moves the ridge point's token count."""
    from shardscope.costmodel.step import matmul_intensity, roofline_share

    ridge = 125e12 / 900e9  # a V100's: 139 FLOP per byte
    # a 4096-wide matmul at 2,048 tokens: 1,024 FLOP per byte
    assert matmul_intensity(2048, 4096) == pytest.approx(1024)
    assert roofline_share(2048, 4096, 125e12, 900e9) == 1.0
    tokens = 70  # a 4096-wide matmul's intensity at 70 tokens: 69 FLOP per byte, half the ridge point
    assert roofline_share(tokens, 4096, 125e12, 900e9) == pytest.approx(matmul_intensity(tokens, 4096) / ridge)
    assert 0.45 < roofline_share(tokens, 4096, 125e12, 900e9) < 0.55
    assert roofline_share(200, 768, 312e12, 2039e9) < roofline_share(200, 4096, 312e12, 2039e9) == 1.0


def test_larger_micro_batch_runs_faster_per_token_on_the_gpus_own_bandwidth() -> None:
    from shardscope.costmodel.hardware import spec_for_name

    h100 = spec_for_name("NVIDIA H100 80GB HBM3")
    per_token = []
    for mb in (1, 2, 8):
        pred = predict_step("fsdp", "llama-1b", CFG, 1, 989.4e12, lambda op, size: 0.0, None,
                            StepAssumptions(micro_batch=mb, seq_len=1024), gpu=h100)
        per_token.append(pred.compute_time_s / pred.tokens_per_step)
    assert per_token == sorted(per_token, reverse=True) and per_token[-1] < 0.9 * per_token[0]


def test_zero1_reduces_once_after_backward_and_zero2_in_every_micro_batch() -> None:
    """DeepSpeed: stage 1 reduces at the accumulation boundary after backward, stage 2 from its hooks in every
    micro-batch, overlapped only with overlap_comm; with accumulation they no longer model alike."""
    a = StepAssumptions(seq_len=2048, grad_accum=4)
    z1 = predict_step("zero1", "llama-1b", CFG, 8, 1e15, lambda op, size: size / 50e9, None, a)
    z2 = predict_step("zero2", "llama-1b", CFG, 8, 1e15, lambda op, size: size / 50e9, None, a)
    rs1 = sum(m.count for m in z1.messages if m.op == "reduce_scatter")
    rs2 = sum(m.count for m in z2.messages if m.op == "reduce_scatter")
    assert rs2 == 4 * rs1 and {m.phase for m in z1.messages if m.op == "reduce_scatter"} == {"after_backward"}
    assert z2.step_time_s > z1.step_time_s
    overlapped = predict_step("zero2", "llama-1b", CFG, 8, 1e15, lambda op, size: size / 50e9, None,
                              StepAssumptions(seq_len=2048, grad_accum=4, overlap_comm=True))
    assert overlapped.exposed_comm_time_s < z2.exposed_comm_time_s


def test_schedule_hides_all_but_the_last_bucket_and_the_first_gather() -> None:
    from shardscope.costmodel.step import pipelined_exposed_s

    assert pipelined_exposed_s(10.0, [], [1.0] * 5) == pytest.approx(1.0)  # DDP: the last bucket
    assert pipelined_exposed_s(10.0, [1.0] * 5, []) == pytest.approx(1.0)  # FSDP forward: the first gather
    assert pipelined_exposed_s(1.0, [], [1.0] * 5) == pytest.approx(5.0 - 1.0 + 0.2)  # longer than the compute
    ddp = predict_step("ddp", "llama-1b", CFG, 8, 1e15, lambda op, size: 1e-4, None, StepAssumptions(seq_len=2048))
    assert ddp.exposed_comm_time_s == pytest.approx(1e-4)


def test_ddp_all_reduces_once_per_accumulated_step() -> None:
    one = predict_step("ddp", "llama-1b", CFG, 8, 1e15, lambda op, size: 1e-3, None, StepAssumptions(seq_len=2048))
    four = predict_step("ddp", "llama-1b", CFG, 8, 1e15, lambda op, size: 1e-3, None,
                        StepAssumptions(seq_len=2048, grad_accum=4))
    assert four.comm_time_s == pytest.approx(one.comm_time_s)
    assert four.compute_time_s == pytest.approx(4 * one.compute_time_s)
    assert four.tokens_per_step == 4 * one.tokens_per_step


def test_overlap_bounds() -> None:
    none = _step("fsdp", 0.0)
    assert none.exposed_comm_time_s == pytest.approx(none.comm_time_s)
    full = _step("ddp", 1.0, seconds_per_call=1e-9)
    assert full.exposed_comm_time_s == pytest.approx(0.0, abs=1e-12)
    after = _step("zero2", 1.0, seconds_per_call=1e-9)
    # the all-gather after the step, and ZeRO-2's reductions on the compute stream (overlap_comm off by default)
    ag_calls = sum(m.count for m in after.messages if m.phase in ("after_step", "after_backward"))
    assert after.exposed_comm_time_s == pytest.approx(ag_calls * 1e-9)
    long = _step("ddp", 1.0, seconds_per_call=10.0)
    assert long.exposed_comm_time_s == pytest.approx(long.comm_time_s - 2 * long.compute_time_s / 3)
    assert long.step_time_s == pytest.approx(long.compute_time_s + long.exposed_comm_time_s)


def test_one_gpu_has_no_communication() -> None:
    pred = _step("fsdp", 0.5, gpus=1)
    assert pred.comm_time_s == 0 and pred.step_time_s == pred.compute_time_s


def test_memory_fit() -> None:
    mistral = PRESETS["mistral-7b"]
    ddp = predict_step("ddp", "mistral-7b", mistral, 8, 1e15, lambda op, size: 0.0, 80 * 10**9)
    # the whole peak (issue 18): the ZeRO paper's 16 bytes per parameter plus activations and buffers
    assert ddp.fits is False and ddp.memory_total_bytes > 16 * mistral.param_count()
    assert ddp.memory_total_bytes == whole_peak_bytes("ddp", mistral, 8, StepAssumptions())
    # all of the GPU's memory: the peak counts the allocator's reserve, CUDA context and NCCL buffers itself
    assert ddp.memory_available_bytes == int(80e9)
    zero3 = predict_step("zero3", "mistral-7b", mistral, 8, 1e15, lambda op, size: 0.0, 80 * 10**9)
    assert zero3.fits is True
    assert predict_step("ddp", "x", CFG, 8, 1e15, lambda op, size: 0.0, None).fits is None
    assert ddp.to_row()["method"] == "modeled" and "messages" not in ddp.to_row()


def test_recorded_python_calls_cost_their_host_seconds_behind_nothing() -> None:
    a = StepAssumptions(micro_batch=1, seq_len=2048, host_call_s=2e-6, call_overhead_s=1e-4)
    base = predict_step("zero3", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.001, None, a)
    hooked = predict_step("zero3", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.001, None, a, host_calls=40_000)
    calls = sum(m.count for m in base.messages)
    assert base.host_time_s == pytest.approx(calls * 1e-4)  # no recorded count: the per-collective-call term alone
    assert hooked.step_time_s - base.step_time_s == pytest.approx(40_000 * 2e-6)
    assert hooked.host_time_s == pytest.approx(calls * 1e-4 + 0.08)
    assert hooked.step_time_s == pytest.approx(hooked.compute_time_s + hooked.exposed_comm_time_s)  # the rows' invariant
    assert "host_time_s" not in hooked.to_row()
    with pytest.raises(ValueError, match="host_calls"):
        predict_step("zero3", "llama-1b", CFG, 8, 1e15, lambda op, size: 0.001, None, a, host_calls=-1)


@pytest.mark.parametrize("bad", [{"mfu": 0}, {"mfu": 1.5}, {"overlap": -0.1}, {"micro_batch": 0}, {"seq_len": 0},
                                 {"usable_fraction": 0}, {"dtype": "int8"}, {"comm_bytes": True}, {"host_call_s": -1e-6},
                                 {"host_call_s": 0.01}])
def test_assumptions_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        StepAssumptions(**bad)


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError):
        messages_for("zero4", CFG, StepAssumptions())


@pytest.mark.parametrize("strategy", ["ddp", "zero0", "zero1", "zero3", "fsdp", "fsdp_grad_op"])
def test_gradients_travel_in_the_reduce_dtype_and_parameters_in_the_compute_dtype(strategy: str) -> None:
    """A bf16 run reducing in fp32 (the harness's reduce_dtype float32): 4 bytes per gradient, 2 per gathered parameter."""
    a = StepAssumptions(comm_bytes=2, reduce_bytes=4)
    volume = {op: sum(m.size_bytes * m.count for m in messages_for(strategy, CFG, a) if m.op == op)
              for op in ("all_reduce", "reduce_scatter", "all_gather")}
    grads_op = "all_reduce" if strategy in ("ddp", "zero0") else "reduce_scatter"
    assert volume[grads_op] == PSI * 4
    gathers = {"ddp": 0, "zero0": 0, "zero1": 1, "zero3": 2, "fsdp": 2, "fsdp_grad_op": 1}[strategy]
    assert volume["all_gather"] == gathers * PSI * 2
    assert StepAssumptions(comm_bytes=2).gradient_bytes == 2  # no reduce dtype given: the wire dtype


def test_recorded_bytes_replace_the_modeled_volumes_in_the_strategys_phases() -> None:
    """DeepSpeed ZeRO-2 all-reduces its gradients (2Ψ, not the paper's reduce-scatter): the recorded bytes are timed as they ran."""
    from shardscope.costmodel.step import RecordedCollective, recorded_messages

    a = StepAssumptions()
    recorded = [RecordedCollective("all_reduce", 4, PSI * 2), RecordedCollective("all_gather", 2, PSI * 2)]
    messages = recorded_messages("zero2", CFG, a, recorded)
    by_op = {m.op: m for m in messages}
    # DeepSpeed's default overlap_comm is off for stage 2: its hooks reduce on the compute stream (after_backward)
    assert by_op["all_reduce"].phase == "after_backward" and by_op["all_gather"].phase == "after_step"
    assert {(m.op, m.count, m.size_bytes) for m in messages} == {("all_reduce", 4, PSI // 2), ("all_gather", 2, PSI)}
    # ZeRO-3: the recorded all-gathers split between forward and backward as the schedule issues them
    z3 = recorded_messages("zero3", CFG, a, [RecordedCollective("all_gather", 2 * (CFG.n_layers + 1), 4 * PSI)])
    assert {m.phase for m in z3} == {"forward", "backward"}
    assert sum(m.size_bytes * m.count for m in z3) == pytest.approx(4 * PSI, rel=1e-6)

    def timer(op: str, size: int) -> float:  # an all-reduce moves twice its size
        return 1e-5 + (2 if op == "all_reduce" else 1) * size / 10e9

    plain = predict_step("zero2", "llama-1b", CFG, 8, 1e15, timer, None, a)
    measured = predict_step("zero2", "llama-1b", CFG, 8, 1e15, timer, None, a, recorded=recorded)
    assert measured.comm_time_s > 1.4 * plain.comm_time_s  # an all-reduce of Ψ gradients (2Ψ moved) for a reduce-scatter (Ψ)
    assert measured.messages == tuple(messages)


def test_plan_predictions_reduce_in_the_plans_reduce_dtype() -> None:
    from shardscope.costmodel.documents import _plan_assumptions

    profile = {"micro_batch": 1, "seq_len": 128, "dtype": "bfloat16"}
    assert _plan_assumptions(profile, [{"reduce_dtype": "float32"}]).reduce_bytes == 4
    assert _plan_assumptions(profile, [{"reduce_dtype": "auto"}]).reduce_bytes == 2
    assert _plan_assumptions({**profile, "dtype": "float32"}, []).gradient_bytes == 4


def test_framework_host_work_by_default_on_a_gpu_costs_what_the_gpu_does_not_hide() -> None:
    """Issue 31: without a calibration, each strategy's counted Python calls at 1 us each run beside the GPU's work;
    ZeRO-3's per-submodule hooks make it host-bound on a small model, DDP's few calls hide."""
    from shardscope.costmodel.hardware import spec_for_name
    from shardscope.costmodel.step import DEFAULT_HOST_CALL_S, modeled_host_calls

    h100, small = spec_for_name("NVIDIA H100 80GB HBM3"), PRESETS["gpt2-small"]
    a = StepAssumptions(seq_len=1024)
    step = {s: predict_step(s, "gpt2-small", small, 8, 989.4e12, lambda op, size: 1e-5, None, a, gpu=h100)
            for s in ("ddp", "fsdp", "zero3")}
    assert step["ddp"].host_time_s == 0.0  # hidden behind the GPU's work
    assert step["zero3"].step_time_s == pytest.approx(modeled_host_calls("zero3", small) * DEFAULT_HOST_CALL_S)
    assert step["zero3"].step_time_s > step["fsdp"].step_time_s > step["ddp"].step_time_s
    assert all(p.step_time_s == pytest.approx(p.compute_time_s + p.exposed_comm_time_s) for p in step.values())
    # a calibrated seconds-per-call replaces the default and adds to the step, as it was fitted
    calibrated = predict_step("ddp", "gpt2-small", small, 8, 989.4e12, lambda op, size: 1e-5, None,
                              StepAssumptions(seq_len=1024, host_call_s=5e-6), gpu=h100)
    assert calibrated.host_time_s == pytest.approx(modeled_host_calls("ddp", small) * 5e-6)


def test_checkpointing_adds_the_host_work_of_its_hooks_and_of_zero3_fetching_again() -> None:
    """Full checkpointing sends every saved tensor through Python hooks and, under ZeRO-3, fires each submodule's
    fetch and release hooks again in the recompute: on a small model, where ZeRO-3 is host-bound, its step grows by
    the counted calls; DDP's stay hidden behind the GPU."""
    from shardscope.costmodel.hardware import spec_for_name
    from shardscope.costmodel.step import DEFAULT_HOST_CALL_S, modeled_host_calls

    h100, small = spec_for_name("NVIDIA H100 80GB HBM3"), PRESETS["gpt2-small"]
    calls = {mode: modeled_host_calls("zero3", small, mode) for mode in ("none", "full")}
    assert calls["full"] > 1.45 * calls["none"]
    assert modeled_host_calls("ddp", small, "full") - modeled_host_calls("ddp", small, "none") == 12 * 1363
    steps = {mode: predict_step("zero3", "gpt2-small", small, 8, 989.4e12, lambda op, size: 1e-5, None,
                                StepAssumptions(seq_len=1024, checkpointing=mode), gpu=h100)
             for mode in ("none", "full")}
    assert steps["full"].step_time_s == pytest.approx(calls["full"] * DEFAULT_HOST_CALL_S)
    assert steps["full"].step_time_s > 1.45 * steps["none"].step_time_s


def test_a_float32_step_runs_on_the_cuda_cores_not_the_16_bit_tensor_peak() -> None:
    """TITAN RTX: 16.3 fp32 TFLOP/s beside 130.5 fp16 tensor ones. A float32 run's matmuls are priced at the fp32
    rate (its MFU is of that peak), a bfloat16 one at the tensor peak; a CPU keeps its own measured peak."""
    from dataclasses import replace

    from shardscope.contracts.peak_flops import float32_peak_flops
    from shardscope.costmodel.hardware import spec_for_name
    from shardscope.costmodel.elementwise import elementwise_bytes
    from shardscope.costmodel.optimizer_step import STREAM_SHARE
    from shardscope.costmodel.step import attention_share, compute_mfu, dtype_peak_flops, fused_attention_flops

    titan = spec_for_name("NVIDIA TITAN RTX")
    assert dtype_peak_flops(130.5e12, "float32", titan) == 16.3e12
    assert dtype_peak_flops(130.5e12, "bfloat16", titan) == 130.5e12
    assert dtype_peak_flops(1e12, "float32", None) == 1e12
    steps = {}
    for dtype in ("float32", "bfloat16"):
        a = StepAssumptions(micro_batch=8, seq_len=512, dtype=dtype)
        pred = predict_step("ddp", "llama-1b", CFG, 1, 130.5e12, lambda op, size: 0.0, None, a, gpu=titan)
        compute = pred.compute_time_s - pred.optimizer_time_s
        peak = dtype_peak_flops(130.5e12, dtype, titan)
        rate = peak * compute_mfu(CFG, a, peak, titan)
        matmuls = (CFG.flops_per_token(512) * 8 * 512
                   + fused_attention_flops(CFG, "none", 512, 8 * 512) * (1 / attention_share(titan.arch) - 1)) / rate
        traffic = elementwise_bytes(CFG, 8 * 512, "fp32" if dtype == "float32" else "autocast")
        assert compute == pytest.approx(matmuls + traffic / (titan.memory_bandwidth_gbps * 1e9 * STREAM_SHARE))
        steps[dtype] = compute
    # 8x apart in peak, but the bytes the other ops stream cost the same seconds or more (fp32 elements are 4 bytes)
    assert 3 * steps["bfloat16"] < steps["float32"] < 8 * steps["bfloat16"]
    # a GPU the fp32 table lacks takes its architecture's share of the 16-bit peak it was given
    unknown = replace(titan, reference_name=None, arch="ampere")
    assert dtype_peak_flops(100e12, "float32", unknown) == float32_peak_flops(None, 100e12, "ampere") == 6.25e12


def test_ddp_all_reduces_the_input_embedding_last_in_a_bucket_of_its_own_that_nothing_hides() -> None:
    """The Reducer buckets parameters in reverse order, so the embedding (the first parameter) is reduced last, once
    backward reaches the lookup; its all-reduce is exposed whole, the equal buckets before it hide behind backward."""
    from dataclasses import replace

    a = StepAssumptions(micro_batch=4, seq_len=1024)
    messages = messages_for("ddp", CFG, a)
    embedding = CFG.vocab_size * CFG.d_model * 4  # DDP's fp32 .grad under autocast
    assert messages[-1].size_bytes == embedding and messages[-1].count == 1
    assert sum(m.size_bytes * m.count for m in messages) == PSI * 4
    assert all(m.size_bytes <= a.ddp_bucket_bytes for m in messages[:-1])
    long_compute = replace(a, overlap=None, mfu=0.01)  # the schedule's overlap, a backward longer than every bucket
    step = predict_step("ddp", "llama-1b", CFG, 2, 1e15, lambda op, size: size / 10e9, None, long_compute)
    assert step.exposed_comm_time_s == pytest.approx(embedding / 10e9, rel=0.05)
    frozen = messages_for("ddp", CFG, StepAssumptions(trainable_fraction=0.01))
    assert all(m.size_bytes <= a.ddp_bucket_bytes for m in frozen)



def test_advise_says_which_peak_a_float32_ranking_is_priced_at() -> None:
    from shardscope.costmodel.advise import advise
    from shardscope.costmodel.presets import preset

    doc = preset("hgx-h100")
    notes = advise(doc, "llama-1b", 8, assumptions=StepAssumptions(dtype="float32")).notes
    assert any("fp32 CUDA-core peak, 67 TFLOP/s" in n for n in notes)
    assert not any("fp32 CUDA-core" in n for n in advise(doc, "llama-1b", 8).notes)


def test_checkpointing_costs_what_it_computes_again_between_none_and_full() -> None:
    """Compute time per checkpointing mode: full recomputes each block but its last matmul (torch's early stop);
    torchtitan's selective modes less (every second block, or the unkept matmuls and no attention), so each lies
    between none and full; the recomputed FLOPs are counted op by op in tests/training/test_memory_peak.py."""
    from shardscope.costmodel.hardware import spec_for_name
    from shardscope.costmodel.memory_peak import recompute_shares
    from shardscope.costmodel.step import work_factor

    h100 = spec_for_name("NVIDIA H100 80GB HBM3")
    seconds = {}
    for mode in ("none", "selective_op", "selective_layer", "full"):
        pred = predict_step("fsdp", "llama-1b", CFG, 1, 989.4e12, lambda op, size: 0.0, None,
                            StepAssumptions(micro_batch=2, seq_len=2048, checkpointing=mode), gpu=h100)
        seconds[mode] = pred.compute_time_s
    assert seconds["none"] < seconds["selective_op"] < seconds["full"]
    assert seconds["none"] < seconds["selective_layer"] < seconds["full"]
    full, _ = recompute_shares(CFG, "full", 2048)
    assert 0.5 < full < 0.9  # the head and each block's down projection are not computed again
    with pytest.raises(ValueError, match="depends on the model"):
        work_factor(StepAssumptions(checkpointing="selective_op"))
