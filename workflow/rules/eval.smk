# Eval: eval.json of the trained model, from the run's eval slice (an eval-only change reruns
# only this rule and publish).


rule eval:
    input:
        **stage_input("eval"),
    output:
        **stage_output("eval"),
    log:
        stage_log("eval"),
    benchmark:
        stage_benchmark("eval")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("eval"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
