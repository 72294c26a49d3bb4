"""``shardscope`` subcommands of the plan stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from shardscope.errors import UserError
from shardscope.fileio import dump_json, loads_bounded, write_output


def _read_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config from ``--config-json`` or the ``--config`` YAML file; one UserError when unreadable."""
    import yaml

    if args.config_json:
        try:
            config = loads_bounded(args.config_json, "--config-json")
        except json.JSONDecodeError as exc:
            raise UserError(f"--config-json: not valid JSON (column {exc.colno}: {exc.msg})") from None
        where = "--config-json"
    else:
        try:
            with open(args.config, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except OSError as exc:
            raise UserError(f"{args.config}: cannot read the config ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise UserError(f"{args.config}: not valid YAML ({str(exc).splitlines()[0]})") from None
        where = args.config
    if not isinstance(config, dict):
        raise UserError(f"{where}: expected the pipeline config as a mapping of keys (see config/README.md)")
    return config


def _read_topology(path: str) -> dict[str, Any]:
    """A validated topology document from topology.json or saved ``nvidia-smi topo -m`` / ``rocm-smi`` text."""
    from shardscope.topology.document import load_topology, validate_topology
    from shardscope.topology.parse import parse_text, read_text, sniff_format

    text = read_text(path)
    if sniff_format(text) == "json":
        return load_topology(path)
    return validate_topology(json.loads(dump_json(parse_text(text, path).to_dict())), path)


def _cmd_plan(args: argparse.Namespace) -> int:
    """Make the plan from a topology (topology.json or saved probe text) and the config (YAML file or JSON string).

    The plan document goes to ``--out`` (what the pipeline reads) and, with ``--json``, to stdout;
    otherwise stdout gets a short summary for people.
    """
    from shardscope.plan.planner import make_plan
    from shardscope.plan.summary import summarize

    topology = _read_topology(args.topology)
    config = _read_config(args)
    try:
        plan = make_plan(topology, config)
    except KeyError as exc:
        where = args.config or "--config-json"
        raise UserError(f"{where}: the config lacks key {exc.args[0]!r}; expected every key of config/config.yaml") from None
    to_stdout = args.json or args.out == "-"
    if args.out and args.out != "-":
        write_output(dump_json(plan), args.out)
    if args.jobs_dir:
        from shardscope.plan.jobs import write_job_files

        write_job_files(plan, args.jobs_dir)
    from shardscope.plan.summary import estimate

    estimated = estimate(plan, topology)  # on GPUs modeled from the topology, on CPU measured constants
    print(f"shardscope: plan: {estimated.sentence()}", file=sys.stderr)  # the pipeline's plan.log starts with it
    for skip in plan["skipped"]:
        print(f"shardscope: {skip['reason'].rstrip('.')}.", file=sys.stderr)  # one sentence per skipped stage
    print(dump_json(plan) if to_stdout else summarize(plan, args.topology, estimated), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("plan", help="list the jobs to run from topology.json and a config")
    p.add_argument("--topology", required=True, help="topology.json or saved `nvidia-smi topo -m` text")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="the pipeline's config YAML (as validated by the Snakefile)")
    source.add_argument("--config-json", help="the effective config as a JSON string (what the pipeline passes)")
    p.add_argument("--out", help="write plan.json here (what the pipeline reads)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of a summary")
    p.add_argument("--jobs-dir", help="also write one spec file per job here ({id}.json), rewritten only when it changes")
    p.set_defaults(func=_cmd_plan)
