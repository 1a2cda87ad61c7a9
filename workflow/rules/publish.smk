# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Publish: results/<run>/ (a directory() target, so `snakemake results/<run>/` builds the run).
# Nothing else writes inside results/<run>/ (Snakemake's ChildIOException); large files are links.


rule publish:
    input:
        config="work/{run}/config/full.yaml",
        model="work/{run}/train/model",
        eval="work/{run}/eval.json",
        check="work/{run}/check.json",
        metrics="work/{run}/train/model",  # metrics.jsonl is written beside it (not declared: see train)
        plots="work/{run}/plots",
        publisher="workflow/scripts/publish.py",
        extra=run_inputs("agent_eval"),
        upstream=upstream_composes(),
    output:
        results=directory("results/{run}"),
    log:
        "work/{run}/logs/publish.log",
    benchmark:
        "work/{run}/benchmarks/publish.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        publish_extra=run_value("publish_extra"),
        run_overrides=run_value("overrides"),
    shell:
        "( python {input.publisher} --config {input.config} --model {input.model} --eval {input.eval} --check {input.check} --metrics work/{wildcards.run}/train/metrics.jsonl --plots {input.plots}{params.publish_extra} --out {output.results} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py publish-{wildcards.run}"
