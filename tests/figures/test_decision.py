"""The decision map: modeled memory decides what fits, a rule or a measured order decides what is fastest."""

from __future__ import annotations

import pandas as pd
import pytest
from factories import training_doc, write_docs

from shardscope.figures.decision import GPU_MEMORY_GB, GPUS, RULE_ORDER, decision_map, largest_fitting_params
from shardscope.figures.plots import draw_all
from shardscope.training.memory_model import predict_memory


def _fits(n: int, strategy: str, memory_gb: int) -> bool:
    return predict_memory(n, strategy, GPUS, "bfloat16")["total_bytes"] <= memory_gb * 1e9


def test_every_cell_is_the_first_strategy_of_its_order_that_fits(drawn):
    plotted = pd.read_csv(drawn / "decision_map.csv")
    assert set(plotted["panel"]) == {"nvswitch", "pcie"} and set(plotted["gpu_memory_gb"]) == set(GPU_MEMORY_GB)
    assert set(plotted["order_source"]) == {"DESIGN.md rule"}  # the sample runs are on CPU: no GPU order measured
    assert set(plotted["method"]) == {"modeled"}
    for row in plotted.itertuples():
        order = row.order.split(" > ")
        fitting = [s for s in order if _fits(row.n_params, s, row.gpu_memory_gb)]
        assert row.strategy == (fitting[0] if fitting else "none"), row


def test_mistral_7b_on_80_gb_reproduces_the_seed_article():
    """Finding 1 and 4: DDP does not fit 80 GB; NVSwitch takes FSDP/ZeRO-3, PCIe ZeRO-1."""
    picks = decision_map(pd.DataFrame(columns=["outcome", "tokens_per_s_vs_ddp", "fabric", "world_size", "strategy", "host"]))
    mistral = picks[(picks["preset"] == "mistral-7b") & (picks["gpu_memory_gb"] == 80)].set_index("panel")["strategy"]
    assert mistral.to_dict() == {"nvswitch": "fsdp", "pcie": "zero1"}
    assert RULE_ORDER["pcie"] == ["ddp", "zero1", "zero2", "zero3"]
    assert largest_fitting_params("ddp", 80) == pytest.approx(80e9 / 16, rel=1e-6)  # 16 bytes per parameter


def test_a_measured_gpu_fabric_orders_its_panel(tmp_path):
    from shardscope.results.store import collect

    docs = [training_doc(s, step_time_s=t) for s, t in (("ddp", 0.02), ("zero3", 0.01), ("zero1", 0.03))]
    for doc in docs:
        doc["job"]["fabric"] = "nvswitch"
        doc["env"].update(device_type="cuda", devices=["NVIDIA H100 80GB HBM3"] * 2, backend="nccl")
    db = tmp_path / "gpu.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    draw_all(db, tmp_path / "figs")
    plotted = pd.read_csv(tmp_path / "figs" / "decision_map.csv")
    nvswitch = plotted[plotted["panel"] == "nvswitch"]
    assert set(nvswitch["order_source"]) == {"measured on hostA (2 GPUs)"}
    assert nvswitch["order"].iloc[0].startswith("zero3 > ddp > zero1")
    # ZeRO-3 was measured fastest, so it is picked wherever it fits; the PCIe panel keeps the rule.
    assert set(nvswitch.loc[nvswitch["strategy"] != "none", "strategy"]) == {"zero3"}
    assert set(plotted.loc[plotted["panel"] == "pcie", "order_source"]) == {"DESIGN.md rule"}
    assert "measured on hostA" in (tmp_path / "figs" / "decision_map.answer.rst").read_text()
