# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Serve-bench: serve the trained model on a free loopback port, benchmark it with `toolbox bench
# serve`, stop the server by PID; bench.json (workflow/scripts/serve_bench.py).


rule serve_bench:
    input:
        model=after_compose("work/{run}/train/model"),
        script="workflow/scripts/serve_bench.py",
        upstream=upstream_composes(),
    output:
        bench="work/{run}/bench.json",
    log:
        "work/{run}/logs/serve_bench.log",
    benchmark:
        "work/{run}/benchmarks/serve_bench.tsv"
    conda:
        "../envs/toolbox.yaml"
    shell:
        "( python {input.script} --model work/{wildcards.run}/train/model --out {output.bench} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py serve_bench-{wildcards.run}"
