# Check: the run's declared expectations (expect: in config/config.yaml) against its eval.json;
# the job fails with a table of expected vs got, and publish (results/<run>/) waits for it.


rule check:
    input:
        **stage_input("check"),
    output:
        **stage_output("check"),
    log:
        stage_log("check"),
    benchmark:
        stage_benchmark("check")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("check"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
