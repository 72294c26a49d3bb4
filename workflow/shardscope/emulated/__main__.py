"""``python -m shardscope.emulated ARGS``: the same as ``shardscope fabric ARGS``."""

import sys

from shardscope.emulated.commands import main

sys.exit(main())
