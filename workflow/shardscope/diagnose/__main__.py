"""``python -m shardscope.diagnose doctor|verdict|nccl-log ...`` until ``diagnose`` is among the CLI's stages."""

from __future__ import annotations

import argparse
import sys

from shardscope.diagnose.commands import register
from shardscope.errors import UserError


def main(argv: list[str] | None = None) -> int:
    """Parse and run one diagnose subcommand; user errors print one line and exit with status 2."""
    parser = argparse.ArgumentParser(prog="python -m shardscope.diagnose", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
