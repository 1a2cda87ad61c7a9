# Compose: the toolbox defaults once, then per run the composed config and its per-stage slices.
# compose is a checkpoint: after it reruns, Snakemake re-evaluates the stages that read a slice,
# and only those whose slice changed run (workflow/scripts/slice_config.py).


rule defaults:
    input:
        **stage_input("defaults"),
    output:
        **stage_output("defaults"),
    log:
        stage_log("defaults"),
    benchmark:
        stage_benchmark("defaults")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("defaults"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"


checkpoint compose:
    input:
        **stage_input("compose"),
    output:
        **stage_output("compose"),
    log:
        stage_log("compose"),
    benchmark:
        stage_benchmark("compose")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("compose"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
