"""The ZeRO paper's memory model for the seed article's case, written by the predictions stage (torch-free).

Mistral-7B in bf16 with Adam, every strategy on 1 and 8 GPUs of 80 GB, without and with an fp32
master copy of the weights (:func:`shardscope.costmodel.memory_model.memory_table`): the report's
memory table and its "does not fit one 80 GB GPU" sentence read these rows (``memory_model_cases``)
instead of computing them.
"""

from __future__ import annotations

from typing import Any

from shardscope.costmodel.memory_model import memory_table

#: The seed article's case: model, GPU counts and GPU memory.
SEED_MODEL, SEED_GPUS, SEED_GPU_MEMORY_GB = "mistral-7b", (1, 8), 80.0


def memory_model_case_rows() -> list[dict[str, Any]]:
    """The predictions document's ``memory_model`` rows: per GPU count, master copy and strategy, the model states."""
    rows = []
    for gpus in SEED_GPUS:
        for master in (False, True):
            for row in memory_table(SEED_MODEL, "all", gpus, master_weights=master, gpu_memory_gb=SEED_GPU_MEMORY_GB):
                rows.append({"memory_case": "seed_mistral", "strategy": row["strategy"], "model": row["model"],
                             "n_params": int(row["n_params"]), "gpus": gpus, "dtype": row["dtype"], "master_weights": master,
                             **{k: int(row[k]) for k in ("param_bytes", "grad_bytes", "optim_bytes", "total_bytes")},
                             "assumption": row["bytes_per_param"]["description"],
                             "gpu_memory_bytes": int(row["gpu_memory_bytes"]), "fits": bool(row["fits"]), "method": "modeled"})
    return rows
