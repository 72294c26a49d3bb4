"""Cost model and advisor: predict collectives and training steps for machines you do not have.

:mod:`.hardware` holds the constants (NCCL's own link model, with sources), :mod:`.machine`
turns a topology.json into cut capacities, :mod:`.collectives` is the alpha-beta model per
algorithm and protocol, :mod:`.calibrate` fits it to measured rows, :mod:`.step` models one
training step per strategy, :mod:`.advise` ranks them, :mod:`.decision_map` decides every
cell of the decision map, :mod:`.documents` writes the ``predictions`` document. Every number this package produces is *modeled*, never measured.
"""
