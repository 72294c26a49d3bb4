"""Emulated fabrics: the strategy-vs-fabric finding measured on any Linux machine.

Presets (:mod:`.presets`) describe small graphs of hosts, switches and links with a rate and a
delay; :mod:`.fabric` builds one with ``ip netns``, veth pairs, bridges and ``tc`` and always
tears it down; :mod:`.launch` runs the unchanged collective and training workers over it,
one torchrun node per namespace, and labels the results ``fabric: emulated:<preset>``.
Needs root and iproute2; without them the pipeline skips this stage with one sentence.
"""
