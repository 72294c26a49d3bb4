"""Predictions: the cost model's modeled numbers for every planned job, stored beside the measurements.

Rule predictions writes one `predictions` document (schema shardscope.predictions/1, every
number `method: modeled`) for the topology the plan was made from: the planned collectives
(ops, world sizes, transports, message sizes) and the configured strategies at the training
world sizes with the planned model. On a machine without GPUs the collectives are the model's
labelled gloo placeholders and no strategy is predicted (the document says why). On every machine it
also models the whole memory peak per GPU (`memory` rows: each planned training job, and the seed's
Mistral-7B on 8 x 80 GB at seq 4096 per strategy, with and without activation checkpointing), which the
report's memory table reads, the ZeRO paper's model states of that Mistral-7B (`memory_model` rows) and the
decision map's cells (`decision_map` rows, figure 5). Collect loads it.

Rule run_predictions models the training runs once they ran (`shardscope predict runs`, schema
shardscope.run_predictions/1): the ZeRO paper's model states and the whole peak's terms of each run, at the
shape it ran with (a best-micro-batch run's micro-batch is known only after its search). Collect loads it
beside the runs, and figure 3 and the report compare the two in SQL: collect itself runs no model.
"""


localrules:
    predictions,
    run_predictions,


rule predictions:
    input:
        topology=rules.topology.output.json,
        plan=f"{RESULTS}/plan/plan.json",
    output:
        json=f"{RESULTS}/predictions/predictions.json",
    log:
        f"{RESULTS}/logs/predictions.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
    shell:
        "{params.shardscope} predict plan --topology {input.topology:q} --plan {input.plan:q} --out"
        " {output.json:q} > {log:q} 2>&1"


rule run_predictions:
    input:
        training=training_results,
        best=best_results,
        emulated=emulated_results,
    output:
        json=f"{RESULTS}/predictions/runs.json",
    log:
        f"{RESULTS}/logs/run_predictions.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
    shell:
        "{params.shardscope} predict runs --out {output.json:q} {input.training:q} {input.best:q} {input.emulated:q}"
        " > {log:q} 2>&1"
