# Compare: every run's curves overlaid, one PNG per metric (`toolbox plot` of every run's train
# folder, workflow/runs.py: compare_command): the report's cross-run page (category "comparison").
# DVC runs the same command as its stage `compare`.


rule compare:
    input:
        [stages.PATHS["model"].format(run=r) for r in sorted(RUNS)],  # metrics.jsonl beside each
        # re-evaluated once every compose has run (common.smk: upstream_composes says why)
        composes=per_job(lambda wildcards: composes_pending(sorted(RUNS))),
    output:
        plots=report(
            directory(runs.COMPARE_PLOTS),
            caption="../report/comparison.rst",
            category="comparison",
            patterns=["{name}.png"],
            labels={"run": "all", "stage": "compare", "curve": "{name}"},
        ),
    log:
        runs.COMPARE_LOG,
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=runs.compare_command(RUNS),
    shell:
        "( {params.cmd} ) > {log} 2>&1 && python workflow/scripts/dvc_record.py compare"
