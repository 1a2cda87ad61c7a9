# Data: records + tokenizer of the run, from its data slice (seed, data, tokenizer).


rule data:
    input:
        **stage_input("data"),
    output:
        **stage_output("data"),
    log:
        stage_log("data"),
    benchmark:
        stage_benchmark("data")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("data"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
