"""The decision map: every cell is the one decision function's, measured orders replace the model's where they exist."""

from __future__ import annotations

import pandas as pd
from factories import training_doc, write_docs

from shardscope.costmodel.decision import MODEL_TIE_MARGIN
from shardscope.figures.decision import GPU_MEMORY_GB, columns, decision_map, shape_for_params
from shardscope.figures.plots import draw_all

EMPTY = pd.DataFrame(columns=["outcome", "tokens_per_s_vs_ddp", "fabric", "world_size", "strategy", "host"])


def test_every_cell_recommends_a_fitting_strategy_tied_with_or_fastest(drawn):
    plotted = pd.read_csv(drawn / "decision_map.csv")
    assert set(plotted["panel"]) == {"nvswitch", "pcie"} and set(plotted["gpu_memory_gb"]) == set(GPU_MEMORY_GB)
    assert set(plotted["order_source"]) == {"cost model"}  # the sample runs are on CPU: no GPU order measured
    assert set(plotted["method"]) == {"modeled"}
    usable = plotted["gpu_memory_gb"] * 1e9 * plotted["usable_fraction"]
    picked = plotted["strategy"] != "none"
    assert (plotted.loc[picked, "per_gpu_bytes"] <= usable[picked]).all()  # the pick fits: its whole peak
    assert (plotted.loc[~picked, "per_gpu_bytes"] > usable[~picked]).all()  # 'none': even the smallest peak does not
    ties = plotted[plotted["tied"].notna()]
    assert not ties.empty and (ties["tie_spread"] <= MODEL_TIE_MARGIN).all()
    assert all(s in t.split(" / ") for s, t in zip(ties["strategy"], ties["tied"]))
    # more memory never leaves a model without a pick that fewer memory had
    for (_, n), sub in plotted.groupby(["panel", "n_params"]):
        fits = (sub.sort_values("gpu_memory_gb")["strategy"] != "none").tolist()
        assert fits == sorted(fits), (n, fits)


def test_sweep_shapes_have_the_size_asked_for():
    for n in (1e8, 3e9, 7e10, 2e11):
        assert abs(shape_for_params(n).param_count() / n - 1) < 0.06
    sizes = [c[2].param_count() for c in columns()]
    assert sizes == sorted(sizes) and {"gpt2-small", "llama-1b", "mistral-7b"} <= {c[1] for c in columns()}


def test_mistral_7b_on_80_gb_ddp_does_not_fit_and_the_sharded_ones_tie():
    picks = decision_map(EMPTY, memories_gb=(80,), presets_only=True)
    mistral = picks[picks["preset"] == "mistral-7b"].set_index("panel")
    assert set(mistral["strategy"]) == {"fsdp"}  # tied with ZeRO-2/3 within the margin, the least memory
    assert all("zero2" in t and "zero3" in t for t in mistral["tied"])
    assert (mistral["ddp_per_gpu_bytes"] > 80e9).all()


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
    measured = nvswitch[nvswitch["order_source"] != "cost model"]
    assert set(measured["order_source"]) == {"measured on hostA (2 GPUs)"}
    # ZeRO-3 was measured fastest (2x DDP), so it is picked wherever it fits, and no tie is claimed with DDP.
    assert set(measured["strategy"]) == {"zero3"} and len(measured) > len(nvswitch) / 2
    assert all(o.startswith("zero3 > ddp") for o in measured["order"] if "ddp" in o)
    assert set(plotted.loc[plotted["panel"] == "pcie", "order_source"]) == {"cost model"}
    assert "measured on hostA" in (tmp_path / "figs" / "decision_map.answer.rst").read_text()
