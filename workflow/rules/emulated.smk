rule emulated_collective:
    input:
        spec=EMULATED_SPEC.replace("{name}", "{op}"),
    output:
        f"{RESULTS}/emulated/{{preset}}/collectives/{{placement}}/{{op}}.json",
    log:
        f"{RESULTS}/logs/emulated/{{preset}}/collectives/{{placement}}/{{op}}.log",
    wildcard_constraints:
        preset=EMULATED_NAME,
        placement=EMULATED_NAME,
        op=EMULATED_NAME,
    conda:
        ENVS
    threads: emulated_ranks
    resources:
        measure=1,
    params:
        py=PY,
        section=json.dumps(EMULATED, sort_keys=True),
        sweep=dataclasses.asdict(SETTINGS.emulated.sweep),
        dtype=SETTINGS.collectives.dtype,
        check="--check" if SETTINGS.collectives.check else "",
    shell:
        "{params.py:q} -m shardscope.emulated collectives --preset {wildcards.preset:q}"
        " --placement {wildcards.placement:q} --op {wildcards.op:q} --config-json {params.section:q} --dtype"
        " {params.dtype:q}"
        " -b {params.sweep[min_bytes]} -e {params.sweep[max_bytes]} -f {params.sweep[factor]}"
        " -w {params.sweep[warmup]} -n {params.sweep[iters]} {params.check} --out {output:q} --log {log:q}"
        " >> {log:q} 2>&1"
