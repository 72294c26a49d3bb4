"""``python -m shardscope.cluster ARGS`` is ``shardscope cluster ARGS``."""

import sys

from shardscope.cli import main

sys.exit(main(["cluster", *sys.argv[1:]]))
