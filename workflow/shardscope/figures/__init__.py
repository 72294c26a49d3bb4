"""Figures stage: seaborn figures drawn from the database alone (PNG for reports, PDF for papers).

Each figure has a question, the SQL behind it (``queries``), a drawing and an answer computed
from the plotted rows (``captions``); ``reference`` loads public nccl-tests runs shown beside
the user's own, always labelled reference; ``decision`` is the modeled decision map.
"""
