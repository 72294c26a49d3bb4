"""The NCCL log parser on real NCCL_DEBUG=INFO output (verbatim excerpts, tests/data/diagnose/SOURCES.md).

Each excerpt is a contiguous run of lines from a public issue; together they cover every
NCCL log generation in use: ``Ring 00 :`` (2.4), ``Channel 00 :`` with bus ids (2.7-2.12),
``Channel 00/0 :`` (2.12+), and the transports P2P/IPC, P2P/CUMEM, P2P/direct pointer,
SHM (both spellings), NET/IB (IBext plugin, GDRDMA), NET/Socket.
"""

from __future__ import annotations

import pytest
from diagnose.fixtures import (
    LOGS,
    NCCL_TESTS,
    RUN_293_GDR,
    RUN_293_NO_GDR,
    RUN_293_NPS4,
    text,
    topology,
)
from shardscope.diagnose.nccl_log import (
    classify_transport,
    merge,
    parse_nccl_log,
    summarize_files,
    transport_flags,
)
from shardscope.errors import UserError

HGX = NCCL_TESTS.parent / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"


def _log(name):
    return parse_nccl_log(text(LOGS / name))


def test_full_nccl_tests_log_with_net_ib_gdr_and_environment():
    s = parse_nccl_log(text(RUN_293_GDR))
    assert s.version == "2.21.5+cuda12.4"
    assert s.transports == {"NET/IB": 8} and s.connections == 8 and s.gdr_rdma is True
    assert s.network == "IBext_v8"
    assert s.env == {"NCCL_SHM_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "SYS"}
    assert s.channels["coll"] == 2 and s.channels["nvls"] == 0 and s.channels["ring_channels"] == 2
    assert s.ranks == 2 and s.nodes == 2
    assert s.nvls_used is False and s.nvls_available is None
    pairs = {(p["from_rank"], p["to_rank"]) for p in s.pairs}
    assert pairs == {(0, 1), (1, 0)}


def test_same_network_without_gpudirect_rdma():
    assert parse_nccl_log(text(RUN_293_NO_GDR)).gdr_rdma is False  # "via NET/IBext_v8/0", no GDRDMA
    nps4 = parse_nccl_log(text(RUN_293_NPS4))
    assert nps4.gdr_rdma is False and nps4.env["NCCL_NET_GDR_LEVEL"] == "PXB"


@pytest.mark.parametrize(("name", "transports"), [
    ("nccl-tests-29-ring-p2p-ipc.txt", {"P2P/IPC": 19}),
    ("nccl-820-p2p-ipc-read.txt", {"P2P/IPC": 13}),
    ("nccl-1538-p2p-cumem.txt", {"P2P/CUMEM": 11}),
    ("nccl-1773-p2p-direct-pointer-level-sys.txt", {"P2P/direct": 9}),
    ("nccl-644-p2p-and-shm-old-format.txt", {"P2P/direct": 7, "SHM": 7}),
    ("tinygrad-45-shm-direct.txt", {"SHM": 1}),
    ("nccl-1232-net-socket-and-shm.txt", {"NET/Socket": 8, "SHM": 2}),
    ("nccl-1453-net-ibext-tuning.txt", {"NET/IB": 6}),
])
def test_transports_of_every_log_generation(name, transports):
    assert _log(name).transports == transports


def test_p2p_read_and_bus_ids_in_old_format():
    s = _log("nccl-820-p2p-ipc-read.txt")
    assert s.p2p_read and s.channels["max_channel_index"] == 15
    assert {(p["from_rank"], p["to_rank"]) for p in s.pairs} == {(7, 3), (7, 6)}


def test_nvls_availability_and_use():
    available = _log("nccl-1538-nvls-available.txt")
    assert available.nvls_available is True and available.nvls_devices == [0, 2, 5, 6, 7]
    assert available.nvls_used is False  # available is not used
    assert _log("nccl-1453-nvls-multinode.txt").nvls_used is True  # "NVLS Head" lines
    not_available = _log("aws-ofi-nccl-715-nvls-not-available-timestamped.txt")
    assert not_available.nvls_available is False and not_available.nvls_used is False


def test_channel_counts_and_tuning_choices():
    s = _log("nccl-1706-channels-summary.txt")
    assert s.channels == {"coll": 4, "collnet": 4, "nvls": 0, "p2p": 4, "per_peer": 2}
    tuning = _log("nccl-1453-net-ibext-tuning.txt")
    assert tuning.algorithms == {"Tree": 6} and tuning.protocols == {"LL": 6}  # "Algo 0 proto 0"
    assert tuning.gdr_rdma is True


def test_environment_lines_of_old_versions():
    s = _log("nv_peer_memory-78-env-p2p-loc-shm-disable.txt")
    assert s.version == "2.7.8+cuda11.0" and s.network == "IB"
    assert s.env == {"NCCL_P2P_LEVEL": "LOC", "NCCL_SHM_DISABLE": "1"}
    socket = _log("nccl-428-socket-p2p-level-loc.txt")
    assert socket.network == "Socket" and socket.env == {"NCCL_P2P_LEVEL": "LOC"}
    assert socket.warnings == ["Failed to open libibverbs.so[.1]"]


def test_graph_search_types():
    assert _log("nccl-1519-graph-type-nvl.txt").graph_types == ["NVL/PHB"]


def test_pcie_forced_job_that_used_nvlink_is_flagged():
    topo = topology(HGX)
    p2p = merge([_log("nccl-1538-p2p-cumem.txt"), _log("nccl-1538-nvls-available.txt")])
    flags = transport_flags(p2p, "pcie", topo)
    assert len(flags) == 1 and "P2P connection(s) on a topology with NVLink" in flags[0]
    nvls = transport_flags(_log("nccl-1519-graph-type-nvl.txt"), "pcie", topo)
    assert any("NVLS" in f for f in nvls) and any("NVLink paths" in f for f in nvls)
    assert transport_flags(p2p, "default", topo) == []


def test_default_job_on_nvlink_without_p2p_is_flagged():
    # The SHM excerpt (a 4090 box) read against an NVLink topology: CONSTRUCTED pairing.
    flags = transport_flags(_log("tinygrad-45-shm-direct.txt"), "default", topology(HGX))
    assert flags and "no P2P connection" in flags[0]


def test_classify_transport_spellings():
    assert classify_transport("P2P/IPC/read") == ("P2P/IPC", True, False)
    assert classify_transport("NET/IBext_v8/7/GDRDMA") == ("NET/IB", False, True)
    assert classify_transport("direct shared memory")[0] == "SHM"
    assert classify_transport("NET/Socket/0")[0] == "NET/Socket"


def test_files_without_nccl_lines_are_user_errors(tmp_path):
    empty = tmp_path / "x.log"
    empty.write_text("hello\n")
    with pytest.raises(UserError, match="no NCCL log lines"):
        summarize_files([empty])
    with pytest.raises(UserError, match="file not found"):
        summarize_files([tmp_path / "missing.log"])
    merged = summarize_files([LOGS / "nccl-1538-p2p-cumem.txt", LOGS / "nccl-1538-nvls-available.txt"])
    assert merged.transports == {"P2P/CUMEM": 11} and merged.nvls_available is True
