# Plot: PNG curves of the run's metrics.jsonl (reached through train's model/, see common.smk).


rule plot:
    input:
        **stage_input("plot"),
    output:
        **stage_output("plot"),
    log:
        stage_log("plot"),
    benchmark:
        stage_benchmark("plot")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("plot"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
