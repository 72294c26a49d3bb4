"""``shardscope`` subcommands of the plan stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from shardscope.errors import UserError
from shardscope.fileio import dump_json, read_json, write_output


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    import yaml

    from shardscope.plan.planner import make_plan

    if args.config_json:
        config = json.loads(args.config_json)
    else:
        try:
            with open(args.config, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except OSError as exc:
            raise UserError(f"{args.config}: cannot read the config ({exc.strerror})") from None
    write_output(dump_json(make_plan(read_json(args.topology), config)), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("plan", help="list the jobs to run from topology.json and a config")
    p.add_argument("--topology", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="the pipeline's config YAML (as validated by the Snakefile)")
    source.add_argument("--config-json", help="the effective config as a JSON string (what the pipeline passes)")
    p.add_argument("--out")
    p.set_defaults(func=_cmd_plan)
