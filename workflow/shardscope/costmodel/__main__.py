"""``python -m shardscope.costmodel advise …`` / ``… predict collectives …``: the same as ``shardscope advise``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from shardscope.costmodel.commands import register
from shardscope.errors import UserError


def main(argv: list[str] | None = None) -> int:
    """Parse the cost model's subcommands and run one; user errors exit 2 with one sentence."""
    parser = argparse.ArgumentParser(prog="shardscope", description="Modeled predictions and strategy advice.")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
