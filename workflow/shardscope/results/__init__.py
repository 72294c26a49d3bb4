"""Results stage: validate every per-job file with pandera and keep it in one DuckDB file; and read it.

The write side is :mod:`.store` (collect), :mod:`.merge` and :mod:`.export`; the read side, which
figures and the report import, is :mod:`.sources` (the read-only connection and its views),
:mod:`.queries`, :mod:`.queries_decision`, :mod:`.report_queries` and :mod:`.memory_case_queries`;
:mod:`.reference_manifest` lists the bundled reference logs (the reference stage loads them).
"""
