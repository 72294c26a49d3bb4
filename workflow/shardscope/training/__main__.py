"""``torchrun --nproc-per-node N -m shardscope.training …``: see :mod:`shardscope.training.worker`."""

import sys

from shardscope.training.worker import main

sys.exit(main())
