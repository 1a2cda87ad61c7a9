# Serve-bench: serve the trained model on a free loopback port, benchmark it with
# `toolbox bench serve`, stop the server by PID; bench.json (workflow/scripts/serve_bench.py).


rule serve_bench:
    input:
        **stage_input("serve_bench"),
    output:
        **stage_output("serve_bench"),
    log:
        stage_log("serve_bench"),
    benchmark:
        stage_benchmark("serve_bench")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("serve_bench"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
