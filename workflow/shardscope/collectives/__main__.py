"""``torchrun --nproc-per-node N -m shardscope.collectives …``: see :mod:`shardscope.collectives.worker`."""

import sys

from shardscope.collectives.worker import main

sys.exit(main())
