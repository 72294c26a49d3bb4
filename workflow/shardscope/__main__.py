"""``python -m shardscope``: the same command line as the ``shardscope`` script."""

import sys

from shardscope.cli import main

sys.exit(main())
