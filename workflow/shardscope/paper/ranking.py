"""The report's machine ranking: each machine against the others of its kind ("which of my nodes is slow?").

The rows are :func:`shardscope.results.queries.machine_ranking`'s, in its order (per kind,
measure and setting, the slowest first), with the columns a reader needs and their names
spelled out; no number is computed here.
"""

from __future__ import annotations

import pandas as pd

#: Query column -> the report's column name, in the report's order.
RANKING_COLUMNS = {"fabric": "fabric", "gpu_model": "GPU model", "measure": "measure", "setting": "setting",
                   "rank": "rank", "host": "machine", "value": "value", "unit": "unit",
                   "vs_kind_median": "vs median of kind", "machines_of_kind": "machines of kind", "verdict": "verdict"}

#: Formats of the ranking table's numeric columns (for :func:`shardscope.paper.context.markdown_table`).
RANKING_FORMATS = {"value": "{:.4g}", "vs median of kind": "{:.2f}"}


def ranking_table(ranking: pd.DataFrame) -> pd.DataFrame:
    """The ranking query's rows with the report's columns (rank 1 is the slowest of its kind)."""
    return ranking[list(RANKING_COLUMNS)].rename(columns=RANKING_COLUMNS).reset_index(drop=True)


def has_peers(ranking: pd.DataFrame) -> bool:
    """Whether any machine has another of its kind measuring the same thing (else there is nothing to rank)."""
    return bool((ranking["verdict"] != "no peers").any()) if not ranking.empty else False
