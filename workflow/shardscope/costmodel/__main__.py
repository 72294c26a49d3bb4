"""``python -m shardscope.costmodel advise|predict ARGS`` is ``shardscope advise|predict ARGS``."""

import sys

from shardscope import cli


def main(argv: list[str] | None = None) -> int:
    """Run the shardscope subcommand named first in ``argv`` (defaults to this process's arguments)."""
    return cli.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
