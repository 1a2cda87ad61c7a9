# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Plot: PNG curves of the run's metrics.jsonl (reached through train's model/).


rule plot:
    input:
        metrics=after_compose("work/{run}/train/model"),  # metrics.jsonl is written beside it (not declared: see train)
        upstream=upstream_composes(),
    output:
        plots=report(
            directory("work/{run}/plots"),
            caption="../report/curves.rst",
            category="curves",
            subcategory="{run}",
            patterns=["{name}.png"],
            labels={"run": "{run}", "stage": "plot", "curve": "{name}"},
        ),
    log:
        "work/{run}/logs/plot.log",
    benchmark:
        "work/{run}/benchmarks/plot.tsv"
    conda:
        "../envs/toolbox.yaml"
    shell:
        "( toolbox plot work/{wildcards.run}/train --out {output.plots} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py plot-{wildcards.run}"
