"""Figures stage: seaborn figures drawn from the database alone (PNG for reports, PDF for papers).

Each figure has a question, the SQL behind it (:mod:`shardscope.results.queries`, the results
stage's read side), a drawing and an answer computed from the plotted rows (``captions``);
``reference`` loads public nccl-tests runs shown beside the user's own, always labelled
reference; ``plots_decision`` draws the decision map the predictions stage stored.
"""
