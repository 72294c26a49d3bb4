"""Doctor checks on recorded real outputs (tests/data/diagnose/SOURCES.md).

Every check is a pure function of text or values; the live readers are exercised once in
test_cli.py on this machine. Inputs marked CONSTRUCTED are made up to reach a branch no
recorded output covers, and say so.
"""

from __future__ import annotations

import pytest
from diagnose.fixtures import HOST, LSPCI, RUN_293_GDR, THIS, TOPO_293, text, topology
from shardscope.diagnose.doctor import check_peer_pairs, format_report
from shardscope.diagnose.host import (
    check_iommu,
    check_nccl_env,
    check_numa_binding,
    check_virtualization,
    parse_cmdline,
    parse_cpu_list,
)
from shardscope.diagnose.nccl_log import parse_nccl_log
from shardscope.diagnose.pci import (
    check_acs,
    check_pcie_links,
    parse_lspci,
    parse_nvidia_smi_q,
    parse_sysfs_link,
)

N1SDP = LSPCI / "n1sdp-plx8749-downstream-acs-on.txt"


# --------------------------------------------------------------------------- ACS


def test_lspci_block_is_parsed():
    dev = parse_lspci(text(N1SDP)).devices[0]
    assert dev.bdf == "0000:02:08.0" and dev.secondary == 3 and dev.subordinate == 3
    assert dev.acs_redirect and dev.acs == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                                             "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert dev.link_cap == (5.0, 16) and dev.link_sta == (2.5, 0)


def test_acs_redirect_above_a_gpu_fails():
    # The bridge is real (N1SDP, PLX 8749 downstream port, bus 03 behind it); a GPU at 03:00.0 is CONSTRUCTED.
    f = check_acs(text(N1SDP), ["0000:03:00.0"])
    assert f.status == "fail" and "0000:02:08.0 (above 0000:03:00.0)" in f.concluded
    assert "P2P" in f.explains and "setpci" in f.action
    assert check_acs(text(N1SDP), ["0000:05:00.0"]).status == "warn"  # redirect on, but not above this GPU


def test_acs_grep_output_on_and_off():
    f = check_acs(text(LSPCI / "nccl-304-acsctl-grep-on-off.txt"))  # "broken" and "working" lines of nccl#304
    assert f.status == "warn" and f.details["acsctl_lines_without_device"] == 2
    assert "which bridges carry GPUs is unknown" in f.concluded


def test_source_validation_alone_is_information():
    f = check_acs(text(LSPCI / "nccl-606-lspci-grep-acsctl.txt"))
    assert f.status == "info" and f.details["acsctl_lines_with_bits_on"] == 4


def test_elided_lspci_block_still_names_the_bridge():
    f = check_acs(text(LSPCI / "rccl-547-gpp-bridge-acs-on-elided.txt"))
    assert f.status == "warn" and f.details["bridges_with_acs_redirect"] == ["40:01.1"]


def test_no_acs_lines():
    f = check_acs("00:00.0 Host bridge: Intel Corporation Device 0000\n")  # CONSTRUCTED
    assert f.status == "info" and "root" in f.concluded


# --------------------------------------------------------------------------- IOMMU


def test_iommu_passthrough_from_cmdline_and_kernel_log():
    f = check_iommu(text(HOST / "yyu-vm-win10-kernel_cmdline.txt"), text(HOST / "yyu-vm-win10-dmesg_iommu-head.txt"))
    assert f.status == "ok" and f.details["passthrough"]
    assert parse_cmdline(text(HOST / "gardenlinux-4556-kernel-cmdline.txt").splitlines()[1])["iommu"] == "pt"


def test_iommu_translated_fails():
    f = check_iommu("BOOT_IMAGE=/boot/vmlinuz ro quiet", text(HOST / "yyu-vm-readme-dmesg-translated-head.txt"), ["ivhd0"])
    assert f.status == "fail" and "iommu=pt" in f.action and "translated" in f.concluded


def test_iommu_translated_default_without_iommu_units_is_ok():
    # This machine: the kernel says "Translated" but /sys/class/iommu is empty (no IOMMU hardware).
    f = check_iommu(text(THIS / "proc_cmdline.txt"), text(THIS / "dmesg_grep_iommu.txt"), [])
    assert f.status == "ok" and "no IOMMU unit" in f.concluded


def test_iommu_enabled_without_passthrough():
    f = check_iommu("quiet intel_iommu=on", None, ["dmar0", "dmar1"])  # CONSTRUCTED command line
    assert f.status == "fail"


# --------------------------------------------------------------------------- PCIe links


def test_nvidia_smi_q_x8_of_x16_while_busy_fails():
    readings = parse_nvidia_smi_q(text(HOST / "dcgm-232-nvidia-smi-q-a10g.txt"))
    assert len(readings) == 1
    r = readings[0]
    assert (r.gen_current, r.gen_max, r.width_current, r.width_max, r.pstate) == (4, 4, 8, 16, "P0")
    f = check_pcie_links(readings, "nvidia-smi -q")
    assert f.status == "fail" and "x8 of x16" in f.concluded


def test_sysfs_link_readings():
    readings = parse_sysfs_link(text(HOST / "nokyan-resources-512-sysfs-link.txt"))
    assert [(r.bus_id, r.gen_current, r.gen_max, r.width_current, r.width_max) for r in readings] == [
        ("0000:01:00.0", 4, 5, 8, 16)]
    assert check_pcie_links(readings, "sysfs").status == "fail"


def test_idle_generation_drop_is_information():
    from shardscope.diagnose.pci import LinkReading

    idle = [LinkReading("00000000:01:00.0", 1, 4, 16, 16, "P8")]  # CONSTRUCTED (an idle GPU)
    assert check_pcie_links(idle, "NVML").status == "info"
    assert check_pcie_links([], "NVML").status == "skipped"


# --------------------------------------------------------------------------- peer check


def test_peer_access_that_fails_the_collective_check():
    # CONSTRUCTED results of the worker's --check on two pairs (no recorded output of such a run exists yet).
    f = check_peer_pairs([{"pair": [0, 1], "peer_access": True, "check_ok": False, "wrong": 4096},
                          {"pair": [0, 2], "peer_access": True, "check_ok": True, "wrong": 0}])
    assert f.status == "fail" and "0-1 (4096 wrong elements)" in f.concluded
    assert check_peer_pairs([]).status == "skipped"
    assert check_peer_pairs([{"pair": [0, 1], "peer_access": False, "check_ok": True, "wrong": 0}]).status == "ok"


# --------------------------------------------------------------------------- NCCL variables


def test_variables_from_a_real_run_that_force_slow_paths():
    env = parse_nccl_log(text(LSPCI.parent / "nccl-log" / "nv_peer_memory-78-env-p2p-loc-shm-disable.txt")).env
    f = check_nccl_env(env, "nv_peer_memory#78 log")
    assert f.status == "warn" and f.details["slow"] == ["NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"]
    gdr = check_nccl_env(parse_nccl_log(text(RUN_293_GDR)).env)
    assert gdr.details["slow"] == ["NCCL_SHM_DISABLE"]  # GDR_LEVEL=SYS widens GDR: not slow


def test_effective_env_shape_and_clean_environment():
    f = check_nccl_env({"NCCL_P2P_DISABLE": {"value": "1", "source": "/etc/nccl.conf"}})
    assert f.status == "warn" and "/etc/nccl.conf" in f.concluded
    assert check_nccl_env({"PATH": "/usr/bin"}).status == "ok"


# --------------------------------------------------------------------------- NUMA


def test_process_bound_far_from_the_gpu_and_nic_on_another_socket():
    topo = topology(TOPO_293)  # GPUs on CPUs 24-47,72-95; NIC0 SYS from both GPUs
    f = check_numa_binding(parse_cpu_list("0-23"), topo)  # CONSTRUCTED binding (the issue used --bind-to socket)
    assert f.status == "warn" and f.details["gpus_far_from_process"] == [0, 1]
    assert f.details["gpus_far_from_nic"] == [0, 1] and "nccl-tests#293" in f.concluded
    near = check_numa_binding(parse_cpu_list("24-47,72-95"), topo)
    assert near.status == "warn" and near.details["gpus_far_from_process"] == []  # still far from the NIC


def test_this_machine_numa_reading():
    cpus = parse_cpu_list(text(THIS / "proc_self_status_cpus_allowed_list.txt").split(":")[1].strip())
    topo = {"gpus": [], "numa_nodes": [{"id": 0, "cpus": text(THIS / "node0_cpulist.txt").strip()}]}
    f = check_numa_binding(cpus, topo)
    assert cpus == {0, 1} and f.status == "info" and f.details["numa_nodes_spanned"] == [0]


# --------------------------------------------------------------------------- virtualisation


def test_this_machine_is_a_kvm_vm_and_a_docker_container():
    first = lambda name: text(THIS / name).splitlines()[0]
    readings = {"detect_virt_vm": first("systemd-detect-virt--vm.txt"),
                "detect_virt_container": first("systemd-detect-virt--container.txt"),
                "cpu_hypervisor_flag": " hypervisor" in text(THIS / "proc_cpuinfo_flags.txt"),
                "dockerenv": text(THIS / "dockerenv_ls.txt").endswith("/.dockerenv\n"),
                "cgroup": text(THIS / "proc_1_cgroup.txt"),
                "shm_bytes": int(text(THIS / "df_dev_shm.txt").split()[1])}
    f = check_virtualization(readings)
    assert f.status == "warn" and f.details["vm"] and f.details["container"]
    assert "systemd-detect-virt --vm: kvm" in f.read and "CPU flag 'hypervisor'" in f.read
    assert "too small" not in f.concluded  # 25 GB /dev/shm


def test_gpu_in_pass_through_mode_means_a_vm():
    smi = text(HOST / "dcgm-232-nvidia-smi-q-a10g.txt")
    mode = next(line.split(":", 1)[1].strip() for line in smi.splitlines() if "Virtualization Mode" in line and ":" in line)
    f = check_virtualization({"gpu_virtualization_mode": mode})
    assert mode == "Pass-Through" and f.status == "warn" and f.details["vm"]


def test_bare_metal_and_small_shm():
    assert check_virtualization({"detect_virt_vm": "none", "detect_virt_container": "none"}).status == "ok"  # CONSTRUCTED
    small = check_virtualization({"dockerenv": True, "shm_bytes": 64 << 20})  # CONSTRUCTED: Docker's default 64 MiB
    assert small.status == "warn" and "64 MiB /dev/shm" in small.concluded


def test_report_text():
    doc = {"host": "h", "topology": {"fabric": "cpu", "gpu_count": 0}, "summary": {"ok": 1, "warn": 0},
           "findings": [check_nccl_env({}).to_dict()]}
    out = format_report(doc)
    assert "[     OK] nccl_env" in out and "summary: 1 ok" in out


@pytest.mark.parametrize("bad", ["0-x", "a"])
def test_unreadable_cpu_lists(bad):
    assert parse_cpu_list(bad) == set()
