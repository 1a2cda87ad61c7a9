# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Data: records + tokenizer of the run, from its data slice (seed, data, tokenizer).


rule data:
    input:
        config=after_compose("work/{run}/config/data.yaml"),
        extra=run_inputs("init_model", "traces_data"),
        upstream=upstream_composes(),
    output:
        data=directory("work/{run}/data"),
    log:
        "work/{run}/logs/data.log",
    benchmark:
        "work/{run}/benchmarks/data.tsv"
    conda:
        "../envs/toolbox.yaml"
    shell:
        "( toolbox data --config work/{wildcards.run}/config/data.yaml --out {output.data} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py data-{wildcards.run}"
