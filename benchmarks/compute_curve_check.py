"""The modeled compute against llm-foundry's published MPT throughput table: the step model's curve, row by row.

``tests/data/published/compute/llm-foundry-mpt.json`` holds every bf16 row of llm-foundry's benchmarking README (MPT
125M-70B, 512 to 65,536 tokens, 8 to 512 A100s and H100s, with and without checkpointing; its source and commit in the
file). Each row is asked of ``shardscope advise`` (in process) as it ran: the MPT shape, its GPUs, FSDP's sharding,
micro-batch, accumulation, sequence and checkpointing. The modeled tokens/s per GPU is set beside the table's.

The rows of the 7B-70B models (``use.defaults``) set one constant, the fused attention kernel's share of the matmuls'
rate per GPU class (``shardscope.costmodel.step.FUSED_ATTENTION_SHARE``: ``--fit`` prints the least-squares choice);
the 125M-3B rows (``use.held_out``) check it. Every number beside "mod" is modeled.

    .venv/bin/python benchmarks/compute_curve_check.py            # the rows and the summary per split and class
    .venv/bin/python benchmarks/compute_curve_check.py --fit      # the share each class's defaults rows choose
    .venv/bin/python benchmarks/compute_curve_check.py --json     # the summary as JSON
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_check as pc  # noqa: E402  (this folder's own module)

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "published" / "compute" / "llm-foundry-mpt.json"
#: The table's GPUs as shardscope names them: a topology preset, the memory and the GPU class the share is kept for.
GPUS = {"h100_80gb": ("preset:hgx-h100", None, 80, "hopper"), "a100_80gb": ("preset:dgx-a100", None, 80, "ampere"),
        "a100_40gb": ("preset:dgx-a100", "NVIDIA A100-SXM4-40GB", 40, "ampere")}
#: The shares ``--fit`` tries for each class (0.5 to 1 in steps of 0.025).
GRID = [round(0.5 + 0.025 * i, 3) for i in range(21)]


def load(path: Path = DATA) -> dict[str, Any]:
    """The table file: its source, the MPT shapes and the rows."""
    return json.loads(path.read_text(encoding="utf-8"))


def split_of(doc: dict[str, Any], row: dict[str, Any]) -> str:
    """``defaults`` or ``held_out``, by the row's model (the file's ``use``)."""
    return "defaults" if row["model"] in doc["use"]["defaults"] else "held_out"


def advise_argv(doc: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """``shardscope advise`` arguments for one row, as it ran."""
    shape = doc["models"]["shapes"][row["model"]]
    model = {"model_type": "mpt", **shape, "expansion_ratio": 4, "max_seq_len": row["seq"], "vocab_size": 50368}
    topology, gpu, memory_gb, _ = GPUS[row["gpu"]]
    argv = ["advise", "--topology", topology, "--model", json.dumps(model), "--gpus", str(row["gpus"]),
            "--strategies", "fsdp" if row["sharding"] == "FULL_SHARD" else "fsdp_grad_op",
            "--micro-batch", str(row["micro_batch"]), "--seq-len", str(row["seq"]),
            "--grad-accum", str(row["grad_accum"]), "--dtype", "bfloat16",
            "--activation-checkpointing", row["checkpointing"], "--memory-gib", f"{memory_gb * 1e9 / 2**30:.4f}",
            "--json"]
    return argv + (["--gpu", gpu] if gpu else [])


def modeled_tokens_per_gpu(doc: dict[str, Any], row: dict[str, Any]) -> float:
    """The modeled tokens/s per GPU of one row (ValueError with advise's own message if it refuses)."""
    code, out, err = pc.call_inprocess(advise_argv(doc, row))
    if code != 0:
        raise ValueError(f"{row['model']} at {row['seq']} tokens on {row['gpus']} {row['gpu']}: {err.strip()}")
    return json.loads(out)["ranking"][0]["tokens_per_s"] / row["gpus"]


def log_errors(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[float]:
    """ln(modeled / measured) of each row."""
    return [math.log(modeled_tokens_per_gpu(doc, r) / r["tokens_per_s_per_gpu"]) for r in rows]


def summary(errors: list[float]) -> dict[str, float]:
    """The factors a list of log errors makes: median and worst |error| as factors >= 1, and the mean squared log."""
    if not errors:
        return {"n": 0}
    return {"n": len(errors), "median": math.exp(statistics.median(abs(e) for e in errors)),
            "worst": math.exp(max(abs(e) for e in errors)), "mse_log": sum(e * e for e in errors) / len(errors),
            "too_fast": sum(e > 0 for e in errors)}


def groups(doc: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows by (split, GPU class)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in doc["rows"]:
        out.setdefault((split_of(doc, row), GPUS[row["gpu"]][3]), []).append(row)
    return out


def check(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The summary of every (split, class) group, keyed ``split/class``."""
    return {f"{split}/{klass}": summary(log_errors(doc, rows)) for (split, klass), rows in sorted(groups(doc).items())}


def fit(doc: dict[str, Any], grid: list[float] = GRID) -> dict[str, tuple[float, float]]:
    """Per GPU class, the share of :data:`GRID` whose defaults rows' mean squared log error is least, and that error."""
    from shardscope.costmodel import step

    kept = dict(step.FUSED_ATTENTION_SHARE)  # each class's rows read only their class's share
    best: dict[str, tuple[float, float]] = {}
    try:
        for (split, klass), rows in groups(doc).items():
            if split != "defaults":
                continue
            for share in grid:
                step.FUSED_ATTENTION_SHARE[klass] = share
                mse = summary(log_errors(doc, rows))["mse_log"]
                if klass not in best or mse < best[klass][1]:
                    best[klass] = (share, mse)
    finally:
        step.FUSED_ATTENTION_SHARE.update(kept)
    return best


def print_rows(doc: dict[str, Any]) -> None:
    """Every row, measured beside modeled."""
    print(f"{'use':<9} {'gpu':<10} {'model':<5} {'tokens':>6} {'gpus':>4} {'mb':>3} {'ckpt':<5} {'meas T/s/GPU':>12} "
          f"{'mod T/s/GPU':>12} {'mod/meas':>8}")
    for row in doc["rows"]:
        modeled = modeled_tokens_per_gpu(doc, row)
        print(f"{split_of(doc, row):<9} {row['gpu']:<10} {row['model']:<5} {row['seq']:>6} {row['gpus']:>4} "
              f"{row['micro_batch']:>3} {row['checkpointing']:<5} {row['tokens_per_s_per_gpu']:>12.0f} "
              f"{modeled:>12.0f} {modeled / row['tokens_per_s_per_gpu']:>8.2f}")


def main(argv: list[str] | None = None) -> int:
    """Print the rows and the summary, the fit (``--fit``) or the summary as JSON (``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="print the share each class's defaults rows choose")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    doc = load()
    if args.fit:
        from shardscope.costmodel.step import FUSED_ATTENTION_SHARE

        for klass, (share, mse) in sorted(fit(doc).items()):
            print(f"{klass}: share {share:g} (mean squared log error {mse:.5f} on the defaults rows); "
                  f"FUSED_ATTENTION_SHARE has {FUSED_ATTENTION_SHARE[klass]:g}")
        return 0
    result = check(doc)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print_rows(doc)
    print(f"\nllm-foundry {doc['source']['commit']}: modeled against measured tokens/s per GPU (factors >= 1)")
    for key, s in result.items():
        print(f"  {key:<17} {s['n']:>3} rows: median x{s['median']:.3f}, worst x{s['worst']:.3f}, "
              f"{s['too_fast']} modeled faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
