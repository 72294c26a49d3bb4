"""``shardscope cluster`` subcommands: launch torchrun across a Slurm allocation; probe its nodes.

::

    shardscope cluster launch [--nodes K] --nproc-per-node N [--port P] [--dry-run] -m MODULE ARGS...
    shardscope cluster topology [--nodes K] --out FILE

Until ``cluster`` is one of :data:`shardscope.cli.STAGES`, the same commands run as
``python -m shardscope.cluster launch …`` / ``python -m shardscope.cluster topology …``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys

from shardscope.errors import UserError


def _cmd_launch(args: argparse.Namespace) -> int:
    from shardscope.cluster.launch import LaunchSpec, build_launch_command
    from shardscope.cluster.slurm import current_allocation

    spec = LaunchSpec(nproc_per_node=args.nproc_per_node, nodes=args.nodes, port=args.port)
    worker_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    allocation = current_allocation() if spec.nodes > 1 else None
    cmd = build_launch_command(spec, args.module, worker_args, allocation)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if shutil.which(cmd[0]) is None:
        raise UserError(f"`{cmd[0]}` is not on PATH; --nodes > 1 needs the Slurm client tools on this node")
    print("$ " + shlex.join(cmd), file=sys.stderr, flush=True)
    os.execvp(cmd[0], cmd)  # srun/torchrun take over this process: signals reach them directly
    return 1  # not reached


def _cmd_topology(args: argparse.Namespace) -> int:
    from shardscope.cluster.slurm import current_allocation
    from shardscope.cluster.topology import check_node_count, detect_allocation, summary

    allocation = current_allocation() if args.nodes != 1 else None
    doc = detect_allocation(check_node_count(allocation, args.nodes), args.out)
    print(summary(doc), file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``cluster`` subcommands to the ``shardscope`` parser."""
    cluster = sub.add_parser("cluster", help="run torchrun across a Slurm allocation; probe every node").add_subparsers(
        dest="action", required=True)
    p = cluster.add_parser("launch", help="start MODULE under torchrun on this node, or on --nodes nodes of this Slurm job",
                           description="One node: torchrun --standalone. Several: srun, one torchrun agent per node, "
                                       "c10d rendezvous on the allocation's first node.")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the Slurm allocation to run on (default 1: no Slurm needed)")
    p.add_argument("--nproc-per-node", type=int, required=True, help="worker processes per node (GPUs per node)")
    p.add_argument("--port", type=int, help="c10d rendezvous port on the first node (default: derived from the job id)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    p.add_argument("-m", dest="as_module", action="store_true", help="MODULE is a module (as torchrun's -m; always the case)")
    p.add_argument("module", metavar="MODULE", help="the worker module, e.g. shardscope.collectives")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the worker's arguments")
    p.set_defaults(func=_cmd_launch)
    p = cluster.add_parser("topology", help="probe every node of this Slurm job (or this machine) into one topology.json")
    p.add_argument("--nodes", type=int, help="nodes the Slurm job must have (1: probe only this node, no Slurm needed; "
                                             "default: every node of the job, or this machine outside Slurm)")
    p.add_argument("--out", required=True, help="combined topology.json; each node's own goes to nodes/<node>/ beside it")
    p.set_defaults(func=_cmd_topology)
