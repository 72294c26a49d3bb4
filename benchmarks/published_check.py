"""The modeled answer against published training runs: ranking, speed ratios, memory and OOMs, split by use.

    .venv/bin/python benchmarks/published_check.py [--json] [--subprocess] [--cases FILE] [--ratios] [--plain]

Reads tests/data/published/training/cases.json (every number as published, with its source and quote; see
SOURCES.md beside it). For every run of every case it asks the model the question the run answers: ``shardscope
advise --json`` for cases with a speed measurement, ``shardscope memory --json`` for memory-only cases, with the
case's machine (a ``preset:`` topology or a synthetic one written to a temporary file), GPU, model (an HF-style
JSON object of dimensions, or a preset), micro-batch, sequence length and the run's flags (``--dtype``,
``--activation-checkpointing``, ``--global-batch``, ``--grad-accum``, ``--transport``, ``--trainable-fraction``,
``--offload-optimizer``, ``--adamw``). A flag the installed command does not have (``unrecognized arguments``) is
dropped and the run retried; each lost flag is printed with its case. Where the command refuses the HF-style JSON
object, the same config goes as a ``config.json`` path, then in shardscope's own field names, and (``advise`` only)
at last to the library function; the route is printed too.

It prints, for the cases that may set model defaults (``use: defaults``), the cases kept for checking
(``held_out``) and all of them:

- top-1: where one run of a case was clearly fastest (measured gap over 3%), whether the model ranks it first;
- pairwise: of the run pairs measured more than 3% apart, how many the model orders the same way;
- speed ratio: each run's throughput over its case's fastest, modeled against measured, as a factor >= 1;
- whole peak: |modeled - measured| / measured of each run's memory, like with like where the model says which
  basis its number is (the basis of each measurement is printed);
- OOM: runs that went out of memory and were predicted to fit (and runs that ran but were predicted not to);
- absolute throughput: modeled over measured tokens/s per GPU where the source gives tokens or samples per second;
- largest micro-batch: where a source says a run's micro-batch was the largest that ran (``micro_batch_is_max``),
  the largest ``shardscope memory`` says fits, over it, as a factor >= 1, and how many are below or above (a run's
  largest is a floor of the true one: the next size tried may have been far);
- collectives: the nccl-tests peaks of tests/data/published/collectives.json (benchmarks/validation.py's rows);
- the time one advise call takes.

Every modeled number is labelled modeled; nothing here is fitted. ``--json`` prints the summary as JSON;
``--ratios`` also lists each ranked case's throughput ratios, measured beside modeled; ``--plain`` asks with issue
31's flags alone (:func:`plain_argv`), without what a case says about how its software ran.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "data" / "published" / "training" / "cases.json"
GAP = 0.03
"""Two runs measured closer than this (relative) are a tie: no clear winner, no order to get right."""
SPLITS = ("defaults", "held_out")
_UNITS = {"GiB": 2**30, "GB": 1e9, "MiB": 2**20, "MB": 1e6}
_GATED = ("silu", "swiglu", "gelu_pytorch_tanh", "geglu")
"""HF activation names of gated MLPs (three matrices): their intermediate size is SwiGLU's own."""


# ----------------------------------------------------------------------------------------------- the data
def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    """Every case of the published training set."""
    return json.loads(Path(path).read_text())["cases"]


def memory_bytes(memory: Mapping[str, Any]) -> float:
    """Bytes of a published memory figure ``{"value", "unit"}`` (GiB, GB, MiB or MB as the source wrote it)."""
    return float(memory["value"]) * _UNITS[memory["unit"]]


def run_model(case: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """The model of a run: its own where a case mixes models, else the case's."""
    return dict(run.get("model") or case["model"])


def run_seq_len(case: Mapping[str, Any], run: Mapping[str, Any]) -> int:
    """Tokens per sequence of a run (its own, else the case's)."""
    return int(run.get("seq_len") or case["seq_len"])


def internal_dims(hf: Mapping[str, Any], seq_len: int) -> dict[str, Any]:
    """shardscope's own model fields for an HF-style config: for a command that takes no HF keys.

    Non-gated MLPs (GPT-2's, T5's, BERT-like GELU/ReLU: two matrices) become the SwiGLU of the same weights
    (2/3 of the intermediate size), as the ``gpt2-small`` preset does; GPT-2's ``n_inner`` null is 4 x width.
    """
    width = hf.get("hidden_size") or hf.get("n_embd") or hf.get("d_model")
    layers = hf.get("num_hidden_layers") or hf.get("n_layer") or hf.get("num_layers")
    if hf.get("num_decoder_layers") and hf.get("num_layers"):
        layers = hf["num_layers"] + hf["num_decoder_layers"]
    heads = hf.get("num_attention_heads") or hf.get("n_head") or hf.get("num_heads")
    ff = hf.get("intermediate_size") or hf.get("n_inner") or hf.get("d_ff") or 4 * width
    act = str(hf.get("hidden_act") or hf.get("activation_function") or hf.get("feed_forward_proj") or "silu")
    if act not in _GATED:
        ff = round(ff * 2 / 3)
    positions = hf.get("max_position_embeddings") or hf.get("n_positions") or seq_len
    return {"n_layers": int(layers), "d_model": int(width), "n_heads": int(heads),
            "n_kv_heads": int(hf.get("num_key_value_heads") or heads), "d_ff": int(ff),
            "vocab_size": int(hf["vocab_size"]), "max_seq_len": int(max(positions, seq_len)),
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True))}


def measured_throughput(case: Mapping[str, Any], run: Mapping[str, Any]) -> float | None:
    """The run's measured throughput in the case's comparison unit (per job or per GPU), or None.

    Only ratios inside one case are used: ``work_time_s`` (time of the case's fixed work) counts as 1/time.
    """
    m = run["measured"]
    if m.get("outcome") != "ok":
        return None
    per_gpu = case.get("compare") == "per_gpu"
    gpus = run["gpus"]
    if m.get("tokens_per_s_per_gpu") is not None:
        return m["tokens_per_s_per_gpu"] * (1 if per_gpu else gpus)
    if m.get("samples_per_s") is not None:
        return m["samples_per_s"] / (gpus if per_gpu else 1)
    if m.get("work_time_s") is not None:
        return 1.0 / m["work_time_s"] / (gpus if per_gpu else 1)
    return None


def measured_tokens_per_gpu(case: Mapping[str, Any], run: Mapping[str, Any]) -> float | None:
    """Measured tokens/s per GPU where the source gives tokens or samples per second (samples x seq_len, derived)."""
    m = run["measured"]
    if m.get("outcome") != "ok":
        return None
    if m.get("tokens_per_s_per_gpu") is not None:
        return float(m["tokens_per_s_per_gpu"])
    if m.get("samples_per_s") is not None:
        return m["samples_per_s"] * run_seq_len(case, run) / run["gpus"]
    return None


# --------------------------------------------------------------------------------------------- the asking
@dataclass
class Answer:
    """The modeled answer for one run (every number modeled)."""

    fits: bool | None
    peak_bytes: float | None
    peak_key: str
    """The key the peak came from, and so its basis: ``peak_bytes`` (the GPU allocator's peak, by the contract) or
    an older key (``memory_total_bytes``: the whole modeled peak, no basis stated)."""
    tokens_per_s: float | None
    """Per job."""
    step_time_s: float | None
    micro_batch: int | None
    seconds: float
    """Wall time of the call that answered."""
    route: str
    """``cli``, ``cli (own fields)`` or ``library``: how the model was given."""
    lost: list[str] = field(default_factory=list)
    """Flags the installed command did not take (dropped), or values it took in another form."""
    allocated_bytes: float | None = None
    device_bytes: float | None = None
    """The peak as nvidia-smi sees it: the allocator's peak and the CUDA context and NCCL buffers beside it."""


def _topology_arg(case: Mapping[str, Any], workdir: Path) -> tuple[str, list[str]]:
    """(``--topology`` value, extra flags) of a case's machine: a preset, or a synthetic topology.json written to
    ``workdir`` with its NICs given as ``--nics``/``--nic-gbps`` (topology.json has no network block)."""
    spec = case["hardware"]["topology"]
    if "preset" in spec:
        return f"preset:{spec['preset']}", []
    from shardscope.costmodel.presets import synthetic_topology
    from shardscope.topology.model import from_dict

    kwargs = dict(spec["synthetic"])
    nic_gbps, nics = kwargs.pop("nic_gbps", None), kwargs.get("rail_nics")
    kwargs.pop("nic_kind", None)
    doc = from_dict(synthetic_topology(**kwargs)).to_dict()
    doc["accelerator"] = "nvidia"
    path = workdir / f"{case['id']}.topology.json"
    path.write_text(json.dumps(doc))
    extra = (["--nic-gbps", f"{nic_gbps:g}"] if nic_gbps else []) + (["--nics", str(nics)] if nic_gbps and nics else [])
    return str(path), extra


def _gpu_memory(case: Mapping[str, Any]) -> float | None:
    """Bytes of one GPU: the case's stated figure, else the GPU table's."""
    hw = case["hardware"]
    if hw.get("memory"):
        return memory_bytes(hw["memory"])
    from shardscope.costmodel.hardware import spec_for_name

    spec = spec_for_name(hw.get("gpu"))
    return float(spec.memory_bytes) if spec and spec.memory_bytes else None


def _flag_pairs(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(flag, value) of issue 31's flags that describe the run; checkpointing named only ``selective`` (which of
    torchtitan's two unsaid) is given as full."""
    ac = run.get("activation_checkpointing", "none")
    pairs = [("--dtype", run["dtype"]), ("--activation-checkpointing", "full" if ac == "selective" else ac)]
    if run.get("global_batch"):
        pairs.append(("--global-batch", str(run["global_batch"])))
    if run.get("grad_accum", 1) > 1:
        pairs.append(("--grad-accum", str(run["grad_accum"])))
    if run.get("transport", "default") != "default":
        pairs.append(("--transport", run["transport"]))
    if run.get("trainable_fraction") is not None:
        pairs.append(("--trainable-fraction", f"{run['trainable_fraction']:.6g}"))
    if run.get("offload_optimizer", "none") != "none":
        pairs.append(("--offload-optimizer", run["offload_optimizer"]))
    if run.get("adamw", "default") != "default":
        pairs.append(("--adamw", run["adamw"]))
    return pairs


def _run_flags(case: Mapping[str, Any], run: Mapping[str, Any]) -> list[str]:
    """The flags of issue 31 that describe the run (each may be unknown to the installed command)."""
    return [token for pair in _flag_pairs(run) for token in pair]


#: What ``--plain`` leaves out: the flags beyond issue 31's list that describe how a run's software ran (the AdamW
#: loop, the DeepSpeed release and config, the attention implementation, DDP's bucket view, the reduce dtype), and
#: the keys of a model object that a Hugging Face ``config.json`` on the Hub does not carry (the attention
#: implementation a run chose, its parameter-tensor count, the norm its framework used).
BEYOND_ISSUE_FLAGS = ("--adamw", "--deepspeed-version", "--deepspeed-config", "--attention", "--reduce-dtype")
BEYOND_ISSUE_SWITCHES = ("--ddp-bucket-view",)
BEYOND_CONFIG_KEYS = ("attn_implementation", "_attn_implementation", "attention", "parameter_tensors", "norm")


def plain_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with only what issue 31 lists to describe a run: :data:`BEYOND_ISSUE_FLAGS` and their values,
    :data:`BEYOND_ISSUE_SWITCHES`, and a JSON ``--model`` object's :data:`BEYOND_CONFIG_KEYS` taken out; the answer
    a user gets who gives the model's published config and the run's shape alone."""
    out: list[str] = []
    skip = False
    for i, token in enumerate(argv):
        if skip or token in BEYOND_ISSUE_SWITCHES:
            skip = False
            continue
        if token in BEYOND_ISSUE_FLAGS:
            skip = True
            continue
        if i and argv[i - 1] == "--model" and token.startswith("{"):
            token = json.dumps({k: v for k, v in json.loads(token).items() if k not in BEYOND_CONFIG_KEYS},
                               separators=(",", ":"))
        out.append(token)
    return out


def _model_arg(model: Mapping[str, Any], workdir: Path, model_as: str = "json") -> str:
    """``--model``: a preset name where the case names one, else the HF-style object as JSON text or (``model_as``
    ``path``) as a ``config.json`` written to ``workdir``."""
    if model.get("preset"):
        return model["preset"]
    text = json.dumps(model["hf"], separators=(",", ":"))
    if model_as != "path":
        return text
    path = workdir / f"model-{hashlib.sha1(text.encode()).hexdigest()[:12]}" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def advise_argv(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path, model_as: str = "json") -> list[str]:
    """``shardscope advise`` arguments for one run: the strategy alone at the run's micro-batch."""
    topo, extra = _topology_arg(case, workdir)
    hw, model = case["hardware"], run_model(case, run)
    argv = ["advise", "--topology", topo, *extra, "--model", _model_arg(model, workdir, model_as),
            "--gpus", str(run["gpus"]),
            "--strategies", run["strategy"], "--micro-batch", str(run["micro_batch"]),
            "--seq-len", str(run_seq_len(case, run)), "--json"]
    if hw.get("gpu") and not hw.get("peak_tflops"):  # a GPU the table lacks is named by the topology alone
        argv += ["--gpu", hw["gpu"]]
    if hw.get("memory"):
        argv += ["--memory-gib", f"{memory_bytes(hw['memory']) / 2**30:.4f}"]
    if hw.get("peak_tflops"):
        argv += ["--peak-tflops", f"{hw['peak_tflops']:g}"]
    if run.get("shard_size"):
        argv += ["--shard-size", str(run["shard_size"])]
    # the DeepSpeed release the runs used where the source pins one; else advise takes the one installed here
    argv += ["--deepspeed-version", case["deepspeed_version"]] if case.get("deepspeed_version") else []
    return argv + _deepspeed_config_arg(case, workdir) + _run_flags(case, run)


def _deepspeed_config_arg(case: Mapping[str, Any], workdir: Path) -> list[str]:
    """``--deepspeed-config FILE`` where the case gives the DeepSpeed config its runs used (written to ``workdir``)."""
    if not case.get("deepspeed_config"):
        return []
    path = workdir / f"{case['id']}.ds_config.json"
    path.write_text(json.dumps(case["deepspeed_config"]), encoding="utf-8")
    return ["--deepspeed-config", str(path)]


def memory_argv(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path, model_as: str = "json") -> list[str]:
    """``shardscope memory`` arguments for one run of a memory-only case."""
    model, gpu_bytes = run_model(case, run), _gpu_memory(case)
    argv = ["memory", "--model", _model_arg(model, workdir, model_as), "--gpus", str(run["gpus"]),
            "--strategy", run["strategy"],
            "--micro-batch", str(run["micro_batch"]), "--seq-len", str(run_seq_len(case, run)), "--json",
            "--no-deepspeed-estimate"]
    if gpu_bytes:
        argv += ["--gpu-memory-gb", f"{gpu_bytes / 1e9:.4f}"]
    return argv + _run_flags(case, run)


def call_inprocess(argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the ``shardscope`` command line, run in this process."""
    from shardscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def call_subprocess(argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m shardscope`` in a child process."""
    done = subprocess.run([sys.executable, "-m", "shardscope", *argv], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def _unrecognized(stderr: str) -> list[str]:
    """The flags argparse named as unrecognized (their values dropped with them)."""
    marker = "unrecognized arguments:"
    if marker not in stderr:
        return []
    tail = stderr.split(marker, 1)[1].split("(see", 1)[0].split("\n", 1)[0]
    return [token for token in tail.split() if token.startswith("--")]


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` less ``flag`` and its value."""
    i = argv.index(flag)
    has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
    return argv[:i] + argv[i + 1 + has_value:]


def _replace_value(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return argv[:i + 1] + [value] + argv[i + 2:]


def _model_rejected(stderr: str) -> bool:
    """Whether the command refused the ``--model`` value itself (not a flag)."""
    text = stderr.lower()
    return "model" in text and ("preset" in text or "field" in text or "json" in text or "dimension" in text)


def call_with_fallbacks(argv: list[str], call: Callable[[Sequence[str]], tuple[int, str, str]],
                        other_models: Sequence[tuple[str, str]] = ()) -> tuple[int, str, str, list[str], str, float]:
    """Run ``argv``, dropping flags the command does not know, giving ``--dtype float16`` as bfloat16 where float16 is
    not a choice, and, where the ``--model`` value itself is refused, the next of ``other_models`` ((route, value):
    a config.json path, shardscope's own fields) in turn.

    Returns (status, stdout, stderr, what was lost, route, seconds of the last call).
    """
    lost: list[str] = []
    route = "cli"
    others = list(other_models)
    for _ in range(12):
        start = time.perf_counter()
        code, out, err = call(argv)
        seconds = time.perf_counter() - start
        if code == 0:
            return code, out, err, lost, route, seconds
        dropped = [f for f in _unrecognized(err) if f in argv]
        if dropped:
            for flag in dropped:
                i = argv.index(flag)
                value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
                argv = _without(argv, flag)
                lost.append(f"{flag} {value}".strip())
            continue
        if "--dtype" in argv and "float16" in argv and "invalid choice" in err and "float16" in err:
            argv = _replace_value(argv, "--dtype", "bfloat16")
            lost.append("--dtype float16 (given as bfloat16)")
            continue
        if others and _model_rejected(err):
            route, value = others.pop(0)
            argv = _replace_value(argv, "--model", value)
            continue
        return code, out, err, lost, route, seconds
    return code, out, err, lost, route, seconds


def _entry_number(entry: Mapping[str, Any], *keys: str) -> tuple[float | None, str]:
    for key in keys:
        if entry.get(key) is not None:
            return float(entry[key]), key
    return None, keys[-1]


def answer_from_advise(doc: Mapping[str, Any], strategy: str, seq_len: int, micro_batch: int, seconds: float,
                       route: str, lost: list[str]) -> Answer:
    """An :class:`Answer` from ``advise --json``: the strategy's ranking entry, new keys first, today's keys else."""
    entry = next(e for e in doc["ranking"] if e["strategy"] == strategy)
    peak, key = _entry_number(entry, "peak_bytes", "memory_total_bytes")
    step = entry.get("step_time_s")
    mb = entry.get("micro_batch") or micro_batch
    tokens = entry.get("tokens_per_s")
    if tokens is None and step:
        per_step = entry.get("tokens_per_step") or mb * seq_len * entry.get("gpus", 1)
        tokens = per_step * (entry.get("grad_accum") or 1) / step
    allocated, _ = _entry_number(entry, "allocated_peak_bytes", "peak_allocated_bytes")
    device, _ = _entry_number(entry, "device_bytes")
    return Answer(fits=entry.get("fits"), peak_bytes=peak, peak_key=key, tokens_per_s=tokens, step_time_s=step,
                  micro_batch=mb, seconds=seconds, route=route, lost=lost, allocated_bytes=allocated,
                  device_bytes=device)


def answer_from_memory(rows: Sequence[Mapping[str, Any]], strategy: str, seconds: float, route: str,
                       lost: list[str]) -> Answer:
    """An :class:`Answer` from ``memory --json``: the strategy's row, its whole peak and whether that fits."""
    row = next(r for r in rows if r["strategy"] == strategy)
    peak = (row.get("peak") or {}).get("peak_bytes")
    allocated = (row.get("peak") or {}).get("allocated_peak_bytes")
    return Answer(fits=row.get("peak_fits", row.get("fits")), peak_bytes=peak, peak_key="peak.peak_bytes",
                  tokens_per_s=None, step_time_s=None, micro_batch=row.get("micro_batch"), seconds=seconds,
                  route=route, lost=lost, allocated_bytes=allocated,
                  device_bytes=(row.get("peak") or {}).get("device_bytes"))


def library_advise(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path) -> Answer:
    """The answer of :func:`shardscope.costmodel.advise.advise` for a command line that takes no model dimensions:
    the same machine and flags as far as the library's ``StepAssumptions`` has them (the others are lost)."""
    from shardscope.costmodel.advise import advise
    from shardscope.costmodel.commands import load_topology
    from shardscope.costmodel.step import StepAssumptions

    topo, extra = _topology_arg(case, workdir)
    doc, source = load_topology(topo)
    hw, seq = case["hardware"], run_seq_len(case, run)
    dims = internal_dims(run_model(case, run)["hf"], seq)
    dtype = "float32" if run["dtype"] == "float32" else "bfloat16"
    library_has = {("--dtype", "bfloat16"), ("--dtype", "float32"), ("--activation-checkpointing", "none")}
    lost = [f"{flag} {value}" for flag, value in _flag_pairs(run) if (flag, value) not in library_has]
    nic = dict(zip(extra[::2], extra[1::2]))
    start = time.perf_counter()
    result = advise(doc, dims, run["gpus"], gpu_name=None if hw.get("peak_tflops") else hw.get("gpu"),
                    memory_bytes=int(memory_bytes(hw["memory"])) if hw.get("memory") else None,
                    peak_tflops=hw.get("peak_tflops"),
                    nic_gbps=float(nic["--nic-gbps"]) if "--nic-gbps" in nic else None,
                    nics=int(nic["--nics"]) if "--nics" in nic else None, strategies=(run["strategy"],),
                    assumptions=StepAssumptions(micro_batch=run["micro_batch"], seq_len=seq, dtype=dtype),
                    source=source, shard_sizes={run["strategy"]: run["shard_size"]} if run.get("shard_size") else None)
    seconds = time.perf_counter() - start
    return answer_from_advise(result.to_dict(), run["strategy"], seq, run["micro_batch"], seconds, "library", lost)


def model_fallbacks(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path,
                    model_as: str = "json") -> list[tuple[str, str]]:
    """(route, --model value) to try where the command refuses the run's model as given: its config.json path (when it
    was given as JSON), then shardscope's own fields; none for a preset."""
    model = run_model(case, run)
    if model.get("preset"):
        return []
    others = [("cli (config.json)", _model_arg(model, workdir, "path"))] if model_as != "path" else []
    others.append(("cli (own fields)", json.dumps(internal_dims(model["hf"], run_seq_len(case, run)),
                                                  separators=(",", ":"))))
    return others


def ask(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path,
        call: Callable[[Sequence[str]], tuple[int, str, str]] = call_inprocess, model_as: str = "json") -> Answer:
    """The modeled answer for one run: ``memory`` for a memory-only case, else ``advise``, the model given as JSON
    text or a config.json path (``model_as``); RuntimeError when the command refuses the question for another reason
    than a missing flag or the model's form."""
    seq = run_seq_len(case, run)
    others = model_fallbacks(case, run, workdir, model_as)
    if case.get("memory_only"):
        code, out, err, lost, route, seconds = call_with_fallbacks(memory_argv(case, run, workdir, model_as), call,
                                                                   others)
        if code != 0:
            raise RuntimeError(f"{case['id']} / {run['label']}: memory exited {code}: {err.strip()[-300:]}")
        return answer_from_memory(json.loads(out), run["strategy"], seconds, route, lost)
    code, out, err, lost, route, seconds = call_with_fallbacks(advise_argv(case, run, workdir, model_as), call,
                                                               others)
    if code == 0:
        return answer_from_advise(json.loads(out), run["strategy"], seq, run["micro_batch"], seconds, route, lost)
    if _model_rejected(err):
        return library_advise(case, run, workdir)
    raise RuntimeError(f"{case['id']} / {run['label']}: advise exited {code}: {err.strip()[-300:]}")


def ask_largest_micro_batch(case: Mapping[str, Any], run: Mapping[str, Any], workdir: Path,
                            call: Callable[[Sequence[str]], tuple[int, str, str]] = call_inprocess,
                            model_as: str = "json") -> int | None:
    """The largest micro-batch ``shardscope memory`` says fits the case's GPU for the run's strategy and flags (its
    ``largest_micro_batch``, the whole peak against all of the GPU's memory, as advise's fit is); None when the command
    gives none or refuses the question."""
    argv = memory_argv(case, run, workdir, model_as) + ["--usable-memory", "1"]
    code, out, _, _, _, _ = call_with_fallbacks(argv, call, model_fallbacks(case, run, workdir, model_as))
    if code != 0:
        return None
    rows = [row for row in json.loads(out) if row.get("strategy") == run["strategy"]]
    value = rows[0].get("largest_micro_batch") if rows else None
    return int(value) if value is not None else None


# -------------------------------------------------------------------------------------------- the scoring
def clear_winner(values: Mapping[str, float], gap: float = GAP) -> str | None:
    """The key of the largest value where it beats the second by more than ``gap`` (relative), else None."""
    if len(values) < 2:
        return None
    ordered = sorted(values, key=lambda k: values[k], reverse=True)
    first, second = values[ordered[0]], values[ordered[1]]
    return ordered[0] if first > second * (1 + gap) else None


def top1(measured: Mapping[str, float], modeled: Mapping[str, float], gap: float = GAP) -> bool | None:
    """Whether the model ranks the measured clear winner first (None: no clear winner, or not modeled)."""
    winner = clear_winner(measured, gap)
    if winner is None or any(k not in modeled for k in measured):
        return None
    best = max(modeled[k] for k in measured)
    return modeled[winner] == best and sum(modeled[k] == best for k in measured) == 1


def pairwise(measured: Mapping[str, float], modeled: Mapping[str, float], gap: float = GAP) -> tuple[int, int]:
    """(pairs ordered as measured, pairs measured more than ``gap`` apart); a modeled tie counts as a miss."""
    keys = [k for k in measured if k in modeled]
    right = total = 0
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            hi, lo = (a, b) if measured[a] >= measured[b] else (b, a)
            if measured[hi] <= measured[lo] * (1 + gap):
                continue
            total += 1
            right += modeled[hi] > modeled[lo]
    return right, total


def ratio_errors(measured: Mapping[str, float], modeled: Mapping[str, float]) -> list[float]:
    """Each run's throughput over the case's measured-fastest run, modeled against measured, as a factor >= 1."""
    keys = [k for k in measured if k in modeled and modeled[k] > 0]
    if len(keys) < 2:
        return []
    best = max(keys, key=lambda k: measured[k])
    out = []
    for k in keys:
        if k == best:
            continue
        q = (modeled[k] / modeled[best]) / (measured[k] / measured[best])
        out.append(max(q, 1 / q))
    return out


def memory_error(modeled_bytes: float, measured_bytes: float) -> float:
    """Signed relative error of a modeled peak: (modeled - measured) / measured."""
    return (modeled_bytes - measured_bytes) / measured_bytes


def oom_misses(rows: Iterable[tuple[str, bool | None]]) -> tuple[int, int, int, int]:
    """(runs that went out of memory, of those predicted to fit, runs that ran, of those predicted not to fit)
    from (measured outcome, modeled fits) pairs; a run whose fit is unknown (None) is not counted."""
    ooms = fit_ooms = oks = false_ooms = 0
    for outcome, fits in rows:
        if fits is None:
            continue
        if outcome == "oom":
            ooms += 1
            fit_ooms += fits is True
        elif outcome == "ok":
            oks += 1
            false_ooms += fits is False
    return ooms, fit_ooms, oks, false_ooms


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """{"n", "median", "worst"} of a list of errors (None when empty)."""
    if not values:
        return {"n": 0, "median": None, "worst": None}
    return {"n": len(values), "median": statistics.median(values), "worst": max(values)}


# ------------------------------------------------------------------------------------------ the checking
@dataclass
class RunResult:
    """One run: what was measured and what the model answered."""

    case: str
    use: str
    label: str
    strategy: str
    gpus: int
    micro_batch: int
    outcome: str
    measured_throughput: float | None
    modeled_throughput: float | None
    measured_tokens_per_gpu: float | None
    measured_memory: float | None
    memory_basis: str | None
    answer: Answer | None
    error: str | None = None
    measured_largest: int | None = None
    """The run's micro-batch where the source says it was the largest that ran (``micro_batch_is_max``)."""
    modeled_largest: int | None = None
    """The model's largest micro-batch that fits, for such a run."""
    selective: bool = False
    """Selective activation checkpointing of no named kind (``selective``): asked as full, so its memory and fit are
    not compared (selective holds more than full and less than none); ``selective_op`` and ``selective_layer`` are
    asked as they are."""

    @property
    def same_micro_batch(self) -> bool:
        """Whether memory and fit compare: the model answered at the run's micro-batch and checkpointing."""
        return self.answer is not None and self.answer.micro_batch in (None, self.micro_batch) and not self.selective

    @property
    def modeled_tokens_per_gpu(self) -> float | None:
        a = self.answer
        return a.tokens_per_s / self.gpus if a and a.tokens_per_s else None

    def modeled_memory(self) -> tuple[float | None, str]:
        """(modeled bytes to compare with the measurement, which modeled number): the model's allocated peak for an
        allocated measurement where it gives one, else its peak."""
        a = self.answer
        if a is None or not self.same_micro_batch:
            return None, "-"
        if self.memory_basis == "allocated" and a.allocated_bytes is not None:
            return a.allocated_bytes, "allocated_peak_bytes"
        if self.memory_basis == "nvidia-smi" and a.device_bytes is not None:
            return a.device_bytes, "device_bytes"
        return a.peak_bytes, a.peak_key


def check_case(case: Mapping[str, Any], workdir: Path, call: Callable[[Sequence[str]], tuple[int, str, str]],
               model_as: str = "json") -> list[RunResult]:
    """Ask the model about every run of a case."""
    out = []
    for run in case["runs"]:
        m = run["measured"]
        mem = m.get("memory")
        try:
            answer, error = ask(case, run, workdir, call, model_as), None
        except (RuntimeError, KeyError, StopIteration, ValueError) as exc:
            answer, error = None, str(exc)
        if answer and answer.micro_batch not in (None, run["micro_batch"]):
            answer.lost.append(f"micro-batch {run['micro_batch']} answered at {answer.micro_batch} "
                               "(memory and OOM not compared)")
        largest = None
        if run.get("micro_batch_is_max") and m["outcome"] == "ok" and run.get("activation_checkpointing") != "selective":
            largest = ask_largest_micro_batch(case, run, workdir, call, model_as)
        thr = None
        if answer and answer.tokens_per_s:
            thr = answer.tokens_per_s / (run["gpus"] if case.get("compare") == "per_gpu" else 1)
        out.append(RunResult(case=case["id"], use=case["use"], label=run["label"], strategy=run["strategy"],
                             gpus=run["gpus"], micro_batch=run["micro_batch"], outcome=m["outcome"],
                             measured_throughput=measured_throughput(case, run), modeled_throughput=thr,
                             measured_tokens_per_gpu=measured_tokens_per_gpu(case, run),
                             measured_memory=memory_bytes(mem) if mem and m["outcome"] == "ok" else None,
                             memory_basis=mem.get("basis") if mem else None, answer=answer, error=error,
                             measured_largest=run["micro_batch"] if run.get("micro_batch_is_max") else None,
                             modeled_largest=largest, selective=run.get("activation_checkpointing") == "selective"))
    return out


def summarize(results: Sequence[RunResult], cases: Sequence[Mapping[str, Any]], gap: float = GAP) -> dict[str, Any]:
    """The figures of one group of runs (their cases' rankings only where a case compares its runs)."""
    ranked = {c["id"] for c in cases if not c.get("absolute_only") and not c.get("memory_only")}
    by_case: dict[str, list[RunResult]] = {}
    for r in results:
        by_case.setdefault(r.case, []).append(r)
    tops, pairs_right, pairs_total, ratios = [], 0, 0, []
    for cid, rows in by_case.items():
        if cid not in ranked:
            continue
        measured = {r.label: r.measured_throughput for r in rows if r.measured_throughput}
        modeled = {r.label: r.modeled_throughput for r in rows if r.modeled_throughput and r.label in measured}
        verdict = top1(measured, modeled, gap)
        if verdict is not None:
            tops.append(verdict)
        right, total = pairwise(measured, modeled, gap)
        pairs_right, pairs_total = pairs_right + right, pairs_total + total
        ratios += ratio_errors(measured, modeled)
    mem_signed = []
    for r in results:
        modeled, _ = r.modeled_memory()
        if r.measured_memory and modeled:
            mem_signed.append(memory_error(modeled, r.measured_memory))
    ooms, fit_ooms, oks, false_ooms = oom_misses((r.outcome, r.answer.fits if r.same_micro_batch else None)
                                                 for r in results)
    no_absolute = {c["id"] for c in cases if c.get("absolute_throughput") is False}
    absolute = [max(q, 1 / q) for r in results
                if r.measured_tokens_per_gpu and r.modeled_tokens_per_gpu and r.case not in no_absolute
                for q in [r.modeled_tokens_per_gpu / r.measured_tokens_per_gpu]]
    largest = [(r.modeled_largest / r.measured_largest) for r in results
               if r.measured_largest and r.modeled_largest is not None and r.outcome == "ok"]
    seconds = [r.answer.seconds for r in results if r.answer and r.answer.route.startswith("cli")]
    return {
        "cases": len(by_case), "runs": len(results), "errors": sum(r.error is not None for r in results),
        "top1": {"right": sum(tops), "of": len(tops)},
        "pairwise": {"right": pairs_right, "of": pairs_total},
        "speed_ratio_factor": spread(ratios),
        "whole_peak_abs_error": dict(spread([abs(e) for e in mem_signed]), too_low=sum(e < 0 for e in mem_signed)),
        "oom": {"went_oom": ooms, "predicted_to_fit": fit_ooms, "ran": oks, "ran_but_predicted_not_to_fit": false_ooms},
        "absolute_throughput_factor": spread(absolute),
        "largest_micro_batch_factor": dict(spread([max(q, 1 / q) if q else math.inf for q in largest]),
                                           modeled_below=sum(q < 1 for q in largest),
                                           modeled_above=sum(q > 1 for q in largest)),
        "seconds_per_call": spread(seconds),
    }


PROBE = ("advise", "--topology", "preset:hgx-h100", "--model", "mistral-7b", "--gpus", "8", "--json")
"""The question the time of one advise call is measured on (issue 31's Mistral-7B on 8 GPUs), beside the cases'."""


def probe_seconds(call: Callable[[Sequence[str]], tuple[int, str, str]], repeats: int = 5) -> dict[str, Any]:
    """Seconds of ``repeats`` calls of :data:`PROBE` (median and slowest); in process: without interpreter start."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        code, _, err = call(PROBE)
        times.append(time.perf_counter() - start)
        if code != 0:
            raise RuntimeError(f"advise probe exited {code}: {err.strip()[-300:]}")
    return dict(spread(times), question=" ".join(PROBE))


def collectives_summary() -> dict[str, Any]:
    """Median and worst |error| of the cost model on the published nccl-tests peaks (validation.py's rows)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from costmodel.published import validation_rows

    rows = validation_rows()
    errors = [abs(row["ratio"] - 1) for row in rows]
    return dict(spread(errors), worst_id=max(rows, key=lambda row: abs(row["ratio"] - 1))["id"])


def check(cases: Sequence[Mapping[str, Any]], call: Callable[[Sequence[str]], tuple[int, str, str]] = call_inprocess,
          with_collectives: bool = True, model_as: str = "json") -> tuple[list[RunResult], dict[str, Any]]:
    """Every run's result and the summary per split (``defaults``, ``held_out``, ``all``), plus the collectives."""
    with tempfile.TemporaryDirectory(prefix="published-check-") as tmp:
        results = [r for case in cases for r in check_case(case, Path(tmp), call, model_as)]
    summary = {use: summarize([r for r in results if r.use == use], [c for c in cases if c["use"] == use])
               for use in SPLITS}
    summary["all"] = summarize(results, cases)
    lost: dict[str, set[str]] = {}
    for r in results:
        for flag in r.answer.lost if r.answer else ():
            lost.setdefault(r.case, set()).add(flag)
    summary["lost_flags"] = {case: sorted(flags) for case, flags in sorted(lost.items())}
    summary["routes"] = sorted({r.answer.route for r in results if r.answer})
    summary["peak_keys"] = sorted({r.answer.peak_key for r in results if r.answer})
    if with_collectives:
        summary["collectives"] = collectives_summary()
        summary["advise_probe_seconds"] = probe_seconds(call)
    return results, summary


# ------------------------------------------------------------------------------------------ the printing
def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f}"


def print_runs(results: Sequence[RunResult]) -> None:
    """One line per run: measured beside modeled."""
    print(f"{'case / run':<62} {'use':<8} {'strategy':<12} {'gpus':>4} {'mb':>4} {'outcome':<7} {'thr meas':>9} "
          f"{'thr mod':>9} {'mem GiB meas':>12} {'basis':<9} {'mod GiB':>8} {'fits':<5}")
    for r in results:
        name = f"{r.case[:34]} / {r.label}"[:62]
        a = r.answer
        modeled_mem, _ = r.modeled_memory()
        fits = "-" if a is None or a.fits is None else ("yes" if a.fits else "no")
        print(f"{name:<62} {r.use:<8} {r.strategy:<12} {r.gpus:>4} {r.micro_batch:>4} {r.outcome:<7} "
              f"{_num(r.measured_throughput, '9.4g')} {_num(r.modeled_throughput, '9.4g')} "
              f"{_gb(r.measured_memory):>12} "
              f"{(r.memory_basis or '-'):<9} {_gb(modeled_mem):>8} {fits:<5}"
              + (f"  ERROR {r.error}" if r.error else ""))
    print("thr: throughput in each case's own unit (only ratios inside a case mean anything); modeled numbers are "
          "modeled; mem: the measurement's basis, beside the model's peak")


def print_ratios(results: Sequence[RunResult], cases: Sequence[Mapping[str, Any]], gap: float = GAP) -> None:
    """Per ranked case: each run's measured and modeled throughput relative to the case's first run, and the clear
    winner each names (``-``: none clearer than ``gap``), so a miss shows which ratio the model squeezes."""
    ranked = {c["id"] for c in cases if not c.get("absolute_only") and not c.get("memory_only")}
    for cid in dict.fromkeys(r.case for r in results if r.case in ranked):
        rows = [r for r in results if r.case == cid and r.measured_throughput and r.modeled_throughput]
        if len(rows) < 2:
            continue
        measured = {r.label: r.measured_throughput for r in rows}
        modeled = {r.label: r.modeled_throughput for r in rows}
        base = rows[0]
        print(f"\n{cid} [{base.use}]: clear winner measured {clear_winner(measured, gap) or '-'}, "
              f"modeled {clear_winner(modeled, gap) or '-'}")
        for r in rows:
            print(f"  {r.label[:48]:<48} {r.strategy:<12} mb {r.micro_batch:<4} measured "
                  f"{r.measured_throughput / base.measured_throughput:6.2f}  modeled "
                  f"{r.modeled_throughput / base.modeled_throughput:6.2f}")


def print_summary(summary: Mapping[str, Any]) -> None:
    """The figures per split and overall, then lost flags, routes and collectives."""
    def pct(part: int, whole: int) -> str:
        return f"{part}/{whole}" + (f" ({part / whole:.0%})" if whole else "")

    for use in (*SPLITS, "all"):
        s = summary[use]
        ratio, mem, absolute = s["speed_ratio_factor"], s["whole_peak_abs_error"], s["absolute_throughput_factor"]
        unanswered = f", {s['errors']} not answered" if s["errors"] else ""
        print(f"\n[{use}] {s['cases']} cases, {s['runs']} runs{unanswered}")
        print(f"  top-1 where one run clearly won (gap > {GAP:.0%}): {pct(s['top1']['right'], s['top1']['of'])}")
        print(f"  pairwise order (pairs > {GAP:.0%} apart): {pct(s['pairwise']['right'], s['pairwise']['of'])}")
        print(f"  speed-ratio error: median x{_num(ratio['median'], '.2f')}, worst x{_num(ratio['worst'], '.2f')} "
              f"({ratio['n']} ratios)")
        print(f"  whole-peak memory |error|: median {_num(mem['median'] and mem['median'] * 100, '.1f')}%, worst "
              f"{_num(mem['worst'] and mem['worst'] * 100, '.1f')}% ({mem['n']} runs, "
              f"{mem['too_low']} modeled too low)")
        o = s["oom"]
        print(f"  OOM: {o['predicted_to_fit']} of {o['went_oom']} runs that went out of memory predicted to fit; "
              f"{o['ran_but_predicted_not_to_fit']} of {o['ran']} runs that ran predicted not to fit")
        print(f"  absolute tokens/s per GPU: median x{_num(absolute['median'], '.2f')}, worst "
              f"x{_num(absolute['worst'], '.2f')} ({absolute['n']} runs)")
        big = s["largest_micro_batch_factor"]
        print(f"  largest micro-batch, modeled vs the largest that ran: median x{_num(big['median'], '.2f')}, worst "
              f"x{_num(big['worst'], '.2f')} ({big['n']} runs, {big['modeled_below']} modeled below, "
              f"{big['modeled_above']} above)")
        t = s["seconds_per_call"]
        print(f"  one command call that answered: median {_num(t['median'], '.3f')} s, "
              f"slowest {_num(t['worst'], '.3f')} s "
              f"({t['n']} calls)")
    print("\nflags the installed commands did not take (dropped):" if summary["lost_flags"] else "\nno flag dropped")
    for case, flags in summary["lost_flags"].items():
        print(f"  {case}: {'; '.join(flags)}")
    print(f"model given via: {', '.join(summary['routes'])}; modeled peak read from: {', '.join(summary['peak_keys'])}")
    if "advise_probe_seconds" in summary:
        p = summary["advise_probe_seconds"]
        print(f"one advise call ({p['question']}): median {p['median']:.3f} s, slowest {p['worst']:.3f} s of {p['n']}")
    if "collectives" in summary:
        c = summary["collectives"]
        print(f"collectives on {c['n']} nccl-tests peaks: median |error| {c['median']:.1%}, worst {c['worst']:.1%} "
              f"({c['worst_id']})")


def main(argv: list[str] | None = None) -> int:
    """Print the run table and the summary (or the summary as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=Path, default=CASES, help="cases.json (default: the published training set)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--model-as", choices=("json", "path"), default="json",
                        help="give --model as JSON text (default) or as a path to a config.json written per model")
    parser.add_argument("--subprocess", action="store_true",
                        help="call `python -m shardscope` per run (default: in-process)")
    parser.add_argument("--ratios", action="store_true",
                        help="also print each ranked case's throughput ratios, measured beside modeled")
    parser.add_argument("--plain", action="store_true",
                        help="ask with issue 31's flags alone: no --adamw, --deepspeed-version, --deepspeed-config, "
                             "--attention, --reduce-dtype or --ddp-bucket-view, and no model keys a Hub config.json "
                             "lacks (what a user who gives the published config and the run's shape gets)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "workflow"))
    ask = call_subprocess if args.subprocess else call_inprocess
    call = (lambda argv: ask(plain_argv(argv))) if args.plain else ask
    results, summary = check(load_cases(args.cases), call, model_as=args.model_as)
    if args.json:
        summary["runs_detail"] = [dict(asdict(r), answer=asdict(r.answer) if r.answer else None) for r in results]
        print(json.dumps(summary, indent=1, default=str))
        return 0
    print_runs(results)
    if args.ratios:
        print_ratios(results, load_cases(args.cases))
    print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
