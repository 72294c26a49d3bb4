"""Turn ``topology.json`` and the config into the list of jobs (the experiment plan).

World sizes come from the GPU count (powers of two up to it, and the count itself), from
the config's ``world_sizes`` list (sizes above the GPU count dropped; none left is an
error), or, on a machine without GPUs, from ``cpu.ranks``.

Placements say where a job's ranks sit, named by the one thing that differs between them:

=================  ==========================================================================
``one_island``     every rank inside one NVLink island (planned only where NVLink exists)
``cross_island``   ranks in two or more NVLink islands, on as few NUMA nodes as possible
``same_switch``    PCIe-only machines: every pair under one PCIe switch tree (``PIX``/``PXB``)
``cross_switch``   PCIe-only machines: some pair through a host bridge (``PHB``/``NODE``),
                   all ranks on one NUMA node
``cross_numa``     ranks spread over as many NUMA nodes as possible (GPU NUMA ids; on a
                   PCIe-only matrix without them, the CPU sockets that ``SYS`` paths separate)
``all``            every GPU of the node
``one_gpu``        world size 1 on a node of several GPUs
``packed``         the first GPUs, when the topology offers nothing to choose by
``local``          CPU processes (no GPU)
=================  ==========================================================================

On a PCIe-only machine every GPU is its own island, so the island names are not used there.
A name is planned only when some GPU set satisfies it — on eight GPUs in NVLink pairs there
is no ``one_island`` at world size 4 — and with the tightest such set (see
:mod:`shardscope.plan.placement`). Training jobs of the default condition use the first (tightest)
placement; the other fabric conditions (NVLink off, inside vs across an island, inside vs across
NUMA nodes; on CPU the emulated presets) come from :mod:`shardscope.plan.conditions`, and
``training_conditions`` lists each condition with its jobs, or with the reason it is left out. With config
``training.search``, ``search`` and ``best`` hold the micro-batch searches (one per memory-equal job) and every
condition's runs at its strategy's best micro-batch (:mod:`shardscope.plan.searches`).

Transports: ``default``, and ``pcie`` (NVLink disabled through NCCL variables) where links
are NVLink. Each job carries the GPUs it must see (``devices`` and the same list as a
``cuda_visible_devices`` string) and the environment it must set; on NVIDIA GPUs that
includes ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers GPUs as nvidia-smi and NVML do.

With ``cluster.nodes`` above 1 the plan also has a ``multi_node`` section: jobs across that
many Slurm nodes, placement ``multi_node`` (see :mod:`shardscope.plan.multinode`).

Every job is complete: its entry is the JSON form of a typed spec
(:mod:`shardscope.contracts.jobs`) with the sweep or sizing, dtype, limits, environment and
GPUs, so ``shardscope job run`` needs nothing but the plan. The planner also decides the jobs
of the stages that depend on what this machine has (:mod:`shardscope.plan.machine`): the
nccl-tests peer (``nccl_tests``: needs ``all_reduce_perf`` on the PATH and GPUs) and the
emulated fabrics (``emulated``: needs root, ``ip`` and ``tc``); a stage that cannot run here
is listed under ``skipped`` with one sentence saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from shardscope.contracts.groups import hsdp_shard_size
from shardscope.contracts.jobs import CollectiveJob, TrainingJob
from shardscope.contracts.names import GROUPED_STRATEGIES
from shardscope.errors import UserError
from shardscope.plan.conditions import (
    CONDITIONS,
    Condition,
    Skipped,
    cpu_skips,
    emulated_condition,
    emulated_groups,
    emulated_strategies,
    gpu_conditions,
    rank_groups,
)
from shardscope.plan.machine import MachineProbe, emulated_section, emulated_sizing, peer_section
from shardscope.plan.multinode import cluster_shape, multinode_section
from shardscope.plan.placement import Placement, describe, placements
from shardscope.plan.scales import Scale, memory_scale
from shardscope.plan.searches import search_memory_bytes, search_section
from shardscope.plan.specs import collective_settings, job_entry, refine_wall_limits, training_settings
from shardscope.settings import PLANNER_KEYS, PlannerSettings, Sizing, planner_config, planner_settings

__all__ = ["PCIE_TRANSPORT_ENV", "PLANNER_KEYS", "Placement", "make_plan", "placements", "planner_config",
           "world_sizes"]

#: NCCL variables that force traffic off NVLink (and NVLink SHARP) onto PCIe / shared memory.
PCIE_TRANSPORT_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
#: Makes CUDA's device numbers those of nvidia-smi and NVML (PCI bus order, not fastest first).
DEVICE_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _gpu_count(topology: dict[str, Any]) -> int:
    return int(topology.get("gpu_count", len(topology.get("gpus", []))))


def world_sizes(topology: dict[str, Any], config: PlannerSettings) -> list[int]:
    """World sizes to run: the config's list (up to the GPU count), or derived from the hardware when ``auto``.

    Raises :class:`UserError` naming ``world_sizes`` when every listed size exceeds the GPUs.
    """
    requested = config.world_sizes
    gpus = _gpu_count(topology)
    if gpus == 0:
        return [int(config.cpu.ranks)]
    if requested != "auto":
        sizes = sorted({int(n) for n in requested if int(n) <= gpus})
        if not sizes:
            raise UserError(
                f"config key world_sizes: every size in {list(requested)} exceeds the {gpus} GPU(s) of this "
                f"topology; expected at least one size of at most {gpus}"
            )
        return sizes
    sizes = {1 << k for k in range(1, gpus.bit_length()) if (1 << k) <= gpus}
    sizes.add(gpus)
    return sorted(sizes) if gpus > 1 else [1]


def training_world_sizes(sizes: list[int], config: PlannerSettings) -> list[int]:
    """The planned world sizes training runs at: the largest (``max``) or those listed.

    Raises :class:`UserError` naming ``training.world_sizes`` when the list selects none.
    """
    wanted = config.training.world_sizes
    if wanted == "max":
        return [max(sizes)]
    chosen = [n for n in sizes if n in {int(w) for w in wanted}]
    if not chosen:
        raise UserError(
            f"config key training.world_sizes: none of {list(wanted)} is a planned world size "
            f"({sizes}); expected some of them, or 'max'"
        )
    return chosen


def transports(topology: dict[str, Any], config: PlannerSettings) -> list[str]:
    """Transports to compare: ``pcie`` only where NVLink exists to be switched off."""
    wanted = config.collectives.transports
    has_nvlink = any(link.get("nvlinks", 0) > 0 for link in topology.get("links", []))
    return [t for t in wanted if t == "default" or (t == "pcie" and has_nvlink)]


def device_profile(topology: dict[str, Any], config: PlannerSettings) -> Sizing:
    """The config section that sizes jobs for this machine: ``gpu`` with GPUs, else ``cpu`` (a Hugging Face
    ``config.json`` path as its model read into dimensions and a name:
    :func:`~shardscope.contracts.hf_config.spec_of`)."""
    from shardscope.contracts.hf_config import spec_of

    name = "gpu" if _gpu_count(topology) > 0 else "cpu"
    section: Sizing = getattr(config, name)
    try:
        model = spec_of(section.model, f"{name}.model")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return section if model is section.model else replace(section, model=model)  # the section itself where unchanged


def profile_entry(profile: Sizing) -> dict[str, Any]:
    """plan.json's ``profile``: the sizing section the jobs come from, as a mapping; a ``ranks`` of null (the gpu
    section's, which does not give it) is left out, so the entry reads as the section was written."""
    return {key: value for key, value in asdict(profile).items() if not (key == "ranks" and value is None)}


def _job_env(topology: dict[str, Any], transport: str) -> dict[str, str]:
    """Variables a job sets: GPU numbering on NVIDIA, and the transport's NCCL knobs."""
    env = dict(DEVICE_ORDER_ENV) if topology.get("accelerator") == "nvidia" and _gpu_count(topology) else {}
    return {**env, **(PCIE_TRANSPORT_ENV if transport == "pcie" else {})}


def _placement_fields(place: Placement) -> dict[str, Any]:
    return {"placement": place.name, "devices": list(place.devices), "cuda_visible_devices": place.cuda_visible_devices}


def condition_strategies(config: PlannerSettings) -> dict[str, list[str]]:
    """Config ``training.conditions``: condition -> the strategies trained under it (``default`` is
    ``training.strategies``), the conditions that list none left out."""
    section = config.training.conditions
    return {name: list(getattr(section, name)) for name in CONDITIONS[1:] if getattr(section, name)}


def memory_bound(topology: dict[str, Any], config: PlannerSettings, world_size: int,
                 model_name: str) -> Scale | str | None:
    """The memory-bound scale of config ``training.memory_bound`` (None when the key is null), or why it is not
    planned."""
    section = config.training.memory_bound
    if section is None:
        return None
    if section.model is not None:
        from shardscope.contracts.hf_config import spec_of

        try:
            section = replace(section, model=spec_of(section.model, "training.memory_bound.model"))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    scale = memory_scale(topology, section, world_size)
    if isinstance(scale, Scale) and scale.model_name == model_name:
        return (f"training.memory_bound.model {model_name!r} is the gpu section's model already "
                "(the communication-bound scale); expected a larger one")
    return scale


def default_strategies(topology: dict[str, Any], config: PlannerSettings, place: Placement,
                       world_size: int) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """``training.strategies`` under the default condition, with ``hsdp`` and ``zero3_hpz`` added on a GPU node whose
    ranks span two or more NVLink islands of two or more GPUs each (config ``training.hsdp: auto``,
    ``training.hpz: auto``): there a 2-D mesh (shard inside an island, replicate across) differs from both FSDP and
    DDP, and hpZ's secondary partition inside an island (backward's all-gather stays in it) from ZeRO-3. Also whether
    each was added, and why (or why not), for plan.json's ``hsdp`` and ``hpz`` lists."""
    strategies = list(config.training.strategies)
    added = []
    for strategy, key in (("hsdp", "hsdp"), ("zero3_hpz", "hpz")):
        value = getattr(config.training, key)
        value = "off" if value is False else value  # YAML 1.1 reads an unquoted `off` as false
        if value not in ("auto", "off"):
            raise UserError(f"config key training.{key}: {value!r} is not a known value; expected auto or off")
        if strategy in strategies:
            why = {"added": False, "reason": f"training.strategies lists {strategy} already"}
        elif value == "off":
            why = {"added": False, "reason": f"config training.{key} is off"}
        else:
            why = island_split(topology, place, world_size, strategy)
            if why["added"]:
                strategies.append(strategy)
        added.append(why)
    return strategies, added[0], added[1]


def island_split(topology: dict[str, Any], place: Placement, world_size: int, strategy: str,
                 groups: list[int] | None = None) -> dict[str, Any]:
    """Whether ``strategy`` (``hsdp`` or ``zero3_hpz``) differs from its flat neighbour over these ranks (``groups``:
    each rank's island, emulated switch or node; default: the topology's NVLink islands) and its ``shard_size``, or why not."""
    hsdp = strategy == "hsdp"
    if _gpu_count(topology) == 0 and groups is None:
        return {"added": False, "reason": "CPU processes of one host have no islands to " + ("shard" if hsdp else "partition")
                                          + " inside"}
    if world_size < 2:
        return {"added": False, "reason": "training runs on one GPU: nothing to shard or replicate"}
    shard = hsdp_shard_size(groups or rank_groups(topology, place.devices, world_size))
    if shard == world_size:
        return {"added": False, "reason": f"all {world_size} ranks are in one NVLink island: " + (
            "HSDP would be FSDP" if hsdp else "hpZ's secondary partition would repeat ZeRO-3's own (a degenerate zero3_hpz)")}
    if shard == 1:
        return {"added": False, "reason": f"the NVLink islands do not split the {world_size} ranks into equal groups of two "
                                          "or more: " + ("HSDP would be DDP" if hsdp else
                                                          "hpZ would be ZeRO-3 (DeepSpeed's partition size 1 is hpZ off)")}
    reason = (f"{world_size // shard} NVLink islands of {shard} ranks: "
              + ("shard inside each, replicate across (a 2-D mesh)" if hsdp else
                 "ZeRO-3 with a secondary parameter partition inside each island (partition size "
                 f"{shard}: backward's all-gather stays inside it)"))
    return {"added": True, "shard_size": shard, "reason": reason}


def extra_label(extra: dict[str, Any]) -> dict[str, Any]:
    """What a conditions entry says of an emulated fabric: the preset it ran on."""
    return {"emulated_preset": extra["emulated"]["preset"]} if "emulated" in extra else {}


def make_plan(topology: dict[str, Any], config: Mapping[str, Any] | PlannerSettings,
              machine: MachineProbe | None = None) -> dict[str, Any]:
    """The ``plan.json`` document: every collective and training job with its GPUs and environment.

    ``config`` is the pipeline config (or the planner's part of it, :func:`planner_config`) as a mapping, read once
    into :class:`~shardscope.settings.PlannerSettings` with the schema's defaults filled in
    (:func:`~shardscope.settings.planner_settings`), or those settings themselves.

    Besides the jobs, ``placements`` lists each (world size, placement) with its GPUs and
    what it spans (islands, NUMA nodes, the code of its slowest link), for figures and report.
    With ``cluster.nodes`` above 1, ``multi_node`` holds the jobs across nodes
    (:func:`shardscope.plan.multinode.multinode_section`); the key is absent otherwise.
    ``machine`` says what this machine has for the nccl-tests peer and the emulated fabrics
    (default: look, with :func:`shutil.which` and the emulated stage's own check).
    """
    machine = machine or MachineProbe()
    config = planner_settings(config)
    shape = cluster_shape(topology, config)
    profile = device_profile(topology, config)
    on_gpu = _gpu_count(topology) > 0
    sizes = world_sizes(topology, config)
    train_sizes = training_world_sizes(sizes, config)
    by_size = {n: placements(topology, n) for n in sizes}
    shared_collective = collective_settings(config, profile)
    shared_training = training_settings(config, profile, on_gpu)
    collectives = []
    for n in sizes:
        if n < 2:
            continue  # nothing to communicate with one rank
        for place in by_size[n]:
            for transport in transports(topology, config):
                for op in config.collectives.ops:
                    collectives.append(job_entry(CollectiveJob, {
                        "job_id": f"{op}-ws{n}-{place.name}-{transport}",
                        "op": op, "world_size": n, "nodes": 1, "nproc_per_node": n, "transport": transport,
                        **_placement_fields(place), "env": _job_env(topology, transport), **shared_collective,
                    }))
    model = profile.model
    model_name = model if isinstance(model, str) else model.get("name", "custom")
    training: list[dict[str, Any]] = []
    conditions: list[dict[str, Any]] = []

    def train(condition: Condition, strategies: list[str], suffix: str = "", id_place: str = "",
              sizing: dict[str, Any] | None = None, groups: list[int] | None = None, **extra: Any) -> None:
        """Add the jobs of ``strategies`` under ``condition`` (an id planned already is the same job);
        ``sizing`` replaces the model and its sizing (the memory-bound scale); ``groups`` names each rank's
        island (or emulated switch), from which an ``hsdp`` job's shard groups are cut."""
        n, place = condition.world_size, condition.placement
        groups = groups or rank_groups(topology, place.devices, n)
        fields = {**shared_training, "model": model_name, **(sizing or {})}
        ids = []
        if "zero3_hpz" in strategies:  # trained only where its partition differs from ZeRO-3; plan.json hpz says which
            why = island_split(topology, place, n, "zero3_hpz", groups if "emulated" in extra else None)
            hpz.append({"world_size": n, "condition": condition.name, "placement": place.name, **why})
            if not why["added"]:
                strategies = [s for s in strategies if s != "zero3_hpz"]
        for strategy in strategies:
            job_id = f"{strategy}-{fields['model']}-ws{n}-{id_place or place.name}{suffix}"
            ids.append(job_id)
            if any(job["job_id"] == job_id for job in training):
                continue
            training.append(job_entry(TrainingJob, {
                "job_id": job_id, "strategy": strategy, "world_size": n, "nodes": 1,
                "nproc_per_node": n, **_placement_fields(place), "env": _job_env(topology, condition.transport),
                "transport": condition.transport, **fields, **extra,
                **({"shard_size": hsdp_shard_size(groups)} if strategy in GROUPED_STRATEGIES else {}),
            }))
        conditions.append({"condition": condition.name, "planned": True, "model": fields["model"], "world_size": n,
                           **_placement_fields(place), "transport": condition.transport,
                           "strategies": list(strategies), "jobs": ids, **extra_label(extra)})

    hsdp: list[dict[str, Any]] = []
    hpz: list[dict[str, Any]] = []
    for n in train_sizes:
        strategies, why, why_hpz = default_strategies(topology, config, by_size[n][0], n)
        hsdp.append({"world_size": n, **why})
        if not why_hpz["added"] and "zero3_hpz" not in strategies:  # else train() says where it is planned, or why not
            hpz.append({"world_size": n, "condition": "default", **why_hpz})
        train(Condition("default", n, by_size[n][0]), strategies)
    scales = [{"scale": "communication", "planned": True, "model": model_name}]
    scale = memory_bound(topology, config, max(train_sizes), model_name) if on_gpu else (
        "the memory-bound scale is planned on GPU nodes (on CPU, training.memory_budget_gib stands for GPU memory)"
        if config.training.memory_bound else None)
    if isinstance(scale, Scale):
        n = max(train_sizes)
        train(Condition("default", n, by_size[n][0]), list(scale.strategies), sizing={
            "model": scale.model_name, "model_spec": scale.model, "seq_len": scale.seq_len, "micro_batch": scale.micro_batch})
        scales.append({"scale": "memory", "planned": True, "model": scale.model_name, "reason": scale.reason})
    elif scale:
        scales.append({"scale": "memory", "planned": False, "reason": scale})
    wanted = condition_strategies(config)
    skipped: list[dict[str, str]] = []
    emulated_jobs, emulated_training = emulated_section(config, machine, skipped, on_gpu)
    if on_gpu:
        found = gpu_conditions(topology, sizes, train_sizes, set(wanted))
    else:
        covered = set()
        sizing = emulated_sizing(config) if emulated_training else {}
        for preset, place_name, hosts, spec in emulated_training:
            name = emulated_condition(preset, place_name)
            strategies = emulated_strategies(config, name, wanted) if name else []
            if name and strategies:
                covered.add(name)
                train(Condition(name, len(hosts), Placement(f"{place_name}@{preset}", ())), strategies,
                      suffix=f"-{preset}", id_place=place_name, groups=emulated_groups(spec["definition"], place_name),
                      sizing=sizing, emulated=spec)
        emulated_off = next((s["reason"] for s in skipped if s["stage"] == "emulated"), None)
        found = list(cpu_skips(set(wanted) - covered, emulated_off))
    for item in found:
        if isinstance(item, Skipped):
            conditions.append({"condition": item.name, "planned": False, "reason": item.reason})
        else:
            train(item, wanted[item.name], suffix="-pcie" if item.transport == "pcie" else "")
    plan = {
        "schema": "shardscope.plan/1",
        "device": "gpu" if on_gpu else "cpu",
        "fabric": topology.get("fabric"),
        "world_sizes": sizes,
        "placements": [
            {"world_size": n, **_placement_fields(place), **describe(topology, place)}
            for n in sizes for place in by_size[n]
        ],
        "profile": profile_entry(profile),
        "collectives": collectives,
        "training": training,
        "training_conditions": conditions,
        "scales": scales,
        "hsdp": hsdp,
        "hpz": hpz,
    }
    plan["search"], plan["best"] = search_section(config, training, conditions, search_memory_bytes(topology), on_gpu)
    if shape is not None:
        plan["multi_node"] = multinode_section(topology, config, shape, _job_env(topology, "default"), model_name,
                                               shared_collective, shared_training)
    plan["nccl_tests"] = peer_section(plan, shared_collective, machine, skipped)
    plan["emulated"] = emulated_jobs
    plan["skipped"] = skipped
    refine_wall_limits(plan, topology, config)
    return plan
