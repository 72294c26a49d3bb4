"""Calibration: the step model fitted on this run's own measurements, kept in the database for the report.

Rule step_calibration runs `shardscope calibrate-step --store` once collect has loaded the run: it
fits the step model's compute rate, overlap and host overheads to the measured training runs (the
collectives timed by alpha-beta fits of the measured sweeps) and stores the calibration and the
calibrated collective check (tables step_calibrations, collective_calibration_checks), so the
report's ledger shows modeled against measured per strategy and the ranking agreement. Its output
is the calibration as JSON (empty lists where the database holds too few runs to fit). It reads
and writes the database only (no torch), and rule paper waits for it.
"""


localrules:
    step_calibration,


rule step_calibration:
    input:
        manifest=rules.collect.output.manifest,
    output:
        json=f"{RESULTS}/db/step_calibration.json",
    log:
        f"{RESULTS}/logs/step_calibration.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        db=DB,
    shell:
        "{params.shardscope} calibrate-step --db {params.db:q} --store --json > {output.json:q} 2> {log:q}"
