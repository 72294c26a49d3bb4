"""``shardscope advise``, ``shardscope predict collectives`` and ``shardscope predict plan`` (registered by :mod:`shardscope.cli`).

``predict plan`` predicts every job of a plan.json (the pipeline's ``predictions`` rule). All take ``--topology FILE|auto|preset:NAME``: a saved ``nvidia-smi topo -m`` / ``rocm-smi``
output or topology.json, this machine's probe, or a published layout (:mod:`.presets`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import math
import sys
from typing import Any

from shardscope.cli import gpu_count
from shardscope.contracts.models import ATTENTION_KINDS
from shardscope.contracts.names import CHECKPOINTING_MODES, OPS
from shardscope.costmodel.decision import RULE_CITATION
from shardscope.costmodel.memory_command import positive_int, register_memory
from shardscope.costmodel.optimizer_step import ADAMW_IMPLEMENTATIONS
from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, dump_json

_GIB = 2**30


def load_topology(spec: str) -> tuple[dict[str, Any], str]:
    """(topology.json document, name for messages) for ``FILE``, ``auto`` or ``preset:NAME``."""
    if spec == "auto":
        from shardscope.topology.detect import detect

        return detect().topology.to_dict(), "this machine"
    if spec.startswith("preset:"):
        from shardscope.costmodel.presets import preset

        return preset(spec.split(":", 1)[1]), spec
    from shardscope.topology.parse import parse_file

    doc = parse_file(spec).to_dict()
    for warning in doc.get("warnings", []):  # what the view may hide: said before anything is modeled on it
        print(f"shardscope: warning: {spec}: {warning}", file=sys.stderr)
    return doc, spec


def _positive(kind: type, what: str) -> Any:
    def parse(text: str) -> Any:
        """The parsed value, or an argparse error naming the flag."""
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a positive number, got {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{what} must be a positive number, got {text!r}")
        return value
    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def _release(text: str) -> str:
    """A DeepSpeed release as ``--deepspeed-version`` takes it: ``X.Y`` or ``X.Y.Z``, a local ``+suffix`` allowed."""
    import re

    if not re.fullmatch(r"\d+\.\d+(\.\d+)?(\+[\w.]+)?", text):
        raise argparse.ArgumentTypeError(f"expected a release such as 0.18.7, got {text!r}")
    return text


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def _calibrations(paths: list[str] | None, machine: Any, transport: str = "default") -> dict[str, Any]:
    """Fitted calibrations from result documents measured on the given machine."""
    if not paths:
        return {}
    from shardscope.costmodel.calibrate import calibrate, load_rows
    from shardscope.costmodel.collectives import predict_collective
    from shardscope.costmodel.sweep import job_for

    rows = [row for path in paths for row in load_rows(path)]
    return calibrate(rows, lambda op, n: predict_collective(op, 1 << 40, job_for(machine, n, transport)).algbw_gbps)


def _cmd_advise(args: argparse.Namespace) -> int:
    from shardscope.contracts.names import GROUPED_STRATEGIES
    from shardscope.costmodel.advise import advise
    from shardscope.costmodel.documents import (
        predictions_document,
        rows_for_sweep,
        strategy_rows,
        topology_hash,
    )
    from shardscope.costmodel.machine import build_machine
    from shardscope.costmodel.step import StepAssumptions
    from shardscope.costmodel.sweep import DEFAULT_SIZES, predict_sweep

    from shardscope.contracts.models import parse_model_spec, resolve_model
    from shardscope.costmodel.memory_peak import check_checkpointing

    try:
        model = with_attention(parse_model_spec(args.model), args.attention)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    doc, source = load_topology(args.topology)
    (mfu, overlap), labels = _step_constants(args)
    from shardscope.costmodel.deepspeed_config import run_knobs
    from shardscope.costmodel.deepspeed_hooks import installed_deepspeed_version

    try:
        cfg = resolve_model(model)[1]
        knobs, offload = run_knobs(args.deepspeed_config, cfg.d_model, args.offload_optimizer)
        assumptions = StepAssumptions(micro_batch=args.micro_batch, seq_len=args.seq_len, mfu=mfu, overlap=overlap,
                                      usable_fraction=args.usable_memory, dtype=args.dtype,
                                      comm_bytes=4 if args.dtype == "float32" else 2,
                                      reduce_bytes=None if args.reduce_dtype is None else
                                      (4 if args.reduce_dtype == "float32" else 2),
                                      checkpointing=args.activation_checkpointing,
                                      trainable_fraction=args.trainable_fraction,
                                      offload_optimizer=offload, grad_accum=args.grad_accum,
                                      ddp_bucket_view=args.ddp_bucket_view, deepspeed=knobs,
                                      deepspeed_version=args.deepspeed_version or installed_deepspeed_version(),
                                      adamw=args.adamw)
        check_checkpointing(cfg, args.activation_checkpointing)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.seq_len is not None:
        positive_int("--seq-len", args.seq_len, cfg.max_seq_len)
    memory = int(args.memory_gib * _GIB) if args.memory_gib else None
    strategies = None if args.strategies is None else tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    shard_sizes = None if args.shard_size is None else dict.fromkeys(GROUPED_STRATEGIES, args.shard_size)
    machine = build_machine(doc, gpu_name=args.gpu, memory_bytes=memory, nic_gbps=args.nic_gbps, source=source,
                            nics=args.nics)
    calibrations = _calibrations(args.calibrate, machine)
    result = advise(doc, model, args.gpus, gpu_name=args.gpu, memory_bytes=memory, peak_tflops=args.peak_tflops,
                    nic_gbps=args.nic_gbps, strategies=strategies, assumptions=assumptions, calibrations=calibrations,
                    source=source, nics=args.nics, shard_sizes=shard_sizes, global_batch=args.global_batch,
                    transport=args.transport)
    if args.out:
        topo_hash = topology_hash(doc)
        sweep = predict_sweep(result.machine, ("all_reduce", "all_gather", "reduce_scatter"), [args.gpus], DEFAULT_SIZES,
                              calibrations) if args.gpus > 1 else []
        atomic_write_json(args.out, predictions_document(doc, result.machine, rows_for_sweep(sweep, topo_hash),
                                                         strategy_rows(result, topo_hash), assumptions.to_dict(), calibrations))
    if args.json:
        print(dump_json(result.to_dict()), end="")
        return 0
    print(f"{result.model} on {result.gpus} x {result.machine.spec.family} ({result.machine.fabric}); modeled, not measured")
    print(_assumptions_line(model, result.assumptions, result.ranking[0].memory_available_bytes, labels))
    if result.global_batch:
        print(f"global batch {result.global_batch} sequences per optimizer step: each strategy at its own largest "
              "micro-batch that fits (micro-batch x accumulation x ranks)")
    for p in result.ranking:
        fits = {True: "fits", False: "DOES NOT FIT", None: "fit unknown"}[p.fits]
        mb, accum = result.batches.get(p.strategy, (result.assumptions.micro_batch, 1))
        batch = f"  batch {mb:>4} x {accum:<4}" if result.global_batch else ""
        print(f"  {p.strategy:>12}{batch}  step {p.step_time_s:8.3f} s  compute {p.compute_time_s:7.3f} s  "
              f"comm {p.comm_time_s:7.3f} s (exposed {p.exposed_comm_time_s:6.3f} s)  "
              f"memory {p.memory_total_bytes / 1e9:7.1f} GB  {fits}")
    print(f"recommended: {result.decision.label()} ({result.decision.source}; rule: {RULE_CITATION})")
    tie = result.decision.tie_sentence()
    if tie:
        print(tie)
    print()
    print(" ".join(result.explanation))
    for note in result.notes:
        print(f"note: {note}")
    return 0


def _step_constants(args: argparse.Namespace) -> tuple[tuple[float | None, float | None], tuple[str, str]]:
    """(MFU, overlap) for ``advise`` and where each comes from: ``--mfu``/``--overlap``, else the newest calibration
    stored in ``--calibration-db`` (``shardscope calibrate-step --store``), else the step model's constants, labelled so."""
    from shardscope.costmodel.step import STEP_DEFAULTS_LABEL

    constant = STEP_DEFAULTS_LABEL
    mfu: tuple[float | None, str] = (args.mfu, "given") if args.mfu is not None else (None, constant[0])
    overlap: tuple[float | None, str] = (args.overlap, "given") if args.overlap is not None else (None, constant[1])
    if getattr(args, "calibration_db", None) and (args.mfu is None or args.overlap is None):
        from shardscope.costmodel.step_calibration import latest_calibration

        found = latest_calibration(args.calibration_db, args.model, args.gpus)
        if found is None:
            held = f"; {args.calibration_db} holds no step calibration"
            mfu = mfu if args.mfu is not None else (None, constant[0] + held)
            overlap = overlap if args.overlap is not None else (None, constant[1] + held)
        else:
            where = (f"calibrated from {len(found['run_ids'])} measured runs of {found['model']} on {found['world_size']} ranks "
                     f"({found['calibration_id']})")
            if args.overlap is None:
                overlap = (float(found["overlap"]), where)
            if args.mfu is None:
                mfu = ((float(found["mfu"]), where) if found["mfu"] is not None else
                       (None, constant[0] + "; the calibration's runs had no known peak FLOP/s (CPU processes)"))
    return (mfu[0], overlap[0]), (mfu[1], overlap[1])


def _assumptions_line(model: str | dict[str, Any], assumptions: Any, usable_bytes: int | None,
                      labels: tuple[str, str] | None = None) -> str:
    """What the ranking assumes, in one line: micro-batch, sequence length, MFU and overlap (with where each came
    from), usable memory, and what the run's software is taken to be where it matters (the AdamW kernel where one is
    named, the DeepSpeed release, eager attention)."""
    from shardscope.contracts.models import resolve_model

    cfg = resolve_model(model)[1]
    seq_len = assumptions.seq_len_for(cfg)
    usable = f"{usable_bytes / 1e9:.0f} GB" if usable_bytes else "unknown"
    mfu_from, overlap_from = labels or ("given", "given")
    frozen = (f", trainable {assumptions.trainable_fraction:g} of the parameters"
              if assumptions.trainable_fraction < 1 else "")
    offload = ", optimizer offloaded to the CPU" if assumptions.offload_optimizer == "cpu" else ""
    offload += f", AdamW {assumptions.adamw}" if assumptions.adamw != "default" else ""
    deepspeed = (f", DeepSpeed's buckets and limits from {assumptions.deepspeed.source}"
                 if assumptions.deepspeed is not None else "")
    deepspeed += f", DeepSpeed {assumptions.deepspeed_version}" if assumptions.deepspeed_version else ""
    deepspeed += ", eager attention (every score kept)" if cfg.attention == "eager" else ""
    mfu = "from the compute curve" if assumptions.mfu is None else f"{assumptions.mfu:g}"
    overlap = "from each strategy's schedule" if assumptions.overlap is None else f"{assumptions.overlap:g}"
    accum = f" x {assumptions.grad_accum} accumulated" if assumptions.grad_accum > 1 else ""
    reduce = ("" if assumptions.reduce_bytes is None else
              f", gradients reduced in {'float32' if assumptions.reduce_bytes == 4 else '16 bits'}")
    return (f"assumes: micro-batch {assumptions.micro_batch}{accum}, seq len {seq_len}, {assumptions.dtype}{reduce}, "
            "activation "
            f"checkpointing {assumptions.checkpointing}{frozen}{offload}{deepspeed}, MFU {mfu} ({mfu_from}), "
            f"overlap {overlap} ({overlap_from}), usable memory {assumptions.usable_fraction:.0%} "
            f"of the GPU's ({usable})")


def _cmd_calibrate_step(args: argparse.Namespace) -> int:
    """``shardscope calibrate-step``: the step model's compute rate and overlap fitted on the database's measured runs."""
    from shardscope.costmodel.step_calibration import calibrate_steps, format_calibrations, store_calibrations
    from shardscope.results.store import connect_readonly

    with connect_readonly(args.db) as con:
        found, notes = calibrate_steps(con, args.peak_tflops * 1e12 if args.peak_tflops else None)
    if args.store and found:
        written = store_calibrations(args.db, found)
        notes = [*notes, f"stored {len(found)} calibration(s) in {args.db}: "
                 + ", ".join(f"{n} row(s) in {table}" for table, n in written.items())]
    if args.json:
        print(dump_json({"calibrations": [c.to_dict() for c in found], "notes": notes}), end="")
    else:
        print(format_calibrations(found, notes))
    return 0


def _cmd_predict_collectives(args: argparse.Namespace) -> int:
    from shardscope.costmodel.documents import (
        predictions_document,
        rows_for_sweep,
        topology_hash,
    )
    from shardscope.costmodel.machine import build_machine
    from shardscope.costmodel.sweep import default_world_sizes, predict_sweep

    doc, source = load_topology(args.topology)
    machine = build_machine(doc, gpu_name=args.gpu, nic_gbps=args.nic_gbps, source=source, nics=args.nics)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise UserError(f"unknown collective {', '.join(bad) or '(none)'}; expected some of {', '.join(OPS)}")
    if args.min_bytes > args.max_bytes:
        raise UserError(f"--min-bytes ({args.min_bytes}) is larger than --max-bytes ({args.max_bytes})")
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    world_sizes = args.gpus or default_world_sizes(machine)
    if machine.fabric == "single" and not args.gpus:
        world_sizes = []
    calibrations = _calibrations(args.calibrate, machine, args.transport)
    preds = predict_sweep(machine, ops, world_sizes, sizes, calibrations, args.transport,
                          [args.algorithm] if args.algorithm else None)
    topo_hash = topology_hash(doc)
    document = predictions_document(doc, machine, rows_for_sweep(preds, topo_hash, args.transport), (), None, calibrations)
    if args.label or args.fabric_label:
        document.update(label=args.label, fabric_label=args.fabric_label)
    if args.out:
        atomic_write_json(args.out, document)
    if args.json:
        print(dump_json(document), end="")
        return 0
    print(f"{source}: {machine.spec.family}, fabric {machine.fabric}; modeled, not measured")
    if not preds:
        print("  one GPU: no collective to predict (pass --gpus N for a multi-node job of such nodes)")
    for pred, job in preds:
        print(f"  {pred.op:>14} n={pred.world_size:<3} {pred.size_bytes:>12} B  {pred.time_s * 1e6:12.1f} us  "
              f"busbw {pred.busbw_gbps:8.2f} GB/s  {pred.algorithm}/{pred.protocol}  ({pred.bottleneck})")
    for note in machine.notes:
        print(f"note: {note}")
    return 0


def _cmd_predict_plan(args: argparse.Namespace) -> int:
    from shardscope.costmodel.documents import plan_predictions
    from shardscope.fileio import read_json

    doc, source = load_topology(args.topology)
    try:
        plan = read_json(args.plan)
    except UnicodeDecodeError:
        raise UserError(f"{args.plan}: not a text file; expected a plan.json written by `shardscope plan`") from None
    if not isinstance(plan, dict) or plan.get("schema") != "shardscope.plan/1":
        raise UserError(f"{args.plan}: not a plan (expected a JSON object with schema 'shardscope.plan/1')")
    document = plan_predictions(doc, plan, source)
    if args.out:
        atomic_write_json(args.out, document)
    if args.json:
        print(dump_json(document), end="")
        return 0
    plan_info = document["plan"]
    print(f"{source}: fabric {document['topology']['fabric']}; {len(document['collectives'])} collective and "
          f"{len(document['strategies'])} strategy predictions for {args.plan}; modeled, not measured")
    if plan_info["strategies_note"]:
        print(f"note: {plan_info['strategies_note']}")
    elif document["strategies"]:
        step = document["assumptions"]["step"]
        mfu = "from the compute curve" if step["mfu"] is None else f"{step['mfu']:g}"
        overlap = "from each strategy's schedule" if step["overlap"] is None else f"{step['overlap']:g}"
        print(f"note: step times assume MFU {mfu} and overlap {overlap}, the step model's defaults "
              "(no calibration: `shardscope calibrate-step --store` fits them to measured runs; `advise --calibration-db` uses them)")
    for note in document["topology"]["notes"]:
        print(f"note: {note}")
    return 0


def _cmd_predict_runs(args: argparse.Namespace) -> int:
    from shardscope.costmodel.run_predictions import run_predictions
    from shardscope.results.store import read_document

    document = run_predictions(read_document(path) for path in args.results)
    atomic_write_json(args.out, document)
    print(f"{len(document['memory'])} training runs modeled ({len(document['memory_terms'])} whole peaks) of "
          f"{len(args.results)} result files; modeled, not measured")
    return 0


MODEL_HELP = ("preset (tiny, gpt2-small, llama-1b, mistral-7b), a JSON object of dimensions (shardscope's own or a "
              "config.json's keys), or the path of a Hugging Face config.json")


def _trainable(text: str) -> float:
    value = _fraction(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most 1, got {text!r}")
    return value


def with_attention(model: Any, attention: str | None) -> Any:
    """The ``--model`` value with the run's attention in place of its model's (``--attention``; None: as it is): a
    preset or a config.json path becomes its dimensions, a JSON object gains the key. ValueError on a bad value."""
    if attention is None:
        return model
    from shardscope.contracts.models import resolve_model

    name, cfg = resolve_model(model)
    return {"name": name, **replace(cfg, attention=attention).to_dict()}


def run_shape_args(p: argparse.ArgumentParser) -> None:
    """The flags that describe the run itself, shared by ``advise`` and ``memory``."""
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16",
                   help="training dtype (default bfloat16; float16 is sized as bfloat16: the same bytes)")
    p.add_argument("--activation-checkpointing", choices=CHECKPOINTING_MODES, default="none",
                   help="full: every block recomputed in backward (its input kept; its forward computed again but "
                        "the last matmul, which torch's checkpoint skips); selective_op: torchtitan's op-level "
                        "selective checkpointing (each block keeps its attention output and every other matmul's, "
                        "recomputes the rest); selective_layer: torchtitan's layer-level, every second block "
                        "checkpointed")
    p.add_argument("--trainable-fraction", type=_trainable, default=1.0, metavar="F",
                   help="share of the parameters that train (LoRA-style frozen weights): only they have gradients and "
                        "optimizer state (default 1)")
    p.add_argument("--offload-optimizer", choices=("none", "cpu"), default="none",
                   help="cpu: optimizer state and step on the host (ZeRO-Offload); the GPU keeps none of it")
    p.add_argument("--adamw", choices=ADAMW_IMPLEMENTATIONS, default="default",
                   help="the AdamW kernel the run steps with: fused (one kernel: DeepSpeed's FusedAdam, torch's "
                        "fused=True, 28 B per parameter), foreach (torch's multi-tensor default on a GPU since 2.0, "
                        "84 B and a temporary per parameter), for-loop (one tensor at a time: torch before 2.0, "
                        "foreach=False, the Hugging Face Trainer's adamw_hf; 84 B, temporaries of its largest tensors "
                        "alone), or default: the framework's (fused under DeepSpeed, foreach under DDP and FSDP)")
    p.add_argument("--attention", choices=ATTENTION_KINDS,
                   help="sdpa: torch's fused kernel (flash: no score matrix kept); eager: Hugging Face's eager code (a "
                        "float32 softmax, its cast and any attention dropout kept for every score); default: the "
                        "model's config's, else eager for the families transformers runs eagerly only (T5, BLOOM, "
                        "DeBERTa), else sdpa")
    p.add_argument("--ddp-bucket-view", action="store_true",
                   help="the run's DDP is built with gradient_as_bucket_view=True (this project's worker does): its "
                        "gradients are views of the all-reduce buckets; by default, as torch builds DDP (Hugging Face's "
                        "Trainer, Accelerate, Lightning), the buckets are a second copy of the gradients")
    from shardscope.costmodel.deepspeed_config import add_deepspeed_config_arg

    add_deepspeed_config_arg(p)


def _topology_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", required=True, metavar="FILE|auto|preset:NAME",
                   help="saved nvidia-smi topo -m / rocm-smi output or topology.json, 'auto' to probe, or preset:NAME")
    p.add_argument("--gpu", metavar="NAME", help="GPU model when the topology does not name it (e.g. H100, A100, L40S)")
    p.add_argument("--nic-gbps", type=_positive(float, "--nic-gbps"), help="NIC line rate in Gb/s for multi-node jobs")
    p.add_argument("--nics", type=_positive(int, "--nics"), metavar="N",
                   help="NICs per node a multi-node job uses (default: the topology's NICs next to GPUs, or the preset's)")
    p.add_argument("--calibrate", action="append", metavar="FILE",
                   help="measured rows on this topology: a collectives result, an imported or raw nccl-tests log (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--out", help="write the predictions document (kind 'predictions') to FILE")


def _cmd_accuracy(args: argparse.Namespace) -> int:
    """``shardscope accuracy``: the model's stored predictions against the measurements of the same jobs."""
    from shardscope.costmodel.ledger import format_ledger, ledger
    from shardscope.results.store import connect_readonly

    with connect_readonly(args.db) as con:
        book = ledger(con)
    print(dump_json(book.to_dict()) if args.json else format_ledger(book))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``advise`` and ``predict collectives`` to the ``shardscope`` parser."""
    from shardscope.contracts.names import GROUPED_STRATEGIES
    from shardscope.costmodel.advise import DEFAULT_STRATEGIES
    from shardscope.costmodel.step import (
        DEFAULT_MFU,
        DEFAULT_OVERLAP,
        DEFAULT_USABLE_FRACTION,
    )

    register_memory(sub)
    p = sub.add_parser("advise", help="rank strategies by modeled step time among those that fit, and say why")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--gpus", type=gpu_count, required=True, help="GPUs in the job (whole nodes when more than one node)")
    p.add_argument("--memory-gib", type=_positive(float, "--memory-gib"), help="GPU memory in GiB (overrides the topology and GPU table)")
    p.add_argument("--peak-tflops", type=_positive(float, "--peak-tflops"), help="dense bf16 peak TFLOP/s when the GPU is not in the table")
    p.add_argument("--strategies", help=f"comma-separated strategies to rank (default: {','.join(DEFAULT_STRATEGIES)}, "
                                         f"and {','.join(GROUPED_STRATEGIES)} where NVLink islands or nodes split the GPUs)")
    p.add_argument("--shard-size", type=_positive(int, "--shard-size"),
                   help="ranks of one HSDP shard group and one hpZ partition (default: one island's)")
    p.add_argument("--micro-batch", type=_positive(int, "--micro-batch"), default=1, help="sequences per GPU per step")
    p.add_argument("--seq-len", type=_positive(int, "--seq-len"), help="tokens per sequence (default: the model's, at most 4096)")
    p.add_argument("--mfu", type=_fraction, help="a constant model FLOPs utilisation of compute, e.g. "
                   f"{DEFAULT_MFU} (default: calibrated, else the matmuls on a roofline and the other ops' bytes at the "
                        "memory's bandwidth, through a published run)")
    p.add_argument("--overlap", type=_fraction,
                   help=f"a constant share of communication that may hide behind compute, e.g. {DEFAULT_OVERLAP} "
                        "(default: calibrated, else each strategy's schedule)")
    p.add_argument("--calibration-db", metavar="DB",
                   help="results database whose newest step calibration (`shardscope calibrate-step --store`) sets MFU and overlap")
    p.add_argument("--usable-memory", type=_fraction, default=DEFAULT_USABLE_FRACTION,
                   help=f"share of GPU memory the whole modeled peak may use (default {DEFAULT_USABLE_FRACTION})")
    run_shape_args(p)
    p.add_argument("--global-batch", type=_positive(int, "--global-batch"), metavar="G",
                   help="sequences per optimizer step over all ranks: each strategy ranked at its own largest "
                        "micro-batch that fits and divides G / ranks, accumulating to G "
                        "(default: --micro-batch, --grad-accum times)")
    p.add_argument("--grad-accum", type=_positive(int, "--grad-accum"), default=1, metavar="K",
                   help="micro-batches of --micro-batch accumulated per optimizer step, as the run does it, for every "
                        "strategy (default 1; --global-batch instead picks each strategy's own)")
    p.add_argument("--transport", choices=("default", "pcie"), default="default",
                   help="pcie: NVLink unused (NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)")
    p.add_argument("--reduce-dtype", choices=("float32", "bfloat16", "float16"),
                   help="dtype every strategy reduces gradients in (default: each framework's own: DDP under "
                        "autocast float32, the parameters' dtype; DeepSpeed and FSDP the training dtype)")
    p.add_argument("--deepspeed-version", metavar="X.Y.Z", type=_release,
                   help="the DeepSpeed release the run uses (default: the one installed here, if any); 0.18.5 and 0.18.6 "
                        "recount the backward's parameters in every ZeRO gradient hook, which advise then adds")
    _topology_args(p)
    p.set_defaults(func=_cmd_advise)

    predict = sub.add_parser("predict", help="modeled predictions for any topology (labelled modeled)")
    predict_sub = predict.add_subparsers(dest="predict_command", required=True, metavar="WHAT")
    p = predict_sub.add_parser("collectives", help="busbw vs message size and GPU count, nccl-tests semantics")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter", help="comma-separated collectives")
    p.add_argument("--gpus", type=_int_list, help="comma-separated world sizes (default: powers of two up to the GPU count)")
    p.add_argument("--min-bytes", type=_positive(int, "--min-bytes"), default=1024, help="smallest message in bytes (default 1024)")
    p.add_argument("--max-bytes", type=_positive(int, "--max-bytes"), default=8 * _GIB, help="largest message in bytes (default 8 GiB)")
    p.add_argument("--transport", choices=("default", "pcie"), default="default",
                   help="pcie: NVLink unused (NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)")
    p.add_argument("--algorithm", choices=("ring", "tree", "nvls", "nvls_tree"), help="restrict NCCL's choice (like NCCL_ALGO)")
    p.add_argument("--label", help="legend label of these predictions (figure 2 draws labelled ones as modeled fabrics)")
    p.add_argument("--fabric-label", help="fabric class a labelled prediction is coloured with (e.g. nvswitch, pcie)")
    _topology_args(p)
    p.set_defaults(func=_cmd_predict_collectives)
    p = predict_sub.add_parser("plan", help="collectives and strategy steps of every job of a plan.json (the pipeline's predictions)")
    p.add_argument("--topology", required=True, metavar="FILE|auto|preset:NAME", help="the topology the plan was made from")
    p.add_argument("--plan", required=True, metavar="FILE", help="plan.json written by `shardscope plan`")
    p.add_argument("--json", action="store_true", help="print the predictions document")
    p.add_argument("--out", help="write the predictions document (kind 'predictions') to FILE")
    p.set_defaults(func=_cmd_predict_plan)
    p = predict_sub.add_parser("runs", help="the memory models of measured training runs, for collect (the pipeline's "
                                            "run predictions)")
    p.add_argument("results", nargs="*", metavar="RESULT", help="training result files (other kinds are skipped)")
    p.add_argument("--out", required=True, help="write the document (kind 'run_predictions') to FILE")
    p.set_defaults(func=_cmd_predict_runs)

    p = sub.add_parser("calibrate-step", help="fit the step model's compute rate and overlap to the measured training runs")
    p.add_argument("--db", required=True, help="results database with measured training runs and collective sweeps")
    p.add_argument("--peak-tflops", type=_positive(float, "--peak-tflops"), help="the GPU's dense peak, to report MFU")
    p.add_argument("--store", action="store_true", help="keep the calibrations in the database (tables step_calibrations and collective_calibration_checks)")
    p.add_argument("--json", action="store_true", help="print the calibrations as JSON")
    p.set_defaults(func=_cmd_calibrate_step)

    p = sub.add_parser("accuracy", help="the cost model's error: stored predictions against the measured jobs, per op and strategy")
    p.add_argument("--db", required=True, help="results database (measurements and the predictions document collected with them)")
    p.add_argument("--json", action="store_true", help="print the ledger as JSON")
    p.set_defaults(func=_cmd_accuracy)
