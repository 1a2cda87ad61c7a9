# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Compose: the toolbox defaults once, then per run the composed config and its per-stage slices.


rule defaults:
    input:
        tree=files_under("toolbox/configs"),
    output:
        config="work/_defaults/config.yaml",
    log:
        "work/_defaults/logs/defaults.log",
    benchmark:
        "work/_defaults/benchmarks/defaults.tsv"
    conda:
        "../envs/toolbox.yaml"
    shell:
        "( toolbox compose --out {output.config} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py defaults"


# compose is a checkpoint: after it reruns, Snakemake re-evaluates the stages that read a slice, and
# only those whose slice changed run (workflow/scripts/slice_config.py).


checkpoint compose:
    input:
        defaults="work/_defaults/config.yaml",
        slicer="workflow/scripts/slice_config.py",
    output:
        full="work/{run}/config/full.yaml",
        data="work/{run}/config/data.yaml",
        train="work/{run}/config/train.yaml",
        eval="work/{run}/config/eval.yaml",
    log:
        "work/{run}/logs/compose.log",
    benchmark:
        "work/{run}/benchmarks/compose.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        overrides=run_value("overrides"),
    shell:
        "( toolbox compose {params.overrides} --out {output.full} && python {input.slicer} {output.full} --defaults {input.defaults} --out-dir work/{wildcards.run}/config ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py compose-{wildcards.run}"
