"""Jobs across several Slurm nodes: the ``multi_node`` section of ``plan.json`` (config ``cluster``).

With ``cluster.nodes`` above 1 the plan gets, besides every single-node job, one collective
job per op and one training job per strategy that run on ``nodes`` nodes with
``nproc_per_node`` ranks each (world size = nodes x nproc_per_node), placement ``multi_node``.
On each node the ranks use the tightest GPUs for ``nproc_per_node`` (see
:mod:`shardscope.plan.placement`; every GPU when it is the node's count), on CPU nodes local
processes. Only the ``default`` transport is planned: across nodes the network, not NVLink, is
what the job measures.

They are kept out of the plan's ``collectives`` and ``training`` lists, which describe jobs on
one node (the cost model's predictions and the nccl-tests peer read those), and their job ids
end in :data:`JOB_SUFFIX` so the pipeline's multi-node rules, and only those, match them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardscope.contracts.jobs import CollectiveJob, TrainingJob
from shardscope.errors import UserError
from shardscope.plan.placement import describe, placements
from shardscope.plan.specs import job_entry

if TYPE_CHECKING:
    from shardscope.settings import PlannerSettings

#: The placement name of every multi-node job.
MULTI_NODE = "multi_node"
#: Every multi-node job id ends in this, and no single-node one does.
JOB_SUFFIX = "-mn"
#: Wildcard constraint of a multi-node job id (rules collective and train run both kinds; common.smk JOB_ID).
MULTINODE_JOB = rf"[A-Za-z0-9_.-]+{JOB_SUFFIX}"
#: Wildcard constraint of the single-node rules (collective, train): any other job id.
SINGLE_NODE_JOB = rf"[A-Za-z0-9_.-]+(?<!{JOB_SUFFIX})"


@dataclass(frozen=True)
class ClusterShape:
    """How a multi-node job spreads its ranks: nodes, and ranks on each."""

    nodes: int
    """Slurm nodes of the job (at least 2)."""
    nproc_per_node: int
    """Ranks (torchrun workers) on each node: GPUs per node, or processes on CPU nodes."""

    @property
    def world_size(self) -> int:
        """Ranks in all."""
        return self.nodes * self.nproc_per_node

    @property
    def label(self) -> str:
        """``2x8``: nodes x ranks per node, as job ids carry it."""
        return f"{self.nodes}x{self.nproc_per_node}"


def cluster_shape(topology: dict[str, Any], config: PlannerSettings) -> ClusterShape | None:
    """The multi-node shape the config asks for, or None for single-node plans (``cluster.nodes`` 1).

    ``cluster.gpus_per_node`` null is every GPU of the node (1 process on a CPU node); it
    may not exceed the node's GPUs. A topology probed across nodes (``node_count``) must have
    been probed on ``cluster.nodes`` of them. Raises :class:`UserError` naming the key otherwise.
    """
    section = config.cluster
    nodes = int(section.nodes)
    if nodes <= 1:
        return None
    gpus = int(topology.get("gpu_count", len(topology.get("gpus", []))))
    wanted = section.gpus_per_node
    per_node = int(wanted) if wanted is not None else max(gpus, 1)
    if per_node < 1:
        raise UserError(f"config key cluster.gpus_per_node: {per_node} is not a rank count; expected at least 1")
    if gpus and per_node > gpus:
        raise UserError(f"config key cluster.gpus_per_node: {per_node} exceeds the {gpus} GPU(s) of a node in this "
                        f"topology; expected at most {gpus}")
    probed = topology.get("node_count")
    if probed is not None and int(probed) != nodes:
        raise UserError(f"config key cluster.nodes: {nodes}, but the topology was probed on {probed} node(s); "
                        f"probe it again on {nodes} nodes (rerun the topology rule)")
    return ClusterShape(nodes=nodes, nproc_per_node=per_node)


def multinode_section(topology: dict[str, Any], config: PlannerSettings, shape: ClusterShape, env: dict[str, str],
                      model_name: str, collective_settings: dict[str, Any], training_settings: dict[str, Any]) -> dict[str, Any]:
    """The ``multi_node`` section of ``plan.json``: the shape, the GPUs each node uses, and the jobs.

    ``env`` is what every job sets (the default transport's variables); ``model_name`` the
    planned model's name, as single-node training job ids carry it; the settings are what every
    collective and training job shares (:func:`shardscope.plan.planner.collective_settings`).
    """

    place = placements(topology, shape.nproc_per_node)[0]
    fields = {
        "placement": MULTI_NODE,
        "nodes": shape.nodes,
        "nproc_per_node": shape.nproc_per_node,
        "devices": list(place.devices),
        "cuda_visible_devices": place.cuda_visible_devices,
    }
    n, label = shape.world_size, shape.label
    collectives = [
        job_entry(CollectiveJob, {"job_id": f"{op}-ws{n}-{label}-{MULTI_NODE}-default{JOB_SUFFIX}", "op": op,
                                  "world_size": n, "transport": "default", **fields, "env": dict(env),
                                  **collective_settings})
        for op in config.collectives.ops
    ]
    training = [
        job_entry(TrainingJob, {"job_id": f"{strategy}-{model_name}-ws{n}-{label}-{MULTI_NODE}{JOB_SUFFIX}",
                                "strategy": strategy, "model": model_name, "world_size": n, **fields,
                                "env": dict(env), **training_settings})
        for strategy in config.training.strategies
    ]
    return {
        "nodes": shape.nodes,
        "nproc_per_node": shape.nproc_per_node,
        "world_size": n,
        "node_placement": place.name,  # what the GPUs of one node are, in the single-node vocabulary
        "devices": list(place.devices),
        "cuda_visible_devices": place.cuda_visible_devices,
        **describe(topology, place),
        "collectives": collectives,
        "training": training,
    }
