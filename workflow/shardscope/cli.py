"""The ``shardscope`` command line: every stage runs without Snakemake from here.

Each stage registers its own subcommands (``<stage>/commands.py``). User errors (bad files,
bad values) print one sentence on stderr and exit with status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from shardscope.errors import UserError

#: Stages whose ``commands.register`` adds subcommands, in the order ``--help`` lists them.
STAGES = ("topology", "plan", "collectives", "training", "results", "figures", "paper", "costmodel", "emulated", "cluster", "diagnose")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (the public command-line contract)."""
    import importlib

    parser = argparse.ArgumentParser(prog="shardscope", description="Which data-parallel strategy is fastest within memory on this machine, and why.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for stage in STAGES:
        importlib.import_module(f"shardscope.{stage}.commands").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shardscope`` console script."""
    # One C++ op cache per environment (shardscope.training.launch.extensions_dir), inherited by
    # every torchrun rank this command starts; torch's default ~/.cache is shared by environments.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
