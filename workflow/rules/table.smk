# Table: the mean ± std of one eval metric over each row's runs (seeds) beside its reference, for
# each table of config/config.yaml (results/tables/<table>.md and .json, by `toolbox table`).


rule table:
    input:
        lambda wildcards: stages.table_deps(TABLES[wildcards.table], RUNS),
    output:
        md=stages.TABLE_PATHS["md"],
        json=stages.TABLE_PATHS["json"],
    log:
        stages.TABLE_LOG,
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=lambda wildcards: stages.table_command(
            wildcards.table, TABLES[wildcards.table], RUNS
        ),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
