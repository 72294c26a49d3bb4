"""GPU specs, link constants and the cut capacities of every real topology output."""

from __future__ import annotations

import math

import pytest
from costmodel.published import TOPO_FILES, fixture_machine, topology
from shardscope.costmodel.hardware import (
    DRIVER_RESERVED_FRACTION,
    GpuSpec,
    cpu_inter_socket,
    infer_spec,
    pcie_effective_gbps,
    spec_for_name,
)
from shardscope.costmodel.machine import HOST_STAGED_POOL_LINKS, build_machine, nvl_groups, socket_groups
from shardscope.costmodel.presets import PRESETS, preset, synthetic_topology
from shardscope.errors import UserError


@pytest.mark.parametrize(("name", "arch", "memory_gb"), [
    ("NVIDIA H100 80GB HBM3", "hopper", 80), ("NVIDIA H200", "hopper", 141), ("NVIDIA H100 NVL", "hopper", 94),
    ("NVIDIA A100-SXM4-40GB", "ampere", 40), ("NVIDIA A100 80GB PCIe", "ampere", 80), ("Tesla V100-SXM2-16GB", "volta", 16),
    ("NVIDIA RTX A6000", "ga10x", 48), ("NVIDIA L40S", "ada", 48), ("NVIDIA B300", "blackwell", 288),
    ("AMD Instinct MI300X", "cdna", 192), ("AMD Instinct MI250X", "cdna", 64), ("AMD Instinct MI250", "cdna", 64)])
def test_spec_for_name(name: str, arch: str, memory_gb: int) -> None:
    spec = spec_for_name(name)
    # datasheet GB are binary, less what CUDA keeps
    assert spec is not None and spec.arch == arch
    assert spec.memory_bytes == int(memory_gb * 2**30 * (1 - DRIVER_RESERVED_FRACTION))


def test_an_mi250x_is_counted_per_gcd_as_rocm_enumerates_it() -> None:
    """One OAM is two GPUs to ROCm and torch: each holds half its 128 GB, 383 TFLOP/s and 3.2 TB/s."""
    from shardscope.contracts.peak_flops import float32_peak_flops, peak_flops
    from shardscope.costmodel.hardware import MEMORY_BANDWIDTH_GBPS

    assert peak_flops("AMD Instinct MI250X") == 383e12 / 2 and peak_flops("AMD Instinct MI250") == 362.1e12 / 2
    assert float32_peak_flops("AMD Instinct MI250X", 191.5e12, "cdna") == 47.9e12 / 2
    assert MEMORY_BANDWIDTH_GBPS["MI250X"] == MEMORY_BANDWIDTH_GBPS["MI210"] == 1638.0  # an MI210 is one such GCD


def test_unknown_name_has_no_spec() -> None:
    assert spec_for_name("Some Accelerator 3000") is None
    assert spec_for_name(None) is None


def test_effective_link_rates_are_nccls() -> None:
    assert spec_for_name("H100").nvlink_gbps == 20.6 and spec_for_name("H100").nvlink_raw_gbps == 25.0
    assert spec_for_name("A100").nvlink_gbps == 20.0
    assert spec_for_name("RTX A6000").nvlink_gbps == 12.0
    assert [pcie_effective_gbps(g) for g in (3, 4, 5)] == [12.0, 24.0, 48.0]
    assert pcie_effective_gbps(4, 8) == 12.0


def test_nvls_only_from_hopper_on() -> None:
    assert spec_for_name("H100").nvls_efficiency == 0.85
    assert spec_for_name("B200").nvls_efficiency == 0.74
    assert spec_for_name("A100").nvls_efficiency == 0.0


def test_spec_validation() -> None:
    with pytest.raises(ValueError):
        GpuSpec("x", "quantum", 4, None, None, 100.0)
    with pytest.raises(ValueError):
        GpuSpec("x", "hopper", 9, None, None, 100.0)


@pytest.mark.parametrize(("file", "family"), [
    ("01-hgx-h200-nvswitch-nv18-12nics.txt", "Hopper"), ("05-dgx-a100-nv12-mlx5-columns-old-format.txt", "A100"),
    ("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt", "V100"), ("11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt", "GA102"),
    ("13-8x-pcie-pix-pxb-sys-numa-na.txt", "PCIe"), ("22-amd-rocm-smi-showtopo-4x-mi300a.txt", "AMD")])
def test_signature_inference_of_unnamed_gpus(file: str, family: str) -> None:
    spec = infer_spec(topology(f"topo/{file}"))
    assert family in spec.family
    assert spec.note and "not named" in spec.note


@pytest.mark.parametrize(("model", "gbps", "intel"), [
    ("Intel(R) Xeon(R) Platinum 8480C", 22.0, True), ("Intel(R) Xeon(R) Platinum 8358", 10.0, True),
    ("Intel(R) Xeon(R) CPU E5-2679 v4", 6.0, True), ("AMD EPYC 7543 32-Core Processor", 24.0, False),
    ("AMD EPYC 7V12 64-Core Processor", 16.0, False), ("AMD EPYC 9755", 32.0, False)])
def test_inter_socket_from_cpu_model(model: str, gbps: float, intel: bool) -> None:
    assert cpu_inter_socket({"model": model}, 4)[:2] == (gbps, intel)


def test_inter_socket_assumed_by_pcie_generation() -> None:
    assert cpu_inter_socket({}, 3)[0] == 10.0 and cpu_inter_socket({}, 5)[0] == 22.0
    assert "assumed" in cpu_inter_socket({}, 4)[2]


@pytest.mark.parametrize("file", TOPO_FILES)
def test_every_real_topology_builds(file: str) -> None:
    machine = fixture_machine(file)
    doc = topology(f"topo/{file}")
    assert machine.fabric == doc["fabric"]
    assert machine.gpu_count == doc["gpu_count"]
    for g in machine.gpus:
        assert machine.pcie_gbps[g] > 0
    if machine.gpu_count >= 2:
        ring, link = machine.ring_gbps(machine.gpus)
        assert math.isfinite(ring) and ring > 0 and link in ("nvlink", "pcie")


def test_nvswitch_cut_is_the_smaller_side() -> None:
    machine = fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt", gpu="H100")
    assert machine.cut_gbps([0], [1, 2, 3])[0] == pytest.approx(18 * 20.6)
    assert machine.cut_gbps([0, 1, 2, 3], [4, 5, 6, 7])[0] == pytest.approx(4 * 18 * 20.6)
    assert machine.ring_gbps(range(8))[0] == pytest.approx(370.8)


def test_pcie_cuts_and_sockets() -> None:
    machine = fixture_machine("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt", gpu="H100 NVL")
    assert machine.ring_gbps([0, 1]) == (pytest.approx(12 * 20.6), "nvlink")
    node, link = machine.cut_gbps([0], [2])
    assert link == "pcie" and node == pytest.approx(48 * 5 / 6)  # Gen5 through an Intel root complex (assumed CPU)
    assert machine.cut_gbps([0], [4])[0] == pytest.approx(22.0)  # SYS: the sockets' link
    assert machine.cut_gbps([0], [2], use_nvlink=False)[1] == "pcie"
    assert socket_groups(machine) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_nvl_groups() -> None:
    assert nvl_groups(fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt")) == [list(range(8))]
    assert nvl_groups(fixture_machine("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    dgx1 = nvl_groups(fixture_machine("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt"))
    assert dgx1[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert nvl_groups(fixture_machine("13-8x-pcie-pix-pxb-sys-numa-na.txt")) == []


def test_overrides_and_notes() -> None:
    machine = fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt", gpu="NVIDIA H200", memory_bytes=10**11, nic_gbps=200.0)
    assert machine.memory_bytes == 10**11 and machine.nic_gbps == 200.0 and machine.spec.family == "H200"
    assert machine.rail_nics == 8
    assert any("PCIe generation" in n for n in machine.notes)
    unknown = fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt", gpu="Quantum 9000")  # a note, not an error
    assert unknown.spec.family == "Quantum 9000" and any("--peak-tflops" in n for n in unknown.notes)


def test_bad_documents_are_user_errors() -> None:
    with pytest.raises(UserError):
        build_machine({"gpus": "none"})
    with pytest.raises(UserError):
        build_machine({"gpus": [{"name": "H100"}]})


def test_cpu_only_topology() -> None:
    machine = build_machine({"gpus": [], "links": [], "fabric": "cpu"})
    assert machine.fabric == "cpu" and machine.gpu_count == 0


def test_presets_classify_like_the_topology_stage() -> None:
    fabrics = {name: build_machine(preset(name)).fabric for name in PRESETS}
    assert fabrics["hgx-h100"] == "nvswitch" and fabrics["hgx-h800"] == "nvswitch"
    assert fabrics["h100-nvl-pairs"] == "nvlink_islands" and fabrics["pcie-l40s"] == "pcie"
    with pytest.raises(UserError, match="preset"):
        preset("dgx-9000")
    with pytest.raises(ValueError):
        synthetic_topology("H100", layout="torus")


def test_pcie_path_of_nvlinked_pairs_comes_from_numa() -> None:
    machine = fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt", gpu="H100")
    assert machine.code(0, 3) == "NODE" and machine.code(0, 4) == "SYS"
    inside, _ = machine.ring_gbps([0, 1, 2, 3], use_nvlink=False)
    across, _ = machine.ring_gbps([0, 1, 4, 5], use_nvlink=False)
    assert inside > across == pytest.approx(22.0)


def test_without_p2p_gpus_behind_one_switch_share_its_uplink() -> None:
    # NCCL_P2P_DISABLE=1 (or no peer access): host-staged traffic climbs to the root complex and back, so the
    # k ring members behind one root port send k flows up and k down through it, which the host serves from one
    # pool as wide as the link's raw data rate (pool / 2k), while P2P would stay in the switch.
    machine = fixture_machine("13-8x-pcie-pix-pxb-sys-numa-na.txt", gpu="NVIDIA L40S")
    pool = HOST_STAGED_POOL_LINKS * 24.0
    assert pool == pytest.approx(31.5, rel=1e-3)  # x16 Gen4: 16 GT/s x 16 lanes x 128/130 / 8
    assert machine.ring_gbps([0, 1], use_nvlink=False) == (24.0, "pcie")  # PIX: P2P inside the switch
    assert machine.ring_gbps([0, 1], use_nvlink=False, p2p=False) == (pytest.approx(pool / 4), "pcie")
    assert machine.ring_gbps([0, 1, 2, 3], use_nvlink=False, p2p=False) == (pytest.approx(pool / 8), "pcie")
    own_ports = machine.ring_gbps([0, 4], use_nvlink=False, p2p=False)  # one flow each way per port: link / 2
    assert own_ports == (min(pool / 2, machine.ring_gbps([0, 4], use_nvlink=False)[0]), "pcie")
    from shardscope.costmodel.collectives import Job, peak_busbw_gbps

    assert peak_busbw_gbps("all_reduce", Job(machine, (0, 1), nvlink=False)) == pytest.approx(pool / 4)


@pytest.mark.parametrize(("gpu", "peer"), [("NVIDIA GeForce RTX 4090", False), ("NVIDIA GeForce RTX 3090", False),
                                          ("NVIDIA GeForce RTX 2080 Ti", False), ("NVIDIA RTX A6000", True),
                                          ("NVIDIA L40S", True)])
def test_geforce_boards_have_no_pcie_peer_access_so_their_rings_are_host_staged(gpu: str, peer: bool) -> None:
    """A GeForce ring over PCIe reaches what a P2P-off ring reaches (NCCL's SHM transport); a workstation or data
    centre board keeps peer-to-peer; NVLink-bridged GeForce pairs still talk over NVLink."""
    from shardscope.costmodel.collectives import Job, job_bandwidths

    m = build_machine(synthetic_topology(gpu_name=gpu, gpus=4, layout="pcie", sockets=1))
    default, forced_off = (job_bandwidths(Job(m, (0, 1, 2, 3), nvlink=nv)).bus_gbps for nv in (True, False))
    assert m.spec.pcie_peer_access is peer
    assert (default == forced_off) is not peer
    assert any("no PCIe peer-to-peer" in n for n in m.notes) is not peer
    bridged = build_machine(synthetic_topology(gpu_name=gpu, gpus=2, nvlinks=4, layout="pairs", sockets=1))
    assert job_bandwidths(Job(bridged, (0, 1))).link == "nvlink"


def test_each_a100_streams_at_its_own_datasheet_bandwidth() -> None:
    """The 40 GB part (1,555 GB/s) and the 80 GB part (2,039 GB/s SXM) differ in bandwidth; a 40 GB part's capacity is
    40 GiB, more than 40 x 10^9 bytes, which once sent it to the 80 GB part's figure."""
    for name in ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"):
        assert spec_for_name(name).memory_bandwidth_gbps == 1555.0
    assert spec_for_name("NVIDIA A100-SXM4-80GB").memory_bandwidth_gbps == 2039.0


def test_a_gh200_has_its_hbm_not_the_superchips_memory_its_name_carries() -> None:
    """nvidia-smi's "NVIDIA GH200 480GB" names the Grace CPU's LPDDR5X: its GPU has 96 GB of HBM3; the HBM3e part,
    "NVIDIA GH200 144G HBM3e", has 144 GB."""
    gib = 2**30 * (1 - DRIVER_RESERVED_FRACTION)
    assert spec_for_name("NVIDIA GH200 480GB").memory_bytes == int(96 * gib)
    assert spec_for_name("NVIDIA GH200 144G HBM3e").memory_bytes == int(144 * gib)


def test_every_gpu_in_the_table_streams_at_its_datasheet_bandwidth() -> None:
    """No family falls back to its curve's ratio of bandwidth to peak: each has its own datasheet figure."""
    from shardscope.costmodel.hardware import _TABLE

    names = {"H100 SXM": "NVIDIA H100 80GB HBM3", "GeForce 10 series": "NVIDIA GeForce GTX 1080 Ti"}
    missing = [row[1] for row in _TABLE if spec_for_name(names.get(row[1], row[1])).memory_bandwidth_gbps is None]
    assert not missing
