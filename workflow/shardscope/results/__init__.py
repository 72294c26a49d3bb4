"""Results stage: validate every per-job file with pandera and keep it in one DuckDB file."""
