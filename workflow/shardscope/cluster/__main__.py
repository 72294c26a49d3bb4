"""``python -m shardscope.cluster ARGS`` is ``shardscope cluster ARGS`` (before the CLI lists it)."""

from __future__ import annotations

import argparse
import sys

from shardscope.cluster.commands import register
from shardscope.errors import UserError


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` as ``shardscope cluster …`` and run it; user errors exit 2 without a traceback."""
    parser = argparse.ArgumentParser(prog="shardscope")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["cluster", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
