"""The ``run_predictions`` document: the memory models of runs already measured, for the results store.

The predictions stage owns every modeled number: ``shardscope predict plan`` models the planned jobs
before they run (:mod:`shardscope.costmodel.documents`); ``shardscope predict runs RESULT...`` models
the training runs after they ran, from fields every training result carries (model, strategy, GPUs,
dtype, micro-batch, sequence length, the settings it ran with), so runs whose shape the plan did not
know (each strategy at its own best micro-batch) get their modeled rows too. Collect loads the
document as it loads any prediction; measured-vs-modeled comparisons join the two in SQL
(:mod:`shardscope.results.ddl`).

Layout (``schema: shardscope.run_predictions/1``)::

    kind          "run_predictions"
    method        "modeled"
    created_at    UTC time the prediction was made (ISO 8601; not part of the document's identity)
    model_version the cost model's version (:data:`shardscope.costmodel.documents.MODEL_VERSION`)
    memory        per training run: the ZeRO paper's model states (``memory_predictions``)
    memory_terms  per training run and model of the states: every term of the whole peak (``memory_peak_predictions``)

Each row names the run it models by ``measured_run_id``, the id collect gives that run's result file.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from shardscope.contracts.names import TRAINING_DTYPES
from shardscope.contracts.strategies import SHARDED
from shardscope.costmodel.documents import MODEL_VERSION
from shardscope.costmodel.memory_check import memory_terms_rows
from shardscope.costmodel.memory_model import predict_memory
from shardscope.results.documents import run_id_for

KIND = "run_predictions"
SCHEMA = "shardscope.run_predictions/1"


def memory_prediction(job: dict[str, Any]) -> dict[str, Any] | None:
    """The ZeRO paper's model states of one training job (modeled), or None when its size, dtype or strategy is unknown."""
    n_params, dtype, strategy, gpus = job.get("param_count"), job.get("dtype"), job.get("strategy"), job.get("world_size")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 for v in (n_params, gpus))
    if not numbers or dtype not in TRAINING_DTYPES or strategy not in SHARDED:
        return None  # unknown values are reported by collect's training_runs schema; nothing to model
    return {"model": job.get("model"), **predict_memory(int(n_params), strategy, int(gpus), dtype)}


def run_predictions(documents: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The ``run_predictions`` document of these result documents (training results are modeled, others skipped)."""
    memory, terms = [], []
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != "training" or not isinstance(doc.get("job"), dict):
            continue
        run_id = run_id_for(doc)
        states = memory_prediction(doc["job"])
        if states is not None:
            memory.append({"measured_run_id": run_id, **states})
        for row in memory_terms_rows(run_id, doc):
            row["measured_run_id"] = row.pop("run_id")
            terms.append(row)
    return {"kind": KIND, "schema": SCHEMA, "method": "modeled", "created_at": datetime.now(UTC).isoformat(),
            "model_version": MODEL_VERSION, "memory": memory, "memory_terms": terms}
