"""``shardscope job run``: one job of ``plan.json`` (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse


def _cmd_run(args: argparse.Namespace) -> int:
    from shardscope.jobs.run import run_job

    return run_job(args.plan, args.id, args.out, args.log)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``job`` subcommands to the ``shardscope`` parser."""
    job = sub.add_parser("job", help="run one planned job by its id (what every job rule runs)").add_subparsers(
        dest="action", required=True)
    p = job.add_parser("run", help="run one job of plan.json: a collective sweep, a training run or an nccl-tests peer",
                       description="Everything the job needs comes from its entry in the plan; a job that is not "
                                   "planned, or a hand-edited entry that is invalid, stops with exit status 2.")
    p.add_argument("--plan", required=True, help="plan.json written by `shardscope plan`")
    p.add_argument("--id", required=True, help="the job's id (job_id in the plan; the stem of its result file)")
    p.add_argument("--out", required=True, help="the job's result file (an nccl-tests peer: its raw table)")
    p.add_argument("--log", required=True, help="the job's log")
    p.set_defaults(func=_cmd_run)
